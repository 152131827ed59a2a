//! Streaming: events come out while each round runs (model deltas, tool progress), in the
//! documented order, with usage and cost on `message_end` and the run's finish reason only on
//! `session_end`; budgets end a stream with `error` then `session_end`; `generate` and
//! `generate_stream` are the same loop; and a consumer that stops reading stops the loop.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{Input, Options, Session, execute_stream, generate, generate_stream};
use agent_tools::{Tool, ToolEvent};
use agent_types::{
    AgentEvent, Budget, Message, ModelPrice, RateCard, Role, StopReason, ToolCall, Usage,
};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::{Instant, sleep};

use crate::support::{collect, kind, registry, usage, weather_tool};

const MODEL: &str = "test-model";

/// $1 per million input tokens, $2 per million output tokens.
fn rate_card() -> RateCard {
    RateCard::new().with(
        MODEL,
        ModelPrice {
            input_per_mtok: 1.0,
            output_per_mtok: 2.0,
            ..ModelPrice::default()
        },
    )
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Count {
    /// How far to count.
    n: u32,
}

/// `count(n)`: reports "i/n" as progress every `step`, then returns `{"counted": n}`.
fn count_tool(step: Duration) -> Tool {
    Tool::streaming("count", "Counts to n, slowly.", move |args: Count, _ctx| {
        async_stream::stream! {
            for i in 1..=args.n {
                if !step.is_zero() {
                    sleep(step).await;
                }
                yield ToolEvent::delta(format!("{i}/{}", args.n));
            }
            yield ToolEvent::ok(json!({"counted": args.n}));
        }
    })
}

/// Whether `value` has a `key` anywhere inside it.
fn has_key(value: &Value, key: &str) -> bool {
    match value {
        Value::Object(map) => map
            .iter()
            .any(|(name, inner)| name == key || has_key(inner, key)),
        Value::Array(items) => items.iter().any(|inner| has_key(inner, key)),
        _ => false,
    }
}

/// The order contract of `AgentEvent` that every run must keep: `session_start` first and
/// once, `session_end` last and once and the only event with a finish reason, `error` only
/// right before `session_end`, and every text or thinking block closed before anything else.
fn assert_contract(events: &[AgentEvent]) {
    let kinds: Vec<String> = events.iter().map(kind).collect();
    assert_eq!(kinds.first().map(String::as_str), Some("session_start"));
    assert_eq!(kinds.last().map(String::as_str), Some("session_end"));
    assert_eq!(kinds.iter().filter(|k| *k == "session_start").count(), 1);
    assert_eq!(kinds.iter().filter(|k| *k == "session_end").count(), 1);
    if let Some(at) = kinds.iter().position(|k| k == "error") {
        assert_eq!(
            at,
            kinds.len() - 2,
            "error must be right before session_end"
        );
    }
    for (event, kind) in events.iter().zip(&kinds) {
        let json = serde_json::to_value(event).unwrap();
        assert_eq!(
            has_key(&json, "finish_reason"),
            kind == "session_end",
            "{kind} carries a finish reason: {json}"
        );
    }
    let mut open: Option<&str> = None;
    for kind in &kinds {
        match (open, kind.as_str()) {
            (None, "text_start") => open = Some("text"),
            (None, "thinking_start") => open = Some("thinking"),
            (Some("text"), "text_delta") | (Some("thinking"), "thinking_delta") => {}
            (Some("text"), "text_end") | (Some("thinking"), "thinking_end") => open = None,
            (Some(block), other) => panic!("{other} while a {block} block is open: {kinds:?}"),
            (None, "text_delta" | "text_end" | "thinking_delta" | "thinking_end") => {
                panic!("{kind} outside a block: {kinds:?}")
            }
            _ => {}
        }
    }
    assert_eq!(open, None, "a block was never closed: {kinds:?}");
}

fn finish_reason(events: &[AgentEvent]) -> StopReason {
    match events.last() {
        Some(AgentEvent::SessionEnd { finish_reason, .. }) => *finish_reason,
        other => panic!("the last event is not session_end: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn deltas_stream_out_while_each_round_runs() {
    let options = Options::auto().with_tools(registry([weather_tool()]));
    let backend = ScriptedBackend::new([
        ScriptedTurn::new()
            .with_thinking("Need the weather.", None)
            .with_text("Checking Denver.")
            .with_tool_call(ToolCall::new(
                "call_1",
                "get_weather",
                json!({"city": "Denver"}),
            ))
            .chunked(3),
        ScriptedTurn::new()
            .with_text("Sunny")
            .with_delay(Duration::from_secs(1))
            .with_text(" and 21 °C.")
            .chunked(3),
    ]);
    let started = Instant::now();
    let mut stream = generate_stream(&backend, Input::new(MODEL).user("Denver?"), &options);
    let mut timed = Vec::new();
    while let Some(event) = stream.next().await {
        timed.push((started.elapsed(), event));
    }
    stream.result().await.unwrap();
    let events: Vec<AgentEvent> = timed.iter().map(|(_, event)| event.clone()).collect();
    assert_contract(&events);

    // Each block arrives as several small deltas that add up to the block.
    let mut thinking = String::new();
    let mut text = Vec::new();
    let mut arguments = String::new();
    let mut pieces = 0;
    for event in &events {
        match event {
            AgentEvent::ThinkingDelta { delta } => thinking.push_str(delta),
            AgentEvent::TextDelta { delta } => text.push(delta.clone()),
            AgentEvent::ToolCallDelta { index: 0, delta } => arguments.push_str(delta),
            AgentEvent::ThinkingEnd { thinking: whole } => assert_eq!(whole, &thinking),
            AgentEvent::ToolCallEnd { tool_call, .. } => {
                assert_eq!(tool_call.arguments, json!({"city": "Denver"}));
            }
            _ => continue,
        }
        if let AgentEvent::ThinkingDelta { delta }
        | AgentEvent::TextDelta { delta }
        | AgentEvent::ToolCallDelta { delta, .. } = event
        {
            assert!(delta.len() <= 3 || delta.chars().count() == 1, "{delta:?}");
            pieces += 1;
        }
    }
    assert_eq!(thinking, "Need the weather.");
    assert_eq!(arguments, r#"{"city":"Denver"}"#);
    assert_eq!(text.concat(), "Checking Denver.Sunny and 21 °C.");
    assert!(pieces > 20, "only {pieces} deltas");

    // The second answer's first words went out before the model paused, the rest after:
    // nothing waited for the model call to end.
    let at = |wanted: &str| {
        timed
            .iter()
            .find(|(_, event)| matches!(event, AgentEvent::TextDelta { delta } if delta == wanted))
            .map(|(at, _)| *at)
            .unwrap()
    };
    assert_eq!(at("Sun"), Duration::ZERO);
    assert_eq!(at("ny"), Duration::ZERO);
    assert_eq!(at(" an"), Duration::from_secs(1));
    let text_ends: Vec<&String> = events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::TextEnd { text } => Some(text),
            _ => None,
        })
        .collect();
    assert_eq!(text_ends, ["Checking Denver.", "Sunny and 21 °C."]);
}

#[tokio::test(start_paused = true)]
async fn a_streaming_handler_reports_progress_between_start_and_end() {
    let step = Duration::from_millis(100);
    let options = Options::auto().with_tools(registry([count_tool(step)]));
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "count", json!({"n": 3})),
        ScriptedTurn::text("Counted to 3."),
    ]);
    let started = Instant::now();
    let mut stream = generate_stream(&backend, Input::new(MODEL).user("Count."), &options);
    let mut timed = Vec::new();
    while let Some(event) = stream.next().await {
        timed.push((started.elapsed(), event));
    }
    stream.result().await.unwrap();
    let events: Vec<AgentEvent> = timed.iter().map(|(_, event)| event.clone()).collect();
    assert_contract(&events);

    let tool_events: Vec<&(Duration, AgentEvent)> = timed
        .iter()
        .filter(|(_, event)| kind(event).starts_with("tool_execution"))
        .collect();
    assert_eq!(tool_events.len(), 5);
    assert_eq!(
        tool_events[0].1,
        AgentEvent::ToolExecutionStart {
            call_id: "call_1".into(),
            tool_name: "count".into(),
            arguments: json!({"n": 3}),
        }
    );
    for (i, (at, event)) in tool_events[1..4].iter().enumerate() {
        // Each progress report goes out when the handler makes it, not when it ends.
        assert_eq!(*at, step * (i as u32 + 1));
        assert_eq!(
            event,
            &AgentEvent::ToolExecutionDelta {
                call_id: "call_1".into(),
                delta: format!("{}/3", i + 1),
            }
        );
    }
    assert_eq!(
        tool_events[4].1,
        AgentEvent::ToolExecutionEnd {
            call_id: "call_1".into(),
            tool_name: "count".into(),
            output: r#"{"counted":3}"#.into(),
            is_error: false,
            truncated: false,
            blocks: Vec::new(),
        }
    );
    // Then the tool message: start and end, after the execution ended.
    let end = events
        .iter()
        .position(|event| matches!(event, AgentEvent::ToolExecutionEnd { .. }))
        .unwrap();
    assert_eq!(
        events[end + 1],
        AgentEvent::MessageStart { role: Role::Tool }
    );
    assert!(matches!(
        &events[end + 2],
        AgentEvent::MessageEnd { message: Message::Tool(result), cost_usd: None }
            if result.content == r#"{"counted":3}"#
    ));
}

#[tokio::test]
async fn message_end_carries_the_calls_usage_and_cost() {
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_rate_card(rate_card());
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Denver"}))
            .with_usage(usage(1000, 100)),
        ScriptedTurn::text("Sunny.").with_usage(usage(3000, 500)),
    ]);
    let (events, result) = collect(generate_stream(
        &backend,
        Input::new(MODEL).user("Denver?"),
        &options,
    ))
    .await;
    let result = result.unwrap();
    assert_contract(&events);

    let ends: Vec<(Role, Option<Usage>, Option<f64>)> = events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::MessageEnd { message, cost_usd } => Some((
                message.role(),
                match message {
                    Message::Assistant(assistant) => assistant.usage,
                    _ => None,
                },
                *cost_usd,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 3);
    assert_eq!(ends[0].0, Role::Assistant);
    assert_eq!(ends[0].1, Some(usage(1000, 100)));
    assert!(
        (ends[0].2.unwrap() - 0.0012).abs() < 1e-12,
        "{:?}",
        ends[0].2
    );
    // A tool message costs nothing by itself.
    assert_eq!((ends[1].0, ends[1].2), (Role::Tool, None));
    assert_eq!(ends[2].1, Some(usage(3000, 500)));
    assert!(
        (ends[2].2.unwrap() - 0.004).abs() < 1e-12,
        "{:?}",
        ends[2].2
    );
    // The result adds them up.
    assert_eq!(result.usage, usage(4000, 600));
    assert!((result.cost_usd.unwrap() - 0.0052).abs() < 1e-12);
}

#[tokio::test]
async fn the_finish_reason_appears_once_on_session_end_whatever_the_outcome() {
    let remote = Tool::remote("approve", "A human approves.", json!({"type": "object"}));
    let options = Options::auto().with_tools(registry([weather_tool(), remote]));
    let runs =
        [
            ("answer", vec![ScriptedTurn::text("Hi.")], StopReason::Stop),
            (
                "length",
                vec![ScriptedTurn::text("Cut sh").finish(StopReason::Length)],
                StopReason::Length,
            ),
            (
                "suspended",
                vec![ScriptedTurn::tool_call("call_1", "approve", json!({}))],
                StopReason::ToolCalls,
            ),
            (
                "backend error",
                vec![ScriptedTurn::new().with_text("Hal").fail_with(
                    agent_types::BackendError::new(
                        agent_types::BackendErrorKind::Server,
                        "upstream died",
                    ),
                )],
                StopReason::Error,
            ),
        ];
    for (case, turns, expected) in runs {
        let backend = ScriptedBackend::new(turns);
        let (events, _) = collect(generate_stream(
            &backend,
            Input::new(MODEL).user("Hi"),
            &options,
        ))
        .await;
        assert_contract(&events);
        assert_eq!(finish_reason(&events), expected, "{case}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_event_sequence_of_a_three_round_run() {
    let options = Options::auto()
        .with_tools(registry([weather_tool(), count_tool(Duration::ZERO)]))
        .with_rate_card(rate_card());
    let backend = ScriptedBackend::new([
        ScriptedTurn::new()
            .with_thinking("The user wants two cities.", Some("sig_1".into()))
            .with_text("Checking Denver first.")
            .with_tool_call(ToolCall::new(
                "call_1",
                "get_weather",
                json!({"city": "Denver"}),
            ))
            .with_usage(usage(120, 30))
            .chunked(12),
        ScriptedTurn::tool_calls([
            ToolCall::new("call_2", "get_weather", json!({"city": "Atlantis"})),
            ToolCall::new("call_3", "count", json!({"n": 2})),
        ])
        .with_usage(usage(200, 20)),
        ScriptedTurn::text("Sunny and 21 °C in Denver; no station in Atlantis.")
            .with_usage(usage(300, 15)),
    ]);
    let mut session = Session::with_id("sess-test", MODEL);
    let (events, result) = collect(execute_stream(
        &mut session,
        "Weather in Denver and Atlantis?",
        &backend,
        &options,
    ))
    .await;
    let result = result.unwrap();
    assert_contract(&events);
    assert_eq!(finish_reason(&events), StopReason::Stop);

    // Nothing in the events depends on the clock, so nothing needs redacting.
    let json = serde_json::to_value(&events).unwrap();
    for key in [
        "duration",
        "duration_us",
        "latency_us",
        "first_event_us",
        "at_unix_ms",
    ] {
        assert!(!has_key(&json, key), "events carry `{key}`");
    }
    match events.last() {
        Some(AgentEvent::SessionEnd { messages, .. }) => assert_eq!(messages, &result.messages),
        other => panic!("{other:?}"),
    }
    insta::assert_json_snapshot!(events);
}

#[tokio::test]
async fn a_token_budget_ends_the_stream_with_error_then_session_end() {
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_token_budget(100);
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Denver"}))
            .with_usage(usage(100, 10)),
        ScriptedTurn::text("never reached"),
    ]);
    let stream = generate_stream(&backend, Input::new(MODEL).user("Denver?"), &options);
    let (events, result) = collect(stream).await;
    let error = result.unwrap_err();
    assert_eq!(error.status(), 429);
    assert_eq!(
        error.budget_exceeded(),
        Some(&Budget::Tokens {
            used: 110,
            max: 100
        })
    );
    assert_budget_tail(&events, &error);
    assert_eq!(backend.calls(), 1);
}

#[tokio::test]
async fn a_cost_budget_ends_the_stream_with_error_then_session_end() {
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_rate_card(rate_card())
        .with_max_cost_usd(0.001);
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Denver"}))
            .with_usage(usage(600, 100)),
        ScriptedTurn::tool_call("call_2", "get_weather", json!({"city": "Paris"}))
            .with_usage(usage(600, 100)),
        ScriptedTurn::text("never reached"),
    ]);
    let stream = generate_stream(&backend, Input::new(MODEL).user("Denver?"), &options);
    let (events, result) = collect(stream).await;
    let error = result.unwrap_err();
    assert_eq!(error.status(), 429);
    assert!(
        matches!(error.budget_exceeded(), Some(Budget::CostUsd { max, .. }) if *max == 0.001),
        "{error}"
    );
    assert_budget_tail(&events, &error);
    // $0.0008 after the first call, $0.0016 after the second.
    assert_eq!(backend.calls(), 2);
}

fn assert_budget_tail(events: &[AgentEvent], error: &agent_types::AgentError) {
    assert_contract(events);
    let tail: Vec<String> = events[events.len() - 2..].iter().map(kind).collect();
    assert_eq!(tail, ["error", "session_end"]);
    assert_eq!(
        events[events.len() - 2],
        AgentEvent::Error {
            error: error.clone()
        }
    );
    assert_eq!(finish_reason(events), StopReason::Error);
    match events.last() {
        Some(AgentEvent::SessionEnd { messages, .. }) => {
            assert_eq!(messages, &error.partial_messages);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn generate_and_generate_stream_give_the_same_result() {
    let options = Options::auto()
        .with_tools(registry([
            weather_tool(),
            count_tool(Duration::from_millis(5)),
        ]))
        .with_rate_card(rate_card())
        .with_tool_trace(true);
    let script = || {
        ScriptedBackend::new([
            ScriptedTurn::new()
                .with_text("Let me look.")
                .with_delay(Duration::from_millis(30))
                .with_tool_call(ToolCall::new(
                    "call_1",
                    "get_weather",
                    json!({"city": "Paris"}),
                ))
                .with_tool_call(ToolCall::new("call_2", "count", json!({"n": 2})))
                .with_usage(usage(50, 5)),
            ScriptedTurn::text("Rain in Paris.").with_usage(usage(80, 8)),
        ])
    };
    let input = || Input::new(MODEL).system("Be brief.").user("Paris?");

    let plain = generate(&script(), input(), &options).await.unwrap();
    let (events, streamed) = collect(generate_stream(script(), input(), &options)).await;
    let mut streamed = streamed.unwrap();
    assert_contract(&events);

    // Each one-off run gets its own session id; everything else is the same.
    streamed.session_id = plain.session_id.clone();
    assert_eq!(streamed, plain);
    assert_eq!(plain.trace.len(), 2);
    assert_eq!(plain.model_calls[0].latency, Duration::from_millis(30));
}

#[tokio::test(start_paused = true)]
async fn a_consumer_that_stops_reading_pauses_the_loop() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let tool = Tool::from_fn(
        "get_weather",
        "Current weather for a city.",
        move |args: crate::support::City, _ctx| {
            let counted = Arc::clone(&counted);
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<_, agent_tools::ToolError>(json!({"city": args.city}))
            }
        },
    );
    let options = Options::auto().with_tools(registry([tool]));
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Denver"})),
        ScriptedTurn::text("Sunny."),
    ]);
    let mut stream = generate_stream(&backend, Input::new(MODEL).user("Denver?"), &options);

    // Read up to the end of the first assistant message, then stop reading.
    let mut read = Vec::new();
    while let Some(event) = stream.next().await {
        let done = matches!(event, AgentEvent::MessageEnd { .. });
        read.push(event);
        if done {
            break;
        }
    }
    // Give anything running in the background every chance to go on.
    sleep(Duration::from_secs(60)).await;
    tokio::task::yield_now().await;
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the tool ran unread");
    assert_eq!(backend.calls(), 1, "the model was called again unread");

    // Reading again resumes the loop where it stood.
    while let Some(event) = stream.next().await {
        read.push(event);
    }
    let result = stream.result().await.unwrap();
    assert_contract(&read);
    assert_eq!(result.text(), "Sunny.");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(backend.calls(), 2);
}

/// Counts how often the scheduler polls the future it wraps.
struct CountPolls<F> {
    inner: std::pin::Pin<Box<F>>,
    polls: usize,
}

impl<F: std::future::Future> std::future::Future for CountPolls<F> {
    type Output = (F::Output, usize);

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        self.polls += 1;
        let polls = self.polls;
        self.inner.as_mut().poll(cx).map(|output| (output, polls))
    }
}

// Each event's yield used to wake the consumer's task, so every wait for the provider
// (every chunk) cost a second, spurious poll of the whole run (issue 16). The stream
// answers its own yields now: one poll per chunk that arrives, plus the run's start and end.
#[tokio::test(start_paused = true)]
async fn a_streamed_run_is_polled_once_per_chunk_not_twice() {
    const CHUNKS: usize = 50;
    let mut turn = ScriptedTurn::new();
    for index in 0..CHUNKS {
        turn = turn
            .with_delay(Duration::from_millis(1))
            .with_text(format!("{index} "));
    }
    let backend = ScriptedBackend::new([turn]);
    let input = Input::new(MODEL).user("Count.");
    let options = Options::default();
    let consume = async {
        let mut stream = generate_stream(&backend, input, &options);
        let mut deltas = 0;
        while let Some(event) = stream.next().await {
            if matches!(event, AgentEvent::TextDelta { .. }) {
                deltas += 1;
            }
        }
        (deltas, stream.result().await.unwrap().text())
    };
    let ((deltas, text), polls) = CountPolls {
        inner: Box::pin(consume),
        polls: 0,
    }
    .await;
    assert_eq!(deltas, CHUNKS);
    assert!(text.starts_with("0 1 2 "), "{text}");
    assert!(
        polls <= CHUNKS + 5,
        "{polls} polls for {CHUNKS} chunks: a yield woke the task again"
    );
}

/// A backend whose stream notes, at each of its polls, how many events the consumer had
/// read by then (`read` is the consumer's count), and how often it was polled.
struct Watched {
    inner: ScriptedBackend,
    read: Arc<AtomicUsize>,
    seen: Arc<std::sync::Mutex<Vec<usize>>>,
}

impl agent_types::Backend for Watched {
    fn capabilities(&self) -> agent_types::Capabilities {
        self.inner.capabilities()
    }

    fn stream<'a>(
        &'a self,
        request: &'a agent_types::ModelRequest,
    ) -> agent_types::BackendStream<'a> {
        let mut inner = self.inner.stream(request);
        let (read, seen) = (Arc::clone(&self.read), Arc::clone(&self.seen));
        Box::pin(futures_util::stream::poll_fn(move |cx| {
            seen.lock().unwrap().push(read.load(Ordering::SeqCst));
            inner.as_mut().poll_next(cx)
        }))
    }
}

// What a chunk of the provider's body carries (here: 20 deltas ready at once) goes to the
// consumer from one poll of the run, not one poll per event (issue 16): the backend's stream
// was read to its end before the consumer had read its first delta.
#[tokio::test]
async fn the_events_ready_at_once_are_taken_in_one_poll_of_the_run() {
    let mut turn = ScriptedTurn::new();
    for index in 0..10 {
        turn = turn.with_text(format!("{index} "));
    }
    let read = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let backend = Watched {
        inner: ScriptedBackend::new([turn]),
        read: Arc::clone(&read),
        seen: Arc::clone(&seen),
    };
    let options = Options::default();
    let mut stream = generate_stream(&backend, Input::new(MODEL).user("Count."), &options);
    let mut deltas = 0;
    while let Some(event) = stream.next().await {
        if matches!(event, AgentEvent::TextDelta { .. }) {
            deltas += 1;
        }
        read.fetch_add(1, Ordering::SeqCst);
    }
    assert_eq!(
        stream.result().await.unwrap().text(),
        "0 1 2 3 4 5 6 7 8 9 "
    );
    assert_eq!(deltas, 10);
    let seen = seen.lock().unwrap().clone();
    // message_start, ten deltas, finish, the end: every poll before the first text delta
    // was read (session_start and message_start went out before the call).
    assert!(
        seen.iter().all(|&read| read <= 2),
        "the stream was polled once per event read: {seen:?}"
    );
}

// A consumer that took every queued event and polls again finds the run waiting for its
// provider: the stream answers `Pending` without polling the whole run again (issue 16), so
// the backend's stream is polled twice per chunk (the chunk, then the wait for the next),
// not three times.
#[tokio::test(start_paused = true)]
async fn a_run_waiting_for_its_provider_is_not_polled_again_by_its_consumer() {
    const CHUNKS: usize = 30;
    let mut turn = ScriptedTurn::new();
    for index in 0..CHUNKS {
        turn = turn
            .with_delay(Duration::from_millis(1))
            .with_text(format!("{index} "));
    }
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let backend = Watched {
        inner: ScriptedBackend::new([turn]),
        read: Arc::new(AtomicUsize::new(0)),
        seen: Arc::clone(&seen),
    };
    let options = Options::default();
    let mut stream = generate_stream(&backend, Input::new(MODEL).user("Count."), &options);
    let mut deltas = 0;
    while let Some(event) = stream.next().await {
        if matches!(event, AgentEvent::TextDelta { .. }) {
            deltas += 1;
        }
    }
    stream.result().await.unwrap();
    assert_eq!(deltas, CHUNKS);
    let polls = seen.lock().unwrap().len();
    assert!(
        polls <= 2 * CHUNKS + 4,
        "{polls} polls of the backend's stream for {CHUNKS} chunks"
    );
}

// The HTTP adapters leave a failed call's partial message to the loop now (the loop asks for
// `Backend::stream_unassembled`, issue 16): a recorded OpenAI stream cut mid-answer still
// ends the run with the text received so far on the error, as when the adapter assembled it.
#[tokio::test]
async fn an_http_stream_cut_mid_answer_ends_the_run_with_the_partial_message() {
    use agent_backends::Provider;
    use agent_backends::replay::{Cassette, ReplayBackend};
    use agent_types::{BackendErrorKind, ErrorKind};

    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/providers/openai-chat/stream-text-usage.sse");
    let body = std::fs::read(path).unwrap();
    let cut = body.len() / 2;
    let whole = Cassette::new(200, "text/event-stream", body.clone());
    let broken = Cassette::new(200, "text/event-stream", body).cut_after(cut);
    let backend = ReplayBackend::start(Provider::OpenAiChat, [whole, broken])
        .await
        .unwrap();
    let options = Options::default();
    let answer = generate(&backend, Input::new("gpt-4o").user("Hi"), &options)
        .await
        .unwrap()
        .text();
    let error = generate(&backend, Input::new("gpt-4o").user("Hi"), &options)
        .await
        .unwrap_err();
    let ErrorKind::Backend { error: failed } = &error.kind else {
        panic!("not a backend error: {error:?}");
    };
    assert_eq!(failed.kind, BackendErrorKind::Connection, "{failed}");
    let partial = failed.partial.as_ref().expect("the partial message");
    let text = partial.text_content();
    assert!(
        !text.is_empty() && text.len() < answer.len() && answer.starts_with(&text),
        "{text:?} is not the start of {answer:?}"
    );
    assert_eq!(partial.stop_reason, Some(StopReason::Error));
}
