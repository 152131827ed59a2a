//! The crate's one error type.

/// What can go wrong connecting to, importing from or serving MCP.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tool definition or registry operation was refused by `agent-tools`.
    #[error(transparent)]
    Tools(#[from] agent_tools::Error),
    /// Serving MCP failed: the handshake with the client, or the connection.
    #[error("serving MCP failed: {0}")]
    Serve(String),
    /// An HTTP listener could not be set up (binding, a missing key for a public address).
    #[error("the MCP HTTP listener could not start: {0}")]
    Listen(String),
}
