//! The scripted backend: canned assistant turns replayed as normalized stream events.
//!
//! A [`ScriptedTurn`] is a list of steps written with builder methods. [`ScriptedBackend::new`]
//! compiles every turn once into the exact events it will yield, so a model call only walks a
//! slice and clones the events it hands out: the backend costs next to nothing in the loop
//! benchmarks it serves.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use agent_types::{
    Backend, BackendError, BackendErrorKind, BackendStream, Capabilities, ModelRequest, StopReason,
    StreamEvent, ToolCall, ToolCallId, Usage,
};
use futures_core::Stream;
use serde_json::Value;
use tokio::time::Sleep;

/// One canned answer: what the model "says" in one call, step by step.
///
/// Build it from a constructor ([`text`](Self::text), [`tool_call`](Self::tool_call),
/// [`tool_calls`](Self::tool_calls), or the empty [`new`](Self::new)) and append steps with
/// the `with_*` methods; the steps play in the order they were added.
///
/// # The events a turn yields
///
/// ```text
/// message_start                      always first (id "scripted_<call number>", the model)
/// <the steps, in order>
/// finish                             always last, unless the turn fails, hangs or is cut off
/// ```
///
/// - Text and thinking are one delta each, or several with [`chunked`](Self::chunked).
/// - A tool call is `tool_call_start`, its arguments as compact JSON text in
///   `tool_call_delta`s, and `tool_call_end`. Indexes count from 0 within the turn.
/// - The finish reason is `tool_calls` when the turn has a tool call and `stop` otherwise,
///   unless [`finish`](Self::finish) sets another.
///
/// A step added after [`fail_with`](Self::fail_with), [`hang`](Self::hang) or
/// [`end_without_finish`](Self::end_without_finish) is never reached.
///
/// ```
/// use std::time::Duration;
///
/// use agent_backends::ScriptedTurn;
/// use agent_types::{ToolCall, Usage};
/// use serde_json::json;
///
/// // Think, say something, pause, then ask for two tools, reporting usage at the end.
/// let turn = ScriptedTurn::new()
///     .with_thinking("Two cities: two calls.", Some("sig_1".into()))
///     .with_text("Checking both.")
///     .with_delay(Duration::from_millis(200))
///     .with_tool_call(ToolCall::new("call_1", "get_weather", json!({"city": "Oslo"})))
///     .with_tool_call(ToolCall::new("call_2", "get_weather", json!({"city": "Lima"})))
///     .with_usage(Usage { input_tokens: Some(120), output_tokens: Some(40), ..Usage::default() })
///     .chunked(4);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ScriptedTurn {
    steps: Vec<Step>,
    end: End,
    chunk: Option<usize>,
}

/// One step of a turn, as the caller wrote it.
#[derive(Debug, Clone)]
enum Step {
    Text(String),
    Thinking {
        text: String,
        signature: Option<String>,
    },
    ToolCall(ToolCall),
    Usage(Usage),
    Delay(Duration),
    Event(StreamEvent),
    Fail(BackendError),
    Hang,
}

/// How a turn that runs to its end ends.
#[derive(Debug, Clone, Copy, Default)]
enum End {
    /// `finish` with `tool_calls` if the turn has a tool call, else `stop`.
    #[default]
    Auto,
    /// `finish` with this reason.
    Finish(StopReason),
    /// No `finish`: the stream just ends.
    Cut,
}

impl ScriptedTurn {
    /// An empty turn; append steps with the `with_*` methods. Played as is, it yields
    /// `message_start` and `finish` (`stop`) only.
    pub fn new() -> Self {
        Self::default()
    }

    /// A complete final answer: the text, then `finish` with `stop`.
    pub fn text(text: impl Into<String>) -> Self {
        Self::new().with_text(text)
    }

    /// A turn that asks for these tool calls, in order, then finishes with `tool_calls`.
    pub fn tool_calls(calls: impl IntoIterator<Item = ToolCall>) -> Self {
        Self {
            steps: calls.into_iter().map(Step::ToolCall).collect(),
            ..Self::default()
        }
    }

    /// A turn that asks for one tool call, then finishes with `tool_calls`.
    pub fn tool_call(id: impl Into<ToolCallId>, name: impl Into<String>, arguments: Value) -> Self {
        Self::new().with_tool_call(ToolCall::new(id, name, arguments))
    }

    /// Appends answer text (`text_delta`s).
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.steps.push(Step::Text(text.into()));
        self
    }

    /// Appends a reasoning block: its `thinking_delta`s, then a `thinking_signature` when a
    /// signature is given.
    pub fn with_thinking(mut self, text: impl Into<String>, signature: Option<String>) -> Self {
        self.steps.push(Step::Thinking {
            text: text.into(),
            signature,
        });
        self
    }

    /// Appends a tool call: `tool_call_start` (with the call's id, name and signature), the
    /// arguments as compact JSON text, `tool_call_end`. The turn then finishes with
    /// `tool_calls` unless [`finish`](Self::finish) says otherwise.
    pub fn with_tool_call(mut self, call: ToolCall) -> Self {
        self.steps.push(Step::ToolCall(call));
        self
    }

    /// Appends a `usage` event at this point. Most providers report usage at the end, so it
    /// usually comes last; reports of one call are running totals, not increments.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.steps.push(Step::Usage(usage));
        self
    }

    /// Pauses before the next step (or before `finish` when nothing follows).
    ///
    /// The pause is a [`tokio::time::sleep`], so it needs a tokio runtime with its timer
    /// enabled, and tests under a paused clock (`#[tokio::test(start_paused = true)]`) run it
    /// without waiting. Turns without delays never touch tokio and run under any executor.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.steps.push(Step::Delay(delay));
        self
    }

    /// Appends a raw event, yielded exactly as given: the escape hatch for sequences the
    /// other methods cannot write (redacted thinking, interleaved tool-call fragments,
    /// deliberately malformed streams). It does not change the automatic `message_start`,
    /// tool-call indexes or finish reason.
    pub fn with_event(mut self, event: StreamEvent) -> Self {
        self.steps.push(Step::Event(event));
        self
    }

    /// Sets the finish reason (`length`, `content_filter`...), replacing the automatic one.
    pub fn finish(mut self, stop_reason: StopReason) -> Self {
        self.end = End::Finish(stop_reason);
        self
    }

    /// Fails the call at this point: the stream yields `error` and ends, with no `finish`, as
    /// a provider failing mid-stream does. The error is yielded as given; set its `partial`
    /// if the code under test reads it.
    pub fn fail_with(mut self, error: BackendError) -> Self {
        self.steps.push(Step::Fail(error));
        self
    }

    /// Stops the call at this point for good: the stream stays pending forever (until it is
    /// dropped), as a provider that stops sending does. For cancellation and timeout tests.
    pub fn hang(mut self) -> Self {
        self.steps.push(Step::Hang);
        self
    }

    /// Ends the stream after the last step without a `finish` event, as a connection closed
    /// before the provider said it was done. For tests of what a consumer does with a
    /// truncated stream.
    pub fn end_without_finish(mut self) -> Self {
        self.end = End::Cut;
        self
    }

    /// Splits text, thinking and argument deltas into chunks of at most `bytes` bytes, cut at
    /// character boundaries (a character longer than `bytes` gets a chunk of its own), as
    /// providers split their output. Without it each block is one delta. Applies to the whole
    /// turn, wherever it is called.
    pub fn chunked(mut self, bytes: usize) -> Self {
        self.chunk = Some(bytes);
        self
    }

    /// The events this turn plays, and where it pauses, fails or hangs. `message_start` is
    /// not included: it depends on the request.
    fn compile(self) -> Box<[Action]> {
        let chunk = self.chunk;
        // Most steps are one event; text and arguments are more only when chunked.
        let mut actions = Vec::with_capacity(self.steps.len() + 1);
        let mut tool_calls: u32 = 0;
        for step in self.steps {
            match step {
                Step::Text(text) => {
                    push_deltas(&mut actions, text, chunk, |delta| StreamEvent::TextDelta {
                        delta,
                    });
                }
                Step::Thinking { text, signature } => {
                    push_deltas(&mut actions, text, chunk, |delta| {
                        StreamEvent::ThinkingDelta { delta }
                    });
                    if let Some(signature) = signature {
                        actions.push(Action::Emit(StreamEvent::ThinkingSignature {
                            signature,
                            id: None,
                        }));
                    }
                }
                Step::ToolCall(call) => {
                    let index = tool_calls;
                    tool_calls = tool_calls.saturating_add(1);
                    actions.push(Action::Emit(StreamEvent::ToolCallStart {
                        index,
                        id: call.id,
                        name: call.name,
                        signature: call.signature,
                    }));
                    // `Value`'s Display is serde_json's compact form, and it cannot fail.
                    let arguments = call.arguments.to_string();
                    push_deltas(&mut actions, arguments, chunk, |delta| {
                        StreamEvent::ToolCallDelta { index, delta }
                    });
                    actions.push(Action::Emit(StreamEvent::ToolCallEnd { index }));
                }
                Step::Usage(usage) => actions.push(Action::Emit(StreamEvent::Usage(usage))),
                // A zero sleep would still go through the timer (and need a runtime).
                Step::Delay(delay) if delay.is_zero() => {}
                Step::Delay(delay) => actions.push(Action::Pause(delay)),
                Step::Event(event) => actions.push(Action::Emit(event)),
                Step::Fail(error) => {
                    actions.push(Action::Fail(error));
                    return actions.into_boxed_slice();
                }
                Step::Hang => {
                    actions.push(Action::Hang);
                    return actions.into_boxed_slice();
                }
            }
        }
        let stop_reason = match self.end {
            End::Auto if tool_calls > 0 => Some(StopReason::ToolCalls),
            End::Auto => Some(StopReason::Stop),
            End::Finish(stop_reason) => Some(stop_reason),
            End::Cut => None,
        };
        if let Some(stop_reason) = stop_reason {
            actions.push(Action::Emit(StreamEvent::Finish { stop_reason }));
        }
        actions.into_boxed_slice()
    }
}

/// Pushes `text` as one delta, or as chunks of at most `chunk` bytes.
fn push_deltas(
    actions: &mut Vec<Action>,
    text: String,
    chunk: Option<usize>,
    event: impl Fn(String) -> StreamEvent,
) {
    match chunk {
        Some(max) if text.len() > max => {
            actions.extend(chunks(&text, max).map(|piece| Action::Emit(event(piece.to_owned()))));
        }
        // Moved, not copied: unchunked text is the caller's own string.
        _ => actions.push(Action::Emit(event(text))),
    }
}

/// Splits `text` into pieces of at most `max` bytes at character boundaries; a character
/// longer than `max` is a piece of its own, so every piece is non-empty.
fn chunks(text: &str, max: usize) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let first = rest.chars().next()?;
        let mut end = max.min(rest.len());
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        if end == 0 {
            end = first.len_utf8();
        }
        let (piece, tail) = rest.split_at(end);
        rest = tail;
        Some(piece)
    })
}

/// What a replay does next. Turns compile to these once, when the backend is built.
#[derive(Debug)]
enum Action {
    Emit(StreamEvent),
    Pause(Duration),
    Fail(BackendError),
    Hang,
}

/// A [`Backend`] that replays [`ScriptedTurn`]s, one per model call, in order.
///
/// Each call to [`stream`](Backend::stream) takes the next turn, so calls made concurrently
/// get distinct turns in the order they were started. Once a script made with
/// [`new`](Self::new) runs out, each further call yields one error of kind
/// [`InvalidRequest`](BackendErrorKind::InvalidRequest) (never a hang, so a loop that calls
/// the model once too often fails fast); [`cycle`](Self::cycle) repeats the script instead.
///
/// The request is ignored except for its model name (echoed in `message_start` unless
/// [`with_model`](Self::with_model) sets one) and, when [`recording`](Self::recording), a
/// copy kept for the test to inspect. Dropping the stream cancels the call.
///
/// ```
/// use std::time::Duration;
///
/// use agent_backends::{ScriptedBackend, ScriptedTurn};
/// use agent_types::{Backend, ModelRequest};
/// use futures_util::StreamExt;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// // A model that stops sending, and a caller that gives up after a second.
/// let backend = ScriptedBackend::new([ScriptedTurn::text("Hello").hang()]).recording();
/// let request = ModelRequest::new("test-model", Vec::new());
/// let mut stream = backend.stream(&request);
/// let _message_start = stream.next().await;
/// let _text = stream.next().await;
/// let gave_up = tokio::time::timeout(Duration::from_secs(1), stream.next()).await;
/// assert!(gave_up.is_err());
/// drop(stream);
///
/// assert_eq!(backend.calls(), 1);
/// assert_eq!(backend.requests()[0].model, "test-model");
/// # }
/// ```
#[derive(Debug)]
pub struct ScriptedBackend {
    turns: Box<[Box<[Action]>]>,
    cycle: bool,
    calls: AtomicUsize,
    capabilities: Capabilities,
    model: Option<String>,
    recorded: Option<Mutex<Vec<ModelRequest>>>,
}

impl ScriptedBackend {
    /// Plays `turns` in order, one per model call; every call after the last is an error.
    pub fn new(turns: impl IntoIterator<Item = ScriptedTurn>) -> Self {
        Self {
            turns: turns.into_iter().map(ScriptedTurn::compile).collect(),
            cycle: false,
            calls: AtomicUsize::new(0),
            capabilities: Capabilities {
                tools: true,
                streaming: true,
                parallel_tool_calls: true,
                thinking: true,
                prompt_caching: false,
                usage_reporting: true,
                structured_output: false,
                tool_search: false,
            },
            model: None,
            recorded: None,
        }
    }

    /// Plays `turns` in order and starts over after the last, forever (benchmarks, a model
    /// stuck repeating itself). An empty script still fails every call.
    pub fn cycle(turns: impl IntoIterator<Item = ScriptedTurn>) -> Self {
        Self {
            cycle: true,
            ..Self::new(turns)
        }
    }

    /// Reports these capabilities instead of the default (everything but prompt caching),
    /// e.g. to test that tools are refused before any call is made.
    pub fn with_capabilities(mut self, capabilities: Capabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// Names this model in `message_start` instead of echoing the request's model.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Keeps a copy of every request received, for [`requests`](Self::requests). Off by
    /// default: copying a growing history on every call would distort benchmarks.
    pub fn recording(mut self) -> Self {
        self.recorded = Some(Mutex::new(Vec::new()));
        self
    }

    /// The requests received so far, oldest first; empty unless [`recording`](Self::recording).
    pub fn requests(&self) -> Vec<ModelRequest> {
        match &self.recorded {
            Some(recorded) => recorded
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            None => Vec::new(),
        }
    }

    /// How many model calls were started (including calls past the end of the script).
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }

    /// The turn for the call numbered `call` (from 0), if the script has one.
    fn turn(&self, call: usize) -> Option<&[Action]> {
        let index = match self.turns.len() {
            0 => return None,
            len if self.cycle => call % len,
            _ => call,
        };
        self.turns.get(index).map(|turn| &turn[..])
    }
}

impl Backend for ScriptedBackend {
    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn provider_name(&self) -> &str {
        "scripted"
    }

    fn stream<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        let number = call.saturating_add(1);
        if let Some(recorded) = &self.recorded {
            recorded
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(request.clone());
        }
        let Some(actions) = self.turn(call) else {
            let turns = self.turns.len();
            let plural = if turns == 1 { "" } else { "s" };
            let error = BackendError::new(
                BackendErrorKind::InvalidRequest,
                format!(
                    "the scripted backend has {turns} turn{plural} and call {number} was made; \
                     add turns, or use ScriptedBackend::cycle to repeat them"
                ),
            );
            return Box::pin(Replay::new(Err(error), &[]));
        };
        let model = match &self.model {
            Some(model) => Some(model.clone()),
            None if request.model.is_empty() => None,
            None => Some(request.model.clone()),
        };
        let start = StreamEvent::MessageStart {
            id: Some(format!("scripted_{number}")),
            model,
        };
        Box::pin(Replay::new(Ok(start), actions))
    }
}

/// The stream of one call: a first item, then the turn's actions.
struct Replay<'a> {
    first: Option<Result<StreamEvent, BackendError>>,
    actions: std::slice::Iter<'a, Action>,
    pause: Option<Pin<Box<Sleep>>>,
    hung: bool,
}

impl<'a> Replay<'a> {
    fn new(first: Result<StreamEvent, BackendError>, actions: &'a [Action]) -> Self {
        Self {
            first: Some(first),
            actions: actions.iter(),
            pause: None,
            hung: false,
        }
    }
}

impl Stream for Replay<'_> {
    type Item = Result<StreamEvent, BackendError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(first));
        }
        if this.hung {
            // Nothing will ever wake this task for us; that is the point.
            return Poll::Pending;
        }
        if let Some(pause) = &mut this.pause {
            ready!(pause.as_mut().poll(cx));
            this.pause = None;
        }
        loop {
            match this.actions.next() {
                None => return Poll::Ready(None),
                Some(Action::Emit(event)) => return Poll::Ready(Some(Ok(event.clone()))),
                Some(Action::Pause(delay)) => {
                    let mut pause = Box::pin(tokio::time::sleep(*delay));
                    if pause.as_mut().poll(cx).is_pending() {
                        this.pause = Some(pause);
                        return Poll::Pending;
                    }
                }
                // Compiling stops at a failure or a hang, so nothing follows either.
                Some(Action::Fail(error)) => return Poll::Ready(Some(Err(error.clone()))),
                Some(Action::Hang) => {
                    this.hung = true;
                    return Poll::Pending;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cut_at_character_boundaries() {
        let pieces: Vec<&str> = chunks("añb€c", 2).collect();
        // "ñ" is 2 bytes and "€" 3: the euro sign exceeds the limit and stands alone.
        assert_eq!(pieces, ["a", "ñ", "b", "€", "c"]);
        assert_eq!(chunks("abcde", 2).collect::<Vec<_>>(), ["ab", "cd", "e"]);
        assert_eq!(chunks("€", 0).collect::<Vec<_>>(), ["€"]);
        assert_eq!(chunks("", 3).count(), 0);
    }
}
