//! [`SqliteStore`]: sessions in one SQLite file, for a single server instance.
//!
//! The file is opened in WAL mode with `synchronous = FULL`, so a write the store reported as
//! done survives a crash or power loss, and readers never wait for a writer. The schema is
//! versioned with `PRAGMA user_version` (this version writes and reads version 1) and a file
//! written by a newer agentry is refused rather than misread.
//!
//! rusqlite is synchronous, so the connection lives on the store's own thread, which takes
//! every operation waiting (up to 256), runs each in a savepoint of one `BEGIN IMMEDIATE`
//! transaction, commits once and then answers the callers: under load, many sessions share
//! one fsync; alone, an operation is its own transaction. The runtime's threads never wait for
//! the disk, and no blocking-pool thread is parked per waiting call.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};

use super::row::{Row, decode, millis};
use super::{Lease, SessionRecord, SessionStore, StoreError, StoreFuture};

/// The schema version this code writes and understands (`PRAGMA user_version`).
const SCHEMA_VERSION: i64 = 1;

/// How long a statement waits for another connection's write lock (another process on the
/// same file, or a backup tool) before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Version 1 of the schema. `data` is the whole [`SessionRecord`] as JSON; the other columns
/// repeat what queries and operators need without parsing it.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    id             TEXT PRIMARY KEY NOT NULL,
    tenant         TEXT NOT NULL,
    status         TEXT NOT NULL,
    data           TEXT NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    updated_at_ms  INTEGER NOT NULL,
    lease_holder   TEXT,
    lease_until_ms INTEGER
) STRICT;
";

const INSERT: &str = "INSERT INTO sessions
     (id, tenant, status, data, created_at_ms, updated_at_ms, lease_holder, lease_until_ms)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
const SELECT: &str = "SELECT data FROM sessions WHERE id = ?1 AND tenant = ?2";
const DELETE: &str = "DELETE FROM sessions WHERE id = ?1 AND tenant = ?2";
/// Takes the lease when it is free, expired at `now`, or already the caller's (re-entrant).
const ACQUIRE: &str = "UPDATE sessions SET lease_holder = ?3, lease_until_ms = ?5
     WHERE id = ?1 AND tenant = ?2
       AND (lease_holder IS NULL OR lease_holder = ?3 OR lease_until_ms <= ?4)";
const EXISTS: &str = "SELECT 1 FROM sessions WHERE id = ?1 AND tenant = ?2";
const SAVE: &str = "UPDATE sessions
     SET data = ?4, status = ?5, updated_at_ms = ?6,
         lease_holder = CASE WHEN ?7 THEN NULL ELSE lease_holder END,
         lease_until_ms = CASE WHEN ?7 THEN NULL ELSE lease_until_ms END
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
    jobs: std::sync::mpsc::Sender<Job>,
}

/// One operation: it runs on the store's thread inside the current batch's transaction and
/// returns what to do once the batch is committed (or failed to commit).
type Job = Box<dyn FnOnce(&Connection) -> Delivery + Send>;

/// Hands an operation's result to its caller once the batch's commit outcome is known.
type Delivery = Box<dyn FnOnce(Result<(), String>) + Send>;

/// The most operations one transaction (one fsync) carries.
const MAX_BATCH: usize = 256;

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (or creates) the session file at `path`, creating its parent directory if
    /// needed, and creates or checks the schema.
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
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
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

    /// Runs `op` on the store's thread and returns its result once the transaction it ran in
    /// is committed.
    async fn call<T, F>(&self, op: F) -> Result<T, StoreError>
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
        self.jobs.send(job).map_err(|_| ended())?;
        receiver.await.map_err(|_| ended())?
    }
}

/// The store's thread: takes every operation waiting (up to [`MAX_BATCH`]), runs them in one
/// transaction, commits once, then answers each caller. Under load many sessions share one
/// fsync instead of queueing for one each; alone, an operation is its own batch. Results are
/// handed out only after the commit, so `synchronous = FULL` keeps its meaning.
fn commit_batches(conn: &Connection, queue: &std::sync::mpsc::Receiver<Job>) {
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if let Err(err) = conn.execute_batch("BEGIN IMMEDIATE") {
            // The jobs are dropped unrun: each caller's answer channel closes and it gets an
            // error; the cause goes to the log.
            tracing::error!(error = %err, "session store: cannot start a transaction");
            continue;
        }
        let deliveries: Vec<Delivery> = batch.into_iter().map(|job| job(conn)).collect();
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

impl SqliteStore {
    /// Inserts `record`, leased to a holder when `lease` says so.
    async fn insert(
        &self,
        record: &SessionRecord,
        lease: Option<(&str, u64)>,
    ) -> Result<(), StoreError> {
        let row = Row::encode(record)?;
        let id = record.id().to_owned();
        let tenant = record.tenant.clone();
        let holder = lease.map(|(holder, _)| holder.to_owned());
        let until = lease.map(|(_, until_ms)| millis(until_ms));
        self.call(move |conn| {
            let inserted = conn.prepare_cached(INSERT).and_then(|mut statement| {
                statement.execute(params![
                    id,
                    tenant,
                    row.status,
                    row.data,
                    row.created_at_ms,
                    row.updated_at_ms,
                    holder,
                    until
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
    }
}

/// Opens the file, sets the pragmas and brings the schema to [`SCHEMA_VERSION`].
fn open_blocking(path: &Path) -> Result<Connection, StoreError> {
    if let Some(parent) = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent)
            .map_err(|err| StoreError::Database(format!("creating {}: {err}", parent.display())))?;
    }
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
    // cannot both decide to create the schema.
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
    tx.execute_batch(SCHEMA).map_err(context)?;
    if version < SCHEMA_VERSION {
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(context)?;
    }
    tx.commit().map_err(context)?;
    Ok(conn)
}

impl SessionStore for SqliteStore {
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
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        Box::pin(self.call(move |conn| {
            let data: Option<String> = conn
                .prepare_cached(SELECT)
                .and_then(|mut statement| {
                    statement
                        .query_row(params![id, tenant], |row| row.get(0))
                        .optional()
                })
                .map_err(database)?;
            data.map(|data| decode(&tenant, &id, &data)).transpose()
        }))
    }

    fn delete<'a>(&'a self, tenant: &'a str, id: &'a str) -> StoreFuture<'a, bool> {
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        Box::pin(self.call(move |conn| {
            let deleted = conn
                .prepare_cached(DELETE)
                .and_then(|mut statement| statement.execute(params![id, tenant]))
                .map_err(database)?;
            Ok(deleted > 0)
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
        let (tenant, id, holder) = (tenant.to_owned(), id.to_owned(), holder.to_owned());
        let (now, until) = (millis(now_ms), millis(until_ms));
        // The batch's transaction makes the update and the existence check one atomic step.
        Box::pin(self.call(move |conn| {
            let taken = conn
                .prepare_cached(ACQUIRE)
                .and_then(|mut statement| {
                    statement.execute(params![id, tenant, holder, now, until])
                })
                .map_err(database)?;
            if taken > 0 {
                return Ok(Lease::Acquired);
            }
            let exists = conn
                .prepare_cached(EXISTS)
                .and_then(|mut statement| statement.exists(params![id, tenant]))
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
            let id = record.id().to_owned();
            let tenant = record.tenant.clone();
            let holder = holder.to_owned();
            self.call(move |conn| {
                let saved = conn
                    .prepare_cached(SAVE)
                    .and_then(|mut statement| {
                        statement.execute(params![
                            id,
                            tenant,
                            holder,
                            row.data,
                            row.status,
                            row.updated_at_ms,
                            release
                        ])
                    })
                    .map_err(database)?;
                if saved == 0 {
                    return Err(StoreError::LeaseLost(id));
                }
                Ok(())
            })
            .await
        })
    }

    fn release<'a>(&'a self, tenant: &'a str, id: &'a str, holder: &'a str) -> StoreFuture<'a, ()> {
        let (tenant, id, holder) = (tenant.to_owned(), id.to_owned(), holder.to_owned());
        Box::pin(self.call(move |conn| {
            conn.prepare_cached(RELEASE)
                .and_then(|mut statement| statement.execute(params![id, tenant, holder]))
                .map_err(database)?;
            Ok(())
        }))
    }
}

fn database(err: rusqlite::Error) -> StoreError {
    StoreError::Database(err.to_string())
}
