//! Session expiry: a task that, every `sweep_interval_secs`, deletes each tenant's sessions
//! left unwritten for longer than its `session_ttl_secs` (a session under an execute's
//! unexpired lease is kept). It runs while [`serve`](crate::serve) does and stops with it.

use std::collections::HashSet;
use std::time::Duration;

use tokio_util::sync::{CancellationToken, DropGuard};

use crate::state::{AppState, now_ms};

/// Sessions deleted per statement: a large backlog goes in bounded steps, so other writes
/// interleave with it.
const STEP: u32 = 500;

/// Starts the sweeper; it stops when the guard is dropped.
pub(crate) fn spawn(state: &AppState) -> DropGuard {
    let stop = CancellationToken::new();
    let every = Duration::from_secs(state.inner.config.quotas.sweep_interval_secs.max(1));
    let (state, stopped) = (state.clone(), stop.clone());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stopped.cancelled() => return,
                _ = tick.tick() => {
                    sweep(&state).await;
                }
            }
        }
    });
    stop.drop_guard()
}

/// Deletes every tenant's expired sessions now; returns how many. Failures are logged and
/// retried on the next sweep.
pub(crate) async fn sweep(state: &AppState) -> u64 {
    let mut seen = HashSet::new();
    let mut deleted = 0;
    for tenant in state.inner.tenants.tenants() {
        let ttl = tenant.quotas.session_ttl_secs;
        if ttl == 0 || !seen.insert(tenant.name.as_str()) {
            continue;
        }
        let now = now_ms();
        let before = now.saturating_sub(ttl.saturating_mul(1000));
        loop {
            match state
                .inner
                .store
                .expire(&tenant.name, before, now, STEP)
                .await
            {
                Ok(count) => {
                    deleted += count;
                    if count < u64::from(STEP) {
                        break;
                    }
                }
                Err(error) => {
                    tracing::warn!(tenant = %tenant.name, %error, "expiring sessions failed");
                    break;
                }
            }
        }
    }
    if deleted > 0 {
        tracing::info!(deleted, "expired idle sessions");
    }
    deleted
}
