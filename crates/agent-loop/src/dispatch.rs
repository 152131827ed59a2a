//! Running one round of tool calls: validation, handlers (parallel or serial), timeouts,
//! cancellation with a grace period, truncation, the result hook and the trace.

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use agent_tools::{
    Accounting, BudgetLeft, EventSink, Registry, ToolContent, ToolContext, ToolError,
    ToolErrorKind, ToolEvent, TruncationPolicy, cap_binary, escaped_len, truncate, truncate_result,
};
use agent_types::{AgentEvent, ToolCall, ToolResult, ToolResultBlock, TraceEntry};
use futures_util::future::{Either, join_all, select};
use futures_util::{StreamExt, stream};
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::field;

use crate::telemetry::{self, SpanName};

use crate::events::Emitter;
use crate::job::Job;
use crate::options::Options;

/// Why a call's failure ends the run (the machine's table decides it).
pub(crate) use crate::machine::ToolStop as Stop;

/// What one call produced.
pub(crate) struct Outcome {
    /// What the model sees.
    pub(crate) result: ToolResult,
    /// What happened.
    pub(crate) trace: TraceEntry,
    /// Set when this call's failure ends the run.
    pub(crate) stop: Option<Stop>,
    /// The send of this call's accounting row, when a waiting queue was full: the run
    /// awaits it (awaiting here would keep the trace entry in every call's future).
    pub(crate) waiting: Option<crate::audit::Waiting>,
}

/// Everything the calls of a round share.
struct Round<'a> {
    tools: &'a Registry,
    options: &'a Options,
    policy: &'a TruncationPolicy,
    emitter: &'a Emitter,
    hard_stop: &'a CancellationToken,
    accounting: &'a Accounting,
    /// What was left of the run's budgets when the round began (a sub-agent's cap).
    budget: BudgetLeft,
    /// Where sub-agents' events go; `None` when the run does not stream.
    events: Option<EventSink>,
    /// Who and which run each call's accounting row names; `None` without accounting.
    audit: Option<&'a Arc<crate::audit::RunContext>>,
    /// Set by a call whose failure ends the run: calls not started yet are skipped.
    stopping: AtomicBool,
    /// Bytes of the round's results so far, against `max_round_result_bytes`.
    round_bytes: AtomicUsize,
}

/// Runs `jobs` and returns one outcome per job, in job order.
///
/// Calls run concurrently up to the parallelism limit. When the run is cancelled, running
/// handlers see their tokens fire and get `cancel_grace` to finish; then the hard stop drops
/// them. Calls not started by then are not run.
// The round's shared parts, each borrowed from the run; a struct would only rename them.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run_batch(
    jobs: &[Job],
    tools: &Registry,
    options: &Options,
    policy: &TruncationPolicy,
    emitter: &Emitter,
    hard_stop: &CancellationToken,
    accounting: &Accounting,
    budget: BudgetLeft,
    audit: Option<&Arc<crate::audit::RunContext>>,
) -> Vec<Outcome> {
    if jobs.is_empty() {
        return Vec::new();
    }
    let events = emitter.is_on().then(|| {
        let emitter = emitter.clone();
        EventSink::new(move |event| emitter.queue(event))
    });
    let round = Round {
        tools,
        options,
        policy,
        emitter,
        hard_stop,
        accounting,
        budget,
        events,
        audit,
        stopping: AtomicBool::new(false),
        round_bytes: AtomicUsize::new(0),
    };
    let round = &round;
    let limit = options.tool_parallelism.limit();
    // Within the bound, `join_all` keeps every call in one allocation, made straight from
    // the iterator (a `Vec` of the futures first would be a second allocation of them, and a
    // copy, every round); `buffered` (one task allocation per call) only when the bound
    // holds some calls back. Its futures are made up front (they do nothing until polled):
    // a closure in the stored `map` would hide their lifetimes from the `Send` check.
    let batch = if jobs.len() <= limit {
        Either::Left(join_all(jobs.iter().map(|job| round.run(job))))
    } else {
        let calls: Vec<_> = jobs.iter().map(|job| round.run(job)).collect();
        Either::Right(stream::iter(calls).buffered(limit).collect::<Vec<_>>())
    };
    let mut batch = pin!(batch);
    let cancelled = pin!(options.cancellation.cancelled());
    match select(batch.as_mut(), cancelled).await {
        Either::Left((outcomes, _)) => outcomes,
        Either::Right(((), _)) => {
            // Handlers saw their tokens fire; those that honour them get to wind down.
            match tokio::time::timeout(options.cancel_grace, batch.as_mut()).await {
                Ok(outcomes) => outcomes,
                Err(_) => {
                    hard_stop.cancel();
                    batch.await
                }
            }
        }
    }
}

/// How a call failed, before the error mode decides what that means.
enum Failure {
    UnknownTool,
    Invalid,
    Handler(ToolErrorKind),
    TimedOut,
    NotRun,
}

impl Failure {
    /// `error.type` on the call's span.
    fn error_type(&self) -> &'static str {
        match self {
            Self::UnknownTool => "unknown_tool",
            Self::Invalid => "invalid_arguments",
            Self::Handler(ToolErrorKind::Fatal) => "fatal",
            Self::Handler(ToolErrorKind::Panicked) => "panicked",
            Self::Handler(ToolErrorKind::Cancelled) => "cancelled",
            Self::Handler(_) => "tool_error",
            Self::TimedOut => "timeout",
            Self::NotRun => "not_run",
        }
    }

    /// The failure as the machine's error-mode table reads it.
    fn for_machine(&self) -> crate::machine::CallFailure {
        use crate::machine::CallFailure;
        match self {
            Self::UnknownTool => CallFailure::UnknownTool,
            Self::Invalid => CallFailure::InvalidArguments,
            Self::Handler(ToolErrorKind::Fatal) => CallFailure::Fatal,
            Self::Handler(ToolErrorKind::Cancelled) => CallFailure::Cancelled,
            Self::Handler(_) => CallFailure::HandlerError,
            Self::TimedOut => CallFailure::TimedOut,
            Self::NotRun => CallFailure::NotRun,
        }
    }
}

impl Round<'_> {
    async fn run(&self, job: &Job) -> Outcome {
        let call = &job.call;
        // GenAI semantic conventions (docs/observability.md). A round's calls are siblings
        // under the run's span.
        let direct = crate::span_sink::with_run(|run| {
            run.start_tool(&crate::span_sink::ToolStart {
                name: &job.name,
                call_id: call.id.as_str(),
                iteration: job.iteration,
            })
        });
        let span = if direct.is_some() {
            tracing::Span::none()
        } else {
            tracing::info_span!(
                "execute_tool",
                otel.name = %SpanName("execute_tool", Some(&call.name)),
                otel.kind = "internal",
                otel.status_code = field::Empty,
                error.type = field::Empty,
                gen_ai.operation.name = "execute_tool",
                gen_ai.tool.name = %call.name,
                gen_ai.tool.call.id = %call.id,
                gen_ai.tool.type = "function",
                agentry.iteration = i64::from(job.iteration),
                agentry.tool.result_bytes = field::Empty,
                agentry.tool.sent_bytes = field::Empty,
                agentry.tool.truncated = field::Empty,
                agentry.guardrails = field::Empty,
            )
        };
        // The `tracing` span is recorded inside the future it instruments (where it is
        // current), so this future keeps no second handle of it across the call.
        let traced = direct.is_none();
        let call = async move {
            let outcome = self.run_call(job).await;
            if traced {
                tracing::record_all!(
                    tracing::Span::current(),
                    agentry.tool.result_bytes = telemetry::int(outcome.trace.result_bytes),
                    agentry.tool.sent_bytes = telemetry::int(outcome.trace.sent_bytes),
                    agentry.tool.truncated = outcome.trace.truncated,
                );
            }
            outcome
        };
        let (outcome, direct) = crate::span_sink::call_scope(span, direct, call).await;
        if let Some(direct) = direct {
            direct.end(&outcome.trace);
        }
        outcome
    }

    async fn run_call(&self, job: &Job) -> Outcome {
        let call = &job.call;
        let started = Instant::now();
        let options = self.options;
        if let Some(reason) = &job.refused {
            self.announce_start(call, &call.arguments).await;
            return self
                .settle(
                    job,
                    call.arguments.clone(),
                    Vec::new(),
                    Err((Failure::NotRun, reason.clone())),
                    started,
                )
                .await;
        }
        if options.cancellation.is_cancelled() || self.stopping.load(Ordering::Relaxed) {
            let why = if options.cancellation.is_cancelled() {
                "the run was cancelled before it started"
            } else {
                "an earlier call's failure ended the run"
            };
            self.announce_start(call, &call.arguments).await;
            return self
                .settle(
                    job,
                    call.arguments.clone(),
                    Vec::new(),
                    Err((Failure::NotRun, format!("This call was not run: {why}."))),
                    started,
                )
                .await;
        }

        let Some(tool) = self.tools.get(&call.name) else {
            self.announce_start(call, &call.arguments).await;
            let mut names: Vec<&str> = self.tools.names().collect();
            names.truncate(32);
            let message = if names.is_empty() {
                format!(
                    "There is no tool named `{}`: no tools are available.",
                    call.name
                )
            } else {
                format!(
                    "There is no tool named `{}`. Available tools: {}.",
                    call.name,
                    names.join(", ")
                )
            };
            return self
                .settle(
                    job,
                    call.arguments.clone(),
                    Vec::new(),
                    Err((Failure::UnknownTool, message)),
                    started,
                )
                .await;
        };

        let validated = match tool.validate(call.arguments.clone(), options.tool_arg_validation) {
            Ok(validated) => validated,
            Err(invalid) => {
                self.announce_start(call, &call.arguments).await;
                let repairs = invalid.repairs.iter().map(ToString::to_string).collect();
                let message = format!(
                    "{invalid}\nFix the arguments and call `{}` again.",
                    call.name
                );
                return self
                    .settle(
                        job,
                        call.arguments.clone(),
                        repairs,
                        Err((Failure::Invalid, message)),
                        started,
                    )
                    .await;
            }
        };
        let repairs: Vec<String> = validated.repairs.iter().map(ToString::to_string).collect();
        let arguments = validated.arguments;
        self.announce_start(call, &arguments).await;
        let call_token = options.cancellation.child_token();
        // In a block: the context is borrowed for its slot, and a borrowed local would keep
        // its place in this future (every call's) although it moves into the handler.
        let (slot, mut output) = {
            let context = ToolContext::for_call(
                call.id.clone(),
                Arc::clone(&job.name),
                Arc::clone(&options.caller),
                call_token.clone(),
                self.accounting.clone(),
            )
            .with_hard_stop(self.hard_stop.clone())
            // Handlers read at most what the truncation below keeps.
            .with_max_result_bytes(self.policy.max_bytes())
            .with_max_binary_bytes(options.tool_result_max_binary_bytes)
            .with_budget_left(self.budget);
            let context = match &self.events {
                Some(sink) => context.with_events(sink.clone()),
                None => context,
            };
            // A handler that returns content blocks leaves them here.
            let slot = context.content_slot();
            (slot, tool.invoke(arguments.clone(), context))
        };
        let emitter = self.emitter;
        let pump = async {
            while let Some(event) = output.next().await {
                match event {
                    ToolEvent::Delta(delta) => {
                        emitter
                            .emit_with(|| AgentEvent::ToolExecutionDelta {
                                call_id: call.id.clone(),
                                delta,
                            })
                            .await;
                    }
                    ToolEvent::Done(result) => return result,
                }
            }
            Err(ToolError::fatal("the tool ended without a result"))
        };
        let finished = match options.tool_timeout {
            Some(limit) => match tokio::time::timeout(limit, pump).await {
                Ok(result) => Ok(result),
                Err(_) => {
                    call_token.cancel();
                    Err(limit)
                }
            },
            None => Ok(pump.await),
        };
        drop(output);
        // Taken whatever the outcome, so content a failed call set does not wait in the
        // run's accounting until the run ends.
        let content = slot.take();
        // A sub-agent's trace, for this call's entry.
        let sub_trace = slot.take_trace();
        drop(slot);
        let mut outcome = match finished {
            Ok(Ok(value)) => {
                let produced = match content {
                    Some(content) => Produced::Content(content),
                    None => Produced::Value(value),
                };
                self.settle(job, arguments, repairs, Ok(produced), started)
                    .await
            }
            Ok(Err(error)) => {
                let kind = error.kind();
                let message = match kind {
                    ToolErrorKind::Cancelled => {
                        "The call was cancelled before it finished.".to_owned()
                    }
                    _ => error.message().to_owned(),
                };
                self.settle(
                    job,
                    arguments,
                    repairs,
                    Err((Failure::Handler(kind), message)),
                    started,
                )
                .await
            }
            Err(limit) => {
                let message = format!(
                    "`{}` did not finish within {limit:?} and was stopped. Try a smaller request \
                     or another approach.",
                    call.name
                );
                self.settle(
                    job,
                    arguments,
                    repairs,
                    Err((Failure::TimedOut, message)),
                    started,
                )
                .await
            }
        };
        outcome.trace.sub_trace = sub_trace;
        outcome
    }

    async fn announce_start(&self, call: &ToolCall, arguments: &Value) {
        self.emitter
            .emit_with(|| AgentEvent::ToolExecutionStart {
                call_id: call.id.clone(),
                tool_name: call.name.clone(),
                arguments: arguments.clone(),
            })
            .await;
    }

    /// Turns how a call ended into its outcome: the capped result (or error), whether it
    /// stops the run, the result hook, the end event and the trace entry.
    async fn settle(
        &self,
        job: &Job,
        arguments: Value,
        repairs: Vec<String>,
        ended: Result<Produced, (Failure, String)>,
        started: Instant,
    ) -> Outcome {
        let duration = started.elapsed();
        // The capped result is built by a plain call: of it only its sizes stay in this
        // future (one per call, allocated every round) across the awaits below.
        let Capped {
            result,
            failure,
            stop,
            truncated,
            original_bytes,
            binary_sent_bytes,
        } = self.cap(job, ended);
        let mut error = failure.is_some().then(|| result.content.clone());
        let mut error_type = failure.as_ref().map(Failure::error_type);
        let counted = !matches!(failure, Some(Failure::NotRun));
        let mut result = match self.options.hooks.transformer() {
            Some(transform) => transform(result).await,
            None => result,
        };
        // [guardrail call site: tool result] redact or replace before anyone sees it.
        let guardrails =
            crate::guardrail::after_call(self.options, job, &arguments, &mut result, counted);
        let mut truncated = truncated;
        // The round's results together stay under `max_round_result_bytes`: once they reach
        // it, each later result is replaced (and freed) by a short error saying so. Calls
        // that did not run carry only their short reason and are not counted.
        let cap = self.options.max_round_result_bytes;
        let text_bytes = result.content.len() + blocks_text_len(&result.blocks);
        let before = if counted {
            self.round_bytes.fetch_add(text_bytes, Ordering::Relaxed)
        } else {
            0
        };
        if counted && before.saturating_add(text_bytes) > cap {
            result.blocks = Vec::new();
            result.content = format!(
                "This result was dropped: the results of this round reached {cap} bytes \
                 (max_round_result_bytes), so later results of the round are not sent. Ask \
                 for fewer or smaller results at once."
            );
            result.is_error = true;
            truncated = true;
            error = Some(result.content.clone());
            error_type = Some("round_result_limit");
        }
        if let Some(error_type) = error_type {
            // The call's own span (run_call is instrumented with it).
            let span = tracing::Span::current();
            span.record("error.type", error_type);
            span.record("otel.status_code", "ERROR");
            crate::span_sink::with_tool(|tool| tool.fail(error_type));
        }
        if self.emitter.is_on() {
            self.emitter
                .emit(AgentEvent::ToolExecutionEnd {
                    call_id: job.call.id.clone(),
                    tool_name: job.call.name.clone(),
                    output: result.content.clone(),
                    is_error: result.is_error,
                    truncated,
                    blocks: result.blocks.clone(),
                })
                .await;
        }
        let trace = TraceEntry {
            iteration: job.iteration,
            call_id: job.call.id.clone(),
            tool_name: job.call.name.clone(),
            arguments,
            result_bytes: original_bytes as u64,
            sent_bytes: (result.content.len() + blocks_text_len(&result.blocks) + binary_sent_bytes)
                as u64,
            truncated,
            duration,
            error,
            repairs,
            sub_trace: Vec::new(),
            guardrail_decisions: guardrails,
        };
        if let Some(decisions) = &trace.guardrail_decisions {
            tracing::Span::current().record(
                "agentry.guardrails",
                crate::guardrail::span_value(decisions).as_str(),
            );
        }
        // The call's row goes when it ends: sizes and a hash, not the arguments.
        let waiting =
            crate::audit::send_tool_row(self.options.accounting.as_ref(), self.audit, job, &trace);
        Outcome {
            result,
            trace,
            stop,
            waiting,
        }
    }

    /// How a call ended, capped: the result the model will see (before the hook), whether
    /// the failure stops the run (and the round's later calls), and the sizes for the trace.
    fn cap(&self, job: &Job, ended: Result<Produced, (Failure, String)>) -> Capped {
        let (cut, failure) = match ended {
            Ok(Produced::Value(value)) => (Cut::text(truncate_result(value, self.policy)), None),
            Ok(Produced::Content(content)) => (
                cap_content(
                    content,
                    self.policy,
                    self.options.tool_result_max_binary_bytes,
                ),
                None,
            ),
            Err((failure, message)) => (Cut::text(truncate(message, self.policy)), Some(failure)),
        };
        let stop = failure.as_ref().and_then(|failure| {
            crate::machine::tool_stop(failure.for_machine(), self.options.tool_error_mode)
        });
        if stop.is_some() {
            self.stopping.store(true, Ordering::Relaxed);
        }
        let (id, name) = (job.call.id.clone(), job.call.name.clone());
        let mut result = if failure.is_some() {
            ToolResult::error(id, name, cut.text)
        } else {
            ToolResult::ok(id, name, cut.text)
        };
        result.blocks = cut.blocks;
        Capped {
            result,
            failure,
            stop,
            truncated: cut.truncated,
            original_bytes: cut.original_bytes,
            binary_sent_bytes: cut.binary_sent_bytes,
        }
    }
}

/// A call's result after its caps, and what `settle` still needs to know about it.
struct Capped {
    result: ToolResult,
    failure: Option<Failure>,
    stop: Option<Stop>,
    truncated: bool,
    original_bytes: usize,
    binary_sent_bytes: usize,
}

/// What a handler produced: a JSON value (sent as its text) or content blocks.
enum Produced {
    Value(Value),
    Content(ToolContent),
}

/// A result after its caps: the leading text, the blocks after it, whether anything was cut,
/// and the sizes the trace reports.
struct Cut {
    text: String,
    blocks: Vec<ToolResultBlock>,
    truncated: bool,
    /// Text bytes plus inline binary bytes, before the caps.
    original_bytes: usize,
    /// Inline binary bytes kept.
    binary_sent_bytes: usize,
}

impl Cut {
    fn text(cut: agent_tools::Truncated) -> Self {
        Self {
            text: cut.text,
            blocks: Vec::new(),
            truncated: cut.truncated,
            original_bytes: cut.original_bytes,
            binary_sent_bytes: 0,
        }
    }
}

/// The bytes of a result's text and JSON blocks, as the text they travel as.
fn blocks_text_len(blocks: &[ToolResultBlock]) -> usize {
    blocks
        .iter()
        .map(|block| match block {
            ToolResultBlock::Text { text } => text.len(),
            ToolResultBlock::Json { value } => value.to_string().len(),
            ToolResultBlock::Image { .. } | ToolResultBlock::File(_) => 0,
        })
        .sum()
}

/// Caps a content result: images and files together under `max_binary` (blocks past it
/// become a note), text and JSON together under the text policy. Text that does not fit is
/// joined into one leading text block and cut with the usual marker; the images and files
/// follow it, in order.
fn cap_content(content: ToolContent, policy: &TruncationPolicy, max_binary: usize) -> Cut {
    let mut blocks = content.into_blocks();
    // The handler's own text, before any note about dropped blocks joins it.
    let original_text = blocks_text_len(&blocks);
    let binary = cap_binary(&mut blocks, max_binary);
    let texts: Vec<String> = blocks
        .iter()
        .filter_map(|block| match block {
            ToolResultBlock::Text { text } => Some(text.clone()),
            ToolResultBlock::Json { value } => Some(value.to_string()),
            ToolResultBlock::Image { .. } | ToolResultBlock::File(_) => None,
        })
        .collect();
    let escaped: usize = texts.iter().map(|text| escaped_len(text)).sum();
    let original_bytes = original_text + binary.original_bytes;
    if escaped <= policy.max_bytes() {
        let result = ToolResult::with_blocks("", "", blocks);
        return Cut {
            text: result.content,
            blocks: result.blocks,
            truncated: binary.dropped > 0,
            original_bytes,
            binary_sent_bytes: binary.sent_bytes,
        };
    }
    let cut = truncate(texts.join("\n"), policy);
    blocks.retain(|block| {
        matches!(
            block,
            ToolResultBlock::Image { .. } | ToolResultBlock::File(_)
        )
    });
    Cut {
        text: cut.text,
        blocks,
        truncated: true,
        original_bytes,
        binary_sent_bytes: binary.sent_bytes,
    }
}
