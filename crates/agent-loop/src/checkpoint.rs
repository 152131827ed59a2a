//! [`TurnCheckpoint`]: the run's whole history lent to a store after each message, so a
//! server can save a run's progress as it goes without holding a copy of it.

use std::future::Future;
use std::pin::Pin;

use agent_types::{AgentError, Message, Usage};

use crate::BudgetsUsed;

/// The future [`TurnCheckpoint::checkpoint`] returns.
pub type CheckpointFuture<'a> = Pin<Box<dyn Future<Output = Result<(), AgentError>> + Send + 'a>>;

/// Called by the run after each message joins its history (after the conversation
/// appender), and awaited before the run goes on.
///
/// `history` is the session's whole history as the run has it (what it started from, its
/// input, every message since), lent mutably so an implementation can move it into a
/// document to save and back without copying it: it must hold the same messages when the
/// future ends. `usage` and `cost_usd` are what this run has spent so far (not yet added to
/// the session's totals). An `Err` ends the run with that error.
pub trait TurnCheckpoint: Send + Sync {
    /// Saves the run's progress (or decides this message ends no turn and does nothing).
    fn checkpoint<'a>(
        &'a self,
        history: &'a mut Vec<Message>,
        usage: Usage,
        cost_usd: Option<f64>,
        budgets: &'a BudgetsUsed,
    ) -> CheckpointFuture<'a>;
}
