//! The process's exit status, one documented code per way a command can end.

use std::process::ExitCode;

use agent_types::{AgentError, ErrorKind};

/// How a command ended. The codes are part of the CLI's contract (`docs/cli.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// The run finished with an answer (0).
    Done,
    /// The run failed: a provider error, a tool failure under `abort`, a store that cannot
    /// be written (1).
    Error,
    /// The command line, the configuration or a missing key is wrong; nothing ran (2).
    Usage,
    /// A budget tripped: iterations, tokens, cost or repeated calls (3).
    Budget,
    /// The run stopped for remote tool calls; resume with their results (4).
    Awaiting,
    /// Cancelled with Ctrl-C (130, the shell's convention for SIGINT).
    Aborted,
    /// A guardrail stopped the run (5).
    Guardrail,
}

impl Exit {
    /// The numeric exit status.
    pub(crate) fn code(self) -> u8 {
        match self {
            Self::Done => 0,
            Self::Error => 1,
            Self::Usage => 2,
            Self::Budget => 3,
            Self::Awaiting => 4,
            Self::Aborted => 130,
            Self::Guardrail => 5,
        }
    }

    /// The status an error that ended a run maps to.
    pub(crate) fn of(error: &AgentError) -> Self {
        match error.kind {
            ErrorKind::BudgetExceeded { .. } => Self::Budget,
            ErrorKind::Aborted => Self::Aborted,
            // The loop refuses a bad configuration before any model call: a usage mistake.
            ErrorKind::Config => Self::Usage,
            ErrorKind::GuardrailTripped { .. } => Self::Guardrail,
            _ => Self::Error,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_types::Budget;

    #[test]
    fn errors_map_to_their_documented_codes() {
        let budget = AgentError::budget(Budget::Iterations { used: 1, max: 1 });
        assert_eq!(Exit::of(&budget).code(), 3);
        assert_eq!(Exit::of(&AgentError::config("bad")).code(), 2);
        let aborted = AgentError::new(ErrorKind::Aborted, "cancelled");
        assert_eq!(Exit::of(&aborted).code(), 130);
        let tool = AgentError::new(
            ErrorKind::Tool {
                tool: "calculator".into(),
            },
            "failed",
        );
        assert_eq!(Exit::of(&tool).code(), 1);
    }
}
