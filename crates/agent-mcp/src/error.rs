//! The crate's one error type.

/// What can go wrong connecting to, importing from or serving MCP.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tool definition or registry operation was refused by `agent-tools`.
    #[error(transparent)]
    Tools(#[from] agent_tools::Error),
}
