//! The scripted backend across calls: order, exhaustion, cycling, delays, hangs, recording
//! and capabilities.

use std::sync::Arc;
use std::time::Duration;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_types::{Backend, BackendErrorKind, Capabilities, ModelRequest, StreamEvent};
use futures_util::StreamExt;
use tokio::time::Instant;

use crate::{call, events, request, start, text};

#[tokio::test]
async fn turns_play_in_order_one_per_call() {
    let backend = ScriptedBackend::new([ScriptedTurn::text("one"), ScriptedTurn::text("two")]);
    assert_eq!(backend.calls(), 0);
    let first = events(&backend).await;
    let second = events(&backend).await;
    assert_eq!(first[..2], [start(1), text("one")]);
    assert_eq!(second[..2], [start(2), text("two")]);
    assert_eq!(backend.calls(), 2);
}

#[tokio::test]
async fn turns_go_to_calls_in_the_order_the_calls_start() {
    let backend = ScriptedBackend::new([ScriptedTurn::text("first"), ScriptedTurn::text("second")]);
    let request = request();
    // Both calls start before either is polled, as parallel sub-agents would.
    let a = backend.stream(&request);
    let b = backend.stream(&request);
    let b: Vec<_> = b.map(Result::unwrap).collect().await;
    let a: Vec<_> = a.map(Result::unwrap).collect().await;
    assert_eq!(a[1], text("first"));
    assert_eq!(b[1], text("second"));
}

#[tokio::test]
async fn calls_past_the_script_fail_with_one_invalid_request_error() {
    let backend = ScriptedBackend::new([ScriptedTurn::text("only")]);
    events(&backend).await;

    for number in [2, 3] {
        let items = call(&backend, &request()).await;
        assert_eq!(items.len(), 1, "one error, then the end: {items:?}");
        let error = items[0].as_ref().unwrap_err();
        assert_eq!(error.kind, BackendErrorKind::InvalidRequest);
        assert!(!error.is_retryable());
        assert_eq!(
            error.message,
            format!(
                "the scripted backend has 1 turn and call {number} was made; \
                 add turns, or use ScriptedBackend::cycle to repeat them"
            )
        );
    }
    assert_eq!(backend.calls(), 3);

    let empty = ScriptedBackend::new([]);
    let items = call(&empty, &request()).await;
    let error = items[0].as_ref().unwrap_err();
    assert!(
        error
            .message
            .starts_with("the scripted backend has 0 turns and call 1 was made"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn cycle_repeats_the_script_forever() {
    let backend = ScriptedBackend::cycle([ScriptedTurn::text("ping"), ScriptedTurn::text("pong")]);
    let mut said = Vec::new();
    for n in 1..=5 {
        let events = events(&backend).await;
        assert_eq!(events[0], start(n));
        let StreamEvent::TextDelta { delta } = &events[1] else {
            panic!("no text in {events:?}")
        };
        said.push(delta.clone());
    }
    assert_eq!(said, ["ping", "pong", "ping", "pong", "ping"]);
    assert_eq!(backend.calls(), 5);

    // An empty cycle has nothing to repeat: it fails rather than spinning or panicking.
    let empty = ScriptedBackend::cycle([]);
    assert!(call(&empty, &request()).await[0].is_err());
}

#[tokio::test(start_paused = true)]
async fn delays_pause_before_the_next_step() {
    let turn = ScriptedTurn::text("before")
        .with_delay(Duration::from_secs(2))
        .with_text("after")
        .with_delay(Duration::from_millis(500));
    let backend = ScriptedBackend::new([turn]);
    let request = request();
    let mut stream = backend.stream(&request);

    let began = Instant::now();
    assert_eq!(stream.next().await.unwrap().unwrap(), start(1));
    assert_eq!(stream.next().await.unwrap().unwrap(), text("before"));
    assert_eq!(began.elapsed(), Duration::ZERO);

    // The next event is not there a moment before the pause ends...
    let early = tokio::time::timeout(Duration::from_millis(1_999), stream.next()).await;
    assert!(early.is_err(), "the delay was skipped");
    // ...and is there when it does.
    assert_eq!(stream.next().await.unwrap().unwrap(), text("after"));
    assert_eq!(began.elapsed(), Duration::from_secs(2));

    // A trailing delay holds back the finish.
    assert!(matches!(
        stream.next().await.unwrap().unwrap(),
        StreamEvent::Finish { .. }
    ));
    assert_eq!(began.elapsed(), Duration::from_millis(2_500));
    assert!(stream.next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_hang_stays_pending_until_dropped() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::text("partial").hang(),
        ScriptedTurn::text("next call"),
    ]);
    let request = request();
    let mut stream = backend.stream(&request);
    assert_eq!(stream.next().await.unwrap().unwrap(), start(1));
    assert_eq!(stream.next().await.unwrap().unwrap(), text("partial"));

    // An hour of (paused) time passes and nothing comes, not even the end.
    let waited = tokio::time::timeout(Duration::from_secs(3_600), stream.next()).await;
    assert!(waited.is_err(), "a hung stream yielded {waited:?}");
    let again = tokio::time::timeout(Duration::from_secs(1), stream.next()).await;
    assert!(again.is_err(), "a hung stream yielded {again:?}");

    // Dropping the stream is the cancellation; the backend carries on with the next turn.
    drop(stream);
    assert_eq!(events(&backend).await[1], text("next call"));
}

#[tokio::test]
async fn recording_keeps_every_request_in_order() {
    let quiet = ScriptedBackend::new([ScriptedTurn::text("a")]);
    events(&quiet).await;
    assert!(quiet.requests().is_empty(), "recording is off by default");

    let backend = ScriptedBackend::new([ScriptedTurn::text("a")]).recording();
    let first = request();
    let mut second = request();
    second.model = "other-model".into();
    second.system = Some("Be brief.".into());
    call(&backend, &first).await;
    // A call past the script is still a request received.
    call(&backend, &second).await;
    assert_eq!(backend.requests(), [first, second]);
}

#[tokio::test]
async fn message_start_names_the_requested_model_unless_told_otherwise() {
    let echo = ScriptedBackend::new([ScriptedTurn::text("a"), ScriptedTurn::text("b")]);
    let mut other = request();
    other.model = "gpt-test".into();
    let items = call(&echo, &other).await;
    assert_eq!(
        items[0],
        Ok(StreamEvent::MessageStart {
            id: Some("scripted_1".into()),
            model: Some("gpt-test".into()),
        })
    );
    // No model in the request, none in the event.
    let nameless = ModelRequest::default();
    let items = call(&echo, &nameless).await;
    assert_eq!(
        items[0],
        Ok(StreamEvent::MessageStart {
            id: Some("scripted_2".into()),
            model: None,
        })
    );

    let fixed = ScriptedBackend::new([ScriptedTurn::text("a")]).with_model("claude-test");
    let items = call(&fixed, &other).await;
    assert_eq!(
        items[0],
        Ok(StreamEvent::MessageStart {
            id: Some("scripted_1".into()),
            model: Some("claude-test".into()),
        })
    );
}

#[test]
fn capabilities_default_to_everything_but_prompt_caching() {
    let backend = ScriptedBackend::new([]);
    assert_eq!(
        backend.capabilities(),
        Capabilities {
            tools: true,
            streaming: true,
            parallel_tool_calls: true,
            thinking: true,
            prompt_caching: false,
            usage_reporting: true,
            structured_output: false,
            tool_search: false,
        }
    );

    let toolless = Capabilities {
        streaming: true,
        ..Capabilities::default()
    };
    let backend = ScriptedBackend::new([]).with_capabilities(toolless);
    assert_eq!(backend.capabilities(), toolless);
}

#[tokio::test]
async fn works_behind_dyn_backend_from_several_tasks() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<ScriptedBackend>();

    let backend: Arc<dyn Backend> = Arc::new(ScriptedBackend::cycle([ScriptedTurn::text("hi")]));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let backend = Arc::clone(&backend);
            tokio::spawn(async move {
                let request = request();
                let events: Vec<_> = backend.stream(&request).collect().await;
                events.len()
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), 3);
    }
}
