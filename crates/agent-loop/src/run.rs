//! The loop itself: one run of a session, from its input to an answer, a suspension or an error.

use std::borrow::Cow;

use agent_conversation::Turn;
use agent_tools::{Accounting, Registry, Tool, TruncationPolicy};
use agent_types::{
    AgentError, AgentEvent, AssistantBlock, AssistantMessage, Backend, Capabilities, ErrorKind,
    GuardrailDecision, Message, MessageAssembler, ModelRequest, Role, StopReason, ToolCall,
    ToolChoice, TraceEntry,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, field};

use crate::bounded::bounded;
use crate::dispatch::Outcome;
use crate::estimate::CountCache;
use crate::events::Emitter;
use crate::hooks::ModelCallGate;
use crate::job::Job;
use crate::machine::{Action, Input, Refusal, RoundOutcome, Screen};
use crate::options::Options;
use crate::output::{OutputSpec, OutputStrategy};
use crate::result::{GenerateResult, ModelCallRecord};
use crate::session::{RunState, Session, SessionInput, SessionStatus};
use crate::telemetry::{self, SpanName};

/// Whether the session outlives the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The caller keeps the session: the run's new messages are copied into the result.
    Session,
    /// `generate`: the session is dropped after the run, so the new messages move out of it.
    OneOff,
}

/// Runs `session` from `input` to its end, emitting events on the way.
pub(crate) async fn execute<B: Backend + ?Sized>(
    session: &mut Session,
    input: SessionInput,
    backend: &B,
    options: &Options,
    emitter: Emitter,
    scope: Scope,
) -> Result<GenerateResult, AgentError> {
    let session_id = session.id.clone();
    emitter
        .emit_with(|| AgentEvent::SessionStart {
            session_id: session_id.clone(),
        })
        .await;
    // With a span sink (agent-otel's layer) the run's spans are built from the loop's own
    // records, and no `tracing` span is made (crate::span_sink).
    let direct = crate::span_sink::start_run(|| crate::span_sink::RunStart {
        provider: backend.provider_name(),
        agent_name: options.agent_name.as_deref(),
        model: &session.model,
        conversation_id: session_id.as_str(),
        tool_mode: crate::span_sink::tool_mode(&options.mode),
    });
    // GenAI semantic conventions (docs/observability.md); values are recorded lazily.
    let span = if direct.is_some() {
        tracing::Span::none()
    } else {
        tracing::info_span!(
            "invoke_agent",
            otel.name = %SpanName("invoke_agent", options.agent_name.as_deref()),
            otel.kind = "internal",
            otel.status_code = field::Empty,
            error.type = field::Empty,
            gen_ai.operation.name = "invoke_agent",
            gen_ai.provider.name = backend.provider_name(),
            gen_ai.agent.name = options.agent_name.as_deref(),
            gen_ai.request.model = %session.model,
            gen_ai.conversation.id = %session_id,
            gen_ai.usage.input_tokens = field::Empty,
            gen_ai.usage.output_tokens = field::Empty,
            gen_ai.usage.cache_read.input_tokens = field::Empty,
            gen_ai.usage.cache_creation.input_tokens = field::Empty,
            agentry.usage.cache_creation_1h.input_tokens = field::Empty,
            agentry.usage.reasoning.output_tokens = field::Empty,
            agentry.cost_usd = field::Empty,
            agentry.tool_mode = ?options.mode,
            agentry.iterations = field::Empty,
            agentry.model_calls = field::Empty,
            agentry.finish_reason = field::Empty,
            agentry.budget = field::Empty,
        )
    };
    // A permission scope is applied once, here: the run (the tools it offers, the caller its
    // handlers and gates see) only ever meets the narrowed caller.
    let scoped;
    let options = match &options.permission_scope {
        Some(_) => {
            scoped = Options {
                caller: options.effective_caller(),
                permission_scope: None,
                ..options.clone()
            };
            &scoped
        }
        None => options,
    };
    let outcome = crate::span_sink::run_scope(direct.clone(), async {
        let mut run = Run::start(session, input, backend, options, emitter.clone(), scope)?;
        let ended = run.drive().await;
        Ok::<_, AgentError>(run.finish(ended).await)
    })
    .instrument(span.clone())
    .await
    .unwrap_or_else(Err);

    let finish_reason = match &outcome {
        Ok(result) => result.finish_reason,
        Err(error) if error.is_aborted() => StopReason::Aborted,
        Err(_) => StopReason::Error,
    };
    span.record(
        "agentry.finish_reason",
        telemetry::finish_reason(finish_reason),
    );
    if let Err(error) = &outcome {
        telemetry::record_error(&span, error);
        if let Some(budget) = telemetry::budget(error) {
            span.record("agentry.budget", budget);
        }
    }
    if let Some(direct) = &direct {
        let error = outcome.as_ref().err();
        direct.end(&crate::span_sink::RunEnd {
            finish_reason: telemetry::finish_reason(finish_reason),
            error_type: error.map(telemetry::error_type),
            budget: error.and_then(telemetry::budget),
        });
    }
    if emitter.is_on() {
        let mut outcome = outcome;
        // Built before any await: no borrow of the outcome is held across one.
        let last = match &outcome {
            Ok(result) => match result.status {
                SessionStatus::AwaitingToolExecution => Some(AgentEvent::AwaitingToolExecution {
                    session_id: session_id.clone(),
                    tool_calls: result.pending_tool_calls.clone(),
                }),
                SessionStatus::AwaitingApproval => Some(AgentEvent::ApprovalRequested {
                    session_id: session_id.clone(),
                    tool_calls: result.pending_approvals.clone(),
                }),
                _ => None,
            },
            Err(error) => Some(AgentEvent::Error {
                error: error.clone(),
            }),
        };
        let (messages, retaken) = crate::run_messages::lend(session, scope, &mut outcome);
        // [guardrail call site: trip event] before the error it explains.
        let trip = outcome
            .as_ref()
            .err()
            .and_then(crate::guardrail::trip_event);
        if let Some(event) = trip {
            emitter.emit(event).await;
        }
        if let Some(event) = last {
            emitter.emit(event).await;
        }
        emitter
            .emit(AgentEvent::SessionEnd {
                session_id,
                messages,
                finish_reason,
            })
            .await;
        crate::run_messages::restore(session, retaken, &mut outcome);
        return outcome;
    }
    outcome
}

/// How the loop stopped, short of an error.
enum End {
    /// The model answered.
    Answered,
    /// Calls wait for the caller.
    Suspended(Vec<ToolCall>),
    /// Calls wait for a person's approval (the round is in the machine's budgets).
    AwaitingApproval(Vec<ToolCall>),
}

/// One run. Holds the session's history inside the request it sends, so no round copies the
/// history; `Drop` hands the history back even if the run's future is dropped mid-way.
struct Run<'s, 'o, B: ?Sized> {
    session: &'s mut Session,
    backend: &'o B,
    options: &'o Options,
    emitter: Emitter,
    tools: Cow<'o, Registry>,
    policy: TruncationPolicy,
    request: ModelRequest,
    /// Index of the first message this run produced (or echoed).
    produced_from: usize,
    /// Messages before this index are already with the appender.
    appended_to: usize,
    /// The loop's decisions: budgets, spend, where the run stands.
    machine: crate::machine::State,
    /// The settings the machine decides by.
    config: crate::machine::Config,
    /// The prepared call's estimated input tokens, for its gate.
    estimated_input_tokens: u64,
    records: Vec<ModelCallRecord>,
    trace: Vec<TraceEntry>,
    warned_no_usage: bool,
    hard_stop: CancellationToken,
    accounting: Accounting,
    /// Who and which run the accounting rows name; `None` without an accounting queue.
    audit: Option<std::sync::Arc<crate::audit::RunContext>>,
    /// Whether this run's usage and cost were added to the session.
    settled: bool,
    scope: Scope,
    /// Each history message's estimated tokens, so a call counts only the new ones.
    counts: CountCache,
    /// The estimated tokens of the system prompt and tool specs.
    preamble_tokens: u64,
    /// The structured output asked for, with its resolved strategy; `None` on the text path.
    /// Boxed, so a text-only run carries one pointer for it.
    output: Option<Box<Output<'o>>>,
    /// The per-round preparation's state, with `Options::prepare_round` only.
    prepared: Option<Box<crate::prepare::Prepared>>,
    /// The history policy's state, with `Options::history` only.
    history: Option<Box<crate::history::Shaper>>,
    /// What the policy took out of the history for the call in flight, to put back. Boxed,
    /// so a run without a policy carries one pointer for it.
    shaped: Option<Box<crate::history::Applied>>,
    /// Whether a call may need approval (a policy, or a tool marked for it).
    approvals_possible: bool,
    /// The decisions resuming a round that waited for approval.
    approvals: Option<Vec<crate::ApprovalDecision>>,
}

/// A run's structured output: the spec, the strategy resolved for the backend, the answer
/// once validated (the machine judges answers and counts the retries).
struct Output<'o> {
    spec: &'o OutputSpec,
    strategy: OutputStrategy,
    /// The validated structured answer, once there is one.
    answer: Option<serde_json::Value>,
    /// The session's own system prompt, when `Prompted` added the schema to the request's.
    system_before: Option<Option<String>>,
}

impl<'s, 'o, B: Backend + ?Sized> Run<'s, 'o, B> {
    /// Checks the input and the configuration, then takes the session's history. Nothing in
    /// the session changes when this fails.
    fn start(
        session: &'s mut Session,
        input: SessionInput,
        backend: &'o B,
        options: &'o Options,
        emitter: Emitter,
        scope: Scope,
    ) -> Result<Self, AgentError> {
        options.validate()?;
        session.check_input(&input)?;
        let Checked {
            tools,
            strategy,
            policy,
            approvals_possible,
            screen_calls,
        } = check_start(options, session, backend.capabilities())?;
        if session.messages.is_empty() && matches!(input, SessionInput::Continue) {
            return Err(AgentError::config(
                "there is nothing to send: the session has no messages and the input is empty",
            ));
        }
        // Resuming (remote results, approvals) or continuing a run a crash cut off (its
        // checkpoint saved the budgets it had used) keeps the same budgets; a new message
        // starts fresh ones.
        let state = match input {
            SessionInput::User(_) => {
                session.suspended = None;
                RunState::default()
            }
            _ => session.suspended.take().unwrap_or_default(),
        };
        let mut messages = std::mem::take(&mut session.messages);
        let pending = std::mem::take(&mut session.pending_tool_calls);
        session.pending_approvals.clear();
        // A round a dropped run left unanswered is closed first (history only: the appender
        // never saw the round end), so the request stays valid.
        if !matches!(
            input,
            SessionInput::ToolResults(_) | SessionInput::Approvals(_)
        ) {
            crate::machine::close_dangling(&mut messages, "the run that made it ended first");
        }
        let before_input = messages.len();
        let mut approvals = None;
        match input {
            SessionInput::Approvals(decisions) => approvals = Some(decisions),
            SessionInput::User(user) => messages.push(Message::User(user)),
            SessionInput::ToolResults(results) => {
                // Remote results count against the budgets as input of the next call.
                messages.extend(crate::machine::order_results(
                    results,
                    &pending,
                    &policy,
                    options.tool_result_max_binary_bytes,
                ));
            }
            SessionInput::Continue => {}
        }
        let produced_from = if options.echo_input {
            before_input
        } else {
            messages.len()
        };
        session.status = SessionStatus::Running;
        let mut request = ModelRequest {
            model: session.model.clone(),
            system: session.system.take(),
            messages,
            tools: tools.specs(),
            tool_choice: session.tool_choice.clone(),
            settings: session.settings.clone(),
            extras: session.extras.clone(),
            response_format: None,
            stream: true,
        };
        if let Some(search) = &options.tool_search {
            search.resolve(backend.capabilities(), &mut request);
        }
        let output = match (&options.output, strategy) {
            (Some(spec), Some(strategy)) => Some(Box::new(Output {
                spec,
                strategy,
                answer: None,
                system_before: apply_output(spec, strategy, &mut request),
            })),
            _ => None,
        };
        let config = crate::machine::Config::new(options, &session.model, strategy, screen_calls);
        let preamble_tokens = options
            .token_counter
            .preamble_tokens(request.system.as_deref(), &request.tools);
        let prepared = options
            .prepare_round
            .as_ref()
            .map(|_| Box::new(crate::prepare::Prepared::new(&request, &tools)));
        let audit = options
            .accounting
            .as_ref()
            .map(|queue| queue.context(&options.caller, session.id.as_str()));
        Ok(Self {
            audit,
            session,
            backend,
            options,
            emitter,
            tools,
            policy,
            appended_to: produced_from,
            produced_from,
            request,
            machine: crate::machine::State::resume(state),
            config,
            estimated_input_tokens: 0,
            records: Vec::new(),
            trace: Vec::new(),
            warned_no_usage: false,
            hard_stop: CancellationToken::new(),
            accounting: Accounting::default(),
            settled: false,
            scope,
            counts: CountCache::default(),
            preamble_tokens,
            output,
            prepared,
            history: options
                .history
                .clone()
                .map(|policy| Box::new(crate::history::Shaper::new(policy))),
            shaped: None,
            approvals_possible,
            approvals,
        })
    }

    /// The loop: a thin driver over the state machine ([`crate::machine`]). It performs
    /// each action (prepare and make the model call, screen and run a round, push messages,
    /// emit an event) and feeds what came of it back, until the machine ends the run. A
    /// failure of the driver's own (the appender, a gate, accounting) ends the run at once,
    /// as [`Input::Failed`] would.
    async fn drive(&mut self) -> Result<End, AgentError> {
        // Echoed input goes to the appender first.
        self.append_new().await?;
        let approvals = self.approvals.take();
        // [guardrail call site: input] before `start`, or raced with the first model call.
        let mut input_check = crate::guardrail::input_check(self.options, &self.request.messages);
        if !crate::guardrail::input_concurrent(self.options)
            && let Some(check) = input_check.take()
            && let Err(trip) = check.await
        {
            return Err(self.fail(trip));
        }
        let mut action = self.machine.step(&self.config, Input::Start { approvals });
        // The last response's position, for the answer's check.
        let mut last_response = 0;
        // Each input is made after its await and fed at once: only the action is kept in the
        // run's future across awaits.
        loop {
            action = match action {
                Action::PrepareCall { iteration } => {
                    let input = self.prepare_call(iteration).await?;
                    self.machine.step(&self.config, input)
                }
                Action::CallModel {
                    iteration,
                    max_output_tokens,
                } => {
                    let at = match input_check.take() {
                        // Boxed: only a run racing its input check pays for the second call
                        // future. A trip drops (cancels) the call and ends the run.
                        Some(check) => {
                            let call = self.call_model(iteration, max_output_tokens);
                            let raced = Box::pin(crate::guardrail::race(check, call)).await;
                            match raced {
                                Ok(at) => at,
                                Err(error) => return Err(self.fail(error)),
                            }
                        }
                        None => self.call_model(iteration, max_output_tokens).await?,
                    };
                    last_response = at;
                    let input = self.response_input(at);
                    self.machine.step(&self.config, input)
                }
                Action::ScreenCalls { calls } => {
                    let input = self.screen(calls);
                    self.machine.step(&self.config, input)
                }
                Action::RunTools {
                    iteration,
                    calls,
                    refused,
                    guardrails,
                } => {
                    let input = self
                        .run_round(iteration, calls, refused, guardrails)
                        .await?;
                    self.machine.step(&self.config, input)
                }
                Action::CheckAnswer { output, retries } => {
                    // [guardrail call site: output] the machine asks before it finishes.
                    let checked = Box::pin(crate::guardrail::check_output(
                        self.options,
                        self.request.messages.get(last_response),
                        output.as_ref(),
                        retries,
                    ))
                    .await;
                    let input = match checked {
                        Ok(crate::guardrail::OutputOutcome::Pass) => {
                            Input::AnswerChecked { retry: None }
                        }
                        Ok(crate::guardrail::OutputOutcome::Retry(feedback)) => {
                            Input::AnswerChecked {
                                retry: Some(feedback),
                            }
                        }
                        Err(trip) => Input::Failed {
                            error: Box::new(trip),
                        },
                    };
                    self.machine.step(&self.config, input)
                }
                Action::Push { messages } => {
                    for message in messages {
                        self.push_message(message, None).await?;
                    }
                    self.machine.step(&self.config, Input::Done)
                }
                Action::Emit { event } => {
                    self.emitter.emit(*event).await;
                    self.machine.step(&self.config, Input::Done)
                }
                Action::Suspend { status, calls } => {
                    return Ok(match status {
                        SessionStatus::AwaitingApproval => End::AwaitingApproval(calls),
                        _ => End::Suspended(calls),
                    });
                }
                Action::Finish { output } => {
                    if let Some(spec) = &mut self.output {
                        spec.answer = output;
                    }
                    return Ok(End::Answered);
                }
                Action::Fail { error } => return Err(*error),
                // Performed inside `call_model`, between the response and its push.
                Action::AppendResponse => {
                    return Err(AgentError::config(
                        "the loop's state machine asked to append a response out of turn",
                    ));
                }
            };
        }
    }

    /// Feeds the driver's own failure `error` to the machine and returns the error the run
    /// ends with.
    fn fail(&mut self, error: AgentError) -> AgentError {
        let input = Input::Failed {
            error: Box::new(error),
        };
        match self.machine.step(&self.config, input) {
            Action::Fail { error } => *error,
            other => AgentError::config(format!(
                "the loop's state machine answered a failure with {other:?}"
            )),
        }
    }

    /// The machine's input for the response at `at`, now in the history: its calls, and for
    /// a structured-output run its refusal and text.
    fn response_input(&self, at: usize) -> Input {
        let Message::Assistant(message) = &self.request.messages[at] else {
            return Input::ResponseAppended {
                calls: Vec::new(),
                text: None,
            };
        };
        let calls = message.tool_calls().cloned().collect();
        let text = self.output.as_ref().map(|_| {
            Box::new(crate::machine::ResponseText {
                refusal: message.content.iter().find_map(|block| match block {
                    AssistantBlock::Refusal { text } => Some(text.clone()),
                    _ => None,
                }),
                text: message.text_content(),
            })
        });
        Input::ResponseAppended { calls, text }
    }

    /// Settles the session and builds the result or the error.
    async fn finish(
        &mut self,
        ended: Result<End, AgentError>,
    ) -> Result<GenerateResult, AgentError> {
        self.unshape();
        // Each call's row went out when the call ended. With `fail_run`, an accounting
        // failure fails a run that would have succeeded.
        let ended = match (self.audit_verdict(), ended) {
            (Err(error), Ok(_)) => Err(error),
            (_, ended) => ended,
        };
        self.settle();
        let span = tracing::Span::current();
        tracing::record_all!(
            span,
            agentry.iterations = telemetry::int(self.machine.budgets().iterations),
            agentry.model_calls = telemetry::int(self.records.len()),
        );
        let (usage, cost_usd) = (self.machine.usage(), self.machine.cost_usd());
        telemetry::record_usage(&span, &usage, cost_usd);
        crate::span_sink::with_run(|run| {
            run.totals(&crate::span_sink::RunTotals {
                iterations: self.machine.budgets().iterations,
                model_calls: self.records.len(),
                usage: &usage,
                cost_usd,
            });
        });
        match ended {
            Ok(End::Answered) => {
                self.session.status = SessionStatus::Completed;
                Ok(self.result(Vec::new()))
            }
            Ok(End::Suspended(pending)) => {
                self.session.status = SessionStatus::AwaitingToolExecution;
                self.session.suspended = Some(self.machine.take_budgets());
                self.session.pending_tool_calls.clone_from(&pending);
                Ok(self.result(pending))
            }
            Ok(End::AwaitingApproval(waiting)) => {
                self.session.status = SessionStatus::AwaitingApproval;
                self.session.pending_approvals = waiting;
                // The machine keeps the waiting round in its budgets.
                self.session.suspended = Some(self.machine.take_budgets());
                let mut result = self.result(Vec::new());
                result.finish_reason = StopReason::ToolCalls;
                result.pending_approvals = self.session.pending_approvals.clone();
                Ok(result)
            }
            Err(error) => {
                self.session.status = if error.is_aborted() {
                    SessionStatus::Aborted
                } else {
                    SessionStatus::Error
                };
                // Every call the model asked for gets a result, so the history stays valid
                // for the next request.
                let reason = format!("the run ended first: {}", error.kind);
                crate::machine::close_dangling(&mut self.request.messages, &reason);
                // After an appender failure, storing more would reorder the stored turns.
                if matches!(error.kind, ErrorKind::Appender) {
                    self.appended_to = self.request.messages.len();
                } else if let Err(appender) = self.append_new().await {
                    tracing::warn!(error = %appender.message, "could not store the results closing an interrupted round");
                }
                let messages = self.take_new_messages();
                Err(error
                    .with_partial(std::mem::take(&mut self.trace), messages)
                    .with_spend(self.machine.usage(), self.machine.cost_usd()))
            }
        }
    }

    /// The messages this run added: moved out for a one-off run, copied for a session.
    fn take_new_messages(&mut self) -> Vec<Message> {
        match self.scope {
            Scope::OneOff => self.request.messages.split_off(self.produced_from),
            Scope::Session => self.request.messages[self.produced_from..].to_vec(),
        }
    }

    fn result(&mut self, pending: Vec<ToolCall>) -> GenerateResult {
        let messages = self.take_new_messages();
        let message = self
            .request
            .messages
            .iter()
            .chain(messages.iter())
            .rev()
            .find_map(|message| match message {
                Message::Assistant(assistant) => Some(assistant.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let answer = self.output.as_mut().and_then(|output| output.answer.take());
        let finish_reason = if answer.is_some() {
            // A final-answer call is the answer, not a request for tools.
            StopReason::Stop
        } else if pending.is_empty() {
            message.stop_reason.unwrap_or(StopReason::Stop)
        } else {
            StopReason::ToolCalls
        };
        GenerateResult {
            session_id: self.session.id.clone(),
            status: self.session.status,
            message,
            finish_reason,
            messages,
            pending_tool_calls: pending,
            usage: self.machine.usage(),
            cost_usd: self.machine.cost_usd(),
            model_calls: std::mem::take(&mut self.records),
            trace: if self.options.include_tool_trace {
                std::mem::take(&mut self.trace)
            } else {
                Vec::new()
            },
            output: answer,
            pending_approvals: Vec::new(),
        }
    }

    /// Prepares the next call's request (the round's preparation, the history policy) and
    /// estimates its input, for the machine's check against the budgets.
    async fn prepare_call(&mut self, iteration: u32) -> Result<Input, AgentError> {
        if self.options.cancellation.is_cancelled() {
            return Ok(Input::Cancelled);
        }
        if let (Some(hook), Some(prepared)) = (&self.options.prepare_round, &mut self.prepared)
            && prepared.apply(
                hook,
                iteration + 1,
                self.records.len(),
                &self.tools,
                &mut self.request,
            )?
        {
            self.preamble_tokens = self
                .options
                .token_counter
                .preamble_tokens(self.request.system.as_deref(), &self.request.tools);
        }
        if self.history.is_some() {
            // Boxed: the text path's per-call future keeps a pointer's room for it.
            Box::pin(self.shape_history(iteration)).await?;
        }
        // Estimated only when something reads it: a run without budgets or a gate pays
        // nothing for it.
        let options = self.options;
        let estimated_input_tokens = if options.token_budget.is_some()
            || options.max_cost_usd.is_some()
            || options.hooks.has_gate()
        {
            self.estimate_input()
        } else {
            0
        };
        self.estimated_input_tokens = estimated_input_tokens;
        Ok(Input::Prepared {
            estimated_input_tokens,
            own_max_output_tokens: self.own_output_limit(),
        })
    }

    /// The output limit the next request carries before the budgets clamp it: a prepared
    /// round's settings carry its own limit (set in `prepare_call`), else the session's.
    fn own_output_limit(&self) -> Option<u32> {
        match &self.prepared {
            Some(_) => self.request.settings.max_output_tokens,
            None => self.session.settings.max_output_tokens,
        }
    }

    /// One model call with the output limit the machine admitted: gate, stream, assemble,
    /// account, append. Returns the new message's position in the history.
    async fn call_model(
        &mut self,
        iteration: u32,
        max_output_tokens: Option<u32>,
    ) -> Result<usize, AgentError> {
        let estimated_input_tokens = self.estimated_input_tokens;
        self.request.settings.max_output_tokens = max_output_tokens;
        if self.options.hooks.has_gate() {
            let gate = ModelCallGate {
                model: self.request.model.clone(),
                iteration,
                messages: self.request.messages.len(),
                tools: self
                    .request
                    .tools
                    .iter()
                    .map(|spec| spec.name.clone())
                    .collect(),
                caller: self.options.caller.clone(),
                estimated_input_tokens,
                max_output_tokens,
            };
            self.options
                .hooks
                .gate(gate)
                .await
                .map_err(|reason| AgentError::new(ErrorKind::Refused, reason))?;
        }
        let settings = &self.request.settings;
        // The call's span is the run's own (one call at a time): nothing of it is kept in
        // this future, allocated per call.
        let direct = crate::span_sink::with_run(|run| {
            let content = self.options.trace_content;
            run.start_chat(&crate::span_sink::ChatStart {
                provider: self.backend.provider_name(),
                model: &self.request.model,
                max_tokens: settings.max_output_tokens,
                temperature: settings.temperature,
                top_p: settings.top_p,
                json_output: self.request.response_format.is_some(),
                conversation_id: self.session.id.as_str(),
                iteration,
                purpose: None,
                system_instructions: self.request.system.as_deref().filter(|_| content),
                input_messages: content
                    .then(|| serde_json::to_string(&self.request.messages).ok())
                    .flatten(),
            });
        })
        .is_some();
        let span = if direct {
            tracing::Span::none()
        } else {
            tracing::info_span!(
                "chat",
                otel.name = %SpanName("chat", Some(&self.request.model)),
                otel.kind = "client",
                otel.status_code = field::Empty,
                error.type = field::Empty,
                gen_ai.operation.name = "chat",
                gen_ai.provider.name = self.backend.provider_name(),
                gen_ai.request.model = %self.request.model,
                gen_ai.request.max_tokens = settings.max_output_tokens.map(i64::from),
                gen_ai.request.temperature = settings.temperature.map(f64::from),
                gen_ai.request.top_p = settings.top_p.map(f64::from),
                gen_ai.output.type = self.request.response_format.as_ref().map(|_| "json"),
                gen_ai.conversation.id = %self.session.id,
                gen_ai.response.model = field::Empty,
                gen_ai.response.id = field::Empty,
                gen_ai.response.finish_reasons = field::Empty,
                gen_ai.usage.input_tokens = field::Empty,
                gen_ai.usage.output_tokens = field::Empty,
                gen_ai.usage.cache_read.input_tokens = field::Empty,
                gen_ai.usage.cache_creation.input_tokens = field::Empty,
                gen_ai.input.messages = field::Empty,
                gen_ai.output.messages = field::Empty,
                gen_ai.system_instructions = field::Empty,
                agentry.usage.cache_creation_1h.input_tokens = field::Empty,
                agentry.usage.reasoning.output_tokens = field::Empty,
                agentry.cost_usd = field::Empty,
                agentry.iteration = i64::from(iteration),
                agentry.time_to_first_chunk = field::Empty,
                agentry.tool_calls = field::Empty,
            )
        };
        // Content only on request (Options::trace_content), and only serialized when a
        // subscriber listens to this span.
        if self.options.trace_content && !span.is_disabled() {
            if let Some(system) = &self.request.system {
                span.record("gen_ai.system_instructions", system.as_str());
            }
            if let Ok(json) = serde_json::to_string(&self.request.messages) {
                span.record("gen_ai.input.messages", json.as_str());
            }
        }
        self.emitter
            .emit_with(|| AgentEvent::MessageStart {
                role: Role::Assistant,
            })
            .await;
        let started = Instant::now();
        let mut first_event = None;
        let mut assembler = MessageAssembler::new(self.emitter.is_on());
        let mut partial = match &self.output {
            // Boxed: the text path keeps a pointer's room for it in this future.
            Some(output) if self.emitter.is_on() => Some(Box::new(
                crate::output::PartialOutput::new(output.spec, output.strategy),
            )),
            _ => None,
        };
        let pumped = {
            // The loop assembles the message (and a failure's partial one) itself.
            let stream = self.backend.stream_unassembled(&self.request);
            // A named future, not an `async` block: it is `Send` without proving it through
            // every caller's future, needs no box, and runs no generator per event.
            let pump = crate::pump::Pump {
                stream,
                emitter: &self.emitter,
                assembler: &mut assembler,
                partial: &mut partial,
                first_event: &mut first_event,
                started,
            };
            bounded(
                pump,
                &self.options.cancellation,
                self.options.model_call_timeout,
            )
            .instrument(span.clone())
            .await
        };
        let latency = started.elapsed();
        self.unshape();
        let failure = crate::bounded::call_failure(
            pumped,
            assembler.is_finished(),
            "the model call",
            "the model's stream",
        );
        if let Some(first) = first_event {
            span.record("agentry.time_to_first_chunk", first.as_secs_f64());
        }
        if let Some(mut error) = failure {
            telemetry::record_error(&span, &error);
            if direct {
                crate::span_sink::with_run(|run| {
                    run.end_chat(&crate::span_sink::ChatEnd {
                        time_to_first_event: first_event,
                        error_type: Some(telemetry::error_type(&error)),
                        ..Default::default()
                    });
                });
            }
            let reason = if error.is_aborted() {
                StopReason::Aborted
            } else {
                StopReason::Error
            };
            let response_id = assembler.take_response_id();
            let failed = || ModelCallRecord {
                iteration,
                model: self.request.model.clone(),
                usage: None,
                cost_usd: None,
                latency,
                time_to_first_event: first_event.unwrap_or(latency),
                tool_calls: 0,
                stop_reason: reason,
                response_id,
            };
            let (queue, context) = (self.options.accounting.as_ref(), self.audit.as_ref());
            let waiting = crate::audit::send_model_row(queue, context, failed, Some(&error));
            let partial = assembler.finish_partial(reason);
            self.flush_assembler(&mut assembler).await;
            if let ErrorKind::Backend { error: backend } = &mut error.kind
                && backend.partial.is_none()
                && !partial.content.is_empty()
            {
                backend.partial = Some(Box::new(partial.clone()));
            }
            self.emitter
                .emit_with(|| AgentEvent::MessageEnd {
                    message: Message::Assistant(partial),
                    cost_usd: None,
                })
                .await;
            if let Some(waiting) = waiting {
                waiting.await;
            }
            return Err(error);
        }

        let mut message = assembler.finish();
        let response_id = assembler.take_response_id();
        self.flush_assembler(&mut assembler).await;
        if message.model.is_none() {
            message.model = Some(self.request.model.clone());
        }
        let cost_usd = self.price(&message);
        // The machine counts the call against the budgets before the response is pushed, so
        // the checkpoint after it holds the call's spend.
        match self.machine.step(
            &self.config,
            Input::ModelResponded {
                usage: message.usage,
                cost_usd,
            },
        ) {
            Action::AppendResponse => {}
            Action::Fail { error } => return Err(*error),
            _ => {
                return Err(AgentError::config(
                    "the loop's state machine did not take the model's response",
                ));
            }
        }
        let tool_calls = u32::try_from(message.tool_calls().count()).unwrap_or(u32::MAX);
        if let Some(usage) = &message.usage {
            telemetry::record_usage(&span, usage, cost_usd);
        }
        tracing::record_all!(
            span,
            gen_ai.response.model = message.model.as_deref(),
            gen_ai.response.id = response_id.as_deref(),
            gen_ai.response.finish_reasons =
                telemetry::finish_reason(message.stop_reason.unwrap_or(StopReason::Stop)),
            agentry.tool_calls = i64::from(tool_calls),
        );
        if self.options.trace_content
            && !span.is_disabled()
            && let Ok(json) = serde_json::to_string(&message)
        {
            span.record("gen_ai.output.messages", json.as_str());
        }
        let record = ModelCallRecord {
            iteration,
            model: message.model.clone().unwrap_or_default(),
            usage: message.usage,
            cost_usd,
            latency,
            time_to_first_event: first_event.unwrap_or(latency),
            tool_calls,
            stop_reason: message.stop_reason.unwrap_or(StopReason::Stop),
            response_id,
        };
        if direct {
            let end = crate::span_sink::ChatEnd {
                response_model: message.model.as_deref(),
                response_id: record.response_id.as_deref(),
                finish_reason: Some(telemetry::finish_reason(record.stop_reason)),
                usage: message.usage.as_ref(),
                cost_usd,
                tool_calls: Some(tool_calls),
                time_to_first_event: first_event,
                error_type: None,
                output_messages: self
                    .options
                    .trace_content
                    .then(|| serde_json::to_string(&message).ok())
                    .flatten(),
            };
            crate::span_sink::with_run(|run| run.end_chat(&end));
        }
        if let Some(sink) = &self.options.on_model_call {
            sink(&record);
        }
        // The call's row goes now (a copy of the record), so the store has it while the run
        // goes on, and keeps it if the run is dropped.
        let (queue, context) = (self.options.accounting.as_ref(), self.audit.as_ref());
        let waiting = crate::audit::send_model_row(queue, context, || record.clone(), None);
        self.records.push(record);
        self.push_message(Message::Assistant(message), cost_usd)
            .await?;
        // Awaited last, so nothing of the call stays in this future for it.
        if let Some(waiting) = waiting {
            waiting.await;
        }
        self.audit_verdict()?;
        Ok(self.request.messages.len() - 1)
    }

    /// Applies the history policy to the request for the next call (after a summary call,
    /// when the policy needs one). `unshape` puts the full history back.
    async fn shape_history(&mut self, iteration: u32) -> Result<(), AgentError> {
        let Some(shaper) = self.history.as_mut() else {
            return Ok(());
        };
        let counter = &*self.options.token_counter;
        let plan = shaper.plan(&self.request.messages, counter, self.preamble_tokens);
        if let Some(need) = shaper.summary_need(&plan, self.session.history_summary.as_ref()) {
            let policy = shaper.policy();
            let model = policy
                .summary_model(&self.request.model)
                .unwrap_or_default();
            let mut request =
                crate::history::summary_request(policy, model, &self.request.messages, &need);
            // The summary call is a model call like any other for the budgets.
            let estimate = counter
                .preamble_tokens(request.system.as_deref(), &[])
                .saturating_add(counter.message_tokens(&request.messages[0]));
            let own = self.own_output_limit();
            if let Some(room) = self.machine.admit(&self.config, estimate, own)? {
                let own = request.settings.max_output_tokens.unwrap_or(room);
                request.settings.max_output_tokens = Some(own.min(room));
            }
            if self.options.hooks.has_gate() {
                // The gate (a server's spend cap, say) sees the summary call like any other.
                let gate = ModelCallGate {
                    model: request.model.clone(),
                    iteration,
                    messages: request.messages.len(),
                    tools: Vec::new(),
                    caller: self.options.caller.clone(),
                    estimated_input_tokens: estimate,
                    max_output_tokens: request.settings.max_output_tokens,
                };
                self.options
                    .hooks
                    .gate(gate)
                    .await
                    .map_err(|reason| AgentError::new(ErrorKind::Refused, reason))?;
            }
            let (message, mut record, span) = crate::history::call_summary(
                self.backend,
                &request,
                self.options,
                self.session.id.as_str(),
                iteration,
            )
            .await?;
            let cost_usd = self.price(&message);
            record.cost_usd = cost_usd;
            // Counted at once (the run's usage holds it whatever follows); the budgets'
            // verdict waits until the call's row went out, as for a round's call.
            let spent = self.machine.step(
                &self.config,
                Input::Spent {
                    usage: message.usage,
                    cost_usd,
                },
            );
            if let Some(usage) = &message.usage {
                telemetry::record_usage(&span, usage, cost_usd);
            }
            // The summary call's span (started by call_summary) ends with its cost.
            crate::span_sink::with_run(|run| {
                run.end_chat(&crate::span_sink::ChatEnd {
                    response_model: message.model.as_deref(),
                    response_id: record.response_id.as_deref(),
                    finish_reason: Some(telemetry::finish_reason(record.stop_reason)),
                    usage: message.usage.as_ref(),
                    cost_usd,
                    time_to_first_event: Some(record.time_to_first_event),
                    ..Default::default()
                });
            });
            if let Some(sink) = &self.options.on_model_call {
                sink(&record);
            }
            // The summary call's row goes now, like every model call's.
            let (queue, context) = (self.options.accounting.as_ref(), self.audit.as_ref());
            let waiting = crate::audit::send_model_row(queue, context, || record.clone(), None);
            self.records.push(record);
            if let Some(waiting) = waiting {
                waiting.await;
            }
            self.audit_verdict()?;
            self.session.history_summary = Some(crate::history::HistorySummary {
                from: need.from,
                to: need.to,
                text: message.text_content(),
            });
            if let Action::Fail { error } = spent {
                return Err(*error);
            }
        }
        let summary = self
            .session
            .history_summary
            .as_ref()
            .filter(|summary| {
                plan.cut > plan.pinned && summary.from == plan.pinned && summary.to == plan.cut
            })
            .map(|summary| summary.text.as_str());
        if let Some(shaper) = &self.history {
            self.shaped = Some(Box::new(shaper.apply(
                &mut self.request.messages,
                &plan,
                summary,
                &*self.options.token_counter,
            )));
        }
        Ok(())
    }

    /// Puts back what the history policy took out of the request: the full history again.
    fn unshape(&mut self) {
        if let Some(applied) = self.shaped.take() {
            crate::history::restore(&mut self.request.messages, *applied);
        }
    }

    async fn flush_assembler(&self, assembler: &mut MessageAssembler) {
        while let Some(event) = assembler.next_event() {
            self.emitter.emit(event).await;
        }
    }

    /// A model call's price (the machine adds it and its usage to the run and the budgets).
    fn price(&mut self, message: &AssistantMessage) -> Option<f64> {
        let Some(usage) = &message.usage else {
            let budgeted =
                self.options.token_budget.is_some() || self.options.max_cost_usd.is_some();
            if budgeted && !self.warned_no_usage {
                self.warned_no_usage = true;
                tracing::warn!(
                    model = %self.request.model,
                    "the backend reported no token usage: the token and cost budgets cannot count \
                     this run's model calls; the iteration and repeated-call limits still apply"
                );
            }
            return None;
        };
        let model = message.model.as_deref().unwrap_or(&self.request.model);
        // The requested model's price stands in only for the same model under a path
        // (`models/gemini-2.5-flash`, `openai/gpt-4o`), never for another model that answered
        // (a fallback): an unpriced answering model is unpriced, not priced as another.
        let same_model = model
            .strip_suffix(self.request.model.as_str())
            .is_some_and(|path| path.is_empty() || path.ends_with('/'));
        self.options.rate_card.cost(model, usage).or_else(|| {
            same_model
                .then(|| self.options.rate_card.cost(&self.request.model, usage))
                .flatten()
        })
    }

    /// The next request's input tokens: the backend's own count, else the counter's
    /// estimate (each message counted once per run).
    fn estimate_input(&mut self) -> u64 {
        if let Some(tokens) = self.backend.count_input_tokens(&self.request) {
            return tokens;
        }
        if let Some(shaped) = &self.shaped {
            return self.preamble_tokens.saturating_add(shaped.tokens);
        }
        let history = self
            .counts
            .history(&*self.options.token_counter, &self.request.messages);
        self.preamble_tokens.saturating_add(history)
    }

    /// Screens a round's calls for the machine: a remote tool's call with valid arguments
    /// waits for the caller (with invalid ones it is refused like a local call, so the model
    /// can fix it without a round trip); a local call may need approval or be denied by the
    /// policy. Calls past the round's cap are refused by the machine, unscreened.
    fn screen(&self, mut calls: Vec<ToolCall>) -> Input {
        let tools = self.round_tools();
        let cap = self.config.max_tool_calls_per_round;
        let mut guardrails = Vec::new();
        let screens = calls
            .iter_mut()
            .take(cap)
            .map(|call| {
                if let Some(tool) = tools.get(&call.name)
                    && tool.is_remote()
                    && let Ok(validated) =
                        tool.validate(call.arguments.clone(), self.options.tool_arg_validation)
                {
                    return Screen::Remote {
                        arguments: validated.arguments,
                    };
                }
                // [guardrail call site: tool call] deny, rewrite or ask before approval; an
                // approver sees the rewritten arguments.
                let gate = crate::guardrail::before_call(self.options, tools, call);
                guardrails.extend(gate.decisions);
                if let Some(reason) = gate.refused {
                    return Screen::Refuse { reason };
                }
                if gate.approval {
                    return Screen::AwaitApproval;
                }
                if !self.approvals_possible {
                    return Screen::Run;
                }
                match crate::approval::screen(self.options, tools, call) {
                    Some(Ok(())) => Screen::AwaitApproval,
                    Some(Err(reason)) => Screen::Refuse { reason },
                    None => Screen::Run,
                }
            })
            .collect();
        Input::Screened {
            calls,
            screens,
            guardrails,
        }
    }

    /// The tools this round's calls run against: the preparation's narrowed registry when it
    /// set one (a call to a tool removed for the round gets the unknown-tool result), else the
    /// run's. A round resumed after approval runs against the run's: its preparation ran in
    /// the run that asked.
    fn round_tools(&self) -> &Registry {
        match self.prepared.as_ref().and_then(|p| p.round_tools()) {
            Some(round) => round,
            None => &self.tools,
        }
    }

    /// Runs a round's calls (the `refused` ones get their error result); the results join
    /// the history in call order. Returns what the round came to, for the machine.
    async fn run_round(
        &mut self,
        iteration: u32,
        calls: Vec<ToolCall>,
        refused: Vec<Refusal>,
        guardrails: Vec<GuardrailDecision>,
    ) -> Result<Input, AgentError> {
        let jobs: Vec<Job> = {
            let mut refused = refused.into_iter().peekable();
            calls
                .into_iter()
                .enumerate()
                .map(|(at, call)| Job {
                    name: std::sync::Arc::from(call.name.as_str()),
                    refused: refused
                        .next_if(|refusal| refusal.index == at)
                        .map(|refusal| refusal.reason),
                    // The decisions screening made about this call, for its trace entry.
                    guardrails: crate::guardrail::decisions_for(&guardrails, &call),
                    call,
                    iteration,
                })
                .collect()
        };
        let tools = self.round_tools();
        let outcomes = crate::dispatch::run_batch(
            &jobs,
            tools,
            self.options,
            &self.policy,
            &self.emitter,
            &self.hard_stop,
            &self.accounting,
            self.machine.budget_left(&self.config),
            self.audit.as_ref(),
        )
        .await;

        let mut stop = None;
        for (job, outcome) in jobs.into_iter().zip(outcomes) {
            let Outcome {
                result,
                trace,
                stop: stops,
                waiting,
            } = outcome;
            if let Some(waiting) = waiting {
                waiting.await;
            }
            if stop.is_none() {
                stop = stops.map(|kind| {
                    Box::new(crate::machine::stop_error(kind, &job.call, &result.content))
                });
            }
            self.trace.push(trace);
            self.push_message(Message::Tool(result), None).await?;
        }
        // What handlers spent themselves (a sub-agent's model calls): the machine counts it.
        let reported = self.accounting.take();
        Ok(Input::ToolsDone {
            outcome: RoundOutcome {
                reported_usage: reported.usage,
                reported_tokens: reported.tokens,
                reported_cost_usd: reported.cost_usd,
                cancelled: self.options.cancellation.is_cancelled(),
                failure: self.audit_verdict().err().map(Box::new),
                stop,
            },
        })
    }

    /// `Err` when accounting failed and the queue is set to fail the run with it.
    fn audit_verdict(&self) -> Result<(), AgentError> {
        match &self.options.accounting {
            Some(queue) => queue.verdict(),
            None => Ok(()),
        }
    }

    /// Adds `message` to the history, tells the consumer, and stores it (awaited).
    async fn push_message(
        &mut self,
        message: Message,
        cost_usd: Option<f64>,
    ) -> Result<(), AgentError> {
        if self.emitter.is_on() {
            // An assistant message's `message_start` went out when its model call began.
            if message.role() != Role::Assistant {
                self.emitter
                    .emit(AgentEvent::MessageStart {
                        role: message.role(),
                    })
                    .await;
            }
            self.emitter
                .emit(AgentEvent::MessageEnd {
                    message: message.clone(),
                    cost_usd,
                })
                .await;
        }
        self.request.messages.push(message);
        self.append_new().await?;
        // The full history only: a shaped request is never lent.
        if let Some(checkpoint) = &self.options.checkpoint
            && self.shaped.is_none()
        {
            checkpoint
                .checkpoint(
                    &mut self.request.messages,
                    self.machine.usage(),
                    self.machine.cost_usd(),
                    self.machine.budgets(),
                )
                .await?;
        }
        Ok(())
    }

    /// Hands every message not yet stored to the appender, in order.
    async fn append_new(&mut self) -> Result<(), AgentError> {
        let Some(appender) = &self.options.conversation else {
            self.appended_to = self.request.messages.len();
            return Ok(());
        };
        while self.appended_to < self.request.messages.len() {
            let turn = Turn::new(self.request.messages[self.appended_to].clone());
            appender.append(&turn).await.map_err(|error| {
                AgentError::new(
                    ErrorKind::Appender,
                    format!(
                        "storing message {} of the conversation (counting from 0) failed: {}",
                        self.appended_to,
                        error_chain(&error)
                    ),
                )
            })?;
            self.appended_to += 1;
        }
        Ok(())
    }
}

impl<B: ?Sized> Run<'_, '_, B> {
    /// Adds this run's usage and cost to the session's totals, once: from `finish`, or from
    /// `Drop` when the run's future was dropped first (its model calls were made and paid
    /// for, and their messages stay in the history).
    fn settle(&mut self) {
        if std::mem::replace(&mut self.settled, true) {
            return;
        }
        self.session.usage += self.machine.usage();
        if let Some(cost) = self.machine.cost_usd() {
            *self.session.cost_usd.get_or_insert(0.0) += cost;
        }
    }
}

impl<B: ?Sized> Drop for Run<'_, '_, B> {
    fn drop(&mut self) {
        // The full history goes back to the session, never a shaped request's.
        if let Some(applied) = self.shaped.take() {
            crate::history::restore(&mut self.request.messages, *applied);
        }
        self.settle();
        // Give the history back, whatever happened; a run dropped mid-way reads as aborted.
        self.session.messages = std::mem::take(&mut self.request.messages);
        let system_before = self
            .output
            .as_mut()
            .and_then(|output| output.system_before.take());
        self.session.system = match system_before {
            // `Prompted` added the schema to the request's prompt, not to the session's.
            Some(original) => original,
            None => self.request.system.take(),
        };
        if self.session.status == SessionStatus::Running {
            self.session.status = SessionStatus::Aborted;
        }
    }
}

/// An error and its sources, joined: the OS reason of an I/O error is often only in a source.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// What a run's start decides from its options, session and backend, for the in-process
/// driver and a durable one alike (`machine::setup`), so both refuse the same things.
pub(crate) struct Checked<'o> {
    /// The tools the run offers.
    pub(crate) tools: Cow<'o, Registry>,
    /// How a structured answer is asked for, with an output schema.
    pub(crate) strategy: Option<OutputStrategy>,
    /// How results are cut.
    pub(crate) policy: TruncationPolicy,
    /// Whether any call may wait for a person.
    pub(crate) approvals_possible: bool,
    /// Remote tools, approvals or tool guardrails: the round's calls are screened first.
    pub(crate) screen_calls: bool,
}

/// The checks every run's start makes: the backend takes the tools, the output strategy
/// resolves, the result cap is usable, a cost budget has a price, approvals are consistent.
pub(crate) fn check_start<'o>(
    options: &'o Options,
    session: &Session,
    capabilities: Capabilities,
) -> Result<Checked<'o>, AgentError> {
    let tools = effective_tools(options, session)?;
    if !tools.is_empty() && !capabilities.tools {
        return Err(AgentError::config(format!(
            "{} tool(s) are declared but this backend does not support tools; remove the \
             tools or use a backend that supports them",
            tools.len()
        )));
    }
    let strategy = match &options.output {
        Some(spec) => Some(resolve_strategy(
            spec,
            options.output_strategy,
            capabilities,
            &tools,
        )?),
        None => None,
    };
    let policy = TruncationPolicy::new(options.tool_result_max_bytes)
        .map_err(|error| AgentError::config(error.to_string()))?;
    if options.max_cost_usd.is_some() && options.rate_card.price(&session.model).is_none() {
        // Without a price every call would count as free and the budget could never trip.
        return Err(AgentError::config(format!(
            "a cost budget is set but the rate card has no price for model `{}`; add one \
             with `RateCard::with` or drop `max_cost_usd`",
            session.model
        )));
    }
    let approvals_possible = crate::approval::possible(options, &tools)?;
    let screen_calls = approvals_possible
        || options.guardrails.has_tool_guardrails()
        || tools.iter().any(|tool| tool.is_remote());
    Ok(Checked {
        tools,
        strategy,
        policy,
        approvals_possible,
        screen_calls,
    })
}

/// The strategy `wanted` comes to on a backend with `capabilities`; an explicit strategy the
/// backend cannot serve, or a final-answer tool named like a registered tool, is refused.
pub(crate) fn resolve_strategy(
    spec: &OutputSpec,
    wanted: OutputStrategy,
    capabilities: Capabilities,
    tools: &Registry,
) -> Result<OutputStrategy, AgentError> {
    let strategy = match wanted {
        OutputStrategy::Auto if capabilities.structured_output => OutputStrategy::Native,
        OutputStrategy::Auto if capabilities.tools => OutputStrategy::Tool,
        OutputStrategy::Auto => OutputStrategy::Prompted,
        OutputStrategy::Native if !capabilities.structured_output => {
            return Err(AgentError::config(
                "the `native` output strategy needs a backend with native structured output \
                 (OpenAI Chat, OpenAI Responses, Gemini, Ollama); use `tool`, `prompted` or \
                 `auto` with this backend",
            ));
        }
        OutputStrategy::Tool if !capabilities.tools => {
            return Err(AgentError::config(
                "the `tool` output strategy needs a backend that supports tools; use \
                 `prompted` or `auto` with this backend",
            ));
        }
        strategy => strategy,
    };
    if strategy == OutputStrategy::Tool && tools.get(spec.name()).is_some() {
        return Err(AgentError::config(format!(
            "a tool named `{}` is registered, which is also the final-answer tool's name; \
             rename one (`OutputSpec::with_name`)",
            spec.name()
        )));
    }
    Ok(strategy)
}

/// Puts the output strategy into the request. Returns the session's system prompt when the
/// request's now differs from it.
pub(crate) fn apply_output(
    spec: &OutputSpec,
    strategy: OutputStrategy,
    request: &mut ModelRequest,
) -> Option<Option<String>> {
    match strategy {
        OutputStrategy::Native => {
            request.response_format = Some(spec.response_format());
            None
        }
        OutputStrategy::Tool => {
            request.tools.push(spec.tool_spec());
            // The model must call a tool: the final answer alone, or any with other tools
            // (the final answer being one). A choice the session made stays, and so does
            // `auto` with reasoning on: Anthropic refuses a forced tool call with thinking
            // (the tool's description and the retry still steer the model to it).
            if request.tool_choice == ToolChoice::Auto && request.settings.reasoning.is_none() {
                request.tool_choice = if request.tools.len() == 1 {
                    ToolChoice::Tool {
                        name: spec.name().to_owned(),
                    }
                } else {
                    ToolChoice::Required
                };
            }
            None
        }
        OutputStrategy::Prompted | OutputStrategy::Auto => {
            let before = request.system.clone();
            let prompt = spec.prompt();
            request.system = Some(match &before {
                Some(system) => format!("{system}\n\n{prompt}"),
                None => prompt,
            });
            Some(before)
        }
    }
}

/// The tools this run offers: the registry, plus the session's remote tools, narrowed to the
/// allow-list and to what the caller may use. Borrowed when nothing changes.
pub(crate) fn effective_tools<'o>(
    options: &'o Options,
    session: &Session,
) -> Result<Cow<'o, Registry>, AgentError> {
    let mut tools = Cow::Borrowed(options.tools.as_ref());
    if !session.remote_tools.is_empty() {
        let mut merged = options.tools.as_ref().clone();
        for spec in &session.remote_tools {
            merged
                .register(Tool::new(spec.clone(), None))
                .map_err(|error| {
                    AgentError::config(format!(
                        "the session's remote tool `{}`: {error}",
                        spec.name
                    ))
                })?;
        }
        tools = Cow::Owned(merged);
    }
    if let Some(allowed) = &options.allowed_tools {
        let narrowed = tools.narrow(allowed).map_err(|error| {
            AgentError::config(format!(
                "{error}: each tool declared for a run needs a handler (a local tool) or a spec \
                 (a remote tool) in the registry"
            ))
        })?;
        tools = Cow::Owned(narrowed);
    }
    let gated = tools
        .iter()
        .any(|tool| !tool.tool().required_permissions().is_empty());
    if gated {
        tools = Cow::Owned(tools.permitted_for(&options.caller));
    }
    Ok(tools)
}
