//! What a server allows: [`ServerOptions`] for every transport, [`HttpOptions`] for HTTP.

use std::time::Duration;

use agent_tools::{DEFAULT_MAX_BINARY_BYTES, TruncationPolicy, ValidationMode};

/// How an [`McpServer`](super::McpServer) runs calls, on any transport.
///
/// The defaults are the loop's: strict validation, results cut at 65,536 bytes of text and
/// 5 MB of images and files.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerOptions {
    /// The name the server gives in `initialize` (`agentry` by default).
    pub name: String,
    /// The version it gives (this crate's by default).
    pub version: String,
    /// Instructions for the client's model, sent in `initialize`.
    pub instructions: Option<String>,
    /// How arguments are checked (the loop's `tool_arg_validation`); strict by default.
    pub validation: ValidationMode,
    /// The cap on a result's text, as in the loop (`tool_result_max_bytes`).
    pub truncation: TruncationPolicy,
    /// The cap on a result's image and file bytes (`tool_result_max_binary_bytes`).
    pub max_binary_bytes: usize,
    /// Calls running at once on one connection (one stdio peer, one HTTP session); a call
    /// past it is refused at once with an `isError` result, not queued. 16 by default.
    pub max_concurrent_calls: usize,
    /// How long a call may run before it is cancelled and answered with an error
    /// (5 minutes by default; `None`: no limit).
    pub call_timeout: Option<Duration>,
    /// The longest progress message sent for one handler delta, in bytes (longer ones are
    /// cut at a character boundary). 4,096 by default.
    pub max_progress_bytes: usize,
    /// The largest JSON-RPC message read from a stdio peer, in bytes (a longer line is
    /// dropped). 4 MiB by default.
    pub max_message_bytes: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            name: "agentry".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            instructions: None,
            validation: ValidationMode::Strict,
            truncation: TruncationPolicy::default(),
            max_binary_bytes: DEFAULT_MAX_BINARY_BYTES,
            max_concurrent_calls: 16,
            call_timeout: Some(Duration::from_secs(300)),
            max_progress_bytes: 4096,
            max_message_bytes: 4 * 1024 * 1024,
        }
    }
}

impl ServerOptions {
    /// Sets the server's name and version.
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.name = name.into();
        self.version = version.into();
        self
    }

    /// Sets the validation mode.
    #[must_use]
    pub fn with_validation(mut self, mode: ValidationMode) -> Self {
        self.validation = mode;
        self
    }

    /// Sets the text cap of results.
    #[must_use]
    pub fn with_truncation(mut self, policy: TruncationPolicy) -> Self {
        self.truncation = policy;
        self
    }

    /// Sets the binary cap of results.
    #[must_use]
    pub fn with_max_binary_bytes(mut self, max_bytes: usize) -> Self {
        self.max_binary_bytes = max_bytes;
        self
    }

    /// Sets the calls in flight per connection (at least 1).
    #[must_use]
    pub fn with_max_concurrent_calls(mut self, calls: usize) -> Self {
        self.max_concurrent_calls = calls.max(1);
        self
    }

    /// Sets the per-call time limit.
    #[must_use]
    pub fn with_call_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.call_timeout = timeout;
        self
    }
}

/// The bounds of the streamable HTTP transport.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HttpOptions {
    /// Sessions alive at once, over all callers; an `initialize` past it gets 503. 256 by
    /// default.
    pub max_sessions: usize,
    /// Sessions alive at once for one caller (by principal); an `initialize` past it is
    /// refused with a JSON-RPC error. 16 by default.
    pub max_sessions_per_caller: usize,
    /// A session with no request for this long is closed. 10 minutes by default.
    pub session_idle: Duration,
    /// The largest POST body, in bytes (413 past it). 4 MiB by default.
    pub max_body_bytes: usize,
    /// The `Host` values accepted (DNS-rebinding protection): `None` keeps rmcp's default,
    /// loopback names only; an empty list accepts any host (behind bearer authentication).
    pub allowed_hosts: Option<Vec<String>>,
    /// The SSE keep-alive ping interval (15 s by default).
    pub keep_alive: Option<Duration>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            max_sessions: 256,
            max_sessions_per_caller: 16,
            session_idle: Duration::from_secs(600),
            max_body_bytes: 4 * 1024 * 1024,
            allowed_hosts: None,
            keep_alive: Some(Duration::from_secs(15)),
        }
    }
}

impl HttpOptions {
    /// Sets the cap on live sessions (at least 1).
    #[must_use]
    pub fn with_max_sessions(mut self, sessions: usize) -> Self {
        self.max_sessions = sessions.max(1);
        self
    }

    /// Sets the cap on one caller's live sessions (at least 1).
    #[must_use]
    pub fn with_max_sessions_per_caller(mut self, sessions: usize) -> Self {
        self.max_sessions_per_caller = sessions.max(1);
        self
    }

    /// Sets the idle time after which a session is closed.
    #[must_use]
    pub fn with_session_idle(mut self, idle: Duration) -> Self {
        self.session_idle = idle;
        self
    }

    /// Sets the largest request body.
    #[must_use]
    pub fn with_max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Sets the accepted `Host` values (empty: any).
    #[must_use]
    pub fn with_allowed_hosts<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allowed_hosts = Some(hosts.into_iter().map(Into::into).collect());
        self
    }
}
