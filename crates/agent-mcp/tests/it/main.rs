//! agent-mcp against real peers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod client;
mod run;
mod support;
