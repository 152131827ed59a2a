//! `/mcp`: the server's tools over MCP (streamable HTTP) for its tenants, with their keys,
//! permissions and limits.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::support::{CONFIG, TestServer, slow_tool};

const ACME: &str = "key-acme-test-0001";
const GLOBEX: &str = "key-globex-test-01";

struct Reply {
    status: u16,
    session: Option<String>,
    body: String,
}

impl Reply {
    /// The JSON-RPC message: the body, or the SSE `data:` line carrying an id.
    fn message(&self) -> Value {
        if let Ok(value) = serde_json::from_str::<Value>(&self.body) {
            return value;
        }
        self.body
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|value| value.get("id").is_some())
            .unwrap_or_else(|| panic!("no JSON-RPC message in {:?}", self.body))
    }
}

async fn post(server: &TestServer, key: &str, session: Option<&str>, body: &Value) -> Reply {
    let mut request = server
        .post("/mcp", key)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-06-18");
    }
    let response = request.send().await.unwrap();
    Reply {
        status: response.status().as_u16(),
        session: response
            .headers()
            .get("mcp-session-id")
            .map(|value| value.to_str().unwrap().to_owned()),
        body: response.text().await.unwrap(),
    }
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}})
}

async fn open(server: &TestServer, key: &str) -> String {
    let reply = post(server, key, None, &initialize()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let session = reply.session.expect("a session id");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        post(server, key, Some(&session), &initialized).await.status,
        202
    );
    session
}

async fn tool_names(server: &TestServer, key: &str, session: &str) -> Vec<String> {
    let list = post(
        server,
        key,
        Some(session),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await
    .message();
    list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect()
}

async fn call(server: &TestServer, key: &str, session: &str, name: &str, args: Value) -> Value {
    // Ids are unique per session: a repeated id would stand for a request still running.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(100);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": args}});
    post(server, key, Some(session), &request).await.message()
}

fn weather(seen: &Arc<std::sync::Mutex<Vec<String>>>) -> agent_tools::Tool {
    let record = Arc::clone(seen);
    agent_tools::Tool::from_json_fn(
        "get_weather",
        "Weather, for tenants allowed to ask.",
        json!({"type": "object"}),
        move |_args, ctx| {
            let record = Arc::clone(&record);
            async move {
                record
                    .lock()
                    .unwrap()
                    .push(ctx.caller().tenant().unwrap_or("?").to_owned());
                Ok(json!({"temp_c": 19}))
            }
        },
    )
    .requires_permission("weather")
}

#[tokio::test]
async fn each_tenant_sees_and_calls_its_tools_as_itself() {
    let config = CONFIG.replace(
        "api_keys = [\"key-acme-test-0001\"]",
        "api_keys = [\"key-acme-test-0001\"]\npermissions = [\"weather\"]",
    );
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let server = TestServer::with(&config, vec![weather(&seen)]).await;
    let acme = open(&server, ACME).await;
    let globex = open(&server, GLOBEX).await;
    assert_eq!(
        tool_names(&server, ACME, &acme).await,
        ["calculator", "clock", "get_weather"]
    );
    assert_eq!(
        tool_names(&server, GLOBEX, &globex).await,
        ["calculator", "clock"]
    );

    let sunny = call(&server, ACME, &acme, "get_weather", json!({})).await;
    assert_eq!(sunny["result"]["structuredContent"], json!({"temp_c": 19}));
    assert_eq!(*seen.lock().unwrap(), ["acme"]);
    let sum = call(
        &server,
        GLOBEX,
        &globex,
        "calculator",
        json!({"expression": "2+3"}),
    )
    .await;
    assert_eq!(sum["result"]["isError"], false, "{sum}");

    // globex lacks the permission: for it the tool does not exist.
    let hidden = call(&server, GLOBEX, &globex, "get_weather", json!({})).await;
    let absent = call(&server, GLOBEX, &globex, "get_rain", json!({})).await;
    assert_eq!(hidden["error"]["code"], absent["error"]["code"]);
    assert_eq!(
        hidden["error"]["message"]
            .as_str()
            .unwrap()
            .replace("get_weather", "X"),
        absent["error"]["message"]
            .as_str()
            .unwrap()
            .replace("get_rain", "X"),
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
    // Nor can it use acme's session: for it, that session does not exist.
    let request = json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call",
        "params": {"name": "get_weather", "arguments": {}}});
    let borrowed = post(&server, GLOBEX, Some(&acme), &request).await;
    assert_eq!(borrowed.status, 404, "{}", borrowed.body);

    // MCP calls count in the tool metric like the loop's, by tenant.
    let metrics = server
        .client
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "agentry_tool_calls_total{tenant=\"acme\",tool=\"get_weather\",outcome=\"ok\"} 1",
        "agentry_tool_calls_total{tenant=\"globex\",tool=\"calculator\",outcome=\"ok\"} 1",
        "agentry_http_requests_total{tenant=\"acme\",route=\"/mcp\",status=\"200\"}",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn bad_keys_are_refused_and_count_as_failed_authentications() {
    let config = format!("{CONFIG}\n[server.auth]\nmax_failures = 2\n");
    let server = TestServer::with(&config, Vec::new()).await;
    let first = post(&server, "key-nobody-000001", None, &initialize()).await;
    assert_eq!(first.status, 401);
    let second = post(&server, "key-nobody-000001", None, &initialize()).await;
    assert_eq!(second.status, 401);
    // The address is now over its limit: even a good key waits.
    let blocked = post(&server, ACME, None, &initialize()).await;
    assert_eq!(blocked.status, 429, "{}", blocked.body);
    server.shutdown().await;
}

#[tokio::test]
async fn calls_share_the_tenants_concurrency_gate() {
    let config = CONFIG.replace(
        "api_keys = [\"key-acme-test-0001\"]",
        "api_keys = [\"key-acme-test-0001\"]\nconcurrent_executes = 1",
    );
    let started = Arc::new(tokio::sync::Notify::new());
    let server = Arc::new(
        TestServer::with(&config, vec![slow_tool("slow", 1500, Arc::clone(&started))]).await,
    );
    let session = open(&server, ACME).await;
    let first = {
        let server = Arc::clone(&server);
        let session = session.clone();
        tokio::spawn(async move { call(&server, ACME, &session, "slow", json!({})).await })
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), started.notified())
        .await
        .expect("the slow call started");
    let second = call(
        &server,
        ACME,
        &session,
        "calculator",
        json!({"expression": "1+1"}),
    )
    .await;
    assert_eq!(second["result"]["isError"], true, "{second}");
    assert!(
        second.to_string().contains("tenant `acme` has as many"),
        "{second}"
    );
    // Another tenant is not held up by acme's.
    let globex = open(&server, GLOBEX).await;
    let other = call(
        &server,
        GLOBEX,
        &globex,
        "calculator",
        json!({"expression": "1+1"}),
    )
    .await;
    assert_eq!(other["result"]["isError"], false, "{other}");
    let first = tokio::time::timeout(std::time::Duration::from_secs(30), first)
        .await
        .expect("the slow call answered")
        .unwrap();
    assert_eq!(
        first["result"]["structuredContent"],
        json!({"waited_ms": 1500})
    );
    Arc::into_inner(server).unwrap().shutdown().await;
}

#[tokio::test]
async fn mcp_sessions_and_bodies_are_bounded_by_the_configuration() {
    let config = format!(
        "{}\n[server.mcp]\nmax_sessions = 2\nmax_sessions_per_tenant = 1\n",
        CONFIG.replace("[server]\n", "[server]\nmax_body_bytes = 2048\n")
    );
    let server = TestServer::with(&config, Vec::new()).await;
    let acme = open(&server, ACME).await;
    let again = post(&server, ACME, None, &initialize()).await.message();
    assert!(again.to_string().contains("sessions open"), "{again}");
    let _globex = open(&server, GLOBEX).await;
    // Both places are taken.
    let full = post(&server, "key-acme-test-0001", None, &initialize()).await;
    assert_eq!(full.status, 503, "{}", full.body);
    let big = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "calculator", "arguments": {"expression": "1".repeat(4096)}}});
    assert_eq!(post(&server, ACME, Some(&acme), &big).await.status, 413);
    server.shutdown().await;
}

#[tokio::test]
async fn a_call_does_not_wait_for_delayed_acks() {
    let server = TestServer::start().await;
    let session = open(&server, ACME).await;
    // Warm up the connection pool.
    call(&server, ACME, &session, "clock", json!({})).await;
    let calls = 30;
    let started = std::time::Instant::now();
    for _ in 0..calls {
        let answer = call(
            &server,
            ACME,
            &session,
            "calculator",
            json!({"expression": "1+1"}),
        )
        .await;
        assert_eq!(answer["result"]["isError"], false, "{answer}");
    }
    let elapsed = started.elapsed();
    // Without TCP_NODELAY on accepted sockets each SSE answer stalled ~25-40 ms on the
    // client's delayed ACK (30 calls: ~800 ms); with it, a call takes about a millisecond.
    assert!(
        elapsed < std::time::Duration::from_millis(400),
        "{calls} calls took {elapsed:?}"
    );
    server.shutdown().await;
}

/// The official Python MCP client (PyPI `mcp`, agent-mcp's test script) against `/mcp`: each
/// tenant's key lists and calls its own tools; a key that is no one's gets nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_mcp_sdk_sees_each_tenants_tools() {
    let Some(python) = crate::openai::client_program("AGENTRY_TEST_MCP_PYTHON", "python.sh") else {
        return;
    };
    let config = CONFIG.replace(
        "api_keys = [\"key-acme-test-0001\"]",
        "api_keys = [\"key-acme-test-0001\"]\npermissions = [\"weather\"]",
    );
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let server = TestServer::with(&config, vec![weather(&seen)]).await;
    let url = format!("{}/mcp", server.url);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../agent-mcp/tests/mcp_client/client.py"
    );
    let run = |key: &'static str| {
        let plan = json!({"transport": "http", "url": url, "key": key, "steps": [
            {"list": true},
            {"call": "get_weather"},
            {"call": "calculator", "arguments": {"expression": "2^10"}},
        ]});
        tokio::process::Command::new(&python)
            .arg(script)
            .arg(plan.to_string())
            .kill_on_drop(true)
            .output()
    };
    let steps = |output: &std::process::Output| -> Vec<Value> {
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    };
    let limit = std::time::Duration::from_secs(120);
    let acme = tokio::time::timeout(limit, run(ACME))
        .await
        .unwrap()
        .unwrap();
    assert!(
        acme.status.success(),
        "{}",
        String::from_utf8_lossy(&acme.stderr)
    );
    let acme = steps(&acme);
    let names = |step: &Value| -> Vec<String> {
        step["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|tool| tool["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&acme[0]), ["calculator", "clock", "get_weather"]);
    assert_eq!(acme[1]["structuredContent"], json!({"temp_c": 19}));
    assert_eq!(acme[2]["structuredContent"]["result"], 1024);

    let globex = tokio::time::timeout(limit, run(GLOBEX))
        .await
        .unwrap()
        .unwrap();
    assert!(
        globex.status.success(),
        "{}",
        String::from_utf8_lossy(&globex.stderr)
    );
    let globex = steps(&globex);
    assert_eq!(names(&globex[0]), ["calculator", "clock"]);
    assert!(
        globex[1]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool `get_weather`"),
        "{}",
        globex[1]
    );
    assert_eq!(globex[2]["structuredContent"]["result"], 1024);
    assert_eq!(*seen.lock().unwrap(), ["acme"]);

    let nobody = tokio::time::timeout(limit, run("key-nobody-0000001"))
        .await
        .unwrap()
        .unwrap();
    assert!(!nobody.status.success());
    assert!(steps(&nobody).is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn a_drain_closes_open_mcp_streams() {
    let server = TestServer::start().await;
    let session = open(&server, ACME).await;
    // The session's standalone SSE stream (GET) stays open until the server closes it.
    let stream = server
        .get("/mcp", ACME)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let reader = tokio::spawn(async move { stream.text().await });
    let started = std::time::Instant::now();
    server.shutdown().await;
    // Without closing the MCP sessions, the drain waited drain_secs (30) for this stream.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the drain took {:?}",
        started.elapsed()
    );
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), reader).await;
}
