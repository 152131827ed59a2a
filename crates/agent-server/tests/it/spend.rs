//! Spend is bounded before the money is spent: invalid budgets are a 400 with no model call,
//! a request that cannot fit what is left is never sent upstream, and every execute reports
//! what was spent, the same number in the message, the events, the stored session and
//! `execute_complete`.
//!
//! The upstream is a real OpenAI-compatible server on a loopback port that counts requests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;
use serde_json::{Value, json};

use crate::support::TestServer;

/// What the fake upstream saw.
#[derive(Clone, Default)]
struct Upstream {
    requests: Arc<AtomicUsize>,
    bodies: Arc<Mutex<Vec<Value>>>,
}

/// Answers every chat completion with "Hello." and a usage of 1,000 input and 28 output
/// tokens, streamed like OpenAI.
async fn completions(
    State(upstream): State<Upstream>,
    body: axum::body::Bytes,
) -> impl IntoResponse {
    upstream.requests.fetch_add(1, Ordering::SeqCst);
    upstream
        .bodies
        .lock()
        .unwrap()
        .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
    let chunk = |choices: Value, usage: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
                   "model": "up-model", "choices": choices, "usage": usage})
        )
    };
    let body = [
        chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "content": "Hello."}, "finish_reason": null}]),
            Value::Null,
        ),
        chunk(
            json!([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
            Value::Null,
        ),
        chunk(
            json!([]),
            json!({"prompt_tokens": 1000, "completion_tokens": 28, "total_tokens": 1028}),
        ),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    ([(header::CONTENT_TYPE, "text/event-stream")], body)
}

/// A loopback upstream and a server whose model `up` goes to it, priced at $1 per million
/// input tokens and $2 per million output tokens.
async fn server() -> (TestServer, Upstream) {
    let upstream = Upstream::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(upstream.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let config = format!(
        r#"
[server]

[[server.models]]
name = "up"
provider = "openai-compatible"
model = "up-model"
base_url = "http://{address}/v1"

[server.prices.up-model]
input_per_mtok = 1.0
output_per_mtok = 2.0

[[server.tenants]]
name = "acme"
api_keys = ["key-acme-test-0001"]
"#
    );
    (TestServer::with(&config, Vec::new()).await, upstream)
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> &'a Value {
    events
        .iter()
        .find(|event| event["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} event in {events:#?}"))
}

#[tokio::test]
async fn zero_and_negative_budgets_are_a_400_and_no_model_call() {
    // Seen: `token_budget: 0` and `max_cost_usd: 0` or `-1` still made a model call.
    let (server, upstream) = server().await;
    let cases = [
        (
            json!({"token_budget": 0}),
            "options.token_budget = 0 is invalid",
        ),
        (
            json!({"max_cost_usd": 0}),
            "options.max_cost_usd = 0 is invalid",
        ),
        (
            json!({"max_cost_usd": -1}),
            "options.max_cost_usd = -1 is invalid",
        ),
        (
            json!({"max_tool_calls_per_round": 0}),
            "options.max_tool_calls_per_round = 0 is invalid",
        ),
        (
            json!({"tool_result_max_bytes": 10}),
            "options.tool_result_max_bytes = 10 is invalid",
        ),
    ];
    for (options, expected) in cases {
        let body = json!({"model": "up", "options": options});
        let created = server
            .post("/v1/sessions", "key-acme-test-0001")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 400, "{options}");
        let error: Value = created.json().await.unwrap();
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(expected), "{expected:?} not in {message}");

        // An execute that creates its session from a context is refused the same way.
        let executed = server
            .post("/v1/sessions/sess-budget/execute", "key-acme-test-0001")
            .json(&json!({"message": "hi", "context": body}))
            .send()
            .await
            .unwrap();
        assert_eq!(executed.status(), 400, "{options}");
    }
    assert_eq!(upstream.requests.load(Ordering::SeqCst), 0);
    server.shutdown().await;
}

#[tokio::test]
async fn a_budget_trip_reports_what_was_spent_with_one_number_everywhere() {
    // Seen: the final `execute_complete` of a budget trip had `usage: {}` and no cost, and
    // its message ("used 1083") disagreed with the stored usage (1028).
    let (server, upstream) = server().await;
    let id = server
        .create(json!({"model": "up", "options": {"token_budget": 1000}}))
        .await;
    let events = server.execute(&id, json!({"message": "hi"})).await;

    assert_eq!(upstream.requests.load(Ordering::SeqCst), 1);
    // The call's output limit was clamped to what the budget left after the input estimate.
    let sent = upstream.bodies.lock().unwrap()[0].clone();
    let max_output = sent["max_completion_tokens"].as_u64().unwrap();
    assert!((900..1000).contains(&max_output), "{sent}");

    let complete = of_type(&events, "execute_complete");
    let error_event = of_type(&events, "error");
    let expected_usage = json!({"input_tokens": 1000, "output_tokens": 28});
    let expected_cost = 1000.0 * 1e-6 + 28.0 * 2e-6;
    // execute_complete: status, usage, cost and the error with the same numbers.
    assert_eq!(complete["status"], "error");
    assert_eq!(complete["usage"], expected_usage);
    let close = |value: &Value| (value.as_f64().unwrap() - expected_cost).abs() < 1e-12;
    assert!(close(&complete["cost_usd"]), "{complete}");
    for error in [&complete["error"], &error_event["error"]] {
        assert_eq!(error["kind"], "budget_exceeded");
        assert_eq!(
            error["budget"],
            json!({"limit": "tokens", "used": 1028, "max": 1000})
        );
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("token budget: 1028 of 1000 tokens"),
            "{message}"
        );
        assert_eq!(error["usage"], expected_usage);
        assert!(close(&error["cost_usd"]), "{error}");
    }
    // The stored session says the same.
    let stored: Value = server
        .get(&format!("/v1/sessions/{id}"), "key-acme-test-0001")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stored["usage"], expected_usage);
    assert!(close(&stored["cost_usd"]), "{stored}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_history_over_the_budget_is_never_sent_upstream() {
    // Seen: every later "hi" on a session whose history was 23 MB sent it upstream again.
    // Here a 900 KB history (about 225,000 tokens) against a 100,000-token budget.
    let (server, upstream) = server().await;
    let id = server
        .create(json!({
            "model": "up",
            "options": {"token_budget": 100_000},
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "x".repeat(900_000)}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]}
            ]
        }))
        .await;
    for turn in ["hi", "hi again"] {
        let events = server.execute(&id, json!({"message": turn})).await;
        let complete = of_type(&events, "execute_complete");
        assert_eq!(complete["status"], "error", "{complete}");
        let error = &complete["error"];
        assert_eq!(error["kind"], "budget_exceeded");
        assert_eq!(error["budget"]["limit"], "request_tokens");
        assert_eq!(error["budget"]["max"], 100_000);
        assert!(
            error["budget"]["estimated_input"].as_u64().unwrap() > 200_000,
            "{error}"
        );
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("nothing was sent"),
            "{error}"
        );
        // Nothing was spent, and that is what is reported.
        assert_eq!(complete["usage"], json!({}));
        assert!(complete.get("cost_usd").is_none(), "{complete}");
    }
    assert_eq!(
        upstream.requests.load(Ordering::SeqCst),
        0,
        "a request went upstream"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn the_per_round_caps_are_server_caps_a_session_may_lower() {
    let (server, _upstream) = server().await;
    for (option, cap) in [
        ("max_tool_calls_per_round", 32),
        ("max_round_result_bytes", 262_144),
    ] {
        let over = server
            .post("/v1/sessions", "key-acme-test-0001")
            .json(&json!({"model": "up", "options": {option: cap + 1}}))
            .send()
            .await
            .unwrap();
        assert_eq!(over.status(), 400, "{option}");
        let error: Value = over.json().await.unwrap();
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!(
                "options.{option} = {} is above this server's cap of {cap}",
                cap + 1
            )),
            "{message}"
        );
        let under = server
            .post("/v1/sessions", "key-acme-test-0001")
            .json(&json!({"model": "up", "options": {option: 2}}))
            .send()
            .await
            .unwrap();
        assert_eq!(under.status(), 201, "{option}");
    }
    server.shutdown().await;
}
