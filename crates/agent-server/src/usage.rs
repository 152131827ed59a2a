//! Accounting rows per tenant and `GET /v1/usage`: the caller's own usage and cost.
//!
//! Every execute and chat completion hands the loop the server's [`AccountingQueue`]: one
//! `model_calls` row per model call and one `tool_calls` row per tool call, tagged with the
//! tenant, as each call ends, written in batches into the store's database (by a thread of
//! its own with its own connection to the SQLite file, or by a task on the PostgreSQL
//! database), in the tables of `agent-accounting`. A full queue drops rows with a counted
//! warning: accounting never slows or fails a run. On unless `[server] accounting = false`.
//!
//! `GET /v1/usage?from=&to=&group_by=model|session|day&limit=` sums the caller's rows between
//! `from` (inclusive) and `to` (exclusive), each Unix seconds or a UTC date `YYYY-MM-DD`
//! (default: the last 30 days), grouped, the costliest groups first. The tenant comes from the
//! API key only: no parameter names another tenant. A range over 366 days, more than 1,000
//! groups and unknown parameters are 400s.

use std::time::Duration;

use agent_accounting::{GroupBy, UsageGroup, UsageQuery};
use agent_loop::{AccountingConfig, AccountingQueue};
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::config::StoreConfig;
use crate::error::{ApiError, Error};
use crate::state::{AppState, now_ms};

/// The most groups one answer holds unless `limit` says fewer.
const DEFAULT_GROUPS: u32 = 100;
/// The default range: the last 30 days.
const DEFAULT_RANGE_SECS: i64 = 30 * 24 * 3600;

/// The accounting queue and the tables it is written to.
pub(crate) struct Accounting {
    pub(crate) queue: AccountingQueue,
    store: Store,
}

enum Store {
    #[cfg(feature = "sqlite")]
    Sqlite(agent_accounting::SqliteSink),
    #[cfg(feature = "postgres")]
    Postgres(agent_accounting::PostgresSink),
}

impl Accounting {
    /// Opens the accounting tables in the store's database and starts the writer task.
    // A build with no store feature has no table to open: every config is refused.
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres")),
        allow(unused_variables, unreachable_code)
    )]
    pub(crate) async fn open(config: &StoreConfig) -> Result<Self, Error> {
        let fail = |error: agent_accounting::Error| Error::Config(format!("accounting: {error}"));
        let (queue, receiver) = AccountingQueue::new(AccountingConfig::default());
        let store = match config {
            #[cfg(feature = "sqlite")]
            StoreConfig::Sqlite { path } => {
                if let Some(parent) = path.parent()
                    && !parent.as_os_str().is_empty()
                {
                    std::fs::create_dir_all(parent)?;
                }
                let path = path.clone();
                // The writer is a thread of its own, with its own connection (see
                // `SqliteSink::spawn_writer`); it ends with the server's last queue clone.
                let sink = tokio::task::spawn_blocking(move || {
                    let sink = agent_accounting::SqliteSink::open(path)?;
                    sink.spawn_writer(receiver)?;
                    Ok(sink)
                })
                .await
                .map_err(|error| Error::Config(format!("accounting: {error}")))?
                .map_err(fail)?;
                Store::Sqlite(sink)
            }
            #[cfg(feature = "postgres")]
            StoreConfig::Postgres { url, url_env } => {
                let url = crate::config::postgres_url(url.as_ref(), url_env.as_ref())?;
                let sink = agent_accounting::PostgresSink::connect(&url)
                    .await
                    .map_err(fail)?;
                // The writer has a connection of its own: its BEGIN…COMMIT must not wrap
                // the usage queries read on the other.
                let writer = agent_accounting::PostgresSink::connect(&url)
                    .await
                    .map_err(fail)?;
                tokio::spawn(receiver.run(writer));
                Store::Postgres(sink)
            }
            #[allow(unreachable_patterns)]
            other => {
                return Err(Error::Config(format!(
                    "this build has no `{}` store for accounting; enable its feature or set \
                     `accounting = false`",
                    other.kind()
                )));
            }
        };
        Ok(Self { queue, store })
    }

    async fn usage(&self, query: UsageQuery) -> Result<Vec<UsageGroup>, agent_accounting::Error> {
        // The caller's finished runs are in the answer: rows still queued are written first
        // (bounded, so a stuck database cannot hold the request).
        let _ = tokio::time::timeout(Duration::from_secs(5), self.queue.flush()).await;
        #[cfg(not(any(feature = "sqlite", feature = "postgres")))]
        {
            let _ = query;
            match self.store {}
        }
        #[cfg(any(feature = "sqlite", feature = "postgres"))]
        match &self.store {
            #[cfg(feature = "sqlite")]
            Store::Sqlite(sink) => {
                let sink = sink.clone();
                tokio::task::spawn_blocking(move || sink.usage(&query))
                    .await
                    .map_err(|error| agent_accounting::Error::Store(error.to_string()))?
            }
            #[cfg(feature = "postgres")]
            Store::Postgres(sink) => sink.usage(&query).await,
        }
    }

    /// Every `model_calls` and `tool_calls` row of `tenant`'s session `session`, oldest
    /// first (the console's timeline, `console/timeline.rs`).
    pub(crate) async fn session_calls(
        &self,
        tenant: &str,
        session: &str,
    ) -> Result<
        (
            Vec<agent_accounting::StoredModelCall>,
            Vec<agent_accounting::StoredToolCall>,
        ),
        agent_accounting::Error,
    > {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.queue.flush()).await;
        #[cfg(not(any(feature = "sqlite", feature = "postgres")))]
        {
            let _ = (tenant, session);
            match self.store {}
        }
        #[cfg(any(feature = "sqlite", feature = "postgres"))]
        match &self.store {
            #[cfg(feature = "sqlite")]
            Store::Sqlite(sink) => {
                let sink = sink.clone();
                let (tenant, session) = (tenant.to_owned(), session.to_owned());
                tokio::task::spawn_blocking(move || sink.session_calls(&tenant, &session))
                    .await
                    .map_err(|error| agent_accounting::Error::Store(error.to_string()))?
            }
            #[cfg(feature = "postgres")]
            Store::Postgres(sink) => sink.session_calls(tenant, session).await,
        }
    }

    /// Writes what is queued (at shutdown).
    pub(crate) async fn flush(&self) {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.queue.flush()).await;
    }
}

/// `GET /v1/usage`.
pub(crate) async fn usage(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Response {
    let (state, headers) = (&state, &headers);
    crate::sessions::respond(state, headers, |tenant| async move {
        let Some(accounting) = &state.inner.accounting else {
            return Err(ApiError::not_found(
                "usage accounting is off on this server (set `accounting = true`)",
            ));
        };
        let now = i64::try_from(now_ms() / 1000).unwrap_or(i64::MAX);
        let asked = parse(uri.query().unwrap_or(""), now)?;
        let mut query = UsageQuery::new(
            tenant.name.clone(),
            asked.from.saturating_mul(1_000_000),
            asked.to.saturating_mul(1_000_000),
            asked.group_by,
        );
        query.max_groups = asked.limit;
        query
            .check()
            .map_err(|error| ApiError::bad_request(error.to_string()))?;
        let groups = accounting.usage(query).await.map_err(|error| {
            tracing::error!(tenant = tenant.name, %error, "usage query failed");
            ApiError::internal("the usage could not be read")
        })?;
        let has_more = groups.len() == asked.limit as usize;
        Ok(Json(json!({
            "object": "usage",
            "from": asked.from,
            "to": asked.to,
            "group_by": asked.group_by,
            "data": groups,
            "has_more": has_more,
        }))
        .into_response())
    })
    .await
}

struct Asked {
    from: i64,
    to: i64,
    group_by: GroupBy,
    limit: u32,
}

fn parse(query: &str, now: i64) -> Result<Asked, ApiError> {
    let mut from = None;
    let mut to = None;
    let mut group_by = GroupBy::Model;
    let mut limit = DEFAULT_GROUPS;
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "from" => from = Some(instant(key, value)?),
            "to" => to = Some(instant(key, value)?),
            "group_by" => {
                group_by = value.parse().map_err(|error: agent_accounting::Error| {
                    ApiError::bad_request(error.to_string())
                })?;
            }
            "limit" => {
                limit = value
                    .parse()
                    .ok()
                    .filter(|limit| (1..=UsageQuery::MAX_GROUPS).contains(limit))
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "`limit` must be a number from 1 to {}",
                            UsageQuery::MAX_GROUPS
                        ))
                    })?;
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter `{other}`; use `from`, `to`, `group_by` and `limit`"
                )));
            }
        }
    }
    let to = to.unwrap_or(now.saturating_add(1));
    let from = from.unwrap_or(to.saturating_sub(DEFAULT_RANGE_SECS));
    Ok(Asked {
        from,
        to,
        group_by,
        limit,
    })
}

/// Unix seconds, or a UTC date `YYYY-MM-DD` (its midnight).
fn instant(key: &str, value: &str) -> Result<i64, ApiError> {
    let bad = || {
        ApiError::bad_request(format!(
            "`{key}` must be Unix seconds or a date `YYYY-MM-DD`, not `{value}`"
        ))
    };
    if let Ok(seconds) = value.parse::<i64>() {
        // Beyond year 9999 is a mistake, and keeps the microseconds in range.
        return (0..=253_402_300_799)
            .contains(&seconds)
            .then_some(seconds)
            .ok_or_else(bad);
    }
    let mut parts = value.split('-');
    let (Some(y), Some(m), Some(d), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    if y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return Err(bad());
    }
    let (y, m, d): (i64, i64, i64) = (
        y.parse().map_err(|_| bad())?,
        m.parse().map_err(|_| bad())?,
        d.parse().map_err(|_| bad())?,
    );
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return Err(bad());
    }
    Ok(days_from_civil(y, m, d) * 86_400)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_seconds_parse() {
        assert_eq!(instant("from", "1970-01-01").unwrap(), 0);
        assert_eq!(instant("from", "2026-11-24").unwrap(), 1_795_478_400);
        assert_eq!(instant("from", "1795478400").unwrap(), 1_795_478_400);
        assert!(instant("from", "2026-13-01").is_err());
        assert!(instant("from", "-5").is_err());
        assert!(instant("from", "yesterday").is_err());
    }

    #[test]
    fn unknown_parameters_and_bad_groups_are_refused() {
        assert!(parse("tenant=other", 0).is_err());
        assert!(parse("group_by=tenant", 0).is_err());
        assert!(parse("limit=0", 0).is_err());
        assert!(parse("limit=1001", 0).is_err());
        let asked = parse("group_by=day&limit=5", 1000).unwrap();
        assert_eq!(
            (asked.from, asked.to, asked.limit),
            (1001 - DEFAULT_RANGE_SECS, 1001, 5)
        );
    }
}
