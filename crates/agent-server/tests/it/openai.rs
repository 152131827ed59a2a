//! `POST /v1/chat/completions` against the recorded demo model: round 1 asks for
//! `get_weather` (Lisbon, Oslo) and `clock`, round 2 for `calculator`, round 3 answers. Here
//! `get_weather` is the client's tool; the clock and the calculator run on the server.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::support::{CONFIG, TestServer, slow_tool};

const SYSTEM: &str = "You are a concise travel assistant. Use the tools for facts; never guess.";
const USER: &str =
    "What's the weather in Lisbon and in Oslo right now, and how many degrees warmer is Lisbon?";
const ROUND_1_TEXT: &str = "I'll look up both cities and the time.";
const ANSWER_START: &str = "Lisbon is sunny and 19 °C";
const ANSWER_END: &str = "and for winter in Oslo.";

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    }})
}

fn opening() -> Vec<Value> {
    vec![
        json!({"role": "system", "content": SYSTEM}),
        json!({"role": "user", "content": USER}),
    ]
}

/// The opening, the assistant turn as returned, and one weather result per call.
fn follow_up(content: &Value, calls: &[Value]) -> Vec<Value> {
    let mut messages = opening();
    messages.push(json!({"role": "assistant", "content": content, "tool_calls": calls}));
    for call in calls {
        let arguments: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        let city = arguments["city"].as_str().unwrap();
        let temp = if city == "Lisbon" { 19 } else { 4 };
        messages.push(json!({
            "role": "tool",
            "tool_call_id": call["id"],
            "content": json!({"city": city, "temp_c": temp}).to_string(),
        }));
    }
    messages
}

/// Two `get_weather` calls with their arguments as JSON text, for Lisbon and Oslo.
fn check_weather_calls(calls: &[Value]) {
    assert_eq!(calls.len(), 2, "{calls:#?}");
    let mut cities: Vec<String> = calls
        .iter()
        .map(|call| {
            assert_eq!(call["type"], "function");
            assert_eq!(call["function"]["name"], "get_weather");
            assert!(call["id"].as_str().is_some_and(|id| !id.is_empty()));
            let text = call["function"]["arguments"].as_str().expect("JSON text");
            let arguments: Value = serde_json::from_str(text).unwrap();
            arguments["city"].as_str().unwrap().to_owned()
        })
        .collect();
    cities.sort();
    assert_eq!(cities, ["Lisbon", "Oslo"]);
}

fn check_usage(usage: &Value) {
    let prompt = usage["prompt_tokens"].as_u64().unwrap();
    let completion = usage["completion_tokens"].as_u64().unwrap();
    assert!(prompt > 0 && completion > 0, "{usage}");
    assert_eq!(usage["total_tokens"].as_u64().unwrap(), prompt + completion);
    assert!(usage["prompt_tokens_details"]["cached_tokens"].is_u64());
    assert!(usage["completion_tokens_details"]["reasoning_tokens"].is_u64());
}

fn tool_runs(server: &TestServer, tool: &str) -> f64 {
    server.state.metrics().value(
        "agentry_tool_calls_total",
        &[("tenant", "acme"), ("tool", tool), ("outcome", "ok")],
    )
}

fn model_calls(server: &TestServer) -> f64 {
    server.state.metrics().value(
        "agentry_model_calls_total",
        &[("tenant", "acme"), ("model", "demo")],
    )
}

async fn complete(server: &TestServer, body: Value) -> Value {
    let response = server
        .post("/v1/chat/completions", "key-acme-test-0001")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    response.json().await.unwrap()
}

/// A streamed response: its comment lines, its chunks, and whether `[DONE]` came last.
struct Streamed {
    comments: Vec<String>,
    chunks: Vec<Value>,
    done_last: bool,
}

impl Streamed {
    fn content(&self) -> String {
        self.choices()
            .filter_map(|choice| choice["delta"]["content"].as_str())
            .collect()
    }

    fn choices(&self) -> impl Iterator<Item = &Value> {
        self.chunks
            .iter()
            .filter_map(|chunk| chunk["choices"].as_array())
            .flatten()
    }

    /// The tool calls, put together from their deltas by index.
    fn tool_calls(&self) -> Vec<Value> {
        let mut calls: Vec<Value> = Vec::new();
        for delta in self
            .choices()
            .filter_map(|choice| choice["delta"]["tool_calls"].as_array())
            .flatten()
        {
            let index = usize::try_from(delta["index"].as_u64().unwrap()).unwrap();
            if calls.len() <= index {
                calls.resize(
                    index + 1,
                    json!({"type": "function", "function": {"name": "", "arguments": ""}}),
                );
            }
            let call = &mut calls[index];
            if let Some(id) = delta["id"].as_str() {
                call["id"] = id.into();
            }
            for field in ["name", "arguments"] {
                if let Some(part) = delta["function"][field].as_str() {
                    let joined = format!("{}{part}", call["function"][field].as_str().unwrap());
                    call["function"][field] = joined.into();
                }
            }
        }
        calls
    }

    fn finish_reasons(&self) -> Vec<&str> {
        self.choices()
            .filter_map(|choice| choice["finish_reason"].as_str())
            .collect()
    }
}

async fn stream(server: &TestServer, body: Value) -> Streamed {
    let response = server
        .post("/v1/chat/completions", "key-acme-test-0001")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.unwrap();
    let mut streamed = Streamed {
        comments: Vec::new(),
        chunks: Vec::new(),
        done_last: false,
    };
    for frame in text.split("\n\n").filter(|frame| !frame.is_empty()) {
        assert!(!streamed.done_last, "nothing after [DONE]: {text}");
        if let Some(comment) = frame.strip_prefix(": ") {
            streamed.comments.push(comment.to_owned());
        } else if frame == "data: [DONE]" {
            streamed.done_last = true;
        } else {
            let data = frame.strip_prefix("data: ").expect("a data line");
            streamed.chunks.push(serde_json::from_str(data).unwrap());
        }
    }
    streamed
}

#[tokio::test]
async fn a_client_tool_comes_back_as_tool_calls_and_the_follow_up_gets_the_answer() {
    let server = TestServer::start().await;
    let first = complete(
        &server,
        json!({"model": "demo", "messages": opening(), "tools": [weather_tool()],
               "temperature": 0.2, "max_tokens": 512, "user": "u-1", "parallel_tool_calls": true}),
    )
    .await;
    assert_eq!(first["object"], "chat.completion");
    assert!(first["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(first["model"], "demo");
    assert!(first["created"].as_u64().unwrap() > 1_600_000_000);
    let choice = &first["choices"][0];
    assert_eq!(first["choices"].as_array().unwrap().len(), 1);
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["finish_reason"], "tool_calls", "{first:#}");
    assert_eq!(choice["logprobs"], Value::Null);
    let message = &choice["message"];
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["content"], ROUND_1_TEXT);
    assert_eq!(message["refusal"], Value::Null);
    let calls = message["tool_calls"].as_array().unwrap().clone();
    // The clock was asked for in the same turn; it ran here and is not shown.
    check_weather_calls(&calls);
    assert_eq!(tool_runs(&server, "clock"), 1.0);
    check_usage(&first["usage"]);
    assert_eq!(first["usage"]["prompt_tokens"], 386);
    assert_eq!(first["usage"]["completion_tokens"], 74);

    let second = complete(
        &server,
        json!({"model": "demo", "messages": follow_up(&message["content"], &calls), "tools": [weather_tool()]}),
    )
    .await;
    let choice = &second["choices"][0];
    assert_eq!(choice["finish_reason"], "stop", "{second:#}");
    assert!(choice["message"].get("tool_calls").is_none());
    let text = choice["message"]["content"].as_str().unwrap();
    assert!(
        text.starts_with(ANSWER_START) && text.ends_with(ANSWER_END),
        "only the last turn's text: {text}"
    );
    // Rounds 2 (the calculator, on the server) and 3, summed.
    assert_eq!(tool_runs(&server, "calculator"), 1.0);
    check_usage(&second["usage"]);
    assert_eq!(second["usage"]["prompt_tokens"], 545 + 603);
    assert_eq!(second["usage"]["completion_tokens"], 23 + 52);
    assert_eq!(
        server.state.metrics().value(
            "agentry_runs_total",
            &[("tenant", "acme"), ("status", "completed")]
        ),
        1.0
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_client_tool_hides_the_server_tool_of_the_same_name() {
    let server = TestServer::start().await;
    let clock = json!({"type": "function", "function": {"name": "clock", "description": "The client's clock."}});
    let body = complete(
        &server,
        json!({"model": "demo", "messages": opening(), "tools": [weather_tool(), clock]}),
    )
    .await;
    let calls = body["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap();
    let names: Vec<&str> = calls
        .iter()
        .map(|call| call["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["get_weather", "get_weather", "clock"]);
    assert_eq!(calls[2]["function"]["arguments"], "{}");
    assert_eq!(tool_runs(&server, "clock"), 0.0);
    server.shutdown().await;
}

#[tokio::test]
async fn a_stream_has_the_role_text_tool_calls_finish_usage_and_done() {
    let server = TestServer::start().await;
    let first = stream(
        &server,
        json!({"model": "demo", "messages": opening(), "tools": [weather_tool()],
               "stream": true, "stream_options": {"include_usage": true}}),
    )
    .await;
    assert!(first.done_last, "[DONE] ends the stream");
    let opening_chunk = &first.chunks[0];
    assert_eq!(opening_chunk["object"], "chat.completion.chunk");
    assert!(
        opening_chunk["id"]
            .as_str()
            .unwrap()
            .starts_with("chatcmpl-")
    );
    assert_eq!(opening_chunk["model"], "demo");
    assert_eq!(
        opening_chunk["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert!(
        first
            .chunks
            .iter()
            .all(|chunk| chunk["id"] == opening_chunk["id"])
    );
    assert_eq!(first.content(), ROUND_1_TEXT);
    check_weather_calls(&first.tool_calls());
    assert_eq!(first.finish_reasons(), ["tool_calls"]);
    // The usage chunk comes last, without choices; the others carry `usage: null`.
    let (usage_chunk, choice_chunks) = first.chunks.split_last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    check_usage(&usage_chunk["usage"]);
    assert!(choice_chunks.iter().all(|chunk| chunk["usage"].is_null()));
    let finish_chunk = choice_chunks.last().unwrap();
    assert_eq!(finish_chunk["choices"][0]["finish_reason"], "tool_calls");
    // The clock ran on the server and shows as comments only.
    assert!(
        first
            .comments
            .iter()
            .any(|line| line.starts_with("tool_execution_start clock ")),
        "{:?}",
        first.comments
    );
    assert!(
        first
            .comments
            .iter()
            .any(|line| line.starts_with("tool_execution_end clock ") && line.contains(" ok ")),
        "{:?}",
        first.comments
    );

    let second = stream(
        &server,
        json!({"model": "demo", "messages": follow_up(&json!(first.content()), &first.tool_calls()),
               "tools": [weather_tool()], "stream": true}),
    )
    .await;
    assert!(second.done_last);
    assert_eq!(second.finish_reasons(), ["stop"]);
    assert!(second.tool_calls().is_empty());
    // Every model call's text streams, a blank line between two calls.
    let content = second.content();
    assert!(content.ends_with(ANSWER_END), "{content}");
    assert!(
        content.contains(&format!("\n\n{ANSWER_START}")),
        "{content}"
    );
    // Without include_usage: no usage anywhere.
    assert!(
        second
            .chunks
            .iter()
            .all(|chunk| chunk.get("usage").is_none())
    );
    assert!(
        second
            .comments
            .iter()
            .any(|line| line.starts_with("tool_execution_start calculator ")
                && line.ends_with(r#"{"expression":"19 - 4"}"#)),
        "{:?}",
        second.comments
    );
    server.shutdown().await;
}

#[tokio::test]
async fn errors_are_shaped_like_openai_ones() {
    let server = TestServer::start().await;
    let send = |key: Option<&'static str>, body: Value| {
        let request = server
            .client
            .post(format!("{}/v1/chat/completions", server.url))
            .json(&body);
        let request = match key {
            Some(key) => request.bearer_auth(key),
            None => request,
        };
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            (status, headers, response.json::<Value>().await.unwrap())
        }
    };

    let (status, _, body) = send(
        Some("key-acme-test-0001"),
        json!({"model": "gpt-9", "messages": opening(), "stream": true}),
    )
    .await;
    assert_eq!(status, 404, "a stream that never started is a JSON error");
    assert_eq!(body["error"]["code"], "model_not_found");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["param"], "model");
    assert!(body["error"]["message"].as_str().unwrap().contains("demo"));

    let (status, _, body) = send(
        Some("key-acme-test-0001"),
        json!({"model": "demo", "messages": opening(), "n": 2}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "n");

    let (status, headers, body) = send(None, json!({"model": "demo", "messages": opening()})).await;
    assert_eq!(status, 401);
    assert_eq!(headers["www-authenticate"], "Bearer");
    assert_eq!(body["error"]["code"], "invalid_api_key");

    // A tool result for a call nobody made.
    let mut messages = opening();
    messages.push(json!({"role": "tool", "tool_call_id": "call_x", "content": "{}"}));
    let (status, _, body) = send(
        Some("key-acme-test-0001"),
        json!({"model": "demo", "messages": messages}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "messages[2].tool_call_id");

    let (status, _, body) = send(Some("key-acme-test-0001"), json!({"model": "demo"})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    server.shutdown().await;
}

#[tokio::test]
async fn a_forced_tool_choice_forces_the_first_call_only() {
    // No client tools: round 1's get_weather calls find no tool (the model hears so) and
    // the clock runs; under `required` every later call would be forced too and the run
    // could never answer.
    let server = TestServer::start().await;
    let body = complete(
        &server,
        json!({"model": "demo", "messages": opening(), "tool_choice": "required"}),
    )
    .await;
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "stop", "{body:#}");
    assert!(
        choice["message"]["content"]
            .as_str()
            .unwrap()
            .starts_with(ANSWER_START)
    );
    assert_eq!(tool_runs(&server, "calculator"), 1.0);
    // All three model calls are in the usage.
    assert_eq!(body["usage"]["prompt_tokens"], 386 + 545 + 603);
    server.shutdown().await;
}

#[tokio::test]
async fn a_run_that_fails_answers_with_an_error_or_ends_its_stream_with_one() {
    // One tool round allowed: round 2's calculator call trips the budget.
    let config = format!("{CONFIG}\n[server.caps]\nmax_iterations = 1\n");
    let server = TestServer::with(&config, Vec::new()).await;
    let response = server
        .post("/v1/chat/completions", "key-acme-test-0001")
        .json(&json!({"model": "demo", "messages": opening()}))
        .send()
        .await
        .unwrap();
    // 402, not 429: the Vercel AI SDK retries every 429 whatever the headers say.
    assert_eq!(response.status(), 402);
    // A retry would trip it again: the official clients are told not to.
    assert_eq!(response.headers()["x-should-retry"], "false");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "budget_exceeded");
    // What the trip spent is in the error: rounds 1 and 2 were model calls, in OpenAI's
    // usage shape, and the same numbers the metrics counted.
    let usage = &body["error"]["usage"];
    check_usage(usage);
    assert_eq!(usage["prompt_tokens"], 386 + 545, "{body:#}");
    let metrics = server.state.metrics();
    let counted = |kind| {
        metrics.value(
            "agentry_tokens_total",
            &[("tenant", "acme"), ("kind", kind)],
        )
    };
    assert_eq!(usage["prompt_tokens"].as_f64(), Some(counted("input")));
    assert_eq!(usage["completion_tokens"].as_f64(), Some(counted("output")));
    let cost = body["error"]["cost_usd"]
        .as_f64()
        .expect("the demo model is priced");
    let metered = metrics.value("agentry_cost_usd_total", &[("tenant", "acme")]);
    assert!(
        cost > 0.0 && (cost - metered).abs() < 1e-12,
        "{cost} vs {metered}"
    );

    // Streaming, the text of rounds 1 and 2 is out before the budget trips.
    let streamed = stream(
        &server,
        json!({"model": "demo", "messages": opening(), "stream": true}),
    )
    .await;
    assert_eq!(
        streamed.content(),
        format!("{ROUND_1_TEXT}\n\nNow the difference.")
    );
    assert!(
        !streamed.done_last,
        "an error ends the stream without [DONE]"
    );
    let last = streamed.chunks.last().unwrap();
    assert_eq!(last["error"]["code"], "budget_exceeded", "{last}");
    assert_eq!(last["error"]["status"], 402);
    // The stream's error carries the same spend: the same recorded rounds.
    assert_eq!(last["error"]["usage"], body["error"]["usage"], "{last}");
    assert_eq!(
        last["error"]["cost_usd"], body["error"]["cost_usd"],
        "{last}"
    );
    assert!(streamed.finish_reasons().is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn a_client_that_hangs_up_cancels_the_run() {
    for streaming in [true, false] {
        let started = Arc::new(Notify::new());
        // Here get_weather is a slow server tool.
        let server = TestServer::with(
            CONFIG,
            vec![slow_tool("get_weather", 5_000, Arc::clone(&started))],
        )
        .await;
        let request = server
            .post("/v1/chat/completions", "key-acme-test-0001")
            .json(&json!({"model": "demo", "messages": opening(), "stream": streaming}))
            .send();
        if streaming {
            // The stream has started (round 1's text), then the client leaves mid-tool.
            let mut response = request.await.unwrap();
            assert_eq!(response.status(), 200);
            let _ = response.chunk().await.unwrap();
            tokio::time::timeout(Duration::from_secs(10), started.notified())
                .await
                .unwrap();
            drop(response);
        } else {
            // The client gives up waiting while the tool runs.
            tokio::select! {
                _ = request => panic!("the tool takes 5 s"),
                () = started.notified() => {}
            }
        }

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
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(aborted(), 1.0, "streaming: {streaming}");
        assert_eq!(server.state.running(), 0, "streaming: {streaming}");
        assert_eq!(
            server
                .state
                .metrics()
                .value("agentry_active_streams", &[("tenant", "acme")]),
            0.0
        );
        server.shutdown().await;
    }
}

#[tokio::test]
async fn a_tenant_at_its_concurrent_run_limit_gets_429() {
    let started = Arc::new(Notify::new());
    let config = format!("{CONFIG}\n[server.limits]\nconcurrent_executes = 1\n");
    let server = TestServer::with(
        &config,
        vec![slow_tool("get_weather", 5_000, Arc::clone(&started))],
    )
    .await;
    let body = json!({"model": "demo", "messages": opening(), "stream": true});
    let mut running = server
        .post("/v1/chat/completions", "key-acme-test-0001")
        .json(&body)
        .send()
        .await
        .unwrap();
    let _ = running.chunk().await.unwrap();
    started.notified().await;
    let refused = server
        .post("/v1/chat/completions", "key-acme-test-0001")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "1");
    let error: Value = refused.json().await.unwrap();
    assert_eq!(error["error"]["code"], "rate_limit_exceeded");
    drop(running);
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_routes_and_wrong_methods_answer_openai_shaped_json() {
    let server = TestServer::start().await;
    for (method, path, status, code) in [
        (reqwest::Method::POST, "/v1/completions", 404, "unknown_url"),
        (
            reqwest::Method::GET,
            "/v1/nothing/here?x=1",
            404,
            "unknown_url",
        ),
        (reqwest::Method::GET, "/", 404, "unknown_url"),
        (
            reqwest::Method::GET,
            "/v1/chat/completions",
            405,
            "method_not_allowed",
        ),
        (
            reqwest::Method::PUT,
            "/v1/sessions",
            405,
            "method_not_allowed",
        ),
    ] {
        let response = server
            .client
            .request(method.clone(), format!("{}{path}", server.url))
            .bearer_auth("key-acme-test-0001")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{method} {path}");
        if status == 405 {
            let allow = response.headers()["allow"].to_str().unwrap();
            assert!(
                allow.contains("POST") && !allow.contains(method.as_str()),
                "{allow}"
            );
        }
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json"),
            "{method} {path}"
        );
        let body: Value = response.json().await.unwrap();
        let error = &body["error"];
        assert_eq!(error["code"], code, "{body}");
        assert_eq!(error["type"], "invalid_request_error");
        assert_eq!(error["status"], status);
        assert!(error["param"].is_null());
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(method.as_str()), "{message}");
        // The path, never the query string.
        assert!(!message.contains("x=1"), "{message}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn models_are_listed_as_openai_lists_them() {
    let config = format!(
        "{CONFIG}\n[[server.models]]\nname = \"team/demo-2\"\nprovider = \"replay\"\nrecording = \"anthropic\"\n"
    );
    let server = TestServer::with(&config, Vec::new()).await;
    let response = server
        .get("/v1/models", "key-acme-test-0001")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let list: Value = response.json().await.unwrap();
    assert_eq!(list["object"], "list");
    let data = list["data"].as_array().unwrap();
    let ids: Vec<&str> = data.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["demo", "team/demo-2"]);
    for model in data {
        assert_eq!(model["object"], "model");
        assert_eq!(model["owned_by"], "agentry");
        assert!(
            model["created"].as_u64().unwrap() > 1_700_000_000,
            "{model}"
        );
    }

    for id in ["demo", "team/demo-2"] {
        let response = server
            .get(&format!("/v1/models/{id}"), "key-acme-test-0001")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{id}");
        let model: Value = response.json().await.unwrap();
        assert_eq!(model["id"], id);
        assert_eq!(model["object"], "model");
    }

    let response = server
        .get("/v1/models/gpt-9", "key-acme-test-0001")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_not_found");
    assert_eq!(body["error"]["param"], "model");

    // Authenticated like every other endpoint.
    for path in ["/v1/models", "/v1/models/demo"] {
        let response = server.get(path, "wrong-key").send().await.unwrap();
        assert_eq!(response.status(), 401, "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_api_key");
    }
    server.shutdown().await;
}

/// Every field OpenAI defines that this server would otherwise have dropped is a 400 naming
/// it; the fields' "off" values and the attribution fields pass.
#[tokio::test]
async fn accepted_but_ignored_fields_are_refused_naming_the_field() {
    let server = TestServer::start().await;
    let refused = [
        ("logprobs", json!(true)),
        ("top_logprobs", json!(3)),
        (
            "functions",
            json!([{"name": "f", "parameters": {"type": "object"}}]),
        ),
        ("function_call", json!("auto")),
        ("audio", json!({"voice": "alloy", "format": "wav"})),
        ("modalities", json!(["text", "audio"])),
        ("prediction", json!({"type": "content", "content": "draft"})),
        ("frequency_penalty", json!(0.5)),
        ("presence_penalty", json!(-1)),
        ("logit_bias", json!({"50256": -100})),
        ("store", json!(true)),
        ("web_search_options", json!({})),
        ("verbosity", json!("low")),
        ("seed", json!(7)),
        ("made_up_field", json!(1)),
    ];
    for (field, value) in refused {
        let mut body = json!({"model": "demo", "messages": opening()});
        body[field] = value.clone();
        for streaming in [false, true] {
            body["stream"] = streaming.into();
            let response = server
                .post("/v1/chat/completions", "key-acme-test-0001")
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 400, "{field}: {value}");
            let error: Value = response.json().await.unwrap();
            assert_eq!(error["error"]["param"], field, "{error}");
            assert_eq!(error["error"]["type"], "invalid_request_error");
            assert!(
                error["error"]["message"].as_str().unwrap().contains(field),
                "{error}"
            );
        }
    }
    assert_eq!(model_calls(&server), 0.0, "no model call was made");

    let mut not_strict = weather_tool();
    not_strict["function"]["strict"] = false.into();
    let accepted = complete(
        &server,
        json!({"model": "demo", "messages": opening(),
               "response_format": {"type": "text"}, "logprobs": false, "top_logprobs": null,
               "modalities": ["text"], "frequency_penalty": 0, "presence_penalty": 0.0,
               "logit_bias": {}, "store": false, "functions": null, "audio": null,
               "user": "u-1", "seed": null, "metadata": {"k": "v"}, "service_tier": "auto",
               "safety_identifier": "s", "prompt_cache_key": "p", "tools": [not_strict]}),
    )
    .await;
    assert_eq!(accepted["choices"][0]["finish_reason"], "tool_calls");
    check_weather_calls(
        accepted["choices"][0]["message"]["tool_calls"]
            .as_array()
            .unwrap(),
    );
    server.shutdown().await;
}

#[tokio::test]
async fn empty_messages_and_empty_user_messages_are_refused() {
    let server = TestServer::start().await;
    let cases = [
        (json!([]), "messages"),
        (json!([{"role": "system", "content": SYSTEM}]), "messages"),
        (
            json!([{"role": "user", "content": ""}]),
            "messages[0].content",
        ),
        (
            json!([{"role": "system", "content": SYSTEM}, {"role": "user", "content": " \n\t "}]),
            "messages[1].content",
        ),
        (
            json!([{"role": "user", "content": [{"type": "text", "text": ""}, {"type": "text", "text": "  "}]}]),
            "messages[0].content",
        ),
        (
            json!([{"role": "user", "content": "  "}, {"role": "assistant", "content": "ok"},
                   {"role": "user", "content": "Hi"}]),
            "messages[0].content",
        ),
    ];
    for (messages, param) in cases {
        for streaming in [false, true] {
            let response = server
                .post("/v1/chat/completions", "key-acme-test-0001")
                .json(&json!({"model": "demo", "messages": messages, "stream": streaming}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 400, "{messages}");
            let error: Value = response.json().await.unwrap();
            assert_eq!(error["error"]["param"], param, "{error}");
        }
    }
    assert_eq!(model_calls(&server), 0.0, "no model call was made");
    server.shutdown().await;
}

#[tokio::test]
async fn completion_ids_are_random() {
    let server = TestServer::start().await;
    let mut ids = Vec::new();
    for _ in 0..8 {
        let body = complete(
            &server,
            json!({"model": "demo", "messages": opening(), "tools": [weather_tool()]}),
        )
        .await;
        ids.push(body["id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        let hex = id.strip_prefix("chatcmpl-").unwrap();
        assert_eq!(hex.len(), 32, "128 bits: {id}");
        assert!(hex.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    }
    // Sequential ids (a millisecond clock, the pid and a counter) share their start; 128
    // random bits share 8 leading hex digits by chance once in 2^32 pairs.
    let prefixes: std::collections::HashSet<&str> = ids.iter().map(|id| &id[9..17]).collect();
    assert_eq!(prefixes.len(), ids.len(), "{ids:#?}");
    let suffixes: std::collections::HashSet<&str> =
        ids.iter().map(|id| &id[id.len() - 8..]).collect();
    assert_eq!(suffixes.len(), ids.len(), "{ids:#?}");
    server.shutdown().await;
}

/// Requests that reached `/v1/chat/completions` on `server`, whatever their status.
fn chat_requests(server: &TestServer) -> f64 {
    server
        .state
        .metrics()
        .render()
        .lines()
        .filter(|line| {
            line.starts_with("agentry_http_requests_total{")
                && line.contains("route=\"/v1/chat/completions\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A server whose runs trip their budget: one tool round allowed, the demo needs two.
async fn capped_server() -> TestServer {
    TestServer::with(
        &format!("{CONFIG}\n[server.caps]\nmax_iterations = 1\n"),
        Vec::new(),
    )
    .await
}

/// The program in `$variable` (set by a `.ci` script), or `None` to skip outside CI; under
/// `CI` a missing one fails the test.
pub(crate) fn client_program(variable: &str, script: &str) -> Option<std::ffi::OsString> {
    if let Some(program) = std::env::var_os(variable) {
        return Some(program);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{variable} is not set: CI must run `eval \"$(bash .ci/{script})\"` first"
    );
    #[allow(clippy::print_stderr)]
    {
        eprintln!("skipped: {variable} is not set (run `eval \"$(bash .ci/{script})\"`)");
    }
    None
}

/// Runs a real client's check script (`tests/<script>`) with `program` against a demo server
/// and a budget-capped one, and checks that it passed and that its `trips` budget trips
/// reached the capped server once each: no client retried one.
async fn run_client(program: std::ffi::OsString, script: &str, trips: u32) {
    let server = TestServer::start().await;
    let capped = capped_server().await;
    let script = format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR"));
    let output = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::process::Command::new(&program)
            .arg(&script)
            .arg(&server.url)
            .arg("key-acme-test-0001")
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
    assert_eq!(
        chat_requests(&capped),
        f64::from(trips),
        "{script}: exactly one request reaches the server per budget trip:\n{}",
        capped.state.metrics().render()
    );
    capped.shutdown().await;
    server.shutdown().await;
}

/// The official `openai` Python client, from PyPI, against this server: `.ci/python.sh`
/// makes the venv and says where its interpreter is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_works_unchanged() {
    if let Some(python) = client_program("AGENTRY_TEST_PYTHON", "python.sh") {
        run_client(python, "openai_client/test_client.py", 1).await;
    }
}

/// `langchain-openai`'s `ChatOpenAI`, from PyPI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langchain_openai_works_unchanged() {
    if let Some(python) = client_program("AGENTRY_TEST_PYTHON", "python.sh") {
        run_client(python, "openai_client/test_langchain.py", 1).await;
    }
}

/// `litellm`, from PyPI, in its own venv.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn litellm_works_unchanged() {
    if let Some(python) = client_program("AGENTRY_TEST_LITELLM_PYTHON", "python.sh") {
        run_client(python, "openai_client/test_litellm.py", 1).await;
    }
}

/// The Vercel AI SDK (`ai` with `@ai-sdk/openai-compatible`), from npm: its `generateText`
/// retries every 429, so this is where a budget trip must be something else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vercel_ai_sdk_works_unchanged_and_does_not_retry_a_budget_trip() {
    if let Some(node) = client_program("AGENTRY_TEST_NODE", "node.sh") {
        run_client(node, "node_client/ai_sdk.mjs", 2).await;
    }
}

/// The official `openai` npm package.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_node_client_works_unchanged() {
    if let Some(node) = client_program("AGENTRY_TEST_NODE", "node.sh") {
        run_client(node, "node_client/openai_sdk.mjs", 2).await;
    }
}
