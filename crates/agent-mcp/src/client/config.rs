//! How to reach one MCP server and what to take from it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// One MCP server: how to reach it, the prefix its tools get, which of them to import, and
/// the bounds on what it may send.
///
/// ```
/// use agent_mcp::client::ServerConfig;
///
/// let everything = ServerConfig::stdio("everything", "npx", ["-y", "@modelcontextprotocol/server-everything"])
///     .allow(["echo", "get-sum"]);
/// let remote = ServerConfig::http("docs", "https://example.com/mcp").bearer("secret");
/// # let _ = (everything, remote);
/// ```
#[derive(Clone)]
pub struct ServerConfig {
    pub(crate) name: String,
    pub(crate) transport: Transport,
    pub(crate) allow: Option<Vec<String>>,
    pub(crate) deny: Vec<String>,
    pub(crate) call_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) limits: Limits,
}

/// How the server is reached.
#[derive(Clone)]
#[non_exhaustive]
pub enum Transport {
    /// A command spawned with piped stdin/stdout; its stderr lines go to `tracing`.
    Stdio {
        /// The program (looked up on `PATH`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to the inherited environment.
        env: Vec<(String, String)>,
        /// Its working directory (the current one when `None`).
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP at a URL.
    Http {
        /// The endpoint (`https://host/mcp`).
        url: String,
        /// Headers sent with every request.
        headers: Vec<(String, String)>,
        /// A bearer token sent as `Authorization: Bearer …`.
        bearer: Option<String>,
    },
}

// Header values and env values may be secrets (keys, tokens): Debug shows names only.
impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stdio {
                command,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &env.iter().map(|(k, _)| k).collect::<Vec<_>>())
                .field("cwd", cwd)
                .finish(),
            Self::Http {
                url,
                headers,
                bearer,
            } => f
                .debug_struct("Http")
                .field("url", url)
                .field(
                    "headers",
                    &headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
                )
                .field("bearer", &bearer.as_ref().map(|_| "<redacted>"))
                .finish(),
        }
    }
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("name", &self.name)
            .field("transport", &self.transport)
            .field("allow", &self.allow)
            .field("deny", &self.deny)
            .field("call_timeout", &self.call_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("limits", &self.limits)
            .finish()
    }
}

/// Bounds on what a server controls. A hostile or broken server cannot make the client buffer,
/// import or compile more than these. Build one with `..Limits::default()` so that bounds
/// added later keep their defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Tools imported from one server; listing stops with an error past it. Default 512.
    pub max_tools: usize,
    /// Pages of `tools/list` (or resources, prompts) followed. Default 64.
    pub max_pages: usize,
    /// Bytes of a tool's name as the server sends it. Default 256.
    pub max_name_bytes: usize,
    /// Bytes of a tool's description; longer ones are cut at a UTF-8 boundary. Default 8 KiB.
    pub max_description_bytes: usize,
    /// Bytes of a tool's input schema (compact JSON); a larger tool is skipped. Default 64 KiB.
    pub max_schema_bytes: usize,
    /// Nesting depth of a tool's input schema; a deeper tool is skipped. Default 32.
    pub max_schema_depth: usize,
    /// Bytes of one HTTP JSON response body. Default 16 MiB.
    pub max_response_bytes: usize,
    /// Bytes of one SSE event over HTTP. Default 16 MiB.
    pub max_sse_event_bytes: usize,
    /// Bytes of an HTTP error body kept for the error message. Default 4 KiB.
    pub max_error_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_tools: 512,
            max_pages: 64,
            max_name_bytes: 256,
            max_description_bytes: 8 * 1024,
            max_schema_bytes: 64 * 1024,
            max_schema_depth: 32,
            max_response_bytes: 16 * 1024 * 1024,
            max_sse_event_bytes: 16 * 1024 * 1024,
            max_error_body_bytes: 4 * 1024,
        }
    }
}

/// The default per-call timeout: 5 minutes.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(300);

/// The default time to start (or reach) a server and finish the MCP handshake: 30 seconds.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

impl ServerConfig {
    fn new(name: impl Into<String>, transport: Transport) -> Self {
        Self {
            name: name.into(),
            transport,
            allow: None,
            deny: Vec::new(),
            call_timeout: DEFAULT_CALL_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            limits: Limits::default(),
        }
    }

    /// A server spawned as `command args…`, talking MCP over its stdin and stdout.
    pub fn stdio<I, S>(name: impl Into<String>, command: impl Into<String>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::new(
            name,
            Transport::Stdio {
                command: command.into(),
                args: args.into_iter().map(Into::into).collect(),
                env: Vec::new(),
                cwd: None,
            },
        )
    }

    /// A server reached over streamable HTTP at `url`.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self::new(
            name,
            Transport::Http {
                url: url.into(),
                headers: Vec::new(),
                bearer: None,
            },
        )
    }

    /// Adds an environment variable for a stdio server (ignored over HTTP).
    #[must_use]
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let Transport::Stdio { env, .. } = &mut self.transport {
            env.push((key.into(), value.into()));
        }
        self
    }

    /// Sets a stdio server's working directory (ignored over HTTP).
    #[must_use]
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        if let Transport::Stdio { cwd, .. } = &mut self.transport {
            *cwd = Some(dir.into());
        }
        self
    }

    /// Adds a header sent with every HTTP request (ignored over stdio).
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Transport::Http { headers, .. } = &mut self.transport {
            headers.push((name.into(), value.into()));
        }
        self
    }

    /// Sends `Authorization: Bearer <token>` with every HTTP request (ignored over stdio).
    #[must_use]
    pub fn bearer(mut self, token: impl Into<String>) -> Self {
        if let Transport::Http { bearer, .. } = &mut self.transport {
            *bearer = Some(token.into());
        }
        self
    }

    /// Imports only these tools (the server's names, before prefixing).
    #[must_use]
    pub fn allow<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allow = Some(tools.into_iter().map(Into::into).collect());
        self
    }

    /// Never imports these tools (the server's names); applied after [`allow`](Self::allow).
    #[must_use]
    pub fn deny<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.deny = tools.into_iter().map(Into::into).collect();
        self
    }

    /// Ends a call that takes longer with a tool error (and `notifications/cancelled` to the
    /// server); also bounds each listing and resource or prompt request. Default
    /// [`DEFAULT_CALL_TIMEOUT`].
    #[must_use]
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// How long starting (or reaching) the server and the MCP handshake may take, at connect
    /// and at each reconnect. Default [`DEFAULT_CONNECT_TIMEOUT`].
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Replaces the bounds on what the server may send.
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The server's name, the prefix of its tools.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How the server is reached.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// Whether the server's tool `name` passes the allow- and deny-lists.
    pub fn admits(&self, name: &str) -> bool {
        self.allow
            .as_ref()
            .is_none_or(|allow| allow.iter().any(|a| a == name))
            && !self.deny.iter().any(|d| d == name)
    }
}
