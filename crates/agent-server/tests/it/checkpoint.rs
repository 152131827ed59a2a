//! Crash recovery: each completed turn is checkpointed to the session store as it completes,
//! and a run cut off by a crashed instance continues on another one from its last checkpoint.
//!
//! A "crash" here is an instance whose tokio runtime is shut down with `shutdown_background`
//! while its run waits on the model: every task (the run, its HTTP connection, its database
//! connections) is dropped at its current await point and nothing after it runs, so no
//! final save and no lease release happen, exactly as when the process is killed. (The real
//! `kill -9` of an `agentry serve` process is in agentry-cli's tests/crash.rs.) The instances
//! share nothing but the database: each has its own `AppState`, runtime and port.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agent_backends::replay::{Cassette, Chunking, ReplayServer};
use agent_server::store::{SessionRecord, SessionStore};
use agent_server::{ServerBuilder, ServerConfig, serve};
use agent_tools::Tool;
use serde_json::{Value, json};

use crate::support::parse_sse;

const KEY: &str = "key-acme-test-0001";

/// An OpenAI chat-completions stream asking for `tool` with `args` (call id `id`).
fn call_stream(id: &str, tool: &str, args: &str) -> String {
    let call = json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
        {"index": 0, "id": id, "type": "function", "function": {"name": tool, "arguments": args}}
    ]}, "finish_reason": null}]});
    let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}});
    format!("data: {call}\n\ndata: {end}\n\ndata: [DONE]\n\n")
}

/// An OpenAI chat-completions stream answering `text`.
fn answer_stream(text: &str) -> String {
    let delta = json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
        "finish_reason": null}]});
    let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 70, "completion_tokens": 5, "total_tokens": 75}});
    format!("data: {delta}\n\ndata: {end}\n\ndata: [DONE]\n\n")
}

fn sse(body: String) -> Cassette {
    Cassette::new(200, "text/event-stream", body)
}

/// A model call that sends its first bytes and then stalls for ten minutes.
fn stalled() -> Cassette {
    sse(answer_stream("too late"))
        .with_chunking(Chunking::Every(40))
        .with_chunk_delay(Duration::from_secs(600))
}

/// A server tool `tally` that counts its executions (and takes `millis` to answer).
fn tally(count: &Arc<AtomicUsize>, millis: u64) -> Tool {
    let count = Arc::clone(count);
    Tool::from_json_fn(
        "tally",
        "Counts its calls.",
        json!({"type": "object"}),
        move |_args, _ctx| {
            let count = Arc::clone(&count);
            async move {
                let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::time::sleep(Duration::from_millis(millis)).await;
                Ok(json!({"executions": n}))
            }
        },
    )
}

fn config(upstream: &str, store: &str) -> String {
    format!(
        r#"
[server]
tools = ["calculator"]
execute_lease_secs = 2

[server.store]
{store}

[[server.models]]
name = "up"
provider = "openai-compatible"
base_url = "{upstream}/v1"

[[server.tenants]]
name = "acme"
api_keys = ["{KEY}"]
"#
    )
}

/// One server instance on its own runtime, so it can be crashed alone.
struct Instance {
    url: String,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Instance {
    fn start(config: &str, tool: Tool) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let config = ServerConfig::from_toml(config).unwrap();
        let url = runtime.block_on(async {
            let state = ServerBuilder::new(config)
                .with_tool(tool)
                .build()
                .await
                .unwrap();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            tokio::spawn(async move {
                let _ = serve(listener, state, std::future::pending()).await;
            });
            url
        });
        Self {
            url,
            runtime: Some(runtime),
        }
    }

    /// Drops every task of the instance where it stands (see the module's doc).
    fn crash(mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn client_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

async fn post(url: &str, id: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{url}/v1/sessions/{id}/execute"))
        .bearer_auth(KEY)
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn execute(url: &str, id: &str, body: &Value) -> Vec<Value> {
    let response = post(url, id, body).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    parse_sse(&response.text().await.unwrap())
}

async fn session(url: &str, id: &str) -> Value {
    reqwest::Client::new()
        .get(format!("{url}/v1/sessions/{id}"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Waits until the upstream has received `n` model calls.
fn await_calls(upstream: &ReplayServer, n: usize) {
    let started = Instant::now();
    while upstream.requests().len() < n {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the upstream got {} model calls, not {n}",
            upstream.requests().len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Executes `{}` on `url` until the crashed run's lease has expired (409 until then).
async fn continue_after_lease(url: &str, id: &str) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let response = post(url, id, &json!({})).await;
        if response.status() == 409 {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the lease never expired"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
        return parse_sse(&response.text().await.unwrap());
    }
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// The roles of a session's messages, and how many results answer `call`.
fn shape(stored: &Value, call: &str) -> (Vec<String>, usize) {
    let messages = stored["messages"].as_array().unwrap();
    let roles = messages
        .iter()
        .map(|message| message["role"].as_str().unwrap().to_owned())
        .collect();
    let results = messages
        .iter()
        .filter(|message| message["role"] == "tool" && message["tool_call_id"] == call)
        .count();
    (roles, results)
}

/// Instance A runs round 1 (the model asks for `tally`, it runs) and is crashed while the
/// second model call stalls; instance B, on the same database, continues the run from the
/// checkpoint once A's lease expires: `tally` is not run again, the model gets round 1's
/// result, and the history holds round 1 once.
#[cfg(feature = "postgres")]
#[test]
fn a_run_cut_off_on_one_instance_continues_on_another_through_postgres() {
    let Some(url) = postgres_url() else {
        return;
    };
    run_cut_off_after_round_1(&format!("kind = \"postgres\"\nurl = \"{url}\""));
}

/// The same on SQLite: an instance restarted on the same file continues the run.
#[test]
fn a_run_cut_off_continues_after_a_restart_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    run_cut_off_after_round_1(&format!("kind = \"sqlite\"\npath = \"{}\"", path.display()));
}

fn run_cut_off_after_round_1(store: &str) {
    let upstream_runtime = client_runtime();
    let upstream = upstream_runtime
        .block_on(ReplayServer::start([
            sse(call_stream("call_1", "tally", "{}")),
            stalled(),
        ]))
        .unwrap();
    let config = config(&upstream.url(), store);
    let count = Arc::new(AtomicUsize::new(0));
    let a = Instance::start(&config, tally(&count, 0));
    let b = Instance::start(&config, tally(&count, 0));
    let id = unique("ckpt");
    let client = client_runtime();

    let (a_url, first_id) = (a.url.clone(), id.clone());
    // The client of the cut-off run: its stream ends when A goes away.
    client.spawn(async move {
        let body = json!({"message": "count once", "context": {"model": "up", "tools": ["tally"]}});
        if let Ok(response) = reqwest::Client::new()
            .post(format!("{a_url}/v1/sessions/{first_id}/execute"))
            .bearer_auth(KEY)
            .json(&body)
            .send()
            .await
        {
            let _ = response.text().await;
        }
    });
    // The second model call starts only after round 1 is checkpointed.
    await_calls(&upstream, 2);
    assert_eq!(count.load(Ordering::SeqCst), 1);
    a.crash();

    client.block_on(async {
        // While A's lease lasts, the session is running and B refuses a second execute.
        let stored = session(&b.url, &id).await;
        assert_eq!(stored["status"], "running", "{stored}");
        let (roles, results) = shape(&stored, "call_1");
        assert_eq!(roles, ["user", "assistant", "tool"], "{stored}");
        assert_eq!(results, 1);

        upstream.push(sse(answer_stream("tally ran once")));
        let events = continue_after_lease(&b.url, &id).await;
        let complete = events.last().unwrap();
        assert_eq!(complete["type"], "execute_complete", "{events:?}");
        assert_eq!(complete["status"], "completed", "{complete}");

        let stored = session(&b.url, &id).await;
        let (roles, results) = shape(&stored, "call_1");
        assert_eq!(
            roles,
            ["user", "assistant", "tool", "assistant"],
            "{stored}"
        );
        assert_eq!(results, 1, "{stored}");
        assert_eq!(stored["status"], "completed");
        // Round 1's usage (checkpointed) plus the answer's.
        assert_eq!(stored["usage"]["input_tokens"], 120, "{stored}");
    });
    // Round 1's tool ran once, on A.
    assert_eq!(count.load(Ordering::SeqCst), 1);
    // The third model call (B's) carries round 1's call and result, once each.
    let requests = upstream.requests();
    assert_eq!(requests.len(), 3);
    let sent = requests[2].json().unwrap();
    let messages = sent["messages"].as_array().unwrap();
    let results: Vec<&Value> = messages
        .iter()
        .filter(|message| message["role"] == "tool")
        .collect();
    assert_eq!(results.len(), 1, "{sent}");
    assert!(
        results[0]["content"].to_string().contains("executions"),
        "{sent}"
    );
    drop(b);
}

/// A crash while a tool runs: the call was asked for and checkpointed, its result never
/// was. The next instance gives it an error result saying why, reports the session
/// `aborted` (not `running`), and `{}` continues the run without running it again.
#[test]
fn a_call_cut_off_mid_tool_gets_an_error_result_and_is_not_run_again() {
    let upstream_runtime = client_runtime();
    let upstream = upstream_runtime
        .block_on(ReplayServer::start([sse(call_stream(
            "call_slow",
            "tally",
            "{}",
        ))]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = format!(
        "kind = \"sqlite\"\npath = \"{}\"",
        dir.path().join("sessions.db").display()
    );
    let config = config(&upstream.url(), &store);
    let count = Arc::new(AtomicUsize::new(0));
    let a = Instance::start(&config, tally(&count, 600_000));
    let id = unique("ckpt-tool");
    let client = client_runtime();
    let (a_url, first_id) = (a.url.clone(), id.clone());
    client.spawn(async move {
        let body = json!({"message": "count", "context": {"model": "up", "tools": ["tally"]}});
        let _ = post(&a_url, &first_id, &body).await.text().await;
    });
    let started = Instant::now();
    while count.load(Ordering::SeqCst) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "tally never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    a.crash();

    let b = Instance::start(&config, tally(&count, 0));
    client.block_on(async {
        tokio::time::sleep(Duration::from_millis(2100)).await;
        let stored = session(&b.url, &id).await;
        assert_eq!(stored["status"], "aborted", "{stored}");
        // The list, which reads no document, says the same.
        let list: Value = reqwest::Client::new()
            .get(format!("{}/v1/sessions", b.url))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let row = list["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["id"] == id.as_str())
            .unwrap();
        assert_eq!(row["status"], "aborted", "{list}");
        let messages = stored["messages"].as_array().unwrap();
        let last = messages.last().unwrap();
        assert_eq!(last["tool_call_id"], "call_slow", "{stored}");
        assert_eq!(last["is_error"], true, "{stored}");
        assert!(
            last["content"]
                .as_str()
                .unwrap()
                .contains("the server stopped before this call finished"),
            "{stored}"
        );

        upstream.push(sse(answer_stream("it may have run")));
        let events = continue_after_lease(&b.url, &id).await;
        assert_eq!(events.last().unwrap()["status"], "completed", "{events:?}");
        let stored = session(&b.url, &id).await;
        let (roles, results) = shape(&stored, "call_slow");
        assert_eq!(
            roles,
            ["user", "assistant", "tool", "assistant"],
            "{stored}"
        );
        assert_eq!(results, 1);
    });
    assert_eq!(
        count.load(Ordering::SeqCst),
        1,
        "the cut-off call ran again"
    );
}

/// `{}` on a session whose history ends with the model's answer is refused (nothing to
/// continue), and so is any body naming no input on a session that never ran.
#[test]
fn continue_needs_a_history_that_awaits_the_model() {
    let upstream_runtime = client_runtime();
    let upstream = upstream_runtime
        .block_on(ReplayServer::start([sse(answer_stream("done"))]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = format!(
        "kind = \"sqlite\"\npath = \"{}\"",
        dir.path().join("sessions.db").display()
    );
    let count = Arc::new(AtomicUsize::new(0));
    let a = Instance::start(&config(&upstream.url(), &store), tally(&count, 0));
    let id = unique("ckpt-done");
    client_runtime().block_on(async {
        let events = execute(
            &a.url,
            &id,
            &json!({"message": "hi", "context": {"model": "up"}}),
        )
        .await;
        assert_eq!(events.last().unwrap()["status"], "completed");
        let response = post(&a.url, &id, &json!({})).await;
        assert_eq!(response.status(), 400);
        let text = response.text().await.unwrap();
        assert!(text.contains("nothing to continue"), "{text}");
    });
}

/// What one checkpoint costs: a lease-checked replace of the whole session, as the run
/// makes it at each turn, for sessions of 10 and 100 rounds. Printed (no timed assertion).
#[test]
fn checkpoint_cost_per_turn() {
    let runtime = client_runtime();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let sqlite = agent_server::store::SqliteStore::open(dir.path().join("bench.db"))
            .await
            .unwrap();
        measure("sqlite", &sqlite).await;
        #[cfg(feature = "postgres")]
        if let Some(url) = postgres_url() {
            let postgres = agent_server::store::PostgresStore::connect(&url)
                .await
                .unwrap();
            measure("postgres", &postgres).await;
        }
    });
}

async fn measure(name: &str, store: &dyn SessionStore) {
    use agent_types::{AssistantBlock, AssistantMessage, Message, ToolCall, ToolResult};

    for rounds in [10_usize, 100] {
        let mut session = agent_loop::Session::with_id(unique("bench"), "m");
        session
            .messages
            .push(Message::user("measure the checkpoints"));
        let mut record = SessionRecord {
            tenant: "bench".into(),
            model: "up".into(),
            session,
            tools: vec!["tally".into()],
            options: agent_server::store::SessionOptions::default(),
            created_at_ms: 1,
            updated_at_ms: 1,
        };
        store
            .create_leased(&record, "bench-holder", u64::MAX / 2)
            .await
            .unwrap();
        let started = Instant::now();
        for round in 0..rounds {
            let call = format!("call_{round}");
            let asked = AssistantMessage {
                content: vec![AssistantBlock::ToolCall(ToolCall::new(
                    call.as_str(),
                    "tally",
                    json!({"round": round}),
                ))],
                ..AssistantMessage::default()
            };
            // Two checkpoints per round, as the run makes them: the call, then its result.
            record.session.messages.push(Message::Assistant(asked));
            store.save(&record, "bench-holder", false).await.unwrap();
            record.session.messages.push(Message::Tool(ToolResult::ok(
                call.as_str(),
                "tally",
                "{\"executions\": 1, \"note\": \"a result of typical size for a small tool\"}",
            )));
            store.save(&record, "bench-holder", false).await.unwrap();
        }
        let per_round = started.elapsed().as_micros() / rounds as u128;
        // Straight to the process's stderr (libtest captures `eprintln!`), as store.rs does.
        let _ = writeln!(
            std::io::stderr(),
            "checkpoint cost on {name}: {per_round} µs per round (2 writes) over {rounds} rounds \
             (final session {} messages)",
            record.session.messages.len()
        );
    }
}

/// The test database's URL, or `None` (skip) outside CI when none is configured.
#[cfg(feature = "postgres")]
fn postgres_url() -> Option<String> {
    match std::env::var("AGENTRY_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "AGENTRY_TEST_POSTGRES_URL is not set under CI"
            );
            let _ = writeln!(
                std::io::stderr(),
                "skipped: set AGENTRY_TEST_POSTGRES_URL to run against PostgreSQL"
            );
            None
        }
    }
}

/// A healthy run longer than `execute_lease_secs` keeps its lease (the heartbeat renews it):
/// another request is refused with 409 all along, and the run ends normally.
#[test]
fn a_run_longer_than_the_lease_keeps_it() {
    let upstream_runtime = client_runtime();
    let upstream = upstream_runtime
        .block_on(ReplayServer::start([
            sse(call_stream("call_long", "tally", "{}")),
            sse(answer_stream("done in time")),
        ]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = format!(
        "kind = \"sqlite\"\npath = \"{}\"",
        dir.path().join("sessions.db").display()
    );
    let count = Arc::new(AtomicUsize::new(0));
    // The tool takes twice the 2 s lease.
    let a = Instance::start(&config(&upstream.url(), &store), tally(&count, 4000));
    let id = unique("ckpt-long");
    client_runtime().block_on(async {
        let (url, first_id) = (a.url.clone(), id.clone());
        let run = tokio::spawn(async move {
            let body = json!({"message": "slow", "context": {"model": "up", "tools": ["tally"]}});
            execute(&url, &first_id, &body).await
        });
        tokio::time::sleep(Duration::from_millis(3000)).await;
        let second = post(&a.url, &id, &json!({"message": "me too"})).await;
        assert_eq!(second.status(), 409, "{}", second.text().await.unwrap());
        let events = run.await.unwrap();
        assert_eq!(events.last().unwrap()["status"], "completed", "{events:?}");
    });
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

/// `renew` extends only the holder's own lease, never one taken over or released.
#[test]
fn renew_extends_only_a_lease_still_held() {
    client_runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let sqlite = agent_server::store::SqliteStore::open(dir.path().join("renew.db"))
            .await
            .unwrap();
        renews(&sqlite).await;
        #[cfg(feature = "postgres")]
        if let Some(url) = postgres_url() {
            let postgres = agent_server::store::PostgresStore::connect(&url)
                .await
                .unwrap();
            renews(&postgres).await;
        }
    });
}

async fn renews(store: &dyn SessionStore) {
    use agent_server::store::Lease;

    let record = SessionRecord {
        tenant: "renew".into(),
        model: "up".into(),
        session: agent_loop::Session::with_id(unique("renew"), "m"),
        tools: Vec::new(),
        options: agent_server::store::SessionOptions::default(),
        created_at_ms: 1,
        updated_at_ms: 1,
    };
    let id = record.id().to_owned();
    store.create_leased(&record, "first", 1_000).await.unwrap();
    assert!(store.renew("renew", &id, "first", 5_000).await.unwrap());
    // Still held at 2 000 (renewed to 5 000): another holder is refused.
    assert_eq!(
        store
            .acquire("renew", &id, "second", 2_000, 9_000)
            .await
            .unwrap(),
        Lease::Busy
    );
    assert!(!store.renew("renew", &id, "second", 9_000).await.unwrap());
    assert!(!store.renew("other", &id, "first", 9_000).await.unwrap());
    // Taken over after it expired: the first holder can no longer extend it.
    assert_eq!(
        store
            .acquire("renew", &id, "second", 6_000, 9_000)
            .await
            .unwrap(),
        Lease::Acquired
    );
    assert!(!store.renew("renew", &id, "first", 20_000).await.unwrap());
    store.release("renew", &id, "second").await.unwrap();
    assert!(!store.renew("renew", &id, "first", 20_000).await.unwrap());
}

/// A run whose lease is taken from it (its instance stalled past the lease, another execute
/// took over; here the row is changed in the database) stops at its next renewal, cannot
/// save, and its stream ends with status `error`, never `completed`.
#[test]
fn a_run_that_lost_its_lease_stops_and_never_reports_completed() {
    let upstream_runtime = client_runtime();
    let upstream = upstream_runtime
        .block_on(ReplayServer::start([
            sse(call_stream("call_held", "tally", "{}")),
            sse(answer_stream("should not be saved")),
        ]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sessions.db");
    let store = format!("kind = \"sqlite\"\npath = \"{}\"", file.display());
    let count = Arc::new(AtomicUsize::new(0));
    let a = Instance::start(&config(&upstream.url(), &store), tally(&count, 10_000));
    let id = unique("ckpt-lost");
    client_runtime().block_on(async {
        let (url, first_id) = (a.url.clone(), id.clone());
        let run = tokio::spawn(async move {
            let body = json!({"message": "hold", "context": {"model": "up", "tools": ["tally"]}});
            let started = Instant::now();
            (execute(&url, &first_id, &body).await, started.elapsed())
        });
        while count.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let taken = rusqlite::Connection::open(&file)
            .unwrap()
            .execute(
                "UPDATE sessions SET lease_holder = 'another-execute' WHERE id = ?1",
                [&id],
            )
            .unwrap();
        assert_eq!(taken, 1);
        let (events, took) = run.await.unwrap();
        let complete = events.last().unwrap();
        assert_eq!(complete["type"], "execute_complete");
        assert_eq!(complete["status"], "error", "{complete}");
        assert!(
            complete["error"]["message"]
                .as_str()
                .unwrap()
                .contains("could not be saved"),
            "{complete}"
        );
        // Stopped at the renewal (every 2/3 s), not after the 10 s tool.
        assert!(took < Duration::from_secs(8), "{took:?}");
    });
    // The second model call was never made.
    assert_eq!(upstream.requests().len(), 1);
}

/// An OpenAI chat-completions stream asking for the calculator (`call_1`, 6 * 7) and for
/// `tally` (`call_2`) in one round.
fn two_calls_stream() -> String {
    let call = json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
        {"index": 0, "id": "call_1", "type": "function",
         "function": {"name": "calculator", "arguments": "{\"expression\": \"6 * 7\"}"}},
        {"index": 1, "id": "call_2", "type": "function",
         "function": {"name": "tally", "arguments": "{}"}}
    ]}, "finish_reason": null}]});
    let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}});
    format!("data: {call}\n\ndata: {end}\n\ndata: [DONE]\n\n")
}

/// Reads an execute's SSE stream until a frame of `kind` arrives; returns the frames read.
async fn read_until(response: reqwest::Response, kind: &str) -> Vec<Value> {
    let mut response = response;
    let mut buffer = String::new();
    let mut frames = Vec::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            if let Some(data) = frame.trim().strip_prefix("data: ") {
                let value: Value = serde_json::from_str(data).unwrap();
                let done = value["type"] == kind;
                frames.push(value);
                if done {
                    return frames;
                }
            }
        }
    }
    panic!("the stream ended without a {kind} frame: {frames:?}");
}

/// The checkpoint window, closed: a round of a fast call (the calculator) and a slow one
/// (`tally`, 1.5 s); the instance is crashed the moment the client reads the fast call's
/// result. Before the result gate that result streamed 1.5 s before the round's checkpoint,
/// and the crash turned it into the recovery's error result although the client had read
/// it; now the client reads it only once the store holds it, so it survives the crash.
#[test]
fn a_result_the_client_read_survives_a_crash_right_after() {
    let window = result_window("/v1/sessions/{id}/execute", "tool_execution_end", |_| {
        json!({"message": "6 * 7, and count",
            "context": {"model": "up", "tools": ["calculator", "tally"]}})
    });
    assert_eq!(window.shown["call_id"], "call_1");
    assert_eq!(
        window.shown["output"],
        "{\"expression\":\"6 * 7\",\"result\":42}"
    );
    window.client.block_on(async {
        window.upstream.push(sse(answer_stream("42, counted")));
        let events = continue_after_lease(&window.b.url, &window.id).await;
        assert_eq!(events.last().unwrap()["status"], "completed", "{events:?}");
    });
    assert_eq!(window.count.load(Ordering::SeqCst), 1);
}

/// The same window through `POST /v1/ui/chat` (the AI SDK's UI message stream), which runs
/// the execute pipeline with its own encoder: the fast call's `tool-output-available` goes
/// out only once the round's checkpoint holds it, so a crash the moment the client reads it
/// loses nothing. Before the frontends shared the pipeline (their run task was a copy
/// without the result gate) the chunk streamed within milliseconds, 1.5 s before the
/// checkpoint, and the crash turned the result the client had shown into the recovery's
/// error result.
#[test]
fn a_ui_stream_result_the_client_read_survives_a_crash_right_after() {
    let window = result_window("/v1/ui/chat", "tool-output-available", |id| {
        json!({"id": id, "trigger": "submit-message", "messages": [{"id": "u1",
            "role": "user", "parts": [{"type": "text", "text": "6 * 7, and count"}]}],
            "session": {"model": "up", "tools": ["calculator", "tally"]}})
    });
    assert_eq!(window.shown["toolCallId"], "call_1");
    assert_eq!(window.shown["output"]["result"], 42, "{}", window.shown);
    assert_eq!(window.count.load(Ordering::SeqCst), 1);
}

/// The same window through `POST /v1/ag-ui`: `TOOL_CALL_RESULT` waits for the checkpoint.
#[test]
fn an_ag_ui_result_the_client_read_survives_a_crash_right_after() {
    let window = result_window("/v1/ag-ui", "TOOL_CALL_RESULT", |id| {
        json!({"threadId": id, "runId": "r1", "state": {}, "tools": [], "context": [],
            "messages": [{"id": "u1", "role": "user", "content": "6 * 7, and count"}],
            "forwardedProps": {"session": {"model": "up", "tools": ["calculator", "tally"]}}})
    });
    assert_eq!(window.shown["toolCallId"], "call_1");
    assert!(
        window.shown["content"].to_string().contains("42"),
        "{}",
        window.shown
    );
    assert_eq!(window.count.load(Ordering::SeqCst), 1);
}

/// After [`result_window`]: the second instance, and what the test goes on with.
struct Window {
    /// The result frame the client read as the first instance crashed.
    shown: Value,
    id: String,
    b: Instance,
    count: Arc<AtomicUsize>,
    client: tokio::runtime::Runtime,
    upstream: ReplayServer,
    _upstream_runtime: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

/// The checkpoint window through `path` (`{id}` stands for the session id): a round of a
/// fast call and a slow one (1.5 s); the instance is crashed the moment the client reads the
/// fast call's result frame (`kind`), which must have waited for the round's checkpoint, and
/// a second instance must hold that result, not the recovery's error result.
fn result_window(path: &str, kind: &str, body: impl Fn(&str) -> Value) -> Window {
    let dir = tempfile::tempdir().unwrap();
    let store = format!(
        "kind = \"sqlite\"\npath = \"{}\"",
        dir.path().join("sessions.db").display()
    );
    let upstream_runtime = client_runtime();
    let upstream = upstream_runtime
        .block_on(ReplayServer::start([sse(two_calls_stream()), stalled()]))
        .unwrap();
    let config = config(&upstream.url(), &store);
    let count = Arc::new(AtomicUsize::new(0));
    let a = Instance::start(&config, tally(&count, 1500));
    let id = unique("window");
    let client = client_runtime();
    let (seen, read_at) = client.block_on(async {
        let response = reqwest::Client::new()
            .post(format!("{}{}", a.url, path.replace("{id}", &id)))
            .bearer_auth(KEY)
            .json(&body(&id))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let started = Instant::now();
        let frames = read_until(response, kind).await;
        (frames, started.elapsed())
    });
    a.crash();
    let shown = seen.last().unwrap().clone();
    // The fast call's result waited for the slow one and the round's checkpoint.
    assert!(read_at >= Duration::from_millis(1500), "{read_at:?}");

    let b = Instance::start(&config, tally(&count, 0));
    client.block_on(async {
        let stored = session(&b.url, &id).await;
        let messages = stored["messages"].as_array().unwrap();
        let result = messages
            .iter()
            .find(|message| message["role"] == "tool" && message["tool_call_id"] == "call_1")
            .unwrap_or_else(|| panic!("the result the client read is not stored: {stored}"));
        assert!(
            result["content"].to_string().contains("42"),
            "the result the client read came back as {result}"
        );
    });
    Window {
        shown,
        id,
        b,
        count,
        client,
        upstream,
        _upstream_runtime: upstream_runtime,
        _dir: dir,
    }
}

/// What holding results back costs: `ROUNDS` rounds of one calculator call, each result
/// (its `tool_execution_end` and its `message_end`) held until its round's checkpoint
/// commits; the server's own `/metrics` sums the wait. Run with `--nocapture` for the figures
/// (docs/reliability.md quotes them).
fn measure_result_hold(store: &str, label: &str) {
    const ROUNDS: usize = 20;
    let upstream_runtime = client_runtime();
    let mut turns: Vec<Cassette> = (0..ROUNDS)
        .map(|n| {
            sse(call_stream(
                &format!("call_{n}"),
                "calculator",
                &format!("{{\"expression\": \"{n} * 7\"}}"),
            ))
        })
        .collect();
    turns.push(sse(answer_stream("done")));
    let upstream = upstream_runtime
        .block_on(ReplayServer::start(turns))
        .unwrap();
    let mut config = config(&upstream.url(), store);
    config = config.replace("[server]\n", "[server]\ncaps = { max_iterations = 50 }\n");
    let count = Arc::new(AtomicUsize::new(0));
    let a = Instance::start(&config, tally(&count, 0));
    let id = unique("hold");
    let client = client_runtime();
    let body = json!({"message": "count", "context": {"model": "up", "tools": ["calculator"],
        "options": {"max_iterations": 50}}});
    let (held, seconds) = client.block_on(async {
        let events = execute(&a.url, &id, &body).await;
        assert_eq!(events.last().unwrap()["status"], "completed", "{events:?}");
        let text = reqwest::get(format!("{}/metrics", a.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let value = |name: &str| -> f64 {
            text.lines()
                .filter(|line| line.starts_with(name))
                .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        (
            value("agentry_results_held_total"),
            value("agentry_result_hold_seconds_total"),
        )
    });
    // Each result's two events, and the run's `session_end`.
    assert!(held >= (2 * ROUNDS) as f64, "{held}");
    let per_event_ms = seconds / held * 1000.0;
    let _ = writeln!(
        std::io::stderr(),
        "{label}: {held} result events held, {per_event_ms:.2} ms added per event on average"
    );
    assert!(per_event_ms < 2000.0, "{per_event_ms}");
}

#[test]
fn the_hold_of_a_result_is_measured_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    measure_result_hold(
        &format!(
            "kind = \"sqlite\"\npath = \"{}\"",
            dir.path().join("sessions.db").display()
        ),
        "sqlite",
    );
}

#[cfg(feature = "postgres")]
#[test]
fn the_hold_of_a_result_is_measured_on_postgres() {
    let Some(url) = postgres_url() else {
        return;
    };
    measure_result_hold(&format!("kind = \"postgres\"\nurl = \"{url}\""), "postgres");
}
