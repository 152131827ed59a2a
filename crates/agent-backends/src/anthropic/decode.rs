//! Decoding a Messages response: the server-sent events of a stream, or one JSON message.

use std::borrow::Cow;

use agent_types::{BackendError, BackendErrorKind, StopReason, StreamEvent, ToolCallId, Usage};
use serde::Deserialize;
use serde_json::Value;

use crate::content::unrepresentable_output;
use crate::http::driver::{Decoder, Frame};
use crate::http::status::clip;

/// One event of the stream. Every Anthropic event carries its `type` in the JSON; the other
/// fields are present or not depending on it, so one flat struct reads them all and unknown
/// event types pass through harmlessly.
#[derive(Debug, Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    message: Option<MessageHead>,
    #[serde(default)]
    content_block: Option<WireBlock>,
    #[serde(default)]
    delta: Option<WireDelta>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// The `message` of `message_start`.
#[derive(Debug, Deserialize)]
struct MessageHead {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// A content block: in `content_block_start`, or in a whole (non-streamed) message.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireBlock {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    thinking: Option<String>,
    signature: Option<String>,
    data: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<Value>,
}

/// The `delta` of `content_block_delta` (a block delta) or of `message_delta`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireDelta {
    #[serde(rename = "type")]
    kind: Option<String>,
    text: Option<String>,
    thinking: Option<String>,
    signature: Option<String>,
    partial_json: Option<String>,
    stop_reason: Option<String>,
}

/// Anthropic's usage object, as sent. `message_delta` repeats some fields of `message_start`
/// and omits others; reports are merged field by field.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(default)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_creation: Option<CacheCreation>,
    output_tokens_details: Option<OutputDetails>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(default)]
struct CacheCreation {
    ephemeral_5m_input_tokens: Option<u64>,
    ephemeral_1h_input_tokens: Option<u64>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(default)]
struct OutputDetails {
    thinking_tokens: Option<u64>,
}

impl WireUsage {
    /// Overlays a later report: every field it has wins.
    fn merge(&mut self, later: &WireUsage) {
        fn keep(current: &mut Option<u64>, later: Option<u64>) {
            if later.is_some() {
                *current = later;
            }
        }
        keep(&mut self.input_tokens, later.input_tokens);
        keep(&mut self.output_tokens, later.output_tokens);
        keep(
            &mut self.cache_read_input_tokens,
            later.cache_read_input_tokens,
        );
        keep(
            &mut self.cache_creation_input_tokens,
            later.cache_creation_input_tokens,
        );
        if let Some(creation) = later.cache_creation {
            let current = self.cache_creation.get_or_insert_default();
            keep(
                &mut current.ephemeral_5m_input_tokens,
                creation.ephemeral_5m_input_tokens,
            );
            keep(
                &mut current.ephemeral_1h_input_tokens,
                creation.ephemeral_1h_input_tokens,
            );
        }
        if let Some(details) = later.output_tokens_details {
            let current = self.output_tokens_details.get_or_insert_default();
            keep(&mut current.thinking_tokens, details.thinking_tokens);
        }
    }

    /// agentry's convention: input includes cache reads and writes.
    fn normalize(&self) -> Usage {
        let written = self.cache_creation_input_tokens.or_else(|| {
            let creation = self.cache_creation?;
            match (
                creation.ephemeral_5m_input_tokens,
                creation.ephemeral_1h_input_tokens,
            ) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
            }
        });
        let input = match (self.input_tokens, self.cache_read_input_tokens, written) {
            (None, None, None) => None,
            (a, b, c) => Some(
                a.unwrap_or(0)
                    .saturating_add(b.unwrap_or(0))
                    .saturating_add(c.unwrap_or(0)),
            ),
        };
        let (write_5m, write_1h) = match self.cache_creation {
            Some(creation)
                if creation.ephemeral_5m_input_tokens.is_some()
                    || creation.ephemeral_1h_input_tokens.is_some() =>
            {
                (
                    creation.ephemeral_5m_input_tokens,
                    creation.ephemeral_1h_input_tokens,
                )
            }
            // Without the breakdown every write is taken as a five-minute one, the default TTL.
            _ => (self.cache_creation_input_tokens, None),
        };
        Usage {
            input_tokens: input,
            output_tokens: self.output_tokens,
            cache_read_tokens: self.cache_read_input_tokens,
            cache_write_5m_tokens: write_5m,
            cache_write_1h_tokens: write_1h,
            reasoning_tokens: self
                .output_tokens_details
                .and_then(|details| details.thinking_tokens),
        }
    }
}

/// A whole (non-streamed) response: a message, or an error document.
#[derive(Debug, Deserialize)]
struct WireMessage {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    content: Vec<WireBlock>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// Anthropic's stop reason, normalized (see the table in the module docs).
fn stop_reason(raw: &str) -> StopReason {
    match raw {
        "max_tokens" | "model_context_window_exceeded" => StopReason::Length,
        "tool_use" => StopReason::ToolCalls,
        "refusal" => StopReason::ContentFilter,
        // end_turn, stop_sequence, pause_turn, and reasons added after this was written.
        _ => StopReason::Stop,
    }
}

/// What a started content block is, keyed by Anthropic's block index.
#[derive(Debug)]
enum Open {
    Text,
    Thinking {
        signature: String,
    },
    Tool {
        /// The call's position among this message's calls.
        index: u32,
        /// Argument text received so far is non-empty.
        arguments: bool,
        /// The `input` of the start event, used when no argument text follows.
        input: Option<Value>,
    },
    /// A block agentry does not represent (server tools, redacted thinking already emitted).
    Other,
}

/// Decodes one response.
#[derive(Debug, Default)]
pub(crate) struct WireDecoder {
    started: bool,
    /// Open blocks by Anthropic's content index.
    blocks: Vec<(u32, Open)>,
    calls: u32,
    usage: WireUsage,
    stop: Option<StopReason>,
    finished: bool,
}

impl WireDecoder {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn start(&mut self, id: Option<String>, model: Option<String>, out: &mut Vec<StreamEvent>) {
        if !self.started {
            self.started = true;
            out.push(StreamEvent::MessageStart { id, model });
        }
    }

    fn report_usage(&mut self, usage: &WireUsage, out: &mut Vec<StreamEvent>) {
        self.usage.merge(usage);
        out.push(StreamEvent::Usage(self.usage.normalize()));
    }

    fn block_start(
        &mut self,
        index: u32,
        block: WireBlock,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), BackendError> {
        self.start(None, None, out);
        let open = match block.kind.as_str() {
            "text" => {
                if let Some(text) = block.text.filter(|text| !text.is_empty()) {
                    out.push(StreamEvent::TextDelta { delta: text });
                }
                Open::Text
            }
            "thinking" => {
                if let Some(thinking) = block.thinking.filter(|text| !text.is_empty()) {
                    out.push(StreamEvent::ThinkingDelta { delta: thinking });
                }
                Open::Thinking {
                    signature: block.signature.unwrap_or_default(),
                }
            }
            "redacted_thinking" => {
                // The whole block is in the start event.
                out.push(StreamEvent::RedactedThinking {
                    data: block.data.unwrap_or_default(),
                });
                Open::Other
            }
            "tool_use" => {
                let call = self.calls;
                self.calls += 1;
                out.push(StreamEvent::ToolCallStart {
                    index: call,
                    id: ToolCallId::from(block.id.unwrap_or_default()),
                    name: block.name.unwrap_or_default(),
                    signature: None,
                });
                Open::Tool {
                    index: call,
                    arguments: false,
                    input: block.input,
                }
            }
            // Hosted retrieval the caller enabled through extras: Anthropic ran it and its
            // findings reach the answer as text (with citations), so skipping the call and
            // its result loses nothing the model wrote.
            "server_tool_use"
                if matches!(block.name.as_deref(), Some("web_search" | "web_fetch")) =>
            {
                Open::Other
            }
            "web_search_tool_result" | "web_fetch_tool_result" => Open::Other,
            // The tool-search tool's call and its `tool_reference`s: Anthropic loaded the
            // tools it found for this response, and a later request works without them (the
            // deferred tools are sent again, each call names its tool).
            "server_tool_use"
                if matches!(
                    block.name.as_deref(),
                    Some("tool_search_tool_bm25" | "tool_search_tool_regex")
                ) =>
            {
                Open::Other
            }
            "tool_search_tool_result" => Open::Other,
            // Code execution and its output, MCP connector traffic, block types added later:
            // content an assistant message cannot carry, refused rather than dropped.
            "server_tool_use" => {
                return Err(unrepresentable_output(
                    "Anthropic",
                    &format!(
                        "a `server_tool_use` content block (`{}`)",
                        clip(block.name.as_deref().unwrap_or(""), 60)
                    ),
                ));
            }
            other => {
                return Err(unrepresentable_output(
                    "Anthropic",
                    &format!("a `{}` content block", clip(other, 60)),
                ));
            }
        };
        self.blocks.retain(|(at, _)| *at != index);
        self.blocks.push((index, open));
        Ok(())
    }

    fn block_delta(&mut self, index: u32, delta: WireDelta, out: &mut Vec<StreamEvent>) {
        let Some((_, open)) = self.blocks.iter_mut().find(|(at, _)| *at == index) else {
            // A delta for a block that never started: nothing to attach it to.
            tracing::debug!(
                index,
                "Anthropic sent a delta for a block that never started"
            );
            return;
        };
        match (delta.kind.as_deref(), open) {
            (Some("text_delta"), Open::Text) => {
                if let Some(text) = delta.text.filter(|text| !text.is_empty()) {
                    out.push(StreamEvent::TextDelta { delta: text });
                }
            }
            (Some("thinking_delta"), Open::Thinking { .. }) => {
                if let Some(thinking) = delta.thinking.filter(|text| !text.is_empty()) {
                    out.push(StreamEvent::ThinkingDelta { delta: thinking });
                }
            }
            (Some("signature_delta"), Open::Thinking { signature }) => {
                if let Some(more) = delta.signature {
                    signature.push_str(&more);
                }
            }
            (
                Some("input_json_delta"),
                Open::Tool {
                    index, arguments, ..
                },
            ) => {
                // The first fragment is often empty.
                if let Some(json) = delta.partial_json.filter(|json| !json.is_empty()) {
                    *arguments = true;
                    out.push(StreamEvent::ToolCallDelta {
                        index: *index,
                        delta: json,
                    });
                }
            }
            // citations_delta and whatever comes later.
            _ => {}
        }
    }

    fn block_stop(&mut self, index: u32, out: &mut Vec<StreamEvent>) {
        let Some(at) = self.blocks.iter().position(|(at, _)| *at == index) else {
            return;
        };
        let (_, open) = self.blocks.remove(at);
        close(open, out);
    }

    /// Closes what is still open and pushes the finish.
    fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        self.start(None, None, out);
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
        Open::Thinking { signature } if !signature.is_empty() => {
            out.push(StreamEvent::ThinkingSignature {
                signature,
                id: None,
            });
        }
        Open::Tool {
            index,
            arguments,
            input,
        } => {
            if !arguments {
                // No argument text: the start event's input, which is `{}` when streaming.
                let json = match input {
                    Some(input @ Value::Object(_)) => input.to_string(),
                    _ => "{}".to_owned(),
                };
                out.push(StreamEvent::ToolCallDelta { index, delta: json });
            }
            out.push(StreamEvent::ToolCallEnd { index });
        }
        Open::Text | Open::Thinking { .. } | Open::Other => {}
    }
}

fn malformed(what: &str, data: &str, error: &serde_json::Error) -> BackendError {
    BackendError::new(
        BackendErrorKind::Protocol,
        format!(
            "Anthropic sent {what} that could not be parsed ({error}): {}",
            clip(data, 200)
        ),
    )
}

impl Decoder for WireDecoder {
    fn frame(&mut self, frame: Frame<'_>, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        if self.finished {
            return Ok(());
        }
        let data = frame.data;
        let event: WireEvent<'_> = serde_json::from_str(data).map_err(|error| {
            let what = if frame.event.is_empty() {
                "an event".to_owned()
            } else {
                format!("a `{}` event", frame.event)
            };
            malformed(&what, data, &error)
        })?;
        let kind = event.kind.as_deref().unwrap_or(frame.event);
        match kind {
            "message_start" => {
                let (id, model, usage) = match event.message {
                    Some(head) => (head.id, head.model, head.usage),
                    None => (None, None, None),
                };
                self.start(id, model, out);
                if let Some(usage) = usage {
                    self.report_usage(&usage, out);
                }
            }
            "content_block_start" => {
                if let (Some(index), Some(block)) = (event.index, event.content_block) {
                    self.block_start(index, block, out)?;
                }
            }
            "content_block_delta" => {
                if let (Some(index), Some(delta)) = (event.index, event.delta) {
                    self.block_delta(index, delta, out);
                }
            }
            "content_block_stop" => {
                if let Some(index) = event.index {
                    self.block_stop(index, out);
                }
            }
            "message_delta" => {
                self.start(None, None, out);
                if let Some(raw) = event.delta.and_then(|delta| delta.stop_reason) {
                    self.stop = Some(stop_reason(&raw));
                }
                if let Some(usage) = event.usage {
                    self.report_usage(&usage, out);
                }
            }
            "message_stop" => self.finish(out),
            "error" => {
                // Re-read as a generic document: the error object's shape is the HTTP one.
                let json: Value = serde_json::from_str(data)
                    .map_err(|error| malformed("an error", data, &error))?;
                return Err(super::stream_error(&json));
            }
            // ping, and event types added after this was written.
            _ => {}
        }
        Ok(())
    }

    fn body(&mut self, body: &str, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        let message: WireMessage = serde_json::from_str(body)
            .map_err(|error| malformed("a response body", body, &error))?;
        if message.kind.as_deref() == Some("error") {
            let json: Value =
                serde_json::from_str(body).map_err(|error| malformed("an error", body, &error))?;
            return Err(super::stream_error(&json));
        }
        self.start(message.id, message.model, out);
        for (index, block) in (0u32..).zip(message.content) {
            // A whole block is a start with everything in it, then a stop; the signature and
            // the tool input arrive in the start.
            self.block_start(index, block, out)?;
            self.block_stop(index, out);
        }
        if let Some(usage) = message.usage {
            self.report_usage(&usage, out);
        }
        if let Some(raw) = message.stop_reason {
            self.stop = Some(stop_reason(&raw));
        }
        self.finish(out);
        Ok(())
    }

    fn end(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        // A stream that said why it stopped but lost its `message_stop` is still complete;
        // one that never said is left to the driver to report as cut off.
        if !self.finished && self.stop.is_some() {
            self.finish(out);
        }
        Ok(())
    }
}
