//! `POST /v1/responses` against the recorded demo model (round 1 asks for `get_weather`
//! twice and `clock`, round 2 for `calculator`, round 3 answers); `get_weather` is the
//! client's tool, the clock and the calculator run on the server.

use serde_json::{Value, json};

use crate::openai::client_program;
use crate::support::{CONFIG, TestServer};

const ACME: &str = "key-acme-test-0001";
const GLOBEX: &str = "key-globex-test-01";
const SYSTEM: &str = "You are a concise travel assistant. Use the tools for facts; never guess.";
const USER: &str =
    "What's the weather in Lisbon and in Oslo right now, and how many degrees warmer is Lisbon?";
const ROUND_1_TEXT: &str = "I'll look up both cities and the time.";
const ANSWER_START: &str = "Lisbon is sunny and 19 °C";
const ANSWER_END: &str = "and for winter in Oslo.";

fn weather_tool() -> Value {
    json!({"type": "function", "name": "get_weather",
           "description": "Current weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}})
}

async fn create(server: &TestServer, key: &str, body: Value) -> (u16, Value) {
    let response = server
        .post("/v1/responses", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// One weather result per `function_call` item of `response`.
fn weather_outputs(response: &Value) -> Vec<Value> {
    response["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "function_call")
        .map(|call| {
            let arguments: Value =
                serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
            let city = arguments["city"].as_str().unwrap();
            let temp = if city == "Lisbon" { 19 } else { 4 };
            json!({"type": "function_call_output", "call_id": call["call_id"],
                   "output": json!({"city": city, "temp_c": temp}).to_string()})
        })
        .collect()
}

/// Ids and times replaced by stable names, for snapshots.
fn redact(mut value: Value) -> Value {
    fn walk(value: &mut Value) {
        match value {
            Value::Object(object) => {
                for (key, value) in object.iter_mut() {
                    match key.as_str() {
                        "id" | "item_id" | "call_id" | "previous_response_id"
                            if value.is_string() =>
                        {
                            let text = value.as_str().unwrap_or_default();
                            let prefix = text.split('_').next().unwrap_or_default();
                            *value = json!(format!("{prefix}_[redacted]"));
                        }
                        "created_at" => *value = json!("[time]"),
                        _ => walk(value),
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut value);
    value
}

#[tokio::test]
async fn a_client_tool_comes_back_as_function_calls_and_previous_response_id_continues() {
    let server = TestServer::start().await;
    let (status, first) = create(
        &server,
        ACME,
        json!({"model": "demo", "instructions": SYSTEM, "input": USER,
               "tools": [weather_tool()], "temperature": 0.2, "max_output_tokens": 512,
               "metadata": {"trace": "t-1"}, "user": "u-1"}),
    )
    .await;
    assert_eq!(status, 200, "{first:#}");
    assert_eq!(first["object"], "response");
    assert_eq!(first["status"], "completed");
    let id = first["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("resp_") && id.len() == 37, "{id}");
    assert_eq!(first["output"][0]["type"], "message");
    assert_eq!(first["output"][0]["content"][0]["text"], ROUND_1_TEXT);
    let outputs = weather_outputs(&first);
    assert_eq!(
        outputs.len(),
        2,
        "the clock ran on the server and is not shown: {first:#}"
    );
    assert_eq!(first["usage"]["input_tokens"], 386);
    assert_eq!(first["usage"]["output_tokens"], 74);
    assert_eq!(first["usage"]["total_tokens"], 460);
    assert_eq!(first["metadata"]["trace"], "t-1");
    insta::assert_json_snapshot!("non_streamed_function_calls", redact(first.clone()));

    // The stored response is there for its tenant only.
    let got: Value = server
        .get(&format!("/v1/responses/{id}"), ACME)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got["output"], first["output"], "{got:#}");
    assert_eq!(got["usage"], first["usage"]);
    let other = server
        .get(&format!("/v1/responses/{id}"), GLOBEX)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
    let (status, refused) = create(
        &server,
        GLOBEX,
        json!({"model": "demo", "previous_response_id": id, "input": outputs}),
    )
    .await;
    assert_eq!(status, 404, "{refused:#}");
    assert_eq!(refused["error"]["param"], "previous_response_id");

    // The follow-up sends only the outputs: the history (with the server's clock round) is
    // the stored response's.
    let (status, second) = create(
        &server,
        ACME,
        json!({"model": "demo", "previous_response_id": id, "input": outputs,
               "tools": [weather_tool()]}),
    )
    .await;
    assert_eq!(status, 200, "{second:#}");
    assert_eq!(second["previous_response_id"], id.as_str());
    let text = second["output"][0]["content"][0]["text"].as_str().unwrap();
    assert!(text.ends_with(ANSWER_END), "{text}");
    assert!(text.contains(ANSWER_START), "{text}");
    assert_eq!(second["output"].as_array().unwrap().len(), 1);
    assert_eq!(second["usage"]["input_tokens"], 545 + 603);
    // Read back without its tools declared again: the output starts after the outputs sent.
    let (status, bare) = create(
        &server,
        ACME,
        json!({"model": "demo", "previous_response_id": id, "input": weather_outputs(&first)}),
    )
    .await;
    assert_eq!(status, 200, "{bare:#}");
    let got: Value = server
        .get(
            &format!("/v1/responses/{}", bare["id"].as_str().unwrap()),
            ACME,
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got["output"], bare["output"], "{got:#}");
    assert_eq!(got["usage"], bare["usage"]);

    // The first response can be continued again (a branch), and outputs that answer no
    // call are refused naming the field.
    let (status, again) = create(
        &server,
        ACME,
        json!({"model": "demo", "previous_response_id": id, "input": "hello"}),
    )
    .await;
    assert_eq!(status, 400, "{again:#}");
    assert_eq!(again["error"]["param"], "input");
    server.shutdown().await;
}

/// The `event:` names and parsed `data:` of a streamed response.
async fn stream(server: &TestServer, body: Value) -> Vec<(String, Value)> {
    let response = server
        .post("/v1/responses", ACME)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.unwrap();
    let mut events = Vec::new();
    for frame in text.split("\n\n").filter(|frame| !frame.is_empty()) {
        if frame.starts_with(':') {
            continue;
        }
        let (head, data) = frame.split_once('\n').expect("event and data lines");
        let kind = head
            .strip_prefix("event: ")
            .expect("an event line")
            .to_owned();
        let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(data["type"], kind.as_str());
        events.push((kind, data));
    }
    events
}

#[tokio::test]
async fn a_stream_has_typed_numbered_events_ending_with_completed() {
    let server = TestServer::start().await;
    let events = stream(
        &server,
        json!({"model": "demo", "instructions": SYSTEM, "input": USER, "stream": true,
               "tools": [weather_tool()]}),
    )
    .await;
    for (at, (_, data)) in events.iter().enumerate() {
        assert_eq!(data["sequence_number"], at, "{data}");
    }
    let kinds: Vec<&str> = events.iter().map(|(kind, _)| kind.as_str()).collect();
    assert_eq!(kinds[..2], ["response.created", "response.in_progress"]);
    assert_eq!(kinds.last(), Some(&"response.completed"));
    let text: String = events
        .iter()
        .filter(|(kind, _)| kind == "response.output_text.delta")
        .map(|(_, data)| data["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, ROUND_1_TEXT);
    let done = &events.last().unwrap().1["response"];
    assert_eq!(done["output"][0]["content"][0]["text"], ROUND_1_TEXT);
    assert_eq!(weather_outputs(done).len(), 2);
    // Coalesce the text deltas so the snapshot does not depend on how the recording chunks.
    let mut shown: Vec<Value> = Vec::new();
    for (kind, data) in &events {
        if kind == "response.output_text.delta"
            && shown
                .last()
                .is_some_and(|last| last["type"] == "response.output_text.delta")
        {
            continue;
        }
        let mut data = data.clone();
        if kind == "response.output_text.delta" {
            data["delta"] = json!(text);
            data["sequence_number"] = json!("[coalesced]");
        }
        shown.push(data);
    }
    insta::assert_json_snapshot!("streamed_function_calls", redact(Value::Array(shown)));

    // The follow-up, streamed: the server's calculator round and the answer.
    let id = done["id"].as_str().unwrap();
    let events = stream(
        &server,
        json!({"model": "demo", "previous_response_id": id, "input": weather_outputs(done),
               "stream": true, "tools": [weather_tool()]}),
    )
    .await;
    let (kind, last) = events.last().unwrap();
    assert_eq!(kind, "response.completed");
    let text = last["response"]["output"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.ends_with(ANSWER_END), "{text}");
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_fields_and_items_are_refused_naming_them() {
    let server = TestServer::start().await;
    for (body, param) in [
        (
            json!({"model": "demo", "input": "hi", "frobnicate": 1}),
            "frobnicate",
        ),
        (
            json!({"model": "demo", "input": "hi", "background": true}),
            "background",
        ),
        (
            json!({"model": "demo", "input": "hi", "tools": [{"type": "web_search"}]}),
            "tools[0].type",
        ),
        (
            json!({"model": "demo", "input": [{"type": "computer_call"}]}),
            "input[0].type",
        ),
        (
            json!({"model": "demo", "input": "hi", "text": {"format": {"type": "json_schema"}}}),
            "text.format.name",
        ),
        (
            json!({"model": "demo", "input": "hi", "previous_response_id": "resp_nope"}),
            "previous_response_id",
        ),
        (
            json!({"model": "demo", "input": [{"type": "item_reference", "id": "msg_00000000000000000000000000000000_1"}]}),
            "input[0].id",
        ),
    ] {
        let (status, error) = create(&server, ACME, body.clone()).await;
        assert!(status == 400 || status == 404, "{body}: {status} {error}");
        assert_eq!(error["error"]["param"], param, "{body}: {error}");
    }
    let (status, error) = create(&server, ACME, json!({"model": "gpt-9", "input": "hi"})).await;
    assert_eq!(status, 404);
    assert_eq!(error["error"]["code"], "model_not_found");
    // Their "off" values ask for nothing.
    let (status, body) = create(
        &server,
        ACME,
        json!({"model": "demo", "input": "hi", "background": false, "truncation": "disabled",
               "include": [], "store": false, "service_tier": "auto"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["store"], false);
    // Not stored: nothing to continue from.
    let (status, _) = create(
        &server,
        ACME,
        json!({"model": "demo", "input": "hi", "previous_response_id": body["id"]}),
    )
    .await;
    assert_eq!(status, 404);
    server.shutdown().await;
}

#[tokio::test]
async fn an_item_reference_stands_for_the_stored_message() {
    let server = TestServer::start().await;
    let (_, first) = create(
        &server,
        ACME,
        json!({"model": "demo", "instructions": SYSTEM, "input": USER, "tools": [weather_tool()]}),
    )
    .await;
    // What the AI SDK sends by default: the whole history, the assistant text by reference.
    let mut input =
        vec![json!({"role": "user", "content": [{"type": "input_text", "text": USER}]})];
    input.push(json!({"type": "item_reference", "id": first["output"][0]["id"]}));
    for item in first["output"].as_array().unwrap().iter().skip(1) {
        input.push(json!({"type": "function_call", "call_id": item["call_id"],
                          "name": item["name"], "arguments": item["arguments"], "id": item["id"]}));
    }
    input.extend(weather_outputs(&first));
    let (status, second) = create(
        &server,
        ACME,
        json!({"model": "demo", "instructions": SYSTEM, "input": input, "tools": [weather_tool()]}),
    )
    .await;
    assert_eq!(status, 200, "{second:#}");
    let text = second["output"][0]["content"][0]["text"].as_str().unwrap();
    assert!(text.ends_with(ANSWER_END), "{text}");
    // Another tenant's item is as absent as one that never existed.
    let (status, error) = create(
        &server,
        GLOBEX,
        json!({"model": "demo", "input": [
            {"role": "user", "content": "hi"},
            {"type": "item_reference", "id": first["output"][0]["id"]},
            {"role": "user", "content": "again"}]}),
    )
    .await;
    assert_eq!(status, 404, "{error}");
    // Each referenced response is a read of its session: at most 64 per request.
    let mut input: Vec<Value> = (0..65)
        .map(|n| json!({"type": "item_reference", "id": format!("msg_{n:032x}_1")}))
        .collect();
    input.push(json!({"role": "user", "content": "hi"}));
    let (status, error) = create(&server, ACME, json!({"model": "demo", "input": input})).await;
    assert_eq!(status, 400, "refused before any is read: {error}");
    assert_eq!(error["error"]["param"], "input");
    server.shutdown().await;
}

#[tokio::test]
async fn an_idempotency_key_replays_the_stored_answer() {
    let server = TestServer::start().await;
    let body = json!({"model": "demo", "instructions": SYSTEM, "input": USER,
                      "tools": [weather_tool()]});
    let mut answers = Vec::new();
    for _ in 0..2 {
        let response = server
            .post("/v1/responses", ACME)
            .header("Idempotency-Key", "resp-key-1")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let replayed = response.headers().get("idempotent-replayed").is_some();
        answers.push((replayed, response.json::<Value>().await.unwrap()));
    }
    assert!(!answers[0].0 && answers[1].0);
    assert_eq!(answers[0].1["id"], answers[1].1["id"]);
    let response = server
        .post("/v1/responses", ACME)
        .header("Idempotency-Key", "resp-key-1")
        .json(&json!({"model": "demo", "input": "other"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 422);
    let error: Value = response.json().await.unwrap();
    assert!(
        error["error"]["message"].is_string(),
        "OpenAI-shaped: {error}"
    );
    server.shutdown().await;
}

/// A server whose runs trip their budget: one tool round allowed, the demo needs two.
async fn capped_server() -> TestServer {
    TestServer::with(
        &format!("{CONFIG}\n[server.caps]\nmax_iterations = 1\n"),
        Vec::new(),
    )
    .await
}

/// Requests that reached `/v1/responses` on `server`, whatever their status.
fn responses_requests(server: &TestServer) -> f64 {
    server
        .state
        .metrics()
        .render()
        .lines()
        .filter(|line| {
            line.starts_with("agentry_http_requests_total{")
                && line.contains("route=\"/v1/responses\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Runs a real client's check script against a demo server (and a budget-capped one).
async fn run_client(program: std::ffi::OsString, script: &str) {
    let server = TestServer::start().await;
    let capped = capped_server().await;
    let script = format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR"));
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(180),
        tokio::process::Command::new(&program)
            .arg(&script)
            .arg(&server.url)
            .arg(ACME)
            .arg(&capped.url)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the client finishes")
    .expect("the client's interpreter starts");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{script} failed:\n{stderr}\n{stdout}"
    );
    assert!(stderr.contains("all checks passed"), "{stderr}");
    #[allow(clippy::print_stderr)]
    {
        eprintln!("{stderr}");
    }
    assert_eq!(
        responses_requests(&capped),
        1.0,
        "{script}: the budget trip reached the server once (no retry)"
    );
    capped.shutdown().await;
    server.shutdown().await;
}

/// The AI SDK's default `openai(model)` provider (the Responses API), from npm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_sdk_openai_provider_works_unchanged() {
    if let Some(node) = client_program("AGENTRY_TEST_NODE", "node.sh") {
        run_client(node, "node_client/ai_sdk_responses.mjs").await;
    }
}

/// The official `openai` Python client's `client.responses`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_client_responses_work_unchanged() {
    if let Some(python) = client_program("AGENTRY_TEST_PYTHON", "python.sh") {
        run_client(python, "openai_client/test_responses.py").await;
    }
}

/// The OpenAI Agents SDK (`openai-agents`), whose default model uses the Responses API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_agents_sdk_works_unchanged() {
    if let Some(python) = client_program("AGENTRY_TEST_PYTHON", "python.sh") {
        run_client(python, "openai_client/test_agents.py").await;
    }
}

fn city_format() -> Value {
    json!({"format": {"type": "json_schema", "name": "city", "strict": true,
        "schema": {"type": "object",
                   "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
                   "required": ["name", "population"], "additionalProperties": false}}})
}

#[tokio::test]
async fn text_format_json_schema_answers_with_the_validated_json() {
    let (server, upstream) = crate::structured::server(vec![
        json!({"content": "{\"name\":\"Lisbon\",\"population\":545923}"}),
    ])
    .await;
    let (status, body) = create(
        &server,
        ACME,
        json!({"model": "up", "input": "Biggest city of Portugal?", "text": city_format()}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let text = body["output"][0]["content"][0]["text"].as_str().unwrap();
    let answer: Value = serde_json::from_str(text).unwrap();
    assert_eq!(answer, json!({"name": "Lisbon", "population": 545_923}));
    assert_eq!(body["text"]["format"]["name"], "city");
    // The provider takes schemas natively: the schema went upstream under its name.
    let sent = upstream.bodies();
    assert_eq!(
        sent[0]["response_format"]["json_schema"]["name"], "city",
        "{}",
        sent[0]
    );

    // Streamed: the validated JSON is the text.
    let events = stream(
        &server,
        json!({"model": "up", "input": "Biggest city of Portugal?", "text": city_format(),
               "stream": true}),
    )
    .await;
    let text: String = events
        .iter()
        .filter(|(kind, _)| kind == "response.output_text.delta")
        .map(|(_, data)| data["delta"].as_str().unwrap())
        .collect();
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["name"], "Lisbon");
    server.shutdown().await;
}

#[tokio::test]
async fn reasoning_comes_as_a_reasoning_item_before_the_message() {
    let (server, _upstream) = crate::structured::server(vec![
        json!({"reasoning_content": "Portugal's largest city is Lisbon.", "content": "Lisbon."}),
    ])
    .await;
    let (status, body) = create(
        &server,
        ACME,
        json!({"model": "up", "input": "Biggest city of Portugal?",
               "reasoning": {"effort": "low", "summary": "auto"}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["output"][0]["type"], "reasoning", "{body:#}");
    assert_eq!(
        body["output"][0]["summary"][0]["text"],
        "Portugal's largest city is Lisbon."
    );
    assert_eq!(body["output"][1]["content"][0]["text"], "Lisbon.");
    let events = stream(
        &server,
        json!({"model": "up", "input": "Biggest city of Portugal?", "stream": true}),
    )
    .await;
    let kinds: Vec<&str> = events.iter().map(|(kind, _)| kind.as_str()).collect();
    let reasoning = kinds
        .iter()
        .position(|kind| *kind == "response.reasoning_summary_text.delta")
        .expect("reasoning deltas");
    let text = kinds
        .iter()
        .position(|kind| *kind == "response.output_text.delta")
        .expect("text deltas");
    assert!(reasoning < text, "{kinds:?}");
    let done = &events.last().unwrap().1["response"];
    assert_eq!(done["output"][0]["type"], "reasoning");
    server.shutdown().await;
}

#[tokio::test]
async fn a_run_that_fails_mid_stream_ends_with_response_failed() {
    let capped = capped_server().await;
    let events = stream(
        &capped,
        json!({"model": "demo", "instructions": SYSTEM, "input": USER, "stream": true}),
    )
    .await;
    let (kind, last) = events.last().unwrap();
    assert_eq!(kind, "response.failed", "{events:#?}");
    assert_eq!(last["response"]["status"], "failed");
    assert_eq!(last["response"]["error"]["code"], "budget_exceeded");
    assert!(
        events
            .iter()
            .any(|(kind, _)| kind == "response.output_text.delta"),
        "the text before the trip went out"
    );
    // Not streamed: the OpenAI-shaped 402, with what was spent.
    let (status, body) = create(
        &capped,
        ACME,
        json!({"model": "demo", "instructions": SYSTEM, "input": USER}),
    )
    .await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["error"]["code"], "budget_exceeded");
    // Its id was never seen, so nothing of it is kept; the streamed one's was.
    let sessions: Value = capped
        .get("/v1/sessions", ACME)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kept = sessions["data"].as_array().unwrap();
    assert_eq!(kept.len(), 1, "{sessions:#}");
    let streamed = last["response"]["id"]
        .as_str()
        .unwrap()
        .replace("resp_", "sess_");
    assert_eq!(kept[0]["id"], streamed.as_str());
    capped.shutdown().await;
}

#[tokio::test]
async fn a_forced_tool_choice_forces_the_first_call_only() {
    let server = TestServer::start().await;
    let (status, body) = create(
        &server,
        ACME,
        json!({"model": "demo", "instructions": SYSTEM, "input": USER, "tools": [weather_tool()],
               "tool_choice": {"type": "function", "name": "get_weather"}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(weather_outputs(&body).len(), 2);
    let (status, body) = create(
        &server,
        ACME,
        json!({"model": "demo", "input": "hi", "tool_choice": {"type": "function", "name": "nope"}}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "tool_choice");
    server.shutdown().await;
}

#[tokio::test]
async fn a_running_response_cannot_be_continued_and_a_client_that_hangs_up_cancels_it() {
    let started = std::sync::Arc::new(tokio::sync::Notify::new());
    // Here get_weather is a slow server tool.
    let server = TestServer::with(
        CONFIG,
        vec![crate::support::slow_tool(
            "get_weather",
            5_000,
            std::sync::Arc::clone(&started),
        )],
    )
    .await;
    let mut response = server
        .post("/v1/responses", ACME)
        .json(&json!({"model": "demo", "instructions": SYSTEM, "input": USER, "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut seen = String::new();
    while !seen.contains("\"resp_") {
        let chunk = response.chunk().await.unwrap().unwrap();
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let at = seen.find("\"resp_").unwrap();
    let id = seen[at + 1..at + 38].to_owned();
    tokio::time::timeout(std::time::Duration::from_secs(10), started.notified())
        .await
        .unwrap();
    // Running: its history is not complete, so neither a continuation nor a read.
    let (status, body) = create(
        &server,
        ACME,
        json!({"model": "demo", "previous_response_id": id, "input": "and?"}),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    let got = server
        .get(&format!("/v1/responses/{id}"), ACME)
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 409);
    drop(response);
    let aborted = || {
        server.state.metrics().value(
            "agentry_runs_total",
            &[("tenant", "acme"), ("status", "aborted")],
        )
    };
    // Well before the tool's 5 s are up.
    for _ in 0..60 {
        if aborted() == 1.0 && server.state.running() == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(aborted(), 1.0);
    // Saved as it stood: the text of round 1, the response incomplete.
    let got: Value = server
        .get(&format!("/v1/responses/{id}"), ACME)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got["status"], "incomplete", "{got:#}");
    assert_eq!(got["output"][0]["content"][0]["text"], ROUND_1_TEXT);
    server.shutdown().await;
}
