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
//! # Example
//!
//! A registry served over an in-memory pipe, called by rmcp's own client:
//!
//! ```
//! # #[cfg(feature = "client")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_mcp::server::{ServerOptions, serve_io};
//! use agent_tools::{Caller, Registry, Tool, ToolError};
//! use rmcp::ServiceExt;
//! use rmcp::model::CallToolRequestParams;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Add { a: i64, b: i64 }
//!
//! let mut tools = Registry::new();
//! tools.register(Tool::from_fn("add", "Adds two integers.", |args: Add, _ctx| async move {
//!     Ok::<_, ToolError>(serde_json::json!({"sum": args.a + args.b}))
//! }))?;
//!
//! let (client_end, server_end) = tokio::io::duplex(64 * 1024);
//! let (read, write) = tokio::io::split(server_end);
//! tokio::spawn(async move {
//!     serve_io(&tools, Caller::new("me"), ServerOptions::default(), read, write).await
//! });
//! let client = ().serve(client_end).await?;
//! let mut call = CallToolRequestParams::new("add");
//! call.arguments = serde_json::json!({"a": 2, "b": 3}).as_object().cloned();
//! let result = client.call_tool(call).await?;
//! assert_eq!(result.structured_content, Some(serde_json::json!({"sum": 5})));
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "client"))]
//! # fn main() {}
//! ```
//!
//! [`Registry::permitted_for`]: agent_tools::Registry::permitted_for

mod convert;
mod handler;
mod options;
mod streamable;

pub use handler::{Authenticated, CallGate, CallPermit, McpServer, serve_io, serve_stdio};
pub use options::{HttpOptions, ServerOptions};
pub use streamable::{Authenticator, BearerKeys, HttpService};
