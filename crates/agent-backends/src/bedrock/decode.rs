//! Decoding a Converse response (one JSON document) or a ConverseStream (event-stream
//! messages, each a JSON payload named by its event type).

use agent_types::{BackendError, BackendErrorKind, StopReason, StreamEvent, ToolCallId, Usage};
use serde::Deserialize;
use serde_json::Value;

use crate::content::unrepresentable_output;
use crate::http::driver::{Decoder, Frame};
use crate::http::status::clip;

/// Converse's usage object. `inputTokens` excludes the cache (as Anthropic's does).
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_write_input_tokens: Option<u64>,
}

impl WireUsage {
    /// agentry's convention: input includes cache reads and writes.
    fn normalize(self) -> Usage {
        let input = match (
            self.input_tokens,
            self.cache_read_input_tokens,
            self.cache_write_input_tokens,
        ) {
            (None, None, None) => None,
            (a, b, c) => Some(
                a.unwrap_or(0)
                    .saturating_add(b.unwrap_or(0))
                    .saturating_add(c.unwrap_or(0)),
            ),
        };
        Usage {
            input_tokens: input,
            output_tokens: self.output_tokens,
            cache_read_tokens: self.cache_read_input_tokens,
            // Bedrock's cache points are five-minute entries unless a ttl says otherwise; the
            // usage does not break writes down.
            cache_write_5m_tokens: self.cache_write_input_tokens,
            cache_write_1h_tokens: None,
            reasoning_tokens: None,
        }
    }
}

/// A whole content block of a Converse response.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WireBlock {
    text: Option<String>,
    tool_use: Option<WireToolUse>,
    reasoning_content: Option<WireReasoning>,
    // Anything else (citations, guard content, images the model made) is named by its key.
    #[serde(flatten)]
    other: serde_json::Map<String, Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WireToolUse {
    tool_use_id: Option<String>,
    name: Option<String>,
    input: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WireReasoning {
    reasoning_text: Option<ReasoningText>,
    redacted_content: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ReasoningText {
    text: Option<String>,
    signature: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WireResponse {
    output: Option<WireOutput>,
    stop_reason: Option<String>,
    usage: Option<WireUsage>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireOutput {
    message: Option<WireMessage>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireMessage {
    content: Vec<WireBlock>,
}

/// One ConverseStream event payload; which fields are set depends on the event type.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WireEvent {
    content_block_index: Option<u32>,
    start: Option<WireStart>,
    delta: Option<WireDelta>,
    stop_reason: Option<String>,
    usage: Option<WireUsage>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WireStart {
    tool_use: Option<WireToolUse>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WireDelta {
    text: Option<String>,
    tool_use: Option<ToolUseDelta>,
    reasoning_content: Option<ReasoningDelta>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ToolUseDelta {
    input: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct ReasoningDelta {
    text: Option<String>,
    signature: Option<String>,
    redacted_content: Option<String>,
}

/// Converse's stop reason, normalized.
fn stop_reason(raw: &str) -> StopReason {
    match raw {
        "max_tokens" | "model_context_window_exceeded" => StopReason::Length,
        "tool_use" => StopReason::ToolCalls,
        "guardrail_intervened" | "content_filtered" => StopReason::ContentFilter,
        // end_turn, stop_sequence, and reasons added after this was written.
        _ => StopReason::Stop,
    }
}

#[derive(Debug)]
enum Open {
    Text,
    Reasoning { signature: String },
    Tool { index: u32, arguments: bool },
}

/// Decodes one response.
#[derive(Debug, Default)]
pub(crate) struct WireDecoder {
    started: bool,
    blocks: Vec<(u32, Open)>,
    calls: u32,
    stop: Option<StopReason>,
    finished: bool,
}

fn malformed(what: &str, data: &str, error: &serde_json::Error) -> BackendError {
    BackendError::new(
        BackendErrorKind::Protocol,
        format!(
            "Bedrock sent {what} that could not be parsed ({error}): {}",
            clip(data, 200)
        ),
    )
}

impl WireDecoder {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn start(&mut self, out: &mut Vec<StreamEvent>) {
        if !self.started {
            self.started = true;
            out.push(StreamEvent::MessageStart {
                id: None,
                model: None,
            });
        }
    }

    fn open_tool(&mut self, at: u32, tool: WireToolUse, out: &mut Vec<StreamEvent>) -> u32 {
        let call = self.calls;
        self.calls += 1;
        out.push(StreamEvent::ToolCallStart {
            index: call,
            id: ToolCallId::from(tool.tool_use_id.unwrap_or_default()),
            name: tool.name.unwrap_or_default(),
            signature: None,
        });
        self.blocks.retain(|(index, _)| *index != at);
        self.blocks.push((
            at,
            Open::Tool {
                index: call,
                arguments: false,
            },
        ));
        call
    }

    fn delta(&mut self, at: u32, delta: WireDelta, out: &mut Vec<StreamEvent>) {
        let position = self.blocks.iter().position(|(index, _)| *index == at);
        // Text and reasoning blocks arrive without a start event: the first delta opens them.
        let position = match position {
            Some(position) => position,
            None => {
                let open = if delta.reasoning_content.is_some() {
                    Open::Reasoning {
                        signature: String::new(),
                    }
                } else if delta.text.is_some() {
                    Open::Text
                } else {
                    tracing::debug!(at, "Bedrock sent a delta for a block that never started");
                    return;
                };
                self.blocks.push((at, open));
                self.blocks.len() - 1
            }
        };
        let (_, open) = &mut self.blocks[position];
        match open {
            Open::Text => {
                if let Some(text) = delta.text.filter(|text| !text.is_empty()) {
                    out.push(StreamEvent::TextDelta { delta: text });
                }
            }
            Open::Reasoning { signature } => {
                if let Some(reasoning) = delta.reasoning_content {
                    if let Some(text) = reasoning.text.filter(|text| !text.is_empty()) {
                        out.push(StreamEvent::ThinkingDelta { delta: text });
                    }
                    if let Some(more) = reasoning.signature {
                        signature.push_str(&more);
                    }
                    if let Some(data) = reasoning.redacted_content {
                        out.push(StreamEvent::RedactedThinking { data });
                    }
                }
            }
            Open::Tool { index, arguments } => {
                if let Some(json) = delta
                    .tool_use
                    .and_then(|tool| tool.input)
                    .filter(|json| !json.is_empty())
                {
                    *arguments = true;
                    out.push(StreamEvent::ToolCallDelta {
                        index: *index,
                        delta: json,
                    });
                }
            }
        }
    }

    fn block_stop(&mut self, at: u32, out: &mut Vec<StreamEvent>) {
        if let Some(position) = self.blocks.iter().position(|(index, _)| *index == at) {
            let (_, open) = self.blocks.remove(position);
            close(open, out);
        }
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        self.start(out);
        for (_, open) in std::mem::take(&mut self.blocks) {
            close(open, out);
        }
        out.push(StreamEvent::Finish {
            stop_reason: self.stop.unwrap_or(StopReason::Stop),
        });
        self.finished = true;
    }
}

fn close(open: Open, out: &mut Vec<StreamEvent>) {
    match open {
        Open::Reasoning { signature } if !signature.is_empty() => {
            out.push(StreamEvent::ThinkingSignature {
                signature,
                id: None,
            });
        }
        Open::Tool { index, arguments } => {
            if !arguments {
                out.push(StreamEvent::ToolCallDelta {
                    index,
                    delta: "{}".to_owned(),
                });
            }
            out.push(StreamEvent::ToolCallEnd { index });
        }
        Open::Text | Open::Reasoning { .. } => {}
    }
}

impl Decoder for WireDecoder {
    fn frame(&mut self, frame: Frame<'_>, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        if self.finished {
            return Ok(());
        }
        if frame.event.ends_with("Exception") || frame.event.ends_with("exception") {
            let json: Value = serde_json::from_str(frame.data).unwrap_or(Value::Null);
            return Err(super::exception(frame.event, &json));
        }
        let event: WireEvent = serde_json::from_str(frame.data).map_err(|error| {
            malformed(
                &format!("a `{}` event", clip(frame.event, 40)),
                frame.data,
                &error,
            )
        })?;
        match frame.event {
            "messageStart" => self.start(out),
            "contentBlockStart" => {
                self.start(out);
                if let (Some(at), Some(tool)) = (
                    event.content_block_index,
                    event.start.and_then(|start| start.tool_use),
                ) {
                    self.open_tool(at, tool, out);
                }
            }
            "contentBlockDelta" => {
                self.start(out);
                if let (Some(at), Some(delta)) = (event.content_block_index, event.delta) {
                    self.delta(at, delta, out);
                }
            }
            "contentBlockStop" => {
                if let Some(at) = event.content_block_index {
                    self.block_stop(at, out);
                }
            }
            "messageStop" => {
                self.start(out);
                self.stop = Some(stop_reason(event.stop_reason.as_deref().unwrap_or("")));
            }
            // The usage comes after messageStop, in the stream's last event.
            "metadata" => {
                self.start(out);
                if let Some(usage) = event.usage {
                    out.push(StreamEvent::Usage(usage.normalize()));
                }
                if self.stop.is_some() {
                    self.finish(out);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn body(&mut self, body: &str, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        let response: WireResponse = serde_json::from_str(body)
            .map_err(|error| malformed("a response body", body, &error))?;
        self.start(out);
        let content = response
            .output
            .and_then(|output| output.message)
            .map(|message| message.content)
            .unwrap_or_default();
        for (at, block) in (0u32..).zip(content) {
            if let Some(text) = block.text {
                if !text.is_empty() {
                    out.push(StreamEvent::TextDelta { delta: text });
                }
            } else if let Some(tool) = block.tool_use {
                let input = match &tool.input {
                    Some(input @ Value::Object(_)) => input.to_string(),
                    _ => "{}".to_owned(),
                };
                let index = self.open_tool(at, tool, out);
                out.push(StreamEvent::ToolCallDelta {
                    index,
                    delta: input,
                });
                self.blocks.retain(|(index, _)| *index != at);
                out.push(StreamEvent::ToolCallEnd { index });
            } else if let Some(reasoning) = block.reasoning_content {
                if let Some(data) = reasoning.redacted_content {
                    out.push(StreamEvent::RedactedThinking { data });
                }
                if let Some(text) = reasoning.reasoning_text {
                    if let Some(thinking) = text.text.filter(|text| !text.is_empty()) {
                        out.push(StreamEvent::ThinkingDelta { delta: thinking });
                    }
                    if let Some(signature) = text.signature.filter(|s| !s.is_empty()) {
                        out.push(StreamEvent::ThinkingSignature {
                            signature,
                            id: None,
                        });
                    }
                }
            } else if let Some(key) = block.other.keys().next() {
                return Err(unrepresentable_output(
                    "Bedrock",
                    &format!("a `{}` content block", clip(key, 60)),
                ));
            }
        }
        if let Some(usage) = response.usage {
            out.push(StreamEvent::Usage(usage.normalize()));
        }
        self.stop = Some(stop_reason(response.stop_reason.as_deref().unwrap_or("")));
        self.finish(out);
        Ok(())
    }

    fn end(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        // A stream that said why it stopped but lost its metadata is still complete.
        if !self.finished && self.stop.is_some() {
            self.finish(out);
        }
        Ok(())
    }
}
