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
    /// `[server.durability]` is unusable, or its engine unreachable.
    #[error(transparent)]
    Durability(#[from] crate::durability::DurabilityError),
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

/// `text` with every URL and every credential-like value replaced, for errors shown to
/// tenants: an upstream error can carry the provider's URL (whose path or query may hold a
/// secret) or echo a key, in a query string, a header line or a JSON body. The full text
/// goes to the server log.
///
/// Caught: `name=value`, `name: value`, `"name": "value"` (also single-quoted, and with the
/// quotes escaped, `\"name\":\"value\"`, as a JSON body quoted inside a string), and
/// `Bearer value` / `Basic value` wherever they stand, for the [`SECRET_NAMES`], also as the
/// end of a longer name (`x-api-key`, `refresh_token`, `client_secret`). Matching is
/// ASCII case-insensitive.
pub(crate) fn redact(text: &str) -> std::borrow::Cow<'_, str> {
    // Both kinds are found on the whole text, then cut together: a URL can hold the start of
    // a pair whose secret lies past the URL's end (`…/{api_key:Bearer SECRET`), and a
    // secret can sit inside a URL.
    let mut hidden: Vec<(usize, usize, bool)> = Vec::new();
    secrets(text.as_bytes(), &mut hidden);
    urls(text, &mut hidden);
    if hidden.is_empty() {
        return std::borrow::Cow::Borrowed(text);
    }
    hidden.sort_unstable_by_key(|&(start, ..)| start);
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut current: Option<(usize, usize, bool)> = None;
    let mut cut = |out: &mut String, (start, end, url): (usize, usize, bool)| {
        out.push_str(&text[copied..start]);
        out.push_str(if url { "<url redacted>" } else { "<redacted>" });
        copied = end;
    };
    for range in hidden {
        current = match current {
            // Overlapping ranges are one cut, a URL's if either is.
            Some((start, end, url)) if range.0 < end => {
                Some((start, end.max(range.1), url || range.2))
            }
            Some(done) => {
                cut(&mut out, done);
                Some(range)
            }
            None => Some(range),
        };
    }
    if let Some(done) = current {
        cut(&mut out, done);
    }
    out.push_str(&text[copied..]);
    std::borrow::Cow::Owned(out)
}

/// Pushes the byte range of every URL in `text` (flagged `true`).
fn urls(text: &str, ranges: &mut Vec<(usize, usize, bool)>) {
    let mut offset = 0;
    while let Some(at) = url_start(&text[offset..]) {
        let rest = &text[offset..];
        let end = rest[at..]
            .find(|c: char| {
                c.is_whitespace() || matches!(c, ')' | '"' | '\'' | '>' | '<' | '`' | ']')
            })
            .map_or(rest.len(), |end| at + end);
        ranges.push((offset + at, offset + end, true));
        // `end` is past the `://` that was found, so this always moves on.
        offset += end.max(at + 1);
    }
}

/// Where a `scheme://` URL starts in `text`.
fn url_start(text: &str) -> Option<usize> {
    let marker = text.find("://")?;
    // Back over the scheme's characters (all ASCII, so the cut is at a char boundary; the
    // character before it may be any width).
    let scheme = text[..marker]
        .bytes()
        .rev()
        .take_while(|&byte| byte.is_ascii_alphanumeric() || matches!(byte, b'+' | b'-' | b'.'))
        .count();
    Some(marker - scheme)
}

/// Names whose values are secrets, as they appear in query strings, headers and JSON bodies
/// (lower case; matched case-insensitively).
const SECRET_NAMES: [&str; 11] = [
    "api_key",
    "apikey",
    "api-key",
    "key",
    "token",
    "access_token",
    "secret",
    "password",
    "passwd",
    "authorization",
    "cookie",
];

/// Authorization schemes whose next word is the credential, after a name (`Authorization:`).
const SCHEMES: [&str; 2] = ["bearer", "basic"];

/// Pushes the byte range of every secret value in `bytes` (see [`redact`]; flagged
/// `false`). Every range starts and ends at an ASCII byte or the end, so at char boundaries.
fn secrets(bytes: &[u8], ranges: &mut Vec<(usize, usize, bool)>) {
    let mut at = 0;
    while at < bytes.len() {
        match secret_at(bytes, at) {
            Some((start, end)) => {
                ranges.push((start, end, false));
                at = end.max(at + 1);
            }
            None => at += 1,
        }
    }
}

/// The byte range of a secret value introduced at `at` (by a secret name and its separator,
/// or by an authorization scheme), if one is.
fn secret_at(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
    // A name starts a word (`x-api-key` and `refresh_token` count: `-` and `_` end words).
    if !bytes[at].is_ascii_alphabetic() || (at > 0 && bytes[at - 1].is_ascii_alphanumeric()) {
        return None;
    }
    // `Bearer X` wherever it stands (`Basic` only after a name: it is a common word).
    if starts_with(bytes, at, "bearer") {
        let after = at + "bearer".len();
        let value = skip_space(bytes, after);
        return if value > after {
            non_empty(value, bare_end(bytes, value))
        } else {
            None
        };
    }
    let name = SECRET_NAMES
        .iter()
        .find(|name| starts_with(bytes, at, name))?;
    let mut next = at + name.len();
    // The name's closing quote, escaped or not: `"api_key":`, `\"api_key\":`.
    if bytes.get(next) == Some(&b'\\') {
        next += 1;
    }
    if matches!(bytes.get(next), Some(b'"' | b'\'')) {
        next += 1;
    }
    next = skip_space(bytes, next);
    if !matches!(bytes.get(next), Some(b'=' | b':')) {
        return None;
    }
    let value = skip_space(bytes, next + 1);
    match (bytes.get(value), bytes.get(value + 1)) {
        // An escaped quote: the value ends at the next escaped quote.
        (Some(b'\\'), Some(b'"')) => {
            let start = value + 2;
            let end = find(bytes, start, |rest| rest.starts_with(b"\\\""));
            non_empty(start, end)
        }
        (Some(&quote @ (b'"' | b'\'')), _) => {
            let start = value + 1;
            let mut end = start;
            while end < bytes.len() && bytes[end] != quote {
                // `\"` inside a JSON string does not end it.
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            non_empty(start, end.min(bytes.len()))
        }
        _ => {
            let end = bare_end(bytes, value);
            // `Authorization: Bearer X` hides X, not the scheme.
            let word = &bytes[value..end];
            if SCHEMES
                .iter()
                .any(|scheme| word.eq_ignore_ascii_case(scheme.as_bytes()))
            {
                let credential = skip_space(bytes, end);
                return non_empty(credential, bare_end(bytes, credential));
            }
            non_empty(value, end)
        }
    }
}

/// `bytes[at..]` starts with `lower`, ignoring ASCII case.
fn starts_with(bytes: &[u8], at: usize, lower: &str) -> bool {
    bytes
        .get(at..at + lower.len())
        .is_some_and(|word| word.eq_ignore_ascii_case(lower.as_bytes()))
}

fn skip_space(bytes: &[u8], mut at: usize) -> usize {
    while bytes
        .get(at)
        .is_some_and(|byte| matches!(byte, b' ' | b'\t'))
    {
        at += 1;
    }
    at
}

/// Where an unquoted value starting at `at` ends.
fn bare_end(bytes: &[u8], at: usize) -> usize {
    find(bytes, at, |rest| {
        rest[0].is_ascii_whitespace()
            || matches!(
                rest[0],
                b'&' | b',' | b';' | b'}' | b']' | b')' | b'"' | b'\'' | b'<' | b'>' | b'`' | b'\\'
            )
    })
}

/// The first index from `at` where `stop` holds for the rest, or the end.
fn find(bytes: &[u8], at: usize, stop: impl Fn(&[u8]) -> bool) -> usize {
    (at..bytes.len())
        .find(|&index| stop(&bytes[index..]))
        .unwrap_or(bytes.len())
}

fn non_empty(start: usize, end: usize) -> Option<(usize, usize)> {
    (end > start).then_some((start, end))
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

/// A sub-agent's event (an agent the run calls as a tool) as the tenant sees it: its error
/// redacted like the run's own.
pub(crate) fn redact_nested(event: agent_types::AgentEvent) -> agent_types::AgentEvent {
    match event {
        agent_types::AgentEvent::SubAgent {
            call_id,
            path,
            event,
        } => {
            let event = match *event {
                agent_types::AgentEvent::Error { error } => {
                    Box::new(agent_types::AgentEvent::Error {
                        error: redact_agent_error(&error),
                    })
                }
                other => Box::new(other),
            };
            agent_types::AgentEvent::SubAgent {
                call_id,
                path,
                event,
            }
        }
        other => other,
    }
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

    #[test]
    fn json_quoted_credentials_are_redacted() {
        let cases = [
            (
                r#"HTTP 400: {"error":{"message":"bad key","api_key":"SECRET"}}"#,
                r#"HTTP 400: {"error":{"message":"bad key","api_key":"<redacted>"}}"#,
            ),
            (
                r#"{"token": "SECRET", "model": "gpt"}"#,
                r#"{"token": "<redacted>", "model": "gpt"}"#,
            ),
            (
                r#"{"Authorization":"Bearer SECRET"}"#,
                r#"{"Authorization":"<redacted>"}"#,
            ),
            (
                r#"{"authorization" : "Basic U0VDUkVU"}"#,
                r#"{"authorization" : "<redacted>"}"#,
            ),
            // A JSON body quoted inside a JSON string.
            (
                r#"upstream said "{\"access_token\":\"SECRET\",\"n\":1}""#,
                r#"upstream said "{\"access_token\":\"<redacted>\",\"n\":1}""#,
            ),
            // A quote inside the value does not end it early.
            (
                r#"{"secret":"SEC\"RET","x":1}"#,
                r#"{"secret":"<redacted>","x":1}"#,
            ),
            ("{'password': 'SECRET'}", "{'password': '<redacted>'}"),
            (r#"{"api_key":SECRET}"#, r#"{"api_key":<redacted>}"#),
            // Longer names ending in a secret name, headers included.
            ("x-api-key: SECRET", "x-api-key: <redacted>"),
            (
                r#"{"refresh_token":"SECRET","client_secret":"SECRET"}"#,
                r#"{"refresh_token":"<redacted>","client_secret":"<redacted>"}"#,
            ),
            (
                "Authorization: Basic SECRET",
                "Authorization: Basic <redacted>",
            ),
            ("API_KEY = SECRET", "API_KEY = <redacted>"),
            // Not secrets: other words, counts, nested objects.
            (
                "token budget: 4916300 of 100000",
                "token budget: 4916300 of 100000",
            ),
            (
                r#"{"max_tokens": 5, "monkey": "x", "keys": 2}"#,
                r#"{"max_tokens": 5, "monkey": "x", "keys": 2}"#,
            ),
            (
                r#"{"auth": {"token": "SECRET"}}"#,
                r#"{"auth": {"token": "<redacted>"}}"#,
            ),
            ("basic arithmetic failed", "basic arithmetic failed"),
            // A value cut off by the end of the text.
            (r#"{"api_key": "SECRET"#, r#"{"api_key": "<redacted>"#),
            ("é token=SECRÉT ü", "é token=<redacted> ü"),
            // Found by the property tests: a pair begun inside a URL, its secret past the
            // URL's end; a URL after a wide character (a panic before).
            (
                "http://a/{api_key:Bearer SECRET ",
                "<url redacted> <redacted> ",
            ),
            ("\u{301}https://h/x?key=SECRET", "\u{301}<url redacted>"),
        ];
        for (text, expected) in cases {
            assert_eq!(redact(text), expected, "{text}");
        }
    }

    #[test]
    fn a_provider_body_in_an_agent_error_is_redacted() {
        let mut error = agent_types::AgentError::new(
            agent_types::ErrorKind::Config,
            r#"HTTP 401 from upstream: {"error": {"message": "invalid", "api_key": "sk-live-SECRET"}}"#,
        );
        error
            .message
            .push_str(" (Authorization: Bearer sk-live-SECRET)");
        let shown = redact_agent_error(&error);
        assert!(!shown.message.contains("SECRET"), "{}", shown.message);
        assert!(shown.message.contains(r#""api_key": "<redacted>""#));
    }

    mod property {
        use proptest::prelude::*;

        use super::super::{SECRET_NAMES, redact};

        /// A name of [`SECRET_NAMES`] in random case, sometimes as the end of a longer one.
        fn name() -> impl Strategy<Value = String> {
            (
                proptest::sample::select(SECRET_NAMES.to_vec()),
                proptest::collection::vec(any::<bool>(), 16),
                proptest::sample::select(vec!["", "x-", "refresh_", "X-Goog-"]),
            )
                .prop_map(|(name, upper, prefix)| {
                    let name: String = name
                        .chars()
                        .zip(upper.iter().cycle())
                        .map(|(c, &up)| if up { c.to_ascii_uppercase() } else { c })
                        .collect();
                    format!("{prefix}{name}")
                })
        }

        /// The seeded secret: upper case, so the filler (lower case) never spells it.
        fn secret() -> impl Strategy<Value = String> {
            "[A-Z0-9_.-]{4,24}".prop_map(|tail| format!("SK{tail}"))
        }

        /// The secret in one of the forms providers and proxies echo it in.
        fn pair() -> impl Strategy<Value = (String, String)> {
            (
                name(),
                secret(),
                0..12_usize,
                proptest::sample::select(vec!["", " ", "  ", "\t"]),
            )
                .prop_map(|(name, secret, form, space)| {
                    let text = match form {
                        0 => format!("{name}={secret}"),
                        1 => format!("{name}:{space}{secret}"),
                        2 => format!(r#""{name}":{space}"{secret}""#),
                        3 => format!(r#""{name}"{space}:{space}"{secret}""#),
                        4 => format!(r#"\"{name}\":{space}\"{secret}\""#),
                        5 => format!("'{name}':{space}'{secret}'"),
                        6 => format!("{name}:{space}Bearer {secret}"),
                        7 => format!(r#""{name}":{space}"Bearer {secret}""#),
                        8 => format!("Bearer {secret}"),
                        9 => format!("bEaReR{space} {secret}"),
                        10 => format!(r#""{name}":{space}{secret}"#),
                        _ => format!("{name}{space}={space}{secret}"),
                    };
                    (text, secret)
                })
        }

        /// JSON-ish filler: words, quoted words, punctuation, harmless pairs, URLs.
        fn filler() -> impl Strategy<Value = String> {
            prop_oneof![
                "[a-z]{1,8}",
                "\"[a-z ]{0,8}\"",
                "[{}\\[\\]:,]{1,3}",
                "\"[a-z]{1,8}\": ?(\"[a-z ]{0,8}\"|[0-9]{1,4}|null)",
                "https?://[a-z.]{1,10}/[a-z/]{0,10}(\\?[a-z]{1,4}=[a-z]{1,4})?",
                "[0-9]{1,6}",
            ]
        }

        fn text() -> impl Strategy<Value = (String, String)> {
            let separator = proptest::sample::select(vec![" ", ", ", "\n", "{", "&", "?", ","]);
            (
                proptest::collection::vec((filler(), separator.clone()), 0..6),
                pair(),
                separator,
                proptest::collection::vec((separator_free(), filler()), 0..6),
            )
                .prop_map(|(before, (pair, secret), after_pair, after)| {
                    let mut text = String::new();
                    for (filler, separator) in before {
                        text.push_str(&filler);
                        text.push_str(separator);
                    }
                    text.push_str(&pair);
                    text.push_str(after_pair);
                    for (separator, filler) in after {
                        text.push_str(separator);
                        text.push_str(&filler);
                    }
                    (text, secret)
                })
        }

        fn separator_free() -> impl Strategy<Value = &'static str> {
            proptest::sample::select(vec![" ", ", ", "\n", "}", "]"])
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            #[test]
            fn a_seeded_secret_never_survives((text, secret) in text()) {
                let shown = redact(&text);
                prop_assert!(!shown.contains(&secret), "{text:?} -> {shown:?}");
            }

            #[test]
            fn the_redactor_never_panics(text in any::<String>()) {
                let _ = redact(&text);
            }

            #[test]
            fn the_redactor_never_panics_on_its_own_alphabet(
                text in "([\"'\\\\:= \t{}&,;]|[ée\u{301}]|bearer|BASIC|api_key|token|authorization|https://|[a-z]){0,40}"
            ) {
                let shown = redact(&text);
                // And text with nothing to hide comes back as it was.
                if !text.contains("://") && shown.as_ref() != text {
                    prop_assert!(shown.contains("<redacted>"));
                }
            }
        }
    }
}
