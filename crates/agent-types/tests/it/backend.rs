//! The backend trait as the loop uses it: behind `dyn`, polled without a runtime, cancelled
//! by dropping its stream.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

use agent_types::{
    Backend, BackendError, BackendErrorKind, BackendStream, Capabilities, Message, ModelRequest,
    StopReason, StreamEvent,
};
use futures_core::Stream;

/// A stream over a vector of items, ready at every poll. `guard` stands for a backend's
/// in-flight state (an HTTP response body, a connection permit): it lives as long as the stream.
struct Iter<T> {
    items: std::vec::IntoIter<T>,
    _guard: Option<InFlight>,
}

impl<T: Unpin> Stream for Iter<T> {
    type Item = T;

    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<T>> {
        Poll::Ready(self.items.next())
    }
}

/// Sets its flag when dropped, which is how the test sees the call being cancelled.
struct InFlight(Arc<AtomicBool>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Answers every request by echoing the last user text, in two deltas.
#[derive(Default)]
struct Echo {
    dropped: Arc<AtomicBool>,
    calls: AtomicUsize,
}

impl Backend for Echo {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            streaming: true,
            ..Capabilities::default()
        }
    }

    fn stream<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let text = match request.messages.last() {
            Some(Message::User(user)) => format!("{:?}", user.content),
            _ => String::new(),
        };
        let (head, tail) = text.split_at(text.len() / 2);
        let items: Vec<Result<StreamEvent, BackendError>> = if request.model == "broken" {
            vec![Err(BackendError::new(BackendErrorKind::Server, "boom"))]
        } else {
            vec![
                Ok(StreamEvent::MessageStart {
                    id: None,
                    model: Some(request.model.clone()),
                }),
                Ok(StreamEvent::TextDelta { delta: head.into() }),
                Ok(StreamEvent::TextDelta { delta: tail.into() }),
                Ok(StreamEvent::Finish {
                    stop_reason: StopReason::Stop,
                }),
            ]
        };
        Box::pin(Iter {
            items: items.into_iter(),
            _guard: Some(InFlight(Arc::clone(&self.dropped))),
        })
    }
}

/// Polls a stream to its end with a no-op waker: no runtime needed for a ready stream.
fn collect(mut stream: BackendStream<'_>) -> Vec<Result<StreamEvent, BackendError>> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    loop {
        match stream.as_mut().poll_next(&mut cx) {
            Poll::Ready(Some(item)) => out.push(item),
            Poll::Ready(None) => return out,
            Poll::Pending => panic!("a ready stream returned Pending"),
        }
    }
}

/// Written against `dyn Backend`: compiles only if the trait is dyn-compatible.
fn run(backend: &dyn Backend, request: &ModelRequest) -> Vec<Result<StreamEvent, BackendError>> {
    collect(backend.stream(request))
}

/// Generic over any backend, so the blanket impls for `&B`, `Arc<B>`, `Box<B>` are exercised.
fn run_generic<B: Backend>(backend: B, request: &ModelRequest) -> usize {
    assert!(backend.capabilities().streaming);
    collect(backend.stream(request)).len()
}

fn request() -> ModelRequest {
    ModelRequest::new("echo-1", vec![Message::user("hello")])
}

#[test]
fn usable_as_arc_box_and_ref_dyn() {
    let request = request();

    let arc: Arc<dyn Backend> = Arc::new(Echo::default());
    assert_eq!(run(arc.as_ref(), &request).len(), 4);
    assert_eq!(run_generic(Arc::clone(&arc), &request), 4);
    // An Arc'd backend can be shared with other threads, as a server would.
    let shared = Arc::clone(&arc);
    let from_thread = std::thread::spawn(move || run_generic(shared, &request_for_thread()))
        .join()
        .unwrap();
    assert_eq!(from_thread, 4);

    let boxed: Box<dyn Backend> = Box::new(Echo::default());
    assert_eq!(run(&*boxed, &request).len(), 4);
    assert_eq!(run_generic(&boxed, &request), 4);
    assert_eq!(run_generic(boxed, &request), 4);

    let echo = Echo::default();
    let by_ref: &dyn Backend = &echo;
    assert_eq!(run(by_ref, &request).len(), 4);
    assert_eq!(run_generic(by_ref, &request), 4);
    assert_eq!(echo.calls.load(Ordering::SeqCst), 2);

    fn assert_send_sync<T: Send + Sync + ?Sized>() {}
    assert_send_sync::<dyn Backend>();
    fn assert_send<T: Send>(_: &T) {}
    assert_send(&echo.stream(&request));
}

fn request_for_thread() -> ModelRequest {
    request()
}

#[test]
fn stream_yields_normalized_events_and_errors() {
    let echo = Echo::default();
    let events = run(&echo, &request());
    let text: String = events
        .iter()
        .filter_map(|event| match event {
            Ok(StreamEvent::TextDelta { delta }) => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert!(text.contains("hello"), "{text}");
    assert_eq!(
        events.last(),
        Some(&Ok(StreamEvent::Finish {
            stop_reason: StopReason::Stop
        }))
    );

    let broken = ModelRequest::new("broken", Vec::new());
    let events = run(&echo, &broken);
    assert!(matches!(&events[..], [Err(error)] if error.is_retryable()));
}

#[test]
fn dropping_the_stream_cancels_the_call() {
    let echo = Echo::default();
    let request = request();
    let mut stream = echo.stream(&request);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(matches!(
        stream.as_mut().poll_next(&mut cx),
        Poll::Ready(Some(Ok(StreamEvent::MessageStart { .. })))
    ));
    assert!(
        !echo.dropped.load(Ordering::SeqCst),
        "in-flight state released while the stream is alive"
    );
    // The consumer gives up half way: dropping the stream is the cancellation.
    drop(stream);
    assert!(
        echo.dropped.load(Ordering::SeqCst),
        "dropping the stream did not release the call's in-flight state"
    );
}
