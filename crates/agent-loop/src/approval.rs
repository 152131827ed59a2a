//! Human approval of tool calls (docs/approval.md).
//!
//! A tool marked with [`Tool::with_approval`](agent_tools::Tool::with_approval), or an
//! [`ApprovalPolicy`] in the options, makes a call wait for a person. A round with such a
//! call runs nothing: the run suspends with status `awaiting_approval`, the session lists the
//! waiting calls in [`Session::pending_approvals`](crate::Session::pending_approvals), and an
//! `approval_requested` event names them. Resuming with one [`ApprovalDecision`] per waiting
//! call runs the round in call order: approved calls and the round's calls that needed no
//! approval run as any local call does (validation, timeouts, truncation, the result hook,
//! the trace, the budgets); denied calls get an error result carrying the reason. Remote
//! calls of the same round wait for the caller afterwards, as in any round with remote calls.
//!
//! Why the calls needing no approval do not run before the suspension: their results would
//! join the history before the approved calls' ones, out of call order, and a person who
//! denies a call may not want its siblings' effects either.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use agent_tools::{Caller, Registry, Tool};
use agent_types::{AgentError, ToolCall};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::options::Options;
use crate::session::Session;

/// What a policy decides for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approval {
    /// Run the call without asking.
    Approve,
    /// Suspend the run until a person decides.
    Require,
    /// Do not run the call; the model sees an error result with this reason.
    Deny(String),
}

/// What a policy sees of one call. Only calls of known local tools with valid arguments reach
/// a policy: an unknown tool or invalid arguments already get an error result.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ApprovalRequest<'a> {
    /// Who runs the loop.
    pub caller: &'a Caller,
    /// The tool called.
    pub tool: &'a Tool,
    /// The call's id.
    pub call_id: &'a str,
    /// The validated arguments (after repair in lenient mode).
    pub arguments: &'a Value,
}

impl ApprovalRequest<'_> {
    /// The decision without a policy: [`Approval::Require`] for a tool marked
    /// [`with_approval`](agent_tools::Tool::with_approval), else [`Approval::Approve`].
    pub fn default_decision(&self) -> Approval {
        if self.tool.requires_approval() {
            Approval::Require
        } else {
            Approval::Approve
        }
    }
}

/// Decides per call whether a person must approve it ([`Options::with_approval_policy`]).
pub type ApprovalPolicy = Arc<dyn Fn(&ApprovalRequest<'_>) -> Approval + Send + Sync>;

/// A person's decision on one waiting call, the input that resumes a session in status
/// `awaiting_approval` (one per waiting call, any order).
///
/// JSON: `{"call_id": "call_1", "approved": true}` or
/// `{"call_id": "call_2", "approved": false, "reason": "not on Fridays"}`.
///
/// # Example
///
/// A tool that needs approval; the run stops, the session goes through JSON (as it would to a
/// store and another process), and the decision resumes it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use agent_backends::{ScriptedBackend, ScriptedTurn};
/// use agent_loop::{ApprovalDecision, Options, Session, SessionStatus, execute};
/// use agent_tools::{Registry, Tool};
/// use serde_json::json;
///
/// let mut tools = Registry::new();
/// tools.register(
///     Tool::from_json_fn(
///         "delete_file",
///         "Deletes a file.",
///         json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
///         |args: serde_json::Value, _ctx| async move {
///             Ok::<_, agent_tools::ToolError>(json!({"deleted": args["path"]}))
///         },
///     )
///     .with_approval(),
/// )?;
/// let options = Options::auto().with_tools(tools);
/// let backend = ScriptedBackend::new([
///     ScriptedTurn::tool_call("call_1", "delete_file", json!({"path": ".env"})),
///     ScriptedTurn::text("Deleted."),
/// ]);
///
/// let mut session = Session::new("gpt-5-mini");
/// let result = execute(&mut session, "Delete .env", &backend, &options).await?;
/// assert_eq!(result.status, SessionStatus::AwaitingApproval);
/// let waiting = &result.pending_approvals[0]; // id, name, arguments
///
/// let json = session.to_json()?;
/// let mut session = Session::from_json(&json)?;
///
/// let decisions = vec![ApprovalDecision::approve(waiting.id.as_str())];
/// // or ApprovalDecision::deny(id, "keep the secrets"): the model reads the reason.
/// let result = execute(&mut session, decisions, &backend, &options).await?;
/// assert_eq!(result.text(), "Deleted.");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ApprovalDecision {
    /// The waiting call's id.
    pub call_id: String,
    /// Run the call (`true`) or not.
    pub approved: bool,
    /// Why the call was denied; the model sees it. Ignored for an approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The tool name the person was shown. When set, it must be the waiting call's, or the
    /// decision is refused: a decision is bound to what was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The arguments the person was shown. When set, they must be the waiting call's, or the
    /// decision is refused, so a decision cannot be replayed onto a later call that reuses
    /// the id (some providers number calls `call_0`, `call_1`… in every turn) with other
    /// arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
}

impl ApprovalDecision {
    /// Approves the call `call_id`.
    pub fn approve(call_id: impl Into<String>) -> Self {
        Self {
            call_id: call_id.into(),
            approved: true,
            reason: None,
            name: None,
            arguments: None,
        }
    }

    /// Denies the call `call_id`; the model sees `reason` (an empty one says only that the
    /// user denied the call).
    pub fn deny(call_id: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            call_id: call_id.into(),
            approved: false,
            reason: Some(reason.into()),
            name: None,
            arguments: None,
        }
    }

    /// Binds the decision to `call` as the person saw it: its id, tool name and arguments
    /// must still be the waiting call's when the decision arrives.
    #[must_use]
    pub fn bound_to(mut self, call: &ToolCall) -> Self {
        call.id.as_str().clone_into(&mut self.call_id);
        self.name = Some(call.name.clone());
        self.arguments = Some(call.arguments.clone());
        self
    }

    /// Whether a bound decision names something else than `call`.
    pub(crate) fn mismatches(&self, call: &ToolCall) -> bool {
        self.name.as_ref().is_some_and(|name| *name != call.name)
            || self
                .arguments
                .as_ref()
                .is_some_and(|arguments| *arguments != call.arguments)
    }

    /// The error result text the model sees for a denied call.
    pub(crate) fn denial(&self) -> String {
        match self.reason.as_deref().map(str::trim) {
            Some(reason) if !reason.is_empty() => {
                format!("This call was not run: the user denied it: {reason}")
            }
            _ => "This call was not run: the user denied it.".to_owned(),
        }
    }
}

impl Options {
    /// Decides per call whether a person must approve it, from the caller, the tool and the
    /// arguments. Replaces the default (ask only for tools marked
    /// [`with_approval`](agent_tools::Tool::with_approval));
    /// [`ApprovalRequest::default_decision`] gives that default back.
    #[must_use]
    pub fn with_approval_policy(
        mut self,
        policy: impl Fn(&ApprovalRequest<'_>) -> Approval + Send + Sync + 'static,
    ) -> Self {
        self.approval_policy = Some(Arc::new(policy));
        self
    }

    /// Asks a person before every call of the named tools (and of tools marked
    /// [`with_approval`](agent_tools::Tool::with_approval)): a policy for names that come from
    /// configuration, such as the CLI's `--require-approval` or a tenant's `require_approval`.
    /// Names of no registered tool are refused when the run starts.
    #[must_use]
    pub fn require_approval_for<I, S>(self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let names: BTreeSet<String> = names.into_iter().map(Into::into).collect();
        if names.is_empty() {
            return self;
        }
        let mut options = self.with_approval_policy({
            let names = names.clone();
            move |request| {
                if names.contains(request.tool.name()) {
                    Approval::Require
                } else {
                    request.default_decision()
                }
            }
        });
        options.approval_tools = Some(Arc::new(names));
        options
    }
}

/// Whether any call of a run may need approval: a policy, or a tool marked for approval.
/// Computed once per run, so a run without approvals never pays for the check.
pub(crate) fn possible(options: &Options, tools: &Registry) -> Result<bool, AgentError> {
    if let Some(names) = &options.approval_tools {
        let unknown: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|name| tools.get(name).is_none_or(|tool| tool.is_remote()))
            .collect();
        if !unknown.is_empty() {
            return Err(AgentError::config(format!(
                "approval is required for tools this run does not have as local tools: {}; \
                 check the names (remote tools are run by the caller and never need approval)",
                unknown.join(", ")
            )));
        }
    }
    Ok(options.approval_policy.is_some()
        || tools.iter().any(|tool| tool.tool().requires_approval()))
}

/// The decision for one local call: `None` to run it (or to let the dispatch refuse it:
/// unknown tool, invalid arguments), `Some(Err(reason))` to refuse it, `Some(Ok(()))` to
/// wait for a person.
pub(crate) fn screen(
    options: &Options,
    tools: &Registry,
    call: &ToolCall,
) -> Option<Result<(), String>> {
    let tool = tools.get(&call.name)?;
    let validated = tool
        .validate(call.arguments.clone(), options.tool_arg_validation)
        .ok()?;
    let request = ApprovalRequest {
        caller: &options.caller,
        tool: tool.tool(),
        call_id: call.id.as_str(),
        arguments: &validated.arguments,
    };
    let decision = match &options.approval_policy {
        Some(policy) => policy(&request),
        None => request.default_decision(),
    };
    match decision {
        Approval::Approve => None,
        Approval::Require => Some(Ok(())),
        Approval::Deny(reason) => Some(Err(format!(
            "This call was not run: the approval policy denied it: {reason}"
        ))),
    }
}

/// What becomes of one local call of a round waiting for approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Disposition {
    /// Runs when the round resumes.
    Run,
    /// Gets this error result when the round resumes.
    Refused { reason: String },
    /// Waits for a person's decision.
    Waiting,
}

/// A local call of a waiting round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RoundCall {
    pub(crate) call: ToolCall,
    #[serde(flatten)]
    pub(crate) disposition: Disposition,
    /// What tool guardrails decided before the round waited (crate::guardrail).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) guardrails: Vec<agent_types::GuardrailDecision>,
}

/// A tool round suspended for approval, kept in the session's run state so it resumes in
/// another process: its local calls in call order with what becomes of each, and its remote
/// calls (which wait for the caller once the local ones ran).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Round {
    pub(crate) iteration: u32,
    pub(crate) local: Vec<RoundCall>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) remote: Vec<ToolCall>,
}

impl Round {
    /// The calls waiting for a person, in call order.
    pub(crate) fn waiting(&self) -> Vec<ToolCall> {
        self.local
            .iter()
            .filter(|entry| entry.disposition == Disposition::Waiting)
            .map(|entry| entry.call.clone())
            .collect()
    }
}

/// A status or kind as the wire spells it (`awaiting_tool_execution`, not
/// `AwaitingToolExecution`), for error texts a client reads.
pub(crate) fn wire_name(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        Ok(other) => other.to_string(),
        Err(_) => "unknown".to_owned(),
    }
}

/// Decisions must name exactly the session's waiting calls, each once.
pub(crate) fn check(session: &Session, decisions: &[ApprovalDecision]) -> Result<(), AgentError> {
    if session.status != crate::SessionStatus::AwaitingApproval {
        return Err(AgentError::config(format!(
            "approval decisions were given but session {} is not waiting for any (status: {})",
            session.id,
            wire_name(&session.status)
        )));
    }
    if session
        .suspended
        .as_ref()
        .is_none_or(|state| state.approval_round.is_none())
    {
        // Without the stored round the calls' siblings and their order are unknown.
        return Err(AgentError::config(format!(
            "session {} waits for approval but holds no suspended tool round (was it edited?); \
             it cannot be resumed with decisions",
            session.id
        )));
    }
    let expected: HashSet<&str> = session
        .pending_approvals
        .iter()
        .map(|call| call.id.as_str())
        .collect();
    // What the person was shown must be what runs: the waiting calls listed in the session
    // and those of its stored round agree (an edited session could make them differ).
    let stored: Vec<&ToolCall> = session
        .suspended
        .as_ref()
        .and_then(|state| state.approval_round.as_ref())
        .map(|round| {
            round
                .local
                .iter()
                .filter(|entry| entry.disposition == Disposition::Waiting)
                .map(|entry| &entry.call)
                .collect()
        })
        .unwrap_or_default();
    let agree = stored.len() == session.pending_approvals.len()
        && stored
            .iter()
            .zip(&session.pending_approvals)
            .all(|(stored, shown)| {
                stored.id == shown.id
                    && stored.name == shown.name
                    && stored.arguments == shown.arguments
            });
    if !agree {
        return Err(AgentError::config(format!(
            "session {} lists waiting calls that differ from its stored tool round (was it \
             edited?); it cannot be resumed with decisions",
            session.id
        )));
    }
    let mut seen = HashSet::new();
    let mut unexpected = Vec::new();
    let mut duplicated = Vec::new();
    let mut changed = Vec::new();
    for decision in decisions {
        let id = decision.call_id.as_str();
        if !expected.contains(id) {
            unexpected.push(id);
        } else if !seen.insert(id) {
            duplicated.push(id);
        } else if session
            .pending_approvals
            .iter()
            .any(|call| call.id.as_str() == id && decision.mismatches(call))
        {
            changed.push(id);
        }
    }
    let missing: Vec<&str> = session
        .pending_approvals
        .iter()
        .map(|call| call.id.as_str())
        .filter(|id| !seen.contains(id))
        .collect();
    let mut problems = Vec::new();
    if !missing.is_empty() {
        problems.push(format!("no decision for {}", missing.join(", ")));
    }
    if !unexpected.is_empty() {
        problems.push(format!(
            "decisions for calls that are not waiting: {}",
            unexpected.join(", ")
        ));
    }
    if !duplicated.is_empty() {
        problems.push(format!(
            "more than one decision for {}",
            duplicated.join(", ")
        ));
    }
    if !changed.is_empty() {
        problems.push(format!(
            "decisions bound to another tool or other arguments than the waiting call: {}",
            changed.join(", ")
        ));
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(AgentError::config(format!(
        "session {} needs exactly one approval decision per waiting call: {}; nothing was changed",
        session.id,
        problems.join("; ")
    )))
}

/// Input other than decisions, for a session waiting for approval.
pub(crate) fn waiting_error(session: &Session) -> AgentError {
    let ids: Vec<&str> = session
        .pending_approvals
        .iter()
        .map(|call| call.id.as_str())
        .collect();
    AgentError::config(format!(
        "session {} is waiting for approval of {}; resume it with one approval decision per call",
        session.id,
        ids.join(", ")
    ))
}
