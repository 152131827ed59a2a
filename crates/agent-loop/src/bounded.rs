//! A future raced against the run's cancellation and a timeout: the one way the loop waits on
//! anything it does not control (a model call, a summarizer call, a hook).

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use agent_types::{AgentError, BackendError, BackendErrorKind, ErrorKind};
use futures_util::task::AtomicWaker;
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
    let future = pin!(future);
    let cancelled = pin!(token.cancelled());
    let raced = Race::new(future, cancelled);
    match timeout {
        Some(limit) => tokio::time::timeout(limit, raced)
            .await
            .unwrap_or(Bounded::TimedOut(limit)),
        None => raced.await,
    }
}

/// `future` raced against `cancelled`, which is polled only when it may have become ready.
///
/// A model call's future is polled once per chunk of the provider's body; polling the
/// token's `cancelled()` beside it each time (as `select` does) took the token's lock and
/// re-registered its waker per chunk for a token that almost never fires. Here `cancelled`
/// is polled with a waker of its own ([`Watch`]) that notes the wake and passes it on to the
/// task: it is polled at the first poll and again only after that waker was woken. The
/// task's waker is handed to the watch when it changes (`same_waker`), not at every poll.
struct Race<'a, F, C> {
    future: Pin<&'a mut F>,
    cancelled: Pin<&'a mut C>,
    watch: Arc<Watch>,
    watch_waker: Waker,
    /// The task's waker the watch wakes, as last handed to it.
    task: Option<Waker>,
}

/// The waker `cancelled` is polled with.
struct Watch {
    /// Woken since `cancelled` was last polled (set at the start, so the first poll polls it).
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Watch {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<'a, F: Future, C: Future<Output = ()>> Race<'a, F, C> {
    fn new(future: Pin<&'a mut F>, cancelled: Pin<&'a mut C>) -> Self {
        let watch = Arc::new(Watch {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        Self {
            future,
            cancelled,
            watch_waker: Waker::from(Arc::clone(&watch)),
            watch,
            task: None,
        }
    }
}

impl<F: Future, C: Future<Output = ()>> Future for Race<'_, F, C> {
    type Output = Bounded<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        // The future first, as `select` did: a call that ends as the run is cancelled ends.
        if let Poll::Ready(output) = this.future.as_mut().poll(cx) {
            return Poll::Ready(Bounded::Done(output));
        }
        if !this
            .task
            .as_ref()
            .is_some_and(|task| agent_types::same_waker(task, cx.waker()))
        {
            this.watch.task.register(cx.waker());
            this.task = Some(cx.waker().clone());
        }
        if this.watch.woken.load(Ordering::Acquire)
            && this.watch.woken.swap(false, Ordering::AcqRel)
        {
            // The watch gave its task waker away when woken: hand it the task's again.
            this.watch.task.register(cx.waker());
            let mut watched = Context::from_waker(&this.watch_waker);
            if this.cancelled.as_mut().poll(&mut watched).is_ready() {
                return Poll::Ready(Bounded::Cancelled);
            }
        }
        Poll::Pending
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Pending `left` more times (waking itself each time), then ready.
    struct Chunks {
        left: usize,
    }

    impl Future for Chunks {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.left == 0 {
                return Poll::Ready(());
            }
            self.left -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// A cancellation future that counts its polls.
    struct Counted<'a> {
        inner: Pin<Box<tokio_util::sync::WaitForCancellationFuture<'a>>>,
        polls: &'a AtomicUsize,
    }

    impl Future for Counted<'_> {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            self.inner.as_mut().poll(cx)
        }
    }

    #[tokio::test]
    async fn the_token_is_polled_once_not_once_per_poll_of_the_call() {
        let token = CancellationToken::new();
        let polls = AtomicUsize::new(0);
        let mut cancelled = Counted {
            inner: Box::pin(token.cancelled()),
            polls: &polls,
        };
        let mut call = Chunks { left: 100 };
        let raced = Race::new(Pin::new(&mut call), Pin::new(&mut cancelled)).await;
        assert!(matches!(raced, Bounded::Done(())));
        // `select` polled it 101 times.
        assert_eq!(polls.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_cancel_while_the_call_waits_ends_the_race() {
        let token = CancellationToken::new();
        let polls = AtomicUsize::new(0);
        let mut cancelled = Counted {
            inner: Box::pin(token.cancelled()),
            polls: &polls,
        };
        let mut call = std::future::pending::<()>();
        let canceller = {
            let token = token.clone();
            tokio::spawn(async move {
                tokio::task::yield_now().await;
                token.cancel();
            })
        };
        let raced = Race::new(Pin::new(&mut call), Pin::new(&mut cancelled)).await;
        assert!(matches!(raced, Bounded::Cancelled));
        assert_eq!(polls.load(Ordering::Relaxed), 2);
        canceller.await.unwrap();
    }

    #[test]
    fn a_cancel_wakes_the_waker_the_race_was_polled_with_last() {
        struct Flag(AtomicBool);
        impl Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let token = CancellationToken::new();
        let mut call = std::future::pending::<()>();
        let mut cancelled = pin!(token.cancelled());
        let mut raced = Race::new(Pin::new(&mut call), cancelled.as_mut());
        let first = Arc::new(Flag(AtomicBool::new(false)));
        let second = Arc::new(Flag(AtomicBool::new(false)));
        let first_waker = Waker::from(Arc::clone(&first));
        let second_waker = Waker::from(Arc::clone(&second));
        let mut raced = Pin::new(&mut raced);
        assert!(
            raced
                .as_mut()
                .poll(&mut Context::from_waker(&first_waker))
                .is_pending()
        );
        assert!(
            raced
                .as_mut()
                .poll(&mut Context::from_waker(&second_waker))
                .is_pending()
        );
        token.cancel();
        assert!(!first.0.load(Ordering::SeqCst));
        assert!(second.0.load(Ordering::SeqCst));
        assert!(matches!(
            raced.as_mut().poll(&mut Context::from_waker(&second_waker)),
            Poll::Ready(Bounded::Cancelled)
        ));
    }
}
