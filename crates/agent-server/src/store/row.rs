//! How a [`SessionRecord`] is laid out in a row, shared by both stores: the whole record as
//! JSON plus the columns queries and operators read without parsing it.

use super::{Quota, QuotaKind, SessionRecord, StoreError, TenantUsage};

/// A record as the columns that hold it.
pub(super) struct Row {
    pub(super) data: String,
    pub(super) status: String,
    pub(super) created_at_ms: i64,
    pub(super) updated_at_ms: i64,
    /// The document's size in bytes, which the tenant's byte quota counts.
    pub(super) size_bytes: i64,
    /// What the session list shows without reading the document (see [`Totals`]).
    pub(super) totals: Totals,
}

/// A session's model and spend as list columns, repeated from the document on every write
/// so that `GET /v1/sessions` neither parses documents nor has the client fetch each one.
pub(super) struct Totals {
    /// The model as clients name it (the provider's name for sessions stored without one).
    pub(super) model: String,
    /// Input tokens over every run; `None` while unknown.
    pub(super) input_tokens: Option<i64>,
    /// Output tokens over every run; `None` while unknown.
    pub(super) output_tokens: Option<i64>,
    /// US dollars over every run; `None` until something is priced.
    pub(super) cost_usd: Option<f64>,
}

impl Totals {
    fn of(record: &SessionRecord) -> Self {
        let model = if record.model.is_empty() {
            &record.session.model
        } else {
            &record.model
        };
        let usage = &record.session.usage;
        Self {
            model: model.clone(),
            input_tokens: usage
                .input_tokens
                .map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
            output_tokens: usage
                .output_tokens
                .map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
            cost_usd: record.session.cost_usd.filter(|cost| cost.is_finite()),
        }
    }
}

impl Row {
    pub(super) fn encode(record: &SessionRecord) -> Result<Self, StoreError> {
        // Exactly its size: a large session's document is the biggest thing a save holds.
        let data = crate::exact_json::to_string(record).map_err(|err| {
            StoreError::Database(format!("encoding session `{}`: {err}", record.id()))
        })?;
        let status = match serde_json::to_value(record.session.status) {
            Ok(serde_json::Value::String(name)) => name,
            _ => {
                return Err(StoreError::Database(format!(
                    "encoding the status of session `{}`",
                    record.id()
                )));
            }
        };
        Ok(Self {
            size_bytes: i64::try_from(data.len()).unwrap_or(i64::MAX),
            data,
            status,
            created_at_ms: millis(record.created_at_ms),
            updated_at_ms: millis(record.updated_at_ms),
            totals: Totals::of(record),
        })
    }
}

/// Reads a stored document, checking that it is the session its row says it is.
pub(super) fn decode(tenant: &str, id: &str, data: &str) -> Result<SessionRecord, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        id: id.to_owned(),
        reason,
    };
    let record: SessionRecord =
        serde_json::from_str(data).map_err(|err| corrupt(err.to_string()))?;
    if record.id() != id || record.tenant != tenant {
        return Err(corrupt(format!(
            "the stored document is session `{}` of tenant `{}`",
            record.id(),
            record.tenant
        )));
    }
    Ok(record)
}

/// Milliseconds as the databases' signed 64-bit integer; times past the year 292 million
/// saturate.
pub(super) fn millis(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// A stored count, size or time back as unsigned (a negative value, which the store never
/// writes, reads as 0).
pub(super) fn unsigned(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// A quota limit as the databases' signed integer; no limit is the largest one.
pub(super) fn limit(value: Option<u64>) -> i64 {
    value.map_or(i64::MAX, |value| i64::try_from(value).unwrap_or(i64::MAX))
}

/// Refuses a document of `size` bytes for a tenant holding `used` when it breaks `quota`.
pub(super) fn over_quota(
    tenant: &str,
    used: TenantUsage,
    size: u64,
    quota: Quota,
) -> Result<(), StoreError> {
    let refuse = |quota, limit, used| StoreError::Quota {
        tenant: tenant.to_owned(),
        quota,
        limit,
        used,
    };
    if let Some(max) = quota.max_sessions
        && used.sessions >= max
    {
        return Err(refuse(QuotaKind::Sessions, max, used.sessions));
    }
    if let Some(max) = quota.max_stored_bytes
        && used.bytes.saturating_add(size) > max
    {
        return Err(refuse(QuotaKind::StoredBytes, max, used.bytes));
    }
    Ok(())
}
