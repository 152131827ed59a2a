//! What every HTTP backend is configured with: the client, retries, timeouts, extra headers.

use std::sync::OnceLock;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::error::Error;

/// A handle to an HTTP client and its connection pool.
///
/// Cloning is cheap and shares the pool. [`HttpClient::shared`] (the default of every backend)
/// is one process-wide client, so all backends reuse the same warm connections; build your own
/// with [`HttpClient::new`] for a different connect timeout, or wrap a configured
/// `reqwest::Client` (proxies, custom roots) with [`HttpClient::from_reqwest`].
#[derive(Debug, Clone)]
pub struct HttpClient {
    inner: reqwest::Client,
}

impl HttpClient {
    /// The process-wide client: rustls with the bundled web PKI roots, HTTP/1.1 and HTTP/2,
    /// a 10 s connect timeout, TCP keep-alive.
    pub fn shared() -> Self {
        static SHARED: OnceLock<HttpClient> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                Self::new(Some(Duration::from_secs(10))).unwrap_or_else(|_| Self {
                    inner: reqwest::Client::new(),
                })
            })
            .clone()
    }

    /// A new client (its own pool) with the given connect timeout.
    ///
    /// # Errors
    ///
    /// [`Error::Client`] when the TLS backend cannot be initialised.
    pub fn new(connect_timeout: Option<Duration>) -> Result<Self, Error> {
        let mut builder = reqwest::Client::builder()
            .tcp_keepalive(Duration::from_secs(60))
            .pool_idle_timeout(Duration::from_secs(90));
        if let Some(timeout) = connect_timeout {
            builder = builder.connect_timeout(timeout);
        }
        let inner = builder
            .build()
            .map_err(|error| Error::Client(error.to_string()))?;
        Ok(Self { inner })
    }

    /// Wraps a client you configured yourself.
    pub fn from_reqwest(client: reqwest::Client) -> Self {
        Self { inner: client }
    }

    pub(crate) fn reqwest(&self) -> &reqwest::Client {
        &self.inner
    }
}

impl Default for HttpClient {
    fn default() -> Self {
        Self::shared()
    }
}

/// How long a model call may take. `None` means no limit. Every timeout ends the call with a
/// [`Timeout`](agent_types::BackendErrorKind::Timeout) error carrying the partial message, and
/// dropping the stream cancels the call at any point regardless.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timeouts {
    /// The whole call, from sending the request to the last byte (retries included).
    pub total: Option<Duration>,
    /// The longest silence: waiting for the response headers, or between two chunks of the
    /// body. Reasoning models may think for minutes before the first byte of a non-streaming
    /// answer, hence the generous default.
    pub idle: Option<Duration>,
}

impl Default for Timeouts {
    /// 10 minutes in total, 5 minutes of silence.
    fn default() -> Self {
        Self {
            total: Some(Duration::from_secs(600)),
            idle: Some(Duration::from_secs(300)),
        }
    }
}

impl Timeouts {
    /// No limits (the caller's cancellation is the only end).
    pub fn none() -> Self {
        Self {
            total: None,
            idle: None,
        }
    }

    /// With a limit on the whole call.
    #[must_use]
    pub fn with_total(mut self, total: Option<Duration>) -> Self {
        self.total = total;
        self
    }

    /// With a limit on silence.
    #[must_use]
    pub fn with_idle(mut self, idle: Option<Duration>) -> Self {
        self.idle = idle;
        self
    }
}

/// When and how often a failed call is sent again.
///
/// A call is retried only when its error [is retryable](agent_types::BackendError::is_retryable)
/// (connection failures, timeouts, 429, 5xx, overloaded) **and nothing of the response has
/// reached the caller yet**, so a retry never duplicates output. The wait is exponential
/// (`initial_backoff × 2ⁿ`, capped at `max_backoff`) with jitter (a random 50–100 % of it), or
/// exactly what the provider asked for in `Retry-After` / `retry-after-ms` when it did. A
/// provider asking for longer than `max_retry_after` gets no retry: the error goes back with
/// its `retry_after` for the caller to schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 disables retrying).
    pub max_retries: u32,
    /// The first backoff.
    pub initial_backoff: Duration,
    /// The largest computed backoff.
    pub max_backoff: Duration,
    /// The longest `Retry-After` that is waited out.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    /// Two retries, 500 ms doubling up to 8 s, `Retry-After` honoured up to 60 s.
    fn default() -> Self {
        Self {
            max_retries: 2,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// Never retry.
    pub fn none() -> Self {
        Self {
            max_retries: 0,
            ..Self::default()
        }
    }

    /// With this many retries.
    #[must_use]
    pub fn with_max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = max_retries;
        self
    }

    /// With this first backoff and cap.
    #[must_use]
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max;
        self
    }

    /// With this longest `Retry-After` waited out.
    #[must_use]
    pub fn with_max_retry_after(mut self, max: Duration) -> Self {
        self.max_retry_after = max;
        self
    }

    /// The wait before retry number `retry` (0-based), with `unit` in `[0, 1)` as the jitter.
    pub(crate) fn backoff(&self, retry: u32, unit: f64) -> Duration {
        let exponential = self
            .initial_backoff
            .saturating_mul(2u32.saturating_pow(retry.min(30)));
        let capped = exponential.min(self.max_backoff);
        capped.mul_f64(0.5 + unit.clamp(0.0, 1.0) * 0.5)
    }
}

/// The HTTP settings every provider adapter shares.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct HttpOptions {
    /// The client (and connection pool) to send with.
    pub client: HttpClient,
    /// Retries.
    pub retry: RetryPolicy,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Headers added to every request (after the adapter's own, so they can override them).
    pub headers: HeaderMap,
    /// Signs or authorizes every attempt just before it is sent (cloud credentials).
    pub auth: Option<std::sync::Arc<dyn super::RequestAuth>>,
}

impl HttpOptions {
    /// With this client.
    #[must_use]
    pub fn with_client(mut self, client: HttpClient) -> Self {
        self.client = client;
        self
    }

    /// With this retry policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// With these timeouts.
    #[must_use]
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// With this authentication step, run for every attempt (retries are signed again).
    #[must_use]
    pub fn with_auth(mut self, auth: std::sync::Arc<dyn super::RequestAuth>) -> Self {
        self.auth = Some(auth);
        self
    }

    /// With one more header on every request.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidHeader`] when the name or value is not a valid HTTP header.
    pub fn with_header(mut self, name: &str, value: &str) -> Result<Self, Error> {
        let invalid = || Error::InvalidHeader(name.to_owned());
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid())?;
        let mut value = HeaderValue::from_str(value).map_err(|_| invalid())?;
        value.set_sensitive(is_secret(&name));
        self.headers.insert(name, value);
        Ok(self)
    }
}

/// Headers whose values must never be logged.
pub(crate) fn is_secret(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "authorization" | "x-api-key" | "x-goog-api-key" | "api-key" | "proxy-authorization"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_and_jitters_within_half_to_full() {
        let policy = RetryPolicy::default();
        assert_eq!(
            policy.backoff(0, 1.0),
            Duration::from_millis(1000).min(Duration::from_millis(500))
        );
        assert_eq!(policy.backoff(0, 0.0), Duration::from_millis(250));
        assert_eq!(policy.backoff(1, 0.0), Duration::from_millis(500));
        assert_eq!(policy.backoff(10, 0.0), Duration::from_secs(4));
        assert_eq!(
            policy.backoff(40, 0.99),
            Duration::from_secs(8).mul_f64(0.995)
        );
    }

    #[test]
    fn invalid_headers_are_rejected_by_name() {
        let error = HttpOptions::default()
            .with_header("bad header", "x")
            .unwrap_err();
        assert!(error.to_string().contains("bad header"), "{error}");
        let options = HttpOptions::default()
            .with_header("Authorization", "Bearer secret")
            .unwrap();
        assert!(options.headers["authorization"].is_sensitive());
    }
}
