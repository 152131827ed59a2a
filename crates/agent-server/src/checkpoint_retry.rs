//! One more try for a per-turn checkpoint the store failed to write (PostgreSQL restarting, a
//! connection dropped under the write): wait until the store answers again, then write once
//! more, before the run fails.
//!
//! "Answers again" is the run's own lease renewed through the store: the cheapest statement
//! that needs a working connection (the PostgreSQL store reconnects on it), and one that also
//! says whether the lease is still this run's. A lease lost meanwhile is not retried: the
//! write would be refused anyway. The write itself is lease-checked, so a retry can never
//! overwrite another execute's session.

use std::time::{Duration, Instant};

use crate::state::AppState;
use crate::store::StoreError;

/// How long a checkpoint waits for the store to come back before the run fails: a PostgreSQL
/// restart takes well under a second (0.2 s measured in `tests/pg_restart.rs`), a failover
/// a few seconds.
pub(crate) const RECONNECT_WAIT: Duration = Duration::from_secs(10);

/// How often the store is asked while it is away.
const POLL: Duration = Duration::from_millis(200);

/// Whether a failed write may succeed on a new connection: a database error (the connection,
/// the server), not a refusal (the lease lost, a quota).
pub(crate) fn worth_retrying(error: &StoreError) -> bool {
    matches!(error, StoreError::Database(_))
}

/// Waits, at most [`RECONNECT_WAIT`], until the store renews `holder`'s lease on session `id`.
/// `true` when it did: write again; `false` when the lease is lost or the store stayed away.
pub(crate) async fn reconnected(state: &AppState, tenant: &str, id: &str, holder: &str) -> bool {
    let deadline = Instant::now() + RECONNECT_WAIT;
    loop {
        let until = crate::execute::lease_until(state);
        match state.inner.store.renew(tenant, id, holder, until).await {
            Ok(renewed) => return renewed,
            Err(error) => {
                if Instant::now() >= deadline {
                    tracing::warn!(session = %id, %error, "the store did not come back in time");
                    return false;
                }
                tracing::debug!(session = %id, %error, "waiting for the store");
                tokio::time::sleep(POLL).await;
            }
        }
    }
}
