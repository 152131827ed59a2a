//! Guardrails: checks that stop or repair a run when its input, a tool call, a tool result or
//! the answer crosses a line (docs/guardrails.md).
//!
//! - **Input** guardrails ([`InputGuardrail`]) see the caller's new message before the first
//!   model call; a trip ends the run with a `guardrail_tripped` error and no model call made.
//!   With [`Guardrails::concurrent_input`] they run while the first model call streams
//!   instead (lower latency for a slow check); a trip then drops the call in flight, which
//!   cancels it.
//! - **Tool** guardrails ([`ToolGuardrail`]) see each local call before it runs (after
//!   validation): allow it, deny it (the model reads the reason as the call's error result),
//!   rewrite its arguments (an approver then sees the rewritten ones, and so does the
//!   handler), or make it wait for a person's approval through the usual approval flow. After
//!   it ran they may redact or replace its result before the model (or the stream) sees it.
//! - **Output** guardrails ([`OutputGuardrail`]) see the final answer (its text, and the
//!   structured answer when the run asks for one): pass it, trip (the run ends with the
//!   error), or send it back with the reason for another try, counted as a tool iteration
//!   and, through the next model call, against the token and cost budgets.
//!
//! Every decision that changed or stopped something is a [`GuardrailDecision`]: a tool's are
//! in its [`TraceEntry::guardrails`](agent_types::TraceEntry) (so in the trace, the tool span
//! as `agentry.guardrails` and the accounting row), a trip is the error's kind and a
//! `guardrail_tripped` event before the `error` event, with the partial trace attached like
//! every other abort.
//!
//! Tool guardrails are synchronous: they run on every call, on the loop's path, and the
//! ready-made ones (agent-guardrails: PII redaction, a Rego policy) are CPU work. Input and
//! output guardrails are async, so one can ask a moderation model.
//!
//! Call sites in the loop (kept to a few lines each): `run.rs` (`drive`: input before the
//! first call and output at each answer; `run_tools`: before each call; `execute`: the trip
//! event) and `dispatch.rs` (`settle`: after each call).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use agent_tools::{Caller, Registry, Tool};
use agent_types::{
    AgentError, AgentEvent, ErrorKind, GuardrailAction, GuardrailDecision, GuardrailStage, Message,
    ToolCall, ToolResult, UserBlock,
};
use serde_json::Value;

use crate::job::Job;
use crate::options::Options;

/// A guardrail's future: input and output guardrails may wait (a moderation call).
pub type GuardFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What an input guardrail sees: the caller and the text of its new message.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct InputCheck {
    /// Who runs the loop.
    pub caller: Arc<Caller>,
    /// The new user message's text blocks, joined by newlines.
    pub text: String,
}

/// What an input or output guardrail decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Go on.
    Pass,
    /// Stop the run: a `guardrail_tripped` error with this reason.
    Trip(String),
    /// Output guardrails only: send the answer back with this reason for another try (an
    /// input guardrail's `Retry` trips).
    Retry(String),
}

/// A check of the caller's input.
pub trait InputGuardrail: Send + Sync {
    /// The guardrail's name, in decisions and errors.
    fn name(&self) -> &str;
    /// Checks the input.
    fn check(&self, input: InputCheck) -> GuardFuture<'_, Verdict>;
}

/// What an output guardrail sees: the caller, the answer's text and the structured answer.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OutputCheck {
    /// Who runs the loop.
    pub caller: Arc<Caller>,
    /// The final answer's text (empty when the answer came through a final-answer tool).
    pub text: String,
    /// The validated structured answer, when the run asks for one.
    pub structured: Option<Value>,
    /// How many times an output guardrail already sent an answer of this run back.
    pub retries: u32,
}

/// A check of the final answer.
pub trait OutputGuardrail: Send + Sync {
    /// The guardrail's name, in decisions and errors.
    fn name(&self) -> &str;
    /// Checks the answer.
    fn check(&self, output: OutputCheck) -> GuardFuture<'_, Verdict>;
}

/// What a tool guardrail sees of a call before it runs: only calls of known local tools
/// with valid arguments reach it (the others already get their error result).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct CallCheck<'a> {
    /// Who runs the loop.
    pub caller: &'a Caller,
    /// The tool called.
    pub tool: &'a Tool,
    /// The call's id.
    pub call_id: &'a str,
    /// The validated arguments (as an earlier guardrail may have rewritten them).
    pub arguments: &'a Value,
}

/// What a tool guardrail decides about a call before it runs.
#[derive(Debug, Clone, PartialEq)]
pub enum CallVerdict {
    /// Run it (subject to the other guardrails and the approval policy).
    Allow,
    /// Do not run it; the model sees an error result with this reason.
    Deny(String),
    /// Run it with these arguments instead (validated again against the tool's schema); the
    /// reason goes into the decision.
    Rewrite {
        /// The new arguments.
        arguments: Value,
        /// Why, for the trace.
        reason: String,
    },
    /// Wait for a person's approval (docs/approval.md) before running it.
    RequireApproval(String),
}

/// What a tool guardrail sees of a call after it ran.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ResultCheck<'a> {
    /// Who runs the loop.
    pub caller: &'a Caller,
    /// The tool's name.
    pub tool: &'a str,
    /// The call's id.
    pub call_id: &'a str,
    /// The arguments the handler received.
    pub arguments: &'a Value,
}

/// What a tool guardrail did to a result (it changes the result in place).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResultVerdict {
    /// Left as it was.
    Keep,
    /// Parts were redacted; the reason says what kind (never the redacted text).
    Redacted(String),
    /// Replaced by something else; the reason says why.
    Replaced(String),
}

/// A check of tool calls, before and after they run. Both default to doing nothing.
pub trait ToolGuardrail: Send + Sync {
    /// The guardrail's name, in decisions.
    fn name(&self) -> &str;
    /// Decides about a call before it runs.
    fn before_call(&self, call: &CallCheck<'_>) -> CallVerdict {
        let _ = call;
        CallVerdict::Allow
    }
    /// Sees a call's result (errors included) before the model does; may change it.
    fn after_call(&self, call: &ResultCheck<'_>, result: &mut ToolResult) -> ResultVerdict {
        let _ = (call, result);
        ResultVerdict::Keep
    }
}

/// The guardrails of a run, in the order they run. Cheap to clone (shared).
///
/// ```
/// use agent_loop::{Guardrails, Options, Verdict};
///
/// let guardrails = Guardrails::new()
///     .input_fn("no-secrets", |input| async move {
///         if input.text.contains("BEGIN PRIVATE KEY") {
///             Verdict::Trip("the input holds a private key".into())
///         } else {
///             Verdict::Pass
///         }
///     })
///     .output_fn("cites-sources", |output| async move {
///         if output.text.contains("[source]") || output.retries > 0 {
///             Verdict::Pass
///         } else {
///             Verdict::Retry("cite a source as [source]".into())
///         }
///     });
/// let options = Options::auto().with_guardrails(guardrails);
/// # let _ = options;
/// ```
#[derive(Clone, Default)]
pub struct Guardrails {
    input: Vec<Arc<dyn InputGuardrail>>,
    output: Vec<Arc<dyn OutputGuardrail>>,
    tool: Vec<Arc<dyn ToolGuardrail>>,
    concurrent_input: bool,
    max_output_retries: u32,
}

impl Guardrails {
    /// No guardrails; output retries default to 1.
    pub fn new() -> Self {
        Self {
            max_output_retries: 1,
            ..Self::default()
        }
    }

    /// Adds an input guardrail.
    #[must_use]
    pub fn input(mut self, guardrail: impl InputGuardrail + 'static) -> Self {
        self.input.push(Arc::new(guardrail));
        self
    }

    /// Adds an input guardrail from an async closure.
    #[must_use]
    pub fn input_fn<F, Fut>(self, name: &str, check: F) -> Self
    where
        F: Fn(InputCheck) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Verdict> + Send + 'static,
    {
        self.input(FnGuard {
            name: name.to_owned(),
            check,
        })
    }

    /// Adds an output guardrail.
    #[must_use]
    pub fn output(mut self, guardrail: impl OutputGuardrail + 'static) -> Self {
        self.output.push(Arc::new(guardrail));
        self
    }

    /// Adds an output guardrail from an async closure.
    #[must_use]
    pub fn output_fn<F, Fut>(self, name: &str, check: F) -> Self
    where
        F: Fn(OutputCheck) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Verdict> + Send + 'static,
    {
        self.output(FnGuard {
            name: name.to_owned(),
            check,
        })
    }

    /// Adds a tool guardrail.
    #[must_use]
    pub fn tool(mut self, guardrail: impl ToolGuardrail + 'static) -> Self {
        self.tool.push(Arc::new(guardrail));
        self
    }

    /// Adds a shared tool guardrail.
    #[must_use]
    pub fn tool_shared(mut self, guardrail: Arc<dyn ToolGuardrail>) -> Self {
        self.tool.push(guardrail);
        self
    }

    /// Runs the input guardrails while the first model call streams, instead of before it;
    /// a trip drops (cancels) the call in flight. What that call cost is still counted.
    #[must_use]
    pub fn concurrent_input(mut self, concurrent: bool) -> Self {
        self.concurrent_input = concurrent;
        self
    }

    /// How many times output guardrails may send answers of one run back (default 1); past
    /// it, a `Retry` trips.
    #[must_use]
    pub fn max_output_retries(mut self, retries: u32) -> Self {
        self.max_output_retries = retries;
        self
    }

    /// Whether there are none at all.
    pub fn is_empty(&self) -> bool {
        self.input.is_empty() && self.output.is_empty() && self.tool.is_empty()
    }

    /// Whether any output guardrail is set.
    pub fn has_output_guardrails(&self) -> bool {
        !self.output.is_empty()
    }

    /// Whether any tool guardrail is set.
    pub fn has_tool_guardrails(&self) -> bool {
        !self.tool.is_empty()
    }

    /// Each tool guardrail wrapped by `wrap` (a server turning `RequireApproval` into a denial
    /// where a run cannot wait for a person).
    #[must_use]
    pub fn map_tools(
        mut self,
        wrap: impl Fn(Arc<dyn ToolGuardrail>) -> Arc<dyn ToolGuardrail>,
    ) -> Self {
        self.tool = self.tool.into_iter().map(wrap).collect();
        self
    }

    /// Adds every guardrail of `other` after these (the CLI's and a tenant's configuration
    /// on top of an application's).
    #[must_use]
    pub fn merged(mut self, other: &Guardrails) -> Self {
        self.input.extend(other.input.iter().cloned());
        self.output.extend(other.output.iter().cloned());
        self.tool.extend(other.tool.iter().cloned());
        self.concurrent_input |= other.concurrent_input;
        self
    }
}

impl fmt::Debug for Guardrails {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guardrails")
            .field(
                "input",
                &self.input.iter().map(|g| g.name()).collect::<Vec<_>>(),
            )
            .field(
                "output",
                &self.output.iter().map(|g| g.name()).collect::<Vec<_>>(),
            )
            .field(
                "tool",
                &self.tool.iter().map(|g| g.name()).collect::<Vec<_>>(),
            )
            .field("concurrent_input", &self.concurrent_input)
            .field("max_output_retries", &self.max_output_retries)
            .finish()
    }
}

impl Options {
    /// Sets the run's guardrails (docs/guardrails.md).
    #[must_use]
    pub fn with_guardrails(mut self, guardrails: Guardrails) -> Self {
        self.guardrails = guardrails;
        self
    }
}

/// A closure as an input or output guardrail.
struct FnGuard<F> {
    name: String,
    check: F,
}

impl<F, Fut> InputGuardrail for FnGuard<F>
where
    F: Fn(InputCheck) -> Fut + Send + Sync,
    Fut: Future<Output = Verdict> + Send + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }
    fn check(&self, input: InputCheck) -> GuardFuture<'_, Verdict> {
        Box::pin((self.check)(input))
    }
}

impl<F, Fut> OutputGuardrail for FnGuard<F>
where
    F: Fn(OutputCheck) -> Fut + Send + Sync,
    Fut: Future<Output = Verdict> + Send + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }
    fn check(&self, output: OutputCheck) -> GuardFuture<'_, Verdict> {
        Box::pin((self.check)(output))
    }
}

/// The error a trip ends the run with.
pub fn tripped(guardrail: &str, stage: GuardrailStage, reason: &str) -> AgentError {
    AgentError::new(
        ErrorKind::GuardrailTripped {
            guardrail: guardrail.to_owned(),
            stage,
        },
        format!("guardrail `{guardrail}` stopped the run at the {stage}: {reason}"),
    )
}

/// The `guardrail_tripped` event for a run that ends with `error`, when a trip ended it.
pub(crate) fn trip_event(error: &AgentError) -> Option<AgentEvent> {
    let ErrorKind::GuardrailTripped { guardrail, stage } = &error.kind else {
        return None;
    };
    let reason = error
        .message
        .split_once(": ")
        .map_or(error.message.as_str(), |(_, reason)| reason);
    Some(AgentEvent::GuardrailTripped {
        decision: GuardrailDecision::new(guardrail.as_str(), *stage, GuardrailAction::Trip, reason),
    })
}

/// The input check of a run, when it has input guardrails and its history ends with the
/// caller's new message. The future borrows only the options, so it can run beside the
/// first model call.
pub(crate) fn input_check<'o>(
    options: &'o Options,
    messages: &[Message],
) -> Option<GuardFuture<'o, Result<(), AgentError>>> {
    let guardrails = &options.guardrails.input;
    if guardrails.is_empty() {
        return None;
    }
    let Some(Message::User(user)) = messages.last() else {
        return None;
    };
    let mut text = String::new();
    for block in &user.content {
        if let UserBlock::Text { text: part } = block {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(part);
        }
    }
    let caller = Arc::clone(&options.caller);
    Some(Box::pin(async move {
        for guardrail in guardrails {
            let verdict = guardrail
                .check(InputCheck {
                    caller: Arc::clone(&caller),
                    text: text.clone(),
                })
                .await;
            match verdict {
                Verdict::Pass => {}
                Verdict::Trip(reason) | Verdict::Retry(reason) => {
                    return Err(tripped(guardrail.name(), GuardrailStage::Input, &reason));
                }
            }
        }
        Ok(())
    }))
}

/// Runs the options' input guardrails on the caller's new message (the last of `messages`,
/// when it is the caller's), in order, as the loop does before a run's first model call: the
/// first trip is the run's error ([`ErrorKind::GuardrailTripped`]). For a driver that makes
/// the loop's decisions elsewhere (the Temporal worker checks a run's input once, before its
/// first model call is scheduled).
///
/// # Errors
///
/// The trip of the first guardrail that does not pass.
pub async fn check_input(options: &Options, messages: &[Message]) -> Result<(), AgentError> {
    match input_check(options, messages) {
        Some(check) => check.await,
        None => Ok(()),
    }
}

/// Whether input guardrails run beside the first model call.
pub(crate) fn input_concurrent(options: &Options) -> bool {
    options.guardrails.concurrent_input
}

/// Runs the first model call `call` beside the input `check`: a trip drops the call (which
/// cancels it); otherwise the call's outcome once both are done.
pub(crate) async fn race<T>(
    check: GuardFuture<'_, Result<(), AgentError>>,
    call: impl Future<Output = Result<T, AgentError>>,
) -> Result<T, AgentError> {
    use futures_util::future::{Either, select};
    let call = std::pin::pin!(call);
    match select(check, call).await {
        Either::Left((Ok(()), call)) => call.await,
        // Dropping the call's future drops its stream: the request is cancelled.
        Either::Left((Err(trip), _)) => Err(trip),
        Either::Right((called, check)) => {
            check.await?;
            called
        }
    }
}

/// What the output guardrails decided about an answer.
pub(crate) enum OutputOutcome {
    /// The answer stands.
    Pass,
    /// Send it back with this text for another try.
    Retry(String),
}

/// Runs the output guardrails on the answer `message` (and the structured answer).
pub(crate) async fn check_output(
    options: &Options,
    message: Option<&Message>,
    structured: Option<&Value>,
    retries: u32,
) -> Result<OutputOutcome, AgentError> {
    let guardrails = &options.guardrails;
    if guardrails.output.is_empty() {
        return Ok(OutputOutcome::Pass);
    }
    let text = match message {
        Some(Message::Assistant(message)) => message.text_content(),
        _ => String::new(),
    };
    for guardrail in &guardrails.output {
        let verdict = guardrail
            .check(OutputCheck {
                caller: Arc::clone(&options.caller),
                text: text.clone(),
                structured: structured.cloned(),
                retries,
            })
            .await;
        match verdict {
            Verdict::Pass => {}
            Verdict::Trip(reason) => {
                return Err(tripped(guardrail.name(), GuardrailStage::Output, &reason));
            }
            Verdict::Retry(reason) if retries >= guardrails.max_output_retries => {
                let reason = format!(
                    "{reason} (the answer was sent back {retries} time(s), the most the \
                     guardrails allow)"
                );
                return Err(tripped(guardrail.name(), GuardrailStage::Output, &reason));
            }
            Verdict::Retry(reason) => {
                tracing::info!(guardrail = guardrail.name(), %reason, "an output guardrail sent the answer back");
                return Ok(OutputOutcome::Retry(format!(
                    "Your answer was not accepted (guardrail `{}`): {reason}\nAnswer again.",
                    guardrail.name()
                )));
            }
        }
    }
    Ok(OutputOutcome::Pass)
}

/// The decisions among `decisions` about `call` (none: no allocation), for its job.
#[allow(clippy::box_collection)]
pub(crate) fn decisions_for(
    decisions: &[GuardrailDecision],
    call: &ToolCall,
) -> Option<Box<Vec<GuardrailDecision>>> {
    let mine: Vec<GuardrailDecision> = decisions
        .iter()
        .filter(|decision| decision.call_id.as_ref() == Some(&call.id))
        .cloned()
        .collect();
    (!mine.is_empty()).then(|| Box::new(mine))
}

/// What the tool guardrails decided about a call before it runs.
#[derive(Debug, Default)]
pub(crate) struct CallGate {
    /// The error result the model sees instead of running the call.
    pub(crate) refused: Option<String>,
    /// The call waits for a person's approval.
    pub(crate) approval: bool,
    /// The decisions, for the call's trace entry.
    pub(crate) decisions: Vec<GuardrailDecision>,
}

/// Runs the tool guardrails on `call` before it runs; a rewrite changes `call.arguments`.
/// Calls of unknown tools and with invalid arguments pass (their error results come later).
pub(crate) fn before_call(options: &Options, tools: &Registry, call: &mut ToolCall) -> CallGate {
    let mut gate = CallGate::default();
    let guardrails = &options.guardrails.tool;
    if guardrails.is_empty() {
        return gate;
    }
    let Some(tool) = tools.get(&call.name) else {
        return gate;
    };
    let Ok(validated) = tool.validate(call.arguments.clone(), options.tool_arg_validation) else {
        return gate;
    };
    let mut arguments = validated.arguments;
    let decide = |gate: &mut CallGate, name: &str, action, reason: &str| {
        gate.decisions.push(
            GuardrailDecision::new(name, GuardrailStage::ToolCall, action, reason)
                .for_call(call.id.clone()),
        );
    };
    for guardrail in guardrails {
        let check = CallCheck {
            caller: &options.caller,
            tool: tool.tool(),
            call_id: call.id.as_str(),
            arguments: &arguments,
        };
        match guardrail.before_call(&check) {
            CallVerdict::Allow => {}
            CallVerdict::Deny(reason) => {
                decide(&mut gate, guardrail.name(), GuardrailAction::Deny, &reason);
                gate.refused = Some(format!(
                    "This call was not run: guardrail `{}` denied it: {reason}",
                    guardrail.name()
                ));
                return gate;
            }
            CallVerdict::Rewrite {
                arguments: rewritten,
                reason,
            } => {
                // The rewrite must still fit the tool's schema.
                match tool.validate(rewritten, options.tool_arg_validation) {
                    Ok(valid) => {
                        arguments = valid.arguments;
                        decide(
                            &mut gate,
                            guardrail.name(),
                            GuardrailAction::Rewrite,
                            &reason,
                        );
                    }
                    Err(invalid) => {
                        let reason = format!("its rewrite of the arguments is invalid: {invalid}");
                        decide(&mut gate, guardrail.name(), GuardrailAction::Deny, &reason);
                        gate.refused = Some(format!(
                            "This call was not run: guardrail `{}` could not make it safe.",
                            guardrail.name()
                        ));
                        return gate;
                    }
                }
            }
            CallVerdict::RequireApproval(reason) => {
                decide(
                    &mut gate,
                    guardrail.name(),
                    GuardrailAction::RequireApproval,
                    &reason,
                );
                gate.approval = true;
            }
        }
    }
    if gate
        .decisions
        .iter()
        .any(|decision| decision.action == GuardrailAction::Rewrite)
    {
        // What runs (and what an approver is shown) is the rewritten call.
        call.arguments = arguments;
    }
    gate
}

/// Runs the tool guardrails on a call's `result` after it ran (when `ran`); returns the
/// call's decisions, those made before it ran first. Boxed, so a call's future keeps one
/// pointer for them across its awaits.
#[allow(clippy::box_collection)] // One pointer, not a Vec's three words, per call.
pub(crate) fn after_call(
    options: &Options,
    job: &Job,
    arguments: &Value,
    result: &mut ToolResult,
    ran: bool,
) -> Option<Box<Vec<GuardrailDecision>>> {
    let guardrails = &options.guardrails.tool;
    let mut decisions = job.guardrails.clone();
    if guardrails.is_empty() || !ran {
        return decisions;
    }
    let check = ResultCheck {
        caller: &options.caller,
        tool: &job.name,
        call_id: job.call.id.as_str(),
        arguments,
    };
    for guardrail in guardrails {
        let (action, reason) = match guardrail.after_call(&check, result) {
            ResultVerdict::Keep => continue,
            ResultVerdict::Redacted(reason) => (GuardrailAction::Redact, reason),
            ResultVerdict::Replaced(reason) => (GuardrailAction::Replace, reason),
        };
        decisions.get_or_insert_with(Box::default).push(
            GuardrailDecision::new(guardrail.name(), GuardrailStage::ToolResult, action, reason)
                .for_call(job.call.id.clone()),
        );
    }
    decisions
}

/// `agentry.guardrails` on a tool span: `name:action` of each decision, comma-separated.
pub(crate) fn span_value(decisions: &[GuardrailDecision]) -> String {
    let mut value = String::new();
    for decision in decisions {
        if !value.is_empty() {
            value.push(',');
        }
        value.push_str(&decision.guardrail);
        value.push(':');
        value.push_str(decision.action.as_str());
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trip_event_carries_the_guardrail_and_its_reason() {
        let error = tripped(
            "pii",
            GuardrailStage::Input,
            "the input holds an email address",
        );
        assert_eq!(error.status(), 403);
        let Some(AgentEvent::GuardrailTripped { decision }) = trip_event(&error) else {
            panic!("no trip event");
        };
        assert_eq!(decision.guardrail, "pii");
        assert_eq!(decision.stage, GuardrailStage::Input);
        assert_eq!(decision.action, GuardrailAction::Trip);
        assert_eq!(decision.reason, "the input holds an email address");
        assert!(trip_event(&AgentError::config("x")).is_none());
    }

    #[test]
    fn span_value_names_each_decision() {
        let decisions = [
            GuardrailDecision::new(
                "pii",
                GuardrailStage::ToolResult,
                GuardrailAction::Redact,
                "",
            ),
            GuardrailDecision::new(
                "policy",
                GuardrailStage::ToolCall,
                GuardrailAction::Rewrite,
                "",
            ),
        ];
        assert_eq!(span_value(&decisions), "pii:redact,policy:rewrite");
    }
}
