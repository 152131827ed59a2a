//! What a failed tool call does to the run, under the error mode: the table the dispatch
//! reads as each call ends (to stop starting the round's later calls) and the error that
//! then ends the run.

use agent_types::{AgentError, ErrorKind, ToolCall};
use serde::{Deserialize, Serialize};

use crate::options::ToolErrorMode;

/// How a call failed, before the error mode decides what that means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallFailure {
    /// No tool by that name (or not offered this round).
    UnknownTool,
    /// The arguments do not match the tool's schema.
    InvalidArguments,
    /// The handler returned an error the model can act on (or panicked).
    HandlerError,
    /// The handler returned a fatal error.
    Fatal,
    /// The call was cancelled through its token.
    Cancelled,
    /// The call ran past its timeout.
    TimedOut,
    /// The call was not run (an earlier call's failure stopped the round).
    NotRun,
}

/// Why a call's failure ends the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStop {
    /// Invalid arguments under `abort`.
    Invalid,
    /// Any other failure under `abort`, or a fatal handler error under any mode.
    Failed,
}

/// Whether a call that failed with `failure` ends the run under `mode`: a fatal error always
/// does; under `abort` every failure but a cancellation or a call not run does; under
/// `recover` the model sees the error and reacts to it.
pub fn tool_stop(failure: CallFailure, mode: ToolErrorMode) -> Option<ToolStop> {
    let abort = mode == ToolErrorMode::Abort;
    match failure {
        CallFailure::Fatal => Some(ToolStop::Failed),
        CallFailure::Cancelled | CallFailure::NotRun => None,
        CallFailure::InvalidArguments if abort => Some(ToolStop::Invalid),
        CallFailure::UnknownTool | CallFailure::HandlerError | CallFailure::TimedOut if abort => {
            Some(ToolStop::Failed)
        }
        _ => None,
    }
}

/// The error that ends the run for `call`, which stopped it with `content` as its result.
pub fn stop_error(stop: ToolStop, call: &ToolCall, content: &str) -> AgentError {
    match stop {
        ToolStop::Invalid => AgentError::new(
            ErrorKind::Validation,
            format!(
                "the arguments of `{}` (call {}) are invalid: {content}",
                call.name, call.id
            ),
        ),
        ToolStop::Failed => AgentError::new(
            ErrorKind::Tool {
                tool: call.name.clone(),
            },
            format!("`{}` (call {}) failed: {content}", call.name, call.id),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recover_stops_only_on_fatal_and_abort_on_every_real_failure() {
        use CallFailure::*;
        let all = [
            UnknownTool,
            InvalidArguments,
            HandlerError,
            Fatal,
            Cancelled,
            TimedOut,
            NotRun,
        ];
        let recover: Vec<_> = all
            .iter()
            .map(|failure| tool_stop(*failure, ToolErrorMode::Recover))
            .collect();
        assert_eq!(
            recover,
            [None, None, None, Some(ToolStop::Failed), None, None, None]
        );
        let abort: Vec<_> = all
            .iter()
            .map(|failure| tool_stop(*failure, ToolErrorMode::Abort))
            .collect();
        assert_eq!(
            abort,
            [
                Some(ToolStop::Failed),
                Some(ToolStop::Invalid),
                Some(ToolStop::Failed),
                Some(ToolStop::Failed),
                None,
                Some(ToolStop::Failed),
                None
            ]
        );
    }
}
