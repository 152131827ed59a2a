//! Hostile and careless callers: failed authentication, secrets in upstream errors, metric
//! cardinality, a protected `/metrics`, empty messages.

use std::net::IpAddr;
use std::sync::Arc;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_server::{ServerBuilder, ServerConfig, serve};
use agent_types::ToolCall;
use serde_json::{Value, json};

use crate::support::{CONFIG, TestServer, parse_sse};

const ACME: &str = "key-acme-test-0001";

/// A client whose connections come from `source` (any 127/8 address reaches the server).
fn client_from(source: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from(source))
        .build()
        .unwrap()
}

#[tokio::test]
async fn failed_authentication_is_limited_per_address_and_counted() {
    let config = format!("{CONFIG}\n[server.auth]\nmax_failures = 5\nfailure_window_secs = 60\n");
    let server = TestServer::with(&config, Vec::new()).await;
    let attacker = client_from([127, 0, 0, 7]);
    let mut statuses = Vec::new();
    let mut retry_after = None;
    // The issue's 2,000 wrong keys in a row (each got 401, nothing logged).
    let started = std::time::Instant::now();
    for n in 0..2000 {
        let response = attacker
            .get(format!("{}/v1/sessions/x", server.url))
            .bearer_auth(format!("wrong-key-number-{n:04}"))
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
        if response.status() == 429 {
            retry_after = response
                .headers()
                .get("retry-after")
                .map(|value| value.to_str().unwrap().parse::<u64>().unwrap());
        }
    }
    eprintln!("2000 wrong keys in {:?}", started.elapsed());
    assert_eq!(&statuses[..5], &[401; 5], "{statuses:?}");
    assert!(
        statuses[5..].iter().all(|&status| status == 429),
        "{statuses:?}"
    );
    let retry_after = retry_after.unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    // The blocked address cannot go on guessing, even with a right key...
    let blocked = attacker
        .get(format!("{}/v1/sessions/x", server.url))
        .bearer_auth(ACME)
        .send()
        .await
        .unwrap();
    assert_eq!(blocked.status(), 429);
    // ...while another address is untouched, and liveness stays open.
    let neighbour = client_from([127, 0, 0, 8])
        .get(format!("{}/v1/sessions/x", server.url))
        .bearer_auth(ACME)
        .send()
        .await
        .unwrap();
    assert_eq!(neighbour.status(), 404);
    let health = attacker
        .get(format!("{}/healthz", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(
        server
            .state
            .metrics()
            .value("agentry_auth_failures_total", &[]),
        5.0
    );
    server.shutdown().await;
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let server = TestServer::start().await;
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let response = server
            .client
            .get(format!("{}/v1/sessions/none", server.url))
            .header("authorization", format!("{scheme} {ACME}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{scheme}");
    }
    for header in [
        format!("Basic {ACME}"),
        format!("Bearer{ACME}"),
        ACME.into(),
    ] {
        let response = server
            .client
            .get(format!("{}/v1/sessions/none", server.url))
            .header("authorization", header.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{header}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn short_or_padded_keys_refuse_to_start() {
    for key in [
        "short-key",
        " padded-key-0123456789 ",
        "padded-key-0123456789\t",
    ] {
        let text = CONFIG.replace(ACME, key);
        let error = ServerConfig::from_toml(&text).unwrap_err().to_string();
        assert!(
            error.contains("shorter than 16") || error.contains("whitespace"),
            "{key:?}: {error}"
        );
    }
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn upstream_urls_and_secrets_never_reach_a_tenant() {
    let port = closed_port();
    let config = CONFIG.replacen(
        "[[server.tenants]]",
        &format!(
            "[[server.models]]\nname = \"leaky\"\nprovider = \"openai-compatible\"\n\
             base_url = \"http://127.0.0.1:{port}/secret-s3cr3t/v1\"\n\n[[server.tenants]]"
        ),
        1,
    );
    let server = TestServer::with(&config, Vec::new()).await;
    let response = server
        .post("/v1/sessions/leak-1/execute", ACME)
        .json(&json!({"message": "hi", "context": {"model": "leaky"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let events = parse_sse(&text);
    let complete = events.last().unwrap();
    assert_eq!(complete["type"], "execute_complete", "{text}");
    assert!(complete["error"].is_object(), "{complete}");
    assert!(!text.contains("s3cr3t"), "{text}");
    assert!(!text.contains(&port.to_string()), "{text}");

    let response = server
        .post("/v1/chat/completions", ACME)
        .json(&json!({"model": "leaky", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_server_error(), "{}", response.status());
    let text = response.text().await.unwrap();
    assert!(!text.contains("s3cr3t"), "{text}");
    let stored = server
        .get("/v1/sessions/leak-1", ACME)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!stored.contains("s3cr3t"), "{stored}");
    server.shutdown().await;
}

#[test]
fn a_base_url_with_credentials_is_refused() {
    for url in [
        "http://127.0.0.1:9/v1?api_key=SECRET",
        "https://user:SECRET@api.example.com/v1",
    ] {
        let text = CONFIG.replacen(
            "[[server.tenants]]",
            &format!(
                "[[server.models]]\nname = \"leaky\"\nprovider = \"openai-compatible\"\n\
                 base_url = \"{url}\"\n\n[[server.tenants]]"
            ),
            1,
        );
        let error = ServerConfig::from_toml(&text).unwrap_err().to_string();
        assert!(error.contains("base_url must not contain"), "{error}");
        assert!(!error.contains("SECRET"), "{error}");
    }
}

/// A server whose model `chatty` asks, in one round, for `names` tools that do not exist.
async fn invented_tools_server(names: usize) -> (String, agent_server::AppState) {
    let calls: Vec<ToolCall> = (0..names)
        .map(|n| ToolCall::new(format!("call_{n}"), format!("made_up_{n}"), json!({})))
        .collect();
    let backend =
        ScriptedBackend::new([ScriptedTurn::tool_calls(calls), ScriptedTurn::text("done")]);
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::from_toml(CONFIG).unwrap();
    config.store = agent_server::StoreConfig::Sqlite {
        path: dir.path().join("sessions.db"),
    };
    let state = ServerBuilder::new(config)
        .with_model("chatty", "scripted", Arc::new(backend))
        .build()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let served = state.clone();
    tokio::spawn(async move {
        let _dir = dir;
        serve(listener, served, std::future::pending())
            .await
            .unwrap();
    });
    (url, state)
}

#[tokio::test]
async fn invented_tool_names_do_not_grow_the_metrics() {
    let (url, state) = invented_tools_server(500).await;
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/sessions/tools-1/execute"))
        .bearer_auth(ACME)
        .json(&json!({"message": "go", "context": {"model": "chatty", "tools": ["calculator"]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let events = parse_sse(&response.text().await.unwrap());
    assert_eq!(events.last().unwrap()["type"], "execute_complete");
    let text = reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let tool_series: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("agentry_tool_calls_total{"))
        .collect();
    assert!(!text.contains("made_up_"), "{text}");
    assert_eq!(tool_series.len(), 1, "{tool_series:?}");
    assert!(
        tool_series[0].contains("tool=\"unknown\""),
        "{tool_series:?}"
    );
    assert!(
        state.metrics().value(
            "agentry_tool_calls_total",
            &[
                ("tenant", "acme"),
                ("tool", "unknown"),
                ("outcome", "error")
            ]
        ) >= 1.0
    );
}

/// The token variant runs the real process (it needs its own environment):
/// `crates/agentry-cli/tests/serve.rs`, `metrics_can_require_a_token`.
#[tokio::test]
async fn metrics_can_move_to_their_own_address() {
    let port = closed_port();
    let config = CONFIG.replace(
        "[server]",
        &format!("[server]\nmetrics_listen = \"127.0.0.1:{port}\""),
    );
    let server = TestServer::with(&config, Vec::new()).await;
    let main = server
        .client
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(main.status(), 404, "not on the API's address");
    let mut separate = None;
    for _ in 0..50 {
        if let Ok(response) = server
            .client
            .get(format!("http://127.0.0.1:{port}/metrics"))
            .send()
            .await
        {
            separate = Some(response);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let separate = separate.unwrap();
    assert_eq!(separate.status(), 200);
    assert!(separate.text().await.unwrap().contains("# TYPE"));
    server.shutdown().await;
}

#[tokio::test]
async fn an_empty_user_message_is_400() {
    let server = TestServer::start().await;
    for message in [
        json!(""),
        json!("   \n\t"),
        json!({"content": ""}),
        json!({"content": [{"type": "text", "text": " "}]}),
    ] {
        let response = server
            .post("/v1/sessions/empty-1/execute", ACME)
            .json(&json!({"message": message, "context": {"model": "demo"}}))
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert_eq!(status, 400, "{message}: {body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains("empty"),
            "{body}"
        );
    }
    server.shutdown().await;
}

#[cfg(unix)]
#[tokio::test]
async fn the_session_database_is_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data").join("sessions.db");
    // An existing file left world-readable is narrowed too.
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut config = ServerConfig::from_toml(CONFIG).unwrap();
    config.store = agent_server::StoreConfig::Sqlite { path: path.clone() };
    let state = ServerBuilder::new(config).build().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(serve(listener, state, std::future::pending()));
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/sessions"))
        .bearer_auth(ACME)
        .json(&json!({"model": "demo"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    for suffix in ["", "-wal", "-shm"] {
        let file = format!("{}{suffix}", path.display());
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{file}: {mode:o}");
    }
}

#[tokio::test]
async fn a_key_echoed_in_a_provider_json_body_never_reaches_a_tenant() {
    // A compatible server answers 400 with an `error` object that has no `message`, which
    // the adapter passes on as JSON text, and which quotes the request's credentials back.
    let echo = r#"{"error": {"reason": "Invalid request", "request": {"api_key": "sk-live-ECHOED-0001", "headers": {"Authorization": "Bearer sk-live-ECHOED-0002", "x-api-key": "ECHOED-0003"}}}}"#;
    let upstream = agent_backends::replay::ReplayServer::start(
        [0, 1].map(|_| agent_backends::replay::Cassette::new(400, "application/json", echo)),
    )
    .await
    .unwrap();
    let config = CONFIG.replacen(
        "[[server.tenants]]",
        &format!(
            "[[server.models]]\nname = \"echoing\"\nprovider = \"openai-compatible\"\n\
             base_url = \"{}/v1\"\n\n[[server.tenants]]",
            upstream.url()
        ),
        1,
    );
    let server = TestServer::with(&config, Vec::new()).await;
    let response = server
        .post("/v1/sessions/echo-1/execute", ACME)
        .json(&json!({"message": "hi", "context": {"model": "echoing"}}))
        .send()
        .await
        .unwrap();
    let text = response.text().await.unwrap();
    let events = parse_sse(&text);
    let complete = events.last().unwrap();
    assert_eq!(complete["type"], "execute_complete", "{text}");
    let message = complete["error"]["message"].as_str().unwrap();
    // The provider's words are still there; its echo of the key is not.
    assert!(message.contains("Invalid request"), "{message}");
    assert!(message.contains(r#""api_key":"<redacted>""#), "{message}");
    assert!(!text.contains("ECHOED"), "{text}");

    let response = server
        .post("/v1/chat/completions", ACME)
        .json(&json!({"model": "echoing", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let text = response.text().await.unwrap();
    assert!(text.contains("Invalid request"), "{text}");
    assert!(!text.contains("ECHOED"), "{text}");
    assert_eq!(upstream.requests().len(), 2, "both reached the provider");
    server.shutdown().await;
}
