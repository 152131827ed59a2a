//! [`MessageAssembler`]: folds a backend's stream events into one assistant message.

use std::collections::VecDeque;

use serde_json::Value;

use crate::error::{BackendError, BackendErrorKind};
use crate::event::AgentEvent;
use crate::message::{AssistantBlock, AssistantMessage, Thinking, ToolCall};
use crate::stop::StopReason;
use crate::stream::StreamEvent;
use crate::usage::Usage;

/// Builds an [`AssistantMessage`] from the [`StreamEvent`]s of one model call and, when asked,
/// the granular [`AgentEvent`]s a consumer sees while it streams.
///
/// It is the one place where block boundaries are decided, so the loop, adapters reporting a
/// partial message after a mid-stream failure, and tests all agree on them:
///
/// - consecutive text deltas form one text block, consecutive thinking deltas one thinking
///   block; a delta of the other kind, a tool call or a redacted block closes the open block;
/// - a `thinking_signature` closes the open thinking block (or stands alone as an empty,
///   signed block when no reasoning text came, as with OpenAI's encrypted reasoning);
/// - tool calls are keyed by index, so fragments of parallel calls may interleave; each
///   call's argument text is parsed once, at `tool_call_end` (an empty string means `{}`;
///   text that is not JSON is kept as a JSON string so validation can tell the model);
/// - usage reports are merged (the last report wins per field);
/// - a message with tool calls that the provider marked `stop` is marked `tool_calls`.
///
/// Events are only built when `emit_events` is set, so a caller that does not stream pays for
/// no event allocations.
#[derive(Debug, Default)]
pub struct MessageAssembler {
    message: AssistantMessage,
    usage: Option<Usage>,
    /// The provider's id for the response, kept apart from the message: it names one model
    /// call for tracing and accounting, and the history sent back has no use for it.
    response_id: Option<String>,
    open: Open,
    calls: Vec<PendingCall>,
    finished: bool,
    emit_events: bool,
    events: VecDeque<AgentEvent>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Open {
    #[default]
    Nothing,
    /// A text block at this position in `message.content`.
    Text(usize),
    /// A thinking block at this position in `message.content`.
    Thinking(usize),
    /// A refusal block at this position in `message.content`.
    Refusal(usize),
}

#[derive(Debug)]
struct PendingCall {
    index: u32,
    /// Position of the call's block in `message.content`.
    block: usize,
    arguments: String,
    ended: bool,
}

impl MessageAssembler {
    /// An empty assembler. With `emit_events`, every [`push`](Self::push) queues the agent
    /// events it implies; take them with [`drain_events`](Self::drain_events).
    pub fn new(emit_events: bool) -> Self {
        Self {
            emit_events,
            ..Self::default()
        }
    }

    /// Folds one stream event into the message.
    ///
    /// # Errors
    ///
    /// A [`Protocol`](BackendErrorKind::Protocol) error when the events contradict each other:
    /// a tool-call fragment for an index that never started, an index started twice, or
    /// anything after `finish`.
    pub fn push(&mut self, mut event: StreamEvent) -> Result<(), BackendError> {
        // The id is moved, not copied by `observe`.
        if let StreamEvent::MessageStart { id, .. } = &mut event
            && id.is_some()
            && !self.finished
        {
            self.response_id = id.take();
        }
        self.observe(&event)?;
        // The delta events move the owned text instead of copying it; `observe` has already
        // queued the block boundary (if any) that comes before them.
        if self.emit_events {
            let delta = match event {
                StreamEvent::TextDelta { delta } => AgentEvent::TextDelta { delta },
                StreamEvent::ThinkingDelta { delta } => AgentEvent::ThinkingDelta { delta },
                StreamEvent::RefusalDelta { delta } => AgentEvent::RefusalDelta { delta },
                StreamEvent::ToolCallDelta { index, delta } => {
                    AgentEvent::ToolCallDelta { index, delta }
                }
                _ => return Ok(()),
            };
            self.events.push_back(delta);
        }
        Ok(())
    }

    /// Folds a borrowed event into the message, copying only what the message keeps.
    ///
    /// This is for code that passes each event on and keeps a copy of the message being built
    /// (an adapter that must report the partial message of a failed stream): it copies text
    /// into the message but allocates nothing per event. Delta agent events are not queued
    /// here; use [`push`](Self::push) when the events are wanted.
    ///
    /// # Errors
    ///
    /// As for [`push`](Self::push).
    pub fn observe(&mut self, event: &StreamEvent) -> Result<(), BackendError> {
        if self.finished {
            return Err(protocol("the stream went on after its finish event"));
        }
        match event {
            StreamEvent::MessageStart { id, model } => {
                if model.is_some() {
                    self.message.model.clone_from(model);
                }
                if id.is_some() {
                    self.response_id.clone_from(id);
                }
            }
            StreamEvent::TextDelta { delta } => {
                let at = match self.open {
                    Open::Text(at) => at,
                    _ => {
                        self.close_open();
                        self.message.content.push(AssistantBlock::Text {
                            text: String::new(),
                        });
                        self.emit(|| AgentEvent::TextStart);
                        let at = self.message.content.len() - 1;
                        self.open = Open::Text(at);
                        at
                    }
                };
                if let Some(AssistantBlock::Text { text }) = self.message.content.get_mut(at) {
                    text.push_str(delta);
                }
            }
            StreamEvent::ThinkingDelta { delta } => {
                let at = self.open_thinking();
                if let Some(AssistantBlock::Thinking(block)) = self.message.content.get_mut(at) {
                    block.thinking.push_str(delta);
                }
            }
            StreamEvent::RefusalDelta { delta } => {
                let at = match self.open {
                    Open::Refusal(at) => at,
                    _ => {
                        self.close_open();
                        self.message.content.push(AssistantBlock::Refusal {
                            text: String::new(),
                        });
                        let at = self.message.content.len() - 1;
                        self.open = Open::Refusal(at);
                        at
                    }
                };
                if let Some(AssistantBlock::Refusal { text }) = self.message.content.get_mut(at) {
                    text.push_str(delta);
                }
            }
            StreamEvent::ThinkingSignature { signature, id } => {
                let at = self.open_thinking();
                if let Some(AssistantBlock::Thinking(block)) = self.message.content.get_mut(at) {
                    block.signature = Some(signature.clone());
                    if id.is_some() {
                        block.id.clone_from(id);
                    }
                }
                self.close_open();
            }
            StreamEvent::RedactedThinking { data } => {
                self.close_open();
                self.message
                    .content
                    .push(AssistantBlock::Thinking(Thinking {
                        thinking: String::new(),
                        signature: Some(data.clone()),
                        redacted: true,
                        id: None,
                    }));
                self.emit(|| AgentEvent::ThinkingStart);
                self.emit(|| AgentEvent::ThinkingEnd {
                    thinking: String::new(),
                });
            }
            StreamEvent::ToolCallStart {
                index,
                id,
                name,
                signature,
            } => {
                let index = *index;
                if self.calls.iter().any(|call| call.index == index) {
                    return Err(protocol(format!("tool call {index} started twice")));
                }
                self.close_open();
                self.emit(|| AgentEvent::ToolCallStart {
                    index,
                    id: id.clone(),
                    name: name.clone(),
                });
                self.message
                    .content
                    .push(AssistantBlock::ToolCall(ToolCall {
                        id: id.clone(),
                        name: name.clone(),
                        arguments: Value::Null,
                        signature: signature.clone(),
                        invalid_arguments: false,
                    }));
                self.calls.push(PendingCall {
                    index,
                    block: self.message.content.len() - 1,
                    arguments: String::new(),
                    ended: false,
                });
            }
            StreamEvent::ToolCallDelta { index, delta } => {
                let call = self.call_mut(*index)?;
                call.arguments.push_str(delta);
            }
            StreamEvent::ToolCallEnd { index } => {
                let index = *index;
                let position = self
                    .calls
                    .iter()
                    .position(|call| call.index == index)
                    .ok_or_else(|| {
                        protocol(format!("tool call {index} ended but never started"))
                    })?;
                self.end_call(position);
            }
            StreamEvent::Usage(report) => match &mut self.usage {
                Some(usage) => usage.merge(*report),
                None => self.usage = Some(*report),
            },
            StreamEvent::Finish { stop_reason } => {
                self.message.stop_reason = Some(*stop_reason);
                self.finished = true;
            }
        }
        Ok(())
    }

    /// Whether the `finish` event has arrived.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The agent events queued since the last drain, oldest first.
    pub fn drain_events(&mut self) -> std::collections::vec_deque::Drain<'_, AgentEvent> {
        self.events.drain(..)
    }

    /// The oldest queued agent event, if any (for consumers that await between events).
    pub fn next_event(&mut self) -> Option<AgentEvent> {
        self.events.pop_front()
    }

    /// The provider's id for the response (OpenAI's `chatcmpl-…`/`resp_…`, Anthropic's
    /// `msg_…`, Gemini's `responseId`), when its stream named one.
    pub fn response_id(&self) -> Option<&str> {
        self.response_id.as_deref()
    }

    /// Takes the response id out (see [`response_id`](Self::response_id)).
    pub fn take_response_id(&mut self) -> Option<String> {
        self.response_id.take()
    }

    /// Closes every open block and returns the message.
    ///
    /// Calls that never got their `tool_call_end` are completed with the arguments received.
    /// Without a `finish` event the stop reason stays `None`; the caller decides whether that
    /// is an error. The closing events are queued; drain them before dropping the assembler.
    pub fn finish(&mut self) -> AssistantMessage {
        self.close_open();
        for position in 0..self.calls.len() {
            if !self.calls[position].ended {
                self.end_call(position);
            }
        }
        let mut message = std::mem::take(&mut self.message);
        message.usage = self.usage.take();
        if message.stop_reason == Some(StopReason::Stop) && message.tool_calls().next().is_some() {
            message.stop_reason = Some(StopReason::ToolCalls);
        }
        message
    }

    /// Closes everything like [`finish`](Self::finish) and marks the message with `reason`
    /// (`error` or `aborted`): what a model call had produced when it failed or was cancelled.
    pub fn finish_partial(&mut self, reason: StopReason) -> AssistantMessage {
        let mut message = self.finish();
        message.stop_reason = Some(reason);
        message
    }

    fn emit(&mut self, event: impl FnOnce() -> AgentEvent) {
        if self.emit_events {
            self.events.push_back(event());
        }
    }

    fn open_thinking(&mut self) -> usize {
        if let Open::Thinking(at) = self.open {
            return at;
        }
        self.close_open();
        self.message
            .content
            .push(AssistantBlock::Thinking(Thinking::default()));
        self.emit(|| AgentEvent::ThinkingStart);
        let at = self.message.content.len() - 1;
        self.open = Open::Thinking(at);
        at
    }

    fn close_open(&mut self) {
        let open = std::mem::take(&mut self.open);
        if !self.emit_events {
            return;
        }
        let event = match (open, &self.message.content[..]) {
            (Open::Text(at), content) => match content.get(at) {
                Some(AssistantBlock::Text { text }) => AgentEvent::TextEnd { text: text.clone() },
                _ => return,
            },
            (Open::Thinking(at), content) => match content.get(at) {
                Some(AssistantBlock::Thinking(block)) => AgentEvent::ThinkingEnd {
                    thinking: block.thinking.clone(),
                },
                _ => return,
            },
            (Open::Nothing | Open::Refusal(_), _) => return,
        };
        self.events.push_back(event);
    }

    fn call_mut(&mut self, index: u32) -> Result<&mut PendingCall, BackendError> {
        self.calls
            .iter_mut()
            .find(|call| call.index == index)
            .ok_or_else(|| {
                protocol(format!(
                    "argument fragment for tool call {index}, which never started"
                ))
            })
    }

    fn end_call(&mut self, position: usize) {
        let call = &mut self.calls[position];
        if call.ended {
            return;
        }
        call.ended = true;
        let raw = std::mem::take(&mut call.arguments);
        let (index, block) = (call.index, call.block);
        let (arguments, invalid) = parse_arguments(raw);
        if let Some(AssistantBlock::ToolCall(tool_call)) = self.message.content.get_mut(block) {
            tool_call.arguments = arguments;
            tool_call.invalid_arguments = invalid;
            if self.emit_events {
                self.events.push_back(AgentEvent::ToolCallEnd {
                    index,
                    tool_call: tool_call.clone(),
                });
            }
        }
    }
}

/// Parses a call's argument text: blank means no arguments (`{}`); text that is not JSON (a
/// stream cut off mid-call, a model that wrote broken JSON) is kept verbatim as a string and
/// flagged, so nothing the model sent is lost and validation can say why.
fn parse_arguments(raw: String) -> (Value, bool) {
    if raw.trim().is_empty() {
        return (Value::Object(serde_json::Map::new()), false);
    }
    match serde_json::from_str(&raw) {
        Ok(value) => (value, false),
        Err(_) => (Value::String(raw), true),
    }
}

fn protocol(message: impl Into<String>) -> BackendError {
    BackendError::new(BackendErrorKind::Protocol, message)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::id::ToolCallId;

    fn push_all(assembler: &mut MessageAssembler, events: Vec<StreamEvent>) {
        for event in events {
            assembler.push(event).unwrap();
        }
    }

    fn text(delta: &str) -> StreamEvent {
        StreamEvent::TextDelta {
            delta: delta.into(),
        }
    }

    fn start(index: u32, id: &str, name: &str) -> StreamEvent {
        StreamEvent::ToolCallStart {
            index,
            id: ToolCallId::from(id),
            name: name.into(),
            signature: None,
        }
    }

    fn delta(index: u32, text: &str) -> StreamEvent {
        StreamEvent::ToolCallDelta {
            index,
            delta: text.into(),
        }
    }

    #[test]
    fn the_response_id_is_kept_apart_from_the_message_by_push_and_observe() {
        let start = StreamEvent::MessageStart {
            id: Some("msg_01".into()),
            model: Some("m".into()),
        };
        let mut pushed = MessageAssembler::new(false);
        push_all(&mut pushed, vec![start.clone(), text("hi")]);
        let mut observed = MessageAssembler::new(false);
        observed.observe(&start).unwrap();
        for assembler in [&mut pushed, &mut observed] {
            assert_eq!(assembler.response_id(), Some("msg_01"));
            let message = assembler.finish();
            assert_eq!(message.model.as_deref(), Some("m"));
            // The history sent back carries no response id.
            assert!(!serde_json::to_string(&message).unwrap().contains("msg_01"));
            assert_eq!(assembler.take_response_id().as_deref(), Some("msg_01"));
        }
        // A later start without an id keeps the first one (Anthropic and OpenAI name it once).
        let mut later = MessageAssembler::new(false);
        push_all(
            &mut later,
            vec![
                start,
                StreamEvent::MessageStart {
                    id: None,
                    model: None,
                },
            ],
        );
        assert_eq!(later.response_id(), Some("msg_01"));
    }

    #[test]
    fn interleaved_parallel_calls_are_assembled_by_index() {
        let mut assembler = MessageAssembler::new(false);
        push_all(
            &mut assembler,
            vec![
                text("Checking "),
                text("both."),
                start(0, "a", "get_weather"),
                start(1, "b", "get_time"),
                delta(1, "{\"tz\":"),
                delta(0, "{\"city\":\"Den"),
                delta(0, "ver\"}"),
                delta(1, "\"UTC\"}"),
                StreamEvent::ToolCallEnd { index: 1 },
                StreamEvent::ToolCallEnd { index: 0 },
                StreamEvent::Finish {
                    stop_reason: StopReason::ToolCalls,
                },
            ],
        );
        let message = assembler.finish();
        assert_eq!(message.text_content(), "Checking both.");
        let calls: Vec<_> = message.tool_calls().collect();
        assert_eq!(calls[0].arguments, json!({"city": "Denver"}));
        assert_eq!(calls[1].arguments, json!({"tz": "UTC"}));
        assert_eq!(message.stop_reason, Some(StopReason::ToolCalls));
    }

    #[test]
    fn empty_arguments_mean_an_empty_object_and_bad_json_is_kept() {
        let mut assembler = MessageAssembler::new(false);
        push_all(
            &mut assembler,
            vec![start(0, "a", "now"), start(1, "b", "x"), delta(1, "{oops")],
        );
        let message = assembler.finish();
        let calls: Vec<_> = message.tool_calls().collect();
        assert_eq!(calls[0].arguments, json!({}));
        assert_eq!(calls[1].arguments, json!("{oops"));
        assert!(!calls[0].invalid_arguments);
        assert!(
            calls[1].invalid_arguments,
            "raw text must be flagged, not passed off as JSON"
        );
        assert_eq!(message.stop_reason, None);
    }

    #[test]
    fn a_refusal_is_its_own_block_and_never_answer_text() {
        let mut assembler = MessageAssembler::new(true);
        push_all(
            &mut assembler,
            vec![
                StreamEvent::RefusalDelta {
                    delta: "I can't ".into(),
                },
                StreamEvent::RefusalDelta {
                    delta: "help with that.".into(),
                },
                StreamEvent::Finish {
                    stop_reason: StopReason::ContentFilter,
                },
            ],
        );
        let message = assembler.finish();
        assert_eq!(message.text_content(), "");
        assert_eq!(
            message.content,
            [AssistantBlock::Refusal {
                text: "I can't help with that.".into()
            }]
        );
        let deltas = assembler
            .drain_events()
            .filter(|event| matches!(event, AgentEvent::RefusalDelta { .. }))
            .count();
        assert_eq!(deltas, 2);
    }

    #[test]
    fn observe_builds_the_same_message_as_push() {
        let events = vec![
            StreamEvent::ThinkingDelta {
                delta: "hmm".into(),
            },
            StreamEvent::ThinkingSignature {
                signature: "sig".into(),
                id: None,
            },
            text("Checking."),
            start(0, "a", "get_weather"),
            delta(0, "{\"city\":"),
            delta(0, "\"Oslo\"}"),
            StreamEvent::Finish {
                stop_reason: StopReason::Stop,
            },
        ];
        let mut pushed = MessageAssembler::new(false);
        let mut observed = MessageAssembler::new(false);
        for event in events {
            observed.observe(&event).unwrap();
            pushed.push(event).unwrap();
        }
        assert_eq!(observed.finish(), pushed.finish());
    }

    #[test]
    fn events_mark_block_boundaries() {
        let mut assembler = MessageAssembler::new(true);
        push_all(
            &mut assembler,
            vec![
                StreamEvent::ThinkingDelta {
                    delta: "hmm".into(),
                },
                StreamEvent::ThinkingSignature {
                    signature: "sig".into(),
                    id: None,
                },
                text("Hi"),
                start(0, "a", "f"),
                delta(0, "{}"),
                StreamEvent::ToolCallEnd { index: 0 },
                StreamEvent::Usage(Usage {
                    input_tokens: Some(3),
                    ..Usage::default()
                }),
                StreamEvent::Usage(Usage {
                    output_tokens: Some(4),
                    ..Usage::default()
                }),
                StreamEvent::Finish {
                    stop_reason: StopReason::Stop,
                },
            ],
        );
        let message = assembler.finish();
        let kinds: Vec<String> = assembler
            .drain_events()
            .map(|event| serde_json::to_value(event).unwrap()["type"].to_string())
            .collect();
        assert_eq!(
            kinds,
            [
                "\"thinking_start\"",
                "\"thinking_delta\"",
                "\"thinking_end\"",
                "\"text_start\"",
                "\"text_delta\"",
                "\"text_end\"",
                "\"tool_call_start\"",
                "\"tool_call_delta\"",
                "\"tool_call_end\"",
            ]
        );
        // A message with tool calls that says `stop` is a tool-call turn.
        assert_eq!(message.stop_reason, Some(StopReason::ToolCalls));
        let usage = message.usage.unwrap();
        assert_eq!(
            (usage.input_tokens, usage.output_tokens),
            (Some(3), Some(4))
        );
        let AssistantBlock::Thinking(thinking) = &message.content[0] else {
            panic!("thinking first")
        };
        assert_eq!(thinking.signature.as_deref(), Some("sig"));
    }

    #[test]
    fn contradictions_are_protocol_errors() {
        let mut assembler = MessageAssembler::new(false);
        assert!(assembler.push(delta(3, "{}")).is_err());
        assembler.push(start(0, "a", "f")).unwrap();
        assert!(assembler.push(start(0, "a", "f")).is_err());
        assembler
            .push(StreamEvent::Finish {
                stop_reason: StopReason::Stop,
            })
            .unwrap();
        let late = assembler.push(text("late")).unwrap_err();
        assert_eq!(late.kind, BackendErrorKind::Protocol);
    }

    #[test]
    fn a_partial_message_keeps_what_streamed() {
        let mut assembler = MessageAssembler::new(false);
        push_all(&mut assembler, vec![text("Half an ans")]);
        let partial = assembler.finish_partial(StopReason::Aborted);
        assert_eq!(partial.text_content(), "Half an ans");
        assert_eq!(partial.stop_reason, Some(StopReason::Aborted));
        assert_eq!(partial.usage, None);
    }
}
