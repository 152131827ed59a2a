//! The tables in a SQLite file (WAL), written by a thread of their own.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_loop::{AccountingReceiver, AccountingRow, WriteError};
use rusqlite::{Connection, params};

use crate::row::{ModelColumns, StoredModelCall, StoredToolCall, ToolColumns, record_from};
use crate::usage::{GroupBy, UsageGroup, UsageQuery, to_u64, usage_sql};
use crate::{Error, SCHEMA_VERSION};

/// Migrations, in order: entry `i` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    "
CREATE TABLE model_calls (
    id INTEGER PRIMARY KEY,
    at_us INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    caller TEXT NOT NULL,
    session TEXT NOT NULL,
    run_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    input_tokens INTEGER,
    output_tokens INTEGER,
    cache_read_tokens INTEGER,
    cache_write_5m_tokens INTEGER,
    cache_write_1h_tokens INTEGER,
    reasoning_tokens INTEGER,
    cost_usd REAL,
    latency_us INTEGER NOT NULL,
    first_event_us INTEGER NOT NULL,
    tool_calls INTEGER NOT NULL,
    stop_reason TEXT NOT NULL,
    error TEXT
);
CREATE INDEX model_calls_tenant_at ON model_calls (tenant, at_us);
CREATE TABLE tool_calls (
    id INTEGER PRIMARY KEY,
    at_us INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    caller TEXT NOT NULL,
    session TEXT NOT NULL,
    run_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    tool TEXT NOT NULL,
    call_id TEXT NOT NULL,
    arguments_bytes INTEGER NOT NULL,
    arguments_sha256 TEXT NOT NULL,
    result_bytes INTEGER NOT NULL,
    sent_bytes INTEGER NOT NULL,
    truncated INTEGER NOT NULL,
    duration_us INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    error TEXT
);
CREATE INDEX tool_calls_tenant_at ON tool_calls (tenant, at_us);
",
    // 2: the provider's response id (`gen_ai.response.id`).
    "ALTER TABLE model_calls ADD COLUMN response_id TEXT;
",
    // 3: one session's rows (the console's timeline) found without scanning the tenant's.
    "CREATE INDEX IF NOT EXISTS model_calls_tenant_session ON model_calls (tenant, session);
CREATE INDEX IF NOT EXISTS tool_calls_tenant_session ON tool_calls (tenant, session);
",
    // 4: what guardrails decided about a tool call (`name:action` pairs).
    "ALTER TABLE tool_calls ADD COLUMN guardrails TEXT;
",
];

/// A tenant's `model_calls` rows, ended by [`by_session`].
const MODEL_ROWS: &str = "SELECT at_us, tenant, caller, session, run_id, provider, round, \
    model, input_tokens, output_tokens, cache_read_tokens, cache_write_5m_tokens, \
    cache_write_1h_tokens, reasoning_tokens, cost_usd, latency_us, first_event_us, tool_calls, \
    stop_reason, error, response_id FROM model_calls WHERE tenant = ?1 AND ";

/// A tenant's `tool_calls` rows, ended by [`by_session`].
const TOOL_ROWS: &str = "SELECT at_us, tenant, caller, session, run_id, round, tool, call_id, \
    arguments_bytes, arguments_sha256, result_bytes, sent_bytes, truncated, duration_us, \
    outcome, error, guardrails FROM tool_calls WHERE tenant = ?1 AND ";

/// The end of a rows query: one session's rows by the `(tenant, session)` index, or all of
/// the tenant's. Two texts rather than `(? IS NULL OR session = ?)`, which a plan made before
/// the value is known cannot serve from the index.
fn by_session(session: Option<&str>) -> &'static str {
    match session {
        Some(_) => "session = ?2 ORDER BY id",
        None => "?2 IS NULL ORDER BY id",
    }
}

const INSERT_MODEL: &str = "INSERT INTO model_calls (at_us, tenant, caller, session, run_id, \
    round, provider, model, input_tokens, output_tokens, cache_read_tokens, \
    cache_write_5m_tokens, cache_write_1h_tokens, reasoning_tokens, cost_usd, latency_us, \
    first_event_us, tool_calls, stop_reason, error, response_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, \
    ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)";

const INSERT_TOOL: &str = "INSERT INTO tool_calls (at_us, tenant, caller, session, run_id, \
    round, tool, call_id, arguments_bytes, arguments_sha256, result_bytes, sent_bytes, \
    truncated, duration_us, outcome, error, guardrails) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, \
    ?11, ?12, ?13, ?14, ?15, ?16, ?17)";

/// `model_calls` and `tool_calls` in a SQLite file. Cheap to clone (one shared connection
/// for reads).
///
/// Rows are written by [`spawn_writer`](Self::spawn_writer): a thread of its own with its own
/// connection, which drains the accounting queue itself. So accounting never takes a runtime
/// worker or a thread of tokio's blocking pool from a busy server's other work, no batch is
/// copied between threads, and its allocations (the batch buffer, SQLite's page cache) stay
/// on that one thread instead of spreading over the blocking pool's threads and their malloc
/// arenas.
#[derive(Clone)]
pub struct SqliteSink {
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
}

impl std::fmt::Debug for SqliteSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteSink")
            .field("path", &self.path)
            .finish()
    }
}

impl SqliteSink {
    /// Opens (or creates) `path` and migrates its schema to [`SCHEMA_VERSION`]. Blocking:
    /// call it before the runtime is busy or from `spawn_blocking`.
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when the file cannot be opened or migrated, [`Error::NewerSchema`]
    /// when it was written by a newer build.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref().to_path_buf();
        let mut conn = connect(&path)?;
        migrate(&mut conn)?;
        Ok(Self {
            path,
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Starts the writer: a thread named `agentry-accounting` with its own connection to the
    /// file, draining `receiver` in batches (one transaction each) until every
    /// [`AccountingQueue`](agent_loop::AccountingQueue) clone is dropped; join the handle to
    /// wait for the last write. A failed write is counted and warned about by the receiver.
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when the connection or the thread cannot be made.
    pub fn spawn_writer(
        &self,
        receiver: AccountingReceiver,
    ) -> Result<std::thread::JoinHandle<()>, Error> {
        let mut conn = connect(&self.path)?;
        std::thread::Builder::new()
            .name("agentry-accounting".to_owned())
            .spawn(move || {
                receiver.run_blocking(|rows| {
                    write_rows(&mut conn, rows).map_err(|error| -> WriteError { Box::new(error) })
                });
            })
            .map_err(|error| Error::Store(format!("starting the writer thread: {error}")))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn with<T>(&self, op: impl FnOnce(&mut Connection) -> Result<T, Error>) -> Result<T, Error> {
        let mut conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        op(&mut conn)
    }

    /// Stores `rows` in one transaction (blocking).
    ///
    /// # Errors
    ///
    /// [`Error::Store`]; nothing of the batch is stored then.
    pub fn write_blocking(&self, rows: &[AccountingRow]) -> Result<(), Error> {
        self.with(|conn| write_rows(conn, rows))
    }

    /// Every `model_calls` row of `tenant` (empty: none), oldest first.
    ///
    /// # Errors
    ///
    /// [`Error::Store`].
    pub fn model_calls(&self, tenant: &str) -> Result<Vec<StoredModelCall>, Error> {
        self.model_rows(tenant, None)
    }

    /// The `model_calls` and `tool_calls` rows of `tenant`'s session `session`, oldest first
    /// (filtered in the query: a tenant's other rows are not read into memory).
    ///
    /// # Errors
    ///
    /// [`Error::Store`].
    pub fn session_calls(
        &self,
        tenant: &str,
        session: &str,
    ) -> Result<(Vec<StoredModelCall>, Vec<StoredToolCall>), Error> {
        Ok((
            self.model_rows(tenant, Some(session))?,
            self.tool_rows(tenant, Some(session))?,
        ))
    }

    fn model_rows(
        &self,
        tenant: &str,
        session: Option<&str>,
    ) -> Result<Vec<StoredModelCall>, Error> {
        self.with(|conn| {
            let mut statement = conn.prepare(&[MODEL_ROWS, by_session(session)].concat())?;
            let rows = statement.query_map(rusqlite::params![tenant, session], |r| {
                let stop: String = r.get(18)?;
                Ok(StoredModelCall {
                    at_us: r.get(0)?,
                    tenant: r.get(1)?,
                    caller: r.get(2)?,
                    session: r.get(3)?,
                    run_id: r.get(4)?,
                    provider: r.get(5)?,
                    record: record_from(
                        r.get(6)?,
                        r.get(7)?,
                        [
                            r.get(8)?,
                            r.get(9)?,
                            r.get(10)?,
                            r.get(11)?,
                            r.get(12)?,
                            r.get(13)?,
                        ],
                        r.get(14)?,
                        r.get(15)?,
                        r.get(16)?,
                        r.get(17)?,
                        &stop,
                        r.get(20)?,
                    ),
                    error: r.get(19)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Every `tool_calls` row of `tenant` (empty: none), oldest first.
    ///
    /// # Errors
    ///
    /// [`Error::Store`].
    pub fn tool_calls(&self, tenant: &str) -> Result<Vec<StoredToolCall>, Error> {
        self.tool_rows(tenant, None)
    }

    fn tool_rows(&self, tenant: &str, session: Option<&str>) -> Result<Vec<StoredToolCall>, Error> {
        self.with(|conn| {
            let mut statement = conn.prepare(&[TOOL_ROWS, by_session(session)].concat())?;
            let rows = statement.query_map(rusqlite::params![tenant, session], |r| {
                Ok(StoredToolCall {
                    at_us: r.get(0)?,
                    tenant: r.get(1)?,
                    caller: r.get(2)?,
                    session: r.get(3)?,
                    run_id: r.get(4)?,
                    round: r.get(5)?,
                    tool: r.get(6)?,
                    call_id: r.get(7)?,
                    arguments_bytes: r.get(8)?,
                    arguments_sha256: r.get(9)?,
                    result_bytes: r.get(10)?,
                    sent_bytes: r.get(11)?,
                    truncated: r.get(12)?,
                    duration_us: r.get(13)?,
                    outcome: r.get(14)?,
                    error: r.get(15)?,
                    guardrails: r.get(16)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// One tenant's usage, grouped (blocking).
    ///
    /// # Errors
    ///
    /// [`Error::Query`] for a query out of bounds, [`Error::Store`].
    pub fn usage(&self, query: &UsageQuery) -> Result<Vec<UsageGroup>, Error> {
        query.check()?;
        let key = match query.group_by {
            GroupBy::Model => "model",
            GroupBy::Session => "session",
            GroupBy::Day => "date(at_us / 1000000, 'unixepoch')",
        };
        let sql = usage_sql(key, ["?1", "?2", "?3", "?4"], "", "");
        self.with(|conn| {
            let mut statement = conn.prepare(&sql)?;
            let rows = statement.query_map(
                params![
                    query.tenant,
                    query.from_us,
                    query.to_us,
                    i64::from(query.max_groups)
                ],
                |r| {
                    Ok(UsageGroup {
                        key: r.get(0)?,
                        model_calls: to_u64(r.get(1)?),
                        failed_calls: to_u64(r.get(2)?),
                        tool_calls: to_u64(r.get(3)?),
                        input_tokens: to_u64(r.get(4)?),
                        output_tokens: to_u64(r.get(5)?),
                        cache_read_tokens: to_u64(r.get(6)?),
                        cache_write_5m_tokens: to_u64(r.get(7)?),
                        cache_write_1h_tokens: to_u64(r.get(8)?),
                        reasoning_tokens: to_u64(r.get(9)?),
                        cost_usd: r.get(10)?,
                    })
                },
            )?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// The schema version stored in the file.
    ///
    /// # Errors
    ///
    /// [`Error::Store`].
    pub fn schema_version(&self) -> Result<i64, Error> {
        self.with(|conn| Ok(current_version(conn)?))
    }
}

/// A connection to `path` in WAL mode that waits for other writers.
fn connect(path: &Path) -> Result<Connection, Error> {
    let conn = Connection::open(path)?;
    // Another process (an `agentry usage` reading, a server's session store) may hold a
    // write transaction: wait for it rather than fail.
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    Ok(conn)
}

fn write_rows(conn: &mut Connection, rows: &[AccountingRow]) -> Result<(), Error> {
    let tx = conn.transaction()?;
    {
        let mut model = tx.prepare_cached(INSERT_MODEL)?;
        let mut tool = tx.prepare_cached(INSERT_TOOL)?;
        for row in rows {
            match row {
                AccountingRow::ModelCall(row) => {
                    let c = ModelColumns::of(row);
                    model.execute(params![
                        c.at_us,
                        c.tenant,
                        c.caller,
                        c.session,
                        c.run_id,
                        c.round,
                        c.provider,
                        c.model,
                        c.input_tokens,
                        c.output_tokens,
                        c.cache_read_tokens,
                        c.cache_write_5m_tokens,
                        c.cache_write_1h_tokens,
                        c.reasoning_tokens,
                        c.cost_usd,
                        c.latency_us,
                        c.first_event_us,
                        c.tool_calls,
                        c.stop_reason,
                        c.error,
                        c.response_id,
                    ])?;
                }
                AccountingRow::ToolCall(row) => {
                    let c = ToolColumns::of(row);
                    tool.execute(params![
                        c.at_us,
                        c.tenant,
                        c.caller,
                        c.session,
                        c.run_id,
                        c.round,
                        c.tool,
                        c.call_id,
                        c.arguments_bytes,
                        c.arguments_sha256,
                        c.result_bytes,
                        c.sent_bytes,
                        c.truncated,
                        c.duration_us,
                        c.outcome,
                        c.error,
                        c.guardrails,
                    ])?;
                }
            }
        }
    }
    tx.commit()?;
    Ok(())
}

fn current_version(conn: &Connection) -> Result<i64, rusqlite::Error> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS accounting_schema_version (version INTEGER NOT NULL)",
    )?;
    let version: Option<i64> = conn.query_row(
        "SELECT MAX(version) FROM accounting_schema_version",
        [],
        |r| r.get(0),
    )?;
    Ok(version.unwrap_or(0))
}

fn migrate(conn: &mut Connection) -> Result<(), Error> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let found = current_version(&tx)?;
    if found > SCHEMA_VERSION {
        return Err(Error::NewerSchema { found });
    }
    for (from, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(found).unwrap_or(0))
    {
        tx.execute_batch(sql)?;
        let to = i64::try_from(from).unwrap_or(0) + 1;
        tx.execute(
            "INSERT INTO accounting_schema_version (version) VALUES (?1)",
            [to],
        )?;
    }
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// How SQLite runs one session's rows query, for each table.
    fn plans(sink: &SqliteSink) -> Vec<String> {
        sink.with(|conn| {
            let mut details = Vec::new();
            for rows in [MODEL_ROWS, TOOL_ROWS] {
                let sql = format!("EXPLAIN QUERY PLAN {rows}{}", by_session(Some("s")));
                let mut statement = conn.prepare(&sql)?;
                let found = statement
                    .query_map(rusqlite::params!["acme", "s"], |r| r.get::<_, String>(3))?
                    .collect::<Result<Vec<_>, _>>()?;
                details.push(found.join("; "));
            }
            Ok(details)
        })
        .unwrap()
    }

    /// The timeline's query reads one session's rows through `(tenant, session)`, in a new
    /// file and in one migrated from version 2 (which had only `(tenant, at_us)`): not a
    /// scan of the tenant's rows, and no sort.
    #[test]
    fn one_sessions_rows_are_found_by_the_tenant_session_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("accounting.db");
        let sink = SqliteSink::open(&path).unwrap();
        let expect = |details: Vec<String>| {
            for (detail, index) in details
                .iter()
                .zip(["model_calls_tenant_session", "tool_calls_tenant_session"])
            {
                assert!(
                    detail.contains(&format!("INDEX {index} (tenant=? AND session=?)")),
                    "{detail}"
                );
                assert!(!detail.contains("TEMP B-TREE"), "{detail}");
            }
        };
        expect(plans(&sink));
        sink.with(|conn| {
            conn.execute_batch(
                "DROP INDEX model_calls_tenant_session; DROP INDEX tool_calls_tenant_session;
                 DELETE FROM accounting_schema_version WHERE version > 2;",
            )?;
            Ok(())
        })
        .unwrap();
        let before = plans(&sink);
        assert!(!before[0].contains("tenant_session"), "{before:?}");
        // Version 2 had no `guardrails` column either (added by 4).
        sink.with(|conn| Ok(conn.execute_batch("ALTER TABLE tool_calls DROP COLUMN guardrails")?))
            .unwrap();
        drop(sink);
        let sink = SqliteSink::open(&path).unwrap();
        assert_eq!(sink.schema_version().unwrap(), SCHEMA_VERSION);
        expect(plans(&sink));
    }
}
