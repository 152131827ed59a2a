//! A real PostgreSQL restarted under a real `agentry serve` in the middle of a run, and two
//! server processes on one cluster where the first is killed mid-run and the second continues.
//!
//! The test owns its cluster (it may stop what no other test shares): `initdb` into a
//! temporary directory, `pg_ctl start` on a free loopback port, `pg_ctl restart -m fast` while
//! a run streams. The binaries come from `AGENTRY_TEST_PG_BINDIR` (`.ci/postgres.sh start`
//! exports it, so CI runs this); without it the test is skipped, and under `CI` it fails. As
//! root (PostgreSQL refuses to run as root) the cluster belongs to the `postgres` user.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

#[path = "support/pg_cluster.rs"]
mod pg_cluster;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent_backends::replay::{Cassette, Chunking, ReplayServer};
use pg_cluster::Cluster;
use serde_json::{Value, json};

#[path = "support/served.rs"]
mod served;
use served::{Served, answer_stream, calculator_calls};

const KEY: &str = "key-acme-test-0001";

/// A model call asking for the calculator on `n * 7` as call `call_<n>`.
fn call(n: u32) -> String {
    let first = json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
        {"index": 0, "id": format!("call_{n}"), "type": "function",
         "function": {"name": "calculator", "arguments": format!("{{\"expression\": \"{n} * 7\"}}")}}
    ]}, "finish_reason": null}]});
    let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}});
    format!("data: {first}\n\ndata: {end}\n\ndata: [DONE]\n\n")
}

fn sse(body: String) -> Cassette {
    Cassette::new(200, "text/event-stream", body)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

fn config(dir: &Path, store_url: &str, upstream: &str) -> PathBuf {
    let path = dir.join("agentry.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[server]
tools = ["calculator"]
execute_lease_secs = 2

[server.store]
kind = "postgres"
url = "{store_url}"

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

/// `GET` a session, retrying while the store is away (a 5xx).
async fn session(url: &str, id: &str) -> Value {
    let started = Instant::now();
    loop {
        let response = reqwest::Client::new()
            .get(format!("{url}/v1/sessions/{id}"))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        if response.status().is_success() {
            return response.json().await.unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "GET session: {}",
            response.text().await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Sends an execute, retrying while the lease of a cut-off run lasts (409); its SSE frames.
async fn execute(url: &str, id: &str, body: &Value) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let response = reqwest::Client::new()
            .post(format!("{url}/v1/sessions/{id}/execute"))
            .bearer_auth(KEY)
            .json(body)
            .send()
            .await
            .unwrap();
        if response.status() == 409 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the lease stayed"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
        let text = response.text().await.unwrap();
        return text
            .split("\n\n")
            .filter_map(|frame| frame.strip_prefix("data: "))
            .map(|data| serde_json::from_str::<Value>(data).unwrap())
            .collect();
    }
}

/// The stored calls and, per call, how many results answer it (each must be 1).
fn calls_and_results(stored: &Value) -> Vec<(String, usize, String)> {
    let messages = stored["messages"].as_array().unwrap();
    let mut out = Vec::new();
    for message in messages {
        for block in message["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_call" {
                let id = block["id"].as_str().unwrap().to_owned();
                let results: Vec<&Value> = messages
                    .iter()
                    .filter(|m| m["role"] == "tool" && m["tool_call_id"] == id.as_str())
                    .collect();
                let content = results
                    .first()
                    .map(|m| m["content"].to_string())
                    .unwrap_or_default();
                out.push((id, results.len(), content));
            }
        }
    }
    out
}

#[test]
fn a_postgresql_restart_mid_run_loses_nothing_and_the_server_reconnects() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let upstream_runtime = runtime();
    let upstream = upstream_runtime
        .block_on(ReplayServer::start([
            sse(call(1)),
            // The second model call streams slowly: PostgreSQL restarts meanwhile.
            sse(call(2))
                .with_chunking(Chunking::Every(30))
                .with_chunk_delay(Duration::from_millis(250)),
            sse(answer_stream("14 and 42")),
        ]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), &cluster.url(), &upstream.url());
    let served = Served::start(&path);
    let client = runtime();
    let (url, id) = (served.url.clone(), "restarted");
    let run = client.spawn(async move {
        let body = json!({"message": "1 * 7 and 2 * 7?",
            "context": {"model": "up", "tools": ["calculator"]}});
        execute(&url, id, &body).await
    });
    // Round 1 is checkpointed before the second model call starts.
    let started = Instant::now();
    while upstream.requests().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no second call"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let restart = Instant::now();
    cluster.ctl(&["-m", "fast", "restart"]);
    eprintln!(
        "PostgreSQL restarted in {:.2}s while the run streamed",
        restart.elapsed().as_secs_f64()
    );
    let events = client.block_on(run).unwrap();

    let complete = events.last().unwrap();
    assert_eq!(complete["type"], "execute_complete", "{events:?}");
    client.block_on(async {
        let stored = session(&served.url, id).await;
        let calls = calls_and_results(&stored);
        // No completed turn lost: round 1 (before the restart) is stored with its result.
        assert_eq!(calls[0].0, "call_1", "{stored}");
        assert!(calls[0].2.contains("7"), "{stored}");
        eprintln!("the run across the restart ended {}", complete["status"]);
        match complete["status"].as_str().unwrap() {
            "completed" => {
                assert_eq!(calls.len(), 2, "{stored}");
                assert_eq!(stored["status"], "completed", "{stored}");
            }
            status => {
                // Or a clear typed error naming the store, never a hang or a 5xx mid-stream.
                assert_eq!(status, "error", "{events:?}");
                assert!(
                    complete["error"]["kind"].is_string()
                        && complete["error"]["message"].is_string(),
                    "{complete}"
                );
                eprintln!("the run failed: {}", complete["error"]);
            }
        }
        for (id, results, _) in &calls {
            assert_eq!(*results, 1, "{id} answered {results} times: {stored}");
        }
        let ran = calculator_calls(&served.url).await;

        // The server reconnected: the next request is served, and continues the session
        // without running a completed call again.
        upstream.push(sse(call(3)));
        upstream.push(sse(answer_stream("21")));
        let events = execute(&served.url, id, &json!({"message": "and 3 * 7?"})).await;
        assert_eq!(events.last().unwrap()["status"], "completed", "{events:?}");
        let stored = session(&served.url, id).await;
        let calls = calls_and_results(&stored);
        for (id, results, _) in &calls {
            assert_eq!(*results, 1, "{id} answered {results} times: {stored}");
        }
        assert!(calls.iter().any(|(id, _, _)| id == "call_3"), "{stored}");
        // One more calculator run: call 3's.
        assert_eq!(calculator_calls(&served.url).await, ran + 1.0);
        // Every call the process ran is one stored call (none ran twice).
        assert_eq!(ran + 1.0, calls.len() as f64, "{stored}");
    });
}

/// PostgreSQL away at the very moment a turn is checkpointed, and back a moment later: the
/// checkpoint is written once more after the server reconnects, and the run completes (it
/// failed with "the session checkpoint could not be saved" though the store was back within
/// a second).
#[test]
fn a_checkpoint_that_finds_postgresql_restarting_is_retried_once_it_is_back() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let upstream_runtime = runtime();
    let upstream = upstream_runtime
        .block_on(ReplayServer::start([
            sse(call(1)),
            // PostgreSQL stops while the second model call streams; its turn's checkpoint
            // finds it away.
            sse(call(2))
                .with_chunking(Chunking::Every(30))
                .with_chunk_delay(Duration::from_millis(100)),
            sse(answer_stream("7 and 14")),
        ]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), &cluster.url(), &upstream.url());
    let served = Served::start(&path);
    let client = runtime();
    let (url, id) = (served.url.clone(), "checkpoint-retried");
    let run = client.spawn(async move {
        let body = json!({"message": "1 * 7 and 2 * 7?",
            "context": {"model": "up", "tools": ["calculator"]}});
        execute(&url, id, &body).await
    });
    let started = Instant::now();
    while upstream.requests().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no second call"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    cluster.ctl(&["-m", "fast", "stop"]);
    // The checkpoint of call 2's turn fails; PostgreSQL comes back while it waits.
    let waited = Instant::now();
    loop {
        let line = served
            .stderr
            .recv_timeout(Duration::from_secs(30))
            .expect("no checkpoint was retried (the run failed at the first write)");
        if line.contains("a checkpoint could not be saved; retrying once") {
            break;
        }
    }
    let down = Instant::now();
    cluster.ctl(&["start"]);
    eprintln!(
        "the checkpoint failed {:.2}s after the stop; PostgreSQL was back {:.2}s later",
        down.duration_since(waited).as_secs_f64(),
        down.elapsed().as_secs_f64()
    );
    let events = client.block_on(run).unwrap();
    let complete = events.last().unwrap();
    assert_eq!(complete["type"], "execute_complete", "{events:?}");
    assert_eq!(complete["status"], "completed", "{events:?}");
    client.block_on(async {
        let stored = session(&served.url, id).await;
        assert_eq!(stored["status"], "completed", "{stored}");
        let calls = calls_and_results(&stored);
        let ids: Vec<&str> = calls.iter().map(|(id, _, _)| id.as_str()).collect();
        assert_eq!(ids, ["call_1", "call_2"], "{stored}");
        for (id, results, _) in &calls {
            assert_eq!(*results, 1, "{id} answered {results} times: {stored}");
        }
        assert!(calls[1].2.contains("14"), "{stored}");
        assert_eq!(calculator_calls(&served.url).await, 2.0);
    });
}

#[test]
fn a_second_process_on_the_cluster_continues_a_run_the_first_was_killed_in() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let upstream_runtime = runtime();
    let upstream = upstream_runtime
        .block_on(ReplayServer::start([
            sse(call(1)),
            // The second model call sends a few bytes and stalls: the first process dies in it.
            sse(answer_stream("too late"))
                .with_chunking(Chunking::Every(40))
                .with_chunk_delay(Duration::from_secs(600)),
        ]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), &cluster.url(), &upstream.url());
    let mut first = Served::start(&path);
    let second = Served::start(&path);
    let client = runtime();
    let (url, id) = (first.url.clone(), "handed-over");
    client.spawn(async move {
        let body =
            json!({"message": "1 * 7?", "context": {"model": "up", "tools": ["calculator"]}});
        if let Ok(response) = reqwest::Client::new()
            .post(format!("{url}/v1/sessions/{id}/execute"))
            .bearer_auth(KEY)
            .json(&body)
            .send()
            .await
        {
            let _ = response.text().await;
        }
    });
    let started = Instant::now();
    while upstream.requests().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no second call"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(client.block_on(calculator_calls(&first.url)), 1.0);
    first.kill_9();

    client.block_on(async {
        upstream.push(sse(answer_stream("7")));
        let events = execute(&second.url, id, &json!({})).await;
        assert_eq!(events.last().unwrap()["status"], "completed", "{events:?}");
        // The second process never ran round 1's call: its result came from the cluster.
        assert_eq!(calculator_calls(&second.url).await, 0.0);
        let stored = session(&second.url, id).await;
        let calls = calls_and_results(&stored);
        assert_eq!(calls.len(), 1, "{stored}");
        assert_eq!(calls[0].1, 1, "{stored}");
        assert!(calls[0].2.contains("7"), "{stored}");
        assert_eq!(stored["status"], "completed");
    });
    // Three model calls: the third (the second process's) carried round 1's result once.
    let requests = upstream.requests();
    assert_eq!(requests.len(), 3);
    let sent = requests[2].json().unwrap();
    let results = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "tool")
        .count();
    assert_eq!(results, 1, "{sent}");
}

#[test]
fn postgresql_down_at_a_checkpoint_fails_the_run_with_a_typed_error_and_the_server_recovers() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let upstream_runtime = runtime();
    let upstream = upstream_runtime
        .block_on(ReplayServer::start([
            sse(call(1)),
            // PostgreSQL stops while the second model call streams; its checkpoint fails.
            sse(call(2))
                .with_chunking(Chunking::Every(30))
                .with_chunk_delay(Duration::from_millis(250)),
        ]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), &cluster.url(), &upstream.url());
    let served = Served::start(&path);
    let client = runtime();
    let (url, id) = (served.url.clone(), "store-down");
    let run = client.spawn(async move {
        let body = json!({"message": "1 * 7 and 2 * 7?",
            "context": {"model": "up", "tools": ["calculator"]}});
        execute(&url, id, &body).await
    });
    let started = Instant::now();
    while upstream.requests().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no second call"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    cluster.ctl(&["-m", "fast", "stop"]);
    let events = client.block_on(run).unwrap();
    let complete = events.last().unwrap();
    assert_eq!(complete["type"], "execute_complete", "{events:?}");
    assert_eq!(complete["status"], "error", "{events:?}");
    // A typed error that says what failed, without the store's host or user.
    assert_eq!(complete["error"]["kind"], "appender", "{complete}");
    let message = complete["error"]["message"].as_str().unwrap();
    assert!(message.contains("could not be saved"), "{message}");
    assert!(!message.contains("127.0.0.1"), "{message}");
    // Call 2's turn was never stored, so it never ran.
    assert_eq!(client.block_on(calculator_calls(&served.url)), 1.0);

    cluster.ctl(&["start"]);
    client.block_on(async {
        // Round 1 (checkpointed before the stop) is there.
        let stored = session(&served.url, id).await;
        let calls = calls_and_results(&stored);
        assert_eq!(calls[0].0, "call_1", "{stored}");
        assert_eq!(calls[0].1, 1, "{stored}");
        assert!(calls[0].2.contains("7"), "{stored}");
        // The server reconnected: `{}` continues the run from round 1 without running call 1
        // again.
        upstream.push(sse(call(2)));
        upstream.push(sse(answer_stream("7 and 14")));
        let events = execute(&served.url, id, &json!({})).await;
        assert_eq!(events.last().unwrap()["status"], "completed", "{events:?}");
        let stored = session(&served.url, id).await;
        let calls = calls_and_results(&stored);
        let ids: Vec<&str> = calls.iter().map(|(id, _, _)| id.as_str()).collect();
        assert_eq!(ids, ["call_1", "call_2"], "{stored}");
        for (id, results, _) in &calls {
            assert_eq!(*results, 1, "{id} answered {results} times: {stored}");
        }
        assert_eq!(calculator_calls(&served.url).await, 2.0);
    });
}
