//! Decoding a response: the streamed events and the non-streaming response object.
//!
//! A response is a list of output items (reasoning, message, function call, and hosted-tool
//! items: web and file search are skipped, any other kind is refused by name) in the order the model produced them. A stream announces each
//! item (`response.output_item.added`), streams its parts as deltas and repeats the finished
//! item (`response.output_item.done`); `response.completed` (or `.incomplete`) carries the
//! whole response again with its usage. The decoder emits from the deltas and uses the
//! finished items only to fill in what a server did not stream, so nothing is emitted twice.

use agent_types::{BackendError, BackendErrorKind, StopReason, StreamEvent, ToolCallId, Usage};
use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::content::unrepresentable_output;
use crate::http::driver::{Decoder, Frame};
use crate::http::status::{ProviderError, clip};

/// Decodes one response.
#[derive(Debug, Default)]
pub(crate) struct WireDecoder {
    started: bool,
    finished: bool,
    /// The output items seen so far, in output order.
    items: Vec<ItemState>,
    /// Function calls started so far (the next call's index).
    calls: u32,
    /// A refusal was part of the answer.
    refused: bool,
}

#[derive(Debug)]
struct ItemState {
    output_index: Option<u64>,
    id: Option<String>,
    kind: ItemKind,
    /// Deltas arrived for this item.
    streamed: bool,
    /// A `*.done` event supplied text no delta had.
    filled: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ItemKind {
    Message,
    Reasoning,
    Call { index: u32, ended: bool },
    Other,
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

    /// The item an event refers to: by `output_index`, or by `item_id` when a server leaves
    /// the index out.
    fn find(&self, output_index: Option<u64>, item_id: Option<&str>) -> Option<usize> {
        if let Some(at) = output_index
            && let Some(found) = self.items.iter().position(|i| i.output_index == Some(at))
        {
            return Some(found);
        }
        let item_id = item_id?;
        self.items
            .iter()
            .position(|item| item.id.as_deref() == Some(item_id))
    }

    /// The item a text or reasoning delta belongs to, recorded on first sight if the server
    /// never announced it.
    fn item_for(
        &mut self,
        output_index: Option<u64>,
        item_id: Option<&str>,
        kind: ItemKind,
    ) -> usize {
        match self.find(output_index, item_id) {
            Some(found) => found,
            None => {
                self.items.push(ItemState {
                    output_index,
                    id: item_id.map(str::to_owned),
                    kind,
                    streamed: false,
                    filled: false,
                });
                self.items.len() - 1
            }
        }
    }

    fn start_call(
        &mut self,
        output_index: Option<u64>,
        item: CallItem,
        out: &mut Vec<StreamEvent>,
    ) -> usize {
        let index = self.calls;
        self.calls += 1;
        let id = item.call_id.or_else(|| item.id.clone()).unwrap_or_default();
        out.push(StreamEvent::ToolCallStart {
            index,
            id: ToolCallId::from(id),
            name: item.name.unwrap_or_default(),
            signature: None,
        });
        let streamed = !item.arguments.is_empty();
        if streamed {
            out.push(StreamEvent::ToolCallDelta {
                index,
                delta: item.arguments,
            });
        }
        self.items.push(ItemState {
            output_index,
            id: item.id,
            kind: ItemKind::Call {
                index,
                ended: false,
            },
            streamed,
            filled: false,
        });
        self.items.len() - 1
    }

    /// The call index of the item at `at`, if it is a function call.
    fn call_index(&self, at: usize) -> Option<u32> {
        match self.items.get(at)?.kind {
            ItemKind::Call { index, .. } => Some(index),
            _ => None,
        }
    }

    fn end_call(&mut self, at: usize, out: &mut Vec<StreamEvent>) {
        if let Some(ItemState {
            kind: ItemKind::Call { index, ended },
            ..
        }) = self.items.get_mut(at)
            && !*ended
        {
            *ended = true;
            out.push(StreamEvent::ToolCallEnd { index: *index });
        }
    }

    /// An announced item; `raw` is the event's text, reread only to name an unknown item.
    fn item_added(
        &mut self,
        event: ItemEvent,
        raw: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), BackendError> {
        if self.find(event.output_index, event.item.id()).is_some() {
            return Ok(());
        }
        match event.item {
            WireItem::FunctionCall(call) => {
                self.start_call(event.output_index, call, out);
            }
            item => {
                let kind = match item {
                    WireItem::Message { .. } => ItemKind::Message,
                    WireItem::Reasoning(_) => ItemKind::Reasoning,
                    // A function call was started above.
                    WireItem::WebSearchCall
                    | WireItem::FileSearchCall
                    | WireItem::ToolSearchCall
                    | WireItem::ToolSearchOutput
                    | WireItem::FunctionCall(_) => ItemKind::Other,
                    WireItem::Other => return Err(unknown_output(raw)),
                };
                self.items.push(ItemState {
                    output_index: event.output_index,
                    id: item.id().map(str::to_owned),
                    kind,
                    streamed: false,
                    filled: false,
                });
            }
        }
        Ok(())
    }

    /// A finished item: emit what its deltas did not, then close it.
    fn item_done(
        &mut self,
        event: ItemEvent,
        raw: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), BackendError> {
        let known = self.find(event.output_index, event.item.id());
        let complete = known.is_some_and(|at| self.items[at].streamed || self.items[at].filled);
        match event.item {
            WireItem::FunctionCall(call) => {
                let started = known.and_then(|at| self.call_index(at).map(|index| (at, index)));
                let at = match started {
                    Some((at, index)) => {
                        if !self.items[at].streamed && !call.arguments.is_empty() {
                            self.items[at].streamed = true;
                            out.push(StreamEvent::ToolCallDelta {
                                index,
                                delta: call.arguments,
                            });
                        }
                        at
                    }
                    None => self.start_call(event.output_index, call, out),
                };
                self.end_call(at, out);
            }
            WireItem::Message { content } => {
                // Checked even when the deltas brought the text: a part of another kind has
                // no delta events we read.
                if content.iter().any(|part| matches!(part, WirePart::Other)) {
                    return Err(unknown_output(raw));
                }
                if !complete {
                    self.message_parts(content, raw, out)?;
                }
                self.mark_done(known, event.output_index, ItemKind::Message);
            }
            WireItem::Reasoning(reasoning) => {
                self.reasoning(reasoning, !complete, out);
                self.mark_done(known, event.output_index, ItemKind::Reasoning);
            }
            WireItem::WebSearchCall
            | WireItem::FileSearchCall
            | WireItem::ToolSearchCall
            | WireItem::ToolSearchOutput => {}
            WireItem::Other => return Err(unknown_output(raw)),
        }
        Ok(())
    }

    fn mark_done(&mut self, known: Option<usize>, output_index: Option<u64>, kind: ItemKind) {
        match known {
            Some(at) => self.items[at].filled = true,
            None => self.items.push(ItemState {
                output_index,
                id: None,
                kind,
                streamed: false,
                filled: true,
            }),
        }
    }

    fn message_parts(
        &mut self,
        content: Vec<WirePart>,
        raw: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), BackendError> {
        for part in content {
            match part {
                WirePart::OutputText { text } if !text.is_empty() => {
                    out.push(StreamEvent::TextDelta { delta: text });
                }
                WirePart::Refusal { refusal } => {
                    self.refused = true;
                    if !refusal.is_empty() {
                        out.push(StreamEvent::RefusalDelta { delta: refusal });
                    }
                }
                WirePart::OutputText { .. } => {}
                WirePart::Other => return Err(unknown_output(raw)),
            }
        }
        Ok(())
    }

    /// A finished reasoning item: its text (when `with_text`) then its encrypted content and id,
    /// which close the thinking block and are what the next request sends back.
    fn reasoning(&mut self, item: ReasoningItem, with_text: bool, out: &mut Vec<StreamEvent>) {
        if with_text {
            // Summary parts are joined without a separator; raw reasoning text (open-weight
            // models behind compatible servers) stands in when there is no summary.
            let parts = if item.summary.is_empty() {
                item.content
            } else {
                item.summary
            };
            let text: String = parts.into_iter().map(|part| part.text).collect();
            if !text.is_empty() {
                out.push(StreamEvent::ThinkingDelta { delta: text });
            }
        }
        // Without encrypted content (a stored response, or a server that has none) the id
        // alone still identifies the item; the signature is then empty.
        if item.encrypted_content.is_some() || item.id.is_some() {
            out.push(StreamEvent::ThinkingSignature {
                signature: item.encrypted_content.unwrap_or_default(),
                id: item.id,
            });
        }
    }

    /// Emits a whole output list (a non-streaming response, or a stream whose server sent the
    /// result only in `response.completed`).
    fn output(
        &mut self,
        items: Vec<WireItem>,
        raw: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), BackendError> {
        for item in items {
            match item {
                WireItem::Message { content } => self.message_parts(content, raw, out)?,
                WireItem::Reasoning(reasoning) => self.reasoning(reasoning, true, out),
                WireItem::FunctionCall(call) => {
                    let at = self.start_call(None, call, out);
                    self.end_call(at, out);
                }
                WireItem::WebSearchCall
                | WireItem::FileSearchCall
                | WireItem::ToolSearchCall
                | WireItem::ToolSearchOutput => {}
                WireItem::Other => return Err(unknown_output(raw)),
            }
        }
        Ok(())
    }

    /// The response is over: emit its output if nothing streamed it, close the calls, report
    /// usage, finish. `status` is what the event said when the object does not.
    fn complete(
        &mut self,
        response: WireResponse,
        status: &str,
        raw: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), BackendError> {
        let status = response.status.as_deref().unwrap_or(status);
        let incomplete = match status {
            "completed" => None,
            "incomplete" => Some(
                response
                    .incomplete_details
                    .and_then(|details| details.reason)
                    .unwrap_or_default(),
            ),
            "failed" => return Err(failed(response.error.as_ref())),
            other => {
                return Err(BackendError::new(
                    BackendErrorKind::Protocol,
                    format!(
                        "the response ended with status `{}`; only finished responses can be \
                         read (background responses are not supported)",
                        clip(other, 40)
                    ),
                ));
            }
        };
        self.start(response.id, response.model, out);
        if self.items.is_empty()
            && let Some(items) = response.output
        {
            self.output(items, raw, out)?;
        }
        for at in 0..self.items.len() {
            self.end_call(at, out);
        }
        if let Some(usage) = response.usage {
            out.push(StreamEvent::Usage(usage.normalize()));
        }
        let stop_reason = match incomplete.as_deref() {
            None if self.refused => StopReason::ContentFilter,
            None if self.calls > 0 => StopReason::ToolCalls,
            None => StopReason::Stop,
            Some("content_filter") => StopReason::ContentFilter,
            // `max_output_tokens`, and whatever else cut the answer short.
            Some(_) => StopReason::Length,
        };
        out.push(StreamEvent::Finish { stop_reason });
        self.finished = true;
        Ok(())
    }
}

impl Decoder for WireDecoder {
    fn frame(&mut self, frame: Frame<'_>, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        let data = crate::framing::trim_data(frame.data);
        if self.finished || data.is_empty() || data == "[DONE]" {
            return Ok(());
        }
        // The type is in the data; the SSE event name says the same and stands in for it
        // where a server leaves it out. OpenAI writes it first: read there, an event we parse
        // anyway is not parsed a second time just for its type (issue 16).
        let kind = match leading_type(data) {
            Some(kind) if HANDLED.contains(&kind) => Cow::Borrowed(kind),
            _ => {
                let kind: EventKind<'_> = parse(data, "a stream event")?;
                kind.kind.unwrap_or(Cow::Borrowed(frame.event))
            }
        };
        match kind.as_ref() {
            "response.created" | "response.in_progress" | "response.queued" => {
                let event: ResponseEvent = parse(data, "a `response.created` event")?;
                self.start(event.response.id, event.response.model, out);
            }
            "response.output_item.added" => {
                let event: ItemEvent = parse(data, "a `response.output_item.added` event")?;
                self.start(None, None, out);
                self.item_added(event, data, out)?;
            }
            "response.output_item.done" => {
                let event: ItemEvent = parse(data, "a `response.output_item.done` event")?;
                self.start(None, None, out);
                self.item_done(event, data, out)?;
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let event: DeltaEvent<'_> = parse(data, "a text delta")?;
                self.start(None, None, out);
                let at = self.item_for(
                    event.output_index,
                    event.item_id.as_deref(),
                    ItemKind::Message,
                );
                self.items[at].streamed = true;
                if event.delta.is_empty() {
                    // Nothing to emit.
                } else if kind == "response.refusal.delta" {
                    self.refused = true;
                    out.push(StreamEvent::RefusalDelta { delta: event.delta });
                } else {
                    out.push(StreamEvent::TextDelta { delta: event.delta });
                }
            }
            "response.output_text.done" | "response.refusal.done" => {
                let event: DoneEvent<'_> = parse(data, "a text `done` event")?;
                self.start(None, None, out);
                let at = self.item_for(
                    event.output_index,
                    event.item_id.as_deref(),
                    ItemKind::Message,
                );
                let refusal = kind == "response.refusal.done";
                if refusal {
                    self.refused = true;
                }
                if refusal {
                    self.fill(
                        at,
                        event.refusal,
                        |delta| StreamEvent::RefusalDelta { delta },
                        out,
                    );
                } else {
                    self.fill(
                        at,
                        event.text,
                        |delta| StreamEvent::TextDelta { delta },
                        out,
                    );
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let event: DeltaEvent<'_> = parse(data, "a reasoning delta")?;
                self.start(None, None, out);
                let at = self.item_for(
                    event.output_index,
                    event.item_id.as_deref(),
                    ItemKind::Reasoning,
                );
                self.items[at].streamed = true;
                if !event.delta.is_empty() {
                    out.push(StreamEvent::ThinkingDelta { delta: event.delta });
                }
            }
            "response.reasoning_summary_text.done" | "response.reasoning_text.done" => {
                let event: DoneEvent<'_> = parse(data, "a reasoning `done` event")?;
                self.start(None, None, out);
                let at = self.item_for(
                    event.output_index,
                    event.item_id.as_deref(),
                    ItemKind::Reasoning,
                );
                self.fill(
                    at,
                    event.text,
                    |delta| StreamEvent::ThinkingDelta { delta },
                    out,
                );
            }
            "response.function_call_arguments.delta" => {
                let event: DeltaEvent<'_> = parse(data, "a function-call arguments delta")?;
                let (at, index) = self.call_at(event.output_index, event.item_id.as_deref())?;
                self.items[at].streamed = true;
                if !event.delta.is_empty() {
                    out.push(StreamEvent::ToolCallDelta {
                        index,
                        delta: event.delta,
                    });
                }
            }
            "response.function_call_arguments.done" => {
                let event: DoneEvent<'_> = parse(data, "a function-call arguments `done` event")?;
                let (at, index) = self.call_at(event.output_index, event.item_id.as_deref())?;
                if !self.items[at].streamed && !event.arguments.is_empty() {
                    self.items[at].streamed = true;
                    out.push(StreamEvent::ToolCallDelta {
                        index,
                        delta: event.arguments,
                    });
                }
                self.end_call(at, out);
            }
            "response.completed" => {
                let event: ResponseEvent = parse(data, "a `response.completed` event")?;
                self.complete(event.response, "completed", data, out)?;
            }
            "response.incomplete" => {
                let event: ResponseEvent = parse(data, "a `response.incomplete` event")?;
                self.complete(event.response, "incomplete", data, out)?;
            }
            "response.failed" => {
                let event: ResponseEvent = parse(data, "a `response.failed` event")?;
                return Err(failed(event.response.error.as_ref()));
            }
            "error" => {
                let event: ErrorEvent = parse(data, "an `error` event")?;
                return Err(match event.error {
                    Some(error) => in_band(&error),
                    // The documented shape: code and message at the top level.
                    None => in_band(&WireError {
                        kind: None,
                        code: event.code,
                        message: event.message,
                    }),
                });
            }
            // Content-part boundaries, annotations, built-in tools, keep-alives: nothing to
            // emit, and event types added later are ignored the same way.
            _ => {}
        }
        Ok(())
    }

    fn body(&mut self, body: &str, out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        let response: WireResponse = parse(body, "the response body")?;
        if response.output.is_none() && response.error.is_some() {
            return Err(failed(response.error.as_ref()));
        }
        self.complete(response, "completed", body, out)
    }

    fn end(&mut self, _out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        // A stream without `response.completed` is incomplete; the driver reports that.
        Ok(())
    }
}

impl WireDecoder {
    /// Emits the text of a `*.done` event when no delta brought it (servers that send only
    /// the finished text).
    fn fill(
        &mut self,
        at: usize,
        text: String,
        event: impl FnOnce(String) -> StreamEvent,
        out: &mut Vec<StreamEvent>,
    ) {
        let item = &mut self.items[at];
        if item.streamed {
            return;
        }
        item.filled = true;
        if !text.is_empty() {
            out.push(event(text));
        }
    }

    fn call_at(
        &self,
        output_index: Option<u64>,
        item_id: Option<&str>,
    ) -> Result<(usize, u32), BackendError> {
        self.find(output_index, item_id)
            .and_then(|at| self.call_index(at).map(|index| (at, index)))
            .ok_or_else(|| {
                BackendError::new(
                    BackendErrorKind::Protocol,
                    "function-call arguments arrived for an output item that was never announced \
                     as a function call",
                )
            })
    }
}

/// The event types `frame` parses in full; any other type is still checked to be JSON.
const HANDLED: &[&str] = &[
    "response.created",
    "response.in_progress",
    "response.queued",
    "response.output_item.added",
    "response.output_item.done",
    "response.output_text.delta",
    "response.refusal.delta",
    "response.output_text.done",
    "response.refusal.done",
    "response.reasoning_summary_text.delta",
    "response.reasoning_text.delta",
    "response.reasoning_summary_text.done",
    "response.reasoning_text.done",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
];

/// The `type` of an event written as OpenAI writes it, first and unescaped:
/// `{"type":"response.output_text.delta",…`. `None` for any other layout (then the event is
/// parsed for it).
pub(super) fn leading_type(data: &str) -> Option<&str> {
    let rest = data.strip_prefix(r#"{"type":""#)?;
    let end = rest.find(['"', '\\'])?;
    (rest.as_bytes()[end] == b'"').then(|| &rest[..end])
}

/// The item types the decoder reads or skips, and a message's part types.
const KNOWN_ITEMS: &[&str] = &[
    "message",
    "reasoning",
    "function_call",
    "web_search_call",
    "file_search_call",
    "tool_search_call",
    "tool_search_output",
];
const KNOWN_PARTS: &[&str] = &["output_text", "refusal"];

/// The error for an output item or message part of a kind agentry cannot carry, named by
/// rereading `raw` (an event or a response body). Only on the way to an error, so the common
/// path never parses twice.
#[cold]
fn unknown_output(raw: &str) -> BackendError {
    let what = serde_json::from_str::<Value>(raw)
        .ok()
        .and_then(|value| first_unknown(&value))
        .unwrap_or_else(|| "an output item of a kind agentry does not know".to_owned());
    unrepresentable_output("OpenAI Responses", &what)
}

/// The first item (in `item`, `response.output` or `output`) or message part of a type
/// outside [`KNOWN_ITEMS`] and [`KNOWN_PARTS`], described.
fn first_unknown(value: &Value) -> Option<String> {
    let listed = |value: &Value| value.get("output").and_then(Value::as_array).cloned();
    let items: Vec<Value> = match value.get("item") {
        Some(item) => vec![item.clone()],
        None => value
            .get("response")
            .and_then(listed)
            .or_else(|| listed(value))
            .unwrap_or_default(),
    };
    let kind = |value: &Value| {
        value
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    items.iter().find_map(|item| {
        let item_kind = kind(item);
        if !KNOWN_ITEMS.contains(&item_kind.as_str()) {
            return Some(format!("an output item of type `{}`", clip(&item_kind, 60)));
        }
        item.get("content")?
            .as_array()?
            .iter()
            .map(kind)
            .find(|part| !KNOWN_PARTS.contains(&part.as_str()))
            .map(|part| format!("a message part of type `{}`", clip(&part, 60)))
    })
}

/// The error of a failed response (`response.failed`, or a response object with status
/// `failed`).
fn failed(error: Option<&WireError>) -> BackendError {
    match error {
        Some(error) => in_band(error),
        None => BackendError::new(
            BackendErrorKind::Server,
            "the response failed and the provider gave no reason",
        ),
    }
}

/// An error reported inside a 200 response; its kind comes from the type and code, and an
/// unknown one counts as the provider's failure.
fn in_band(error: &WireError) -> BackendError {
    provider_error(error, true).into_error(BackendErrorKind::Server)
}

/// The error in the OpenAI format `<type>/<code>: <message>` (missing parts left out). With
/// `in_band`, the kind is read from every type and code we know; for an HTTP error the
/// status already says most, so only what it cannot say (an exhausted quota behind a 429)
/// is refined.
pub(super) fn provider_error(error: &WireError, in_band: bool) -> ProviderError {
    let code = error.code.as_ref().and_then(|code| match code {
        Value::String(code) => Some(Cow::Borrowed(code.as_str())),
        Value::Number(code) => Some(Cow::Owned(code.to_string())),
        _ => None,
    });
    let kind = error.kind.as_deref().filter(|kind| !kind.is_empty());
    let code = code.filter(|code| !code.is_empty());
    let message = error
        .message
        .as_deref()
        .unwrap_or("the provider gave no message");
    let text = match (kind, code.as_deref()) {
        (Some(kind), Some(code)) => format!("{kind}/{code}: {message}"),
        (Some(one), None) | (None, Some(one)) => format!("{one}: {message}"),
        (None, None) => message.to_owned(),
    };
    let names = [kind, code.as_deref()];
    let named = |wanted: &[&str]| names.iter().flatten().any(|name| wanted.contains(name));
    let refined = if named(&["insufficient_quota"]) {
        Some(BackendErrorKind::QuotaExceeded)
    } else if !in_band {
        None
    } else if named(&[
        "rate_limit_exceeded",
        "rate_limit_error",
        "tokens",
        "requests",
    ]) {
        Some(BackendErrorKind::RateLimited)
    } else if named(&["server_is_overloaded", "overloaded_error", "slow_down"]) {
        Some(BackendErrorKind::Overloaded)
    } else if named(&[
        "invalid_api_key",
        "authentication_error",
        "permission_error",
    ]) {
        Some(BackendErrorKind::Authentication)
    } else if named(&[
        "invalid_request_error",
        "invalid_prompt",
        "context_length_exceeded",
        "invalid_image",
        "model_not_found",
    ]) {
        Some(BackendErrorKind::InvalidRequest)
    } else {
        None
    };
    ProviderError::new(text).with_kind(refined)
}

fn parse<'a, T: Deserialize<'a>>(text: &'a str, what: &str) -> Result<T, BackendError> {
    serde_json::from_str(text).map_err(|error| {
        BackendError::new(
            BackendErrorKind::Protocol,
            format!(
                "the OpenAI Responses API sent {what} that could not be read ({error}): {}",
                clip(text, 200)
            ),
        )
    })
}

/// `null` read as the type's default (compatible servers send `null` where OpenAI sends
/// `""` or `[]`).
fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(
    deserializer: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[derive(Deserialize)]
struct EventKind<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ResponseEvent {
    response: WireResponse,
}

#[derive(Deserialize)]
struct ItemEvent {
    #[serde(default)]
    output_index: Option<u64>,
    item: WireItem,
}

#[derive(Deserialize)]
struct DeltaEvent<'a> {
    #[serde(default)]
    output_index: Option<u64>,
    #[serde(default, borrow)]
    item_id: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "nullable")]
    delta: String,
}

#[derive(Deserialize)]
struct DoneEvent<'a> {
    #[serde(default)]
    output_index: Option<u64>,
    #[serde(default, borrow)]
    item_id: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "nullable")]
    text: String,
    #[serde(default, deserialize_with = "nullable")]
    refusal: String,
    #[serde(default, deserialize_with = "nullable")]
    arguments: String,
}

#[derive(Deserialize)]
struct ErrorEvent {
    #[serde(default)]
    error: Option<WireError>,
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    message: Option<String>,
}

/// The response object (the non-streaming body, and inside the lifecycle events).
#[derive(Deserialize)]
struct WireResponse {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    output: Option<Vec<WireItem>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    incomplete_details: Option<Incomplete>,
    #[serde(default)]
    error: Option<WireError>,
}

#[derive(Deserialize)]
struct Incomplete {
    #[serde(default)]
    reason: Option<String>,
}

/// An `error` object: `type`, `code` (a string, or a number from some compatible servers)
/// and `message`.
#[derive(Debug, Deserialize)]
pub(super) struct WireError {
    #[serde(rename = "type", default)]
    pub(super) kind: Option<String>,
    #[serde(default)]
    pub(super) code: Option<Value>,
    #[serde(default)]
    pub(super) message: Option<String>,
}

/// The body of an HTTP error: `{"error": {...}}`.
#[derive(Deserialize)]
pub(super) struct ErrorBody {
    pub(super) error: WireError,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireItem {
    Message {
        #[serde(default, deserialize_with = "nullable")]
        content: Vec<WirePart>,
    },
    Reasoning(ReasoningItem),
    FunctionCall(CallItem),
    /// Hosted retrieval the caller enabled through extras: the provider ran it and its
    /// findings reach the answer as the message's text (with citations), so nothing the
    /// model wrote is lost by skipping it.
    WebSearchCall,
    FileSearchCall,
    /// The hosted tool search (`tool_search` with deferred tools) and the tools it loaded:
    /// the provider loaded them for this response, and the calls that follow name their tool.
    ToolSearchCall,
    ToolSearchOutput,
    /// Every other item (image generation, code interpreter, MCP, computer use, custom
    /// tools, types added later) is content an assistant message cannot carry: refused.
    #[serde(other)]
    Other,
}

impl WireItem {
    fn id(&self) -> Option<&str> {
        match self {
            Self::Reasoning(item) => item.id.as_deref(),
            Self::FunctionCall(item) => item.id.as_deref(),
            Self::Message { .. }
            | Self::WebSearchCall
            | Self::FileSearchCall
            | Self::ToolSearchCall
            | Self::ToolSearchOutput
            | Self::Other => None,
        }
    }
}

#[derive(Deserialize)]
struct ReasoningItem {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    encrypted_content: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    summary: Vec<WireText>,
    #[serde(default, deserialize_with = "nullable")]
    content: Vec<WireText>,
}

#[derive(Deserialize)]
struct CallItem {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    call_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    arguments: String,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WirePart {
    OutputText {
        #[serde(default, deserialize_with = "nullable")]
        text: String,
    },
    Refusal {
        #[serde(default, deserialize_with = "nullable")]
        refusal: String,
    },
    #[serde(other)]
    Other,
}

/// A summary or reasoning-text part.
#[derive(Deserialize)]
struct WireText {
    #[serde(default, deserialize_with = "nullable")]
    text: String,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    input_tokens_details: Option<InputDetails>,
    #[serde(default)]
    output_tokens_details: Option<OutputDetails>,
}

#[derive(Deserialize)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct OutputDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl WireUsage {
    /// OpenAI already counts the way agentry does: input includes cached tokens, output
    /// includes reasoning tokens.
    fn normalize(self) -> Usage {
        Usage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cache_read_tokens: self.input_tokens_details.and_then(|d| d.cached_tokens),
            cache_write_5m_tokens: None,
            cache_write_1h_tokens: None,
            reasoning_tokens: self.output_tokens_details.and_then(|d| d.reasoning_tokens),
        }
    }
}
