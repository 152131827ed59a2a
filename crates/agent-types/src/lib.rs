//! The vocabulary of agentry.
//!
//! `agent-types` is the bottom layer every other agentry crate builds on: conversation
//! [messages](Message), [tool specs](ToolSpec) and [calls](ToolCall), normalized [usage](Usage)
//! and [pricing](RateCard), the [request](ModelRequest) a backend receives, the normalized
//! [stream events](StreamEvent) it yields, the [`Backend`] trait itself, the [agent
//! events](AgentEvent) a consumer sees, the [trace](TraceEntry), and the [errors](AgentError).
//!
//! It is deliberately light: serde, serde_json, thiserror and futures-core. No async runtime,
//! no HTTP client, so a crate that only needs the types (a UI decoding SSE events, a custom
//! backend) pulls almost nothing.
//!
//! Every serializable type has a stable JSON form (snake_case names, `"type"` or `"role"`
//! tags, absent fields for unknown values) documented in `docs/wire-format.md`; it is the wire
//! format of the server and of the CLI's `--json` output.
//!
//! # Example
//!
//! ```
//! use agent_types::{AssistantBlock, AssistantMessage, Message, ModelPrice, RateCard, ToolCall, Usage};
//! use serde_json::json;
//!
//! // An assistant turn that asks for a tool, as it travels over the wire.
//! let turn = AssistantMessage {
//!     content: vec![AssistantBlock::ToolCall(ToolCall::new(
//!         "call_1",
//!         "get_weather",
//!         json!({"city": "Denver"}),
//!     ))],
//!     ..AssistantMessage::default()
//! };
//! let wire = serde_json::to_value(Message::from(turn)).unwrap();
//! assert_eq!(wire["content"][0]["type"], "tool_call");
//!
//! // What that call cost: cached tokens are part of input and priced separately.
//! let card = RateCard::new().with(
//!     "claude-sonnet-4-5",
//!     ModelPrice {
//!         input_per_mtok: 3.0,
//!         output_per_mtok: 15.0,
//!         cache_read_per_mtok: Some(0.30),
//!         cache_write_5m_per_mtok: Some(3.75),
//!         cache_write_1h_per_mtok: Some(6.0),
//!     },
//! );
//! let usage = Usage {
//!     input_tokens: Some(1_000_000),
//!     cache_read_tokens: Some(1_000_000),
//!     output_tokens: Some(0),
//!     ..Usage::default()
//! };
//! let dollars = card.cost("claude-sonnet-4-5-20250929", &usage).unwrap();
//! assert!((dollars - 0.30).abs() < 1e-9);
//! ```

mod assemble;
mod backend;
mod error;
mod event;
mod guardrail;
mod id;
mod message;
mod pricing;
mod request;
mod schema;
mod stop;
mod stream;
mod trace;
mod usage;
mod waker;

pub use assemble::MessageAssembler;
pub use backend::{Backend, BackendStream, Capabilities};
pub use error::{
    AgentError, BackendError, BackendErrorKind, Budget, ErrorKind, InvalidOutput, Spend,
};
pub use event::AgentEvent;
pub use guardrail::{GuardrailAction, GuardrailDecision, GuardrailStage};
pub use id::{SessionId, ToolCallId};
pub use message::{
    AssistantBlock, AssistantMessage, AudioBlock, ContentKind, FileBlock, FileSource, ImageSource,
    Message, Role, Thinking, ToolCall, ToolResult, ToolResultBlock, UserBlock, UserMessage,
};
pub use pricing::{ModelPrice, RateCard, cost};
pub use request::{
    GenerationSettings, ModelRequest, Reasoning, ReasoningEffort, ResponseFormat, ToolChoice,
    ToolSpec,
};
pub use schema::{drop_optional_nulls, strict_schema};
pub use stop::StopReason;
pub use stream::StreamEvent;
pub use trace::TraceEntry;
pub use usage::Usage;
pub use waker::same_waker;
