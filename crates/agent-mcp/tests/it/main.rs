//! agent-mcp's integration tests: one binary.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(feature = "server")]
mod server;
#[cfg(feature = "server")]
mod server_http;
#[cfg(feature = "server")]
mod server_python;
