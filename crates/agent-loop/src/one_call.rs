//! [`run_tool_call`]: one tool call, run exactly as a round of the loop runs it (validation,
//! handler, timeout, cancellation, truncation, the result hook, the trace entry), for a driver
//! that schedules each call on its own (a durable-execution engine's activity).

use agent_tools::{Accounting, BudgetLeft, TruncationPolicy};
use agent_types::{AgentError, AgentEvent, ToolCall, ToolResult, TraceEntry};
use tokio_util::sync::CancellationToken;

use crate::events::Emitter;
use crate::job::Job;
use crate::options::Options;

/// What one call produced: what the model sees, the trace entry, and, when the call's failure
/// ends the run (under [`ToolErrorMode::Abort`](crate::ToolErrorMode::Abort), or a fatal
/// handler error), the error the run ends with.
#[derive(Debug, Clone)]
pub struct ToolCallOutcome {
    /// The result as the model sees it (truncated, after the result hook).
    pub result: ToolResult,
    /// The call's trace entry, as the in-process loop writes it.
    pub trace: TraceEntry,
    /// Set when this call's failure ends the run.
    pub stop: Option<AgentError>,
}

/// Runs `call` against `options.tools` as round `iteration` of a run would, with the run's
/// cancellation token (`options.cancellation`) reaching the handler. With `refused` set the
/// call is not run: the model sees that text as its error result (an approval policy's or a
/// person's denial), and the trace records it as the loop does.
///
/// Tool guardrails (`options.guardrails`) apply as in a round: without `refused`, the
/// before-call checks run again (a denial refuses the call, a rewrite applies; a
/// require-approval is taken as settled by [`screen_tool_call`], which asked first), and the
/// after-call checks redact or replace the result through the loop's own dispatch; their
/// decisions are in the trace entry.
///
/// # Errors
/// A configuration error when `options.tool_result_max_bytes` is not a usable cap.
pub async fn run_tool_call(
    options: &Options,
    call: ToolCall,
    iteration: u32,
    refused: Option<String>,
) -> Result<ToolCallOutcome, AgentError> {
    let mut call = call;
    let mut refused = refused;
    let guardrails = gate(options, &mut call, &mut refused, None);
    run_job(
        options,
        call,
        iteration,
        refused,
        guardrails,
        &Emitter::off(),
    )
    .await
}

/// The tool guardrails' before-call checks of an unscreened call (a denial refuses it, a
/// rewrite applies), or the decisions `screened` already made; what goes into its trace.
#[allow(clippy::box_collection)]
fn gate(
    options: &Options,
    call: &mut ToolCall,
    refused: &mut Option<String>,
    screened: Option<Vec<agent_types::GuardrailDecision>>,
) -> Option<Box<Vec<agent_types::GuardrailDecision>>> {
    if let Some(decisions) = screened {
        return (!decisions.is_empty()).then(|| Box::new(decisions));
    }
    if refused.is_some() {
        return None;
    }
    // [guardrail call site: tool call, Temporal activity]
    let gate = crate::guardrail::before_call(options, &options.tools, call);
    *refused = gate.refused;
    (!gate.decisions.is_empty()).then(|| Box::new(gate.decisions))
}

/// [`run_tool_call`] for a call already screened by [`screen_tool_call_decided`] (its
/// arguments as screening left them): the tool guardrails' before-call checks are not run
/// again, and `guardrails`, what they decided while screening, go into the trace entry, as a
/// round of the loop does.
///
/// # Errors
/// A configuration error when `options.tool_result_max_bytes` is not a usable cap.
pub async fn run_screened_tool_call(
    options: &Options,
    call: ToolCall,
    iteration: u32,
    refused: Option<String>,
    guardrails: Vec<agent_types::GuardrailDecision>,
) -> Result<ToolCallOutcome, AgentError> {
    let guardrails = (!guardrails.is_empty()).then(|| Box::new(guardrails));
    run_job(
        options,
        call,
        iteration,
        refused,
        guardrails,
        &Emitter::off(),
    )
    .await
}

/// [`run_tool_call`] (or, with `screened` set, [`run_screened_tool_call`] with those
/// decisions), handing its events to `on_event` as they happen: the round's
/// `tool_execution_start`, `tool_execution_delta` (the handler's progress), `sub_agent` and
/// `tool_execution_end` for the call, as the in-process loop emits them (a durable driver
/// publishes them for live viewers).
///
/// # Errors
/// As [`run_tool_call`].
pub async fn run_tool_call_with_events(
    options: &Options,
    call: ToolCall,
    iteration: u32,
    refused: Option<String>,
    screened: Option<Vec<agent_types::GuardrailDecision>>,
    mut on_event: impl FnMut(AgentEvent) + Send,
) -> Result<ToolCallOutcome, AgentError> {
    use futures_util::StreamExt;
    // The loop's event stream carries a run's result; the call's outcome goes beside it.
    let outcome = std::sync::Arc::new(std::sync::Mutex::new(None));
    let slot = std::sync::Arc::clone(&outcome);
    let mut stream = crate::events::EventStream::new(move |emitter| async move {
        let mut call = call;
        let mut refused = refused;
        let guardrails = gate(options, &mut call, &mut refused, screened);
        let done = run_job(options, call, iteration, refused, guardrails, &emitter).await;
        *slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(done);
        Err(AgentError::config("a single tool call has no run result"))
    });
    while let Some(event) = stream.next().await {
        on_event(event);
    }
    let _ = stream.result().await;
    let done = outcome
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    done.unwrap_or_else(|| Err(AgentError::config("the tool call did not finish")))
}

// The job's own field type (a job keeps one pointer for its rare decisions).
#[allow(clippy::box_collection)]
async fn run_job(
    options: &Options,
    call: ToolCall,
    iteration: u32,
    refused: Option<String>,
    guardrails: Option<Box<Vec<agent_types::GuardrailDecision>>>,
    emitter: &Emitter,
) -> Result<ToolCallOutcome, AgentError> {
    let policy = TruncationPolicy::new(options.tool_result_max_bytes)
        .map_err(|error| AgentError::config(error.to_string()))?;
    let job = Job {
        name: std::sync::Arc::from(call.name.as_str()),
        call,
        iteration,
        refused,
        guardrails,
    };
    let budget = BudgetLeft {
        tokens: options.token_budget,
        cost_usd: options.max_cost_usd,
    };
    let jobs = [job];
    let mut outcomes = crate::dispatch::run_batch(
        &jobs,
        &options.tools,
        options,
        &policy,
        emitter,
        &CancellationToken::new(),
        &Accounting::default(),
        budget,
        None,
    )
    .await;
    let [job] = jobs;
    let Some(outcome) = outcomes.pop() else {
        return Err(AgentError::config("the tool round produced no outcome"));
    };
    if let Some(waiting) = outcome.waiting {
        waiting.await;
    }
    let stop = outcome
        .stop
        .map(|kind| crate::machine::stop_error(kind, &job.call, &outcome.result.content));
    Ok(ToolCallOutcome {
        result: outcome.result,
        trace: outcome.trace,
        stop,
    })
}

/// How the run's approval policy treats one local call, before its round runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallScreen {
    /// Run it (or let the dispatch refuse it: unknown tool, invalid arguments).
    Run,
    /// A person must approve it first.
    AwaitApproval,
    /// Not run: the model sees this text as its error result.
    Refuse(String),
}

/// Screens `call` as the loop screens a round's calls: the tool guardrails first (a denial
/// refuses it, a rewrite changes `call`'s arguments in place so an approver sees what will
/// run, a require-approval waits for a person), then `options`' approval policy
/// (`approval_policy`, `require_approval_for`, tools marked `with_approval`).
pub fn screen_tool_call(options: &Options, call: &mut ToolCall) -> CallScreen {
    screen_tool_call_decided(options, call).0
}

/// [`screen_tool_call`], with what the tool guardrails decided while screening (each
/// decision names its call), for a driver that hands them to [`run_screened_tool_call`].
pub fn screen_tool_call_decided(
    options: &Options,
    call: &mut ToolCall,
) -> (CallScreen, Vec<agent_types::GuardrailDecision>) {
    // [guardrail call site: tool call, Temporal screening]
    let gate = crate::guardrail::before_call(options, &options.tools, call);
    let screen = if let Some(reason) = gate.refused {
        CallScreen::Refuse(reason)
    } else if gate.approval {
        CallScreen::AwaitApproval
    } else {
        match crate::approval::screen(options, &options.tools, call) {
            None => CallScreen::Run,
            Some(Ok(())) => CallScreen::AwaitApproval,
            Some(Err(reason)) => CallScreen::Refuse(reason),
        }
    };
    (screen, gate.decisions)
}

/// The decision for `call` among `decisions`: `None` while there is none that fits (a
/// decision bound to another tool name or other arguments does not fit), else
/// `Some(None)` to run it and `Some(Some(text))` to refuse it with the loop's denial text.
pub fn decide_tool_call(
    decisions: &[crate::ApprovalDecision],
    call: &ToolCall,
) -> Option<Option<String>> {
    let decision = decisions
        .iter()
        .rev()
        .find(|d| d.call_id == call.id.as_str() && !d.mismatches(call))?;
    Some((!decision.approved).then(|| decision.denial()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use agent_tools::{Registry, Tool, ToolEvent};

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Args {
        n: u32,
    }

    /// The one-call path hands out the call's events as a round emits them: start, each
    /// progress delta, end; and its outcome is `run_tool_call`'s.
    #[tokio::test]
    async fn one_call_with_events_emits_start_progress_and_end() {
        let mut registry = Registry::new();
        registry
            .register(Tool::streaming(
                "count",
                "Counts to n.",
                |args: Args, _ctx| {
                    futures_util::stream::iter(
                        (1..=args.n)
                            .map(|i| ToolEvent::delta(format!("{i}")))
                            .chain([ToolEvent::ok(args.n)]),
                    )
                },
            ))
            .unwrap();
        let options = Options::auto().with_tools(registry).with_tool_trace(true);
        let call = ToolCall::new("c1", "count", serde_json::json!({"n": 2}));
        let mut events = Vec::new();
        let outcome = run_tool_call_with_events(&options, call.clone(), 1, None, None, |event| {
            events.push(event);
        })
        .await
        .unwrap();
        let kinds: Vec<String> = events
            .iter()
            .map(|e| {
                serde_json::to_value(e).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "tool_execution_start",
                "tool_execution_delta",
                "tool_execution_delta",
                "tool_execution_end"
            ]
        );
        let plain = run_tool_call(&options, call, 1, None).await.unwrap();
        assert_eq!(outcome.result, plain.result);
        assert_eq!(outcome.result.content, "2");
    }
}
