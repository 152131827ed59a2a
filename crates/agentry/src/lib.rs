//! Run LLM tool-calling agent loops in Rust.
//!
//! `agentry` is a facade: it re-exports agentry's layered crates so an application depends on
//! one crate and picks layers with features. It holds no logic of its own; a library that
//! needs only one layer can depend on that crate directly.
//!
//! | module | crate | what it holds | feature |
//! |---|---|---|---|
//! | [`types`] | `agent-types` | messages, tool specs, usage and pricing, events, trace, errors, the backend trait | always |
//! | [`tools`] | `agent-tools` | tool registry, schema derivation, argument validation and repair, truncation, resources as tools | `tools` (default) |
//! | [`agent_loop`] | `agent-loop` | the loop: `return`/`auto` modes, budgets, cancellation, streaming, sessions | `loop` (default) |
//! | [`backends`] | `agent-backends` | model backends: provider adapters, replay of recorded traffic, the scripted backend | `backends`, `scripted` (default), one feature per provider |
//! | [`conversation`] | `agent-conversation` | turn appenders: in-memory, JSONL, SQLite | `conversation` (default) |
//! | `mcp` | `agent-mcp` | MCP: import tools from MCP servers, serve a registry as an MCP server | `mcp` |
//!
//! | feature | default | enables |
//! |---|---|---|
//! | `tools` | yes | [`tools`] |
//! | `builtin-tools` | no | `tools::builtin`: calculator, clock, a `read_file` confined to one directory |
//! | `loop` | yes | [`agent_loop`] and the headline items at the root ([`Agent`], [`generate`], [`Options`]…); needs tokio's timer |
//! | `backends` | via `scripted` | [`backends`] without any backend |
//! | `scripted` | yes | the scripted backend |
//! | `openai`, `openai-responses`, `anthropic`, `gemini`, `ollama` | no | one provider adapter each (reqwest with rustls) |
//! | `providers` | no | all five adapters |
//! | `replay` | no | recorded responses served over loopback HTTP to the real adapters |
//! | `fallback` | no | `backends::Fallback`: the next model when one fails before any output (docs/fallback.md) |
//! | `conversation` | yes | [`conversation`] with both stores below |
//! | `jsonl` | via `conversation` | the durable JSONL appender |
//! | `sqlite` | via `conversation` | the SQLite store (bundles SQLite, builds C code) |
//! | `mcp` | no | `mcp`: the MCP client and server (rmcp; the client over the same reqwest) |
//! | `otel` | no | `otel` (`agent-otel`): OpenTelemetry export of the loop's GenAI spans and metrics over OTLP/HTTP (docs/observability.md) |
//! | `guardrails` | no | `guardrails` (`agent-guardrails`): PII redaction and Rego tool-call policy as ready-made guardrails (docs/guardrails.md) |
//! | `temporal` | no | `temporal` (`agent-temporal`): durable runs on Temporal, the `agent_run` workflow and its workers (docs/durable.md) |
//!
//! With `default-features = false` the facade is the vocabulary alone: no tokio, no HTTP
//! client, no SQLite.
//!
//! # Example
//!
//! An [`Agent`] (the loop in `auto` mode): the (scripted) model asks for a tool, the loop
//! runs it and the model answers. The free functions ([`generate`], [`execute`]…) run the
//! same loop from a backend and [`Options`] passed each time.
//!
//! ```
//! # #[cfg(all(feature = "loop", feature = "scripted"))]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use agentry::backends::{ScriptedBackend, ScriptedTurn};
//! use agentry::tools::{Registry, Tool};
//! use agentry::Agent;
//! use serde_json::json;
//!
//! let mut tools = Registry::new();
//! tools.register(Tool::from_json_fn(
//!     "get_time",
//!     "The current time in UTC.",
//!     json!({"type": "object", "properties": {}}),
//!     |_args, _ctx| async { Ok(json!("12:00 UTC")) },
//! ))?;
//! let model = ScriptedBackend::new([
//!     ScriptedTurn::tool_call("call_1", "get_time", json!({})),
//!     ScriptedTurn::text("It is noon UTC."),
//! ]);
//! let agent = Agent::builder(model, "demo").tools(tools).build();
//! let result = agent.run("What time is it?").await?;
//! assert_eq!(result.text(), "It is noon UTC.");
//! # Ok(())
//! # }
//! # #[cfg(not(all(feature = "loop", feature = "scripted")))]
//! # fn main() {}
//! ```

// The tables above link every layer; a build without some of them has nothing to link to.
#![cfg_attr(
    not(all(
        feature = "tools",
        feature = "loop",
        feature = "backends",
        feature = "conversation"
    )),
    allow(rustdoc::broken_intra_doc_links)
)]

#[doc(inline)]
pub use agent_types as types;

#[cfg(feature = "tools")]
#[doc(inline)]
pub use agent_tools as tools;

#[cfg(feature = "conversation")]
#[doc(inline)]
pub use agent_conversation as conversation;

#[cfg(feature = "loop")]
#[doc(inline)]
pub use agent_loop;

#[cfg(feature = "backends")]
#[doc(inline)]
pub use agent_backends as backends;

#[cfg(feature = "mcp")]
#[doc(inline)]
pub use agent_mcp as mcp;

#[cfg(feature = "guardrails")]
#[doc(inline)]
pub use agent_guardrails as guardrails;

#[cfg(feature = "otel")]
#[doc(inline)]
pub use agent_otel as otel;

/// Durable runs on Temporal: the `agent_run` workflow, the `model_call` and `tool_call`
/// activities, workers and clients (docs/durable.md).
#[cfg(feature = "temporal")]
pub use agent_temporal as temporal;

#[cfg(feature = "loop")]
#[doc(inline)]
pub use agent_loop::{
    Agent, AgentBuilder, EventStream, GenerateResult, Hooks, Input, Options, OutputSpec,
    OutputStrategy, Session, SessionInput, SessionStatus, ToolErrorMode, ToolMode, ToolParallelism,
    execute, execute_stream, generate, generate_stream,
};

#[doc(inline)]
pub use agent_types::{
    AgentError, AgentEvent, AssistantMessage, Backend, Message, ModelRequest, RateCard, StopReason,
    ToolCall, ToolResult, ToolSpec, Usage,
};

// The README's Rust example is compiled and run as a doc test so it cannot drift from the API.
#[cfg(all(doctest, feature = "loop", feature = "scripted"))]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;

// docs/agents.md's examples too.
#[cfg(all(doctest, feature = "loop", feature = "scripted"))]
#[doc = include_str!("../../../docs/agents.md")]
struct AgentsDoctests;
