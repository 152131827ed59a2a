//! Decoding Chat Completions responses: streamed chunks, whole responses and error bodies.

use std::borrow::Cow;

use agent_types::{BackendError, BackendErrorKind, StopReason, StreamEvent, ToolCallId, Usage};
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::chunk::{self, ChunkParts};
use crate::content::unrepresentable_output;
use crate::http::driver::{Decoder, Frame};
use crate::http::status::{ProviderError, clip, kind_for_status, str_field};

/// How errors name the provider.
const PROVIDER: &str = "OpenAI Chat";

/// Decodes one response, streamed (`chat.completion.chunk`s) or whole (`chat.completion`).
///
/// Only the choice with index 0 is read: the adapter never asks for `n > 1`.
#[derive(Debug, Default)]
pub(crate) struct ChatDecoder {
    started: bool,
    /// Tool calls in the order they were first seen.
    calls: Vec<Call>,
    /// The next index to give a call when it starts.
    next_index: u32,
    /// The model refused (`refusal` text arrived).
    refused: bool,
    /// The choice's `finish_reason`, held until the usage chunk that follows it has arrived.
    finish_reason: Option<StopReason>,
    /// `finish` was pushed; the rest of the body is ignored.
    done: bool,
}

/// One tool call being assembled from its fragments.
#[derive(Debug)]
struct Call {
    /// The provider's `index`, when it sent one.
    wire: Option<u32>,
    id: Option<String>,
    name: Option<String>,
    /// Our index, given when the call starts.
    index: u32,
    started: bool,
    ended: bool,
    /// Argument text that arrived before the call could start (no name yet).
    pending: String,
}

impl ChatDecoder {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn start(&mut self, id: Option<String>, model: Option<String>, out: &mut Vec<StreamEvent>) {
        if !self.started {
            self.started = true;
            out.push(StreamEvent::MessageStart {
                id: id.filter(|id| !id.is_empty()),
                model: model.filter(|model| !model.is_empty()),
            });
        }
    }

    fn text(&mut self, text: String, out: &mut Vec<StreamEvent>) {
        if !text.is_empty() {
            out.push(StreamEvent::TextDelta { delta: text });
        }
    }

    /// A message's (or delta's) content, and the media beside it that an assistant message
    /// cannot carry (refused by name rather than dropped).
    fn content(
        &mut self,
        message: &mut WireMessage,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), BackendError> {
        if message.audio.is_some() {
            return Err(unrepresentable_output(PROVIDER, "audio (`message.audio`)"));
        }
        if message
            .images
            .as_ref()
            .is_some_and(|images| !images.is_empty())
        {
            return Err(unrepresentable_output(
                PROVIDER,
                "generated images (`message.images`)",
            ));
        }
        match message.content.take() {
            None => {}
            Some(Content::Text(text)) => self.text(text, out),
            Some(Content::Parts(parts)) => {
                for part in parts {
                    match part.kind.as_deref() {
                        None | Some("text") => self.text(part.text.unwrap_or_default(), out),
                        // Mistral's reasoning models: `{"type": "thinking", "thinking": [text
                        // parts]}`.
                        Some("thinking") => {
                            let text: String = match &part.thinking {
                                Some(Value::String(text)) => text.clone(),
                                Some(Value::Array(inner)) => inner
                                    .iter()
                                    .filter_map(|inner| inner.get("text")?.as_str())
                                    .collect(),
                                _ => String::new(),
                            };
                            self.reasoning(Some(text), None, out);
                        }
                        // Mistral's citation markers: metadata, no content.
                        Some("reference") => {}
                        Some(other) => {
                            return Err(unrepresentable_output(
                                PROVIDER,
                                &format!("a `{}` content part", clip(other, 40)),
                            ));
                        }
                    }
                }
            }
            Some(Content::Other(_)) => {
                return Err(BackendError::new(
                    BackendErrorKind::Protocol,
                    "the message content is neither text nor a list of content parts",
                ));
            }
        }
        Ok(())
    }

    /// Refusal text is kept, in its own block, and makes the stop reason `content_filter`.
    fn refusal(&mut self, text: Option<String>, out: &mut Vec<StreamEvent>) {
        if let Some(text) = text.filter(|text| !text.is_empty()) {
            self.refused = true;
            out.push(StreamEvent::RefusalDelta { delta: text });
        }
    }

    fn reasoning(
        &mut self,
        reasoning_content: Option<String>,
        reasoning: Option<String>,
        out: &mut Vec<StreamEvent>,
    ) {
        // Servers moving from `reasoning_content` to `reasoning` send both with the same text
        // for a while; read one of them so the text is not doubled.
        let text = reasoning_content
            .filter(|text| !text.is_empty())
            .or(reasoning);
        if let Some(text) = text.filter(|text| !text.is_empty()) {
            out.push(StreamEvent::ThinkingDelta { delta: text });
        }
    }

    /// One tool-call fragment (a streamed delta, or a whole call of a non-streamed message).
    fn fragment(&mut self, fragment: ToolCallFragment, out: &mut Vec<StreamEvent>) {
        let id = fragment.id.filter(|id| !id.is_empty());
        let function = fragment.function.unwrap_or_default();
        let name = function.name.filter(|name| !name.is_empty());
        let arguments = function.arguments.map(arguments_text).unwrap_or_default();

        // The call this fragment continues: the open one at its index, or, from a server that
        // sends no index, the latest open one.
        let open = self.calls.iter().rposition(|call| {
            !call.ended && (fragment.index.is_none() || call.wire == fragment.index)
        });
        // A different id means a new call, even at an index already used: some servers send
        // every call with index 0, or several complete calls at once. Without ids, a different
        // name does (a repeated name may be a server repeating it in every fragment).
        let continues = |call: &Call| match (&id, &call.id) {
            (Some(new), Some(old)) => new == old,
            (None, Some(_)) | (Some(_), None) => true,
            (None, None) => name.is_none() || call.name.is_none() || call.name == name,
        };
        let position = match open {
            Some(at) if continues(&self.calls[at]) => at,
            Some(at) => {
                self.end_call(at, out);
                self.new_call(fragment.index)
            }
            None => self.new_call(fragment.index),
        };

        let call = &mut self.calls[position];
        if call.id.is_none() {
            call.id = id;
        }
        if call.name.is_none() {
            call.name = name;
        }
        if call.pending.is_empty() {
            // The common case: the fragment's own string becomes the delta, not a copy of it.
            call.pending = arguments;
        } else {
            call.pending.push_str(&arguments);
        }
        if call.name.is_some() {
            self.start_call(position, out);
        }
    }

    fn new_call(&mut self, wire: Option<u32>) -> usize {
        self.calls.push(Call {
            wire,
            id: None,
            name: None,
            index: 0,
            started: false,
            ended: false,
            pending: String::new(),
        });
        self.calls.len() - 1
    }

    /// Starts the call if it has not started, and passes on the argument text it holds.
    fn start_call(&mut self, position: usize, out: &mut Vec<StreamEvent>) {
        let Some(call) = self.calls.get_mut(position) else {
            return;
        };
        if !call.started {
            call.started = true;
            call.index = self.next_index;
            self.next_index += 1;
            // A server that sends no id still needs one for the results to refer to.
            let id = call
                .id
                .clone()
                .unwrap_or_else(|| format!("call_{}", call.index));
            out.push(StreamEvent::ToolCallStart {
                index: call.index,
                id: ToolCallId::from(id),
                name: call.name.clone().unwrap_or_default(),
                signature: None,
            });
        }
        if !call.pending.is_empty() {
            out.push(StreamEvent::ToolCallDelta {
                index: call.index,
                delta: std::mem::take(&mut call.pending),
            });
        }
    }

    fn end_call(&mut self, position: usize, out: &mut Vec<StreamEvent>) {
        self.start_call(position, out);
        if let Some(call) = self.calls.get_mut(position)
            && !call.ended
        {
            call.ended = true;
            out.push(StreamEvent::ToolCallEnd { index: call.index });
        }
    }

    fn usage(&mut self, usage: Option<WireUsage>, out: &mut Vec<StreamEvent>) {
        if let Some(usage) = usage.map(WireUsage::normalize)
            && !usage.is_unknown()
        {
            out.push(StreamEvent::Usage(usage));
        }
    }

    fn finish_reason(&mut self, reason: Option<&str>) -> Result<(), BackendError> {
        let Some(reason) = reason else {
            return Ok(());
        };
        self.finish_reason = Some(match reason {
            "length" | "max_tokens" => StopReason::Length,
            "tool_calls" | "function_call" => StopReason::ToolCalls,
            "content_filter" => StopReason::ContentFilter,
            "error" => {
                return Err(BackendError::new(
                    BackendErrorKind::Server,
                    "the provider ended the answer with finish_reason `error` and gave no reason",
                ));
            }
            // `stop`, and the names some compatible servers use for a normal end (`eos`,
            // `end_turn`): the answer is complete.
            _ => StopReason::Stop,
        });
        Ok(())
    }

    /// Closes every call and pushes `finish`.
    fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        if self.done {
            return;
        }
        self.start(None, None, out);
        for position in 0..self.calls.len() {
            self.end_call(position, out);
        }
        let reason = self.finish_reason.unwrap_or(StopReason::Stop);
        let stop_reason = if self.refused {
            StopReason::ContentFilter
        } else if reason == StopReason::Stop && self.next_index > 0 {
            StopReason::ToolCalls
        } else {
            reason
        };
        self.done = true;
        out.push(StreamEvent::Finish { stop_reason });
    }

    fn chunk(&mut self, data: &str, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        let mut chunk = ChunkParts::default();
        chunk::parse(data, &mut chunk)
            .map_err(|error| malformed("a chat completion chunk", &error, data))?;
        if let Some(error) = chunk.error.take().filter(|error| !error.is_null()) {
            return Err(in_band_error(&error, data));
        }
        if !self.started {
            self.start(
                chunk.id.take().map(Cow::into_owned),
                chunk.model.take().map(Cow::into_owned),
                out,
            );
        }
        for choice in chunk.choices() {
            if choice.has_delta {
                let delta = &mut choice.delta;
                self.reasoning(delta.reasoning_content.take(), delta.reasoning.take(), out);
                self.content(delta, out)?;
                self.refusal(delta.refusal.take(), out);
                for fragment in delta.tool_calls.take().into_iter().flatten() {
                    self.fragment(fragment, out);
                }
            }
            if choice.finish_reason.is_some() {
                self.finish_reason(choice.finish_reason.as_deref())?;
                // The choice is complete: its calls can be run while the usage chunk is
                // still on its way.
                for position in 0..self.calls.len() {
                    self.end_call(position, out);
                }
            }
        }
        // Groq reported usage under `x_groq` before it supported `stream_options`.
        let usage = chunk
            .usage
            .take()
            .map(|usage| *usage)
            .or_else(|| chunk.x_groq.take().and_then(|x| x.usage));
        self.usage(usage, out);
        Ok(())
    }
}

impl Decoder for ChatDecoder {
    fn frame(&mut self, frame: Frame<'_>, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        if self.done {
            return Ok(());
        }
        let data = crate::framing::trim_data(frame.data);
        match frame.event {
            // Groq (and proxies) report a failure as `event: error`.
            "error" => return Err(in_band_error_text(data)),
            "" | "message" => {}
            // Chat Completions names no events; anything else is a proxy's addition.
            _ => return Ok(()),
        }
        match data {
            "" => Ok(()),
            // `[DONE]` ends the stream, after the usage chunk.
            "[DONE]" => {
                self.finish(out);
                Ok(())
            }
            _ => self.chunk(data, out),
        }
    }

    fn body(&mut self, body: &str, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        let response: Response = serde_json::from_str(body)
            .map_err(|error| malformed("the chat completion", &error, body))?;
        if let Some(error) = response.error.filter(|error| !error.is_null()) {
            return Err(in_band_error(&error, body));
        }
        let mut choices = response.choices.into_iter().flatten();
        let Some(choice) = choices.find(|choice| choice.index.unwrap_or(0) == 0) else {
            return Err(BackendError::new(
                BackendErrorKind::Protocol,
                format!(
                    "the chat completion has no choices: {}",
                    clip(body.trim(), 200)
                ),
            ));
        };
        self.start(response.id, response.model, out);
        if let Some(mut message) = choice.message {
            self.reasoning(
                message.reasoning_content.take(),
                message.reasoning.take(),
                out,
            );
            self.content(&mut message, out)?;
            self.refusal(message.refusal, out);
            for (position, mut call) in message.tool_calls.into_iter().flatten().enumerate() {
                // A whole message's calls carry no index; their order is their index.
                call.index = u32::try_from(position).ok();
                self.fragment(call, out);
            }
        }
        self.finish_reason(choice.finish_reason.as_deref())?;
        for position in 0..self.calls.len() {
            self.end_call(position, out);
        }
        self.usage(response.usage, out);
        self.finish(out);
        Ok(())
    }

    fn end(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        // Not every compatible server sends `[DONE]`; a finish reason says the answer is
        // complete. Without either, the body was cut short and the driver reports it.
        if !self.done && self.finish_reason.is_some() {
            self.finish(out);
        }
        Ok(())
    }
}

fn malformed(what: &str, error: &serde_json::Error, data: &str) -> BackendError {
    BackendError::new(
        BackendErrorKind::Protocol,
        format!(
            "could not parse {what}: {error}: {}",
            clip(data.trim(), 200)
        ),
    )
}

/// The error in an `event: error` frame.
fn in_band_error_text(data: &str) -> BackendError {
    match serde_json::from_str::<Value>(data) {
        Ok(value) => in_band_error(&value, data),
        Err(_) => BackendError::new(
            BackendErrorKind::Server,
            format!("the provider reported an error: {}", clip(data, 300)),
        ),
    }
}

/// An error reported inside a response that started with HTTP 200.
fn in_band_error(value: &Value, data: &str) -> BackendError {
    match describe(value) {
        Some(described) => {
            let kind = described.kind.or(described.inferred);
            ProviderError::new(described.message)
                .with_kind(kind)
                .into_error(BackendErrorKind::Server)
        }
        None => BackendError::new(
            BackendErrorKind::Server,
            format!("the provider reported an error: {}", clip(data.trim(), 300)),
        ),
    }
}

/// What an OpenAI-style error object says.
#[derive(Debug)]
pub(super) struct Described {
    /// `<type>/<code>: <message>`, leaving out what is missing.
    pub(super) message: String,
    /// A kind the body states beyond any HTTP status (an exhausted quota).
    pub(super) kind: Option<BackendErrorKind>,
    /// The kind the body implies when there is no HTTP status to go by (mid-stream).
    inferred: Option<BackendErrorKind>,
}

/// Reads `{"error": {"message", "type", "code"}}`, and the shapes compatible servers use
/// instead: `{"error": "text"}`, the error object at the top level (vLLM), `{"detail": "text"}`.
pub(super) fn describe(value: &Value) -> Option<Described> {
    let error = match value.get("error") {
        Some(error) if !error.is_null() => error,
        _ if value.get("message").is_some() => value,
        _ => {
            let detail = value.get("detail")?.as_str()?;
            return Some(Described {
                message: detail.to_owned(),
                kind: None,
                inferred: None,
            });
        }
    };
    if let Some(text) = error.as_str() {
        return Some(Described {
            message: text.to_owned(),
            kind: None,
            inferred: None,
        });
    }
    let message = match error.get("message") {
        Some(Value::String(text)) => text.clone(),
        Some(other) if !other.is_null() => other.to_string(),
        _ => clip(&error.to_string(), 300),
    };
    let kind_name = str_field(error, "type").filter(|name| !name.is_empty());
    let code = match error.get("code") {
        Some(Value::String(code)) if !code.is_empty() => Some(code.clone()),
        Some(Value::Number(code)) => Some(code.to_string()),
        _ => None,
    };
    let prefix = match (kind_name, &code) {
        (Some(name), Some(code)) => format!("{name}/{code}"),
        (Some(name), None) => name.to_owned(),
        (None, Some(code)) => code.clone(),
        (None, None) => String::new(),
    };
    let message = if prefix.is_empty() {
        message
    } else {
        format!("{prefix}: {message}")
    };

    let quota = [kind_name, code.as_deref()]
        .into_iter()
        .flatten()
        .any(|name| name == "insufficient_quota");
    let kind = quota.then_some(BackendErrorKind::QuotaExceeded);
    // Mid-stream there is no HTTP status: Groq puts one in the body (`status_code`), OpenRouter
    // in a numeric `code`; otherwise the type names the failure.
    let status = error
        .get("status_code")
        .and_then(Value::as_u64)
        .or_else(|| error.get("code").and_then(Value::as_u64))
        .and_then(|status| u16::try_from(status).ok())
        .filter(|status| (400..600).contains(status));
    let inferred = match (status, kind_name) {
        (Some(status), _) => Some(kind_for_status(status)),
        (None, Some("invalid_request_error")) => Some(BackendErrorKind::InvalidRequest),
        (None, Some("authentication_error" | "permission_error")) => {
            Some(BackendErrorKind::Authentication)
        }
        (None, Some(name)) if name.starts_with("rate_limit") => Some(BackendErrorKind::RateLimited),
        (None, Some(name)) if name.starts_with("overloaded") => Some(BackendErrorKind::Overloaded),
        _ => None,
    };
    Some(Described {
        message,
        kind,
        inferred,
    })
}

/// The text of a call's `arguments`: a string as sent, anything else (a server that sends
/// an object) as its JSON.
fn arguments_text(arguments: Value) -> String {
    match arguments {
        Value::String(text) => text,
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A string field some servers fill with something else; anything but a string reads as
/// absent rather than failing the whole chunk.
pub(super) fn lenient_string<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    Ok(match Option::<Value>::deserialize(deserializer)? {
        Some(Value::String(text)) => Some(text),
        _ => None,
    })
}

#[derive(Deserialize)]
pub(super) struct XGroq {
    pub(super) usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Response {
    id: Option<String>,
    model: Option<String>,
    choices: Option<Vec<ResponseChoice>>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ResponseChoice {
    index: Option<u32>,
    message: Option<WireMessage>,
    finish_reason: Option<String>,
}

/// A whole message or a streamed delta: the same fields.
#[derive(Deserialize, Default)]
pub(super) struct WireMessage {
    pub(super) content: Option<Content>,
    #[serde(default, deserialize_with = "lenient_string")]
    pub(super) refusal: Option<String>,
    /// DeepSeek, vLLM (older versions), llama.cpp.
    #[serde(default, deserialize_with = "lenient_string")]
    pub(super) reasoning_content: Option<String>,
    /// Groq, OpenRouter, vLLM (newer versions).
    #[serde(default, deserialize_with = "lenient_string")]
    pub(super) reasoning: Option<String>,
    pub(super) tool_calls: Option<Vec<ToolCallFragment>>,
    /// Audio output (`modalities: ["audio"]`): refused, an assistant message has no audio.
    pub(super) audio: Option<IgnoredAny>,
    /// Generated images (OpenRouter's image models): refused likewise.
    pub(super) images: Option<Vec<IgnoredAny>>,
}

/// Message content: a string, or (some compatible servers) a list of typed parts; anything
/// else is `Other`.
pub(super) enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
    Other(serde::de::IgnoredAny),
}

// By hand rather than `#[serde(untagged)]`, which buffers every value into an intermediate
// tree before trying each variant: per text delta, an allocation and a copy (issue 16).
impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;

        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Content;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("message content")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Content, E> {
                Ok(Content::Text(text.to_owned()))
            }

            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<Content, E> {
                Ok(Content::Text(text))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Content, A::Error> {
                // Rare (some compatible servers), so read as values first: as untagged did, a
                // list that is not of parts is `Other`, not an error.
                let values =
                    Vec::<Value>::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
                let parts: Result<Vec<ContentPart>, _> =
                    values.into_iter().map(ContentPart::deserialize).collect();
                Ok(parts.map_or(Content::Other(IgnoredAny), Content::Parts))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Content, A::Error> {
                IgnoredAny::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(Content::Other)
            }

            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Content, E> {
                Ok(Content::Other(IgnoredAny))
            }

            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Content, E> {
                Ok(Content::Other(IgnoredAny))
            }

            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Content, E> {
                Ok(Content::Other(IgnoredAny))
            }

            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Content, E> {
                Ok(Content::Other(IgnoredAny))
            }

            fn visit_unit<E: serde::de::Error>(self) -> Result<Content, E> {
                Ok(Content::Other(IgnoredAny))
            }
        }

        deserializer.deserialize_any(Visit)
    }
}

#[derive(Deserialize)]
pub(super) struct ContentPart {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(default, deserialize_with = "lenient_string")]
    text: Option<String>,
    /// The text parts (or, from some servers, the text) of a `thinking` part.
    #[serde(default)]
    thinking: Option<Value>,
}

#[derive(Deserialize)]
pub(super) struct ToolCallFragment {
    index: Option<u32>,
    id: Option<String>,
    function: Option<FunctionFragment>,
}

#[derive(Deserialize, Default)]
struct FunctionFragment {
    name: Option<String>,
    arguments: Option<Value>,
}

#[derive(Deserialize)]
pub(super) struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<PromptDetails>,
    completion_tokens_details: Option<CompletionDetails>,
    /// DeepSeek's name for cached prompt tokens.
    prompt_cache_hit_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct PromptDetails {
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    reasoning_tokens: Option<u64>,
}

impl WireUsage {
    /// OpenAI's counts already follow our convention: `prompt_tokens` includes cached tokens
    /// and `completion_tokens` includes reasoning tokens.
    fn normalize(self) -> Usage {
        Usage {
            input_tokens: self.prompt_tokens,
            output_tokens: self.completion_tokens,
            cache_read_tokens: self
                .prompt_tokens_details
                .and_then(|details| details.cached_tokens)
                .or(self.prompt_cache_hit_tokens),
            // OpenAI does not bill cache writes separately and reports no write counts.
            cache_write_5m_tokens: None,
            cache_write_1h_tokens: None,
            reasoning_tokens: self
                .completion_tokens_details
                .and_then(|details| details.reasoning_tokens),
        }
    }
}

#[cfg(test)]
mod content_tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    // `Content` is read by hand now (issue 16); what it accepts is what `untagged` accepted:
    // a string, a list of parts, and anything else as `Other` (refused by name later).
    #[test]
    fn content_reads_as_the_untagged_enum_did() {
        let read = |json: &str| serde_json::from_str::<Content>(json).unwrap();
        assert!(matches!(read(r#""hé\n""#), Content::Text(text) if text == "hé\n"));
        let Content::Parts(parts) = read(r#"[{"type": "text", "text": "a"}, {"type": "x"}]"#)
        else {
            panic!("parts")
        };
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].text.as_deref(), Some("a"));
        for other in [
            r#"["not a part"]"#,
            "5",
            "true",
            r#"{"a": [1]}"#,
            "[1, [2]]",
        ] {
            assert!(matches!(read(other), Content::Other(_)), "{other}");
        }
        // A chunk around it still parses whole after an `Other`.
        let mut chunk = ChunkParts::default();
        chunk::parse(
            r#"{"id": "c", "choices": [{"index": 0, "delta": {"content": [1, {"b": 2}]}}], "model": "m"}"#,
            &mut chunk,
        )
        .unwrap();
        assert_eq!(chunk.model.as_deref(), Some("m"));
    }
}
