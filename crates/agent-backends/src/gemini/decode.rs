//! Gemini responses (one `GenerateContentResponse`, or a stream of them) → stream events.

use std::borrow::Cow;

use agent_types::{BackendError, BackendErrorKind, StopReason, StreamEvent, ToolCallId, Usage};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

use super::{GENERATED_ID_PREFIX, in_band_error};
use crate::content::unrepresentable_output;
use crate::http::driver::{Decoder, Frame};
use crate::http::status::clip;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response<'a> {
    #[serde(default, borrow)]
    candidates: Vec<Candidate<'a>>,
    #[serde(default, borrow)]
    prompt_feedback: Option<PromptFeedback<'a>>,
    #[serde(default)]
    usage_metadata: Option<UsageMetadata>,
    #[serde(default, borrow)]
    model_version: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    response_id: Option<Cow<'a, str>>,
    /// An error reported inside the stream.
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate<'a> {
    #[serde(default, borrow)]
    content: Option<Content<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    finish_message: Option<Cow<'a, str>>,
    #[serde(default)]
    index: Option<u32>,
}

#[derive(Debug, Deserialize)]
struct Content<'a> {
    #[serde(default, borrow)]
    parts: Vec<Part<'a>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default)]
    thought: Option<bool>,
    #[serde(default, borrow)]
    thought_signature: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function_call: Option<FunctionCall<'a>>,
    // Content an assistant message cannot carry: read only to refuse the answer by name
    // rather than drop the part (an image-generation model's picture, code-execution output).
    #[serde(default, borrow)]
    inline_data: Option<Media<'a>>,
    #[serde(default, borrow)]
    file_data: Option<Media<'a>>,
    #[serde(default)]
    executable_code: Option<IgnoredAny>,
    #[serde(default)]
    code_execution_result: Option<IgnoredAny>,
    #[serde(default)]
    function_response: Option<IgnoredAny>,
}

/// The media type of an `inlineData` or `fileData` part (its bytes are skipped unread).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Media<'a> {
    #[serde(default, borrow)]
    mime_type: Option<Cow<'a, str>>,
}

/// The part fields that carry content; a part with none of them and a field not listed in
/// [`PART_METADATA`] is of a kind agentry does not know.
const PART_CONTENT: &[&str] = &[
    "text",
    "thoughtSignature",
    "functionCall",
    "inlineData",
    "fileData",
    "executableCode",
    "codeExecutionResult",
    "functionResponse",
];

/// Part fields that only describe the part.
const PART_METADATA: &[&str] = &[
    "thought",
    "videoMetadata",
    "partMetadata",
    "mediaResolution",
];

#[derive(Debug, Deserialize)]
struct FunctionCall<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default)]
    args: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback<'a> {
    #[serde(default, borrow)]
    block_reason: Option<Cow<'a, str>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct UsageMetadata {
    prompt_token_count: Option<u64>,
    candidates_token_count: Option<u64>,
    thoughts_token_count: Option<u64>,
    cached_content_token_count: Option<u64>,
    tool_use_prompt_token_count: Option<u64>,
}

impl UsageMetadata {
    fn normalized(&self) -> Usage {
        Usage {
            input_tokens: add(self.prompt_token_count, self.tool_use_prompt_token_count),
            output_tokens: add(self.candidates_token_count, self.thoughts_token_count),
            cache_read_tokens: self.cached_content_token_count,
            reasoning_tokens: self.thoughts_token_count,
            ..Usage::default()
        }
    }
}

fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}

/// How the response ended, as far as the chunks so far say.
#[derive(Debug)]
enum Ending {
    /// A candidate's `finishReason` and `finishMessage`.
    Finished {
        reason: String,
        message: Option<String>,
    },
    /// `promptFeedback.blockReason`: the prompt was refused before any candidate.
    Blocked(String),
}

/// Decodes one response: a `generateContent` body, or the chunks of a stream (SSE events or
/// JSON-array elements, each one `GenerateContentResponse`).
#[derive(Debug, Default)]
pub(crate) struct WireDecoder {
    started: bool,
    response_id: Option<String>,
    /// Tool calls so far, which is also the next call's index.
    calls: u32,
    ending: Option<Ending>,
    /// The last usage reported, so an unchanged report is not repeated.
    usage: Option<Usage>,
    done: bool,
}

impl Decoder for WireDecoder {
    fn frame(&mut self, frame: Frame<'_>, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        // Gemini never names its events; a named one (a proxy's keep-alive `ping`) carries
        // no response chunk.
        if !matches!(frame.event, "" | "message") {
            return Ok(());
        }
        let data = crate::framing::trim_data(frame.data);
        if data.is_empty() || self.done {
            return Ok(());
        }
        let response: Response<'_> = serde_json::from_str(data).map_err(|error| {
            BackendError::new(
                BackendErrorKind::Protocol,
                format!(
                    "a Gemini stream chunk is not a valid GenerateContentResponse ({error}): {}",
                    clip(data, 200)
                ),
            )
        })?;
        self.apply(response, data, out)
    }

    fn body(&mut self, body: &str, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        let malformed = |error: serde_json::Error| {
            BackendError::new(
                BackendErrorKind::Protocol,
                format!(
                    "the Gemini response is not a valid GenerateContentResponse ({error}): {}",
                    clip(body, 200)
                ),
            )
        };
        if body.trim_start().starts_with('[') {
            // A streamed body read whole: the same responses, one after another.
            let responses: Vec<Response<'_>> = serde_json::from_str(body).map_err(malformed)?;
            for response in responses {
                self.apply(response, body, out)?;
            }
            return Ok(());
        }
        let response: Response<'_> = serde_json::from_str(body).map_err(malformed)?;
        self.apply(response, body, out)
    }

    fn end(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        if self.done {
            return Ok(());
        }
        let stop_reason = match self.ending.take() {
            Some(Ending::Finished { reason, message }) => stop_reason(&reason, message)?,
            Some(Ending::Blocked(reason)) => {
                tracing::debug!(%reason, "Gemini blocked the prompt");
                StopReason::ContentFilter
            }
            // No finish reason: the body was cut off. The driver reports that, with the
            // partial message.
            None => return Ok(()),
        };
        let stop_reason = if stop_reason == StopReason::Stop && self.calls > 0 {
            StopReason::ToolCalls
        } else {
            stop_reason
        };
        self.done = true;
        out.push(StreamEvent::Finish { stop_reason });
        Ok(())
    }
}

impl WireDecoder {
    /// Applies one response; `raw` is the text it was read from, reread only to name a part
    /// of an unknown kind.
    fn apply(
        &mut self,
        response: Response<'_>,
        raw: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), BackendError> {
        if let Some(error) = &response.error {
            let mut wrapped = serde_json::Map::new();
            wrapped.insert("error".to_owned(), error.clone());
            return Err(in_band_error(&Value::Object(wrapped)));
        }
        if self.response_id.is_none() {
            self.response_id = response.response_id.as_deref().map(str::to_owned);
        }
        if !self.started {
            self.started = true;
            out.push(StreamEvent::MessageStart {
                id: self.response_id.clone(),
                model: response.model_version.map(Cow::into_owned),
            });
        }
        // Only the first candidate: agentry asks for one (`candidateCount` is not sent).
        if let Some(candidate) = response
            .candidates
            .into_iter()
            .find(|candidate| candidate.index.unwrap_or(0) == 0)
        {
            if let Some(content) = candidate.content {
                for part in content.parts {
                    self.part(part, raw, out)?;
                }
            }
            if let Some(reason) = candidate.finish_reason {
                self.ending = Some(Ending::Finished {
                    reason: reason.into_owned(),
                    message: candidate.finish_message.map(Cow::into_owned),
                });
            }
        }
        if let Some(reason) = response
            .prompt_feedback
            .and_then(|feedback| feedback.block_reason)
            && self.ending.is_none()
        {
            self.ending = Some(Ending::Blocked(reason.into_owned()));
        }
        if let Some(metadata) = &response.usage_metadata {
            let usage = metadata.normalized();
            if !usage.is_unknown() && self.usage != Some(usage) {
                self.usage = Some(usage);
                out.push(StreamEvent::Usage(usage));
            }
        }
        Ok(())
    }

    fn part(
        &mut self,
        part: Part<'_>,
        raw: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), BackendError> {
        if let Some(what) = unrepresentable(&part) {
            return Err(unrepresentable_output("Gemini", &what));
        }
        if part.text.is_none() && part.function_call.is_none() && part.thought_signature.is_none() {
            // None of the fields we read: an empty part (nothing to lose), or one of a kind
            // added after this was written (refused, by its field names).
            return match unknown_part(raw) {
                Some(fields) => Err(unrepresentable_output(
                    "Gemini",
                    &format!("a part of a kind agentry does not know (fields {fields})"),
                )),
                None => Ok(()),
            };
        }
        let signature = part.thought_signature.map(Cow::into_owned);
        if let Some(call) = part.function_call {
            let index = self.calls;
            self.calls += 1;
            let id = match call.id.filter(|id| !id.is_empty()) {
                Some(id) => ToolCallId::from(id.into_owned()),
                None => self.generated_id(index),
            };
            let arguments = match &call.args {
                None | Some(Value::Null) => "{}".to_owned(),
                Some(args) => serde_json::to_string(args).map_err(|error| {
                    BackendError::new(
                        BackendErrorKind::Protocol,
                        format!("the arguments of Gemini's call to `{}` could not be re-encoded: {error}", call.name),
                    )
                })?,
            };
            out.push(StreamEvent::ToolCallStart {
                index,
                id,
                name: call.name.into_owned(),
                signature,
            });
            out.push(StreamEvent::ToolCallDelta {
                index,
                delta: arguments,
            });
            out.push(StreamEvent::ToolCallEnd { index });
            return Ok(());
        }
        let text = part.text.unwrap_or_default();
        if part.thought == Some(true) {
            if !text.is_empty() {
                out.push(StreamEvent::ThinkingDelta {
                    delta: text.into_owned(),
                });
            }
            if let Some(signature) = signature {
                out.push(StreamEvent::ThinkingSignature {
                    signature,
                    id: None,
                });
            }
        } else {
            // The signature goes first: it becomes a signed thinking block just before the
            // text, which is where the request builder puts it back.
            if let Some(signature) = signature {
                out.push(StreamEvent::ThinkingSignature {
                    signature,
                    id: None,
                });
            }
            if !text.is_empty() {
                out.push(StreamEvent::TextDelta {
                    delta: text.into_owned(),
                });
            }
        }
        Ok(())
    }

    /// An id for a call Gemini gave none: stable for the response, unique across responses.
    fn generated_id(&self, index: u32) -> ToolCallId {
        match &self.response_id {
            Some(response) => format!("{GENERATED_ID_PREFIX}{response}_{index}").into(),
            None => format!("{GENERATED_ID_PREFIX}{index}").into(),
        }
    }
}

/// What a part holds that an assistant message cannot carry, named for the error.
fn unrepresentable(part: &Part<'_>) -> Option<String> {
    let media = |field: &str, media: &Media<'_>| match media.mime_type.as_deref() {
        Some(mime) => format!("{field} part ({mime})"),
        None => format!("{field} part"),
    };
    if let Some(data) = &part.inline_data {
        return Some(media("an inlineData", data));
    }
    if let Some(data) = &part.file_data {
        return Some(media("a fileData", data));
    }
    if part.executable_code.is_some() {
        return Some("an executableCode part (code the model ran with code execution)".into());
    }
    if part.code_execution_result.is_some() {
        return Some("a codeExecutionResult part".into());
    }
    if part.function_response.is_some() {
        return Some("a functionResponse part".into());
    }
    None
}

/// The field names of the first part in `raw` (one response, or an array of them) that has
/// no content field we know and a field that is not metadata; `None` when there is none.
/// Only read on the way to an error, so the common path never parses twice.
#[cold]
fn unknown_part(raw: &str) -> Option<String> {
    let value: Value = serde_json::from_str(raw).ok()?;
    let responses = match &value {
        Value::Array(items) => items.iter().collect(),
        one => vec![one],
    };
    responses
        .into_iter()
        .filter_map(|response| response.get("candidates")?.as_array())
        .flatten()
        .filter_map(|candidate| candidate.get("content")?.get("parts")?.as_array())
        .flatten()
        .filter_map(Value::as_object)
        .find_map(|part| {
            let unknown: Vec<&str> = part
                .keys()
                .map(String::as_str)
                .filter(|key| !PART_METADATA.contains(key))
                .collect();
            let has_content = unknown.iter().any(|key| PART_CONTENT.contains(key));
            (!has_content && !unknown.is_empty()).then(|| format!("`{}`", unknown.join("`, `")))
        })
}

/// The stop reason for a `finishReason`, or the error it reports.
fn stop_reason(reason: &str, message: Option<String>) -> Result<StopReason, BackendError> {
    Ok(match reason {
        "STOP" => StopReason::Stop,
        "MAX_TOKENS" => StopReason::Length,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "LANGUAGE"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => StopReason::ContentFilter,
        "MALFORMED_FUNCTION_CALL"
        | "UNEXPECTED_TOOL_CALL"
        | "TOO_MANY_TOOL_CALLS"
        | "MALFORMED_RESPONSE"
        | "MISSING_THOUGHT_SIGNATURE" => {
            // The model's output was unusable (retrying may help), or, for a missing
            // signature, our request was (retrying does not).
            let kind = if reason == "MISSING_THOUGHT_SIGNATURE" {
                BackendErrorKind::InvalidRequest
            } else {
                BackendErrorKind::Server
            };
            let text = match message {
                Some(message) if !message.is_empty() => {
                    format!("Gemini ended the response with {reason}: {message}")
                }
                _ => format!("Gemini ended the response with {reason}"),
            };
            return Err(BackendError::new(kind, text));
        }
        // OTHER, FINISH_REASON_UNSPECIFIED and reasons added after this was written: the
        // model stopped, and nothing says it failed.
        other => {
            tracing::debug!(
                reason = other,
                "unfamiliar Gemini finishReason, read as stop"
            );
            StopReason::Stop
        }
    })
}
