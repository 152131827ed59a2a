//! Where sessions live between requests: the [`SessionStore`] trait and its implementations,
//! SQLite (one instance; the default) and PostgreSQL (several instances behind a load
//! balancer).
//!
//! A session is stored whole, as one JSON document per row, and replaced in one statement, so
//! no reader ever sees half a session. An execute holds a *lease* on its session (a holder id
//! and an expiry) from its start to its end: a second execute on the same session, on this
//! instance or another, finds the lease taken and is refused (409), and a lease left behind by
//! a crashed instance expires on its own.
//!
//! Sessions are keyed by `(tenant, id)`: every tenant has its own id namespace, so one tenant
//! can neither see nor take another's ids, and a session of another tenant is exactly as
//! absent as one that never existed. Each row also records its stored size, which the
//! per-tenant quotas ([`Quota`]) count, and a session under an unexpired lease is `running`
//! and cannot be deleted.

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

pub use crate::idempotency::{Claim, KeyClaim, StoredOutcome};
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
    /// The JSON Schema every execute's final answer must match (bounded in size and depth);
    /// the validated answer is `output` in `execute_complete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
}

/// The storage a tenant may use; `None` is no limit. Checked in the same atomic step as the
/// insert it guards.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quota {
    /// The most sessions the tenant may hold.
    pub max_sessions: Option<u64>,
    /// The most bytes (stored documents) the tenant may hold.
    pub max_stored_bytes: Option<u64>,
}

impl Quota {
    /// No limits.
    pub const UNLIMITED: Self = Self {
        max_sessions: None,
        max_stored_bytes: None,
    };
}

/// Which quota a refusal names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaKind {
    /// The number of sessions a tenant holds (`max_sessions`).
    Sessions,
    /// The bytes a tenant's sessions take in the store (`max_stored_bytes`).
    StoredBytes,
}

impl QuotaKind {
    /// The configuration key of this quota.
    pub fn key(self) -> &'static str {
        match self {
            Self::Sessions => "max_sessions",
            Self::StoredBytes => "max_stored_bytes",
        }
    }
}

/// What a tenant holds in the store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantUsage {
    /// Sessions.
    pub sessions: u64,
    /// Bytes of stored documents.
    pub bytes: u64,
}

/// A stored session with its lease, as [`SessionStore::read`] returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    /// The session.
    pub record: SessionRecord,
    /// When the current execute lease expires, if one was taken and not released (it may
    /// already have expired: compare with the clock).
    pub lease_until_ms: Option<u64>,
}

/// One line of a tenant's session list: what the row's columns say, without the document.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSummary {
    /// The session's id.
    pub id: String,
    /// Its status when last saved (`idle`, `completed`, …).
    pub status: String,
    /// When it was created, in milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// When it was last written, in milliseconds since the Unix epoch.
    pub updated_at_ms: u64,
    /// The stored document's size in bytes.
    pub size_bytes: u64,
    /// As in [`Stored::lease_until_ms`].
    pub lease_until_ms: Option<u64>,
    /// The model as clients name it (empty for a session written before the stores kept it
    /// and whose document did not say).
    pub model: String,
    /// Input tokens over every run, when known.
    pub input_tokens: Option<u64>,
    /// Output tokens over every run, when known.
    pub output_tokens: Option<u64>,
    /// US dollars over every run, once something is priced.
    pub cost_usd: Option<f64>,
}

/// Which of a tenant's sessions [`SessionStore::list`] returns; every field left `None`
/// matches all. The filters apply before the page is cut, so they compose with `after`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// The status as the list shows it at `now_ms`: `running` is a session under an
    /// unexpired lease, `aborted` also a stored `running` whose lease is gone (a run cut off
    /// by a crash), any other status the stored one of a session not under a lease.
    pub status: Option<String>,
    /// The model exactly as clients name it.
    pub model: Option<String>,
    /// A substring of the id (case-sensitive).
    pub id_contains: Option<String>,
    /// The clock `status` is judged at, in milliseconds since the Unix epoch.
    pub now_ms: u64,
}

/// The outcome of deleting a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// It was deleted.
    Deleted,
    /// An execute holds an unexpired lease on it: nothing was deleted.
    Busy,
    /// No such session for this tenant.
    NotFound,
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
    /// This tenant already has a session with this id.
    #[error("a session with id `{0}` already exists")]
    Exists(String),
    /// The insert would take the tenant over a quota; nothing was written.
    #[error(
        "tenant `{tenant}` is at its {} quota ({used} used of {limit})",
        quota.key()
    )]
    Quota {
        /// The tenant.
        tenant: String,
        /// Which quota.
        quota: QuotaKind,
        /// The limit.
        limit: u64,
        /// What the tenant holds now (sessions, or bytes).
        used: u64,
    },
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
///
/// Ids are per tenant: two tenants may each hold a session `x`, and nothing one tenant does
/// with an id is visible to another.
pub trait SessionStore: Send + Sync + 'static {
    /// Inserts a new session, leased to `lease = (holder, until_ms)` when given, unless the
    /// tenant would go over `quota` (checked in the same atomic step).
    /// [`StoreError::Exists`] when the tenant already has a session with this id;
    /// [`StoreError::Quota`] when over a quota.
    fn insert<'a>(
        &'a self,
        record: &'a SessionRecord,
        lease: Option<(&'a str, u64)>,
        quota: Quota,
    ) -> StoreFuture<'a, ()>;

    /// Inserts a new session without quotas; [`StoreError::Exists`] when the tenant already
    /// has one with this id.
    fn create<'a>(&'a self, record: &'a SessionRecord) -> StoreFuture<'a, ()> {
        self.insert(record, None, Quota::UNLIMITED)
    }

    /// Inserts a new session already leased to `holder` until `until_ms`, in the same write:
    /// an execute that creates its session needs no second round trip (and no second commit)
    /// before it starts. [`StoreError::Exists`] as for [`create`](Self::create).
    fn create_leased<'a>(
        &'a self,
        record: &'a SessionRecord,
        holder: &'a str,
        until_ms: u64,
    ) -> StoreFuture<'a, ()> {
        self.insert(record, Some((holder, until_ms)), Quota::UNLIMITED)
    }

    /// The session `id` of `tenant` with its lease, or `None` (also when another tenant has
    /// a session with this id).
    fn read<'a>(&'a self, tenant: &'a str, id: &'a str) -> StoreFuture<'a, Option<Stored>>;

    /// The session `id` of `tenant`, or `None` (also when another tenant has a session with
    /// this id).
    fn get<'a>(&'a self, tenant: &'a str, id: &'a str) -> StoreFuture<'a, Option<SessionRecord>> {
        Box::pin(async move { Ok(self.read(tenant, id).await?.map(|stored| stored.record)) })
    }

    /// Deletes the session `id` of `tenant` unless an execute holds a lease on it that has
    /// not expired at `now_ms` ([`Removal::Busy`]: nothing is deleted).
    fn delete<'a>(&'a self, tenant: &'a str, id: &'a str, now_ms: u64) -> StoreFuture<'a, Removal>;

    /// Up to `limit` of `tenant`'s sessions matching `filter` with ids after `after` (all
    /// when `None`), in id order.
    fn list<'a>(
        &'a self,
        tenant: &'a str,
        after: Option<&'a str>,
        limit: u32,
        filter: &'a ListFilter,
    ) -> StoreFuture<'a, Vec<SessionSummary>>;

    /// How many sessions and bytes `tenant` holds.
    fn usage<'a>(&'a self, tenant: &'a str) -> StoreFuture<'a, TenantUsage>;

    /// Deletes up to `limit` sessions of `tenant` last written before `idle_before_ms` and
    /// not under a lease unexpired at `now_ms`; returns how many it deleted.
    fn expire<'a>(
        &'a self,
        tenant: &'a str,
        idle_before_ms: u64,
        now_ms: u64,
        limit: u32,
    ) -> StoreFuture<'a, u64>;

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

    /// [`save`](Self::save) for a run's last write, whose caller needs the record's history
    /// no more: the store empties `record.session.messages` once it has encoded them, so a
    /// large history and its encoding are not both held while the database writes. The
    /// default saves and leaves the record as it is.
    fn save_last<'a>(
        &'a self,
        record: &'a mut SessionRecord,
        holder: &'a str,
        release: bool,
    ) -> StoreFuture<'a, ()> {
        self.save(record, holder, release)
    }

    /// Extends `holder`'s lease on `id` to `until_ms` while it still holds it (a running
    /// execute's heartbeat); `false` when it does not (the lease was taken over or released,
    /// or the session is gone): nothing is written then.
    fn renew<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        holder: &'a str,
        until_ms: u64,
    ) -> StoreFuture<'a, bool>;

    /// Ends `holder`'s lease on `id` without writing the session (an execute that failed
    /// before it changed anything). Does nothing if `holder` does not hold it.
    fn release<'a>(&'a self, tenant: &'a str, id: &'a str, holder: &'a str) -> StoreFuture<'a, ()>;

    /// Claims an `Idempotency-Key` for a request (see the server's `idempotency` module):
    /// expired keys are dropped and the tenant's bound kept in the same step. A store without
    /// keys refuses every claim.
    fn claim_key<'a>(&'a self, claim: &'a KeyClaim) -> StoreFuture<'a, Claim> {
        let _ = claim;
        Box::pin(async {
            Err(StoreError::Database(
                "this store keeps no idempotency keys".into(),
            ))
        })
    }

    /// Stores the outcome of `owner`'s claim on `key`, kept until `expires_at_ms`.
    fn finish_key<'a>(
        &'a self,
        tenant: &'a str,
        key: &'a str,
        owner: &'a str,
        outcome: &'a StoredOutcome,
        expires_at_ms: u64,
    ) -> StoreFuture<'a, ()> {
        let _ = (tenant, key, owner, outcome, expires_at_ms);
        Box::pin(async {
            Err(StoreError::Database(
                "this store keeps no idempotency keys".into(),
            ))
        })
    }

    /// Extends `owner`'s running claim on `key` to `running_until_ms` (the heartbeat of a
    /// request still running); `false` when `owner` holds no running claim on it (finished,
    /// released, or lapsed and claimed by another): nothing is written then.
    fn renew_key<'a>(
        &'a self,
        tenant: &'a str,
        key: &'a str,
        owner: &'a str,
        running_until_ms: u64,
    ) -> StoreFuture<'a, bool> {
        let _ = (tenant, key, owner, running_until_ms);
        Box::pin(async { Ok(false) })
    }

    /// Drops `owner`'s claim on `key` (its request did not run, or its outcome is not kept).
    fn release_key<'a>(
        &'a self,
        tenant: &'a str,
        key: &'a str,
        owner: &'a str,
    ) -> StoreFuture<'a, ()> {
        let _ = (tenant, key, owner);
        Box::pin(async { Ok(()) })
    }
}
