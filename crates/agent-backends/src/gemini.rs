//! The adapter for Google Gemini `generateContent` / `streamGenerateContent`.
//!
//! [`Gemini`] turns a [`ModelRequest`] into a `generateContent` request (`POST
//! {base}/models/{model}:streamGenerateContent?alt=sse` when streaming, `…:generateContent`
//! otherwise, key in the `x-goog-api-key` header) and the response into normalized
//! [`StreamEvent`](agent_types::StreamEvent)s. Both streamed framings work: server-sent events
//! (`alt=sse`, the default; Gemini separates events with CRLF) and the JSON array written
//! element by element that `streamGenerateContent` returns without `alt=sse`
//! ([`Gemini::with_sse`]`(false)`). A model name that already has a path (`models/…`,
//! `tunedModels/…`) is used as it is.
//!
//! # Requests
//!
//! - **System**: [`ModelRequest::system`] and every [`Message::System`](agent_types::Message)
//!   of the history become the parts of `systemInstruction`, in order (Gemini has no system
//!   turns inside `contents`).
//! - **Turns**: user turns are `role: user` with `text`, `inlineData` (base64 images) and
//!   `fileData` (URL images: `fileUri` plus a MIME type guessed from the file extension when
//!   it has one; `data:` URLs are sent inline). Assistant turns are `role: model`, their blocks
//!   in order. A turn that ends up with no parts (say, an assistant turn that only held
//!   unsigned reasoning) is left out, because Gemini rejects empty `parts`.
//! - **Reasoning and thought signatures**: thought summaries are *not* sent back (Gemini reads
//!   nothing from them), but every thought signature is, byte for byte, on the part it came
//!   with. A tool call carries its own `thoughtSignature`
//!   ([`ToolCall::signature`](agent_types::ToolCall::signature)). A signature that came on a
//!   text part is decoded as a signed, possibly empty thinking block *just before* that text
//!   (see Responses), so on the way back a signed thinking block gives its signature to the
//!   part that follows it in the same turn; when nothing follows, or the next part has a
//!   signature of its own, it is sent on an empty text part (`{"text": "",
//!   "thoughtSignature": …}`), the shape Gemini itself uses for a trailing signature. Gemini 3
//!   rejects a function-call turn whose signature is missing; text signatures are not
//!   validated but keep the model's reasoning context. Redacted blocks (another provider's)
//!   are left out.
//! - **Tool results**: consecutive [`Message::Tool`](agent_types::Message) entries become one
//!   user turn of `functionResponse` parts, put in the order of the calls in the preceding
//!   model turn (Gemini pairs calls and responses by name and position). A success is
//!   `{"result": <content>}`, where the content is embedded as JSON when it parses as JSON (the
//!   model then sees structured data, not a string of escaped JSON) and as a string otherwise
//!   (e.g. a truncated result); an error is `{"error": "<content>"}`. A result without a name
//!   takes the name of the call it answers.
//! - **Call ids**: Gemini 3 gives every `functionCall` an `id` and expects it back on the
//!   `functionResponse`; older models give none. Provider ids are used as they are and echoed
//!   on both the call and its response. Where Gemini gave no id the adapter makes one, stable
//!   for the response: `gemini_call_<responseId>_<index>` (see [`GENERATED_ID_PREFIX`]). Such
//!   ids are never sent to Gemini, which would reject ids it did not issue on some endpoints;
//!   the pairing then falls back to name and position, as above.
//! - **Tools** go to `tools: [{functionDeclarations: [...]}]`. Gemini's `parameters` accepts
//!   a subset of OpenAPI 3.0 schema, so each schema is rewritten: local
//!   `$ref`s are inlined, `oneOf` becomes `anyOf`, `const` a one-value `enum`, `["T", "null"]`
//!   types and `null` members of `anyOf` become `nullable`, single-member `allOf`s are merged,
//!   type names are upper-cased, and keywords Gemini rejects (`$schema`, `$id`, `$defs`,
//!   `additionalProperties`, `exclusiveMinimum`, `multipleOf`, `uniqueItems`,
//!   `patternProperties`, `not`, `if`/`then`/`else`, non-string `enum`s, unsupported `format`s,
//!   …) are dropped.
//! - **Tool choice** → `toolConfig.functionCallingConfig`: `auto` is Gemini's default and is
//!   not sent, `none` → `NONE`, `required` → `ANY`, a named tool → `ANY` with
//!   `allowedFunctionNames: [name]`. Gemini cannot forbid parallel calls:
//!   `parallel_tool_calls: Some(false)` is an [`Unsupported`](agent_types::BackendErrorKind::Unsupported)
//!   error.
//! - **Settings** → `generationConfig`: `maxOutputTokens`, `temperature`, `topP`,
//!   `stopSequences`, and, when reasoning is asked for, `thinkingConfig` with
//!   `includeThoughts: true` (false for a budget of 0, which turns thinking off). A budget is
//!   `thinkingBudget`; an effort level is `thinkingLevel` (`minimal`/`low`/`medium`/`high`,
//!   Gemini 3) except for `gemini-2…` models, which only take budgets, where it maps with
//!   [`thinking_budget`]. When both are given the budget wins.
//! - **Extras** are merged into the top level of the body (`safetySettings`, `cachedContent`,
//!   …); an extra `generationConfig` object is merged into the one the adapter builds
//!   (`responseMimeType`, `seed`, …). An extra that names a field the adapter already sends is
//!   an [`InvalidRequest`](agent_types::BackendErrorKind::InvalidRequest) error rather than a
//!   duplicate JSON key: use the typed setting instead.
//!
//! # Responses
//!
//! Each part of the first candidate becomes events: `thought: true` text is reasoning
//! (`thinking_delta`), other text is answer text, a `thoughtSignature` on a text or thought
//! part is a `thinking_signature` (before the text it came with), and each `functionCall` (a
//! complete call: Gemini does not stream arguments) is a `tool_call_start` (with its
//! signature), one `tool_call_delta` with the arguments as JSON and a `tool_call_end`. A part
//! an assistant message cannot carry (`inlineData`, `fileData`, `executableCode`,
//! `codeExecutionResult`, `functionResponse`, or a kind added later, named by its fields) makes
//! the response an [`Unsupported`](agent_types::BackendErrorKind::Unsupported) error naming
//! the part, never a silent drop; empty and metadata-only parts are skipped.
//!
//! | Gemini `finishReason`                                         | [`StopReason`](agent_types::StopReason) |
//! |---------------------------------------------------------------|------------------------------------------|
//! | `STOP`, `OTHER`, unknown values                               | `stop` (`tool_calls` when calls came)    |
//! | `MAX_TOKENS`                                                  | `length`                                 |
//! | `SAFETY`, `RECITATION`, `BLOCKLIST`, `PROHIBITED_CONTENT`, `SPII`, `LANGUAGE`, `IMAGE_SAFETY`, … | `content_filter` (text so far is kept) |
//! | `promptFeedback.blockReason` (the prompt was blocked)         | `content_filter`                         |
//! | `MALFORMED_FUNCTION_CALL`, `UNEXPECTED_TOOL_CALL`, `TOO_MANY_TOOL_CALLS`, `MALFORMED_RESPONSE` | an error ([`Server`](agent_types::BackendErrorKind::Server), retryable) |
//! | `MISSING_THOUGHT_SIGNATURE`                                   | an error ([`InvalidRequest`](agent_types::BackendErrorKind::InvalidRequest)) |
//!
//! The finish is reported when the body ends, after the last usage report.
//!
//! Usage is normalized to agentry's convention: `promptTokenCount` (which includes cached
//! tokens) plus `toolUsePromptTokenCount` is the input, `cachedContentTokenCount` the cache
//! read (implicit or explicit caching), `candidatesTokenCount + thoughtsTokenCount` the output
//! (Gemini counts thoughts apart from candidates) and `thoughtsTokenCount` the reasoning.
//!
//! Errors read `<code> <status>: <message>` (Gemini's `{"error": {code, message, status,
//! details}}`), whether they come as an HTTP error or inside a stream. `RESOURCE_EXHAUSTED` is
//! [`RateLimited`](agent_types::BackendErrorKind::RateLimited) with the wait from the
//! `RetryInfo` detail's `retryDelay`; `UNAVAILABLE` (the model is overloaded) is
//! [`Overloaded`](agent_types::BackendErrorKind::Overloaded); an invalid API key (reported as
//! `400 INVALID_ARGUMENT` with reason `API_KEY_INVALID`) is
//! [`Authentication`](agent_types::BackendErrorKind::Authentication).

mod decode;
mod request;
mod schema;
#[cfg(test)]
mod tests;

use std::time::Duration;

use agent_types::{BackendError, BackendErrorKind, Capabilities, ModelRequest, ReasoningEffort};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use crate::http::driver::{Prepared, Protocol};
use crate::http::status::{ProviderError, kind_for_status, response_error, str_field};
use crate::http::{Connection, HttpOptions, http_builders, secret_header};

/// The default base URL.
pub const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta";

/// The prefix of the tool-call ids the adapter makes when Gemini gives a call no id. Ids with
/// this prefix are never sent back to Gemini.
pub const GENERATED_ID_PREFIX: &str = "gemini_call_";

/// The thinking budget an effort level maps to for models that take only budgets
/// (`gemini-2…`): `minimal` 128 (the smallest budget every 2.5 model accepts), `low` 1,024,
/// `medium` 8,192, `high` 24,576 tokens (the largest 2.5 Flash accepts).
pub fn thinking_budget(effort: ReasoningEffort) -> u32 {
    match effort {
        ReasoningEffort::Minimal => 128,
        ReasoningEffort::Low => 1_024,
        ReasoningEffort::Medium => 8_192,
        ReasoningEffort::High => 24_576,
    }
}

/// A backend for Google Gemini `generateContent`.
///
/// ```
/// use agent_backends::gemini::Gemini;
///
/// let gemini = Gemini::new("my-key");
/// assert_eq!(gemini.base_url(), "https://generativelanguage.googleapis.com/v1beta");
/// // The JSON-array stream instead of server-sent events:
/// let gemini = gemini.with_sse(false);
/// # let _ = gemini;
/// ```
#[derive(Debug, Clone)]
pub struct Gemini {
    connection: Connection,
    capabilities: Capabilities,
    sse: bool,
}

impl Gemini {
    /// A backend at [`DEFAULT_BASE_URL`] with this API key.
    pub fn new(api_key: impl Into<String>) -> Self {
        Self {
            connection: Connection::new(DEFAULT_BASE_URL, Some(api_key.into())),
            capabilities: Capabilities {
                tools: true,
                streaming: true,
                parallel_tool_calls: true,
                thinking: true,
                // Implicit caching on 2.5+ models; reads are reported in the usage.
                prompt_caching: true,
                usage_reporting: true,
                structured_output: true,
                tool_search: false,
            },
            sse: true,
        }
    }

    /// Whether a streaming request asks for server-sent events (`alt=sse`, the default) or for
    /// the JSON array `streamGenerateContent` writes element by element without it. Both are
    /// decoded the same way; the array suits proxies that buffer `text/event-stream`.
    #[must_use]
    pub fn with_sse(mut self, sse: bool) -> Self {
        self.sse = sse;
        self
    }

    fn url(&self, request: &ModelRequest) -> String {
        let method = match (request.stream, self.sse) {
            (false, _) => ":generateContent",
            (true, true) => ":streamGenerateContent?alt=sse",
            (true, false) => ":streamGenerateContent",
        };
        let mut path = String::with_capacity(request.model.len() + method.len() + 9);
        path.push('/');
        if !request.model.contains('/') {
            path.push_str("models/");
        }
        path.push_str(&request.model);
        path.push_str(method);
        self.connection.url(&path)
    }
}

http_builders!(Gemini, "gcp.gemini");

impl Protocol for Gemini {
    type Decoder = decode::WireDecoder;

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn http(&self) -> &HttpOptions {
        &self.connection.http
    }

    fn prepare(&self, request: &ModelRequest) -> Result<Prepared, BackendError> {
        if request.model.trim().is_empty() {
            return Err(BackendError::new(
                BackendErrorKind::InvalidRequest,
                "the request names no model; set ModelRequest::model (e.g. `gemini-2.5-flash`)",
            ));
        }
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
                headers.insert(
                    HeaderName::from_static("x-goog-api-key"),
                    secret_header(key)?,
                );
            }
            Ok(headers)
        })?;
        Ok(Prepared {
            url: self.url(request),
            headers,
            body,
        })
    }

    fn decoder(&self, _request: &ModelRequest) -> decode::WireDecoder {
        decode::WireDecoder::default()
    }

    fn error(&self, status: u16, body: &[u8]) -> BackendError {
        response_error(status, body, describe)
    }
}

/// Reads Gemini's error JSON: `{"error": {code, message, status, details}}`, or the same
/// wrapped in an array (the JSON-array stream endpoint answers errors that way).
fn describe(json: &Value) -> Option<ProviderError> {
    let json = match json {
        Value::Array(items) => items.first()?,
        other => other,
    };
    let error = json.get("error")?;
    let message = str_field(error, "message").unwrap_or("");
    let status = str_field(error, "status");
    let code = error.get("code").and_then(Value::as_u64);
    let text = match (code, status) {
        (Some(code), Some(status)) => format!("{code} {status}: {message}"),
        (Some(code), None) => format!("{code}: {message}"),
        (None, Some(status)) => format!("{status}: {message}"),
        (None, None) if !message.is_empty() => message.to_owned(),
        (None, None) => return None,
    };
    let details = error.get("details").and_then(Value::as_array);
    let key_invalid = details.is_some_and(|details| {
        details
            .iter()
            .any(|detail| str_field(detail, "reason") == Some("API_KEY_INVALID"))
    });
    let kind = if key_invalid {
        Some(BackendErrorKind::Authentication)
    } else {
        status.and_then(kind_for_status_name)
    };
    let mut described = ProviderError::new(text).with_kind(kind);
    described.retry_after = details.and_then(|details| {
        details
            .iter()
            .filter(|detail| {
                str_field(detail, "@type")
                    .is_some_and(|kind| kind.ends_with("google.rpc.RetryInfo"))
            })
            .find_map(|detail| detail.get("retryDelay").and_then(parse_duration))
    });
    Some(described)
}

/// The error for an `{"error": …}` object that arrives inside a stream.
fn in_band_error(json: &Value) -> BackendError {
    match describe(json) {
        Some(described) => {
            let fallback = json
                .get("error")
                .and_then(|error| error.get("code"))
                .and_then(Value::as_u64)
                .and_then(|code| u16::try_from(code).ok())
                .map_or(BackendErrorKind::Server, kind_for_status);
            described.into_error(fallback)
        }
        None => BackendError::new(
            BackendErrorKind::Server,
            format!(
                "Gemini reported an error without a message: {}",
                crate::http::status::clip(&json.to_string(), 300)
            ),
        ),
    }
}

/// The kind a google.rpc status name implies, where it says more than the HTTP status.
fn kind_for_status_name(status: &str) -> Option<BackendErrorKind> {
    Some(match status {
        "RESOURCE_EXHAUSTED" => BackendErrorKind::RateLimited,
        "UNAVAILABLE" => BackendErrorKind::Overloaded,
        "UNAUTHENTICATED" | "PERMISSION_DENIED" => BackendErrorKind::Authentication,
        "DEADLINE_EXCEEDED" => BackendErrorKind::Timeout,
        "INVALID_ARGUMENT"
        | "FAILED_PRECONDITION"
        | "NOT_FOUND"
        | "OUT_OF_RANGE"
        | "ALREADY_EXISTS" => BackendErrorKind::InvalidRequest,
        "INTERNAL" | "UNKNOWN" | "DATA_LOSS" => BackendErrorKind::Server,
        _ => return None,
    })
}

/// A protobuf `Duration` in its JSON form (`"37s"`, `"0.5s"`), or the object form
/// (`{"seconds": 37, "nanos": 0}`) some gateways emit.
fn parse_duration(value: &Value) -> Option<Duration> {
    let seconds = match value {
        Value::String(text) => text.trim().strip_suffix('s')?.trim().parse::<f64>().ok()?,
        Value::Object(fields) => {
            let number = |key: &str| match fields.get(key) {
                Some(Value::String(text)) => text.parse::<f64>().ok(),
                Some(other) => other.as_f64(),
                None => Some(0.0),
            };
            number("seconds")? + number("nanos")? / 1e9
        }
        _ => return None,
    };
    // `try_`: `from_secs_f64` panics on a finite value too large for a `Duration`
    // (`"retryDelay": "1e30s"`, found by fuzzing); it also refuses negatives and NaN.
    Duration::try_from_secs_f64(seconds).ok()
}
