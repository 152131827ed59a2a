//! The session endpoints against the recorded demo model.

use serde_json::{Value, json};

use crate::support::TestServer;

fn types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|event| event["type"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_session_runs_its_tools_and_streams_to_execute_complete() {
    let server = TestServer::start().await;
    let id = server
        .create(
            json!({"model": "demo", "tools": ["calculator", "clock"], "remote_tools": [
                {"name": "get_weather", "description": "Weather for a city.",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
            ]}),
        )
        .await;

    // Round 1 asks for get_weather twice (a remote tool) and clock (a server tool).
    let events = server
        .execute(&id, json!({"message": "Weather in Lisbon and Oslo?"}))
        .await;
    let kinds = types(&events);
    assert_eq!(kinds.first(), Some(&"session_start"));
    assert_eq!(kinds.last(), Some(&"execute_complete"));
    let complete = events.last().unwrap();
    assert_eq!(complete["status"], "awaiting_tool_execution", "{events:#?}");
    let pending = complete["pending_tool_calls"].as_array().unwrap();
    assert_eq!(pending.len(), 2);
    assert!(
        kinds.contains(&"tool_execution_end"),
        "the clock ran: {kinds:?}"
    );

    let results: Vec<Value> = pending
        .iter()
        .map(|call| {
            let city = call["arguments"]["city"].as_str().unwrap();
            let temp = if city == "Lisbon" { 19 } else { 4 };
            json!({"tool_call_id": call["id"], "content": json!({"city": city, "temp_c": temp}).to_string()})
        })
        .collect();
    let events = server.execute(&id, json!({"tool_results": results})).await;
    let complete = events.last().unwrap();
    assert_eq!(complete["status"], "completed", "{complete}");
    let text: String = events
        .iter()
        .filter(|event| event["type"] == "text_delta")
        .map(|event| event["delta"].as_str().unwrap())
        .collect();
    assert!(text.ends_with("and for winter in Oslo."), "{text}");
    assert!(
        types(&events).contains(&"tool_execution_end"),
        "the calculator ran on the server"
    );

    let session: Value = server
        .get(&format!("/v1/sessions/{id}"), "key-acme-test-0001")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(session["status"], "completed");
    assert_eq!(
        session["messages"].as_array().unwrap().len(),
        8,
        "{session}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn tenants_see_only_their_own_sessions_and_keys_are_required() {
    let server = TestServer::start().await;
    let id = server.create(json!({"model": "demo"})).await;
    let other = server
        .get(&format!("/v1/sessions/{id}"), "key-globex-test-01")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
    let anonymous = server
        .client
        .get(format!("{}/v1/sessions/{id}", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    assert_eq!(anonymous.headers()["www-authenticate"], "Bearer");
    let body: Value = anonymous.json().await.unwrap();
    assert_eq!(body["error"]["type"], "authentication_error");
    assert_eq!(body["error"]["status"], 401);
    server.shutdown().await;
}
