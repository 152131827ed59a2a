//! Budgets: tool iterations, cumulative tokens, cumulative dollars and repeated calls. Each
//! trips on its own as a 429 naming the budget, with the partial trace and messages attached
//! whether or not a trace was asked for.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{Input, Options, generate};
use agent_tools::Tool;
use agent_types::{AgentError, Budget, Message, ModelPrice, RateCard, ToolResult};
use serde_json::{Value, json};

use crate::support::{registry, usage};

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
    assert_eq!(error.usage, usage(900, 150));
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
    assert_eq!(error.usage, usage(10, 10));
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
