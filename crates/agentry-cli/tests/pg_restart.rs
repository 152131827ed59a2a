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

use std::time::{Duration, Instant};

use agent_backends::replay::{Chunking, ReplayServer};
use pg_cluster::Cluster;
use serde_json::{Value, json};

#[path = "support/served.rs"]
mod served;
use served::{
    Served, answer_stream, calculator_call, calculator_calls, execute, execute_in_background,
    runtime, session, sse, tool_results_sent, wait_for_requests,
};

/// A model call asking for the calculator on `n * 7` as call `call_<n>`.
fn call(n: u32) -> String {
    calculator_call(&format!("call_{n}"), &format!("{n} * 7"), (50, 10))
}

/// The configuration of a server on `cluster` whose model `up` is `upstream`.
fn config(dir: &std::path::Path, cluster: &Cluster, upstream: &ReplayServer) -> std::path::PathBuf {
    let store = format!("kind = \"postgres\"\nurl = \"{}\"", cluster.url());
    served::config(dir, &store, "", &upstream.url())
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

/// Each stored call is answered by exactly one result.
fn answered_once(calls: &[(String, usize, String)], stored: &Value) {
    for (id, results, _) in calls {
        assert_eq!(*results, 1, "{id} answered {results} times: {stored}");
    }
}

/// Starts the execute the restart tests cut into: two calculator rounds, then the answer.
fn ask_two_products(
    client: &tokio::runtime::Runtime,
    url: &str,
    id: &'static str,
) -> tokio::task::JoinHandle<Vec<Value>> {
    let url = url.to_owned();
    client.spawn(async move {
        let body = json!({"message": "1 * 7 and 2 * 7?",
            "context": {"model": "up", "tools": ["calculator"]}});
        execute(&url, id, &body).await
    })
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
    let path = config(dir.path(), &cluster, &upstream);
    let served = Served::start(&path);
    let client = runtime();
    let id = "restarted";
    let run = ask_two_products(&client, &served.url, id);
    // Round 1 is checkpointed before the second model call starts.
    wait_for_requests(&upstream, 2, "no second call");
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
        answered_once(&calls, &stored);
        let ran = calculator_calls(&served.url).await;

        // The server reconnected: the next request is served, and continues the session
        // without running a completed call again.
        upstream.push(sse(call(3)));
        upstream.push(sse(answer_stream("21")));
        let events = execute(&served.url, id, &json!({"message": "and 3 * 7?"})).await;
        assert_eq!(events.last().unwrap()["status"], "completed", "{events:?}");
        let stored = session(&served.url, id).await;
        let calls = calls_and_results(&stored);
        answered_once(&calls, &stored);
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
    let path = config(dir.path(), &cluster, &upstream);
    let served = Served::start(&path);
    let client = runtime();
    let id = "checkpoint-retried";
    let run = ask_two_products(&client, &served.url, id);
    wait_for_requests(&upstream, 2, "no second call");
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
        answered_once(&calls, &stored);
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
    let path = config(dir.path(), &cluster, &upstream);
    let mut first = Served::start(&path);
    let second = Served::start(&path);
    let client = runtime();
    let (url, id) = (first.url.clone(), "handed-over");
    let body = json!({"message": "1 * 7?", "context": {"model": "up", "tools": ["calculator"]}});
    execute_in_background(&client, &url, id, body);
    wait_for_requests(&upstream, 2, "no second call");
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
    assert_eq!(upstream.requests().len(), 3);
    let (results, sent) = tool_results_sent(&upstream, 2);
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
    let path = config(dir.path(), &cluster, &upstream);
    let served = Served::start(&path);
    let client = runtime();
    let id = "store-down";
    let run = ask_two_products(&client, &served.url, id);
    wait_for_requests(&upstream, 2, "no second call");
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
        answered_once(&calls, &stored);
        assert_eq!(calculator_calls(&served.url).await, 2.0);
    });
}
