//! The loop's spans as data, for an exporter that builds them itself (agent-otel's layer).
//!
//! Without one, the loop emits plain `tracing` spans (`telemetry.rs`), which any subscriber
//! sees. A `tracing` span costs a registry lookup in every layer on each enter and exit,
//! that is on every poll of the future it instruments, and its fields go through a visitor.
//! When the current subscriber carries a [`SpanHook`] (agent-otel's `Telemetry::layer()`
//! does), the run asks it once, at its start, and then hands it what the loop already holds
//! at each edge: the run's start and end, each model call's request and
//! [`ModelCallRecord`](crate::ModelCallRecord)-like outcome, each tool call's
//! [`TraceEntry`]. The `tracing` spans are then not created at all.
//!
//! Where a span is in the run: the run's span is kept in a per-thread slot while its future
//! is polled (two thread-local swaps per poll, no registry), so the model and tool calls
//! find it without being handed it; a tool call's span is kept the same way while the tool
//! runs, so a sub-agent's run (`Agent::as_tool`) starts as its child.

use std::any::Any;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use agent_types::{TraceEntry, Usage};
use tracing::Subscriber;

/// Where the loop's spans go as data. Put in a subscriber through a [`SpanHook`] layer.
pub trait SpanSink: Send + Sync + 'static {
    /// A run starts. `parent` is the tool call's span when the run is a sub-agent's (the
    /// span the calling run's sink made); `None` for a top-level run.
    fn start_run(&self, start: &RunStart<'_>, parent: Option<&dyn ToolSpan>) -> Arc<dyn RunSpan>;
}

/// A run's span, open until [`RunSpan::end`] (or until dropped: a dropped run's span ends
/// where it was).
pub trait RunSpan: Send + Sync {
    /// A model call starts, under this run. A run makes one model call at a time: the
    /// call's span is the run's until [`RunSpan::end_chat`] (or the run's drop) ends it.
    fn start_chat(&self, start: &ChatStart<'_>);
    /// The model call in flight ends.
    fn end_chat(&self, end: &ChatEnd<'_>);
    /// A tool call starts, under this run (a round's calls are siblings).
    fn start_tool(&self, start: &ToolStart<'_>) -> Arc<dyn ToolSpan>;
    /// The run's totals, once it settled (before [`RunSpan::end`]).
    fn totals(&self, totals: &RunTotals<'_>);
    /// The run ends.
    fn end(&self, end: &RunEnd);
}

/// A tool call's span, open until [`ToolSpan::end`] (or until dropped).
pub trait ToolSpan: Send + Sync {
    /// The call failed with this `error.type` (the model may still get a result).
    fn fail(&self, error_type: &'static str);
    /// The call ends; `trace` is its entry.
    fn end(&self, trace: &TraceEntry);
    /// The sink's own type, for a sub-agent's run to find its parent.
    fn as_any(&self) -> &dyn Any;
}

/// What a run's span starts with.
#[derive(Debug)]
#[non_exhaustive]
pub struct RunStart<'a> {
    /// `Backend::provider_name()`.
    pub provider: &'a str,
    /// `Options::agent_name`.
    pub agent_name: Option<&'a str>,
    /// The session's model.
    pub model: &'a str,
    /// The session id.
    pub conversation_id: &'a str,
    /// `Auto` or `Return`.
    pub tool_mode: &'static str,
}

/// What a model call's span starts with.
#[derive(Debug)]
#[non_exhaustive]
pub struct ChatStart<'a> {
    /// `Backend::provider_name()`.
    pub provider: &'a str,
    /// The model asked for.
    pub model: &'a str,
    /// The output limit sent, if any.
    pub max_tokens: Option<u32>,
    /// Sampling settings, when set.
    pub temperature: Option<f32>,
    /// Nucleus sampling, when set.
    pub top_p: Option<f32>,
    /// Whether the request asks for schema-constrained output.
    pub json_output: bool,
    /// The session id.
    pub conversation_id: &'a str,
    /// The round (0 for the first).
    pub iteration: u32,
    /// `history_summary` on a history policy's summary call.
    pub purpose: Option<&'static str>,
    /// The system prompt, with content capture on only.
    pub system_instructions: Option<&'a str>,
    /// The request's messages as JSON, with content capture on only.
    pub input_messages: Option<String>,
}

/// How a model call ended.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ChatEnd<'a> {
    /// The model the provider says answered.
    pub response_model: Option<&'a str>,
    /// The provider's id for the response.
    pub response_id: Option<&'a str>,
    /// `gen_ai.response.finish_reasons`' one value, when the call answered.
    pub finish_reason: Option<&'static str>,
    /// Tokens as reported.
    pub usage: Option<&'a Usage>,
    /// The call's cost.
    pub cost_usd: Option<f64>,
    /// Tool calls the answer asked for, when it answered.
    pub tool_calls: Option<u32>,
    /// From the request to the first stream event.
    pub time_to_first_event: Option<Duration>,
    /// `error.type`, when the call failed.
    pub error_type: Option<&'static str>,
    /// The answer as JSON, with content capture on only.
    pub output_messages: Option<String>,
}

/// What a tool call's span starts with.
#[derive(Debug)]
#[non_exhaustive]
pub struct ToolStart<'a> {
    /// The tool (the run's shared name: a refcount, not a copy).
    pub name: &'a Arc<str>,
    /// The model's call id.
    pub call_id: &'a str,
    /// The round.
    pub iteration: u32,
}

/// A run's totals.
#[derive(Debug)]
#[non_exhaustive]
pub struct RunTotals<'a> {
    /// Tool rounds run.
    pub iterations: u32,
    /// Model calls made.
    pub model_calls: usize,
    /// Every model call's tokens.
    pub usage: &'a Usage,
    /// The run's cost.
    pub cost_usd: Option<f64>,
}

/// How a run ended.
#[derive(Debug)]
#[non_exhaustive]
pub struct RunEnd {
    /// `stop`, `aborted`, `error`, …
    pub finish_reason: &'static str,
    /// `error.type`, when the run failed.
    pub error_type: Option<&'static str>,
    /// Which budget ended the run, when one did.
    pub budget: Option<&'static str>,
}

/// A `tracing_subscriber` layer that does nothing but carry a [`SpanSink`], so the loop
/// finds it in the current subscriber (once per run). Give it a per-layer filter that
/// enables nothing (`LevelFilter::OFF`), so it takes no part in any span or event.
#[derive(Clone)]
pub struct SpanHook(Arc<dyn SpanSink>);

impl SpanHook {
    /// A hook for `sink`.
    pub fn new(sink: Arc<dyn SpanSink>) -> Self {
        Self(sink)
    }
}

impl std::fmt::Debug for SpanHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SpanHook")
    }
}

impl<S: Subscriber> tracing_subscriber::Layer<S> for SpanHook {}

/// The spans in scope on this thread: the run being polled, and the tool call being polled
/// inside it.
#[derive(Default)]
struct Current {
    run: Option<Arc<dyn RunSpan>>,
    tool: Option<Arc<dyn ToolSpan>>,
}

thread_local! {
    static CURRENT: RefCell<Current> = RefCell::new(Current::default());
}

/// The run's span from the current subscriber's sink, or `None` when it has none (then the
/// loop's `tracing` spans are made as before). `start` is called only with a sink.
pub(crate) fn start_run<'a>(start: impl FnOnce() -> RunStart<'a>) -> Option<Arc<dyn RunSpan>> {
    let sink = tracing::dispatcher::get_default(|dispatch| {
        dispatch
            .downcast_ref::<SpanHook>()
            .map(|hook| hook.0.clone())
    })?;
    let parent = CURRENT
        .try_with(|current| current.try_borrow().ok().and_then(|c| c.tool.clone()))
        .ok()
        .flatten();
    Some(sink.start_run(&start(), parent.as_deref()))
}

/// Calls `f` with the run's span in scope, if any.
pub(crate) fn with_run<T>(f: impl FnOnce(&dyn RunSpan) -> T) -> Option<T> {
    let run = CURRENT
        .try_with(|current| current.try_borrow().ok().and_then(|c| c.run.clone()))
        .ok()
        .flatten()?;
    Some(f(&*run))
}

/// Calls `f` with the tool call's span in scope, if any.
pub(crate) fn with_tool(f: impl FnOnce(&dyn ToolSpan)) {
    let tool = CURRENT
        .try_with(|current| current.try_borrow().ok().and_then(|c| c.tool.clone()))
        .ok()
        .flatten();
    if let Some(tool) = tool {
        f(&*tool);
    }
}

/// Runs `f` with `swap` applied to the thread's current spans before and after: the spans
/// move in for the poll and back out, nothing is refcounted.
fn swapped<T>(mut swap: impl FnMut(&mut Current), f: impl FnOnce() -> T) -> T {
    let mut apply = || {
        let _ = CURRENT.try_with(|current| {
            if let Ok(mut current) = current.try_borrow_mut() {
                swap(&mut current);
            }
        });
    };
    apply();
    let out = f();
    apply();
    out
}

pin_project_lite::pin_project! {
    /// A run's future, polled with the run's span in scope (and no tool call's, so a
    /// sub-agent's calls are its own); a plain pass-through without a span.
    pub(crate) struct RunScope<F> {
        #[pin]
        inner: F,
        run: Option<Arc<dyn RunSpan>>,
        tool: Option<Arc<dyn ToolSpan>>,
    }
}

/// `inner` polled with `run` in scope.
pub(crate) fn run_scope<F>(run: Option<Arc<dyn RunSpan>>, inner: F) -> RunScope<F> {
    RunScope {
        inner,
        run,
        tool: None,
    }
}

impl<F: Future> Future for RunScope<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        if this.run.is_none() {
            return this.inner.poll(cx);
        }
        let (run, tool, inner) = (this.run, this.tool, this.inner);
        swapped(
            |current| {
                std::mem::swap(&mut current.run, run);
                std::mem::swap(&mut current.tool, tool);
            },
            || inner.poll(cx),
        )
    }
}

/// What a tool call's future is polled in: its `tracing` span entered (no sink), or its
/// sink span in the thread's slot. One of the two, in the room of one span handle.
enum CallSpan {
    Traced(tracing::Span),
    /// `None` only during a poll (the span is in the slot then).
    Direct(Option<Arc<dyn ToolSpan>>),
    Done,
}

pin_project_lite::pin_project! {
    /// A tool call's future, polled in its span; it gives the sink's span back with the
    /// output, for its end.
    pub(crate) struct CallScope<F> {
        #[pin]
        inner: F,
        span: CallSpan,
    }
}

/// `inner` polled with `tool` in scope when the run has a sink, else in `span`; its output
/// comes with `tool`.
pub(crate) fn call_scope<F>(
    span: tracing::Span,
    tool: Option<Arc<dyn ToolSpan>>,
    inner: F,
) -> CallScope<F> {
    CallScope {
        inner,
        span: match tool {
            Some(tool) => CallSpan::Direct(Some(tool)),
            None => CallSpan::Traced(span),
        },
    }
}

impl<F: Future> Future for CallScope<F> {
    type Output = (F::Output, Option<Arc<dyn ToolSpan>>);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let polled = match this.span {
            CallSpan::Traced(span) => {
                let _entered = span.enter();
                this.inner.poll(cx)
            }
            CallSpan::Direct(tool) => {
                let inner = this.inner;
                swapped(
                    |current| std::mem::swap(&mut current.tool, tool),
                    || inner.poll(cx),
                )
            }
            CallSpan::Done => return Poll::Pending,
        };
        match polled {
            Poll::Ready(output) => match std::mem::replace(this.span, CallSpan::Done) {
                CallSpan::Direct(tool) => Poll::Ready((output, tool)),
                _ => Poll::Ready((output, None)),
            },
            Poll::Pending => Poll::Pending,
        }
    }
}

/// `Auto` or `Return`, as the `tracing` span's `?options.mode` formats it.
pub(crate) fn tool_mode(mode: &crate::options::ToolMode) -> &'static str {
    match mode {
        crate::options::ToolMode::Auto => "Auto",
        crate::options::ToolMode::Return => "Return",
    }
}
