//! Turning a failed response (status, headers, body) into a typed [`BackendError`].

use std::time::Duration;

use agent_types::{BackendError, BackendErrorKind};
use reqwest::header::HeaderMap;

/// What an adapter read from its provider's error body.
#[derive(Debug)]
pub(crate) struct ProviderError {
    /// The message, formatted the provider's way (e.g. `type: message`).
    pub(crate) message: String,
    /// A kind the body makes clearer than the status (overloaded, quota), if any.
    pub(crate) kind: Option<BackendErrorKind>,
    /// A wait the body asks for (Gemini's `RetryInfo`), if any.
    pub(crate) retry_after: Option<Duration>,
}

impl ProviderError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            kind: None,
            retry_after: None,
        }
    }

    pub(crate) fn with_kind(mut self, kind: Option<BackendErrorKind>) -> Self {
        self.kind = kind;
        self
    }

    /// The error, for a failure reported inside a stream (no HTTP status).
    pub(crate) fn into_error(self, fallback: BackendErrorKind) -> BackendError {
        BackendError {
            retry_after: self.retry_after,
            ..BackendError::new(self.kind.unwrap_or(fallback), self.message)
        }
    }
}

/// The kind a status implies before the body is read.
pub(crate) fn kind_for_status(status: u16) -> BackendErrorKind {
    match status {
        401 | 403 => BackendErrorKind::Authentication,
        408 => BackendErrorKind::Timeout,
        429 => BackendErrorKind::RateLimited,
        529 => BackendErrorKind::Overloaded,
        500..=599 => BackendErrorKind::Server,
        _ => BackendErrorKind::InvalidRequest,
    }
}

/// The error for a non-success response. `describe` reads the provider's error JSON; a body
/// that is not JSON (an HTML page from a proxy, plain text) is described by what it is.
pub(crate) fn response_error(
    status: u16,
    body: &[u8],
    describe: impl FnOnce(&serde_json::Value) -> Option<ProviderError>,
) -> BackendError {
    let described = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|json| describe(&json));
    let (message, kind, retry_after) = match described {
        Some(error) => (error.message, error.kind, error.retry_after),
        None => (not_json(status, body), None, None),
    };
    BackendError {
        status: Some(status),
        retry_after,
        ..BackendError::new(kind.unwrap_or_else(|| kind_for_status(status)), message)
    }
}

fn not_json(status: u16, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if looks_like_html(body) {
        let title = between(text, "<title>", "</title>").unwrap_or("no title");
        return format!(
            "HTTP {status}: the response is an HTML page (\"{}\"), not the provider's JSON; \
             a proxy or gateway answered instead of the API",
            clip(title.trim(), 120)
        );
    }
    if text.is_empty() {
        return format!("HTTP {status} with an empty body");
    }
    format!("HTTP {status}: {}", clip(text, 300))
}

/// Whether a body is an HTML page rather than JSON.
pub(crate) fn looks_like_html(body: &[u8]) -> bool {
    let start = body
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .map_or(&body[..0], |at| &body[at..]);
    start.first() == Some(&b'<')
}

fn between<'t>(text: &'t str, open: &str, close: &str) -> Option<&'t str> {
    let lower = text.to_ascii_lowercase();
    let start = lower.find(open)? + open.len();
    let end = start + lower[start..].find(close)?;
    text.get(start..end)
}

/// At most `max` characters of `text`, marked when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The wait a response asks for: `retry-after-ms` (OpenAI) or `Retry-After` in seconds.
/// The HTTP-date form of `Retry-After` is not read; no LLM provider sends it.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| {
        headers
            .get(name)?
            .to_str()
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|value| value.is_finite() && *value >= 0.0)
    };
    // `try_`: a finite wait too long for a `Duration` (`Retry-After: 1e30`) made
    // `from_secs_f64` panic (found by fuzzing); such a wait is no wait we can honour: ignored.
    if let Some(ms) = number("retry-after-ms") {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    number("retry-after").and_then(|secs| Duration::try_from_secs_f64(secs).ok())
}

/// The `error` member's `message` (and `type`/`code`) in the common `{"error": {...}}` shape.
// Not every adapter reads errors this way; a build with only those would call it unused.
#[cfg_attr(
    not(any(feature = "openai", feature = "anthropic", feature = "gemini")),
    allow(dead_code)
)]
pub(crate) fn str_field<'v>(value: &'v serde_json::Value, key: &str) -> Option<&'v str> {
    value.get(key).and_then(serde_json::Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_from_a_proxy_is_named_as_such() {
        let body = b"\n<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>";
        let error = response_error(502, body, |_| None);
        assert_eq!(error.kind, BackendErrorKind::Server);
        assert!(error.is_retryable());
        assert!(
            error.message.contains("HTML page (\"502 Bad Gateway\")"),
            "{error}"
        );
        assert_eq!(error.status, Some(502));
    }

    #[test]
    fn statuses_map_to_kinds() {
        for (status, kind) in [
            (400, BackendErrorKind::InvalidRequest),
            (401, BackendErrorKind::Authentication),
            (404, BackendErrorKind::InvalidRequest),
            (408, BackendErrorKind::Timeout),
            (429, BackendErrorKind::RateLimited),
            (500, BackendErrorKind::Server),
            (529, BackendErrorKind::Overloaded),
        ] {
            assert_eq!(response_error(status, b"", |_| None).kind, kind, "{status}");
        }
        assert_eq!(
            response_error(500, b"", |_| None).message,
            "HTTP 500 with an empty body"
        );
    }

    #[test]
    fn retry_after_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", "3".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(3)));
        headers.insert("retry-after-ms", "1500".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(1500)));
        headers.clear();
        headers.insert(
            "retry-after",
            "Wed, 21 Oct 2026 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&headers), None);
    }

    /// Found by fuzzing (`tests/fuzz.rs`): `Retry-After: 1e30` panicked in
    /// `Duration::from_secs_f64`; a wait too long for a `Duration` is ignored like a malformed one.
    #[test]
    fn retry_after_too_long_for_a_duration_is_ignored() {
        for (name, value) in [
            ("retry-after", "1e30"),
            ("retry-after", "18446744073709551616"),
            ("retry-after-ms", "1e300"),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(name, value.parse().unwrap());
            assert_eq!(retry_after(&headers), None, "{name}: {value}");
        }
    }
}
