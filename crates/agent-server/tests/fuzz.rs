//! Fuzzing the HTTP API and the server's configuration.
//!
//! Generated request bodies (valid bodies of every endpoint mutated at any JSON node, arbitrary
//! bytes, invalid UTF-8, deep nesting), paths, query strings, content types and keys go
//! through the real router served on loopback, and generated `[server]` tables through
//! `ServerConfig::from_toml`. The properties: the server never drops a connection (a handler
//! panic would), never answers 500, every error is a JSON `{"error": {...}}` with a 4xx status,
//! every success is well-formed (JSON, or SSE whose events are JSON), and the server still
//! serves afterwards. Cases per property: `AGENTRY_FUZZ_CASES` (see docs/reliability.md).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;
use std::time::Duration;

use agent_server::{ServerBuilder, ServerConfig, StoreConfig, serve};
use agentry_fuzz_support::{JsonEdit, apply, config, edge_numbers};
use proptest::prelude::*;
use serde_json::{Value, json};

const ACME: &str = "key-acme-test-0001";
const GLOBEX: &str = "key-globex-test-01";

/// The demo model, two tenants, the calculator and clock; a rate limit, a session quota and a
/// failed-authentication limit no fuzz run reaches, so the cases test the handlers rather than
/// the limiters (which have tests of their own).
const SERVER: &str = r#"
[server]
tools = ["calculator", "clock"]

[server.limits]
requests_per_minute = 100000000

[server.quotas]
max_sessions = 100000000

[server.auth]
max_failures = 100000000

[[server.models]]
name = "demo"
provider = "replay"
recording = "anthropic"

[[server.tenants]]
name = "acme"
api_keys = ["key-acme-test-0001"]

[[server.tenants]]
name = "globex"
api_keys = ["key-globex-test-01"]
"#;

/// One server for the whole test process, on its own runtime.
struct Fixture {
    runtime: tokio::runtime::Runtime,
    url: String,
    client: reqwest::Client,
    /// A client without a connection pool: each health check is a new connection, so it
    /// proves the server still accepts and serves (and never inherits a connection the
    /// server closed after answering before reading a body).
    fresh: reqwest::Client,
    _dir: tempfile::TempDir,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut config = ServerConfig::from_toml(SERVER).unwrap();
        if let StoreConfig::Sqlite { path } = &mut config.store {
            *path = dir.path().join("sessions.db");
        }
        let url = runtime.block_on(async {
            let state = ServerBuilder::new(config).build().await.unwrap();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            tokio::spawn(async move {
                serve(listener, state, std::future::pending::<()>())
                    .await
                    .unwrap();
            });
            url
        });
        // No connection pool for the cases either: a case the server answers before reading
        // its body (a 401, a 413) has its connection closed, and a pooled client could send
        // the next case on it before noticing (seen in CI: "no response: error sending
        // request" for a case that passes on a connection of its own).
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        let fresh = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        Fixture {
            runtime,
            url,
            client,
            fresh,
            _dir: dir,
        }
    })
}

/// A random JSON value, small, with the edge cases handlers trip on.
fn json_value() -> BoxedStrategy<Value> {
    agentry_fuzz_support::json_value(
        {
            let mut numbers = edge_numbers();
            numbers.push(json!(1_000_000_000));
            numbers
        },
        vec![
            "",
            " ",
            "demo",
            "user",
            "assistant",
            "system",
            "tool",
            "developer",
            "function",
            "text",
            "image_url",
            "calculator",
            "clock",
            "read_file",
            "../../etc/passwd",
            "sess_00000000000000000000000000000000",
            "json_schema",
            "json_object",
            "auto",
            "none",
            "required",
            "object",
            "string",
            "\u{0}",
            "é",
            "\u{202e}",
        ],
        ".{0,16}",
        "[a-z_]{1,10}",
    )
}

fn json_edit() -> BoxedStrategy<JsonEdit> {
    agentry_fuzz_support::json_edit(
        vec![
            "model",
            "messages",
            "message",
            "role",
            "content",
            "tools",
            "tool_choice",
            "tool_results",
            "tool_call_id",
            "is_error",
            "approvals",
            "call_id",
            "approved",
            "context",
            "options",
            "settings",
            "system",
            "remote_tools",
            "output_schema",
            "max_iterations",
            "token_budget",
            "max_cost_usd",
            "parallel_tools",
            "temperature",
            "max_output_tokens",
            "max_tokens",
            "stream",
            "stream_options",
            "response_format",
            "n",
            "stop",
            "seed",
            "top_p",
            "user",
            "tool_calls",
            "name",
            "arguments",
            "parameters",
            "function",
            "type",
            "text",
            "image_url",
            "url",
            "detail",
        ],
        "[a-z_]{1,10}",
        json_value(),
    )
}

/// What a request is aimed at.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Endpoint {
    CreateSession,
    Execute,
    ChatCompletions,
    UiChat,
    AgUi,
    Responses,
}

/// Valid bodies of each endpoint: the starting points of the mutations.
fn templates(endpoint: Endpoint) -> Vec<Value> {
    let context = json!({
        "model": "demo",
        "system": "Be brief.",
        "tools": ["calculator", "clock"],
        "remote_tools": [{"name": "get_weather", "description": "Weather.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "options": {"max_iterations": 3, "max_cost_usd": 0.5, "parallel_tools": true},
        "settings": {"temperature": 0.5, "max_output_tokens": 256},
    });
    match endpoint {
        Endpoint::CreateSession => vec![
            context.clone(),
            json!({"model": "demo", "output_schema": {"type": "object",
                "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}),
            json!({"model": "demo", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
        ],
        Endpoint::Execute => vec![
            json!({"message": "Weather in Lisbon?", "context": context}),
            json!({"message": {"role": "user", "content": [{"type": "text", "text": "hi"}]}, "context": {"model": "demo"}}),
            json!({"tool_results": [{"tool_call_id": "call_1", "content": "sunny", "is_error": false}]}),
            json!({"approvals": [{"call_id": "call_1", "approved": false, "reason": "no"}]}),
        ],
        Endpoint::ChatCompletions => vec![
            json!({"model": "demo", "messages": [{"role": "user", "content": "Weather in Lisbon?"}],
                "tools": [{"type": "function", "function": {"name": "get_weather",
                    "parameters": {"type": "object"}}}]}),
            json!({"model": "demo", "stream": true, "stream_options": {"include_usage": true},
                "messages": [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
            json!({"model": "demo", "messages": [{"role": "user", "content": "x"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
                "temperature": 0.2, "max_tokens": 64, "tool_choice": "auto"}),
        ],
        Endpoint::UiChat => vec![
            json!({"id": "chat_1", "trigger": "submit-message", "session": context,
                "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}),
            json!({"id": "chat_1", "messages": [{"id": "a1", "role": "assistant", "parts": [
                {"type": "tool-get_weather", "toolCallId": "c1", "state": "output-available",
                 "input": {"city": "Oslo"}, "output": {"temp_c": 4}},
                {"type": "tool-clock", "toolCallId": "c2", "state": "approval-responded",
                 "input": {}, "approval": {"id": "c2", "approved": false, "reason": "no"}}]}]}),
        ],
        Endpoint::AgUi => vec![
            json!({"threadId": "thread_1", "runId": "run_1", "state": {}, "context": [
                {"description": "city", "value": "Oslo"}], "forwardedProps": {"session": context},
                "tools": [{"name": "get_weather", "description": "Weather.",
                    "parameters": {"type": "object"}}],
                "messages": [{"id": "u1", "role": "user", "content": "Weather?"}]}),
            json!({"threadId": "thread_1", "runId": "run_2", "messages": [
                {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "sunny"}],
                "resume": [{"interruptId": "c2", "status": "cancelled", "payload": {"reason": "no"}}]}),
        ],
        Endpoint::Responses => vec![
            json!({"model": "demo", "instructions": "Be brief.", "input": "Weather in Lisbon?",
                "tools": [{"type": "function", "name": "get_weather",
                    "parameters": {"type": "object"}}], "store": false}),
            json!({"model": "demo", "stream": true, "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "x"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "y"}]},
                {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"}],
                "text": {"format": {"type": "json_schema", "name": "a", "schema": {"type": "object"}}},
                "reasoning": {"effort": "low"}, "tool_choice": "auto", "include": []}),
            json!({"model": "demo", "previous_response_id": "resp_00000000000000000000000000000000",
                "input": [{"type": "item_reference", "id": "msg_00000000000000000000000000000000_1"}]}),
        ],
    }
}

/// A request body: a mutated valid body, arbitrary bytes, invalid UTF-8 inside a valid
/// document, or deep nesting.
fn body(endpoint: Endpoint) -> impl Strategy<Value = Vec<u8>> {
    let templates = templates(endpoint);
    let mutated = (
        prop::sample::select(templates.clone()),
        prop::collection::vec(json_edit(), 0..5),
    )
        .prop_map(|(mut value, edits)| {
            for edit in &edits {
                apply(&mut value, edit);
            }
            serde_json::to_vec(&value).unwrap()
        });
    let bytes = prop::collection::vec(
        prop_oneof![
            prop::sample::select(b"{}[]\",:\\ 0123456789eE+-.nultrfas".to_vec()),
            any::<u8>()
        ],
        0..256,
    );
    let invalid_utf8 = (
        prop::sample::select(templates),
        any::<prop::sample::Index>(),
        prop::collection::vec(0x80u8..=0xFF, 1..4),
    )
        .prop_map(|(value, at, bad)| {
            let mut text = serde_json::to_vec(&value).unwrap();
            let quotes: Vec<usize> = text
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'"')
                .map(|(i, _)| i + 1)
                .collect();
            let at = *at.get(&quotes);
            text.splice(at..at, bad);
            text
        });
    let nested =
        (1usize..200_000, any::<bool>(), any::<bool>()).prop_map(|(depth, array, closed)| {
            let (open, close) = if array { ("[", "]") } else { ("{\"a\":", "}") };
            let mut text = open.repeat(depth);
            text.push('1');
            if closed {
                text.push_str(&close.repeat(depth));
            }
            text.into_bytes()
        });
    prop_oneof![8 => mutated, 2 => bytes, 1 => invalid_utf8, 1 => nested]
}

/// A session id in a path: the caller's own names, and hostile ones.
fn session_id() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "s1",
            "s2",
            "sess_00000000000000000000000000000000",
            "..",
            "%2e%2e%2f%2e%2e",
            "..%2F..%2Fetc%2Fpasswd",
            "%00",
            "a%20b",
            "%FF%FE",
            "x".repeat(300).leak(),
        ])
        .prop_map(str::to_owned),
        "[a-zA-Z0-9_.%-]{1,40}",
    ]
}

fn key() -> impl Strategy<Value = Option<&'static str>> {
    prop_oneof![
        8 => Just(Some(ACME)),
        1 => Just(Some(GLOBEX)),
        1 => Just(None),
        1 => Just(Some("key-wrong-wrong-wrong")),
    ]
}

fn content_type() -> impl Strategy<Value = Option<&'static str>> {
    prop_oneof![
        8 => Just(Some("application/json")),
        1 => Just(None),
        1 => prop::sample::select(vec![Some("text/plain"), Some("application/json; charset=latin1"), Some("multipart/form-data")]),
    ]
}

/// One request: method, path (with query), body.
#[derive(Debug, Clone)]
struct Request {
    method: reqwest::Method,
    path: String,
    body: Option<Vec<u8>>,
    key: Option<&'static str>,
    content_type: Option<&'static str>,
}

fn request() -> impl Strategy<Value = Request> {
    let query = "[a-z_=&%0-9.:-]{0,40}";
    let post = |endpoint: Endpoint| {
        (session_id(), body(endpoint), key(), content_type()).prop_map(
            move |(id, body, key, content_type)| {
                let path = match endpoint {
                    Endpoint::CreateSession => "/v1/sessions".to_owned(),
                    Endpoint::Execute => format!("/v1/sessions/{id}/execute"),
                    Endpoint::ChatCompletions => "/v1/chat/completions".to_owned(),
                    Endpoint::UiChat => "/v1/ui/chat".to_owned(),
                    Endpoint::AgUi => "/v1/ag-ui".to_owned(),
                    Endpoint::Responses => "/v1/responses".to_owned(),
                };
                Request {
                    method: reqwest::Method::POST,
                    path,
                    body: Some(body),
                    key,
                    content_type,
                }
            },
        )
    };
    let get = (
        prop::sample::select(vec![
            "/v1/sessions?",
            "/v1/usage?",
            "/v1/models/",
            "/v1/sessions/",
            "/v1/models?",
            "/v1/responses/",
        ]),
        prop_oneof![
            session_id(),
            query.prop_map(|q| q),
            Just("from=2026-11-01&to=2026-12-01&group_by=day".to_owned()),
            Just("limit=0".to_owned()),
            Just("limit=18446744073709551616&after=sess_x".to_owned()),
        ],
        key(),
    )
        .prop_map(|(base, tail, key)| Request {
            method: reqwest::Method::GET,
            path: format!("{base}{tail}"),
            body: None,
            key,
            content_type: None,
        });
    let delete = (session_id(), key()).prop_map(|(id, key)| Request {
        method: reqwest::Method::DELETE,
        path: format!("/v1/sessions/{id}"),
        body: None,
        key,
        content_type: None,
    });
    prop_oneof![
        3 => post(Endpoint::CreateSession),
        4 => post(Endpoint::Execute),
        4 => post(Endpoint::ChatCompletions),
        2 => post(Endpoint::UiChat),
        2 => post(Endpoint::AgUi),
        3 => post(Endpoint::Responses),
        2 => get,
        1 => delete,
    ]
}

/// Sends `request` and checks the answer; then checks the server still serves.
fn check(request: &Request) -> Result<(), TestCaseError> {
    let fixture = fixture();
    let outcome = fixture.runtime.block_on(async {
        let mut builder = fixture.client.request(
            request.method.clone(),
            format!("{}{}", fixture.url, request.path),
        );
        if let Some(key) = request.key {
            builder = builder.bearer_auth(key);
        }
        if let Some(content_type) = request.content_type {
            builder = builder.header("content-type", content_type);
        }
        if let Some(body) = &request.body {
            builder = builder.body(body.clone());
        }
        let response = builder
            .send()
            .await
            .map_err(|e| format!("no response: {e}"))?;
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|value| value.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let text = response
            .text()
            .await
            .map_err(|e| format!("body cut ({status}): {e}"))?;
        let health = fixture
            .fresh
            .get(format!("{}/healthz", fixture.url))
            .send()
            .await
            .map_err(|e| format!("healthz after {status}: {e:?}"))?
            .status()
            .as_u16();
        Ok::<_, String>((status, content_type, text, health))
    });
    let (status, content_type, text, health) = outcome.map_err(TestCaseError::fail)?;
    prop_assert_eq!(health, 200, "the server stopped serving");
    prop_assert!(
        status < 500,
        "{} {}: {} {}",
        request.method,
        request.path,
        status,
        text
    );
    if status >= 400 {
        let error: Value = serde_json::from_str(&text)
            .map_err(|e| TestCaseError::fail(format!("{status} not JSON ({e}): {text}")))?;
        prop_assert!(
            error["error"]["message"].is_string(),
            "{}: {}",
            status,
            text
        );
        prop_assert!(error["error"]["type"].is_string(), "{}: {}", status, text);
    } else if content_type.starts_with("text/event-stream") {
        for frame in text.split("\n\n") {
            for line in frame.lines() {
                if let Some(data) = line.strip_prefix("data: ")
                    && data != "[DONE]"
                {
                    prop_assert!(
                        serde_json::from_str::<Value>(data).is_ok(),
                        "SSE data not JSON: {}",
                        data
                    );
                }
            }
        }
    } else if content_type.starts_with("application/json") {
        prop_assert!(serde_json::from_str::<Value>(&text).is_ok(), "{}", text);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(96))]

    /// Generated requests to every endpoint through the real router on loopback.
    #[test]
    fn fuzz_http_api(request in request()) {
        check(&request)?;
    }
}

/// The server's configuration as text, with one line changed: a value replaced by another
/// (wrong type, out of range, hostile), the line dropped or duplicated, or bytes inserted.
#[derive(Debug, Clone)]
enum ConfigEdit {
    Value(prop::sample::Index, &'static str),
    Drop(prop::sample::Index),
    Duplicate(prop::sample::Index),
    Insert(prop::sample::Index, String),
}

fn config_edit() -> impl Strategy<Value = ConfigEdit> {
    let values = prop::sample::select(vec![
        "0",
        "-1",
        "18446744073709551615",
        "9223372036854775807",
        "1e400",
        "nan",
        "inf",
        "-inf",
        "0.0",
        "-0.0",
        "true",
        "\"\"",
        "\" \"",
        "\"x\"",
        "[]",
        "{}",
        "[\"\"]",
        "[1, \"a\"]",
        "\"../../../../etc/passwd\"",
        "\"256.0.0.1:99999\"",
        "\"[::1]:0\"",
        "1979-05-27T07:32:00Z",
        "\"sqlite\"",
        "\"postgres\"",
        "\"replay\"",
        "\"openai\"",
        "\"nope\"",
        "\"calculator\"",
        "\"read_file\"",
        "\"key\"",
        "'''multi\nline'''",
        "\"\\u0000\"",
    ]);
    let index = any::<prop::sample::Index>;
    prop_oneof![
        4 => (index(), values).prop_map(|(at, v)| ConfigEdit::Value(at, v)),
        1 => index().prop_map(ConfigEdit::Drop),
        1 => index().prop_map(ConfigEdit::Duplicate),
        1 => (index(), prop_oneof![
            Just("[server.caps]".to_owned()),
            Just("[[server.models]]".to_owned()),
            Just("[[server.tenants]]".to_owned()),
            Just("[server.store]".to_owned()),
            Just("[server.mcp]".to_owned()),
            "[a-z_]{1,20} = [0-9]{1,3}",
            ".{0,20}",
        ]).prop_map(|(at, line)| ConfigEdit::Insert(at, line)),
    ]
}

fn edit_config(text: &str, edit: &ConfigEdit) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    match edit {
        ConfigEdit::Value(at, value) => {
            let assignments: Vec<usize> = lines
                .iter()
                .enumerate()
                .filter(|(_, line)| line.contains(" = ") && !line.trim_start().starts_with('#'))
                .map(|(i, _)| i)
                .collect();
            if !assignments.is_empty() {
                let line = &mut lines[*at.get(&assignments)];
                let key = line.split(" = ").next().unwrap_or("").to_owned();
                *line = format!("{key} = {value}");
            }
        }
        ConfigEdit::Drop(at) => {
            if !lines.is_empty() {
                lines.remove(at.index(lines.len()));
            }
        }
        ConfigEdit::Duplicate(at) => {
            if !lines.is_empty() {
                let i = at.index(lines.len());
                let line = lines[i].clone();
                lines.insert(i, line);
            }
        }
        ConfigEdit::Insert(at, line) => {
            let i = at.index(lines.len() + 1);
            lines.insert(i, line.clone());
        }
    }
    lines.join("\n")
}

/// The documented example configuration and a fuller one: the seeds of the config edits.
fn config_seeds() -> Vec<String> {
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/server.example.toml"
    ))
    .unwrap();
    let fuller = format!(
        "{example}\n[server.caps]\nmax_iterations = 5\ntoken_budget = 100000\n\
         [server.quotas]\nmax_sessions = 10\nmax_session_bytes = 100000\n\
         [[server.models]]\nname = \"gpt\"\nprovider = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:1\"\nmodel = \"m\"\n\
         [[server.tenants]]\nname = \"globex\"\napi_keys = [\"key-globex-test-01\"]\nmax_usd_per_day = 1.5\n"
    );
    vec![example, fuller]
}

proptest! {
    #![proptest_config(config(512))]

    /// Edited configurations load or fail with `Error::Config`; never a panic.
    #[test]
    fn fuzz_server_config(
        seed in any::<prop::sample::Index>(),
        edits in prop::collection::vec(config_edit(), 1..5),
    ) {
        let seeds = config_seeds();
        let mut text = seed.get(&seeds).clone();
        for edit in &edits {
            text = edit_config(&text, edit);
        }
        match ServerConfig::from_toml(&text) {
            Ok(config) => prop_assert!(config.validate().is_ok()),
            Err(error) => prop_assert!(matches!(error, agent_server::Error::Config(_)), "{error:?}"),
        }
    }

    /// Arbitrary text as a configuration.
    #[test]
    fn fuzz_server_config_arbitrary_text(text in "(\\PC|\n|\\[|\\]|=|\"){0,200}") {
        let _ = ServerConfig::from_toml(&format!("[server]\n{text}"));
        let _ = ServerConfig::from_toml(&text);
    }
}

/// Found by `fuzz_http_api`: a path id percent-encoding bytes that are not UTF-8 was a
/// plain-text 400 from axum's extractor (`Invalid URL: Invalid UTF-8 in \`id\``), not the
/// server's JSON error.
#[test]
fn regression_non_utf8_path_id_is_a_json_error() {
    let requests = [
        (
            reqwest::Method::POST,
            "/v1/sessions/%FF%FE/execute",
            Some(br#"{"message":"hi"}"#.to_vec()),
        ),
        (reqwest::Method::GET, "/v1/sessions/%FF", None),
        (reqwest::Method::DELETE, "/v1/sessions/a%C3", None),
        (reqwest::Method::GET, "/v1/models/%FF%FE", None),
    ];
    for (method, path, body) in requests {
        let request = Request {
            method: method.clone(),
            path: path.to_owned(),
            body,
            key: Some(ACME),
            content_type: Some("application/json"),
        };
        check(&request).unwrap();
        let fixture = fixture();
        let status = fixture.runtime.block_on(async {
            fixture
                .client
                .request(method, format!("{}{path}", fixture.url))
                .bearer_auth(ACME)
                .header("content-type", "application/json")
                .body("{\"message\":\"hi\"}")
                .send()
                .await
                .unwrap()
                .status()
        });
        assert_eq!(status, 400, "{path}");
    }
}
