//! Cancellation: the token stops a model call or a tool round, handlers that honour it get a
//! grace period and keep their results, handlers that ignore it are dropped after the grace
//! period, the history stays valid, and the session can go on. Dropping a stream is a
//! cancellation too.
//!
//! Every test runs on tokio's paused clock, so "one hour" costs nothing and elapsed times are
//! exact.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_conversation::MemoryAppender;
use agent_loop::{Options, Session, SessionStatus, ToolParallelism, execute, execute_stream};
use agent_tools::Tool;
use agent_types::{AgentError, AgentEvent, ErrorKind, Message, StopReason, ToolCall, ToolResult};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::time::{Instant, sleep, timeout};
use tokio_util::sync::CancellationToken;

use crate::support::{collect, kind, registry, sleep_tool, weather_tool};

const MODEL: &str = "test-model";
const DENVER: &str = r#"{"city":"Denver","sky":"sunny","temp_c":21}"#;

/// Cancels `token` after `delay` on tokio's clock.
fn cancel_after(token: &CancellationToken, delay: Duration) {
    let token = token.clone();
    tokio::spawn(async move {
        sleep(delay).await;
        token.cancel();
    });
}

/// Fails the test instead of hanging it when a run does not end (a minute of paused time
/// costs nothing).
async fn ends<T>(run: impl std::future::Future<Output = T>) -> T {
    timeout(Duration::from_secs(60), run)
        .await
        .expect("the run should end soon after the cancellation")
}

/// `careful`: works for an hour unless cancelled; when cancelled it takes 100 ms to save what
/// it has, records that its cleanup ran, and returns a partial result.
fn careful_tool(cleaned_up: Arc<AtomicBool>) -> Tool {
    Tool::from_json_fn(
        "careful",
        "Long work that stops cleanly when cancelled.",
        json!({"type": "object"}),
        move |_args: Value, ctx| {
            let cleaned_up = Arc::clone(&cleaned_up);
            async move {
                tokio::select! {
                    () = ctx.cancellation().cancelled() => {
                        sleep(Duration::from_millis(100)).await;
                        cleaned_up.store(true, Ordering::SeqCst);
                        Ok(json!({"stopped": "early", "saved_rows": 3}))
                    }
                    () = sleep(Duration::from_secs(3600)) => Ok(json!({"done": true})),
                }
            }
        },
    )
}

/// `stubborn`: sleeps an hour and never looks at its token.
fn stubborn_tool() -> Tool {
    Tool::from_json_fn(
        "stubborn",
        "Long work that ignores cancellation.",
        json!({"type": "object"}),
        |_args: Value, _ctx| async move {
            sleep(Duration::from_secs(3600)).await;
            Ok(json!({"done": true}))
        },
    )
}

fn weather_call(id: &str) -> ToolCall {
    ToolCall::new(id, "get_weather", json!({"city": "Denver"}))
}

fn tool_result(message: &Message) -> &ToolResult {
    match message {
        Message::Tool(result) => result,
        other => panic!("expected a tool result, got {other:?}"),
    }
}

fn assert_aborted(error: &AgentError) {
    assert_eq!(error.kind, ErrorKind::Aborted, "{error}");
    assert_eq!(error.status(), 499);
    assert!(error.is_aborted());
}

/// Every tool call in `messages` has exactly one result after it, before the next assistant
/// turn: what providers require of a history.
fn assert_every_call_answered(messages: &[Message]) {
    let mut open: Vec<String> = Vec::new();
    for message in messages {
        match message {
            Message::Assistant(assistant) => {
                assert!(open.is_empty(), "calls {open:?} have no result");
                open = assistant
                    .tool_calls()
                    .map(|call| call.id.as_str().to_owned())
                    .collect();
            }
            Message::Tool(result) => {
                let at = open
                    .iter()
                    .position(|id| id == result.tool_call_id.as_str())
                    .unwrap_or_else(|| panic!("a result for no open call: {result:?}"));
                open.remove(at);
            }
            _ => assert!(open.is_empty(), "calls {open:?} have no result"),
        }
    }
    assert!(open.is_empty(), "calls {open:?} have no result");
}

#[tokio::test(start_paused = true)]
async fn cancelling_during_a_model_call_stops_it_and_returns_aborted_with_the_trace() {
    let token = CancellationToken::new();
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_cancellation(token.clone());
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Denver"})),
        // The second call streams a little, then the provider goes quiet for good.
        ScriptedTurn::new().with_text("partial").hang(),
    ]);
    let mut session = Session::new(MODEL);
    cancel_after(&token, Duration::from_secs(1));

    let started = Instant::now();
    let error = ends(execute(&mut session, "Weather?", &backend, &options))
        .await
        .unwrap_err();

    assert_eq!(started.elapsed(), Duration::from_secs(1));
    assert_aborted(&error);
    assert_eq!(backend.calls(), 2);
    // The round that completed is in the trace and the partial messages.
    assert_eq!(error.partial_trace.len(), 1);
    assert_eq!(error.partial_trace[0].tool_name, "get_weather");
    assert_eq!(error.partial_messages.len(), 2);
    assert_eq!(
        error.partial_messages[1],
        Message::Tool(ToolResult::ok("call_1", "get_weather", DENVER))
    );
    assert_eq!(session.status, SessionStatus::Aborted);
    assert_eq!(session.messages.len(), 3);
    assert_eq!(session.messages[1..], error.partial_messages[..]);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_stream_shows_the_partial_message_then_error_then_session_end() {
    let token = CancellationToken::new();
    let options = Options::default().with_cancellation(token.clone());
    let backend = ScriptedBackend::new([ScriptedTurn::new().with_text("partial").hang()]);
    let mut session = Session::new(MODEL);
    cancel_after(&token, Duration::from_secs(1));

    let (events, result) = ends(collect(execute_stream(
        &mut session,
        "Hi",
        &backend,
        &options,
    )))
    .await;
    assert_aborted(&result.unwrap_err());

    let kinds: Vec<String> = events.iter().map(kind).collect();
    assert_eq!(
        kinds,
        [
            "session_start",
            "message_start",
            "text_start",
            "text_delta",
            "text_end",
            "message_end",
            "error",
            "session_end"
        ]
    );
    match &events[5] {
        AgentEvent::MessageEnd {
            message: Message::Assistant(partial),
            ..
        } => {
            assert_eq!(partial.text_content(), "partial");
            assert_eq!(partial.stop_reason, Some(StopReason::Aborted));
        }
        other => panic!("{other:?}"),
    }
    match &events[6] {
        AgentEvent::Error { error } => assert!(error.is_aborted()),
        other => panic!("{other:?}"),
    }
    match &events[7] {
        AgentEvent::SessionEnd { finish_reason, .. } => {
            assert_eq!(*finish_reason, StopReason::Aborted);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(session.status, SessionStatus::Aborted);
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_honours_its_token_finishes_within_the_grace_period_and_keeps_its_result() {
    let token = CancellationToken::new();
    let cleaned_up = Arc::new(AtomicBool::new(false));
    let appender = MemoryAppender::new();
    let options = Options::auto()
        .with_tools(registry([
            weather_tool(),
            careful_tool(Arc::clone(&cleaned_up)),
        ]))
        .with_cancellation(token.clone())
        .with_cancel_grace(Duration::from_secs(5))
        .with_conversation(Arc::new(appender.clone()));
    let backend = ScriptedBackend::new([ScriptedTurn::tool_calls([
        weather_call("call_w"),
        ToolCall::new("call_c", "careful", json!({})),
    ])]);
    let mut session = Session::new(MODEL);
    cancel_after(&token, Duration::from_secs(1));

    let started = Instant::now();
    let error = ends(execute(&mut session, "Do both.", &backend, &options))
        .await
        .unwrap_err();

    // The handler's own 100 ms of cleanup, not the 5 s grace period.
    assert_eq!(started.elapsed(), Duration::from_millis(1100));
    assert!(
        cleaned_up.load(Ordering::SeqCst),
        "the handler's cleanup ran"
    );
    assert_aborted(&error);

    let results: Vec<&ToolResult> = error.partial_messages[1..]
        .iter()
        .map(tool_result)
        .collect();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0], &ToolResult::ok("call_w", "get_weather", DENVER));
    assert_eq!(results[1].tool_call_id.as_str(), "call_c");
    assert!(!results[1].is_error);
    assert_eq!(results[1].content, r#"{"saved_rows":3,"stopped":"early"}"#);
    assert_eq!(error.partial_trace.len(), 2);

    // Kept everywhere: the session, the partial messages, the appender.
    assert_eq!(session.status, SessionStatus::Aborted);
    assert_eq!(session.messages[1..], error.partial_messages[..]);
    assert_eq!(appender.messages(), error.partial_messages);
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_ignores_its_token_is_dropped_after_the_grace_period() {
    let token = CancellationToken::new();
    let appender = MemoryAppender::new();
    let grace = Duration::from_secs(2);
    let options = Options::auto()
        .with_tools(registry([weather_tool(), stubborn_tool()]))
        .with_cancellation(token.clone())
        .with_cancel_grace(grace)
        .with_conversation(Arc::new(appender.clone()));
    let backend = ScriptedBackend::new([ScriptedTurn::tool_calls([
        weather_call("call_w"),
        ToolCall::new("call_s", "stubborn", json!({})),
    ])]);
    let mut session = Session::new(MODEL);
    cancel_after(&token, Duration::from_secs(1));

    let started = Instant::now();
    let error = ends(execute(&mut session, "Do both.", &backend, &options))
        .await
        .unwrap_err();

    // Cancelled at 1 s, dropped when the grace period ran out: not an hour later.
    assert_eq!(started.elapsed(), Duration::from_secs(1) + grace);
    assert_aborted(&error);

    // The call that finished before the cancel keeps its result; the other gets an error
    // result saying it did not complete, so the history stays valid.
    let results: Vec<&ToolResult> = error.partial_messages[1..]
        .iter()
        .map(tool_result)
        .collect();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0], &ToolResult::ok("call_w", "get_weather", DENVER));
    assert_eq!(results[1].tool_call_id.as_str(), "call_s");
    assert!(results[1].is_error);
    assert!(
        results[1].content.contains("cancelled before it finished"),
        "{}",
        results[1].content
    );
    assert_eq!(session.status, SessionStatus::Aborted);
    assert_eq!(session.messages[1..], error.partial_messages[..]);
    assert_eq!(appender.messages(), error.partial_messages);
    assert_every_call_answered(&session.messages);

    // The next user message runs fine (with a token that is not cancelled), on the kept
    // history.
    let options = options.with_cancellation(CancellationToken::new());
    let backend = ScriptedBackend::new([ScriptedTurn::text(
        "Denver is sunny; the other job stopped.",
    )])
    .recording();
    let result = execute(&mut session, "What happened?", &backend, &options)
        .await
        .unwrap();
    assert_eq!(result.status, SessionStatus::Completed);
    assert_eq!(session.status, SessionStatus::Completed);
    let sent = &backend.requests()[0].messages;
    assert_eq!(sent.len(), 5);
    assert_every_call_answered(sent);
}

#[tokio::test(start_paused = true)]
async fn calls_not_started_when_the_run_is_cancelled_are_not_run() {
    let token = CancellationToken::new();
    let options = Options::auto()
        .with_tools(registry([weather_tool(), stubborn_tool()]))
        .with_tool_parallelism(ToolParallelism::Serial)
        .with_cancellation(token.clone())
        .with_cancel_grace(Duration::from_millis(500));
    let backend = ScriptedBackend::new([ScriptedTurn::tool_calls([
        ToolCall::new("call_s", "stubborn", json!({})),
        weather_call("call_w"),
    ])]);
    let mut session = Session::new(MODEL);
    cancel_after(&token, Duration::from_secs(1));

    let started = Instant::now();
    let (events, result) = ends(collect(execute_stream(
        &mut session,
        "Do both.",
        &backend,
        &options,
    )))
    .await;
    let error = result.unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_millis(1500));
    assert_aborted(&error);

    let results: Vec<&ToolResult> = error.partial_messages[1..]
        .iter()
        .map(tool_result)
        .collect();
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|result| result.is_error));
    assert!(
        results[1].content.contains("not run"),
        "{}",
        results[1].content
    );
    // Even a call that never ran is announced and closed in the events.
    let ends_of: HashSet<&str> = events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::ToolExecutionEnd { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ends_of, HashSet::from(["call_s", "call_w"]));
    assert_every_call_answered(&session.messages);
}

#[tokio::test(start_paused = true)]
async fn a_run_cancelled_before_it_starts_makes_no_model_call() {
    let token = CancellationToken::new();
    token.cancel();
    let options = Options::default().with_cancellation(token);
    let backend = ScriptedBackend::new([ScriptedTurn::text("never")]);
    let mut session = Session::new(MODEL);
    let error = execute(&mut session, "Hi", &backend, &options)
        .await
        .unwrap_err();
    assert_aborted(&error);
    assert_eq!(backend.calls(), 0);
    assert_eq!(session.status, SessionStatus::Aborted);
    // The user's message is kept, so the next run can answer it.
    assert_eq!(session.messages, [Message::user("Hi")]);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_stream_mid_tool_keeps_the_history_and_the_next_run_closes_the_open_call() {
    let options = Options::auto().with_tools(registry([sleep_tool()]));
    let backend = ScriptedBackend::new([ScriptedTurn::tool_call(
        "call_1",
        "sleep",
        json!({"millis": 10_000}),
    )]);
    let mut session = Session::new(MODEL);
    {
        let mut stream = execute_stream(&mut session, "Nap.", &backend, &options);
        while let Some(event) = stream.next().await {
            if matches!(event, AgentEvent::ToolExecutionStart { .. }) {
                break;
            }
        }
        // The consumer goes away while the tool sleeps.
    }
    assert_eq!(session.status, SessionStatus::Aborted);
    assert_eq!(session.messages.len(), 2, "{:#?}", session.messages);
    assert_eq!(session.messages[0], Message::user("Nap."));
    let call: Vec<&ToolCall> = match &session.messages[1] {
        Message::Assistant(assistant) => assistant.tool_calls().collect(),
        other => panic!("{other:?}"),
    };
    assert_eq!(call[0].id.as_str(), "call_1");

    // The next run answers the call that never finished before sending anything.
    let backend = ScriptedBackend::new([ScriptedTurn::text("Awake.")]).recording();
    let result = execute(&mut session, "Still there?", &backend, &options)
        .await
        .unwrap();
    assert_eq!(result.status, SessionStatus::Completed);
    let sent = &backend.requests()[0].messages;
    assert_eq!(sent.len(), 4);
    let closed = tool_result(&sent[2]);
    assert_eq!(closed.tool_call_id.as_str(), "call_1");
    assert!(closed.is_error);
    assert!(closed.content.contains("not run"), "{}", closed.content);
    assert_eq!(sent[3], Message::user("Still there?"));
    assert_every_call_answered(&session.messages);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_stream_mid_model_call_keeps_the_completed_rounds() {
    let options = Options::auto().with_tools(registry([weather_tool()]));
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Denver"})),
        ScriptedTurn::new().with_text("Half an ans").hang(),
    ]);
    let mut session = Session::new(MODEL);
    {
        let mut stream = execute_stream(&mut session, "Weather?", &backend, &options);
        let mut deltas = 0;
        while let Some(event) = stream.next().await {
            if matches!(event, AgentEvent::TextDelta { .. }) {
                deltas += 1;
                break;
            }
        }
        assert_eq!(deltas, 1);
    }
    assert_eq!(backend.calls(), 2);
    assert_eq!(session.status, SessionStatus::Aborted);
    assert_eq!(session.messages.len(), 3);
    assert_eq!(
        session.messages[2],
        Message::Tool(ToolResult::ok("call_1", "get_weather", DENVER))
    );
    assert_every_call_answered(&session.messages);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_run_still_counts_the_model_calls_it_made_on_the_session() {
    let options = Options::auto()
        .with_tools(registry([sleep_tool()]))
        .with_rate_card(agent_types::RateCard::new().with(
            MODEL,
            agent_types::ModelPrice {
                input_per_mtok: 1000.0,
                output_per_mtok: 2000.0,
                ..agent_types::ModelPrice::default()
            },
        ));
    let backend = ScriptedBackend::new([ScriptedTurn::tool_call(
        "call_1",
        "sleep",
        json!({"millis": 10_000}),
    )
    .with_usage(crate::support::usage(100, 10))]);
    let mut session = Session::new(MODEL);
    {
        let mut stream = execute_stream(&mut session, "Nap.", &backend, &options);
        while let Some(event) = stream.next().await {
            if matches!(event, AgentEvent::ToolExecutionStart { .. }) {
                break;
            }
        }
    }
    // The tokens were spent and the message that reports them is in the history: the
    // session's totals must say so too.
    assert_eq!(session.status, SessionStatus::Aborted);
    assert_eq!(session.usage, crate::support::usage(100, 10));
    let cost = session.cost_usd.expect("the dropped run's cost");
    assert!((cost - 0.12).abs() < 1e-9, "{cost}");
}
