//! `agentry serve` killed with SIGKILL in the middle of a run: the turns completed before the
//! kill are in the SQLite file, and the restarted process continues the run from there
//! without running round 1's tool again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use agent_backends::replay::{Cassette, Chunking, ReplayServer};
use serde_json::{Value, json};

#[path = "support/served.rs"]
mod served;
use served::{
    Served, answer_stream, calculator_call, calculator_calls, execute, execute_in_background,
    metric, runtime, session, sse, tool_results_sent, wait_for_requests,
};

/// An OpenAI chat-completions stream asking for the calculator (call `call_1`).
fn call_stream() -> String {
    calculator_call("call_1", "6 * 7", (50, 10))
}

/// The configuration of a server storing sessions in `dir`'s `sessions.db`, with `extra`,
/// whose model `up` is `upstream`.
fn sqlite_config(
    dir: &std::path::Path,
    extra: &str,
    upstream: &ReplayServer,
) -> std::path::PathBuf {
    let store = format!(
        "kind = \"sqlite\"\npath = \"{}\"",
        dir.join("sessions.db").display()
    );
    served::config(dir, &store, extra, &upstream.url())
}

/// A model call of the budget tests: the calculator on `n * 7` as call `call_<n>`, or (`n`
/// 0) the answer; 1,000 tokens each ($0.10 at the configured price).
fn budget_stream(n: u32) -> String {
    if n > 0 {
        return calculator_call(&format!("call_{n}"), &format!("{n} * 7"), (900, 100));
    }
    let first = json!({"choices": [{"index": 0,
        "delta": {"role": "assistant", "content": "done"}, "finish_reason": null}]});
    let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 100, "total_tokens": 1000}});
    format!("data: {first}\n\ndata: {end}\n\ndata: [DONE]\n\n")
}

#[test]
fn a_run_killed_with_sigkill_continues_from_its_last_turn_after_a_restart() {
    let upstream_runtime = runtime();
    let upstream = upstream_runtime
        .block_on(ReplayServer::start([
            sse(call_stream()),
            // The second model call sends a few bytes and stalls.
            sse(answer_stream("too late"))
                .with_chunking(Chunking::Every(40))
                .with_chunk_delay(Duration::from_secs(600)),
        ]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = sqlite_config(dir.path(), "", &upstream);
    let mut first = Served::start(&path);
    let client = runtime();
    let id = "crashed-run";
    let body = json!({"message": "what is 6 * 7?",
        "context": {"model": "up", "tools": ["calculator"]}});
    execute_in_background(&client, &first.url, id, body);
    // The second model call starts only once round 1 is checkpointed.
    wait_for_requests(&upstream, 2, "no second model call");
    assert_eq!(client.block_on(calculator_calls(&first.url)), 1.0);
    // The call turn, then its result.
    assert_eq!(
        client.block_on(metric(
            &first.url,
            "agentry_checkpoints_total",
            "outcome=\"ok\""
        )),
        2.0
    );
    first.kill_9();

    let second = Served::start(&path);
    client.block_on(async {
        // Round 1 survived the kill; the session reads `running` until the lease expires.
        let stored = session(&second.url, id).await;
        let roles: Vec<&str> = stored["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|message| message["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["user", "assistant", "tool"], "{stored}");

        upstream.push(sse(answer_stream("42")));
        let events = execute(&second.url, id, &json!({})).await;
        assert_eq!(events.last().unwrap()["status"], "completed", "{events:?}");
        // The restarted process never ran the calculator: round 1's result came from the file.
        assert_eq!(calculator_calls(&second.url).await, 0.0);
        assert_eq!(
            metric(
                &second.url,
                "agentry_recovered_runs_total",
                "tenant=\"acme\""
            )
            .await,
            1.0
        );

        let stored = session(&second.url, id).await;
        let messages = stored["messages"].as_array().unwrap();
        let roles: Vec<&str> = messages
            .iter()
            .map(|message| message["role"].as_str().unwrap())
            .collect();
        assert_eq!(
            roles,
            ["user", "assistant", "tool", "assistant"],
            "{stored}"
        );
        assert!(
            messages[2]["content"].to_string().contains("42"),
            "{stored}"
        );
        assert_eq!(stored["status"], "completed");
    });
    // Three model calls in all: round 1 was not asked again, and the third carried its result.
    assert_eq!(upstream.requests().len(), 3);
    let (results, sent) = tool_results_sent(&upstream, 2);
    assert_eq!(results, 1, "{sent}");
}

/// A run with `options` (session budgets) killed with SIGKILL after two completed tool rounds
/// (2,000 tokens, $0.20 at the configured price), then continued with `{}` on a restarted
/// process whose upstream answers `next`. Returns the continuation's events, the calculator
/// calls the restarted process ran, and the model calls the continuation made.
fn kill_after_two_rounds_then_continue(
    options: &Value,
    next: Vec<Cassette>,
) -> (Vec<Value>, f64, usize) {
    let upstream_runtime = runtime();
    let upstream = upstream_runtime
        .block_on(ReplayServer::start([
            sse(budget_stream(1)),
            sse(budget_stream(2)),
            // The third model call sends a few bytes and stalls.
            sse(answer_stream("too late"))
                .with_chunking(Chunking::Every(40))
                .with_chunk_delay(Duration::from_secs(600)),
        ]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = sqlite_config(
        dir.path(),
        "[server.prices.up]\ninput_per_mtok = 100.0\noutput_per_mtok = 100.0\n",
        &upstream,
    );
    let mut first = Served::start(&path);
    let client = runtime();
    let id = "budgeted-run";
    let body = json!({"message": "what is 6 * 7, twice?",
        "context": {"model": "up", "tools": ["calculator"], "options": options}});
    execute_in_background(&client, &first.url, id, body);
    // The third model call starts only once round 2 is checkpointed.
    wait_for_requests(&upstream, 3, "no third model call");
    assert_eq!(client.block_on(calculator_calls(&first.url)), 2.0);
    first.kill_9();

    let second = Served::start(&path);
    for cassette in next {
        upstream.push(cassette);
    }
    let events = client.block_on(async { execute(&second.url, id, &json!({})).await });
    let ran = client.block_on(calculator_calls(&second.url));
    (events, ran, upstream.requests().len() - 3)
}

/// The budget in the `execute_complete` event's error: `(limit, used)`.
fn tripped(events: &[Value]) -> (String, Value) {
    let complete = events.last().unwrap();
    assert_eq!(complete["type"], "execute_complete", "{events:?}");
    assert_eq!(complete["status"], "error", "{events:?}");
    let budget = &complete["error"]["budget"];
    (
        budget["limit"].as_str().unwrap_or_default().to_owned(),
        budget["used"].clone(),
    )
}

#[test]
fn iterations_used_before_a_kill_count_against_the_continued_run() {
    // max_iterations 3, killed after round 2: the continuation runs one round, no more.
    let (events, ran, model_calls) = kill_after_two_rounds_then_continue(
        &json!({"max_iterations": 3}),
        vec![
            sse(budget_stream(3)),
            sse(budget_stream(4)),
            sse(budget_stream(0)),
        ],
    );
    assert_eq!(ran, 1.0, "{events:?}");
    assert_eq!(model_calls, 2, "{events:?}");
    let (limit, used) = tripped(&events);
    assert_eq!(limit, "iterations", "{events:?}");
    assert_eq!(used, 3, "{events:?}");
}

#[test]
fn tokens_used_before_a_kill_count_against_the_continued_run() {
    // 2,000 of 2,500 tokens used before the kill: the continuation's call (1,000 more) trips
    // the budget (with fresh budgets it would complete).
    let (events, ran, model_calls) = kill_after_two_rounds_then_continue(
        &json!({"token_budget": 2500}),
        vec![sse(budget_stream(3)), sse(budget_stream(0))],
    );
    assert_eq!((ran, model_calls), (0.0, 1), "{events:?}");
    let (limit, used) = tripped(&events);
    assert_eq!(limit, "tokens", "{events:?}");
    assert_eq!(used, 3000, "{events:?}");
}

#[test]
fn dollars_used_before_a_kill_count_against_the_continued_run() {
    // $0.20 of $0.25 used before the kill: the continuation's call ($0.10 more) trips the
    // budget (with fresh budgets it would complete).
    let (events, ran, model_calls) = kill_after_two_rounds_then_continue(
        &json!({"max_cost_usd": 0.25}),
        vec![sse(budget_stream(3)), sse(budget_stream(0))],
    );
    assert_eq!((ran, model_calls), (0.0, 1), "{events:?}");
    let (limit, used) = tripped(&events);
    assert_eq!(limit, "cost_usd", "{events:?}");
    assert!((used.as_f64().unwrap() - 0.30).abs() < 1e-9, "{events:?}");
}
