//! `GET /v1/ui/chat/{id}/stream`, the AI SDK's resume-stream, over real HTTP: a client that
//! hangs up mid-run comes back and gets the run's stream replayed from its start, then live
//! to `[DONE]`; the run went on without it; 204 when no run is going; and the real `ai`
//! package's `Chat.resumeStream()` (`tests/node_client/ui_resume.mjs`).

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::openai::client_program;
use crate::support::{CONFIG, TestServer};

const USER: &str =
    "What's the weather in Lisbon and in Oslo right now, and how many degrees warmer is Lisbon?";
const KEY: &str = "key-acme-test-0001";

/// The demo server whose replayed model pauses before each streamed event, so a run lasts
/// a second or two; `get_weather` is a server tool.
async fn slow_server() -> TestServer {
    let config = CONFIG.replace(
        "recording = \"anthropic\"",
        "recording = \"anthropic\"\nevent_delay_ms = 15",
    );
    TestServer::with(&config, vec![crate::ui_stream::weather_tool()]).await
}

fn user(text: &str) -> Value {
    json!({"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]})
}

fn chunks(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter(|frame| !frame.is_empty())
        .map(|frame| {
            let data = frame.strip_prefix("data: ").expect("only data lines");
            if data == "[DONE]" {
                Value::from("[DONE]")
            } else {
                serde_json::from_str(data).unwrap()
            }
        })
        .collect()
}

async fn status_of(server: &TestServer, id: &str) -> Value {
    let response = server
        .get(&format!("/v1/sessions/{id}"), KEY)
        .send()
        .await
        .unwrap();
    let session: Value = response.json().await.unwrap();
    session["status"].clone()
}

#[tokio::test]
async fn a_client_that_hung_up_resumes_the_runs_stream_from_its_start() {
    let server = slow_server().await;
    // Nothing runs yet: nothing to resume.
    let idle = server
        .get("/v1/ui/chat/chat_resume/stream", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(idle.status(), 204);

    let response = server
        .post("/v1/ui/chat", KEY)
        .json(&json!({"id": "chat_resume", "messages": [user(USER)]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // Read the first frames, then hang up (a page reload).
    let mut body = response.bytes_stream();
    let first = body.next().await.unwrap().unwrap();
    assert!(
        first.starts_with(b"data: {\"type\":\"start\"}"),
        "{first:?}"
    );
    drop(body);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(status_of(&server, "chat_resume").await, "running");

    // Another tenant's chat of the same id is not this one.
    let other = server
        .get("/v1/ui/chat/chat_resume/stream", "key-globex-test-01")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 204);

    let resumed = server
        .get("/v1/ui/chat/chat_resume/stream", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 200);
    assert_eq!(resumed.headers()["x-vercel-ai-ui-message-stream"], "v1");
    assert_eq!(resumed.headers()["content-type"], "text/event-stream");
    let replayed = chunks(&resumed.text().await.unwrap());
    // The whole run, from its `start`: the run went on while no client was there.
    assert_eq!(replayed[0]["type"], "start");
    assert_eq!(
        replayed
            .iter()
            .filter(|c| c["type"] == "start-step")
            .count(),
        3
    );
    let finish = &replayed[replayed.len() - 2];
    assert_eq!(finish["type"], "finish", "{replayed:#?}");
    assert_eq!(finish["messageMetadata"]["status"], "completed");
    assert_eq!(replayed[replayed.len() - 1], "[DONE]");
    let text: String = replayed
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .filter_map(|c| c["delta"].as_str())
        .collect();
    assert!(text.contains("Lisbon is sunny and 19 °C"), "{text}");
    assert_eq!(status_of(&server, "chat_resume").await, "completed");

    // The run is over: nothing to resume.
    let after = server
        .get("/v1/ui/chat/chat_resume/stream", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), 204);
    server.shutdown().await;
}

#[tokio::test]
async fn two_clients_see_the_same_stream_and_bad_ids_are_refused() {
    let server = slow_server().await;
    let response = server
        .post("/v1/ui/chat", KEY)
        .json(&json!({"id": "chat_twice", "messages": [user(USER)]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let resumed = server
        .get("/v1/ui/chat/chat_twice/stream", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 200);
    let (original, replayed) = tokio::join!(response.text(), resumed.text());
    assert_eq!(original.unwrap(), replayed.unwrap());

    let bad = server
        .get("/v1/ui/chat/a%20b/stream", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let unauthenticated = server
        .client
        .get(format!("{}/v1/ui/chat/chat_twice/stream", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);
    server.shutdown().await;
}

/// `ui_resume.mjs` with the real `ai` package: a `Chat` stopped mid-run (its fetch
/// aborted), then a new `Chat` of the same id calling `resumeStream()` gets the whole answer;
/// once the run is over `resumeStream()` finds nothing (204).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_sdk_chat_resumes_a_stream_it_lost() {
    let Some(node) = client_program("AGENTRY_TEST_NODE", "node.sh") else {
        return;
    };
    let server = slow_server().await;
    let script = format!(
        "{}/tests/node_client/ui_resume.mjs",
        env!("CARGO_MANIFEST_DIR")
    );
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(&node)
            .arg(&script)
            .arg(&server.url)
            .arg(KEY)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the client finishes")
    .expect("node starts");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("all checks passed"), "{stderr}");
    server.shutdown().await;
}

/// Only the UI stream outlives its client: an AG-UI run whose client hangs up stops
/// (`aborted`), as an execute does.
#[tokio::test]
async fn an_ag_ui_run_still_stops_when_its_client_hangs_up() {
    let server = slow_server().await;
    let response = server
        .post("/v1/ag-ui", KEY)
        .json(
            &json!({"threadId": "agui_hangup", "runId": "r1", "tools": [], "context": [],
                      "messages": [{"id": "u1", "role": "user", "content": USER}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    body.next().await.unwrap().unwrap();
    drop(body);
    let mut status = Value::Null;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        status = status_of(&server, "agui_hangup").await;
        if status != "running" {
            break;
        }
    }
    assert_eq!(status, "aborted");
    server.shutdown().await;
}
