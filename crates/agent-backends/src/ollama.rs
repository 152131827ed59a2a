//! The adapter for Ollama's native chat API (`POST {base}/api/chat`).
//!
//! [`Ollama`] turns a [`ModelRequest`] into an `/api/chat` request and the response
//! (newline-delimited JSON chunks when streaming, one JSON object otherwise) into normalized
//! [`StreamEvent`](agent_types::StreamEvent)s. A local Ollama needs no key; one set with
//! `with_api_key` is sent as `Authorization: Bearer …` (Ollama's cloud and authenticating
//! proxies). [`Ollama::from_env`] reads `OLLAMA_HOST` the way the `ollama` CLI does.
//!
//! # Requests
//!
//! - **Messages**: [`ModelRequest::system`] is a leading `system` message and each
//!   [`Message::System`](agent_types::Message) a `system` message at its place in the history.
//!   A user turn's text blocks are joined with a blank line into `content`, its images go to
//!   `images` as base64 (a `data:` URL is unpacked; other URLs are an
//!   [`Unsupported`](agent_types::BackendErrorKind::Unsupported) error, since Ollama fetches
//!   nothing).
//! - **Assistant turns** send back `content` (the text blocks), `thinking` (the reasoning
//!   text; Ollama has no signatures) and `tool_calls` with object `arguments` (arguments that
//!   are not an object are wrapped as `{"arguments": …}`) and the call `id`.
//! - **Tool results** are `tool` messages with `tool_name` and `tool_call_id` (older servers
//!   ignore the id and pair results by name and order). Ollama has no error flag, so a failed
//!   result's content is prefixed with `Error: `.
//! - **Tools** go to `tools` as `{type: "function", function: {name, description,
//!   parameters}}`, the schema unchanged. **Tool choice**: `auto` is Ollama's only mode;
//!   `none` leaves the tools out of the request; `required` and a named tool are
//!   [`Unsupported`](agent_types::BackendErrorKind::Unsupported), as is
//!   `parallel_tool_calls: Some(false)`.
//! - **Settings** go to `options`: `num_predict`, `temperature`, `top_p`, `stop`.
//!   **Reasoning** sets `think`: an effort level is sent as `"low"`/`"medium"`/`"high"`
//!   (`minimal` as `"low"`), which models with levels (gpt-oss) use and models with an on/off
//!   switch (qwen3, deepseek-r1) read as on; a budget can only switch thinking on (`true`)
//!   or, at 0, off (`false`), because Ollama has no budgets; reasoning settings with neither
//!   are `true`. Without reasoning settings `think` is not sent and the model's default holds.
//! - **Extras** are merged into the top level of the body (`format`, `keep_alive`, …); an
//!   extra `options` object is merged into the adapter's `options` (`num_ctx`, `seed`, …). An
//!   extra that names a field the adapter already sends is an
//!   [`InvalidRequest`](agent_types::BackendErrorKind::InvalidRequest) error rather than a
//!   duplicate JSON key.
//!
//! # Responses
//!
//! Each chunk's `message.thinking` is reasoning, `message.content` answer text, and each of
//! `message.tool_calls` a complete call (Ollama sends arguments as an object, all at once):
//! `tool_call_start` + one `tool_call_delta` + `tool_call_end`. A call without an `id` gets
//! one made from the response's start time and model: `call_<hash>_<index>`, the same every
//! time the same response is decoded. The `done: true` chunk carries the stop reason and the
//! counts: `done_reason` `stop` → `stop` (`tool_calls` when calls came), `length` → `length`;
//! `prompt_eval_count` is the input and `eval_count` the output (Ollama reports no cache or
//! reasoning breakdown). Images in an answer (`message.images`) make the response an
//! [`Unsupported`](agent_types::BackendErrorKind::Unsupported) error rather than being dropped.
//!
//! Errors are Ollama's `error` string as it is, from an HTTP error body (`{"error": "…"}`)
//! or from an error line inside the stream (a [`Server`](agent_types::BackendErrorKind::Server)
//! error). The kind follows the HTTP status, except that a model lacking what the request
//! uses (`… does not support tools`) is
//! [`Unsupported`](agent_types::BackendErrorKind::Unsupported) and a full queue (`server
//! busy`) is [`Overloaded`](agent_types::BackendErrorKind::Overloaded).

mod decode;
mod request;
#[cfg(test)]
mod tests;

use agent_types::{BackendError, BackendErrorKind, Capabilities, ModelRequest};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};

use crate::http::driver::{Prepared, Protocol};
use crate::http::status::{ProviderError, response_error};
use crate::http::{Connection, HttpOptions, http_builders, secret_header};

/// The default base URL.
pub const DEFAULT_BASE_URL: &str = "http://localhost:11434";

/// The port Ollama listens on when `OLLAMA_HOST` names none.
const DEFAULT_PORT: u16 = 11434;

/// A backend for Ollama's native `/api/chat`.
///
/// ```
/// use agent_backends::ollama::Ollama;
///
/// let local = Ollama::new();
/// assert_eq!(local.base_url(), "http://localhost:11434");
/// let remote = Ollama::new().with_base_url("http://gpu-box:11434");
/// # let _ = remote;
/// ```
#[derive(Debug, Clone)]
pub struct Ollama {
    connection: Connection,
    capabilities: Capabilities,
}

impl Default for Ollama {
    fn default() -> Self {
        Self::new()
    }
}

impl Ollama {
    /// A backend at [`DEFAULT_BASE_URL`], without a key.
    pub fn new() -> Self {
        Self {
            connection: Connection::new(DEFAULT_BASE_URL, None),
            capabilities: Capabilities {
                tools: true,
                streaming: true,
                parallel_tool_calls: true,
                thinking: true,
                prompt_caching: false,
                usage_reporting: true,
                structured_output: true,
                tool_search: false,
            },
        }
    }

    /// A backend at the server `OLLAMA_HOST` names, or at [`DEFAULT_BASE_URL`] when it is
    /// unset or empty.
    ///
    /// `OLLAMA_HOST` is read as the `ollama` CLI reads it: `host`, `host:port`, `:port` or a
    /// URL (`https://ollama.example.com`, `http://host:port/prefix`). Without a scheme the
    /// scheme is `http` and the port 11434; with `http://` or `https://` the port defaults to
    /// 80 or 443. A missing host, and the unspecified addresses `0.0.0.0` and `::` (often set
    /// so the *server* listens everywhere), mean this machine.
    pub fn from_env() -> Self {
        match std::env::var("OLLAMA_HOST") {
            Ok(host) if !host.trim().is_empty() => Self::new().with_base_url(host_url(&host)),
            _ => Self::new(),
        }
    }
}

/// The base URL an `OLLAMA_HOST` value names.
fn host_url(value: &str) -> String {
    let value = value.trim();
    let (scheme, rest, default_port) = match value.split_once("://") {
        Some((scheme, rest)) => {
            let scheme = scheme.to_ascii_lowercase();
            let port = if scheme == "https" { 443 } else { 80 };
            (scheme, rest, port)
        }
        None => ("http".to_owned(), value, DEFAULT_PORT),
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => (&rest[..at], rest[at..].trim_end_matches('/')),
        None => (rest, ""),
    };
    // `[v6]:port`, `[v6]`, `host:port`, `host`, `:port`; a bare IPv6 address has several colons.
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        match bracketed.split_once(']') {
            Some((host, tail)) => (host, tail.strip_prefix(':')),
            None => (bracketed, None),
        }
    } else if authority.matches(':').count() == 1 {
        let (host, port) = authority.split_once(':').unwrap_or((authority, ""));
        (host, Some(port))
    } else {
        (authority, None)
    };
    let port = port
        .and_then(|port| port.parse::<u16>().ok())
        .unwrap_or(default_port);
    let host = match host {
        "" | "0.0.0.0" => "127.0.0.1".to_owned(),
        "::" => "[::1]".to_owned(),
        host if host.contains(':') => format!("[{host}]"),
        host => host.to_owned(),
    };
    format!("{scheme}://{host}:{port}{path}")
}

http_builders!(Ollama, "ollama");

impl Protocol for Ollama {
    type Decoder = decode::WireDecoder;

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn http(&self) -> &HttpOptions {
        &self.connection.http
    }

    fn prepare(&self, request: &ModelRequest) -> Result<Prepared, BackendError> {
        let body = request::body(request)?;
        let headers = self.connection.request_headers(|| {
            let mut headers = HeaderMap::new();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            if let Some(key) = self
                .connection
                .api_key
                .as_deref()
                .filter(|key| !key.is_empty())
            {
                headers.insert(AUTHORIZATION, secret_header(&format!("Bearer {key}"))?);
            }
            Ok(headers)
        })?;
        Ok(Prepared {
            url: self.connection.url("/api/chat"),
            headers,
            body,
        })
    }

    fn decoder(&self, _request: &ModelRequest) -> decode::WireDecoder {
        decode::WireDecoder::default()
    }

    fn error(&self, status: u16, body: &[u8]) -> BackendError {
        response_error(status, body, |json| {
            let text = error_text(json.get("error")?)?;
            let kind = refined_kind(&text);
            Some(ProviderError::new(text).with_kind(kind))
        })
    }
}

/// A kind Ollama's error text makes clearer than its status: a model that lacks a capability
/// the request uses (`… does not support tools`, `… does not support thinking`, a 400), and a
/// full request queue (`server busy`, a 503 that waiting cures).
fn refined_kind(text: &str) -> Option<BackendErrorKind> {
    if text.contains("does not support") {
        Some(BackendErrorKind::Unsupported)
    } else if text.contains("server busy") {
        Some(BackendErrorKind::Overloaded)
    } else {
        None
    }
}

/// Ollama's `error` member: a string, or (from proxies) an object with a `message`.
fn error_text(error: &serde_json::Value) -> Option<String> {
    match error {
        serde_json::Value::String(text) => Some(text.clone()),
        serde_json::Value::Object(fields) => fields
            .get("message")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned),
        _ => None,
    }
}
