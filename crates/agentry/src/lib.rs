//! Run LLM tool-calling agent loops in Rust.
//!
//! `agentry` is a facade: it re-exports agentry's layered crates so an application depends on
//! one crate and picks layers with features. It holds no logic of its own; a library that
//! needs only one layer can depend on that crate directly.
//!
//! | module | crate | what it holds | feature |
//! |---|---|---|---|
//! | [`types`] | `agent-types` | messages, tool specs, usage and pricing, events, trace, errors, the backend trait | always |
//! | [`tools`] | `agent-tools` | tool registry, schema derivation, argument validation and repair, truncation | `tools` (default) |
//! | [`conversation`] | `agent-conversation` | turn appenders: in-memory, JSONL, SQLite | `conversation` (default) |
//!
//! | feature | default | enables |
//! |---|---|---|
//! | `tools` | yes | [`tools`] |
//! | `conversation` | yes | [`conversation`] with both stores below |
//! | `jsonl` | via `conversation` | the durable JSONL appender |
//! | `sqlite` | via `conversation` | the SQLite store (bundles SQLite, builds C code) |
//!
//! The agent loop and the provider adapters arrive as `agent-loop` and `agent-backends`.
//!
//! # Example
//!
//! ```
//! use agentry::{Message, ToolCall};
//!
//! let question = Message::user("What is the weather in Denver?");
//! let call = ToolCall::new("call_1", "get_weather", serde_json::json!({"city": "Denver"}));
//! assert_eq!(call.arguments["city"], "Denver");
//! # let _ = question;
//! ```

#[doc(inline)]
pub use agent_types as types;

#[cfg(feature = "tools")]
#[doc(inline)]
pub use agent_tools as tools;

#[cfg(feature = "conversation")]
#[doc(inline)]
pub use agent_conversation as conversation;

#[doc(inline)]
pub use agent_types::{
    AgentError, AgentEvent, AssistantMessage, Backend, Message, ModelRequest, RateCard, StopReason,
    ToolCall, ToolResult, ToolSpec, Usage,
};

// The README's Rust example is compiled and run as a doc test so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
