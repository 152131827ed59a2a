//! [`SqliteStore`]: sessions in one SQLite file, for a single server instance.
//!
//! The file is opened in WAL mode with `synchronous = FULL`, so a write the store reported as
//! done survives a crash or power loss, and readers never wait for a writer. The schema is
//! versioned with `PRAGMA user_version` (this version writes and reads version 3, keyed by
//! tenant and id with the list's model, tokens and cost as columns, and migrates a version 1
//! or 2 file in place) and a file written by a newer
//! agentry is refused rather than misread. The file (and SQLite's `-wal` and `-shm` beside it,
//! which take its mode) is readable by its owner only: `0600`, in a `0700` directory when the
//! store creates it.
//!
//! rusqlite is synchronous, so the connection lives on the store's own thread, which takes
//! every operation waiting (up to 256), runs each in a savepoint of one `BEGIN IMMEDIATE`
//! transaction, commits once and then answers the callers: under load, many sessions share
//! one fsync; alone, an operation is its own transaction. A batch is filled one operation per
//! tenant in turn and holds at most 2 MiB of documents (or one larger one), and small writes
//! are not batched behind large ones: a tenant writing many large sessions gets its share of
//! commits, and another tenant's small write waits for at most the commit in progress, not
//! for everything the first one queued. The runtime's threads never wait for
//! the disk, and no blocking-pool thread is parked per waiting call.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};

use super::row::{Row, decode, millis, over_quota, unsigned};
use super::{
    Lease, ListFilter, Quota, Removal, SessionRecord, SessionStore, SessionSummary, StoreError,
    StoreFuture, Stored, TenantUsage,
};

/// The schema version this code writes and understands (`PRAGMA user_version`).
const SCHEMA_VERSION: i64 = 3;

/// How long a statement waits for another connection's write lock (another process on the
/// same file, or a backup tool) before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Version 3 of the schema. `data` is the whole [`SessionRecord`] as JSON; the other columns
/// repeat what queries and operators need without parsing it (version 3 added the model,
/// tokens and cost the session list shows). Ids are unique per tenant.
/// `data` comes last so that reading the other columns (lists, quota sums) never walks a
/// large document's overflow pages.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    tenant         TEXT NOT NULL,
    id             TEXT NOT NULL,
    status         TEXT NOT NULL,
    size_bytes     INTEGER NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    updated_at_ms  INTEGER NOT NULL,
    lease_holder   TEXT,
    lease_until_ms INTEGER,
    model          TEXT NOT NULL DEFAULT '',
    input_tokens   INTEGER,
    output_tokens  INTEGER,
    cost_usd       REAL,
    data           TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
) STRICT;
CREATE INDEX IF NOT EXISTS sessions_by_idle ON sessions (tenant, updated_at_ms);
";

/// From version 2: the same rows with the list columns filled from each document. The table
/// is rebuilt rather than altered so that `data` stays the last column (see [`SCHEMA`]); a
/// document that is not JSON keeps empty columns (its next save fills them) instead of
/// failing the migration.
const MIGRATE_FROM_2: &str = "
DROP INDEX IF EXISTS sessions_by_idle;
ALTER TABLE sessions RENAME TO sessions_v2;
CREATE TABLE sessions (
    tenant         TEXT NOT NULL,
    id             TEXT NOT NULL,
    status         TEXT NOT NULL,
    size_bytes     INTEGER NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    updated_at_ms  INTEGER NOT NULL,
    lease_holder   TEXT,
    lease_until_ms INTEGER,
    model          TEXT NOT NULL DEFAULT '',
    input_tokens   INTEGER,
    output_tokens  INTEGER,
    cost_usd       REAL,
    data           TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
) STRICT;
INSERT INTO sessions
    (tenant, id, status, size_bytes, created_at_ms, updated_at_ms, lease_holder,
     lease_until_ms, model, input_tokens, output_tokens, cost_usd, data)
    SELECT tenant, id, status, size_bytes, created_at_ms, updated_at_ms, lease_holder,
           lease_until_ms,
           CASE WHEN json_valid(data) THEN coalesce(
               nullif(json_extract(data, '$.model'), ''),
               json_extract(data, '$.session.model'), '') ELSE '' END,
           CASE WHEN json_valid(data)
               THEN CAST(json_extract(data, '$.session.usage.input_tokens') AS INTEGER) END,
           CASE WHEN json_valid(data)
               THEN CAST(json_extract(data, '$.session.usage.output_tokens') AS INTEGER) END,
           CASE WHEN json_valid(data)
               THEN CAST(json_extract(data, '$.session.cost_usd') AS REAL) END,
           data
    FROM sessions_v2;
DROP TABLE sessions_v2;
";

/// From version 1 (ids unique across tenants, no sizes): the same rows, keyed by tenant and
/// id, with their sizes.
const MIGRATE_FROM_1: &str = "
ALTER TABLE sessions RENAME TO sessions_v1;
CREATE TABLE sessions (
    tenant         TEXT NOT NULL,
    id             TEXT NOT NULL,
    status         TEXT NOT NULL,
    size_bytes     INTEGER NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    updated_at_ms  INTEGER NOT NULL,
    lease_holder   TEXT,
    lease_until_ms INTEGER,
    data           TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
) STRICT;
INSERT INTO sessions
    (tenant, id, status, size_bytes, created_at_ms, updated_at_ms, lease_holder,
     lease_until_ms, data)
    SELECT tenant, id, status, length(CAST(data AS BLOB)), created_at_ms, updated_at_ms,
           lease_holder, lease_until_ms, data
    FROM sessions_v1;
DROP TABLE sessions_v1;
";

const INSERT: &str = "INSERT INTO sessions
     (id, tenant, status, data, created_at_ms, updated_at_ms, lease_holder, lease_until_ms,
      size_bytes, model, input_tokens, output_tokens, cost_usd)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";
const USAGE: &str = "SELECT count(*), coalesce(sum(size_bytes), 0) FROM sessions WHERE tenant = ?1";
const SELECT: &str = "SELECT data, lease_holder, lease_until_ms FROM sessions
     WHERE id = ?1 AND tenant = ?2";
/// Deletes unless an unexpired lease is held at `?3`.
const DELETE: &str = "DELETE FROM sessions WHERE id = ?1 AND tenant = ?2
       AND (lease_holder IS NULL OR lease_until_ms <= ?3)";
/// A page of the tenant's sessions matching the filters (`?4` status as the list shows it
/// at `?7`, `?5` model, `?6` id substring; each `NULL` matches all), walked in id order on
/// the primary key.
const LIST: &str = "SELECT id, status, created_at_ms, updated_at_ms, size_bytes, lease_holder,
            lease_until_ms, model, input_tokens, output_tokens, cost_usd
     FROM sessions
     WHERE tenant = ?1 AND id > ?2
       AND (?4 IS NULL OR ?4 = CASE
             WHEN lease_holder IS NOT NULL AND lease_until_ms > ?7 THEN 'running'
             WHEN status = 'running' THEN 'aborted'
             ELSE status END)
       AND (?5 IS NULL OR model = ?5)
       AND (?6 IS NULL OR instr(id, ?6) > 0)
     ORDER BY id LIMIT ?3";
const EXPIRE: &str = "DELETE FROM sessions WHERE rowid IN (
         SELECT rowid FROM sessions
         WHERE tenant = ?1 AND updated_at_ms < ?2
           AND (lease_holder IS NULL OR lease_until_ms <= ?3)
         LIMIT ?4)";
/// Takes the lease when it is free, expired at `now`, or already the caller's (re-entrant).
const ACQUIRE: &str = "UPDATE sessions SET lease_holder = ?3, lease_until_ms = ?5
     WHERE id = ?1 AND tenant = ?2
       AND (lease_holder IS NULL OR lease_holder = ?3 OR lease_until_ms <= ?4)";
const EXISTS: &str = "SELECT 1 FROM sessions WHERE id = ?1 AND tenant = ?2";
const SAVE: &str = "UPDATE sessions
     SET data = ?4, status = ?5, updated_at_ms = ?6, size_bytes = ?8, model = ?9,
         input_tokens = ?10, output_tokens = ?11, cost_usd = ?12,
         lease_holder = CASE WHEN ?7 THEN NULL ELSE lease_holder END,
         lease_until_ms = CASE WHEN ?7 THEN NULL ELSE lease_until_ms END
     WHERE id = ?1 AND tenant = ?2 AND lease_holder = ?3";
const RENEW: &str = "UPDATE sessions SET lease_until_ms = ?4
     WHERE id = ?1 AND tenant = ?2 AND lease_holder = ?3";
const RELEASE: &str = "UPDATE sessions SET lease_holder = NULL, lease_until_ms = NULL
     WHERE id = ?1 AND tenant = ?2 AND lease_holder = ?3";

/// Sessions in a SQLite file (WAL), for one server instance.
///
/// Cheap to share behind an `Arc`; operations are serialized on one connection, which is what
/// SQLite does with writers anyway.
///
/// [`save`](SessionStore::save) reports [`StoreError::LeaseLost`] both when another holder
/// took the lease and when the session was deleted meanwhile: either way the caller's write
/// is dropped, and telling them apart would cost a second statement.
pub struct SqliteStore {
    path: PathBuf,
    /// Operations for the store's own thread, which owns the connection.
    jobs: std::sync::mpsc::Sender<Queued>,
}

/// One operation: it runs on the store's thread inside the current batch's transaction and
/// returns what to do once the batch is committed (or failed to commit).
type Job = Box<dyn FnOnce(&Connection) -> Delivery + Send>;

/// Hands an operation's result to its caller once the batch's commit outcome is known.
type Delivery = Box<dyn FnOnce(Result<(), String>) + Send>;

/// An operation waiting for the store's thread: for whom, and how many bytes it writes.
struct Queued {
    tenant: String,
    cost: usize,
    job: Job,
}

/// The most operations one transaction (one fsync) carries.
const MAX_BATCH: usize = 256;

/// The most document bytes one transaction carries (a larger single document goes alone):
/// what a small write queued behind large ones waits for at most.
const MAX_BATCH_BYTES: usize = 2 * 1024 * 1024;

/// What an operation that writes no document counts for in a batch.
const SMALL: usize = 256;

/// An operation writing more than this is large: small ones are not batched behind it.
const LARGE: usize = 64 * 1024;

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (or creates) the session file at `path`, creating its parent directory if
    /// needed, and creates, migrates or checks the schema.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] when the file cannot be opened or written, or when it was
    /// written by a newer agentry (a higher schema version).
    pub async fn open(path: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let path = path.into();
        let opened = path.clone();
        let conn = tokio::task::spawn_blocking(move || open_blocking(&opened))
            .await
            .map_err(|err| StoreError::Database(format!("opening the session file: {err}")))??;
        let (jobs, queue) = std::sync::mpsc::channel::<Queued>();
        std::thread::Builder::new()
            .name("agentry-sqlite".into())
            .spawn(move || commit_batches(&conn, &queue))
            .map_err(|err| StoreError::Database(format!("starting the store's thread: {err}")))?;
        Ok(Self { path, jobs })
    }

    /// The session file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `op` for `tenant` on the store's thread and returns its result once the
    /// transaction it ran in is committed; `cost` is the bytes it writes.
    async fn call<T, F>(&self, tenant: &str, cost: usize, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let result = in_savepoint(conn, op);
            Box::new(move |committed: Result<(), String>| {
                let _ = sender.send(committed.map_err(StoreError::Database).and(result));
            })
        });
        let ended = || {
            StoreError::Database(
                "the session store could not run the operation (its thread ended, or the \
                 transaction could not start: see the log)"
                    .into(),
            )
        };
        self.jobs
            .send(Queued {
                tenant: tenant.to_owned(),
                cost: cost.max(SMALL),
                job,
            })
            .map_err(|_| ended())?;
        receiver.await.map_err(|_| ended())?
    }

    /// Writes `row`, the encoding of `record`, under `holder`'s lease (see
    /// [`SessionStore::save`]).
    async fn write(
        &self,
        record: &SessionRecord,
        row: Row,
        holder: &str,
        release: bool,
    ) -> Result<(), StoreError> {
        let id = record.id().to_owned();
        let tenant = record.tenant.clone();
        let holder = holder.to_owned();
        let cost = row.data.len();
        self.call(&record.tenant, cost, move |conn| {
            let Row {
                data,
                status,
                updated_at_ms,
                size_bytes,
                totals,
                ..
            } = row;
            let saved = conn
                .prepare_cached(SAVE)
                .and_then(|mut statement| {
                    statement.raw_bind_parameter(1, &id)?;
                    statement.raw_bind_parameter(2, &tenant)?;
                    statement.raw_bind_parameter(3, &holder)?;
                    // SQLite binds its own copy: the document goes before the statement runs,
                    // which makes another (the row), so a large one is held twice, not thrice.
                    statement.raw_bind_parameter(4, &data)?;
                    drop(data);
                    statement.raw_bind_parameter(5, &status)?;
                    statement.raw_bind_parameter(6, updated_at_ms)?;
                    statement.raw_bind_parameter(7, release)?;
                    statement.raw_bind_parameter(8, size_bytes)?;
                    statement.raw_bind_parameter(9, &totals.model)?;
                    statement.raw_bind_parameter(10, totals.input_tokens)?;
                    statement.raw_bind_parameter(11, totals.output_tokens)?;
                    statement.raw_bind_parameter(12, totals.cost_usd)?;
                    statement.raw_execute()
                })
                .map_err(database)?;
            if saved == 0 {
                return Err(StoreError::LeaseLost(id));
            }
            Ok(())
        })
        .await
    }
}

/// Operations waiting for the store's thread, one queue per tenant, taken in turn.
#[derive(Default)]
struct Fair {
    queues: HashMap<String, VecDeque<Queued>>,
    /// Tenants with waiting operations, next first.
    order: VecDeque<String>,
    /// The last batch left large operations waiting: the next one takes them.
    large_turn: bool,
}

impl Fair {
    fn push(&mut self, queued: Queued) {
        let queue = self.queues.entry(queued.tenant.clone()).or_default();
        if queue.is_empty() {
            self.order.push_back(queued.tenant.clone());
        }
        queue.push_back(queued);
    }

    fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The next batch: one operation of each tenant in turn (each tenant's in the order they
    /// came), until [`MAX_BATCH`] operations or [`MAX_BATCH_BYTES`]; a tenant whose next
    /// operation does not fit waits for the next batch while the others go on. A batch always
    /// holds at least one operation.
    ///
    /// Small operations do not wait behind large ones: while any tenant's next operation is
    /// small, a batch takes only small ones, then the large ones get the next batch (so a
    /// stream of small writes cannot starve them either). A small write thus waits for at most
    /// the commit in progress and one bounded batch.
    fn batch(&mut self) -> Vec<Queued> {
        let head = |queues: &HashMap<String, VecDeque<Queued>>, tenant: &String| {
            queues
                .get(tenant)
                .and_then(VecDeque::front)
                .map_or(0, |next| next.cost)
        };
        let small = self
            .order
            .iter()
            .any(|tenant| head(&self.queues, tenant) <= LARGE);
        let large = self
            .order
            .iter()
            .any(|tenant| head(&self.queues, tenant) > LARGE);
        let small_only = small && !(large && self.large_turn);
        self.large_turn = small_only && large;

        let mut batch: Vec<Queued> = Vec::new();
        let mut bytes = 0_usize;
        loop {
            let mut took = false;
            for _ in 0..self.order.len() {
                if batch.len() >= MAX_BATCH {
                    break;
                }
                let Some(tenant) = self.order.pop_front() else {
                    break;
                };
                let Some(queue) = self.queues.get_mut(&tenant) else {
                    continue;
                };
                let fits = queue.front().is_some_and(|next| {
                    (!small_only || next.cost <= LARGE)
                        && (batch.is_empty() || bytes + next.cost <= MAX_BATCH_BYTES)
                });
                if fits && let Some(next) = queue.pop_front() {
                    bytes += next.cost;
                    batch.push(next);
                    took = true;
                }
                if queue.is_empty() {
                    self.queues.remove(&tenant);
                } else {
                    self.order.push_back(tenant);
                }
            }
            if !took || batch.len() >= MAX_BATCH || self.order.is_empty() {
                return batch;
            }
        }
    }
}

/// The store's thread: takes every operation waiting, runs a fair batch of them
/// ([`Fair::batch`]) in one transaction, commits once, then answers each caller. Under load
/// many sessions share one fsync instead of queueing for one each; alone, an operation is its
/// own batch. Results are handed out only after the commit, so `synchronous = FULL` keeps its
/// meaning.
fn commit_batches(conn: &Connection, queue: &std::sync::mpsc::Receiver<Queued>) {
    let mut waiting = Fair::default();
    loop {
        if waiting.is_empty() {
            match queue.recv() {
                Ok(queued) => waiting.push(queued),
                Err(_) => return,
            }
        }
        while let Ok(queued) = queue.try_recv() {
            waiting.push(queued);
        }
        let batch = waiting.batch();
        if let Err(err) = conn.execute_batch("BEGIN IMMEDIATE") {
            // The jobs are dropped unrun: each caller's answer channel closes and it gets an
            // error; the cause goes to the log.
            tracing::error!(error = %err, "session store: cannot start a transaction");
            continue;
        }
        let deliveries: Vec<Delivery> =
            batch.into_iter().map(|queued| (queued.job)(conn)).collect();
        let committed = conn.execute_batch("COMMIT").map_err(|err| {
            let _ = conn.execute_batch("ROLLBACK");
            format!("committing: {err}")
        });
        for deliver in deliveries {
            deliver(committed.clone());
        }
    }
}

/// Runs `op` so that a failure undoes its own writes and nothing else of the batch.
fn in_savepoint<T>(
    conn: &Connection,
    op: impl FnOnce(&Connection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    conn.execute_batch("SAVEPOINT op").map_err(database)?;
    match op(conn) {
        Ok(value) => {
            conn.execute_batch("RELEASE op").map_err(database)?;
            Ok(value)
        }
        Err(err) => {
            let _ = conn.execute_batch("ROLLBACK TO op; RELEASE op");
            Err(err)
        }
    }
}

/// What `tenant` holds, inside the current transaction.
fn usage(conn: &Connection, tenant: &str) -> Result<TenantUsage, StoreError> {
    let (sessions, bytes): (i64, i64) = conn
        .prepare_cached(USAGE)
        .and_then(|mut statement| {
            statement.query_row(params![tenant], |row| Ok((row.get(0)?, row.get(1)?)))
        })
        .map_err(database)?;
    Ok(TenantUsage {
        sessions: unsigned(sessions),
        bytes: unsigned(bytes),
    })
}

/// Creates the file readable by its owner only (`0600`) before SQLite opens it, and its
/// directory (`0700`) when missing; an existing file is narrowed to `0600` too. SQLite
/// creates `-wal` and `-shm` with the database file's mode.
fn create_private(path: &Path) -> Result<(), StoreError> {
    let fail = |what: &Path, err: std::io::Error| {
        StoreError::Database(format!("creating {}: {err}", what.display()))
    };
    if let Some(parent) = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        && !parent.exists()
    {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(parent).map_err(|err| fail(parent, err))?;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(|err| fail(path, err))?;
        for file in [
            path.to_path_buf(),
            sibling(path, "-wal"),
            sibling(path, "-shm"),
        ] {
            if let Ok(meta) = std::fs::metadata(&file)
                && meta.permissions().mode() & 0o077 != 0
                && let Err(err) =
                    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
            {
                tracing::warn!(path = %file.display(), error = %err, "cannot make the session file private");
            }
        }
    }
    Ok(())
}

/// `path` with `suffix` appended to its file name (`sessions.db-wal`).
#[cfg(unix)]
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Opens the file, sets the pragmas and brings the schema to [`SCHEMA_VERSION`].
fn open_blocking(path: &Path) -> Result<Connection, StoreError> {
    create_private(path)?;
    let context =
        |err: rusqlite::Error| StoreError::Database(format!("opening {}: {err}", path.display()));
    let mut conn = Connection::open(path).map_err(context)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(context)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(context)?;
    if !mode.eq_ignore_ascii_case("wal") {
        // Some file systems (network mounts) cannot do WAL; SQLite then keeps its rollback
        // journal, which is still durable, only slower for concurrent readers.
        tracing::warn!(path = %path.display(), mode, "SQLite refused WAL mode; continuing");
    }
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(context)?;

    // IMMEDIATE takes the write lock first, so two processes opening a fresh file at once
    // cannot both decide to create (or migrate) the schema.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(context)?;
    let version: i64 = tx
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(context)?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::Database(format!(
            "{} has session schema version {version}, written by a newer agentry; this \
             version reads version {SCHEMA_VERSION} (upgrade agentry or use another file)",
            path.display()
        )));
    }
    if version == 1 {
        tx.execute_batch(MIGRATE_FROM_1).map_err(context)?;
        tracing::info!(path = %path.display(), "session file migrated to schema version 2");
    }
    if (1..=2).contains(&version) {
        tx.execute_batch(MIGRATE_FROM_2).map_err(context)?;
        tracing::info!(path = %path.display(), "session file migrated to schema version 3");
    }
    tx.execute_batch(SCHEMA).map_err(context)?;
    tx.execute_batch(crate::idempotency::SQLITE_SCHEMA)
        .map_err(context)?;
    if version < SCHEMA_VERSION {
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(context)?;
    }
    tx.commit().map_err(context)?;
    Ok(conn)
}

impl SessionStore for SqliteStore {
    fn insert<'a>(
        &'a self,
        record: &'a SessionRecord,
        lease: Option<(&'a str, u64)>,
        quota: Quota,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let row = Row::encode(record)?;
            let id = record.id().to_owned();
            let tenant = record.tenant.clone();
            let holder = lease.map(|(holder, _)| holder.to_owned());
            let until = lease.map(|(_, until_ms)| millis(until_ms));
            let cost = row.data.len();
            self.call(&record.tenant, cost, move |conn| {
                // The check and the insert share the batch's transaction: one atomic step. A
                // taken id is `Exists` whatever the quota says (an execute with a context on an
                // existing session goes on with it).
                if quota != Quota::UNLIMITED {
                    let exists = conn
                        .prepare_cached(EXISTS)
                        .and_then(|mut statement| statement.exists(params![id, tenant]))
                        .map_err(database)?;
                    if exists {
                        return Err(StoreError::Exists(id));
                    }
                    over_quota(
                        &tenant,
                        usage(conn, &tenant)?,
                        unsigned(row.size_bytes),
                        quota,
                    )?;
                }
                let inserted = conn.prepare_cached(INSERT).and_then(|mut statement| {
                    statement.execute(params![
                        id,
                        tenant,
                        row.status,
                        row.data,
                        row.created_at_ms,
                        row.updated_at_ms,
                        holder,
                        until,
                        row.size_bytes,
                        row.totals.model,
                        row.totals.input_tokens,
                        row.totals.output_tokens,
                        row.totals.cost_usd
                    ])
                });
                match inserted {
                    Ok(_) => Ok(()),
                    Err(err) if err.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => {
                        Err(StoreError::Exists(id))
                    }
                    Err(err) => Err(database(err)),
                }
            })
            .await
        })
    }

    fn read<'a>(&'a self, tenant: &'a str, id: &'a str) -> StoreFuture<'a, Option<Stored>> {
        let (owner, key) = (tenant.to_owned(), id.to_owned());
        Box::pin(self.call(tenant, SMALL, move |conn| {
            let row: Option<(String, Option<String>, Option<i64>)> = conn
                .prepare_cached(SELECT)
                .and_then(|mut statement| {
                    statement
                        .query_row(params![key, owner], |row| {
                            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                        })
                        .optional()
                })
                .map_err(database)?;
            row.map(|(data, holder, until)| {
                Ok(Stored {
                    record: decode(&owner, &key, &data)?,
                    lease_until_ms: holder.and(until).map(unsigned),
                })
            })
            .transpose()
        }))
    }

    fn delete<'a>(&'a self, tenant: &'a str, id: &'a str, now_ms: u64) -> StoreFuture<'a, Removal> {
        let (owner, key) = (tenant.to_owned(), id.to_owned());
        let now = millis(now_ms);
        Box::pin(self.call(tenant, SMALL, move |conn| {
            let deleted = conn
                .prepare_cached(DELETE)
                .and_then(|mut statement| statement.execute(params![key, owner, now]))
                .map_err(database)?;
            if deleted > 0 {
                return Ok(Removal::Deleted);
            }
            let exists = conn
                .prepare_cached(EXISTS)
                .and_then(|mut statement| statement.exists(params![key, owner]))
                .map_err(database)?;
            Ok(if exists {
                Removal::Busy
            } else {
                Removal::NotFound
            })
        }))
    }

    fn list<'a>(
        &'a self,
        tenant: &'a str,
        after: Option<&'a str>,
        limit: u32,
        filter: &'a ListFilter,
    ) -> StoreFuture<'a, Vec<SessionSummary>> {
        let owner = tenant.to_owned();
        let after = after.unwrap_or("").to_owned();
        let filter = filter.clone();
        Box::pin(self.call(tenant, SMALL, move |conn| {
            let mut statement = conn.prepare_cached(LIST).map_err(database)?;
            let rows = statement
                .query_map(
                    params![
                        owner,
                        after,
                        i64::from(limit),
                        filter.status,
                        filter.model,
                        filter.id_contains,
                        millis(filter.now_ms)
                    ],
                    |row| {
                        let holder: Option<String> = row.get(5)?;
                        let until: Option<i64> = row.get(6)?;
                        Ok(SessionSummary {
                            id: row.get(0)?,
                            status: row.get(1)?,
                            created_at_ms: unsigned(row.get(2)?),
                            updated_at_ms: unsigned(row.get(3)?),
                            size_bytes: unsigned(row.get(4)?),
                            lease_until_ms: holder.and(until).map(unsigned),
                            model: row.get(7)?,
                            input_tokens: row.get::<_, Option<i64>>(8)?.map(unsigned),
                            output_tokens: row.get::<_, Option<i64>>(9)?.map(unsigned),
                            cost_usd: row.get(10)?,
                        })
                    },
                )
                .map_err(database)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(database)
        }))
    }

    fn usage<'a>(&'a self, tenant: &'a str) -> StoreFuture<'a, TenantUsage> {
        let owner = tenant.to_owned();
        Box::pin(self.call(tenant, SMALL, move |conn| usage(conn, &owner)))
    }

    fn expire<'a>(
        &'a self,
        tenant: &'a str,
        idle_before_ms: u64,
        now_ms: u64,
        limit: u32,
    ) -> StoreFuture<'a, u64> {
        let owner = tenant.to_owned();
        let (before, now) = (millis(idle_before_ms), millis(now_ms));
        Box::pin(self.call(tenant, SMALL, move |conn| {
            let deleted = conn
                .prepare_cached(EXPIRE)
                .and_then(|mut statement| {
                    statement.execute(params![owner, before, now, i64::from(limit)])
                })
                .map_err(database)?;
            Ok(deleted as u64)
        }))
    }

    fn acquire<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        holder: &'a str,
        now_ms: u64,
        until_ms: u64,
    ) -> StoreFuture<'a, Lease> {
        let (owner, key, holder) = (tenant.to_owned(), id.to_owned(), holder.to_owned());
        let (now, until) = (millis(now_ms), millis(until_ms));
        // The batch's transaction makes the update and the existence check one atomic step.
        Box::pin(self.call(tenant, SMALL, move |conn| {
            let taken = conn
                .prepare_cached(ACQUIRE)
                .and_then(|mut statement| {
                    statement.execute(params![key, owner, holder, now, until])
                })
                .map_err(database)?;
            if taken > 0 {
                return Ok(Lease::Acquired);
            }
            let exists = conn
                .prepare_cached(EXISTS)
                .and_then(|mut statement| statement.exists(params![key, owner]))
                .map_err(database)?;
            Ok(if exists { Lease::Busy } else { Lease::NotFound })
        }))
    }

    fn save<'a>(
        &'a self,
        record: &'a SessionRecord,
        holder: &'a str,
        release: bool,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let row = Row::encode(record)?;
            self.write(record, row, holder, release).await
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
            self.write(record, row, holder, release).await
        })
    }

    fn renew<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        holder: &'a str,
        until_ms: u64,
    ) -> StoreFuture<'a, bool> {
        let (owner, key, holder) = (tenant.to_owned(), id.to_owned(), holder.to_owned());
        let until = millis(until_ms);
        Box::pin(self.call(tenant, SMALL, move |conn| {
            let renewed = conn
                .prepare_cached(RENEW)
                .and_then(|mut statement| statement.execute(params![key, owner, holder, until]))
                .map_err(database)?;
            Ok(renewed > 0)
        }))
    }

    fn release<'a>(&'a self, tenant: &'a str, id: &'a str, holder: &'a str) -> StoreFuture<'a, ()> {
        let (owner, key, holder) = (tenant.to_owned(), id.to_owned(), holder.to_owned());
        Box::pin(self.call(tenant, SMALL, move |conn| {
            conn.prepare_cached(RELEASE)
                .and_then(|mut statement| statement.execute(params![key, owner, holder]))
                .map_err(database)?;
            Ok(())
        }))
    }

    fn claim_key<'a>(&'a self, claim: &'a super::KeyClaim) -> StoreFuture<'a, super::Claim> {
        let owned = claim.clone();
        Box::pin(self.call(&claim.tenant, SMALL, move |conn| {
            crate::idempotency::sqlite::claim(conn, &owned)
        }))
    }

    fn finish_key<'a>(
        &'a self,
        tenant: &'a str,
        key: &'a str,
        owner: &'a str,
        outcome: &'a super::StoredOutcome,
        expires_at_ms: u64,
    ) -> StoreFuture<'a, ()> {
        let (t, k, o, out) = (
            tenant.to_owned(),
            key.to_owned(),
            owner.to_owned(),
            outcome.clone(),
        );
        Box::pin(self.call(tenant, outcome.body.len(), move |conn| {
            crate::idempotency::sqlite::finish(conn, &t, &k, &o, &out, expires_at_ms)
        }))
    }

    fn renew_key<'a>(
        &'a self,
        tenant: &'a str,
        key: &'a str,
        owner: &'a str,
        running_until_ms: u64,
    ) -> StoreFuture<'a, bool> {
        let (t, k, o) = (tenant.to_owned(), key.to_owned(), owner.to_owned());
        Box::pin(self.call(tenant, SMALL, move |conn| {
            crate::idempotency::sqlite::renew(conn, &t, &k, &o, running_until_ms)
        }))
    }

    fn release_key<'a>(
        &'a self,
        tenant: &'a str,
        key: &'a str,
        owner: &'a str,
    ) -> StoreFuture<'a, ()> {
        let (t, k, o) = (tenant.to_owned(), key.to_owned(), owner.to_owned());
        Box::pin(self.call(tenant, SMALL, move |conn| {
            crate::idempotency::sqlite::release(conn, &t, &k, &o)
        }))
    }
}

fn database(err: rusqlite::Error) -> StoreError {
    StoreError::Database(err.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn queued(tenant: &str, cost: usize) -> Queued {
        Queued {
            tenant: tenant.to_owned(),
            cost,
            job: Box::new(|_| Box::new(|_| {})),
        }
    }

    fn tenants(batch: &[Queued]) -> Vec<&str> {
        batch.iter().map(|queued| queued.tenant.as_str()).collect()
    }

    /// The "seen" of the issue: 100 creates of 1 MiB from one tenant queued ahead of another
    /// tenant's small create. Before, the whole queue (up to 256 operations, 100 MiB) was one
    /// transaction and the small create waited for its commit.
    #[test]
    fn a_small_write_is_not_batched_behind_another_tenants_large_ones() {
        let mut fair = Fair::default();
        for _ in 0..100 {
            fair.push(queued("bulk", 1024 * 1024));
        }
        fair.push(queued("small", 300));
        let first = fair.batch();
        // The small write goes first, alone: it does not wait for a large one's commit.
        assert_eq!(tenants(&first), ["small"]);
        // The bulk tenant still gets everything, a bounded batch at a time.
        let mut rest = 0;
        while !fair.is_empty() {
            let batch = fair.batch();
            assert!(!batch.is_empty());
            assert!(batch.iter().map(|queued| queued.cost).sum::<usize>() <= MAX_BATCH_BYTES);
            rest += batch.len();
        }
        assert_eq!(first.len() + rest, 101);
    }

    #[test]
    fn tenants_take_turns_and_each_keeps_its_order() {
        let mut fair = Fair::default();
        for n in 0..300 {
            let mut item = queued("a", SMALL);
            item.cost = SMALL + n;
            fair.push(item);
        }
        for _ in 0..3 {
            fair.push(queued("b", SMALL));
        }
        let batch = fair.batch();
        assert_eq!(batch.len(), MAX_BATCH);
        assert_eq!(tenants(&batch).iter().filter(|t| **t == "b").count(), 3);
        let costs: Vec<usize> = batch
            .iter()
            .filter(|queued| queued.tenant == "a")
            .map(|queued| queued.cost)
            .collect();
        assert!(costs.windows(2).all(|pair| pair[0] < pair[1]));
        // A document larger than a whole batch still goes, alone.
        let mut fair = Fair::default();
        fair.push(queued("a", 10 * MAX_BATCH_BYTES));
        fair.push(queued("a", SMALL));
        assert_eq!(fair.batch().len(), 1);
        assert_eq!(fair.batch().len(), 1);
        assert!(fair.is_empty());
    }

    /// Small writes arriving all the time do not starve large ones: batches alternate.
    #[test]
    fn large_writes_get_every_other_batch_under_a_stream_of_small_ones() {
        let mut fair = Fair::default();
        for _ in 0..4 {
            fair.push(queued("bulk", 1024 * 1024));
        }
        let mut large_batches = 0;
        for _ in 0..8 {
            fair.push(queued("small", SMALL));
            let batch = fair.batch();
            if batch.iter().any(|queued| queued.cost > LARGE) {
                large_batches += 1;
            }
        }
        assert!(large_batches >= 2, "{large_batches}");
        while !fair.is_empty() {
            fair.batch();
        }
    }
}
