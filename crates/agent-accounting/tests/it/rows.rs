use std::time::Duration;

use agent_accounting::{GroupBy, SqliteSink, StoredModelCall, StoredToolCall, UsageQuery};
use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{
    AccountingConfig, AccountingQueue, AccountingReceiver, GenerateResult, Guardrails, Input,
    Options, QueueFull, ResultCheck, ResultVerdict, RowWriter, ToolGuardrail, generate,
};
use agent_tools::{Caller, Registry, Tool};
use agent_types::{BackendError, BackendErrorKind, ModelPrice, RateCard, Usage};
use serde_json::json;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct City {
    city: String,
}

/// A tool guardrail that redacts "sunny" from results: the Denver call's row carries its
/// decision (`sky:redact`), the failed call's none.
struct Sky;

impl ToolGuardrail for Sky {
    fn name(&self) -> &str {
        "sky"
    }

    fn after_call(
        &self,
        _call: &ResultCheck<'_>,
        result: &mut agent_types::ToolResult,
    ) -> ResultVerdict {
        if result.content.contains("sunny") {
            result.content = result.content.replace("sunny", "[REDACTED]");
            ResultVerdict::Redacted("a weather word".into())
        } else {
            ResultVerdict::Keep
        }
    }
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        cache_read_tokens: Some(7),
        cache_write_5m_tokens: Some(3),
        cache_write_1h_tokens: Some(2),
        reasoning_tokens: Some(5),
    }
}

/// A two-round run: two parallel tool calls (one fails), then an answer; priced.
fn scripted() -> (ScriptedBackend, Options) {
    let mut tools = Registry::new();
    tools
        .register(Tool::from_fn(
            "weather",
            "Weather for a city.",
            |args: City, _ctx| async move {
                if args.city == "Nowhere" {
                    return Err(agent_tools::ToolError::new(
                        agent_tools::ToolErrorKind::RespondToModel,
                        "no such city",
                    ));
                }
                Ok(json!({"city": args.city, "sky": "sunny"}))
            },
        ))
        .unwrap();
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "weather", json!({"city": "Denver"}))
            .with_tool_call(agent_types::ToolCall::new(
                "call_2",
                "weather",
                json!({"city": "Nowhere"}),
            ))
            .with_usage(usage(100, 20)),
        ScriptedTurn::text("Sunny in Denver.").with_usage(usage(150, 10)),
    ])
    .with_model("test-model");
    let rates = RateCard::new().with(
        "test-model",
        ModelPrice {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            cache_read_per_mtok: Some(0.3),
            cache_write_5m_per_mtok: Some(3.75),
            cache_write_1h_per_mtok: Some(6.0),
        },
    );
    let options = Options::auto()
        .with_tools(tools)
        .with_tool_trace(true)
        .with_rate_card(rates)
        .with_guardrails(Guardrails::new().tool(Sky))
        .with_caller(Caller::new("alice").with_tenant("acme"));
    (backend, options)
}

/// Runs `scripted()` with its rows going to the writer `start` starts.
async fn run_into(start: impl FnOnce(AccountingReceiver)) -> GenerateResult {
    let (backend, options) = scripted();
    let (queue, receiver) = AccountingQueue::new(AccountingConfig::default());
    start(receiver);
    let options = options.with_accounting(queue.clone().with_provider("scripted"));
    let result = generate(
        &backend,
        Input::new("test-model").user("Weather?"),
        &options,
    )
    .await
    .unwrap();
    queue.flush().await;
    assert_eq!(queue.stats().written(), 4, "{:?}", queue.stats());
    result
}

fn check_rows(result: &GenerateResult, models: &[StoredModelCall], tools: &[StoredToolCall]) {
    assert_eq!(result.model_calls.len(), 2);
    let records: Vec<_> = models.iter().map(|m| m.record.clone()).collect();
    // Stored at the wire's resolution (microseconds), as the result serializes them.
    let wire: Vec<agent_loop::ModelCallRecord> =
        serde_json::from_value(serde_json::to_value(&result.model_calls).unwrap()).unwrap();
    assert_eq!(records, wire);
    let run_id = &models[0].run_id;
    for m in models {
        assert_eq!(m.tenant, "acme");
        assert_eq!(m.caller, "alice");
        assert_eq!(m.session, result.session_id.as_str());
        assert_eq!(&m.run_id, run_id);
        assert_eq!(m.provider, "scripted");
        assert_eq!(m.error, None);
    }
    assert!(models[0].record.cost_usd.unwrap() > 0.0);
    // The provider's response id is stored (and compared above with the record's).
    assert!(models.iter().all(|m| m.record.response_id.is_some()));
    assert_eq!(result.trace.len(), 2);
    assert_eq!(tools.len(), 2);
    for (row, entry) in tools.iter().zip(&result.trace) {
        assert_eq!(row.tenant, "acme");
        assert_eq!(row.caller, "alice");
        assert_eq!(&row.run_id, run_id);
        assert_eq!(row.round, i64::from(entry.iteration));
        assert_eq!(row.tool, entry.tool_name);
        assert_eq!(row.call_id, entry.call_id.as_str());
        let (bytes, hash) = agent_accounting::arguments_digest(&entry.arguments);
        assert_eq!(row.arguments_bytes, bytes);
        assert_eq!(
            row.arguments_bytes,
            entry.arguments.to_string().len() as i64
        );
        assert_eq!(row.arguments_sha256, hash);
        assert_eq!(row.arguments_sha256.len(), 64);
        assert_eq!(row.result_bytes, entry.result_bytes as i64);
        assert_eq!(row.sent_bytes, entry.sent_bytes as i64);
        assert_eq!(row.truncated, entry.truncated);
        assert_eq!(row.duration_us, entry.duration.as_micros() as i64);
        assert_eq!(row.error, entry.error);
        assert_eq!(
            row.outcome,
            if entry.error.is_some() { "error" } else { "ok" }
        );
        // The guardrail's decision is in the row as it is in the trace.
        let decided = entry.guardrail_decisions.as_deref().map(|decisions| {
            decisions
                .iter()
                .map(|d| format!("{}:{}", d.guardrail, d.action.as_str()))
                .collect::<Vec<_>>()
                .join(",")
        });
        assert_eq!(row.guardrails, decided);
    }
    let denver = tools.iter().find(|t| t.outcome == "ok").unwrap();
    assert_eq!(denver.guardrails.as_deref(), Some("sky:redact"));
    let nowhere = tools.iter().find(|t| t.outcome == "error").unwrap();
    assert_eq!(nowhere.guardrails, None);
    assert_ne!(tools[0].arguments_sha256, tools[1].arguments_sha256);
    assert!(tools.iter().any(|t| t.outcome == "error"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_file_gains_the_response_id_column_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("usage.db");
    let sink = SqliteSink::open(&path).unwrap();
    run_into(|receiver| {
        sink.spawn_writer(receiver).unwrap();
    })
    .await;
    drop(sink);
    // Take the file back to version 1: no response_id column, version row 1.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "ALTER TABLE model_calls DROP COLUMN response_id;
             ALTER TABLE tool_calls DROP COLUMN guardrails;
             DELETE FROM accounting_schema_version WHERE version > 1;",
        )
        .unwrap();
    }
    let sink = SqliteSink::open(&path).unwrap();
    assert_eq!(
        sink.schema_version().unwrap(),
        agent_accounting::SCHEMA_VERSION
    );
    let models = sink.model_calls("acme").unwrap();
    assert_eq!(models.len(), 2);
    assert!(models.iter().all(|m| m.record.response_id.is_none()));
    assert!(models.iter().all(|m| m.record.usage.is_some()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_rows_equal_the_runs_records_and_trace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("usage.db");
    let sink = SqliteSink::open(&path).unwrap();
    let result = run_into(|receiver| {
        sink.spawn_writer(receiver).unwrap();
    })
    .await;
    drop(sink);
    // Read back through a fresh connection: the rows are in the file.
    let sink = SqliteSink::open(&path).unwrap();
    assert_eq!(
        sink.schema_version().unwrap(),
        agent_accounting::SCHEMA_VERSION
    );
    let models = sink.model_calls("acme").unwrap();
    let tools = sink.tool_calls("acme").unwrap();
    check_rows(&result, &models, &tools);
    assert!(sink.model_calls("other").unwrap().is_empty());

    let now = models[1].at_us;
    let by_model = sink
        .usage(&UsageQuery::new(
            "acme",
            now - 60_000_000,
            now + 1,
            GroupBy::Model,
        ))
        .unwrap();
    assert_eq!(by_model.len(), 1);
    let group = &by_model[0];
    assert_eq!(group.key, "test-model");
    assert_eq!(group.model_calls, 2);
    assert_eq!(group.input_tokens, result.usage.input_tokens.unwrap());
    assert_eq!(group.output_tokens, result.usage.output_tokens.unwrap());
    assert_eq!(group.cache_write_1h_tokens, 4);
    assert_eq!(group.reasoning_tokens, 10);
    assert_eq!(group.tool_calls, 2);
    let cost: f64 = result.model_calls.iter().filter_map(|r| r.cost_usd).sum();
    assert!((group.cost_usd - cost).abs() < 1e-12);
    let other = sink
        .usage(&UsageQuery::new(
            "other",
            now - 60_000_000,
            now + 1,
            GroupBy::Day,
        ))
        .unwrap();
    assert!(other.is_empty());
    // Reopening an up-to-date file migrates nothing and keeps the rows.
    assert_eq!(
        SqliteSink::open(&path)
            .unwrap()
            .model_calls("acme")
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_model_call_is_a_row_with_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let sink = SqliteSink::open(dir.path().join("usage.db")).unwrap();
    let backend =
        ScriptedBackend::new([ScriptedTurn::new()
            .fail_with(BackendError::new(BackendErrorKind::Overloaded, "try later"))]);
    let (queue, receiver) = AccountingQueue::new(AccountingConfig::default());
    let writer = sink.spawn_writer(receiver).unwrap();
    let options = Options::auto()
        .with_caller(Caller::new("bob").with_tenant("t2"))
        .with_accounting(queue.clone());
    let error = generate(&backend, Input::new("m").user("hi"), &options)
        .await
        .unwrap_err();
    drop((options, queue));
    // The last queue clone gone, the writer thread writes what is left and ends.
    writer.join().unwrap();
    let rows = sink.model_calls("t2").unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].record.model, "m");
    assert_eq!(rows[0].record.usage, None);
    assert_eq!(rows[0].record.stop_reason, agent_types::StopReason::Error);
    assert_eq!(rows[0].error.as_deref(), Some(error.to_string().as_str()));
}

/// A writer that never finishes its first write: the queue fills.
struct Stuck;

impl RowWriter for Stuck {
    fn write<'a>(
        &'a mut self,
        _rows: &'a [agent_loop::AccountingRow],
    ) -> agent_loop::WriteFuture<'a> {
        Box::pin(std::future::pending())
    }
}

/// A writer that always fails.
struct Failing;

impl RowWriter for Failing {
    fn write<'a>(
        &'a mut self,
        _rows: &'a [agent_loop::AccountingRow],
    ) -> agent_loop::WriteFuture<'a> {
        Box::pin(async { Err("disk full".into()) })
    }
}

/// A writer that waits for a permit before each write: holds the queue full until released.
struct Gated(std::sync::Arc<tokio::sync::Semaphore>);

impl RowWriter for Gated {
    fn write<'a>(
        &'a mut self,
        _rows: &'a [agent_loop::AccountingRow],
    ) -> agent_loop::WriteFuture<'a> {
        Box::pin(async move {
            self.0.acquire().await?.forget();
            Ok(())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_drops_and_counts_without_failing_the_run() {
    let (queue, receiver) =
        AccountingQueue::new(AccountingConfig::default().with_capacity(1).with_batch(1));
    tokio::spawn(receiver.run(Stuck));
    // Each run has 4 rows (2 model calls, 2 tool calls), each sent when its call ends: the
    // writer holds at most one, the queue one more, and the rest find it full.
    for _ in 0..3 {
        let (backend, options) = scripted();
        let options = options.with_accounting(queue.clone());
        let result = tokio::time::timeout(
            Duration::from_secs(10),
            generate(
                &backend,
                Input::new("test-model").user("Weather?"),
                &options,
            ),
        )
        .await
        .expect("a stuck writer must not stall a run in drop mode")
        .unwrap();
        assert_eq!(result.text(), "Sunny in Denver.");
    }
    let stats = queue.stats();
    assert_eq!(stats.enqueued() + stats.dropped(), 12, "{stats:?}");
    assert!(stats.enqueued() <= 2, "{stats:?}");
    assert!(stats.dropped() >= 10, "{stats:?}");
    assert_eq!(stats.written(), 0, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_in_wait_mode_applies_back_pressure() {
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let (queue, receiver) = AccountingQueue::new(
        AccountingConfig::default()
            .with_capacity(1)
            .with_batch(1)
            .with_when_full(QueueFull::Wait),
    );
    tokio::spawn(receiver.run(Gated(gate.clone())));
    let (backend, options) = scripted();
    let options = options.with_accounting(queue.clone());
    let run = tokio::spawn(async move {
        generate(
            &backend,
            Input::new("test-model").user("Weather?"),
            &options,
        )
        .await
    });
    // The writer holds a row, the queue another: the run waits for room.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !run.is_finished(),
        "a full queue in wait mode must hold the run"
    );
    assert_eq!(queue.stats().written(), 0);
    // Writes go through again: the run goes on and no row is lost.
    gate.add_permits(100);
    let result = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the run goes on once the writer takes rows")
        .unwrap()
        .unwrap();
    assert_eq!(result.text(), "Sunny in Denver.");
    queue.flush().await;
    let stats = queue.stats();
    assert_eq!(stats.dropped(), 0, "{stats:?}");
    assert_eq!(stats.written(), 4, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_writer_fails_the_run_only_when_asked() {
    for fail_run in [false, true] {
        let (backend, options) = scripted();
        let (queue, receiver) = AccountingQueue::new(
            AccountingConfig::default()
                .with_batch(1)
                .with_fail_run(fail_run),
        );
        tokio::spawn(receiver.run(Failing));
        let options = options.with_accounting(queue.clone());
        let first = generate(
            &backend,
            Input::new("test-model").user("Weather?"),
            &options,
        )
        .await;
        queue.flush().await;
        assert!(queue.stats().failed_writes() >= 1);
        let (backend, _) = scripted();
        let second = generate(
            &backend,
            Input::new("test-model").user("Weather?"),
            &options,
        )
        .await;
        if fail_run {
            let error = second.unwrap_err();
            assert!(error.to_string().contains("accounting"), "{error}");
        } else {
            assert_eq!(first.unwrap().text(), "Sunny in Denver.");
            assert_eq!(second.unwrap().text(), "Sunny in Denver.");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rows_equal_the_runs_records_and_trace() {
    let Some(url) = postgres_url() else { return };
    let sink = agent_accounting::PostgresSink::connect(&url).await.unwrap();
    // Each run of this test uses its own tenant-free slate: remove earlier rows of `acme`.
    let result = {
        tokio_postgres_clean(&url).await;
        let writer = sink.clone();
        run_into(|receiver| {
            tokio::spawn(receiver.run(writer));
        })
        .await
    };
    let models = sink.model_calls("acme").await.unwrap();
    let tools = sink.tool_calls("acme").await.unwrap();
    check_rows(&result, &models, &tools);
    assert_eq!(
        sink.schema_version().await.unwrap(),
        agent_accounting::SCHEMA_VERSION
    );
    let now = models[1].at_us;
    for group_by in [GroupBy::Model, GroupBy::Session, GroupBy::Day] {
        let groups = sink
            .usage(&UsageQuery::new(
                "acme",
                now - 60_000_000,
                now + 1,
                group_by,
            ))
            .await
            .unwrap();
        assert_eq!(groups.len(), 1, "{group_by:?}");
        assert_eq!(groups[0].model_calls, 2);
        assert_eq!(groups[0].input_tokens, 250);
    }
    assert!(sink.model_calls("other").await.unwrap().is_empty());
    // A second sink on the same database migrates nothing.
    let again = agent_accounting::PostgresSink::connect(&url).await.unwrap();
    assert_eq!(again.model_calls("acme").await.unwrap().len(), 2);
}

async fn tokio_postgres_clean(url: &str) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute("DELETE FROM model_calls WHERE tenant = 'acme'; DELETE FROM tool_calls WHERE tenant = 'acme';")
        .await
        .unwrap();
}

fn postgres_url() -> Option<String> {
    match std::env::var("AGENTRY_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "AGENTRY_TEST_POSTGRES_URL is not set under CI"
            );
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_dropped_mid_way_keeps_the_rows_of_its_completed_calls() {
    let dir = tempfile::tempdir().unwrap();
    let sink = SqliteSink::open(dir.path().join("usage.db")).unwrap();
    let (queue, receiver) = AccountingQueue::new(AccountingConfig::default());
    sink.spawn_writer(receiver).unwrap();
    let (_, options) = scripted();
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "weather", json!({"city": "Denver"}))
            .with_usage(usage(100, 20)),
        ScriptedTurn::text("never").hang(),
    ]);
    let options = options.with_accounting(queue.clone());
    let dropped = tokio::time::timeout(
        Duration::from_millis(200),
        generate(
            &backend,
            Input::new("test-model").user("Weather?"),
            &options,
        ),
    )
    .await;
    assert!(
        dropped.is_err(),
        "the second model call hangs until the run is dropped"
    );
    queue.flush().await;
    let models = sink.model_calls("acme").unwrap();
    assert_eq!(models.len(), 1);
    assert_eq!(models[0].record.usage.unwrap().input_tokens, Some(100));
    let tools = sink.tool_calls("acme").unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].call_id, "call_1");
}

/// Each row is written when its call ends: a run whose third model call is slow has the rows
/// of its first two rounds in the store while it still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_reach_the_store_while_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let sink = SqliteSink::open(dir.path().join("usage.db")).unwrap();
    let (queue, receiver) = AccountingQueue::new(AccountingConfig::default());
    sink.spawn_writer(receiver).unwrap();
    let (_, options) = scripted();
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "weather", json!({"city": "Denver"}))
            .with_usage(usage(100, 20)),
        ScriptedTurn::tool_call("call_2", "weather", json!({"city": "Boulder"}))
            .with_usage(usage(120, 20)),
        ScriptedTurn::text("Sunny in both.")
            .with_usage(usage(140, 10))
            .with_delay(Duration::from_secs(3)),
    ])
    .with_model("test-model");
    let options = options.with_accounting(queue.clone());
    let run = tokio::spawn(async move {
        generate(
            &backend,
            Input::new("test-model").user("Weather?"),
            &options,
        )
        .await
    });
    let started = std::time::Instant::now();
    loop {
        let (models, tools) = (
            sink.model_calls("acme").unwrap(),
            sink.tool_calls("acme").unwrap(),
        );
        if models.len() == 2 && tools.len() == 2 {
            assert_eq!(
                tools.iter().map(|t| t.round).collect::<Vec<_>>(),
                [1, 2],
                "{tools:?}"
            );
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "rounds 1 and 2 not in the store while round 3 runs: {} model and {} tool rows",
            models.len(),
            tools.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!run.is_finished(), "the third model call is still running");
    let result = run.await.unwrap().unwrap();
    assert_eq!(result.text(), "Sunny in both.");
    queue.flush().await;
    let models = sink.model_calls("acme").unwrap();
    assert_eq!(models.len(), 3);
    let records: Vec<_> = models.iter().map(|m| m.record.clone()).collect();
    let wire: Vec<agent_loop::ModelCallRecord> =
        serde_json::from_value(serde_json::to_value(&result.model_calls).unwrap()).unwrap();
    assert_eq!(records, wire);
}

/// The sink prepares its inserts once per connection: after its connection is killed it
/// reconnects and prepares them again on the new one (a statement of the old connection
/// would fail there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_writes_go_on_after_the_connection_is_killed() {
    let Some(url) = postgres_url() else { return };
    let app = format!("acct_reconnect_{}", std::process::id());
    let sep = if url.contains('?') { '&' } else { '?' };
    let sink =
        agent_accounting::PostgresSink::connect(&format!("{url}{sep}application_name={app}"))
            .await
            .unwrap();
    let tenant = format!("reconnect-{}", std::process::id());
    let run = |sink: agent_accounting::PostgresSink, tenant: String| async move {
        let backend = ScriptedBackend::new([ScriptedTurn::text("hi").with_usage(usage(1, 1))]);
        let (queue, receiver) = AccountingQueue::new(AccountingConfig::default());
        let writer = tokio::spawn(receiver.run(sink));
        let options = Options::auto()
            .with_caller(Caller::new("p").with_tenant(tenant))
            .with_accounting(queue.clone());
        generate(&backend, Input::new("m").user("hi"), &options)
            .await
            .unwrap();
        queue.flush().await;
        let written = queue.stats().written();
        drop((options, queue));
        writer.await.unwrap();
        written
    };
    assert_eq!(run(sink.clone(), tenant.clone()).await, 1);
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .await
        .unwrap();
    // The first write after the kill may fail (counted); the sink then reconnects.
    let mut stored = 1;
    for _ in 0..20 {
        stored += run(sink.clone(), tenant.clone()).await;
        if stored >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        stored >= 3,
        "writes did not resume after the connection was killed"
    );
    assert_eq!(
        sink.model_calls(&tenant).await.unwrap().len() as u64,
        stored
    );
    admin
        .execute("DELETE FROM model_calls WHERE tenant = $1", &[&tenant])
        .await
        .unwrap();
}

/// In PostgreSQL, version 3 adds the `(tenant, session, id)` indexes the console's timeline
/// reads one session's rows by, to a new database and to one at version 2 (in a schema of its
/// own), and the planner uses them for one session's rows in id order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_one_sessions_rows_have_an_index_also_after_migrating() {
    let Some(url) = postgres_url() else { return };
    let schema = format!(
        "acct_idx_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    let separator = if url.contains('?') { '&' } else { '?' };
    let scoped = format!("{url}{separator}options=-csearch_path%3D{schema}");
    let sink = agent_accounting::PostgresSink::connect(&scoped)
        .await
        .unwrap();
    let found = tenant_session_indexes(&admin, &schema).await;
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("(tenant, session, id)"), "{found:?}");
    drop(sink);

    // Back to version 2, as a database written by the release before.
    admin
        .batch_execute(&format!(
            "DROP INDEX {schema}.model_calls_tenant_session;
             DROP INDEX {schema}.tool_calls_tenant_session;
             ALTER TABLE {schema}.tool_calls DROP COLUMN guardrails;
             DELETE FROM {schema}.accounting_schema_version WHERE version > 2;"
        ))
        .await
        .unwrap();
    assert!(tenant_session_indexes(&admin, &schema).await.is_empty());
    let sink = agent_accounting::PostgresSink::connect(&scoped)
        .await
        .unwrap();
    assert_eq!(
        sink.schema_version().await.unwrap(),
        agent_accounting::SCHEMA_VERSION
    );
    assert_eq!(tenant_session_indexes(&admin, &schema).await.len(), 2);
    let plan = admin
        .simple_query(&format!(
            "SET enable_seqscan = off; EXPLAIN SELECT * FROM {schema}.model_calls
             WHERE tenant = 'acme' AND session = 's' ORDER BY id"
        ))
        .await
        .unwrap();
    let text: Vec<String> = plan
        .iter()
        .filter_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .collect();
    assert!(
        text.iter()
            .any(|line| line.contains("model_calls_tenant_session"))
            && !text.iter().any(|line| line.contains("Sort")),
        "{text:?}"
    );
    drop(sink);
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
}

/// The definitions of the `*_tenant_session` indexes in `schema`.
async fn tenant_session_indexes(admin: &tokio_postgres::Client, schema: &str) -> Vec<String> {
    admin
        .query(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = $1
             AND indexname LIKE '%tenant_session' ORDER BY indexname",
            &[&schema],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get::<_, String>(0))
        .collect()
}

/// Whether `tool_calls` has a `guardrails` column, in SQLite.
fn sqlite_has_guardrails(path: &std::path::Path) -> bool {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.prepare("SELECT 1 FROM pragma_table_info('tool_calls') WHERE name = 'guardrails'")
        .unwrap()
        .exists([])
        .unwrap()
}

/// A version-3 file (no `guardrails` column) migrates to version 4: its rows are kept with
/// no decisions, and a run with a tool guardrail then stores its decision in the new column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_file_gains_the_guardrails_column_and_stores_decisions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("usage.db");
    let sink = SqliteSink::open(&path).unwrap();
    run_into(|receiver| {
        sink.spawn_writer(receiver).unwrap();
    })
    .await;
    drop(sink);
    // Take the file back to version 3, as the release before wrote it.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "ALTER TABLE tool_calls DROP COLUMN guardrails;
             DELETE FROM accounting_schema_version WHERE version > 3;",
        )
        .unwrap();
    }
    assert!(!sqlite_has_guardrails(&path));
    let sink = SqliteSink::open(&path).unwrap();
    assert_eq!(sink.schema_version().unwrap(), 4);
    assert_eq!(agent_accounting::SCHEMA_VERSION, 4);
    assert!(sqlite_has_guardrails(&path));
    let old = sink.tool_calls("acme").unwrap();
    assert_eq!(old.len(), 2);
    assert!(old.iter().all(|t| t.guardrails.is_none()), "{old:?}");

    let result = run_into(|receiver| {
        sink.spawn_writer(receiver).unwrap();
    })
    .await;
    let (models, tools) = sink
        .session_calls("acme", result.session_id.as_str())
        .unwrap();
    check_rows(&result, &models, &tools);
}

/// In PostgreSQL, a version-3 database (in a schema of its own) migrates to version 4: its
/// rows are kept with no decisions, and a run with a tool guardrail then stores its decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_version_3_gains_the_guardrails_column_and_stores_decisions() {
    let Some(url) = postgres_url() else { return };
    let schema = format!(
        "acct_v3_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    let separator = if url.contains('?') { '&' } else { '?' };
    let scoped = format!("{url}{separator}options=-csearch_path%3D{schema}");
    let has_column = || async {
        admin
            .query_opt(
                "SELECT 1 FROM information_schema.columns WHERE table_schema = $1
                 AND table_name = 'tool_calls' AND column_name = 'guardrails'",
                &[&schema],
            )
            .await
            .unwrap()
            .is_some()
    };
    let sink = agent_accounting::PostgresSink::connect(&scoped)
        .await
        .unwrap();
    let writer = sink.clone();
    run_into(|receiver| {
        tokio::spawn(receiver.run(writer));
    })
    .await;
    drop(sink);

    // Back to version 3, as a database written by the release before.
    admin
        .batch_execute(&format!(
            "ALTER TABLE {schema}.tool_calls DROP COLUMN guardrails;
             DELETE FROM {schema}.accounting_schema_version WHERE version > 3;"
        ))
        .await
        .unwrap();
    assert!(!has_column().await);
    let sink = agent_accounting::PostgresSink::connect(&scoped)
        .await
        .unwrap();
    assert_eq!(sink.schema_version().await.unwrap(), 4);
    assert!(has_column().await);
    let old = sink.tool_calls("acme").await.unwrap();
    assert_eq!(old.len(), 2);
    assert!(old.iter().all(|t| t.guardrails.is_none()), "{old:?}");

    let writer = agent_accounting::PostgresSink::connect(&scoped)
        .await
        .unwrap();
    let result = run_into(|receiver| {
        tokio::spawn(receiver.run(writer));
    })
    .await;
    let (models, tools) = sink
        .session_calls("acme", result.session_id.as_str())
        .await
        .unwrap();
    check_rows(&result, &models, &tools);
    drop(sink);
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
}
