//! Tenancy and storage: per-tenant id namespaces, unguessable ids, quotas, expiry, the
//! session list, and a session's lifecycle while it executes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::support::{CONFIG, TestServer, finished_events, parse_sse, slow_tool};

/// Status and body, exactly as sent.
async fn raw(response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// What `key` gets for an execute (no context), a GET and a DELETE on `id`.
async fn probe(server: &TestServer, key: &str, id: &str) -> Vec<(u16, String)> {
    let path = format!("/v1/sessions/{id}");
    vec![
        raw(server
            .post_json(&format!("{path}/execute"), key, &json!({"message": "hi"}))
            .await)
        .await,
        raw(server.get(&path, key).send().await.unwrap()).await,
        raw(server.delete(&path, key).await).await,
    ]
}

/// Creates session `id` for the tenant of `key` with an execute that carries its context,
/// and returns the stream's events.
async fn execute_with_context(server: &TestServer, key: &str, id: &str) -> Vec<Value> {
    let response = server
        .post(&format!("/v1/sessions/{id}/execute"), key)
        .json(&json!({"message": "Weather?", "context": {"model": "demo"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    parse_sse(&response.text().await.unwrap())
}

/// The "seen" of the issue: tenant B's execute on tenant A's id answered 400 while an unused
/// id answered 200, and B could take an id before A. Now B's answers for A's id are those for
/// an id nobody has, byte for byte, and B taking an id first does not stop A.
#[tokio::test]
async fn another_tenants_id_and_a_missing_id_get_the_same_answer_byte_for_byte() {
    let server = TestServer::start().await;
    let id = "shared-name-1";
    let unused = probe(&server, "key-globex-test-01", id).await;
    assert_eq!(
        unused.iter().map(|(status, _)| *status).collect::<Vec<_>>(),
        [400, 404, 404],
        "{unused:?}"
    );

    // acme makes the id its own; globex sees exactly what it saw before.
    let events = execute_with_context(&server, "key-acme-test-0001", id).await;
    assert_eq!(events.last().unwrap()["type"], "execute_complete");
    assert_eq!(probe(&server, "key-globex-test-01", id).await, unused);
    // And acme's session is untouched by globex's attempts (the DELETE among them).
    let own = server
        .get(&format!("/v1/sessions/{id}"), "key-acme-test-0001")
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), 200);

    // globex can use the same name for a session of its own; both exist apart.
    let events = execute_with_context(&server, "key-globex-test-01", id).await;
    assert_eq!(events.last().unwrap()["session_id"], id);
    for key in ["key-acme-test-0001", "key-globex-test-01"] {
        let session: Value = server.get_json(&format!("/v1/sessions/{id}"), key).await;
        assert_eq!(session["messages"][0]["content"][0]["text"], "Weather?");
    }

    // Squatting: globex takes a name first; acme's later create of it still works.
    let squatted = "squatted-name";
    execute_with_context(&server, "key-globex-test-01", squatted).await;
    let events = execute_with_context(&server, "key-acme-test-0001", squatted).await;
    assert!(events.last().unwrap()["error"].is_null(), "{events:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn server_made_session_and_completion_ids_are_random() {
    let server = TestServer::start().await;
    let a = server.create(json!({"model": "demo"})).await;
    let b = server.create(json!({"model": "demo"})).await;
    for id in [&a, &b] {
        let hex = id.strip_prefix("sess_").unwrap();
        assert_eq!(hex.len(), 32, "{id}");
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    }
    // Consecutive ids share no leading digits (a clock or counter would).
    assert_ne!(a[5..13], b[5..13]);

    let completion: Value = server
        .post("/v1/chat/completions", "key-acme-test-0001")
        .json(&json!({"model": "demo", "messages": [{"role": "user", "content": "Hi"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = completion["id"].as_str().unwrap();
    let hex = id.strip_prefix("chatcmpl-").unwrap();
    assert_eq!(hex.len(), 32, "{id}");
    server.shutdown().await;
}

/// The demo model's round 1 calls `get_weather`: here a server tool that takes a while.
fn slow_server(config: &str, millis: u64) -> (Arc<Notify>, impl Future<Output = TestServer>) {
    let started = Arc::new(Notify::new());
    let tool = slow_tool("get_weather", millis, Arc::clone(&started));
    let config = config.to_owned();
    (started, async move {
        TestServer::with(&config, vec![tool]).await
    })
}

/// The "seen": DELETE during an execute answered 204 and the stream then said `completed`
/// with an appender error; GET during it said `idle`. Now: 409, `running`, and the run ends
/// and saves normally.
#[tokio::test]
async fn a_running_session_cannot_be_deleted_and_shows_running() {
    let (started, server) = slow_server(CONFIG, 1500);
    let server = server.await;
    let id = server
        .create(json!({"model": "demo", "tools": ["get_weather", "clock"]}))
        .await;
    let path = format!("/v1/sessions/{id}");
    let running = server.execute_until_started(&id, &started).await;

    let session: Value = server.session(&id).await;
    assert_eq!(session["status"], "running", "{session}");
    let listed: Value = server.get_json("/v1/sessions", "key-acme-test-0001").await;
    assert_eq!(listed["data"][0]["status"], "running", "{listed}");

    let delete = server.delete(&path, "key-acme-test-0001").await;
    assert_eq!(delete.status(), 409);
    let body: Value = delete.json().await.unwrap();
    assert_eq!(body["error"]["type"], "conflict_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("executing"),
        "{body}"
    );

    let events = finished_events(running).await;
    let complete = events.last().unwrap();
    assert_eq!(complete["type"], "execute_complete");
    assert!(complete["error"].is_null(), "{complete}");
    let session: Value = server.session(&id).await;
    assert_eq!(session["status"], complete["status"]);
    assert_ne!(session["status"], "running");
    let delete = server.delete(&path, "key-acme-test-0001").await;
    assert_eq!(delete.status(), 204);
    server.shutdown().await;
}

/// A run longer than its lease keeps it (the run renews it): the session cannot be deleted
/// under it and the run saves. (A run whose lease is lost anyway cannot save and never
/// reports `completed`: `checkpoint::a_run_that_lost_its_lease_stops_and_never_reports_completed`.)
#[tokio::test]
async fn a_run_that_cannot_save_never_reports_completed() {
    let config = CONFIG.replace("[server]", "[server]\nexecute_lease_secs = 1");
    let (started, server) = slow_server(&config, 2500);
    let server = server.await;
    let id = server
        .create(json!({"model": "demo", "tools": ["get_weather", "clock"]}))
        .await;
    let path = format!("/v1/sessions/{id}");
    let running = server.execute_until_started(&id, &started).await;
    // Past the one-second lease, the renewed lease still protects the session.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let delete = server.delete(&path, "key-acme-test-0001").await;
    assert_eq!(delete.status(), 409);

    let events = finished_events(running).await;
    let complete = events.last().unwrap();
    assert_eq!(complete["type"], "execute_complete");
    assert_ne!(complete["status"], "error", "{complete}");
    server.shutdown().await;
}

/// With PostgreSQL, the lease is seen by every instance: DELETE on another instance than the
/// one running the execute is 409 too, and its GET says `running`.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn another_instance_sees_the_run_too() {
    let Ok(url) = std::env::var("AGENTRY_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "AGENTRY_TEST_POSTGRES_URL is not set under CI"
        );
        return;
    };
    let config = format!("{CONFIG}\n[server.store]\nkind = \"postgres\"\nurl = \"{url}\"\n");
    let (started, first) = slow_server(&config, 1500);
    let first = first.await;
    let second = TestServer::with(&config, Vec::new()).await;
    let id = first
        .create(json!({"model": "demo", "tools": ["get_weather", "clock"]}))
        .await;
    let path = format!("/v1/sessions/{id}");
    let running = first.execute_until_started(&id, &started).await;
    let session: Value = second.session(&id).await;
    assert_eq!(session["status"], "running", "{session}");
    let delete = second.delete(&path, "key-acme-test-0001").await;
    assert_eq!(delete.status(), 409);
    let events = finished_events(running).await;
    assert!(events.last().unwrap()["error"].is_null(), "{events:?}");
    let delete = second.delete(&path, "key-acme-test-0001").await;
    assert_eq!(delete.status(), 204);
    first.shutdown().await;
    second.shutdown().await;
}

async fn create_status(server: &TestServer, key: &str, body: &Value) -> (u16, Value) {
    let response = server.post_json("/v1/sessions", key, body).await;
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn session_and_byte_quotas_are_per_tenant_and_named_in_the_refusal() {
    let config = CONFIG
        .replace("[server]", "[server]\nquotas = { max_sessions = 3 }")
        .replace(
            "api_keys = [\"key-globex-test-01\"]",
            "api_keys = [\"key-globex-test-01\"]\nquotas = { max_sessions = 100, max_stored_bytes = 20000 }",
        );
    let server = TestServer::with(&config, Vec::new()).await;
    let small = json!({"model": "demo"});
    for _ in 0..3 {
        assert_eq!(
            create_status(&server, "key-acme-test-0001", &small).await.0,
            201
        );
    }
    let (status, body) = create_status(&server, "key-acme-test-0001", &small).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["type"], "quota_exceeded");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("max_sessions"), "{message}");
    // An execute that would create a session counts too.
    let response = server
        .post("/v1/sessions/by-context/execute", "key-acme-test-0001")
        .json(&json!({"message": "hi", "context": {"model": "demo"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);

    // globex has its own count, and a byte quota: 20 kB.
    let big = json!({"model": "demo", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "x".repeat(8000)}]}
    ]});
    assert_eq!(
        create_status(&server, "key-globex-test-01", &big).await.0,
        201
    );
    assert_eq!(
        create_status(&server, "key-globex-test-01", &big).await.0,
        201
    );
    let (status, body) = create_status(&server, "key-globex-test-01", &big).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["type"], "quota_exceeded");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_stored_bytes"),
        "{body}"
    );
    assert_eq!(
        server.state.metrics().value(
            "agentry_quota_refusals_total",
            &[("tenant", "acme"), ("quota", "max_sessions")]
        ),
        2.0
    );
    // Deleting makes room again.
    let listed: Value = server.get_json("/v1/sessions", "key-acme-test-0001").await;
    let first = listed["data"][0]["id"].as_str().unwrap();
    let deleted = server
        .delete(&format!("/v1/sessions/{first}"), "key-acme-test-0001")
        .await;
    assert_eq!(deleted.status(), 204);
    assert_eq!(
        create_status(&server, "key-acme-test-0001", &small).await.0,
        201
    );
    server.shutdown().await;
}

/// A session's history is capped: created over the cap, or grown to it, it is refused with
/// 413 naming `max_session_bytes` before anything is sent to the model.
#[tokio::test]
async fn the_history_cap_refuses_executes_on_a_session_that_outgrew_it() {
    let config = CONFIG.replace(
        "[server]",
        "[server]\nquotas = { max_session_bytes = 6000 }",
    );
    let server = TestServer::with(&config, Vec::new()).await;
    let over = json!({"model": "demo", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "x".repeat(7000)}]}
    ]});
    let (status, body) = create_status(&server, "key-acme-test-0001", &over).await;
    assert_eq!(status, 413, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_session_bytes"),
        "{body}"
    );

    // Just under the cap: the first execute runs and grows it past the cap.
    let near = json!({"model": "demo", "system": "y".repeat(5000)});
    let (status, created) = create_status(&server, "key-acme-test-0001", &near).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap();
    let events = server.execute(id, json!({"message": "Weather?"})).await;
    assert_eq!(events.last().unwrap()["type"], "execute_complete");
    let calls = server.state.metrics().value(
        "agentry_model_calls_total",
        &[("tenant", "acme"), ("model", "demo")],
    );
    let response = server
        .post(&format!("/v1/sessions/{id}/execute"), "key-acme-test-0001")
        .json(&json!({"message": "And tomorrow?"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "quota_exceeded");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_session_bytes"),
        "{body}"
    );
    // Nothing was sent, and the lease was given back: the session is not running.
    assert_eq!(
        server.state.metrics().value(
            "agentry_model_calls_total",
            &[("tenant", "acme"), ("model", "demo")],
        ),
        calls
    );
    let session: Value = server.session(id).await;
    assert_ne!(session["status"], "running");
    server.shutdown().await;
}

/// Idle sessions expire: the sweeper deletes them after `session_ttl_secs`, and a tenant
/// with `session_ttl_secs = 0` keeps its sessions.
#[tokio::test]
async fn idle_sessions_are_swept_after_their_ttl() {
    let config = CONFIG
        .replace(
            "[server]",
            "[server]\nquotas = { session_ttl_secs = 1, sweep_interval_secs = 1 }",
        )
        .replace(
            "api_keys = [\"key-globex-test-01\"]",
            "api_keys = [\"key-globex-test-01\"]\nquotas = { session_ttl_secs = 0 }",
        );
    let server = TestServer::with(&config, Vec::new()).await;
    let id = server.create(json!({"model": "demo"})).await;
    let (status, kept) =
        create_status(&server, "key-globex-test-01", &json!({"model": "demo"})).await;
    assert_eq!(status, 201);
    let kept = kept["id"].as_str().unwrap().to_owned();
    let start = Instant::now();
    let mut status = 200;
    while start.elapsed() < Duration::from_secs(15) {
        status = server
            .get(&format!("/v1/sessions/{id}"), "key-acme-test-0001")
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        if status == 404 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(status, 404, "the idle session was not swept");
    assert!(start.elapsed() >= Duration::from_millis(500));
    let kept = server
        .get(&format!("/v1/sessions/{kept}"), "key-globex-test-01")
        .send()
        .await
        .unwrap();
    assert_eq!(kept.status(), 200);

    // The sweeper stops with the server: an idle session written after shutdown stays.
    let agent_server::StoreConfig::Sqlite { path } = server.state.config().store.clone() else {
        panic!("the test server uses SQLite");
    };
    let state = server.state.clone();
    server.shutdown().await;
    let store = agent_server::store::SqliteStore::open(path).await.unwrap();
    let idle = agent_server::store::SessionRecord {
        tenant: "acme".into(),
        model: "demo".into(),
        session: agent_loop::Session::with_id("after-shutdown", "demo"),
        tools: Vec::new(),
        options: agent_server::store::SessionOptions::default(),
        created_at_ms: 1,
        updated_at_ms: 1,
    };
    agent_server::store::SessionStore::create(&store, &idle)
        .await
        .unwrap();
    // Two sweep intervals: a sweeper still running would have deleted it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        agent_server::store::SessionStore::get(&store, "acme", "after-shutdown")
            .await
            .unwrap(),
        Some(idle)
    );
    drop(state);
}

#[tokio::test]
async fn the_list_pages_through_the_callers_own_sessions_only() {
    let server = TestServer::start().await;
    let mut mine = Vec::new();
    for _ in 0..5 {
        mine.push(server.create(json!({"model": "demo"})).await);
    }
    let mut theirs = Vec::new();
    for _ in 0..3 {
        let (_, created) =
            create_status(&server, "key-globex-test-01", &json!({"model": "demo"})).await;
        theirs.push(created["id"].as_str().unwrap().to_owned());
    }
    mine.sort();

    let mut listed = Vec::new();
    let mut path = "/v1/sessions?limit=2".to_owned();
    let mut pages = 0;
    loop {
        pages += 1;
        let page: Value = server.get_json(&path, "key-acme-test-0001").await;
        assert_eq!(page["object"], "list");
        for row in page["data"].as_array().unwrap() {
            assert_eq!(row["status"], "idle");
            assert!(row["created_at_ms"].as_u64().unwrap() > 0);
            assert!(row["updated_at_ms"].as_u64().unwrap() > 0);
            assert!(row["size_bytes"].as_u64().unwrap() > 100);
            listed.push(row["id"].as_str().unwrap().to_owned());
        }
        if page["has_more"] == false {
            assert!(page["next_after"].is_null());
            break;
        }
        path = format!(
            "/v1/sessions?limit=2&after={}",
            page["next_after"].as_str().unwrap()
        );
    }
    assert_eq!(listed, mine);
    assert_eq!(pages, 3);
    assert!(theirs.iter().all(|id| !listed.contains(id)));

    // globex sees its three, never acme's.
    let page: Value = server.get_json("/v1/sessions", "key-globex-test-01").await;
    assert_eq!(page["data"].as_array().unwrap().len(), 3);

    for bad in ["limit=0", "limit=201", "limit=x", "cursor=1", "after=%zz"] {
        let response = server
            .get(&format!("/v1/sessions?{bad}"), "key-acme-test-0001")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{bad}");
    }
    let anonymous = server
        .client
        .get(format!("{}/v1/sessions", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    server.shutdown().await;
}

/// A tenant at its session quota can still execute on a session it has, context or not.
#[tokio::test]
async fn a_tenant_at_its_quota_still_executes_its_sessions() {
    let config = CONFIG.replace("[server]", "[server]\nquotas = { max_sessions = 1 }");
    let server = TestServer::with(&config, Vec::new()).await;
    let events = execute_with_context(&server, "key-acme-test-0001", "only-one").await;
    assert!(events.last().unwrap()["error"].is_null(), "{events:?}");
    let response = server
        .post("/v1/sessions/only-one/execute", "key-acme-test-0001")
        .json(&json!({"message": "Thanks!", "context": {"model": "demo"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    server.shutdown().await;
}
