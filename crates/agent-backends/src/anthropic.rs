//! The adapter for the Anthropic Messages API (`POST {base}/v1/messages`).
//!
//! [`Anthropic`] turns a [`ModelRequest`] into a Messages request and the response (a
//! `text/event-stream` or one JSON message) into normalized [`StreamEvent`](agent_types::StreamEvent)s.
//!
//! # Requests
//!
//! - **`max_tokens`** is required by Anthropic. It is
//!   [`GenerationSettings::max_output_tokens`](agent_types::GenerationSettings::max_output_tokens)
//!   when set, otherwise [`DEFAULT_MAX_TOKENS`] plus the thinking budget (Anthropic counts the
//!   budget inside `max_tokens`, so the budget must stay below it; a request that sets both
//!   with `max_output_tokens <= budget` is rejected before it is sent).
//! - **Thinking** (`thinking: {type: enabled, budget_tokens}`) is sent when the settings ask
//!   for reasoning: the explicit `budget_tokens`, or the effort mapped to a budget with
//!   [`thinking_budget`]. A budget of `0` means "no thinking"; budgets between 1 and 1023 are
//!   rejected (Anthropic's minimum is 1024).
//! - **History**: an assistant turn keeps its blocks in their original order: `thinking`
//!   (with its signature), `redacted_thinking`, `text` and `tool_use`. Thinking blocks without
//!   a signature (from another provider, or cut off before the signature arrived) are left out,
//!   because Anthropic rejects unsigned thinking. A tool call whose arguments are not a JSON
//!   object (the model wrote invalid JSON) is sent with `{}` as its `input`, since Anthropic
//!   only accepts objects there; the tool's error result tells the model what went wrong.
//!   Tool results become `tool_result` blocks of a user turn. Anthropic requires the roles to
//!   alternate, so adjacent turns of the same role are merged (several results answer one
//!   assistant turn in one user turn), and inside a merged user turn the `tool_result` blocks
//!   come first, as the API requires.
//! - **System**: [`ModelRequest::system`] and the [`Message::System`](agent_types::Message)
//!   entries of the history go to the top-level `system` blocks, in order, unless prompt
//!   caching is on (below).
//! - **Tool choice**: `auto`, `none`, `required` → `any`, a named tool → `tool`;
//!   `parallel_tool_calls: Some(false)` → `disable_parallel_tool_use: true`.
//! - **Extras** are merged into the top level of the body. An extra that names a field the
//!   adapter already sends (say `max_tokens`) is an error rather than a duplicate JSON key:
//!   use the typed setting instead.
//!
//! # Prompt caching
//!
//! Caching is opt-in with [`Anthropic::with_cache`]. Anthropic renders a request as tools →
//! system → messages and caches the prefix up to each `cache_control` breakpoint, so the
//! layout keeps a byte-stable prefix and moves one marker along the conversation:
//!
//! 1. Tools are sent sorted by name, and the static system prompt ([`ModelRequest::system`])
//!    carries **one** breakpoint (on the last tool when there is no system prompt). This
//!    prefix is identical on every request of a run, whatever the history holds.
//! 2. **One** more breakpoint goes on the last content block of the newest message (the last
//!    `tool_result` when the history ends with tool results), so the next request reads the
//!    whole conversation so far from the cache. The marker is added while the wire body is
//!    built; the caller's history is never modified.
//!
//! That makes exactly two breakpoints per request (of the four Anthropic allows).
//!
//! [`Message::System`](agent_types::Message) entries inside the history are dynamic context
//! (reminders, the current time, retrieved notes). Putting them into the top-level `system`
//! would change the cached prefix and invalidate the cache on every request, so with caching
//! on they are sent in the user turn at their place in the history, as text blocks wrapped in
//! `<system-reminder>` … `</system-reminder>`.
//!
//! [`CacheTtl::OneHour`] sends `"ttl": "1h"` on both breakpoints (Anthropic requires a longer
//! TTL never to follow a shorter one, which one TTL for both always satisfies). Gateways or API
//! versions that still gate the 1-hour cache behind a beta need
//! `with_beta("extended-cache-ttl-2025-04-11")`.
//!
//! # Responses
//!
//! | Anthropic `stop_reason`              | [`StopReason`](agent_types::StopReason) |
//! |--------------------------------------|------------------------------------------|
//! | `end_turn`, `stop_sequence`          | `stop`                                   |
//! | `pause_turn` (a server tool paused)  | `stop` (send the history back to resume) |
//! | `max_tokens`, `model_context_window_exceeded` | `length`                        |
//! | `tool_use`                           | `tool_calls`                             |
//! | `refusal`                            | `content_filter` (the text is kept)      |
//!
//! Usage is normalized to agentry's convention: Anthropic's `input_tokens` excludes the cache,
//! so the normalized input is `input_tokens + cache_read_input_tokens +
//! cache_creation_input_tokens`; the cache-write breakdown (`cache_creation.ephemeral_5m_…` /
//! `ephemeral_1h_…`) fills the 5-minute and 1-hour write counts (without it, every write counts
//! as 5-minute); `output_tokens_details.thinking_tokens` is the reasoning count.
//!
//! Errors read as `<error.type>: <error.message>`; `overloaded_error` is
//! [`Overloaded`](agent_types::BackendErrorKind::Overloaded) and `rate_limit_error`
//! [`RateLimited`](agent_types::BackendErrorKind::RateLimited) (both retryable), whether they
//! come as an HTTP error or as an `error` event inside a stream.
//!
//! Hosted retrieval blocks (`server_tool_use` for `web_search`/`web_fetch`, and their
//! `web_search_tool_result`/`web_fetch_tool_result`) and citations are skipped: the answer text
//! carries what they found. Any other block type (code execution and its results, MCP
//! connector blocks, types added later) is content an assistant message cannot carry, and the
//! response is refused with an [`Unsupported`](agent_types::BackendErrorKind::Unsupported)
//! error naming the block type rather than passed on without it.

mod cache;
mod decode;
mod request;
#[cfg(test)]
mod tests;
mod tool_search;
#[cfg(test)]
mod tool_search_tests;
#[cfg(feature = "vertex")]
mod vertex;
pub use tool_search::{TOOL_SEARCH_BETA, ToolSearchTool};
#[cfg(feature = "vertex")]
pub use vertex::VERTEX_API_VERSION;

use agent_types::{BackendError, BackendErrorKind, Capabilities, ModelRequest, ReasoningEffort};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use crate::http::driver::{Prepared, Protocol};
use crate::http::status::{ProviderError, response_error, str_field};
use crate::http::{Connection, HttpOptions, http_builders, json_body, secret_header};

/// The default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The `anthropic-version` header every request carries.
pub const API_VERSION: &str = "2023-06-01";

/// The `max_tokens` sent when the settings give no `max_output_tokens` (the thinking budget,
/// if any, is added on top).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The smallest thinking budget Anthropic accepts.
pub const MIN_THINKING_BUDGET: u32 = 1024;

/// The thinking budget an effort level maps to: `minimal` 1,024 (Anthropic's minimum), `low`
/// 4,096, `medium` 16,384, `high` 32,768 tokens.
pub fn thinking_budget(effort: ReasoningEffort) -> u32 {
    match effort {
        ReasoningEffort::Minimal => MIN_THINKING_BUDGET,
        ReasoningEffort::Low => 4_096,
        ReasoningEffort::Medium => 16_384,
        ReasoningEffort::High => 32_768,
    }
}

/// How long Anthropic keeps a cache entry after its last use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum CacheTtl {
    /// Five minutes (Anthropic's default; no `ttl` field is sent). Writes cost 1.25× the input
    /// price.
    #[default]
    FiveMinutes,
    /// One hour (`"ttl": "1h"`). Writes cost 2× the input price; worth it when requests of a
    /// run are more than five minutes apart.
    OneHour,
}

/// The prompt-cache layout: a byte-stable prefix (sorted tools and the static system prompt,
/// one breakpoint) and one breakpoint on the newest message. See the
/// [module documentation](self#prompt-caching).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CacheLayout {
    /// How long the cache entries live.
    pub ttl: CacheTtl,
}

impl CacheLayout {
    /// The layout with five-minute entries.
    pub fn new() -> Self {
        Self::default()
    }

    /// With this TTL on both breakpoints.
    #[must_use]
    pub fn with_ttl(mut self, ttl: CacheTtl) -> Self {
        self.ttl = ttl;
        self
    }
}

/// A backend for the Anthropic Messages API.
///
/// ```
/// use agent_backends::anthropic::{Anthropic, CacheLayout, CacheTtl};
///
/// let backend = Anthropic::new("sk-ant-…")
///     .with_cache(CacheLayout::new().with_ttl(CacheTtl::OneHour))
///     .with_beta("interleaved-thinking-2025-05-14");
/// assert_eq!(backend.base_url(), "https://api.anthropic.com");
/// ```
#[derive(Debug, Clone)]
pub struct Anthropic {
    connection: Connection,
    capabilities: Capabilities,
    betas: Vec<String>,
    cache: Option<CacheLayout>,
    tool_search: Option<ToolSearchTool>,
    #[cfg(feature = "vertex")]
    vertex: bool,
}

impl Anthropic {
    /// A backend at [`DEFAULT_BASE_URL`], authenticating with `api_key` (`x-api-key`).
    pub fn new(api_key: impl Into<String>) -> Self {
        Self {
            connection: Connection::new(DEFAULT_BASE_URL, Some(api_key.into())),
            capabilities: Capabilities {
                tools: true,
                streaming: true,
                parallel_tool_calls: true,
                thinking: true,
                prompt_caching: true,
                usage_reporting: true,
                structured_output: false,
                tool_search: false,
            },
            betas: Vec::new(),
            cache: None,
            tool_search: None,
            #[cfg(feature = "vertex")]
            vertex: false,
        }
    }

    /// With one more `anthropic-beta` flag (several are sent comma-separated).
    #[must_use]
    pub fn with_beta(mut self, beta: impl Into<String>) -> Self {
        self.betas.push(beta.into());
        self
    }

    /// With the prompt-cache layout (off by default). See the
    /// [module documentation](self#prompt-caching).
    #[must_use]
    pub fn with_cache(mut self, layout: CacheLayout) -> Self {
        self.cache = Some(layout);
        self
    }

    /// The prompt-cache layout, if caching is on.
    pub fn cache(&self) -> Option<CacheLayout> {
        self.cache
    }

    fn headers(&self) -> Result<HeaderMap, BackendError> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(API_VERSION),
        );
        if let Some(key) = &self.connection.api_key {
            headers.insert(HeaderName::from_static("x-api-key"), secret_header(key)?);
        }
        if !self.betas.is_empty() {
            let joined = self.betas.join(",");
            let value = HeaderValue::from_str(&joined).map_err(|_| {
                BackendError::new(
                    BackendErrorKind::InvalidRequest,
                    format!("the anthropic-beta value `{joined}` cannot be sent in an HTTP header"),
                )
            })?;
            headers.insert(HeaderName::from_static("anthropic-beta"), value);
        }
        Ok(headers)
    }
}

http_builders!(Anthropic, "anthropic");

impl Protocol for Anthropic {
    type Decoder = decode::WireDecoder;

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn http(&self) -> &HttpOptions {
        &self.connection.http
    }

    fn prepare(&self, request: &ModelRequest) -> Result<Prepared, BackendError> {
        // request builds the body, cache marks it: cache depends on request, never back.
        let mut body = request::build(request, self.cache.as_ref())?;
        tool_search::add(self.tool_search, &mut body)?;
        if let Some(layout) = &self.cache {
            cache::mark(layout, &mut body);
        }
        #[cfg(feature = "vertex")]
        if self.vertex {
            return vertex::prepare(&self.connection, &self.betas, request, body);
        }
        Ok(Prepared {
            url: self.connection.url("/v1/messages"),
            headers: self.headers()?,
            body: json_body(&body)?,
        })
    }

    fn decoder(&self, _request: &ModelRequest) -> decode::WireDecoder {
        decode::WireDecoder::new()
    }

    fn error(&self, status: u16, body: &[u8]) -> BackendError {
        response_error(status, body, describe_error)
    }
}

/// Reads Anthropic's error document, `{"type": "error", "error": {"type", "message"}}`.
fn describe_error(json: &serde_json::Value) -> Option<ProviderError> {
    let error = json.get("error")?;
    let message = str_field(error, "message");
    let kind = str_field(error, "type");
    let text = match (kind, message) {
        (Some(kind), Some(message)) => format!("{kind}: {message}"),
        (Some(kind), None) => kind.to_owned(),
        (None, Some(message)) => message.to_owned(),
        (None, None) => return None,
    };
    Some(ProviderError::new(text).with_kind(kind.and_then(error_kind)))
}

/// The kind an Anthropic error type names, where it says more than the HTTP status.
fn error_kind(kind: &str) -> Option<BackendErrorKind> {
    Some(match kind {
        "overloaded_error" => BackendErrorKind::Overloaded,
        "rate_limit_error" => BackendErrorKind::RateLimited,
        "api_error" => BackendErrorKind::Server,
        "timeout_error" => BackendErrorKind::Timeout,
        "authentication_error" | "permission_error" => BackendErrorKind::Authentication,
        "billing_error" => BackendErrorKind::QuotaExceeded,
        "invalid_request_error" | "not_found_error" | "request_too_large" => {
            BackendErrorKind::InvalidRequest
        }
        _ => return None,
    })
}

/// An error that arrived as an `error` event inside a stream (after HTTP 200). Unknown types
/// count as a server failure.
fn stream_error(json: &serde_json::Value) -> BackendError {
    match describe_error(json) {
        Some(error) => error.into_error(BackendErrorKind::Server),
        None => BackendError::new(
            BackendErrorKind::Server,
            format!(
                "Anthropic reported an error without a type or message: {}",
                crate::http::status::clip(&json.to_string(), 300)
            ),
        ),
    }
}
