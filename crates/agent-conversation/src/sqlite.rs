//! [`SqliteStore`]: many conversations in one SQLite file, and [`SqliteAppender`], the
//! appender for one of them.
//!
//! # Schema (version 1, kept in `PRAGMA user_version`)
//!
//! ```sql
//! CREATE TABLE turns (
//!     conversation_id TEXT    NOT NULL,
//!     seq             INTEGER NOT NULL CHECK (seq >= 0),
//!     at_unix_ms      INTEGER NOT NULL,
//!     message         TEXT    NOT NULL, -- the agent_types::Message, as JSON
//!     PRIMARY KEY (conversation_id, seq)
//! ) STRICT, WITHOUT ROWID;
//! ```
//!
//! # Durability
//!
//! The database runs in WAL mode with `synchronous = FULL`: every append is its own
//! transaction and SQLite syncs the WAL on each commit, so a turn whose `append` returned `Ok`
//! survives a power loss. (`NORMAL`, often recommended with WAL, syncs only at checkpoints: it
//! survives a crash of the process but may lose the last commits on a power loss or OS crash,
//! which would break "stored before the loop goes on".)

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_types::Message;
use rusqlite::{Connection, TransactionBehavior, params};

use crate::appender::{AppendFuture, ConversationAppender};
use crate::blocking::run_blocking;
use crate::error::Error;
use crate::id::ConversationId;
use crate::turn::{StoredTurn, Turn};

/// The schema version this crate writes and reads.
const SCHEMA_VERSION: i64 = 1;

const SCHEMA_V1: &str = "
CREATE TABLE turns (
    conversation_id TEXT    NOT NULL,
    seq             INTEGER NOT NULL CHECK (seq >= 0),
    at_unix_ms      INTEGER NOT NULL,
    message         TEXT    NOT NULL,
    PRIMARY KEY (conversation_id, seq)
) STRICT, WITHOUT ROWID;
";

/// How long a write waits for another process holding the database lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A SQLite file holding any number of conversations.
///
/// Cheap to clone: clones share one connection behind a mutex. Every database call runs on
/// Tokio's blocking pool, so the async runtime never waits on SQLite or the disk. Use
/// [`appender`](Self::appender) to get the appender for one conversation.
///
/// # Example
///
/// ```
/// use agent_conversation::{ConversationAppender, ConversationId, SqliteStore, Turn};
/// use agent_types::AssistantMessage;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let dir = tempfile::tempdir()?;
/// let store = SqliteStore::open(dir.path().join("conversations.db")).await?;
///
/// let id = ConversationId::from("support-42");
/// let appender = store.appender(id.clone());
/// appender.append(&Turn::new(AssistantMessage::text("How can I help?"))).await?;
///
/// assert_eq!(store.conversations().await?, vec![id.clone()]);
/// assert_eq!(store.load(&id).await?[0].seq, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct SqliteStore {
    connection: Arc<Mutex<Connection>>,
    path: Arc<Path>,
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path`: switches it to WAL mode, sets
    /// `synchronous = FULL` and creates or checks the schema.
    ///
    /// # Errors
    ///
    /// [`Error::Sqlite`] if the file cannot be opened or is not a database;
    /// [`Error::UnsupportedSchema`] if a newer version of this crate wrote it.
    pub async fn open(path: impl Into<PathBuf>) -> Result<Self, Error> {
        let path: Arc<Path> = Arc::from(path.into());
        let opened = Arc::clone(&path);
        let connection = run_blocking(move || open_connection(&opened)).await?;
        Ok(Self {
            connection: Arc::new(Mutex::new(connection)),
            path,
        })
    }

    /// The file this store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The appender for conversation `id`. A conversation exists once it has a turn; appending
    /// to an id that already has turns continues its numbering.
    pub fn appender(&self, id: impl Into<ConversationId>) -> SqliteAppender {
        SqliteAppender {
            store: self.clone(),
            id: id.into(),
        }
    }

    /// The turns of conversation `id`, in order; empty if it has none.
    ///
    /// # Errors
    ///
    /// [`Error::Sqlite`] on a database failure, [`Error::CorruptRow`] if a stored turn cannot
    /// be decoded.
    pub async fn load(&self, id: &ConversationId) -> Result<Vec<StoredTurn>, Error> {
        let id = id.clone();
        self.with_connection(move |connection| load_turns(connection, &id))
            .await
    }

    /// The ids of every conversation with at least one turn, sorted.
    ///
    /// # Errors
    ///
    /// [`Error::Sqlite`] on a database failure.
    pub async fn conversations(&self) -> Result<Vec<ConversationId>, Error> {
        self.with_connection(|connection| {
            let mut statement = connection
                .prepare_cached("SELECT DISTINCT conversation_id FROM turns ORDER BY 1")?;
            let ids = statement
                .query_map([], |row| row.get::<_, String>(0))?
                .map(|id| id.map(ConversationId::from))
                .collect::<Result<_, _>>()?;
            Ok(ids)
        })
        .await
    }

    /// Runs `work` with the connection on the blocking pool.
    async fn with_connection<T, F>(&self, work: F) -> Result<T, Error>
    where
        F: FnOnce(&mut Connection) -> Result<T, Error> + Send + 'static,
        T: Send + 'static,
    {
        let connection = Arc::clone(&self.connection);
        run_blocking(move || work(&mut lock(&connection))).await
    }
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Appends turns to one conversation of a [`SqliteStore`].
///
/// Each append is one transaction that gives the turn the next sequence number of its
/// conversation and is synced to disk before `append` returns. Appenders for different
/// conversations can be used at the same time; appends are serialized on the store's one
/// connection.
#[derive(Debug, Clone)]
pub struct SqliteAppender {
    store: SqliteStore,
    id: ConversationId,
}

impl SqliteAppender {
    /// The conversation this appender writes.
    pub fn conversation_id(&self) -> &ConversationId {
        &self.id
    }

    /// The store this appender writes to.
    pub fn store(&self) -> &SqliteStore {
        &self.store
    }
}

impl ConversationAppender for SqliteAppender {
    fn append<'a>(&'a self, turn: &'a Turn) -> AppendFuture<'a> {
        Box::pin(async move {
            let message = serde_json::to_string(&turn.message).map_err(Error::Serialize)?;
            // Past year 292 million the stamp saturates rather than failing the append.
            let at_unix_ms = i64::try_from(turn.at_unix_ms).unwrap_or(i64::MAX);
            let id = self.id.clone();
            self.store
                .with_connection(move |connection| {
                    // One statement, one implicit transaction: the write lock is taken before
                    // MAX(seq) is read, so numbering is gap-free and race-free even with other
                    // processes writing the same file.
                    connection
                        .prepare_cached(
                            "INSERT INTO turns (conversation_id, seq, at_unix_ms, message)
                             SELECT ?1, COALESCE(MAX(seq) + 1, 0), ?2, ?3
                             FROM turns WHERE conversation_id = ?1",
                        )?
                        .execute(params![id.as_str(), at_unix_ms, message])?;
                    Ok(())
                })
                .await
        })
    }
}

fn lock(connection: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    // SQLite keeps its own transactional consistency; a panic while the lock was held cannot
    // leave the connection half-updated.
    connection.lock().unwrap_or_else(PoisonError::into_inner)
}

fn open_connection(path: &Path) -> Result<Connection, Error> {
    let mut connection = Connection::open(path)?;
    connection.busy_timeout(BUSY_TIMEOUT)?;
    // WAL lets readers (a UI listing conversations) run while the loop writes. The mode
    // persists in the file; SQLite answers with the mode it actually uses.
    let _mode: String =
        connection.pragma_update_and_check(None, "journal_mode", "wal", |row| row.get(0))?;
    connection.pragma_update(None, "synchronous", "FULL")?;

    // IMMEDIATE: two processes opening a fresh file at once do not both create the schema.
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = transaction.pragma_query_value(None, "user_version", |row| row.get(0))?;
    match version {
        0 => {
            transaction.execute_batch(SCHEMA_V1)?;
            transaction.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        }
        SCHEMA_VERSION => {}
        found => {
            return Err(Error::UnsupportedSchema {
                found,
                supported: SCHEMA_VERSION,
            });
        }
    }
    transaction.commit()?;
    Ok(connection)
}

fn load_turns(connection: &Connection, id: &ConversationId) -> Result<Vec<StoredTurn>, Error> {
    let mut statement = connection.prepare_cached(
        "SELECT seq, at_unix_ms, message FROM turns WHERE conversation_id = ?1 ORDER BY seq",
    )?;
    let rows = statement
        .query_map([id.as_str()], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, String>(2)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    rows.into_iter()
        .map(|(seq, at_unix_ms, message)| {
            let seq = u64::try_from(seq).unwrap_or_default();
            let corrupt = |reason: String| Error::CorruptRow {
                conversation: id.clone(),
                seq,
                reason,
            };
            let at_unix_ms = u64::try_from(at_unix_ms)
                .map_err(|_| corrupt(format!("negative timestamp {at_unix_ms}")))?;
            let message: Message =
                serde_json::from_str(&message).map_err(|error| corrupt(error.to_string()))?;
            Ok(StoredTurn::new(seq, Turn::at(message, at_unix_ms)))
        })
        .collect()
}

/// Reads the schema version of the file at `path`, without going through the store.
#[cfg(test)]
fn user_version(path: &Path) -> i64 {
    let connection = Connection::open(path).unwrap();
    connection
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap()
}

#[cfg(test)]
mod tests {
    use agent_types::AssistantMessage;

    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    #[test]
    fn a_new_file_gets_wal_full_sync_and_schema_version_1() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = runtime().block_on(SqliteStore::open(&path)).unwrap();
        {
            let connection = lock(&store.connection);
            let mode: String = connection
                .query_row("PRAGMA journal_mode", [], |row| row.get(0))
                .unwrap();
            assert_eq!(mode, "wal");
            let synchronous: i64 = connection
                .query_row("PRAGMA synchronous", [], |row| row.get(0))
                .unwrap();
            assert_eq!(synchronous, 2, "2 is FULL");
        }
        assert_eq!(user_version(&path), 1);
        // Reopening a current file leaves it alone.
        drop(store);
        runtime().block_on(SqliteStore::open(&path)).unwrap();
        assert_eq!(user_version(&path), 1);
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        runtime().block_on(SqliteStore::open(&path)).unwrap();
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", 2)
            .unwrap();
        let error = runtime().block_on(SqliteStore::open(&path)).unwrap_err();
        assert!(
            matches!(
                error,
                Error::UnsupportedSchema {
                    found: 2,
                    supported: 1
                }
            ),
            "{error:?}"
        );
    }

    #[test]
    fn a_row_that_is_not_a_message_is_a_corrupt_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let runtime = runtime();
        let store = runtime.block_on(SqliteStore::open(&path)).unwrap();
        Connection::open(&path)
            .unwrap()
            .execute(
                "INSERT INTO turns VALUES ('c', 0, 1, '{\"role\":\"nobody\"}')",
                [],
            )
            .unwrap();
        let error = runtime
            .block_on(store.load(&ConversationId::from("c")))
            .unwrap_err();
        assert!(
            matches!(&error, Error::CorruptRow { seq: 0, conversation, .. } if conversation.as_str() == "c"),
            "{error:?}"
        );
        assert!(error.is_corrupt());
    }

    /// While another connection holds the write lock, an append must wait on the blocking
    /// pool: a task on the same single-threaded runtime still runs and releases the lock. Were
    /// the append to block the runtime thread, the lock would never be released and the append
    /// would fail with SQLITE_BUSY after the busy timeout.
    #[test]
    fn a_waiting_append_does_not_block_the_runtime() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let runtime = runtime();
        runtime.block_on(async {
            let store = SqliteStore::open(&path).await.unwrap();
            let blocker = Connection::open(&path).unwrap();
            blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();

            let appender = store.appender("c");
            let append = tokio::spawn(async move {
                appender
                    .append(&Turn::at(AssistantMessage::text("hi"), 1))
                    .await
            });
            // Let the append task start and park on the blocking pool.
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            blocker.execute_batch("COMMIT").unwrap();
            append.await.unwrap().unwrap();
            assert_eq!(store.load(&"c".into()).await.unwrap().len(), 1);
        });
    }
}
