//! `POST /v1/ui/chat`, the AI SDK's UI message stream, over real HTTP: the frames of a
//! whole run (a snapshot), a client-side tool round trip, approvals, the refusals; and the
//! real `ai` package in Node (`tests/node_client/ui_chat.mjs`).

use std::time::Duration;

use agent_tools::Tool;
use serde_json::{Value, json};

use crate::openai::client_program;
use crate::support::{CONFIG, TestServer};

const USER: &str =
    "What's the weather in Lisbon and in Oslo right now, and how many degrees warmer is Lisbon?";
const KEY: &str = "key-acme-test-0001";

/// `get_weather` as a server tool, with the weather the demo's answer was recorded on.
pub(crate) fn weather_tool() -> Tool {
    Tool::from_json_fn(
        "get_weather",
        "Current weather for a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        |args, _ctx| async move {
            let city = args["city"].as_str().unwrap_or("").to_owned();
            let temp = if city == "Lisbon" { 19 } else { 4 };
            Ok(json!({"city": city, "temp_c": temp}))
        },
    )
}

/// A demo server with `get_weather` on the server; `approve` names the tools `acme` must
/// approve.
pub(crate) async fn server(approve: &[&str]) -> TestServer {
    let config = if approve.is_empty() {
        CONFIG.to_owned()
    } else {
        CONFIG.replace(
            "api_keys = [\"key-acme-test-0001\"]",
            &format!(
                "api_keys = [\"key-acme-test-0001\"]\nrequire_approval = {}",
                json!(approve)
            ),
        )
    };
    TestServer::with(&config, vec![weather_tool()]).await
}

fn user(text: &str) -> Value {
    json!({"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]})
}

/// The response of one chat request: status, headers, and the body's chunks (`[DONE]` as
/// the string "[DONE]").
async fn post(server: &TestServer, body: &Value) -> (u16, reqwest::header::HeaderMap, Vec<Value>) {
    let response = server
        .post("/v1/ui/chat", KEY)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    if status != 200 {
        return (status, headers, vec![serde_json::from_str(&text).unwrap()]);
    }
    let chunks = text
        .split("\n\n")
        .filter(|frame| !frame.is_empty())
        .map(|frame| {
            let data = frame.strip_prefix("data: ").expect("only data lines");
            assert!(!data.contains('\n'), "one line per chunk: {data}");
            if data == "[DONE]" {
                Value::from("[DONE]")
            } else {
                serde_json::from_str(data).unwrap()
            }
        })
        .collect();
    (status, headers, chunks)
}

fn kinds(chunks: &[Value]) -> Vec<&str> {
    chunks
        .iter()
        .map(|chunk| chunk["type"].as_str().unwrap_or("[DONE]"))
        .collect()
}

#[tokio::test]
async fn a_run_with_server_tools_streams_the_ui_message_chunks() {
    let server = server(&[]).await;
    let (status, headers, mut chunks) = post(
        &server,
        &json!({"id": "chat_snapshot", "messages": [user(USER)], "trigger": "submit-message"}),
    )
    .await;
    assert_eq!(status, 200, "{chunks:#?}");
    assert_eq!(headers["content-type"], "text/event-stream");
    assert_eq!(headers["x-vercel-ai-ui-message-stream"], "v1");
    assert_eq!(headers["x-session-id"], "chat_snapshot");
    // The clock's answer is the time of the run.
    for chunk in &mut chunks {
        if chunk["type"] == "tool-output-available" && chunk["output"].get("utc").is_some() {
            chunk["output"] = json!("[clock output]");
        }
    }
    insta::assert_json_snapshot!("ui_stream_server_tools", chunks);
    server.shutdown().await;
}

#[tokio::test]
async fn a_client_side_tool_ends_the_run_and_its_outputs_resume_it() {
    let server = TestServer::start().await;
    let session = json!({"model": "demo", "tools": ["calculator", "clock"], "remote_tools": [
        {"name": "get_weather", "description": "Weather for a city.",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    ]});
    let (status, _, chunks) = post(
        &server,
        &json!({"id": "chat_remote", "messages": [user(USER)], "trigger": "submit-message",
                "session": session}),
    )
    .await;
    assert_eq!(status, 200, "{chunks:#?}");
    let finish = chunks.iter().find(|c| c["type"] == "finish").unwrap();
    assert_eq!(finish["finishReason"], "tool-calls");
    assert_eq!(
        finish["messageMetadata"]["status"],
        "awaiting_tool_execution"
    );
    let calls: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["type"] == "tool-input-available" && c["toolName"] == "get_weather")
        .collect();
    assert_eq!(calls.len(), 2);
    // The clock ran on the server in the same round; the weather calls have no output.
    assert_eq!(
        chunks
            .iter()
            .filter(|c| c["type"] == "tool-output-available")
            .count(),
        1
    );

    // The client sends the assistant message back with its outputs, as addToolOutput does.
    let mut parts = vec![json!({"type": "step-start"})];
    for call in &calls {
        let city = call["input"]["city"].clone();
        parts.push(
            json!({"type": "tool-get_weather", "toolCallId": call["toolCallId"],
            "state": "output-available", "input": call["input"],
            "output": {"city": city, "temp_c": if city == "Lisbon" { 19 } else { 4 }}}),
        );
    }
    let assistant = json!({"id": "a1", "role": "assistant", "parts": parts});
    let (status, _, chunks) = post(
        &server,
        &json!({"id": "chat_remote", "messages": [user(USER), assistant],
                "trigger": "submit-message", "messageId": "a1"}),
    )
    .await;
    assert_eq!(status, 200, "{chunks:#?}");
    let finish = chunks.iter().find(|c| c["type"] == "finish").unwrap();
    assert_eq!(finish["finishReason"], "stop", "{chunks:#?}");
    let text: String = chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .map(|c| c["delta"].as_str().unwrap())
        .collect();
    assert!(text.contains("Lisbon is sunny and 19 °C"), "{text}");
    assert_eq!(kinds(&chunks).last(), Some(&"[DONE]"));

    // The same id in another tenant's namespace is another session.
    let response = server
        .get("/v1/sessions/chat_remote", "key-globex-test-01")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    server.shutdown().await;
}

#[tokio::test]
async fn approvals_become_approval_requests_and_the_responses_resume_the_run() {
    let server = server(&["clock"]).await;
    let (status, _, chunks) = post(
        &server,
        &json!({"id": "chat_approval", "messages": [user(USER)]}),
    )
    .await;
    assert_eq!(status, 200, "{chunks:#?}");
    let requests: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["type"] == "tool-approval-request")
        .collect();
    assert_eq!(requests.len(), 1, "{chunks:#?}");
    let call = requests[0]["toolCallId"].as_str().unwrap();
    assert_eq!(requests[0]["approvalId"], call);
    // Nothing of the round ran.
    assert!(!kinds(&chunks).contains(&"tool-output-available"));

    let assistant = json!({"id": "a1", "role": "assistant", "parts": [
        {"type": "tool-clock", "toolCallId": call, "state": "approval-responded", "input": {},
         "approval": {"id": call, "approved": false, "reason": "no clocks"}}]});
    let (status, _, chunks) = post(
        &server,
        &json!({"id": "chat_approval", "messages": [user(USER), assistant]}),
    )
    .await;
    assert_eq!(status, 200, "{chunks:#?}");
    let denied: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["type"] == "tool-output-denied")
        .collect();
    assert_eq!(denied.len(), 1, "{chunks:#?}");
    assert_eq!(denied[0]["toolCallId"], call);
    assert_eq!(
        chunks
            .iter()
            .filter(|c| c["type"] == "tool-output-available")
            .count(),
        3,
        "both weather calls and the calculator ran: {chunks:#?}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn bad_requests_are_refused_before_any_run() {
    let server = TestServer::start().await;
    let cases = [
        (
            json!({"id": "c1", "messages": [user("hi")], "temperature": 1}),
            "temperature",
        ),
        (json!({"id": "a b", "messages": [user("hi")]}), "`id`"),
        (json!({"id": "c1", "messages": []}), "empty"),
        (
            json!({"id": "c1", "messages": [user("hi")], "trigger": "resume-stream"}),
            "trigger",
        ),
        (json!({"id": "c1", "messages": [user("  ")]}), "empty"),
        (
            json!({"id": "c1", "messages": [{"id": "u", "role": "user",
                   "parts": [{"type": "file", "url": "data:,x", "mediaType": "text/plain"}]}]}),
            "data URL",
        ),
        (
            json!({"id": "c1", "messages": [{"id": "a", "role": "assistant", "parts": []}]}),
            "waits for no tool output",
        ),
        (
            json!({"id": "c1", "messages": [user("hi")], "session": {"model": "nope"}}),
            "nope",
        ),
    ];
    for (body, needle) in cases {
        let (status, _, chunks) = post(&server, &body).await;
        assert_eq!(status, 400, "{body}: {chunks:#?}");
        let message = chunks[0]["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{body}: {message}");
    }
    let response = server
        .post("/v1/ui/chat", "wrong-key-0000000000")
        .json(&json!({"id": "c1", "messages": [user("hi")]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    // Nothing was created by the refused requests.
    let sessions: Value = server
        .get("/v1/sessions", KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(sessions["data"], json!([]), "{sessions}");
    server.shutdown().await;
}

/// `ui_chat.mjs` with the real `ai` package: DefaultChatTransport + readUIMessageStream with
/// server tools, the Chat class with a client-side tool round trip, and with approvals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_sdk_ui_chat_works_unchanged() {
    let Some(node) = client_program("AGENTRY_TEST_NODE", "node.sh") else {
        return;
    };
    let plain = server(&[]).await;
    let approving = server(&["clock", "get_weather"]).await;
    let client_tools = TestServer::start().await;
    let script = format!(
        "{}/tests/node_client/ui_chat.mjs",
        env!("CARGO_MANIFEST_DIR")
    );
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(&node)
            .arg(&script)
            .arg(&plain.url)
            .arg(KEY)
            .arg(&approving.url)
            .arg(&client_tools.url)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the client finishes")
    .expect("node starts");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("all checks passed"), "{stderr}");
    plain.shutdown().await;
    approving.shutdown().await;
    client_tools.shutdown().await;
}

#[tokio::test]
async fn a_chat_id_names_a_session_in_the_callers_tenant_only() {
    let server = TestServer::start().await;
    let session = json!({"model": "demo", "tools": ["calculator", "clock"], "remote_tools": [
        {"name": "get_weather", "description": "Weather for a city.",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    ]});
    let (status, _, chunks) = post(
        &server,
        &json!({"id": "shared", "messages": [user(USER)], "session": session}),
    )
    .await;
    assert_eq!(status, 200, "{chunks:#?}");
    // globex names the same chat: a session of its own, from the server's defaults (no
    // remote tools), not acme's waiting one.
    let response = server
        .post("/v1/ui/chat", "key-globex-test-01")
        .json(&json!({"id": "shared", "messages": [user(USER)]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.contains(r#""status":"completed""#), "{text}");
    let acme: Value = server
        .get("/v1/sessions/shared", KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(acme["status"], "awaiting_tool_execution", "{acme}");
    assert_eq!(acme["pending_tool_calls"].as_array().unwrap().len(), 2);
    server.shutdown().await;
}

#[tokio::test]
async fn regenerate_answers_the_last_user_turn_again() {
    let server = server(&[]).await;
    let body = json!({"id": "chat_regen", "messages": [user(USER)]});
    let (status, _, first) = post(&server, &body).await;
    assert_eq!(status, 200);
    let stored = |server: &TestServer| {
        let request = server.get("/v1/sessions/chat_regen", KEY);
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let before = stored(&server).await;
    let (status, _, again) = post(
        &server,
        &json!({"id": "chat_regen", "messages": [user(USER)], "trigger": "regenerate-message"}),
    )
    .await;
    assert_eq!(status, 200, "{again:#?}");
    // The same three rounds from the same user turn, not a fourth answer appended.
    assert_eq!(kinds(&again), kinds(&first));
    let after = stored(&server).await;
    assert_eq!(
        after["messages"].as_array().unwrap().len(),
        before["messages"].as_array().unwrap().len()
    );
    assert_eq!(after["status"], "completed");
    server.shutdown().await;
}

#[tokio::test]
async fn a_failed_run_ends_with_an_error_chunk_and_an_error_finish() {
    // One tool round allowed; the demo needs two.
    let server = TestServer::with(
        &format!("{CONFIG}\n[server.caps]\nmax_iterations = 1\n"),
        vec![weather_tool()],
    )
    .await;
    let (status, _, chunks) = post(
        &server,
        &json!({"id": "chat_fail", "messages": [user(USER)]}),
    )
    .await;
    assert_eq!(status, 200);
    let kinds = kinds(&chunks);
    assert_eq!(
        kinds.iter().filter(|k| **k == "error").count(),
        1,
        "{chunks:#?}"
    );
    assert_eq!(&kinds[kinds.len() - 2..], ["finish", "[DONE]"]);
    let error = chunks.iter().find(|c| c["type"] == "error").unwrap();
    assert!(
        error["errorText"].as_str().unwrap().contains("iteration"),
        "{error}"
    );
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["finishReason"], "error");
    assert_eq!(finish["messageMetadata"]["status"], "error");
    assert!(
        finish["messageMetadata"]["usage"]["inputTokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_tenant_over_its_stored_bytes_quota_cannot_go_on_with_a_chat() {
    let server = TestServer::with(
        &format!("{CONFIG}\n[server.quotas]\nmax_stored_bytes = 2000\n"),
        vec![weather_tool()],
    )
    .await;
    let (status, _, chunks) = post(
        &server,
        &json!({"id": "chat_big", "messages": [user(USER)]}),
    )
    .await;
    assert_eq!(status, 200, "{chunks:#?}");
    let list: Value = server
        .get("/v1/sessions", KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        list["data"][0]["size_bytes"].as_u64().unwrap() > 2000,
        "{list}"
    );
    // The three rounds' history is over 2,000 bytes: the next turn is refused before a model
    // call, and the session stays as it was.
    let (status, _, chunks) = post(
        &server,
        &json!({"id": "chat_big", "messages": [user(USER), user("And Paris?")]}),
    )
    .await;
    assert_eq!(status, 413, "{chunks:#?}");
    let stored: Value = server
        .get("/v1/sessions/chat_big", KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stored["status"], "completed", "{stored}");
    server.shutdown().await;
}
