//! A future raced against the run's cancellation and a timeout: the one way the loop waits on
//! anything it does not control (a model call, a summarizer call, a hook).

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use agent_types::{AgentError, BackendError, BackendErrorKind, ErrorKind};
use futures_util::future::{Either, select};
use tokio_util::sync::CancellationToken;

/// The outcome of a future raced against cancellation and a timeout.
pub(crate) enum Bounded<T> {
    Done(T),
    Cancelled,
    TimedOut(Duration),
}

/// Runs `future` until it ends, `token` fires, or `timeout` passes.
pub(crate) async fn bounded<F: Future>(
    future: F,
    token: &CancellationToken,
    timeout: Option<Duration>,
) -> Bounded<F::Output> {
    let cancelled = pin!(token.cancelled());
    let future = pin!(future);
    let raced = async {
        match select(future, cancelled).await {
            Either::Left((output, _)) => Bounded::Done(output),
            Either::Right(((), _)) => Bounded::Cancelled,
        }
    };
    match timeout {
        Some(limit) => tokio::time::timeout(limit, raced)
            .await
            .unwrap_or(Bounded::TimedOut(limit)),
        None => raced.await,
    }
}

/// The error a bounded model-call stream pump ended with, or `None` when the stream reached
/// its finish event (`finished`). `call` names the call ("the model call") and `stream` its
/// stream ("the model's stream") in the messages.
pub(crate) fn call_failure(
    pumped: Bounded<Result<(), BackendError>>,
    finished: bool,
    call: &str,
    stream: &str,
) -> Option<AgentError> {
    match pumped {
        Bounded::Done(Ok(())) if finished => None,
        Bounded::Done(Ok(())) => Some(AgentError::from(BackendError::new(
            BackendErrorKind::Protocol,
            format!("{stream} ended before its finish event"),
        ))),
        Bounded::Done(Err(error)) => Some(AgentError::from(error)),
        Bounded::Cancelled => Some(AgentError::new(
            ErrorKind::Aborted,
            format!("the run was cancelled during {call}"),
        )),
        Bounded::TimedOut(limit) => Some(AgentError::from(BackendError::new(
            BackendErrorKind::Timeout,
            format!("{call} took longer than its {limit:?} timeout"),
        ))),
    }
}
