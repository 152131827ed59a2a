//! `[server.durability] engine = "temporal"` with the real processes: `agentry serve` (built
//! with the `temporal` feature) on PostgreSQL, an `agentry worker --events` on the same
//! database, the Temporal dev server (`.ci/temporal.sh`). `POST /v1/sessions/{id}/execute`
//! starts the session's workflow and streams its events as SSE; a second execute with the
//! approvals signals it and streams the rest.

#![cfg(feature = "temporal")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use agent_backends::replay::{Cassette, ReplayServer};
use serde_json::{Value, json};

#[path = "support/served.rs"]
mod served;
use served::Served;

const KEY: &str = "key-acme-test-0001";

fn chunk(delta: Value, finish: Value) -> String {
    format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1,
               "model": "gpt-4.1-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    )
}

/// The calculator on 2+3, then the answer.
fn cassettes() -> Vec<Cassette> {
    let mut call = chunk(json!({"role": "assistant", "content": null}), Value::Null);
    call.push_str(&chunk(
        json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                               "function": {"name": "calculator", "arguments": "{\"expression\":\"2+3\"}"}}]}),
        Value::Null,
    ));
    call.push_str(&chunk(json!({}), json!("tool_calls")));
    call.push_str("data: [DONE]\n\n");
    let mut answer = chunk(json!({"role": "assistant", "content": ""}), Value::Null);
    answer.push_str(&chunk(json!({"content": "2 + 3 = 5."}), Value::Null));
    answer.push_str(&chunk(json!({}), json!("stop")));
    answer.push_str("data: [DONE]\n\n");
    let mut again = chunk(json!({"role": "assistant", "content": ""}), Value::Null);
    again.push_str(&chunk(json!({"content": "Still 5."}), Value::Null));
    again.push_str(&chunk(json!({}), json!("stop")));
    again.push_str("data: [DONE]\n\n");
    vec![
        Cassette::body(call),
        Cassette::body(answer),
        Cassette::body(again),
    ]
}

struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn config(
    dir: &Path,
    store: &str,
    upstream: &str,
    addr: &str,
    namespace: &str,
    queue: &str,
) -> std::path::PathBuf {
    let path = dir.join("agentry.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[server]
tools = ["calculator"]

[server.store]
kind = "postgres"
url = "{store}"

[server.durability]
engine = "temporal"
address = "{addr}"
namespace = "{namespace}"
task_queue = "{queue}"

[[server.models]]
name = "up"
provider = "openai-compatible"
base_url = "{upstream}/v1"

[[server.tenants]]
name = "acme"
api_keys = ["{KEY}"]
"#
        ),
    )
    .unwrap();
    path
}

/// `agentry worker` on `queue`, publishing into `store`, the model at `upstream`; with
/// `approval` the calculator waits for a person.
fn worker(
    home: &Path,
    addr: &str,
    namespace: &str,
    queue: &str,
    store: &str,
    upstream: &str,
    approval: bool,
) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentry"));
    command
        .args(["worker", "--temporal", addr, "--namespace", namespace])
        .args(["--task-queue", queue, "--events", store])
        .args(["--provider", "openai", "--base-url", upstream])
        .args(["--model", "gpt-4.1-mini", "--tool", "calculator"]);
    if approval {
        command.args(["--require-approval", "calculator"]);
    }
    Child(
        command
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("OPENAI_API_KEY", "test-key")
            .env_remove("AGENTRY_CONFIG")
            .current_dir(home)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// The SSE frames of one execute.
async fn execute(url: &str, id: &str, body: &Value) -> Vec<Value> {
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/sessions/{id}/execute"))
        .bearer_auth(KEY)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    if status != 200 {
        panic!("{status}: {}", response.text().await.unwrap());
    }
    let text = tokio::time::timeout(Duration::from_secs(60), response.text())
        .await
        .expect("the stream ends within a minute")
        .unwrap();
    text.split("\n\n")
        .filter_map(|frame| frame.strip_prefix("data: "))
        .map(|data| serde_json::from_str::<Value>(data).unwrap())
        .collect()
}

fn types(frames: &[Value]) -> Vec<&str> {
    frames.iter().map(|f| f["type"].as_str().unwrap()).collect()
}

#[test]
fn execute_on_temporal_streams_the_run_and_an_approval_round_takes_two_executes() {
    let Ok(addr) = std::env::var("AGENTRY_TEST_TEMPORAL_ADDR") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "AGENTRY_TEST_TEMPORAL_ADDR is not set under CI"
        );
        eprintln!("skipped: AGENTRY_TEST_TEMPORAL_ADDR is not set");
        return;
    };
    let Ok(store) = std::env::var("AGENTRY_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "AGENTRY_TEST_POSTGRES_URL is not set under CI"
        );
        eprintln!("skipped: AGENTRY_TEST_POSTGRES_URL is not set");
        return;
    };
    let namespace =
        std::env::var("AGENTRY_TEST_TEMPORAL_NAMESPACE").unwrap_or_else(|_| "default".into());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let upstream = runtime.block_on(ReplayServer::start(cassettes())).unwrap();
    let home = tempfile::tempdir().unwrap();
    let queue = format!("tevents-serve-{}", std::process::id());
    let _worker = worker(
        home.path(),
        &addr,
        &namespace,
        &queue,
        &store,
        &upstream.url(),
        true,
    );
    let path = config(
        home.path(),
        &store,
        &upstream.url(),
        &addr,
        &namespace,
        &queue,
    );
    let served = Served::start(&path);
    let id = format!("s{}", std::process::id());

    runtime.block_on(async {
        // The first execute starts the workflow; the call waits for a person.
        let first = execute(
            &served.url,
            &id,
            &json!({"message": "What is 2 + 3?", "context": {"model": "up"}}),
        )
        .await;
        assert_eq!(
            types(&first),
            [
                "session_start",
                "message_start",
                "tool_call_start",
                "tool_call_delta",
                "tool_call_end",
                "message_end",
                "approval_requested",
                "session_end",
                "execute_complete"
            ],
            "{first:#?}"
        );
        let complete = first.last().unwrap();
        assert_eq!(complete["status"], "awaiting_approval", "{complete}");
        assert_eq!(
            complete["pending_approvals"][0]["id"], "call_1",
            "{complete}"
        );

        // The second signals the approval and streams the rest of the run to the answer.
        let second = execute(
            &served.url,
            &id,
            &json!({"approvals": [{"call_id": "call_1", "approved": true}]}),
        )
        .await;
        let kinds = types(&second);
        assert_eq!(kinds.first(), Some(&"session_start"), "{second:#?}");
        assert!(kinds.contains(&"tool_execution_end"), "{second:#?}");
        let text: String = second
            .iter()
            .filter(|f| f["type"] == "text_delta")
            .map(|f| f["delta"].as_str().unwrap())
            .collect();
        assert_eq!(text, "2 + 3 = 5.");
        let complete = second.last().unwrap();
        assert_eq!(complete["type"], "execute_complete");
        assert_eq!(complete["status"], "completed", "{complete}");

        // The stored session is the workflow's.
        let stored: Value = reqwest::Client::new()
            .get(format!("{}/v1/sessions/{id}", served.url))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(stored["status"], "completed", "{stored}");
        let last = stored["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(last["content"][0]["text"], "2 + 3 = 5.", "{stored}");

        // The next turn starts the session's workflow again (same id, the run before it
        // completed) from the stored session: its history goes with it.
        let third = execute(&served.url, &id, &json!({"message": "Sure?"})).await;
        let text: String = third
            .iter()
            .filter(|f| f["type"] == "text_delta")
            .map(|f| f["delta"].as_str().unwrap())
            .collect();
        assert_eq!(text, "Still 5.", "{third:#?}");
        assert_eq!(third.last().unwrap()["status"], "completed");
        let end = third.iter().find(|f| f["type"] == "session_end").unwrap();
        assert_eq!(end["messages"].as_array().unwrap().len(), 1, "{end}");
        let stored: Value = reqwest::Client::new()
            .get(format!("{}/v1/sessions/{id}", served.url))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        // user, call, result, answer; user, answer.
        assert_eq!(stored["messages"].as_array().unwrap().len(), 6, "{stored}");
    });
}

/// A run the model refuses (a non-retryable 400) ends the execute stream with
/// `execute_complete` saying `error`, and the session is stored as failed. (Since the workflow
/// drives the machine, the 400 ends the run in the workflow, which publishes its `error` and
/// `session_end`; before, it failed the workflow without them and this covered the server's
/// watch of the workflow's end.)
#[test]
fn a_workflow_that_fails_ends_the_execute_stream_with_an_error() {
    let (Ok(addr), Ok(store)) = (
        std::env::var("AGENTRY_TEST_TEMPORAL_ADDR"),
        std::env::var("AGENTRY_TEST_POSTGRES_URL"),
    ) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "the Temporal dev server and PostgreSQL are required under CI"
        );
        eprintln!("skipped: AGENTRY_TEST_TEMPORAL_ADDR or AGENTRY_TEST_POSTGRES_URL is not set");
        return;
    };
    let namespace =
        std::env::var("AGENTRY_TEST_TEMPORAL_NAMESPACE").unwrap_or_else(|_| "default".into());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let refusal = Cassette::new(
        400,
        "application/json",
        r#"{"error":{"message":"bad request","type":"invalid_request_error"}}"#,
    );
    let upstream = runtime
        .block_on(ReplayServer::start(vec![refusal]))
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let queue = format!("tevents-serve-fail-{}", std::process::id());
    let _worker = worker(
        home.path(),
        &addr,
        &namespace,
        &queue,
        &store,
        &upstream.url(),
        false,
    );
    let path = config(
        home.path(),
        &store,
        &upstream.url(),
        &addr,
        &namespace,
        &queue,
    );
    let served = Served::start(&path);
    let id = format!("f{}", std::process::id());
    runtime.block_on(async {
        let frames = execute(
            &served.url,
            &id,
            &json!({"message": "What is 2 + 3?", "context": {"model": "up"}}),
        )
        .await;
        let complete = frames.last().unwrap();
        assert_eq!(complete["type"], "execute_complete", "{frames:#?}");
        assert_eq!(complete["status"], "error", "{complete}");
        assert!(complete["error"]["message"].is_string(), "{complete}");
        let stored: Value = reqwest::Client::new()
            .get(format!("{}/v1/sessions/{id}", served.url))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(stored["status"], "error", "{stored}");
    });
}
