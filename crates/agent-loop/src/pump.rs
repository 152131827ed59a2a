//! [`Pump`]: a model call's stream folded into its message, its events handed to the
//! consumer a batch at a time.
//!
//! Each stream event goes through the call's [`MessageAssembler`], and the agent events it
//! implies are queued for the consumer. The pump does not yield after each event: it takes
//! everything the stream has ready (what one chunk of the provider's body carried) and then
//! waits for the stream, so the consumer drains the batch from the queue without the run
//! being polled once per event. After [`BATCH`] stream events it yields all the same, so a
//! stream that is always ready (a replay, a scripted backend) still hands its events out as
//! it goes and a consumer that stops reading stops it (back-pressure).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use agent_types::{BackendError, BackendStream, MessageAssembler};
use tokio::time::Instant;

use crate::events::Emitter;
use crate::output::PartialOutput;

/// Stream events taken in one poll before the pump yields to the consumer.
const BATCH: usize = 16;

/// Reads one model call's stream to its end (a hand-written future: nothing of the loop's
/// `async` machinery runs per event). Resolves to the stream's first error, if any.
pub(crate) struct Pump<'a, 'o> {
    /// The backend's stream for the call.
    pub(crate) stream: BackendStream<'a>,
    /// Where the events go (off for `generate`: then the assembler builds none).
    pub(crate) emitter: &'a Emitter,
    /// The call's message being built.
    pub(crate) assembler: &'a mut MessageAssembler,
    /// The structured answer parsed as it streams, when one is asked for and events are on.
    pub(crate) partial: &'a mut Option<Box<PartialOutput<'o>>>,
    /// When the first stream event came, counted from `started`.
    pub(crate) first_event: &'a mut Option<Duration>,
    /// When the call began.
    pub(crate) started: Instant,
}

impl Future for Pump<'_, '_> {
    type Output = Result<(), BackendError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut taken = 0;
        loop {
            let item = match this.stream.as_mut().poll_next(cx) {
                Poll::Ready(Some(item)) => item,
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            };
            let started = this.started;
            this.first_event.get_or_insert_with(|| started.elapsed());
            if let Err(error) = item.and_then(|event| this.assembler.push(event)) {
                return Poll::Ready(Err(error));
            }
            while let Some(event) = this.assembler.next_event() {
                let grew = this
                    .partial
                    .as_mut()
                    .is_some_and(|partial| partial.observe(&event));
                this.emitter.queue(event);
                // The partial answer goes out with the delta that grew it.
                if grew && let Some(grown) = this.partial.as_ref().and_then(|p| p.latest()) {
                    this.emitter.queue(grown);
                }
            }
            taken += 1;
            if taken == BATCH && this.emitter.is_on() {
                // Let the consumer take the batch before reading on (see the module's doc).
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
    }
}
