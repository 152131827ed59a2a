//! Budgets: tool iterations, cumulative tokens, cumulative dollars and repeated calls. Each
//! trips on its own as a 429 naming the budget, with the partial trace and messages attached
//! whether or not a trace was asked for.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{
    ByteEstimate, Hooks, Input, ModelCallGate, Options, Session, TokenCounter, ToolParallelism,
    execute, generate, generate_stream,
};
use agent_tools::Tool;
use agent_types::{
    AgentError, AgentEvent, Backend, BackendStream, Budget, Capabilities, ErrorKind,
    GenerationSettings, Message, ModelPrice, ModelRequest, RateCard, ToolCall, ToolResult,
    ToolSpec,
};
use serde_json::{Value, json};

use crate::support::{collect, registry, usage};

/// `echo(q)`: answers with the two bytes `ok` (one token when sent back), counting runs.
fn echo_tool(runs: Arc<AtomicUsize>) -> Tool {
    Tool::from_json_fn(
        "echo",
        "Answers ok.",
        json!({"type": "object", "properties": {"q": {}}}),
        move |_args: Value, _ctx| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(json!("ok"))
            }
        },
    )
}

fn echo_call(id: &str, q: impl Into<Value>) -> ScriptedTurn {
    ScriptedTurn::tool_call(id, "echo", json!({"q": q.into()}))
}

fn auto_with_echo() -> (Options, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let options = Options::auto().with_tools(registry([echo_tool(Arc::clone(&runs))]));
    (options, runs)
}

async fn run(backend: &ScriptedBackend, options: &Options) -> AgentError {
    generate(backend, Input::new("test-model").user("go"), options)
        .await
        .unwrap_err()
}

fn tool_result(message: &Message) -> &ToolResult {
    match message {
        Message::Tool(result) => result,
        other => panic!("expected a tool result, got {other:?}"),
    }
}

fn is_assistant(message: &Message) -> bool {
    matches!(message, Message::Assistant(_))
}

// ---------------------------------------------------------------------------------------------
// Iterations

#[tokio::test]
async fn the_iteration_limit_stops_a_model_that_keeps_asking() {
    let (options, runs) = auto_with_echo();
    let options = options.with_max_tool_iterations(2);
    // Distinct arguments, so cycle detection stays out of it; more turns than the limit allows.
    let backend = ScriptedBackend::new((1..=5).map(|i| echo_call(&format!("call_{i}"), i)));

    let error = run(&backend, &options).await;

    assert_eq!(error.status(), 429);
    assert_eq!(
        error.budget_exceeded(),
        Some(&Budget::Iterations { used: 2, max: 2 })
    );
    assert!(
        error.message.contains("tool iterations: 2 of 2"),
        "{}",
        error.message
    );
    // Exactly two rounds ran; the third request for tools was refused.
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(backend.calls(), 3);
    // The trace is attached although `include_tool_trace` is off.
    assert!(!options.include_tool_trace);
    let traced: Vec<&str> = error
        .partial_trace
        .iter()
        .map(|e| e.call_id.as_str())
        .collect();
    assert_eq!(traced, ["call_1", "call_2"]);
    // Two full rounds, the refused turn, and a closing result for its unanswered call.
    let messages = &error.partial_messages;
    assert_eq!(messages.len(), 6);
    assert!(is_assistant(&messages[0]) && is_assistant(&messages[2]) && is_assistant(&messages[4]));
    assert!(!tool_result(&messages[1]).is_error);
    assert!(!tool_result(&messages[3]).is_error);
    let closing = tool_result(&messages[5]);
    assert_eq!(closing.tool_call_id.as_str(), "call_3");
    assert!(closing.is_error);
    assert!(
        closing.content.contains("was not run"),
        "{}",
        closing.content
    );
}

#[tokio::test]
async fn a_run_that_answers_within_the_iteration_limit_succeeds() {
    let (options, runs) = auto_with_echo();
    let options = options.with_max_tool_iterations(2);
    let backend = ScriptedBackend::new([
        echo_call("call_1", 1),
        echo_call("call_2", 2),
        ScriptedTurn::text("Done."),
    ]);
    let result = generate(&backend, Input::new("m").user("go"), &options)
        .await
        .unwrap();
    assert_eq!(result.text(), "Done.");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

// ---------------------------------------------------------------------------------------------
// Tokens

#[tokio::test]
async fn the_token_budget_is_cumulative_over_model_calls() {
    let (options, runs) = auto_with_echo();
    let options = options.with_token_budget(1_000);
    // 350 tokens a call: each call fits on its own, the third one crosses the budget.
    let backend = ScriptedBackend::new(
        (1..=5).map(|i| echo_call(&format!("call_{i}"), i).with_usage(usage(300, 50))),
    );

    let error = run(&backend, &options).await;

    assert_eq!(error.status(), 429);
    // 3 calls x 350: what the provider reported, the same number as the error's usage.
    assert_eq!(
        error.budget_exceeded(),
        Some(&Budget::Tokens {
            used: 3 * 350,
            max: 1_000
        })
    );
    assert_eq!(error.spent.usage, usage(900, 150));
    assert!(
        error.message.contains("token budget: 1050 of 1000 tokens"),
        "{}",
        error.message
    );
    assert_eq!(backend.calls(), 3);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(error.partial_trace.len(), 2);
    // Two rounds, the third turn and its closing result.
    assert_eq!(error.partial_messages.len(), 6);
}

#[tokio::test]
async fn a_final_answer_that_crosses_the_token_budget_is_an_error_that_keeps_the_answer() {
    // The budget is checked after every model call, the last one included: an answer that
    // arrives over budget ends the run as a 429, with the answer among the partial messages.
    let (options, _) = auto_with_echo();
    let options = options.with_token_budget(1_000);
    let backend = ScriptedBackend::new([
        echo_call("call_1", 1).with_usage(usage(400, 10)),
        ScriptedTurn::text("The answer.").with_usage(usage(600, 10)),
    ]);

    let error = run(&backend, &options).await;

    assert_eq!(
        error.budget_exceeded(),
        Some(&Budget::Tokens {
            used: 410 + 610,
            max: 1_000
        })
    );
    let Some(Message::Assistant(answer)) = error.partial_messages.last() else {
        panic!("the answer is not the last partial message: {error:?}");
    };
    assert_eq!(answer.text_content(), "The answer.");
    assert_eq!(error.partial_messages.len(), 3);
}

#[tokio::test]
async fn one_huge_model_call_trips_the_token_budget_before_its_tools_run() {
    let (options, runs) = auto_with_echo();
    let options = options.with_token_budget(1_000);
    let backend = ScriptedBackend::new([
        echo_call("call_1", "x").with_usage(usage(5_000, 10)),
        ScriptedTurn::text("never reached"),
    ]);

    let error = run(&backend, &options).await;

    assert_eq!(backend.calls(), 1);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(error.partial_trace.is_empty());
    // The shape of a budget error on the wire: kind, budget, message, the turn that tripped it
    // and the result closing its unanswered call.
    insta::assert_json_snapshot!(error);
}

#[tokio::test]
async fn tool_output_that_cannot_fit_the_next_request_is_never_sent() {
    let big = Tool::from_json_fn(
        "dump",
        "Returns a lot of text.",
        json!({"type": "object"}),
        |_args: Value, _ctx| async { Ok(json!("x".repeat(8_000))) },
    );
    let options = Options::auto()
        .with_tools(registry([big]))
        .with_token_budget(1_000);
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "dump", json!({})).with_usage(usage(10, 10)),
        ScriptedTurn::text("never reached").with_usage(usage(10, 10)),
    ]);

    let error = run(&backend, &options).await;

    // 20 model tokens used; the next request carries 8,000 bytes of result (2,000 tokens
    // at 4 letters a token), more than the 980 left: refused before it was sent.
    let Some(&Budget::RequestTokens {
        used,
        estimated_input,
        max,
    }) = error.budget_exceeded()
    else {
        panic!("expected the next request to be refused, got {error:?}");
    };
    assert_eq!((used, max), (20, 1_000));
    assert!(
        (2_000..2_100).contains(&estimated_input),
        "{estimated_input}"
    );
    assert_eq!(error.status(), 429);
    assert!(
        error.message.contains("nothing was sent"),
        "{}",
        error.message
    );
    assert_eq!(backend.calls(), 1);
    assert_eq!(error.spent.usage, usage(10, 10));
    assert_eq!(error.partial_trace.len(), 1);
    assert_eq!(error.partial_trace[0].result_bytes, 8_000);
    assert_eq!(error.partial_messages.len(), 2);
    assert_eq!(tool_result(&error.partial_messages[1]).content.len(), 8_000);
}

// ---------------------------------------------------------------------------------------------
// Cost

fn rate_card() -> RateCard {
    // $1 per million input tokens, $2 per million output tokens.
    RateCard::new().with(
        "test-model",
        ModelPrice {
            input_per_mtok: 1.0,
            output_per_mtok: 2.0,
            ..ModelPrice::default()
        },
    )
}

#[tokio::test]
async fn one_huge_model_call_trips_the_cost_budget() {
    let (options, runs) = auto_with_echo();
    let options = options.with_rate_card(rate_card()).with_max_cost_usd(0.01);
    let backend = ScriptedBackend::new([
        echo_call("call_1", "x").with_usage(usage(100_000, 1_000)),
        ScriptedTurn::text("never reached"),
    ]);

    let error = run(&backend, &options).await;

    assert_eq!(error.status(), 429);
    let Some(Budget::CostUsd { used, max }) = error.budget_exceeded() else {
        panic!("expected the cost budget, got {error:?}");
    };
    // 100,000 input at $1/M + 1,000 output at $2/M.
    assert!((used - 0.102).abs() < 1e-12, "{used}");
    assert!((max - 0.01).abs() < f64::EPSILON);
    assert!(
        error
            .message
            .contains("cost budget: $0.102000 of $0.010000"),
        "{}",
        error.message
    );
    assert_eq!(backend.calls(), 1);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(error.partial_messages.len(), 2);
}

#[tokio::test]
async fn the_cost_budget_is_cumulative() {
    let (options, runs) = auto_with_echo();
    let options = options.with_rate_card(rate_card()).with_max_cost_usd(0.01);
    // $0.006 a call: the second call crosses $0.01.
    let backend = ScriptedBackend::new(
        (1..=4).map(|i| echo_call(&format!("call_{i}"), i).with_usage(usage(6_000, 0))),
    );

    let error = run(&backend, &options).await;

    let Some(Budget::CostUsd { used, .. }) = error.budget_exceeded() else {
        panic!("expected the cost budget, got {error:?}");
    };
    assert!((used - 0.012).abs() < 1e-12, "{used}");
    assert_eq!(backend.calls(), 2);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(error.partial_trace.len(), 1);
}

#[tokio::test]
async fn a_cost_budget_without_a_price_for_the_model_is_refused_before_any_call() {
    let (options, _) = auto_with_echo();
    // The card prices another model only: every call would count as free.
    let card = RateCard::new().with("other-model", ModelPrice::default());
    let options = options.with_rate_card(card).with_max_cost_usd(0.01);
    let backend = ScriptedBackend::new([ScriptedTurn::text("never reached")]);

    let error = run(&backend, &options).await;

    assert_eq!(error.status(), 400);
    assert!(
        error.message.contains("no price for model `test-model`"),
        "{}",
        error.message
    );
    assert_eq!(backend.calls(), 0);
}

// ---------------------------------------------------------------------------------------------
// Repeated calls

#[tokio::test]
async fn identical_calls_within_one_round_count_once() {
    let (options, runs) = auto_with_echo();
    let same = |id: &str| agent_types::ToolCall::new(id, "echo", json!({"q": "roll"}));
    // Three identical calls at once, then the same call again: two in a row, not four.
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_calls([same("a"), same("b"), same("c")]),
        ScriptedTurn::tool_calls([same("d")]),
        ScriptedTurn::text("done"),
    ]);

    let result = generate(&backend, Input::new("test-model").user("go"), &options)
        .await
        .unwrap();

    assert_eq!(result.text(), "done");
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn the_same_call_three_times_in_a_row_is_a_cycle() {
    let (options, runs) = auto_with_echo();
    let backend = ScriptedBackend::new([
        echo_call("call_1", "same"),
        echo_call("call_2", "same"),
        echo_call("call_3", "same"),
        ScriptedTurn::text("never reached"),
    ]);

    let error = run(&backend, &options).await;

    assert_eq!(error.status(), 429);
    assert_eq!(
        error.budget_exceeded(),
        Some(&Budget::RepeatedCall {
            tool: "echo".to_owned(),
            times: 3
        })
    );
    // The message says what happened and what to do about it.
    for needed in [
        "`echo` was called 3 times in a row with the same arguments",
        "stuck in a loop",
        "raise `max_repeated_calls`",
    ] {
        assert!(
            error.message.contains(needed),
            "{needed:?} not in {}",
            error.message
        );
    }
    // The third identical call is refused, not run.
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(backend.calls(), 3);
    assert_eq!(error.partial_trace.len(), 2);
    assert_eq!(error.partial_messages.len(), 6);
}

#[tokio::test]
async fn the_same_call_twice_is_not_a_cycle() {
    let (options, runs) = auto_with_echo();
    let backend = ScriptedBackend::new([
        echo_call("call_1", "same"),
        echo_call("call_2", "same"),
        ScriptedTurn::text("Done."),
    ]);
    let result = generate(&backend, Input::new("m").user("go"), &options)
        .await
        .unwrap();
    assert_eq!(result.text(), "Done.");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_different_call_resets_the_count() {
    let (options, runs) = auto_with_echo();
    // Four identical calls in all, never three in a row.
    let backend = ScriptedBackend::new([
        echo_call("call_1", "a"),
        echo_call("call_2", "a"),
        echo_call("call_3", "b"),
        echo_call("call_4", "a"),
        echo_call("call_5", "a"),
        ScriptedTurn::text("Done."),
    ]);
    let result = generate(&backend, Input::new("m").user("go"), &options)
        .await
        .unwrap();
    assert_eq!(result.text(), "Done.");
    assert_eq!(runs.load(Ordering::SeqCst), 5);

    // Same tool, same name, different arguments only: still a reset.
    let (options, _) = auto_with_echo();
    let backend = ScriptedBackend::new([
        echo_call("call_1", "a"),
        echo_call("call_2", "a"),
        echo_call("call_3", json!({"nested": "a"})),
        echo_call("call_4", "a"),
        ScriptedTurn::text("Done."),
    ]);
    assert!(
        generate(&backend, Input::new("m").user("go"), &options)
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn cycle_detection_can_be_turned_off() {
    let (options, runs) = auto_with_echo();
    let options = options.with_max_repeated_calls(None);
    let mut turns: Vec<ScriptedTurn> = (1..=6)
        .map(|i| echo_call(&format!("call_{i}"), "same"))
        .collect();
    turns.push(ScriptedTurn::text("Done."));
    let backend = ScriptedBackend::new(turns);
    let result = generate(&backend, Input::new("m").user("go"), &options)
        .await
        .unwrap();
    assert_eq!(result.text(), "Done.");
    assert_eq!(runs.load(Ordering::SeqCst), 6);
}

#[tokio::test]
async fn a_higher_repeat_limit_allows_more_identical_calls() {
    let (options, runs) = auto_with_echo();
    let options = options.with_max_repeated_calls(Some(4));
    let backend = ScriptedBackend::new((1..=5).map(|i| echo_call(&format!("call_{i}"), "same")));
    let error = run(&backend, &options).await;
    assert_eq!(
        error.budget_exceeded(),
        Some(&Budget::RepeatedCall {
            tool: "echo".to_owned(),
            times: 4
        })
    );
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

// ---------------------------------------------------------------------------------------------
// A backend that reports no usage

/// Collects what a `tracing` fmt subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

#[tokio::test]
async fn without_usage_the_token_budget_cannot_trip_but_iterations_still_count() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .finish();
    // Thread-local, and this runtime runs the whole loop on this thread.
    let _guard = tracing::subscriber::set_default(subscriber);

    let (options, runs) = auto_with_echo();
    // Each request's estimate (about 30 to 100 tokens here) fits both budgets, but four
    // calls' worth would not: a loop that added its estimates to what was spent, instead of
    // leaving unreported calls uncounted, would trip one of them first.
    let options = options
        .with_token_budget(250)
        .with_rate_card(rate_card())
        .with_max_cost_usd(0.000_25)
        .with_max_tool_iterations(3);
    let backend = ScriptedBackend::new((1..=6).map(|i| echo_call(&format!("call_{i}"), i)));

    let error = run(&backend, &options).await;

    assert_eq!(
        error.budget_exceeded(),
        Some(&Budget::Iterations { used: 3, max: 3 })
    );
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert_eq!(backend.calls(), 4);

    let logs = captured.text();
    let warnings = logs.matches("the backend reported no token usage").count();
    assert_eq!(warnings, 1, "expected the warning once, got:\n{logs}");
    assert!(logs.contains("WARN"), "{logs}");
}

// ---------------------------------------------------------------------------------------------
// Before the money is spent: each request's estimate against what is left

/// Records what the before-model-call gate saw.
fn recording_gate(seen: Arc<Mutex<Vec<ModelCallGate>>>) -> Hooks {
    Hooks::new().before_model_call(move |gate| {
        let seen = Arc::clone(&seen);
        async move {
            seen.lock().unwrap().push(gate);
            Ok(())
        }
    })
}

/// A session whose history is `results` tool results of `bytes` bytes each, as a run with
/// many big reads leaves it.
fn heavy_session(results: usize, bytes: usize) -> Session {
    let mut session = Session::new("test-model");
    for i in 0..results {
        let id = format!("call_{i}");
        session.messages.push(Message::user("read them"));
        session
            .messages
            .push(Message::Assistant(agent_types::AssistantMessage {
                content: vec![agent_types::AssistantBlock::ToolCall(ToolCall::new(
                    id.as_str(),
                    "read_file",
                    json!({"path": format!("f{i}.txt")}),
                ))],
                ..Default::default()
            }));
        session.messages.push(Message::Tool(ToolResult::ok(
            id.as_str(),
            "read_file",
            "x".repeat(bytes),
        )));
    }
    session
}

#[tokio::test]
async fn a_session_whose_history_exceeds_the_token_budget_is_refused_before_sending() {
    // Seen: every later "hi" on a session left by a huge round sent 23 MB upstream. A 4 MB
    // history (about a million tokens) against a 100,000-token budget: nothing is sent.
    let mut session = heavy_session(64, 64 * 1024);
    let backend = ScriptedBackend::new([ScriptedTurn::text("never sent")]);
    let options = Options::auto().with_token_budget(100_000);

    let error = execute(&mut session, "hi", &backend, &options)
        .await
        .unwrap_err();

    assert_eq!(backend.calls(), 0, "a request was sent");
    assert_eq!(error.status(), 429);
    let Some(&Budget::RequestTokens {
        used,
        estimated_input,
        max,
    }) = error.budget_exceeded()
    else {
        panic!("expected a refused request, got {error:?}");
    };
    assert_eq!((used, max), (0, 100_000));
    // 64 x 65,536 letters at 4 a token, and some framing.
    assert!(
        (1_048_576..1_100_000).contains(&estimated_input),
        "{estimated_input}"
    );
    for needed in [
        format!("estimated at {estimated_input} tokens"),
        "100000 of 100000 tokens are left".to_owned(),
        "nothing was sent".to_owned(),
    ] {
        assert!(
            error.message.contains(&needed),
            "{needed:?} not in {}",
            error.message
        );
    }
    // Nothing was spent, and the error says so.
    assert!(error.spent.usage.is_unknown());
    assert_eq!(error.spent.cost_usd, None);
    // Again and again: every later turn is refused the same way.
    let error = execute(&mut session, "hi again", &backend, &options)
        .await
        .unwrap_err();
    assert!(matches!(
        error.budget_exceeded(),
        Some(Budget::RequestTokens { .. })
    ));
    assert_eq!(backend.calls(), 0);
}

#[tokio::test]
async fn a_request_whose_input_costs_more_than_the_cost_budget_is_refused_before_sending() {
    // Seen: $17.27 a turn against a $1 cap. At $3 per million input tokens, a history of
    // about a million tokens costs about $3: refused, nothing sent.
    let card = RateCard::new().with(
        "test-model",
        ModelPrice {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            ..ModelPrice::default()
        },
    );
    let mut session = heavy_session(64, 64 * 1024);
    let backend = ScriptedBackend::new([ScriptedTurn::text("never sent")]);
    let options = Options::auto().with_rate_card(card).with_max_cost_usd(1.0);

    let error = execute(&mut session, "hi", &backend, &options)
        .await
        .unwrap_err();

    assert_eq!(backend.calls(), 0);
    let Some(&Budget::RequestCostUsd {
        used,
        estimated_input,
        estimated_usd,
        max,
    }) = error.budget_exceeded()
    else {
        panic!("expected a refused request, got {error:?}");
    };
    assert_eq!(used, 0.0);
    assert!((max - 1.0).abs() < f64::EPSILON);
    assert!(
        (estimated_usd - estimated_input as f64 * 3.0 / 1e6).abs() < 1e-9,
        "{estimated_usd}"
    );
    assert!(estimated_usd > 3.0, "{estimated_usd}");
    assert!(
        error.message.contains("nothing was sent"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn the_output_limit_is_clamped_to_what_the_budgets_leave() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "echo", json!({"q": 1})).with_usage(usage(300, 100)),
        ScriptedTurn::text("Done.").with_usage(usage(300, 10)),
    ])
    .recording();
    let (options, _) = auto_with_echo();
    let options = options
        .with_token_budget(1_000)
        .with_hooks(recording_gate(Arc::clone(&seen)));

    generate(&backend, Input::new("test-model").user("go"), &options)
        .await
        .unwrap();

    let seen = seen.lock().unwrap();
    let sent = backend.requests();
    assert_eq!(seen.len(), 2);
    // First call: 1,000 left, minus the estimate. Second: 600 left, minus the estimate.
    for (gate, (left, request)) in seen.iter().zip([(1_000, &sent[0]), (600, &sent[1])]) {
        let expected = left - gate.estimated_input_tokens;
        assert!(gate.estimated_input_tokens > 0);
        assert_eq!(
            gate.max_output_tokens,
            Some(u32::try_from(expected).unwrap())
        );
        assert_eq!(request.settings.max_output_tokens, gate.max_output_tokens);
    }
    assert!(seen[1].estimated_input_tokens > seen[0].estimated_input_tokens);
}

#[tokio::test]
async fn an_explicit_output_limit_stays_the_upper_bound_and_no_budget_sends_it_unchanged() {
    let backend = ScriptedBackend::cycle([ScriptedTurn::text("a")]).recording();
    let settings = GenerationSettings {
        max_output_tokens: Some(50),
        ..GenerationSettings::default()
    };
    let budgeted = Options::auto().with_token_budget(1_000_000);
    let mut session = Session::new("test-model").with_settings(settings.clone());
    execute(&mut session, "go", &backend, &budgeted)
        .await
        .unwrap();
    let mut session = Session::new("test-model");
    execute(&mut session, "go", &backend, &Options::auto())
        .await
        .unwrap();
    // A large budget without a limit of the session's own sends none: a limit above the
    // model's maximum output would be a 400 from the provider.
    let mut session = Session::new("test-model");
    execute(&mut session, "go", &backend, &budgeted)
        .await
        .unwrap();
    let sent = backend.requests();
    assert_eq!(sent[0].settings.max_output_tokens, Some(50));
    assert_eq!(sent[1].settings.max_output_tokens, None);
    assert_eq!(sent[2].settings.max_output_tokens, None);
}

#[tokio::test]
async fn the_cost_budget_clamps_the_output_at_the_output_price() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let backend =
        ScriptedBackend::new([ScriptedTurn::text("ok").with_usage(usage(10, 10))]).recording();
    // $1 per million input, $2 per million output; $0.001 buys 500 output tokens when the
    // input is free, 500 - input / 2 otherwise.
    let options = Options::auto()
        .with_rate_card(rate_card())
        .with_max_cost_usd(0.001)
        .with_hooks(recording_gate(Arc::clone(&seen)));
    generate(&backend, Input::new("test-model").user("go"), &options)
        .await
        .unwrap();
    let gate = seen.lock().unwrap()[0].clone();
    let input = gate.estimated_input_tokens;
    let expected = ((0.001 - input as f64 * 1e-6) / 2e-6).floor() as u32;
    assert_eq!(gate.max_output_tokens, Some(expected));
    assert_eq!(
        backend.requests()[0].settings.max_output_tokens,
        Some(expected)
    );
}

#[tokio::test]
async fn a_request_that_leaves_no_room_for_output_is_refused() {
    // Measure the first request's estimate, then give exactly that much: nothing is left for
    // output, so nothing is sent.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let backend = ScriptedBackend::new([ScriptedTurn::text("ok")]);
    let options = Options::auto().with_hooks(recording_gate(Arc::clone(&seen)));
    generate(&backend, Input::new("test-model").user("go"), &options)
        .await
        .unwrap();
    let estimate = seen.lock().unwrap()[0].estimated_input_tokens;

    let backend = ScriptedBackend::new([ScriptedTurn::text("never sent")]);
    let error = generate(
        &backend,
        Input::new("test-model").user("go"),
        &Options::auto().with_token_budget(estimate),
    )
    .await
    .unwrap_err();
    assert_eq!(
        error.budget_exceeded(),
        Some(&Budget::RequestTokens {
            used: 0,
            estimated_input: estimate,
            max: estimate
        })
    );
    assert_eq!(backend.calls(), 0);
    // One more token leaves room for one output token.
    let backend = ScriptedBackend::new([ScriptedTurn::text("ok")]).recording();
    generate(
        &backend,
        Input::new("test-model").user("go"),
        &Options::auto().with_token_budget(estimate + 1),
    )
    .await
    .unwrap();
    assert_eq!(backend.requests()[0].settings.max_output_tokens, Some(1));
}

/// Counts one token per message, and none for the preamble.
struct OnePerMessage;

impl TokenCounter for OnePerMessage {
    fn message_tokens(&self, _: &Message) -> u64 {
        1
    }

    fn preamble_tokens(&self, _: Option<&str>, _: &[ToolSpec]) -> u64 {
        0
    }
}

/// A scripted backend that counts input tokens itself, like a provider with a local tokenizer.
struct Counting {
    inner: ScriptedBackend,
    tokens: u64,
}

impl Backend for Counting {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn stream<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        self.inner.stream(request)
    }

    fn count_input_tokens(&self, _: &ModelRequest) -> Option<u64> {
        Some(self.tokens)
    }
}

#[tokio::test]
async fn the_counter_is_pluggable_and_a_backend_count_comes_first() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let session =
        || Session::new("test-model").with_messages([Message::user("a"), Message::user("b")]);
    let options = Options::auto()
        .with_token_counter(OnePerMessage)
        .with_hooks(recording_gate(Arc::clone(&seen)));
    let backend = ScriptedBackend::new([ScriptedTurn::text("ok")]);
    execute(&mut session(), "c", &backend, &options)
        .await
        .unwrap();
    assert_eq!(seen.lock().unwrap()[0].estimated_input_tokens, 3);

    // The backend's own count wins over the counter, and is what the budget checks.
    let backend = Counting {
        inner: ScriptedBackend::new([ScriptedTurn::text("never sent")]),
        tokens: 7_000,
    };
    let error = execute(
        &mut session(),
        "c",
        &backend,
        &options.clone().with_token_budget(5_000),
    )
    .await
    .unwrap_err();
    assert_eq!(
        error.budget_exceeded(),
        Some(&Budget::RequestTokens {
            used: 0,
            estimated_input: 7_000,
            max: 5_000
        })
    );
    assert_eq!(backend.inner.calls(), 0);
    // The default counter is the byte estimate.
    assert_eq!(
        ByteEstimate.message_tokens(&Message::user("abcd")),
        ByteEstimate::MESSAGE_TOKENS + 1
    );
}

// ---------------------------------------------------------------------------------------------
// Invalid budgets are configuration errors, never one free call

#[tokio::test]
async fn zero_negative_and_non_finite_budgets_are_refused_before_any_call() {
    let cases: Vec<(&str, Options)> = vec![
        ("token_budget = 0", Options::auto().with_token_budget(0)),
        (
            "max_cost_usd = 0",
            Options::auto()
                .with_rate_card(rate_card())
                .with_max_cost_usd(0.0),
        ),
        (
            "max_cost_usd = -1",
            Options::auto()
                .with_rate_card(rate_card())
                .with_max_cost_usd(-1.0),
        ),
        (
            "max_cost_usd = NaN",
            Options::auto()
                .with_rate_card(rate_card())
                .with_max_cost_usd(f64::NAN),
        ),
        (
            "max_cost_usd = inf",
            Options::auto()
                .with_rate_card(rate_card())
                .with_max_cost_usd(f64::INFINITY),
        ),
        (
            "max_tool_calls_per_round = 0",
            Options::auto().with_max_tool_calls_per_round(0),
        ),
        (
            "max_round_result_bytes = 0",
            Options::auto().with_max_round_result_bytes(0),
        ),
    ];
    for (name, options) in cases {
        let backend = ScriptedBackend::new([ScriptedTurn::text("never sent")]);
        let error = generate(&backend, Input::new("test-model").user("hi"), &options)
            .await
            .unwrap_err();
        assert_eq!(error.kind, ErrorKind::Config, "{name}: {error:?}");
        assert_eq!(error.status(), 400, "{name}");
        assert!(error.message.contains(name), "{name}: {}", error.message);
        assert_eq!(backend.calls(), 0, "{name}: a model call was made");
        assert_eq!(options.validate(), Err(error), "{name}");
    }
    assert_eq!(
        Options::auto()
            .with_token_budget(1)
            .with_rate_card(rate_card())
            .with_max_cost_usd(0.000_001)
            .validate(),
        Ok(())
    );
}

// ---------------------------------------------------------------------------------------------
// Per-round caps: calls and result bytes

/// `read_file(path)`: answers 64 KiB of file-like text, counting runs.
fn read_file_tool(runs: Arc<AtomicUsize>) -> Tool {
    Tool::from_json_fn(
        "read_file",
        "Reads a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        move |_args: Value, _ctx| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                let line = "let value = compute(input, 42); // a line of a source file\n";
                Ok(json!(line.repeat(65_536 / line.len())))
            }
        },
    )
}

#[tokio::test]
async fn three_hundred_calls_in_one_round_run_thirty_two_and_the_next_request_must_fit() {
    // Seen: one execute whose model asked for 300 `read_file` calls ended at "token budget:
    // 4916300 of 100000". Now 32 run, the round's results stop at 256 KiB, and the next
    // request is checked against what is left before it is sent.
    let runs = Arc::new(AtomicUsize::new(0));
    let calls: Vec<ToolCall> = (0..300)
        .map(|i| {
            ToolCall::new(
                format!("call_{i}"),
                "read_file",
                json!({"path": format!("f{i}")}),
            )
        })
        .collect();
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_calls(calls).with_usage(usage(2_000, 6_000)),
        ScriptedTurn::text("never sent"),
    ]);
    let options = Options::auto()
        .with_tools(registry([read_file_tool(Arc::clone(&runs))]))
        .with_tool_parallelism(ToolParallelism::Serial)
        .with_token_budget(100_000);

    let (events, outcome) = collect(generate_stream(
        &backend,
        Input::new("test-model").user("read all"),
        &options,
    ))
    .await;
    let error = outcome.unwrap_err();

    assert_eq!(runs.load(Ordering::SeqCst), 32, "handlers run");
    assert_eq!(backend.calls(), 1, "the second request was sent");
    let Some(&Budget::RequestTokens {
        used,
        estimated_input,
        max,
    }) = error.budget_exceeded()
    else {
        panic!("expected the next request to be refused, got {error:?}");
    };
    assert_eq!((used, max), (8_000, 100_000));
    assert!(estimated_input >= 92_000, "{estimated_input}");
    // The error reports what was spent: the one call, the same number the budget counted.
    assert_eq!(error.spent.usage, usage(2_000, 6_000));

    let results: Vec<&ToolResult> = error.partial_messages[1..]
        .iter()
        .map(tool_result)
        .collect();
    assert_eq!(results.len(), 300);
    // Four 64 KiB results fill the round's 256 KiB; the other 28 that ran were dropped.
    let full = results.iter().filter(|r| !r.is_error).count();
    assert_eq!(full, 4);
    let kept: usize = results
        .iter()
        .filter(|r| !r.is_error)
        .map(|r| r.content.len())
        .sum();
    assert!(kept <= Options::DEFAULT_MAX_ROUND_RESULT_BYTES, "{kept}");
    for result in &results[4..32] {
        assert!(result.is_error);
        assert!(
            result
                .content
                .contains("reached 262144 bytes (max_round_result_bytes)"),
            "{}",
            result.content
        );
    }
    for result in &results[32..] {
        assert!(result.is_error);
        assert!(
            result.content.contains(
                "asked for 300 tool calls in one round and at most 32 run per round \
                 (max_tool_calls_per_round)"
            ),
            "{}",
            result.content
        );
    }
    // The events tell the same story as the history: every call started and ended, with
    // the content the model sees.
    let ends: Vec<(&str, bool)> = events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::ToolExecutionEnd {
                output, is_error, ..
            } => Some((output.as_str(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 300);
    assert!(
        ends.iter()
            .zip(&results)
            .all(|((output, is_error), result)| *output == result.content
                && *is_error == result.is_error)
    );
    // The terminal error event carries the spend too.
    let Some(AgentEvent::Error { error: reported }) = events
        .iter()
        .find(|event| matches!(event, AgentEvent::Error { .. }))
    else {
        panic!("no error event");
    };
    assert_eq!(reported.spent.usage, usage(2_000, 6_000));
}

#[tokio::test]
async fn the_per_round_caps_are_options() {
    let (options, runs) = auto_with_echo();
    let options = options
        .with_tool_parallelism(ToolParallelism::Serial)
        .with_max_tool_calls_per_round(2)
        .with_max_round_result_bytes(3);
    // Three calls: two run (`ok` is 2 bytes, so the second passes the 3-byte cap and is
    // dropped), the third is not run.
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_calls(
            (1..=3).map(|i| ToolCall::new(format!("c{i}"), "echo", json!({"q": i}))),
        ),
        ScriptedTurn::text("Done."),
    ]);
    let result = generate(
        &backend,
        Input::new("test-model").user("go"),
        &options.with_tool_trace(true),
    )
    .await
    .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let results: Vec<&ToolResult> = result.messages[1..4].iter().map(tool_result).collect();
    assert_eq!(results[0].content, "ok");
    assert!(!results[0].is_error);
    assert!(results[1].is_error && results[1].content.contains("reached 3 bytes"));
    assert!(results[2].is_error && results[2].content.contains("at most 2 run per round"));
    // The trace says what was cut.
    assert!(!result.trace[0].truncated);
    assert!(result.trace[1].truncated);
    assert_eq!(result.trace[1].result_bytes, 2);
    assert!(result.trace[1].error.is_some());
    assert_eq!(result.text(), "Done.");
}

#[tokio::test]
async fn remote_calls_beyond_the_round_cap_are_refused_not_handed_to_the_caller() {
    let spec = ToolSpec::new("approve", "Approves.", json!({"type": "object"}));
    let mut session = Session::new("test-model").with_remote_tool(spec);
    let backend = ScriptedBackend::new([ScriptedTurn::tool_calls(
        (1..=3).map(|i| ToolCall::new(format!("r{i}"), "approve", json!({}))),
    )]);
    let options = Options::auto().with_max_tool_calls_per_round(2);

    let result = execute(&mut session, "go", &backend, &options)
        .await
        .unwrap();

    let pending: Vec<&str> = result
        .pending_tool_calls
        .iter()
        .map(|call| call.id.as_str())
        .collect();
    assert_eq!(pending, ["r1", "r2"]);
    let refused = tool_result(session.messages.last().unwrap());
    assert_eq!(refused.tool_call_id.as_str(), "r3");
    assert!(refused.is_error);
    assert!(
        refused.content.contains("at most 2 run per round"),
        "{}",
        refused.content
    );
}
