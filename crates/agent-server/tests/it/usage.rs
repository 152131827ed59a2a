//! Accounting rows per tenant and `GET /v1/usage`, over real HTTP, on both stores: a tenant
//! sees its own model calls and cost, never another tenant's. Accounting is on by default
//! (the configuration below does not name it); `accounting = false` turns it off.

use std::time::{SystemTime, UNIX_EPOCH};

use agent_server::{ServerBuilder, ServerConfig, StoreConfig, serve};
use serde_json::{Value, json};

use crate::support::parse_sse;

struct Server {
    url: String,
    client: reqwest::Client,
}

impl Server {
    async fn start(config: ServerConfig) -> Self {
        let state = ServerBuilder::new(config).build().await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { serve(listener, state, std::future::pending()).await });
        Self {
            url,
            client: reqwest::Client::new(),
        }
    }

    /// The demo's first round; its events.
    async fn execute(&self, key: &str, id: &str) -> Vec<Value> {
        let response = self
            .client
            .post(format!("{}/v1/sessions/{id}/execute", self.url))
            .bearer_auth(key)
            .json(&json!({
                "message": "Weather in Lisbon and Oslo?",
                "context": {"model": "demo", "tools": ["clock"], "remote_tools": [
                    {"name": "get_weather", "description": "Weather for a city.",
                     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
                ]}
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        parse_sse(&response.text().await.unwrap())
    }

    async fn chat(&self, key: &str) -> Value {
        let response = self
            .client
            .post(format!("{}/v1/chat/completions", self.url))
            .bearer_auth(key)
            .json(&json!({"model": "demo", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }

    async fn usage(&self, key: &str, query: &str) -> (u16, Value) {
        let response = self
            .client
            .get(format!("{}/v1/usage?{query}", self.url))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }
}

fn config(acme: &str, globex: &str, store: StoreConfig) -> ServerConfig {
    let text = format!(
        r#"
        [server]
        tools = ["calculator", "clock"]
        [[server.models]]
        name = "demo"
        provider = "replay"
        recording = "anthropic"
        [[server.tenants]]
        name = "{acme}"
        api_keys = ["key-acme-usage-001"]
        [[server.tenants]]
        name = "{globex}"
        api_keys = ["key-globex-usage-1"]
        "#
    );
    let mut config = ServerConfig::from_toml(&text).unwrap();
    config.store = store;
    config
}

/// Input + output tokens of the assistant `message_end` events.
fn tokens(events: &[Value]) -> (u64, u64, u64) {
    let mut calls = 0;
    let (mut input, mut output) = (0, 0);
    for event in events {
        if event["type"] == "message_end" && event["message"]["role"] == "assistant" {
            calls += 1;
            input += event["message"]["usage"]["input_tokens"].as_u64().unwrap();
            output += event["message"]["usage"]["output_tokens"].as_u64().unwrap();
        }
    }
    (calls, input, output)
}

async fn each_tenant_sees_only_its_own_usage(store: StoreConfig, suffix: &str) {
    let (acme, globex) = (format!("acme-{suffix}"), format!("globex-{suffix}"));
    let server = Server::start(config(&acme, &globex, store)).await;
    let events = server.execute("key-acme-usage-001", "u1").await;
    let (calls, input, output) = tokens(&events);
    assert!(calls >= 1);
    let chat = server.chat("key-acme-usage-001").await;
    let chat_input = chat["usage"]["prompt_tokens"].as_u64().unwrap();

    let (status, body) = server.usage("key-acme-usage-001", "group_by=model").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "usage");
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 1, "{body}");
    let group = &data[0];
    assert!(group["model_calls"].as_u64().unwrap() > calls, "{body}");
    assert!(
        group["input_tokens"].as_u64().unwrap() >= input + chat_input,
        "{body}"
    );
    assert!(group["output_tokens"].as_u64().unwrap() > output, "{body}");
    assert!(group["cost_usd"].as_f64().unwrap() > 0.0, "{body}");

    let (status, body) = server.usage("key-acme-usage-001", "group_by=session").await;
    assert_eq!(status, 200);
    let sessions: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["key"].as_str().unwrap())
        .collect();
    assert!(sessions.contains(&"u1"), "{body}");
    assert_eq!(
        sessions.len(),
        2,
        "the execute's session and the completion's: {body}"
    );

    let (status, body) = server.usage("key-acme-usage-001", "group_by=day").await;
    assert_eq!(status, 200);
    assert_eq!(body["data"].as_array().unwrap().len(), 1, "{body}");

    // The other tenant has spent nothing, and no parameter shows it acme's rows.
    let (status, body) = server.usage("key-globex-usage-1", "").await;
    assert_eq!(status, 200);
    assert_eq!(body["data"], json!([]), "{body}");
    let (status, _) = server
        .usage("key-globex-usage-1", &format!("tenant={acme}"))
        .await;
    assert_eq!(status, 400);
    server.execute("key-globex-usage-1", "u1").await;
    let (_, body) = server.usage("key-globex-usage-1", "group_by=session").await;
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 1, "{body}");
    assert_eq!(data[0]["model_calls"].as_u64().unwrap(), calls);

    // Bounds against a hostile caller.
    for query in [
        "from=0&to=253402300799",
        "from=2026-01-02&to=2026-01-01",
        "group_by=tenant",
        "limit=100000",
        "from=-1",
    ] {
        let (status, body) = server.usage("key-acme-usage-001", query).await;
        assert_eq!(status, 400, "{query}: {body}");
    }
    let (status, _) = server.usage("not-a-key-at-all-00", "").await;
    assert_eq!(status, 401);
}

fn suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{nanos:x}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_each_tenant_sees_only_its_own_usage() {
    let dir = tempfile::tempdir().unwrap();
    each_tenant_sees_only_its_own_usage(
        StoreConfig::Sqlite {
            path: dir.path().join("sessions.db"),
        },
        &suffix(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_each_tenant_sees_only_its_own_usage() {
    let url = match std::env::var("AGENTRY_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "AGENTRY_TEST_POSTGRES_URL is not set under CI"
            );
            return;
        }
    };
    each_tenant_sees_only_its_own_usage(
        StoreConfig::Postgres {
            url: Some(url),
            url_env: None,
        },
        &suffix(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accounting_false_turns_usage_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(
        "acme-off",
        "globex-off",
        StoreConfig::Sqlite {
            path: dir.path().join("sessions.db"),
        },
    );
    config.accounting = false;
    let server = Server::start(config).await;
    server.execute("key-acme-usage-001", "u1").await;
    let (status, body) = server.usage("key-acme-usage-001", "").await;
    assert_eq!(status, 404, "{body}");
}

/// Rows are written as each call ends: while an execute's second model call is still running,
/// `/v1/usage` already shows its first model call and its tool call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_execute_shows_in_usage() {
    use std::sync::Arc;
    use std::time::Duration;

    use agent_backends::{ScriptedBackend, ScriptedTurn};

    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "calculator", json!({"expression": "6*7"})).with_usage(
            agent_types::Usage {
                input_tokens: Some(100),
                output_tokens: Some(10),
                ..Default::default()
            },
        ),
        ScriptedTurn::text("42").with_delay(Duration::from_secs(3)),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        "acme-live",
        "globex-live",
        StoreConfig::Sqlite {
            path: dir.path().join("sessions.db"),
        },
    );
    let state = ServerBuilder::new(config)
        .with_model("slow", "scripted", Arc::new(backend))
        .build()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { serve(listener, state, std::future::pending()).await });
    let server = Server {
        url: url.clone(),
        client: reqwest::Client::new(),
    };
    let execute = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{url}/v1/sessions/live/execute"))
            .bearer_auth("key-acme-usage-001")
            .json(
                &json!({"message": "6*7?", "context": {"model": "slow", "tools": ["calculator"]}}),
            )
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    });
    let started = std::time::Instant::now();
    loop {
        let (status, body) = server.usage("key-acme-usage-001", "group_by=session").await;
        assert_eq!(status, 200, "{body}");
        let group = &body["data"][0];
        if group["model_calls"] == 1 && group["tool_calls"] == 1 {
            assert_eq!(group["key"], "live", "{body}");
            assert_eq!(group["input_tokens"], 100, "{body}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the first round is not in /v1/usage while the execute runs: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !execute.is_finished(),
        "the second model call is still running"
    );
    let events = parse_sse(&execute.await.unwrap());
    assert_eq!(events.last().unwrap()["type"], "execute_complete");
    let (_, body) = server.usage("key-acme-usage-001", "group_by=session").await;
    assert_eq!(body["data"][0]["model_calls"], 2, "{body}");
}
