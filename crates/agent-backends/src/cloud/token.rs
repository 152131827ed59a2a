//! A cached OAuth2 bearer token, refreshed ahead of expiry, one refresh at a time.
//!
//! [`TokenSource`] holds the current access token and a [`TokenFetcher`] that gets a new one
//! (a Google service-account assertion, a refresh token, the metadata server, a Microsoft
//! Entra ID client credential). It is a [`RequestAuth`]: every attempt of every model call
//! asks it for the `Authorization` header.
//!
//! - **Cached**: a token is used until it is due for refresh, which is ahead of its expiry by
//!   five minutes or half its lifetime, whichever is shorter (a token that lives 60 minutes is
//!   refreshed after 55, one that lives 2 seconds after 1).
//! - **One refresh at a time**: callers that find the token due wait for the same refresh
//!   (a `tokio` mutex held while fetching), then all use its result; 50 concurrent calls make
//!   one request to the token endpoint.
//! - **Failures**: a failed refresh is not cached; the next call tries again. While the old
//!   token has not expired it is still used (a refresh ahead of expiry that fails costs
//!   nothing); after that the call fails with the fetcher's error, an
//!   [`Authentication`](BackendErrorKind::Authentication) error that names what to set, or a
//!   retryable [`Connection`](BackendErrorKind::Connection)/[`Server`](BackendErrorKind::Server)
//!   error when the token endpoint could not be reached or failed (the driver retries the
//!   attempt, which refreshes again).
//! - **Secrets**: tokens, refresh tokens, client secrets and private keys never appear in a
//!   `Debug` output or an error message; the header value is marked sensitive.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agent_types::{BackendError, BackendErrorKind};
use reqwest::header::{AUTHORIZATION, HeaderValue};
use serde::Deserialize;
use tokio::time::Instant;

use crate::http::{AuthFuture, HttpClient, RequestAuth};

/// The longest a refresh is done ahead of expiry.
const MAX_MARGIN: Duration = Duration::from_secs(5 * 60);
/// The longest one request to a token endpoint may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);
/// The lifetime assumed when a token endpoint gives none (Google and Entra tokens live an
/// hour; assume less).
const DEFAULT_LIFETIME: Duration = Duration::from_secs(30 * 60);

/// An access token and how long it lives from when it was asked for.
pub struct AccessToken {
    value: String,
    lifetime: Duration,
}

impl AccessToken {
    /// A token that expires `lifetime` after the request that fetched it was sent.
    pub fn new(value: impl Into<String>, lifetime: Duration) -> Self {
        Self {
            value: value.into(),
            lifetime,
        }
    }

    /// How long the token lives.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessToken")
            .field("value", &"<redacted>")
            .field("lifetime", &self.lifetime)
            .finish()
    }
}

/// What [`TokenFetcher::fetch`] returns.
pub type FetchFuture<'a> =
    Pin<Box<dyn Future<Output = Result<AccessToken, BackendError>> + Send + 'a>>;

/// Gets a new access token (one request to a token endpoint, or a metadata server).
pub trait TokenFetcher: Send + Sync + fmt::Debug {
    /// Fetches a fresh token with `client`.
    ///
    /// An error should be [`Authentication`](BackendErrorKind::Authentication) when the
    /// credentials are missing or refused, naming what to set; a transport failure or a 5xx
    /// from the endpoint may be retryable.
    fn fetch<'a>(&'a self, client: &'a reqwest::Client) -> FetchFuture<'a>;
}

/// The cached token: the header to send, and when to refresh and when it expires.
struct Cached {
    header: HeaderValue,
    refresh_at: Instant,
    expires_at: Instant,
}

/// A cached, refreshed bearer token; see the [module documentation](self).
pub struct TokenSource {
    fetcher: Box<dyn TokenFetcher>,
    client: HttpClient,
    cached: Mutex<Option<Cached>>,
    refresh: tokio::sync::Mutex<()>,
    refreshes: AtomicU64,
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSource")
            .field("fetcher", &self.fetcher)
            .field("refreshes", &self.refreshes())
            .finish_non_exhaustive()
    }
}

impl TokenSource {
    /// A source over `fetcher`, fetching with the process-wide HTTP client.
    pub fn new(fetcher: impl TokenFetcher + 'static) -> Self {
        Self {
            fetcher: Box::new(fetcher),
            client: HttpClient::shared(),
            cached: Mutex::new(None),
            refresh: tokio::sync::Mutex::new(()),
            refreshes: AtomicU64::new(0),
        }
    }

    /// With this HTTP client for the token requests (a proxy, custom roots).
    #[must_use]
    pub fn with_client(mut self, client: HttpClient) -> Self {
        self.client = client;
        self
    }

    /// How many fetches were started (successful or not).
    pub fn refreshes(&self) -> u64 {
        self.refreshes.load(Ordering::Relaxed)
    }

    /// The `Authorization: Bearer …` value, from the cache or a refresh.
    ///
    /// # Errors
    ///
    /// The fetcher's error when no unexpired token is left and the refresh failed.
    pub async fn authorization(&self) -> Result<HeaderValue, BackendError> {
        if let Some(header) = self.current(|cached, now| now < cached.refresh_at) {
            return Ok(header);
        }
        // Due: one caller refreshes, the others wait here and then find the new token.
        let _refreshing = self.refresh.lock().await;
        if let Some(header) = self.current(|cached, now| now < cached.refresh_at) {
            return Ok(header);
        }
        self.refreshes.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        match self.fetcher.fetch(self.client.reqwest()).await {
            Ok(token) => {
                let header = bearer(&token.value)?;
                let margin = MAX_MARGIN.min(token.lifetime / 2);
                let cached = Cached {
                    header: header.clone(),
                    refresh_at: started + token.lifetime.saturating_sub(margin),
                    expires_at: started + token.lifetime,
                };
                *self.lock() = Some(cached);
                Ok(header)
            }
            Err(error) => match self.current(|cached, now| now < cached.expires_at) {
                Some(header) => {
                    tracing::warn!(
                        error = %error.message,
                        "refreshing the access token failed; the current one has not expired yet"
                    );
                    Ok(header)
                }
                None => Err(error),
            },
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Cached>> {
        // A panic while holding this lock cannot leave the Option half-written.
        self.cached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn current(&self, usable: impl Fn(&Cached, Instant) -> bool) -> Option<HeaderValue> {
        let now = Instant::now();
        self.lock()
            .as_ref()
            .filter(|cached| usable(cached, now))
            .map(|cached| cached.header.clone())
    }
}

impl RequestAuth for TokenSource {
    fn authorize<'a>(&'a self, request: &'a mut reqwest::Request) -> AuthFuture<'a> {
        Box::pin(async move {
            let header = self.authorization().await?;
            request.headers_mut().insert(AUTHORIZATION, header);
            Ok(())
        })
    }
}

fn bearer(token: &str) -> Result<HeaderValue, BackendError> {
    let mut header = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
        BackendError::new(
            BackendErrorKind::Authentication,
            "the token endpoint returned an access token that cannot be sent in an HTTP header",
        )
    })?;
    header.set_sensitive(true);
    Ok(header)
}

/// An OAuth2 token response (RFC 6749 §5.1), and the metadata servers' same shape.
#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    expires_in: Option<Seconds>,
}

/// `expires_in` as a number or, from some endpoints, a string of digits.
#[derive(Deserialize)]
#[serde(untagged)]
enum Seconds {
    Number(u64),
    Text(String),
}

/// An OAuth2 error response (RFC 6749 §5.2): the code and description, never a secret.
#[derive(Deserialize)]
struct TokenError {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

/// Sends one token request and reads the token from the answer.
///
/// `what` names the credential in messages ("the Google service account `x@y`"), `hint` what
/// to set when it is refused.
pub(crate) async fn request_token(
    request: reqwest::RequestBuilder,
    what: &str,
    hint: &str,
) -> Result<AccessToken, BackendError> {
    let response = request
        .timeout(FETCH_TIMEOUT)
        .send()
        .await
        .map_err(|error| {
            // Without the URL: a token URL may carry a tenant or a query worth keeping private.
            let error = error.without_url();
            BackendError::new(
                if error.is_timeout() {
                    BackendErrorKind::Timeout
                } else {
                    BackendErrorKind::Connection
                },
                format!("could not reach the token endpoint for {what}: {error}"),
            )
        })?;
    let status = response.status();
    let body = response.bytes().await.map_err(|error| {
        BackendError::new(
            BackendErrorKind::Connection,
            format!(
                "the token endpoint for {what} broke off its answer: {}",
                error.without_url()
            ),
        )
    })?;
    if !status.is_success() {
        let detail = serde_json::from_slice::<TokenError>(&body)
            .map(|error| match error.error_description {
                Some(description) => format!("{}: {}", error.error, clip(&description)),
                None => error.error,
            })
            .unwrap_or_else(|_| format!("HTTP {}", status.as_u16()));
        let kind = if status.is_server_error() {
            BackendErrorKind::Server
        } else if status.as_u16() == 429 {
            BackendErrorKind::RateLimited
        } else {
            BackendErrorKind::Authentication
        };
        let mut error = BackendError::new(
            kind,
            format!(
                "the token endpoint refused {what} (HTTP {}, {detail}); {hint}",
                status.as_u16()
            ),
        );
        error.status = Some(status.as_u16());
        return Err(error);
    }
    let token: TokenResponse = serde_json::from_slice(&body).map_err(|_| {
        BackendError::new(
            BackendErrorKind::Authentication,
            format!("the token endpoint for {what} answered without an access token; {hint}"),
        )
    })?;
    let lifetime = match token.expires_in {
        Some(Seconds::Number(seconds)) => Duration::from_secs(seconds),
        Some(Seconds::Text(text)) => text
            .trim()
            .parse()
            .map_or(DEFAULT_LIFETIME, Duration::from_secs),
        None => DEFAULT_LIFETIME,
    };
    Ok(AccessToken::new(token.access_token, lifetime))
}

/// A description from a token endpoint, cut short (they can be long, never secret).
fn clip(text: &str) -> &str {
    match text.char_indices().nth(300) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// `application/x-www-form-urlencoded` for a token request's fields.
pub(crate) fn form(fields: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (index, (name, value)) in fields.iter().enumerate() {
        if index > 0 {
            out.push('&');
        }
        encode(name, &mut out);
        out.push('=');
        encode(value, &mut out);
    }
    out
}

fn encode(text: &str, out: &mut String) {
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(char::from(byte));
            }
            b' ' => out.push('+'),
            other => {
                const HEX: &[u8; 16] = b"0123456789ABCDEF";
                out.push('%');
                out.push(char::from(HEX[usize::from(other >> 4)]));
                out.push(char::from(HEX[usize::from(other & 15)]));
            }
        }
    }
}

/// A form POST to a token endpoint, ready to send.
pub(crate) fn form_post(
    client: &reqwest::Client,
    url: &str,
    fields: &[(&str, &str)],
) -> reqwest::RequestBuilder {
    client
        .post(url)
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .header(reqwest::header::ACCEPT, "application/json")
        .body(form(fields))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "token_tests.rs"]
mod tests;
