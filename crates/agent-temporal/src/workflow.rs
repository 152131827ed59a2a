//! The `agent_run` workflow: the driver of the loop's state machine (`agent_loop::machine`)
//! on Temporal. It holds the machine's [`State`] and the session's history, feeds the machine
//! one input at a time and performs each action: a model call is the `model_call` activity, a
//! round's tool calls are `tool_call` activities, a suspension waits for the `approve` or
//! `tool_results` signal; pushes, the structured answer and the run's end happen here.
//!
//! Deterministic by construction: the workflow reads no clock, draws no random number and does
//! no I/O; everything it decides comes from its input, the activities' results and the signals,
//! all recorded in the workflow's history, so a replay on another worker decides the same. The
//! loop has no wall-clock budget of its own; the model-call and tool-call timeouts are the
//! activities' (measured on the worker), so the workflow never needs the time.

use std::time::Duration;

use agent_loop::machine::{Action, Input, ResponseText, RoundOutcome, Screen, State};
use agent_loop::{ApprovalDecision, ByteEstimate, Session, SessionStatus, TokenCounter};
use agent_tools::TruncationPolicy;
use agent_types::{
    AgentError, AgentEvent, AssistantBlock, BackendError, BackendErrorKind, Message, ToolCall,
    ToolResult, TraceEntry, Usage, UserMessage,
};
use futures_util::future::join_all;
use temporalio_common::RetryPolicy;
use temporalio_macros::{workflow, workflow_methods};
use temporalio_sdk::{
    ActivityExecutionError, ActivityOptions, ContinueAsNewOptions, SyncWorkflowContext,
    WorkflowContext, WorkflowContextView, WorkflowResult,
};

use crate::activities::{AgentActivities, HEARTBEAT_EVERY};
use crate::wire::{
    Carried, ModelCallInput, ModelCallOutput, Resume, Retries, RunConfig, RunConfigInput,
    RunOutcome, RunRequest, RunStatus, Screened, ToolCallInput,
};

/// Past this many history events the workflow continues as new before its next model call
/// (the server's own limit is 51,200 events and 50 MB; a round takes about 6 + 6 per tool
/// call events, and each model call's payload carries the history, so the history's size
/// grows with the square of the rounds: a thousand events keeps it small).
pub const CONTINUE_AS_NEW_AFTER_EVENTS: u32 = 1_000;

/// The `run_config` activity's budget of time (it reads the worker's options, no I/O).
const RUN_CONFIG_TIMEOUT: Duration = Duration::from_secs(60);

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

/// The driver's own data between two steps (the queries' data is in [`AgentRun`]).
struct Drive {
    session: Session,
    config: RunConfig,
    state: State,
    /// Usage and dollars of the machines before this one (a run resumed after a suspension
    /// starts a machine on the budgets it kept, as the in-process loop does).
    usage_before: Usage,
    cost_before: Option<f64>,
    /// The screened calls of the last response, for the machine's `screen_calls`.
    screened: Option<Screened>,
    /// The structured answer, once emitted.
    output: Option<serde_json::Value>,
    /// The estimate of the history counted so far: messages only ever join at the end.
    counted: usize,
    history_tokens: u64,
    /// The live events the workflow made since it last published (crate::events), published
    /// before the next activity, wait or end so they keep the in-process order; and where the
    /// messages the next `session_end` lists start.
    events: Vec<AgentEvent>,
    events_from: usize,
    /// Where the trace of the run's current part starts (an error's partial trace).
    trace_from: usize,
}

impl Drive {
    fn usage(&self) -> Usage {
        self.usage_before + self.state.usage()
    }

    fn cost_usd(&self) -> Option<f64> {
        add_cost(self.cost_before, self.state.cost_usd())
    }

    /// A new machine on the budgets the suspended one kept (its spend joins the run's).
    fn reopen(&mut self) {
        self.usage_before += self.state.usage();
        self.cost_before = add_cost(self.cost_before, self.state.cost_usd());
        self.state = State::resume(self.state.take_budgets());
    }

    fn step(&mut self, input: Input) -> Action {
        self.state.step(&self.config.setup.config, input)
    }

    /// Queues a live event of the workflow's own, when the worker keeps an event log.
    fn note(&mut self, event: impl FnOnce(&Session) -> AgentEvent) {
        if self.config.events {
            let event = event(&self.session);
            self.events.push(event);
        }
    }

    /// Queues a message's live events, as the in-process loop emits them when it joins the
    /// history (an assistant message's `message_start` went out with its model call).
    fn note_message(&mut self, message: &Message) {
        if !self.config.events {
            return;
        }
        if message.role() != agent_types::Role::Assistant {
            self.events.push(AgentEvent::MessageStart {
                role: message.role(),
            });
        }
        self.events.push(AgentEvent::MessageEnd {
            message: message.clone(),
            cost_usd: None,
        });
    }

    /// Publishes the queued events (the `publish_events` local activity).
    async fn flush(&mut self, ctx: &WorkflowContext<AgentRun>) {
        if !self.events.is_empty() {
            crate::events::publish(ctx, std::mem::take(&mut self.events)).await;
        }
    }

    /// The next request's estimated input, with the default counter (the same on every
    /// worker, so the same in every replay).
    fn estimate(&mut self) -> u64 {
        if !self.config.setup.estimate {
            return 0;
        }
        let counter = ByteEstimate;
        for message in &self.session.messages[self.counted..] {
            self.history_tokens = self
                .history_tokens
                .saturating_add(counter.message_tokens(message));
        }
        self.counted = self.session.messages.len();
        let request = &self.config.setup.request;
        counter
            .preamble_tokens(request.system.as_deref(), &request.tools)
            .saturating_add(self.history_tokens)
    }

    /// The machine's input for the response just appended.
    fn response_input(&self) -> Input {
        let Some(Message::Assistant(message)) = self.session.messages.last() else {
            return Input::ResponseAppended {
                calls: Vec::new(),
                text: None,
            };
        };
        let calls = message.tool_calls().cloned().collect();
        let text = self.config.setup.config.output.as_ref().map(|_| {
            Box::new(ResponseText {
                refusal: message.content.iter().find_map(|block| match block {
                    AssistantBlock::Refusal { text } => Some(text.clone()),
                    _ => None,
                }),
                text: message.text_content(),
            })
        });
        Input::ResponseAppended { calls, text }
    }
}

#[workflow_methods]
impl AgentRun {
    /// Drives the loop's state machine until it finishes, fails or is cancelled.
    #[run(name = "agent_run")]
    pub async fn run(
        ctx: &mut WorkflowContext<Self>,
        request: RunRequest,
    ) -> WorkflowResult<RunOutcome> {
        let RunRequest {
            mut session,
            user,
            resume,
            carried,
            continue_as_new_after,
        } = request;
        let limit = continue_as_new_after.unwrap_or(CONTINUE_AS_NEW_AFTER_EVENTS);
        ctx.state_mut(|s| {
            s.trace = carried.trace;
            s.status.usage = carried.usage;
            s.status.model_calls = carried.model_calls;
            s.status.status = SessionStatus::Running;
            s.continued = carried.continued;
        });
        let (config, state, first) = match resume {
            Some(resume) => {
                let Resume {
                    state,
                    action,
                    config,
                } = *resume;
                (config, state, Some(action))
            }
            None => {
                let mut head = session.clone();
                head.messages = Vec::new();
                let config = ctx
                    .execute_activity(
                        AgentActivities::run_config,
                        RunConfigInput {
                            session: head,
                            user: user.clone(),
                        },
                        config_options(),
                    )
                    .await?;
                // As the in-process loop starts a run: a new message starts fresh budgets,
                // continuing keeps the ones the session kept.
                let state = match &user {
                    Some(_) => {
                        session.set_budgets_used(None);
                        State::new()
                    }
                    None => {
                        let used = session.budgets_used().cloned().unwrap_or_default();
                        session.set_budgets_used(None);
                        State::resume(used)
                    }
                };
                session.pending_tool_calls.clear();
                session.pending_approvals.clear();
                agent_loop::machine::close_dangling(
                    &mut session.messages,
                    "the run that made it ended first",
                );
                if let Some(text) = user {
                    session
                        .messages
                        .push(Message::User(UserMessage::text(text)));
                }
                (config, state, None)
            }
        };
        session.status = SessionStatus::Running;
        // The messages a run's `session_end` lists start after the caller's input.
        let (events_from, trace_from) = match first {
            Some(_) => (carried.events_from, carried.trace_from),
            None => (session.messages.len(), ctx.state(|s| s.trace.len())),
        };
        let mut drive = Drive {
            session,
            config,
            state,
            usage_before: carried.usage,
            cost_before: carried.cost_usd,
            screened: None,
            output: None,
            counted: 0,
            history_tokens: 0,
            events: Vec::new(),
            events_from,
            trace_from,
        };
        if first.is_none() {
            drive.note(|session| AgentEvent::SessionStart {
                session_id: session.id.clone(),
            });
        }
        let mut action = match first {
            Some(action) => action,
            // As the in-process loop refuses it: nothing to send.
            None if drive.session.messages.is_empty() => drive.step(Input::Failed {
                error: Box::new(AgentError::config(
                    "there is nothing to send: the session has no messages and the input is empty",
                )),
            }),
            None => match drive.config.input_tripped.take() {
                // The worker's input guardrails refused the caller's message: no model call.
                Some(error) => drive.step(Input::Failed {
                    error: Box::new(error),
                }),
                None => drive.step(Input::Start { approvals: None }),
            },
        };
        // Continue-as-new comes before a model call, once this run made one (so a tiny limit
        // cannot loop on runs that make none).
        let mut called_here = false;
        loop {
            let input = match action {
                Action::PrepareCall { iteration } => {
                    if called_here
                        && (ctx.history_length() > limit || ctx.continue_as_new_suggested())
                    {
                        let next = RunRequest {
                            user: None,
                            resume: Some(Box::new(Resume {
                                state: drive.state,
                                action: Action::PrepareCall { iteration },
                                config: drive.config,
                            })),
                            carried: ctx.state(|s| Carried {
                                trace: s.trace.clone(),
                                usage: drive.usage_before,
                                cost_usd: drive.cost_before,
                                model_calls: s.status.model_calls,
                                continued: s.continued + 1,
                                events_from: drive.events_from,
                                trace_from: drive.trace_from,
                            }),
                            session: drive.session,
                            continue_as_new_after,
                        };
                        // Always an `Err`: the termination that makes the server start the
                        // next run.
                        match ctx.continue_as_new(next, ContinueAsNewOptions::default()) {
                            Err(termination) => return Err(termination),
                            Ok(never) => match never {},
                        }
                    }
                    Input::Prepared {
                        estimated_input_tokens: drive.estimate(),
                        own_max_output_tokens: drive
                            .config
                            .setup
                            .request
                            .settings
                            .max_output_tokens,
                    }
                }
                Action::CallModel {
                    iteration,
                    max_output_tokens,
                } => {
                    called_here = true;
                    let mut request = drive.config.setup.request.clone();
                    request.messages.clone_from(&drive.session.messages);
                    request.settings.max_output_tokens = max_output_tokens;
                    let input = ModelCallInput {
                        request,
                        iteration,
                        estimated_input_tokens: drive.estimate(),
                        screen: drive.config.setup.config.screen_calls,
                        remote_tools: drive
                            .session
                            .remote_tools
                            .iter()
                            .map(|spec| spec.name.clone())
                            .collect(),
                        max_calls: drive.config.setup.config.max_tool_calls_per_round,
                    };
                    drive.flush(ctx).await;
                    let called = ctx
                        .execute_activity(
                            AgentActivities::model_call,
                            input,
                            activity_options(&drive.config, drive.config.model_call_timeout_ms),
                        )
                        .await;
                    let output = match called {
                        Ok(output) => output,
                        Err(error @ ActivityExecutionError::Cancelled(_)) => {
                            return Err(error.into());
                        }
                        Err(error) => ModelCallOutput {
                            response: None,
                            cost_usd: None,
                            screened: None,
                            error: Some(exhausted(&error)),
                        },
                    };
                    match (output.response, output.error) {
                        (Some(message), _) => {
                            let next = drive.step(Input::ModelResponded {
                                usage: message.usage,
                                cost_usd: output.cost_usd,
                            });
                            let usage = drive.usage();
                            ctx.state_mut(|s| {
                                s.status.model_calls += 1;
                                s.status.usage = usage;
                            });
                            if !matches!(next, Action::AppendResponse) {
                                // The machine did not take the response (it ends the run).
                                action = next;
                                continue;
                            }
                            drive.session.messages.push(Message::Assistant(message));
                            drive.screened = output.screened;
                            drive.response_input()
                        }
                        (None, Some(error)) => Input::ModelFailed {
                            error: Box::new(error),
                        },
                        (None, None) => Input::ModelFailed {
                            error: Box::new(AgentError::config(
                                "the model_call activity returned neither a response nor an error",
                            )),
                        },
                    }
                }
                Action::ScreenCalls { calls } => match drive.screened.take() {
                    Some(Screened {
                        calls,
                        screens,
                        guardrails,
                    }) => Input::Screened {
                        calls,
                        screens,
                        guardrails,
                    },
                    None => Input::Screened {
                        screens: vec![Screen::Run; calls.len()],
                        calls,
                        guardrails: Vec::new(),
                    },
                },
                Action::RunTools {
                    iteration,
                    calls,
                    refused,
                    guardrails,
                } => {
                    // A screened round's calls carry what the tool guardrails decided while
                    // screening (for their trace entries; the checks are not run again).
                    let screened = drive.config.setup.config.screen_calls;
                    let mut refused = refused.into_iter().peekable();
                    let inputs: Vec<ToolCallInput> = calls
                        .into_iter()
                        .enumerate()
                        .map(|(at, call)| ToolCallInput {
                            refused: refused
                                .next_if(|refusal| refusal.index == at)
                                .map(|refusal| refusal.reason),
                            guardrails: screened.then(|| {
                                guardrails
                                    .iter()
                                    .filter(|decision| decision.call_id.as_ref() == Some(&call.id))
                                    .cloned()
                                    .collect()
                            }),
                            call,
                            iteration,
                        })
                        .collect();
                    let options =
                        activity_options(&drive.config, drive.config.tool_call_timeout_ms);
                    let mut stop = None;
                    drive.flush(ctx).await;
                    // At most `max_concurrent` at once, as the loop's parallel dispatch; a
                    // call whose failure stops the run starts no further batch.
                    for batch in inputs.chunks(drive.config.setup.max_concurrent.max(1)) {
                        if stop.is_some() {
                            break;
                        }
                        let outputs = join_all(batch.iter().map(|input| {
                            ctx.execute_activity(
                                AgentActivities::tool_call,
                                input.clone(),
                                options.clone(),
                            )
                        }))
                        .await;
                        for output in outputs {
                            let output = output?;
                            ctx.state_mut(|s| s.trace.push(output.trace));
                            let result = Message::Tool(output.result);
                            // Published after the round's last call, as the loop pushes them.
                            drive.note_message(&result);
                            drive.session.messages.push(result);
                            if stop.is_none() {
                                stop = output.stop.map(Box::new);
                            }
                        }
                    }
                    Input::ToolsDone {
                        outcome: RoundOutcome {
                            stop,
                            ..RoundOutcome::default()
                        },
                    }
                }
                Action::Push { messages } => {
                    for message in &messages {
                        drive.note_message(message);
                    }
                    drive.session.messages.extend(messages);
                    Input::Done
                }
                Action::Emit { event } => {
                    if drive.config.events {
                        drive.events.push((*event).clone());
                    }
                    if let AgentEvent::Output { value } = *event {
                        drive.output = Some(value);
                    }
                    Input::Done
                }
                Action::Suspend { status, calls } => {
                    // The part of the run before the wait ends for a viewer, as an in-process
                    // run that suspends; the part after it starts anew.
                    let approval = status == SessionStatus::AwaitingApproval;
                    if drive.config.events {
                        let waiting = crate::events::suspended(
                            &drive.session,
                            drive.events_from,
                            approval,
                            calls.clone(),
                        );
                        drive.events.extend(waiting);
                    }
                    drive.flush(ctx).await;
                    match status {
                        SessionStatus::AwaitingApproval => {
                            let decisions = wait_for_approval(ctx, &calls).await?;
                            drive.events_from = drive.session.messages.len();
                            drive.trace_from = ctx.state(|s| s.trace.len());
                            drive.note(|session| AgentEvent::SessionStart {
                                session_id: session.id.clone(),
                            });
                            drive.reopen();
                            action = drive.step(Input::Start {
                                approvals: Some(decisions),
                            });
                        }
                        _ => {
                            let results = wait_for_results(ctx, &calls).await?;
                            let policy =
                                TruncationPolicy::new(drive.config.setup.tool_result_max_bytes)
                                    .map_err(|error| error.to_string());
                            match policy {
                                Ok(policy) => {
                                    drive.note(|session| AgentEvent::SessionStart {
                                        session_id: session.id.clone(),
                                    });
                                    drive.session.messages.extend(
                                        agent_loop::machine::order_results(
                                            results,
                                            &calls,
                                            &policy,
                                            drive.config.setup.tool_result_max_binary_bytes,
                                        ),
                                    );
                                    // The caller's results are the continuation's input.
                                    drive.events_from = drive.session.messages.len();
                                    drive.trace_from = ctx.state(|s| s.trace.len());
                                    drive.reopen();
                                    action = drive.step(Input::Start { approvals: None });
                                }
                                Err(message) => {
                                    action = drive.step(Input::Failed {
                                        error: Box::new(AgentError::config(message)),
                                    });
                                }
                            }
                        }
                    }
                    continue;
                }
                Action::CheckAnswer { .. } | Action::AppendResponse => Input::Failed {
                    error: Box::new(AgentError::config(
                        "the durable driver got an action it does not perform (output \
                         guardrails, or an append out of turn)",
                    )),
                },
                Action::Finish { output } => {
                    if output.is_some() {
                        drive.output = output;
                    }
                    return Ok(end(ctx, drive, None).await);
                }
                Action::Fail { error } => return Ok(end(ctx, drive, Some(*error)).await),
            };
            action = drive.step(input);
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

/// Waits (no worker held) until the `approve` signal brought a fitting decision for each of
/// `calls`; returns those decisions (the last fitting one per call: a decision bound to
/// another name or other arguments does not fit, and the call keeps waiting).
async fn wait_for_approval(
    ctx: &mut WorkflowContext<AgentRun>,
    calls: &[ToolCall],
) -> WorkflowResult<Vec<ApprovalDecision>> {
    ctx.state_mut(|s| {
        s.status.status = SessionStatus::AwaitingApproval;
        s.status.pending_approvals = calls.to_vec();
    });
    ctx.wait_condition(|s| {
        calls
            .iter()
            .all(|call| agent_loop::decide_tool_call(&s.decisions, call).is_some())
    })
    .await?;
    let decisions = ctx.state_mut(|s| {
        s.status.pending_approvals.clear();
        s.status.status = SessionStatus::Running;
        std::mem::take(&mut s.decisions)
    });
    Ok(calls
        .iter()
        .filter_map(|call| {
            decisions
                .iter()
                .rev()
                .find(|decision| {
                    decision.call_id == call.id.as_str()
                        && agent_loop::decide_tool_call(std::slice::from_ref(*decision), call)
                            .is_some()
                })
                .cloned()
        })
        .collect())
}

/// Waits (no worker held) until the `tool_results` signal brought a result for each of
/// `calls`; returns them (results for other ids are dropped).
async fn wait_for_results(
    ctx: &mut WorkflowContext<AgentRun>,
    calls: &[ToolCall],
) -> WorkflowResult<Vec<ToolResult>> {
    ctx.state_mut(|s| {
        s.status.status = SessionStatus::AwaitingToolExecution;
        s.status.pending_tool_calls = calls.to_vec();
    });
    ctx.wait_condition(|s| {
        calls
            .iter()
            .all(|call| s.remote_results.iter().any(|r| r.tool_call_id == call.id))
    })
    .await?;
    let arrived = ctx.state_mut(|s| {
        s.status.pending_tool_calls.clear();
        s.status.status = SessionStatus::Running;
        std::mem::take(&mut s.remote_results)
    });
    Ok(arrived
        .into_iter()
        .filter(|r| calls.iter().any(|call| r.tool_call_id == call.id))
        .collect())
}

/// The run's outcome (`finish`), its last live events published first: as the in-process
/// loop ends a run, `error` when it failed, then `session_end` with the messages it added.
async fn end(
    ctx: &WorkflowContext<AgentRun>,
    mut drive: Drive,
    error: Option<AgentError>,
) -> RunOutcome {
    let publishing = drive.config.events;
    let mut events = std::mem::take(&mut drive.events);
    let from = drive.events_from;
    // The error as the in-process loop ends with it: this part's messages, trace and spend.
    let spend = (drive.state.usage(), drive.state.cost_usd());
    let trace_from = drive.trace_from;
    let failure = publishing.then(|| error.clone()).flatten();
    let outcome = finish(ctx, drive, error);
    if publishing {
        let failure = failure.map(|error| {
            let trace = outcome.trace.get(trace_from..).unwrap_or_default().to_vec();
            let messages = outcome.session.messages.get(from..).unwrap_or_default();
            error
                .with_partial(trace, messages.to_vec())
                .with_spend(spend.0, spend.1)
        });
        events.extend(crate::events::run_ended(&outcome, from, failure));
        crate::events::publish(ctx, events).await;
    }
    outcome
}

/// The run's outcome: the session settled as the in-process loop settles it.
fn finish(ctx: &WorkflowContext<AgentRun>, drive: Drive, error: Option<AgentError>) -> RunOutcome {
    let usage = drive.usage();
    let cost_usd = drive.cost_usd();
    let Drive {
        mut session,
        output,
        ..
    } = drive;
    session.usage += usage;
    if let Some(cost) = cost_usd {
        *session.cost_usd.get_or_insert(0.0) += cost;
    }
    session.status = match &error {
        None => SessionStatus::Completed,
        Some(error) if error.is_aborted() => SessionStatus::Aborted,
        Some(_) => SessionStatus::Error,
    };
    if let Some(error) = &error {
        // Every call the model asked for gets a result, so the history stays valid.
        let reason = format!("the run ended first: {}", error.kind);
        agent_loop::machine::close_dangling(&mut session.messages, &reason);
    }
    let answer = session
        .messages
        .iter()
        .rev()
        .find_map(|message| match message {
            Message::Assistant(assistant) => Some(assistant.text_content()),
            _ => None,
        })
        .unwrap_or_default();
    ctx.state_mut(|s| {
        s.status.status = session.status;
        s.status.usage = usage;
    });
    let (trace, model_calls, continued) =
        ctx.state(|s| (s.trace.clone(), s.status.model_calls, s.continued));
    RunOutcome {
        session_id: session.id.to_string(),
        status: session.status,
        answer,
        usage,
        cost_usd,
        trace,
        model_calls,
        continued,
        output,
        error: error.map(|error| error.to_string()),
        session,
    }
}

/// The machine's error for a model call Temporal gave up on (its retries spent, its
/// timeouts passed): a backend error, as the in-process loop would end with.
fn exhausted(error: &ActivityExecutionError) -> AgentError {
    let kind = if error.as_timeout().is_some() {
        BackendErrorKind::Timeout
    } else {
        BackendErrorKind::Server
    };
    // The activity's own failure (the backend's message) is the cause of Temporal's.
    let mut message = format!("the model call failed after its retries: {error}");
    let mut cause = error.failure().and_then(|failure| failure.cause.as_deref());
    while let Some(failure) = cause {
        message.push_str(": ");
        message.push_str(&failure.message);
        cause = failure.cause.as_deref();
    }
    AgentError::from(BackendError::new(kind, message))
}

fn add_cost(total: Option<f64>, more: Option<f64>) -> Option<f64> {
    match (total, more) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    }
}

/// Temporal's retry policy from the worker's retry settings: exponential backoff (×2) from
/// the first interval to the cap, for the attempts given. Non-retryable failures (budgets,
/// validation, configuration, refusals, other 4xx) are never retried whatever the policy:
/// `activities::failure` marks them so, and `model_call` returns them as data.
fn retry_policy(retries: &Retries) -> RetryPolicy {
    RetryPolicy::builder()
        .initial_interval(Duration::from_millis(retries.initial_interval_ms.max(1)))
        .backoff_coefficient(2.0)
        .maximum_interval(Duration::from_millis(
            retries
                .max_interval_ms
                .max(retries.initial_interval_ms)
                .max(1),
        ))
        .maximum_attempts(retries.max_attempts.max(1))
        .build()
}

fn activity_options(config: &RunConfig, timeout_ms: u64) -> ActivityOptions {
    ActivityOptions::with_start_to_close_timeout(Duration::from_millis(timeout_ms))
        .heartbeat_timeout(HEARTBEAT_EVERY * 10)
        .retry_policy(retry_policy(&config.retries))
        .build()
}

fn config_options() -> ActivityOptions {
    ActivityOptions::with_start_to_close_timeout(RUN_CONFIG_TIMEOUT)
        .retry_policy(retry_policy(&Retries::default()))
        .build()
}
