//! Limits, conflicts, expiry, disconnects and draining, against an in-process server.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::support::{CONFIG, TestServer, finished_events, slow_tool};

/// The demo model's round 1 calls `get_weather`: here a server tool that takes a second.
fn slow_weather(started: Arc<Notify>) -> agent_tools::Tool {
    slow_tool("get_weather", 1000, started)
}

#[tokio::test]
async fn a_client_that_hangs_up_mid_tool_aborts_the_run_and_keeps_what_completed() {
    let started = Arc::new(Notify::new());
    let server = TestServer::with(CONFIG, vec![slow_weather(Arc::clone(&started))]).await;
    let id = server
        .create(json!({"model": "demo", "tools": ["get_weather", "clock"]}))
        .await;
    let mut response = server
        .post(&format!("/v1/sessions/{id}/execute"), "key-acme-test-0001")
        .json(&json!({"message": "Weather?"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // Read until the first tool has started, then hang up.
    let _ = response.chunk().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), started.notified())
        .await
        .unwrap();
    drop(response);

    // The run notices, stops the slow tools and saves the session as aborted.
    let mut session = Value::Null;
    for _ in 0..100 {
        session = server.session(&id).await;
        if session["status"] == "aborted" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(session["status"], "aborted", "{session}");
    let messages = session["messages"].as_array().unwrap();
    // The user message, the model's turn asking for three calls, and a result for each
    // (the clock's real one, "not run" for the cancelled weather calls).
    assert_eq!(messages.len(), 5, "{session}");
    assert!(
        messages[2..]
            .iter()
            .all(|message| message["role"] == "tool")
    );
    assert_eq!(server.state.running(), 0);
    assert_eq!(
        server.state.metrics().value(
            "agentry_runs_total",
            &[("tenant", "acme"), ("status", "aborted")]
        ),
        1.0
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_second_execute_on_a_busy_session_gets_409() {
    let started = Arc::new(Notify::new());
    let server = TestServer::with(CONFIG, vec![slow_weather(Arc::clone(&started))]).await;
    let id = server
        .create(json!({"model": "demo", "tools": ["get_weather", "clock", "calculator"]}))
        .await;
    let first = server.execute_until_started(&id, &started).await;
    let path = format!("/v1/sessions/{id}/execute");
    let second = server
        .post_json(&path, "key-acme-test-0001", &json!({"message": "Again?"}))
        .await;
    assert_eq!(second.status(), 409);
    let body: Value = second.json().await.unwrap();
    assert_eq!(body["error"]["type"], "conflict_error");
    // The first one finishes normally.
    let events = finished_events(first).await;
    assert_eq!(events.last().unwrap()["status"], "completed");
    server.shutdown().await;
}

#[tokio::test]
async fn bodies_over_the_limit_get_413_and_bad_input_400() {
    let config = CONFIG.replace("[server]", "[server]\nmax_body_bytes = 2048");
    let server = TestServer::with(&config, Vec::new()).await;
    let big = "x".repeat(4096);
    let response = server
        .post("/v1/sessions", "key-acme-test-0001")
        .json(&json!({"model": "demo", "system": big}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["status"], 413);

    for (body, expected) in [
        (json!({"model": "gpt-nope"}), "not offered"),
        (
            json!({"model": "demo", "tools": ["shell"]}),
            "tool `shell` is not offered",
        ),
        (
            json!({"model": "demo", "options": {"max_iterations": 99}}),
            "above this server's cap",
        ),
        (json!({"model": "demo", "bogus": 1}), "unknown field"),
    ] {
        let response = server
            .post_json("/v1/sessions", "key-acme-test-0001", &body)
            .await;
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.unwrap();
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains(expected),
            "{error}"
        );
    }

    // Execute without a session and without a context: 400; with a context: created.
    let missing = server
        .post("/v1/sessions/nope/execute", "key-acme-test-0001")
        .json(&json!({"message": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 400);
    let events = server
        .execute(
            "made-here",
            json!({"message": "hi", "context": {"model": "demo", "tools": ["clock"]}}),
        )
        .await;
    assert_eq!(events.last().unwrap()["type"], "execute_complete");
    // Results for calls that are not pending: 400 before any stream.
    let wrong = server
        .post("/v1/sessions/made-here/execute", "key-acme-test-0001")
        .json(&json!({"tool_results": [{"tool_call_id": "call_x", "content": "1"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 400);
    server.shutdown().await;
}

#[tokio::test]
async fn rate_and_concurrency_limits_answer_429_with_retry_after() {
    let config = CONFIG.replace(
        "name = \"acme\"",
        "name = \"acme\"\nrequests_per_minute = 4\nconcurrent_executes = 1",
    );
    let started = Arc::new(Notify::new());
    let server = TestServer::with(&config, vec![slow_weather(Arc::clone(&started))]).await;
    let id = server
        .create(json!({"model": "demo", "tools": ["get_weather", "clock", "calculator"]}))
        .await;
    let other = server.create(json!({"model": "demo"})).await;
    let first = server.execute_until_started(&id, &started).await;
    // The one execute place is taken.
    let busy = server
        .post(
            &format!("/v1/sessions/{other}/execute"),
            "key-acme-test-0001",
        )
        .json(&json!({"message": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(busy.status(), 429);
    assert_eq!(busy.headers()["retry-after"], "1");
    // And the request rate (4 a minute: two creates and two executes) is spent.
    let limited = server
        .get(&format!("/v1/sessions/{id}"), "key-acme-test-0001")
        .send()
        .await
        .unwrap();
    assert_eq!(limited.status(), 429);
    let wait: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=20).contains(&wait), "{wait}");
    // Another tenant is not affected.
    let globex = server
        .post("/v1/sessions", "key-globex-test-01")
        .json(&json!({"model": "demo"}))
        .send()
        .await
        .unwrap();
    assert_eq!(globex.status(), 201);
    first.await.unwrap().unwrap().text().await.unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn pending_remote_calls_expire_after_the_configured_time() {
    let config = CONFIG.replace("[server]", "[server]\nremote_tool_timeout_secs = 0");
    let server = TestServer::with(&config, Vec::new()).await;
    let id = server
        .create(
            json!({"model": "demo", "tools": ["clock", "calculator"], "remote_tools": [
                {"name": "get_weather", "description": "Weather.", "parameters": {"type": "object"}}
            ]}),
        )
        .await;
    let events = server.execute(&id, json!({"message": "Weather?"})).await;
    let pending = events.last().unwrap()["pending_tool_calls"].clone();
    assert_eq!(pending.as_array().unwrap().len(), 2);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let session = server.session(&id).await;
    assert_eq!(session["expired"], true, "{session}");
    let results: Vec<Value> = pending
        .as_array()
        .unwrap()
        .iter()
        .map(|call| json!({"tool_call_id": call["id"], "content": "late"}))
        .collect();
    let late = server
        .post(&format!("/v1/sessions/{id}/execute"), "key-acme-test-0001")
        .json(&json!({"tool_results": results}))
        .send()
        .await
        .unwrap();
    assert_eq!(late.status(), 409);
    assert!(late.text().await.unwrap().contains("expired"));
    // The history is valid again: a new message runs.
    let events = server.execute(&id, json!({"message": "Try again"})).await;
    assert_eq!(events.last().unwrap()["type"], "execute_complete");
    server.shutdown().await;
}

#[tokio::test]
async fn metrics_count_requests_runs_model_calls_tools_and_cost_by_tenant() {
    let server = TestServer::start().await;
    let id = server
        .create(
            json!({"model": "demo", "tools": ["clock", "calculator"], "remote_tools": [
                {"name": "get_weather", "description": "Weather.", "parameters": {"type": "object"}}
            ]}),
        )
        .await;
    server.execute(&id, json!({"message": "Weather?"})).await;
    let text = server
        .client
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "agentry_http_requests_total{tenant=\"acme\",route=\"/v1/sessions\",status=\"201\"} 1",
        "agentry_model_calls_total{tenant=\"acme\",model=\"demo\"} 1",
        "agentry_tool_calls_total{tenant=\"acme\",tool=\"clock\",outcome=\"ok\"} 1",
        "agentry_tokens_total{tenant=\"acme\",kind=\"input\"} 386",
        "agentry_runs_total{tenant=\"acme\",status=\"awaiting_tool_execution\"} 1",
        "agentry_cost_usd_total{tenant=\"acme\"} 0.002268",
        "agentry_active_streams{tenant=\"acme\"} 0",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn a_budget_trip_is_counted_and_reported_in_execute_complete() {
    let server = TestServer::start().await;
    let id = server
        .create(json!({"model": "demo", "tools": ["clock", "calculator"], "options": {"max_iterations": 0}}))
        .await;
    let events = server.execute(&id, json!({"message": "Weather?"})).await;
    let complete = events.last().unwrap();
    assert_eq!(complete["status"], "error", "{complete}");
    assert_eq!(complete["error"]["kind"], "budget_exceeded", "{complete}");
    assert_eq!(
        server.state.metrics().value(
            "agentry_budget_trips_total",
            &[("tenant", "acme"), ("budget", "iterations")]
        ),
        1.0
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_drain_lets_running_executes_finish_and_refuses_new_ones() {
    let started = Arc::new(Notify::new());
    let server = TestServer::with(CONFIG, vec![slow_weather(Arc::clone(&started))]).await;
    let id = server
        .create(json!({"model": "demo", "tools": ["get_weather", "clock", "calculator"]}))
        .await;
    let running = server.execute_until_started(&id, &started).await;
    let url = server.url.clone();
    let client = server.client.clone();
    let state = server.state.clone();
    let shutdown = tokio::spawn(server.shutdown());
    // Wait for the drain to begin, then a new request is refused.
    for _ in 0..100 {
        if client
            .get(format!("{url}/healthz"))
            .send()
            .await
            .map_or(true, |r| r.status() == 503)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let events = finished_events(running).await;
    assert_eq!(
        events.last().unwrap()["status"],
        "completed",
        "the running execute finished"
    );
    shutdown.await.unwrap();
    assert_eq!(state.running(), 0);
}

#[tokio::test]
async fn tools_run_as_the_tenant_and_permissions_hide_tools() {
    let config = CONFIG.replace(
        "api_keys = [\"key-acme-test-0001\"]",
        "api_keys = [\"key-acme-test-0001\"]\npermissions = [\"weather\"]",
    );
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let record = Arc::clone(&seen);
    let weather = agent_tools::Tool::from_json_fn(
        "get_weather",
        "Weather, for tenants allowed to ask.",
        json!({"type": "object"}),
        move |_args, ctx| {
            let record = Arc::clone(&record);
            async move {
                record
                    .lock()
                    .unwrap()
                    .push(ctx.caller().tenant().unwrap_or("?").to_owned());
                Ok(json!({"temp_c": 19}))
            }
        },
    )
    .requires_permission("weather");
    let server = TestServer::with(&config, vec![weather]).await;
    let id = server
        .create(json!({"model": "demo", "tools": ["get_weather", "clock", "calculator"]}))
        .await;
    let events = server.execute(&id, json!({"message": "Weather?"})).await;
    assert_eq!(events.last().unwrap()["status"], "completed");
    assert_eq!(*seen.lock().unwrap(), ["acme", "acme"]);

    // globex lacks the permission: the tool does not exist for it.
    let refused = server
        .post("/v1/sessions", "key-globex-test-01")
        .json(&json!({"model": "demo", "tools": ["get_weather"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let body = refused.text().await.unwrap();
    assert!(
        body.contains("tool `get_weather` is not offered") && body.contains("calculator"),
        "{body}"
    );
    server.shutdown().await;
}
