//! Ollama chat chunks (NDJSON lines, or one body with `done: true`) → stream events.

use std::borrow::Cow;

use agent_types::{BackendError, BackendErrorKind, StopReason, StreamEvent, ToolCallId, Usage};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

use super::{error_text, refined_kind};
use crate::content::unrepresentable_output;
use crate::http::driver::{Decoder, Frame};
use crate::http::status::{ProviderError, clip};

#[derive(Debug, Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    created_at: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    message: Option<ChunkMessage<'a>>,
    #[serde(default)]
    done: bool,
    #[serde(default, borrow)]
    done_reason: Option<Cow<'a, str>>,
    #[serde(default)]
    prompt_eval_count: Option<u64>,
    #[serde(default)]
    eval_count: Option<u64>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct ChunkMessage<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCallIn<'a>>>,
    /// Images in an answer (image-generation models): an assistant message cannot carry
    /// them, so the answer is refused rather than passed on without them.
    #[serde(default)]
    images: Option<Vec<IgnoredAny>>,
}

#[derive(Debug, Deserialize)]
struct ToolCallIn<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    function: FunctionIn<'a>,
}

#[derive(Debug, Deserialize)]
struct FunctionIn<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default)]
    arguments: Option<Value>,
}

/// Decodes one response: NDJSON chunks, or a non-streaming body (one chunk with `done: true`).
#[derive(Debug, Default)]
pub(crate) struct WireDecoder {
    started: bool,
    /// A hash of the first chunk's `created_at` and `model`, for the ids of calls without one.
    seed: Option<u32>,
    /// Tool calls so far, which is also the next call's index.
    calls: u32,
    done: bool,
}

impl Decoder for WireDecoder {
    fn frame(&mut self, frame: Frame<'_>, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        // NDJSON lines have no event name; an SSE-speaking proxy's named events are not chunks.
        if !matches!(frame.event, "" | "message") {
            return Ok(());
        }
        self.text(frame.data, out)
    }

    fn body(&mut self, body: &str, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        // A non-streaming answer is one chunk (perhaps pretty-printed by a proxy); a streamed
        // body sent as `application/json` is several, one per line. Both are a sequence of
        // JSON values.
        for chunk in serde_json::Deserializer::from_str(body).into_iter::<Chunk<'_>>() {
            let chunk = chunk.map_err(|error| malformed(&error, body))?;
            if self.done {
                break;
            }
            self.apply(chunk, out)?;
        }
        Ok(())
    }

    fn end(&mut self, _out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        // The finish went out with the `done` chunk; without one the body was cut off, which
        // the driver reports (with the partial message).
        Ok(())
    }
}

impl WireDecoder {
    fn text(&mut self, data: &str, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        let data = data.trim();
        if data.is_empty() || self.done {
            return Ok(());
        }
        let chunk: Chunk<'_> =
            serde_json::from_str(data).map_err(|error| malformed(&error, data))?;
        self.apply(chunk, out)
    }

    fn apply(&mut self, chunk: Chunk<'_>, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        if let Some(error) = &chunk.error {
            let message = error_text(error).unwrap_or_else(|| clip(&error.to_string(), 300));
            let kind = refined_kind(&message);
            return Err(ProviderError::new(message)
                .with_kind(kind)
                .into_error(BackendErrorKind::Server));
        }
        if !self.started {
            self.started = true;
            self.seed = chunk
                .created_at
                .as_deref()
                .map(|created| fnv1a(&[created, chunk.model.as_deref().unwrap_or("")]));
            out.push(StreamEvent::MessageStart {
                id: None,
                model: chunk.model.as_deref().map(str::to_owned),
            });
        }
        if let Some(message) = chunk.message {
            if message
                .images
                .as_ref()
                .is_some_and(|images| !images.is_empty())
            {
                return Err(unrepresentable_output(
                    "Ollama",
                    "images (`message.images`)",
                ));
            }
            if let Some(thinking) = message.thinking.filter(|text| !text.is_empty()) {
                out.push(StreamEvent::ThinkingDelta {
                    delta: thinking.into_owned(),
                });
            }
            if let Some(content) = message.content.filter(|text| !text.is_empty()) {
                out.push(StreamEvent::TextDelta {
                    delta: content.into_owned(),
                });
            }
            for call in message.tool_calls.unwrap_or_default() {
                self.tool_call(call, out)?;
            }
        }
        if chunk.done {
            self.done = true;
            let usage = Usage {
                input_tokens: chunk.prompt_eval_count,
                output_tokens: chunk.eval_count,
                ..Usage::default()
            };
            if !usage.is_unknown() {
                out.push(StreamEvent::Usage(usage));
            }
            let stop_reason = match chunk.done_reason.as_deref() {
                Some("length") => StopReason::Length,
                // `stop`, `load`/`unload` (no generation), absent, or reasons added later.
                _ if self.calls > 0 => StopReason::ToolCalls,
                _ => StopReason::Stop,
            };
            out.push(StreamEvent::Finish { stop_reason });
        }
        Ok(())
    }

    fn tool_call(
        &mut self,
        call: ToolCallIn<'_>,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), BackendError> {
        let index = self.calls;
        self.calls += 1;
        let id = match call.id.filter(|id| !id.is_empty()) {
            Some(id) => ToolCallId::from(id.into_owned()),
            None => match self.seed {
                Some(seed) => format!("call_{seed:08x}_{index}").into(),
                None => format!("call_{index}").into(),
            },
        };
        let arguments = match call.function.arguments {
            None | Some(Value::Null) => "{}".to_owned(),
            // OpenAI-style servers behind the same path send the arguments as JSON text.
            Some(Value::String(text)) => text,
            Some(arguments) => serde_json::to_string(&arguments).map_err(|error| {
                BackendError::new(
                    BackendErrorKind::Protocol,
                    format!(
                        "the arguments of Ollama's call to `{}` could not be re-encoded: {error}",
                        call.function.name
                    ),
                )
            })?,
        };
        out.push(StreamEvent::ToolCallStart {
            index,
            id,
            name: call.function.name.into_owned(),
            signature: None,
        });
        out.push(StreamEvent::ToolCallDelta {
            index,
            delta: arguments,
        });
        out.push(StreamEvent::ToolCallEnd { index });
        Ok(())
    }
}

fn malformed(error: &serde_json::Error, data: &str) -> BackendError {
    BackendError::new(
        BackendErrorKind::Protocol,
        format!(
            "an Ollama chat chunk is not valid ({error}): {}",
            clip(data, 200)
        ),
    )
}

/// 32-bit FNV-1a over the pieces (a stable hash: ids must not change between runs).
fn fnv1a(pieces: &[&str]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for piece in pieces {
        for byte in piece.bytes().chain(std::iter::once(0)) {
            hash ^= u32::from(byte);
            hash = hash.wrapping_mul(0x0100_0193);
        }
    }
    hash
}
