//! The [`Handler`] trait, the events a handler yields, and the guard that runs one safely.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};

use futures_core::Stream;
use futures_util::StreamExt;
use futures_util::future::{Either, select};
use serde_json::Value;

use crate::context::ToolContext;
use crate::error::ToolError;

/// One item of a handler's output: progress deltas, then exactly one final result.
///
/// Streaming handlers yield `ToolEvent<T>` with their own result type `T`; the tool turns the
/// final `T` into JSON, so what leaves a [`Handler`] is always `ToolEvent<Value>`.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolEvent<T = Value> {
    /// Progress text for whoever watches the call (not sent to the model).
    Delta(String),
    /// The final result; nothing follows it.
    Done(Result<T, ToolError>),
}

impl<T> ToolEvent<T> {
    /// A progress delta.
    pub fn delta(text: impl Into<String>) -> Self {
        Self::Delta(text.into())
    }

    /// A successful final result.
    pub fn ok(value: T) -> Self {
        Self::Done(Ok(value))
    }

    /// A failed final result.
    pub fn err(error: ToolError) -> Self {
        Self::Done(Err(error))
    }
}

/// The output of a running handler.
pub type ToolStream = Pin<Box<dyn Stream<Item = ToolEvent> + Send + 'static>>;

/// Runs a tool: takes the (validated) arguments and a context, returns the output stream.
///
/// Object-safe and shared as `Arc<dyn Handler>`, so one handler serves many concurrent calls.
/// Most code never implements this directly: the constructors on [`Tool`](crate::Tool) wrap
/// async functions and streams. Whatever an implementation does, callers reach it through
/// [`Tool::invoke`](crate::Tool::invoke), which catches panics, honors cancellation and
/// guarantees exactly one [`ToolEvent::Done`] at the end.
pub trait Handler: Send + Sync + 'static {
    /// Starts one call.
    fn call(&self, arguments: Value, context: ToolContext) -> ToolStream;
}

/// A finished call: the deltas seen and the final result.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// Every progress delta, in order.
    pub deltas: Vec<String>,
    /// The final result.
    pub result: Result<Value, ToolError>,
}

/// Drives `stream` to its end and gathers what it yielded.
///
/// A stream that ends without a final result (which [`Tool::invoke`](crate::Tool::invoke)
/// never produces) counts as a fatal error.
pub async fn collect_output(mut stream: ToolStream) -> ToolOutput {
    let mut deltas = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            ToolEvent::Delta(text) => deltas.push(text),
            ToolEvent::Done(result) => return ToolOutput { deltas, result },
        }
    }
    ToolOutput {
        deltas,
        result: Err(missing_result()),
    }
}

fn missing_result() -> ToolError {
    ToolError::fatal("the tool handler ended without a result")
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "no message".to_owned()
    }
}

pub(crate) fn done(error: ToolError) -> ToolStream {
    Box::pin(futures_util::stream::once(std::future::ready(
        ToolEvent::Done(Err(error)),
    )))
}

/// Runs `handler` so that nothing it does escapes: a panic (while starting the call or while
/// polling its stream) becomes a [`ToolErrorKind::Panicked`](crate::ToolErrorKind::Panicked)
/// error, the context's [hard stop](ToolContext::hard_stop) (its cancellation token unless a
/// separate one is set) drops the handler and ends with
/// [`ToolError::cancelled`], anything after the first `Done` is ignored, and a stream that ends
/// without `Done` ends with a fatal error.
pub(crate) fn guarded(handler: &dyn Handler, arguments: Value, context: ToolContext) -> ToolStream {
    let token = context.hard_stop().clone();
    if token.is_cancelled() {
        return done(ToolError::cancelled());
    }
    // The handler's synchronous part runs here, outside any future, so it needs its own guard.
    let inner =
        match std::panic::catch_unwind(AssertUnwindSafe(|| handler.call(arguments, context))) {
            Ok(stream) => stream,
            Err(payload) => return done(ToolError::panicked(&panic_message(payload.as_ref()))),
        };
    Box::pin(async_stream::stream! {
        // The stream is only polled from here and dropped on panic, so no broken state is observed.
        let mut inner = AssertUnwindSafe(inner).catch_unwind();
        let mut cancelled = pin!(token.cancelled());
        loop {
            let next = match select(inner.next(), cancelled.as_mut()).await {
                Either::Left((next, _)) => next,
                Either::Right(((), _)) => {
                    yield ToolEvent::Done(Err(ToolError::cancelled()));
                    return;
                }
            };
            match next {
                Some(Ok(ToolEvent::Delta(text))) => yield ToolEvent::Delta(text),
                Some(Ok(ToolEvent::Done(result))) => {
                    yield ToolEvent::Done(result);
                    return;
                }
                Some(Err(payload)) => {
                    yield ToolEvent::Done(Err(ToolError::panicked(&panic_message(payload.as_ref()))));
                    return;
                }
                None => {
                    yield ToolEvent::Done(Err(missing_result()));
                    return;
                }
            }
        }
    })
}
