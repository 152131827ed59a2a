//! AG-UI's `state` and `context` on `/v1/ag-ui`: both reach the model with the user turn,
//! the state comes back as `STATE_SNAPSHOT` after `RUN_STARTED` (valid for the Python
//! `ag_ui.core` models), an empty state is not echoed, and a state too large is a typed 400.

use serde_json::{Value, json};

use crate::ag_ui::Recorded;
use crate::attachments::{Server, session};

fn input(thread: &str, state: Value) -> Value {
    json!({"threadId": thread, "runId": "run_1", "state": state, "tools": [],
           "context": [{"description": "The user's city", "value": "Lisbon"}],
           "forwardedProps": {"session": session()},
           "messages": [{"id": "u1", "role": "user", "content": "What is in my cart?"}]})
}

fn events(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter(|frame| !frame.is_empty())
        .map(|frame| serde_json::from_str(frame.strip_prefix("data: ").unwrap()).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_and_context_reach_the_model_and_the_state_is_snapshotted() {
    let server = Server::start().await;
    let state = json!({"cart": [{"sku": "A-1", "qty": 2}], "page": "checkout"});
    let (status, text) = server
        .post("/v1/ag-ui", &input("state_1", state.clone()))
        .await;
    assert_eq!(status, 200, "{text}");
    let sent = events(&text);
    assert_eq!(sent[0]["type"], "RUN_STARTED");
    assert_eq!(sent[1]["type"], "STATE_SNAPSHOT");
    assert_eq!(sent[1]["snapshot"], state);

    let turns = server.user_turns();
    let turn = turns[0]["content"][0]["text"].as_str().unwrap();
    assert_eq!(
        turn,
        "What is in my cart?\n\nContext:\n- The user's city: Lisbon\n\nThe frontend's shared \
         state (JSON):\n{\"cart\":[{\"qty\":2,\"sku\":\"A-1\"}],\"page\":\"checkout\"}"
    );

    // An empty state is neither given to the model nor echoed.
    let (status, empty) = server.post("/v1/ag-ui", &input("state_2", json!({}))).await;
    assert_eq!(status, 200, "{empty}");
    assert!(!empty.contains("STATE_SNAPSHOT"), "{empty}");
    let turns = server.user_turns();
    assert!(
        !turns[1]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("shared state")
    );

    // Too large: a typed 400 before any model call.
    let big = json!({"blob": "x".repeat(64 << 10)});
    let (status, body) = server.post("/v1/ag-ui", &input("state_3", big)).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("state_too_large"), "{body}");
    assert_eq!(server.user_turns().len(), 2);

    Recorded(vec![text, empty]).validate().await;
}
