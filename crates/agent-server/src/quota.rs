//! Per-tenant storage quotas: what the store enforces (sessions, stored bytes) and what the
//! handlers check (the history cap of one session), and the error a refusal answers with.

use axum::http::StatusCode;

use crate::config::Quotas;
use crate::error::ApiError;
use crate::state::{AppState, Tenant};
use crate::store::{Quota, QuotaKind, SessionRecord, StoreError};

/// The limits the store checks on insert (`0` is no limit).
pub(crate) fn store_quota(quotas: &Quotas) -> Quota {
    let some = |value: u64| (value > 0).then_some(value);
    Quota {
        max_sessions: some(quotas.max_sessions),
        max_stored_bytes: some(quotas.max_stored_bytes),
    }
}

/// The answer to a refusal by `quota`: 429 for the session count (room comes back when the
/// tenant deletes or sessions expire), 413 for bytes. Type `quota_exceeded`; the message
/// names the quota's configuration key.
pub(crate) fn exceeded(key: &str, message: String) -> ApiError {
    let status = if key == QuotaKind::Sessions.key() {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::PAYLOAD_TOO_LARGE
    };
    ApiError::new(
        status,
        "quota_exceeded",
        format!("{message} (quota `{key}`)"),
    )
}

/// A store refusal as a response, counted by tenant and quota.
pub(crate) fn refused(state: &AppState, error: StoreError) -> ApiError {
    if let StoreError::Quota { tenant, quota, .. } = &error {
        count(state, tenant, quota.key());
    }
    error.into()
}

/// Counts one refusal.
fn count(state: &AppState, tenant: &str, key: &str) {
    state.inner.metrics.inc(
        "agentry_quota_refusals_total",
        &[("tenant", tenant), ("quota", key)],
    );
}

/// Refuses a session whose stored document would be larger than the tenant's history cap.
///
/// # Errors
///
/// 413 `quota_exceeded` naming `max_session_bytes`.
pub(crate) fn check_session_size(
    state: &AppState,
    tenant: &Tenant,
    record: &SessionRecord,
) -> Result<(), ApiError> {
    let cap = tenant.quotas.max_session_bytes;
    if cap == 0 {
        return Ok(());
    }
    let size = serde_json::to_vec(record).map_or(0, |bytes| bytes.len() as u64);
    if size <= cap {
        return Ok(());
    }
    count(state, &tenant.name, "max_session_bytes");
    Err(exceeded(
        "max_session_bytes",
        format!(
            "session {} holds {size} bytes of history, over this server's cap of {cap} per \
             session; start a new session",
            record.id()
        ),
    ))
}

/// Refuses an execute while the tenant is over its stored-bytes quota (a run that started
/// under it is saved whole, so a tenant can end a little over; then it must delete first).
///
/// # Errors
///
/// 413 `quota_exceeded` naming `max_stored_bytes`; a store failure.
pub(crate) async fn check_stored_bytes(state: &AppState, tenant: &Tenant) -> Result<(), ApiError> {
    let cap = tenant.quotas.max_stored_bytes;
    if cap == 0 {
        return Ok(());
    }
    let used = state.inner.store.usage(&tenant.name).await?;
    if used.bytes < cap {
        return Ok(());
    }
    count(state, &tenant.name, "max_stored_bytes");
    Err(exceeded(
        "max_stored_bytes",
        format!(
            "tenant `{}` stores {} bytes of sessions, at its quota of {cap}; delete sessions \
             to go on",
            tenant.name, used.bytes
        ),
    ))
}
