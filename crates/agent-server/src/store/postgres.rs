//! [`PostgresStore`]: sessions in PostgreSQL, shared by several server instances.
//!
//! All instances use one table, `agentry_sessions`, which the first of them creates. Every
//! lease decision is made inside one `UPDATE`'s `WHERE` clause, so two instances racing for
//! the same session cannot both win: PostgreSQL re-checks the condition on the row it locked.
//!
//! The store keeps one connection (tokio-postgres pipelines concurrent queries over it) and
//! its prepared statements. When the connection drops (the database restarted, a proxy cut
//! it), the next call reconnects, and a call that failed because the connection went away is
//! retried once on the new one, so a database restart does not need a server restart.

use std::fmt;
use std::sync::Arc;

use tokio::sync::Mutex;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, NoTls, Statement};

use super::row::{Row, decode, millis};
use super::{Lease, SessionRecord, SessionStore, StoreError, StoreFuture};

/// The advisory lock that serializes schema creation across instances starting at once
/// (`CREATE TABLE IF NOT EXISTS` alone can fail with a unique violation when two sessions
/// run it concurrently). The bytes spell `agentry` and a schema generation.
const SCHEMA_LOCK: i64 = 0x6167_656e_7472_7901;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS agentry_sessions (
    id             TEXT PRIMARY KEY,
    tenant         TEXT NOT NULL,
    status         TEXT NOT NULL,
    data           TEXT NOT NULL,
    created_at_ms  BIGINT NOT NULL,
    updated_at_ms  BIGINT NOT NULL,
    lease_holder   TEXT,
    lease_until_ms BIGINT
)";

const INSERT: &str = "INSERT INTO agentry_sessions
     (id, tenant, status, data, created_at_ms, updated_at_ms, lease_holder, lease_until_ms)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
const SELECT: &str = "SELECT data FROM agentry_sessions WHERE id = $1 AND tenant = $2";
const DELETE: &str = "DELETE FROM agentry_sessions WHERE id = $1 AND tenant = $2";
/// One statement decides all three outcomes: `found` reads the statement's snapshot,
/// `taken` is the conditional update (free, expired at `$4`, or already the caller's).
const ACQUIRE: &str = "WITH found AS (
         SELECT 1 FROM agentry_sessions WHERE id = $1 AND tenant = $2
     ), taken AS (
         UPDATE agentry_sessions SET lease_holder = $3, lease_until_ms = $5
         WHERE id = $1 AND tenant = $2
           AND (lease_holder IS NULL OR lease_holder = $3 OR lease_until_ms <= $4)
         RETURNING 1
     )
     SELECT EXISTS (SELECT 1 FROM found), EXISTS (SELECT 1 FROM taken)";
const SAVE: &str = "UPDATE agentry_sessions
     SET data = $4, status = $5, updated_at_ms = $6,
         lease_holder = CASE WHEN $7 THEN NULL ELSE lease_holder END,
         lease_until_ms = CASE WHEN $7 THEN NULL ELSE lease_until_ms END
     WHERE id = $1 AND tenant = $2 AND lease_holder = $3";
const RELEASE: &str = "UPDATE agentry_sessions SET lease_holder = NULL, lease_until_ms = NULL
     WHERE id = $1 AND tenant = $2 AND lease_holder = $3";

/// Sessions in PostgreSQL, for several server instances behind a load balancer.
///
/// The connection is made without TLS: run the database on a private network or loopback, or
/// put a TLS proxy in front of it.
///
/// [`save`](SessionStore::save) reports [`StoreError::LeaseLost`] both when another holder
/// took the lease and when the session was deleted meanwhile: either way the caller's write
/// is dropped.
pub struct PostgresStore {
    url: String,
    conn: Mutex<Arc<Conn>>,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may hold a password: not printed.
        f.debug_struct("PostgresStore").finish_non_exhaustive()
    }
}

/// One connection and the statements prepared on it.
struct Conn {
    client: Client,
    insert: Statement,
    select: Statement,
    delete: Statement,
    acquire: Statement,
    save: Statement,
    release: Statement,
}

/// Which prepared statement a call runs.
#[derive(Clone, Copy)]
enum Op {
    Insert,
    Select,
    Delete,
    Acquire,
    Save,
    Release,
}

impl Conn {
    async fn open(url: &str) -> Result<Self, tokio_postgres::Error> {
        let (mut client, connection) = tokio_postgres::connect(url, NoTls).await?;
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::warn!(error = %err, "session store: PostgreSQL connection closed");
            }
        });

        let tx = client.transaction().await?;
        tx.query_one("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
            .await?;
        tx.batch_execute(SCHEMA).await?;
        tx.commit().await?;

        let text = Type::TEXT;
        let int = Type::INT8;
        let insert = client
            .prepare_typed(
                INSERT,
                &[
                    text.clone(),
                    text.clone(),
                    text.clone(),
                    text.clone(),
                    int.clone(),
                    int.clone(),
                    text.clone(),
                    int.clone(),
                ],
            )
            .await?;
        let select = client
            .prepare_typed(SELECT, &[text.clone(), text.clone()])
            .await?;
        let delete = client
            .prepare_typed(DELETE, &[text.clone(), text.clone()])
            .await?;
        let acquire = client
            .prepare_typed(
                ACQUIRE,
                &[
                    text.clone(),
                    text.clone(),
                    text.clone(),
                    int.clone(),
                    int.clone(),
                ],
            )
            .await?;
        let save = client
            .prepare_typed(
                SAVE,
                &[
                    text.clone(),
                    text.clone(),
                    text.clone(),
                    text.clone(),
                    text.clone(),
                    int,
                    Type::BOOL,
                ],
            )
            .await?;
        let release = client
            .prepare_typed(RELEASE, &[text.clone(), text.clone(), text])
            .await?;
        Ok(Self {
            client,
            insert,
            select,
            delete,
            acquire,
            save,
            release,
        })
    }

    fn statement(&self, op: Op) -> &Statement {
        match op {
            Op::Insert => &self.insert,
            Op::Select => &self.select,
            Op::Delete => &self.delete,
            Op::Acquire => &self.acquire,
            Op::Save => &self.save,
            Op::Release => &self.release,
        }
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (a `postgres://user@host:port/db` URL or a
    /// `host=… user=…` string), creates the `agentry_sessions` table if it does not exist
    /// yet and prepares the store's statements.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] when the database cannot be reached, refuses the login, or
    /// the table cannot be created or has another shape.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let conn = Conn::open(url).await.map_err(|err| connect_error(&err))?;
        Ok(Self {
            url: url.to_owned(),
            conn: Mutex::new(Arc::new(conn)),
        })
    }

    /// The live connection, reconnecting first if the current one has closed.
    async fn conn(&self) -> Result<Arc<Conn>, StoreError> {
        let mut current = self.conn.lock().await;
        if current.client.is_closed() {
            let conn = Conn::open(&self.url)
                .await
                .map_err(|err| connect_error(&err))?;
            tracing::info!("session store: reconnected to PostgreSQL");
            *current = Arc::new(conn);
        }
        Ok(Arc::clone(&current))
    }

    /// Replaces the connection `failed` unless another call already did.
    async fn reconnect(&self, failed: &Arc<Conn>) -> Result<Arc<Conn>, StoreError> {
        let mut current = self.conn.lock().await;
        if Arc::ptr_eq(&current, failed) {
            let conn = Conn::open(&self.url)
                .await
                .map_err(|err| connect_error(&err))?;
            tracing::info!("session store: reconnected to PostgreSQL");
            *current = Arc::new(conn);
        }
        Ok(Arc::clone(&current))
    }

    /// Runs `op` with `params` and returns its rows, retrying once on a fresh connection
    /// when the connection was lost under it. The outer error is "no connection"; the inner
    /// one is the statement's own failure, for callers that look at its SQL state.
    async fn query(
        &self,
        op: Op,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>, StoreError> {
        let conn = self.conn().await?;
        Ok(match conn.client.query(conn.statement(op), params).await {
            Err(err) if connection_lost(&err, &conn.client) => {
                let conn = self.reconnect(&conn).await?;
                conn.client.query(conn.statement(op), params).await
            }
            result => result,
        })
    }

    /// Like [`query`](Self::query), for statements that return the number of rows changed.
    async fn execute(
        &self,
        op: Op,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Result<u64, tokio_postgres::Error>, StoreError> {
        let conn = self.conn().await?;
        Ok(
            match conn.client.execute(conn.statement(op), params).await {
                Err(err) if connection_lost(&err, &conn.client) => {
                    let conn = self.reconnect(&conn).await?;
                    conn.client.execute(conn.statement(op), params).await
                }
                result => result,
            },
        )
    }
}

impl PostgresStore {
    /// Inserts `record`, leased to a holder when `lease` says so.
    async fn insert(
        &self,
        record: &SessionRecord,
        lease: Option<(&str, u64)>,
    ) -> Result<(), StoreError> {
        let row = Row::encode(record)?;
        let holder = lease.map(|(holder, _)| holder);
        let until = lease.map(|(_, until_ms)| millis(until_ms));
        let params: [&(dyn ToSql + Sync); 8] = [
            &record.id(),
            &record.tenant,
            &row.status,
            &row.data,
            &row.created_at_ms,
            &row.updated_at_ms,
            &holder,
            &until,
        ];
        match self.execute(Op::Insert, &params).await? {
            Ok(_) => Ok(()),
            Err(err) if err.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                Err(StoreError::Exists(record.id().to_owned()))
            }
            Err(err) => Err(database(&err)),
        }
    }
}

impl SessionStore for PostgresStore {
    fn create<'a>(&'a self, record: &'a SessionRecord) -> StoreFuture<'a, ()> {
        Box::pin(self.insert(record, None))
    }

    fn create_leased<'a>(
        &'a self,
        record: &'a SessionRecord,
        holder: &'a str,
        until_ms: u64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(self.insert(record, Some((holder, until_ms))))
    }

    fn get<'a>(&'a self, tenant: &'a str, id: &'a str) -> StoreFuture<'a, Option<SessionRecord>> {
        Box::pin(async move {
            let rows = self
                .query(Op::Select, &[&id, &tenant])
                .await?
                .map_err(|err| database(&err))?;
            let Some(row) = rows.first() else {
                return Ok(None);
            };
            let data: &str = row.try_get(0).map_err(|err| database(&err))?;
            decode(tenant, id, data).map(Some)
        })
    }

    fn delete<'a>(&'a self, tenant: &'a str, id: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let deleted = self
                .execute(Op::Delete, &[&id, &tenant])
                .await?
                .map_err(|err| database(&err))?;
            Ok(deleted > 0)
        })
    }

    fn acquire<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        holder: &'a str,
        now_ms: u64,
        until_ms: u64,
    ) -> StoreFuture<'a, Lease> {
        Box::pin(async move {
            let (now, until) = (millis(now_ms), millis(until_ms));
            let rows = self
                .query(Op::Acquire, &[&id, &tenant, &holder, &now, &until])
                .await?
                .map_err(|err| database(&err))?;
            let row = rows.first().ok_or_else(|| {
                StoreError::Database("the lease query returned no row".to_owned())
            })?;
            let found: bool = row.try_get(0).map_err(|err| database(&err))?;
            let taken: bool = row.try_get(1).map_err(|err| database(&err))?;
            Ok(match (found, taken) {
                (_, true) => Lease::Acquired,
                (true, false) => Lease::Busy,
                (false, false) => Lease::NotFound,
            })
        })
    }

    fn save<'a>(
        &'a self,
        record: &'a SessionRecord,
        holder: &'a str,
        release: bool,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let row = Row::encode(record)?;
            let params: [&(dyn ToSql + Sync); 7] = [
                &record.id(),
                &record.tenant,
                &holder,
                &row.data,
                &row.status,
                &row.updated_at_ms,
                &release,
            ];
            let saved = self
                .execute(Op::Save, &params)
                .await?
                .map_err(|err| database(&err))?;
            if saved == 0 {
                return Err(StoreError::LeaseLost(record.id().to_owned()));
            }
            Ok(())
        })
    }

    fn release<'a>(&'a self, tenant: &'a str, id: &'a str, holder: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.execute(Op::Release, &[&id, &tenant, &holder])
                .await?
                .map_err(|err| database(&err))?;
            Ok(())
        })
    }
}

/// Whether `err` means the connection is gone (so a retry on a new one may succeed), rather
/// than that the statement itself failed.
fn connection_lost(err: &tokio_postgres::Error, client: &Client) -> bool {
    if err.is_closed() || client.is_closed() {
        return true;
    }
    // The server ends a session it is shutting down or restarting with one of these.
    err.code().is_some_and(|code| {
        [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
        ]
        .contains(code)
    })
}

fn connect_error(err: &tokio_postgres::Error) -> StoreError {
    StoreError::Database(format!("connecting to PostgreSQL: {}", describe(err)))
}

fn database(err: &tokio_postgres::Error) -> StoreError {
    StoreError::Database(describe(err))
}

/// The error with its cause (the server's message, the I/O error), which tokio-postgres's
/// `Display` leaves out: it prints only "db error" or "error connecting to server".
fn describe(err: &tokio_postgres::Error) -> String {
    match std::error::Error::source(err) {
        Some(cause) => format!("{err}: {cause}"),
        None => err.to_string(),
    }
}
