//! The adapter for OpenAI Chat Completions (`POST {base}/chat/completions`) and the many
//! servers that speak it: vLLM, llama.cpp, Ollama's `/v1`, OpenRouter, Groq, DeepSeek…
//!
//! [`OpenAiChat`] turns a [`ModelRequest`] into a Chat Completions request and the response
//! (a `text/event-stream` of `chat.completion.chunk`s, or one `chat.completion`) into
//! normalized [`StreamEvent`](agent_types::StreamEvent)s.
//!
//! ```
//! use agent_backends::openai_chat::OpenAiChat;
//!
//! // api.openai.com, with a key and a prompt-cache key shared by requests with one prefix.
//! let openai = OpenAiChat::new("sk-…").with_prompt_cache_key("support-bot-v3");
//! assert_eq!(openai.base_url(), "https://api.openai.com/v1");
//!
//! // A local server that wants no key: no `Authorization` header is sent.
//! let local = OpenAiChat::compatible("http://localhost:8000/v1/");
//! assert_eq!(local.base_url(), "http://localhost:8000/v1");
//! ```
//!
//! # Requests
//!
//! - **Authentication**: `Authorization: Bearer <key>`, only when the key is not empty.
//! - **System**: [`ModelRequest::system`] first, then every
//!   [`Message::System`](agent_types::Message) in its place, as `system` messages.
//! - **User turns**: one text block is sent as a plain string (text-only servers reject the
//!   list form); anything else as `text` and `image_url` parts, inline images as `data:` URLs.
//! - **Assistant turns**: the text blocks joined as `content`, a refusal as `refusal`, and the
//!   tool calls with their arguments as JSON text (a call whose arguments were not valid JSON is sent back with the
//!   text the model wrote). **Thinking blocks are left out**: Chat Completions has no request
//!   field for reasoning. OpenAI keeps its models' reasoning on the server and never returns it
//!   here, and compatible servers that return reasoning text ignore it in the history, except
//!   DeepSeek's thinking mode, which wants it back after tool calls: turn that on with
//!   [`OpenAiChat::with_reasoning_in_history`].
//! - **Tool results** are `tool` messages with their `tool_call_id`. The API has no error flag
//!   for them, so a failed call's content (which says what went wrong) is sent as it is.
//! - **Tools** are `function` tools; `tool_choice` and `parallel_tool_calls` are sent only
//!   with tools (OpenAI rejects them otherwise). A choice that demands a call with no tools
//!   declared is an [`InvalidRequest`](agent_types::BackendErrorKind::InvalidRequest) error.
//! - **Settings**: `max_output_tokens` → `max_completion_tokens`, `temperature`, `top_p`,
//!   `stop_sequences` → `stop`, `reasoning.effort` → `reasoning_effort`. The output cap goes
//!   as `max_completion_tokens` because OpenAI deprecated `max_tokens` and its reasoning
//!   models (o-series, gpt-5) reject it; most compatible servers accept both names. For one
//!   that knows only `max_tokens`, put `max_tokens` in [`ModelRequest::extras`], which then
//!   replaces `max_completion_tokens`. A reasoning *budget* without an effort cannot be
//!   expressed here and is an [`Unsupported`](agent_types::BackendErrorKind::Unsupported)
//!   error rather than silently dropped.
//! - **Streaming**: `stream: true` with `stream_options: {include_usage: true}`, without
//!   which OpenAI reports no usage for a stream.
//! - **Extras** are merged into the top level of the body, and a key there replaces the field
//!   the adapter would have written (`"stream_options": null` for a server that rejects it,
//!   DeepSeek's `thinking`, vLLM's `chat_template_kwargs`).
//!
//! # Responses
//!
//! - `delta.content` → text; `delta.reasoning_content` (DeepSeek, vLLM, llama.cpp) or
//!   `delta.reasoning` (Groq, OpenRouter) → thinking.
//! - Tool calls are assembled by their `index`; the id and name come in the first fragment.
//!   A fragment with a new id at an index already in use starts a new call (servers that send
//!   every call at index 0), and a server that sends no id gets `call_<n>`.
//! - A `refusal` (in the message or a delta) is kept, as a refusal block rather than answer
//!   text, and the stop reason is
//!   [`ContentFilter`](agent_types::StopReason::ContentFilter), as it is for
//!   `finish_reason: content_filter`.
//! - Usage comes in the last chunk, after the one with the `finish_reason`, so the finish is
//!   held until `[DONE]` (or the end of the body). `prompt_tokens` already includes cached
//!   tokens (`prompt_tokens_details.cached_tokens`) and `completion_tokens` includes
//!   reasoning tokens, as agentry counts them.
//! - Errors, in the body of a failed response or mid-stream (`event: error`, or an `error`
//!   member in a chunk), read `<type>/<code>: <message>`, leaving out a missing type or code.
//!   `insufficient_quota` is [`QuotaExceeded`](agent_types::BackendErrorKind::QuotaExceeded)
//!   (not retryable) although OpenAI sends it as HTTP 429.
//! - Content an assistant message cannot carry (`audio`, non-empty `images`, content parts
//!   other than `text`) makes the response an
//!   [`Unsupported`](agent_types::BackendErrorKind::Unsupported) error naming it, never a
//!   silent drop; Mistral's `thinking` parts are thinking and its `reference` parts metadata.
//! - A [strict](agent_types::ToolSpec::strict) tool is sent with `strict: true` and its schema
//!   in strict form ([`strict_schema`](agent_types::strict_schema)).

#[cfg(feature = "azure")]
mod azure;
mod chunk;
mod decode;
mod request;
#[cfg(feature = "azure")]
pub(crate) use azure::query_value;
#[cfg(test)]
mod tests;

use agent_types::{BackendError, Capabilities, ModelRequest};
use reqwest::header::{AUTHORIZATION, HeaderMap};

use self::decode::ChatDecoder;
use crate::http::driver::{Prepared, Protocol};
use crate::http::status::{ProviderError, response_error};
use crate::http::{Connection, HttpOptions, http_builders, secret_header};
use crate::tools_json::ToolsJson;

/// The default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// A backend for OpenAI Chat Completions and OpenAI-compatible servers.
///
/// See the [module docs](self) for how requests and responses are translated.
#[derive(Debug, Clone)]
pub struct OpenAiChat {
    connection: Connection,
    capabilities: Capabilities,
    prompt_cache_key: Option<String>,
    reasoning_in_history: bool,
    /// The tools array of the last request, serialized.
    tools_json: ToolsJson,
    /// Azure OpenAI deployment URLs: the `api-version` (see [`crate::cloud::azure`]).
    #[cfg(feature = "azure")]
    azure_api_version: Option<String>,
}

impl OpenAiChat {
    /// A backend at [`DEFAULT_BASE_URL`] with this API key. An empty key sends no
    /// `Authorization` header.
    pub fn new(api_key: impl Into<String>) -> Self {
        let api_key = api_key.into();
        Self {
            connection: Connection::new(DEFAULT_BASE_URL, Some(api_key)),
            capabilities: Capabilities {
                tools: true,
                streaming: true,
                parallel_tool_calls: true,
                // Reasoning text, from the compatible servers that return it.
                thinking: true,
                // OpenAI caches prompt prefixes by itself and reports the cached tokens.
                prompt_caching: true,
                usage_reporting: true,
                structured_output: true,
                tool_search: false,
            },
            prompt_cache_key: None,
            reasoning_in_history: false,
            tools_json: ToolsJson::default(),
            #[cfg(feature = "azure")]
            azure_api_version: None,
        }
    }

    /// A backend for an OpenAI-compatible server at `base_url` (the URL that
    /// `/chat/completions` is appended to, e.g. `http://localhost:8000/v1`), without an API
    /// key. Add one with `with_api_key` if the server wants it.
    pub fn compatible(base_url: impl AsRef<str>) -> Self {
        Self {
            connection: Connection::new(base_url.as_ref(), None),
            ..Self::new("")
        }
    }

    /// With a `prompt_cache_key` on every request: OpenAI routes requests with the same key
    /// and prefix to the same cache, which raises the hit rate when many requests share a
    /// long prefix.
    #[must_use]
    pub fn with_prompt_cache_key(mut self, key: impl Into<String>) -> Self {
        self.prompt_cache_key = Some(key.into());
        self
    }

    /// Whether to send the reasoning text of earlier assistant turns back as
    /// `reasoning_content` (off by default). DeepSeek's thinking mode requires it for turns
    /// that called tools and answers HTTP 400 without it; the field is not part of OpenAI's
    /// API, so leave it off there. Redacted thinking is never sent.
    #[must_use]
    pub fn with_reasoning_in_history(mut self, on: bool) -> Self {
        self.reasoning_in_history = on;
        self
    }

    fn url(&self, #[allow(unused_variables)] request: &ModelRequest) -> String {
        #[cfg(feature = "azure")]
        if let Some(version) = &self.azure_api_version {
            return azure::deployment_url(&self.connection, &request.model, version);
        }
        self.connection.url("/chat/completions")
    }

    fn options(&self) -> request::Options<'_> {
        request::Options {
            prompt_cache_key: self.prompt_cache_key.as_deref(),
            reasoning_in_history: self.reasoning_in_history,
            tools: Some(&self.tools_json),
        }
    }
}

http_builders!(OpenAiChat, "openai");

impl Protocol for OpenAiChat {
    type Decoder = ChatDecoder;

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn http(&self) -> &HttpOptions {
        &self.connection.http
    }

    fn prepare(&self, request: &ModelRequest) -> Result<Prepared, BackendError> {
        let headers = self.connection.request_headers(|| {
            let mut headers = HeaderMap::new();
            if let Some(key) = self
                .connection
                .api_key
                .as_deref()
                .filter(|key| !key.is_empty())
            {
                headers.insert(AUTHORIZATION, secret_header(&format!("Bearer {key}"))?);
            }
            headers.insert(
                reqwest::header::CONTENT_TYPE,
                reqwest::header::HeaderValue::from_static("application/json"),
            );
            Ok(headers)
        })?;
        Ok(Prepared {
            url: self.url(request),
            headers,
            body: request::body(request, self.options())?,
        })
    }

    fn decoder(&self, _request: &ModelRequest) -> ChatDecoder {
        ChatDecoder::new()
    }

    fn error(&self, status: u16, body: &[u8]) -> BackendError {
        response_error(status, body, |json| {
            decode::describe(json)
                .map(|described| ProviderError::new(described.message).with_kind(described.kind))
        })
    }
}
