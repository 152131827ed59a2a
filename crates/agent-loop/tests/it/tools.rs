//! Running tools in `auto` mode: parallelism and its bound, result order, unknown tools,
//! argument validation, handler errors, panics, fatal errors, timeouts, truncation, which
//! tools are offered (allow-list, backend capability, caller permissions) and spend handlers
//! report.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{
    Input, Options, ToolErrorMode, ToolParallelism, ValidationMode, generate, generate_stream,
};
use agent_tools::{Caller, Tool, ToolError};
use agent_types::{
    AgentError, AgentEvent, Budget, Capabilities, ErrorKind, Message, ModelPrice, ModelRequest,
    RateCard, ToolCall, ToolResult,
};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::support::{collect, registry, sleep_tool, usage, weather_tool};

fn tool_result(message: &Message) -> &ToolResult {
    match message {
        Message::Tool(result) => result,
        other => panic!("expected a tool result, got {other:?}"),
    }
}

/// The tool results a request carried, in order.
fn sent_results(request: &ModelRequest) -> Vec<&ToolResult> {
    request
        .messages
        .iter()
        .filter_map(|message| match message {
            Message::Tool(result) => Some(result),
            _ => None,
        })
        .collect()
}

fn offered(request: &ModelRequest) -> Vec<&str> {
    request
        .tools
        .iter()
        .map(|spec| spec.name.as_str())
        .collect()
}

/// `n` calls of the support `sleep` tool, `millis` each; the `n` argument keeps the calls
/// distinct, so cycle detection does not see three identical calls.
fn sleeps(n: usize, millis: u64) -> ScriptedTurn {
    ScriptedTurn::tool_calls((1..=n).map(|i| {
        ToolCall::new(
            format!("call_{i}"),
            "sleep",
            json!({"millis": millis, "n": i}),
        )
    }))
}

/// How many handlers run at once: the current count and the highest seen.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    most: AtomicUsize,
}

/// `hold(millis)`: sleeps like `sleep`, recording how many calls overlap.
fn gauged_sleep_tool(gauge: Arc<Gauge>) -> Tool {
    Tool::from_json_fn(
        "sleep",
        "Sleeps for `millis` milliseconds.",
        json!({"type": "object", "properties": {"millis": {"type": "integer"}}}),
        move |args: Value, _ctx| {
            let gauge = Arc::clone(&gauge);
            async move {
                let now = gauge.now.fetch_add(1, Ordering::SeqCst) + 1;
                gauge.most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(args["millis"].as_u64().unwrap_or(0)))
                    .await;
                gauge.now.fetch_sub(1, Ordering::SeqCst);
                Ok(json!("done"))
            }
        },
    )
}

/// Runs `calls` sleeps of 100 ms each under `parallelism`; returns the time taken and the
/// most handlers seen running at once.
async fn timed_round(calls: usize, parallelism: ToolParallelism) -> (Duration, usize) {
    let gauge = Arc::new(Gauge::default());
    let backend = ScriptedBackend::new([sleeps(calls, 100), ScriptedTurn::text("Rested.")]);
    let options = Options::auto()
        .with_tools(registry([gauged_sleep_tool(Arc::clone(&gauge))]))
        .with_tool_parallelism(parallelism);
    let started = Instant::now();
    let result = generate(&backend, Input::new("m").user("rest"), &options)
        .await
        .unwrap();
    assert_eq!(result.messages.len(), calls + 2);
    (started.elapsed(), gauge.most.load(Ordering::SeqCst))
}

fn assert_about(elapsed: Duration, expected_ms: u64) {
    let expected = Duration::from_millis(expected_ms);
    assert!(
        elapsed >= expected && elapsed < expected + Duration::from_millis(20),
        "took {elapsed:?}, expected about {expected:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Parallelism and order

#[tokio::test(start_paused = true)]
async fn parallel_handlers_overlap() {
    let (elapsed, most) = timed_round(3, ToolParallelism::default()).await;
    assert_about(elapsed, 100);
    assert_eq!(most, 3);
}

#[tokio::test(start_paused = true)]
async fn serial_handlers_run_one_after_another() {
    let (elapsed, most) = timed_round(3, ToolParallelism::Serial).await;
    assert_about(elapsed, 300);
    assert_eq!(most, 1);
}

#[tokio::test(start_paused = true)]
async fn max_concurrent_bounds_the_overlap() {
    let (elapsed, most) = timed_round(4, ToolParallelism::Parallel { max_concurrent: 2 }).await;
    assert_about(elapsed, 200);
    assert_eq!(most, 2);
}

#[tokio::test(start_paused = true)]
async fn a_bound_of_zero_runs_calls_one_at_a_time_instead_of_never() {
    // The outer timeout turns a stalled round (nothing ever allowed to start) into a failure.
    let (elapsed, most) = tokio::time::timeout(
        Duration::from_secs(60),
        timed_round(3, ToolParallelism::Parallel { max_concurrent: 0 }),
    )
    .await
    .expect("a bound of zero stalled the round");
    assert_about(elapsed, 300);
    assert_eq!(most, 1);
}

#[tokio::test(start_paused = true)]
async fn results_join_the_history_in_call_order_whatever_order_they_finish_in() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_calls([
            ToolCall::new("call_1", "sleep", json!({"millis": 300})),
            ToolCall::new("call_2", "sleep", json!({"millis": 200})),
            ToolCall::new("call_3", "sleep", json!({"millis": 100})),
        ]),
        ScriptedTurn::text("Done."),
    ])
    .recording();
    let options = Options::auto()
        .with_tools(registry([sleep_tool()]))
        .with_tool_trace(true);

    let (events, result) = collect(generate_stream(
        &backend,
        Input::new("m").user("rest"),
        &options,
    ))
    .await;
    let result = result.unwrap();

    // They finished last call first...
    let finished: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::ToolExecutionEnd { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(finished, ["call_3", "call_2", "call_1"]);

    // ...and joined the history, the request and the trace in call order.
    let expected = [
        ("call_1", r#"{"slept_ms":300}"#),
        ("call_2", r#"{"slept_ms":200}"#),
        ("call_3", r#"{"slept_ms":100}"#),
    ];
    let in_history: Vec<(&str, &str)> = result.messages[1..4]
        .iter()
        .map(|message| {
            let result = tool_result(message);
            (result.tool_call_id.as_str(), result.content.as_str())
        })
        .collect();
    assert_eq!(in_history, expected);
    let requests = backend.requests();
    let in_request: Vec<(&str, &str)> = sent_results(&requests[1])
        .into_iter()
        .map(|result| (result.tool_call_id.as_str(), result.content.as_str()))
        .collect();
    assert_eq!(in_request, expected);
    let traced: Vec<&str> = result.trace.iter().map(|e| e.call_id.as_str()).collect();
    assert_eq!(traced, ["call_1", "call_2", "call_3"]);
}

// ---------------------------------------------------------------------------------------------
// Unknown tools

#[tokio::test]
async fn an_unknown_tool_is_an_error_result_naming_the_available_tools() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_wether", json!({"city": "Denver"})),
        ScriptedTurn::tool_call("call_2", "get_weather", json!({"city": "Denver"})),
        ScriptedTurn::text("Sunny."),
    ])
    .recording();
    let options = Options::auto()
        .with_tools(registry([weather_tool(), sleep_tool()]))
        .with_tool_trace(true);

    let result = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();

    // The model saw the mistake and the loop went on.
    assert_eq!(result.text(), "Sunny.");
    let requests = backend.requests();
    let seen = sent_results(&requests[1]);
    assert!(seen[0].is_error);
    assert_eq!(
        seen[0].content,
        "There is no tool named `get_wether`. Available tools: get_weather, sleep."
    );
    assert!(result.trace[0].error.is_some());
    assert!(result.trace[1].error.is_none());
}

#[tokio::test]
async fn an_unknown_tool_under_abort_ends_the_run() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_wether", json!({"city": "Denver"})),
        ScriptedTurn::text("never reached"),
    ]);
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_tool_error_mode(ToolErrorMode::Abort);

    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();

    assert_eq!(
        error.kind,
        ErrorKind::Tool {
            tool: "get_wether".to_owned()
        }
    );
    assert_eq!(error.status(), 500);
    assert!(
        error
            .message
            .contains("There is no tool named `get_wether`"),
        "{}",
        error.message
    );
    assert_eq!(backend.calls(), 1);
    assert_eq!(error.partial_trace.len(), 1);
    assert_eq!(error.partial_trace[0].tool_name, "get_wether");
    assert!(error.partial_trace[0].error.is_some());
}

// ---------------------------------------------------------------------------------------------
// Argument validation

/// `add_one(n: integer)`: records the arguments it was handed.
fn add_one_tool(seen: Arc<Mutex<Vec<Value>>>) -> Tool {
    Tool::from_json_fn(
        "add_one",
        "Adds one to n.",
        json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"]
        }),
        move |args: Value, _ctx| {
            let seen = Arc::clone(&seen);
            async move {
                seen.lock().unwrap().push(args.clone());
                match args["n"].as_i64() {
                    Some(n) => Ok(json!(n + 1)),
                    None => Err(ToolError::respond_to_model("n is not a number")),
                }
            }
        },
    )
}

/// Runs one `add_one({"n": "5"})` round under `mode`, then an answer.
async fn add_one_with_string(
    mode: ValidationMode,
    errors: ToolErrorMode,
) -> (
    Result<agent_loop::GenerateResult, AgentError>,
    Vec<Value>,
    ScriptedBackend,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "add_one", json!({"n": "5"})),
        ScriptedTurn::text("Six."),
    ])
    .recording();
    let options = Options::auto()
        .with_tools(registry([add_one_tool(Arc::clone(&seen))]))
        .with_tool_arg_validation(mode)
        .with_tool_error_mode(errors)
        .with_tool_trace(true);
    let outcome = generate(&backend, Input::new("m").user("5 + 1?"), &options).await;
    let seen = seen.lock().unwrap().clone();
    (outcome, seen, backend)
}

#[tokio::test]
async fn strict_validation_sends_the_problem_back_to_the_model() {
    let (outcome, seen, backend) =
        add_one_with_string(ValidationMode::Strict, ToolErrorMode::Recover).await;
    let result = outcome.unwrap();

    assert!(seen.is_empty(), "the handler ran with invalid arguments");
    let requests = backend.requests();
    let sent = sent_results(&requests[1])[0];
    assert!(sent.is_error);
    assert_eq!(
        sent.content,
        "the arguments do not match the tool's parameters schema:\n\
         - argument `/n`: expected an integer, got the string \"5\"\n\
         Fix the arguments and call `add_one` again."
    );
    assert_eq!(
        result.trace[0].error.as_deref(),
        Some(sent.content.as_str())
    );
    assert!(result.trace[0].repairs.is_empty());
    assert_eq!(result.text(), "Six.");
}

#[tokio::test]
async fn lenient_validation_repairs_and_says_so_in_the_trace() {
    let (outcome, seen, backend) =
        add_one_with_string(ValidationMode::Lenient, ToolErrorMode::Recover).await;
    let result = outcome.unwrap();

    assert_eq!(seen, [json!({"n": 5})]);
    let requests = backend.requests();
    let sent = sent_results(&requests[1])[0];
    assert!(!sent.is_error);
    assert_eq!(sent.content, "6");
    let entry = &result.trace[0];
    assert_eq!(entry.arguments, json!({"n": 5}));
    assert_eq!(
        entry.repairs,
        ["argument `/n`: converted the string \"5\" to the number 5"]
    );
    assert!(entry.error.is_none());
}

#[tokio::test]
async fn no_validation_hands_the_raw_arguments_to_the_handler() {
    let (outcome, seen, _backend) =
        add_one_with_string(ValidationMode::None, ToolErrorMode::Recover).await;
    let result = outcome.unwrap();

    assert_eq!(seen, [json!({"n": "5"})]);
    // The handler's own complaint is what the model sees.
    let sent = tool_result(&result.messages[1]);
    assert!(sent.is_error);
    assert_eq!(sent.content, "n is not a number");
}

#[tokio::test]
async fn invalid_arguments_under_abort_are_a_validation_error() {
    let (outcome, seen, backend) =
        add_one_with_string(ValidationMode::Strict, ToolErrorMode::Abort).await;
    let error = outcome.unwrap_err();

    assert_eq!(error.kind, ErrorKind::Validation);
    assert_eq!(error.status(), 422);
    assert!(
        error
            .message
            .contains("the arguments of `add_one` (call call_1) are invalid"),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("expected an integer"),
        "{}",
        error.message
    );
    assert!(seen.is_empty());
    assert_eq!(backend.calls(), 1);
    assert_eq!(error.partial_trace.len(), 1);
}

#[tokio::test]
async fn a_wrongly_typed_string_argument_is_refused_by_strict_validation() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": 5})),
        ScriptedTurn::text("Sorry."),
    ]);
    let options = Options::auto().with_tools(registry([weather_tool()]));
    let result = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();
    let sent = tool_result(&result.messages[1]);
    assert!(sent.is_error);
    assert!(
        sent.content
            .contains("argument `/city`: expected a string, got the number 5"),
        "{}",
        sent.content
    );
}

// ---------------------------------------------------------------------------------------------
// Handler failures

/// `get_weather` for Atlantis fails with a respond-to-model error; then the model answers.
fn atlantis_then_answer() -> ScriptedBackend {
    ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Atlantis"})),
        ScriptedTurn::text("No station there."),
    ])
}

#[tokio::test]
async fn a_handler_error_goes_back_to_the_model_under_recover() {
    let backend = atlantis_then_answer();
    let options = Options::auto().with_tools(registry([weather_tool()]));
    let result = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();
    let sent = tool_result(&result.messages[1]);
    assert!(sent.is_error);
    assert_eq!(sent.content, "no weather station for `Atlantis`");
    assert_eq!(result.text(), "No station there.");
}

#[tokio::test]
async fn a_handler_error_ends_the_run_under_abort() {
    let backend = atlantis_then_answer();
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_tool_error_mode(ToolErrorMode::Abort);
    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();
    assert_eq!(
        error.kind,
        ErrorKind::Tool {
            tool: "get_weather".to_owned()
        }
    );
    assert_eq!(error.status(), 500);
    assert!(
        error.message.contains("no weather station for `Atlantis`"),
        "{}",
        error.message
    );
    assert_eq!(backend.calls(), 1);
    assert_eq!(error.partial_trace.len(), 1);
    // The failed result is in the history, so it stays valid to send again.
    assert_eq!(error.partial_messages.len(), 2);
    assert!(tool_result(&error.partial_messages[1]).is_error);
}

#[tokio::test]
async fn under_abort_serial_calls_after_a_failure_are_not_run() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = {
        let runs = Arc::clone(&runs);
        Tool::from_json_fn(
            "count",
            "Counts.",
            json!({"type": "object"}),
            move |_args: Value, _ctx| {
                let runs = Arc::clone(&runs);
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok(json!("counted"))
                }
            },
        )
    };
    let backend = ScriptedBackend::new([ScriptedTurn::tool_calls([
        ToolCall::new("call_1", "get_weather", json!({"city": "Atlantis"})),
        ToolCall::new("call_2", "count", json!({})),
    ])]);
    let options = Options::auto()
        .with_tools(registry([weather_tool(), counted]))
        .with_tool_parallelism(ToolParallelism::Serial)
        .with_tool_error_mode(ToolErrorMode::Abort);

    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();

    assert_eq!(error.status(), 500);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let skipped = tool_result(&error.partial_messages[2]);
    assert_eq!(skipped.tool_call_id.as_str(), "call_2");
    assert!(skipped.is_error);
    assert!(
        skipped.content.contains("was not run"),
        "{}",
        skipped.content
    );
}

#[tokio::test]
async fn a_panicking_handler_becomes_an_error_result() {
    let boom = Tool::from_json_fn(
        "boom",
        "Panics.",
        json!({"type": "object"}),
        |args: Value, _ctx| async move {
            if args["explode"] == json!(true) {
                panic!("index out of bounds");
            }
            Ok(json!("fine"))
        },
    );
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "boom", json!({"explode": true})),
        ScriptedTurn::text("That tool is broken."),
    ]);
    let options = Options::auto()
        .with_tools(registry([boom]))
        .with_tool_trace(true);

    let result = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();

    let sent = tool_result(&result.messages[1]);
    assert!(sent.is_error);
    assert!(sent.content.contains("panicked"), "{}", sent.content);
    assert!(
        sent.content.contains("index out of bounds"),
        "{}",
        sent.content
    );
    assert!(result.trace[0].error.is_some());
    assert_eq!(result.text(), "That tool is broken.");
}

#[tokio::test]
async fn a_fatal_tool_error_ends_the_run_even_under_recover() {
    let revoked = Tool::from_json_fn(
        "orders",
        "Lists orders.",
        json!({"type": "object"}),
        |_args: Value, _ctx| async move {
            Err::<Value, _>(ToolError::fatal("the API credentials were revoked"))
        },
    );
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "orders", json!({})),
        ScriptedTurn::text("never reached"),
    ]);
    let options = Options::auto().with_tools(registry([revoked]));
    assert_eq!(options.tool_error_mode, ToolErrorMode::Recover);

    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();

    assert_eq!(
        error.kind,
        ErrorKind::Tool {
            tool: "orders".to_owned()
        }
    );
    assert_eq!(error.status(), 500);
    assert!(
        error.message.contains("the API credentials were revoked"),
        "{}",
        error.message
    );
    assert_eq!(backend.calls(), 1);
    // Attached although no trace was asked for.
    assert_eq!(error.partial_trace.len(), 1);
    assert_eq!(error.partial_messages.len(), 2);
}

// ---------------------------------------------------------------------------------------------
// Timeouts

fn slow_round() -> ScriptedBackend {
    ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "sleep", json!({"millis": 10_000})),
        ScriptedTurn::text("It was too slow."),
    ])
}

#[tokio::test(start_paused = true)]
async fn a_tool_past_its_timeout_is_stopped_and_reported_to_the_model() {
    let backend = slow_round();
    let options = Options::auto()
        .with_tools(registry([sleep_tool()]))
        .with_tool_timeout(Duration::from_secs(1))
        .with_tool_trace(true);
    let started = Instant::now();

    let result = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();

    assert_about(started.elapsed(), 1_000);
    let sent = tool_result(&result.messages[1]);
    assert!(sent.is_error);
    assert_eq!(
        sent.content,
        "`sleep` did not finish within 1s and was stopped. Try a smaller request or another \
         approach."
    );
    assert!(result.trace[0].error.is_some());
    assert_eq!(result.text(), "It was too slow.");
}

#[tokio::test(start_paused = true)]
async fn a_tool_timeout_under_abort_ends_the_run() {
    let backend = slow_round();
    let options = Options::auto()
        .with_tools(registry([sleep_tool()]))
        .with_tool_timeout(Duration::from_secs(1))
        .with_tool_error_mode(ToolErrorMode::Abort);
    let started = Instant::now();

    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();

    assert_about(started.elapsed(), 1_000);
    assert_eq!(
        error.kind,
        ErrorKind::Tool {
            tool: "sleep".to_owned()
        }
    );
    assert!(
        error.message.contains("did not finish within 1s"),
        "{}",
        error.message
    );
    assert_eq!(backend.calls(), 1);
}

// ---------------------------------------------------------------------------------------------
// Truncation

#[tokio::test]
async fn a_long_result_is_cut_to_the_cap_with_a_marker() {
    // 100,000 bytes of two-byte characters: the cut must land on a character boundary.
    let long = Tool::from_json_fn(
        "dump",
        "Returns a lot of text.",
        json!({"type": "object"}),
        |_args: Value, _ctx| async { Ok(json!("é".repeat(50_000))) },
    );
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "dump", json!({})),
        ScriptedTurn::text("That was long."),
    ])
    .recording();
    let options = Options::auto()
        .with_tools(registry([long]))
        .with_tool_result_max_bytes(1_024)
        .with_tool_trace(true);

    let (events, result) = collect(generate_stream(
        &backend,
        Input::new("m").user("?"),
        &options,
    ))
    .await;
    let result = result.unwrap();

    let requests = backend.requests();
    let seen = &requests.last().unwrap().messages;
    let Some(Message::Tool(sent)) = seen.last() else {
        panic!("the last message sent is not a tool result: {seen:?}");
    };
    assert!(!sent.is_error);
    assert!(sent.content.len() <= 1_024, "{} bytes", sent.content.len());
    assert!(
        sent.content
            .ends_with("[…truncated; full result 100000 bytes]"),
        "{}",
        &sent.content[sent.content.len() - 60..]
    );
    assert!(sent.content.starts_with("éé"));

    let entry = &result.trace[0];
    assert_eq!(entry.result_bytes, 100_000);
    assert_eq!(entry.sent_bytes, sent.content.len() as u64);
    assert!(entry.sent_bytes <= 1_024);
    assert!(entry.truncated);

    let ended = events.iter().find_map(|event| match event {
        AgentEvent::ToolExecutionEnd {
            output, truncated, ..
        } => Some((output, *truncated)),
        _ => None,
    });
    assert_eq!(ended, Some((&sent.content, true)));
}

/// Handlers learn the cap from their context (so they read no more than it keeps), and the cap
/// holds on the wire: 10,000 NUL bytes would be 60,000 bytes once escaped in the request.
#[tokio::test]
async fn handlers_see_the_result_cap_and_escaping_counts_in_it() {
    let seen_cap = Arc::new(Mutex::new(None));
    let seen = Arc::clone(&seen_cap);
    let nul = Tool::from_json_fn(
        "nul",
        "Returns NUL bytes.",
        json!({"type": "object"}),
        move |_args: Value, ctx| {
            *seen.lock().unwrap() = Some(ctx.max_result_bytes());
            async { Ok(json!("\0".repeat(10_000))) }
        },
    );
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "nul", json!({})),
        ScriptedTurn::text("Zeros."),
    ])
    .recording();
    let options = Options::auto()
        .with_tools(registry([nul]))
        .with_tool_result_max_bytes(1_024);
    generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();

    assert_eq!(*seen_cap.lock().unwrap(), Some(Some(1_024)));
    let requests = backend.requests();
    let sent = sent_results(requests.last().unwrap());
    let on_the_wire = serde_json::to_string(&sent[0].content).unwrap().len() - 2;
    assert!(on_the_wire <= 1_024, "{on_the_wire} bytes on the wire");
    assert!(
        sent[0]
            .content
            .ends_with("[…truncated; full result 10000 bytes]")
    );
}

#[tokio::test]
async fn a_cap_too_small_for_the_marker_is_refused_before_any_model_call() {
    let backend = ScriptedBackend::new([ScriptedTurn::text("never reached")]);
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_tool_result_max_bytes(63);
    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Config);
    assert_eq!(error.status(), 400);
    assert!(
        error.message.contains("63 bytes is too small"),
        "{}",
        error.message
    );
    assert_eq!(backend.calls(), 0);

    // 64 is the smallest cap accepted.
    let backend = ScriptedBackend::new([ScriptedTurn::text("ok")]);
    let options = options.with_tool_result_max_bytes(64);
    assert!(
        generate(&backend, Input::new("m").user("?"), &options)
            .await
            .is_ok()
    );
}

// ---------------------------------------------------------------------------------------------
// Which tools are offered

#[tokio::test]
async fn the_allow_list_narrows_what_the_model_is_offered_and_may_run() {
    let backend = ScriptedBackend::new([
        // The model asks for a registered tool it was not offered.
        ScriptedTurn::tool_call("call_1", "sleep", json!({"millis": 1})),
        ScriptedTurn::text("Fine."),
    ])
    .recording();
    let options = Options::auto()
        .with_tools(registry([weather_tool(), sleep_tool()]))
        .with_allowed_tools(["get_weather"]);

    let result = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();

    let requests = backend.requests();
    assert_eq!(offered(&requests[0]), ["get_weather"]);
    assert_eq!(offered(&requests[1]), ["get_weather"]);
    let sent = tool_result(&result.messages[1]);
    assert!(sent.is_error);
    assert_eq!(
        sent.content,
        "There is no tool named `sleep`. Available tools: get_weather."
    );

    // Without the allow-list both are offered.
    let backend = ScriptedBackend::new([ScriptedTurn::text("Hi.")]).recording();
    let options = Options::auto().with_tools(registry([weather_tool(), sleep_tool()]));
    generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();
    assert_eq!(offered(&backend.requests()[0]), ["get_weather", "sleep"]);
}

#[tokio::test]
async fn an_unknown_name_in_the_allow_list_is_refused_before_any_model_call() {
    let backend = ScriptedBackend::new([ScriptedTurn::text("never reached")]);
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_allowed_tools(["get_weather", "get_forecast"]);
    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Config);
    assert_eq!(error.status(), 400);
    assert!(
        error.message.contains("`get_forecast`"),
        "{}",
        error.message
    );
    assert!(
        !error.message.contains("`get_weather`"),
        "{}",
        error.message
    );
    assert_eq!(backend.calls(), 0);
}

fn no_tools_capabilities() -> Capabilities {
    Capabilities {
        tools: false,
        streaming: true,
        parallel_tool_calls: false,
        thinking: false,
        prompt_caching: false,
        usage_reporting: true,
        structured_output: false,
        tool_search: false,
    }
}

#[tokio::test]
async fn tools_on_a_backend_without_tool_support_are_refused_before_any_request() {
    let backend = ScriptedBackend::new([ScriptedTurn::text("never reached")])
        .with_capabilities(no_tools_capabilities());
    let options = Options::auto().with_tools(registry([weather_tool()]));
    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Config);
    assert_eq!(error.status(), 400);
    assert!(
        error.message.contains("does not support tools"),
        "{}",
        error.message
    );
    assert_eq!(backend.calls(), 0);

    // The same backend is fine without tools.
    let backend = ScriptedBackend::new([ScriptedTurn::text("Hi.")])
        .with_capabilities(no_tools_capabilities());
    let result = generate(&backend, Input::new("m").user("?"), &Options::auto())
        .await
        .unwrap();
    assert_eq!(result.text(), "Hi.");
}

/// `whoami`: answers with the caller its context carries.
fn whoami_tool() -> Tool {
    Tool::from_json_fn(
        "whoami",
        "Who is calling.",
        json!({"type": "object"}),
        |_args: Value, ctx| async move {
            let caller = ctx.caller();
            Ok(json!({
                "principal": caller.principal(),
                "tenant": caller.tenant(),
                "can_write": caller.has_permission("orders:write"),
            }))
        },
    )
}

fn delete_order_tool(runs: Arc<AtomicUsize>) -> Tool {
    Tool::from_json_fn(
        "delete_order",
        "Deletes an order.",
        json!({"type": "object"}),
        move |_args: Value, _ctx| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(json!("deleted"))
            }
        },
    )
    .requires_permission("orders:write")
}

#[tokio::test]
async fn tools_needing_a_permission_are_hidden_from_callers_without_it() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tools = || registry([whoami_tool(), delete_order_tool(Arc::clone(&runs))]);
    let script = || {
        ScriptedBackend::new([
            ScriptedTurn::tool_calls([
                ToolCall::new("call_1", "delete_order", json!({})),
                ToolCall::new("call_2", "whoami", json!({})),
            ]),
            ScriptedTurn::text("Done."),
        ])
        .recording()
    };

    // A reader: the tool is neither offered nor run, even when the model names it.
    let backend = script();
    let reader = Caller::new("ann").with_tenant("acme");
    let options = Options::auto().with_tools(tools()).with_caller(reader);
    let result = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();
    assert_eq!(offered(&backend.requests()[0]), ["whoami"]);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let refused = tool_result(&result.messages[1]);
    assert!(refused.is_error);
    assert!(
        refused
            .content
            .contains("There is no tool named `delete_order`")
    );
    // The handler saw the caller.
    assert_eq!(
        tool_result(&result.messages[2]).content,
        json!({"principal": "ann", "tenant": "acme", "can_write": false}).to_string()
    );

    // A writer sees and runs it.
    let backend = script();
    let writer = Caller::new("bob").with_permission("orders:write");
    let options = Options::auto().with_tools(tools()).with_caller(writer);
    let result = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();
    assert_eq!(offered(&backend.requests()[0]), ["delete_order", "whoami"]);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(tool_result(&result.messages[1]).content, "deleted");
    assert_eq!(
        tool_result(&result.messages[2]).content,
        json!({"principal": "bob", "tenant": null, "can_write": true}).to_string()
    );
}

#[tokio::test]
async fn a_permission_scope_keeps_a_run_from_tools_its_caller_could_use() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tools = || registry([whoami_tool(), delete_order_tool(Arc::clone(&runs))]);
    let script = || {
        ScriptedBackend::new([
            ScriptedTurn::tool_calls([
                ToolCall::new("call_1", "delete_order", json!({})),
                ToolCall::new("call_2", "whoami", json!({})),
            ]),
            ScriptedTurn::text("Done."),
        ])
        .recording()
    };
    let writer = || {
        Caller::new("bob")
            .with_tenant("acme")
            .with_permissions(["orders:read", "orders:write"])
    };

    // The caller may write, this run may only read: the tool is neither offered nor run, and
    // the handlers see the narrowed caller.
    let backend = script();
    let options = Options::auto()
        .with_tools(tools())
        .with_caller(writer())
        .with_permission_scope(["orders:read"]);
    let result = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();
    assert_eq!(offered(&backend.requests()[0]), ["whoami"]);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let refused = tool_result(&result.messages[1]);
    assert!(refused.is_error);
    assert!(
        refused
            .content
            .contains("There is no tool named `delete_order`")
    );
    assert_eq!(
        tool_result(&result.messages[2]).content,
        json!({"principal": "bob", "tenant": "acme", "can_write": false}).to_string()
    );
    // The options themselves keep the caller's full set, for the next run.
    assert!(options.caller.has_permission("orders:write"));

    // A scope never grants: a reader scoped to write still cannot delete.
    let backend = script();
    let options = Options::auto()
        .with_tools(tools())
        .with_caller(Caller::new("ann").with_permission("orders:read"))
        .with_permission_scope(["orders:write"]);
    generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();
    assert_eq!(offered(&backend.requests()[0]), ["whoami"]);
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // A scope that keeps the permission changes nothing.
    let backend = script();
    let options = Options::auto()
        .with_tools(tools())
        .with_caller(writer())
        .with_permission_scope(["orders:write"]);
    generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();
    assert_eq!(offered(&backend.requests()[0]), ["delete_order", "whoami"]);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------------------------
// Spend reported by handlers

/// `summarize`: a tool that calls a model of its own and reports what that cost.
fn summarize_tool(tokens: u64, cost_usd: f64) -> Tool {
    Tool::from_json_fn(
        "summarize",
        "Summarizes with a model.",
        json!({"type": "object"}),
        move |_args: Value, ctx| async move {
            ctx.accounting().add_tokens(tokens);
            ctx.accounting().add_cost_usd(cost_usd);
            Ok(json!("ok"))
        },
    )
}

fn summarize_round() -> ScriptedBackend {
    ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "summarize", json!({})).with_usage(usage(10, 10)),
        ScriptedTurn::text("Summarized.").with_usage(usage(10, 10)),
    ])
}

#[tokio::test]
async fn tokens_reported_by_a_handler_count_against_the_token_budget() {
    let backend = summarize_round();
    let options = Options::auto()
        .with_tools(registry([summarize_tool(5_000, 0.0)]))
        .with_token_budget(1_000);
    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();
    // 20 for the model call, 5,000 reported; the message tells the two apart, since the
    // run's usage holds only the first.
    assert_eq!(
        error.budget_exceeded(),
        Some(&Budget::Tokens {
            used: 20 + 5_000,
            max: 1_000
        })
    );
    assert!(
        error.message.contains(
            "token budget: 5020 of 1000 tokens (20 by model calls, 5000 reported by tools)"
        ),
        "{}",
        error.message
    );
    assert_eq!(error.spent.usage.total_tokens(), Some(20));
    assert_eq!(backend.calls(), 1);

    // The same round without the report fits.
    let backend = summarize_round();
    let options = options.with_tools(registry([summarize_tool(0, 0.0)]));
    assert!(
        generate(&backend, Input::new("m").user("?"), &options)
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn dollars_reported_by_a_handler_count_against_the_cost_budget_and_in_the_result() {
    let card = RateCard::new().with(
        "m",
        ModelPrice {
            input_per_mtok: 1.0,
            output_per_mtok: 1.0,
            ..ModelPrice::default()
        },
    );
    let backend = summarize_round();
    let options = Options::auto()
        .with_tools(registry([summarize_tool(0, 0.5)]))
        .with_rate_card(card)
        .with_max_cost_usd(0.1);
    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();
    let Some(Budget::CostUsd { used, max }) = error.budget_exceeded() else {
        panic!("expected the cost budget, got {error:?}");
    };
    // 20 tokens at $1 per million, plus the $0.50 reported.
    assert!((used - 0.500_02).abs() < 1e-12, "{used}");
    assert!((max - 0.1).abs() < f64::EPSILON);
    assert_eq!(backend.calls(), 1);

    // Without a cost budget the report shows up in the result's cost.
    let backend = summarize_round();
    let mut options = options;
    options.max_cost_usd = None;
    let result = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();
    assert!((result.cost_usd.unwrap() - 0.500_04).abs() < 1e-12);
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Shots {
    /// How many screenshots.
    n: usize,
}

/// A tool that returns a caption, `n` screenshots of 6 bytes each and a JSON summary.
fn screenshot_tool() -> Tool {
    Tool::from_fn(
        "screenshot",
        "Takes screenshots.",
        |args: Shots, _ctx| async move {
            let mut content = agent_tools::ToolContent::text("Screens:");
            for i in 0..args.n {
                content = content.and(agent_tools::ToolContent::image([i as u8; 6], "image/png"));
            }
            Ok::<_, ToolError>(content.and(agent_tools::ToolContent::json(json!({"n": args.n}))))
        },
    )
}

/// Concurrent calls of one round leave their content in the run's shared accounting; each
/// result gets its own, even when the model gives two calls the same id and the handlers
/// interleave between setting their content and finishing.
#[tokio::test]
async fn parallel_calls_with_one_id_each_get_their_own_content() {
    let tool = Tool::from_json_fn(
        "label",
        "Labels a number.",
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        |arguments, ctx| async move {
            ctx.set_content(agent_tools::ToolContent::text(format!(
                "label {}",
                arguments["n"]
            )));
            // The other calls run (and set theirs) before this one is done.
            tokio::task::yield_now().await;
            Ok(Value::Null)
        },
    );
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_calls([
            ToolCall::new("dup", "label", json!({"n": 1})),
            ToolCall::new("dup", "label", json!({"n": 2})),
            ToolCall::new("other", "label", json!({"n": 3})),
        ]),
        ScriptedTurn::text("Three labels."),
    ]);
    let options = Options::auto().with_tools(registry([tool]));
    let result = generate(&backend, Input::new("m").user("Labels?"), &options)
        .await
        .unwrap();
    let sent: Vec<&str> = (1..=3)
        .map(|at| tool_result(&result.messages[at]).content.as_str())
        .collect();
    assert_eq!(sent, ["label 1", "label 2", "label 3"]);
}

/// A handler's content blocks reach the history, the next request, the end event and the
/// trace as blocks, not as their JSON text.
#[tokio::test]
async fn content_blocks_from_a_tool_reach_the_model_the_events_and_the_trace() {
    use agent_types::{ImageSource, ToolResultBlock};

    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "screenshot", json!({"n": 1})),
        ScriptedTurn::text("A blank screen."),
    ])
    .recording();
    let options = Options::auto()
        .with_tools(registry([screenshot_tool()]))
        .with_tool_trace(true);
    let (events, result) = collect(generate_stream(
        &backend,
        Input::new("m").user("What is on screen?"),
        &options,
    ))
    .await;
    let result = result.unwrap();

    let expected_blocks = vec![
        ToolResultBlock::Image {
            source: ImageSource::Base64 {
                media_type: "image/png".into(),
                data: "AAAAAAAA".into(),
            },
        },
        ToolResultBlock::Json {
            value: json!({"n": 1}),
        },
    ];
    let sent = tool_result(&result.messages[1]);
    assert_eq!(sent.content, "Screens:");
    assert_eq!(sent.blocks, expected_blocks);
    assert!(!sent.is_error);
    let requests = backend.requests();
    assert_eq!(sent_results(&requests[1])[0], sent);

    let end = events
        .iter()
        .find_map(|event| match event {
            AgentEvent::ToolExecutionEnd {
                output,
                blocks,
                truncated,
                ..
            } => Some((output.clone(), blocks.clone(), *truncated)),
            _ => None,
        })
        .unwrap();
    assert_eq!(end, ("Screens:".to_owned(), expected_blocks, false));
    let entry = &result.trace[0];
    // "Screens:" (8) + `{"n":1}` (7) + 6 image bytes.
    assert_eq!(entry.result_bytes, 21);
    assert_eq!(entry.sent_bytes, 21);
    assert!(!entry.truncated);
}

/// Images past `tool_result_max_binary_bytes` are replaced by a note saying what was
/// dropped; the result, its end event and its trace entry say it was truncated.
#[tokio::test]
async fn images_past_the_binary_cap_are_replaced_by_a_note() {
    use agent_types::ToolResultBlock;

    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "screenshot", json!({"n": 3})),
        ScriptedTurn::text("Two screens."),
    ]);
    let options = Options::auto()
        .with_tools(registry([screenshot_tool()]))
        .with_tool_result_max_binary_bytes(12)
        .with_tool_trace(true);
    let (events, result) = collect(generate_stream(
        &backend,
        Input::new("m").user("Screens?"),
        &options,
    ))
    .await;
    let result = result.unwrap();

    let sent = tool_result(&result.messages[1]);
    let kinds: Vec<&str> = sent.blocks.iter().map(|b| b.kind().as_str()).collect();
    assert_eq!(kinds, ["image", "image", "text", "json"]);
    let ToolResultBlock::Text { text } = &sent.blocks[2] else {
        unreachable!()
    };
    assert_eq!(
        text,
        "[an image (image/png) of 6 bytes was dropped: this result's images and files are \
         capped at 12 bytes (tool_result_max_binary_bytes)]"
    );
    assert!(events.iter().any(|event| matches!(
        event,
        AgentEvent::ToolExecutionEnd {
            truncated: true,
            ..
        }
    )));
    let entry = &result.trace[0];
    assert!(entry.truncated);
    assert_eq!(entry.result_bytes, 8 + 7 + 18);
    assert_eq!(entry.sent_bytes, 8 + 7 + text.len() as u64 + 12);
}

/// Text and JSON blocks over `tool_result_max_bytes` are joined and cut with the usual
/// marker; the images stay.
#[tokio::test]
async fn content_text_over_the_text_cap_is_cut_with_the_marker() {
    let long = "x".repeat(2_000);
    let tool = Tool::from_fn("page", "A page.", move |_args: Shots, _ctx| {
        let long = long.clone();
        async move {
            Ok::<_, ToolError>(
                agent_tools::ToolContent::text(long)
                    .and(agent_tools::ToolContent::image([1u8; 3], "image/png")),
            )
        }
    });
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "page", json!({"n": 1})),
        ScriptedTurn::text("Long."),
    ]);
    let options = Options::auto()
        .with_tools(registry([tool]))
        .with_tool_result_max_bytes(1_024)
        .with_tool_trace(true);
    let result = generate(&backend, Input::new("m").user("Page?"), &options)
        .await
        .unwrap();
    let sent = tool_result(&result.messages[1]);
    assert!(sent.content.len() <= 1_024, "{}", sent.content.len());
    assert!(
        sent.content.contains("truncated"),
        "{}",
        &sent.content[900..]
    );
    assert_eq!(sent.blocks.len(), 1);
    assert!(result.trace[0].truncated);
}

#[tokio::test]
async fn a_strict_tool_is_offered_strict_and_runs_with_the_nulls_strict_mode_sends() {
    // What an OpenAI model in strict mode sends for the optional `unit`: `null`.
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "convert", json!({"celsius": 21, "unit": null})),
        ScriptedTurn::text("70 °F."),
    ])
    .recording();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let schema = json!({"type": "object", "properties": {
        "celsius": {"type": "number"},
        "unit": {"type": "string", "enum": ["f", "k"]}
    }, "required": ["celsius"], "additionalProperties": false});
    let tool = {
        let seen = Arc::clone(&seen);
        Tool::from_json_fn(
            "convert",
            "Converts a temperature.",
            schema,
            move |args, _| {
                seen.lock().unwrap().push(args);
                async { Ok::<_, ToolError>(json!({"fahrenheit": 69.8})) }
            },
        )
        .strict()
    };
    let options = Options::auto().with_tools(registry([tool]));

    let result = generate(&backend, Input::new("m").user("21 °C in °F?"), &options)
        .await
        .unwrap();

    assert_eq!(result.text(), "70 °F.");
    // The handler ran, with the arguments the schema describes (the null dropped), where a
    // tool that is not strict would have refused `unit: null`.
    assert_eq!(*seen.lock().unwrap(), [json!({"celsius": 21})]);
    let requests = backend.requests();
    assert!(
        requests[0].tools[0].strict,
        "the spec went to the backend strict"
    );
    assert!(!sent_results(&requests[1])[0].is_error);
}
