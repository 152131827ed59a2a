//! agent-mcp's integration tests: one binary. The server tests drive it with rmcp's client.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(all(feature = "server", feature = "client"))]
mod server;
#[cfg(all(feature = "server", feature = "client"))]
mod server_http;
#[cfg(all(feature = "server", feature = "client"))]
mod server_python;
