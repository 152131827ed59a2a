//! `POST /v1/ag-ui` over real HTTP: the events of a run with server tools, a frontend tool
//! that ends the run with its calls pending and resumes it, approvals as interrupts, the
//! refusals; every recorded event validated by the Python `ag_ui.core` models; and the
//! official `@ag-ui/client` HttpAgent in Node (`tests/node_client/ag_ui.mjs`).

use std::time::Duration;

use serde_json::{Value, json};

use crate::openai::client_program;
use crate::support::TestServer;
use crate::ui_stream::server;

const USER: &str =
    "What's the weather in Lisbon and in Oslo right now, and how many degrees warmer is Lisbon?";
const KEY: &str = "key-acme-test-0001";

fn input(thread: &str, run: &str, messages: &Value) -> Value {
    json!({"threadId": thread, "runId": run, "state": {}, "messages": messages, "tools": [],
           "context": [], "forwardedProps": {}})
}

fn user() -> Value {
    json!([{"id": "u1", "role": "user", "content": USER}])
}

/// The raw SSE text and its events.
async fn post(server: &TestServer, body: &Value) -> (u16, String, Vec<Value>) {
    let response = server
        .post("/v1/ag-ui", KEY)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    if status != 200 {
        return (
            status,
            text.clone(),
            vec![serde_json::from_str(&text).unwrap()],
        );
    }
    let events = text
        .split("\n\n")
        .filter(|frame| !frame.is_empty())
        .map(|frame| serde_json::from_str(frame.strip_prefix("data: ").unwrap()).unwrap())
        .collect();
    (status, text, events)
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

/// Recorded streams, validated by the Python models once all are in.
pub(crate) struct Recorded(pub(crate) Vec<String>);

impl Recorded {
    pub(crate) async fn validate(self) {
        let Some(python) = client_program("AGENTRY_TEST_PYTHON", "python.sh") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let mut paths = Vec::new();
        for (n, text) in self.0.iter().enumerate() {
            let path = dir.path().join(format!("stream-{n}.sse"));
            std::fs::write(&path, text).unwrap();
            paths.push(path);
        }
        let script = format!(
            "{}/tests/ag_ui_client/validate_events.py",
            env!("CARGO_MANIFEST_DIR")
        );
        let output = tokio::process::Command::new(python)
            .arg(script)
            .args(&paths)
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        assert!(stderr.contains("all checks passed"), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_of_the_three_kinds_of_run_is_valid_ag_ui() {
    let mut recorded = Recorded(Vec::new());

    // Server tools: three rounds, four tool results, the answer.
    let tools = server(&[]).await;
    let (status, text, events) = post(&tools, &input("thread_1", "run_1", &user())).await;
    assert_eq!(status, 200, "{text}");
    let kinds = types(&events);
    assert_eq!(kinds[0], "RUN_STARTED");
    assert_eq!(*kinds.last().unwrap(), "RUN_FINISHED");
    assert_eq!(kinds.iter().filter(|k| **k == "STEP_STARTED").count(), 3);
    assert_eq!(
        kinds.iter().filter(|k| **k == "TOOL_CALL_RESULT").count(),
        4
    );
    let finished = events.last().unwrap();
    assert_eq!(finished["threadId"], "thread_1");
    assert_eq!(finished["runId"], "run_1");
    assert_eq!(finished["outcome"], json!({"type": "success"}));
    assert_eq!(finished["result"]["status"], "completed");
    assert!(finished["usage"][0]["inputTokens"].as_u64().unwrap() > 0);
    let answer: String = events
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert!(answer.ends_with("and for winter in Oslo."), "{answer}");
    recorded.0.push(text);
    tools.shutdown().await;

    // A frontend tool: the run ends with the calls pending; the tool messages resume it.
    let plain = TestServer::start().await;
    let weather = json!([{"name": "get_weather", "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let mut body = input("thread_2", "run_1", &user());
    body["tools"] = weather.clone();
    let (status, text, events) = post(&plain, &body).await;
    assert_eq!(status, 200, "{text}");
    let finished = events.last().unwrap();
    let pending = finished["outcome"]["pendingToolCallIds"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(pending.len(), 2, "{finished}");
    assert_eq!(finished["result"]["status"], "awaiting_tool_execution");
    recorded.0.push(text);
    let mut messages = user().as_array().unwrap().clone();
    for (n, id) in pending.iter().enumerate() {
        messages.push(
            json!({"id": format!("t{n}"), "role": "tool", "toolCallId": id,
                             "content": "{\"temp_c\": 19}"}),
        );
    }
    let mut body = input("thread_2", "run_2", &Value::from(messages));
    body["tools"] = weather;
    let (status, text, events) = post(&plain, &body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(events.last().unwrap()["result"]["status"], "completed");
    recorded.0.push(text);
    plain.shutdown().await;

    // Approvals: an interrupt per call, `resume` decides.
    let approving = server(&["clock"]).await;
    let (status, text, events) = post(&approving, &input("thread_3", "run_1", &user())).await;
    assert_eq!(status, 200, "{text}");
    let outcome = &events.last().unwrap()["outcome"];
    assert_eq!(outcome["type"], "interrupt", "{outcome}");
    let interrupts = outcome["interrupts"].as_array().unwrap();
    assert_eq!(interrupts.len(), 1);
    assert_eq!(interrupts[0]["id"], interrupts[0]["toolCallId"]);
    recorded.0.push(text);
    let mut body = input("thread_3", "run_2", &user());
    body["resume"] = json!([{"interruptId": interrupts[0]["id"], "status": "cancelled",
                             "payload": {"reason": "no clocks"}}]);
    let (status, text, events) = post(&approving, &body).await;
    assert_eq!(status, 200, "{text}");
    let denied = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == interrupts[0]["id"])
        .unwrap();
    assert!(
        denied["content"].as_str().unwrap().contains("no clocks"),
        "{denied}"
    );
    assert_eq!(events.last().unwrap()["result"]["status"], "completed");
    recorded.0.push(text);
    approving.shutdown().await;

    // A run that fails (one tool round allowed; the demo needs two): RUN_ERROR, last.
    let capped = TestServer::with(
        &format!(
            "{}\n[server.caps]\nmax_iterations = 1\n",
            crate::support::CONFIG
        ),
        vec![crate::ui_stream::weather_tool()],
    )
    .await;
    let (status, text, events) = post(&capped, &input("thread_4", "run_1", &user())).await;
    assert_eq!(status, 200, "{text}");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "RUN_ERROR", "{text}");
    assert!(
        last["message"].as_str().unwrap().contains("iteration"),
        "{last}"
    );
    assert_eq!(
        types(&events)
            .iter()
            .filter(|k| k.starts_with("RUN_"))
            .count(),
        2
    );
    recorded.0.push(text);
    capped.shutdown().await;

    recorded.validate().await;
}

#[tokio::test]
async fn bad_inputs_are_refused_before_any_run() {
    let server = TestServer::start().await;
    let mut unknown = input("t1", "r1", &user());
    unknown["model"] = json!("demo");
    let mut tool_field = input("t1", "r1", &user());
    tool_field["tools"] = json!([{"name": "x", "description": "d", "strict": true}]);
    let mut server_tool = input("t1", "r1", &user());
    server_tool["tools"] = json!([{"name": "clock", "description": "d"}]);
    let mut bad_session = input("t1", "r1", &user());
    bad_session["forwardedProps"] = json!({"session": {"model": "nope"}});
    let cases = [
        (unknown, "`model`"),
        (tool_field, "tools[0].strict"),
        (server_tool, "server tool"),
        (bad_session, "nope"),
        (input("a/b", "r1", &user()), "threadId"),
        (input("t1", "", &user()), "runId"),
        (input("t1", "r1", &json!([])), "user"),
        (
            input(
                "t1",
                "r1",
                &json!([{"id": "a", "role": "assistant", "content": "x"}]),
            ),
            "user",
        ),
    ];
    for (body, needle) in cases {
        let (status, text, _) = post(&server, &body).await;
        assert_eq!(status, 400, "{body}: {text}");
        assert!(text.contains(needle), "{body}: {text}");
    }
    // A thread waiting for frontend results refuses a run without them.
    let mut body = input("t2", "r1", &user());
    body["tools"] = json!([{"name": "get_weather", "description": "d"}]);
    let (status, _, _) = post(&server, &body).await;
    assert_eq!(status, 200);
    let (status, text, _) = post(&server, &body).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("send a `tool` message"), "{text}");
    server.shutdown().await;
}

/// `ag_ui.mjs` with the official `@ag-ui/client` HttpAgent, which verifies the events: server
/// tools, a frontend tool round trip, and an approval as an interrupt answered by `resume`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_ag_ui_http_agent_works_unchanged() {
    let Some(node) = client_program("AGENTRY_TEST_NODE", "node.sh") else {
        return;
    };
    let tools = server(&[]).await;
    let plain = TestServer::start().await;
    let approving = server(&["clock"]).await;
    let script = format!("{}/tests/node_client/ag_ui.mjs", env!("CARGO_MANIFEST_DIR"));
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(&node)
            .arg(&script)
            .arg(&tools.url)
            .arg(KEY)
            .arg(&plain.url)
            .arg(&approving.url)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the client finishes")
    .expect("node starts");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("all checks passed"), "{stderr}");
    tools.shutdown().await;
    plain.shutdown().await;
    approving.shutdown().await;
}

/// A scripted model that thinks before a clock call and before its answer: reasoning in both
/// streams, and the AG-UI events valid for the Python models.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_streams_as_reasoning_in_both_protocols() {
    use agent_backends::{ScriptedBackend, ScriptedTurn};
    use std::sync::Arc;
    let turns = [
        ScriptedTurn::tool_call("call_1", "clock", json!({}))
            .with_thinking("The user wants the time.", Some("sig".into())),
        ScriptedTurn::text("It is noon.").with_thinking("Now answer.", None),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut config = agent_server::ServerConfig::from_toml(crate::support::CONFIG).unwrap();
    config.store = agent_server::StoreConfig::Sqlite {
        path: dir.path().join("sessions.db"),
    };
    let state = agent_server::ServerBuilder::new(config)
        .with_model(
            "thinker",
            "scripted",
            Arc::new(ScriptedBackend::cycle(turns)),
        )
        .build()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(agent_server::serve(listener, state, std::future::pending()));
    let client = reqwest::Client::new();
    let session = json!({"model": "thinker", "tools": ["clock"]});

    let text = client
        .post(format!("{url}/v1/ui/chat"))
        .bearer_auth(KEY)
        .json(&json!({"id": "think_ui", "session": session, "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Time?"}]}]}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let chunks: Vec<Value> = text
        .split("\n\n")
        .filter_map(|frame| frame.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let reasoning: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["type"].as_str().unwrap().starts_with("reasoning-"))
        .collect();
    assert_eq!(reasoning.len(), 6, "{text}");
    assert_eq!(reasoning[1]["delta"], "The user wants the time.");
    assert_eq!(reasoning[0]["id"], reasoning[2]["id"]);
    assert_ne!(reasoning[0]["id"], reasoning[3]["id"]);

    let text = client
        .post(format!("{url}/v1/ag-ui"))
        .bearer_auth(KEY)
        .json(
            &json!({"threadId": "think_ag", "runId": "r1", "forwardedProps": {"session": session},
                      "messages": [{"id": "u1", "role": "user", "content": "Time?"}]}),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|frame| frame.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let kinds: Vec<&str> = types(&events)
        .into_iter()
        .filter(|k| k.starts_with("REASONING"))
        .collect();
    assert_eq!(
        kinds[..5],
        [
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END",
            "REASONING_END"
        ],
        "{text}"
    );
    assert_eq!(kinds.len(), 10);
    Recorded(vec![text]).validate().await;
}
