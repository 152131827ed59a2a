//! The session store conformance suite: every check runs against SQLite (a file in a temp dir)
//! and PostgreSQL (the database at `AGENTRY_TEST_POSTGRES_URL`, which `.ci/postgres.sh start`
//! provides). Without that variable the PostgreSQL half is skipped, except under CI, where it
//! fails.
//!
//! Ids and tenants are unique per check, so parallel runs can share one database.

#![cfg(any(feature = "sqlite", feature = "postgres"))]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use agent_loop::{Session, SessionStatus};
use agent_server::store::{
    Lease, ListFilter, Quota, QuotaKind, Removal, SessionOptions, SessionRecord, SessionStore,
    SessionSummary, StoreError, TenantUsage,
};
use agent_types::{AssistantBlock, AssistantMessage, StopReason, ToolCall, Usage, UserMessage};
use serde_json::json;

/// A store under test, with a way around it to the raw table.
struct Harness {
    store: Arc<dyn SessionStore>,
    raw: Raw,
    _dir: Option<tempfile::TempDir>,
}

/// Direct access to the table, for what the store itself refuses to do (write garbage).
enum Raw {
    #[cfg(feature = "sqlite")]
    Sqlite(std::path::PathBuf),
    #[cfg(feature = "postgres")]
    Postgres(String),
}

impl Harness {
    /// Replaces the stored document of session `id` with `data`, bypassing the store.
    async fn overwrite_data(&self, id: &str, data: &str) {
        match &self.raw {
            #[cfg(feature = "sqlite")]
            Raw::Sqlite(path) => {
                let conn = raw_sqlite(path);
                let changed = conn
                    .execute(
                        "UPDATE sessions SET data = ?1 WHERE id = ?2",
                        rusqlite::params![data, id],
                    )
                    .unwrap();
                assert_eq!(changed, 1);
            }
            #[cfg(feature = "postgres")]
            Raw::Postgres(url) => {
                let client = raw_postgres(url).await;
                let changed = client
                    .execute(
                        "UPDATE agentry_sessions SET data = $1 WHERE id = $2",
                        &[&data, &id],
                    )
                    .await
                    .unwrap();
                assert_eq!(changed, 1);
            }
        }
    }

    /// A new tenant and a [`record`] of it, created.
    async fn created(&self) -> (String, SessionRecord) {
        let tenant = unique("tenant");
        let record = record(&tenant);
        self.store.create(&record).await.unwrap();
        (tenant, record)
    }

    /// The `status` column of session `id`.
    async fn status_column(&self, id: &str) -> String {
        match &self.raw {
            #[cfg(feature = "sqlite")]
            Raw::Sqlite(path) => raw_sqlite(path)
                .query_row(
                    "SELECT status FROM sessions WHERE id = ?1",
                    rusqlite::params![id],
                    |row| row.get(0),
                )
                .unwrap(),
            #[cfg(feature = "postgres")]
            Raw::Postgres(url) => raw_postgres(url)
                .await
                .query_one("SELECT status FROM agentry_sessions WHERE id = $1", &[&id])
                .await
                .unwrap()
                .get(0),
        }
    }
}

#[cfg(feature = "sqlite")]
fn raw_sqlite(path: &std::path::Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .unwrap();
    conn
}

/// The file's schema version.
#[cfg(feature = "sqlite")]
fn user_version(conn: &rusqlite::Connection) -> i64 {
    conn.query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap()
}

#[cfg(feature = "postgres")]
async fn raw_postgres(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

#[cfg(feature = "sqlite")]
async fn sqlite() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = agent_server::store::SqliteStore::open(path.clone())
        .await
        .unwrap();
    assert_eq!(store.path(), path);
    Harness {
        store: Arc::new(store),
        raw: Raw::Sqlite(path),
        _dir: Some(dir),
    }
}

/// The test database's URL, or `None` (skip) outside CI when none is configured.
#[cfg(feature = "postgres")]
fn postgres_url() -> Option<String> {
    use std::io::Write as _;

    static SKIP_NOTICE: std::sync::Once = std::sync::Once::new();
    match std::env::var("AGENTRY_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "AGENTRY_TEST_POSTGRES_URL is not set under CI: .ci/postgres.sh start should \
                 have set it (eval \"$(bash .ci/postgres.sh start)\")"
            );
            // Straight to the process's stderr: libtest captures `eprintln!` of passing tests,
            // and a skip should not go unnoticed.
            SKIP_NOTICE.call_once(|| {
                let _ = writeln!(
                    std::io::stderr(),
                    "store tests: AGENTRY_TEST_POSTGRES_URL is not set; skipping the PostgreSQL \
                     half (eval \"$(bash .ci/postgres.sh start)\" to run it)"
                );
            });
            None
        }
    }
}

/// `url` with one more query parameter.
#[cfg(feature = "postgres")]
fn with_param(url: &str, param: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{param}")
}

#[cfg(feature = "postgres")]
async fn postgres() -> Option<Harness> {
    let url = postgres_url()?;
    let store = agent_server::store::PostgresStore::connect(&url)
        .await
        .unwrap();
    Some(Harness {
        store: Arc::new(store),
        raw: Raw::Postgres(url),
        _dir: None,
    })
}

/// A name no other check, process or earlier run uses.
fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A session with some substance: history with a tool call, a pending call, usage and cost.
fn record(tenant: &str) -> SessionRecord {
    let call = ToolCall::new("call_1", "get_weather", json!({"city": "Lisbon"}));
    let mut session = Session::with_id(unique("session"), "demo")
        .with_system("You are a concise travel assistant. Use the tools for facts; never guess.")
        .with_message(UserMessage::text(
            "What's the weather in Lisbon and in Oslo right now, and how many degrees warmer is Lisbon?",
        ))
        .with_message(AssistantMessage {
            content: vec![
                AssistantBlock::Text {
                    text: "Checking.".to_owned(),
                },
                AssistantBlock::ToolCall(call.clone()),
            ],
            stop_reason: Some(StopReason::ToolCalls),
            usage: None,
            model: Some("demo".to_owned()),
        });
    session.status = SessionStatus::AwaitingToolExecution;
    session.pending_tool_calls = vec![call];
    session.usage = Usage {
        input_tokens: Some(120),
        output_tokens: Some(30),
        ..Usage::default()
    };
    session.cost_usd = Some(0.0125);
    SessionRecord {
        tenant: tenant.to_owned(),
        model: "demo".to_owned(),
        session,
        tools: vec!["get_weather".to_owned(), "calculator".to_owned()],
        options: SessionOptions {
            max_iterations: Some(4),
            token_budget: Some(10_000),
            ..SessionOptions::default()
        },
        created_at_ms: 1_700_000_000_000,
        updated_at_ms: 1_700_000_000_000,
    }
}

/// `record` with a new message and a later write time, as an execute would save it.
fn changed(record: &SessionRecord, text: &str) -> SessionRecord {
    let mut next = record.clone();
    next.session = next.session.with_message(AssistantMessage::text(text));
    next.session.status = SessionStatus::Completed;
    next.session.pending_tool_calls.clear();
    next.updated_at_ms += 1_000;
    next
}

/// The store's calls the checks make over and over, with their `Result` unwrapped.
trait Unwrapped {
    /// `acquire`'s outcome.
    async fn lease(&self, tenant: &str, id: &str, holder: &str, now: u64, until: u64) -> Lease;
    /// `delete`'s outcome.
    async fn removal(&self, tenant: &str, id: &str, now: u64) -> Removal;
    /// `get`'s record.
    async fn stored(&self, tenant: &str, id: &str) -> Option<SessionRecord>;
}

impl<S: SessionStore + ?Sized> Unwrapped for S {
    async fn lease(&self, tenant: &str, id: &str, holder: &str, now: u64, until: u64) -> Lease {
        self.acquire(tenant, id, holder, now, until).await.unwrap()
    }

    async fn removal(&self, tenant: &str, id: &str, now: u64) -> Removal {
        self.delete(tenant, id, now).await.unwrap()
    }

    async fn stored(&self, tenant: &str, id: &str) -> Option<SessionRecord> {
        self.get(tenant, id).await.unwrap()
    }
}

/// Defines each check as one test per store: `store::sqlite::<check>` and
/// `store::postgres::<check>`.
macro_rules! conformance {
    ($($check:ident),* $(,)?) => {
        #[cfg(feature = "sqlite")]
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(&super::sqlite().await).await;
                }
            )*
        }

        #[cfg(feature = "postgres")]
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    if let Some(harness) = super::postgres().await {
                        super::$check(&harness).await;
                    }
                }
            )*
        }
    };
}

conformance! {
    create_then_get_round_trips,
    duplicate_create_is_exists,
    tenants_cannot_see_each_other,
    lease_is_busy_then_expires_and_is_reentrant,
    save_with_release_frees_the_lease,
    save_without_release_keeps_the_lease,
    save_after_losing_the_lease_writes_nothing,
    release_by_a_non_holder_does_nothing,
    delete_under_a_lease_makes_the_save_fail,
    concurrent_acquires_have_one_winner,
    corrupt_row_is_corrupt,
    create_leased_holds_the_lease_from_the_first_write,
    ids_are_per_tenant,
    read_reports_the_lease_and_delete_refuses_a_leased_session,
    list_pages_through_one_tenants_sessions_only,
    quotas_count_sessions_and_bytes_per_tenant,
    concurrent_creates_never_pass_the_session_quota,
    expire_deletes_idle_sessions_but_not_leased_ones,
    save_last_stores_the_history_and_drops_the_callers_copy,
    list_filters_compose_with_pagination_and_show_totals,
}

/// A run's last save (`save_last`) stores the whole record, history included, and leaves the
/// caller's record without its history: the history and its encoding are not both held while
/// the database writes (`memory.rs` measures what that saves). A lost lease writes nothing.
async fn save_last_stores_the_history_and_drops_the_callers_copy(h: &Harness) {
    let (tenant, record) = h.created().await;
    let id = record.id();
    assert_eq!(
        h.store.lease(&tenant, id, "h1", 1_000, 60_000).await,
        Lease::Acquired
    );
    let next = changed(&record, "Lisbon is 15 °C warmer.");
    let mut last = next.clone();
    h.store.save_last(&mut last, "h1", true).await.unwrap();
    assert!(last.session.messages.is_empty());
    assert_eq!(last.session.status, next.session.status);
    assert_eq!(h.store.stored(&tenant, id).await, Some(next.clone()));
    assert_eq!(h.status_column(id).await, "completed");
    // Released: another save by the same holder is refused.
    let mut late = changed(&next, "late");
    let error = h.store.save_last(&mut late, "h1", true).await.unwrap_err();
    assert!(matches!(error, StoreError::LeaseLost(_)), "{error:?}");
    assert_eq!(h.store.stored(&tenant, id).await, Some(next));
}

/// Another tenant's session with the same id is another session: each tenant creates,
/// reads, leases, saves and deletes its own, and neither ever sees the other's.
async fn ids_are_per_tenant(h: &Harness) {
    let (a, b) = (unique("tenant-a"), unique("tenant-b"));
    let first = record(&a);
    let id = first.id().to_owned();
    // B takes the id first: A's create still succeeds.
    let mut squatter = changed(&first, "B's own session");
    squatter.tenant.clone_from(&b);
    h.store.create(&squatter).await.unwrap();
    h.store.create(&first).await.unwrap();
    assert_eq!(h.store.stored(&a, &id).await, Some(first.clone()));
    assert_eq!(h.store.stored(&b, &id).await, Some(squatter.clone()));

    // A's lease does not block B.
    assert_eq!(
        h.store.lease(&a, &id, "ha", 1_000, 60_000).await,
        Lease::Acquired
    );
    assert_eq!(
        h.store.lease(&b, &id, "hb", 1_000, 60_000).await,
        Lease::Acquired
    );
    let saved = changed(&first, "A's answer");
    h.store.save(&saved, "ha", true).await.unwrap();
    assert_eq!(h.store.stored(&b, &id).await, Some(squatter.clone()));
    h.store.release(&b, &id, "hb").await.unwrap();
    assert_eq!(h.store.removal(&b, &id, 2_000).await, Removal::Deleted);
    assert_eq!(h.store.stored(&a, &id).await, Some(saved));
    assert_eq!(h.store.stored(&b, &id).await, None);
}

async fn read_reports_the_lease_and_delete_refuses_a_leased_session(h: &Harness) {
    let (tenant, record) = h.created().await;
    let id = record.id();
    let stored = h.store.read(&tenant, id).await.unwrap().unwrap();
    assert_eq!(
        (stored.record, stored.lease_until_ms),
        (record.clone(), None)
    );

    assert_eq!(
        h.store.lease(&tenant, id, "h1", 1_000, 60_000).await,
        Lease::Acquired
    );
    let stored = h.store.read(&tenant, id).await.unwrap().unwrap();
    assert_eq!(stored.lease_until_ms, Some(60_000));
    // Under an unexpired lease: refused, nothing deleted, the holder still saves.
    assert_eq!(h.store.removal(&tenant, id, 59_999).await, Removal::Busy);
    h.store
        .save(&changed(&record, "saved"), "h1", true)
        .await
        .unwrap();
    assert_eq!(
        h.store
            .read(&tenant, id)
            .await
            .unwrap()
            .unwrap()
            .lease_until_ms,
        None
    );
    assert_eq!(h.store.removal(&tenant, id, 2_000).await, Removal::Deleted);
    assert_eq!(h.store.removal(&tenant, id, 2_000).await, Removal::NotFound);
}

async fn list_pages_through_one_tenants_sessions_only(h: &Harness) {
    let (tenant, other) = (unique("tenant"), unique("other"));
    let mut ids = Vec::new();
    for _ in 0..5 {
        let record = record(&tenant);
        ids.push(record.id().to_owned());
        h.store.create(&record).await.unwrap();
        h.store
            .create(&record_with_tenant(&record, &other))
            .await
            .unwrap();
    }
    h.store.create(&record(&other)).await.unwrap();
    ids.sort();
    assert_eq!(
        h.store.lease(&tenant, &ids[1], "h1", 1_000, 60_000).await,
        Lease::Acquired
    );

    let first = h
        .store
        .list(&tenant, None, 2, &ListFilter::default())
        .await
        .unwrap();
    let second = h
        .store
        .list(&tenant, Some(&first[1].id), 2, &ListFilter::default())
        .await
        .unwrap();
    let third = h
        .store
        .list(&tenant, Some(&second[1].id), 2, &ListFilter::default())
        .await
        .unwrap();
    let listed: Vec<String> = first
        .iter()
        .chain(&second)
        .chain(&third)
        .map(|row| row.id.clone())
        .collect();
    assert_eq!(listed, ids);
    assert_eq!(third.len(), 1);
    assert_eq!(first[0].status, "awaiting_tool_execution");
    assert_eq!(first[0].created_at_ms, 1_700_000_000_000);
    assert_eq!(
        first[0].size_bytes,
        serde_json::to_vec(&record_with_id(&tenant, &ids[0]))
            .unwrap()
            .len() as u64
    );
    assert_eq!(first[1].lease_until_ms, Some(60_000));
    assert_eq!(first[0].lease_until_ms, None);
    assert!(
        h.store
            .list(&unique("nobody"), None, 10, &ListFilter::default())
            .await
            .unwrap()
            .is_empty()
    );
}

/// Every page of `tenant`'s sessions matching `filter`, `limit` at a time, walked by the last
/// id as `next_after` does.
async fn list_all(h: &Harness, tenant: &str, limit: u32, filter: &ListFilter) -> Vec<String> {
    let mut ids = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = h
            .store
            .list(tenant, after.as_deref(), limit, filter)
            .await
            .unwrap();
        assert!(page.len() <= limit as usize);
        ids.extend(page.iter().map(|row| row.id.clone()));
        if page.len() < limit as usize {
            return ids;
        }
        after = page.last().map(|row| row.id.clone());
    }
}

/// The list's model, tokens and cost come from columns written on every save, and `status`,
/// `model` and the id substring filter in the store, so they compose with the cursor; another
/// tenant's sessions (same ids, more of them) never appear.
async fn list_filters_compose_with_pagination_and_show_totals(h: &Harness) {
    let (tenant, other) = (unique("tenant"), unique("other"));
    let ids = [
        "s-alpha-1",
        "s-alpha-2",
        "s-beta-3",
        "s-alpha-4",
        "s-alpha-5",
        "s-beta-6",
    ];
    for (n, id) in ids.iter().enumerate() {
        let mut made = record_with_id(&tenant, id);
        if n % 2 == 1 {
            made.model = "other-model".to_owned();
        }
        h.store.create(&made).await.unwrap();
        let mut theirs = record_with_id(&other, id);
        theirs.model = "other-model".to_owned();
        h.store.create(&theirs).await.unwrap();
    }
    h.store
        .create(&record_with_id(&other, "s-alpha-9"))
        .await
        .unwrap();

    let all = ListFilter {
        now_ms: 10_000,
        ..ListFilter::default()
    };
    let rows = h.store.list(&tenant, None, 10, &all).await.unwrap();
    assert_eq!(rows.len(), ids.len());
    assert_eq!(
        (
            rows[0].model.as_str(),
            rows[0].input_tokens,
            rows[0].output_tokens,
            rows[0].cost_usd
        ),
        ("demo", Some(120), Some(30), Some(0.0125))
    );

    // A save rewrites the columns with the document: s-alpha-2 completes with more spend;
    // s-alpha-4 is saved as `running` and its lease released (a run cut off: `aborted`);
    // s-beta-3 stays leased (`running` while the lease lasts).
    let mut done = record_with_id(&tenant, "s-alpha-2");
    done.model = "other-model".to_owned();
    let mut done = changed(&done, "Lisbon is 9 degrees warmer.");
    done.session.usage.input_tokens = Some(900);
    done.session.usage.output_tokens = Some(70);
    done.session.cost_usd = Some(0.5);
    let mut cut = record_with_id(&tenant, "s-alpha-4");
    cut.model = "other-model".to_owned();
    cut.session.status = SessionStatus::Running;
    for (record, release) in [(&done, true), (&cut, true)] {
        assert_eq!(
            h.store
                .lease(&tenant, record.id(), "h1", 1_000, 60_000)
                .await,
            Lease::Acquired
        );
        h.store.save(record, "h1", release).await.unwrap();
    }
    assert_eq!(
        h.store
            .lease(&tenant, "s-beta-3", "h1", 1_000, 60_000)
            .await,
        Lease::Acquired
    );
    let rows = h.store.list(&tenant, None, 10, &all).await.unwrap();
    let two = rows.iter().find(|row| row.id == "s-alpha-2").unwrap();
    assert_eq!(
        (
            two.status.as_str(),
            two.model.as_str(),
            two.input_tokens,
            two.output_tokens,
            two.cost_usd
        ),
        ("completed", "other-model", Some(900), Some(70), Some(0.5))
    );

    let by = |status: Option<&str>, model: Option<&str>, q: Option<&str>, now_ms: u64| ListFilter {
        status: status.map(str::to_owned),
        model: model.map(str::to_owned),
        id_contains: q.map(str::to_owned),
        now_ms,
    };
    assert_eq!(
        list_all(h, &tenant, 2, &by(None, None, Some("alpha"), 10_000)).await,
        ["s-alpha-1", "s-alpha-2", "s-alpha-4", "s-alpha-5"]
    );
    assert_eq!(
        list_all(h, &tenant, 1, &by(None, Some("other-model"), None, 10_000)).await,
        ["s-alpha-2", "s-alpha-4", "s-beta-6"]
    );
    assert_eq!(
        list_all(h, &tenant, 1, &by(Some("running"), None, None, 10_000)).await,
        ["s-beta-3"]
    );
    assert_eq!(
        list_all(h, &tenant, 1, &by(Some("aborted"), None, None, 10_000)).await,
        ["s-alpha-4"]
    );
    // Leased s-beta-3 is not `awaiting_tool_execution` while the lease lasts, and is once it
    // has expired.
    assert_eq!(
        list_all(
            h,
            &tenant,
            2,
            &by(Some("awaiting_tool_execution"), None, None, 10_000)
        )
        .await,
        ["s-alpha-1", "s-alpha-5", "s-beta-6"]
    );
    assert_eq!(
        list_all(
            h,
            &tenant,
            2,
            &by(Some("awaiting_tool_execution"), None, None, 100_000)
        )
        .await,
        ["s-alpha-1", "s-alpha-5", "s-beta-3", "s-beta-6"]
    );
    // All three at once, a page of one at a time.
    assert_eq!(
        list_all(
            h,
            &tenant,
            1,
            &by(
                Some("awaiting_tool_execution"),
                Some("demo"),
                Some("alpha"),
                10_000
            )
        )
        .await,
        ["s-alpha-1", "s-alpha-5"]
    );
    // A cursor in the middle of the filtered set.
    let rest = h
        .store
        .list(
            &tenant,
            Some("s-alpha-2"),
            10,
            &by(None, None, Some("alpha"), 10_000),
        )
        .await
        .unwrap();
    assert_eq!(
        rest.iter().map(|row| row.id.as_str()).collect::<Vec<_>>(),
        ["s-alpha-4", "s-alpha-5"]
    );
    // The other tenant's s-alpha-9 and its other-model sessions never show.
    assert!(
        list_all(h, &tenant, 3, &by(None, None, Some("-9"), 10_000))
            .await
            .is_empty()
    );
    // Characters LIKE would treat specially are plain text in `q`.
    assert!(
        list_all(h, &tenant, 3, &by(None, None, Some("%"), 10_000))
            .await
            .is_empty()
    );
}

/// `record` as another tenant's session with the same id.
fn record_with_tenant(record: &SessionRecord, tenant: &str) -> SessionRecord {
    let mut copy = record.clone();
    copy.tenant = tenant.to_owned();
    copy
}

/// What [`record`] makes, with this id.
fn record_with_id(tenant: &str, id: &str) -> SessionRecord {
    let mut made = record(tenant);
    made.session.id = id.into();
    made
}

async fn quotas_count_sessions_and_bytes_per_tenant(h: &Harness) {
    let (tenant, other) = (unique("tenant"), unique("other"));
    let one = serde_json::to_vec(&record(&tenant)).unwrap().len() as u64;
    let quota = Quota {
        max_sessions: Some(3),
        max_stored_bytes: None,
    };
    for _ in 0..3 {
        h.store.insert(&record(&tenant), None, quota).await.unwrap();
    }
    let error = h
        .store
        .insert(&record(&tenant), None, quota)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            StoreError::Quota {
                quota: QuotaKind::Sessions,
                limit: 3,
                used: 3,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("max_sessions"), "{error}");
    // A taken id is `Exists` even at the quota.
    let taken = h
        .store
        .list(&tenant, None, 1, &ListFilter::default())
        .await
        .unwrap()
        .remove(0);
    let again = record_with_id(&tenant, &taken.id);
    let error = h.store.insert(&again, None, quota).await.unwrap_err();
    assert!(matches!(error, StoreError::Exists(_)), "{error:?}");
    // Another tenant's count is its own.
    h.store.insert(&record(&other), None, quota).await.unwrap();
    let usage = h.store.usage(&tenant).await.unwrap();
    assert_eq!(usage.sessions, 3);
    // Sizes differ by a digit or two with the id; about three records' worth.
    assert!(usage.bytes.abs_diff(3 * one) < 16, "{usage:?} vs {one}");

    // Bytes: room for two more records, not three.
    let bytes = Quota {
        max_sessions: None,
        max_stored_bytes: Some(usage.bytes + 2 * one + 8),
    };
    h.store.insert(&record(&tenant), None, bytes).await.unwrap();
    h.store.insert(&record(&tenant), None, bytes).await.unwrap();
    let error = h
        .store
        .insert(&record(&tenant), None, bytes)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            StoreError::Quota {
                quota: QuotaKind::StoredBytes,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(h.store.usage(&tenant).await.unwrap().sessions, 5);
    // A save that grows a session is counted.
    let mut grown = record(&tenant);
    h.store.create(&grown).await.unwrap();
    let before = h.store.usage(&tenant).await.unwrap().bytes;
    assert_eq!(
        h.store
            .lease(&tenant, grown.id(), "h1", 1_000, 60_000)
            .await,
        Lease::Acquired
    );
    grown = changed(&grown, &"x".repeat(10_000));
    h.store.save(&grown, "h1", true).await.unwrap();
    let after = h.store.usage(&tenant).await.unwrap().bytes;
    assert!(after > before + 9_000, "{before} -> {after}");
    assert_eq!(
        h.store.usage(&unique("nobody")).await.unwrap(),
        TenantUsage::default()
    );
}

/// Twenty creates at once against a quota of five: exactly five land.
async fn concurrent_creates_never_pass_the_session_quota(h: &Harness) {
    let tenant = unique("tenant");
    let quota = Quota {
        max_sessions: Some(5),
        max_stored_bytes: None,
    };
    let racers: Vec<_> = (0..20)
        .map(|_| {
            let (store, record) = (Arc::clone(&h.store), record(&tenant));
            tokio::spawn(async move { store.insert(&record, None, quota).await })
        })
        .collect();
    let mut created = 0;
    for racer in racers {
        match racer.await.unwrap() {
            Ok(()) => created += 1,
            Err(StoreError::Quota { .. }) => {}
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(created, 5);
    assert_eq!(h.store.usage(&tenant).await.unwrap().sessions, 5);
}

async fn expire_deletes_idle_sessions_but_not_leased_ones(h: &Harness) {
    let (tenant, other) = (unique("tenant"), unique("other"));
    // Written at 1_700_000_000_000 (old), 1_700_000_001_000 (old, leased) and recent.
    let old = record(&tenant);
    let leased = record(&tenant);
    let mut recent = record(&tenant);
    recent.updated_at_ms = 1_800_000_000_000;
    let foreign = record(&other);
    for record in [&old, &leased, &recent, &foreign] {
        h.store.create(record).await.unwrap();
    }
    let now = 1_800_000_000_500;
    assert_eq!(
        h.store
            .lease(&tenant, leased.id(), "h1", now, now + 60_000)
            .await,
        Lease::Acquired
    );
    let cutoff = 1_750_000_000_000;
    assert_eq!(h.store.expire(&tenant, cutoff, now, 500).await.unwrap(), 1);
    assert_eq!(h.store.stored(&tenant, old.id()).await, None);
    assert!(h.store.stored(&tenant, leased.id()).await.is_some());
    assert!(h.store.stored(&tenant, recent.id()).await.is_some());
    assert!(h.store.stored(&other, foreign.id()).await.is_some());
    // Once the lease has expired, the idle session goes too; in steps of `limit`.
    for _ in 0..3 {
        h.store.create(&record(&tenant)).await.unwrap();
    }
    let later = now + 120_000;
    assert_eq!(h.store.expire(&tenant, cutoff, later, 2).await.unwrap(), 2);
    assert_eq!(h.store.expire(&tenant, cutoff, later, 2).await.unwrap(), 2);
    assert_eq!(h.store.expire(&tenant, cutoff, later, 2).await.unwrap(), 0);
    assert_eq!(h.store.usage(&tenant).await.unwrap().sessions, 1);
}

async fn create_leased_holds_the_lease_from_the_first_write(h: &Harness) {
    let tenant = unique("tenant");
    let record = record(&tenant);
    let id = record.id();
    let lease = |holder, now, until| h.store.lease(&tenant, id, holder, now, until);
    h.store.create_leased(&record, "h1", 2_000).await.unwrap();
    assert_eq!(lease("h2", 1_000, 3_000).await, Lease::Busy);
    // The holder can save at once, without acquiring.
    h.store.save(&record, "h1", true).await.unwrap();
    assert_eq!(lease("h2", 1_000, 3_000).await, Lease::Acquired);
    assert!(matches!(
        h.store.create_leased(&record, "h3", 2_000).await,
        Err(StoreError::Exists(_))
    ));
}

async fn create_then_get_round_trips(h: &Harness) {
    let (tenant, record) = h.created().await;
    let stored = h
        .store
        .stored(&tenant, record.id())
        .await
        .expect("the session just created");
    assert_eq!(stored, record);
    assert_eq!(
        h.status_column(record.id()).await,
        "awaiting_tool_execution"
    );
    assert!(h.store.stored(&tenant, &unique("missing")).await.is_none());
}

async fn duplicate_create_is_exists(h: &Harness) {
    let (tenant, record) = h.created().await;

    let mut again = changed(&record, "a second create");
    let error = h.store.create(&again).await.unwrap_err();
    assert!(
        matches!(&error, StoreError::Exists(id) if id == record.id()),
        "{error:?}"
    );

    // Another tenant's session with this id is another session.
    again.tenant = unique("other-tenant");
    h.store.create(&again).await.unwrap();

    assert_eq!(h.store.stored(&tenant, record.id()).await, Some(record));
}

async fn tenants_cannot_see_each_other(h: &Harness) {
    let (tenant, other) = (unique("tenant"), unique("other-tenant"));
    let record = record(&tenant);
    let id = record.id();
    h.store.create(&record).await.unwrap();

    assert_eq!(h.store.stored(&other, id).await, None);
    assert_eq!(h.store.removal(&other, id, 1_000).await, Removal::NotFound);
    assert_eq!(
        h.store.lease(&other, id, "h-other", 1_000, 2_000).await,
        Lease::NotFound
    );
    h.store.release(&other, id, "h-other").await.unwrap();

    // The owner's lease, then a save that names the other tenant: refused, nothing written.
    assert_eq!(
        h.store.lease(&tenant, id, "h1", 1_000, 2_000).await,
        Lease::Acquired
    );
    let mut foreign = changed(&record, "written under another tenant");
    foreign.tenant.clone_from(&other);
    let error = h.store.save(&foreign, "h1", true).await.unwrap_err();
    assert!(matches!(error, StoreError::LeaseLost(_)), "{error:?}");

    assert_eq!(h.store.stored(&tenant, id).await, Some(record.clone()));
}

async fn lease_is_busy_then_expires_and_is_reentrant(h: &Harness) {
    let (tenant, record) = h.created().await;
    let id = record.id();

    let tenant = tenant.as_str();
    let acquire = move |holder, now, until| h.store.lease(tenant, id, holder, now, until);
    assert_eq!(acquire("h1", 1_000, 2_000).await, Lease::Acquired);
    assert_eq!(acquire("h2", 1_500, 2_500).await, Lease::Busy);
    assert_eq!(acquire("h2", 1_999, 2_999).await, Lease::Busy);
    // Re-entrant: the holder extends its own lease.
    assert_eq!(acquire("h1", 1_999, 3_000).await, Lease::Acquired);
    assert_eq!(acquire("h2", 2_500, 3_500).await, Lease::Busy);
    // Expired at exactly its end: another holder takes it over.
    assert_eq!(acquire("h2", 3_000, 4_000).await, Lease::Acquired);
    assert_eq!(acquire("h1", 3_100, 4_100).await, Lease::Busy);
    assert_eq!(acquire("h2", 3_100, 5_000).await, Lease::Acquired);

    assert_eq!(
        h.store
            .lease(tenant, &unique("missing"), "h1", 1_000, 2_000)
            .await,
        Lease::NotFound
    );
}

async fn save_with_release_frees_the_lease(h: &Harness) {
    let (tenant, record) = h.created().await;
    let id = record.id();
    let lease = |holder, now, until| h.store.lease(&tenant, id, holder, now, until);

    assert_eq!(lease("h1", 1_000, 60_000).await, Lease::Acquired);
    let next = changed(&record, "Lisbon is 15 °C warmer.");
    h.store.save(&next, "h1", true).await.unwrap();

    assert_eq!(h.store.stored(&tenant, id).await, Some(next.clone()));
    assert_eq!(h.status_column(id).await, "completed");
    // Well before the old lease would have expired, another holder gets it.
    assert_eq!(lease("h2", 1_001, 60_000).await, Lease::Acquired);
    // And the first holder, having released, can no longer write.
    let error = h
        .store
        .save(&changed(&next, "late"), "h1", false)
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::LeaseLost(_)), "{error:?}");
}

async fn save_without_release_keeps_the_lease(h: &Harness) {
    let (tenant, record) = h.created().await;
    let id = record.id();
    let lease = |holder, now, until| h.store.lease(&tenant, id, holder, now, until);

    assert_eq!(lease("h1", 1_000, 60_000).await, Lease::Acquired);
    let first = changed(&record, "round one");
    h.store.save(&first, "h1", false).await.unwrap();
    assert_eq!(lease("h2", 1_001, 60_000).await, Lease::Busy);
    let second = changed(&first, "round two");
    h.store.save(&second, "h1", true).await.unwrap();
    assert_eq!(h.store.stored(&tenant, id).await, Some(second));
}

async fn save_after_losing_the_lease_writes_nothing(h: &Harness) {
    let (tenant, record) = h.created().await;
    let id = record.id();
    let lease = |holder, now, until| h.store.lease(&tenant, id, holder, now, until);

    assert_eq!(lease("h1", 1_000, 2_000).await, Lease::Acquired);
    // h1 stalls past its lease; h2 takes over.
    assert_eq!(lease("h2", 2_500, 9_000).await, Lease::Acquired);

    let stale = changed(&record, "from the stalled execute");
    let error = h.store.save(&stale, "h1", true).await.unwrap_err();
    assert!(
        matches!(&error, StoreError::LeaseLost(lost) if lost == id),
        "{error:?}"
    );
    assert_eq!(h.store.stored(&tenant, id).await, Some(record.clone()));
    // h2 still holds it, and its write goes through.
    assert_eq!(lease("h3", 3_000, 9_000).await, Lease::Busy);
    let current = changed(&record, "from the live execute");
    h.store.save(&current, "h2", true).await.unwrap();
    assert_eq!(h.store.stored(&tenant, id).await, Some(current));
}

async fn release_by_a_non_holder_does_nothing(h: &Harness) {
    let (tenant, record) = h.created().await;
    let id = record.id();
    let lease = |holder, now, until| h.store.lease(&tenant, id, holder, now, until);

    assert_eq!(lease("h1", 1_000, 60_000).await, Lease::Acquired);
    h.store.release(&tenant, id, "h2").await.unwrap();
    assert_eq!(lease("h2", 1_001, 60_000).await, Lease::Busy);

    h.store.release(&tenant, id, "h1").await.unwrap();
    assert_eq!(lease("h2", 1_002, 60_000).await, Lease::Acquired);
    // Releasing a session nobody holds, or one that does not exist, is fine too.
    h.store
        .release(&tenant, &unique("missing"), "h1")
        .await
        .unwrap();
    assert_eq!(h.store.stored(&tenant, id).await, Some(record));
}

async fn delete_under_a_lease_makes_the_save_fail(h: &Harness) {
    let (tenant, record) = h.created().await;
    let id = record.id();
    let lease = |holder, now, until| h.store.lease(&tenant, id, holder, now, until);

    assert_eq!(lease("h1", 1_000, 60_000).await, Lease::Acquired);
    // The lease protects the session while it lasts; a stalled holder's does not forever.
    assert_eq!(h.store.removal(&tenant, id, 30_000).await, Removal::Busy);
    assert_eq!(h.store.removal(&tenant, id, 60_000).await, Removal::Deleted);
    let error = h
        .store
        .save(&changed(&record, "too late"), "h1", true)
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::LeaseLost(_)), "{error:?}");
    assert_eq!(h.store.stored(&tenant, id).await, None);
    assert_eq!(
        h.store.removal(&tenant, id, 60_000).await,
        Removal::NotFound
    );
    assert_eq!(lease("h1", 1_000, 60_000).await, Lease::NotFound);
}

async fn concurrent_acquires_have_one_winner(h: &Harness) {
    let tenant = unique("tenant");
    let record = record(&tenant);
    let id = record.id().to_owned();
    h.store.create(&record).await.unwrap();

    let racers: Vec<_> = (0..20)
        .map(|n| {
            let (store, tenant, id) = (Arc::clone(&h.store), tenant.clone(), id.clone());
            tokio::spawn(async move {
                let holder = format!("holder-{n}");
                store.lease(&tenant, &id, &holder, 1_000, 60_000).await
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for racer in racers {
        outcomes.push(racer.await.unwrap());
    }
    let won = outcomes
        .iter()
        .filter(|lease| **lease == Lease::Acquired)
        .count();
    let busy = outcomes
        .iter()
        .filter(|lease| **lease == Lease::Busy)
        .count();
    assert_eq!((won, busy), (1, 19), "{outcomes:?}");
}

async fn corrupt_row_is_corrupt(h: &Harness) {
    let (tenant, record) = h.created().await;
    let id = record.id();

    h.overwrite_data(id, "{not json").await;
    let error = h.store.get(&tenant, id).await.unwrap_err();
    assert!(
        matches!(&error, StoreError::Corrupt { id: bad, .. } if bad == id),
        "{error:?}"
    );

    // Valid JSON of another session is corrupt too: the row and its document disagree.
    let other = record_json_for(&tenant);
    h.overwrite_data(id, &other).await;
    let error = h.store.get(&tenant, id).await.unwrap_err();
    assert!(
        matches!(&error, StoreError::Corrupt { id: bad, .. } if bad == id),
        "{error:?}"
    );

    // A corrupt session can still be deleted.
    assert_eq!(h.store.removal(&tenant, id, 1_000).await, Removal::Deleted);
}

fn record_json_for(tenant: &str) -> String {
    serde_json::to_string(&record(tenant)).unwrap()
}

/// What a migration to version 3 fills in: `tenant`'s "a-old" (model `gpt-demo`, otherwise a
/// [`record`]) gets its list columns from its document, "b-garbage" (not JSON) stays listed
/// with them empty, and the model filter finds the first. Returns the rows.
async fn assert_list_columns_migrated(
    store: &dyn SessionStore,
    tenant: &str,
) -> Vec<SessionSummary> {
    let rows = store
        .list(tenant, None, 10, &ListFilter::default())
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (
            rows[0].model.as_str(),
            rows[0].input_tokens,
            rows[0].output_tokens,
            rows[0].cost_usd
        ),
        ("gpt-demo", Some(120), Some(30), Some(0.0125))
    );
    assert_eq!(
        (
            rows[1].model.as_str(),
            rows[1].input_tokens,
            rows[1].cost_usd
        ),
        ("", None, None)
    );
    let filter = ListFilter {
        model: Some("gpt-demo".to_owned()),
        ..ListFilter::default()
    };
    assert_eq!(
        store.list(tenant, None, 10, &filter).await.unwrap().len(),
        1
    );
    rows
}

#[cfg(feature = "sqlite")]
mod sqlite_only {
    use super::*;
    use agent_server::store::SqliteStore;

    /// Operations that arrive together share a transaction; one that fails (a duplicate id)
    /// fails alone and the others are stored.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_of_concurrent_writes_keeps_each_outcome_apart() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(dir.path().join("s.db")).await.unwrap());
        let tenant = unique("tenant");
        let records: Vec<SessionRecord> = (0..200).map(|_| record(&tenant)).collect();
        let duplicate = records[7].clone();
        let mut tasks = Vec::new();
        for record in records.iter().cloned().chain([duplicate]) {
            let store = Arc::clone(&store);
            tasks.push(tokio::spawn(async move { store.create(&record).await }));
        }
        let mut exists = 0;
        for task in tasks {
            match task.await.unwrap() {
                Ok(()) => {}
                Err(StoreError::Exists(_)) => exists += 1,
                Err(other) => panic!("{other}"),
            }
        }
        assert_eq!(exists, 1);
        for record in &records {
            assert!(store.stored(&tenant, record.id()).await.is_some());
        }
    }

    /// The "seen": 100 creates of 1 MiB from one tenant made another tenant's create
    /// take 200 ms instead of 0.5 ms, because the writer committed everything waiting as one
    /// transaction. Here the bulk tenant's 100 creates are queued first (another connection
    /// holds the file's write lock meanwhile, as a burst of requests outruns the disk), then
    /// the small tenant's one; the lock is let go and the small create's latency is measured.
    /// Before the fair batches it waited for a 99 MiB commit. The bound asserted is generous
    /// (a shared CI machine); the numbers are printed (`--no-capture`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn large_writes_of_one_tenant_do_not_stall_anothers_creates() {
        use std::time::{Duration, Instant};

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = Arc::new(SqliteStore::open(path.clone()).await.unwrap());
        let (bulk, small) = (unique("bulk"), unique("small"));
        let mut large = record(&bulk);
        large.session.system = Some("x".repeat(1024 * 1024));

        let lock = raw_sqlite(&path);
        lock.execute_batch("BEGIN IMMEDIATE").unwrap();
        // The bulk tenant's requests run on a runtime of their own, as other connections'
        // would: encoding 100 MiB of JSON (slow in a debug build) must not starve the small
        // tenant's task of a thread.
        let bulk_runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let writers: Vec<_> = (0..100)
            .map(|_| {
                let (store, mut record) = (Arc::clone(&store), large.clone());
                record.session.id = unique("large").into();
                bulk_runtime.spawn(async move {
                    store.create(&record).await.unwrap();
                    Instant::now()
                })
            })
            .collect();
        // Within the store's 5 s busy timeout: long enough for the 100 to be encoded and
        // queued.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let small_create = {
            let (store, record) = (Arc::clone(&store), record(&small));
            tokio::spawn(async move {
                store.create(&record).await.unwrap();
                Instant::now()
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let released = Instant::now();
        lock.execute_batch("COMMIT").unwrap();
        let small_latency = small_create.await.unwrap() - released;
        let mut last = released;
        for writer in writers {
            last = last.max(writer.await.unwrap());
        }
        bulk_runtime.shutdown_background();
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!(
                "behind 100 queued 1 MiB creates of another tenant, a small create took \
                 {small_latency:?}; the 100 large ones took {:?}\n",
                last - released
            )
            .as_bytes(),
        );
        assert!(small_latency < Duration::from_secs(1), "{small_latency:?}");
        assert_eq!(store.usage(&bulk).await.unwrap().sessions, 100);
        assert_eq!(store.usage(&small).await.unwrap().sessions, 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reopening_the_file_keeps_sessions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested").join("sessions.db");
        let tenant = unique("tenant");
        let record = record(&tenant);
        {
            let store = SqliteStore::open(path.clone()).await.unwrap();
            store.create(&record).await.unwrap();
            assert_eq!(
                store.lease(&tenant, record.id(), "h1", 1_000, 60_000).await,
                Lease::Acquired
            );
        }
        let store = SqliteStore::open(path.clone()).await.unwrap();
        assert_eq!(
            store.stored(&tenant, record.id()).await,
            Some(record.clone())
        );
        // The lease survived the restart too.
        assert_eq!(
            store.lease(&tenant, record.id(), "h2", 2_000, 60_000).await,
            Lease::Busy
        );

        let conn = raw_sqlite(&path);
        let version = user_version(&conn);
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |row| row.get(0))
            .unwrap();
        assert_eq!((version, mode.as_str()), (3, "wal"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_newer_schema_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        drop(SqliteStore::open(path.clone()).await.unwrap());
        raw_sqlite(&path)
            .pragma_update(None, "user_version", 4)
            .unwrap();

        let error = SqliteStore::open(path.clone()).await.unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, StoreError::Database(_)), "{error:?}");
        assert!(message.contains("newer agentry"), "{message}");
        assert!(message.contains("version 4"), "{message}");
    }

    /// A version 1 file (ids unique across tenants, no sizes) opens as version 2 with its
    /// sessions, leases and all, and then lets another tenant use a taken id.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_version_1_file_is_migrated_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let tenant = unique("tenant");
        let old = record(&tenant);
        let data = serde_json::to_string(&old).unwrap();
        {
            let conn = raw_sqlite(&path);
            conn.execute_batch(
                "CREATE TABLE sessions (
                    id TEXT PRIMARY KEY NOT NULL, tenant TEXT NOT NULL, status TEXT NOT NULL,
                    data TEXT NOT NULL, created_at_ms INTEGER NOT NULL,
                    updated_at_ms INTEGER NOT NULL, lease_holder TEXT, lease_until_ms INTEGER
                ) STRICT;
                PRAGMA user_version = 1;",
            )
            .unwrap();
            conn.execute(
                "INSERT INTO sessions VALUES (?1, ?2, 'awaiting_tool_execution', ?3, 1, 2, 'h1', 60000)",
                rusqlite::params![old.id(), tenant, data],
            )
            .unwrap();
        }
        let store = SqliteStore::open(path.clone()).await.unwrap();
        let stored = store.read(&tenant, old.id()).await.unwrap().unwrap();
        assert_eq!(stored.record, old);
        assert_eq!(stored.lease_until_ms, Some(60_000));
        let usage = store.usage(&tenant).await.unwrap();
        assert_eq!((usage.sessions, usage.bytes), (1, data.len() as u64));
        store
            .create(&record_with_tenant(&old, &unique("other")))
            .await
            .unwrap();
        let version = user_version(&raw_sqlite(&path));
        assert_eq!(version, 3);
    }

    /// A version 2 file (no list columns) opens as version 3 with each session's model,
    /// tokens and cost filled from its document; a row whose document is not JSON stays
    /// listed with empty columns instead of failing the migration.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_version_2_file_gets_the_list_columns_from_its_documents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let tenant = unique("tenant");
        let mut old = record_with_id(&tenant, "a-old");
        old.model = "gpt-demo".to_owned();
        let data = serde_json::to_string(&old).unwrap();
        {
            // Exactly the version 2 schema of the release before.
            let conn = raw_sqlite(&path);
            conn.execute_batch(
                "CREATE TABLE sessions (
                    tenant TEXT NOT NULL, id TEXT NOT NULL, status TEXT NOT NULL,
                    size_bytes INTEGER NOT NULL, created_at_ms INTEGER NOT NULL,
                    updated_at_ms INTEGER NOT NULL, lease_holder TEXT, lease_until_ms INTEGER,
                    data TEXT NOT NULL, PRIMARY KEY (tenant, id)
                ) STRICT;
                CREATE INDEX sessions_by_idle ON sessions (tenant, updated_at_ms);
                PRAGMA user_version = 2;",
            )
            .unwrap();
            for (id, data) in [("a-old", data.as_str()), ("b-garbage", "not json")] {
                conn.execute(
                    "INSERT INTO sessions VALUES (?1, ?2, 'idle', ?3, 1, 2, NULL, NULL, ?4)",
                    rusqlite::params![tenant, id, data.len() as i64, data],
                )
                .unwrap();
            }
        }
        let store = SqliteStore::open(path.clone()).await.unwrap();
        let rows = assert_list_columns_migrated(&store, &tenant).await;
        assert_eq!(rows[0].size_bytes, data.len() as u64);
        assert_eq!(store.stored(&tenant, "a-old").await, Some(old));
        let conn = raw_sqlite(&path);
        let version = user_version(&conn);
        let index: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'sessions_by_idle'
                 AND tbl_name = 'sessions'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!((version, index), (3, 1));
    }

    /// The session file and SQLite's `-wal` and `-shm` are private to the server's user, and
    /// so is the directory the store creates.
    #[cfg(unix)]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_session_files_are_created_0600() {
        use std::os::unix::fs::PermissionsExt;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data").join("sessions.db");
        let store = SqliteStore::open(path.clone()).await.unwrap();
        store.create(&record(&unique("tenant"))).await.unwrap();
        let mode =
            |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        for suffix in ["", "-wal", "-shm"] {
            let file = std::path::PathBuf::from(format!("{}{suffix}", path.display()));
            assert_eq!(mode(&file), 0o600, "{}", file.display());
        }
        assert_eq!(mode(path.parent().unwrap()), 0o700);

        // A file left readable by others is narrowed when the store opens it.
        drop(store);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let _store = SqliteStore::open(path.clone()).await.unwrap();
        assert_eq!(mode(&path), 0o600);
    }
}

#[cfg(feature = "postgres")]
mod postgres_only {
    use super::*;
    use agent_server::store::PostgresStore;

    /// A version 1 table (ids unique across tenants, no sizes), in a schema of its own: the
    /// store migrates it to version 2 with its rows, and a newer version is refused.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_version_1_table_is_migrated_and_a_newer_one_refused() {
        let Some(url) = postgres_url() else { return };
        let schema = unique("mig").replace('-', "_");
        let admin = raw_postgres(&url).await;
        admin
            .batch_execute(&format!(
                "CREATE SCHEMA {schema};
                 CREATE TABLE {schema}.agentry_sessions (
                    id TEXT PRIMARY KEY, tenant TEXT NOT NULL, status TEXT NOT NULL,
                    data TEXT NOT NULL, created_at_ms BIGINT NOT NULL,
                    updated_at_ms BIGINT NOT NULL, lease_holder TEXT, lease_until_ms BIGINT)"
            ))
            .await
            .unwrap();
        let tenant = unique("tenant");
        let old = record(&tenant);
        let data = serde_json::to_string(&old).unwrap();
        admin
            .execute(
                &format!(
                    "INSERT INTO {schema}.agentry_sessions
                     VALUES ($1, $2, 'idle', $3, 1, 2, 'h1', 60000)"
                ),
                &[&old.id(), &tenant, &data],
            )
            .await
            .unwrap();
        let scoped = with_param(&url, &format!("options=-csearch_path%3D{schema}"));
        let store = PostgresStore::connect(&scoped).await.unwrap();
        let stored = store.read(&tenant, old.id()).await.unwrap().unwrap();
        assert_eq!(stored.record, old);
        assert_eq!(stored.lease_until_ms, Some(60_000));
        assert_eq!(store.usage(&tenant).await.unwrap().bytes, data.len() as u64);
        store
            .create(&record_with_tenant(&old, &unique("other")))
            .await
            .unwrap();
        drop(store);
        // Connecting again is a no-op; a newer schema is refused.
        drop(PostgresStore::connect(&scoped).await.unwrap());
        admin
            .batch_execute(&format!("UPDATE {schema}.agentry_schema SET version = 4"))
            .await
            .unwrap();
        let error = PostgresStore::connect(&scoped).await.unwrap_err();
        assert!(error.to_string().contains("newer agentry"), "{error}");
        admin
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
    }

    /// A version 2 table (no list columns), in a schema of its own: the store adds them and
    /// fills them from each document; a row whose document is not JSON stays listed with an
    /// empty model instead of failing the migration.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_version_2_table_gets_the_list_columns_from_its_documents() {
        let Some(url) = postgres_url() else { return };
        let schema = unique("mig2").replace('-', "_");
        let admin = raw_postgres(&url).await;
        // Exactly the version 2 schema of the release before.
        admin
            .batch_execute(&format!(
                "CREATE SCHEMA {schema};
                 CREATE TABLE {schema}.agentry_schema (version INTEGER NOT NULL);
                 INSERT INTO {schema}.agentry_schema VALUES (2);
                 CREATE TABLE {schema}.agentry_sessions (
                    tenant TEXT NOT NULL, id TEXT NOT NULL, status TEXT NOT NULL,
                    data TEXT NOT NULL, created_at_ms BIGINT NOT NULL,
                    updated_at_ms BIGINT NOT NULL, lease_holder TEXT, lease_until_ms BIGINT,
                    size_bytes BIGINT, PRIMARY KEY (tenant, id));
                 CREATE INDEX agentry_sessions_by_idle
                    ON {schema}.agentry_sessions (tenant, updated_at_ms)"
            ))
            .await
            .unwrap();
        let tenant = unique("tenant");
        let mut old = record_with_id(&tenant, "a-old");
        old.model = "gpt-demo".to_owned();
        let data = serde_json::to_string(&old).unwrap();
        for (id, data) in [("a-old", data.as_str()), ("b-garbage", "not json")] {
            admin
                .execute(
                    &format!(
                        "INSERT INTO {schema}.agentry_sessions
                         VALUES ($1, $2, 'idle', $3, 1, 2, NULL, NULL, $4)"
                    ),
                    &[&tenant, &id, &data, &(data.len() as i64)],
                )
                .await
                .unwrap();
        }
        let scoped = with_param(&url, &format!("options=-csearch_path%3D{schema}"));
        let store = PostgresStore::connect(&scoped).await.unwrap();
        assert_list_columns_migrated(&store, &tenant).await;
        drop(store);
        // Connecting again changes nothing.
        drop(PostgresStore::connect(&scoped).await.unwrap());
        let version: i32 = admin
            .query_one(
                &format!("SELECT max(version) FROM {schema}.agentry_schema"),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(version, 3);
        admin
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn instances_starting_at_once_all_connect() {
        let Some(url) = postgres_url() else { return };
        let connects: Vec<_> = (0..4)
            .map(|_| {
                let url = url.clone();
                tokio::spawn(async move { PostgresStore::connect(&url).await })
            })
            .collect();
        for connect in connects {
            connect.await.unwrap().unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_connection_is_replaced_on_the_next_call() {
        let Some(url) = postgres_url() else { return };
        // A name to find this store's connection by, and only it.
        let name = unique("agentry-reconnect").replace('-', "_");
        let store = PostgresStore::connect(&with_param(&url, &format!("application_name={name}")))
            .await
            .unwrap();
        let tenant = unique("tenant");
        let record = record(&tenant);
        store.create(&record).await.unwrap();

        let admin = raw_postgres(&url).await;
        let killed: bool = admin
            .query_one(
                "SELECT bool_or(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE application_name = $1",
                &[&name],
            )
            .await
            .unwrap()
            .get(0);
        assert!(killed, "the store's connection was not found");

        assert_eq!(
            store.stored(&tenant, record.id()).await,
            Some(record.clone())
        );
        assert_eq!(
            store.lease(&tenant, record.id(), "h1", 1_000, 60_000).await,
            Lease::Acquired
        );
    }
}
