//! Hooks: the gate before every model call, and the transform every tool result goes through.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{Hooks, Input, ModelCallGate, Options, generate, generate_stream};
use agent_tools::Caller;
use agent_types::{AgentEvent, ErrorKind, Message, ToolCall, ToolResult};
use serde_json::json;

use crate::support::{collect, registry, sleep_tool, weather_tool};

fn tool_result(message: &Message) -> &ToolResult {
    match message {
        Message::Tool(result) => result,
        other => panic!("expected a tool result, got {other:?}"),
    }
}

/// A model that asks for the weather twice, then answers.
fn two_rounds() -> ScriptedBackend {
    ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Denver"})),
        ScriptedTurn::tool_call("call_2", "get_weather", json!({"city": "Paris"})),
        ScriptedTurn::text("Sunny, then rain."),
    ])
    .recording()
}

#[tokio::test]
async fn a_refusing_gate_ends_the_run_before_the_backend_is_called() {
    let backend = two_rounds();
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_hooks(
            Hooks::new()
                .before_model_call(|_gate| async { Err("tenant `acme` is suspended".to_owned()) }),
        );

    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();

    assert_eq!(error.kind, ErrorKind::Refused);
    assert_eq!(error.status(), 403);
    assert_eq!(error.message, "tenant `acme` is suspended");
    assert_eq!(backend.calls(), 0);
    assert!(error.partial_messages.is_empty());
}

#[tokio::test]
async fn the_gate_runs_before_every_model_call_and_sees_what_it_gates() {
    let seen: Arc<Mutex<Vec<ModelCallGate>>> = Arc::default();
    let record = Arc::clone(&seen);
    let backend = two_rounds();
    let options = Options::auto()
        .with_tools(registry([weather_tool(), sleep_tool()]))
        .with_caller(Caller::new("ann").with_tenant("acme"))
        .with_hooks(Hooks::new().before_model_call(move |gate| {
            record.lock().unwrap().push(gate);
            async { Ok(()) }
        }));

    let result = generate(&backend, Input::new("test-model").user("?"), &options)
        .await
        .unwrap();

    assert_eq!(result.text(), "Sunny, then rain.");
    assert_eq!(backend.calls(), 3);
    let seen = seen.lock().unwrap();
    let summary: Vec<(u32, usize)> = seen
        .iter()
        .map(|gate| (gate.iteration, gate.messages))
        .collect();
    // One gate per model call: the round it starts and the messages the request carries.
    assert_eq!(summary, [(0, 1), (1, 3), (2, 5)]);
    for gate in seen.iter() {
        assert_eq!(gate.model, "test-model");
        assert_eq!(gate.tools, ["get_weather", "sleep"]);
        assert_eq!(gate.caller.principal(), "ann");
        assert_eq!(gate.caller.tenant(), Some("acme"));
    }
}

#[tokio::test]
async fn a_gate_refusing_a_later_call_keeps_what_the_run_did() {
    let gates = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&gates);
    let backend = two_rounds();
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_hooks(Hooks::new().before_model_call(move |_gate| {
            let call = counter.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if call == 2 {
                    Err("the spending kill switch is on".to_owned())
                } else {
                    Ok(())
                }
            }
        }));

    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();

    assert_eq!(error.kind, ErrorKind::Refused);
    assert_eq!(error.status(), 403);
    assert_eq!(gates.load(Ordering::SeqCst), 2);
    assert_eq!(backend.calls(), 1);
    // The first round is kept: the tool-call turn and its result.
    assert_eq!(error.partial_messages.len(), 2);
    let result = tool_result(&error.partial_messages[1]);
    assert_eq!(result.tool_call_id.as_str(), "call_1");
    assert!(!result.is_error);
    assert_eq!(error.partial_trace.len(), 1);
}

#[tokio::test]
async fn transform_tool_result_changes_what_the_model_and_the_events_see() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_calls([
            ToolCall::new("call_1", "get_weather", json!({"city": "Denver"})),
            ToolCall::new("call_2", "get_forecast", json!({"city": "Denver"})),
        ]),
        ScriptedTurn::text("Sunny."),
    ])
    .recording();
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_hooks(
            Hooks::new().transform_tool_result(|mut result: ToolResult| async move {
                result.content.push_str("\n(as of 2026-11-22)");
                result
            }),
        );

    let (events, result) = collect(generate_stream(
        &backend,
        Input::new("m").user("?"),
        &options,
    ))
    .await;
    let result = result.unwrap();

    let stamped = format!(
        "{}\n(as of 2026-11-22)",
        json!({"city": "Denver", "sky": "sunny", "temp_c": 21})
    );
    let requests = backend.requests();
    let sent = tool_result(&requests[1].messages[2]);
    assert_eq!(sent.content, stamped);
    // Error results go through it too.
    let refused = tool_result(&requests[1].messages[3]);
    assert!(refused.is_error);
    assert!(
        refused
            .content
            .starts_with("There is no tool named `get_forecast`")
            && refused.content.ends_with("\n(as of 2026-11-22)"),
        "{}",
        refused.content
    );
    // The history the run returns is what the model saw.
    assert_eq!(tool_result(&result.messages[1]), sent);

    let mut outputs: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::ToolExecutionEnd { output, .. } => Some(output.as_str()),
            _ => None,
        })
        .collect();
    // Concurrent calls may end in either order.
    outputs.sort_unstable();
    let mut expected = [sent.content.as_str(), refused.content.as_str()];
    expected.sort_unstable();
    assert_eq!(outputs, expected);
}
