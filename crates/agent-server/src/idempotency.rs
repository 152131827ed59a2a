//! `Idempotency-Key` on `POST /v1/sessions/{id}/execute` and `POST /v1/chat/completions`:
//! a request retried with the same key runs once.
//!
//! A middleware on those two routes claims the key in the session store before the handler
//! runs: keys are per tenant (another tenant's key is another namespace) and bound to a
//! fingerprint of the request (method, path and body, SHA-256). Then:
//!
//! - first use: the handler runs; its response goes to the client and, as it goes, into a
//!   bounded buffer; when it ends, status, headers and body are stored under the key. The
//!   response is read to its end whether or not the client stays, so a run whose client
//!   dropped the connection still finishes and its outcome is there for the retry;
//! - the same key and body while the first is running: 409;
//! - the same key with another body (or path): 422, as Stripe does;
//! - the same key and body after it ended: the stored outcome, with
//!   `Idempotent-Replayed: true`. A stream is replayed as the stream it was (the same SSE
//!   frames); one longer than `max_response_bytes` keeps its last frames only (for execute,
//!   `session_end` and `execute_complete` among them) and is marked
//!   `Idempotent-Replayed: tail`.
//!
//! Outcomes that say nothing ran (408, 409, 429, any 5xx, a response that broke off, a JSON
//! body over the bound) are not stored: the key is released and a retry runs. Keys expire
//! after `ttl_secs`; a key whose request never finished (its instance died) after
//! `execute_lease_secs`: a running request renews its claim every third of that, so a run
//! longer than the lease is still one run and its retries get 409, then the replay. Each tenant holds at most `max_keys_per_tenant`: beyond that the
//! oldest finished keys are dropped, and when every key is still running the request gets
//! 429.

use std::convert::Infallible;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::state::{AppState, now_ms};

/// The request header.
pub(crate) const HEADER: &str = "idempotency-key";
/// The header on a replayed response: `true`, or `tail` when only a stream's last frames
/// were kept.
pub(crate) const REPLAYED: &str = "idempotent-replayed";
/// The longest key accepted, in bytes.
pub(crate) const MAX_KEY_BYTES: usize = 255;

/// `[server.idempotency]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdempotencyConfig {
    /// How long a finished key keeps its outcome [default: 86400 s].
    #[serde(default = "default_ttl")]
    pub ttl_secs: u64,
    /// The most keys one tenant holds [default: 1000].
    #[serde(default = "default_max_keys")]
    pub max_keys_per_tenant: u64,
    /// The most bytes of one response kept [default: 1 MiB]; a longer stream keeps its last
    /// frames, a longer JSON body is not stored.
    #[serde(default = "default_max_response")]
    pub max_response_bytes: usize,
}

fn default_ttl() -> u64 {
    86_400
}
fn default_max_keys() -> u64 {
    1_000
}
fn default_max_response() -> usize {
    1024 * 1024
}

impl Default for IdempotencyConfig {
    fn default() -> Self {
        Self {
            ttl_secs: default_ttl(),
            max_keys_per_tenant: default_max_keys(),
            max_response_bytes: default_max_response(),
        }
    }
}

/// A claim on a key, as the store receives it.
#[derive(Debug, Clone)]
pub struct KeyClaim {
    /// The tenant: keys are per tenant.
    pub tenant: String,
    /// The client's key.
    pub key: String,
    /// SHA-256 (hex) of the request's method, path and body.
    pub fingerprint: String,
    /// Who claims it (unique per request).
    pub owner: String,
    /// Now, in milliseconds since the Unix epoch.
    pub now_ms: u64,
    /// When the claim lapses if its request never finishes.
    pub running_until_ms: u64,
    /// The most keys the tenant may hold.
    pub max_keys: u64,
}

/// What claiming a key found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key is the caller's: run the request.
    Claimed,
    /// The same key and request is running.
    Running,
    /// The key was used for another request.
    Mismatch,
    /// The same key and request finished: its outcome.
    Done(StoredOutcome),
    /// The tenant holds its most keys and none of them has finished.
    Full,
}

/// A stored response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOutcome {
    /// The HTTP status.
    pub status: u16,
    /// The response's headers (without the per-connection ones).
    pub headers: Vec<(String, String)>,
    /// The body, or a stream's last frames when `tail`.
    pub body: Vec<u8>,
    /// Only the last frames of a longer stream were kept.
    pub tail: bool,
}

/// The middleware on the routes that take a key.
pub(crate) async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(value) = request.headers().get(HEADER) else {
        return next.run(request).await;
    };
    let openai = request.uri().path().starts_with("/v1/chat/")
        || request.uri().path().starts_with("/v1/responses");
    let refuse = |error: ApiError| {
        if openai {
            crate::openai::error::OpenAiError::from(error).into_response()
        } else {
            error.into_response()
        }
    };
    let key = match parse_key(value) {
        Ok(key) => key,
        Err(error) => return refuse(error),
    };
    // Without a valid API key the handler answers 401; nothing is claimed.
    let Some(tenant) = crate::http::presented_key(request.headers())
        .and_then(|presented| state.inner.tenants.find(presented))
        .cloned()
    else {
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    let limit = state.inner.config.max_body_bytes;
    let declared = parts
        .headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<usize>().ok());
    if declared.is_some_and(|length| length > limit) {
        return refuse(ApiError::too_large(limit));
    }
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return refuse(ApiError::too_large(limit));
    };
    let config = &state.inner.config;
    let now = now_ms();
    let claim = KeyClaim {
        tenant: tenant.name.clone(),
        key,
        fingerprint: fingerprint(parts.method.as_str(), parts.uri.path(), &bytes),
        owner: crate::execute::holder(&state),
        now_ms: now,
        running_until_ms: now.saturating_add(config.execute_lease_secs.saturating_mul(1000)),
        max_keys: config.idempotency.max_keys_per_tenant,
    };
    let found = match state.inner.store.claim_key(&claim).await {
        Ok(found) => found,
        Err(error) => return refuse(ApiError::from(error)),
    };
    if found != Claim::Claimed {
        // Answered here, so the tenant's request rate counts it here.
        if let Err(seconds) = tenant.rate.take() {
            return refuse(ApiError::rate_limited(
                format!("tenant `{}` is over its request rate", tenant.name),
                seconds,
            ));
        }
    }
    match found {
        Claim::Claimed => {}
        Claim::Running => {
            return refuse(ApiError::conflict(format!(
                "a request with Idempotency-Key `{}` is still running; retry after it ends",
                claim.key
            )));
        }
        Claim::Mismatch => {
            return refuse(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_error",
                format!(
                    "Idempotency-Key `{}` was used for a different request (another body or \
                     path); use a new key for a new request",
                    claim.key
                ),
            ));
        }
        Claim::Full => {
            return refuse(ApiError::rate_limited(
                format!(
                    "tenant `{}` holds {} idempotency keys, all still running",
                    tenant.name, claim.max_keys
                ),
                1,
            ));
        }
        Claim::Done(outcome) => return replay(outcome),
    }
    // Renewed until the outcome is stored or the key released, so a request running longer
    // than the claim's lifetime is not claimed (and run) again by a retry.
    let beat = Heartbeat::start(&state, &claim);
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    record(state, claim, beat, response)
}

/// Keeps a claim running while its request goes on: renewed every third of
/// `execute_lease_secs` (the claim's lifetime), as a run's session lease is. Stops when
/// dropped (the outcome stored or the key released; or the request dropped, when the claim
/// lapses on its own).
struct Heartbeat(tokio::task::JoinHandle<()>);

impl Heartbeat {
    fn start(state: &AppState, claim: &KeyClaim) -> Self {
        let lease_ms = state.inner.config.execute_lease_secs.saturating_mul(1000);
        let every = std::time::Duration::from_millis((lease_ms / 3).max(100));
        let (state, tenant, key, owner) = (
            state.clone(),
            claim.tenant.clone(),
            claim.key.clone(),
            claim.owner.clone(),
        );
        Self(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let until = now_ms().saturating_add(lease_ms);
                match state
                    .inner
                    .store
                    .renew_key(&tenant, &key, &owner, until)
                    .await
                {
                    Ok(true) => {}
                    Ok(false) => {
                        // Finished or released meanwhile, or lapsed while this instance
                        // stalled longer than the lease: nothing left to keep.
                        tracing::debug!(%tenant, "an idempotency claim is no longer running");
                        return;
                    }
                    // The database may come back before the claim runs out: try again.
                    Err(error) => {
                        tracing::warn!(%error, %tenant, "could not renew an idempotency claim");
                    }
                }
            }
        }))
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A key: 1 to [`MAX_KEY_BYTES`] visible ASCII characters.
fn parse_key(value: &HeaderValue) -> Result<String, ApiError> {
    let bytes = value.as_bytes();
    if bytes.is_empty()
        || bytes.len() > MAX_KEY_BYTES
        || !bytes.iter().all(|byte| byte.is_ascii_graphic())
    {
        return Err(ApiError::bad_request(format!(
            "the Idempotency-Key header must be 1 to {MAX_KEY_BYTES} visible ASCII characters \
             (a UUID, say)"
        )));
    }
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

/// SHA-256 (hex) of what makes two requests the same request.
fn fingerprint(method: &str, path: &str, body: &[u8]) -> String {
    let mut hash = Sha256::new();
    hash.update(method.as_bytes());
    hash.update([0]);
    hash.update(path.as_bytes());
    hash.update([0]);
    hash.update(body);
    hash.finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The stored outcome as a response.
fn replay(outcome: StoredOutcome) -> Response {
    let mut response = Response::new(Body::from(outcome.body));
    *response.status_mut() = StatusCode::from_u16(outcome.status).unwrap_or(StatusCode::OK);
    let headers = response.headers_mut();
    for (name, value) in &outcome.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.append(name, value);
        }
    }
    headers.insert(
        REPLAYED,
        HeaderValue::from_static(if outcome.tail { "tail" } else { "true" }),
    );
    response
}

/// Whether a response with `status` is stored: not when it says nothing ran, or may run if
/// retried (busy, rate limited, server failures).
fn stored(status: StatusCode) -> bool {
    status.is_success()
        || (status.is_client_error()
            && !matches!(
                status,
                StatusCode::REQUEST_TIMEOUT | StatusCode::CONFLICT | StatusCode::TOO_MANY_REQUESTS
            ))
}

/// The headers kept with an outcome: not the ones that describe one connection's transfer.
fn kept_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| {
            !matches!(
                name.as_str(),
                "content-length" | "transfer-encoding" | "connection" | "date"
            )
        })
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect()
}

/// Sends `response` on while keeping a bounded copy, read to its end even when the client
/// leaves; then stores it under the key (or releases the key).
fn record(state: AppState, claim: KeyClaim, beat: Heartbeat, response: Response) -> Response {
    let status = response.status();
    if !stored(status) {
        drop(beat);
        tokio::spawn(async move { release(&state, &claim).await });
        return response;
    }
    let headers = kept_headers(response.headers());
    let sse = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"));
    let (parts, body) = response.into_parts();
    let (sender, receiver) = mpsc::channel::<Bytes>(16);
    let cap = state.inner.config.idempotency.max_response_bytes;
    tokio::spawn(async move {
        let mut kept = Kept::new(cap, sse);
        let mut client = Some(sender);
        let mut stream = body.into_data_stream();
        let mut broken = false;
        while let Some(chunk) = stream.next().await {
            let Ok(chunk) = chunk else {
                broken = true;
                break;
            };
            kept.push(&chunk);
            if let Some(sender) = &client
                && sender.send(chunk).await.is_err()
            {
                // The client left; the rest is still read, so the run ends on its own.
                client = None;
            }
        }
        // The client's stream stays open until the key is stored or released: a client that
        // saw the whole response and retries at once gets the replay, not a 409.
        drop(beat);
        if broken || kept.over {
            release(&state, &claim).await;
            drop(client);
            return;
        }
        let outcome = StoredOutcome {
            status: status.as_u16(),
            headers,
            body: kept.bytes,
            tail: kept.tail,
        };
        let expires =
            now_ms().saturating_add(state.inner.config.idempotency.ttl_secs.saturating_mul(1000));
        if let Err(error) = state
            .inner
            .store
            .finish_key(&claim.tenant, &claim.key, &claim.owner, &outcome, expires)
            .await
        {
            tracing::error!(%error, tenant = %claim.tenant, "an idempotent outcome could not be stored");
            release(&state, &claim).await;
        }
        drop(client);
    });
    let body = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let chunk = receiver.recv().await?;
        Some((Ok::<_, Infallible>(chunk), receiver))
    });
    Response::from_parts(parts, Body::from_stream(body))
}

async fn release(state: &AppState, claim: &KeyClaim) {
    if let Err(error) = state
        .inner
        .store
        .release_key(&claim.tenant, &claim.key, &claim.owner)
        .await
    {
        tracing::warn!(%error, tenant = %claim.tenant, "an idempotency key could not be released; it lapses on its own");
    }
}

/// A response's bytes, at most about `cap`: a stream keeps its last whole frames, a body
/// over the cap is given up (`over`).
struct Kept {
    bytes: Vec<u8>,
    cap: usize,
    sse: bool,
    tail: bool,
    over: bool,
}

impl Kept {
    fn new(cap: usize, sse: bool) -> Self {
        Self {
            bytes: Vec::new(),
            cap,
            sse,
            tail: false,
            over: false,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        if self.over {
            return;
        }
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() <= self.cap {
            return;
        }
        if !self.sse {
            self.over = true;
            self.bytes = Vec::new();
            return;
        }
        // Down to half the cap at a frame boundary, so the copy is amortized over the
        // bytes that come after.
        let from = self.bytes.len() - self.cap / 2;
        let cut = self.bytes[from..]
            .windows(2)
            .position(|pair| pair == b"\n\n")
            .map_or(self.bytes.len(), |at| from + at + 2);
        self.bytes.drain(..cut);
        self.tail = true;
    }
}

/// The table, for SQLite (created with the session schema; an additive table, so the
/// session schema version stays and an older agentry still opens the file).
#[cfg(feature = "sqlite")]
pub(crate) const SQLITE_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS idempotency_keys (
    tenant        TEXT NOT NULL,
    key           TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    owner         TEXT NOT NULL,
    state         TEXT NOT NULL,
    status        INTEGER,
    headers       TEXT,
    body          BLOB,
    tail          INTEGER NOT NULL DEFAULT 0,
    created_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant, key)
) STRICT;
CREATE INDEX IF NOT EXISTS idempotency_keys_by_age ON idempotency_keys (tenant, created_at_ms);
";

/// The table, for PostgreSQL (created with the session schema, idempotently).
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS agentry_idempotency_keys (
    tenant        TEXT NOT NULL,
    key           TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    owner         TEXT NOT NULL,
    state         TEXT NOT NULL,
    status        INTEGER,
    headers       TEXT,
    body          BYTEA,
    tail          BOOLEAN NOT NULL DEFAULT FALSE,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX IF NOT EXISTS agentry_idempotency_keys_by_age
    ON agentry_idempotency_keys (tenant, created_at_ms);
";

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn headers_json(headers: &[(String, String)]) -> String {
    serde_json::to_string(headers).unwrap_or_else(|_| "[]".to_owned())
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn headers_from(text: Option<&str>) -> Vec<(String, String)> {
    text.and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn i64_of(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The SQLite side: each function runs inside the store's transaction.
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite {
    use rusqlite::{Connection, OptionalExtension, params};

    use super::{Claim, KeyClaim, StoredOutcome, headers_from, headers_json, i64_of};
    use crate::store::StoreError;

    fn db(error: rusqlite::Error) -> StoreError {
        StoreError::Database(format!("idempotency keys: {error}"))
    }

    /// Claims `claim.key` (one transaction: expired keys dropped, the bound kept).
    pub(crate) fn claim(conn: &Connection, claim: &KeyClaim) -> Result<Claim, StoreError> {
        let now = i64_of(claim.now_ms);
        conn.execute(
            "DELETE FROM idempotency_keys WHERE tenant = ?1 AND expires_at_ms <= ?2",
            params![claim.tenant, now],
        )
        .map_err(db)?;
        type Found = (
            String,
            String,
            Option<i64>,
            Option<String>,
            Option<Vec<u8>>,
            i64,
        );
        let found: Option<Found> = conn
            .query_row(
                "SELECT fingerprint, state, status, headers, body, tail FROM idempotency_keys
                 WHERE tenant = ?1 AND key = ?2",
                params![claim.tenant, claim.key],
                |row| {
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        row.get(3)?,
                        row.get(4)?,
                        row.get(5)?,
                    ))
                },
            )
            .optional()
            .map_err(db)?;
        if let Some((fingerprint, state, status, headers, body, tail)) = found {
            return Ok(if fingerprint != claim.fingerprint {
                Claim::Mismatch
            } else if state == "done" {
                Claim::Done(StoredOutcome {
                    status: status.and_then(|s| u16::try_from(s).ok()).unwrap_or(200),
                    headers: headers_from(headers.as_deref()),
                    body: body.unwrap_or_default(),
                    tail: tail != 0,
                })
            } else {
                Claim::Running
            });
        }
        let held: i64 = conn
            .query_row(
                "SELECT count(*) FROM idempotency_keys WHERE tenant = ?1",
                params![claim.tenant],
                |row| row.get(0),
            )
            .map_err(db)?;
        let max = i64_of(claim.max_keys);
        if held >= max {
            conn.execute(
                "DELETE FROM idempotency_keys WHERE rowid IN (
                     SELECT rowid FROM idempotency_keys WHERE tenant = ?1 AND state = 'done'
                     ORDER BY created_at_ms LIMIT ?2)",
                params![claim.tenant, held - max + 1],
            )
            .map_err(db)?;
            let left: i64 = conn
                .query_row(
                    "SELECT count(*) FROM idempotency_keys WHERE tenant = ?1",
                    params![claim.tenant],
                    |row| row.get(0),
                )
                .map_err(db)?;
            if left >= max {
                return Ok(Claim::Full);
            }
        }
        conn.execute(
            "INSERT INTO idempotency_keys
                 (tenant, key, fingerprint, owner, state, created_at_ms, expires_at_ms)
             VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6)",
            params![
                claim.tenant,
                claim.key,
                claim.fingerprint,
                claim.owner,
                now,
                i64_of(claim.running_until_ms)
            ],
        )
        .map_err(db)?;
        Ok(Claim::Claimed)
    }

    /// Stores the outcome of `owner`'s claim.
    pub(crate) fn finish(
        conn: &Connection,
        tenant: &str,
        key: &str,
        owner: &str,
        outcome: &StoredOutcome,
        expires_at_ms: u64,
    ) -> Result<(), StoreError> {
        conn.execute(
            "UPDATE idempotency_keys SET state = 'done', status = ?4, headers = ?5, body = ?6,
                 tail = ?7, expires_at_ms = ?8
             WHERE tenant = ?1 AND key = ?2 AND owner = ?3",
            params![
                tenant,
                key,
                owner,
                i64::from(outcome.status),
                headers_json(&outcome.headers),
                outcome.body,
                i64::from(outcome.tail),
                i64_of(expires_at_ms)
            ],
        )
        .map_err(db)?;
        Ok(())
    }

    /// Extends `owner`'s running claim; whether it held one.
    pub(crate) fn renew(
        conn: &Connection,
        tenant: &str,
        key: &str,
        owner: &str,
        running_until_ms: u64,
    ) -> Result<bool, StoreError> {
        let renewed = conn
            .execute(
                "UPDATE idempotency_keys SET expires_at_ms = ?4
                 WHERE tenant = ?1 AND key = ?2 AND owner = ?3 AND state = 'running'",
                params![tenant, key, owner, i64_of(running_until_ms)],
            )
            .map_err(db)?;
        Ok(renewed > 0)
    }

    /// Drops `owner`'s claim.
    pub(crate) fn release(
        conn: &Connection,
        tenant: &str,
        key: &str,
        owner: &str,
    ) -> Result<(), StoreError> {
        conn.execute(
            "DELETE FROM idempotency_keys WHERE tenant = ?1 AND key = ?2 AND owner = ?3",
            params![tenant, key, owner],
        )
        .map_err(db)?;
        Ok(())
    }
}

/// The PostgreSQL side: single statements; the insert's `ON CONFLICT` decides between two
/// instances claiming the same key at once.
#[cfg(feature = "postgres")]
pub(crate) mod postgres {
    use tokio_postgres::Client;

    use super::{Claim, KeyClaim, StoredOutcome, headers_from, headers_json, i64_of};
    use crate::store::StoreError;

    fn db(error: tokio_postgres::Error) -> StoreError {
        StoreError::Database(format!("idempotency keys: {error}"))
    }

    /// Claims `claim.key`.
    pub(crate) async fn claim(client: &Client, claim: &KeyClaim) -> Result<Claim, StoreError> {
        let now = i64_of(claim.now_ms);
        client
            .execute(
                "DELETE FROM agentry_idempotency_keys WHERE tenant = $1 AND expires_at_ms <= $2",
                &[&claim.tenant, &now],
            )
            .await
            .map_err(db)?;
        // Twice at most: a key that expired between the insert and the read is claimed anew.
        for _ in 0..2 {
            let rows = client
                .query(
                    "SELECT fingerprint, state, status, headers, body, tail
                     FROM agentry_idempotency_keys WHERE tenant = $1 AND key = $2",
                    &[&claim.tenant, &claim.key],
                )
                .await
                .map_err(db)?;
            if let Some(row) = rows.first() {
                let fingerprint: String = row.try_get(0).map_err(db)?;
                let state: String = row.try_get(1).map_err(db)?;
                return Ok(if fingerprint != claim.fingerprint {
                    Claim::Mismatch
                } else if state == "done" {
                    let status: Option<i32> = row.try_get(2).map_err(db)?;
                    let headers: Option<String> = row.try_get(3).map_err(db)?;
                    let body: Option<Vec<u8>> = row.try_get(4).map_err(db)?;
                    Claim::Done(StoredOutcome {
                        status: status.and_then(|s| u16::try_from(s).ok()).unwrap_or(200),
                        headers: headers_from(headers.as_deref()),
                        body: body.unwrap_or_default(),
                        tail: row.try_get(5).map_err(db)?,
                    })
                } else {
                    Claim::Running
                });
            }
            let max = i64_of(claim.max_keys);
            let held: i64 = client
                .query_one(
                    "SELECT count(*) FROM agentry_idempotency_keys WHERE tenant = $1",
                    &[&claim.tenant],
                )
                .await
                .map_err(db)?
                .try_get(0)
                .map_err(db)?;
            if held >= max {
                let excess = held - max + 1;
                let dropped = client
                    .execute(
                        "DELETE FROM agentry_idempotency_keys WHERE tenant = $1 AND key IN (
                             SELECT key FROM agentry_idempotency_keys
                             WHERE tenant = $1 AND state = 'done'
                             ORDER BY created_at_ms LIMIT $2)",
                        &[&claim.tenant, &excess],
                    )
                    .await
                    .map_err(db)?;
                if i64::try_from(dropped).unwrap_or(0) < excess {
                    return Ok(Claim::Full);
                }
            }
            let inserted = client
                .execute(
                    "INSERT INTO agentry_idempotency_keys
                         (tenant, key, fingerprint, owner, state, created_at_ms, expires_at_ms)
                     VALUES ($1, $2, $3, $4, 'running', $5, $6)
                     ON CONFLICT (tenant, key) DO NOTHING",
                    &[
                        &claim.tenant,
                        &claim.key,
                        &claim.fingerprint,
                        &claim.owner,
                        &now,
                        &i64_of(claim.running_until_ms),
                    ],
                )
                .await
                .map_err(db)?;
            if inserted == 1 {
                return Ok(Claim::Claimed);
            }
        }
        // Claimed and gone again twice in a row: as good as running.
        Ok(Claim::Running)
    }

    /// Stores the outcome of `owner`'s claim.
    pub(crate) async fn finish(
        client: &Client,
        tenant: &str,
        key: &str,
        owner: &str,
        outcome: &StoredOutcome,
        expires_at_ms: u64,
    ) -> Result<(), StoreError> {
        client
            .execute(
                "UPDATE agentry_idempotency_keys SET state = 'done', status = $4, headers = $5,
                     body = $6, tail = $7, expires_at_ms = $8
                 WHERE tenant = $1 AND key = $2 AND owner = $3",
                &[
                    &tenant,
                    &key,
                    &owner,
                    &i32::from(outcome.status),
                    &headers_json(&outcome.headers),
                    &outcome.body,
                    &outcome.tail,
                    &i64_of(expires_at_ms),
                ],
            )
            .await
            .map_err(db)?;
        Ok(())
    }

    /// Extends `owner`'s running claim; whether it held one.
    pub(crate) async fn renew(
        client: &Client,
        tenant: &str,
        key: &str,
        owner: &str,
        running_until_ms: u64,
    ) -> Result<bool, StoreError> {
        let renewed = client
            .execute(
                "UPDATE agentry_idempotency_keys SET expires_at_ms = $4
                 WHERE tenant = $1 AND key = $2 AND owner = $3 AND state = 'running'",
                &[&tenant, &key, &owner, &i64_of(running_until_ms)],
            )
            .await
            .map_err(db)?;
        Ok(renewed > 0)
    }

    /// Drops `owner`'s claim.
    pub(crate) async fn release(
        client: &Client,
        tenant: &str,
        key: &str,
        owner: &str,
    ) -> Result<(), StoreError> {
        client
            .execute(
                "DELETE FROM agentry_idempotency_keys WHERE tenant = $1 AND key = $2 AND owner = $3",
                &[&tenant, &key, &owner],
            )
            .await
            .map_err(db)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_stream_keeps_its_last_whole_frames() {
        let mut kept = Kept::new(64, true);
        for n in 0..100 {
            kept.push(format!("data: {n:04}\n\n").as_bytes());
        }
        assert!(kept.tail);
        assert!(kept.bytes.len() <= 64);
        let text = String::from_utf8(kept.bytes).unwrap_or_default();
        assert!(text.starts_with("data: "), "{text}");
        assert!(text.ends_with("data: 0099\n\n"), "{text}");
        let mut json = Kept::new(8, false);
        json.push(b"{\"a\": \"0123456789\"}");
        assert!(json.over && json.bytes.is_empty());
    }

    #[test]
    fn keys_are_bounded_visible_ascii() {
        assert!(parse_key(&HeaderValue::from_static("7f3c-uuid")).is_ok());
        assert!(parse_key(&HeaderValue::from_static("")).is_err());
        assert!(parse_key(&HeaderValue::from_static("a b")).is_err());
        let long = "k".repeat(MAX_KEY_BYTES + 1);
        assert!(
            parse_key(&HeaderValue::from_str(&long).unwrap_or(HeaderValue::from_static("")))
                .is_err()
        );
        assert_ne!(
            fingerprint("POST", "/a", b"{}"),
            fingerprint("POST", "/b", b"{}")
        );
    }
}
