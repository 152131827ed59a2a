//! An agent run through the loop, with a scripted model calling MCP tools.

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{Input, Options, generate_stream};
use agent_mcp::client::McpClient;
use agent_tools::Registry;
use agent_types::AgentEvent;
use futures_util::StreamExt;
use serde_json::json;

use crate::support::stdio_config;

#[tokio::test]
async fn a_scripted_model_calls_mcp_tools_through_the_loop() {
    let Some(config) = stdio_config() else { return };
    let client = McpClient::connect(config).await.unwrap();
    let mut tools = Registry::new();
    client.register_into(&mut tools).unwrap();

    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "everything_get-sum", json!({"a": 20, "b": 22})),
        ScriptedTurn::tool_call(
            "call_2",
            "everything_trigger-long-running-operation",
            json!({"duration": 0.8, "steps": 4}),
        ),
        ScriptedTurn::tool_call("call_3", "everything_get-tiny-image", json!({})),
        ScriptedTurn::text("The sum is 42."),
    ])
    .recording();
    let options = Options::auto().with_tools(tools).with_tool_trace(true);
    let mut events = generate_stream(&backend, Input::new("m").user("add 20 and 22"), &options);
    let mut deltas = Vec::new();
    let mut outputs = Vec::new();
    while let Some(event) = events.next().await {
        match event {
            AgentEvent::ToolExecutionDelta { call_id, delta } => {
                deltas.push((call_id.to_string(), delta))
            }
            AgentEvent::ToolExecutionEnd {
                tool_name,
                output,
                is_error,
                blocks,
                ..
            } => outputs.push((tool_name, output, is_error, blocks.len())),
            _ => {}
        }
    }
    let result = events.result().await.unwrap();
    assert_eq!(result.text(), "The sum is 42.");
    assert_eq!(result.trace.len(), 3);
    assert!(
        result.trace.iter().all(|entry| entry.error.is_none()),
        "{:?}",
        result.trace
    );

    assert_eq!(outputs[0].0, "everything_get-sum");
    assert!(
        outputs[0].1.contains("The sum of 20 and 22 is 42."),
        "{outputs:?}"
    );
    assert!(!outputs[0].2);
    // Progress notifications reached the run as tool progress events, in order. (The last
    // one races the result inside rmcp and may be dropped; the earlier ones may not.)
    let expected = ["1/4", "2/4", "3/4", "4/4"].map(|d| ("call_2".to_owned(), d.to_owned()));
    assert!(deltas.len() >= 3, "{deltas:?}");
    assert_eq!(deltas[..], expected[..deltas.len()]);
    // The image went to the model as an image block.
    assert!(outputs[2].3 >= 1, "{outputs:?}");
    let requests = backend.requests();
    let last = serde_json::to_string(&requests[3].messages).unwrap();
    assert!(last.contains("image/png"), "the model saw the image");
}

#[tokio::test]
async fn cancelling_the_run_cancels_the_mcp_call_on_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let Some(config) = crate::support::python_fixture(dir.path()) else {
        return;
    };
    let client = McpClient::connect(config).await.unwrap();
    let mut tools = Registry::new();
    client.register_into(&mut tools).unwrap();
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "fixture_wait", json!({"seconds": 30})),
        ScriptedTurn::text("never reached"),
    ]);
    let cancel = tokio_util::sync::CancellationToken::new();
    let options = Options::auto()
        .with_tools(tools)
        .with_cancellation(cancel.clone());
    let mut events = generate_stream(&backend, Input::new("m").user("wait"), &options);
    let mut cancelled_at = None;
    while let Some(event) = events.next().await {
        if matches!(event, AgentEvent::ToolExecutionStart { .. }) {
            // Let the request reach the server, then stop the run.
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            cancelled_at = Some(std::time::Instant::now());
            cancel.cancel();
        }
    }
    let error = events.result().await.unwrap_err();
    assert_eq!(error.status(), 499, "{error}");
    assert!(cancelled_at.unwrap().elapsed() < std::time::Duration::from_secs(5));
    // The server's handler saw notifications/cancelled.
    let marker = dir.path().join("cancelled");
    let started = std::time::Instant::now();
    while !marker.exists() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "the server never saw the cancellation"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// An imported MCP tool is marked for approval by name: the run stops before calling the
/// server, the session goes through JSON, and the approved call then reaches the server.
#[tokio::test]
async fn an_mcp_tool_marked_by_name_waits_for_approval_then_runs() {
    use agent_loop::{ApprovalDecision, Session, SessionStatus, execute};

    let Some(config) = stdio_config() else { return };
    let client = McpClient::connect(config).await.unwrap();
    let mut tools = Registry::new();
    client.register_into(&mut tools).unwrap();
    tools.require_approval(["everything_get-sum"]).unwrap();

    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "everything_get-sum", json!({"a": 20, "b": 22})),
        ScriptedTurn::text("The sum is 42."),
    ])
    .recording();
    let options = Options::auto().with_tools(tools).with_tool_trace(true);
    let mut session = Session::new("m");
    let result = execute(&mut session, "add 20 and 22", &backend, &options)
        .await
        .unwrap();
    assert_eq!(result.status, SessionStatus::AwaitingApproval);
    assert_eq!(result.pending_approvals[0].name, "everything_get-sum");
    assert!(result.trace.is_empty(), "nothing reached the MCP server");

    let mut session = Session::from_json(&session.to_json().unwrap()).unwrap();
    let result = execute(
        &mut session,
        vec![ApprovalDecision::approve("call_1")],
        &backend,
        &options,
    )
    .await
    .unwrap();
    assert_eq!(result.text(), "The sum is 42.");
    assert_eq!(result.trace.len(), 1);
    let sent = serde_json::to_string(&backend.requests()[1].messages).unwrap();
    assert!(sent.contains("The sum of 20 and 22 is 42."), "{sent}");
}
