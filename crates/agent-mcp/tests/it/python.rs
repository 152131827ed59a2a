//! The client against a server on the official Python SDK: what only the server can see.

use std::time::{Duration, Instant};

use agent_mcp::client::McpClient;
use agent_tools::{ToolContext, ToolErrorKind, collect_output};
use serde_json::json;

use crate::support::{call, python_fixture, text};

#[tokio::test]
async fn cancelling_a_call_sends_notifications_cancelled_to_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let Some(config) = python_fixture(dir.path()) else {
        return;
    };
    let client = McpClient::connect(config).await.unwrap();
    let registry = client.registry();
    let tool = registry.get("fixture_wait").unwrap();
    let context = ToolContext::new("call_wait", tool.name());
    let cancel = context.cancellation().clone();
    let stream = tool.invoke(json!({"seconds": 30}), context);
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        cancel.cancel();
    });
    let output = collect_output(stream).await;
    canceller.await.unwrap();
    assert_eq!(output.result.unwrap_err().kind(), ToolErrorKind::Cancelled);
    // The server's handler was cancelled: it wrote its marker.
    let marker = dir.path().join("cancelled");
    let started = Instant::now();
    while !marker.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the server never saw the cancellation"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn is_error_results_are_tool_errors_for_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let Some(config) = python_fixture(dir.path()) else {
        return;
    };
    let client = McpClient::connect(config).await.unwrap();
    let (output, content) = call(&client.registry(), "fixture_fail", json!({})).await;
    let error = output.result.unwrap_err();
    assert_eq!(error.kind(), ToolErrorKind::RespondToModel);
    // The SDK words the message itself ("Error executing tool fail").
    assert!(error.message().contains("fail"), "{error}");
    assert!(content.is_none());
}

#[tokio::test]
async fn tools_list_changed_refreshes_the_imported_tools() {
    let dir = tempfile::tempdir().unwrap();
    let Some(config) = python_fixture(dir.path()) else {
        return;
    };
    let client = McpClient::connect(config).await.unwrap();
    assert!(client.registry().get("fixture_extra").is_none());
    let mut changed = client.tools_changed();
    changed.borrow_and_update();
    let (_, content) = call(&client.registry(), "fixture_grow", json!({})).await;
    assert_eq!(text(&content.unwrap()), "grown");
    tokio::time::timeout(Duration::from_secs(5), changed.changed())
        .await
        .expect("the client re-listed its tools")
        .unwrap();
    // The next registry built from the client has the new tool, compiled and callable.
    let registry = client.registry();
    let (output, _) = call(&registry, "fixture_extra", json!({"x": 21})).await;
    assert!(output.result.is_ok(), "{:?}", output.result);
    assert!(output.result.unwrap().to_string().contains("42"));
}

/// The fixture serving streamable HTTP on a free port; killed on drop.
async fn python_http(dir: &std::path::Path) -> Option<(tokio::process::Child, String)> {
    let python = crate::support::python_fixture(dir)?;
    let agent_mcp::client::Transport::Stdio { command, args, .. } = python.transport() else {
        unreachable!()
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = tokio::process::Command::new(command)
        .args(args)
        .arg(port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let started = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the fixture did not listen"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Some((child, format!("http://127.0.0.1:{port}/mcp")))
}

#[tokio::test]
async fn over_http_the_bearer_token_and_headers_arrive_and_cancellation_reaches_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let Some((_server, url)) = python_http(dir.path()).await else {
        return;
    };
    let client = McpClient::connect(
        agent_mcp::client::ServerConfig::http("fixture", url)
            .bearer("s3cret")
            .header("X-Agentry-Test", "seen"),
    )
    .await
    .unwrap();
    let registry = client.registry();
    let (output, _) = call(&registry, "fixture_headers", json!({})).await;
    let value = output.result.unwrap();
    let shown = value.to_string();
    assert!(shown.contains("Bearer s3cret"), "{shown}");
    assert!(shown.contains("seen"), "{shown}");

    let tool = registry.get("fixture_wait").unwrap();
    let context = ToolContext::new("call_wait", tool.name());
    let cancel = context.cancellation().clone();
    let stream = tool.invoke(json!({"seconds": 30}), context);
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        cancel.cancel();
    });
    let output = collect_output(stream).await;
    canceller.await.unwrap();
    assert_eq!(output.result.unwrap_err().kind(), ToolErrorKind::Cancelled);
    let marker = dir.path().join("cancelled");
    let started = Instant::now();
    while !marker.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the server never saw the cancellation"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
