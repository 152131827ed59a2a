//! The two tool modes, every option's default, what a run reports (messages, usage, cost,
//! per-call records, trace), and how a failed model call ends a run.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{
    Hooks, Input, ModelCallRecord, Options, SessionStatus, ToolErrorMode, ToolMode,
    ToolParallelism, ValidationMode, generate,
};
use agent_tools::{Caller, Tool};
use agent_types::{
    BackendError, BackendErrorKind, ErrorKind, Message, ModelPrice, RateCard, StopReason, ToolCall,
    ToolResult, Usage,
};
use serde_json::{Value, json};

use crate::support::{registry, usage, weather_tool};

/// `get_weather` with the support tool's schema and answers, counting its invocations.
fn counted_weather_tool(runs: Arc<AtomicUsize>) -> Tool {
    Tool::from_fn(
        "get_weather",
        "Current weather for a city.",
        move |args: crate::support::City, _ctx| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(json!({"city": args.city, "sky": "sunny"}))
            }
        },
    )
}

fn tool_message(message: &Message) -> &ToolResult {
    match message {
        Message::Tool(result) => result,
        other => panic!("expected a tool result, got {other:?}"),
    }
}

fn assistant_calls(message: &Message) -> Vec<ToolCall> {
    match message {
        Message::Assistant(assistant) => assistant.tool_calls().cloned().collect(),
        other => panic!("expected an assistant message, got {other:?}"),
    }
}

fn assistant_text(message: &Message) -> String {
    match message {
        Message::Assistant(assistant) => assistant.text_content(),
        other => panic!("expected an assistant message, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Defaults

#[test]
fn every_option_has_its_documented_default() {
    let options = Options::default();
    assert_eq!(options.mode, ToolMode::Return);
    assert!(options.tools.is_empty());
    assert_eq!(options.allowed_tools, None);
    assert_eq!(*options.caller, Caller::default());
    assert_eq!(options.max_tool_iterations, 10);
    assert_eq!(options.token_budget, None);
    assert_eq!(options.max_cost_usd, None);
    assert_eq!(options.rate_card.models().count(), 0);
    assert_eq!(
        options.tool_parallelism,
        ToolParallelism::Parallel { max_concurrent: 16 }
    );
    assert_eq!(ToolParallelism::DEFAULT_MAX_CONCURRENT, 16);
    assert_eq!(options.tool_result_max_bytes, 65_536);
    assert_eq!(options.tool_error_mode, ToolErrorMode::Recover);
    assert_eq!(options.tool_arg_validation, ValidationMode::Strict);
    assert!(!options.include_tool_trace);
    assert!(options.conversation.is_none());
    assert!(!options.echo_input);
    assert!(!options.cancellation.is_cancelled());
    assert_eq!(options.cancel_grace, Duration::from_secs(1));
    assert_eq!(options.model_call_timeout, None);
    assert_eq!(options.tool_timeout, None);
    assert_eq!(options.max_repeated_calls, Some(3));
    assert!(options.on_model_call.is_none());
    assert_eq!(
        format!("{:?}", options.hooks),
        format!("{:?}", Hooks::new())
    );

    // `auto()` changes the mode and nothing else.
    let auto = Options::auto();
    assert_eq!(auto.mode, ToolMode::Auto);
    assert_eq!(
        format!("{:?}", auto.with_mode(ToolMode::Return)),
        format!("{:?}", Options::default())
    );
}

// ---------------------------------------------------------------------------------------------
// `return` mode

#[tokio::test]
async fn return_mode_hands_the_calls_back_without_running_handlers() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tools = registry([counted_weather_tool(Arc::clone(&runs))]);
    let backend = ScriptedBackend::new([
        // Arguments arrive as JSON text in small fragments; the caller gets them parsed.
        ScriptedTurn::tool_calls([
            ToolCall::new("call_1", "get_weather", json!({"city": "Denver"})),
            ToolCall::new("call_2", "get_weather", json!({"city": "Paris"})),
        ])
        .chunked(3),
        ScriptedTurn::text("Denver is sunny, Paris is rainy."),
    ])
    .recording();
    // The default mode is `return`.
    let options = Options::default().with_tools(tools);

    let first = generate(
        &backend,
        Input::new("test-model").user("Weather in Denver and Paris?"),
        &options,
    )
    .await
    .unwrap();

    assert_eq!(backend.calls(), 1);
    assert_eq!(runs.load(Ordering::SeqCst), 0, "return mode ran a handler");
    assert_eq!(first.finish_reason, StopReason::ToolCalls);
    assert_eq!(first.status, SessionStatus::AwaitingToolExecution);
    let calls: Vec<(&str, &str, &Value)> = first
        .tool_calls()
        .map(|call| (call.id.as_str(), call.name.as_str(), &call.arguments))
        .collect();
    assert_eq!(
        calls,
        [
            ("call_1", "get_weather", &json!({"city": "Denver"})),
            ("call_2", "get_weather", &json!({"city": "Paris"})),
        ]
    );
    assert_eq!(
        first.pending_tool_calls,
        first.tool_calls().cloned().collect::<Vec<_>>()
    );
    // Only the turn asking for tools; no results were made up.
    assert_eq!(first.messages.len(), 1);
    assert_eq!(assistant_calls(&first.messages[0]).len(), 2);
    assert!(first.trace.is_empty());

    // The caller runs the tools and sends the extended conversation back.
    let second = generate(
        &backend,
        Input::new("test-model")
            .user("Weather in Denver and Paris?")
            .messages(first.messages.clone())
            .message(ToolResult::ok(
                "call_1",
                "get_weather",
                r#"{"sky":"sunny"}"#,
            ))
            .message(ToolResult::ok("call_2", "get_weather", r#"{"sky":"rain"}"#)),
        &options,
    )
    .await
    .unwrap();

    assert_eq!(backend.calls(), 2);
    assert_eq!(runs.load(Ordering::SeqCst), 0, "return mode ran a handler");
    assert_eq!(second.finish_reason, StopReason::Stop);
    assert_eq!(second.status, SessionStatus::Completed);
    assert_eq!(second.text(), "Denver is sunny, Paris is rainy.");
    assert!(second.pending_tool_calls.is_empty());
    assert_eq!(second.messages.len(), 1);

    // The second request carried the caller's results after the tool-call turn.
    let sent = &backend.requests()[1].messages;
    assert_eq!(sent.len(), 4);
    assert_eq!(sent[1], first.messages[0]);
    assert_eq!(tool_message(&sent[2]).tool_call_id.as_str(), "call_1");
    assert_eq!(tool_message(&sent[3]).content, r#"{"sky":"rain"}"#);
}

#[tokio::test]
async fn return_mode_passes_invalid_arguments_through_unchecked() {
    // Validation belongs to whoever runs the tool; in `return` mode that is the caller.
    let runs = Arc::new(AtomicUsize::new(0));
    let backend = ScriptedBackend::new([ScriptedTurn::tool_call(
        "call_1",
        "get_weather",
        json!({"city": 5}),
    )]);
    let options =
        Options::default().with_tools(registry([counted_weather_tool(Arc::clone(&runs))]));
    let result = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();
    assert_eq!(result.finish_reason, StopReason::ToolCalls);
    assert_eq!(result.pending_tool_calls[0].arguments, json!({"city": 5}));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

// ---------------------------------------------------------------------------------------------
// `auto` mode

#[tokio::test]
async fn auto_mode_runs_the_tools_and_feeds_results_back_until_an_answer() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::new()
            .with_text("Checking both.")
            .with_tool_call(ToolCall::new(
                "call_1",
                "get_weather",
                json!({"city": "Denver"}),
            ))
            .with_tool_call(ToolCall::new(
                "call_2",
                "get_weather",
                json!({"city": "Paris"}),
            ))
            .with_usage(usage(100, 20)),
        ScriptedTurn::text("Sunny in Denver, rain in Paris.").with_usage(usage(180, 12)),
    ])
    .recording();
    let options = Options::auto().with_tools(registry([weather_tool()]));

    let result = generate(
        &backend,
        Input::new("test-model").user("Denver and Paris?"),
        &options,
    )
    .await
    .unwrap();

    assert_eq!(backend.calls(), 2);
    assert_eq!(result.status, SessionStatus::Completed);
    assert_eq!(result.finish_reason, StopReason::Stop);
    assert_eq!(result.text(), "Sunny in Denver, rain in Paris.");
    assert!(result.pending_tool_calls.is_empty());

    // Assistant turn, its results in call order, the answer; the user's input is not echoed.
    let messages = &result.messages;
    assert_eq!(messages.len(), 4);
    assert_eq!(assistant_text(&messages[0]), "Checking both.");
    assert_eq!(assistant_calls(&messages[0]).len(), 2);
    let denver = tool_message(&messages[1]);
    assert_eq!(denver.tool_call_id.as_str(), "call_1");
    assert_eq!(denver.name, "get_weather");
    assert!(!denver.is_error);
    assert_eq!(
        denver.content,
        json!({"city": "Denver", "sky": "sunny", "temp_c": 21}).to_string()
    );
    let paris = tool_message(&messages[2]);
    assert_eq!(paris.tool_call_id.as_str(), "call_2");
    assert_eq!(
        paris.content,
        json!({"city": "Paris", "sky": "rain", "temp_c": 12}).to_string()
    );
    assert_eq!(messages[3], Message::Assistant(result.message.clone()));

    // The second request is the first one plus the assistant turn and both results.
    let requests = backend.requests();
    assert_eq!(requests[0].messages.len(), 1);
    assert_eq!(requests[1].messages[0], requests[0].messages[0]);
    assert_eq!(requests[1].messages[1..], messages[..3]);

    // Usage is summed over both calls; nothing is priced without a rate card.
    assert_eq!(result.usage, usage(280, 32));
    assert_eq!(result.cost_usd, None);
    // No trace unless asked for.
    assert!(result.trace.is_empty());
}

#[tokio::test]
async fn trace_is_in_the_result_only_when_asked_for() {
    let script = || {
        ScriptedBackend::new([
            ScriptedTurn::tool_calls([
                ToolCall::new("call_1", "get_weather", json!({"city": "Denver"})),
                ToolCall::new("call_2", "get_weather", json!({"city": "Atlantis"})),
            ]),
            ScriptedTurn::tool_call("call_3", "get_weather", json!({"city": "Paris"})),
            ScriptedTurn::text("Done."),
        ])
    };
    let options = Options::auto().with_tools(registry([weather_tool()]));

    let without = generate(&script(), Input::new("m").user("?"), &options)
        .await
        .unwrap();
    assert!(without.trace.is_empty());

    let with = generate(
        &script(),
        Input::new("m").user("?"),
        &options.clone().with_tool_trace(true),
    )
    .await
    .unwrap();
    assert_eq!(with.messages, without.messages);
    let trace: Vec<(u32, &str, &Value, bool)> = with
        .trace
        .iter()
        .map(|entry| {
            (
                entry.iteration,
                entry.call_id.as_str(),
                &entry.arguments,
                entry.error.is_some(),
            )
        })
        .collect();
    assert_eq!(
        trace,
        [
            (1, "call_1", &json!({"city": "Denver"}), false),
            (1, "call_2", &json!({"city": "Atlantis"}), true),
            (2, "call_3", &json!({"city": "Paris"}), false),
        ]
    );
    let failed = &with.trace[1];
    assert_eq!(failed.tool_name, "get_weather");
    assert!(
        failed
            .error
            .as_deref()
            .unwrap()
            .contains("no weather station for `Atlantis`")
    );
    for (entry, message) in with.trace.iter().zip([1, 2, 4]) {
        let sent = tool_message(&with.messages[message]);
        assert_eq!(entry.call_id, sent.tool_call_id);
        assert_eq!(entry.sent_bytes, sent.content.len() as u64);
        assert_eq!(entry.result_bytes, entry.sent_bytes);
        assert!(!entry.truncated);
    }
}

#[tokio::test(start_paused = true)]
async fn model_call_records_price_cache_reads_apart_and_time_each_call() {
    // $3 per million input tokens, $15 output, cache reads at $0.30.
    let price = ModelPrice {
        input_per_mtok: 3.0,
        output_per_mtok: 15.0,
        cache_read_per_mtok: Some(0.30),
        ..ModelPrice::default()
    };
    let cached = Usage {
        input_tokens: Some(10_000),
        output_tokens: Some(1_000),
        cache_read_tokens: Some(6_000),
        ..Usage::default()
    };
    let backend = ScriptedBackend::new([
        ScriptedTurn::new()
            .with_delay(Duration::from_millis(250))
            .with_tool_call(ToolCall::new(
                "call_1",
                "get_weather",
                json!({"city": "Denver"}),
            ))
            .with_usage(cached),
        ScriptedTurn::text("Sunny.")
            .with_delay(Duration::from_millis(40))
            .with_usage(usage(2_000, 500)),
    ]);
    let sunk = Arc::new(Mutex::new(Vec::<ModelCallRecord>::new()));
    let sink = Arc::clone(&sunk);
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_rate_card(RateCard::new().with("priced-model", price))
        .on_model_call(move |record| sink.lock().unwrap().push(record.clone()));

    let result = generate(&backend, Input::new("priced-model").user("?"), &options)
        .await
        .unwrap();

    // 4,000 uncached input at $3 + 6,000 cache reads at $0.30 + 1,000 output at $15.
    let first_cost: f64 = 4_000.0 * 3.0 / 1e6 + 6_000.0 * 0.30 / 1e6 + 1_000.0 * 15.0 / 1e6;
    assert!((first_cost - 0.0288).abs() < 1e-12);
    // 2,000 input at $3 + 500 output at $15.
    let second_cost: f64 = 0.006 + 0.0075;

    let records = &result.model_calls;
    assert_eq!(records.len(), 2);
    assert_eq!(*sunk.lock().unwrap(), *records);

    let first = &records[0];
    assert_eq!(first.iteration, 0);
    assert_eq!(first.model, "priced-model");
    assert_eq!(first.usage, Some(cached));
    assert!((first.cost_usd.unwrap() - first_cost).abs() < 1e-12);
    assert_eq!(first.tool_calls, 1);
    assert_eq!(first.stop_reason, StopReason::ToolCalls);
    assert_eq!(first.latency, Duration::from_millis(250));
    // `message_start` comes before the pause.
    assert_eq!(first.time_to_first_event, Duration::ZERO);

    let second = &records[1];
    assert_eq!(second.iteration, 1);
    assert_eq!(second.usage, Some(usage(2_000, 500)));
    assert!((second.cost_usd.unwrap() - second_cost).abs() < 1e-12);
    assert_eq!(second.tool_calls, 0);
    assert_eq!(second.stop_reason, StopReason::Stop);
    assert_eq!(second.latency, Duration::from_millis(40));

    assert!((result.cost_usd.unwrap() - (first_cost + second_cost)).abs() < 1e-12);
    assert_eq!(result.usage, cached + usage(2_000, 500));
    assert_eq!(result.usage.cache_read_tokens, Some(6_000));
}

#[tokio::test]
async fn a_model_missing_from_the_rate_card_costs_nothing_known() {
    let backend = ScriptedBackend::new([ScriptedTurn::text("Hi.").with_usage(usage(1_000, 10))]);
    let options = Options::default().with_rate_card(RateCard::new().with(
        "other-model",
        ModelPrice {
            input_per_mtok: 1.0,
            output_per_mtok: 1.0,
            ..ModelPrice::default()
        },
    ));
    let result = generate(&backend, Input::new("unpriced-model").user("?"), &options)
        .await
        .unwrap();
    assert_eq!(result.cost_usd, None);
    assert_eq!(result.model_calls[0].cost_usd, None);
    assert_eq!(result.usage, usage(1_000, 10));
}

// ---------------------------------------------------------------------------------------------
// Failed model calls

#[tokio::test(start_paused = true)]
async fn a_model_call_past_its_timeout_is_a_backend_timeout() {
    let backend = ScriptedBackend::new([ScriptedTurn::new().with_text("Let me th").hang()]);
    let options = Options::default().with_model_call_timeout(Duration::from_secs(5));
    let started = tokio::time::Instant::now();

    // The outer timeout only turns a hang (the feature missing) into a failure.
    let error = tokio::time::timeout(
        Duration::from_secs(60),
        generate(&backend, Input::new("m").user("?"), &options),
    )
    .await
    .expect("the model call timeout never fired")
    .unwrap_err();

    assert_eq!(started.elapsed(), Duration::from_secs(5));
    let ErrorKind::Backend {
        error: backend_error,
    } = &error.kind
    else {
        panic!("expected a backend error, got {error:?}");
    };
    assert_eq!(backend_error.kind, BackendErrorKind::Timeout);
    assert_eq!(error.status(), 504);
    assert!(error.message.contains("5s timeout"), "{}", error.message);
    // What arrived before the model went quiet is kept.
    assert_eq!(
        backend_error.partial.as_ref().unwrap().text_content(),
        "Let me th"
    );
}

#[tokio::test]
async fn a_backend_failure_mid_stream_keeps_the_partial_message_and_earlier_rounds() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Denver"})),
        ScriptedTurn::text("Denver is sun").fail_with(BackendError::new(
            BackendErrorKind::Server,
            "upstream reset",
        )),
    ]);
    let options = Options::auto().with_tools(registry([weather_tool()]));

    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();

    let ErrorKind::Backend {
        error: backend_error,
    } = &error.kind
    else {
        panic!("expected a backend error, got {error:?}");
    };
    assert_eq!(backend_error.kind, BackendErrorKind::Server);
    assert_eq!(error.status(), 502);
    assert!(
        error.message.contains("upstream reset"),
        "{}",
        error.message
    );
    let partial = backend_error.partial.as_ref().unwrap();
    assert_eq!(partial.text_content(), "Denver is sun");
    assert_eq!(partial.stop_reason, Some(StopReason::Error));
    // The completed round is kept; the broken message is not part of the history.
    assert_eq!(error.partial_messages.len(), 2);
    assert_eq!(assistant_calls(&error.partial_messages[0]).len(), 1);
    assert!(!tool_message(&error.partial_messages[1]).is_error);
    assert_eq!(error.partial_trace.len(), 1);
}

#[tokio::test]
async fn a_stream_ending_without_its_finish_event_is_a_protocol_error() {
    let backend = ScriptedBackend::new([ScriptedTurn::text("All do").end_without_finish()]);
    let error = generate(&backend, Input::new("m").user("?"), &Options::default())
        .await
        .unwrap_err();
    let ErrorKind::Backend {
        error: backend_error,
    } = &error.kind
    else {
        panic!("expected a backend error, got {error:?}");
    };
    assert_eq!(backend_error.kind, BackendErrorKind::Protocol);
    assert!(error.message.contains("finish"), "{}", error.message);
    assert_eq!(
        backend_error.partial.as_ref().unwrap().text_content(),
        "All do"
    );
}
