//! Per-tenant spend caps over UTC days and months: refused at admission with 429 and
//! `Retry-After`, refused before a model call mid-run, shared by instances on one database,
//! rolled over by the (injected) clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent_server::{AppState, ServerBuilder, ServerConfig, StoreConfig, serve};
use serde_json::{Value, json};

use crate::support::parse_sse;

/// 2026-11-24T23:00:00Z: one hour before the day rolls over, six days and one hour before the
/// month does.
const LATE_EVENING: u64 = 1_795_561_200;
const HOUR: u64 = 3600;
const TO_MONTH_END: u64 = 6 * 86_400 + HOUR;

/// A clock the test moves.
#[derive(Clone)]
struct TestClock(Arc<AtomicU64>);

impl TestClock {
    fn at(secs: u64) -> Self {
        Self(Arc::new(AtomicU64::new(secs)))
    }

    fn advance(&self, secs: u64) {
        self.0.fetch_add(secs, Ordering::SeqCst);
    }

    fn clock(&self) -> agent_server::spend::Clock {
        let secs = Arc::clone(&self.0);
        Arc::new(move || UNIX_EPOCH + Duration::from_secs(secs.load(Ordering::SeqCst)))
    }
}

/// One server instance on a loopback port.
struct Instance {
    url: String,
    state: AppState,
    client: reqwest::Client,
}

impl Instance {
    async fn start(config: ServerConfig, clock: &TestClock) -> Self {
        let state = ServerBuilder::new(config)
            .with_clock(clock.clock())
            .build()
            .await
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let served = state.clone();
        tokio::spawn(async move { serve(listener, served, std::future::pending()).await });
        Self {
            url,
            state,
            client: reqwest::Client::new(),
        }
    }

    async fn execute(&self, key: &str, id: &str, body: Value) -> reqwest::Response {
        self.client
            .post(format!("{}/v1/sessions/{id}/execute", self.url))
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// An execute that must stream; its events.
    async fn run(&self, key: &str, id: &str, body: Value) -> Vec<Value> {
        let response = self.execute(key, id, body).await;
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
        parse_sse(&response.text().await.unwrap())
    }

    async fn chat(&self, key: &str) -> reqwest::Response {
        self.client
            .post(format!("{}/v1/chat/completions", self.url))
            .bearer_auth(key)
            .json(&json!({"model": "demo", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap()
    }
}

/// The demo's first round on a new session: one model call, then it waits for get_weather.
fn first_round() -> Value {
    json!({
        "message": "Weather in Lisbon and Oslo?",
        "context": {"model": "demo", "tools": ["clock"], "remote_tools": [
            {"name": "get_weather", "description": "Weather for a city.",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
        ]}
    })
}

fn config(tenants: &str, store: Option<&str>) -> ServerConfig {
    let text = format!(
        r#"
        [server]
        tools = ["calculator", "clock"]
        [[server.models]]
        name = "demo"
        provider = "replay"
        recording = "anthropic"
        {tenants}
        "#
    );
    let mut config = ServerConfig::from_toml(&text).unwrap();
    if let Some(url) = store {
        config.store = StoreConfig::Postgres {
            url: Some(url.to_owned()),
            url_env: None,
        };
    }
    config
}

fn sqlite_config(tenants: &str, dir: &tempfile::TempDir) -> ServerConfig {
    let mut config = config(tenants, None);
    config.store = StoreConfig::Sqlite {
        path: dir.path().join("sessions.db"),
    };
    config
}

async fn refused(response: reqwest::Response) -> (u64, Value) {
    assert_eq!(response.status(), 429);
    let retry_after = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    (retry_after, response.json().await.unwrap())
}

#[tokio::test]
async fn a_tenant_over_its_daily_cap_gets_429_until_midnight_and_others_are_unaffected() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::at(LATE_EVENING);
    let server = Instance::start(
        sqlite_config(
            r#"
            [[server.tenants]]
            name = "acme"
            api_keys = ["key-acme-test-0001"]
            max_tokens_per_day = 300
            [[server.tenants]]
            name = "globex"
            api_keys = ["key-globex-test-01"]
            max_tokens_per_day = 300
            "#,
            &dir,
        ),
        &clock,
    )
    .await;

    // Nothing spent yet: the first run goes ahead and spends more than the cap.
    let events = server.run("key-acme-test-0001", "s1", first_round()).await;
    let complete = events.last().unwrap();
    assert_eq!(complete["status"], "awaiting_tool_execution", "{complete}");
    assert!(complete["usage"]["input_tokens"].as_u64().unwrap() > 300);

    // Now every execute and chat completion of acme is refused before any work, until midnight.
    let (retry_after, body) = refused(
        server
            .execute("key-acme-test-0001", "s2", first_round())
            .await,
    )
    .await;
    assert_eq!(retry_after, HOUR);
    assert_eq!(body["error"]["type"], "spend_cap_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("max_tokens_per_day") && message.contains("2026-11-24"),
        "{message}"
    );
    let (retry_after, body) = refused(server.chat("key-acme-test-0001").await).await;
    assert_eq!(retry_after, HOUR);
    assert_eq!(body["error"]["code"], "rate_limit_exceeded", "{body}");
    // The refused execute created nothing.
    let missing = server
        .client
        .get(format!("{}/v1/sessions/s2", server.url))
        .bearer_auth("key-acme-test-0001")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    // Another tenant with the same cap has spent nothing.
    let events = server.run("key-globex-test-01", "g1", first_round()).await;
    assert_eq!(events.last().unwrap()["status"], "awaiting_tool_execution");

    // A new UTC day: acme may spend again.
    clock.advance(HOUR);
    let events = server.run("key-acme-test-0001", "s3", first_round()).await;
    assert_eq!(events.last().unwrap()["status"], "awaiting_tool_execution");
    assert_eq!(server.chat("key-acme-test-0001").await.status(), 429);
    assert!(server.state.running() == 0);
}

#[tokio::test]
async fn a_monthly_cap_outlasts_the_day_and_names_the_month() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::at(LATE_EVENING);
    let server = Instance::start(
        sqlite_config(
            r#"
            [server.limits]
            max_tokens_per_month = 300
            [[server.tenants]]
            name = "acme"
            api_keys = ["key-acme-test-0001"]
            max_tokens_per_day = 1000000
            "#,
            &dir,
        ),
        &clock,
    )
    .await;
    server.run("key-acme-test-0001", "s1", first_round()).await;
    let (retry_after, body) = refused(server.chat("key-acme-test-0001").await).await;
    assert_eq!(retry_after, TO_MONTH_END);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("max_tokens_per_month") && message.contains("2026-11 UTC"),
        "{message}"
    );
    clock.advance(HOUR);
    let (retry_after, _) = refused(server.chat("key-acme-test-0001").await).await;
    assert_eq!(retry_after, TO_MONTH_END - HOUR);
    clock.advance(TO_MONTH_END - HOUR);
    let events = server.run("key-acme-test-0001", "s2", first_round()).await;
    assert_eq!(events.last().unwrap()["status"], "awaiting_tool_execution");
}

/// The tokens of each model call of `events`, from their `message_end` usage.
fn call_tokens(events: &[Value]) -> Vec<u64> {
    events
        .iter()
        .filter(|event| event["type"] == "message_end" && event["message"]["role"] == "assistant")
        .map(|event| {
            let usage = &event["message"]["usage"];
            usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap()
        })
        .collect()
}

fn results(complete: &Value) -> Value {
    let results: Vec<Value> = complete["pending_tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| json!({"tool_call_id": call["id"], "content": "{\"temp_c\": 19}"}))
        .collect();
    json!({"tool_results": results})
}

#[tokio::test]
async fn a_cap_reached_mid_run_stops_the_run_before_its_next_model_call() {
    // Measure the demo's model calls on an uncapped server first.
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::at(LATE_EVENING);
    let tenants = |cap: &str| {
        format!(
            r#"
            [[server.tenants]]
            name = "acme"
            api_keys = ["key-acme-test-0001"]
            {cap}
            "#
        )
    };
    let free = Instance::start(sqlite_config(&tenants(""), &dir), &clock).await;
    let round1 = free.run("key-acme-test-0001", "m", first_round()).await;
    let round2 = free
        .run("key-acme-test-0001", "m", results(round1.last().unwrap()))
        .await;
    let first = call_tokens(&round1);
    let rest = call_tokens(&round2);
    assert_eq!((first.len(), rest.len()), (1, 2), "{round2:#?}");
    assert_eq!(round2.last().unwrap()["status"], "completed");

    // With a cap of the first two calls' tokens, the third call is never made.
    let cap = first[0] + rest[0];
    let dir = tempfile::tempdir().unwrap();
    let capped = Instance::start(
        sqlite_config(&tenants(&format!("max_tokens_per_day = {cap}")), &dir),
        &clock,
    )
    .await;
    let round1 = capped.run("key-acme-test-0001", "m", first_round()).await;
    let round2 = capped
        .run("key-acme-test-0001", "m", results(round1.last().unwrap()))
        .await;
    assert_eq!(call_tokens(&round2), vec![rest[0]], "{round2:#?}");
    let complete = round2.last().unwrap();
    assert_eq!(complete["type"], "execute_complete");
    assert_eq!(complete["status"], "error", "{complete}");
    assert_eq!(complete["error"]["kind"], "refused", "{complete}");
    assert_eq!(complete["spend_cap"]["cap"], "max_tokens_per_day");
    assert_eq!(complete["spend_cap"]["spent"], json!(cap as f64));
    assert_eq!(complete["spend_cap"]["retry_after_secs"], HOUR);
    assert_eq!(complete["spend_cap"]["resets_at"], LATE_EVENING + HOUR);
}

#[tokio::test]
async fn a_chat_completion_that_reaches_a_cap_mid_run_answers_429_with_retry_after() {
    let clock = TestClock::at(LATE_EVENING);
    let tenants = |cap: &str| {
        format!(
            r#"
            [[server.tenants]]
            name = "acme"
            api_keys = ["key-acme-test-0001"]
            {cap}
            "#
        )
    };
    // The recording's calls spend the same tokens whatever endpoint drives them.
    let dir = tempfile::tempdir().unwrap();
    let free = Instance::start(sqlite_config(&tenants(""), &dir), &clock).await;
    let round1 = free.run("key-acme-test-0001", "m", first_round()).await;
    let round2 = free
        .run("key-acme-test-0001", "m", results(round1.last().unwrap()))
        .await;
    let cap = call_tokens(&round1)[0] + call_tokens(&round2)[0];

    let dir = tempfile::tempdir().unwrap();
    let server = Instance::start(
        sqlite_config(&tenants(&format!("max_tokens_per_day = {cap}")), &dir),
        &clock,
    )
    .await;
    let weather = json!({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}});
    let user = json!({"role": "user", "content": "Weather in Lisbon and Oslo?"});
    let first: Value = server
        .client
        .post(format!("{}/v1/chat/completions", server.url))
        .bearer_auth("key-acme-test-0001")
        .json(&json!({"model": "demo", "messages": [user], "tools": [weather]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let message = &first["choices"][0]["message"];
    let calls = message["tool_calls"].as_array().unwrap();
    let mut messages = vec![
        user,
        json!({"role": "assistant", "content": message["content"], "tool_calls": calls}),
    ];
    for call in calls {
        messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": "19 C"}));
    }
    // The follow-up is admitted (under the cap), but its model call, whose estimated input
    // would cross the cap, is refused before it is sent: a 429 with Retry-After, not a 403.
    let response = server
        .client
        .post(format!("{}/v1/chat/completions", server.url))
        .bearer_auth("key-acme-test-0001")
        .json(&json!({"model": "demo", "messages": messages, "tools": [weather]}))
        .send()
        .await
        .unwrap();
    let (retry_after, body) = refused(response).await;
    assert_eq!(retry_after, HOUR);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens_per_day"),
        "{body}"
    );
    assert_eq!(
        server.state.metrics().value(
            "agentry_model_calls_total",
            &[("tenant", "acme"), ("model", "demo")]
        ),
        1.0,
        "the follow-up's call was never made"
    );
}

#[tokio::test]
async fn the_usd_caps_count_each_calls_cost() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::at(LATE_EVENING);
    let server = Instance::start(
        sqlite_config(
            r#"
            [[server.tenants]]
            name = "acme"
            api_keys = ["key-acme-test-0001"]
            max_usd_per_day = 0.000001
            "#,
            &dir,
        ),
        &clock,
    )
    .await;
    let events = server.run("key-acme-test-0001", "s1", first_round()).await;
    let cost = events.last().unwrap()["cost_usd"].as_f64().unwrap();
    assert!(cost > 0.000_001, "{cost}");
    let (retry_after, body) = refused(server.chat("key-acme-test-0001").await).await;
    assert_eq!(retry_after, HOUR);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_usd_per_day"),
        "{body}"
    );
}

#[tokio::test]
async fn caps_of_zero_or_below_are_refused_at_start_up() {
    for cap in [
        "max_usd_per_day = 0",
        "max_usd_per_month = -1",
        "max_tokens_per_day = 0",
    ] {
        let text = format!(
            r#"
            [server]
            [[server.models]]
            name = "demo"
            provider = "replay"
            [[server.tenants]]
            name = "acme"
            api_keys = ["key-acme-test-0001"]
            {cap}
            "#
        );
        let error = ServerConfig::from_toml(&text).unwrap_err().to_string();
        let key = cap.split(' ').next().unwrap();
        assert!(error.contains(key) && error.contains("positive"), "{error}");
    }
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn two_instances_on_one_postgres_share_each_tenants_spend() {
    let Ok(url) = std::env::var("AGENTRY_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "AGENTRY_TEST_POSTGRES_URL is not set under CI"
        );
        return;
    };
    // Names no earlier run used: the ledger outlives the test.
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let (spender, other) = (format!("spender_{nonce}"), format!("other_{nonce}"));
    let tenants = format!(
        r#"
        [[server.tenants]]
        name = "{spender}"
        api_keys = ["key-spender-0000001"]
        max_tokens_per_day = 300
        [[server.tenants]]
        name = "{other}"
        api_keys = ["key-other-00000001"]
        max_tokens_per_day = 300
        "#
    );
    let clock = TestClock::at(LATE_EVENING);
    let one = Instance::start(config(&tenants, Some(&url)), &clock).await;
    let two = Instance::start(config(&tenants, Some(&url)), &clock).await;

    // Both instances admit the tenant while it has spent nothing.
    assert_eq!(
        two.execute(
            "key-spender-0000001",
            &format!("probe_{nonce}"),
            json!({"message": "hi"})
        )
        .await
        .status(),
        400,
        "admitted (then refused for the missing session, not for spend)"
    );
    one.run("key-spender-0000001", &format!("a_{nonce}"), first_round())
        .await;
    // The spend recorded by instance one stops the tenant on instance two.
    let (retry_after, body) = refused(
        two.execute("key-spender-0000001", &format!("b_{nonce}"), first_round())
            .await,
    )
    .await;
    assert_eq!(retry_after, HOUR);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens_per_day"),
        "{body}"
    );
    assert_eq!(refused(two.chat("key-spender-0000001").await).await.0, HOUR);
    // The other tenant is unaffected on either instance.
    let events = two
        .run("key-other-00000001", &format!("c_{nonce}"), first_round())
        .await;
    assert_eq!(events.last().unwrap()["status"], "awaiting_tool_execution");
    // The next UTC day, both instances admit the spender again.
    clock.advance(HOUR);
    let events = two
        .run("key-spender-0000001", &format!("d_{nonce}"), first_round())
        .await;
    assert_eq!(events.last().unwrap()["status"], "awaiting_tool_execution");
}
