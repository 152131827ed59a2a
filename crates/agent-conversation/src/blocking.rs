//! Running blocking storage work without stalling the async runtime.

use crate::error::Error;

/// Runs `work` on Tokio's blocking thread pool and waits for it, so file writes, `fsync` and
/// SQLite calls never occupy a runtime worker thread.
///
/// Outside a Tokio runtime (a caller driving the future with another executor, or none) there
/// is no pool to hand the work to, so it runs inline: blocking the caller's thread is then the
/// caller's choice, and it beats panicking.
///
/// If the returned future is dropped, the work still runs to the end: a turn is either written
/// whole or cut away, never abandoned half-written.
pub(crate) async fn run_blocking<T, F>(work: F) -> Result<T, Error>
where
    F: FnOnce() -> Result<T, Error> + Send + 'static,
    T: Send + 'static,
{
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime
            .spawn_blocking(work)
            .await
            .map_err(|error| Error::TaskFailed(error.to_string()))?,
        Err(_) => work(),
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;

    #[test]
    fn runs_inline_without_a_runtime() {
        let caller = std::thread::current().id();
        let mut future = pin!(run_blocking(move || Ok(std::thread::current().id())));
        let Poll::Ready(ran_on) = future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        else {
            panic!("inline work should finish in one poll");
        };
        assert_eq!(ran_on.unwrap(), caller);
    }

    #[test]
    fn runs_on_the_blocking_pool_inside_a_runtime() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let caller = std::thread::current().id();
        let ran_on = runtime
            .block_on(run_blocking(|| Ok(std::thread::current().id())))
            .unwrap();
        assert_ne!(
            ran_on, caller,
            "blocking work ran on the runtime's own thread"
        );
    }

    #[test]
    fn a_panicking_task_is_an_error_not_a_panic() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let result: Result<(), Error> = runtime.block_on(run_blocking(|| panic!("storage bug")));
        assert!(matches!(result, Err(Error::TaskFailed(_))), "{result:?}");
    }
}
