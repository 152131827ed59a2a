//! Why a model call (or a whole loop) ended.

use serde::{Deserialize, Serialize};

/// Why the model stopped producing output.
///
/// `Aborted` (the caller cancelled) is never folded into `Error` (something failed): a server
/// answers them differently and a caller retries only one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished its answer (or hit a stop sequence).
    Stop,
    /// The output-token limit cut the answer short.
    Length,
    /// The model asked for tool calls.
    ToolCalls,
    /// The provider refused or filtered the output (refusals, safety blocks). Any refusal text
    /// is kept in the message.
    ContentFilter,
    /// The call failed.
    Error,
    /// The caller cancelled.
    Aborted,
}
