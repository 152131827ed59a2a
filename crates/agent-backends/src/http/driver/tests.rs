//! The driver against a loopback server, with a toy wire format so these tests depend on no
//! provider adapter: each SSE `data` is text, `DONE` finishes, `fail:<kind>` is an in-band
//! provider error. Timed tests run on tokio's paused clock (no timeouts race real I/O: each
//! test enables only the timers it measures).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use agent_types::{
    Backend, BackendError, BackendErrorKind, BackendStream, Capabilities, Message, ModelRequest,
    StopReason, StreamEvent, ToolSpec,
};
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::json;

use super::{Decoder, Frame, Prepared, Protocol, stream, stream_unassembled};
use crate::http::status::{ProviderError, response_error};
use crate::http::{HttpOptions, RetryPolicy, Timeouts};
use crate::replay::{Cassette, Chunking, ReplayServer};

struct Toy {
    url: String,
    http: HttpOptions,
    tools: bool,
}

impl Protocol for Toy {
    type Decoder = ToyDecoder;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            tools: self.tools,
            streaming: true,
            ..Capabilities::default()
        }
    }

    fn http(&self) -> &HttpOptions {
        &self.http
    }

    fn prepare(&self, _request: &ModelRequest) -> Result<Prepared, BackendError> {
        Ok(Prepared {
            url: format!("{}/toy", self.url),
            headers: reqwest::header::HeaderMap::new(),
            body: Bytes::from_static(b"{}"),
        })
    }

    fn decoder(&self, _request: &ModelRequest) -> ToyDecoder {
        ToyDecoder { started: false }
    }

    fn error(&self, status: u16, body: &[u8]) -> BackendError {
        response_error(status, body, |json| {
            Some(ProviderError::new(json.get("error")?.as_str()?))
        })
    }
}

struct ToyDecoder {
    started: bool,
}

impl Decoder for ToyDecoder {
    fn frame(&mut self, frame: Frame<'_>, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        if !self.started {
            self.started = true;
            out.push(StreamEvent::MessageStart {
                id: None,
                model: None,
            });
        }
        match frame.data {
            "DONE" => out.push(StreamEvent::Finish {
                stop_reason: StopReason::Stop,
            }),
            usage if usage.starts_with("usage:") => {
                out.push(StreamEvent::Usage(agent_types::Usage {
                    output_tokens: usage["usage:".len()..].parse().ok(),
                    ..agent_types::Usage::default()
                }));
            }
            "fail:overloaded" => {
                return Err(BackendError::new(
                    BackendErrorKind::Overloaded,
                    "overloaded",
                ));
            }
            text => out.push(StreamEvent::TextDelta { delta: text.into() }),
        }
        Ok(())
    }

    fn body(&mut self, body: &str, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        self.frame(
            Frame {
                event: "",
                data: body,
            },
            out,
        )?;
        self.frame(
            Frame {
                event: "",
                data: "DONE",
            },
            out,
        )
    }

    fn end(&mut self, _out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        Ok(())
    }
}

impl Backend for Toy {
    fn capabilities(&self) -> Capabilities {
        Protocol::capabilities(self)
    }

    fn stream<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        stream(self, request)
    }

    fn stream_unassembled<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        stream_unassembled(self, request)
    }
}

fn sse(body: &str) -> Cassette {
    Cassette::new(200, "text/event-stream", body.to_owned())
}

fn status(code: u16) -> Cassette {
    Cassette::new(
        code,
        "application/json",
        json!({"error": format!("status {code}")}).to_string(),
    )
}

fn toy(server: &ReplayServer, retry: RetryPolicy, timeouts: Timeouts) -> Toy {
    Toy {
        url: server.url(),
        http: HttpOptions::default()
            .with_client(crate::http::HttpClient::new(None).unwrap())
            .with_retry(retry)
            .with_timeouts(timeouts),
        tools: true,
    }
}

fn request() -> ModelRequest {
    ModelRequest::new("toy", vec![Message::user("hi")])
}

async fn run(backend: &Toy) -> (Vec<StreamEvent>, Option<BackendError>) {
    run_with(backend, false).await
}

async fn run_with(backend: &Toy, unassembled: bool) -> (Vec<StreamEvent>, Option<BackendError>) {
    let request = request();
    let mut stream = if unassembled {
        backend.stream_unassembled(&request)
    } else {
        backend.stream(&request)
    };
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(error) => return (events, Some(error)),
        }
    }
    (events, None)
}

fn text(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::TextDelta { delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

const OK: &str = "data: Hello\n\ndata:  world\n\ndata: DONE\n\n";

fn retries(n: u32) -> RetryPolicy {
    RetryPolicy::default()
        .with_max_retries(n)
        .with_backoff(Duration::from_secs(1), Duration::from_secs(8))
}

#[tokio::test(start_paused = true)]
async fn failures_before_output_are_retried_with_backoff_and_output_is_not_duplicated() {
    let server = ReplayServer::start([status(503), status(500), sse(OK)])
        .await
        .unwrap();
    let backend = toy(&server, retries(3), Timeouts::none());
    let started = tokio::time::Instant::now();
    let (events, error) = run(&backend).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text(&events), "Hello world");
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, StreamEvent::MessageStart { .. }))
            .count(),
        1
    );
    assert_eq!(server.requests().len(), 3);
    // Two backoffs: 0.5–1 s, then 1–2 s (jittered between half and all of 1 s and 2 s).
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1500) && waited <= Duration::from_secs(3),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_exactly() {
    let server = ReplayServer::start([
        status(429).with_header("retry-after", "7"),
        status(529).with_header("retry-after-ms", "250"),
        sse(OK),
    ])
    .await
    .unwrap();
    let backend = toy(&server, retries(2), Timeouts::none());
    let started = tokio::time::Instant::now();
    let (events, error) = run(&backend).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text(&events), "Hello world");
    assert_eq!(started.elapsed(), Duration::from_millis(7250));
}

#[tokio::test(start_paused = true)]
async fn giving_up_returns_the_last_error_and_non_retryable_errors_are_not_retried() {
    let server = ReplayServer::start([status(503), status(503), status(503)])
        .await
        .unwrap();
    let backend = toy(&server, retries(2), Timeouts::none());
    let (_, error) = run(&backend).await;
    let error = error.unwrap();
    assert_eq!(error.kind, BackendErrorKind::Server);
    assert_eq!(error.status, Some(503));
    assert_eq!(error.message, "status 503");
    assert_eq!(server.requests().len(), 3);

    let server = ReplayServer::start([status(400), sse(OK)]).await.unwrap();
    let backend = toy(&server, retries(2), Timeouts::none());
    let (_, error) = run(&backend).await;
    assert_eq!(error.unwrap().kind, BackendErrorKind::InvalidRequest);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_longer_than_allowed_is_handed_back_not_waited_out() {
    let server = ReplayServer::start([status(429).with_header("retry-after", "3600"), sse(OK)])
        .await
        .unwrap();
    let backend = toy(&server, retries(2), Timeouts::none());
    let started = tokio::time::Instant::now();
    let (_, error) = run(&backend).await;
    let error = error.unwrap();
    assert_eq!(error.kind, BackendErrorKind::RateLimited);
    assert_eq!(error.retry_after, Some(Duration::from_secs(3600)));
    assert_eq!(server.requests().len(), 1);
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn an_in_band_error_before_any_output_is_retried_but_after_output_it_carries_the_partial() {
    let server = ReplayServer::start([sse("data: fail:overloaded\n\n"), sse(OK)])
        .await
        .unwrap();
    let backend = toy(&server, retries(1), Timeouts::none());
    let (events, error) = run(&backend).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text(&events), "Hello world");
    assert_eq!(server.requests().len(), 2);

    let server = ReplayServer::start([sse("data: Hel\n\ndata: fail:overloaded\n\n"), sse(OK)])
        .await
        .unwrap();
    let backend = toy(&server, retries(3), Timeouts::none());
    let (events, error) = run(&backend).await;
    let error = error.unwrap();
    assert_eq!(text(&events), "Hel");
    assert_eq!(error.kind, BackendErrorKind::Overloaded);
    assert_eq!(server.requests().len(), 1, "output was shown: no retry");
    let partial = error.partial.unwrap();
    assert_eq!(partial.text_content(), "Hel");
    assert_eq!(partial.stop_reason, Some(StopReason::Error));
}

#[tokio::test]
async fn a_connection_dropped_mid_stream_is_an_error_with_the_partial_message() {
    let server = ReplayServer::start([sse(OK).with_chunking(Chunking::Every(7)).cut_after(20)])
        .await
        .unwrap();
    let backend = toy(&server, RetryPolicy::none(), Timeouts::none());
    let (events, error) = run(&backend).await;
    let error = error.unwrap();
    assert_eq!(error.kind, BackendErrorKind::Connection, "{error}");
    assert_eq!(text(&events), "Hello");
    assert_eq!(error.partial.unwrap().text_content(), "Hello");
}

#[tokio::test]
async fn a_clean_end_without_the_finish_is_not_a_silent_success() {
    let server = ReplayServer::start([sse("data: Hello\n\n")]).await.unwrap();
    let backend = toy(&server, RetryPolicy::none(), Timeouts::none());
    let (events, error) = run(&backend).await;
    let error = error.unwrap();
    assert_eq!(error.kind, BackendErrorKind::Connection);
    assert!(error.message.contains("ended before"), "{error}");
    assert_eq!(text(&events), "Hello");
}

#[tokio::test(start_paused = true)]
async fn idle_and_total_timeouts_end_the_call_with_the_partial_message() {
    let slow = || {
        sse(OK)
            .with_chunking(Chunking::At(vec![13]))
            .with_chunk_delay(Duration::from_secs(30))
    };
    let server = ReplayServer::start([slow()]).await.unwrap();
    let idle = Timeouts::none().with_idle(Some(Duration::from_secs(5)));
    let backend = toy(&server, RetryPolicy::none(), idle);
    let started = tokio::time::Instant::now();
    let (_, error) = run(&backend).await;
    let error = error.unwrap();
    assert_eq!(error.kind, BackendErrorKind::Timeout);
    assert!(error.message.contains("idle"), "{error}");
    assert_eq!(error.partial.unwrap().text_content(), "Hello");
    assert_eq!(started.elapsed(), Duration::from_secs(5));

    let server = ReplayServer::start([slow()]).await.unwrap();
    let total = Timeouts::none().with_total(Some(Duration::from_secs(12)));
    let backend = toy(&server, RetryPolicy::none(), total);
    let started = tokio::time::Instant::now();
    let (_, error) = run(&backend).await;
    let error = error.unwrap();
    assert!(error.message.contains("total"), "{error}");
    assert_eq!(started.elapsed(), Duration::from_secs(12));
}

// The body's one idle timer is pushed forward at every chunk (issue 16): a stream whose
// chunks each come within the idle limit finishes, however long it lasts in total (a silence
// still ends it: idle_and_total_timeouts_end_the_call_with_the_partial_message).
#[tokio::test(start_paused = true)]
async fn the_idle_timer_restarts_at_every_chunk_of_a_long_stream() {
    let steady = sse(OK)
        .with_chunking(Chunking::At(vec![4, 13, 20, 26]))
        .with_chunk_delay(Duration::from_secs(3));
    let server = ReplayServer::start([steady]).await.unwrap();
    let idle = Timeouts::none().with_idle(Some(Duration::from_secs(5)));
    let backend = toy(&server, RetryPolicy::none(), idle);
    let started = tokio::time::Instant::now();
    let (events, error) = run(&backend).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text(&events), "Hello world");
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(12),
        "four 3 s gaps, none idle"
    );
}

#[tokio::test]
async fn tools_on_a_backend_without_tool_support_fail_before_any_request() {
    let server = ReplayServer::start([sse(OK)]).await.unwrap();
    let mut backend = toy(&server, RetryPolicy::none(), Timeouts::none());
    backend.tools = false;
    let mut request = request();
    request.tools = vec![ToolSpec::new("t", "a tool", json!({"type": "object"}))];
    let items: Vec<_> = backend.stream(&request).collect().await;
    assert_eq!(items.len(), 1);
    let error = items.into_iter().next().unwrap().unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::Unsupported);
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn html_from_a_proxy_and_empty_bodies_are_typed_errors() {
    let server = ReplayServer::start([
        Cassette::new(200, "text/html", "<html><title>Login</title></html>"),
        Cassette::new(200, "application/json", ""),
        Cassette::new(
            502,
            "text/html",
            "<html><title>502 Bad Gateway</title></html>",
        ),
    ])
    .await
    .unwrap();
    let backend = toy(&server, RetryPolicy::none(), Timeouts::none());
    let (_, error) = run(&backend).await;
    let error = error.unwrap();
    assert_eq!(error.kind, BackendErrorKind::Protocol);
    assert!(error.message.contains("HTML"), "{error}");
    let (_, error) = run(&backend).await;
    assert!(error.unwrap().message.contains("empty"));
    let (_, error) = run(&backend).await;
    let error = error.unwrap();
    assert_eq!(error.kind, BackendErrorKind::Server);
    assert!(error.message.contains("502 Bad Gateway"), "{error}");
}

#[tokio::test]
async fn a_non_streaming_body_and_every_wire_split_decode_alike() {
    let server = ReplayServer::start([
        Cassette::new(200, "application/json", "whole"),
        sse(OK).with_chunking(Chunking::Every(1)),
    ])
    .await
    .unwrap();
    let backend = toy(&server, RetryPolicy::none(), Timeouts::none());
    let (events, error) = run(&backend).await;
    assert!(error.is_none());
    assert_eq!(text(&events), "whole");
    let (events, error) = run(&backend).await;
    assert!(error.is_none());
    assert_eq!(text(&events), "Hello world");
}

#[tokio::test]
async fn a_transport_error_never_names_the_url_whose_path_or_query_may_hold_a_secret() {
    // A port nothing listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let backend = Toy {
        url: format!("http://127.0.0.1:{port}/secret-path-s3cr3t?api_key=SECRET"),
        http: HttpOptions::default()
            .with_client(crate::http::HttpClient::new(None).unwrap())
            .with_retry(RetryPolicy::none())
            .with_timeouts(Timeouts::none()),
        tools: true,
    };
    let (_, error) = run(&backend).await;
    let error = error.unwrap();
    assert_eq!(error.kind, BackendErrorKind::Connection, "{error}");
    let text = format!("{error} {error:?}");
    assert!(!text.contains("s3cr3t"), "{text}");
    assert!(!text.contains("SECRET"), "{text}");
    assert!(!text.contains("127.0.0.1"), "{text}");
}

/// Counts its calls and stamps each attempt, like a signer whose signature carries the time.
#[derive(Debug, Default)]
struct Stamp {
    calls: std::sync::atomic::AtomicU32,
    fail: bool,
}

impl crate::http::RequestAuth for Stamp {
    fn authorize<'a>(&'a self, request: &'a mut reqwest::Request) -> crate::http::AuthFuture<'a> {
        Box::pin(async move {
            let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            if self.fail {
                return Err(BackendError::new(
                    BackendErrorKind::Authentication,
                    "no credentials: set AWS_ACCESS_KEY_ID",
                ));
            }
            assert_eq!(request.body().and_then(|b| b.as_bytes()), Some(&b"{}"[..]));
            request
                .headers_mut()
                .insert("x-attempt", n.to_string().parse().unwrap());
            Ok(())
        })
    }
}

#[tokio::test(start_paused = true)]
async fn the_auth_step_runs_for_every_attempt_so_retries_are_signed_again() {
    let server = ReplayServer::start([status(503), sse(OK)]).await.unwrap();
    let stamp = std::sync::Arc::new(Stamp::default());
    let mut backend = toy(&server, retries(2), Timeouts::none());
    backend.http = backend.http.with_auth(stamp.clone());
    let (events, error) = run(&backend).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text(&events), "Hello world");
    let attempts: Vec<_> = server
        .requests()
        .iter()
        .map(|r| r.header("x-attempt").unwrap().to_owned())
        .collect();
    assert_eq!(attempts, ["1", "2"]);

    let server = ReplayServer::start([sse(OK)]).await.unwrap();
    let mut backend = toy(&server, retries(2), Timeouts::none());
    backend.http = backend.http.with_auth(std::sync::Arc::new(Stamp {
        fail: true,
        ..Stamp::default()
    }));
    let (_, error) = run(&backend).await;
    assert_eq!(error.unwrap().kind, BackendErrorKind::Authentication);
    assert!(server.requests().is_empty(), "nothing unsigned is sent");
}

// The loop folds the events into a message itself and asks for the stream unassembled, so
// a message is assembled once per call, not twice (issue 16). The events are the same; an
// error after output leaves the partial message to the caller, and one before any output
// still carries what was held back (here the usage report), as the assembled stream does.
#[tokio::test]
async fn an_unassembled_stream_has_the_same_events_and_leaves_the_partial_to_its_caller() {
    let server = ReplayServer::start([sse(OK), sse(OK)]).await.unwrap();
    let backend = toy(&server, RetryPolicy::none(), Timeouts::none());
    let (assembled, error) = run_with(&backend, false).await;
    assert!(error.is_none(), "{error:?}");
    let (unassembled, error) = run_with(&backend, true).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(assembled, unassembled);

    let cut = || sse(OK).with_chunking(Chunking::Every(7)).cut_after(20);
    let server = ReplayServer::start([cut(), cut()]).await.unwrap();
    let backend = toy(&server, RetryPolicy::none(), Timeouts::none());
    let (events, error) = run_with(&backend, true).await;
    let error = error.unwrap();
    assert_eq!(error.kind, BackendErrorKind::Connection, "{error}");
    assert_eq!(text(&events), "Hello");
    assert!(
        error.partial.is_none(),
        "the caller has the partial message"
    );
    let (_, error) = run_with(&backend, false).await;
    assert_eq!(error.unwrap().partial.unwrap().text_content(), "Hello");

    let early = || sse("data: usage:7\n\ndata: fail:overloaded\n\n");
    let server = ReplayServer::start([early(), early()]).await.unwrap();
    let backend = toy(&server, RetryPolicy::none(), Timeouts::none());
    for unassembled in [false, true] {
        let (events, error) = run_with(&backend, unassembled).await;
        assert!(events.is_empty(), "{events:?}");
        let partial = error.unwrap().partial.unwrap();
        assert_eq!(partial.usage.unwrap().output_tokens, Some(7));
    }
}

// The idle timer is moved only when it fires (issue 16), to the end the last chunk set, or
// to the deadline when that comes first: a steady stream whose chunks each come within the
// idle limit still ends at its total timeout, to the second.
#[tokio::test(start_paused = true)]
async fn a_steady_stream_past_its_total_timeout_ends_at_the_deadline_exactly() {
    let body = "data: a\n\ndata: b\n\ndata: c\n\ndata: d\n\ndata: DONE\n\n";
    let steady = sse(body)
        .with_chunking(Chunking::At(vec![9, 18, 27, 36]))
        .with_chunk_delay(Duration::from_secs(4));
    let server = ReplayServer::start([steady]).await.unwrap();
    let limits = Timeouts::none()
        .with_idle(Some(Duration::from_secs(5)))
        .with_total(Some(Duration::from_secs(14)));
    let backend = toy(&server, RetryPolicy::none(), limits);
    let started = tokio::time::Instant::now();
    let (events, error) = run(&backend).await;
    let error = error.unwrap();
    assert_eq!(text(&events), "abcd");
    assert!(error.message.contains("total"), "{error}");
    assert_eq!(started.elapsed(), Duration::from_secs(14));
}

// The idle limit counts the provider's silence, not the caller's: the wait for the next
// chunk starts when the driver is polled for it, so a caller that takes longer than the idle
// limit over each event does not time the call out.
#[tokio::test(start_paused = true)]
async fn a_caller_slow_to_read_is_not_a_silent_provider() {
    let quick = sse(OK).with_chunking(Chunking::At(vec![13, 27]));
    let server = ReplayServer::start([quick]).await.unwrap();
    let idle = Timeouts::none().with_idle(Some(Duration::from_secs(5)));
    let backend = toy(&server, RetryPolicy::none(), idle);
    let request = request();
    let mut stream = backend.stream(&request);
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        events.push(item.unwrap());
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    assert_eq!(text(&events), "Hello world");
}

// The idle `Sleep` is polled only when it may have fired or the task's waker changed (issue
// 16): a body polled by a new waker (the call moved to another task, say) still has its idle
// timeout wake that waker, not only the one it first registered.
#[tokio::test(start_paused = true)]
async fn the_idle_timer_wakes_the_waker_the_body_was_last_polled_with() {
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{Context, Poll, Wake, Waker};

    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let limits = super::Limits {
        deadline: None,
        idle: Some(Duration::from_secs(5)),
    };
    let mut timer = super::BodyTimer::default();
    let mut body = futures_util::stream::pending::<()>();
    let first = Arc::new(Flag(AtomicBool::new(false)));
    let second = Arc::new(Flag(AtomicBool::new(false)));
    let first_waker = Waker::from(Arc::clone(&first));
    let second_waker = Waker::from(Arc::clone(&second));
    for _ in 0..3 {
        let mut cx = Context::from_waker(&first_waker);
        assert!(
            timer
                .poll(&mut cx, &limits, Pin::new(&mut body))
                .is_pending()
        );
    }
    let mut cx = Context::from_waker(&second_waker);
    assert!(
        timer
            .poll(&mut cx, &limits, Pin::new(&mut body))
            .is_pending()
    );
    tokio::time::advance(Duration::from_secs(6)).await;
    assert!(second.0.load(Ordering::SeqCst));
    let Poll::Ready(Err(error)) = timer.poll(&mut cx, &limits, Pin::new(&mut body)) else {
        panic!("the idle limit passed");
    };
    assert!(error.message.contains("idle"), "{error}");
}
