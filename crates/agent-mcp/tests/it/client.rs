//! The client against server-everything over stdio and streamable HTTP.

use std::time::{Duration, Instant};

use agent_mcp::client::{McpClient, ServerConfig};
use agent_tools::{Registry, ToolContext, ToolErrorKind, ToolEvent, collect_output};
use agent_types::{ImageSource, ToolResultBlock};
use futures_util::StreamExt;
use serde_json::json;

use crate::support::{HttpServer, call, stdio_config, text};

/// Lists, validates and calls echo, get-sum, an image tool and a structured-content tool.
async fn list_and_call(client: &McpClient) {
    let names: Vec<String> = client.tools().iter().map(|t| t.name.clone()).collect();
    for expected in [
        "everything_echo",
        "everything_get-sum",
        "everything_get-tiny-image",
        "everything_get-structured-content",
        "everything_trigger-long-running-operation",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing from {names:?}"
        );
    }
    let echo = client
        .tools()
        .iter()
        .find(|t| t.name == "everything_echo")
        .cloned()
        .unwrap();
    assert_eq!(echo.server_name, "echo");
    assert_eq!(echo.input_schema["properties"]["message"]["type"], "string");

    let mut registry = Registry::new();
    client.register_into(&mut registry).unwrap();

    // Arguments are checked against the server's schema before anything is sent.
    let tool = registry.get("everything_get-sum").unwrap();
    let invalid = tool
        .validate(
            json!({"a": "two", "b": 3}),
            agent_tools::ValidationMode::Strict,
        )
        .unwrap_err();
    assert!(invalid.to_string().contains("/a"), "{invalid}");

    let (output, content) = call(&registry, "everything_echo", json!({"message": "hello"})).await;
    assert!(output.result.is_ok(), "{:?}", output.result);
    assert_eq!(text(&content.unwrap()), "Echo: hello");

    let (_, content) = call(&registry, "everything_get-sum", json!({"a": 2, "b": 3})).await;
    assert_eq!(text(&content.unwrap()), "The sum of 2 and 3 is 5.");

    let (_, content) = call(&registry, "everything_get-tiny-image", json!({})).await;
    let content = content.unwrap();
    let image = content
        .blocks()
        .iter()
        .find_map(|block| match block {
            ToolResultBlock::Image {
                source: ImageSource::Base64 { media_type, data },
            } => Some((media_type.clone(), data.len())),
            _ => None,
        })
        .expect("an image block");
    assert_eq!(image.0, "image/png");
    assert!(image.1 > 100);

    let (_, content) = call(
        &registry,
        "everything_get-structured-content",
        json!({"location": "Chicago"}),
    )
    .await;
    let blocks = content.unwrap().into_blocks();
    let json = blocks
        .iter()
        .find_map(|block| match block {
            ToolResultBlock::Json { value } => Some(value.clone()),
            _ => None,
        })
        .expect("a JSON block");
    assert!(json["temperature"].is_number(), "{json}");
    // The text twin of the structured content is not sent twice.
    assert_eq!(blocks.len(), 1, "{blocks:?}");
}

/// A long-running tool reports progress as deltas; cancelling the context ends the call at
/// once, and the connection stays usable.
async fn progress_then_cancel(client: &McpClient) {
    let registry = client.registry();
    let tool = registry
        .get("everything_trigger-long-running-operation")
        .unwrap();
    let context = ToolContext::new("call_long", tool.name());
    let cancel = context.cancellation().clone();
    let mut stream = tool.invoke(json!({"duration": 20, "steps": 40}), context);
    let mut deltas = Vec::new();
    while deltas.len() < 2 {
        match stream.next().await.unwrap() {
            ToolEvent::Delta(text) => deltas.push(text),
            ToolEvent::Done(result) => panic!("ended before cancelling: {result:?}"),
        }
    }
    assert_eq!(deltas, ["1/40", "2/40"]);
    let cancelled_at = Instant::now();
    cancel.cancel();
    let rest = collect_output(stream).await;
    assert_eq!(rest.result.unwrap_err().kind(), ToolErrorKind::Cancelled);
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(1),
        "{:?}",
        cancelled_at.elapsed()
    );

    let (output, content) = call(
        &registry,
        "everything_echo",
        json!({"message": "still here"}),
    )
    .await;
    assert!(output.result.is_ok());
    assert_eq!(text(&content.unwrap()), "Echo: still here");
}

/// Resources and prompts through the client API.
async fn resources_and_prompts(client: &McpClient) {
    let resources = client.list_resources().await.unwrap();
    assert!(!resources.is_empty());
    let first = &resources[0];
    let contents = client.read_resource(&first.uri).await.unwrap();
    assert!(!contents.is_empty(), "{first:?}");
    let prompts = client.list_prompts().await.unwrap();
    assert!(
        prompts.iter().any(|p| p.name == "simple-prompt"),
        "{prompts:?}"
    );
    let prompt = client
        .get_prompt("simple-prompt", Default::default())
        .await
        .unwrap();
    assert!(!prompt.messages.is_empty());
    // The opt-in tool reads the same resource for the model.
    let mut registry = Registry::new();
    registry
        .register(client.read_resource_tool().unwrap())
        .unwrap();
    let (output, content) = call(
        &registry,
        "everything_read_resource",
        json!({"uri": first.uri}),
    )
    .await;
    assert!(output.result.is_ok(), "{:?}", output.result);
    let blocks = content.unwrap().into_blocks();
    assert_eq!(blocks.len(), contents.len());
    if let ToolResultBlock::Text { text } = &blocks[0] {
        assert!(
            text.starts_with(&format!("[resource {}]", first.uri)),
            "{text}"
        );
    }
    let (output, _) = call(
        &registry,
        "everything_read_resource",
        json!({"uri": "demo://no/such/thing"}),
    )
    .await;
    assert_eq!(
        output.result.unwrap_err().kind(),
        ToolErrorKind::RespondToModel
    );
    let unknown = client
        .read_resource("demo://no/such/thing")
        .await
        .unwrap_err();
    assert!(unknown.to_string().contains("resources/read"), "{unknown}");
}

#[tokio::test]
async fn stdio_lists_calls_reports_progress_and_cancels() {
    let Some(config) = stdio_config() else { return };
    let client = McpClient::connect(config).await.unwrap();
    list_and_call(&client).await;
    progress_then_cancel(&client).await;
    resources_and_prompts(&client).await;
}

#[tokio::test]
async fn http_lists_calls_reports_progress_and_cancels() {
    let Some(server) = HttpServer::start().await else {
        return;
    };
    let client = McpClient::connect(server.config()).await.unwrap();
    list_and_call(&client).await;
    progress_then_cancel(&client).await;
    resources_and_prompts(&client).await;
}

#[tokio::test]
async fn stdio_passes_env_and_cwd_and_the_allow_list_narrows() {
    let Some(config) = stdio_config() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = config
        .env("AGENTRY_MCP_TEST_VALUE", "seen-by-the-server")
        .cwd(dir.path())
        .allow(["get-env", "echo"])
        .deny(["echo"]);
    let client = McpClient::connect(config).await.unwrap();
    let names: Vec<String> = client.tools().iter().map(|t| t.name.clone()).collect();
    assert_eq!(names, ["everything_get-env"]);
    // A run's registry shares the tool compiled at import: no schema is compiled again.
    let mut run = Registry::new();
    client.register_into(&mut run).unwrap();
    assert!(std::sync::Arc::ptr_eq(
        run.get("everything_get-env").unwrap(),
        client.registry().get("everything_get-env").unwrap()
    ));
    let (_, content) = call(&client.registry(), "everything_get-env", json!({})).await;
    let env: serde_json::Value = serde_json::from_str(&text(&content.unwrap())).unwrap();
    assert_eq!(env["AGENTRY_MCP_TEST_VALUE"], "seen-by-the-server");
}

#[tokio::test]
async fn a_call_past_its_timeout_is_a_tool_error_and_the_client_stays_usable() {
    let Some(config) = stdio_config() else { return };
    let client = McpClient::connect(config.call_timeout(Duration::from_millis(500)))
        .await
        .unwrap();
    let registry = client.registry();
    let started = Instant::now();
    let (output, _) = call(
        &registry,
        "everything_trigger-long-running-operation",
        json!({"duration": 10, "steps": 2}),
    )
    .await;
    let error = output.result.unwrap_err();
    assert_eq!(error.kind(), ToolErrorKind::RespondToModel);
    assert!(
        error.message().contains("did not answer within 0.5 s"),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    let (output, _) = call(&registry, "everything_echo", json!({"message": "x"})).await;
    assert!(output.result.is_ok());
}

#[tokio::test]
async fn a_stdio_server_killed_mid_call_fails_that_call_and_the_next_call_reconnects() {
    let Some((node, script)) = crate::support::everything() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    // A wrapper that records the server's pid (exec keeps it), so the test can kill it.
    let config = ServerConfig::stdio(
        "everything",
        "sh",
        [
            "-c".to_owned(),
            format!(
                "echo $$ > '{}'; exec '{}' '{}' stdio",
                pid_file.display(),
                node.to_string_lossy(),
                script.to_string_lossy()
            ),
        ],
    );
    let client = McpClient::connect(config).await.unwrap();
    let registry = client.registry();
    let first_pid = std::fs::read_to_string(&pid_file).unwrap();

    let tool = registry
        .get("everything_trigger-long-running-operation")
        .unwrap();
    let mut stream = tool.invoke(
        json!({"duration": 20, "steps": 20}),
        ToolContext::new("call_long", tool.name()),
    );
    assert!(matches!(stream.next().await, Some(ToolEvent::Delta(_))));
    let killed = std::process::Command::new("kill")
        .args(["-9", first_pid.trim()])
        .status()
        .unwrap();
    assert!(killed.success());
    let started = Instant::now();
    let rest = collect_output(stream).await;
    let error = rest.result.unwrap_err();
    assert_eq!(error.kind(), ToolErrorKind::RespondToModel);
    assert!(
        error.message().contains("the next call reconnects"),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));

    let mut changed = client.tools_changed();
    changed.borrow_and_update();
    let (output, content) = call(&registry, "everything_echo", json!({"message": "back"})).await;
    assert!(output.result.is_ok(), "{:?}", output.result);
    assert_eq!(text(&content.unwrap()), "Echo: back");
    let second_pid = std::fs::read_to_string(&pid_file).unwrap();
    assert_ne!(first_pid, second_pid, "a new server process was spawned");
    // The tools are imported again from the new process.
    tokio::time::timeout(Duration::from_secs(5), changed.changed())
        .await
        .expect("the tools were listed again after the reconnect")
        .unwrap();
    assert!(client.registry().get("everything_echo").is_some());
}

#[tokio::test]
async fn an_http_server_killed_mid_call_fails_that_call_and_the_next_call_reconnects() {
    let Some(mut server) = HttpServer::start().await else {
        return;
    };
    let client = McpClient::connect(server.config()).await.unwrap();
    let registry = client.registry();
    let tool = registry
        .get("everything_trigger-long-running-operation")
        .unwrap();
    let mut stream = tool.invoke(
        json!({"duration": 20, "steps": 20}),
        ToolContext::new("call_long", tool.name()),
    );
    assert!(matches!(stream.next().await, Some(ToolEvent::Delta(_))));
    server.kill().await;
    let rest = tokio::time::timeout(Duration::from_secs(15), collect_output(stream))
        .await
        .expect("the call ends when its server dies");
    let error = rest.result.unwrap_err();
    assert_eq!(error.kind(), ToolErrorKind::RespondToModel, "{error}");

    server.restart().await;
    let (output, content) = call(&registry, "everything_echo", json!({"message": "back"})).await;
    assert!(output.result.is_ok(), "{:?}", output.result);
    assert_eq!(text(&content.unwrap()), "Echo: back");
}

#[tokio::test]
async fn dropping_the_client_kills_the_stdio_server_and_its_tools_say_so() {
    let Some((node, script)) = crate::support::everything() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let config = ServerConfig::stdio(
        "everything",
        "sh",
        [
            "-c".to_owned(),
            format!(
                "echo $$ > '{}'; exec '{}' '{}' stdio",
                pid_file.display(),
                node.to_string_lossy(),
                script.to_string_lossy()
            ),
        ],
    );
    let client = McpClient::connect(config).await.unwrap();
    let registry = client.registry();
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    drop(client);
    let started = Instant::now();
    loop {
        let alive = std::path::Path::new(&format!("/proc/{}", pid.trim())).exists()
            && !std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
                .unwrap_or_default()
                .contains(") Z ");
        if !alive {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "server {pid} still runs"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (output, _) = call(&registry, "everything_echo", json!({"message": "x"})).await;
    assert!(
        output
            .result
            .unwrap_err()
            .message()
            .contains("client was dropped")
    );
}

#[tokio::test]
async fn an_unreachable_server_is_a_connect_error_naming_it() {
    let error = McpClient::connect(ServerConfig::stdio(
        "ghost",
        "/nonexistent/mcp-server",
        ["x"],
    ))
    .await
    .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("cannot connect to MCP server `ghost`: cannot start"),
        "{error}"
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = McpClient::connect(ServerConfig::http(
        "down",
        format!("http://127.0.0.1:{port}/mcp"),
    ))
    .await
    .unwrap_err();
    assert!(error.to_string().contains("MCP server `down`"), "{error}");
}

#[tokio::test]
async fn two_servers_with_the_same_name_collide_naming_both() {
    let Some(config) = stdio_config() else { return };
    let first = McpClient::connect(config.clone().allow(["echo"]))
        .await
        .unwrap();
    let second = McpClient::connect(config.allow(["echo"])).await.unwrap();
    let mut registry = Registry::new();
    first.register_into(&mut registry).unwrap();
    let error = second.register_into(&mut registry).unwrap_err();
    assert_eq!(
        error.to_string(),
        "two tools get the name `everything_echo`: a tool already in the registry and `echo` of MCP server `everything`; \
         rename one (`--mcp-name`/`name`) or leave one out (`deny`)"
    );
}

#[tokio::test]
async fn a_server_that_stays_down_fails_fast_during_the_backoff_then_comes_back() {
    let Some((node, script)) = crate::support::everything() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let down = dir.path().join("down");
    let pids = dir.path().join("pids");
    // While `down` exists the "server" exits at once, as a crashed install would.
    let config = ServerConfig::stdio(
        "everything",
        "sh",
        [
            "-c".to_owned(),
            format!(
                "if [ -e '{}' ]; then exit 1; fi; echo $$ >> '{}'; exec '{}' '{}' stdio",
                down.display(),
                pids.display(),
                node.to_string_lossy(),
                script.to_string_lossy()
            ),
        ],
    );
    let client = McpClient::connect(config).await.unwrap();
    let registry = client.registry();
    std::fs::write(&down, "").unwrap();
    let pid = std::fs::read_to_string(&pids).unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-9", pid.trim()])
        .status()
        .unwrap();
    assert!(killed.success());
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The reconnect fails; while its backoff runs, calls fail at once saying so.
    let mut messages = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let (output, _) = call(&registry, "everything_echo", json!({"message": "x"})).await;
        let error = output.result.unwrap_err();
        assert_eq!(error.kind(), ToolErrorKind::RespondToModel);
        assert!(started.elapsed() < Duration::from_secs(5));
        messages.push(error.message().to_owned());
        if error.message().contains("the next attempt is in") {
            break;
        }
    }
    assert!(
        messages
            .last()
            .unwrap()
            .contains("failed reconnects in a row); the next attempt is in"),
        "{messages:?}"
    );

    // Once the server can start again, the first call after the backoff reconnects.
    std::fs::remove_file(&down).unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (output, content) = call(&registry, "everything_echo", json!({"message": "up"})).await;
    assert!(
        output.result.is_ok(),
        "{:?} after {messages:?}",
        output.result
    );
    assert_eq!(text(&content.unwrap()), "Echo: up");
}
