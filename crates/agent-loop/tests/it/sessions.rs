//! Sessions: suspension for remote tools, resumption (in the same process or after a JSON
//! round trip), input checks that leave the session untouched, budgets that span a suspension
//! but not a new user message, and the versioned format.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{Options, Session, SessionInput, SessionStatus, execute, execute_stream};
use agent_tools::{Tool, ToolError};
use agent_types::{
    AgentEvent, Budget, ErrorKind, Message, ModelPrice, RateCard, StopReason, ToolCall, ToolResult,
    ToolSpec, UserMessage,
};
use serde_json::{Value, json};

use crate::support::{collect, kind, registry, usage, weather_tool};

const MODEL: &str = "test-model";

/// The spec of a tool the caller runs itself: a human approves a payment.
fn approve_spec() -> ToolSpec {
    ToolSpec::new(
        "approve_payment",
        "Asks a human to approve a payment.",
        json!({
            "type": "object",
            "properties": {"amount_usd": {"type": "number"}},
            "required": ["amount_usd"]
        }),
    )
}

fn approve_call(id: &str) -> ToolCall {
    ToolCall::new(id, "approve_payment", json!({"amount_usd": 42}))
}

fn weather_call(id: &str, city: &str) -> ToolCall {
    ToolCall::new(id, "get_weather", json!({"city": city}))
}

/// $1,000 per million input tokens and $2,000 per million output tokens: a tenth of a cent
/// per input token, easy to add up by hand.
fn rate_card() -> RateCard {
    RateCard::new().with(
        MODEL,
        ModelPrice {
            input_per_mtok: 1000.0,
            output_per_mtok: 2000.0,
            ..ModelPrice::default()
        },
    )
}

/// The cost of `input` and `output` tokens on [`rate_card`].
fn cost(input: u64, output: u64) -> f64 {
    input as f64 * 0.001 + output as f64 * 0.002
}

fn assert_close(actual: Option<f64>, expected: f64) {
    let actual = actual.expect("a cost");
    assert!(
        (actual - expected).abs() < 1e-9,
        "cost {actual} is not {expected}"
    );
}

/// What the loop sends back for a `get_weather` result, and its token estimate.
const DENVER: &str = r#"{"city":"Denver","sky":"sunny","temp_c":21}"#;

fn user(text: &str) -> Message {
    Message::User(UserMessage::text(text))
}

fn assistant(message: &Message) -> &agent_types::AssistantMessage {
    match message {
        Message::Assistant(assistant) => assistant,
        other => panic!("expected an assistant message, got {other:?}"),
    }
}

fn tool_result(message: &Message) -> &ToolResult {
    match message {
        Message::Tool(result) => result,
        other => panic!("expected a tool result, got {other:?}"),
    }
}

/// A `get_weather` that counts its calls (to show that a mode ran no handler).
fn counting_weather(calls: Arc<AtomicUsize>) -> Tool {
    Tool::from_fn(
        "get_weather",
        "Current weather for a city.",
        move |args: crate::support::City, _ctx| {
            let calls = Arc::clone(&calls);
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(json!({"city": args.city}))
            }
        },
    )
}

/// A session that waits for two calls, as `return` mode leaves it, and the backend that got
/// it there.
async fn awaiting_two_calls() -> (Session, ScriptedBackend, Options) {
    let options = Options::default().with_tools(registry([weather_tool()]));
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_calls([
            weather_call("call_a", "Denver"),
            weather_call("call_b", "Paris"),
        ]),
        ScriptedTurn::text("Sunny in Denver, rain in Paris."),
    ])
    .recording();
    let mut session = Session::with_id("sess-two", MODEL);
    let result = execute(
        &mut session,
        "Weather in Denver and Paris?",
        &backend,
        &options,
    )
    .await
    .unwrap();
    assert_eq!(result.status, SessionStatus::AwaitingToolExecution);
    (session, backend, options)
}

#[tokio::test]
async fn a_session_suspended_in_one_process_resumes_in_another_after_a_json_round_trip() {
    // Each "process" builds its own options, registry and backend from scratch.
    let options = || {
        Options::auto()
            .with_tools(registry([weather_tool()]))
            .with_rate_card(rate_card())
            .with_max_tool_iterations(3)
            .with_token_budget(10_000)
            .with_max_cost_usd(10.0)
    };

    // Process one: a local round, then the model asks for the remote tool and the run stops.
    let json = {
        let mut session = Session::with_id("sess-trip", MODEL)
            .with_system("Be brief.")
            .with_remote_tool(approve_spec());
        let backend = ScriptedBackend::new([
            ScriptedTurn::tool_call("call_w", "get_weather", json!({"city": "Denver"}))
                .with_usage(usage(100, 10)),
            ScriptedTurn::tool_call("call_p", "approve_payment", json!({"amount_usd": 42}))
                .with_usage(usage(200, 20)),
        ]);
        let options = options();
        let result = execute(
            &mut session,
            "Book the Denver trip if it is sunny.",
            &backend,
            &options,
        )
        .await
        .unwrap();

        assert_eq!(result.status, SessionStatus::AwaitingToolExecution);
        assert_eq!(result.finish_reason, StopReason::ToolCalls);
        assert_eq!(result.pending_tool_calls, vec![approve_call("call_p")]);
        assert_eq!(session.status, SessionStatus::AwaitingToolExecution);
        assert_eq!(session.pending_tool_calls, vec![approve_call("call_p")]);
        assert_eq!(session.usage, usage(300, 30));
        assert_close(session.cost_usd, cost(300, 30));
        // The local round ran; the remote call has no result yet.
        assert_eq!(session.messages.len(), 4);
        assert_eq!(tool_result(&session.messages[2]).content, DENVER);
        session.to_json().unwrap()
        // The session, backend and options all end here.
    };

    let stored: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(stored["format"], 2);
    assert_eq!(stored["id"], "sess-trip");
    assert_eq!(stored["status"], "awaiting_tool_execution");
    assert_eq!(stored["pending_tool_calls"][0]["id"], "call_p");
    assert_eq!(stored["remote_tools"][0]["name"], "approve_payment");

    // Process two: a fresh session value, registry and backend.
    let mut session = Session::from_json(&json).unwrap();
    assert_eq!(session.status, SessionStatus::AwaitingToolExecution);
    let backend = ScriptedBackend::new([
        ScriptedTurn::text("Approved and booked.").with_usage(usage(400, 40))
    ])
    .recording();
    let result = execute(
        &mut session,
        vec![ToolResult::ok(
            "call_p",
            "approve_payment",
            r#"{"approved":true}"#,
        )],
        &backend,
        &options(),
    )
    .await
    .unwrap();

    assert_eq!(result.status, SessionStatus::Completed);
    assert_eq!(result.finish_reason, StopReason::Stop);
    assert_eq!(result.text(), "Approved and booked.");
    assert!(result.pending_tool_calls.is_empty());
    // The run's own numbers, and the session's over both runs.
    assert_eq!(result.usage, usage(400, 40));
    assert_close(result.cost_usd, cost(400, 40));
    assert_eq!(session.usage, usage(700, 70));
    assert_close(session.cost_usd, cost(700, 70));
    assert_eq!(session.status, SessionStatus::Completed);
    assert!(session.pending_tool_calls.is_empty());

    // The whole conversation: question, local round, remote round, answer.
    let history = &session.messages;
    assert_eq!(history.len(), 6, "{history:#?}");
    assert_eq!(history[0], user("Book the Denver trip if it is sunny."));
    assert_eq!(
        assistant(&history[1]).tool_calls().collect::<Vec<_>>(),
        [&weather_call("call_w", "Denver")]
    );
    assert_eq!(
        history[2],
        Message::Tool(ToolResult::ok("call_w", "get_weather", DENVER))
    );
    assert_eq!(
        assistant(&history[3]).tool_calls().collect::<Vec<_>>(),
        [&approve_call("call_p")]
    );
    assert_eq!(
        history[4],
        Message::Tool(ToolResult::ok(
            "call_p",
            "approve_payment",
            r#"{"approved":true}"#
        ))
    );
    assert_eq!(
        assistant(&history[5]).text_content(),
        "Approved and booked."
    );
    // Only the answer is new in this run (the caller's results are not echoed).
    assert_eq!(result.messages, history[5..]);

    // The resumed request carried everything the first process had, the system prompt and
    // both tools (the remote one travelled inside the session).
    let request = &backend.requests()[0];
    assert_eq!(request.messages, history[..5]);
    assert_eq!(request.system.as_deref(), Some("Be brief."));
    let mut offered: Vec<&str> = request
        .tools
        .iter()
        .map(|spec| spec.name.as_str())
        .collect();
    offered.sort_unstable();
    assert_eq!(offered, ["approve_payment", "get_weather"]);

    // And the completed session still round-trips.
    assert_eq!(
        Session::from_json(&session.to_json().unwrap()).unwrap(),
        session
    );
}

#[tokio::test]
async fn a_resumed_run_continues_the_iteration_budget_of_the_suspended_one() {
    let options = || {
        Options::auto()
            .with_tools(registry([weather_tool()]))
            .with_max_tool_iterations(2)
    };
    let json = {
        let mut session = Session::new(MODEL).with_remote_tool(approve_spec());
        let backend = ScriptedBackend::new([
            ScriptedTurn::tool_call("call_w", "get_weather", json!({"city": "Denver"})),
            ScriptedTurn::tool_call("call_p", "approve_payment", json!({"amount_usd": 42})),
        ]);
        let result = execute(&mut session, "Book it.", &backend, &options())
            .await
            .unwrap();
        assert_eq!(result.status, SessionStatus::AwaitingToolExecution);
        session.to_json().unwrap()
    };

    // Two rounds were used before the suspension; a third is one too many.
    let mut session = Session::from_json(&json).unwrap();
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_w2", "get_weather", json!({"city": "Paris"})),
        ScriptedTurn::text("Done."),
    ]);
    let error = execute(
        &mut session,
        vec![ToolResult::ok("call_p", "approve_payment", "approved")],
        &backend,
        &options(),
    )
    .await
    .unwrap_err();
    assert_eq!(
        error.budget_exceeded(),
        Some(&Budget::Iterations { used: 2, max: 2 })
    );
    assert_eq!(error.status(), 429);
    assert_eq!(backend.calls(), 1);
    assert_eq!(session.status, SessionStatus::Error);
    // The history is still valid: the refused call got a result saying why.
    let last = tool_result(session.messages.last().unwrap());
    assert_eq!(last.tool_call_id.as_str(), "call_w2");
    assert!(last.is_error);
}

#[tokio::test]
async fn a_resumed_run_continues_the_token_budget_of_the_suspended_one() {
    // What the first process's two calls used; the budget leaves 100 tokens on top.
    let used_before = 110 + 220;
    let budget = used_before + 100;
    let options = || {
        Options::auto()
            .with_tools(registry([weather_tool()]))
            .with_token_budget(budget)
    };
    let json = {
        let mut session = Session::new(MODEL).with_remote_tool(approve_spec());
        let backend = ScriptedBackend::new([
            ScriptedTurn::tool_call("call_w", "get_weather", json!({"city": "Denver"}))
                .with_usage(usage(100, 10)),
            ScriptedTurn::tool_call("call_p", "approve_payment", json!({"amount_usd": 42}))
                .with_usage(usage(200, 20)),
        ]);
        execute(&mut session, "Book it.", &backend, &options())
            .await
            .unwrap();
        session.to_json().unwrap()
    };

    // The history alone fits a fresh budget of 430; on top of what the first process used,
    // it does not, so the resumed call is refused before it is sent.
    let mut session = Session::from_json(&json).unwrap();
    let backend = ScriptedBackend::new([ScriptedTurn::text("Booked.").with_usage(usage(100, 50))]);
    let error = execute(
        &mut session,
        vec![ToolResult::ok("call_p", "approve_payment", "approved")],
        &backend,
        &options(),
    )
    .await
    .unwrap_err();
    let Some(&Budget::RequestTokens {
        used,
        estimated_input,
        max,
    }) = error.budget_exceeded()
    else {
        panic!("expected the request to be refused, got {error:?}");
    };
    assert_eq!((used, max), (used_before, budget));
    assert!(
        (100..budget).contains(&estimated_input),
        "{estimated_input}"
    );
    assert_eq!(backend.calls(), 0);
    assert_eq!(session.usage, usage(300, 30));
}

#[tokio::test]
async fn a_mixed_round_runs_the_local_call_then_suspends_for_the_remote_one() {
    let options = Options::auto().with_tools(registry([
        weather_tool(),
        Tool::remote(
            "approve_payment",
            "Asks a human to approve a payment.",
            (*approve_spec().parameters).clone(),
        ),
    ]));
    let backend = ScriptedBackend::new([ScriptedTurn::tool_calls([
        weather_call("call_w", "Denver"),
        approve_call("call_p"),
    ])]);
    let mut session = Session::with_id("sess-mixed", MODEL);
    let (events, result) = collect(execute_stream(
        &mut session,
        "Book it if sunny.",
        &backend,
        &options,
    ))
    .await;
    let result = result.unwrap();

    assert_eq!(result.status, SessionStatus::AwaitingToolExecution);
    assert_eq!(result.pending_tool_calls, vec![approve_call("call_p")]);
    // The local result is in the history already, and it was the run's new message.
    let local = Message::Tool(ToolResult::ok("call_w", "get_weather", DENVER));
    assert_eq!(result.messages.len(), 2);
    assert_eq!(result.messages[1], local);
    assert_eq!(session.messages.len(), 3);
    assert_eq!(session.messages[2], local);

    // Events: the local call ran (start, end, its message); the remote one did not run and
    // is listed in awaiting_tool_execution, just before session_end.
    let started: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::ToolExecutionStart { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(started, ["call_w"]);
    assert!(events.iter().any(|event| matches!(
        event,
        AgentEvent::ToolExecutionEnd { call_id, is_error: false, .. } if call_id.as_str() == "call_w"
    )));
    assert!(events.contains(&AgentEvent::MessageEnd {
        message: local.clone(),
        cost_usd: None
    }));
    let tail: Vec<String> = events[events.len() - 2..].iter().map(kind).collect();
    assert_eq!(tail, ["awaiting_tool_execution", "session_end"]);
    match &events[events.len() - 2] {
        AgentEvent::AwaitingToolExecution {
            session_id,
            tool_calls,
        } => {
            assert_eq!(session_id.as_str(), "sess-mixed");
            assert_eq!(tool_calls, &vec![approve_call("call_p")]);
        }
        other => panic!("{other:?}"),
    }
    match events.last().unwrap() {
        AgentEvent::SessionEnd { finish_reason, .. } => {
            assert_eq!(*finish_reason, StopReason::ToolCalls);
        }
        other => panic!("{other:?}"),
    }

    // Resuming needs only the remote result; the local one is not asked for again.
    let backend = ScriptedBackend::new([ScriptedTurn::text("Booked.")]).recording();
    let result = execute(
        &mut session,
        vec![ToolResult::ok("call_p", "approve_payment", "approved")],
        &backend,
        &options,
    )
    .await
    .unwrap();
    assert_eq!(result.status, SessionStatus::Completed);
    let sent = &backend.requests()[0].messages;
    assert_eq!(sent.len(), 4);
    assert_eq!(sent[2], local);
    assert_eq!(
        sent[3],
        Message::Tool(ToolResult::ok("call_p", "approve_payment", "approved"))
    );
}

#[tokio::test]
async fn a_mixed_round_with_the_remote_call_first_still_answers_every_call_once() {
    let options = Options::auto().with_tools(registry([weather_tool()]));
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_calls([approve_call("call_p"), weather_call("call_w", "Denver")]),
        ScriptedTurn::text("Booked."),
    ])
    .recording();
    let mut session = Session::new(MODEL).with_remote_tool(approve_spec());
    let result = execute(&mut session, "Book it if sunny.", &backend, &options)
        .await
        .unwrap();
    assert_eq!(result.pending_tool_calls, vec![approve_call("call_p")]);
    execute(
        &mut session,
        vec![ToolResult::ok("call_p", "approve_payment", "approved")],
        &backend,
        &options,
    )
    .await
    .unwrap();

    let sent = &backend.requests()[1].messages;
    let answered: Vec<&str> = sent[2..]
        .iter()
        .map(|message| tool_result(message).tool_call_id.as_str())
        .collect();
    // The local result joined the history before the suspension, so it comes first even
    // though its call came second. Each call has exactly one result either way.
    assert_eq!(answered, ["call_w", "call_p"]);
}

#[tokio::test]
async fn resuming_with_results_that_do_not_match_the_pending_calls_changes_nothing() {
    let (mut session, backend, options) = awaiting_two_calls().await;
    let before = session.clone();
    let a = || ToolResult::ok("call_a", "get_weather", "sunny");
    let b = || ToolResult::ok("call_b", "get_weather", "rain");
    let x = || ToolResult::ok("call_x", "get_weather", "?");

    let cases: Vec<(&str, SessionInput, &str)> = vec![
        ("missing", vec![a()].into(), "missing results for call_b"),
        (
            "wrong id",
            vec![a(), x()].into(),
            "results for calls that are not pending: call_x",
        ),
        (
            "extra id",
            vec![a(), b(), x()].into(),
            "results for calls that are not pending: call_x",
        ),
        (
            "duplicate",
            vec![a(), b(), a()].into(),
            "more than one result for call_a",
        ),
        (
            "none",
            Vec::<ToolResult>::new().into(),
            "missing results for call_a, call_b",
        ),
        (
            "user message",
            "Never mind.".into(),
            "is waiting for tool results (call_a, call_b)",
        ),
        (
            "continue",
            SessionInput::Continue,
            "is waiting for tool results",
        ),
    ];
    for (case, input, says) in cases {
        let error = execute(&mut session, input, &backend, &options)
            .await
            .unwrap_err();
        assert_eq!(error.kind, ErrorKind::Config, "{case}");
        assert_eq!(error.status(), 400, "{case}");
        assert!(
            error.message.contains(says),
            "{case}: {:?} should say {says:?}",
            error.message
        );
        assert_eq!(session, before, "{case} changed the session");
    }
    assert_eq!(backend.calls(), 1, "no refused input reached the model");

    // The untouched session still resumes.
    let result = execute(&mut session, vec![a(), b()], &backend, &options)
        .await
        .unwrap();
    assert_eq!(result.status, SessionStatus::Completed);
}

#[tokio::test]
async fn tool_results_for_a_session_that_waits_for_none_are_refused() {
    let backend = ScriptedBackend::new([ScriptedTurn::text("Hi.")]);
    let options = Options::default();
    let mut session = Session::new(MODEL);
    execute(&mut session, "Hello", &backend, &options)
        .await
        .unwrap();
    let before = session.clone();
    let error = execute(
        &mut session,
        vec![ToolResult::ok("call_a", "get_weather", "sunny")],
        &backend,
        &options,
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Config);
    assert!(error.message.contains("not waiting"), "{}", error.message);
    assert_eq!(session, before);
}

#[tokio::test]
async fn results_given_in_any_order_join_the_history_in_call_order() {
    let (mut session, backend, options) = awaiting_two_calls().await;
    let options = options.with_tool_result_max_bytes(64);
    let long = "x".repeat(500);
    execute(
        &mut session,
        vec![
            // Given second-call first, with the name left for the loop to fill in.
            ToolResult::ok("call_b", "", "rain"),
            ToolResult::ok("call_a", "get_weather", long.clone()),
        ],
        &backend,
        &options,
    )
    .await
    .unwrap();

    let sent = &backend.requests()[1].messages;
    let a = tool_result(&sent[2]);
    let b = tool_result(&sent[3]);
    assert_eq!(a.tool_call_id.as_str(), "call_a");
    assert_eq!(b.tool_call_id.as_str(), "call_b");
    assert_eq!(b.name, "get_weather");
    assert_eq!(b.content, "rain");
    // Remote results are capped like local ones.
    assert!(a.content.len() < long.len(), "{}", a.content);
    assert!(a.content.len() <= 64, "{}", a.content);
    assert_eq!(session.messages[2..4], sent[2..4]);
}

#[tokio::test]
async fn return_mode_leaves_every_call_pending_and_resumes_with_their_results() {
    let calls = Arc::new(AtomicUsize::new(0));
    let options = Options::default().with_tools(registry([counting_weather(Arc::clone(&calls))]));
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_calls([
            weather_call("call_a", "Denver"),
            weather_call("call_b", "Paris"),
        ]),
        ScriptedTurn::text("Sunny, then rain."),
    ])
    .recording();
    let mut session = Session::new(MODEL);

    let result = execute(&mut session, "Weather?", &backend, &options)
        .await
        .unwrap();
    assert_eq!(result.status, SessionStatus::AwaitingToolExecution);
    assert_eq!(result.finish_reason, StopReason::ToolCalls);
    assert_eq!(
        result.pending_tool_calls,
        vec![
            weather_call("call_a", "Denver"),
            weather_call("call_b", "Paris")
        ]
    );
    assert_eq!(session.pending_tool_calls, result.pending_tool_calls);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "return mode runs no handler"
    );
    assert_eq!(session.messages.len(), 2);

    // The caller ran them (say, after a JSON round trip) and hands the results back.
    let mut session = Session::from_json(&session.to_json().unwrap()).unwrap();
    let result = execute(
        &mut session,
        vec![
            ToolResult::ok("call_a", "get_weather", "sunny"),
            ToolResult::ok("call_b", "get_weather", "rain"),
        ],
        &backend,
        &options,
    )
    .await
    .unwrap();
    assert_eq!(result.status, SessionStatus::Completed);
    assert_eq!(result.text(), "Sunny, then rain.");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let sent = &backend.requests()[1].messages;
    assert_eq!(sent.len(), 4);
    assert_eq!(sent[..], session.messages[..4]);
    assert_eq!(session.messages.len(), 5);
}

#[tokio::test]
async fn a_user_message_on_a_completed_session_starts_a_run_with_fresh_budgets() {
    // One round and 620 tokens per run: each run fits, two together would not.
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_rate_card(rate_card())
        .with_max_tool_iterations(1)
        .with_token_budget(1_000);
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Denver"}))
            .with_usage(usage(300, 10)),
        ScriptedTurn::text("Sunny.").with_usage(usage(300, 10)),
        ScriptedTurn::tool_call("call_2", "get_weather", json!({"city": "Paris"}))
            .with_usage(usage(300, 10)),
        ScriptedTurn::text("Rain.").with_usage(usage(300, 10)),
    ]);
    let mut session = Session::new(MODEL);

    let first = execute(&mut session, "Denver?", &backend, &options)
        .await
        .unwrap();
    assert_eq!(first.status, SessionStatus::Completed);
    let second = execute(&mut session, "And Paris?", &backend, &options)
        .await
        .unwrap();
    assert_eq!(second.status, SessionStatus::Completed);
    assert_eq!(second.text(), "Rain.");

    // Each run reports its own usage; the session adds them up.
    assert_eq!(first.usage, usage(600, 20));
    assert_eq!(second.usage, usage(600, 20));
    assert_eq!(session.usage, usage(1_200, 40));
    assert_close(session.cost_usd, cost(1_200, 40));
    assert_eq!(session.messages.len(), 8);
    assert_eq!(session.messages[4], user("And Paris?"));
}

#[test]
fn a_session_of_an_unknown_format_is_refused() {
    let mut session = Session::with_id("sess-old", MODEL).with_remote_tool(approve_spec());
    session.messages.push(user("Hello"));
    let json = session.to_json().unwrap();
    assert_eq!(Session::from_json(&json).unwrap(), session);

    let mut value: Value = serde_json::from_str(&json).unwrap();
    value["format"] = json!(3);
    let error = Session::from_json(&value.to_string()).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("session format 3 is not supported"),
        "{error}"
    );

    value.as_object_mut().unwrap().remove("format");
    let error = Session::from_json(&value.to_string()).unwrap_err();
    assert!(error.to_string().contains("format"), "{error}");
}

/// A session written by agentry before content blocks (format 1, `fixtures/sessions/v1/`,
/// never rewritten) loads, and resumes where it stopped: the remote call gets its result and
/// the run finishes, its budgets continuing from the stored ones.
#[tokio::test]
async fn a_version_1_session_written_by_the_previous_release_loads_and_resumes() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/sessions/v1/session.json");
    let json = std::fs::read_to_string(path).unwrap();
    let mut session = Session::from_json(&json).unwrap();
    assert_eq!(session.id.as_str(), "sess-v1");
    assert_eq!(session.status, SessionStatus::AwaitingToolExecution);
    assert_eq!(session.messages.len(), 4);
    assert_eq!(tool_result(&session.messages[2]).content, DENVER);
    assert_eq!(session.pending_tool_calls, vec![approve_call("call_p")]);

    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_max_tool_iterations(3);
    let backend = ScriptedBackend::new([ScriptedTurn::text("Booked.")]);
    let result = execute(
        &mut session,
        vec![ToolResult::ok("call_p", "approve_payment", "approved")],
        &backend,
        &options,
    )
    .await
    .unwrap();
    assert_eq!(result.status, SessionStatus::Completed);
    assert_eq!(result.text(), "Booked.");
    assert_eq!(session.messages.len(), 6);
    assert_eq!(tool_result(&session.messages[4]).content, "approved");
}

/// Format 2 writes content blocks in their documented forms and reads them back: a rich tool
/// result as its block list, a text-only one as a plain string, a user file block as is.
#[test]
fn a_version_2_session_round_trips_content_blocks() {
    use agent_types::{FileBlock, ImageSource, ToolResultBlock, UserBlock};

    let rich = ToolResult::with_blocks(
        "call_c",
        "chart",
        vec![
            ToolResultBlock::Text {
                text: "The chart:".into(),
            },
            ToolResultBlock::Image {
                source: ImageSource::Base64 {
                    media_type: "image/png".into(),
                    data: "iVBORw0KGgo=".into(),
                },
            },
            ToolResultBlock::Json {
                value: json!({"rows": 3}),
            },
        ],
    );
    let session = Session::with_id("sess-v2", MODEL)
        .with_message(Message::User(UserMessage {
            content: vec![
                UserBlock::Text {
                    text: "Chart this report.".into(),
                },
                UserBlock::File(
                    FileBlock::base64("application/pdf", "JVBERi0x").with_filename("r.pdf"),
                ),
            ],
        }))
        .with_message(rich)
        .with_message(ToolResult::ok("call_w", "get_weather", DENVER));
    let json: Value = serde_json::from_str(&session.to_json().unwrap()).unwrap();
    assert_eq!(json["format"], 2);
    assert_eq!(json["messages"][0]["content"][1]["type"], "file");
    assert_eq!(json["messages"][1]["content"].as_array().unwrap().len(), 3);
    assert_eq!(json["messages"][2]["content"], DENVER);
    assert_eq!(Session::from_json(&json.to_string()).unwrap(), session);
}

/// A caller's result for a remote call may carry images; they fall under
/// `tool_result_max_binary_bytes` like a local handler's, and reach the model as blocks.
#[tokio::test]
async fn a_remote_result_with_images_is_capped_and_sent_as_blocks() {
    use agent_types::{ImageSource, ToolResultBlock};

    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/sessions/v1/session.json");
    let mut session = Session::from_json(&std::fs::read_to_string(path).unwrap()).unwrap();
    let image = |data: &str| ToolResultBlock::Image {
        source: ImageSource::Base64 {
            media_type: "image/png".into(),
            data: data.into(),
        },
    };
    // 6 bytes each, decoded.
    let result = ToolResult::with_blocks(
        "call_p",
        "approve_payment",
        vec![
            ToolResultBlock::Text {
                text: "Signed:".into(),
            },
            image("AAAAAAAA"),
            image("AQEBAQEB"),
        ],
    );
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_tool_result_max_binary_bytes(8);
    let backend = ScriptedBackend::new([ScriptedTurn::text("Booked.")]).recording();
    execute(&mut session, vec![result], &backend, &options)
        .await
        .unwrap();
    let sent = tool_result(&backend.requests()[0].messages[4]).clone();
    assert_eq!(sent.content, "Signed:");
    assert_eq!(sent.blocks[0], image("AAAAAAAA"));
    let ToolResultBlock::Text { text } = &sent.blocks[1] else {
        panic!("{:?}", sent.blocks[1]);
    };
    assert!(text.contains("of 6 bytes was dropped"), "{text}");
}
