//! Conversation stores for agentry: where the turns an agent loop produces are recorded.
//!
//! The loop hands every message it produces — each assistant message (with its tool calls) and
//! each tool result — to a [`ConversationAppender`], in order, and awaits it before going on.
//! That gives the store back-pressure over the loop and means a turn is stored before the next
//! model call. The caller's own input (system prompt, user messages) is *not* echoed through
//! the appender. An appender error ends the loop.
//!
//! Three implementations:
//!
//! | type | feature | durability | reads back with |
//! |---|---|---|---|
//! | [`MemoryAppender`] | always | none (process memory) | [`MemoryAppender::turns`] |
//! | `JsonlAppender` | `jsonl` (default) | line written, flushed and `sync_data`'d per turn | `load_jsonl`, which survives a crash-torn last line |
//! | `SqliteStore` / `SqliteAppender` | `sqlite` (default) | WAL, `synchronous = FULL`, one transaction per turn | `SqliteStore::load`, `SqliteStore::conversations` |
//!
//! With `default-features = false` the crate is the trait, the turn types and the in-memory
//! appender, without tokio or SQLite. The file-backed stores do their blocking work on Tokio's
//! blocking pool, so they expect to be awaited inside a Tokio runtime (outside one they block
//! the calling thread instead).
//!
//! **Not for**: searching or summarizing conversations, rewriting history, or storing the
//! caller's input — this crate records what the loop produced, in order, and reads it back.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//!
//! use agent_conversation::{ConversationAppender, MemoryAppender, Turn};
//! use agent_types::{AssistantBlock, AssistantMessage, Message, ToolCall, ToolResult};
//! use serde_json::json;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let memory = MemoryAppender::new();
//! // What the loop holds; the clone keeps a handle to read the turns back.
//! let appender: Arc<dyn ConversationAppender> = Arc::new(memory.clone());
//!
//! // The turns of one tool round, appended as the loop produces them.
//! let call = AssistantMessage {
//!     content: vec![AssistantBlock::ToolCall(ToolCall::new(
//!         "call_1",
//!         "get_weather",
//!         json!({"city": "Denver"}),
//!     ))],
//!     ..AssistantMessage::default()
//! };
//! appender.append(&Turn::new(call)).await?;
//! appender
//!     .append(&Turn::new(ToolResult::ok("call_1", "get_weather", r#"{"temp_c":21}"#)))
//!     .await?;
//! appender.append(&Turn::new(AssistantMessage::text("It is 21 °C in Denver."))).await?;
//!
//! let turns = memory.turns();
//! assert_eq!(turns.len(), 3);
//! assert_eq!(turns[2].seq, 2);
//! assert!(matches!(turns[1].message, Message::Tool(_)));
//! # Ok::<(), agent_conversation::Error>(())
//! # }).unwrap();
//! ```

mod appender;
#[cfg(any(feature = "jsonl", feature = "sqlite"))]
mod blocking;
mod error;
mod id;
#[cfg(feature = "jsonl")]
mod jsonl;
mod memory;
#[cfg(feature = "sqlite")]
mod sqlite;
mod turn;

pub use appender::{AppendFuture, ConversationAppender};
pub use error::Error;
pub use id::ConversationId;
#[cfg(feature = "jsonl")]
pub use jsonl::{JsonlAppender, LoadedConversation, TornTail, load_jsonl};
pub use memory::MemoryAppender;
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteAppender, SqliteStore};
pub use turn::{StoredTurn, Turn};
