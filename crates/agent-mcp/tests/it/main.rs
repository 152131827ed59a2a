//! agent-mcp against real peers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod client;
mod hostile;
mod python;
mod run;
mod support;
