//! `agentry serve` as a real process: restarts, SIGTERM drains, and two instances sharing
//! PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

/// A server process and its base URL.
struct Served {
    child: Child,
    url: String,
    stderr: mpsc::Receiver<String>,
}

impl Served {
    /// Starts `agentry serve --config <config>` on a free port and waits for its address.
    fn start(config: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentry"))
            .args([
                "serve",
                "--config",
                config.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (lines, stderr) = mpsc::channel();
        let pipe = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in pipe.lines().map_while(Result::ok) {
                let _ = lines.send(line);
            }
        });
        let url = loop {
            let line = stderr
                .recv_timeout(Duration::from_secs(60))
                .expect("agentry serve did not say where it listens");
            if let Some(url) = line.strip_prefix("agentry serve: listening on ") {
                break url.to_owned();
            }
        };
        Self { child, url, stderr }
    }

    /// Sends SIGTERM (through the shell's `kill`: no extra tools needed).
    fn terminate(&self) {
        let status = Command::new("sh")
            .args(["-c", &format!("kill -TERM {}", self.child.id())])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn wait(mut self) -> (i32, Vec<String>) {
        let status = self.child.wait().unwrap();
        let lines = self.stderr.try_iter().collect();
        (status.code().unwrap_or(-1), lines)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(store: &str, extra: &str) -> String {
    format!(
        r#"
[server]
tools = ["calculator", "clock"]
{extra}

[server.store]
{store}

[[server.models]]
name = "demo"
provider = "replay"
recording = "anthropic"
{model_extra}

[[server.tenants]]
name = "acme"
api_keys = ["key-acme-test-0001"]
"#,
        model_extra = ""
    )
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn execute(url: &str, id: &str, body: Value) -> Vec<Value> {
    let response = client()
        .post(format!("{url}/v1/sessions/{id}/execute"))
        .bearer_auth("key-acme-test-0001")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    response
        .text()
        .await
        .unwrap()
        .split("\n\n")
        .filter_map(|frame| frame.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

async fn session(url: &str, id: &str) -> Value {
    client()
        .get(format!("{url}/v1/sessions/{id}"))
        .bearer_auth("key-acme-test-0001")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// A new session whose model asks for the client-run `get_weather` in round 1.
fn context() -> Value {
    json!({"model": "demo", "tools": ["calculator", "clock"], "remote_tools": [
        {"name": "get_weather", "description": "Weather for a city.", "parameters": {"type": "object"}}
    ]})
}

fn results_for(complete: &Value) -> Value {
    let results: Vec<Value> = complete["pending_tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| json!({"tool_call_id": call["id"], "content": "{\"temp_c\": 19}"}))
        .collect();
    json!({ "tool_results": results })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_session_survives_kill_9_between_turns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agentry.toml");
    std::fs::write(
        &path,
        config("kind = \"sqlite\"\npath = \"sessions.db\"", ""),
    )
    .unwrap();
    runtime().block_on(async {
        let first = Served::start(&path);
        let events = execute(
            &first.url,
            "restart-1",
            json!({"message": "Weather?", "context": context()}),
        )
        .await;
        let complete = events.last().unwrap().clone();
        assert_eq!(complete["status"], "awaiting_tool_execution");
        drop(first); // SIGKILL: no drain, no goodbye.

        let second = Served::start(&path);
        let stored = session(&second.url, "restart-1").await;
        assert_eq!(stored["status"], "awaiting_tool_execution", "{stored}");
        let events = execute(&second.url, "restart-1", results_for(&complete)).await;
        assert_eq!(events.last().unwrap()["status"], "completed");
    });
}

#[test]
fn sigterm_lets_a_running_stream_finish_then_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agentry.toml");
    // Every streamed model event is held back 40 ms, so the run takes a few seconds.
    let text = config("kind = \"sqlite\"\npath = \"sessions.db\"", "").replace(
        "recording = \"anthropic\"",
        "recording = \"anthropic\"\nevent_delay_ms = 40",
    );
    std::fs::write(&path, text).unwrap();
    let served = Served::start(&path);
    runtime().block_on(async {
        let mut response = client()
            .post(format!("{}/v1/sessions/drain-1/execute", served.url))
            .bearer_auth("key-acme-test-0001")
            .json(&json!({"message": "Weather?", "context": {"model": "demo", "tools": ["calculator", "clock"]}}))
            .send()
            .await
            .unwrap();
        let mut body = String::from_utf8(response.chunk().await.unwrap().unwrap().to_vec()).unwrap();
        served.terminate();
        while let Some(chunk) = response.chunk().await.unwrap() {
            body.push_str(std::str::from_utf8(&chunk).unwrap());
        }
        let last = body.trim_end().rsplit("\n\n").next().unwrap();
        let complete: Value = serde_json::from_str(last.strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(complete["type"], "execute_complete");
        assert_ne!(complete["status"], "aborted", "the drain let it finish: {complete}");
    });
    let (code, lines) = served.wait();
    assert_eq!(code, 0, "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|line| line.contains("drained and stopped")),
        "{lines:?}"
    );
}

#[test]
fn two_instances_alternate_turns_of_one_session_through_postgres() {
    let Ok(url) = std::env::var("AGENTRY_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "AGENTRY_TEST_POSTGRES_URL is not set: .ci/postgres.sh should have started PostgreSQL"
        );
        eprintln!(
            "skipped: set AGENTRY_TEST_POSTGRES_URL (see .ci/postgres.sh) to run against PostgreSQL"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agentry.toml");
    std::fs::write(
        &path,
        config(&format!("kind = \"postgres\"\nurl = \"{url}\""), ""),
    )
    .unwrap();
    let a = Served::start(&path);
    let b = Served::start(&path);
    let id = format!(
        "pg-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    runtime().block_on(async {
        // Turn 1 on A: suspends for the client's weather calls.
        let events = execute(
            &a.url,
            &id,
            json!({"message": "Weather?", "context": context()}),
        )
        .await;
        let complete = events.last().unwrap().clone();
        assert_eq!(complete["status"], "awaiting_tool_execution");
        // Turn 2 on B: the results; the calculator runs and the model answers.
        let events = execute(&b.url, &id, results_for(&complete)).await;
        assert_eq!(events.last().unwrap()["status"], "completed");
        // Turn 3 on A: a new question sees the whole history.
        let events = execute(&a.url, &id, json!({"message": "And tomorrow?"})).await;
        assert_eq!(events.last().unwrap()["status"], "awaiting_tool_execution");
        let stored = session(&b.url, &id).await;
        let messages = stored["messages"].as_array().unwrap();
        // Turn 1: question, call turn, clock result; turn 2: two results, call turn, calculator
        // result, answer; turn 3: question, call turn, clock result.
        assert_eq!(messages.len(), 11, "{stored}");
        assert_eq!(stored["status"], "awaiting_tool_execution");
        // A's execute lease and B's are the same row: a second execute while one runs is 409
        // whichever instance gets it (checked in-process in agent-server's tests).
    });
}

#[test]
fn a_bad_configuration_exits_2_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agentry.toml");
    for (text, expected) in [
        (
            config("kind = \"sqlite\"", "listen_on = \"x\""),
            "listen_on",
        ),
        (
            config("kind = \"sqlite\"", "").replace(
                "api_keys = [\"key-acme-test-0001\"]",
                "api_key_env = \"AGENTRY_TEST_UNSET_KEY\"",
            ),
            "AGENTRY_TEST_UNSET_KEY",
        ),
    ] {
        std::fs::write(&path, text).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_agentry"))
            .args([
                "serve",
                "--config",
                path.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ])
            .env_remove("AGENTRY_TEST_UNSET_KEY")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
}
