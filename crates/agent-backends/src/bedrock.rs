//! The adapter for AWS Bedrock's Converse API (`POST {base}/model/{model}/converse`, and
//! `/converse-stream`, which answers in AWS's binary event stream,
//! [`EventStreamParser`](crate::framing::EventStreamParser)).
//!
//! [`Bedrock`] speaks one wire format for every model Bedrock hosts (Claude, Nova, Llama,
//! Mistral, …). The model is a model id (`anthropic.claude-sonnet-4-5-20250929-v1:0`), an
//! inference-profile id (`us.anthropic.claude-…`, `global.…`) or an ARN; it is percent-encoded
//! into the URL path.
//!
//! # Authentication
//!
//! Every attempt is signed with SigV4 ([`auth::SigV4`]) from the [`auth::CredentialChain`]
//! (environment, web identity, profile files), or carries a Bedrock API key
//! ([`Bedrock::with_api_key`], `Authorization: Bearer`).
//!
//! # Requests
//!
//! - `system` blocks, `messages` (roles alternate: adjacent turns of one role are merged, tool
//!   results first in a user turn), `toolConfig` (`toolSpec`s; tool choice `auto` → none sent,
//!   `required` → `any`, a named tool → `tool`; Converse has no `none`, so the tools stay and
//!   the model chooses), `inferenceConfig` (`maxTokens`, `temperature`, `topP`,
//!   `stopSequences`).
//! - Content: text, images (`png`, `jpeg`, `gif`, `webp`; bytes or `s3://`), documents (pdf,
//!   csv, doc(x), xls(x), html, txt, md; bytes or `s3://`), `toolUse`, `toolResult` (text, JSON,
//!   image and document content; `status: error` for an error result), `reasoningContent`
//!   (signed reasoning and redacted reasoning round-tripped; unsigned reasoning left out).
//! - Thinking: for Claude models, `additionalModelRequestFields.thinking` with the budget (the
//!   effort mapped as the Anthropic adapter maps it); other models take their reasoning switch
//!   through the request extras.
//! - Extras merge into the top level of the body (say `guardrailConfig`,
//!   `performanceConfig`).
//!
//! # Cache points
//!
//! [`Bedrock::with_cache`] uses the Anthropic adapter's two-breakpoint layout: tools sorted by
//! name and the static system prompt closed by one `cachePoint` (after the tools when there is
//! no system prompt), and one `cachePoint` after the newest message. History system notes
//! travel in the user turns as `<system-reminder>` text so the cached prefix stays byte-stable.
//!
//! # Responses
//!
//! | Converse `stopReason`                        | [`StopReason`](agent_types::StopReason) |
//! |----------------------------------------------|------------------------------------------|
//! | `end_turn`, `stop_sequence`                  | `stop`                                   |
//! | `max_tokens`, `model_context_window_exceeded`| `length`                                 |
//! | `tool_use`                                   | `tool_calls`                             |
//! | `guardrail_intervened`, `content_filtered`   | `content_filter`                         |
//!
//! Usage: `inputTokens` excludes the cache, so the normalized input is `inputTokens +
//! cacheReadInputTokens + cacheWriteInputTokens`; writes count as five-minute writes.
//!
//! Errors: HTTP errors carry `{"message"}` (and sometimes `__type`); the status says the
//! rest: 429 (`ThrottlingException`) is rate limited and retried, 400 (`ValidationException`)
//! an invalid request, 403 authentication, 424/500 a server error, 503
//! (`ServiceUnavailableException`) overloaded. Inside a stream an exception is an event-stream
//! message with `:message-type exception` (`throttlingException`, `validationException`,
//! `modelStreamErrorException`, `internalServerException`, `serviceUnavailableException`),
//! mapped the same way.

pub mod auth;
mod decode;
mod request;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use agent_types::{
    Backend, BackendError, BackendErrorKind, BackendStream, Capabilities, ModelRequest,
};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};

use crate::http::driver::{Prepared, Protocol};
use crate::http::status::{ProviderError, response_error, str_field};
use crate::http::{Connection, HttpOptions, RequestAuth, RetryPolicy, Timeouts, json_body};

/// The variable holding a Bedrock API key.
pub const API_KEY_VARIABLE: &str = "AWS_BEARER_TOKEN_BEDROCK";

/// The Bedrock runtime endpoint of `region`.
pub fn endpoint(region: &str) -> String {
    format!("https://bedrock-runtime.{region}.amazonaws.com")
}

/// The region in the environment: `AWS_REGION`, else `AWS_DEFAULT_REGION`.
pub fn region_from_env() -> Option<String> {
    ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .find(|value| !value.trim().is_empty())
        .map(|value| value.trim().to_owned())
}

/// The region of a Bedrock runtime URL (`https://bedrock-runtime.eu-west-1.amazonaws.com`).
pub fn region_of(url: &str) -> Option<&str> {
    let host = url.split("://").nth(1)?.split(['/', ':']).next()?;
    let rest = host
        .strip_prefix("bedrock-runtime.")
        .or_else(|| host.strip_prefix("bedrock-runtime-fips."))?;
    rest.split('.').next().filter(|region| !region.is_empty())
}

/// The backend for configuration files and command lines: the region from `base_url` or the
/// environment, a Bedrock API key when `key` (or `AWS_BEARER_TOKEN_BEDROCK`) is given, else
/// SigV4 over the environment's credential chain, checked now so a missing setup fails at
/// start-up rather than on the first call.
///
/// # Errors
///
/// [`Error::MissingCredentials`](crate::Error::MissingCredentials) naming the variables to set
/// when there is no region (and no base URL) or no credentials of any kind.
pub fn connect(base_url: Option<&str>, key: Option<String>) -> Result<Bedrock, crate::Error> {
    let missing = |message: String| crate::Error::MissingCredentials {
        api: "bedrock",
        message,
    };
    let region = match (base_url.and_then(region_of), region_from_env(), base_url) {
        (Some(region), _, _) => region.to_owned(),
        (None, Some(region), _) => region,
        // A proxy or VPC endpoint URL without the region in it: sign for the default.
        (None, None, Some(_)) => "us-east-1".to_owned(),
        (None, None, None) => {
            return Err(missing(
                "no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION), e.g. AWS_REGION=us-east-1"
                    .to_owned(),
            ));
        }
    };
    let mut backend = Bedrock::new(region);
    if let Some(url) = base_url {
        backend = backend.with_base_url(url);
    }
    let key = key.or_else(|| {
        std::env::var(API_KEY_VARIABLE)
            .ok()
            .filter(|key| !key.trim().is_empty())
    });
    match key {
        Some(key) => backend
            .with_api_key(&key)
            .map_err(|error| missing(error.message)),
        None => {
            auth::CredentialChain::from_env()
                .describe()
                .map_err(|error| missing(error.message))?;
            Ok(backend)
        }
    }
}

/// The cache points' lifetime.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum CacheTtl {
    /// Five minutes (Bedrock's default; no `ttl` is sent).
    #[default]
    FiveMinutes,
    /// One hour (`"ttl": "1h"`, for the models that offer it).
    OneHour,
}

/// A backend for AWS Bedrock's Converse API.
///
/// ```
/// use agent_backends::bedrock::Bedrock;
///
/// let backend = Bedrock::new("eu-west-1");
/// assert_eq!(backend.base_url(), "https://bedrock-runtime.eu-west-1.amazonaws.com");
/// assert_eq!(backend.region(), "eu-west-1");
/// ```
#[derive(Debug, Clone)]
pub struct Bedrock {
    connection: Connection,
    capabilities: Capabilities,
    region: String,
    auth: Arc<dyn RequestAuth>,
    cache: Option<CacheTtl>,
}

impl Bedrock {
    /// A backend for `region`, signing with SigV4 from the environment's credential chain
    /// (resolved on the first call; see [`auth::CredentialChain`]).
    pub fn new(region: impl Into<String>) -> Self {
        let region = region.into();
        let auth = Arc::new(auth::SigV4::new(
            region.clone(),
            "bedrock",
            Arc::new(auth::CredentialChain::from_env()),
        ));
        let mut connection = Connection::new(&endpoint(&region), None);
        connection.http = connection.http.with_auth(auth.clone());
        Self {
            connection,
            capabilities: Capabilities {
                tools: true,
                streaming: true,
                parallel_tool_calls: true,
                thinking: true,
                prompt_caching: true,
                usage_reporting: true,
                structured_output: false,
                tool_search: false,
            },
            region,
            auth,
            cache: None,
        }
    }

    /// With this authentication step instead (a [`auth::SigV4`] over other credentials, a
    /// fixed-clock signer for tests, a [`auth::BearerToken`]).
    #[must_use]
    pub fn with_auth(mut self, auth: Arc<dyn RequestAuth>) -> Self {
        self.connection.http = self.connection.http.with_auth(auth.clone());
        self.auth = auth;
        self
    }

    /// With a Bedrock API key (`Authorization: Bearer`) instead of SigV4.
    ///
    /// # Errors
    ///
    /// An [`Authentication`](BackendErrorKind::Authentication) error for a key that cannot be
    /// sent in a header.
    pub fn with_api_key(self, key: &str) -> Result<Self, BackendError> {
        Ok(self.with_auth(Arc::new(auth::BearerToken::new(key)?)))
    }

    /// With the two-cache-point layout (off by default). See the
    /// [module documentation](self#cache-points).
    #[must_use]
    pub fn with_cache(mut self, ttl: CacheTtl) -> Self {
        self.cache = Some(ttl);
        self
    }

    /// With a different base URL (a VPC endpoint, a proxy, a replay server).
    #[must_use]
    pub fn with_base_url(mut self, base_url: impl AsRef<str>) -> Self {
        self.connection.base_url = base_url.as_ref().trim_end_matches('/').to_owned();
        self
    }

    /// With these HTTP settings; the authentication step stays unless `http` brings its own.
    #[must_use]
    pub fn with_http(mut self, http: HttpOptions) -> Self {
        match &http.auth {
            Some(auth) => self.auth = auth.clone(),
            None => {
                let auth = self.auth.clone();
                self.connection.http = http.with_auth(auth);
                return self;
            }
        }
        self.connection.http = http;
        self
    }

    /// With this retry policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.connection.http.retry = retry;
        self
    }

    /// With these timeouts.
    #[must_use]
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.connection.http.timeouts = timeouts;
        self
    }

    /// With one more header on every request (signed with the rest).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidHeader`](crate::Error::InvalidHeader) for a header that is not valid
    /// HTTP.
    pub fn with_header(mut self, name: &str, value: &str) -> Result<Self, crate::Error> {
        self.connection.http = self.connection.http.with_header(name, value)?;
        Ok(self)
    }

    /// With different capabilities.
    #[must_use]
    pub fn with_capabilities(mut self, capabilities: Capabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// The base URL requests go to.
    pub fn base_url(&self) -> &str {
        &self.connection.base_url
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The URL of a call to `model`.
    fn url(&self, model: &str, stream: bool) -> String {
        let mut path = String::with_capacity(model.len() + 24);
        path.push_str("/model/");
        for byte in model.bytes() {
            if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
                path.push(char::from(byte));
            } else {
                path.push_str(&format!("%{byte:02X}"));
            }
        }
        path.push_str(if stream {
            "/converse-stream"
        } else {
            "/converse"
        });
        self.connection.url(&path)
    }
}

impl Backend for Bedrock {
    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn provider_name(&self) -> &str {
        "bedrock"
    }

    fn stream<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        crate::http::driver::stream(self, request)
    }

    fn stream_unassembled<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        crate::http::driver::stream_unassembled(self, request)
    }
}

impl Protocol for Bedrock {
    type Decoder = decode::WireDecoder;

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn http(&self) -> &HttpOptions {
        &self.connection.http
    }

    fn prepare(&self, request: &ModelRequest) -> Result<Prepared, BackendError> {
        if request.model.is_empty() {
            return Err(BackendError::new(
                BackendErrorKind::InvalidRequest,
                "Bedrock needs a model id, inference profile id or ARN",
            ));
        }
        let cache = self.cache.map(|ttl| {
            request::CachePoint::new(match ttl {
                CacheTtl::FiveMinutes => None,
                CacheTtl::OneHour => Some("1h"),
            })
        });
        let body = request::build(request, cache)?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            ACCEPT,
            HeaderValue::from_static(if request.stream {
                "application/vnd.amazon.eventstream"
            } else {
                "application/json"
            }),
        );
        Ok(Prepared {
            url: self.url(&request.model, request.stream),
            headers,
            body: json_body(&body)?,
        })
    }

    fn decoder(&self, _request: &ModelRequest) -> decode::WireDecoder {
        decode::WireDecoder::new()
    }

    fn error(&self, status: u16, body: &[u8]) -> BackendError {
        response_error(status, body, describe_error)
    }
}

/// Reads Bedrock's error document, `{"message": …}` with an optional `__type`.
fn describe_error(json: &serde_json::Value) -> Option<ProviderError> {
    let message = str_field(json, "message").or_else(|| str_field(json, "Message"));
    let kind = str_field(json, "__type").map(|kind| kind.rsplit('#').next().unwrap_or(kind));
    let text = match (kind, message) {
        (Some(kind), Some(message)) => format!("{kind}: {message}"),
        (Some(kind), None) => kind.to_owned(),
        (None, Some(message)) => message.to_owned(),
        (None, None) => return None,
    };
    Some(ProviderError::new(text).with_kind(kind.and_then(error_kind)))
}

/// The kind an AWS exception name implies (either capitalization).
fn error_kind(name: &str) -> Option<BackendErrorKind> {
    let name = name.split(':').next().unwrap_or(name);
    let lower = name.to_ascii_lowercase();
    Some(match lower.as_str() {
        "throttlingexception" => BackendErrorKind::RateLimited,
        "servicequotaexceededexception" => BackendErrorKind::QuotaExceeded,
        "serviceunavailableexception" => BackendErrorKind::Overloaded,
        "internalserverexception" | "modelstreamerrorexception" | "modelerrorexception" => {
            BackendErrorKind::Server
        }
        "modeltimeoutexception" => BackendErrorKind::Timeout,
        "accessdeniedexception" | "unrecognizedclientexception" | "expiredtokenexception" => {
            BackendErrorKind::Authentication
        }
        "validationexception" | "resourcenotfoundexception" | "modelnotreadyexception" => {
            BackendErrorKind::InvalidRequest
        }
        _ => return None,
    })
}

/// An exception message inside a ConverseStream.
fn exception(name: &str, json: &serde_json::Value) -> BackendError {
    let message = str_field(json, "message")
        .or_else(|| str_field(json, "Message"))
        .unwrap_or("no message");
    BackendError::new(
        error_kind(name).unwrap_or(BackendErrorKind::Server),
        format!(
            "{}: {}",
            crate::http::status::clip(name, 80),
            crate::http::status::clip(message, 500)
        ),
    )
}
