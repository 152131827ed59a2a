//! Errors: [`Error`] for setting the server up, [`ApiError`] for what a request gets back.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::store::StoreError;

/// The server could not be set up or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is invalid.
    #[error("server configuration: {0}")]
    Config(String),
    /// The session store could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A model backend could not be built.
    #[error("model `{model}`: {reason}")]
    Model {
        /// The model's configured name.
        model: String,
        /// Why.
        reason: String,
    },
    /// Listening or serving failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// An error response: `{"error": {"type", "message", "status"}}` with the status code, and
/// `Retry-After` / `WWW-Authenticate` where they apply.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable, machine-readable type, e.g. `invalid_request_error`.
    pub kind: &'static str,
    /// What went wrong, for people.
    pub message: String,
    /// Seconds after which a retry may succeed (429, 503).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with this status, type and message.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 400: the request is malformed or does not fit the session.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 401: no or an unknown API key.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "a valid API key is required: send `Authorization: Bearer <key>`",
        )
    }

    /// 404: no such resource for this tenant.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found_error", message)
    }

    /// 409: the resource is busy or in the wrong state.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict_error", message)
    }

    /// 413: the body is larger than the server accepts.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            format!("the request body is larger than {limit} bytes"),
        )
    }

    /// 429: a rate or concurrency limit; retry after `seconds`.
    pub fn rate_limited(message: impl Into<String>, seconds: u64) -> Self {
        Self {
            retry_after: Some(seconds.max(1)),
            ..Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", message)
        }
    }

    /// 503: the server is shutting down.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            retry_after: Some(1),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable_error",
                message,
            )
        }
    }

    /// 500: something on our side failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// The body as JSON.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"type": self.kind, "message": self.message, "status": self.status.as_u16()}})
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Exists(_) => Self::conflict(error.to_string()),
            StoreError::LeaseLost(_) => Self::conflict(error.to_string()),
            StoreError::Quota { quota, .. } => {
                crate::quota::exceeded(quota.key(), error.to_string())
            }
            other => {
                tracing::error!(error = %other, "session store failed");
                Self::internal(format!("the session store failed: {other}"))
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body();
        json_error(self.status, &body, self.retry_after)
    }
}

/// An error body with its status, `Retry-After` when given, and `WWW-Authenticate` on 401:
/// what every error response of the server carries, whatever the body's shape.
pub(crate) fn json_error(
    status: StatusCode,
    body: &serde_json::Value,
    retry_after: Option<u64>,
) -> Response {
    let mut response = (status, Json(body)).into_response();
    let headers = response.headers_mut();
    if let Some(seconds) = retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    if status == StatusCode::UNAUTHORIZED {
        headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}
