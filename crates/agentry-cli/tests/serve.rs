//! `agentry serve` as a real process: restarts, SIGTERM drains, and two instances sharing
//! PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

#[path = "support/served.rs"]
mod served;
use served::Served;

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
        // Every run would refuse it: refused at start-up, naming the key.
        (
            config("kind = \"sqlite\"", "caps = { tool_result_max_bytes = 10 }"),
            "[server.caps] tool_result_max_bytes = 10",
        ),
        (
            config("kind = \"sqlite\"", "").replace(
                "api_keys = [\"key-acme-test-0001\"]",
                "api_key_env = \"AGENTRY_TEST_UNSET_KEY\"",
            ),
            "AGENTRY_TEST_UNSET_KEY",
        ),
        // A key the server would then refuse in every form it can be sent in.
        (
            config("kind = \"sqlite\"", "")
                .replace("\"key-acme-test-0001\"", "\" padded-key-0123456789 \""),
            "whitespace",
        ),
        (
            config("kind = \"sqlite\"", "").replace("\"key-acme-test-0001\"", "\"short\""),
            "shorter than 16",
        ),
        // Credentials in a base URL would travel with every request and in every error.
        (
            config("kind = \"sqlite\"", "").replace(
                "recording = \"anthropic\"",
                "recording = \"anthropic\"\n\n[[server.models]]\nname = \"up\"\n\
                 provider = \"openai-compatible\"\nbase_url = \"http://h/v1?api_key=SECRET\"",
            ),
            "query string",
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

/// An OpenAI chat completions stream of `chunks` text deltas of `size` bytes each.
fn huge_stream(chunks: usize, size: usize) -> String {
    let text = "x".repeat(size);
    let mut body = String::with_capacity(chunks * (size + 200));
    for _ in 0..chunks {
        body.push_str(&format!(
            "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\
             \"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}},\"finish_reason\":null}}]}}\n\n"
        ));
    }
    body.push_str(
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\
         \"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
    );
    body
}

#[test]
fn sigterm_with_a_client_that_stopped_reading_exits_within_the_drain() {
    use std::io::Write;

    // The upstream streams ~30 MB of text deltas: far more than the socket buffers and the
    // event channel hold, so a client that reads nothing stalls the run.
    let upstream_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let upstream = upstream_runtime
        .block_on(agent_backends::replay::ReplayServer::start([0, 1].map(
            |_| {
                agent_backends::replay::Cassette::new(
                    200,
                    "text/event-stream",
                    huge_stream(30_000, 1000),
                )
            },
        )))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agentry.toml");
    let text = config(
        "kind = \"sqlite\"\npath = \"sessions.db\"",
        "drain_secs = 1",
    )
    .replace(
        "recording = \"anthropic\"",
        &format!(
            "recording = \"anthropic\"\n\n[[server.models]]\nname = \"flood\"\n\
             provider = \"openai-compatible\"\nbase_url = \"{}/v1\"",
            upstream.url()
        ),
    );
    std::fs::write(&path, text).unwrap();
    let mut served = Served::start(&path);
    let address = served.url.strip_prefix("http://").unwrap().to_owned();
    let body = json!({"message": "go", "context": {"model": "flood"}}).to_string();
    let mut socket = std::net::TcpStream::connect(&address).unwrap();
    write!(
        socket,
        "POST /v1/sessions/stalled-1/execute HTTP/1.1\r\nHost: {address}\r\n\
         Authorization: Bearer key-acme-test-0001\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // And a streaming chat completion, never read either.
    let body =
        json!({"model": "flood", "stream": true, "messages": [{"role": "user", "content": "go"}]})
            .to_string();
    let mut chat = std::net::TcpStream::connect(&address).unwrap();
    write!(
        chat,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {address}\r\n\
         Authorization: Bearer key-acme-test-0001\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // Never read: wait until the upstream has been asked and the buffers have filled.
    let asked = std::time::Instant::now();
    while upstream.requests().len() < 2 && asked.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(upstream.requests().len(), 2);
    std::thread::sleep(Duration::from_secs(2));
    let signalled = std::time::Instant::now();
    served.terminate();
    // Never later than drain_secs (1) + the shutdown grace (5) + slack for a loaded machine.
    let Some((code, lines)) = served.wait_within(Duration::from_secs(10)) else {
        panic!("agentry serve did not exit within 10 s of SIGTERM with stalled clients");
    };
    let took = signalled.elapsed();
    assert_eq!(code, 0, "{lines:?}");
    // Both runs abandon their stalled streams: drain_secs (1) + the abandon wait (2) + the
    // linger (1), about 4.1 s, not the grace's hard stop at 6 s (where a run that kept
    // waiting on its reader, as the chat completion did, ends it). 1.4 s of slack.
    assert!(
        took < Duration::from_millis(5500),
        "shutdown took {took:?}: a run held on to a client that stopped reading"
    );
    eprintln!("exit {took:?} after SIGTERM with stalled clients");
    drop((socket, chat));

    // The run was cancelled and its session saved, lease released.
    let second = Served::start(&path);
    runtime().block_on(async {
        let stored = session(&second.url, "stalled-1").await;
        assert_eq!(
            stored["status"],
            "aborted",
            "{}",
            &stored.to_string()[..300.min(stored.to_string().len())]
        );
        assert_eq!(stored["messages"][0]["role"], "user");
        let response = client()
            .post(format!("{}/v1/sessions/stalled-1/execute", second.url))
            .bearer_auth("key-acme-test-0001")
            .json(&json!({"message": "again"}))
            .send()
            .await
            .unwrap();
        assert_ne!(response.status(), 409, "the lease was not released");
    });
}

#[test]
fn the_log_has_a_line_per_request_and_never_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agentry.toml");
    std::fs::write(
        &path,
        config("kind = \"sqlite\"\npath = \"sessions.db\"", ""),
    )
    .unwrap();
    for format in ["text", "json"] {
        let served = Served::start_with(
            &path,
            &["--log-format", format],
            &[("RUST_LOG", "trace"), ("NO_COLOR", "1")],
        );
        let wrong = "wrong-key-for-the-log-test";
        runtime().block_on(async {
            let events = execute(
                &served.url,
                &format!("log-{format}"),
                json!({"message": "Weather?", "context": context()}),
            )
            .await;
            assert_eq!(events.last().unwrap()["type"], "execute_complete");
            for header in [
                format!("Bearer {wrong}"),
                format!("bearer {wrong}"),
                "Basic a2V5LWFjbWUtdGVzdC0wMDAxOg==".to_owned(),
            ] {
                let response = client()
                    .get(format!("{}/v1/sessions/log-{format}", served.url))
                    .header("authorization", header)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), 401);
            }
            let response = client()
                .get(format!("{}/v1/sessions/log-{format}", served.url))
                .header("authorization", "BEARER key-acme-test-0001")
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
        });
        served.terminate();
        let (code, lines) = served.wait();
        assert_eq!(code, 0, "{lines:?}");
        let log = lines.join("\n");
        for secret in ["key-acme-test-0001", wrong, "a2V5LWFjbWUtdGVzdC0wMDAx"] {
            assert!(!log.contains(secret), "{secret} in the log:\n{log}");
        }
        assert!(!log.to_ascii_lowercase().contains("authorization"), "{log}");
        // A start-up summary, a line per request with its route template, tenant, status
        // and session, authentication failures, and the shutdown.
        for expected in [
            "serving",
            "tenants",
            "acme",
            "demo=replay",
            "/v1/sessions/{id}/execute",
            "log-",
            "authentication failed",
            "shutdown: draining",
            "shutdown: stopped",
        ] {
            assert!(
                log.contains(expected),
                "{expected} is not in the log:\n{log}"
            );
        }
        let requests = lines
            .iter()
            .filter(|line| line.contains("/v1/sessions/{id}") && line.contains("latency_ms"))
            .count();
        assert!(requests >= 5, "{log}");
        if format == "json" {
            for line in lines
                .iter()
                .filter(|line| !line.starts_with("agentry serve:"))
            {
                let parsed: Value = serde_json::from_str(line)
                    .unwrap_or_else(|error| panic!("not JSON ({error}): {line}"));
                assert!(parsed["level"].is_string(), "{line}");
            }
        } else {
            assert!(!log.contains('\u{1b}'), "colour on a pipe:\n{log}");
        }
    }
}

#[test]
fn a_store_failure_answers_500_and_logs_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agentry.toml");
    std::fs::write(
        &path,
        config("kind = \"sqlite\"\npath = \"sessions.db\"", ""),
    )
    .unwrap();
    let served = Served::start(&path);
    // The table goes away under the running server (a botched migration, a wrong file).
    let db = rusqlite::Connection::open(dir.path().join("sessions.db")).unwrap();
    db.execute_batch("ALTER TABLE sessions RENAME TO sessions_elsewhere")
        .unwrap();
    drop(db);
    runtime().block_on(async {
        let response = client()
            .post(format!("{}/v1/sessions", served.url))
            .bearer_auth("key-acme-test-0001")
            .json(&json!({"model": "demo"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 500);
        let body = response.text().await.unwrap();
        assert!(body.contains("server log"), "{body}");
        assert!(
            !body.contains("sessions"),
            "the cause stays in the log: {body}"
        );
    });
    served.terminate();
    let (code, lines) = served.wait();
    assert_eq!(code, 0, "{lines:?}");
    let log = lines.join("\n");
    assert!(log.contains("no such table"), "{log}");
    assert!(log.contains("request failed"), "{log}");
}

#[test]
fn metrics_can_require_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agentry.toml");
    std::fs::write(
        &path,
        config(
            "kind = \"sqlite\"\npath = \"sessions.db\"",
            "metrics_token_env = \"AGENTRY_TEST_METRICS_TOKEN\"",
        ),
    )
    .unwrap();
    let token = "metrics-token-0123456789";
    let served = Served::start_with(&path, &[], &[("AGENTRY_TEST_METRICS_TOKEN", token)]);
    runtime().block_on(async {
        let url = format!("{}/metrics", served.url);
        let open = client().get(&url).send().await.unwrap();
        assert_eq!(open.status(), 401);
        let tenant = client()
            .get(&url)
            .bearer_auth("key-acme-test-0001")
            .send()
            .await
            .unwrap();
        assert_eq!(
            tenant.status(),
            401,
            "a tenant key is not the metrics token"
        );
        let with_token = client().get(&url).bearer_auth(token).send().await.unwrap();
        assert_eq!(with_token.status(), 200);
        assert!(with_token.text().await.unwrap().contains("# TYPE"));
    });
    served.terminate();
    let (code, lines) = served.wait();
    assert_eq!(code, 0, "{lines:?}");
    assert!(!lines.join("\n").contains(token), "{lines:?}");

    // Without the variable the server does not start with /metrics silently open.
    let output = Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args([
            "serve",
            "--config",
            path.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .env_remove("AGENTRY_TEST_METRICS_TOKEN")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("AGENTRY_TEST_METRICS_TOKEN"));
}
