//! The tables in PostgreSQL: one connection, reconnected when it closes; batches are one
//! transaction each.

use std::sync::Arc;

use agent_loop::{AccountingRow, RowWriter, WriteError, WriteFuture};
use tokio::sync::Mutex;
use tokio_postgres::{Client, NoTls, Statement};

use crate::row::{ModelColumns, StoredModelCall, StoredToolCall, ToolColumns, record_from};
use crate::usage::{GroupBy, UsageGroup, UsageQuery, to_u64, usage_sql};
use crate::{Error, SCHEMA_VERSION};

/// Serializes migrations across instances starting at once ("agentacc" in ASCII).
const SCHEMA_LOCK: i64 = 0x6167_656e_7461_6363;

/// Migrations, in order: entry `i` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    "
CREATE TABLE model_calls (
    id BIGSERIAL PRIMARY KEY,
    at_us BIGINT NOT NULL,
    tenant TEXT NOT NULL,
    caller TEXT NOT NULL,
    session TEXT NOT NULL,
    run_id TEXT NOT NULL,
    round BIGINT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    input_tokens BIGINT,
    output_tokens BIGINT,
    cache_read_tokens BIGINT,
    cache_write_5m_tokens BIGINT,
    cache_write_1h_tokens BIGINT,
    reasoning_tokens BIGINT,
    cost_usd DOUBLE PRECISION,
    latency_us BIGINT NOT NULL,
    first_event_us BIGINT NOT NULL,
    tool_calls BIGINT NOT NULL,
    stop_reason TEXT NOT NULL,
    error TEXT
);
CREATE INDEX model_calls_tenant_at ON model_calls (tenant, at_us);
CREATE TABLE tool_calls (
    id BIGSERIAL PRIMARY KEY,
    at_us BIGINT NOT NULL,
    tenant TEXT NOT NULL,
    caller TEXT NOT NULL,
    session TEXT NOT NULL,
    run_id TEXT NOT NULL,
    round BIGINT NOT NULL,
    tool TEXT NOT NULL,
    call_id TEXT NOT NULL,
    arguments_bytes BIGINT NOT NULL,
    arguments_sha256 TEXT NOT NULL,
    result_bytes BIGINT NOT NULL,
    sent_bytes BIGINT NOT NULL,
    truncated BOOLEAN NOT NULL,
    duration_us BIGINT NOT NULL,
    outcome TEXT NOT NULL,
    error TEXT
);
CREATE INDEX tool_calls_tenant_at ON tool_calls (tenant, at_us);
",
    // 2: the provider's response id (`gen_ai.response.id`).
    "ALTER TABLE model_calls ADD COLUMN response_id TEXT;
",
    // 3: one session's rows (the console's timeline) found without scanning the tenant's.
    "CREATE INDEX IF NOT EXISTS model_calls_tenant_session ON model_calls (tenant, session, id);
CREATE INDEX IF NOT EXISTS tool_calls_tenant_session ON tool_calls (tenant, session, id);
",
    // 4: what guardrails decided about a tool call (`name:action` pairs).
    "ALTER TABLE tool_calls ADD COLUMN guardrails TEXT;
",
];

/// The end of a rows query: one session's rows by the `(tenant, session)` index, or all of
/// the tenant's. Two texts rather than `(? IS NULL OR session = ?)`, which a plan made before
/// the value is known cannot serve from the index.
fn by_session(session: Option<&str>) -> &'static str {
    match session {
        Some(_) => "session = $2 ORDER BY id",
        None => "$2::TEXT IS NULL ORDER BY id",
    }
}

const INSERT_MODEL: &str = "INSERT INTO model_calls (at_us, tenant, caller, session, run_id, \
    round, provider, model, input_tokens, output_tokens, cache_read_tokens, \
    cache_write_5m_tokens, cache_write_1h_tokens, reasoning_tokens, cost_usd, latency_us, \
    first_event_us, tool_calls, stop_reason, error, response_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, \
    $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)";

const INSERT_TOOL: &str = "INSERT INTO tool_calls (at_us, tenant, caller, session, run_id, \
    round, tool, call_id, arguments_bytes, arguments_sha256, result_bytes, sent_bytes, \
    truncated, duration_us, outcome, error, guardrails) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, \
    $11, $12, $13, $14, $15, $16, $17)";

/// `model_calls` and `tool_calls` in PostgreSQL. Cheap to clone (one shared connection).
///
/// A write is a `BEGIN … COMMIT` on the shared connection: give the writer
/// ([`AccountingReceiver::run`](agent_loop::AccountingReceiver::run)) a sink of its own (a
/// second [`connect`](Self::connect)) when the same process also reads through one, so reads
/// never run inside a write's transaction.
#[derive(Clone)]
pub struct PostgresSink {
    url: Arc<str>,
    client: Arc<Mutex<Connection>>,
}

/// The connection and, once a batch was written, its two prepared inserts: rows come a few
/// at a time (each as its call ends), so preparing per batch would double the round trips.
struct Connection {
    client: Arc<Client>,
    inserts: Option<(Statement, Statement)>,
}

impl std::fmt::Debug for PostgresSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password: not printed.
        f.debug_struct("PostgresSink").finish_non_exhaustive()
    }
}

impl PostgresSink {
    /// Connects to `url` (no TLS) and migrates the schema to [`SCHEMA_VERSION`].
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when the database cannot be reached or migrated,
    /// [`Error::NewerSchema`] when it was written by a newer build.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let client = open(url).await?;
        Ok(Self {
            url: Arc::from(url),
            client: Arc::new(Mutex::new(Connection {
                client: Arc::new(client),
                inserts: None,
            })),
        })
    }

    async fn client(&self) -> Result<Arc<Client>, Error> {
        let mut connection = self.client.lock().await;
        if connection.client.is_closed() {
            *connection = Connection {
                client: Arc::new(open(&self.url).await?),
                inserts: None,
            };
            tracing::info!("accounting: reconnected to PostgreSQL");
        }
        Ok(Arc::clone(&connection.client))
    }

    /// The client with its prepared inserts (prepared on first use per connection).
    async fn inserts(&self) -> Result<(Arc<Client>, Statement, Statement), Error> {
        let client = self.client().await?;
        let mut connection = self.client.lock().await;
        // A reconnect between the two locks leaves statements of the old client: prepare
        // on the one in hand.
        if !Arc::ptr_eq(&connection.client, &client) {
            connection.inserts = None;
        }
        if let Some((model, tool)) = &connection.inserts {
            return Ok((client, model.clone(), tool.clone()));
        }
        let model = client.prepare(INSERT_MODEL).await?;
        let tool = client.prepare(INSERT_TOOL).await?;
        if Arc::ptr_eq(&connection.client, &client) {
            connection.inserts = Some((model.clone(), tool.clone()));
        }
        Ok((client, model, tool))
    }

    /// Stores `rows` in one transaction.
    ///
    /// # Errors
    ///
    /// [`Error::Store`]; nothing of the batch is stored then.
    pub async fn write_rows(&self, rows: &[AccountingRow]) -> Result<(), Error> {
        let (client, model, tool) = self.inserts().await?;
        // A transaction needs `&mut Client`; the shared one takes explicit BEGIN/COMMIT.
        client.batch_execute("BEGIN").await?;
        let written = async {
            for row in rows {
                match row {
                    AccountingRow::ModelCall(row) => {
                        let c = ModelColumns::of(row);
                        client
                            .execute(
                                &model,
                                &[
                                    &c.at_us,
                                    &c.tenant,
                                    &c.caller,
                                    &c.session,
                                    &c.run_id,
                                    &c.round,
                                    &c.provider,
                                    &c.model,
                                    &c.input_tokens,
                                    &c.output_tokens,
                                    &c.cache_read_tokens,
                                    &c.cache_write_5m_tokens,
                                    &c.cache_write_1h_tokens,
                                    &c.reasoning_tokens,
                                    &c.cost_usd,
                                    &c.latency_us,
                                    &c.first_event_us,
                                    &c.tool_calls,
                                    &c.stop_reason,
                                    &c.error,
                                    &c.response_id,
                                ],
                            )
                            .await?;
                    }
                    AccountingRow::ToolCall(row) => {
                        let c = ToolColumns::of(row);
                        client
                            .execute(
                                &tool,
                                &[
                                    &c.at_us,
                                    &c.tenant,
                                    &c.caller,
                                    &c.session,
                                    &c.run_id,
                                    &c.round,
                                    &c.tool,
                                    &c.call_id,
                                    &c.arguments_bytes,
                                    &c.arguments_sha256,
                                    &c.result_bytes,
                                    &c.sent_bytes,
                                    &c.truncated,
                                    &c.duration_us,
                                    &c.outcome,
                                    &c.error,
                                    &c.guardrails,
                                ],
                            )
                            .await?;
                    }
                }
            }
            Ok::<(), tokio_postgres::Error>(())
        }
        .await;
        match written {
            Ok(()) => Ok(client.batch_execute("COMMIT").await?),
            Err(error) => {
                let _ = client.batch_execute("ROLLBACK").await;
                Err(error.into())
            }
        }
    }

    /// Every `model_calls` row of `tenant` (empty: none), oldest first.
    ///
    /// # Errors
    ///
    /// [`Error::Store`].
    pub async fn model_calls(&self, tenant: &str) -> Result<Vec<StoredModelCall>, Error> {
        self.model_rows(tenant, None).await
    }

    /// The `model_calls` and `tool_calls` rows of `tenant`'s session `session`, oldest first
    /// (filtered in the query: a tenant's other rows are not read).
    ///
    /// # Errors
    ///
    /// [`Error::Store`].
    pub async fn session_calls(
        &self,
        tenant: &str,
        session: &str,
    ) -> Result<(Vec<StoredModelCall>, Vec<StoredToolCall>), Error> {
        Ok((
            self.model_rows(tenant, Some(session)).await?,
            self.tool_rows(tenant, Some(session)).await?,
        ))
    }

    async fn model_rows(
        &self,
        tenant: &str,
        session: Option<&str>,
    ) -> Result<Vec<StoredModelCall>, Error> {
        let client = self.client().await?;
        let rows = client
            .query(
                &[
                    "SELECT at_us, tenant, caller, session, run_id, provider, round, model, \
                 input_tokens, output_tokens, cache_read_tokens, cache_write_5m_tokens, \
                 cache_write_1h_tokens, reasoning_tokens, cost_usd, latency_us, first_event_us, \
                 tool_calls, stop_reason, error, response_id FROM model_calls \
                 WHERE tenant = $1 AND ",
                    by_session(session),
                ]
                .concat(),
                &[&tenant, &session],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let stop: String = r.try_get(18)?;
                Ok(StoredModelCall {
                    at_us: r.try_get(0)?,
                    tenant: r.try_get(1)?,
                    caller: r.try_get(2)?,
                    session: r.try_get(3)?,
                    run_id: r.try_get(4)?,
                    provider: r.try_get(5)?,
                    record: record_from(
                        r.try_get(6)?,
                        r.try_get(7)?,
                        [
                            r.try_get(8)?,
                            r.try_get(9)?,
                            r.try_get(10)?,
                            r.try_get(11)?,
                            r.try_get(12)?,
                            r.try_get(13)?,
                        ],
                        r.try_get(14)?,
                        r.try_get(15)?,
                        r.try_get(16)?,
                        r.try_get(17)?,
                        &stop,
                        r.try_get(20)?,
                    ),
                    error: r.try_get(19)?,
                })
            })
            .collect()
    }

    /// Every `tool_calls` row of `tenant` (empty: none), oldest first.
    ///
    /// # Errors
    ///
    /// [`Error::Store`].
    pub async fn tool_calls(&self, tenant: &str) -> Result<Vec<StoredToolCall>, Error> {
        self.tool_rows(tenant, None).await
    }

    async fn tool_rows(
        &self,
        tenant: &str,
        session: Option<&str>,
    ) -> Result<Vec<StoredToolCall>, Error> {
        let client = self.client().await?;
        let rows = client
            .query(
                &[
                    "SELECT at_us, tenant, caller, session, run_id, round, tool, call_id, \
                 arguments_bytes, arguments_sha256, result_bytes, sent_bytes, truncated, \
                 duration_us, outcome, error, guardrails FROM tool_calls \
                 WHERE tenant = $1 AND ",
                    by_session(session),
                ]
                .concat(),
                &[&tenant, &session],
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(StoredToolCall {
                    at_us: r.try_get(0)?,
                    tenant: r.try_get(1)?,
                    caller: r.try_get(2)?,
                    session: r.try_get(3)?,
                    run_id: r.try_get(4)?,
                    round: r.try_get(5)?,
                    tool: r.try_get(6)?,
                    call_id: r.try_get(7)?,
                    arguments_bytes: r.try_get(8)?,
                    arguments_sha256: r.try_get(9)?,
                    result_bytes: r.try_get(10)?,
                    sent_bytes: r.try_get(11)?,
                    truncated: r.try_get(12)?,
                    duration_us: r.try_get(13)?,
                    outcome: r.try_get(14)?,
                    error: r.try_get(15)?,
                    guardrails: r.try_get(16)?,
                })
            })
            .collect()
    }

    /// One tenant's usage, grouped.
    ///
    /// # Errors
    ///
    /// [`Error::Query`] for a query out of bounds, [`Error::Store`].
    pub async fn usage(&self, query: &UsageQuery) -> Result<Vec<UsageGroup>, Error> {
        query.check()?;
        let key = match query.group_by {
            GroupBy::Model => "model",
            GroupBy::Session => "session",
            GroupBy::Day => {
                "to_char(to_timestamp(at_us / 1000000) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
            }
        };
        let sql = usage_sql(
            key,
            ["$1", "$2", "$3", "$4"],
            "::BIGINT",
            "::DOUBLE PRECISION",
        );
        let client = self.client().await?;
        let rows = client
            .query(
                &sql,
                &[
                    &query.tenant,
                    &query.from_us,
                    &query.to_us,
                    &i64::from(query.max_groups),
                ],
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(UsageGroup {
                    key: r.try_get(0)?,
                    model_calls: to_u64(r.try_get(1)?),
                    failed_calls: to_u64(r.try_get(2)?),
                    tool_calls: to_u64(r.try_get(3)?),
                    input_tokens: to_u64(r.try_get(4)?),
                    output_tokens: to_u64(r.try_get(5)?),
                    cache_read_tokens: to_u64(r.try_get(6)?),
                    cache_write_5m_tokens: to_u64(r.try_get(7)?),
                    cache_write_1h_tokens: to_u64(r.try_get(8)?),
                    reasoning_tokens: to_u64(r.try_get(9)?),
                    cost_usd: r.try_get(10)?,
                })
            })
            .collect()
    }

    /// The schema version stored in the database.
    ///
    /// # Errors
    ///
    /// [`Error::Store`].
    pub async fn schema_version(&self) -> Result<i64, Error> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT COALESCE(MAX(version), 0)::BIGINT FROM accounting_schema_version",
                &[],
            )
            .await?;
        Ok(row.try_get(0)?)
    }
}

impl RowWriter for PostgresSink {
    fn write<'a>(&'a mut self, rows: &'a [AccountingRow]) -> WriteFuture<'a> {
        Box::pin(async move {
            self.write_rows(rows)
                .await
                .map_err(|error| -> WriteError { Box::new(error) })
        })
    }
}

async fn open(url: &str) -> Result<Client, Error> {
    let (mut client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(%error, "accounting: PostgreSQL connection closed");
        }
    });
    let tx = client.transaction().await?;
    tx.query_one("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS accounting_schema_version (version BIGINT NOT NULL)",
    )
    .await?;
    let found: i64 = tx
        .query_one(
            "SELECT COALESCE(MAX(version), 0)::BIGINT FROM accounting_schema_version",
            &[],
        )
        .await?
        .try_get(0)?;
    if found > SCHEMA_VERSION {
        return Err(Error::NewerSchema { found });
    }
    for (from, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(found).unwrap_or(0))
    {
        tx.batch_execute(sql).await?;
        let to = i64::try_from(from).unwrap_or(0) + 1;
        tx.execute(
            "INSERT INTO accounting_schema_version (version) VALUES ($1)",
            &[&to],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(client)
}
