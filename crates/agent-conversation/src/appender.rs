//! The [`ConversationAppender`] trait the loop calls for every turn it produces.

use std::future::Future;
use std::pin::Pin;

use crate::error::Error;
use crate::turn::Turn;

/// The future [`ConversationAppender::append`] returns: boxed so the trait stays
/// dyn-compatible, `Send` so the loop can run on a multi-threaded runtime.
pub type AppendFuture<'a> = Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>>;

/// Receives each turn the loop produces, in order, and stores it.
///
/// The contract between the loop and an appender:
///
/// - **What is appended**: every message the loop *produces*, i.e. each assistant message (with
///   its tool calls) and each tool result, in the order they join the history. The caller's own
///   input (system prompt, user messages, history passed in) is **not** echoed through the
///   appender: the caller already has it and stores it itself if it wants to.
/// - **Back-pressure**: the loop awaits `append` before it goes on, so a slow store slows the
///   loop rather than piling up unsaved turns, and a turn is stored before the next model call
///   starts.
/// - **Failure is terminal**: an `Err` ends the loop with an appender error. Implementations
///   that can recover (retry, buffer) should do so inside `append` and only return `Err` when
///   the turn really could not be stored.
/// - **`Ok` means stored**: when the future resolves to `Ok`, the turn is as durable as the
///   implementation promises (the JSONL and SQLite stores have synced it to disk).
///
/// The loop holds appenders as `Arc<dyn ConversationAppender>`. An appender is bound to one
/// conversation when it is built (one JSONL file, or `SqliteStore::appender` for one id), so
/// the loop never handles conversation ids.
///
/// # Implementing
///
/// ```
/// use agent_conversation::{AppendFuture, ConversationAppender, Turn};
///
/// /// Prints the role of every turn.
/// struct RoleLogger;
///
/// impl ConversationAppender for RoleLogger {
///     fn append<'a>(&'a self, turn: &'a Turn) -> AppendFuture<'a> {
///         Box::pin(async move {
///             let _role = turn.message.role();
///             Ok(())
///         })
///     }
/// }
///
/// let _shared: std::sync::Arc<dyn ConversationAppender> = std::sync::Arc::new(RoleLogger);
/// ```
pub trait ConversationAppender: Send + Sync {
    /// Stores `turn` after every turn appended before it.
    fn append<'a>(&'a self, turn: &'a Turn) -> AppendFuture<'a>;
}
