//! History policies: what of the history a model call is sent with, decided before each call
//! and applied to the request only. The session, the appender and the run's result keep every
//! message; a policy never changes them.
//!
//! The history is cut into **turns**: a user (or system) message, or a model message together
//! with the results of the tool calls it made. A policy drops, stubs or summarizes whole turns
//! only, so a tool call is never sent without its result, nor a result without its call. The
//! first user message (the task) is always sent, and so is the newest turn.
//!
//! - [`HistoryPolicy::last_turns`]: the newest N turns (plus the task).
//! - [`HistoryPolicy::token_window`]: as many of the newest turns as fit a token window, by the
//!   run's [`TokenCounter`] ([`ByteEstimate`](crate::ByteEstimate) unless set) or one of the
//!   policy's own.
//! - [`HistoryPolicy::stub_tool_results`]: every turn is sent, but the bodies of tool results
//!   older than the newest K are replaced by a short stub.
//! - [`HistoryPolicy::summarize`]: the turns before the newest N are replaced by a summary the
//!   model writes (a model call of its own, counted in the budgets, traced, and cached in the
//!   session so it is made again only when more turns fall out of the window).
//!
//! Policies move their cut in chunks ([`HistoryPolicy::with_chunk`]) so the request's prefix
//! stays the same for several rounds in a row and a provider's prompt cache keeps hitting;
//! `docs/history.md` says what each policy does to Anthropic's cache.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_backends::{ScriptedBackend, ScriptedTurn};
//! use agent_loop::{HistoryPolicy, Options, Session, execute};
//!
//! let backend = ScriptedBackend::cycle([ScriptedTurn::text("ok")]).recording();
//! let options = Options::default().with_history(HistoryPolicy::last_turns(2).with_chunk(1));
//! let mut session = Session::new("m");
//! for question in ["one", "two", "three"] {
//!     execute(&mut session, question, &backend, &options).await?;
//! }
//! // The last call was sent the task, then the newest two turns...
//! assert_eq!(backend.requests()[2].messages.len(), 3);
//! // ...while the session keeps all six messages.
//! assert_eq!(session.messages.len(), 6);
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::fmt::Write as _;
use std::sync::Arc;

use agent_types::{
    AgentError, AssistantBlock, Message, ModelRequest, ToolResult, ToolResultBlock, UserBlock,
};
use serde::{Deserialize, Serialize};

use crate::estimate::{CountCache, TokenCounter};
use crate::options::Options;

/// The instructions the summary call gets unless the policy sets its own.
pub const DEFAULT_SUMMARY_INSTRUCTIONS: &str = "You summarize the earlier part of a \
conversation between a user and an AI assistant that uses tools, so the assistant can go on \
without it. Keep every fact, decision, open question, file name, identifier and number the \
rest of the conversation may need; drop pleasantries and repetition. Write plain prose or a \
short list, no preamble.";

/// How a history policy decides what a model call is sent (module docs).
#[derive(Clone)]
pub struct HistoryPolicy {
    kind: Kind,
    chunk: Option<usize>,
}

#[derive(Clone)]
enum Kind {
    LastTurns(usize),
    TokenWindow {
        max_tokens: u64,
        low_water: Option<u64>,
        counter: Option<Arc<dyn TokenCounter>>,
    },
    StubToolResults(usize),
    Summarize(Box<SummaryPolicy>),
}

#[derive(Clone)]
struct SummaryPolicy {
    keep_turns: usize,
    model: Option<String>,
    instructions: String,
    max_tokens: Option<u32>,
}

impl HistoryPolicy {
    /// Sends the task (the first user message) and the newest `turns` turns; older turns are
    /// dropped in chunks (by default half of `turns`), so between `turns` and
    /// `turns + chunk - 1` are sent. At least 1.
    pub fn last_turns(turns: usize) -> Self {
        Self {
            kind: Kind::LastTurns(turns),
            chunk: None,
        }
    }

    /// Sends the task and as many of the newest turns as keep the request's estimated input
    /// (system prompt and tool specs included) within `max_tokens`. When the history outgrows
    /// the window, the oldest turns are dropped until it is back under the low-water mark
    /// (three quarters of the window unless set), so the cut moves rarely. The newest turn is
    /// always sent, even when it alone is larger than the window.
    pub fn token_window(max_tokens: u64) -> Self {
        Self {
            kind: Kind::TokenWindow {
                max_tokens,
                low_water: None,
                counter: None,
            },
            chunk: None,
        }
    }

    /// Sends every turn, with the bodies of all but the newest `keep_last` tool results
    /// replaced by a stub naming the tool and the size left out (errors keep their flag).
    /// The newest turn's results (the ones the model has not read yet) are never stubbed.
    /// Results are stubbed in chunks (by default 4 at a time).
    pub fn stub_tool_results(keep_last: usize) -> Self {
        Self {
            kind: Kind::StubToolResults(keep_last),
            chunk: None,
        }
    }

    /// Sends the task, a summary of the turns before the newest `keep_turns`, and those turns.
    /// The summary is a model call of its own (the session's model unless
    /// [`with_summary_model`](Self::with_summary_model)), counted in the run's budgets, with
    /// its own [`ModelCallRecord`](crate::ModelCallRecord) and `chat` span
    /// (`agentry.purpose = "history_summary"`). It is kept in
    /// [`Session::history_summary`](crate::Session::history_summary) and made again only when
    /// more turns fall out of the window (then from the previous summary and the new turns).
    /// Turns leave the window in chunks (by default half of `keep_turns`). At least 1.
    pub fn summarize(keep_turns: usize) -> Self {
        Self {
            kind: Kind::Summarize(Box::new(SummaryPolicy {
                keep_turns,
                model: None,
                instructions: DEFAULT_SUMMARY_INSTRUCTIONS.to_owned(),
                max_tokens: Some(1_024),
            })),
            chunk: None,
        }
    }

    /// Moves the cut this many turns (or tool results) at a time: the prefix then stays the
    /// same for that many rounds. 1 moves it every round. At least 1.
    #[must_use]
    pub fn with_chunk(mut self, turns: usize) -> Self {
        self.chunk = Some(turns);
        self
    }

    /// Counts a [`token_window`](Self::token_window)'s tokens with `counter` instead of the
    /// run's [`Options::token_counter`]. No effect on other policies.
    #[must_use]
    pub fn with_counter(mut self, counter: impl TokenCounter + 'static) -> Self {
        if let Kind::TokenWindow { counter: slot, .. } = &mut self.kind {
            *slot = Some(Arc::new(counter));
        }
        self
    }

    /// Where a [`token_window`](Self::token_window) that overflowed drops down to (at most the
    /// window). No effect on other policies.
    #[must_use]
    pub fn with_low_water(mut self, tokens: u64) -> Self {
        if let Kind::TokenWindow { low_water, .. } = &mut self.kind {
            *low_water = Some(tokens);
        }
        self
    }

    /// The model that writes a [`summarize`](Self::summarize) policy's summary (a cheaper one,
    /// say); it goes through the run's backend. No effect on other policies.
    #[must_use]
    pub fn with_summary_model(mut self, model: impl Into<String>) -> Self {
        if let Kind::Summarize(summary) = &mut self.kind {
            summary.model = Some(model.into());
        }
        self
    }

    /// The system prompt of the summary call ([`DEFAULT_SUMMARY_INSTRUCTIONS`] unless set).
    #[must_use]
    pub fn with_summary_instructions(mut self, instructions: impl Into<String>) -> Self {
        if let Kind::Summarize(summary) = &mut self.kind {
            summary.instructions = instructions.into();
        }
        self
    }

    /// The summary call's output limit (1,024 tokens unless set; `None` for the provider's).
    #[must_use]
    pub fn with_summary_max_tokens(mut self, tokens: Option<u32>) -> Self {
        if let Kind::Summarize(summary) = &mut self.kind {
            summary.max_tokens = tokens;
        }
        self
    }

    /// A zero count or window is a configuration error, never "send nothing".
    pub(crate) fn check(&self) -> Result<(), AgentError> {
        let problem = match &self.kind {
            Kind::LastTurns(0) => Some("last_turns(0): keep at least 1 turn"),
            Kind::TokenWindow { max_tokens: 0, .. } => Some("token_window(0): the window is empty"),
            Kind::Summarize(summary) if summary.keep_turns == 0 => {
                Some("summarize(0): keep at least 1 turn")
            }
            _ => None,
        };
        if self.chunk == Some(0) {
            return Err(AgentError::config(
                "history policy: with_chunk(0) is invalid: move the cut at least 1 turn at a time",
            ));
        }
        match problem {
            Some(problem) => Err(AgentError::config(format!("history policy: {problem}"))),
            None => Ok(()),
        }
    }

    fn chunk(&self) -> usize {
        self.chunk
            .unwrap_or(match &self.kind {
                Kind::LastTurns(turns) => turns / 2,
                Kind::Summarize(summary) => summary.keep_turns / 2,
                Kind::StubToolResults(_) => 4,
                Kind::TokenWindow { .. } => 1,
            })
            .max(1)
    }

    /// The summary call's model, when this is a summarizing policy.
    pub(crate) fn summary_model<'a>(&'a self, session_model: &'a str) -> Option<&'a str> {
        match &self.kind {
            Kind::Summarize(summary) => Some(summary.model.as_deref().unwrap_or(session_model)),
            _ => None,
        }
    }
}

impl fmt::Debug for HistoryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("HistoryPolicy");
        match &self.kind {
            Kind::LastTurns(turns) => out.field("last_turns", turns),
            Kind::TokenWindow {
                max_tokens,
                low_water,
                counter,
            } => out
                .field("token_window", max_tokens)
                .field("low_water", low_water)
                .field("own_counter", &counter.is_some()),
            Kind::StubToolResults(keep) => out.field("stub_tool_results", keep),
            Kind::Summarize(summary) => out
                .field("summarize", &summary.keep_turns)
                .field("model", &summary.model),
        };
        out.field("chunk", &self.chunk()).finish()
    }
}

impl Options {
    /// Applies `policy` to each model call's request (module [`history`](crate::history)).
    #[must_use]
    pub fn with_history(mut self, policy: HistoryPolicy) -> Self {
        self.history = Some(policy);
        self
    }
}

/// A summary of the turns `[from, to)` of a session's history, kept so the next rounds and
/// runs reuse it; part of the serialized session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistorySummary {
    /// The first message summarized (the one after the task).
    pub from: usize,
    /// The message after the last one summarized.
    pub to: usize,
    /// The summary the model wrote.
    pub text: String,
}

/// The prefix of the user message that carries a summary into the request.
pub const SUMMARY_PREFIX: &str =
    "Summary of the earlier conversation (older turns are left out):\n\n";

/// What one call is sent, as positions in the full history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Messages before this index are always sent (up to the task).
    pub(crate) pinned: usize,
    /// Messages in `[pinned, cut)` are left out (or summarized).
    pub(crate) cut: usize,
    /// Tool results in `[pinned, stub_until)` are sent as stubs.
    pub(crate) stub_until: usize,
}

/// The summary call a plan needs: the messages to summarize and the summary to extend.
pub(crate) struct SummaryNeed {
    pub(crate) from: usize,
    pub(crate) to: usize,
    /// The cached summary of `[from, previous_to)` this one extends, if any.
    pub(crate) previous: Option<String>,
    pub(crate) previous_to: usize,
}

/// A policy's per-run state: each message's token count, and a token window's cut.
pub(crate) struct Shaper {
    policy: HistoryPolicy,
    counts: CountCache,
}

/// What [`shape`] changed in the history, to put it back after the call.
#[derive(Debug)]
pub(crate) struct Applied {
    pinned: usize,
    inserted: usize,
    dropped: Vec<Message>,
    stubbed: Vec<(usize, Message)>,
    /// The shaped history's estimated tokens.
    pub(crate) tokens: u64,
}

/// The index after the first user message: what every call is sent whatever the policy.
fn pinned(messages: &[Message]) -> usize {
    messages
        .iter()
        .position(|message| matches!(message, Message::User(_)))
        .map_or(0, |at| at + 1)
}

/// Where each turn of `messages[from..]` starts: at every message that is not a tool result
/// (a tool result belongs to the turn of the call it answers).
fn turn_starts(messages: &[Message], from: usize) -> Vec<usize> {
    (from..messages.len())
        .filter(|&at| !matches!(messages[at], Message::Tool(_)))
        .collect()
}

/// How many of `count` items to leave out when `keep` must stay, moving `chunk` at a time.
fn chunked(count: usize, keep: usize, chunk: usize) -> usize {
    count.saturating_sub(keep) / chunk * chunk
}

/// A token window's cut, replayed over the history turn by turn from its start: whenever a
/// turn takes the sent tokens over `max`, the oldest turns go until they are back under `low`
/// (never the newest). Depending on the history alone, the cut is the same in every run of a
/// session, and it moves only when the window overflows, so the prefix stays put between.
fn window_cut(
    counts: &[u64],
    starts: &[usize],
    pinned: usize,
    preamble: u64,
    max: u64,
    low: u64,
) -> usize {
    let head = preamble.saturating_add(counts[..pinned].iter().sum::<u64>());
    let turn = |i: usize| -> u64 {
        let end = starts.get(i + 1).copied().unwrap_or(counts.len());
        counts[starts[i]..end].iter().sum()
    };
    // `first`: the oldest turn sent; `sent`: the tokens of turns `first..=last`.
    let mut first = 0;
    let mut sent: u64 = 0;
    for last in 0..starts.len() {
        sent = sent.saturating_add(turn(last));
        if head.saturating_add(sent) > max {
            while first < last && head.saturating_add(sent) > low {
                sent -= turn(first);
                first += 1;
            }
        }
    }
    starts.get(first).copied().unwrap_or(pinned)
}

impl Shaper {
    pub(crate) fn new(policy: HistoryPolicy) -> Self {
        Self {
            policy,
            counts: CountCache::default(),
        }
    }

    pub(crate) fn policy(&self) -> &HistoryPolicy {
        &self.policy
    }

    /// Decides what the next call is sent. `preamble` is the system prompt's and tool specs'
    /// tokens (a token window counts them).
    pub(crate) fn plan(
        &mut self,
        messages: &[Message],
        counter: &dyn TokenCounter,
        preamble: u64,
    ) -> Plan {
        let pinned = pinned(messages);
        let chunk = self.policy.chunk();
        let own_counter = match &self.policy.kind {
            Kind::TokenWindow {
                counter: Some(own), ..
            } => Some(Arc::clone(own)),
            _ => None,
        };
        let counter: &dyn TokenCounter = own_counter.as_deref().unwrap_or(counter);
        self.counts.history(counter, messages);
        let mut plan = Plan {
            pinned,
            cut: pinned,
            stub_until: pinned,
        };
        match &self.policy.kind {
            Kind::LastTurns(keep) => {
                let starts = turn_starts(messages, pinned);
                let drop = chunked(starts.len(), *keep, chunk);
                if drop > 0 {
                    plan.cut = starts[drop];
                }
            }
            Kind::Summarize(summary) => {
                let starts = turn_starts(messages, pinned);
                let drop = chunked(starts.len(), summary.keep_turns, chunk);
                if drop > 0 {
                    plan.cut = starts[drop];
                }
            }
            Kind::StubToolResults(keep) => {
                let results: Vec<usize> = (pinned..messages.len())
                    .filter(|&at| matches!(messages[at], Message::Tool(_)))
                    .collect();
                let stub = chunked(results.len(), *keep, chunk);
                if stub > 0 {
                    // The newest turn's results are what the model is about to read: never
                    // stubbed.
                    let newest = turn_starts(messages, pinned)
                        .last()
                        .copied()
                        .unwrap_or(pinned);
                    plan.stub_until = (results[stub - 1] + 1).min(newest).max(pinned);
                }
            }
            Kind::TokenWindow {
                max_tokens,
                low_water,
                ..
            } => {
                plan.cut = window_cut(
                    self.counts.per_message(),
                    &turn_starts(messages, pinned),
                    pinned,
                    preamble,
                    *max_tokens,
                    low_water.unwrap_or(max_tokens / 4 * 3).min(*max_tokens),
                );
            }
        }
        plan
    }

    /// The summary call `plan` needs, given the session's cached summary; `None` when the
    /// cached one covers exactly the turns left out (or the policy does not summarize).
    pub(crate) fn summary_need(
        &self,
        plan: &Plan,
        cached: Option<&HistorySummary>,
    ) -> Option<SummaryNeed> {
        if !matches!(self.policy.kind, Kind::Summarize(_)) || plan.cut <= plan.pinned {
            return None;
        }
        match cached {
            Some(summary) if summary.from == plan.pinned && summary.to == plan.cut => None,
            // The window moved on: the new summary extends the cached one.
            Some(summary) if summary.from == plan.pinned && summary.to < plan.cut => {
                Some(SummaryNeed {
                    from: plan.pinned,
                    to: plan.cut,
                    previous: Some(summary.text.clone()),
                    previous_to: summary.to,
                })
            }
            // None yet, or one that no longer matches the history: made from scratch.
            _ => Some(SummaryNeed {
                from: plan.pinned,
                to: plan.cut,
                previous: None,
                previous_to: plan.pinned,
            }),
        }
    }

    /// Applies `plan` to `messages` in place, moving (never copying) what is left out, and
    /// returns what to put back. `summary` is the text standing for `[pinned, cut)`.
    pub(crate) fn apply(
        &self,
        messages: &mut Vec<Message>,
        plan: &Plan,
        summary: Option<&str>,
        counter: &dyn TokenCounter,
    ) -> Applied {
        let counts = self.counts.per_message();
        let mut tokens: u64 = counts[..plan.pinned].iter().sum::<u64>()
            + counts[plan.cut.min(counts.len())..].iter().sum::<u64>();
        let mut stubbed = Vec::new();
        let range = plan.pinned..plan.stub_until;
        for (at, message) in range.clone().zip(&mut messages[range]) {
            if let Message::Tool(result) = message
                && let Some(stub) = stub_for(result)
            {
                let stub = Message::Tool(stub);
                tokens = tokens
                    .saturating_sub(counts.get(at).copied().unwrap_or(0))
                    .saturating_add(counter.message_tokens(&stub));
                stubbed.push((at, std::mem::replace(message, stub)));
            }
        }
        let inserted = summary.map(|text| Message::user(format!("{SUMMARY_PREFIX}{text}")));
        if let Some(message) = &inserted {
            tokens = tokens.saturating_add(counter.message_tokens(message));
        }
        let count = usize::from(inserted.is_some());
        let dropped = if plan.cut > plan.pinned || inserted.is_some() {
            messages.splice(plan.pinned..plan.cut, inserted).collect()
        } else {
            Vec::new()
        };
        Applied {
            pinned: plan.pinned,
            inserted: count,
            dropped,
            stubbed,
            tokens,
        }
    }
}

/// Puts back what [`Shaper::apply`] took out: `messages` is the full history again.
pub(crate) fn restore(messages: &mut Vec<Message>, applied: Applied) {
    let Applied {
        pinned,
        inserted,
        dropped,
        stubbed,
        ..
    } = applied;
    if inserted > 0 || !dropped.is_empty() {
        messages.splice(pinned..pinned + inserted, dropped);
    }
    for (at, original) in stubbed {
        messages[at] = original;
    }
}

/// The stub standing for a tool result, or `None` when the result is no longer than it.
fn stub_for(result: &ToolResult) -> Option<ToolResult> {
    let bytes = result.content.len()
        + result
            .blocks
            .iter()
            .map(|block| match block {
                ToolResultBlock::Text { text } => text.len(),
                ToolResultBlock::Json { value } => value.to_string().len(),
                ToolResultBlock::Image { .. } | ToolResultBlock::File(_) => 1_000,
            })
            .sum::<usize>();
    let content = format!(
        "[earlier result of `{}` left out: {bytes} bytes]",
        result.name
    );
    (bytes > content.len()).then(|| ToolResult {
        tool_call_id: result.tool_call_id.clone(),
        name: result.name.clone(),
        content,
        blocks: Vec::new(),
        is_error: result.is_error,
    })
}

/// The request of a summary call: the policy's instructions, and the turns as a transcript in
/// one user message (a transcript, not the messages themselves, so the slice may start
/// anywhere and any provider takes it).
pub(crate) fn summary_request(
    policy: &HistoryPolicy,
    model: &str,
    messages: &[Message],
    need: &SummaryNeed,
) -> ModelRequest {
    let Kind::Summarize(summary) = &policy.kind else {
        return ModelRequest::new(model, Vec::new());
    };
    let mut text = String::new();
    if let Some(previous) = &need.previous {
        let _ = write!(
            text,
            "The summary so far:\n\n{previous}\n\nWhat happened next:\n\n"
        );
    }
    for message in &messages[need.previous_to..need.to] {
        transcribe(&mut text, message);
    }
    text.push_str("\nWrite the summary now.");
    let mut request = ModelRequest::new(model, vec![Message::user(text)]);
    request.system = Some(summary.instructions.clone());
    request.settings.max_output_tokens = summary.max_tokens;
    request
}

fn transcribe(out: &mut String, message: &Message) {
    match message {
        Message::System { content } => {
            let _ = writeln!(out, "[system] {content}");
        }
        Message::User(user) => {
            out.push_str("[user] ");
            for block in &user.content {
                match block {
                    UserBlock::Text { text } => out.push_str(text),
                    UserBlock::Image { .. } => out.push_str("(an image)"),
                    UserBlock::File(_) => out.push_str("(a file)"),
                    UserBlock::Audio(_) => out.push_str("(audio)"),
                }
            }
            out.push('\n');
        }
        Message::Assistant(assistant) => {
            out.push_str("[assistant] ");
            for block in &assistant.content {
                match block {
                    AssistantBlock::Text { text } | AssistantBlock::Refusal { text } => {
                        out.push_str(text);
                    }
                    AssistantBlock::Thinking(_) => {}
                    AssistantBlock::ToolCall(call) => {
                        let _ = write!(out, "(calls `{}` with {})", call.name, call.arguments);
                    }
                }
            }
            out.push('\n');
        }
        Message::Tool(result) => {
            let _ = write!(
                out,
                "[result of `{}`{}] {}",
                result.name,
                if result.is_error { ", an error" } else { "" },
                result.content
            );
            for block in &result.blocks {
                match block {
                    ToolResultBlock::Text { text } => out.push_str(text),
                    ToolResultBlock::Json { value } => {
                        let _ = write!(out, "{value}");
                    }
                    ToolResultBlock::Image { .. } => out.push_str("(an image)"),
                    ToolResultBlock::File(_) => out.push_str("(a file)"),
                }
            }
            out.push('\n');
        }
    }
}

/// Makes one summary call: streamed, bounded by the run's cancellation and model-call timeout,
/// under a `chat` span of its own (`agentry.purpose = "history_summary"`). The caller
/// accounts the usage and cost, records the span's usage and keeps the record.
pub(crate) async fn call_summary<B: agent_types::Backend + ?Sized>(
    backend: &B,
    request: &ModelRequest,
    options: &Options,
    conversation: &str,
    iteration: u32,
) -> Result<
    (
        agent_types::AssistantMessage,
        crate::ModelCallRecord,
        tracing::Span,
    ),
    AgentError,
> {
    use agent_types::{BackendError, MessageAssembler, StopReason};
    use futures_util::StreamExt;
    use tracing::{Instrument, field};

    use crate::bounded::bounded;
    use crate::telemetry::{self, SpanName};

    let direct = crate::span_sink::with_run(|run| {
        run.start_chat(&crate::span_sink::ChatStart {
            provider: backend.provider_name(),
            model: &request.model,
            max_tokens: request.settings.max_output_tokens,
            temperature: None,
            top_p: None,
            json_output: false,
            conversation_id: conversation,
            iteration,
            purpose: Some("history_summary"),
            system_instructions: None,
            input_messages: None,
        });
    })
    .is_some();
    let span = if direct {
        tracing::Span::none()
    } else {
        tracing::info_span!(
            "chat",
            otel.name = %SpanName("chat", Some(&request.model)),
            otel.kind = "client",
            otel.status_code = field::Empty,
            error.type = field::Empty,
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = backend.provider_name(),
            gen_ai.request.model = %request.model,
            gen_ai.request.max_tokens = request.settings.max_output_tokens.map(i64::from),
            gen_ai.conversation.id = conversation,
            gen_ai.response.model = field::Empty,
            gen_ai.response.id = field::Empty,
            gen_ai.response.finish_reasons = field::Empty,
            gen_ai.usage.input_tokens = field::Empty,
            gen_ai.usage.output_tokens = field::Empty,
            gen_ai.usage.cache_read.input_tokens = field::Empty,
            gen_ai.usage.cache_creation.input_tokens = field::Empty,
            agentry.usage.cache_creation_1h.input_tokens = field::Empty,
            agentry.usage.reasoning.output_tokens = field::Empty,
            agentry.cost_usd = field::Empty,
            agentry.iteration = i64::from(iteration),
            agentry.purpose = "history_summary",
        )
    };
    let started = tokio::time::Instant::now();
    let mut first_event = None;
    let mut assembler = MessageAssembler::new(false);
    let pumped = {
        let mut stream = backend.stream(request);
        let assembler = &mut assembler;
        let first_event = &mut first_event;
        let pump = async move {
            while let Some(item) = stream.next().await {
                first_event.get_or_insert_with(|| started.elapsed());
                assembler.push(item?)?;
            }
            Ok::<(), BackendError>(())
        };
        bounded(pump, &options.cancellation, options.model_call_timeout)
            .instrument(span.clone())
            .await
    };
    let latency = started.elapsed();
    let failure = crate::bounded::call_failure(
        pumped,
        assembler.is_finished(),
        "the history summary call",
        "the summary call's stream",
    );
    if let Some(error) = failure {
        telemetry::record_error(&span, &error);
        if direct {
            crate::span_sink::with_run(|run| {
                run.end_chat(&crate::span_sink::ChatEnd {
                    time_to_first_event: first_event,
                    error_type: Some(telemetry::error_type(&error)),
                    ..Default::default()
                });
            });
        }
        return Err(error);
    }
    let mut message = assembler.finish();
    let response_id = assembler.take_response_id();
    if message.model.is_none() {
        message.model = Some(request.model.clone());
    }
    tracing::record_all!(
        span,
        gen_ai.response.model = message.model.as_deref(),
        gen_ai.response.id = response_id.as_deref(),
        gen_ai.response.finish_reasons =
            telemetry::finish_reason(message.stop_reason.unwrap_or(StopReason::Stop)),
    );
    let record = crate::ModelCallRecord {
        iteration,
        model: message.model.clone().unwrap_or_default(),
        usage: message.usage,
        cost_usd: None,
        latency,
        time_to_first_event: first_event.unwrap_or(latency),
        tool_calls: 0,
        stop_reason: message.stop_reason.unwrap_or(StopReason::Stop),
        response_id,
    };
    Ok((message, record, span))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use agent_types::{AssistantMessage, ToolCall};
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::estimate::ByteEstimate;

    /// One step of a random history: a user message, a model answer, or a model turn with
    /// `n` calls (and their results, unless `dangling`).
    #[derive(Debug, Clone)]
    enum Step {
        User(usize),
        Answer(usize),
        Calls { n: usize, size: usize },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (1..200usize).prop_map(Step::User),
            (1..200usize).prop_map(Step::Answer),
            (1..4usize, 1..400usize).prop_map(|(n, size)| Step::Calls { n, size }),
        ]
    }

    fn history(steps: &[Step]) -> Vec<Message> {
        let mut messages = Vec::new();
        let mut id = 0;
        for step in steps {
            match step {
                Step::User(size) => messages.push(Message::user("u".repeat(*size))),
                Step::Answer(size) => {
                    messages.push(Message::Assistant(AssistantMessage::text(
                        "a".repeat(*size),
                    )));
                }
                Step::Calls { n, size } => {
                    let calls: Vec<ToolCall> = (0..*n)
                        .map(|i| ToolCall::new(format!("c{}", id + i), "t", json!({"i": i})))
                        .collect();
                    messages.push(Message::Assistant(AssistantMessage {
                        content: calls
                            .iter()
                            .cloned()
                            .map(AssistantBlock::ToolCall)
                            .collect(),
                        ..AssistantMessage::default()
                    }));
                    for call in calls {
                        messages.push(Message::Tool(ToolResult::ok(
                            call.id,
                            "t",
                            "r".repeat(*size),
                        )));
                    }
                    id += n;
                }
            }
        }
        messages
    }

    fn policy() -> impl Strategy<Value = HistoryPolicy> {
        let chunk = proptest::option::of(1..5usize);
        (
            prop_oneof![
                (1..6usize).prop_map(HistoryPolicy::last_turns),
                (20..3_000u64).prop_map(HistoryPolicy::token_window),
                (0..5usize).prop_map(HistoryPolicy::stub_tool_results),
                (1..6usize).prop_map(HistoryPolicy::summarize),
            ],
            chunk,
        )
            .prop_map(|(policy, chunk)| match chunk {
                Some(chunk) => policy.with_chunk(chunk),
                None => policy,
            })
    }

    /// Every result's call precedes it, every call's result follows its turn.
    fn check_pairs(original: &[Message], shaped: &[Message]) -> Result<(), TestCaseError> {
        let answered: HashSet<&str> = original
            .iter()
            .filter_map(|message| match message {
                Message::Tool(result) => Some(result.tool_call_id.as_str()),
                _ => None,
            })
            .collect();
        let mut open: Vec<&str> = Vec::new();
        for message in shaped {
            match message {
                Message::Assistant(assistant) => {
                    prop_assert!(open.is_empty(), "calls left unanswered: {open:?}");
                    open = assistant
                        .tool_calls()
                        .map(|call| call.id.as_str())
                        .filter(|id| answered.contains(id))
                        .collect();
                }
                Message::Tool(result) => {
                    let at = open
                        .iter()
                        .position(|id| *id == result.tool_call_id.as_str());
                    prop_assert!(
                        at.is_some(),
                        "result {} without its call",
                        result.tool_call_id
                    );
                    open.remove(at.unwrap_or_default());
                }
                _ => prop_assert!(open.is_empty(), "calls left unanswered: {open:?}"),
            }
        }
        prop_assert!(open.is_empty(), "calls left unanswered: {open:?}");
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn a_tool_call_is_never_sent_without_its_result(
            steps in proptest::collection::vec(step(), 1..40),
            policy in policy(),
        ) {
            let full = history(&steps);
            let counter = ByteEstimate;
            let mut shaper = Shaper::new(policy);
            // The history grows round by round, as in a run.
            for len in 1..=full.len() {
                let mut messages = full[..len].to_vec();
                let plan = shaper.plan(&messages, &counter, 10);
                let summary = (plan.cut > plan.pinned).then_some("the summary");
                let summary = summary.filter(|_| shaper.policy().summary_model("m").is_some());
                let applied = shaper.apply(&mut messages, &plan, summary, &counter);
                check_pairs(&full[..len], &messages)?;
                // The task and the newest message are always sent.
                if let Some(first) = full[..len].iter().position(|m| matches!(m, Message::User(_))) {
                    prop_assert_eq!(&messages[..=first], &full[..=first]);
                }
                prop_assert_eq!(messages.last(), full[..len].last());
                // The estimate is the shaped history's count.
                let counted: u64 = messages.iter().map(|m| counter.message_tokens(m)).sum();
                prop_assert_eq!(applied.tokens, counted);
                restore(&mut messages, applied);
                prop_assert_eq!(&messages[..], &full[..len]);
            }
        }
    }

    #[test]
    fn last_turns_moves_its_cut_in_chunks() {
        let counter = ByteEstimate;
        let steps: Vec<Step> = (0..12)
            .map(|i| {
                if i % 2 == 0 {
                    Step::User(5)
                } else {
                    Step::Answer(5)
                }
            })
            .collect();
        let full = history(&steps);
        let mut shaper = Shaper::new(HistoryPolicy::last_turns(4).with_chunk(3));
        let cuts: Vec<usize> = (1..=full.len())
            .map(|len| shaper.plan(&full[..len], &counter, 0).cut)
            .collect();
        // Turns after the task: 0..=11; the cut moves 3 turns at a time, once 4 + 3 are there.
        assert_eq!(cuts, [1, 1, 1, 1, 1, 1, 1, 4, 4, 4, 7, 7]);
    }

    #[test]
    fn a_token_window_drops_to_its_low_water_mark_and_then_holds() {
        struct Ten;
        impl TokenCounter for Ten {
            fn message_tokens(&self, _: &Message) -> u64 {
                10
            }
            fn preamble_tokens(&self, _: Option<&str>, _: &[agent_types::ToolSpec]) -> u64 {
                0
            }
        }
        let steps: Vec<Step> = (0..12)
            .map(|i| {
                if i % 2 == 0 {
                    Step::User(5)
                } else {
                    Step::Answer(5)
                }
            })
            .collect();
        let full = history(&steps);
        let mut shaper = Shaper::new(
            HistoryPolicy::token_window(60)
                .with_low_water(30)
                .with_counter(Ten),
        );
        let sent: Vec<usize> = (1..=full.len())
            .map(|len| {
                let plan = shaper.plan(&full[..len], &ByteEstimate, 0);
                plan.pinned + len - plan.cut
            })
            .collect();
        assert_eq!(sent, [1, 2, 3, 4, 5, 6, 3, 4, 5, 6, 3, 4]);
    }

    #[test]
    fn a_policy_that_keeps_nothing_is_a_configuration_error() {
        for policy in [
            HistoryPolicy::last_turns(0),
            HistoryPolicy::token_window(0),
            HistoryPolicy::summarize(0),
            HistoryPolicy::stub_tool_results(2).with_chunk(0),
        ] {
            let error = policy.check().unwrap_err();
            assert!(
                error.message.starts_with("history policy: "),
                "{}",
                error.message
            );
        }
        assert!(HistoryPolicy::stub_tool_results(0).check().is_ok());
    }
}
