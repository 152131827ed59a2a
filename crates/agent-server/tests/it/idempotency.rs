//! `Idempotency-Key` over real HTTP: a retried execute or chat completion runs once (the
//! upstream, a loopback replay server, sees one request), a repeat while the first runs gets
//! 409, a repeat with another body 422, another tenant's key is its own, keys expire and are
//! bounded, and on PostgreSQL another instance sees them.

use std::time::Duration;

use agent_backends::replay::{Cassette, Chunking, ReplayServer};
use serde_json::{Value, json};

use crate::support::{CONFIG, TestServer, parse_sse};

const ACME: &str = "key-acme-test-0001";
const GLOBEX: &str = "key-globex-test-01";

/// An OpenAI Chat Completions stream answering `text`.
fn answer(text: &str) -> Cassette {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-idem", "object": "chat.completion.chunk", "created": 1,
                   "model": "gpt-4.1-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let mut body = chunk(json!({"role": "assistant", "content": ""}), Value::Null);
    body.push_str(&chunk(json!({"content": text}), Value::Null));
    body.push_str(&chunk(json!({}), json!("stop")));
    body.push_str("data: [DONE]\n\n");
    Cassette::body(body)
}

/// The same answer, trickling in over about two seconds.
fn slow_answer(text: &str) -> Cassette {
    answer(text)
        .with_chunking(Chunking::Every(24))
        .with_chunk_delay(Duration::from_millis(100))
}

/// The demo configuration plus a model `compat` served by `upstream`, and `extra` TOML.
fn config(upstream: &ReplayServer, extra: &str) -> String {
    let config = CONFIG.replacen(
        "[[server.tenants]]",
        &format!(
            "[[server.models]]\nname = \"compat\"\nprovider = \"openai-compatible\"\n\
             base_url = \"{}/v1\"\n\n[[server.tenants]]",
            upstream.url()
        ),
        1,
    );
    format!("{config}\n{extra}\n")
}

/// A key no earlier run of the suite used (the PostgreSQL database outlives a run).
fn fresh(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{nanos:x}")
}

async fn send(
    server: &TestServer,
    path: &str,
    tenant: &str,
    key: &str,
    body: &Value,
) -> (u16, Option<String>, String) {
    let response = server
        .post(path, tenant)
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .map(|value| value.to_str().unwrap().to_owned());
    (status, replayed, response.text().await.unwrap())
}

fn chat(stream: bool) -> Value {
    json!({"model": "compat", "stream": stream,
           "messages": [{"role": "user", "content": "Say hello."}]})
}

#[tokio::test]
async fn a_repeat_returns_the_stored_outcome_and_the_upstream_sees_one_request() {
    let upstream = ReplayServer::start([answer("Hello."), answer("Hi."), answer("Hey.")])
        .await
        .unwrap();
    let server = TestServer::with(&config(&upstream, ""), Vec::new()).await;

    // execute (SSE): the retry is the same stream, replayed.
    let path = "/v1/sessions/idem-exec/execute";
    let body = json!({"message": "Say hello.", "context": {"model": "compat"}});
    let (status, replayed, first) = send(&server, path, ACME, "exec-1", &body).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(replayed, None);
    let events = parse_sse(&first);
    assert_eq!(
        events.last().unwrap()["type"],
        "execute_complete",
        "{first}"
    );
    assert_eq!(events.last().unwrap()["status"], "completed", "{first}");
    let (status, replayed, again) = send(&server, path, ACME, "exec-1", &body).await;
    assert_eq!((status, replayed.as_deref()), (200, Some("true")));
    assert_eq!(again, first);
    assert_eq!(upstream.requests().len(), 1);
    // The session holds one run: one user turn, one answer.
    let session: Value = server
        .get("/v1/sessions/idem-exec", ACME)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        session["messages"].as_array().unwrap().len(),
        2,
        "{session}"
    );

    // chat completions, JSON and streamed.
    for (n, stream) in [(2, false), (3, true)] {
        let (status, replayed, first) = send(
            &server,
            "/v1/chat/completions",
            ACME,
            &format!("chat-{n}"),
            &chat(stream),
        )
        .await;
        assert_eq!((status, replayed), (200, None), "{first}");
        let (status, replayed, again) = send(
            &server,
            "/v1/chat/completions",
            ACME,
            &format!("chat-{n}"),
            &chat(stream),
        )
        .await;
        assert_eq!((status, replayed.as_deref()), (200, Some("true")));
        assert_eq!(again, first);
        assert_eq!(upstream.requests().len(), n);
    }
    server.shutdown().await;
}

#[tokio::test]
async fn a_repeat_while_running_gets_409_and_another_body_422() {
    let upstream = ReplayServer::start([slow_answer("Slowly, hello.")])
        .await
        .unwrap();
    let server = TestServer::with(&config(&upstream, ""), Vec::new()).await;
    let body = chat(false);
    let first = {
        let request = server
            .post("/v1/chat/completions", ACME)
            .header("Idempotency-Key", "slow-1")
            .json(&body)
            .send();
        tokio::spawn(async move { request.await.unwrap().text().await.unwrap() })
    };
    while upstream.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, _, text) = send(&server, "/v1/chat/completions", ACME, "slow-1", &body).await;
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("still running"), "{text}");
    let other = json!({"model": "compat", "messages": [{"role": "user", "content": "Other."}]});
    let (status, _, text) = send(&server, "/v1/chat/completions", ACME, "slow-1", &other).await;
    assert_eq!(status, 422, "{text}");
    assert!(text.contains("different request"), "{text}");

    let first = first.await.unwrap();
    let (status, replayed, again) =
        send(&server, "/v1/chat/completions", ACME, "slow-1", &body).await;
    assert_eq!((status, replayed.as_deref()), (200, Some("true")));
    assert_eq!(again, first);
    // The different body did not get to run either.
    assert_eq!(upstream.requests().len(), 1);
    server.shutdown().await;
}

#[tokio::test]
async fn a_client_that_drops_mid_stream_gets_the_finished_outcome_on_retry() {
    let upstream = ReplayServer::start([slow_answer("Finished without you.")])
        .await
        .unwrap();
    let server = TestServer::with(&config(&upstream, ""), Vec::new()).await;
    let path = "/v1/sessions/idem-drop/execute";
    let body = json!({"message": "Say hello.", "context": {"model": "compat"}});
    let mut response = server
        .post(path, ACME)
        .header("Idempotency-Key", "drop-1")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // The first frame, then the connection goes away.
    let _ = response.chunk().await.unwrap();
    drop(response);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let text = loop {
        let (status, replayed, text) = send(&server, path, ACME, "drop-1", &body).await;
        if status == 200 {
            assert_eq!(replayed.as_deref(), Some("true"));
            break text;
        }
        assert_eq!(status, 409, "{text}");
        assert!(
            std::time::Instant::now() < deadline,
            "the run never finished"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let complete = parse_sse(&text).pop().unwrap();
    assert_eq!(complete["type"], "execute_complete", "{text}");
    assert_eq!(complete["status"], "completed", "{text}");
    assert_eq!(upstream.requests().len(), 1);
    server.shutdown().await;
}

#[tokio::test]
async fn another_tenants_same_key_is_another_request() {
    let upstream = ReplayServer::start([answer("For acme."), answer("For globex.")])
        .await
        .unwrap();
    let server = TestServer::with(&config(&upstream, ""), Vec::new()).await;
    let (status, replayed, acme) = send(
        &server,
        "/v1/chat/completions",
        ACME,
        "shared",
        &chat(false),
    )
    .await;
    assert_eq!((status, replayed), (200, None), "{acme}");
    let (status, replayed, globex) = send(
        &server,
        "/v1/chat/completions",
        GLOBEX,
        "shared",
        &chat(false),
    )
    .await;
    assert_eq!((status, replayed), (200, None), "{globex}");
    assert!(acme.contains("For acme.") && globex.contains("For globex."));
    assert_eq!(upstream.requests().len(), 2);
    server.shutdown().await;
}

#[tokio::test]
async fn keys_expire_after_the_ttl_and_are_bounded_per_tenant() {
    let upstream = ReplayServer::start((0..6).map(|n| answer(&format!("Answer {n}."))))
        .await
        .unwrap();
    let extra = "[server.idempotency]\nttl_secs = 1\nmax_keys_per_tenant = 2\n";
    let server = TestServer::with(&config(&upstream, extra), Vec::new()).await;
    let body = chat(false);
    let post = |key: &'static str| send(&server, "/v1/chat/completions", ACME, key, &body);
    assert_eq!(post("a").await.1, None);
    assert_eq!(post("b").await.1, None);
    assert_eq!(post("b").await.1.as_deref(), Some("true"));
    // A third key drops the oldest finished one: `a` runs again, `c` is kept.
    assert_eq!(post("c").await.1, None);
    assert_eq!(post("a").await.1, None);
    assert_eq!(upstream.requests().len(), 4);
    // After the TTL every key is forgotten.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(post("a").await.1, None);
    assert_eq!(upstream.requests().len(), 5);
    // A key that is not visible ASCII is refused, naming the header.
    let (status, _, text) = send(&server, "/v1/chat/completions", ACME, "", &chat(false)).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("Idempotency-Key"), "{text}");
    server.shutdown().await;
}

/// A request running longer than its claim's lifetime (`execute_lease_secs` = 1, an upstream
/// taking about 4 s): its retries keep getting 409, the upstream sees one request, and the
/// outcome is replayed after. Without renewal the claim lapsed after 1 s, a retry claimed
/// the key again and ran a second time, and the first run's outcome was never stored.
async fn a_long_run_keeps_its_claim(store: &str) {
    let upstream = ReplayServer::start([answer("Very slowly, hello.")
        .with_chunking(Chunking::Every(16))
        .with_chunk_delay(Duration::from_millis(100))])
    .await
    .unwrap();
    let config = config(&upstream, store).replace("[server]", "[server]\nexecute_lease_secs = 1");
    let server = TestServer::with(&config, Vec::new()).await;
    let key = fresh("long");
    let body = chat(false);
    let started = std::time::Instant::now();
    let first = {
        let request = server
            .post("/v1/chat/completions", ACME)
            .header("Idempotency-Key", &key)
            .json(&body)
            .send();
        tokio::spawn(async move {
            let response = request.await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        })
    };
    while upstream.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Retries past the claim's first lifetime, while the first still runs.
    let mut retries = 0;
    while !first.is_finished() {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let (status, _, text) = send(&server, "/v1/chat/completions", ACME, &key, &body).await;
        if first.is_finished() && status == 200 {
            break;
        }
        assert_eq!(
            status,
            409,
            "retry {retries} at {:?}: {text}",
            started.elapsed()
        );
        assert!(text.contains("still running"), "{text}");
        retries += 1;
    }
    let (status, first) = first.await.unwrap();
    assert_eq!(status, 200, "{first}");
    assert!(
        started.elapsed() > Duration::from_millis(2500) && retries >= 4,
        "the run outlived its claim several times over: {:?}, {retries} retries",
        started.elapsed()
    );
    let (status, replayed, again) = send(&server, "/v1/chat/completions", ACME, &key, &body).await;
    assert_eq!(
        (status, replayed.as_deref()),
        (200, Some("true")),
        "{again}"
    );
    assert_eq!(again, first);
    assert_eq!(upstream.requests().len(), 1, "one run");
    server.shutdown().await;
}

#[tokio::test]
async fn a_run_longer_than_the_claim_is_not_claimed_again() {
    a_long_run_keeps_its_claim("").await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_run_longer_than_the_claim_is_not_claimed_again_on_postgres() {
    let Ok(url) = std::env::var("AGENTRY_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "AGENTRY_TEST_POSTGRES_URL is not set under CI"
        );
        return;
    };
    a_long_run_keeps_its_claim(&format!(
        "[server.store]\nkind = \"postgres\"\nurl = \"{url}\"\n"
    ))
    .await;
}

/// Two instances on one PostgreSQL: the key claimed on one is seen by the other, which
/// replays the outcome without running the request again.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn on_postgres_another_instance_replays_the_outcome() {
    let Ok(url) = std::env::var("AGENTRY_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "AGENTRY_TEST_POSTGRES_URL is not set under CI"
        );
        return;
    };
    let upstream = ReplayServer::start([slow_answer("Once."), answer("Other tenant.")])
        .await
        .unwrap();
    let store = format!("[server.store]\nkind = \"postgres\"\nurl = \"{url}\"\n");
    let first = TestServer::with(&config(&upstream, &store), Vec::new()).await;
    let second = TestServer::with(&config(&upstream, &store), Vec::new()).await;
    let key = fresh("pg");
    let id = fresh("idem-pg");
    let path = format!("/v1/sessions/{id}/execute");
    let body = json!({"message": "Say hello.", "context": {"model": "compat"}});
    let running = {
        let request = first
            .post(&path, ACME)
            .header("Idempotency-Key", &key)
            .json(&body)
            .send();
        tokio::spawn(async move { request.await.unwrap().text().await.unwrap() })
    };
    while upstream.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, _, text) = send(&second, &path, ACME, &key, &body).await;
    assert_eq!(status, 409, "the other instance sees it running: {text}");
    let other = json!({"message": "Something else.", "context": {"model": "compat"}});
    let (status, _, text) = send(&second, &path, ACME, &key, &other).await;
    assert_eq!(status, 422, "{text}");
    let done = running.await.unwrap();
    let (status, replayed, again) = send(&second, &path, ACME, &key, &body).await;
    assert_eq!((status, replayed.as_deref()), (200, Some("true")));
    assert_eq!(again, done);
    assert_eq!(upstream.requests().len(), 1);
    // Globex's same key is its own.
    let (status, replayed, text) =
        send(&second, "/v1/chat/completions", GLOBEX, &key, &chat(false)).await;
    assert_eq!((status, replayed), (200, None), "{text}");
    assert_eq!(upstream.requests().len(), 2);
    first.shutdown().await;
    second.shutdown().await;
}

/// The store methods alone, on both stores: claim, running, mismatch, done, release, the
/// bound (all running: full) and expiry.
async fn store_conformance(store: &dyn agent_server::store::SessionStore, tenant: &str) {
    use agent_server::store::{Claim, KeyClaim, StoredOutcome};
    let claim = |key: &str, fingerprint: &str, owner: &str, now_ms: u64| KeyClaim {
        tenant: tenant.to_owned(),
        key: key.to_owned(),
        fingerprint: fingerprint.to_owned(),
        owner: owner.to_owned(),
        now_ms,
        running_until_ms: now_ms + 1_000,
        max_keys: 2,
    };
    let now = 1_000_000;
    let first = claim("k1", "f1", "o1", now);
    assert_eq!(store.claim_key(&first).await.unwrap(), Claim::Claimed);
    assert_eq!(
        store
            .claim_key(&claim("k1", "f1", "o2", now))
            .await
            .unwrap(),
        Claim::Running
    );
    assert_eq!(
        store
            .claim_key(&claim("k1", "f2", "o2", now))
            .await
            .unwrap(),
        Claim::Mismatch
    );
    // Two running keys fill the bound; a third finds nothing finished to drop.
    assert_eq!(
        store
            .claim_key(&claim("k2", "f1", "o2", now))
            .await
            .unwrap(),
        Claim::Claimed
    );
    assert_eq!(
        store
            .claim_key(&claim("k3", "f1", "o3", now))
            .await
            .unwrap(),
        Claim::Full
    );
    // Released: the key is free again.
    store.release_key(tenant, "k2", "o2").await.unwrap();
    assert_eq!(
        store
            .claim_key(&claim("k2", "f9", "o4", now))
            .await
            .unwrap(),
        Claim::Claimed
    );
    store.release_key(tenant, "k2", "o4").await.unwrap();
    // Another owner's finish or release changes nothing.
    let outcome = StoredOutcome {
        status: 200,
        headers: vec![("content-type".into(), "text/event-stream".into())],
        body: b"data: {}\n\n".to_vec(),
        tail: false,
    };
    store
        .finish_key(tenant, "k1", "intruder", &outcome, now + 60_000)
        .await
        .unwrap();
    store.release_key(tenant, "k1", "intruder").await.unwrap();
    assert_eq!(
        store
            .claim_key(&claim("k1", "f1", "o5", now))
            .await
            .unwrap(),
        Claim::Running
    );
    // Renewed by its owner only, and only while running: past its first expiry (now + 1 s)
    // the renewed claim still holds the key.
    assert!(
        !store
            .renew_key(tenant, "k1", "intruder", now + 5_000)
            .await
            .unwrap()
    );
    assert!(
        store
            .renew_key(tenant, "k1", "o1", now + 5_000)
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .claim_key(&claim("k1", "f1", "o5", now + 2_000))
            .await
            .unwrap(),
        Claim::Running
    );
    store
        .finish_key(tenant, "k1", "o1", &outcome, now + 60_000)
        .await
        .unwrap();
    assert!(
        !store.renew_key(tenant, "k1", "o1", now + 1).await.unwrap(),
        "done"
    );
    assert_eq!(
        store
            .claim_key(&claim("k1", "f1", "o6", now))
            .await
            .unwrap(),
        Claim::Done(outcome.clone())
    );
    // Past its expiry the key is claimed anew.
    assert_eq!(
        store
            .claim_key(&claim("k1", "f1", "o7", now + 60_000))
            .await
            .unwrap(),
        Claim::Claimed
    );
    // A running claim lapses at its own, shorter, expiry.
    assert_eq!(
        store
            .claim_key(&claim("k1", "f1", "o8", now + 61_001))
            .await
            .unwrap(),
        Claim::Claimed
    );
}

#[tokio::test]
async fn the_sqlite_store_keeps_keys_as_specified() {
    let dir = tempfile::tempdir().unwrap();
    let store = agent_server::store::SqliteStore::open(dir.path().join("s.db"))
        .await
        .unwrap();
    store_conformance(&store, "acme").await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn the_postgres_store_keeps_keys_as_specified() {
    let Ok(url) = std::env::var("AGENTRY_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "AGENTRY_TEST_POSTGRES_URL is not set under CI"
        );
        return;
    };
    let store = agent_server::store::PostgresStore::connect(&url)
        .await
        .unwrap();
    // A tenant of its own per run: the database outlives the test.
    store_conformance(&store, &fresh("tenant")).await;
}

/// What a key costs a request (claim before, outcome stored after) on SQLite: printed, not
/// asserted (timings depend on the machine and its disk).
#[tokio::test]
async fn the_cost_of_a_key_is_measured() {
    const N: u32 = 40;
    let upstream = ReplayServer::start((0..2 * N).map(|_| answer("Measured.")))
        .await
        .unwrap();
    let server = TestServer::with(&config(&upstream, ""), Vec::new()).await;
    let body = chat(false);
    let mut per = Vec::new();
    for keyed in [false, true] {
        let started = std::time::Instant::now();
        for n in 0..N {
            let mut request = server.post("/v1/chat/completions", ACME).json(&body);
            if keyed {
                request = request.header("Idempotency-Key", format!("measure-{n}"));
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
            response.bytes().await.unwrap();
        }
        per.push(started.elapsed() / N);
    }
    println!(
        "chat completion over loopback: {} µs without a key, {} µs with one",
        per[0].as_micros(),
        per[1].as_micros()
    );
    server.shutdown().await;
}
