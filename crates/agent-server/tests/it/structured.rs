//! Structured output and content parts: `response_format` on `/v1/chat/completions`,
//! `file`, `input_audio` and tool content-part arrays, and sessions with an `output_schema`.
//!
//! The upstream is a real OpenAI-compatible server on a loopback port that answers with the
//! deltas it is given, in order (the last one again once they run out), and keeps every
//! request body it saw.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;
use serde_json::{Value, json};

use crate::support::{TestServer, parse_sse};

const KEY: &str = "key-acme-test-0001";

/// The answers to give and the request bodies seen.
#[derive(Clone, Default)]
pub(crate) struct Upstream {
    answers: Arc<Mutex<VecDeque<Value>>>,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl Upstream {
    pub(crate) fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().clone()
    }
}

async fn completions(
    State(upstream): State<Upstream>,
    body: axum::body::Bytes,
) -> impl IntoResponse {
    upstream
        .bodies
        .lock()
        .unwrap()
        .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
    let delta = {
        let mut answers = upstream.answers.lock().unwrap();
        if answers.len() > 1 {
            answers.pop_front().unwrap()
        } else {
            answers
                .front()
                .cloned()
                .unwrap_or(json!({"content": "Hello."}))
        }
    };
    let chunk = |choices: Value, usage: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
                   "model": "up-model", "choices": choices, "usage": usage})
        )
    };
    let mut delta = delta;
    delta["role"] = json!("assistant");
    let body = [
        chunk(
            json!([{"index": 0, "delta": delta, "finish_reason": null}]),
            Value::Null,
        ),
        chunk(
            json!([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
            Value::Null,
        ),
        chunk(
            json!([]),
            json!({"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}),
        ),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    ([(header::CONTENT_TYPE, "text/event-stream")], body)
}

/// A loopback upstream answering `answers`, and a server whose model `up` goes to it (and
/// whose model `llama` is an Ollama model on a closed port: it must refuse before sending).
pub(crate) async fn server(answers: Vec<Value>) -> (TestServer, Upstream) {
    let upstream = Upstream::default();
    upstream.answers.lock().unwrap().extend(answers);
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(upstream.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let config = format!(
        r#"
[server]

[[server.models]]
name = "up"
provider = "openai-compatible"
model = "up-model"
base_url = "http://{address}/v1"

[[server.models]]
name = "llama"
provider = "ollama"
model = "llama3.2"
base_url = "http://127.0.0.1:9"

[[server.tenants]]
name = "acme"
api_keys = ["{KEY}"]
"#
    );
    (TestServer::with(&config, Vec::new()).await, upstream)
}

fn city_format() -> Value {
    json!({"type": "json_schema", "json_schema": {
        "name": "city",
        "strict": true,
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
            "required": ["name", "population"],
            "additionalProperties": false
        }
    }})
}

async fn chat(server: &TestServer, body: Value) -> (u16, Value) {
    let response = server
        .post("/v1/chat/completions", KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn json_schema_answers_with_the_validated_json_as_content() {
    let (server, upstream) = server(vec![
        json!({"content": "{\"name\":\"Lisbon\",\"population\":545923}"}),
    ])
    .await;
    let (status, body) = chat(
        &server,
        json!({"model": "up", "messages": [{"role": "user", "content": "Biggest city of Portugal?"}],
               "response_format": city_format()}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let message = &body["choices"][0]["message"];
    let content: Value = serde_json::from_str(message["content"].as_str().unwrap()).unwrap();
    assert_eq!(content, json!({"name": "Lisbon", "population": 545_923}));
    assert_eq!(message["refusal"], Value::Null);
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    // The provider takes schemas natively: the strict schema went upstream under its name.
    let sent = upstream.bodies();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0]["response_format"]["type"], "json_schema",
        "{}",
        sent[0]
    );
    assert_eq!(sent[0]["response_format"]["json_schema"]["name"], "city");
    server.shutdown().await;
}

#[tokio::test]
async fn json_schema_streams_the_validated_json() {
    let (server, _upstream) = server(vec![
        json!({"content": "{\"name\":\"Oslo\",\"population\":709037}"}),
    ])
    .await;
    let response = server
        .post("/v1/chat/completions", KEY)
        .json(
            &json!({"model": "up", "stream": true, "response_format": city_format(),
                      "messages": [{"role": "user", "content": "Capital of Norway?"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let chunks = parse_sse(text.trim_end_matches("data: [DONE]\n\n"));
    let content: String = chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .collect();
    let content: Value = serde_json::from_str(&content).unwrap();
    assert_eq!(content, json!({"name": "Oslo", "population": 709_037}));
    server.shutdown().await;
}

#[tokio::test]
async fn an_invalid_answer_is_retried_then_422_in_openai_shape() {
    // One wrong try, then a right one: 200, two upstream calls.
    let (server, upstream) = server(vec![
        json!({"content": "{\"name\":\"Lisbon\"}"}),
        json!({"content": "{\"name\":\"Lisbon\",\"population\":545923}"}),
    ])
    .await;
    let request = json!({"model": "up", "response_format": city_format(),
                         "messages": [{"role": "user", "content": "Biggest city of Portugal?"}]});
    let (status, body) = chat(&server, request.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(upstream.bodies().len(), 2);
    server.shutdown().await;

    // Wrong every time: after `max_output_retries` (1), a 422 that keeps the raw answer.
    let (server, upstream) = server_always("{\"name\":\"Lisbon\"}").await;
    let (status, body) = chat(&server, request.clone()).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    assert_eq!(body["error"]["code"], "invalid_output", "{body}");
    // The raw answer and what is wrong with it ride along inside `error`.
    assert_eq!(body["error"]["raw"], "{\"name\":\"Lisbon\"}", "{body}");
    assert!(
        body["error"]["errors"][0]
            .as_str()
            .unwrap()
            .contains("population"),
        "{body}"
    );
    assert_eq!(upstream.bodies().len(), 2);

    // Streaming: the failed tries were held back, so the 422 is still a plain JSON answer.
    let mut streamed = request;
    streamed["stream"] = json!(true);
    let (status, body) = chat(&server, streamed).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "invalid_output", "{body}");
    assert_eq!(upstream.bodies().len(), 4);
    server.shutdown().await;
}

async fn server_always(content: &str) -> (TestServer, Upstream) {
    server(vec![json!({"content": content})]).await
}

#[tokio::test]
async fn a_refusal_is_the_message_refusal_as_openai_sends_it() {
    let (server, _upstream) = server(vec![json!({"refusal": "I can't help with that."})]).await;
    let (status, body) = chat(
        &server,
        json!({"model": "up", "response_format": city_format(),
               "messages": [{"role": "user", "content": "Something bad"}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let message = &body["choices"][0]["message"];
    assert_eq!(message["content"], Value::Null, "{body}");
    assert_eq!(message["refusal"], "I can't help with that.", "{body}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_streamed_refusal_comes_as_refusal_deltas() {
    let (server, _upstream) = server(vec![json!({"refusal": "I can't help with that."})]).await;
    let response = server
        .post("/v1/chat/completions", KEY)
        .json(
            &json!({"model": "up", "stream": true, "response_format": city_format(),
                      "messages": [{"role": "user", "content": "Something bad"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let chunks = parse_sse(text.trim_end_matches("data: [DONE]\n\n"));
    let refusal: String = chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["refusal"].as_str())
        .collect();
    assert_eq!(refusal, "I can't help with that.", "{text}");
    assert!(
        chunks
            .iter()
            .all(|chunk| chunk["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap_or("")
                .is_empty()),
        "{text}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn json_object_asks_in_the_prompt_and_returns_the_object() {
    let (server, upstream) = server(vec![json!({"content": "{\"ok\": true}"})]).await;
    let (status, body) = chat(
        &server,
        json!({"model": "up", "response_format": {"type": "json_object"},
               "messages": [{"role": "user", "content": "Reply in JSON."}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let content: Value =
        serde_json::from_str(body["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content, json!({"ok": true}));
    let sent = &upstream.bodies()[0];
    // Prompted: no provider schema, the instructions in the system prompt.
    assert!(sent.get("response_format").is_none(), "{sent}");
    assert_eq!(sent["messages"][0]["role"], "system", "{sent}");
    server.shutdown().await;
}

/// An object schema nested `levels` deep.
fn deep_schema(levels: usize) -> Value {
    let mut schema = json!({"type": "string"});
    for _ in 0..levels {
        schema = json!({"type": "object", "properties": {"a": schema}});
    }
    schema
}

#[tokio::test]
async fn hostile_schemas_are_bounded_before_compiling() {
    let (server, upstream) = server(Vec::new()).await;
    let big: serde_json::Map<String, Value> = (0..5000)
        .map(|at| (format!("field_{at:05}"), json!({"type": "string"})))
        .collect();
    let cases = [
        (deep_schema(40), "nests deeper than the limit of 32 levels"),
        (
            json!({"type": "object", "properties": big}),
            "the limit is 65536 bytes",
        ),
        (json!({"type": 7}), "is not a usable JSON Schema"),
    ];
    for (schema, expected) in &cases {
        let (status, body) = chat(
            &server,
            json!({"model": "up", "messages": [{"role": "user", "content": "x"}],
                   "response_format": {"type": "json_schema",
                                       "json_schema": {"name": "t", "schema": schema}}}),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["param"], "response_format.json_schema.schema");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(expected), "{expected:?} not in {message}");

        // Sessions bound theirs the same way.
        let created = server
            .post("/v1/sessions", KEY)
            .json(&json!({"model": "up", "output_schema": schema}))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 400);
        let error: Value = created.json().await.unwrap();
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(expected), "{expected:?} not in {message}");
    }
    // And an execute that creates its session from a context.
    let executed = server
        .post("/v1/sessions/sess_deep/execute", KEY)
        .json(&json!({"message": "x",
                      "context": {"model": "up", "output_schema": deep_schema(40)}}))
        .send()
        .await
        .unwrap();
    assert_eq!(executed.status(), 400);
    let error: Value = executed.json().await.unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("nests deeper"), "{message}");
    let (status, body) = chat(
        &server,
        json!({"model": "up", "messages": [{"role": "user", "content": "x"}],
               "response_format": {"type": "xml"}}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "response_format.type");
    assert!(
        upstream.bodies().is_empty(),
        "no model call for a refused schema"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn file_audio_and_tool_content_parts_reach_the_provider() {
    let (server, upstream) = server(vec![json!({"content": "Seen."})]).await;
    let tool = json!({"type": "function", "function": {"name": "snapshot", "parameters": {"type": "object"}}});
    let (status, body) = chat(
        &server,
        json!({"model": "up", "tools": [tool], "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Read these."},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0x"}},
                {"type": "file", "file": {"file_id": "file-abc123"}},
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
            ]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "snapshot", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": [
                {"type": "text", "text": "the screen:"},
                {"type": "image_url", "image_url": {"url": "https://example.com/screen.png"}}
            ]}
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let sent = &upstream.bodies()[0];
    let user = &sent["messages"][0]["content"];
    let kinds: Vec<&str> = user
        .as_array()
        .unwrap()
        .iter()
        .map(|part| part["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["text", "image_url", "file", "file", "input_audio"],
        "{sent}"
    );
    assert_eq!(user[2]["file"]["filename"], "a.pdf");
    assert_eq!(user[3]["file"]["file_id"], "file-abc123");
    assert_eq!(user[4]["input_audio"]["format"], "wav");
    // The tool's image went upstream too (as the adapter maps it), never dropped.
    assert!(
        sent.to_string().contains("https://example.com/screen.png"),
        "{sent}"
    );

    // A bad part is a 400 naming it, before any call.
    let before = upstream.bodies().len();
    let (status, body) = chat(
        &server,
        json!({"model": "up", "messages": [{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "ogg"}}]}]}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["error"]["param"],
        "messages[0].content[0].input_audio.format"
    );
    assert_eq!(upstream.bodies().len(), before);
    server.shutdown().await;
}

#[tokio::test]
async fn a_kind_the_provider_cannot_take_is_a_400_before_sending() {
    // Ollama takes no documents: its adapter refuses before any request (its port is closed,
    // so a request would be a 502, not this 400).
    let (server, _upstream) = server(Vec::new()).await;
    let (status, body) = tokio::time::timeout(
        Duration::from_secs(30),
        chat(
            &server,
            json!({"model": "llama", "messages": [{"role": "user", "content": [
                {"type": "text", "text": "Summarise."},
                {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0x"}}
            ]}]}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap().to_lowercase();
    assert!(
        message.contains("ollama") && message.contains("file"),
        "{body}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_session_with_an_output_schema_completes_with_its_output() {
    let (server, upstream) = server(vec![
        json!({"content": "{\"name\":\"Porto\",\"population\":231962}"}),
    ])
    .await;
    let schema = city_format()["json_schema"]["schema"].clone();
    let id = server
        .create(json!({"model": "up", "output_schema": schema}))
        .await;
    let events = server
        .execute(&id, json!({"message": "Second city of Portugal?"}))
        .await;
    let complete = events
        .iter()
        .find(|event| event["type"] == "execute_complete")
        .unwrap();
    assert_eq!(
        complete["output"],
        json!({"name": "Porto", "population": 231_962}),
        "{complete}"
    );
    assert_eq!(
        upstream.bodies()[0]["response_format"]["type"],
        "json_schema"
    );
    // Kept with the session: the next execute asks for it again.
    server
        .execute(&id, json!({"message": "And the third?"}))
        .await;
    assert_eq!(
        upstream.bodies()[1]["response_format"]["type"],
        "json_schema"
    );
    server.shutdown().await;
}

/// The official `openai` Python client's `parse` helper with a Pydantic model, against a
/// server whose upstream answers with JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_parses_into_a_pydantic_model() {
    let Some(python) = crate::openai::client_program("AGENTRY_TEST_PYTHON", "python.sh") else {
        return;
    };
    let (server, upstream) = server(vec![
        json!({"content": "{\"name\":\"Lisbon\",\"population\":545923}"}),
    ])
    .await;
    let script = format!(
        "{}/tests/openai_client/test_structured.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let output = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::process::Command::new(&python)
            .arg(&script)
            .arg(&server.url)
            .arg(KEY)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("all checks passed"), "{stderr}");
    // The Pydantic model's schema went upstream as the native strict schema.
    assert!(
        upstream
            .bodies()
            .iter()
            .all(|body| body["response_format"]["json_schema"]["name"] == "City"),
        "{:?}",
        upstream.bodies()
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_strict_client_tool_is_accepted_and_goes_upstream_strict() {
    // The model, constrained by strict mode, sends `null` for the optional `unit`.
    let (server, upstream) = server(vec![json!({"content": null, "tool_calls": [
        {"index": 0, "id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\",\"unit\":null}"}}
    ]})])
    .await;
    let schema = json!({"type": "object", "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["c", "f"]}
    }, "required": ["city"]});
    let tools = json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Current weather.",
            "parameters": schema, "strict": true}},
        {"type": "function", "function": {"name": "get_time", "description": "The time.",
            "parameters": {"type": "object", "properties": {}}, "strict": false}}
    ]);
    let (status, body) = chat(
        &server,
        json!({"model": "up", "messages": [{"role": "user", "content": "Weather in Oslo?"}],
               "tools": tools}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls", "{body}");
    let call = &body["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    // The client's schema lets `unit` be absent: the model's null for it is dropped before
    // validation, so the arguments match the schema the client declared.
    let arguments: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"city": "Oslo"}));

    // Upstream, the strict tool carried `strict: true` and the strict form of its schema;
    // the other tool went as declared.
    let sent = upstream.bodies();
    assert_eq!(sent.len(), 1);
    // (Tools go upstream sorted by name.)
    let sent_tool = |name: &str| {
        sent[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|tool| tool["function"].clone())
            .find(|function| function["name"] == name)
            .unwrap_or_else(|| panic!("no {name} upstream: {}", sent[0]))
    };
    let function = sent_tool("get_weather");
    assert_eq!(function["strict"], true, "{}", sent[0]);
    assert_eq!(
        function["parameters"],
        json!({"type": "object", "properties": {
            "city": {"type": "string"},
            "unit": {"type": ["string", "null"], "enum": ["c", "f", null]}
        }, "required": ["city", "unit"], "additionalProperties": false})
    );
    assert!(sent_tool("get_time").get("strict").is_none(), "{}", sent[0]);
    server.shutdown().await;
}
