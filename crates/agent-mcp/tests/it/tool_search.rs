//! Tool search over real MCP catalogs: a synthetic server on the official Python SDK exporting
//! 500 tools (`tests/python/catalog_server.py`), and the same plus server-everything. A
//! scripted model calls `search_tools`, finds the right tool and calls it on the server; the
//! request of round 2 carries that tool and none of the other 499.

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{Input, Options, ToolSearch, generate};
use agent_mcp::client::{McpClient, ServerConfig};
use agent_tools::Registry;
use agent_types::{Message, ModelRequest};
use serde_json::json;

use crate::support::stdio_config;

/// The 500-tool server over stdio, as server `catalog`; `None` skips outside CI.
fn catalog_config() -> Option<ServerConfig> {
    let Some(python) = std::env::var_os("AGENTRY_TEST_MCP_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "AGENTRY_TEST_MCP_PYTHON is not set: CI must run `eval \"$(bash .ci/python.sh)\"` first"
        );
        eprintln!(
            "skipped: AGENTRY_TEST_MCP_PYTHON is not set (run `eval \"$(bash .ci/python.sh)\"`)"
        );
        return None;
    };
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/catalog_server.py");
    Some(ServerConfig::stdio(
        "catalog",
        python.to_string_lossy(),
        [script.display().to_string()],
    ))
}

fn names(request: &ModelRequest) -> Vec<&str> {
    request.tools.iter().map(|s| s.name.as_str()).collect()
}

fn tool_result(messages: &[Message], at: usize) -> &agent_types::ToolResult {
    match &messages[at] {
        Message::Tool(result) => result,
        other => panic!("not a tool result: {other:?}"),
    }
}

#[tokio::test]
async fn a_scripted_model_finds_and_calls_one_of_500_mcp_tools() {
    let Some(config) = catalog_config() else {
        return;
    };
    let client = McpClient::connect(config).await.unwrap();
    let mut tools = Registry::new();
    client.register_into(&mut tools).unwrap();
    assert_eq!(tools.len(), 500);

    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call(
            "call_1",
            "search_tools",
            json!({"query": "create an invoice in system 7", "limit": 1}),
        ),
        ScriptedTurn::tool_call(
            "call_2",
            "catalog_s7_create_invoice",
            json!({"invoice_id": "INV-42"}),
        ),
        ScriptedTurn::text("Invoice INV-42 created."),
    ])
    .recording();
    let options = Options::auto()
        .with_tools(tools)
        .with_tool_search(ToolSearch::new())
        .unwrap();
    let result = generate(&backend, Input::new("m").user("Bill INV-42"), &options)
        .await
        .unwrap();

    let requests = backend.requests();
    assert_eq!(names(&requests[0]), ["search_tools"]);
    assert_eq!(
        names(&requests[1]),
        ["catalog_s7_create_invoice", "search_tools"],
        "round 2 offers the found tool and none of the other 499"
    );
    let found = tool_result(&result.messages, 1);
    assert!(
        found.content.contains("catalog_s7_create_invoice"),
        "{}",
        found.content
    );
    let ran = tool_result(&result.messages, 3);
    assert!(!ran.is_error, "{ran:?}");
    assert_eq!(
        ran.content, "s7_create_invoice ran with {\"invoice_id\": \"INV-42\"}",
        "the call reached the server (under its own name)"
    );
    assert_eq!(result.text(), "Invoice INV-42 created.");
    client.close().await;
}

#[tokio::test]
async fn with_server_everything_beside_the_catalog_the_search_finds_its_tool() {
    let Some(catalog) = catalog_config() else {
        return;
    };
    let Some(everything) = stdio_config() else {
        return;
    };
    let catalog = McpClient::connect(catalog).await.unwrap();
    let everything = McpClient::connect(everything).await.unwrap();
    let mut tools = Registry::new();
    catalog.register_into(&mut tools).unwrap();
    everything.register_into(&mut tools).unwrap();
    assert!(tools.len() > 500, "{}", tools.len());

    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call(
            "call_1",
            "search_tools",
            json!({"query": "sum of two numbers"}),
        ),
        ScriptedTurn::tool_call("call_2", "everything_get-sum", json!({"a": 20, "b": 22})),
        ScriptedTurn::text("42"),
    ])
    .recording();
    let options = Options::auto()
        .with_tools(tools)
        .with_tool_search(ToolSearch::new().with_always_loaded(["everything_echo"]))
        .unwrap();
    let result = generate(&backend, Input::new("m").user("20 + 22?"), &options)
        .await
        .unwrap();

    let requests = backend.requests();
    assert_eq!(names(&requests[0]), ["everything_echo", "search_tools"]);
    let round_two = names(&requests[1]);
    assert!(round_two.contains(&"everything_get-sum"), "{round_two:?}");
    assert!(
        !round_two.iter().any(|name| name.starts_with("catalog_")),
        "no catalog tool matches a sum: {round_two:?}"
    );
    assert!(round_two.len() <= 7, "{round_two:?}");
    let ran = tool_result(&result.messages, 3);
    assert!(
        ran.content.contains("The sum of 20 and 22 is 42."),
        "{}",
        ran.content
    );
    catalog.close().await;
    everything.close().await;
}
