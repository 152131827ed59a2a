//! The activities: `model_call` (one model call through the loop) and `tool_call` (one
//! registry tool), each heartbeating while it runs so that Temporal's cancellation reaches it
//! and a dead worker is noticed within the heartbeat timeout.

use std::sync::Arc;
use std::time::Duration;

use agent_loop::{CallScreen, Options, SessionStatus};
use agent_tools::{Registry, Tool};
use agent_types::{AgentError, Backend, ErrorKind, ToolCall};
use temporalio_common::error::ApplicationFailure;
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use tokio_util::sync::CancellationToken;

use crate::wire::{ModelCallInput, ModelCallOutput, Refused, ToolCallInput, ToolCallOutput};

/// How often a running activity heartbeats. The workflow's heartbeat timeout is a few times
/// this, so a killed worker's activity is retried elsewhere within seconds.
pub(crate) const HEARTBEAT_EVERY: Duration = Duration::from_millis(500);

/// The worker's side of a run: the backend, the loop's options (tools included) and, made
/// once, the same tools as remote specs, which the model call offers so that the loop
/// suspends after each model call and leaves the tool calls to the workflow.
pub struct AgentActivities {
    backend: Arc<dyn Backend>,
    options: Options,
    model_options: Options,
    /// Where the activities publish the run's live events (crate::events), if anywhere.
    events: Option<Arc<dyn crate::events::EventLog>>,
}

impl AgentActivities {
    /// Activities running `options.tools` against `backend`, with `options`' budgets, caps,
    /// validation and error modes.
    ///
    /// # Errors
    /// A configuration error when a tool's spec cannot be registered again as a remote one.
    pub fn new(backend: Arc<dyn Backend>, options: Options) -> Result<Self, AgentError> {
        let mut remote = Registry::new();
        for tool in options.tools.iter() {
            let spec = tool.spec().clone();
            remote
                .register(Tool::new(spec, None))
                .map_err(|error| AgentError::config(error.to_string()))?;
        }
        let mut model_options = options.clone();
        model_options.tools = Arc::new(remote);
        // Approval is screened by `model_call` against the real registry and decided by the
        // workflow: the model call's remote copies never wait for it.
        model_options.approval_policy = None;
        model_options.approval_tools = None;
        Ok(Self {
            backend,
            options,
            model_options,
            events: None,
        })
    }

    /// Publishes the runs' live events into `log` (docs/durable.md, "Live events").
    #[must_use]
    pub fn with_events(mut self, log: Arc<dyn crate::events::EventLog>) -> Self {
        self.events = Some(log);
        self
    }

    /// The event log the activities publish into.
    pub fn events(&self) -> Option<&Arc<dyn crate::events::EventLog>> {
        self.events.as_ref()
    }

    /// Whether the worker's registry runs `call` (else the caller does: a remote tool).
    fn is_local(&self, call: &ToolCall) -> bool {
        self.options
            .tools
            .get(&call.name)
            .is_some_and(|tool| !tool.is_remote())
    }
}

#[activities]
impl AgentActivities {
    /// One model call: the loop runs the session one step (the user's message or the round's
    /// results) until the model answers or asks for tools.
    #[activity(name = "model_call")]
    pub async fn model_call(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: ModelCallInput,
    ) -> Result<ModelCallOutput, ActivityError> {
        let ModelCallInput { mut session, step } = input;
        let cancel = CancellationToken::new();
        let mut options = self.model_options.clone();
        options.cancellation = cancel.clone();
        let ran = {
            let publisher = crate::events::Publisher::for_activity(self.events.as_ref(), &ctx);
            let run =
                agent_loop::execute_stream(&mut session, step, self.backend.as_ref(), &options);
            heartbeating(&ctx, &cancel, crate::events::forward(run, publisher)).await
        };
        let result = match ran {
            Ok(result) => result,
            Err(error) => return Err(failure(error)),
        };
        // The round the calls belong to: the loop counts it up after the model call it records.
        let iteration = result
            .model_calls
            .last()
            .map_or(1, |call| call.iteration + 1);
        let (mut local, mut remote) = (Vec::new(), Vec::new());
        let (mut needs_approval, mut refused) = (Vec::new(), Vec::new());
        if session.status == SessionStatus::AwaitingToolExecution {
            for call in &session.pending_tool_calls {
                if !self.is_local(call) {
                    remote.push(call.clone());
                    continue;
                }
                // The loop's own screening, with the worker's guardrails (which may rewrite
                // the arguments) and approval policy.
                let mut call = call.clone();
                match agent_loop::screen_tool_call(&self.options, &mut call) {
                    CallScreen::Run => {}
                    CallScreen::AwaitApproval => needs_approval.push(call.clone()),
                    CallScreen::Refuse(reason) => refused.push(Refused {
                        call_id: call.id.to_string(),
                        reason,
                    }),
                }
                local.push(call);
            }
        }
        Ok(ModelCallOutput {
            answer: result.message.text_content(),
            usage: result.usage,
            cost_usd: result.cost_usd,
            iteration,
            local,
            needs_approval,
            refused,
            remote,
            session,
        })
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
        let publisher = crate::events::Publisher::for_activity(self.events.as_ref(), &ctx);
        let run = crate::events::tool_call(&options, input, publisher);
        let outcome = heartbeating(&ctx, &cancel, run).await.map_err(failure)?;
        if cancel.is_cancelled() {
            // Temporal asked for it: report the cancellation, not the tool's cancelled result.
            return Err(ActivityError::cancelled());
        }
        Ok(ToolCallOutput {
            result: outcome.result,
            trace: outcome.trace,
            stop: outcome.stop.map(|error| error.to_string()),
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
    let retryable = matches!(&error.kind, ErrorKind::Backend { error } if error.is_retryable());
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
