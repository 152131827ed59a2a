//! rmcp's streamable HTTP transport over the workspace's reqwest 0.12 client.
//!
//! rmcp ships an HTTP client on reqwest 0.13; shipping it would put a second reqwest (and, by
//! its default rustls provider, aws-lc) in every build. This module implements rmcp's
//! [`StreamableHttpClient`] trait instead, over the one reqwest the workspace uses, and bounds
//! everything the server sends before it is parsed: a JSON response body, one SSE event, and
//! the diagnostic body of an HTTP error.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{BoxStream, Stream, StreamExt};
use http::{HeaderName, HeaderValue, StatusCode};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::client_side_sse::SseRetryPolicy;
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, InsufficientScopeError, SseError, StreamableHttpClient,
    StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::{Sse, SseStream};

const SESSION_ID: &str = "mcp-session-id";
const LAST_EVENT_ID: &str = "last-event-id";
const ACCEPT_BOTH: &str = "application/json, text/event-stream";
/// Headers the transport sets itself; a configured header may not replace them.
const RESERVED: &[&str] = &["accept", SESSION_ID, LAST_EVENT_ID, "content-type"];

/// The HTTP client rmcp's streamable HTTP transport drives: a shared reqwest 0.12 client.
///
/// Cheap to clone (reqwest's client is an `Arc` inside). Limits come from the transport's
/// config with every call, so one client serves servers with different limits.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReqwestClient {
    http: reqwest::Client,
}

impl ReqwestClient {
    pub(crate) fn new(http: reqwest::Client) -> Self {
        Self { http }
    }
}

type HttpResult<T> = Result<T, StreamableHttpError<reqwest::Error>>;

/// reqwest's error without its URL: errors reach logs and, through a failed call, the model,
/// and an MCP URL may carry a key in its query.
fn client_error(error: reqwest::Error) -> StreamableHttpError<reqwest::Error> {
    StreamableHttpError::Client(error.without_url())
}

/// Whether `content_type` names `wanted` (parameters such as `charset` ignored).
fn media_type_is(content_type: Option<&HeaderValue>, wanted: &str) -> bool {
    content_type
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case(wanted))
}

fn request(
    builder: reqwest::RequestBuilder,
    session_id: Option<&str>,
    bearer: Option<&str>,
    headers: HashMap<HeaderName, HeaderValue>,
) -> HttpResult<reqwest::RequestBuilder> {
    let mut builder = builder;
    for (name, value) in headers {
        // The protocol version header is set by rmcp's worker after initialization.
        if RESERVED
            .iter()
            .any(|r| name.as_str().eq_ignore_ascii_case(r))
        {
            return Err(StreamableHttpError::ReservedHeaderConflict(
                name.as_str().to_owned(),
            ));
        }
        builder = builder.header(name, value);
    }
    if let Some(token) = bearer {
        builder = builder.bearer_auth(token);
    }
    if let Some(session_id) = session_id {
        builder = builder.header(SESSION_ID, session_id);
    }
    Ok(builder)
}

/// 401 and 403 with a challenge become rmcp's typed auth errors; 429 and 5xx keep only the
/// status and a bounded `Retry-After`.
fn refused(response: &reqwest::Response) -> HttpResult<()> {
    let status = response.status();
    let challenge = response
        .headers()
        .get(http::header::WWW_AUTHENTICATE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    match (status, challenge) {
        (StatusCode::UNAUTHORIZED, Some(challenge)) => Err(StreamableHttpError::AuthRequired(
            AuthRequiredError::new(challenge),
        )),
        (StatusCode::FORBIDDEN, Some(challenge)) => Err(StreamableHttpError::InsufficientScope(
            InsufficientScopeError::new(challenge, None),
        )),
        _ => Ok(()),
    }
}

fn status_error(response: &reqwest::Response) -> Option<HttpStatusError> {
    let status = response.status();
    if status != StatusCode::TOO_MANY_REQUESTS && !status.is_server_error() {
        return None;
    }
    let retry_after = response
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    Some(HttpStatusError::new(status.as_u16(), retry_after))
}

/// Reads the whole body, refusing it (without reading on) once it passes `max` bytes.
async fn read_capped(response: reqwest::Response, max: usize) -> HttpResult<Vec<u8>> {
    if response
        .content_length()
        .is_some_and(|len| len > max as u64)
    {
        return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: max });
    }
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(client_error)?;
        if body.len() + chunk.len() > max {
            return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: max });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Reads at most `max` bytes of the body, for an error message; the rest is never read.
async fn read_prefix(response: reqwest::Response, max: usize) -> String {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while body.len() < max {
        match chunks.next().await {
            Some(Ok(chunk)) => {
                let room = max - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            _ => break,
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// An SSE event larger than the transport's limit.
#[derive(Debug, thiserror::Error)]
#[error("an SSE event from the MCP server passed the limit of {max} bytes")]
struct EventTooLarge {
    max: usize,
}

/// Counts the bytes of the SSE event being received (from the last blank line) and fails the
/// stream once one passes `max`, before the parser buffers it.
#[derive(Debug)]
struct EventBound {
    max: usize,
    in_event: usize,
    line_len: usize,
    after_cr: bool,
}

impl EventBound {
    fn new(max: usize) -> Self {
        Self {
            max,
            in_event: 0,
            line_len: 0,
            after_cr: false,
        }
    }

    /// `false` once the current event is past the bound.
    fn admit(&mut self, chunk: &[u8]) -> bool {
        for &byte in chunk {
            let after_cr = std::mem::take(&mut self.after_cr);
            match byte {
                b'\n' if after_cr => {}
                b'\r' | b'\n' => {
                    if self.line_len == 0 {
                        // A blank line ends the event.
                        self.in_event = 0;
                    }
                    self.line_len = 0;
                    self.after_cr = byte == b'\r';
                }
                _ => {
                    self.line_len += 1;
                    self.in_event += 1;
                    if self.in_event > self.max {
                        return false;
                    }
                }
            }
        }
        true
    }
}

fn bounded_events<S>(bytes: S, max: usize) -> BoxStream<'static, Result<Sse, SseError>>
where
    S: Stream<Item = Result<Bytes, reqwest::Error>> + Send + Unpin + 'static,
{
    let bounded = futures_util::stream::unfold(
        (bytes, EventBound::new(max), false),
        move |(mut bytes, mut bound, failed)| async move {
            if failed {
                return None;
            }
            match bytes.next().await? {
                Ok(chunk) if bound.admit(&chunk) => Some((Ok(chunk), (bytes, bound, false))),
                Ok(_) => Some((
                    Err(StreamError::TooLarge(EventTooLarge { max })),
                    (bytes, bound, true),
                )),
                Err(error) => Some((Err(StreamError::Http(error)), (bytes, bound, true))),
            }
        },
    );
    SseStream::from_bytes_stream(Box::pin(bounded)).boxed()
}

#[derive(Debug, thiserror::Error)]
enum StreamError {
    #[error(transparent)]
    TooLarge(EventTooLarge),
    #[error(transparent)]
    Http(reqwest::Error),
}

impl StreamableHttpClient for ReqwestClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let had_session = session_id.is_some();
        let builder = request(
            self.http
                .post(uri.as_ref())
                .header(http::header::ACCEPT, ACCEPT_BOTH),
            session_id.as_deref(),
            auth_header.as_deref(),
            custom_headers,
        )?;
        let body = serde_json::to_vec(&message)?;
        let response = builder
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(client_error)?;
        refused(&response)?;
        let status = response.status();
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && had_session {
            return Err(StreamableHttpError::SessionExpired);
        }
        let content_type = response.headers().get(http::header::CONTENT_TYPE).cloned();
        let is_json = media_type_is(content_type.as_ref(), "application/json");
        let new_session = response
            .headers()
            .get(SESSION_ID)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        // Notifications and replies wait for nothing: any success is as good as 202.
        let expects_reply = matches!(message, ClientJsonRpcMessage::Request(_));
        if !status.is_success() {
            // A JSON-RPC error in the body is the server's own answer: keep it (bounded).
            if is_json && !matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
                let status_error = status_error(&response);
                let body = read_capped(response, limits.max_json_response_size).await;
                if let Ok(body) = &body
                    && let Ok(error @ ServerJsonRpcMessage::Error(_)) =
                        serde_json::from_slice::<ServerJsonRpcMessage>(body)
                {
                    return Ok(StreamableHttpPostResponse::Json(error, new_session));
                }
                if let Some(error) = status_error {
                    return Err(error.into());
                }
                let text = body
                    .map(|body| {
                        let end = body.len().min(limits.max_error_response_size);
                        String::from_utf8_lossy(&body[..end]).into_owned()
                    })
                    .unwrap_or_default();
                return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                    format!("HTTP {status}: {text}"),
                )));
            }
            if let Some(error) = status_error(&response) {
                return Err(error.into());
            }
            let text = read_prefix(response, limits.max_error_response_size).await;
            return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                format!("HTTP {status}: {text}"),
            )));
        }
        if media_type_is(content_type.as_ref(), "text/event-stream") {
            let events = bounded_events(response.bytes_stream(), limits.max_sse_event_size);
            return Ok(StreamableHttpPostResponse::Sse(events, new_session));
        }
        if is_json {
            let body = read_capped(response, limits.max_json_response_size).await?;
            return match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
                Ok(reply) => Ok(StreamableHttpPostResponse::Json(reply, new_session)),
                Err(_) if !expects_reply => Ok(StreamableHttpPostResponse::Accepted),
                Err(error) => Err(StreamableHttpError::Deserialize(error)),
            };
        }
        if !expects_reply {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        Err(StreamableHttpError::UnexpectedContentType(
            content_type.map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned()),
        ))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<()> {
        let builder = request(
            self.http.delete(uri.as_ref()),
            Some(&session_id),
            auth_header.as_deref(),
            custom_headers,
        )?;
        let response = builder.send().await.map_err(client_error)?;
        // A server that keeps no sessions may refuse the DELETE; that is not a failure.
        if response.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Ok(());
        }
        response.error_for_status().map_err(client_error)?;
        Ok(())
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default().max_sse_event_size,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>> {
        let mut builder = request(
            self.http
                .get(uri.as_ref())
                .header(http::header::ACCEPT, ACCEPT_BOTH),
            session_id.as_deref(),
            auth_header.as_deref(),
            custom_headers,
        )?;
        if let Some(last_event_id) = last_event_id {
            builder = builder.header(LAST_EVENT_ID, last_event_id);
        }
        let response = builder.send().await.map_err(client_error)?;
        if response.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        refused(&response)?;
        if let Some(error) = status_error(&response) {
            return Err(error.into());
        }
        let response = response.error_for_status().map_err(client_error)?;
        let content_type = response.headers().get(http::header::CONTENT_TYPE);
        if !media_type_is(content_type, "text/event-stream")
            && !media_type_is(content_type, "application/json")
        {
            return Err(StreamableHttpError::UnexpectedContentType(
                content_type.map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned()),
            ));
        }
        Ok(bounded_events(response.bytes_stream(), max_sse_event_size))
    }
}

/// How often the transport re-opens a dropped SSE stream: doubling from 200 ms to 5 s, at most
/// `attempts` times, so a gone server ends the connection (and the next call reconnects)
/// instead of being retried forever.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BoundedRetry {
    pub(crate) attempts: usize,
}

impl SseRetryPolicy for BoundedRetry {
    fn retry(&self, current_times: usize) -> Option<Duration> {
        if current_times >= self.attempts {
            return None;
        }
        let shift = u32::try_from(current_times).unwrap_or(u32::MAX).min(5);
        Some(Duration::from_millis(200 << shift).min(Duration::from_secs(5)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_past_the_bound_is_refused_and_blank_lines_reset_it() {
        let mut bound = EventBound::new(10);
        assert!(bound.admit(b"data: 1234\n\n"));
        // Counted per event, not per stream: many small events pass.
        for _ in 0..100 {
            assert!(bound.admit(b"data: 12\r\n\r\n"));
        }
        // One event split over chunks is still one event.
        assert!(bound.admit(b"data: "));
        assert!(!bound.admit(b"12345"));
    }

    #[test]
    fn media_types_ignore_parameters_and_case() {
        let value = HeaderValue::from_static("Application/JSON; charset=utf-8");
        assert!(media_type_is(Some(&value), "application/json"));
        assert!(!media_type_is(Some(&value), "text/event-stream"));
        assert!(!media_type_is(None, "application/json"));
    }

    #[test]
    fn retries_are_bounded_and_back_off() {
        let retry = BoundedRetry { attempts: 3 };
        assert_eq!(retry.retry(0), Some(Duration::from_millis(200)));
        assert_eq!(retry.retry(2), Some(Duration::from_millis(800)));
        assert_eq!(retry.retry(3), None);
    }
}
