//! Request plumbing shared by the handlers: authentication, rate limits, bounded JSON bodies
//! and the per-request metric.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::auth::bearer;
use crate::error::ApiError;
use crate::state::{AppState, Tenant};

/// The tenant a response was for, left in its extensions for the request metric.
#[derive(Debug, Clone)]
pub(crate) struct TenantName(pub(crate) String);

/// The tenant of the request's bearer key, after its rate limit.
///
/// # Errors
///
/// 401 without a known key; 429 when the tenant is over its request rate; 503 while the
/// server drains.
pub(crate) fn admit(state: &AppState, headers: &HeaderMap) -> Result<Arc<Tenant>, ApiError> {
    let key = presented_key(headers).ok_or_else(ApiError::unauthorized)?;
    let tenant = state
        .inner
        .tenants
        .find(key)
        .cloned()
        .ok_or_else(ApiError::unauthorized)?;
    if state.inner.runs.is_draining() {
        return Err(ApiError::unavailable("the server is shutting down"));
    }
    tenant.rate.take().map_err(|seconds| {
        ApiError::rate_limited(
            format!("tenant `{}` is over its request rate", tenant.name),
            seconds,
        )
    })?;
    Ok(tenant)
}

/// The bearer key of a request, if it sent one.
pub(crate) fn presented_key(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(bearer)
}

/// Reads a JSON body of at most the configured size.
///
/// # Errors
///
/// 413 when the body is larger than `max_body_bytes`; 400 when it is not the expected JSON
/// or has a field no type reads (named in the message); 408 when the body does not arrive
/// within `body_read_timeout_secs`.
pub(crate) async fn json_body<T: DeserializeOwned>(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    let limit = state.inner.config.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<usize>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(ApiError::too_large(limit));
    }
    // A body without a length (chunked) is cut at the limit as it arrives. A client that
    // stops sending half-way gets 408 (and its connection closes) instead of holding it.
    let seconds = state.inner.config.body_read_timeout_secs;
    let bytes = tokio::time::timeout(
        std::time::Duration::from_secs(seconds),
        axum::body::to_bytes(body, limit),
    )
    .await
    .map_err(|_| {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "timeout_error",
            format!("the request body did not arrive within {seconds} s"),
        )
    })?
    .map_err(|_| ApiError::too_large(limit))?;
    let invalid =
        |error: serde_json::Error| ApiError::bad_request(format!("the body is not valid: {error}"));
    // A field no type reads is refused by name, never ignored: a misspelt or unsupported
    // setting must not look as if it had been applied.
    let mut ignored = None;
    let mut deserializer = serde_json::Deserializer::from_slice(&bytes);
    let value = serde_ignored::deserialize(&mut deserializer, |path| {
        ignored.get_or_insert_with(|| field_path(&path));
    })
    .map_err(invalid)?;
    deserializer.end().map_err(invalid)?;
    match ignored {
        Some(field) => Err(ApiError::bad_request(format!(
            "unknown field `{field}`: this server does not implement it"
        ))),
        None => Ok(value),
    }
}

/// A field's place in a body as a client writes it: `settings.temperature`,
/// `remote_tools[0].cache` (serde_ignored's own text marks every `Option` with a `?`).
fn field_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", field_path(parent)),
        Path::Map { parent, key } => {
            let parent = field_path(parent);
            if parent.is_empty() {
                key.clone()
            } else {
                format!("{parent}.{key}")
            }
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => field_path(parent),
    }
}

/// Around every request: refuses an address over its failed-authentication limit, counts
/// the failures, counts every response by tenant, route and status, and logs one line per
/// request (never a header: the key stays out of the log).
pub(crate) async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let address = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip());
    let path_session = session_in_path(request.uri().path()).map(str::to_owned);
    // Liveness stays open: a load balancer's probe must not be locked out by a neighbour.
    let guarded = route != "/healthz";
    let failures = &state.inner.auth_failures;
    let blocked = address
        .filter(|_| guarded)
        .and_then(|address| failures.blocked(address));
    let response = match blocked {
        Some(seconds) => {
            ApiError::rate_limited("too many failed authentications from this address", seconds)
                .into_response()
        }
        None => next.run(request).await,
    };
    let status = response.status();
    if status == StatusCode::UNAUTHORIZED
        && let Some(address) = address
    {
        let failure = failures.fail(address);
        state.inner.metrics.inc("agentry_auth_failures_total", &[]);
        if failure.log || failure.blocked {
            tracing::warn!(
                client = %address,
                route = %route,
                failures = failure.count,
                blocked = failure.blocked,
                unlogged_since_last = failure.unlogged,
                "authentication failed"
            );
        }
    }
    let tenant = response
        .extensions()
        .get::<TenantName>()
        .map_or("none", |tenant| tenant.0.as_str());
    let session = response
        .headers()
        .get("x-session-id")
        .and_then(|value| value.to_str().ok())
        .or_else(|| {
            response
                .headers()
                .get(header::LOCATION)
                .and_then(|value| value.to_str().ok())
                .and_then(session_in_path)
        })
        .or(path_session.as_deref());
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let code = status.as_u16();
    if status.is_server_error() {
        let cause = response
            .extensions()
            .get::<crate::error::Cause>()
            .map_or("", |cause| cause.0.as_str());
        tracing::error!(
            method = %method, route = %route, tenant, status = code, latency_ms, session, cause,
            "request failed"
        );
    } else {
        tracing::info!(
            method = %method, route = %route, tenant, status = code, latency_ms, session,
            "request"
        );
    }
    let status = code.to_string();
    state.inner.metrics.inc(
        "agentry_http_requests_total",
        &[("tenant", tenant), ("route", &route), ("status", &status)],
    );
    response
}

/// The session id in `/v1/sessions/{id}` or `/v1/sessions/{id}/execute`.
fn session_in_path(path: &str) -> Option<&str> {
    path.strip_prefix("/v1/sessions/")
        .and_then(|rest| rest.split('/').next())
        .filter(|id| !id.is_empty())
}

/// Puts the tenant's name on a response for [`track`].
pub(crate) fn tagged(mut response: Response, tenant: &Tenant) -> Response {
    response
        .extensions_mut()
        .insert(TenantName(tenant.name.clone()));
    response
}
