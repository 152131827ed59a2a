//! An embedder's agent served as a server tool (`Agent::as_tool` through
//! `ServerBuilder::with_tool`): its events reach the SSE stream nested as `sub_agent` events
//! with their path, its usage counts in the session's, and its errors are redacted like the
//! run's own.

use std::sync::Arc;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::Agent;
use agent_server::{ServerBuilder, ServerConfig, serve};
use agent_types::{BackendError, BackendErrorKind, ToolCall, Usage};
use serde_json::{Value, json};

use crate::support::{CONFIG, parse_sse};

const ACME: &str = "key-acme-test-0001";

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        ..Usage::default()
    }
}

#[tokio::test]
async fn a_sub_agents_events_stream_nested_and_its_errors_are_redacted() {
    let researcher = Agent::builder(
        ScriptedBackend::new([ScriptedTurn::text("Owls hunt at night.").with_usage(usage(7, 3))]),
        "child",
    )
    .build();
    // A provider error whose message names the upstream URL, as a connection error does.
    let leaky = BackendError::new(
        BackendErrorKind::Connection,
        "error sending request for url (http://10.0.0.1:9/SECRET/v1/chat): refused",
    );
    let broken = Agent::builder(
        ScriptedBackend::new([ScriptedTurn::new().fail_with(leaky)]),
        "child",
    )
    .build();
    let parent = ScriptedBackend::new([
        ScriptedTurn::tool_calls([
            ToolCall::new(
                "call_r",
                "researcher",
                json!({"input": "When do owls hunt?"}),
            ),
            ToolCall::new("call_b", "broken", json!({"input": "anything"})),
        ])
        .with_usage(usage(10, 1)),
        ScriptedTurn::text("Owls hunt at night.").with_usage(usage(20, 2)),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::from_toml(CONFIG).unwrap();
    config.store = agent_server::StoreConfig::Sqlite {
        path: dir.path().join("sessions.db"),
    };
    let state = ServerBuilder::new(config)
        .with_model("chatty", "scripted", Arc::new(parent))
        .with_tool(researcher.as_tool("researcher", "Researches a question."))
        .with_tool(broken.as_tool("broken", "Always fails."))
        .build()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _dir = dir;
        serve(listener, state, std::future::pending())
            .await
            .unwrap();
    });

    let response = reqwest::Client::new()
        .post(format!("{url}/v1/sessions/owls/execute"))
        .bearer_auth(ACME)
        .json(&json!({
            "message": "Owls?",
            "context": {"model": "chatty", "tools": ["researcher", "broken"]}
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    assert!(
        !body.contains("SECRET") && !body.contains("10.0.0.1"),
        "{body}"
    );
    let events = parse_sse(&body);

    let nested = |call: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|event| event["type"] == "sub_agent" && event["call_id"] == call)
            .map(|event| &event["event"])
            .collect()
    };
    let researcher_events = nested("call_r");
    assert!(
        events
            .iter()
            .filter(|event| event["type"] == "sub_agent")
            .all(|event| event["path"]
                == json!([event["call_id"]
                    .as_str()
                    .map(|id| if id == "call_r" {
                        "researcher"
                    } else {
                        "broken"
                    })
                    .unwrap()])),
        "{events:?}"
    );
    assert_eq!(researcher_events[0]["type"], "session_start");
    assert_eq!(researcher_events.last().unwrap()["type"], "session_end");
    let text: String = researcher_events
        .iter()
        .filter(|event| event["type"] == "text_delta")
        .map(|event| event["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Owls hunt at night.");
    // The broken agent's error is in the stream, redacted.
    let broken_events = nested("call_b");
    let error = broken_events
        .iter()
        .find(|event| event["type"] == "error")
        .expect("the sub-agent's error event");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("<url redacted>"),
        "{error}"
    );
    // The parent's own result for it names the failure without the provider's message.
    let end = events
        .iter()
        .find(|event| event["type"] == "tool_execution_end" && event["call_id"] == "call_b")
        .unwrap();
    assert_eq!(end["is_error"], true);
    assert!(
        end["output"]
            .as_str()
            .unwrap()
            .contains("the agent `broken` failed: its model call failed (connection)"),
        "{end}"
    );
    // The session's usage holds the researcher's tokens beside the parent's.
    let complete = events.last().unwrap();
    assert_eq!(complete["type"], "execute_complete");
    assert_eq!(complete["status"], "completed");
    assert_eq!(complete["usage"]["input_tokens"], 10 + 20 + 7);
    assert_eq!(complete["usage"]["output_tokens"], 1 + 2 + 3);
}
