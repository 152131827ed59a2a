//! Turning the loop's future into a stream of events: the [`Emitter`] the loop writes to and
//! the [`EventStream`] a consumer reads.
//!
//! The loop is one `async fn`. When streaming, it pushes each event into a queue shared with
//! the [`EventStream`] and yields once, so the stream hands the event out before the loop goes
//! on (a consumer that stops reading stops the loop: back-pressure). Without streaming the
//! emitter is off and no event is even built, so [`generate`](crate::generate) and
//! [`generate_stream`](crate::generate_stream) are the same code.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use agent_types::{AgentError, AgentEvent, same_waker};
use futures_core::Stream;

use crate::result::GenerateResult;

type Queue = Arc<Mutex<VecDeque<AgentEvent>>>;

/// Where the loop sends events. Cloning shares the queue (parallel tool calls emit too).
#[derive(Clone, Default)]
pub(crate) struct Emitter {
    queue: Option<Queue>,
}

impl Emitter {
    /// An emitter that builds nothing.
    pub(crate) fn off() -> Self {
        Self { queue: None }
    }

    /// Whether events are wanted; check before building an expensive one.
    pub(crate) fn is_on(&self) -> bool {
        self.queue.is_some()
    }

    /// Queues `event`; awaiting the returned future lets the consumer take it before the
    /// loop continues. (A plain function returning a reference-free future, so the loop's
    /// futures stay `Send` without higher-ranked lifetime trouble.)
    pub(crate) fn emit(&self, event: AgentEvent) -> YieldOnce {
        self.emit_with(|| event)
    }

    /// Queues `event` behind the one just emitted, to go out in the same yield.
    pub(crate) fn queue(&self, event: AgentEvent) {
        if let Some(queue) = &self.queue {
            lock(queue).push_back(event);
        }
    }

    /// Queues the event `build` makes, only if events are on.
    pub(crate) fn emit_with(&self, build: impl FnOnce() -> AgentEvent) -> YieldOnce {
        match &self.queue {
            Some(queue) => {
                lock(queue).push_back(build());
                YieldOnce(false)
            }
            None => YieldOnce(true),
        }
    }
}

fn lock(queue: &Queue) -> MutexGuard<'_, VecDeque<AgentEvent>> {
    // Only ever locked for a push or a pop; a panic cannot leave the deque inconsistent.
    queue.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Returns `Pending` once (waking itself), so the stream gets to hand out what was queued.
pub(crate) struct YieldOnce(bool);

/// Lets the stream hand out what a handler queued (a sub-agent's events) before it goes on.
pub(crate) fn yield_once() -> YieldOnce {
    YieldOnce(false)
}

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

type RunFuture<'a> = Pin<Box<dyn Future<Output = Result<GenerateResult, AgentError>> + Send + 'a>>;

/// The events of a run as they happen, and its result at the end.
///
/// Read the events with [`StreamExt::next`](futures_util::StreamExt::next); after the last
/// one (`session_end`), [`result`](Self::result) gives the run's outcome. Calling `result`
/// early runs the rest of the loop without handing out its events. Dropping the stream
/// cancels the run where it stands (like dropping any future).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use agent_backends::{ScriptedBackend, ScriptedTurn};
/// use agent_loop::{Options, Session, execute_stream};
/// use agent_types::AgentEvent;
/// use futures_util::StreamExt;
///
/// let backend = ScriptedBackend::new([ScriptedTurn::text("Hello!")]);
/// let mut session = Session::new("test-model");
/// let mut stream = execute_stream(&mut session, "Hi", &backend, &Options::default());
/// let mut text = String::new();
/// while let Some(event) = stream.next().await {
///     if let AgentEvent::TextDelta { delta } = event {
///         text.push_str(&delta);
///     }
/// }
/// let result = stream.result().await.unwrap();
/// assert_eq!(text, result.text());
/// # }
/// ```
#[must_use = "a stream does nothing unless polled"]
pub struct EventStream<'a> {
    run: Option<RunFuture<'a>>,
    queue: Queue,
    outcome: Option<Result<GenerateResult, AgentError>>,
    /// The waker the run is polled with (see [`Relay`]).
    relay: Arc<Relay>,
    relay_waker: Waker,
    /// The consumer's waker as last handed to the relay.
    consumer: Option<Waker>,
}

/// The waker the stream polls the run with, standing between the run and the consumer's
/// waker.
///
/// Each event's yield wakes its task so that the stream gets to hand the event out. When the
/// stream does hand one out, that wake is redundant (the consumer polls again for the next
/// event) and costs a trip through the scheduler and a spurious poll of the whole run, per
/// event: under many concurrent runs most of an event's cost. So a wake during the stream's
/// own poll of the run is only noted, and passed on only if the stream returns `Pending`;
/// a wake at any other time (I/O, timers) goes straight to the consumer's waker.
///
/// The relay also remembers whether the run was woken at all since its last poll: a
/// consumer that drained the queue and polls again finds the run asleep (waiting for the
/// provider's next chunk) and gets `Pending` without the whole run being polled for
/// nothing, once per batch of events.
struct Relay {
    /// [`WOKEN`] and [`POLLING`]: the relay's state, without a lock, so that entering and
    /// leaving a poll of the run and a wake during it are an atomic operation each.
    flags: AtomicU8,
    /// The consumer's waker, for a wake while the stream is not polling the run. Locked only
    /// for such a wake and when the consumer's waker changes.
    consumer: Mutex<Option<Waker>>,
}

/// Woken since the run's last poll began (so it has something to do); set at the start.
const WOKEN: u8 = 1;
/// The stream is polling the run: a wake is only noted.
const POLLING: u8 = 2;

impl Default for Relay {
    fn default() -> Self {
        Self {
            flags: AtomicU8::new(WOKEN),
            consumer: Mutex::new(None),
        }
    }
}

impl Relay {
    /// Before polling the run for a consumer polling with `waker` (`known` is the waker last
    /// handed to the relay, kept by the stream so an unchanged one costs no lock): `false`
    /// when the run was not woken since its last poll, so polling it again would only find
    /// it waiting (the consumer's waker is kept for the wake that ends the wait).
    fn enter(&self, known: &mut Option<Waker>, waker: &Waker) -> bool {
        if !known.as_ref().is_some_and(|known| same_waker(known, waker)) {
            *known = Some(waker.clone());
            // Only a waker behind it: a panic cannot leave it inconsistent.
            *self.consumer.lock().unwrap_or_else(PoisonError::into_inner) = Some(waker.clone());
        }
        // Outside a poll the flags are `WOKEN` or nothing.
        self.flags
            .compare_exchange(WOKEN, POLLING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// After polling the run: whether it was woken meanwhile (it stays marked woken, so the
    /// next poll polls it).
    fn leave(&self) -> bool {
        self.flags.fetch_and(!POLLING, Ordering::AcqRel) & WOKEN != 0
    }
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.flags.fetch_or(WOKEN, Ordering::AcqRel) & POLLING == 0
            && let Some(consumer) = &*self.consumer.lock().unwrap_or_else(PoisonError::into_inner)
        {
            consumer.wake_by_ref();
        }
    }
}

impl<'a> EventStream<'a> {
    /// Builds the stream: `start` receives the emitter and returns the run's future.
    pub(crate) fn new<F, Fut>(start: F) -> Self
    where
        F: FnOnce(Emitter) -> Fut,
        Fut: Future<Output = Result<GenerateResult, AgentError>> + Send + 'a,
    {
        let queue = Queue::default();
        let emitter = Emitter {
            queue: Some(Arc::clone(&queue)),
        };
        let relay = Arc::new(Relay::default());
        Self {
            run: Some(Box::pin(start(emitter))),
            queue,
            outcome: None,
            relay_waker: Waker::from(Arc::clone(&relay)),
            relay,
            consumer: None,
        }
    }

    /// The run's outcome. Runs whatever is left of the loop first, dropping its events.
    ///
    /// # Errors
    ///
    /// The [`AgentError`] that ended the run, with the partial trace and messages.
    pub async fn result(mut self) -> Result<GenerateResult, AgentError> {
        if let Some(mut run) = self.run.take() {
            // Through the relay still: what the run registered with it during the stream
            // must reach this task (which may not be the one that read the events).
            let relay = Arc::clone(&self.relay);
            let relay_waker = self.relay_waker.clone();
            let mut known = self.consumer.take();
            let outcome = std::future::poll_fn(|cx| {
                if !relay.enter(&mut known, cx.waker()) {
                    return Poll::Pending;
                }
                let polled = run.as_mut().poll(&mut Context::from_waker(&relay_waker));
                if relay.leave() && polled.is_pending() {
                    cx.waker().wake_by_ref();
                }
                polled
            })
            .await;
            lock(&self.queue).clear();
            return outcome;
        }
        self.outcome.take().unwrap_or_else(|| {
            Err(AgentError::config(
                "the run's result was already taken from this stream",
            ))
        })
    }
}

impl Stream for EventStream<'_> {
    type Item = AgentEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        let this = &mut *self;
        if let Some(event) = lock(&this.queue).pop_front() {
            return Poll::Ready(Some(event));
        }
        let Some(run) = this.run.as_mut() else {
            return Poll::Ready(None);
        };
        if !this.relay.enter(&mut this.consumer, cx.waker()) {
            return Poll::Pending;
        }
        let polled = run
            .as_mut()
            .poll(&mut Context::from_waker(&this.relay_waker));
        let woken = this.relay.leave();
        if let Poll::Ready(outcome) = polled {
            this.run = None;
            this.outcome = Some(outcome);
        }
        match lock(&this.queue).pop_front() {
            Some(event) => Poll::Ready(Some(event)),
            None if this.run.is_none() => Poll::Ready(None),
            None => {
                if woken {
                    cx.waker().wake_by_ref();
                }
                Poll::Pending
            }
        }
    }
}

impl std::fmt::Debug for EventStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("running", &self.run.is_some())
            .field("queued", &lock(&self.queue).len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    struct Flag(AtomicBool);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    // tokio's `block_on` waker and its clone are the same waker, which `will_wake` does not
    // see (issue 16: the stream, the model call's race and the HTTP driver's timer keep a
    // clone and compare it with the waker of each poll).
    #[test]
    fn a_clone_of_the_block_on_waker_is_the_same_waker() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (will_wake, same) = runtime.block_on(std::future::poll_fn(|cx| {
            let clone = cx.waker().clone();
            Poll::Ready((clone.will_wake(cx.waker()), same_waker(&clone, cx.waker())))
        }));
        assert!(same);
        // In a release build (rustc 1.95, tokio 1.54) `will_wake` is false here: a clone
        // carries a copy of the vtable at another address. A debug build may share one.
        let _ = will_wake;
        let other = Waker::from(Arc::new(Flag(AtomicBool::new(false))));
        assert!(!same_waker(&other, &Waker::noop().clone()));
        assert!(same_waker(&other, &other.clone()));
    }

    // The stream hands the relay the consumer's waker only when it changes (issue 16): a
    // consumer that polls with a new waker is woken at that one when the run can go on.
    #[test]
    fn a_consumer_that_changes_its_waker_is_woken_at_the_new_one() {
        let gate = Arc::new(tokio::sync::Notify::new());
        let opened = Arc::clone(&gate);
        let mut stream = EventStream::new(move |emitter| async move {
            emitter.queue(AgentEvent::TextDelta { delta: "a".into() });
            opened.notified().await;
            Err(AgentError::config("done"))
        });
        let first = Arc::new(Flag(AtomicBool::new(false)));
        let second = Arc::new(Flag(AtomicBool::new(false)));
        let first_waker = Waker::from(Arc::clone(&first));
        let second_waker = Waker::from(Arc::clone(&second));
        let mut stream = Pin::new(&mut stream);
        let mut first_cx = Context::from_waker(&first_waker);
        assert!(matches!(
            stream.as_mut().poll_next(&mut first_cx),
            Poll::Ready(Some(AgentEvent::TextDelta { .. }))
        ));
        assert!(stream.as_mut().poll_next(&mut first_cx).is_pending());
        let mut second_cx = Context::from_waker(&second_waker);
        assert!(stream.as_mut().poll_next(&mut second_cx).is_pending());
        gate.notify_one();
        assert!(second.0.load(Ordering::SeqCst));
        assert!(!first.0.load(Ordering::SeqCst));
        assert!(matches!(
            stream.as_mut().poll_next(&mut second_cx),
            Poll::Ready(None)
        ));
    }
}
