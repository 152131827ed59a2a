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
            // The cause goes to the log; the tenant learns only that the store failed (its
            // errors can name hosts, paths and database users).
            other => {
                tracing::error!(error = %other, "the session store failed");
                Self::internal("the session store failed; the server log has the cause")
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body();
        let mut response = json_error(self.status, &body, self.retry_after);
        if self.status.is_server_error() {
            response.extensions_mut().insert(Cause(self.message));
        }
        response
    }
}

/// Why a response is a 5xx, for the request's log line.
#[derive(Debug, Clone)]
pub(crate) struct Cause(pub(crate) String);

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

/// `text` with every URL and every credential-like `name=value` pair replaced, for errors
/// shown to tenants: an upstream error can carry the provider's URL (whose path or query may
/// hold a secret) or echo a key. The full text goes to the server log.
pub(crate) fn redact(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("://") && !has_secret_pair(text) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(at) = url_start(rest) {
            out.push_str(&redact_pairs(&rest[..at]));
            let end = rest[at..]
                .find(|c: char| {
                    c.is_whitespace() || matches!(c, ')' | '"' | '\'' | '>' | '<' | '`' | ']')
                })
                .map_or(rest.len(), |end| at + end);
            out.push_str("<url redacted>");
            rest = &rest[end..];
        } else {
            out.push_str(&redact_pairs(rest));
            rest = "";
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Where a `scheme://` URL starts in `text`.
fn url_start(text: &str) -> Option<usize> {
    let marker = text.find("://")?;
    let start = text[..marker]
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .map_or(0, |at| at + 1);
    Some(start)
}

/// Names whose values are secrets, as they appear in query strings and headers.
const SECRET_NAMES: [&str; 9] = [
    "api_key",
    "apikey",
    "api-key",
    "key",
    "token",
    "access_token",
    "secret",
    "password",
    "authorization",
];

fn has_secret_pair(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    SECRET_NAMES
        .iter()
        .any(|name| lower.contains(&format!("{name}=")) || lower.contains(&format!("{name}:")))
        || lower.contains("bearer ")
}

/// Replaces the value after `name=` / `name:` (for the names above) and after `Bearer `.
fn redact_pairs(text: &str) -> std::borrow::Cow<'_, str> {
    if !has_secret_pair(text) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut words =
        text.split_inclusive(|c: char| c.is_whitespace() || matches!(c, '&' | '?' | ',' | ';'));
    let mut hide_next = false;
    for word in words.by_ref() {
        let (body, tail) = split_tail(word);
        // `Authorization: Bearer X` hides X, not the scheme.
        if hide_next && !body.is_empty() && !body.eq_ignore_ascii_case("bearer") {
            out.push_str("<redacted>");
            out.push_str(tail);
            hide_next = false;
            continue;
        }
        let lower = body.to_ascii_lowercase();
        if lower == "bearer" {
            hide_next = true;
            out.push_str(word);
            continue;
        }
        let trimmed = lower.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
        let secret = SECRET_NAMES.iter().find_map(|name| {
            [format!("{name}="), format!("{name}:")]
                .into_iter()
                .find(|prefix| trimmed.starts_with(prefix.as_str()))
        });
        match secret {
            Some(prefix) => {
                let offset = lower.len() - trimmed.len() + prefix.len();
                out.push_str(&body[..offset]);
                if body.len() > offset {
                    out.push_str("<redacted>");
                } else {
                    // `key: value` with the value in the next word.
                    hide_next = true;
                }
                out.push_str(tail);
            }
            None => out.push_str(word),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A word and the separator it ends with.
fn split_tail(word: &str) -> (&str, &str) {
    match word.char_indices().last() {
        Some((at, c)) if c.is_whitespace() || matches!(c, '&' | '?' | ',' | ';') => {
            (&word[..at], &word[at..])
        }
        _ => (word, ""),
    }
}

/// [`redact`], with the full text in the log: the one call for an error path that shows a
/// run's error to a tenant.
pub(crate) fn redact_logged(text: &str) -> String {
    tracing::warn!(error = %text, "the run failed");
    redact(text).into_owned()
}

/// `error` as a tenant may see it: its messages (and its backend error's) redacted.
pub(crate) fn redact_agent_error(error: &agent_types::AgentError) -> agent_types::AgentError {
    let mut shown = error.clone();
    shown.message = redact(&error.message).into_owned();
    if let agent_types::ErrorKind::Backend { error: backend } = &mut shown.kind {
        backend.message = redact(&backend.message).into_owned();
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_credentials_are_redacted() {
        let cases = [
            (
                "error sending request for url (http://10.0.0.1:9/secret/path/v1/chat): refused",
                "error sending request for url (<url redacted>): refused",
            ),
            (
                "HTTP 401: invalid key in https://api.example.com/v1?api_key=SECRET",
                "HTTP 401: invalid key in <url redacted>",
            ),
            (
                "bad request ?api_key=SECRET&x=1",
                "bad request ?api_key=<redacted>&x=1",
            ),
            (
                "header Authorization: Bearer SECRET was rejected",
                "header Authorization: Bearer <redacted> was rejected",
            ),
            ("token=SECRET, then", "token=<redacted>, then"),
            ("nothing to hide here", "nothing to hide here"),
        ];
        for (text, expected) in cases {
            assert_eq!(redact(text), expected, "{text}");
        }
    }
}
