//! The MCP server over streamable HTTP on loopback: bearer keys, per-caller tools, and the
//! bounds a hostile client runs into.

use std::net::SocketAddr;
use std::sync::Arc;

use agent_mcp::server::{BearerKeys, HttpOptions, HttpService, ServerOptions};
use agent_tools::Caller;
use serde_json::{Value, json};

use crate::server::{Seen, registry};

pub(crate) const USER_KEY: &str = "user-key-0123456789";
pub(crate) const ADMIN_KEY: &str = "admin-key-0123456789";

/// Serves the test registry on a loopback port with two keys: `user` and `admin`.
pub(crate) async fn start(http: HttpOptions) -> (SocketAddr, HttpService, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let service = HttpService::new(&registry(&seen), ServerOptions::default(), http)
        .with_authenticator(
            BearerKeys::new()
                .with_key(USER_KEY, Caller::new("user"))
                .with_key(ADMIN_KEY, Caller::new("root").with_permission("admin")),
        );
    let router = axum::Router::new().nest_service("/mcp", service.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (addr, service, seen)
}

pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) session: Option<String>,
    pub(crate) body: String,
}

impl Reply {
    /// The JSON-RPC message in the body (plain JSON or the first SSE `data:` line that is one).
    pub(crate) fn message(&self) -> Value {
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

pub(crate) async fn post(
    addr: SocketAddr,
    key: Option<&str>,
    session: Option<&str>,
    body: &Value,
) -> Reply {
    post_raw(addr, key, session, body.to_string()).await
}

pub(crate) async fn post_raw(
    addr: SocketAddr,
    key: Option<&str>,
    session: Option<&str>,
    body: String,
) -> Reply {
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-06-18");
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let session = response
        .headers()
        .get("mcp-session-id")
        .map(|value| value.to_str().unwrap().to_owned());
    Reply {
        status,
        session,
        body: response.text().await.unwrap(),
    }
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}})
}

/// Opens a session with `key`; its id.
pub(crate) async fn open(addr: SocketAddr, key: &str) -> String {
    let reply = post(addr, Some(key), None, &initialize()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let session = reply.session.clone().expect("a session id");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let ack = post(addr, Some(key), Some(&session), &initialized).await;
    assert_eq!(ack.status, 202, "{}", ack.body);
    session
}

async fn list(addr: SocketAddr, key: &str, session: &str) -> Value {
    let request = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    post(addr, Some(key), Some(session), &request)
        .await
        .message()
}

async fn call(addr: SocketAddr, key: &str, session: &str, name: &str, arguments: Value) -> Value {
    // Ids are unique per session: a repeated id would stand for a request still running.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(100);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}});
    post(addr, Some(key), Some(session), &request)
        .await
        .message()
}

fn names(list: &Value) -> Vec<String> {
    list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_request_without_a_valid_key_is_refused() {
    let (addr, _, _) = start(HttpOptions::default()).await;
    let none = post(addr, None, None, &initialize()).await;
    assert_eq!(none.status, 401);
    let wrong = post(addr, Some("not-a-key-0123456789"), None, &initialize()).await;
    assert_eq!(wrong.status, 401);
}

#[tokio::test]
async fn each_key_sees_and_calls_only_its_callers_tools() {
    let (addr, _, _) = start(HttpOptions::default()).await;
    let user = open(addr, USER_KEY).await;
    let admin = open(addr, ADMIN_KEY).await;
    let user_tools = names(&list(addr, USER_KEY, &user).await);
    let admin_tools = names(&list(addr, ADMIN_KEY, &admin).await);
    assert!(!user_tools.contains(&"secret".to_owned()), "{user_tools:?}");
    assert!(
        admin_tools.contains(&"secret".to_owned()),
        "{admin_tools:?}"
    );

    let echo = call(addr, USER_KEY, &user, "echo", json!({"text": "hi"})).await;
    assert_eq!(echo["result"]["structuredContent"], json!({"echo": "hi"}));
    let secret = call(addr, ADMIN_KEY, &admin, "secret", json!({})).await;
    assert_eq!(secret["result"]["content"][0]["text"], "the secret");

    // Hidden and absent answer alike.
    let hidden = call(addr, USER_KEY, &user, "secret", json!({})).await;
    let absent = call(addr, USER_KEY, &user, "nothing", json!({})).await;
    assert_eq!(hidden["error"]["code"], absent["error"]["code"]);
    assert_eq!(
        hidden["error"]["message"]
            .as_str()
            .unwrap()
            .replace("secret", "X"),
        absent["error"]["message"]
            .as_str()
            .unwrap()
            .replace("nothing", "X")
    );

    // A session answers only the key that opened it: to another, it does not exist, for a
    // call, its event stream (GET) or closing it (DELETE).
    let request = json!({"jsonrpc": "2.0", "id": 50, "method": "tools/call",
        "params": {"name": "secret", "arguments": {}}});
    let borrowed = post(addr, Some(USER_KEY), Some(&admin), &request).await;
    assert_eq!(borrowed.status, 404, "{}", borrowed.body);
    let unknown = post(addr, Some(USER_KEY), Some("no-such-session"), &request).await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(borrowed.body, unknown.body);
    let client = reqwest::Client::new();
    let stream = client
        .get(format!("http://{addr}/mcp"))
        .bearer_auth(USER_KEY)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 404);
    let closed = client
        .delete(format!("http://{addr}/mcp"))
        .bearer_auth(USER_KEY)
        .header("mcp-session-id", &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(closed.status(), 404);
    // The owner's session is untouched.
    let still = call(addr, ADMIN_KEY, &admin, "secret", json!({})).await;
    assert_eq!(still["result"]["content"][0]["text"], "the secret");
}

#[tokio::test]
async fn sessions_are_capped_and_a_closed_one_frees_its_place() {
    let (addr, service, _) = start(HttpOptions::default().with_max_sessions(2)).await;
    let first = open(addr, USER_KEY).await;
    let _second = open(addr, ADMIN_KEY).await;
    assert_eq!(service.live_sessions(), 2);
    let third = post(addr, Some(USER_KEY), None, &initialize()).await;
    assert_eq!(third.status, 503, "{}", third.body);

    let closed = reqwest::Client::new()
        .delete(format!("http://{addr}/mcp"))
        .bearer_auth(USER_KEY)
        .header("mcp-session-id", &first)
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    let mut reopened = false;
    for _ in 0..100 {
        if service.live_sessions() < 2 {
            reopened = post(addr, Some(USER_KEY), None, &initialize()).await.status == 200;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(reopened);
}

#[tokio::test]
async fn one_caller_cannot_take_every_session() {
    let (addr, service, _) = start(HttpOptions::default().with_max_sessions_per_caller(1)).await;
    let _mine = open(addr, USER_KEY).await;
    let again = post(addr, Some(USER_KEY), None, &initialize()).await;
    let message = again.message();
    assert!(
        message["error"]["message"]
            .as_str()
            .is_some_and(|text| text.contains("sessions open")),
        "{message}"
    );
    // The refused session does not linger: its place under `max_sessions` is given back.
    let mut released = false;
    for _ in 0..100 {
        if service.live_sessions() == 1 {
            released = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(released, "{} sessions live", service.live_sessions());
    // Another caller still gets in.
    open(addr, ADMIN_KEY).await;
}

#[tokio::test]
async fn an_oversized_body_is_refused() {
    let (addr, _, _) = start(HttpOptions::default().with_max_body_bytes(1024)).await;
    let session = open(addr, USER_KEY).await;
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x".repeat(4096)}}});
    let reply = post(addr, Some(USER_KEY), Some(&session), &body).await;
    assert_eq!(reply.status, 413, "{}", reply.body);
}

#[tokio::test]
async fn idle_sessions_expire() {
    let (addr, service, _) =
        start(HttpOptions::default().with_session_idle(std::time::Duration::from_millis(200)))
            .await;
    open(addr, USER_KEY).await;
    assert_eq!(service.live_sessions(), 1);
    let mut expired = false;
    for _ in 0..200 {
        if service.live_sessions() == 0 {
            expired = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(expired, "the idle session was not closed");
}
