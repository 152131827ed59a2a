//! The activities: `run_config` (what the worker's options decide for a run, once),
//! `model_call` (one backend call) and `tool_call` (one registry tool), the last two
//! heartbeating while they run so that Temporal's cancellation reaches them and a dead
//! worker is noticed within the heartbeat timeout. The loop's decisions are not here: the
//! workflow drives `agent_loop::machine` and asks these for I/O only.

use std::sync::Arc;
use std::time::Duration;

use agent_loop::machine::Screen;
use agent_loop::{CallScreen, Options};
use agent_types::{
    AgentError, AgentEvent, AssistantMessage, Backend, BackendError, BackendErrorKind, ErrorKind,
    GuardrailDecision, Message, MessageAssembler, Role, StopReason, ToolCall,
};
use futures_util::StreamExt;
use temporalio_common::error::ApplicationFailure;
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use tokio_util::sync::CancellationToken;

use crate::events::Publisher;
use crate::publish::EventSink;
use crate::wire::{
    ModelCallInput, ModelCallOutput, Retries, RunConfig, RunConfigInput, Screened, ToolCallInput,
    ToolCallOutput,
};

/// How often a running activity heartbeats. The workflow's heartbeat timeout is a few times
/// this, so a killed worker's activity is retried elsewhere within seconds.
pub(crate) const HEARTBEAT_EVERY: Duration = Duration::from_millis(500);

/// A model call's start-to-close timeout without `Options::model_call_timeout`.
const MODEL_CALL_TIMEOUT: Duration = Duration::from_secs(600);
/// A tool call's start-to-close timeout without `Options::tool_timeout`.
const TOOL_CALL_TIMEOUT: Duration = Duration::from_secs(3_600);
/// Added to the loop's own timeouts for the activity's: the loop's cut comes first and
/// reports itself; Temporal's is the backstop for a worker that stopped answering.
const TIMEOUT_SLACK: Duration = Duration::from_secs(30);

/// The worker's side of a run: the backend, the loop's options (tools, budgets, caps,
/// validation, error modes, approval policy, guardrails) and the activities' retry settings.
pub struct AgentActivities {
    backend: Arc<dyn Backend>,
    options: Options,
    retries: Retries,
    pub(crate) events: Option<EventSink>,
    /// Where the activities publish the runs' live events (crate::events), if anywhere.
    log: Option<Arc<dyn crate::events::EventLog>>,
}

impl AgentActivities {
    /// Activities calling `backend` and running `options.tools`, with `options`' budgets,
    /// caps, validation and error modes (the workflow reads them through `run_config`), and
    /// the default [`Retries`].
    ///
    /// # Errors
    /// A configuration error when the options are unusable (`Options::validate`), so a
    /// worker refuses them at its start rather than at its first run.
    pub fn new(backend: Arc<dyn Backend>, options: Options) -> Result<Self, AgentError> {
        options.validate()?;
        Ok(Self {
            backend,
            options,
            retries: Retries::default(),
            events: None,
            log: None,
        })
    }

    /// Publishes the runs' live events into `log` (docs/durable.md, "Live events").
    #[must_use]
    pub fn with_events(mut self, log: Arc<dyn crate::events::EventLog>) -> Self {
        self.log = Some(log);
        self
    }

    /// The event log the activities publish into.
    pub fn events(&self) -> Option<&Arc<dyn crate::events::EventLog>> {
        self.log.as_ref()
    }

    /// Whether any live event of a run is wanted (a sink or a log): else none is built.
    pub(crate) fn publishing(&self) -> bool {
        self.events.is_some() || self.log.is_some()
    }

    /// The publisher into the event log of the activity `ctx` runs (off without a log).
    fn publisher(&self, ctx: &ActivityContext) -> Publisher {
        Publisher::for_activity(self.log.as_ref(), ctx)
    }

    /// With these retry settings for the `model_call` and `tool_call` activities (the
    /// worker's retry configuration: attempts, first backoff, longest backoff).
    #[must_use]
    pub fn with_retries(mut self, retries: Retries) -> Self {
        self.retries = retries;
        self
    }

    /// The run's config as the worker's options give it.
    fn config(&self, session: &agent_loop::Session) -> Result<RunConfig, AgentError> {
        let setup =
            agent_loop::machine::setup(&self.options, session, self.backend.capabilities())?;
        let millis = |limit: Option<Duration>, default: Duration| {
            let limit = limit.map_or(default, |limit| limit.saturating_add(TIMEOUT_SLACK));
            u64::try_from(limit.as_millis()).unwrap_or(u64::MAX)
        };
        Ok(RunConfig {
            setup,
            retries: self.retries,
            model_call_timeout_ms: millis(self.options.model_call_timeout, MODEL_CALL_TIMEOUT),
            tool_call_timeout_ms: millis(self.options.tool_timeout, TOOL_CALL_TIMEOUT),
            events: self.log.is_some(),
            input_tripped: None,
        })
    }

    /// One backend call: the gate, then the stream assembled into the response, bounded by
    /// `cancel` and the model-call timeout.
    async fn call(
        &self,
        ctx: &ActivityContext,
        input: &ModelCallInput,
        cancel: &CancellationToken,
        out: &Publisher,
    ) -> Result<AssistantMessage, AgentError> {
        let request = &input.request;
        agent_loop::machine::gate(
            &self.options,
            request,
            input.iteration,
            input.estimated_input_tokens,
        )
        .await?;
        let publishing = self.publishing();
        if publishing {
            self.publish(
                ctx,
                out,
                &[AgentEvent::MessageStart {
                    role: Role::Assistant,
                }],
            );
        }
        let mut assembler = MessageAssembler::new(publishing);
        // A structured run's growing answer, as the in-process loop follows it.
        let mut partial = match &self.options.output {
            Some(spec) if publishing => {
                // The request template carries the final-answer tool only under `Tool`.
                let tool = request.tools.iter().any(|tool| tool.name == spec.name());
                let strategy = if tool {
                    agent_loop::output::OutputStrategy::Tool
                } else {
                    agent_loop::output::OutputStrategy::Prompted
                };
                Some(agent_loop::output::PartialOutput::new(spec, strategy))
            }
            _ => None,
        };
        let pump = async {
            let mut stream = self.backend.stream(request);
            while let Some(item) = stream.next().await {
                assembler.push(item?)?;
                if publishing {
                    let mut events = Vec::new();
                    for event in assembler.drain_events() {
                        let grew = partial.as_mut().is_some_and(|p| p.observe(&event));
                        events.push(event);
                        // The partial answer goes out with the delta that grew it.
                        if grew {
                            events.extend(partial.as_ref().and_then(|p| p.latest()));
                        }
                    }
                    self.publish(ctx, out, &events);
                }
            }
            Ok::<(), BackendError>(())
        };
        let timeout = self.options.model_call_timeout;
        let raced = async {
            tokio::select! {
                pumped = pump => Some(pumped),
                () = cancel.cancelled() => None,
            }
        };
        let ended = match timeout {
            Some(limit) => tokio::time::timeout(limit, raced).await.map_err(|_| {
                AgentError::from(BackendError::new(
                    BackendErrorKind::Timeout,
                    format!("the model call took longer than its {limit:?} timeout"),
                ))
            }),
            None => Ok(raced.await),
        };
        let failure = match ended {
            Err(timeout) => timeout,
            Ok(None) => AgentError::new(
                ErrorKind::Aborted,
                "the run was cancelled during the model call",
            ),
            Ok(Some(Err(error))) => AgentError::from(error),
            Ok(Some(Ok(()))) if !assembler.is_finished() => AgentError::from(BackendError::new(
                BackendErrorKind::Protocol,
                "the model's stream ended before its finish event",
            )),
            Ok(Some(Ok(()))) => {
                let mut message = assembler.finish();
                if publishing {
                    let events: Vec<_> = assembler.drain_events().collect();
                    self.publish(ctx, out, &events);
                }
                if message.model.is_none() {
                    message.model = Some(request.model.clone());
                }
                return Ok(message);
            }
        };
        Err(self.failed(ctx, out, assembler, failure))
    }

    /// A model call's failure, as the in-process loop ends one: when it is final (not one
    /// Temporal retries), what the model had produced closes with the failure's stop reason,
    /// its `message_end` is published and the backend error keeps it as its partial.
    fn failed(
        &self,
        ctx: &ActivityContext,
        out: &Publisher,
        mut assembler: MessageAssembler,
        mut error: AgentError,
    ) -> AgentError {
        if retryable(&error) {
            // The next attempt streams the message again.
            return error;
        }
        let reason = if error.is_aborted() {
            StopReason::Aborted
        } else {
            StopReason::Error
        };
        let partial = assembler.finish_partial(reason);
        if let ErrorKind::Backend { error: backend } = &mut error.kind
            && backend.partial.is_none()
            && !partial.content.is_empty()
        {
            backend.partial = Some(Box::new(partial.clone()));
        }
        if self.publishing() {
            let mut events: Vec<_> = assembler.drain_events().collect();
            events.push(AgentEvent::MessageEnd {
                message: Message::Assistant(partial),
                cost_usd: None,
            });
            self.publish(ctx, out, &events);
        }
        error
    }

    /// The response's price: the answering model's, or the requested one's for the same
    /// model under a path (`openai/gpt-4o`), as the in-process loop prices it.
    fn price(&self, requested: &str, message: &AssistantMessage) -> Option<f64> {
        let usage = message.usage.as_ref()?;
        let model = message.model.as_deref().unwrap_or(requested);
        let same_model = model
            .strip_suffix(requested)
            .is_some_and(|path| path.is_empty() || path.ends_with('/'));
        let card = &self.options.rate_card;
        card.cost(model, usage)
            .or_else(|| same_model.then(|| card.cost(requested, usage)).flatten())
    }

    /// The response's calls screened as the in-process loop screens a round: a remote tool's
    /// call with valid arguments waits for the caller; a local one goes through the tool
    /// guardrails (which may rewrite its arguments) and the approval policy. Calls past the
    /// cap are left to the machine, unscreened.
    fn screen(&self, input: &ModelCallInput, message: &AssistantMessage) -> Option<Screened> {
        if !input.screen {
            return None;
        }
        let mut calls: Vec<ToolCall> = message.tool_calls().cloned().collect();
        if calls.is_empty() {
            return None;
        }
        let mut guardrails = Vec::new();
        let screens = calls
            .iter_mut()
            .take(input.max_calls)
            .map(|call| self.screen_call(input, call, &mut guardrails))
            .collect();
        Some(Screened {
            calls,
            screens,
            guardrails,
        })
    }

    fn screen_call(
        &self,
        input: &ModelCallInput,
        call: &mut ToolCall,
        guardrails: &mut Vec<GuardrailDecision>,
    ) -> Screen {
        if input.remote_tools.contains(&call.name) {
            return Screen::Remote {
                arguments: call.arguments.clone(),
            };
        }
        if let Some(tool) = self.options.tools.get(&call.name)
            && tool.is_remote()
            && let Ok(validated) =
                tool.validate(call.arguments.clone(), self.options.tool_arg_validation)
        {
            return Screen::Remote {
                arguments: validated.arguments,
            };
        }
        let (screen, decisions) = agent_loop::screen_tool_call_decided(&self.options, call);
        guardrails.extend(decisions);
        match screen {
            CallScreen::Run => Screen::Run,
            CallScreen::AwaitApproval => Screen::AwaitApproval,
            CallScreen::Refuse(reason) => Screen::Refuse { reason },
        }
    }
}

#[activities]
impl AgentActivities {
    /// What the worker's options decide for a run: the machine's config, the request
    /// template, the caps, the retry policy and the timeouts. Once per run (and carried
    /// across continue-as-new).
    #[activity(name = "run_config")]
    pub async fn run_config(
        self: Arc<Self>,
        _ctx: ActivityContext,
        input: RunConfigInput,
    ) -> Result<RunConfig, ActivityError> {
        let mut config = self.config(&input.session).map_err(failure)?;
        if let Some(text) = input.user {
            let messages = [Message::User(agent_types::UserMessage::text(text))];
            config.input_tripped = agent_loop::guardrail::check_input(&self.options, &messages)
                .await
                .err();
        }
        Ok(config)
    }

    /// One model call: the request the machine asked for, sent to the backend and assembled
    /// into the response, with its price and, when the run screens calls, its calls
    /// screened. A failure a retry may mend (5xx, timeout, rate limit) is an activity failure
    /// Temporal retries; any other comes back as `error` for the machine to end the run with.
    #[activity(name = "model_call")]
    pub async fn model_call(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: ModelCallInput,
    ) -> Result<ModelCallOutput, ActivityError> {
        let cancel = CancellationToken::new();
        let out = self.publisher(&ctx);
        let called = heartbeating(&ctx, &cancel, self.call(&ctx, &input, &cancel, &out)).await;
        if cancel.is_cancelled() {
            // Temporal asked for it: report the cancellation, not the aborted call.
            return Err(ActivityError::cancelled());
        }
        let output = match called {
            Ok(message) => {
                let cost_usd = self.price(&input.request.model, &message);
                if self.publishing() {
                    self.publish(
                        &ctx,
                        &out,
                        &[AgentEvent::MessageEnd {
                            message: Message::Assistant(message.clone()),
                            cost_usd,
                        }],
                    );
                }
                Ok(ModelCallOutput {
                    cost_usd,
                    screened: self.screen(&input, &message),
                    response: Some(message),
                    error: None,
                })
            }
            Err(error) if retryable(&error) => Err(failure(error)),
            Err(error) => Ok(ModelCallOutput {
                response: None,
                cost_usd: None,
                screened: None,
                error: Some(error),
            }),
        };
        // In the log before the workflow goes on, so what it publishes next follows.
        out.finish().await;
        output
    }

    /// One tool call from the worker's registry, run as a round of the loop runs it; the
    /// activity's cancellation fires the tool's cancellation token.
    #[activity(name = "tool_call")]
    pub async fn tool_call(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: ToolCallInput,
    ) -> Result<ToolCallOutput, ActivityError> {
        let cancel = CancellationToken::new();
        let mut options = self.options.clone();
        options.cancellation = cancel.clone();
        let ToolCallInput {
            call,
            iteration,
            refused,
            guardrails,
        } = input;
        let outcome = if self.publishing() {
            // Its `tool_execution_*` events go out as they happen.
            let out = self.publisher(&ctx);
            let run = agent_loop::run_tool_call_with_events(
                &options,
                call,
                iteration,
                refused,
                guardrails,
                |event| self.publish(&ctx, &out, std::slice::from_ref(&event)),
            );
            let outcome = heartbeating(&ctx, &cancel, run).await;
            out.finish().await;
            outcome
        } else {
            match guardrails {
                // Screened in `model_call`: the decisions made there, not the checks again.
                Some(guardrails) => {
                    let run = agent_loop::run_screened_tool_call(
                        &options, call, iteration, refused, guardrails,
                    );
                    heartbeating(&ctx, &cancel, run).await
                }
                None => {
                    let run = agent_loop::run_tool_call(&options, call, iteration, refused);
                    heartbeating(&ctx, &cancel, run).await
                }
            }
        }
        .map_err(failure)?;
        if cancel.is_cancelled() {
            // Temporal asked for it: report the cancellation, not the tool's cancelled result.
            return Err(ActivityError::cancelled());
        }
        if self.events.is_some() {
            self.publish_result(&ctx, &outcome.result);
        }
        Ok(ToolCallOutput {
            result: outcome.result,
            trace: outcome.trace,
            stop: outcome.stop,
        })
    }
}

/// Runs `work` while heartbeating every [`HEARTBEAT_EVERY`]; when Temporal cancels the
/// activity (delivered with a heartbeat's response), `cancel` fires and `work` sees it
/// through the loop's cancellation token.
async fn heartbeating<T>(
    ctx: &ActivityContext,
    cancel: &CancellationToken,
    work: impl Future<Output = T>,
) -> T {
    let mut work = std::pin::pin!(work);
    let mut ticker = tokio::time::interval(HEARTBEAT_EVERY);
    loop {
        tokio::select! {
            done = &mut work => return done,
            _ = ticker.tick() => {
                // A heartbeat that cannot be encoded is only a lost heartbeat.
                let _ = ctx.record_heartbeat(()).await;
            }
            () = ctx.cancelled(), if !cancel.is_cancelled() => cancel.cancel(),
        }
    }
}

/// An error as Temporal sees it: a backend error the backend calls retryable (a 5xx, a
/// timeout, a rate limit) is retried by the activity's retry policy; budgets, validation,
/// configuration, other 4xx and everything else are not, since a retry would fail the same way.
fn failure(error: AgentError) -> ActivityError {
    let retryable = retryable(&error);
    let type_name = kind_name(&error.kind);
    let message = error.to_string();
    let failure = if retryable {
        ApplicationFailure::builder(message)
            .type_name(type_name.to_string())
            .build()
    } else {
        ApplicationFailure::builder(message)
            .type_name(type_name.to_string())
            .non_retryable(true)
            .build()
    };
    ActivityError::application(failure)
}

/// Whether a retry may mend `error`: a backend error the backend calls retryable.
fn retryable(error: &AgentError) -> bool {
    matches!(&error.kind, ErrorKind::Backend { error } if error.is_retryable())
}

/// The error kind's name, Temporal's failure type.
fn kind_name(kind: &ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Config => "config",
        ErrorKind::Validation => "validation",
        ErrorKind::BudgetExceeded { .. } => "budget_exceeded",
        ErrorKind::Aborted => "aborted",
        ErrorKind::Tool { .. } => "tool",
        ErrorKind::Backend { .. } => "backend",
        ErrorKind::NotImplemented => "not_implemented",
        ErrorKind::Appender => "appender",
        ErrorKind::Refused => "refused",
        _ => "agent_error",
    }
}
