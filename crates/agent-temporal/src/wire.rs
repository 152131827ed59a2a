//! The values that cross Temporal: the workflow's input and result, and each activity's input
//! and output. All are JSON (Temporal's default payload converter), so a client in another
//! language (the Python SDK in the tests) can start `agent_run` and read its result.

use agent_loop::{Session, SessionInput, SessionStatus};
use agent_types::{ToolCall, ToolResult, TraceEntry, Usage, UserMessage};
use serde::{Deserialize, Serialize};

/// What `agent_run` starts from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    /// The session to run (model, system prompt, history, settings).
    pub session: Session,
    /// The user's message for a new run; `None` when `next` says what to do (continue-as-new).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Set by continue-as-new: the step the previous run of the workflow was about to take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<Step>,
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
            next: None,
            carried: Carried::default(),
            continue_as_new_after: None,
        }
    }
}

/// What a workflow run hands to the next one when it continues as new.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Carried {
    /// The trace so far.
    #[serde(default)]
    pub trace: Vec<TraceEntry>,
    /// Tokens so far.
    #[serde(default)]
    pub usage: Usage,
    /// Dollars so far, once something is priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Model calls so far.
    #[serde(default)]
    pub model_calls: u32,
    /// How many times the workflow continued as new.
    #[serde(default)]
    pub continued: u32,
}

/// One step of the loop: what the next model call starts from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Step {
    /// A new user message.
    User {
        /// The message.
        message: UserMessage,
    },
    /// The results of the round's calls, in call order.
    ToolResults {
        /// One per call.
        results: Vec<ToolResult>,
    },
}

impl From<Step> for SessionInput {
    fn from(step: Step) -> Self {
        match step {
            Step::User { message } => SessionInput::User(message),
            Step::ToolResults { results } => SessionInput::ToolResults(results),
        }
    }
}

/// The `model_call` activity's input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCallInput {
    /// The session as the last step left it.
    pub session: Session,
    /// What this call starts from.
    pub step: Step,
}

/// The `model_call` activity's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCallOutput {
    /// The session after the call: `awaiting_tool_execution` with the calls to run, or ended.
    pub session: Session,
    /// The answer's text, when the call ended the run.
    pub answer: String,
    /// This call's tokens.
    pub usage: Usage,
    /// This call's dollars, when priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// The loop round the call was (1 for the first), which the round's trace entries carry.
    pub iteration: u32,
    /// The calls the worker's registry runs (`tool_call` activities), in call order.
    #[serde(default)]
    pub local: Vec<ToolCall>,
    /// Of `local`, the calls the run's approval policy sends to a person first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs_approval: Vec<ToolCall>,
    /// Of `local`, the calls the approval policy refused, with the text the model sees.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<Refused>,
    /// The calls nobody on the worker runs: their results arrive as the `tool_results` signal.
    #[serde(default)]
    pub remote: Vec<ToolCall>,
}

/// A call the run refuses to run, and why (the model sees the text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refused {
    /// The call's id.
    pub call_id: String,
    /// The error result's text.
    pub reason: String,
}

/// The `tool_call` activity's input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallInput {
    /// The call.
    pub call: ToolCall,
    /// The loop round it belongs to.
    pub iteration: u32,
    /// Set when the call is not to be run (an approval policy's or a person's denial): the
    /// activity records the refusal as the loop does, without running the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
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
    pub stop: Option<String>,
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
