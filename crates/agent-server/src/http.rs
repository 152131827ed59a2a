//! Request plumbing shared by the handlers: authentication, rate limits, bounded JSON bodies
//! and the per-request metric.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;
use serde::de::DeserializeOwned;

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
    let key = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or_else(ApiError::unauthorized)?;
    let tenant = state
        .inner
        .tenants
        .get(key)
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

/// Reads a JSON body of at most the configured size.
///
/// # Errors
///
/// 413 when the body is larger than `max_body_bytes`; 400 when it is not the expected JSON.
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
    // A body without a length (chunked) is cut at the limit as it arrives.
    let bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ApiError::too_large(limit))?;
    serde_json::from_slice(&bytes)
        .map_err(|error| ApiError::bad_request(format!("the body is not valid: {error}")))
}

/// Counts every response by tenant, route and status.
pub(crate) async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let response = next.run(request).await;
    let tenant = response
        .extensions()
        .get::<TenantName>()
        .map_or("none", |tenant| tenant.0.as_str());
    let status = response.status().as_u16().to_string();
    state.inner.metrics.inc(
        "agentry_http_requests_total",
        &[("tenant", tenant), ("route", &route), ("status", &status)],
    );
    response
}

/// Puts the tenant's name on a response for [`track`].
pub(crate) fn tagged(mut response: Response, tenant: &Tenant) -> Response {
    response
        .extensions_mut()
        .insert(TenantName(tenant.name.clone()));
    response
}
