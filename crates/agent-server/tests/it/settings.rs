//! Generation settings outside the provider's range are a 400 naming the field, on the
//! session endpoints and on `/v1/chat/completions`, before anything is stored or sent.

use serde_json::{Value, json};

use crate::support::TestServer;

/// The demo models of two providers: Anthropic (`claude-sonnet-4-5`: temperature 0–1, 64,000
/// output tokens) and OpenAI (`gpt-4.1-mini`: temperature 0–2, 32,768, four stop sequences).
const CONFIG: &str = r#"
[server]
tools = ["calculator", "clock"]

[[server.models]]
name = "demo"
provider = "replay"
recording = "anthropic"

[[server.models]]
name = "demo-openai"
provider = "replay"
recording = "openai"

[[server.tenants]]
name = "acme"
api_keys = ["key-acme-test-0001"]
"#;

async fn bad_request(response: reqwest::Response) -> Value {
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 400, "{body}");
    body
}

#[tokio::test]
async fn session_settings_out_of_the_providers_range_are_400_naming_the_setting() {
    let server = TestServer::with(CONFIG, Vec::new()).await;
    let cases = [
        (
            "demo",
            json!({"max_output_tokens": 4_294_967_295_u64}),
            "max_output_tokens",
        ),
        ("demo", json!({"max_output_tokens": 0}), "max_output_tokens"),
        ("demo", json!({"temperature": 1.5}), "temperature"),
        ("demo", json!({"top_p": 1.5}), "top_p"),
        ("demo", json!({"stop_sequences": ["  "]}), "stop_sequences"),
        (
            "demo",
            json!({"reasoning": {"budget_tokens": 100}}),
            "reasoning.budget_tokens",
        ),
        ("demo-openai", json!({"temperature": 2.5}), "temperature"),
        (
            "demo-openai",
            json!({"max_output_tokens": 32_769}),
            "max_output_tokens",
        ),
        (
            "demo-openai",
            json!({"stop_sequences": ["a", "b", "c", "d", "e"]}),
            "stop_sequences",
        ),
    ];
    for (model, settings, field) in cases {
        let body = bad_request(
            server
                .post("/v1/sessions", "key-acme-test-0001")
                .json(&json!({"model": model, "settings": settings}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("`{field}`")),
            "{model} {settings}: {message}"
        );
    }
    // The same through an execute that creates its session: nothing is created or run.
    let body = bad_request(
        server
            .post("/v1/sessions/s1/execute", "key-acme-test-0001")
            .json(&json!({"message": "hi", "context": {
                "model": "demo", "settings": {"temperature": 1.2}}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("from 0 to 1"),
        "{body}"
    );
    let missing = server
        .get("/v1/sessions/s1", "key-acme-test-0001")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    // In range: accepted as given.
    server
        .create(
            json!({"model": "demo", "settings": {"temperature": 1.0, "max_output_tokens": 64000}}),
        )
        .await;
    server
        .create(json!({"model": "demo-openai", "settings": {"temperature": 2.0, "stop_sequences": ["a", "b", "c", "d"]}}))
        .await;
    server.shutdown().await;
}

#[tokio::test]
async fn chat_completion_settings_out_of_range_are_400_with_the_requests_own_param() {
    let server = TestServer::with(CONFIG, Vec::new()).await;
    let messages = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (
            "demo",
            json!({"max_tokens": 4_294_967_295_u64}),
            "max_tokens",
        ),
        (
            "demo",
            json!({"max_completion_tokens": 64_001}),
            "max_completion_tokens",
        ),
        ("demo", json!({"temperature": 1.01}), "temperature"),
        ("demo", json!({"top_p": -0.1}), "top_p"),
        ("demo-openai", json!({"temperature": 2.1}), "temperature"),
        (
            "demo-openai",
            json!({"stop": ["1", "2", "3", "4", "5"]}),
            "stop",
        ),
    ];
    for (model, fields, param) in cases {
        let mut body = json!({"model": model, "messages": messages});
        for (key, value) in fields.as_object().unwrap() {
            body[key] = value.clone();
        }
        let error = bad_request(
            server
                .post("/v1/chat/completions", "key-acme-test-0001")
                .json(&body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(error["error"]["param"], param, "{error}");
        assert_eq!(error["error"]["type"], "invalid_request_error");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("`{param}`")), "{message}");
    }
    // Nothing ran.
    assert_eq!(
        server.state.metrics().value(
            "agentry_model_calls_total",
            &[("tenant", "acme"), ("model", "demo")]
        ),
        0.0
    );
    server.shutdown().await;
}
