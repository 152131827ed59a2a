//! The one place a model call meets HTTP: send, retry, time out, frame, decode, and report a
//! partial message when the stream breaks. Adapters supply only the wire format ([`Protocol`]
//! and its [`Decoder`]).

use std::collections::VecDeque;
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use agent_types::{
    BackendError, BackendErrorKind, BackendStream, Capabilities, MessageAssembler, ModelRequest,
    StopReason, StreamEvent,
};
use bytes::Bytes;
use futures_util::StreamExt;
use reqwest::header::{CONTENT_TYPE, HeaderMap};
use tokio::time::Instant;

use super::options::HttpOptions;
use super::status::{clip, looks_like_html, retry_after};
use crate::framing::{EventStreamParser, JsonArrayParser, NdjsonParser, SseParser};

#[cfg(all(test, feature = "replay"))]
mod tests;

/// The most of a non-streaming body (or an error body) read into memory.
const MAX_BODY: usize = 64 * 1024 * 1024;
/// The most of an error body kept for the message.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// An HTTP request, ready to send.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    pub(crate) url: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// One provider's wire format.
pub(crate) trait Protocol: Send + Sync {
    /// The decoder for one response.
    type Decoder: Decoder;

    /// What the backend supports (checked before anything is sent).
    fn capabilities(&self) -> Capabilities;

    /// The HTTP settings.
    fn http(&self) -> &HttpOptions;

    /// Builds the HTTP request.
    fn prepare(&self, request: &ModelRequest) -> Result<Prepared, BackendError>;

    /// A fresh decoder for one response to `request`.
    fn decoder(&self, request: &ModelRequest) -> Self::Decoder;

    /// The error for a non-success response (status set by the caller).
    fn error(&self, status: u16, body: &[u8]) -> BackendError;
}

/// One frame of a streamed body: an SSE event (`event` may be empty), an NDJSON line or a
/// JSON-array element (`event` empty).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame<'a> {
    pub(crate) event: &'a str,
    pub(crate) data: &'a str,
}

/// Turns one response into normalized events.
///
/// The contract the driver relies on: `message_start` first; `tool_call_end` for every started
/// call before `finish`; exactly one `finish`, as the last event; an in-band provider error is
/// returned as `Err` (events pushed to `out` before it still count). After `finish` nothing
/// more is pushed.
pub(crate) trait Decoder: Send {
    /// One frame of a streamed body.
    fn frame(&mut self, frame: Frame<'_>, out: &mut Vec<StreamEvent>) -> Result<(), BackendError>;

    /// The whole body of a non-streaming response.
    fn body(&mut self, body: &str, out: &mut Vec<StreamEvent>) -> Result<(), BackendError>;

    /// The body ended; push whatever the provider's last frame implied (e.g. a finish held
    /// back until the usage report that follows it).
    fn end(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), BackendError>;
}

/// Runs one model call against `protocol`.
pub(crate) fn stream<'a, P: Protocol>(
    protocol: &'a P,
    request: &'a ModelRequest,
) -> BackendStream<'a> {
    Box::pin(Driver::new(protocol, request, true))
}

/// As [`stream`], for a caller that assembles the message itself
/// ([`Backend::stream_unassembled`](agent_types::Backend::stream_unassembled)): no
/// assembler runs here, and an error after output carries no partial message.
pub(crate) fn stream_unassembled<'a, P: Protocol>(
    protocol: &'a P,
    request: &'a ModelRequest,
) -> BackendStream<'a> {
    Box::pin(Driver::new(protocol, request, false))
}

/// One model call as a hand-written stream: the events decoded from a chunk wait in `ready`
/// and each `poll_next` hands out the next one, so no generator or future is resumed per
/// event; the body is polled again only when `ready` is empty.
struct Driver<'a, P: Protocol> {
    protocol: &'a P,
    request: &'a ModelRequest,
    /// Whether to assemble the message here, for the partial message of a failure.
    assemble: bool,
    /// Events decoded and not yet handed out, oldest first.
    ready: VecDeque<StreamEvent>,
    /// The error that ends the stream once `ready` is handed out.
    failed: Option<BackendError>,
    phase: Phase<'a, P::Decoder>,
}

/// Where a call stands.
enum Phase<'a, D> {
    /// Not polled yet.
    Start,
    /// Sending the request (and retrying failures before a response; a retry after a failed
    /// response waits here first).
    Opening(Pin<Box<dyn Future<Output = Opened> + Send + 'a>>),
    /// Reading the response's body.
    Body(Box<Body<D>>),
    /// Ended: `ready`, then `failed`, then the end.
    Done,
}

/// What an attempt to open the response came to; the prepared request comes back for a
/// later retry.
struct Opened {
    response: Result<reqwest::Response, BackendError>,
    prepared: Prepared,
    limits: Limits,
    retries: u32,
}

/// The reading of one response body.
struct Body<D> {
    body: Pin<Box<dyn futures_core::Stream<Item = reqwest::Result<Bytes>> + Send>>,
    framer: Framer,
    decoder: D,
    out: Vec<StreamEvent>,
    assembler: MessageAssembler,
    /// Events that carry no output (message_start, usage) wait here until the first one
    /// that does: until then a failure can still be retried without the caller having seen
    /// anything.
    held: Vec<StreamEvent>,
    shown: bool,
    finished: bool,
    timer: BodyTimer,
    prepared: Prepared,
    limits: Limits,
    retries: u32,
}

impl<'a, P: Protocol> Driver<'a, P> {
    fn new(protocol: &'a P, request: &'a ModelRequest, assemble: bool) -> Self {
        Self {
            protocol,
            request,
            assemble,
            ready: VecDeque::new(),
            failed: None,
            phase: Phase::Start,
        }
    }

    /// The checks and the request, at the first poll.
    fn start(&mut self) -> Result<(), BackendError> {
        if !self.request.tools.is_empty() && !self.protocol.capabilities().tools {
            return Err(BackendError::new(
                BackendErrorKind::Unsupported,
                "this backend does not support tools; remove them or pick a model that has tool calling",
            ));
        }
        let prepared = self.protocol.prepare(self.request)?;
        let limits = Limits::start(self.protocol.http());
        self.phase = Phase::Opening(Box::pin(attempt(self.protocol, prepared, limits, 0, None)));
        Ok(())
    }

    /// One chunk of the body read (or the body's end, or a failure) and its events moved to
    /// `ready`; `Pending` while no chunk is there.
    fn read(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Phase::Body(body) = &mut self.phase else {
            return Poll::Ready(());
        };
        let step = match body.timer.poll(cx, &body.limits, body.body.as_mut()) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(timeout)) => Err(timeout),
            Poll::Ready(Ok(None)) => body
                .framer
                .finish(&mut body.decoder, &mut body.out)
                .and_then(|()| body.decoder.end(&mut body.out))
                .map(|()| true),
            Poll::Ready(Ok(Some(Err(error)))) => Err(broken(error)),
            Poll::Ready(Ok(Some(Ok(chunk)))) => body
                .framer
                .feed(&chunk, &mut body.decoder, &mut body.out)
                .map(|()| false),
        };
        let mut step = step;
        for event in body.out.drain(..) {
            if body.finished {
                tracing::debug!(?event, "ignoring an event after the finish");
                continue;
            }
            if self.assemble
                && let Err(error) = body.assembler.observe(&event)
            {
                step = Err(error);
                break;
            }
            if !body.shown
                && matches!(
                    event,
                    StreamEvent::MessageStart { .. } | StreamEvent::Usage(_)
                )
            {
                body.held.push(event);
                continue;
            }
            if !body.shown {
                // Only ever filled before the first event shown: no drain per event after.
                self.ready.extend(body.held.drain(..));
                body.shown = true;
            }
            body.finished = matches!(event, StreamEvent::Finish { .. });
            self.ready.push_back(event);
        }
        let error = match step {
            Ok(false) => return Poll::Ready(()),
            Ok(true) if body.finished => {
                self.phase = Phase::Done;
                return Poll::Ready(());
            }
            Ok(true) => BackendError::new(
                BackendErrorKind::Connection,
                "the response ended before the provider said it was complete (connection closed early?)",
            ),
            Err(error) => error,
        };
        if body.finished {
            // Everything was delivered; a hiccup after the finish changes nothing.
            tracing::debug!(%error, "ignoring an error after the finish");
            self.phase = Phase::Done;
            return Poll::Ready(());
        }
        let http = self.protocol.http();
        if !body.shown
            && let Some(wait) = retry_wait(http, &error, body.retries, &body.limits)
        {
            retry_log(&error, body.retries, wait);
            let Phase::Body(body) = std::mem::replace(&mut self.phase, Phase::Done) else {
                return Poll::Ready(());
            };
            let body = *body;
            self.phase = Phase::Opening(Box::pin(attempt(
                self.protocol,
                body.prepared,
                body.limits,
                body.retries + 1,
                Some(wait),
            )));
            return Poll::Ready(());
        }
        let error = if self.assemble {
            with_partial(error, &mut body.assembler)
        } else if !body.shown {
            // Nothing went out, so the caller's assembler has nothing: the held events
            // (a usage report, say) make the partial message, as when assembling here.
            let mut assembler = MessageAssembler::new(false);
            for event in &body.held {
                let _ = assembler.observe(event);
            }
            with_partial(error, &mut assembler)
        } else {
            error
        };
        self.failed = Some(error);
        self.phase = Phase::Done;
        Poll::Ready(())
    }
}

impl<P: Protocol> futures_core::Stream for Driver<'_, P> {
    type Item = Result<StreamEvent, BackendError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // Every field is `Unpin` (the futures it polls are boxed).
        let this = &mut *self;
        loop {
            if let Some(event) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            match &mut this.phase {
                Phase::Start => {
                    if let Err(error) = this.start() {
                        this.phase = Phase::Done;
                        return Poll::Ready(Some(Err(error)));
                    }
                }
                Phase::Opening(opening) => {
                    let Poll::Ready(opened) = opening.as_mut().poll(cx) else {
                        return Poll::Pending;
                    };
                    let response = match opened.response {
                        Ok(response) => response,
                        Err(error) => {
                            this.phase = Phase::Done;
                            return Poll::Ready(Some(Err(error)));
                        }
                    };
                    let content_type = response
                        .headers()
                        .get(CONTENT_TYPE)
                        .and_then(|value| value.to_str().ok())
                        .map(str::to_ascii_lowercase);
                    this.phase = Phase::Body(Box::new(Body {
                        body: Box::pin(response.bytes_stream()),
                        framer: Framer::Undecided(content_type),
                        decoder: this.protocol.decoder(this.request),
                        out: Vec::new(),
                        assembler: MessageAssembler::new(false),
                        held: Vec::new(),
                        shown: false,
                        finished: false,
                        timer: BodyTimer::default(),
                        prepared: opened.prepared,
                        limits: opened.limits,
                        retries: opened.retries,
                    }));
                }
                Phase::Body(_) => {
                    if this.read(cx).is_pending() {
                        return Poll::Pending;
                    }
                }
                Phase::Done => return Poll::Ready(this.failed.take().map(Err)),
            }
        }
    }
}

/// Sends `prepared` (after `wait`, for a retry), retrying failures before a response.
async fn attempt<P: Protocol>(
    protocol: &P,
    prepared: Prepared,
    limits: Limits,
    mut retries: u32,
    wait: Option<std::time::Duration>,
) -> Opened {
    if let Some(wait) = wait {
        tokio::time::sleep(wait).await;
    }
    let http = protocol.http();
    loop {
        match open(protocol, http, &prepared, &limits).await {
            Ok(response) => {
                return Opened {
                    response: Ok(response),
                    prepared,
                    limits,
                    retries,
                };
            }
            Err(error) => {
                if let Some(wait) = retry_wait(http, &error, retries, &limits) {
                    retry_log(&error, retries, wait);
                    tokio::time::sleep(wait).await;
                    retries += 1;
                    continue;
                }
                return Opened {
                    response: Err(error),
                    prepared,
                    limits,
                    retries,
                };
            }
        }
    }
}

/// Sends the request and waits for a success status: a transport failure, a timeout or an
/// error status (its body read and mapped by the adapter) is an error, retryable or not.
async fn open<P: Protocol>(
    protocol: &P,
    http: &HttpOptions,
    prepared: &Prepared,
    limits: &Limits,
) -> Result<reqwest::Response, BackendError> {
    let client = http.client.reqwest();
    let mut request = client
        .post(&prepared.url)
        .body(prepared.body.clone())
        .build()
        .map_err(transport_error)?;
    // The prepared map is usually the backend's prebuilt one (configured headers already
    // merged, see `http::headers`): a clone of it, not two maps inserted header by header.
    *request.headers_mut() = prepared.headers.clone();
    if !http.headers.is_empty() {
        super::headers::merge(request.headers_mut(), &http.headers);
    }
    if let Some(auth) = &http.auth {
        // Inside the limits: fetching a token is part of the call's time.
        limits.within(auth.authorize(&mut request)).await??;
    }
    let response = limits
        .within(client.execute(request))
        .await?
        .map_err(transport_error)?;
    if response.status().is_success() {
        return Ok(response);
    }
    let status = response.status().as_u16();
    let asked = retry_after(response.headers());
    let body = read_capped(response, MAX_ERROR_BODY, limits).await;
    let mut error = protocol.error(status, &body);
    error.status = Some(status);
    if asked.is_some() {
        error.retry_after = asked;
    }
    Err(error)
}

/// The whole-call deadline and the idle limit.
#[derive(Debug, Clone, Copy)]
struct Limits {
    deadline: Option<Instant>,
    idle: Option<std::time::Duration>,
}

impl Limits {
    fn start(http: &HttpOptions) -> Self {
        Self {
            deadline: http.timeouts.total.map(|total| Instant::now() + total),
            idle: http.timeouts.idle,
        }
    }

    /// When a wait that began at `since` must end (with at least one limit set): the idle
    /// limit from then, or the deadline if sooner.
    fn end_from(&self, since: Instant) -> Instant {
        match (self.idle.map(|idle| since + idle), self.deadline) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(since),
        }
    }

    /// When the next wait must end: the idle limit from now, or the deadline if sooner.
    fn end(&self) -> Option<Instant> {
        let idle_end = self.idle.map(|idle| Instant::now() + idle);
        match (idle_end, self.deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The error for a wait that reached `end`.
    fn elapsed(&self, end: Instant) -> BackendError {
        let which = if Some(end) == self.deadline {
            "the call's total timeout"
        } else {
            "the idle timeout (no bytes from the provider)"
        };
        BackendError::new(BackendErrorKind::Timeout, format!("{which} elapsed"))
    }

    /// Runs `future` within the idle limit and the deadline.
    async fn within<F: Future>(&self, future: F) -> Result<F::Output, BackendError> {
        let Some(end) = self.end() else {
            return Ok(future.await);
        };
        tokio::time::timeout_at(end, future)
            .await
            .map_err(|_| self.elapsed(end))
    }

    fn remaining(&self) -> Option<std::time::Duration> {
        self.deadline
            .map(|deadline| deadline.saturating_duration_since(Instant::now()))
    }
}

/// The limits over one response body, with one timer for all of its chunks.
///
/// A fresh `timeout_at` per chunk (one per token) was a lock, a wheel insert and a wheel
/// removal each time; moving one `Sleep` forward at every chunk (`Sleep::reset`) still cost
/// a deadline computation and atomics per chunk. Here the one `Sleep` stays where it was set
/// while chunks arrive: a wait notes the time it began, and when the `Sleep` fires the real
/// end (that time plus the idle limit, or the deadline) is worked out: a timeout if it
/// passed, else the `Sleep` moves to it. The idle limit counts from when the driver finds
/// the body waiting for its next chunk, not while the caller reads events.
///
/// Nothing of the timer runs while the body has data: the clock is read when the body
/// first returns `Pending` after a chunk (once per batch of chunks, not per chunk), and the
/// `Sleep` is polled only when it may have fired or the task's waker changed: its
/// registration stands until it fires, so polling it at every wait only re-registered the
/// same waker.
#[derive(Default)]
struct BodyTimer {
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The waker the `Sleep` was last polled with (and will wake when it fires).
    armed: Option<Waker>,
    /// When the wait for the next chunk began; `None` from a chunk until the body is next
    /// found waiting.
    since: Option<Instant>,
}

impl BodyTimer {
    /// Polls `body` for its next chunk within the idle limit and the deadline.
    fn poll<S: futures_core::Stream + ?Sized>(
        &mut self,
        cx: &mut Context<'_>,
        limits: &Limits,
        body: Pin<&mut S>,
    ) -> Poll<Result<Option<S::Item>, BackendError>> {
        if let Poll::Ready(item) = body.poll_next(cx) {
            // The next wait starts when the body is next found waiting.
            self.since = None;
            return Poll::Ready(Ok(item));
        }
        if limits.idle.is_none() && limits.deadline.is_none() {
            return Poll::Pending;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        let armed_here = self
            .armed
            .as_ref()
            .is_some_and(|armed| agent_types::same_waker(armed, cx.waker()));
        if armed_here && self.sleep.as_ref().is_some_and(|sleep| !sleep.is_elapsed()) {
            // Set, not fired, and it wakes this task: nothing to do until it fires.
            return Poll::Pending;
        }
        let end = limits.end_from(since);
        let sleep = match &mut self.sleep {
            Some(sleep) => sleep,
            None => self.sleep.insert(Box::pin(tokio::time::sleep_until(end))),
        };
        loop {
            if sleep.as_mut().poll(cx).is_pending() {
                if !armed_here {
                    self.armed = Some(cx.waker().clone());
                }
                return Poll::Pending;
            }
            // The `Sleep` fired at the end it was set to, which chunks since have moved.
            if end <= sleep.deadline() {
                return Poll::Ready(Err(limits.elapsed(end)));
            }
            sleep.as_mut().reset(end);
        }
    }
}

/// How long to wait before retrying `error`, or `None` to give up.
fn retry_wait(
    http: &HttpOptions,
    error: &BackendError,
    retries: u32,
    limits: &Limits,
) -> Option<std::time::Duration> {
    let policy = &http.retry;
    if !error.is_retryable() || retries >= policy.max_retries {
        return None;
    }
    let wait = match error.retry_after {
        Some(asked) if asked > policy.max_retry_after => return None,
        Some(asked) => asked,
        None => policy.backoff(retries, jitter()),
    };
    // Waiting past the deadline only to time out is worse than failing now.
    match limits.remaining() {
        Some(left) if left <= wait => None,
        _ => Some(wait),
    }
}

fn retry_log(error: &BackendError, retries: u32, wait: std::time::Duration) {
    tracing::warn!(
        %error,
        attempt = retries + 1,
        wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        "model call failed before any output; retrying"
    );
}

/// A number in `[0, 1)`, different on every call: enough randomness for jitter without a
/// random-number crate.
fn jitter() -> f64 {
    let hash = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    // The top 53 bits as a fraction: exact in an f64.
    #[allow(clippy::cast_precision_loss)]
    let fraction = (hash >> 11) as f64 / (1u64 << 53) as f64;
    fraction
}

// The URL is left out of both messages (`without_url`): its path or query can hold a
// secret, and these messages travel to whoever called the loop (a server's tenants).
fn transport_error(error: reqwest::Error) -> BackendError {
    let error = error.without_url();
    let kind = if error.is_timeout() {
        BackendErrorKind::Timeout
    } else {
        BackendErrorKind::Connection
    };
    BackendError::new(
        kind,
        format!("the request could not be completed: {}", chain(&error)),
    )
}

fn broken(error: reqwest::Error) -> BackendError {
    let error = error.without_url();
    BackendError::new(
        BackendErrorKind::Connection,
        format!("the connection broke mid-response: {}", chain(&error)),
    )
}

/// The error and its sources, so "error sending request" says why.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Attaches the message assembled so far. The status is left as the adapter set it: an error
/// inside a 200 stream has no HTTP status of its own, and pretending it had 200 would hide the
/// status the provider's error body may carry.
fn with_partial(mut error: BackendError, assembler: &mut MessageAssembler) -> BackendError {
    let partial = assembler.finish_partial(StopReason::Error);
    if !partial.content.is_empty() || partial.usage.is_some() {
        error.partial = Some(Box::new(partial));
    }
    error
}

async fn read_capped(response: reqwest::Response, cap: usize, limits: &Limits) -> Vec<u8> {
    let mut body = response.bytes_stream();
    let mut bytes = Vec::new();
    while let Ok(Some(Ok(chunk))) = limits.within(body.next()).await {
        let room = cap.saturating_sub(bytes.len());
        bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if bytes.len() >= cap {
            break;
        }
    }
    bytes
}

/// The framing of a response body, decided from its content type or, failing that, its first
/// bytes.
enum Framer {
    Undecided(Option<String>),
    Sse(SseParser),
    Ndjson(NdjsonParser),
    JsonArray(JsonArrayParser),
    /// AWS's binary event stream: each message is a frame named by its event (or exception) type.
    EventStream(EventStreamParser),
    Whole(Vec<u8>),
}

/// AWS's event-stream media type (Bedrock's ConverseStream).
const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

/// Whether the content type alone picks the framing (SSE or NDJSON), whatever the body starts with.
fn media_decides(content_type: Option<&str>) -> bool {
    let media = content_type
        .map(|value| value.split(';').next().unwrap_or("").trim())
        .unwrap_or("");
    matches!(
        media,
        "text/event-stream"
            | "application/x-ndjson"
            | "application/jsonl"
            | "application/ndjson"
            | EVENT_STREAM
    )
}

impl Framer {
    fn decide(content_type: Option<&str>, first: &[u8]) -> Result<Self, BackendError> {
        let media = content_type
            .map(|value| value.split(';').next().unwrap_or("").trim())
            .unwrap_or("");
        let lead = first.iter().find(|b| !b.is_ascii_whitespace()).copied();
        Ok(match media {
            "text/event-stream" => Self::Sse(SseParser::new()),
            "application/x-ndjson" | "application/jsonl" | "application/ndjson" => {
                Self::Ndjson(NdjsonParser::new())
            }
            EVENT_STREAM => Self::EventStream(EventStreamParser::new()),
            _ if looks_like_html(first) => {
                return Err(BackendError::new(
                    BackendErrorKind::Protocol,
                    format!(
                        "the response is an HTML page, not the provider's JSON (a proxy or captive portal?): {}",
                        clip(&String::from_utf8_lossy(first), 200)
                    ),
                ));
            }
            _ => match lead {
                Some(b'[') => Self::JsonArray(JsonArrayParser::new()),
                Some(b'd' | b'e' | b':') => Self::Sse(SseParser::new()),
                _ => Self::Whole(Vec::new()),
            },
        })
    }

    fn feed<D: Decoder>(
        &mut self,
        chunk: &[u8],
        decoder: &mut D,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), BackendError> {
        if let Self::Undecided(content_type) = self {
            // The first bytes decide the framing unless the media type does, so leading
            // whitespace waits for the next chunk: the choice must not depend on where the
            // body was split (found by fuzzing: `\n` then `:` under `application/json`).
            if chunk.iter().all(u8::is_ascii_whitespace) && !media_decides(content_type.as_deref())
            {
                return Ok(());
            }
            *self = Self::decide(content_type.as_deref(), chunk)?;
        }
        match self {
            Self::Undecided(_) => Ok(()),
            Self::Sse(parser) => parser.feed(chunk, &mut |event| {
                decoder.frame(
                    Frame {
                        event: event.event,
                        data: event.data,
                    },
                    out,
                )
            }),
            Self::Ndjson(parser) => parser.feed(chunk, &mut |line| {
                decoder.frame(
                    Frame {
                        event: "",
                        data: line,
                    },
                    out,
                )
            }),
            Self::JsonArray(parser) => parser.feed(chunk, &mut |element| {
                decoder.frame(
                    Frame {
                        event: "",
                        data: element,
                    },
                    out,
                )
            }),
            Self::EventStream(parser) => parser.feed(chunk, &mut |message| {
                let (event, data) = message.text_frame()?;
                decoder.frame(Frame { event, data }, out)
            }),
            Self::Whole(buffer) => {
                if buffer.len() + chunk.len() > MAX_BODY {
                    return Err(BackendError::new(
                        BackendErrorKind::Protocol,
                        format!("the response body is larger than {MAX_BODY} bytes"),
                    ));
                }
                buffer.extend_from_slice(chunk);
                Ok(())
            }
        }
    }

    fn finish<D: Decoder>(
        &mut self,
        decoder: &mut D,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), BackendError> {
        match self {
            Self::Undecided(_) => Err(BackendError::new(
                BackendErrorKind::Protocol,
                "the response body is empty",
            )),
            Self::Sse(parser) => parser.finish(&mut |event| {
                decoder.frame(
                    Frame {
                        event: event.event,
                        data: event.data,
                    },
                    out,
                )
            }),
            Self::Ndjson(parser) => parser.finish(&mut |line| {
                decoder.frame(
                    Frame {
                        event: "",
                        data: line,
                    },
                    out,
                )
            }),
            Self::JsonArray(parser) => parser.finish(),
            Self::EventStream(parser) => parser.finish(),
            Self::Whole(buffer) => {
                let text = std::str::from_utf8(buffer).map_err(|_| {
                    BackendError::new(BackendErrorKind::Protocol, "the response body is not UTF-8")
                })?;
                decoder.body(text, out)
            }
        }
    }
}

/// Decodes a complete body without HTTP, in `chunk_size` pieces (0 = one piece): the framing,
/// decoding and completeness checks of [`stream`], for benchmarks, fuzzing and replay tools.
pub(crate) fn decode_all<P: Protocol>(
    protocol: &P,
    request: &ModelRequest,
    content_type: Option<&str>,
    body: &[u8],
    chunk_size: usize,
) -> Result<Vec<StreamEvent>, BackendError> {
    let mut framer = Framer::Undecided(content_type.map(str::to_ascii_lowercase));
    let mut decoder = protocol.decoder(request);
    let mut events = Vec::new();
    let size = if chunk_size == 0 {
        body.len().max(1)
    } else {
        chunk_size
    };
    let mut result = Ok(());
    for chunk in body.chunks(size) {
        result = framer.feed(chunk, &mut decoder, &mut events);
        if result.is_err() {
            break;
        }
    }
    if result.is_ok() {
        result = framer
            .finish(&mut decoder, &mut events)
            .and_then(|()| decoder.end(&mut events));
    }
    let mut assembler = MessageAssembler::new(false);
    let mut finished = false;
    let mut kept = 0;
    for event in &events {
        if finished {
            break;
        }
        if let Err(error) = assembler.observe(event) {
            result = Err(error);
            break;
        }
        finished = matches!(event, StreamEvent::Finish { .. });
        kept += 1;
    }
    events.truncate(kept);
    match result {
        Ok(()) if finished => Ok(events),
        Ok(()) => Err(with_partial(
            BackendError::new(
                BackendErrorKind::Connection,
                "the response ended before the provider said it was complete",
            ),
            &mut assembler,
        )),
        Err(error) => Err(with_partial(error, &mut assembler)),
    }
}
