//! Every field of a request body is read or refused by name: nothing is accepted and
//! silently ignored. Error texts speak the wire's names (`idle`, not `Idle`).

use serde_json::{Value, json};

use crate::support::TestServer;

const ACME: &str = "key-acme-test-0001";

async fn refused(server: &TestServer, path: &str, body: Value) -> String {
    let response = server.post(path, ACME).json(&body).send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    assert_eq!(status, 400, "{path} {body}: {text}");
    text
}

#[tokio::test]
async fn unknown_fields_in_session_bodies_are_refused_by_their_path() {
    let server = TestServer::start().await;
    // Each of these was answered 201 (or ran) with the field ignored.
    let cases = [
        (
            json!({"model": "demo", "settings": {"temprature": 0.2}}),
            "settings.temprature",
        ),
        (
            json!({"model": "demo", "settings": {"max_tokens": 5}}),
            "settings.max_tokens",
        ),
        (
            json!({"model": "demo", "remote_tools": [{"name": "t", "description": "d",
                   "parameters": {"type": "object"}, "cache": true}]}),
            "remote_tools[0].cache",
        ),
    ];
    for (body, field) in cases {
        let text = refused(&server, "/v1/sessions", body).await;
        assert!(text.contains(&format!("unknown field `{field}`")), "{text}");
    }
    // A top-level misspelling (serde's own refusal names it too).
    let text = refused(
        &server,
        "/v1/sessions",
        json!({"model": "demo", "sytem": "x"}),
    )
    .await;
    assert!(text.contains("sytem"), "{text}");
    // An execute that creates its session: the path runs through `context`.
    let text = refused(
        &server,
        "/v1/sessions/fields-1/execute",
        json!({"message": "hi", "context": {"model": "demo", "settings": {"top_k": 3}}}),
    )
    .await;
    assert!(
        text.contains("unknown field `context.settings.top_k`"),
        "{text}"
    );
    assert!(
        server.state.metrics().value(
            "agentry_runs_total",
            &[("tenant", "acme"), ("status", "completed")]
        ) == 0.0
    );
    // The same fields spelt right are accepted.
    let id = server
        .create(json!({"model": "demo", "settings": {"temperature": 0.2, "max_output_tokens": 64}}))
        .await;
    assert!(!id.is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_fields_inside_chat_completion_tools_and_stream_options_and_a_seed_are_refused() {
    let server = TestServer::start().await;
    let user = json!({"role": "user", "content": "What is 2 + 2?"});
    let tool =
        json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}});
    let cases = [
        (
            json!({"model": "demo", "messages": [user],
                   "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "examples": []}}]}),
            "examples",
        ),
        (
            json!({"model": "demo", "messages": [user], "tools": [tool], "stream": true,
                   "stream_options": {"include_usage": true, "include_obfuscation": true}}),
            "include_obfuscation",
        ),
        (
            json!({"model": "demo", "messages": [user], "seed": 7}),
            "seed",
        ),
    ];
    for (body, field) in cases {
        let text = refused(&server, "/v1/chat/completions", body).await;
        assert!(
            text.contains(&format!("`{field}`"))
                || text.contains(&format!("\"param\":\"{field}\"")),
            "{field}: {text}"
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn a_wrong_input_for_the_session_status_names_the_status_as_the_wire_does() {
    let server = TestServer::start().await;
    let id = server.create(json!({"model": "demo"})).await;
    let results = json!([{"tool_call_id": "nope", "content": [{"type": "text", "text": "4"}]}]);
    let response = server
        .post(&format!("/v1/sessions/{id}/execute"), ACME)
        .json(&json!({"tool_results": results}))
        .send()
        .await
        .unwrap();
    let text = response.text().await.unwrap();
    assert!(text.contains("(status: idle)"), "{text}");
    assert!(!text.contains("Idle"), "{text}");
    server.shutdown().await;
}
