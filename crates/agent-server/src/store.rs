//! Where sessions live between requests: the [`SessionStore`] trait and its implementations,
//! SQLite (one instance; the default) and PostgreSQL (several instances behind a load
//! balancer).
//!
//! A session is stored whole, as one JSON document per row, and replaced in one statement, so
//! no reader ever sees half a session. An execute holds a *lease* on its session (a holder id
//! and an expiry) from its start to its end: a second execute on the same session, on this
//! instance or another, finds the lease taken and is refused (409), and a lease left behind by
//! a crashed instance expires on its own.

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod row;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::future::Future;
use std::pin::Pin;

use agent_loop::Session;
use serde::{Deserialize, Serialize};

#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;

/// The future a [`SessionStore`] method returns.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// One stored session: the loop's [`Session`] plus what the server needs around it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The tenant that owns the session; no other tenant can see it.
    pub tenant: String,
    /// The model as clients name it (an entry of the server's allow-list); `session.model`
    /// is the provider's name for it.
    #[serde(default)]
    pub model: String,
    /// The session itself (id, status, history, pending calls, usage, cost).
    pub session: Session,
    /// The server-side tools this session may call, by name.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Budgets and loop settings chosen at creation (already capped by the server).
    #[serde(default)]
    pub options: SessionOptions,
    /// When the session was created, in milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// When the session was last written, in milliseconds since the Unix epoch.
    pub updated_at_ms: u64,
}

impl SessionRecord {
    /// The session's id.
    pub fn id(&self) -> &str {
        self.session.id.as_str()
    }
}

/// The per-session loop settings a client may choose (each at most the server's cap).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionOptions {
    /// The most tool rounds per execute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
    /// The most tokens per execute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// The most US dollars per execute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Run a round's tool calls one after another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tools: Option<bool>,
    /// The cap on each tool result the model sees, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_result_max_bytes: Option<usize>,
    /// The most tool calls one round runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls_per_round: Option<usize>,
    /// The most bytes of one round's results together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_round_result_bytes: Option<usize>,
}

/// The outcome of asking for a session's execute lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// The caller holds the lease until it finishes or the lease expires.
    Acquired,
    /// Another execute holds an unexpired lease.
    Busy,
    /// No such session for this tenant.
    NotFound,
}

/// What a store can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A session with this id already exists.
    #[error("a session with id `{0}` already exists")]
    Exists(String),
    /// The write was refused because the caller no longer holds the session's lease (it
    /// expired and another execute took it).
    #[error("the lease on session `{0}` was lost; another execute took it over")]
    LeaseLost(String),
    /// A stored row does not hold a session this version can read.
    #[error("stored session `{id}` is corrupt: {reason}")]
    Corrupt {
        /// The session.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The database failed (connection, I/O, constraint, schema).
    #[error("session store: {0}")]
    Database(String),
}

/// Sessions, by tenant and id. Every method is one atomic operation on the store.
pub trait SessionStore: Send + Sync + 'static {
    /// Inserts a new session; [`StoreError::Exists`] when its id is taken (by any tenant).
    fn create<'a>(&'a self, record: &'a SessionRecord) -> StoreFuture<'a, ()>;

    /// Inserts a new session already leased to `holder` until `until_ms`, in the same write:
    /// an execute that creates its session needs no second round trip (and no second commit)
    /// before it starts. [`StoreError::Exists`] as for [`create`](Self::create).
    fn create_leased<'a>(
        &'a self,
        record: &'a SessionRecord,
        holder: &'a str,
        until_ms: u64,
    ) -> StoreFuture<'a, ()>;

    /// The session `id` of `tenant`, or `None` (also when it belongs to another tenant).
    fn get<'a>(&'a self, tenant: &'a str, id: &'a str) -> StoreFuture<'a, Option<SessionRecord>>;

    /// Deletes the session `id` of `tenant`; `false` when there was none. A session under an
    /// unexpired lease is deleted too (the running execute's final write then fails with
    /// [`StoreError::LeaseLost`] and is dropped).
    fn delete<'a>(&'a self, tenant: &'a str, id: &'a str) -> StoreFuture<'a, bool>;

    /// Takes the execute lease on `id` for `holder` until `until_ms` (milliseconds since the
    /// Unix epoch), unless another holder has one that has not expired at `now_ms`.
    fn acquire<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        holder: &'a str,
        now_ms: u64,
        until_ms: u64,
    ) -> StoreFuture<'a, Lease>;

    /// Replaces the stored session with `record` while `holder` holds its lease; with
    /// `release` the lease ends in the same write. [`StoreError::LeaseLost`] when `holder`
    /// no longer holds it (nothing is written).
    fn save<'a>(
        &'a self,
        record: &'a SessionRecord,
        holder: &'a str,
        release: bool,
    ) -> StoreFuture<'a, ()>;

    /// Ends `holder`'s lease on `id` without writing the session (an execute that failed
    /// before it changed anything). Does nothing if `holder` does not hold it.
    fn release<'a>(&'a self, tenant: &'a str, id: &'a str, holder: &'a str) -> StoreFuture<'a, ()>;
}
