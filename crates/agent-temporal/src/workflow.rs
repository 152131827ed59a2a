//! The `agent_run` workflow: the loop's steps as activities, its waits as signals.
//!
//! Deterministic by construction: the workflow reads no clock, draws no random number and does
//! no I/O; everything it decides comes from its input, the activities' results and the signals,
//! all recorded in the workflow's history, so a replay on another worker decides the same.

use std::time::Duration;

use agent_loop::{ApprovalDecision, SessionStatus, decide_tool_call};
use agent_types::{ToolCall, ToolResult, TraceEntry, Usage, UserMessage};
use futures_util::future::join_all;
use temporalio_common::RetryPolicy;
use temporalio_macros::{workflow, workflow_methods};
use temporalio_sdk::{
    ActivityOptions, ContinueAsNewOptions, SyncWorkflowContext, WorkflowContext,
    WorkflowContextView, WorkflowResult,
};

use crate::activities::{AgentActivities, HEARTBEAT_EVERY};
use crate::wire::{
    Carried, ModelCallOutput, RunOutcome, RunRequest, RunStatus, Step, ToolCallInput,
};

/// Past this many history events the workflow continues as new at its next model call (the
/// server's own limit is 51,200 events and 50 MB; a round takes about 6 + 6 per tool call
/// events, and each model call's payload carries the session, so the history's size grows with
/// the square of the rounds: a few hundred events keeps it small).
pub const CONTINUE_AS_NEW_AFTER_EVENTS: u32 = 1_000;

/// A model call's budget of time; the loop's own timeout (`Options::timeout`) cuts sooner.
const MODEL_CALL_TIMEOUT: Duration = Duration::from_secs(600);
/// A tool call's budget of time; the loop's per-call timeout cuts sooner.
const TOOL_CALL_TIMEOUT: Duration = Duration::from_secs(3_600);

/// The workflow's state: what the queries read and the signals fill.
#[workflow]
#[derive(Default)]
pub struct AgentRun {
    status: RunStatus,
    trace: Vec<TraceEntry>,
    /// Results of remote calls, from the `tool_results` signal, until the round takes them.
    remote_results: Vec<ToolResult>,
    /// Decisions from the `approve` signal, until the round takes them.
    decisions: Vec<ApprovalDecision>,
    /// Times the workflow continued as new before this run.
    continued: u32,
}

#[workflow_methods]
impl AgentRun {
    /// Runs the session until the model answers, a budget trips or a tool stops the run.
    #[run(name = "agent_run")]
    pub async fn run(
        ctx: &mut WorkflowContext<Self>,
        request: RunRequest,
    ) -> WorkflowResult<RunOutcome> {
        let RunRequest {
            mut session,
            user,
            next,
            mut carried,
            continue_as_new_after,
        } = request;
        let limit = continue_as_new_after.unwrap_or(CONTINUE_AS_NEW_AFTER_EVENTS);
        ctx.state_mut(|s| {
            s.trace = std::mem::take(&mut carried.trace);
            s.status.usage = carried.usage;
            s.status.model_calls = carried.model_calls;
            s.status.status = SessionStatus::Running;
            s.continued = carried.continued;
        });
        // Live events (crate::events): the run's own; the messages `session_end` lists start
        // after the caller's input.
        let fresh = next.is_none();
        let mut from = session.messages.len() + usize::from(fresh);
        if fresh {
            crate::events::publish(ctx, crate::events::started(&session)).await;
        }
        let mut step = match (next, user) {
            (Some(step), _) => step,
            (None, Some(text)) => Step::User {
                message: UserMessage::text(text),
            },
            (None, None) => Step::User {
                message: UserMessage::text(""),
            },
        };
        loop {
            if ctx.history_length() > limit || ctx.continue_as_new_suggested() {
                let carried = ctx.state(|s| Carried {
                    trace: s.trace.clone(),
                    usage: s.status.usage,
                    cost_usd: carried.cost_usd,
                    model_calls: s.status.model_calls,
                    continued: carried.continued + 1,
                });
                let next = RunRequest {
                    session,
                    user: None,
                    next: Some(step),
                    carried,
                    continue_as_new_after,
                };
                // Always an `Err`: the termination that makes the server start the next run.
                match ctx.continue_as_new(next, ContinueAsNewOptions::default()) {
                    Err(termination) => return Err(termination),
                    Ok(never) => match never {},
                }
            }
            let output: ModelCallOutput = ctx
                .execute_activity(
                    AgentActivities::model_call,
                    crate::wire::ModelCallInput { session, step },
                    model_options(),
                )
                .await?;
            let ModelCallOutput {
                session: after,
                answer,
                usage,
                cost_usd,
                iteration,
                local,
                needs_approval,
                refused,
                remote,
            } = output;
            session = after;
            carried.cost_usd = add_cost(carried.cost_usd, cost_usd);
            ctx.state_mut(|s| {
                s.status.usage += usage;
                s.status.model_calls += 1;
                s.status.status = session.status;
            });
            if session.status != SessionStatus::AwaitingToolExecution {
                let ended = crate::events::run_ended(&session, from, None);
                crate::events::publish(ctx, ended).await;
                return Ok(finish(ctx, session, answer, carried.cost_usd, None));
            }

            // Calls waiting for a person: the run waits (no worker held) for the `approve`
            // signal with a decision for each, then refuses the denied ones.
            let mut refusals: Vec<(String, String)> =
                refused.into_iter().map(|r| (r.call_id, r.reason)).collect();
            if !needs_approval.is_empty() {
                ctx.state_mut(|s| {
                    s.status.status = SessionStatus::AwaitingApproval;
                    s.status.pending_approvals = needs_approval.clone();
                });
                let waiting =
                    crate::events::suspended(&session, from, true, needs_approval.clone());
                crate::events::publish(ctx, waiting).await;
                ctx.wait_condition(|s| {
                    needs_approval
                        .iter()
                        .all(|call| decide_tool_call(&s.decisions, call).is_some())
                })
                .await?;
                let decisions = ctx.state_mut(|s| {
                    s.status.pending_approvals.clear();
                    s.status.status = SessionStatus::Running;
                    std::mem::take(&mut s.decisions)
                });
                crate::events::publish(ctx, crate::events::started(&session)).await;
                from = session.messages.len();
                for call in &needs_approval {
                    if let Some(Some(denial)) = decide_tool_call(&decisions, call) {
                        refusals.push((call.id.to_string(), denial));
                    }
                }
            }

            // The worker's tools, one activity each, all at once (the loop's parallel mode);
            // a refused call's activity records the refusal without running the tool.
            let outputs = join_all(local.iter().map(|call| {
                let refused = refusals
                    .iter()
                    .find(|(id, _)| id == call.id.as_str())
                    .map(|(_, reason)| reason.clone());
                ctx.execute_activity(
                    AgentActivities::tool_call,
                    ToolCallInput {
                        call: call.clone(),
                        iteration,
                        refused,
                    },
                    tool_options(),
                )
            }))
            .await;
            let mut results: Vec<ToolResult> = Vec::with_capacity(local.len() + remote.len());
            let mut stop = None;
            for output in outputs {
                let output = output?;
                ctx.state_mut(|s| s.trace.push(output.trace));
                if stop.is_none() {
                    stop = output.stop;
                }
                results.push(output.result);
            }
            if let Some(error) = stop {
                session.status = SessionStatus::Error;
                let ended = crate::events::run_ended(&session, from, Some(&error));
                crate::events::publish(ctx, ended).await;
                return Ok(finish(
                    ctx,
                    session,
                    String::new(),
                    carried.cost_usd,
                    Some(error),
                ));
            }

            // Remote calls: their results arrive as the `tool_results` signal.
            if !remote.is_empty() {
                ctx.state_mut(|s| {
                    s.status.status = SessionStatus::AwaitingToolExecution;
                    s.status.pending_tool_calls = remote.clone();
                });
                let waiting = crate::events::suspended(&session, from, false, remote.clone());
                crate::events::publish(ctx, waiting).await;
                let ids: Vec<String> = remote.iter().map(|c| c.id.to_string()).collect();
                ctx.wait_condition(|s| {
                    ids.iter().all(|id| {
                        s.remote_results
                            .iter()
                            .any(|r| r.tool_call_id.as_str() == id)
                    })
                })
                .await?;
                let arrived = ctx.state_mut(|s| {
                    s.status.pending_tool_calls.clear();
                    s.status.status = SessionStatus::Running;
                    std::mem::take(&mut s.remote_results)
                });
                crate::events::publish(ctx, crate::events::started(&session)).await;
                from = session.messages.len();
                results.extend(
                    arrived
                        .into_iter()
                        .filter(|r| ids.iter().any(|id| r.tool_call_id.as_str() == id)),
                );
            }
            crate::events::publish(ctx, crate::events::tool_messages(&results)).await;
            step = Step::ToolResults { results };
        }
    }

    /// Results for calls of remote tools (any order; unknown ids are ignored).
    #[signal(name = "tool_results")]
    pub fn tool_results(&mut self, _ctx: &mut SyncWorkflowContext<Self>, results: Vec<ToolResult>) {
        self.remote_results.extend(results);
    }

    /// A person's decisions on calls waiting for approval.
    #[signal(name = "approve")]
    pub fn approve(
        &mut self,
        _ctx: &mut SyncWorkflowContext<Self>,
        decisions: Vec<ApprovalDecision>,
    ) {
        self.decisions.extend(decisions);
    }

    /// Where the run stands, with the calls it waits for and its usage so far.
    #[query(name = "status")]
    pub fn status(&self, _ctx: &WorkflowContextView) -> RunStatus {
        self.status.clone()
    }

    /// The calls the run waits for: remote results, then approvals.
    #[query(name = "pending")]
    pub fn pending(&self, _ctx: &WorkflowContextView) -> Vec<ToolCall> {
        let mut calls = self.status.pending_tool_calls.clone();
        calls.extend(self.status.pending_approvals.iter().cloned());
        calls
    }

    /// Tokens so far.
    #[query(name = "usage")]
    pub fn usage(&self, _ctx: &WorkflowContextView) -> Usage {
        self.status.usage
    }

    /// The trace so far.
    #[query(name = "trace")]
    pub fn trace(&self, _ctx: &WorkflowContextView) -> Vec<TraceEntry> {
        self.trace.clone()
    }
}

fn finish(
    ctx: &WorkflowContext<AgentRun>,
    session: agent_loop::Session,
    answer: String,
    cost_usd: Option<f64>,
    error: Option<String>,
) -> RunOutcome {
    ctx.state_mut(|s| s.status.status = session.status);
    let (trace, usage, model_calls, continued) = ctx.state(|s| {
        (
            s.trace.clone(),
            s.status.usage,
            s.status.model_calls,
            s.continued,
        )
    });
    RunOutcome {
        session_id: session.id.to_string(),
        status: session.status,
        answer,
        usage,
        cost_usd,
        trace,
        model_calls,
        continued,
        error,
        session,
    }
}

fn add_cost(total: Option<f64>, more: Option<f64>) -> Option<f64> {
    match (total, more) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    }
}

/// Retries of a model call: the backend's retryable failures (5xx, timeouts, rate limits) with
/// exponential backoff; everything else fails at once (non-retryable failures, see
/// `activities::failure`).
fn retry_policy() -> RetryPolicy {
    RetryPolicy::builder()
        .initial_interval(Duration::from_secs(1))
        .backoff_coefficient(2.0)
        .maximum_interval(Duration::from_secs(60))
        .maximum_attempts(5)
        .build()
}

fn model_options() -> ActivityOptions {
    ActivityOptions::with_start_to_close_timeout(MODEL_CALL_TIMEOUT)
        .heartbeat_timeout(HEARTBEAT_EVERY * 10)
        .retry_policy(retry_policy())
        .build()
}

fn tool_options() -> ActivityOptions {
    ActivityOptions::with_start_to_close_timeout(TOOL_CALL_TIMEOUT)
        .heartbeat_timeout(HEARTBEAT_EVERY * 10)
        .retry_policy(retry_policy())
        .build()
}
