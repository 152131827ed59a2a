//! The adapter for the OpenAI Responses API (`POST {base}/responses`).
//!
//! It runs stateless: every request carries the whole history and asks OpenAI to keep nothing
//! (`store: false`). A reasoning model's reasoning survives from one round to the next
//! because the adapter asks for it in encrypted form (`include: ["reasoning.encrypted_content"]`)
//! and sends each reasoning item back where the model produced it, before the function calls
//! it led to. In an assembled [`AssistantMessage`](agent_types::AssistantMessage) that item is a
//! [`Thinking`](agent_types::Thinking) block: the summary text in `thinking`, the encrypted
//! content in `signature`, the item id in `id`.
//!
//! What maps where:
//!
//! - the system prompt is `instructions`; a [`Message::System`](agent_types::Message::System)
//!   in the history is a `system` message item;
//! - user text and images are `input_text` and `input_image` parts (base64 images as data URLs);
//! - assistant text is an `output_text` message, tool calls are `function_call` items and tool
//!   results `function_call_output` items (a failed result's text starts with `Error: `, as the
//!   API has no error flag);
//! - tools are flat `function` tools sent with `strict: false`, because the API would otherwise
//!   make every optional parameter required; a [strict](agent_types::ToolSpec::strict) tool
//!   goes with `strict: true` and its schema in strict form
//!   ([`strict_schema`](agent_types::strict_schema));
//! - an output item or message part an assistant message cannot carry (image generation, code
//!   interpreter, MCP, audio, kinds added later) makes the response an
//!   [`Unsupported`](agent_types::BackendErrorKind::Unsupported) error naming its type; hosted
//!   web and file search items are skipped (the message text carries what they found);
//! - `max_output_tokens`, `temperature`, `top_p`, `parallel_tool_calls` pass through, reasoning
//!   settings become `reasoning: {effort, summary: "auto"}` (a token budget picks the nearest
//!   effort); stop sequences do not exist in this API and are refused before sending;
//! - keys in [`ModelRequest::extras`](agent_types::ModelRequest::extras) are added to the body
//!   and replace the adapter's own value for the same key (e.g. `"store": true`, `"text"`,
//!   `"service_tier"`).
//!
//! Encrypted reasoning is only asked for when the model can reason: non-reasoning models reject
//! the request. The adapter decides from the model name (`o1`, `o3`, `o4-mini`, `gpt-5`, …),
//! the reasoning settings and the history; [`OpenAiResponses::with_encrypted_reasoning`] fixes
//! the choice for deployments whose names say nothing.
//!
//! ```
//! use agent_backends::openai_responses::OpenAiResponses;
//!
//! let backend = OpenAiResponses::new("sk-...")
//!     .with_prompt_cache_key("support-bot-v3");
//! assert_eq!(backend.base_url(), "https://api.openai.com/v1");
//! ```

mod decode;
mod request;
#[cfg(test)]
mod tests;
mod tool_search;

use agent_types::{BackendError, Capabilities, ModelRequest};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::Deserialize;

use crate::http::driver::{Prepared, Protocol};
use crate::http::status::response_error;
use crate::http::{Connection, HttpOptions, http_builders, secret_header};
use crate::tools_json::ToolsJson;

pub(crate) use decode::WireDecoder;

/// The default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// A backend for the OpenAI Responses API.
#[derive(Debug, Clone)]
pub struct OpenAiResponses {
    connection: Connection,
    capabilities: Capabilities,
    store: bool,
    encrypted_reasoning: Option<bool>,
    prompt_cache_key: Option<String>,
    /// The tools array of the last request, serialized.
    tools_json: ToolsJson,
    /// Azure OpenAI's `api-version` query parameter (see [`crate::cloud::azure`]).
    #[cfg(feature = "azure")]
    api_version: Option<String>,
}

impl OpenAiResponses {
    /// A backend at [`DEFAULT_BASE_URL`]. An empty key sends no `Authorization` header (for
    /// compatible servers that need none).
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
                structured_output: true,
                tool_search: false,
            },
            store: false,
            encrypted_reasoning: None,
            tools_json: ToolsJson::default(),
            prompt_cache_key: None,
            #[cfg(feature = "azure")]
            api_version: None,
        }
    }

    /// With this `prompt_cache_key`: requests that share a key and a prompt prefix are routed
    /// to the same cache, which raises the cache hit rate.
    #[must_use]
    pub fn with_prompt_cache_key(mut self, key: impl Into<String>) -> Self {
        self.prompt_cache_key = Some(key.into());
        self
    }

    /// Whether OpenAI stores the responses (`store`, default `false`). With storage on, a
    /// reasoning item that came without encrypted content can still be sent back by its id.
    #[must_use]
    pub fn with_store(mut self, store: bool) -> Self {
        self.store = store;
        self
    }

    /// Always (`true`) or never (`false`) ask for encrypted reasoning, instead of deciding
    /// from the model name, the reasoning settings and the history. Turn it on for a reasoning
    /// model behind a deployment name the adapter does not recognise; off for a
    /// non-reasoning model whose name looks like a reasoning one.
    #[must_use]
    pub fn with_encrypted_reasoning(mut self, encrypted: bool) -> Self {
        self.encrypted_reasoning = Some(encrypted);
        self
    }
}

http_builders!(OpenAiResponses, "openai");

impl OpenAiResponses {
    /// With Azure OpenAI's `api-version` query parameter on every request (its pre-v1
    /// Responses API, `{endpoint}/openai/responses?api-version=…`).
    #[cfg(feature = "azure")]
    #[must_use]
    pub fn with_api_version(mut self, api_version: impl Into<String>) -> Self {
        self.api_version = Some(api_version.into());
        self
    }

    fn url(&self) -> String {
        #[cfg(feature = "azure")]
        if let Some(version) = &self.api_version {
            return self.connection.url(&format!(
                "/responses?api-version={}",
                crate::openai_chat::query_value(version)
            ));
        }
        self.connection.url("/responses")
    }
}

impl Protocol for OpenAiResponses {
    type Decoder = WireDecoder;

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn http(&self) -> &HttpOptions {
        &self.connection.http
    }

    fn prepare(&self, request: &ModelRequest) -> Result<Prepared, BackendError> {
        let body = request::body(
            request,
            request::Settings {
                store: self.store,
                encrypted_reasoning: self.encrypted_reasoning,
                prompt_cache_key: self.prompt_cache_key.as_deref(),
                tools: Some(&self.tools_json),
            },
        )?;
        let headers = self.connection.request_headers(|| {
            let mut headers = HeaderMap::new();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            if let Some(key) = self.connection.api_key.as_deref().filter(|k| !k.is_empty()) {
                headers.insert(AUTHORIZATION, secret_header(&format!("Bearer {key}"))?);
            }
            Ok(headers)
        })?;
        Ok(Prepared {
            url: self.url(),
            headers,
            body,
        })
    }

    fn decoder(&self, _request: &ModelRequest) -> WireDecoder {
        WireDecoder::new()
    }

    fn error(&self, status: u16, body: &[u8]) -> BackendError {
        response_error(status, body, |json| {
            let body = decode::ErrorBody::deserialize(json).ok()?;
            Some(decode::provider_error(&body.error, false))
        })
    }
}
