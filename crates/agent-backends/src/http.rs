//! The HTTP machinery the provider adapters share: one client and connection pool
//! ([`HttpClient`]), retries ([`RetryPolicy`]), timeouts ([`Timeouts`]) and per-backend
//! settings ([`HttpOptions`]).
//!
//! Every adapter runs its calls through one driver that sends the request, retries failures
//! that happen before any output reached the caller, enforces the timeouts, picks the body's
//! framing (SSE, NDJSON, JSON array, or one JSON document) from the content type, and, when a
//! stream breaks, returns an error carrying the message assembled so far.

// With `http` alone (no adapter, no replay) nothing drives the driver yet.
mod auth;
#[cfg_attr(
    not(any(
        feature = "openai",
        feature = "openai-responses",
        feature = "anthropic",
        feature = "gemini",
        feature = "ollama",
        feature = "replay"
    )),
    allow(dead_code)
)]
pub(crate) mod driver;
#[cfg(any(feature = "gemini", feature = "ollama"))]
pub(crate) mod extras;
pub(crate) mod headers;
mod options;
#[cfg_attr(
    not(any(
        feature = "openai",
        feature = "openai-responses",
        feature = "anthropic",
        feature = "gemini",
        feature = "ollama",
        feature = "replay"
    )),
    allow(dead_code)
)]
pub(crate) mod status;

pub use auth::{AuthFuture, RequestAuth};
pub use options::{HttpClient, HttpOptions, RetryPolicy, Timeouts};

use agent_types::{BackendError, BackendErrorKind};
use bytes::Bytes;

/// Where a provider lives and how to authenticate: the part of every adapter's configuration
/// that is the same for all of them.
#[derive(Clone)]
#[allow(dead_code)]
pub(crate) struct Connection {
    pub(crate) base_url: String,
    pub(crate) api_key: Option<String>,
    pub(crate) http: HttpOptions,
    /// The request headers, built once (see [`headers`]).
    pub(crate) headers: headers::HeaderCache,
}

impl Connection {
    pub(crate) fn new(base_url: &str, api_key: Option<String>) -> Self {
        Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key,
            http: HttpOptions::default(),
            headers: headers::HeaderCache::default(),
        }
    }

    /// The headers of every request: the adapter's (`build`, called only when the key or the
    /// configured headers changed) with [`HttpOptions::headers`] merged over them.
    #[allow(dead_code)]
    pub(crate) fn request_headers(
        &self,
        build: impl FnOnce() -> Result<reqwest::header::HeaderMap, BackendError>,
    ) -> Result<reqwest::header::HeaderMap, BackendError> {
        self.headers
            .get(self.api_key.as_deref(), &self.http.headers, build)
    }

    /// `base_url` followed by `path` (which starts with `/`).
    pub(crate) fn url(&self, path: &str) -> String {
        let mut url = String::with_capacity(self.base_url.len() + path.len());
        url.push_str(&self.base_url);
        url.push_str(path);
        url
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key never reaches a log.
        f.debug_struct("Connection")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("http", &self.http)
            .finish()
    }
}

/// Serializes a request body.
pub(crate) fn json_body<T: serde::Serialize>(body: &T) -> Result<Bytes, BackendError> {
    serde_json::to_vec(body).map(Bytes::from).map_err(|error| {
        BackendError::new(
            BackendErrorKind::InvalidRequest,
            format!("the request could not be serialized: {error}"),
        )
    })
}

/// A header value from configuration, marked sensitive so it never reaches a log.
pub(crate) fn secret_header(value: &str) -> Result<reqwest::header::HeaderValue, BackendError> {
    let mut header = reqwest::header::HeaderValue::from_str(value).map_err(|_| {
        BackendError::new(
            BackendErrorKind::Authentication,
            "the API key contains characters that cannot be sent in an HTTP header",
        )
    })?;
    header.set_sensitive(true);
    Ok(header)
}

/// The builder methods every HTTP adapter has, and its `Backend` impl (the driver over its
/// `Protocol`). The type needs the fields `connection: Connection` and
/// `capabilities: Capabilities`.
// Bedrock writes its own builders (its authentication step survives `with_http`).
#[cfg_attr(feature = "bedrock", allow(unused_macros))]
macro_rules! http_builders {
    ($type:ty, $provider:literal) => {
        impl agent_types::Backend for $type {
            fn capabilities(&self) -> agent_types::Capabilities {
                self.capabilities
            }

            fn provider_name(&self) -> &str {
                $provider
            }

            fn stream<'a>(
                &'a self,
                request: &'a agent_types::ModelRequest,
            ) -> agent_types::BackendStream<'a> {
                $crate::http::driver::stream(self, request)
            }

            fn stream_unassembled<'a>(
                &'a self,
                request: &'a agent_types::ModelRequest,
            ) -> agent_types::BackendStream<'a> {
                $crate::http::driver::stream_unassembled(self, request)
            }
        }

        impl $type {
            /// With a different base URL (a proxy, a compatible server, a regional endpoint).
            #[must_use]
            pub fn with_base_url(mut self, base_url: impl AsRef<str>) -> Self {
                self.connection.base_url = base_url.as_ref().trim_end_matches('/').to_owned();
                self
            }

            /// With this API key.
            #[must_use]
            pub fn with_api_key(mut self, api_key: impl Into<String>) -> Self {
                self.connection.api_key = Some(api_key.into());
                self
            }

            /// With these HTTP settings (client, retries, timeouts, headers).
            #[must_use]
            pub fn with_http(mut self, http: $crate::http::HttpOptions) -> Self {
                self.connection.http = http;
                self
            }

            /// With this retry policy.
            #[must_use]
            pub fn with_retry(mut self, retry: $crate::http::RetryPolicy) -> Self {
                self.connection.http.retry = retry;
                self
            }

            /// With these timeouts.
            #[must_use]
            pub fn with_timeouts(mut self, timeouts: $crate::http::Timeouts) -> Self {
                self.connection.http.timeouts = timeouts;
                self
            }

            /// With one more header on every request.
            ///
            /// # Errors
            ///
            /// [`Error::InvalidHeader`](crate::Error::InvalidHeader) for a header that is not
            /// valid HTTP.
            pub fn with_header(
                mut self,
                name: &str,
                value: &str,
            ) -> Result<Self, $crate::error::Error> {
                self.connection.http = self.connection.http.with_header(name, value)?;
                Ok(self)
            }

            /// With different capabilities (for a compatible server or model that lacks some).
            #[must_use]
            pub fn with_capabilities(mut self, capabilities: agent_types::Capabilities) -> Self {
                self.capabilities = capabilities;
                self
            }

            /// The base URL requests go to.
            pub fn base_url(&self) -> &str {
                &self.connection.base_url
            }
        }
    };
}

#[allow(unused_imports)]
pub(crate) use http_builders;
