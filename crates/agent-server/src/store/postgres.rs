//! [`PostgresStore`]: sessions in PostgreSQL, shared by several server instances.
//!
//! All instances use one table, `agentry_sessions`, which the first of them creates (or
//! migrates: the schema version is in `agentry_schema`; version 2 keys sessions by tenant
//! and id and records each document's size, version 3 adds the model, tokens and cost the
//! session list shows, and a newer version is refused). Every
//! lease decision is made inside one `UPDATE`'s `WHERE` clause, so two instances racing for
//! the same session cannot both win: PostgreSQL re-checks the condition on the row it locked.
//!
//! The store keeps one connection (tokio-postgres pipelines concurrent queries over it) and
//! its prepared statements. When the connection drops (the database restarted, a proxy cut
//! it), the next call reconnects, and a call that failed because the connection went away is
//! retried once on the new one, so a database restart does not need a server restart.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use tokio::sync::Mutex;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, NoTls, Statement};

use super::row::{Row, decode, limit, millis, over_quota, unsigned};
use super::{
    Lease, ListFilter, Quota, QuotaKind, Removal, SessionRecord, SessionStore, SessionSummary,
    StoreError, StoreFuture, Stored, TenantUsage,
};

/// The advisory lock that serializes schema creation across instances starting at once
/// (`CREATE TABLE IF NOT EXISTS` alone can fail with a unique violation when two sessions
/// run it concurrently). The bytes spell `agentry` and a schema generation.
const SCHEMA_LOCK: i64 = 0x6167_656e_7472_7901;

/// The schema version this code writes and understands.
const SCHEMA_VERSION: i32 = 3;

const VERSION_TABLE: &str = "
CREATE TABLE IF NOT EXISTS agentry_schema (version INTEGER NOT NULL);
INSERT INTO agentry_schema (version)
    SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM agentry_schema)";

/// Version 2, and the migration from version 1 (ids unique across tenants, no sizes): every
/// step is idempotent, so a table in either shape ends in version 2 with its rows kept.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS agentry_sessions (
    tenant         TEXT NOT NULL,
    id             TEXT NOT NULL,
    status         TEXT NOT NULL,
    data           TEXT NOT NULL,
    created_at_ms  BIGINT NOT NULL,
    updated_at_ms  BIGINT NOT NULL,
    lease_holder   TEXT,
    lease_until_ms BIGINT,
    size_bytes     BIGINT,
    PRIMARY KEY (tenant, id)
);
ALTER TABLE agentry_sessions ADD COLUMN IF NOT EXISTS size_bytes BIGINT;
UPDATE agentry_sessions SET size_bytes = octet_length(data) WHERE size_bytes IS NULL;
DO $$
BEGIN
    IF (SELECT array_length(conkey, 1) FROM pg_constraint
        WHERE conrelid = 'agentry_sessions'::regclass AND contype = 'p') = 1 THEN
        ALTER TABLE agentry_sessions DROP CONSTRAINT agentry_sessions_pkey;
        ALTER TABLE agentry_sessions ADD PRIMARY KEY (tenant, id);
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS agentry_sessions_by_idle
    ON agentry_sessions (tenant, updated_at_ms);
ALTER TABLE agentry_sessions ADD COLUMN IF NOT EXISTS model TEXT;
ALTER TABLE agentry_sessions ADD COLUMN IF NOT EXISTS input_tokens BIGINT;
ALTER TABLE agentry_sessions ADD COLUMN IF NOT EXISTS output_tokens BIGINT;
ALTER TABLE agentry_sessions ADD COLUMN IF NOT EXISTS cost_usd DOUBLE PRECISION;
DO $$
DECLARE
    r RECORD;
BEGIN
    -- Rows written before version 3 (model still NULL) get the list columns from their
    -- documents; every later write sets them. A document that is not JSON fails the bulk
    -- update, so then each row is tried alone and one that fails keeps '' until its next save.
    BEGIN
        UPDATE agentry_sessions SET
            model = coalesce(nullif(d->>'model', ''), d->'session'->>'model', ''),
            input_tokens = (d->'session'->'usage'->>'input_tokens')::BIGINT,
            output_tokens = (d->'session'->'usage'->>'output_tokens')::BIGINT,
            cost_usd = (d->'session'->>'cost_usd')::DOUBLE PRECISION
        FROM (SELECT tenant AS t, id AS i, data::jsonb AS d FROM agentry_sessions
              WHERE model IS NULL) AS docs
        WHERE tenant = docs.t AND id = docs.i;
    EXCEPTION WHEN others THEN
        FOR r IN SELECT tenant, id FROM agentry_sessions WHERE model IS NULL LOOP
            BEGIN
                UPDATE agentry_sessions SET
                    model = coalesce(nullif(data::jsonb->>'model', ''),
                                     data::jsonb->'session'->>'model', ''),
                    input_tokens = (data::jsonb->'session'->'usage'->>'input_tokens')::BIGINT,
                    output_tokens =
                        (data::jsonb->'session'->'usage'->>'output_tokens')::BIGINT,
                    cost_usd = (data::jsonb->'session'->>'cost_usd')::DOUBLE PRECISION
                WHERE tenant = r.tenant AND id = r.id;
            EXCEPTION WHEN others THEN
                UPDATE agentry_sessions SET model = ''
                WHERE tenant = r.tenant AND id = r.id;
            END;
        END LOOP;
    END;
END $$;
UPDATE agentry_schema SET version = 3";

/// Inserts unless the tenant would go over its quota (`$10` sessions, `$11` bytes); no row
/// changed means over quota. The count can race with another instance's insert for the same
/// tenant; on one instance, inserts of a tenant are serialized (see [`PostgresStore`]).
const INSERT: &str = "INSERT INTO agentry_sessions
     (id, tenant, status, data, created_at_ms, updated_at_ms, lease_holder, lease_until_ms,
      size_bytes, model, input_tokens, output_tokens, cost_usd)
     SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $12, $13, $14, $15
     WHERE (SELECT count(*) < $10 AND coalesce(sum(size_bytes), 0) + $9 <= $11
            FROM agentry_sessions WHERE tenant = $2)";
const USAGE: &str = "SELECT count(*), coalesce(sum(size_bytes), 0)::BIGINT
     FROM agentry_sessions WHERE tenant = $1";
const SELECT: &str = "SELECT data, lease_holder, lease_until_ms FROM agentry_sessions
     WHERE id = $1 AND tenant = $2";
/// One statement decides all three outcomes, like [`ACQUIRE`].
const DELETE: &str = "WITH found AS (
         SELECT 1 FROM agentry_sessions WHERE id = $1 AND tenant = $2
     ), gone AS (
         DELETE FROM agentry_sessions WHERE id = $1 AND tenant = $2
           AND (lease_holder IS NULL OR lease_until_ms <= $3)
         RETURNING 1
     )
     SELECT EXISTS (SELECT 1 FROM found), EXISTS (SELECT 1 FROM gone)";
/// A page of the tenant's sessions matching the filters (`$4` status as the list shows it
/// at `$7`, `$5` model, `$6` id substring; each `NULL` matches all), walked in id order on
/// the primary key.
const LIST: &str = "SELECT id, status, created_at_ms, updated_at_ms, size_bytes, lease_holder,
            lease_until_ms, model, input_tokens, output_tokens, cost_usd
     FROM agentry_sessions
     WHERE tenant = $1 AND id > $2
       AND ($4::TEXT IS NULL OR $4 = CASE
             WHEN lease_holder IS NOT NULL AND lease_until_ms > $7 THEN 'running'
             WHEN status = 'running' THEN 'aborted'
             ELSE status END)
       AND ($5::TEXT IS NULL OR model = $5)
       AND ($6::TEXT IS NULL OR strpos(id, $6) > 0)
     ORDER BY id LIMIT $3";
const EXPIRE: &str = "DELETE FROM agentry_sessions WHERE tenant = $1 AND id IN (
         SELECT id FROM agentry_sessions
         WHERE tenant = $1 AND updated_at_ms < $2
           AND (lease_holder IS NULL OR lease_until_ms <= $3)
         LIMIT $4)";
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
     SET data = $4, status = $5, updated_at_ms = $6, size_bytes = $8, model = $9,
         input_tokens = $10, output_tokens = $11, cost_usd = $12,
         lease_holder = CASE WHEN $7 THEN NULL ELSE lease_holder END,
         lease_until_ms = CASE WHEN $7 THEN NULL ELSE lease_until_ms END
     WHERE id = $1 AND tenant = $2 AND lease_holder = $3";
const RENEW: &str = "UPDATE agentry_sessions SET lease_until_ms = $4
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
///
/// Quotas are checked in the insert's own statement. Inserts of one tenant are serialized on
/// each instance, so one instance never lets a tenant over its quota; instances inserting for
/// the same tenant at the same instant can each pass the check, so a tenant can end up over
/// by at most one session (and its bytes) per other instance.
pub struct PostgresStore {
    url: String,
    conn: Mutex<Arc<Conn>>,
    /// One lock per tenant that has inserted: its quota check and insert run one at a time.
    inserting: std::sync::Mutex<HashMap<String, Arc<Mutex<()>>>>,
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
    usage: Statement,
    select: Statement,
    delete: Statement,
    list: Statement,
    expire: Statement,
    acquire: Statement,
    save: Statement,
    renew: Statement,
    release: Statement,
}

/// Which prepared statement a call runs.
#[derive(Clone, Copy)]
enum Op {
    Insert,
    Usage,
    Select,
    Delete,
    List,
    Expire,
    Acquire,
    Save,
    Renew,
    Release,
}

impl Conn {
    async fn open(url: &str) -> Result<Self, StoreError> {
        let db = |err: tokio_postgres::Error| connect_error(&err);
        let (mut client, connection) = tokio_postgres::connect(url, NoTls).await.map_err(db)?;
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::warn!(error = %err, "session store: PostgreSQL connection closed");
            }
        });

        let tx = client.transaction().await.map_err(db)?;
        tx.query_one("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
            .await
            .map_err(db)?;
        tx.batch_execute(VERSION_TABLE).await.map_err(db)?;
        let version: i32 = tx
            .query_one("SELECT max(version) FROM agentry_schema", &[])
            .await
            .map_err(db)?
            .try_get(0)
            .map_err(db)?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::Database(format!(
                "the database has session schema version {version}, written by a newer \
                 agentry; this version reads version {SCHEMA_VERSION} (upgrade agentry)"
            )));
        }
        tx.batch_execute(SCHEMA).await.map_err(db)?;
        tx.batch_execute(crate::idempotency::POSTGRES_SCHEMA)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)?;

        let text = Type::TEXT;
        let int = Type::INT8;
        let prepare = |sql: &'static str, types: Vec<Type>| {
            let client = &client;
            async move { client.prepare_typed(sql, &types).await.map_err(db) }
        };
        Ok(Self {
            insert: prepare(
                INSERT,
                vec![
                    text.clone(),
                    text.clone(),
                    text.clone(),
                    text.clone(),
                    int.clone(),
                    int.clone(),
                    text.clone(),
                    int.clone(),
                    int.clone(),
                    int.clone(),
                    int.clone(),
                    text.clone(),
                    int.clone(),
                    int.clone(),
                    Type::FLOAT8,
                ],
            )
            .await?,
            usage: prepare(USAGE, vec![text.clone()]).await?,
            select: prepare(SELECT, vec![text.clone(), text.clone()]).await?,
            delete: prepare(DELETE, vec![text.clone(), text.clone(), int.clone()]).await?,
            list: prepare(
                LIST,
                vec![
                    text.clone(),
                    text.clone(),
                    int.clone(),
                    text.clone(),
                    text.clone(),
                    text.clone(),
                    int.clone(),
                ],
            )
            .await?,
            expire: prepare(
                EXPIRE,
                vec![text.clone(), int.clone(), int.clone(), int.clone()],
            )
            .await?,
            acquire: prepare(
                ACQUIRE,
                vec![
                    text.clone(),
                    text.clone(),
                    text.clone(),
                    int.clone(),
                    int.clone(),
                ],
            )
            .await?,
            save: prepare(
                SAVE,
                vec![
                    text.clone(),
                    text.clone(),
                    text.clone(),
                    text.clone(),
                    text.clone(),
                    int.clone(),
                    Type::BOOL,
                    int.clone(),
                    text.clone(),
                    int.clone(),
                    int,
                    Type::FLOAT8,
                ],
            )
            .await?,
            renew: prepare(
                RENEW,
                vec![text.clone(), text.clone(), text.clone(), Type::INT8],
            )
            .await?,
            release: prepare(RELEASE, vec![text.clone(), text.clone(), text]).await?,
            client,
        })
    }

    fn statement(&self, op: Op) -> &Statement {
        match op {
            Op::Insert => &self.insert,
            Op::Usage => &self.usage,
            Op::Select => &self.select,
            Op::Delete => &self.delete,
            Op::List => &self.list,
            Op::Expire => &self.expire,
            Op::Acquire => &self.acquire,
            Op::Save => &self.save,
            Op::Renew => &self.renew,
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
        let conn = Conn::open(url).await?;
        Ok(Self {
            url: url.to_owned(),
            conn: Mutex::new(Arc::new(conn)),
            inserting: std::sync::Mutex::default(),
        })
    }

    /// The live connection, reconnecting first if the current one has closed.
    async fn conn(&self) -> Result<Arc<Conn>, StoreError> {
        let mut current = self.conn.lock().await;
        if current.client.is_closed() {
            let conn = Conn::open(&self.url).await?;
            tracing::info!("session store: reconnected to PostgreSQL");
            *current = Arc::new(conn);
        }
        Ok(Arc::clone(&current))
    }

    /// Replaces the connection `failed` unless another call already did.
    async fn reconnect(&self, failed: &Arc<Conn>) -> Result<Arc<Conn>, StoreError> {
        let mut current = self.conn.lock().await;
        if Arc::ptr_eq(&current, failed) {
            let conn = Conn::open(&self.url).await?;
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
    /// The lock that serializes `tenant`'s inserts on this instance.
    fn insert_lock(&self, tenant: &str) -> Arc<Mutex<()>> {
        let mut locks = self
            .inserting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(locks.entry(tenant.to_owned()).or_default())
    }

    async fn usage_of(&self, tenant: &str) -> Result<TenantUsage, StoreError> {
        let rows = self
            .query(Op::Usage, &[&tenant])
            .await?
            .map_err(|err| database(&err))?;
        let row = rows
            .first()
            .ok_or_else(|| StoreError::Database("the usage query returned no row".to_owned()))?;
        let sessions: i64 = row.try_get(0).map_err(|err| database(&err))?;
        let bytes: i64 = row.try_get(1).map_err(|err| database(&err))?;
        Ok(TenantUsage {
            sessions: unsigned(sessions),
            bytes: unsigned(bytes),
        })
    }
}

/// A bool column of the first row.
fn flag(rows: &[tokio_postgres::Row], column: usize) -> Result<bool, StoreError> {
    let row = rows
        .first()
        .ok_or_else(|| StoreError::Database("the query returned no row".to_owned()))?;
    row.try_get(column).map_err(|err| database(&err))
}

impl PostgresStore {
    /// Writes `row`, the encoding of `record`, under `holder`'s lease (see
    /// [`SessionStore::save`]).
    async fn write(
        &self,
        record: &SessionRecord,
        row: &Row,
        holder: &str,
        release: bool,
    ) -> Result<(), StoreError> {
        let params: [&(dyn ToSql + Sync); 12] = [
            &record.id(),
            &record.tenant,
            &holder,
            &row.data,
            &row.status,
            &row.updated_at_ms,
            &release,
            &row.size_bytes,
            &row.totals.model,
            &row.totals.input_tokens,
            &row.totals.output_tokens,
            &row.totals.cost_usd,
        ];
        let saved = self
            .execute(Op::Save, &params)
            .await?
            .map_err(|err| database(&err))?;
        if saved == 0 {
            return Err(StoreError::LeaseLost(record.id().to_owned()));
        }
        Ok(())
    }
}

impl SessionStore for PostgresStore {
    fn insert<'a>(
        &'a self,
        record: &'a SessionRecord,
        lease: Option<(&'a str, u64)>,
        quota: Quota,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let row = Row::encode(record)?;
            let holder = lease.map(|(holder, _)| holder);
            let until = lease.map(|(_, until_ms)| millis(until_ms));
            let (max_sessions, max_bytes) =
                (limit(quota.max_sessions), limit(quota.max_stored_bytes));
            let params: [&(dyn ToSql + Sync); 15] = [
                &record.id(),
                &record.tenant,
                &row.status,
                &row.data,
                &row.created_at_ms,
                &row.updated_at_ms,
                &holder,
                &until,
                &row.size_bytes,
                &max_sessions,
                &max_bytes,
                &row.totals.model,
                &row.totals.input_tokens,
                &row.totals.output_tokens,
                &row.totals.cost_usd,
            ];
            let lock = (quota != Quota::UNLIMITED).then(|| self.insert_lock(&record.tenant));
            let _serialized = match &lock {
                Some(lock) => Some(lock.lock().await),
                None => None,
            };
            let mut attempts = 0;
            loop {
                attempts += 1;
                match self.execute(Op::Insert, &params).await? {
                    Ok(0) => {
                        // Refused by the quota, unless the id is taken: then `Exists`, as
                        // without a quota.
                        if self
                            .read(&record.tenant, record.id())
                            .await
                            .is_ok_and(|found| found.is_some())
                        {
                            return Err(StoreError::Exists(record.id().to_owned()));
                        }
                        // Say which quota. Another instance's delete may have made room
                        // meanwhile: then try again (once).
                        let used = self.usage_of(&record.tenant).await?;
                        over_quota(&record.tenant, used, unsigned(row.size_bytes), quota)?;
                        if attempts >= 2 {
                            return Err(StoreError::Quota {
                                tenant: record.tenant.clone(),
                                quota: QuotaKind::Sessions,
                                limit: quota.max_sessions.unwrap_or(u64::MAX),
                                used: used.sessions,
                            });
                        }
                    }
                    Ok(_) => return Ok(()),
                    Err(err) if err.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                        return Err(StoreError::Exists(record.id().to_owned()));
                    }
                    Err(err) => return Err(database(&err)),
                }
            }
        })
    }

    fn read<'a>(&'a self, tenant: &'a str, id: &'a str) -> StoreFuture<'a, Option<Stored>> {
        Box::pin(async move {
            let rows = self
                .query(Op::Select, &[&id, &tenant])
                .await?
                .map_err(|err| database(&err))?;
            let Some(row) = rows.first() else {
                return Ok(None);
            };
            let data: &str = row.try_get(0).map_err(|err| database(&err))?;
            let holder: Option<&str> = row.try_get(1).map_err(|err| database(&err))?;
            let until: Option<i64> = row.try_get(2).map_err(|err| database(&err))?;
            Ok(Some(Stored {
                record: decode(tenant, id, data)?,
                lease_until_ms: holder.and(until).map(unsigned),
            }))
        })
    }

    fn delete<'a>(&'a self, tenant: &'a str, id: &'a str, now_ms: u64) -> StoreFuture<'a, Removal> {
        Box::pin(async move {
            let now = millis(now_ms);
            let rows = self
                .query(Op::Delete, &[&id, &tenant, &now])
                .await?
                .map_err(|err| database(&err))?;
            Ok(match (flag(&rows, 0)?, flag(&rows, 1)?) {
                (_, true) => Removal::Deleted,
                (true, false) => Removal::Busy,
                (false, false) => Removal::NotFound,
            })
        })
    }

    fn list<'a>(
        &'a self,
        tenant: &'a str,
        after: Option<&'a str>,
        limit: u32,
        filter: &'a ListFilter,
    ) -> StoreFuture<'a, Vec<SessionSummary>> {
        Box::pin(async move {
            let after = after.unwrap_or("");
            let limit = i64::from(limit);
            let now = millis(filter.now_ms);
            let rows = self
                .query(
                    Op::List,
                    &[
                        &tenant,
                        &after,
                        &limit,
                        &filter.status,
                        &filter.model,
                        &filter.id_contains,
                        &now,
                    ],
                )
                .await?
                .map_err(|err| database(&err))?;
            rows.iter()
                .map(|row| {
                    let holder: Option<&str> = row.try_get(5)?;
                    let until: Option<i64> = row.try_get(6)?;
                    Ok(SessionSummary {
                        id: row.try_get(0)?,
                        status: row.try_get(1)?,
                        created_at_ms: unsigned(row.try_get(2)?),
                        updated_at_ms: unsigned(row.try_get(3)?),
                        size_bytes: unsigned(row.try_get::<_, Option<i64>>(4)?.unwrap_or(0)),
                        lease_until_ms: holder.and(until).map(unsigned),
                        model: row.try_get::<_, Option<String>>(7)?.unwrap_or_default(),
                        input_tokens: row.try_get::<_, Option<i64>>(8)?.map(unsigned),
                        output_tokens: row.try_get::<_, Option<i64>>(9)?.map(unsigned),
                        cost_usd: row.try_get(10)?,
                    })
                })
                .collect::<Result<Vec<_>, tokio_postgres::Error>>()
                .map_err(|err| database(&err))
        })
    }

    fn usage<'a>(&'a self, tenant: &'a str) -> StoreFuture<'a, TenantUsage> {
        Box::pin(self.usage_of(tenant))
    }

    fn expire<'a>(
        &'a self,
        tenant: &'a str,
        idle_before_ms: u64,
        now_ms: u64,
        limit: u32,
    ) -> StoreFuture<'a, u64> {
        Box::pin(async move {
            let (before, now, limit) = (millis(idle_before_ms), millis(now_ms), i64::from(limit));
            self.execute(Op::Expire, &[&tenant, &before, &now, &limit])
                .await?
                .map_err(|err| database(&err))
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
            Ok(match (flag(&rows, 0)?, flag(&rows, 1)?) {
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
            self.write(record, &row, holder, release).await
        })
    }

    fn save_last<'a>(
        &'a self,
        record: &'a mut SessionRecord,
        holder: &'a str,
        release: bool,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let row = Row::encode(record)?;
            // The document holds the history now; the caller needs it no more.
            record.session.messages = Vec::new();
            self.write(record, &row, holder, release).await
        })
    }

    fn renew<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        holder: &'a str,
        until_ms: u64,
    ) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let until = millis(until_ms);
            let renewed = self
                .execute(Op::Renew, &[&id, &tenant, &holder, &until])
                .await?
                .map_err(|err| database(&err))?;
            Ok(renewed > 0)
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

    fn claim_key<'a>(&'a self, claim: &'a super::KeyClaim) -> StoreFuture<'a, super::Claim> {
        Box::pin(async move {
            let conn = self.conn().await?;
            crate::idempotency::postgres::claim(&conn.client, claim).await
        })
    }

    fn finish_key<'a>(
        &'a self,
        tenant: &'a str,
        key: &'a str,
        owner: &'a str,
        outcome: &'a super::StoredOutcome,
        expires_at_ms: u64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let conn = self.conn().await?;
            crate::idempotency::postgres::finish(
                &conn.client,
                tenant,
                key,
                owner,
                outcome,
                expires_at_ms,
            )
            .await
        })
    }

    fn renew_key<'a>(
        &'a self,
        tenant: &'a str,
        key: &'a str,
        owner: &'a str,
        running_until_ms: u64,
    ) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let conn = self.conn().await?;
            crate::idempotency::postgres::renew(&conn.client, tenant, key, owner, running_until_ms)
                .await
        })
    }

    fn release_key<'a>(
        &'a self,
        tenant: &'a str,
        key: &'a str,
        owner: &'a str,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let conn = self.conn().await?;
            crate::idempotency::postgres::release(&conn.client, tenant, key, owner).await
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
