//! Accounting and audit rows for the agentry loop, stored in SQLite or PostgreSQL.
//!
//! The loop hands one row per model call and per tool call to an
//! [`AccountingQueue`](agent_loop::AccountingQueue); this crate's sinks are the
//! [`RowWriter`](agent_loop::RowWriter)s that store them, in two tables with a versioned schema
//! ([`SCHEMA_VERSION`], the `accounting_schema_version` table, migrations from version 1), and answer
//! usage queries ([`UsageQuery`]) for one tenant at a time.
//!
//! - [`SqliteSink`] (feature `sqlite`, default): a SQLite file, for the CLI and a one-instance
//!   server, written by a thread of its own ([`SqliteSink::spawn_writer`]).
//! - [`PostgresSink`] (feature `postgres`): the same tables in PostgreSQL, for servers sharing
//!   a database; a [`RowWriter`](agent_loop::RowWriter) for
//!   [`AccountingReceiver::run`](agent_loop::AccountingReceiver::run).
//!
//! ```no_run
//! # #[cfg(feature = "sqlite")]
//! # async fn demo() -> Result<(), agent_accounting::Error> {
//! use agent_accounting::SqliteSink;
//! use agent_loop::{AccountingConfig, AccountingQueue, Options};
//!
//! let sink = SqliteSink::open("usage.db")?;
//! let (queue, receiver) = AccountingQueue::new(AccountingConfig::default());
//! let writer = sink.spawn_writer(receiver)?;
//! let options = Options::auto().with_accounting(queue.clone().with_provider("anthropic"));
//! // … run the loop with `options` …
//! queue.flush().await;
//! # drop((options, writer));
//! # Ok(())
//! # }
//! ```

// Without a store only the row and query types are left; their helpers serve the stores.
#![cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]

mod row;
mod usage;

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use row::{StoredModelCall, StoredToolCall, arguments_digest};
pub use usage::{GroupBy, UsageGroup, UsageQuery};

#[cfg(feature = "postgres")]
pub use postgres::PostgresSink;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteSink;

/// The schema version this build writes and reads. Version 1: `model_calls`, `tool_calls`;
/// 2: `model_calls.response_id`; 3: the `(tenant, session)` indexes; 4: `tool_calls.guardrails`.
pub const SCHEMA_VERSION: i64 = 4;

/// What went wrong storing or reading rows.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database failed.
    #[error("accounting store: {0}")]
    Store(String),
    /// The database's schema is newer than this build knows.
    #[error(
        "the accounting store has schema version {found}, newer than this build's {SCHEMA_VERSION}; \
         upgrade agentry"
    )]
    NewerSchema {
        /// The version found.
        found: i64,
    },
    /// A usage query is out of bounds (time range, group count).
    #[error("bad usage query: {0}")]
    Query(String),
}

#[cfg(feature = "sqlite")]
impl From<rusqlite::Error> for Error {
    fn from(error: rusqlite::Error) -> Self {
        Self::Store(error.to_string())
    }
}

#[cfg(feature = "postgres")]
impl From<tokio_postgres::Error> for Error {
    fn from(error: tokio_postgres::Error) -> Self {
        // The server's own message (`DbError`) says more than the wrapper's.
        match error.as_db_error() {
            Some(db) => Self::Store(db.to_string()),
            None => Self::Store(error.to_string()),
        }
    }
}
