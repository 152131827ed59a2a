//! MCP for agentry, on `rmcp` (the official Rust MCP SDK).
//!
//! Two directions over one [`agent_tools::Registry`]:
//! - [`client`]: connect to an MCP server (a spawned command over stdio, or streamable HTTP),
//!   list its tools and register them under a per-server prefix, so the loop calls them like any
//!   other tool (arguments validated, cancellation and progress forwarded, content mapped).
//! - [`server`]: expose a registry to MCP clients over stdio or streamable HTTP, filtered by the
//!   caller's permissions.

#[cfg(feature = "client")]
pub mod client;
mod error;
#[cfg(feature = "server")]
pub mod server;

pub use error::Error;
