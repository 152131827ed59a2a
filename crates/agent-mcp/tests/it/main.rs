//! agent-mcp's integration tests, one binary: the client against real peers (server-everything,
//! the Python SDK), the server driven by rmcp's client and the Python SDK.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

mod client;
mod hostile;
mod python;
mod run;
#[cfg(all(feature = "server", feature = "client"))]
mod server;
#[cfg(all(feature = "server", feature = "client"))]
mod server_http;
#[cfg(all(feature = "server", feature = "client"))]
mod server_python;
mod support;
mod tool_search;
