//! The official Python MCP client (PyPI `mcp`) against the server over streamable HTTP on
//! loopback: list, call, progress, cancel, and two keys with different permissions.

use std::ffi::OsString;
use std::time::Duration;

use agent_mcp::server::HttpOptions;
use serde_json::{Value, json};

use crate::server_http::{ADMIN_KEY, USER_KEY, start};

/// `AGENTRY_TEST_MCP_PYTHON` (a venv with the `mcp` SDK): required under `CI`, else the
/// test is skipped.
pub(crate) fn python() -> Option<OsString> {
    if let Some(python) = std::env::var_os("AGENTRY_TEST_MCP_PYTHON") {
        return Some(python);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "AGENTRY_TEST_MCP_PYTHON is not set: CI must run `eval \"$(bash .ci/python.sh)\"` first"
    );
    #[allow(clippy::print_stderr)]
    {
        eprintln!(
            "skipped: AGENTRY_TEST_MCP_PYTHON is not set (run `eval \"$(bash .ci/python.sh)\"`)"
        );
    }
    None
}

/// Runs `tests/mcp_client/client.py` with `plan`; one JSON value per step.
pub(crate) async fn run_plan(python: &OsString, plan: &Value) -> Vec<Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp_client/client.py");
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(python)
            .arg(script)
            .arg(plan.to_string())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the Python client finished in time")
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the Python client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn names(step: &Value) -> Vec<&str> {
    step["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_lists_calls_follows_progress_and_cancels() {
    let Some(python) = python() else { return };
    let (addr, _, _) = start(HttpOptions::default()).await;
    let url = format!("http://{addr}/mcp");
    let steps = run_plan(
        &python,
        &json!({"transport": "http", "url": url, "key": USER_KEY, "steps": [
            {"list": true},
            {"call": "echo", "arguments": {"text": "hi"}},
            {"call": "chart"},
            {"call": "count"},
            {"call": "echo", "arguments": {"text": 5}},
            {"call": "secret"},
            {"cancel": "slow", "after": 1.0},
            {"until": "cancellations", "text": "1"},
        ]}),
    )
    .await;
    assert_eq!(steps.len(), 8, "{steps:?}");
    let listed = names(&steps[0]);
    assert!(
        listed.contains(&"echo") && !listed.contains(&"secret"),
        "{listed:?}"
    );
    let echo = steps[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == "echo")
        .unwrap();
    assert_eq!(echo["inputSchema"]["required"], json!(["text"]));
    assert_eq!(echo["outputSchema"]["required"], json!(["echo"]));
    // The SDK validates structuredContent against the output schema: it accepted it.
    assert_eq!(steps[1]["structuredContent"], json!({"echo": "hi"}));
    assert_eq!(steps[1]["isError"], false);
    assert_eq!(steps[2]["content"][1]["type"], "image");
    assert_eq!(steps[2]["content"][1]["mimeType"], "image/png");
    assert_eq!(steps[3]["progress"], json!(["step 1", "step 2", "step 3"]));
    assert_eq!(steps[4]["isError"], true);
    assert!(
        steps[4]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("`/text`"),
        "{}",
        steps[4]
    );
    // A tool this key may not use is an unknown tool.
    assert!(
        steps[5]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool `secret`"),
        "{}",
        steps[5]
    );
    assert_eq!(steps[6]["cancelled"], true);
    // The handler saw its cancellation while the session was still open.
    assert_eq!(steps[7]["until"], "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_sees_each_keys_own_tools_and_no_key_gets_nothing() {
    let Some(python) = python() else { return };
    let (addr, _, _) = start(HttpOptions::default()).await;
    let url = format!("http://{addr}/mcp");
    let admin = run_plan(
        &python,
        &json!({"transport": "http", "url": url, "key": ADMIN_KEY, "steps": [
            {"list": true}, {"call": "secret"}]}),
    )
    .await;
    assert!(names(&admin[0]).contains(&"secret"));
    assert_eq!(admin[1]["content"][0]["text"], "the secret");
    let user = run_plan(
        &python,
        &json!({"transport": "http", "url": url, "key": USER_KEY, "steps": [{"list": true}]}),
    )
    .await;
    assert!(!names(&user[0]).contains(&"secret"));

    // Without a key the SDK cannot even initialize.
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp_client/client.py");
    let refused = tokio::process::Command::new(&python)
        .arg(script)
        .arg(
            json!({"transport": "http", "url": url, "key": null, "steps": [{"list": true}]})
                .to_string(),
        )
        .output()
        .await
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stdout).is_empty());
}
