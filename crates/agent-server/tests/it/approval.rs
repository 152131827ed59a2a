//! Human approval through the sessions API: a tenant's `require_approval` tool suspends the
//! execute with `approval_requested` and `execute_complete` listing the waiting calls; the
//! next execute's `approvals` continues it; decisions that do not fit, or that come from
//! another tenant, are refused and change nothing.

use serde_json::{Value, json};

use crate::support::{CONFIG, TestServer};

/// The demo configuration, with `acme` asking before every `clock` call.
fn config() -> String {
    CONFIG.replace(
        "api_keys = [\"key-acme-test-0001\"]",
        "api_keys = [\"key-acme-test-0001\"]\nrequire_approval = [\"clock\"]",
    )
}

fn weather_session() -> Value {
    json!({"model": "demo", "tools": ["calculator", "clock"], "remote_tools": [
        {"name": "get_weather", "description": "Weather for a city.",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    ]})
}

async fn session_json(server: &TestServer, id: &str) -> Value {
    server
        .get(&format!("/v1/sessions/{id}"), "key-acme-test-0001")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_tenants_tool_waits_for_approval_and_the_next_execute_decides() {
    let server = TestServer::with(&config(), Vec::new()).await;
    let id = server.create(weather_session()).await;

    // Round 1 asks for get_weather twice (remote) and clock (needs approval): nothing runs.
    let events = server
        .execute(&id, json!({"message": "Weather in Lisbon and Oslo?"}))
        .await;
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert!(!kinds.contains(&"tool_execution_start"), "{kinds:?}");
    let requested = events
        .iter()
        .find(|event| event["type"] == "approval_requested")
        .expect("an approval_requested event");
    assert_eq!(requested["tool_calls"][0]["name"], "clock");
    let complete = events.last().unwrap();
    assert_eq!(complete["type"], "execute_complete");
    assert_eq!(complete["status"], "awaiting_approval", "{complete}");
    assert_eq!(complete["pending_approvals"], requested["tool_calls"]);
    assert!(complete.get("pending_tool_calls").is_none(), "{complete}");
    let call_id = complete["pending_approvals"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = session_json(&server, &id).await;
    assert_eq!(before["status"], "awaiting_approval");
    assert_eq!(before["pending_approvals"], complete["pending_approvals"]);

    // Wrong, missing and duplicate decisions, or other input: 400, nothing changes.
    for bad in [
        json!({"approvals": [{"call_id": "call_nope", "approved": true}]}),
        json!({"approvals": []}),
        json!({"approvals": [{"call_id": call_id, "approved": true},
                             {"call_id": call_id, "approved": false}]}),
        json!({"approvals": [{"call_id": call_id, "approve": true}]}),
        json!({"approvals": [{"call_id": call_id, "approved": true, "arguments": {"tz": "UTC+14"}}]}),
        json!({"message": "never mind"}),
        json!({"approvals": [{"call_id": call_id, "approved": true}], "message": "and"}),
    ] {
        let response = server
            .post(&format!("/v1/sessions/{id}/execute"), "key-acme-test-0001")
            .json(&bad)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{bad}");
        assert_eq!(session_json(&server, &id).await, before, "{bad} changed it");
    }
    // Another tenant cannot decide acme's calls: its lookup finds no such session.
    let response = server
        .post(&format!("/v1/sessions/{id}/execute"), "key-globex-test-01")
        .json(&json!({"approvals": [{"call_id": call_id, "approved": true}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert!(response.text().await.unwrap().contains("no session"));
    assert_eq!(session_json(&server, &id).await, before);

    // Approved: the clock runs, then the remote calls wait as usual.
    let events = server
        .execute(
            &id,
            json!({"approvals": [{"call_id": call_id, "approved": true}]}),
        )
        .await;
    let ran: Vec<&str> = events
        .iter()
        .filter(|event| event["type"] == "tool_execution_end")
        .map(|event| event["tool_name"].as_str().unwrap())
        .collect();
    assert_eq!(ran, ["clock"]);
    let complete = events.last().unwrap();
    assert_eq!(complete["status"], "awaiting_tool_execution", "{complete}");
    let results: Vec<Value> = complete["pending_tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| json!({"tool_call_id": call["id"], "content": "{\"temp_c\": 19}"}))
        .collect();
    let events = server.execute(&id, json!({"tool_results": results})).await;
    assert_eq!(events.last().unwrap()["status"], "completed");
    server.shutdown().await;
}

#[tokio::test]
async fn a_denied_call_reaches_the_model_as_an_error_with_the_reason() {
    let server = TestServer::with(&config(), Vec::new()).await;
    let id = server.create(weather_session()).await;
    let events = server
        .execute(&id, json!({"message": "Weather in Lisbon and Oslo?"}))
        .await;
    let call_id = events.last().unwrap()["pending_approvals"][0]["id"].clone();
    let events = server
        .execute(
            &id,
            json!({"approvals": [{"call_id": call_id, "approved": false, "reason": "no clocks today"}]}),
        )
        .await;
    assert_eq!(events.last().unwrap()["status"], "awaiting_tool_execution");
    let denied = events
        .iter()
        .find(|event| event["type"] == "message_end" && event["message"]["role"] == "tool")
        .expect("the denial's tool message");
    assert_eq!(denied["message"]["is_error"], true, "{denied}");
    assert_eq!(
        denied["message"]["content"],
        "This call was not run: the user denied it: no clocks today"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn require_approval_must_name_tools_the_server_offers() {
    let config = CONFIG.replace(
        "api_keys = [\"key-acme-test-0001\"]",
        "api_keys = [\"key-acme-test-0001\"]\nrequire_approval = [\"shell\"]",
    );
    let config = agent_server::ServerConfig::from_toml(&config).unwrap();
    let error = agent_server::ServerBuilder::new(config)
        .build()
        .await
        .err()
        .expect("refused");
    assert!(error.to_string().contains("shell"), "{error}");
}

/// A chat completion cannot wait for a person: the clock call that needs approval is denied
/// (an error result the model reads), never run, and the client's own calls come back as
/// usual.
#[tokio::test]
async fn a_chat_completion_denies_a_call_that_needs_approval() {
    let server = TestServer::with(&config(), Vec::new()).await;
    let weather = json!({"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    }});
    let response = server
        .post("/v1/chat/completions", "key-acme-test-0001")
        .json(&json!({"model": "demo", "tools": [weather], "messages": [
            {"role": "user", "content": "Weather in Lisbon and Oslo?"}
        ]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls", "{body}");
    let metrics = server.state.metrics();
    let clock = |outcome| {
        metrics.value(
            "agentry_tool_calls_total",
            &[("tenant", "acme"), ("tool", "clock"), ("outcome", outcome)],
        )
    };
    assert_eq!(clock("ok"), 0.0, "the clock must not run");
    assert_eq!(clock("error"), 1.0, "the clock call got its denial");
    server.shutdown().await;
}
