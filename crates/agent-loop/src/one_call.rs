//! [`run_tool_call`]: one tool call, run exactly as a round of the loop runs it (validation,
//! handler, timeout, cancellation, truncation, the result hook, the trace entry), for a driver
//! that schedules each call on its own (a durable-execution engine's activity).

use agent_tools::{Accounting, BudgetLeft, TruncationPolicy};
use agent_types::{AgentError, ToolCall, ToolResult, TraceEntry};
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
/// cancellation token (`options.cancellation`) reaching the handler.
///
/// # Errors
/// A configuration error when `options.tool_result_max_bytes` is not a usable cap.
pub async fn run_tool_call(
    options: &Options,
    call: ToolCall,
    iteration: u32,
) -> Result<ToolCallOutcome, AgentError> {
    let policy = TruncationPolicy::new(options.tool_result_max_bytes)
        .map_err(|error| AgentError::config(error.to_string()))?;
    let job = Job {
        name: std::sync::Arc::from(call.name.as_str()),
        call,
        iteration,
        refused: None,
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
        &Emitter::off(),
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
        .map(|kind| crate::run::stop_error(kind, &job.call, &outcome.result.content));
    Ok(ToolCallOutcome {
        result: outcome.result,
        trace: outcome.trace,
        stop,
    })
}
