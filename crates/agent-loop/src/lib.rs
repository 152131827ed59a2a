//! The agentry agent loop.
//!
//! A model gets tools. In [`return`](ToolMode::Return) mode (the default) one model call is
//! made and the tool calls it asks for come back to the caller. In [`auto`](ToolMode::Auto)
//! mode the loop validates each call's arguments, runs the handlers (in parallel by default),
//! feeds the results back in call order and calls the model again, until it answers, asks for
//! a tool the caller runs itself (the run suspends), or a budget trips: tool iterations,
//! cumulative tokens, cumulative US dollars, or the same call repeated. The token and dollar
//! budgets are checked before each model call too: a request whose estimated input
//! ([`TokenCounter`]) cannot fit what is left is not sent, and one that fits has its output
//! limit clamped to what is left.
//!
//! - [`Agent`] is the front door: a backend, model, system prompt, tools and [`Options`] in
//!   one cheaply clonable value, with `run`, `run_stream`, `session` and `resume`; and
//!   [`Agent::as_tool`], an agent as a tool of another (its events nested in the caller's
//!   stream, its spend within the caller's budgets). It runs through the functions below.
//! - [`generate`] runs a one-off [`Input`] and returns a [`GenerateResult`];
//!   [`generate_stream`] is the same loop yielding [`AgentEvent`](agent_types::AgentEvent)s
//!   as they happen, with the result at the end ([`EventStream::result`]).
//! - [`Session`] is a conversation as plain serializable data; [`execute`] and
//!   [`execute_stream`] run it from a user message or from the results of pending remote
//!   calls, so a run suspended in one process resumes in another. In a round that mixes
//!   local and remote calls, the local ones run first and their results join the history (and
//!   the appender) at once; the remote results follow when the caller resumes.
//! - A tool marked [`with_approval`](agent_tools::Tool::with_approval), or an approval policy
//!   ([`Options::with_approval_policy`]), makes a round wait for a person: the run suspends
//!   with status `awaiting_approval` and resumes from [`ApprovalDecision`]s (docs/approval.md).
//! - [`Options`] holds the mode, the [tools](agent_tools::Registry), every budget, timeouts,
//!   the cancellation token, the conversation appender and the [`Hooks`].
//! - [`Options::with_output`] asks for a typed final answer: a JSON Schema (derived from a
//!   type, or given raw) that the answer must match, asked for natively, through a
//!   final-answer tool or in the prompt, validated, and retried with the problems when it does
//!   not match ([`output`]); read it with [`GenerateResult::output`].
//!
//! The loop talks to models only through the [`Backend`] trait, so it has no HTTP client and
//! no provider code. It needs a tokio runtime with timers for timeouts and the cancellation
//! grace period.
//!
//! Every error ends the run with an [`AgentError`] whose kind maps to an HTTP status (budget
//! 429, aborted 499, configuration 400…) and which carries the trace and the messages
//! produced so far, whether or not a trace was asked for.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_backends::{ScriptedBackend, ScriptedTurn};
//! use agent_loop::{Input, Options, generate};
//! use agent_tools::{Registry, Tool};
//! use serde_json::json;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct City {
//!     city: String,
//! }
//!
//! let mut tools = Registry::new();
//! tools.register(Tool::from_fn("get_weather", "Current weather for a city.", |args: City, _ctx| async move {
//!     Ok(json!({"city": args.city, "sky": "sunny", "temp_c": 21}))
//! }))?;
//!
//! // A model that asks for the tool, then answers.
//! let backend = ScriptedBackend::new([
//!     ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Denver"})),
//!     ScriptedTurn::text("Sunny and 21 °C in Denver."),
//! ]);
//! let options = Options::auto().with_tools(tools).with_tool_trace(true);
//! let result = generate(&backend, Input::new("test-model").user("Weather in Denver?"), &options).await?;
//!
//! assert_eq!(result.text(), "Sunny and 21 °C in Denver.");
//! assert_eq!(result.trace[0].tool_name, "get_weather");
//! assert_eq!(result.messages.len(), 3); // tool-call turn, tool result, answer
//! # Ok(())
//! # }
//! ```

mod agent;
mod approval;
pub mod audit;
mod bounded;
mod checkpoint;
mod dispatch;
mod estimate;
mod events;
pub mod guardrail;
pub mod history;
mod hooks;
mod job;
pub mod machine;
mod one_call;
mod options;
pub mod output;
pub mod prepare;
mod pump;
mod result;
mod run;
mod run_messages;
mod session;
pub mod span_sink;
mod telemetry;
pub mod tool_search;

use agent_types::{AgentError, Backend, GenerationSettings, Message, ToolChoice, UserMessage};
use serde_json::{Map, Value};

pub use agent::{Agent, AgentBuilder};
pub use approval::{Approval, ApprovalDecision, ApprovalPolicy, ApprovalRequest};
pub use audit::{
    AccountingConfig, AccountingQueue, AccountingReceiver, AccountingRow, AccountingStats,
    ModelCallRow, QueueFull, RowWriter, RunContext, ToolCallRow, WriteError, WriteFuture,
};
pub use checkpoint::{CheckpointFuture, TurnCheckpoint};
pub use estimate::{ByteEstimate, TokenCounter};
pub use events::EventStream;
pub use guardrail::{
    CallCheck, CallVerdict, GuardFuture, Guardrails, InputCheck, InputGuardrail, OutputCheck,
    OutputGuardrail, ResultCheck, ResultVerdict, ToolGuardrail, Verdict,
};
pub use history::{HistoryPolicy, HistorySummary};
pub use hooks::{Hooks, ModelCallGate};
pub use one_call::{
    CallScreen, ToolCallOutcome, decide_tool_call, run_screened_tool_call, run_tool_call,
    run_tool_call_with_events, screen_tool_call, screen_tool_call_decided,
};
pub use options::{
    ModelCallSink, Options, ToolErrorMode, ToolMode, ToolParallelism, budget_problem,
};
pub use output::{OutputSpec, OutputStrategy};
pub use prepare::{PrepareRound, RoundContext, RoundPlan};
pub use result::{GenerateResult, ModelCallRecord};
pub use session::{BudgetsUsed, Session, SessionInput, SessionStatus};
pub use tool_search::{SearchableTools, ToolSearch};

pub use agent_tools::ValidationMode;

/// What a one-off run starts from: the model, the system prompt, the history and settings.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Input {
    /// The model to call.
    pub model: String,
    /// The static system prompt.
    pub system: Option<String>,
    /// The conversation; the last message is usually the user's question (or tool results
    /// in `return` mode).
    pub messages: Vec<Message>,
    /// Sampling and output settings.
    pub settings: GenerationSettings,
    /// Whether and which tool the model must call.
    pub tool_choice: ToolChoice,
    /// Provider-specific request fields, passed through.
    pub extras: Map<String, Value>,
}

impl Input {
    /// An empty input for `model`.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            ..Self::default()
        }
    }

    /// Sets the system prompt.
    #[must_use]
    pub fn system(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }

    /// Appends a user message.
    #[must_use]
    pub fn user(mut self, text: impl Into<String>) -> Self {
        self.messages.push(Message::User(UserMessage::text(text)));
        self
    }

    /// Appends any message.
    #[must_use]
    pub fn message(mut self, message: impl Into<Message>) -> Self {
        self.messages.push(message.into());
        self
    }

    /// Appends messages.
    #[must_use]
    pub fn messages(mut self, messages: impl IntoIterator<Item = Message>) -> Self {
        self.messages.extend(messages);
        self
    }

    /// Sets the generation settings.
    #[must_use]
    pub fn settings(mut self, settings: GenerationSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Sets the tool choice.
    #[must_use]
    pub fn tool_choice(mut self, tool_choice: ToolChoice) -> Self {
        self.tool_choice = tool_choice;
        self
    }

    fn into_session(self) -> Session {
        let mut session = Session::new(self.model)
            .with_settings(self.settings)
            .with_tool_choice(self.tool_choice);
        // Moved, not extended: the history's buffer is reused as is.
        session.messages = self.messages;
        session.system = self.system;
        session.extras = self.extras;
        session
    }
}

/// Runs `input` under `options` and returns the outcome.
///
/// In `return` mode this is one model call; in `auto` mode the whole loop. A run that asks
/// for remote tools ends with status `awaiting_tool_execution` and the pending calls; to
/// resume it, use a [`Session`] and [`execute`] instead.
///
/// # Errors
///
/// An [`AgentError`] for configuration mistakes (before any model call), budgets, backend
/// failures, cancellation, tool failures under `abort`, appender failures and refusals by a
/// gate; it carries the partial trace and messages.
pub async fn generate<B: Backend + ?Sized>(
    backend: &B,
    input: Input,
    options: &Options,
) -> Result<GenerateResult, AgentError> {
    let mut session = input.into_session();
    run::execute(
        &mut session,
        SessionInput::Continue,
        backend,
        options,
        events::Emitter::off(),
        run::Scope::OneOff,
    )
    .await
}

/// [`generate`], streaming: the events of every round as they happen, then the result via
/// [`EventStream::result`].
pub fn generate_stream<'a, B: Backend + 'a>(
    backend: B,
    input: Input,
    options: &Options,
) -> EventStream<'a> {
    let options = options.clone();
    let mut session = input.into_session();
    EventStream::new(move |emitter| async move {
        run::execute(
            &mut session,
            SessionInput::Continue,
            &backend,
            &options,
            emitter,
            run::Scope::OneOff,
        )
        .await
    })
}

/// Runs `session` from `input`: a user message, or the results of its pending calls.
///
/// The session is updated in place: history, status, usage, cost and pending calls. If the
/// input does not fit the session (results for the wrong calls, a user message while calls
/// are pending), nothing changes and a configuration error (400) says why.
///
/// # Errors
///
/// As [`generate`]. After an error the session keeps every message that completed and its
/// status says `error` or `aborted`.
pub async fn execute<B: Backend + ?Sized>(
    session: &mut Session,
    input: impl Into<SessionInput>,
    backend: &B,
    options: &Options,
) -> Result<GenerateResult, AgentError> {
    run::execute(
        session,
        input.into(),
        backend,
        options,
        events::Emitter::off(),
        run::Scope::Session,
    )
    .await
}

/// [`execute`], streaming.
pub fn execute_stream<'a, B: Backend + 'a>(
    session: &'a mut Session,
    input: impl Into<SessionInput>,
    backend: B,
    options: &Options,
) -> EventStream<'a> {
    let options = options.clone();
    let input = input.into();
    EventStream::new(move |emitter| async move {
        run::execute(
            session,
            input,
            &backend,
            &options,
            emitter,
            run::Scope::Session,
        )
        .await
    })
}
