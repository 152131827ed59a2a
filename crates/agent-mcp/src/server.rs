//! Serving a registry as an MCP server.
//!
//! [`McpServer`] is an rmcp [`ServerHandler`](rmcp::ServerHandler) written by hand over an
//! [`agent_tools::Registry`]:
//! - `tools/list` lists the tools the caller may use ([`Registry::permitted_for`]'s rule),
//!   with their input schemas and, when a tool [declares one](agent_tools::Tool::with_output_schema),
//!   their output schemas. Remote tools (no handler here) are not listed.
//! - `tools/call` validates the arguments with the schema compiled at registration (never per
//!   call), runs the handler through [`RegisteredTool::invoke`](agent_tools::RegisteredTool::invoke)
//!   (panics caught), forwards `notifications/cancelled` to the [`ToolContext`](agent_tools::ToolContext)'s
//!   token, turns handler deltas into `notifications/progress` when the request carried a
//!   progress token, and caps the result as the loop does ([`ServerOptions::truncation`],
//!   [`ServerOptions::max_binary_bytes`]). A JSON object result is `structuredContent` plus its
//!   text; images and files are MCP image and embedded-resource content; a failed call is an
//!   `isError` result. A tool the caller may not see answers exactly as an unknown one.
//!
//! Transports: [`serve_stdio`] (one caller, the process's), [`serve_io`] (any byte stream,
//! for tests and embedding) and [`HttpService`] (streamable HTTP, a tower service to mount in
//! axum, where each request's bearer key names its [`Caller`](agent_tools::Caller)).
//!
//! What a client can make the server hold is bounded where it is created: calls in flight per
//! connection ([`ServerOptions::max_concurrent_calls`]), a call's duration
//! ([`ServerOptions::call_timeout`]), a progress message's size, a stdio message's size
//! ([`ServerOptions::max_message_bytes`]), and over HTTP the live sessions, their idle time,
//! the sessions per caller and the request body size ([`HttpOptions`]).
//!
//! [`Registry::permitted_for`]: agent_tools::Registry::permitted_for

mod convert;
mod handler;
mod options;
mod streamable;

pub use handler::{Authenticated, CallGate, CallPermit, McpServer, serve_io, serve_stdio};
pub use options::{HttpOptions, ServerOptions};
pub use streamable::{Authenticator, BearerKeys, HttpService};
