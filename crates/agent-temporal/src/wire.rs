//! The values that cross Temporal: the workflow's input and result, and each activity's input
//! and output. All are JSON (Temporal's default payload converter), so a client in another
//! language (the Python SDK in the tests) can start `agent_run` and read its result.

use agent_loop::machine::{Action, Screen, Setup, State};
use agent_loop::{Session, SessionStatus};
use agent_types::{
    AgentError, AssistantMessage, GuardrailDecision, ModelRequest, ToolCall, ToolResult,
    TraceEntry, Usage,
};
use serde::{Deserialize, Serialize};

/// What `agent_run` starts from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRequest {
    /// The session to run (model, system prompt, history, settings).
    pub session: Session,
    /// The user's message for a new run; `None` continues the session (a suspended one with
    /// the budgets it kept) or, with `resume`, the run before a continue-as-new.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Set by continue-as-new: the machine's state and the action it was about to perform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<Box<Resume>>,
    /// What the previous runs of this workflow (before continue-as-new) produced.
    #[serde(default)]
    pub carried: Carried,
    /// Continue as new past this many history events instead of
    /// [`CONTINUE_AS_NEW_AFTER_EVENTS`](crate::CONTINUE_AS_NEW_AFTER_EVENTS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continue_as_new_after: Option<u32>,
}

impl RunRequest {
    /// A new run of `session` on the user's `text`.
    pub fn new(session: Session, text: impl Into<String>) -> Self {
        Self {
            session,
            user: Some(text.into()),
            resume: None,
            carried: Carried::default(),
            continue_as_new_after: None,
        }
    }
}

/// Where a run continued as new picks up: the loop's state machine as it stood, the action
/// it had asked for and not yet performed, and the run's config (so no second `run_config`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Resume {
    /// The machine's state.
    pub state: State,
    /// The action to perform first.
    pub action: Action,
    /// The config the run started with.
    pub config: RunConfig,
}

/// What a workflow run hands to the next one when it continues as new.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Carried {
    /// The trace so far.
    #[serde(default)]
    pub trace: Vec<TraceEntry>,
    /// Tokens of the run not in the machine's state (machines before a suspension).
    #[serde(default)]
    pub usage: Usage,
    /// Dollars of the run not in the machine's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Model calls so far.
    #[serde(default)]
    pub model_calls: u32,
    /// How many times the workflow continued as new.
    #[serde(default)]
    pub continued: u32,
    /// Where the messages the run's next live `session_end` lists start in the session's
    /// history (crate::events).
    #[serde(default)]
    pub events_from: usize,
    /// Where the trace of the run's current part starts (a live `error`'s partial trace).
    #[serde(default)]
    pub trace_from: usize,
}

/// The `run_config` activity's input: the session without its history (the config reads
/// its model, system prompt, settings and remote tools).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfigInput {
    /// The session, `messages` left empty.
    pub session: Session,
    /// The caller's new message, for the worker's input guardrails (none when the run
    /// continues the session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// What the worker's options decide for a run, read once by the `run_config` activity and
/// kept in the history (and across continue-as-new), so the workflow decides by data only.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunConfig {
    /// The machine's config, the request template and the driver's caps.
    pub setup: Setup,
    /// The retry policy of the `model_call` and `tool_call` activities.
    pub retries: Retries,
    /// A model call's start-to-close timeout, in milliseconds.
    pub model_call_timeout_ms: u64,
    /// A tool call's start-to-close timeout, in milliseconds.
    pub tool_call_timeout_ms: u64,
    /// Whether the worker keeps a live event log (crate::events): the workflow publishes its
    /// own events only then, so a run without one has no `publish_events` markers.
    #[serde(default)]
    pub events: bool,
    /// The trip of the worker's input guardrails on the caller's new message: the run ends
    /// with it before any model call, as in process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tripped: Option<AgentError>,
}

/// How failed activities are retried (Temporal's retry policy, from the worker's settings:
/// [`AgentActivities::with_retries`](crate::AgentActivities::with_retries)). Only retryable
/// failures are retried: a backend's 5xx, timeout, rate limit or connection failure, a worker
/// that died; budgets, validation, configuration, refusals and other 4xx never are.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Retries {
    /// Attempts in all, the first included (1: never retried).
    pub max_attempts: u32,
    /// The wait before the first retry, in milliseconds.
    pub initial_interval_ms: u64,
    /// The longest wait between two attempts, in milliseconds.
    pub max_interval_ms: u64,
}

impl Default for Retries {
    /// agent-backends' HTTP retry defaults (`RetryPolicy::default`: 2 retries, 500 ms
    /// doubling up to 8 s), as attempts: 3.
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_interval_ms: 500,
            max_interval_ms: 8_000,
        }
    }
}

/// The `model_call` activity's input: the request the machine asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCallInput {
    /// The request, history included, with the output limit the budgets leave.
    pub request: ModelRequest,
    /// Tool rounds run so far (the gate and the activity's telemetry name it).
    pub iteration: u32,
    /// The request's estimated input tokens (the gate reads it).
    #[serde(default)]
    pub estimated_input_tokens: u64,
    /// Whether to screen the response's calls (the machine's `screen_calls`).
    #[serde(default)]
    pub screen: bool,
    /// The session's remote tools, by name (their calls wait for the caller).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remote_tools: Vec<String>,
    /// The calls of a round past this many are refused unscreened (the machine's cap).
    #[serde(default)]
    pub max_calls: usize,
}

/// The `model_call` activity's output: the response, or the failure that ends the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCallOutput {
    /// The model's message, with its usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<AssistantMessage>,
    /// Its price, when the worker's rate card has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// The response's calls screened against the worker's registry, guardrails and approval
    /// policy, when the run screens calls and the response has some.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screened: Option<Screened>,
    /// A failure no retry mends (a 4xx, a refusal by the gate, a broken stream): the machine
    /// ends the run with it. (A retryable one is an activity failure Temporal retries.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<AgentError>,
}

/// A response's calls as the worker screened them (the machine's `screened` input).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Screened {
    /// The calls, with the arguments a guardrail rewrote.
    pub calls: Vec<ToolCall>,
    /// One screen per call within the round's cap.
    pub screens: Vec<Screen>,
    /// What the tool guardrails decided while screening (each names its call).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guardrails: Vec<GuardrailDecision>,
}

/// The `tool_call` activity's input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallInput {
    /// The call.
    pub call: ToolCall,
    /// The loop round it belongs to.
    pub iteration: u32,
    /// Set when the call is not to be run (the per-round cap, a policy's or a person's
    /// denial): the activity records the refusal as the loop does, without running the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Set when the run screened its calls: what the tool guardrails decided about this call
    /// while screening (maybe nothing). The before-call checks are then not run again and
    /// these go into the trace entry, as in a round of the in-process loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guardrails: Option<Vec<GuardrailDecision>>,
}

/// The `tool_call` activity's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallOutput {
    /// What the model sees.
    pub result: ToolResult,
    /// The call's trace entry, as the in-process loop writes it.
    pub trace: TraceEntry,
    /// Set when the call's failure ends the run (the loop's `abort` error mode, a fatal error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<AgentError>,
}

/// What `agent_run` returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunOutcome {
    /// The session's id.
    pub session_id: String,
    /// How the run ended (`completed`, or `error` with `error` set).
    pub status: SessionStatus,
    /// The final answer's text.
    pub answer: String,
    /// Tokens over every model call of the run.
    pub usage: Usage,
    /// Dollars, when priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// One entry per tool call, in the order the in-process loop writes them.
    pub trace: Vec<TraceEntry>,
    /// Model calls made.
    pub model_calls: u32,
    /// How many times the workflow continued as new on the way.
    #[serde(default)]
    pub continued: u32,
    /// The validated structured answer, in a run with an output schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
    /// Why the run ended early, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The session at the end (history included), to continue in process or in another run.
    pub session: Session,
}

/// What the `status` query returns.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunStatus {
    /// Where the run stands: `running`, `awaiting_tool_execution`, `awaiting_approval`,
    /// `completed`, `error`.
    pub status: SessionStatus,
    /// Model calls so far.
    pub model_calls: u32,
    /// Calls waiting for the `tool_results` signal.
    #[serde(default)]
    pub pending_tool_calls: Vec<ToolCall>,
    /// Calls waiting for the `approve` signal.
    #[serde(default)]
    pub pending_approvals: Vec<ToolCall>,
    /// Tokens so far.
    #[serde(default)]
    pub usage: Usage,
}
