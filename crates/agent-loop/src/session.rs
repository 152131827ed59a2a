//! [`Session`]: a conversation the loop can run, suspend and resume, in one process or another.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use agent_types::{
    AgentError, GenerationSettings, Message, SessionId, ToolCall, ToolChoice, ToolResult, ToolSpec,
    Usage, UserMessage,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// Where a session stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// Created, never run.
    #[default]
    Idle,
    /// A run is in progress (seen only while it runs, or if a run was dropped mid-way).
    Running,
    /// The model asked for tools the caller runs; resume with one result per pending call.
    AwaitingToolExecution,
    /// Tool calls wait for a person's approval; resume with one
    /// [`ApprovalDecision`](crate::ApprovalDecision) per call in `pending_approvals`.
    AwaitingApproval,
    /// The last run ended with an answer.
    Completed,
    /// The last run was cancelled; what completed before is kept.
    Aborted,
    /// The last run failed (a budget, a backend error, a tool error under `abort`...).
    Error,
}

/// What a run starts from.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionInput {
    /// A new user message.
    User(UserMessage),
    /// Results for exactly the session's pending tool calls (any order).
    ToolResults(Vec<ToolResult>),
    /// Decisions for exactly the session's calls waiting for approval (any order).
    Approvals(Vec<crate::ApprovalDecision>),
    /// Nothing new: run on the history as it is (its last message must be a user message or
    /// a tool result). Starts from the budgets the session holds
    /// ([`Session::budgets_used`]: a run cut off after a checkpoint), if any.
    Continue,
}

impl From<UserMessage> for SessionInput {
    fn from(message: UserMessage) -> Self {
        Self::User(message)
    }
}

impl From<&str> for SessionInput {
    fn from(text: &str) -> Self {
        Self::User(UserMessage::text(text))
    }
}

impl From<String> for SessionInput {
    fn from(text: String) -> Self {
        Self::User(UserMessage::text(text))
    }
}

impl From<Vec<crate::ApprovalDecision>> for SessionInput {
    fn from(decisions: Vec<crate::ApprovalDecision>) -> Self {
        Self::Approvals(decisions)
    }
}

impl From<Vec<ToolResult>> for SessionInput {
    fn from(results: Vec<ToolResult>) -> Self {
        Self::ToolResults(results)
    }
}

/// A conversation with everything needed to run it again: the model and its settings, the
/// system prompt, the messages, remote tool specs, the status, cumulative usage and cost, and
/// the calls waiting for the caller.
///
/// A session is plain data: it serializes with serde (a versioned format, `"format": 2`; format
/// 1, written before tool results and user turns carried files and other content blocks, still
/// reads), so
/// a run suspended for remote tools in one process can be stored and resumed in another with
/// [`execute`](crate::execute). Local tools are not part of it; the resuming process supplies
/// them through [`Options::tools`](crate::Options::tools), by the same names.
///
/// ```
/// use agent_loop::{Session, SessionStatus};
///
/// let session = Session::new("gpt-5-mini").with_system("Answer briefly.");
/// let json = serde_json::to_string(&session).unwrap();
/// let back: Session = serde_json::from_str(&json).unwrap();
/// assert_eq!(back, session);
/// assert_eq!(back.status, SessionStatus::Idle);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    format: Format,
    /// The session's id.
    pub id: SessionId,
    /// Where the session stands.
    pub status: SessionStatus,
    /// The model every call goes to.
    pub model: String,
    /// The static system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The conversation so far.
    #[serde(default)]
    pub messages: Vec<Message>,
    /// Sampling and output settings for every call.
    #[serde(default)]
    pub settings: GenerationSettings,
    /// Whether and which tool the model must call.
    #[serde(default)]
    pub tool_choice: ToolChoice,
    /// Provider-specific request fields, passed through.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extras: Map<String, Value>,
    /// Tools the caller runs itself (spec only), offered next to the local tools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remote_tools: Vec<ToolSpec>,
    /// Tokens over every model call of every run.
    #[serde(default)]
    pub usage: Usage,
    /// Dollars over every run; `None` until something is priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// The calls waiting for the caller, when `status` is `awaiting_tool_execution`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_tool_calls: Vec<ToolCall>,
    /// The calls waiting for a person's approval, when `status` is `awaiting_approval`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_approvals: Vec<ToolCall>,
    /// The budgets a suspended run has used, so resuming continues them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) suspended: Option<RunState>,
    /// The summary a [`HistoryPolicy::summarize`](crate::HistoryPolicy::summarize) policy
    /// made of the older turns, reused until more turns leave its window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_summary: Option<crate::history::HistorySummary>,
}

impl Session {
    /// A new idle session for `model`, with a fresh id.
    pub fn new(model: impl Into<String>) -> Self {
        Self::with_id(new_session_id(), model)
    }

    /// A new idle session with the given id.
    pub fn with_id(id: impl Into<SessionId>, model: impl Into<String>) -> Self {
        Self {
            format: Format,
            id: id.into(),
            status: SessionStatus::Idle,
            model: model.into(),
            system: None,
            messages: Vec::new(),
            settings: GenerationSettings::default(),
            tool_choice: ToolChoice::default(),
            extras: Map::new(),
            remote_tools: Vec::new(),
            usage: Usage::default(),
            cost_usd: None,
            pending_tool_calls: Vec::new(),
            pending_approvals: Vec::new(),
            suspended: None,
            history_summary: None,
        }
    }

    /// Sets the system prompt.
    #[must_use]
    pub fn with_system(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }

    /// Appends a message to the history.
    #[must_use]
    pub fn with_message(mut self, message: impl Into<Message>) -> Self {
        self.messages.push(message.into());
        self
    }

    /// Appends messages to the history.
    #[must_use]
    pub fn with_messages(mut self, messages: impl IntoIterator<Item = Message>) -> Self {
        self.messages.extend(messages);
        self
    }

    /// Sets the generation settings.
    #[must_use]
    pub fn with_settings(mut self, settings: GenerationSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Sets the tool choice.
    #[must_use]
    pub fn with_tool_choice(mut self, tool_choice: ToolChoice) -> Self {
        self.tool_choice = tool_choice;
        self
    }

    /// Declares a tool the caller runs itself.
    #[must_use]
    pub fn with_remote_tool(mut self, spec: ToolSpec) -> Self {
        self.remote_tools.push(spec);
        self
    }

    /// What the run cut off in this session had used of its budgets, when a checkpoint saved
    /// it ([`set_budgets_used`](Self::set_budgets_used)) or the run waits for remote tools or
    /// approval.
    pub fn budgets_used(&self) -> Option<&BudgetsUsed> {
        self.suspended.as_ref()
    }

    /// Records what the run in progress has used of its budgets, for a store that checkpoints
    /// the session mid-run (the value a [`TurnCheckpoint`](crate::TurnCheckpoint) receives).
    /// If the run is cut off (its process killed), the execute that continues it with
    /// [`SessionInput::Continue`] starts from these instead of fresh budgets; a new user
    /// message starts fresh ones. The field is serialized with the session.
    pub fn set_budgets_used(&mut self, used: Option<BudgetsUsed>) {
        self.suspended = used;
    }

    /// Checks that `input` fits the session as it stands, as [`execute`](crate::execute) does
    /// before anything else: results only for exactly the pending calls, no new user message
    /// while calls are pending. A server can call it before it commits to a response.
    ///
    /// # Errors
    ///
    /// A configuration error (400) saying which calls are missing, unknown or answered twice.
    pub fn check_input(&self, input: &SessionInput) -> Result<(), AgentError> {
        check_input(self, input)
    }

    /// The session as JSON.
    ///
    /// # Errors
    ///
    /// Only if a message holds a value JSON cannot represent (never for values built from JSON).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    /// A session from JSON written by [`to_json`](Self::to_json) (or any serde JSON writer).
    ///
    /// # Errors
    ///
    /// Malformed JSON, or a `format` this version does not know.
    pub fn from_json(json: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(json)
    }
}

/// What a run has used of its per-run budgets so far: tool rounds (`max_tool_iterations`),
/// tokens (`token_budget`), dollars (`max_cost_usd`) and the repeated-call count
/// (`max_repeated_calls`).
///
/// Kept in the session while a run waits for remote tools or approval, so resuming continues
/// the same budgets. A [`TurnCheckpoint`](crate::TurnCheckpoint) receives it with each
/// checkpoint; a store that saves it into the checkpointed session
/// ([`Session::set_budgets_used`]) makes a run cut off by a crash and continued with
/// [`SessionInput::Continue`] charge what it had used to the continuation: one budget across
/// the crash.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetsUsed {
    /// Tool rounds run.
    pub(crate) iterations: u32,
    /// Tokens counted against the token budget: model calls' input + output, plus
    /// `tool_tokens`.
    pub(crate) tokens: u64,
    /// Of `tokens`, those handlers reported (not in the run's usage).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) tool_tokens: u64,
    /// Dollars counted against the cost budget.
    pub(crate) cost_usd: f64,
    /// The last call, for cycle detection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_call: Option<RepeatedCall>,
    /// The tool round waiting for approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) approval_round: Option<crate::approval::Round>,
}

/// The name the loop uses for the budgets of the run in progress.
pub(crate) type RunState = BudgetsUsed;

impl BudgetsUsed {
    /// Tool rounds run (counted against `max_tool_iterations`).
    pub fn iterations(&self) -> u32 {
        self.iterations
    }

    /// Tokens counted against `token_budget` (model calls' input and output, and what tool
    /// handlers reported).
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// Dollars counted against `max_cost_usd`.
    pub fn cost_usd(&self) -> f64 {
        self.cost_usd
    }
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// The most recent tool call and how many times in a row it was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RepeatedCall {
    pub(crate) tool: String,
    pub(crate) arguments: Value,
    pub(crate) times: u32,
}

/// The session format version; serialized as `2`. Format 1 (before content blocks) reads as
/// well: every format-1 session is a valid format-2 one, as the block forms only added
/// alternatives (a tool result's `content` may be a block list, a user turn may hold file and
/// audio blocks). Anything else is refused on read.
///
/// The bump exists for older readers: an agentry that knows only format 1 refuses a format-2
/// session by its number instead of failing on a block form it does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Format;

impl Format {
    const CURRENT: u32 = 2;
    /// The oldest format this version reads.
    const OLDEST: u32 = 1;
}

impl Serialize for Format {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u32(Self::CURRENT)
    }
}

impl<'de> Deserialize<'de> for Format {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let version = u32::deserialize(deserializer)?;
        if (Self::OLDEST..=Self::CURRENT).contains(&version) {
            Ok(Self)
        } else {
            Err(serde::de::Error::custom(format!(
                "session format {version} is not supported (this version of agentry reads \
                 formats {} to {})",
                Self::OLDEST,
                Self::CURRENT
            )))
        }
    }
}

/// A process-unique, time-ordered session id: `sess_` + milliseconds + a counter, in hex.
pub(crate) fn new_session_id() -> SessionId {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis());
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    SessionId::from(format!(
        "sess_{millis:x}{:04x}{count:x}",
        std::process::id() & 0xffff
    ))
}

/// The input must fit the session's state: results only for exactly the pending calls, and
/// no new user message while calls are pending.
fn check_input(session: &Session, input: &SessionInput) -> Result<(), AgentError> {
    let awaiting = session.status == SessionStatus::AwaitingToolExecution;
    match input {
        SessionInput::Approvals(decisions) => crate::approval::check(session, decisions),
        _ if session.status == SessionStatus::AwaitingApproval => {
            Err(crate::approval::waiting_error(session))
        }
        SessionInput::ToolResults(results) => {
            if !awaiting {
                return Err(AgentError::config(format!(
                    "tool results were given but session {} is not waiting for any (status: {})",
                    session.id,
                    crate::approval::wire_name(&session.status)
                )));
            }
            let expected: HashSet<&str> = session
                .pending_tool_calls
                .iter()
                .map(|call| call.id.as_str())
                .collect();
            let mut seen = HashSet::new();
            let mut unexpected = Vec::new();
            let mut duplicated = Vec::new();
            for result in results {
                let id = result.tool_call_id.as_str();
                if !expected.contains(id) {
                    unexpected.push(id);
                } else if !seen.insert(id) {
                    duplicated.push(id);
                }
            }
            let mut missing: Vec<&str> = session
                .pending_tool_calls
                .iter()
                .map(|call| call.id.as_str())
                .filter(|id| !seen.contains(id))
                .collect();
            missing.dedup();
            if unexpected.is_empty() && duplicated.is_empty() && missing.is_empty() {
                return Ok(());
            }
            let mut problems = Vec::new();
            if !missing.is_empty() {
                problems.push(format!("missing results for {}", missing.join(", ")));
            }
            if !unexpected.is_empty() {
                problems.push(format!(
                    "results for calls that are not pending: {}",
                    unexpected.join(", ")
                ));
            }
            if !duplicated.is_empty() {
                problems.push(format!(
                    "more than one result for {}",
                    duplicated.join(", ")
                ));
            }
            Err(AgentError::config(format!(
                "session {} needs exactly one result per pending call: {}; nothing was changed",
                session.id,
                problems.join("; ")
            )))
        }
        SessionInput::User(_) | SessionInput::Continue if awaiting => {
            let ids: Vec<&str> = session
                .pending_tool_calls
                .iter()
                .map(|call| call.id.as_str())
                .collect();
            Err(AgentError::config(format!(
                "session {} is waiting for tool results ({}); resume it with one result per call",
                session.id,
                ids.join(", ")
            )))
        }
        SessionInput::User(_) | SessionInput::Continue => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_format_is_refused_with_a_reason() {
        let mut json = serde_json::to_value(Session::with_id("s", "m")).unwrap();
        assert_eq!(json["format"], 2);
        json["format"] = 1.into();
        assert!(serde_json::from_value::<Session>(json.clone()).is_ok());
        for unknown in [0, 3] {
            json["format"] = unknown.into();
            let error = serde_json::from_value::<Session>(json.clone()).unwrap_err();
            assert!(
                error
                    .to_string()
                    .contains(&format!("session format {unknown} is not supported")),
                "{error}"
            );
        }
    }

    #[test]
    fn ids_are_unique() {
        let a = new_session_id();
        let b = new_session_id();
        assert_ne!(a, b);
        assert!(a.as_str().starts_with("sess_"));
    }
}
