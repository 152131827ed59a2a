//! The crate's one error type.

/// What can go wrong connecting to, importing from or serving MCP.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tool definition or registry operation was refused by `agent-tools`.
    #[error(transparent)]
    Tools(#[from] agent_tools::Error),
    /// A server's configuration cannot be used.
    #[error("MCP server `{server}`: {reason}")]
    InvalidConfig {
        /// The server's name.
        server: String,
        /// What is wrong.
        reason: String,
    },
    /// The server could not be started or reached, or failed the MCP handshake.
    #[error("cannot connect to MCP server `{server}`: {reason}")]
    Connect {
        /// The server's name.
        server: String,
        /// What failed.
        reason: String,
    },
    /// A request to a connected server failed.
    #[error("MCP server `{server}` failed {operation}: {reason}")]
    Request {
        /// The server's name.
        server: String,
        /// The MCP method (`tools/list`, `resources/read`…).
        operation: &'static str,
        /// What failed.
        reason: String,
    },
    /// Two tools get the same registry name.
    #[error(
        "two tools get the name `{name}`: {first} and {second}; rename one (`--mcp-name`/`name`) or leave one out (`deny`)"
    )]
    NameCollision {
        /// The name both get.
        name: String,
        /// The first tool.
        first: String,
        /// The second tool.
        second: String,
    },
    /// The server lists more tools than [`Limits::max_tools`](crate::client::Limits).
    #[error(
        "MCP server `{server}` lists more than {max} tools; narrow it with an allow-list or raise the limit"
    )]
    TooManyTools {
        /// The server's name.
        server: String,
        /// The limit.
        max: usize,
    },
    /// Serving MCP failed: the handshake with the client, or the connection.
    #[error("serving MCP failed: {0}")]
    Serve(String),
    /// An HTTP listener could not be set up (binding, a missing key for a public address).
    #[error("the MCP HTTP listener could not start: {0}")]
    Listen(String),
}
