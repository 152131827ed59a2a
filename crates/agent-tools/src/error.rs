//! The crate's [`Error`] (setting tools up went wrong) and the handler-facing [`ToolError`]
//! (one call went wrong).

/// What went wrong while setting tools up: registering, narrowing, naming, or choosing a
/// truncation cap.
///
/// These are configuration mistakes made by the program, not by the model; a failed call is a
/// [`ToolError`] and bad arguments are [`InvalidArguments`](crate::InvalidArguments).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tool with this name is already registered.
    #[error("a tool named `{name}` is already registered; tool names must be unique")]
    DuplicateTool {
        /// The name registered twice.
        name: String,
    },
    /// The name breaks the providers' rule `^[a-zA-Z0-9_-]{1,64}$`.
    #[error("invalid tool name `{name}`: {reason}")]
    InvalidName {
        /// The offending name.
        name: String,
        /// Why it is invalid.
        reason: String,
    },
    /// The parameters schema does not compile or does not describe an object.
    #[error("the parameters schema of tool `{tool}` is invalid: {reason}")]
    InvalidSchema {
        /// The tool whose schema is invalid (empty when compiled outside a registry).
        tool: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An allow-list names tools the registry does not hold.
    #[error("the allow-list names unknown tools: {}", join_ticked(names))]
    UnknownTools {
        /// Every unknown name, in allow-list order.
        names: Vec<String>,
    },
    /// A truncation cap too small to hold the truncation marker.
    #[error(
        "a truncation cap of {max_bytes} bytes is too small: it must be at least {min_bytes} bytes to hold the truncation marker"
    )]
    CapTooSmall {
        /// The cap asked for.
        max_bytes: usize,
        /// The smallest cap accepted.
        min_bytes: usize,
    },
}

fn join_ticked(names: &[String]) -> String {
    let ticked: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    ticked.join(", ")
}

/// How a failed tool call should be treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ToolErrorKind {
    /// An expected failure the model can act on (not found, bad input, try again later); the
    /// message goes back to the model as an error tool result.
    RespondToModel,
    /// The loop should stop: continuing makes no sense (lost credentials, a broken invariant).
    Fatal,
    /// The handler panicked. Treated like [`RespondToModel`](Self::RespondToModel) unless the
    /// loop's error mode says otherwise; the message names the panic.
    Panicked,
    /// The call was cancelled through its context's token before it finished.
    Cancelled,
}

/// A failed tool call, as a handler reports it.
///
/// The split follows one question: should the model see this and try again, or must the loop
/// stop? Use [`ToolError::respond_to_model`] for the first, [`ToolError::fatal`] for the second.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    kind: ToolErrorKind,
    message: String,
}

impl ToolError {
    /// A recoverable failure: `message` goes back to the model, so write it for the model
    /// ("no city named `Atlantis`; try a real city name").
    pub fn respond_to_model(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::RespondToModel, message)
    }

    /// A failure that should end the loop.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::Fatal, message)
    }

    /// The call was cancelled.
    pub fn cancelled() -> Self {
        Self::new(ToolErrorKind::Cancelled, "the tool call was cancelled")
    }

    pub(crate) fn panicked(detail: &str) -> Self {
        Self::new(
            ToolErrorKind::Panicked,
            format!("the tool failed unexpectedly (it panicked: {detail})"),
        )
    }

    /// An error of `kind` with `message`.
    pub fn new(kind: ToolErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// How the failure should be treated.
    pub fn kind(&self) -> ToolErrorKind {
        self.kind
    }

    /// The message (for the model, unless the error is fatal).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// `true` when the loop should stop.
    pub fn is_fatal(&self) -> bool {
        self.kind == ToolErrorKind::Fatal
    }

    /// `true` when the handler panicked.
    pub fn is_panic(&self) -> bool {
        self.kind == ToolErrorKind::Panicked
    }

    /// `true` when the call was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.kind == ToolErrorKind::Cancelled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_have_predicates() {
        assert!(ToolError::fatal("x").is_fatal());
        assert!(!ToolError::respond_to_model("x").is_fatal());
        assert!(ToolError::cancelled().is_cancelled());
        let panic = ToolError::panicked("boom");
        assert!(panic.is_panic() && !panic.is_fatal());
        assert_eq!(
            panic.to_string(),
            "the tool failed unexpectedly (it panicked: boom)"
        );
    }

    #[test]
    fn unknown_tools_lists_every_name() {
        let err = Error::UnknownTools {
            names: vec!["a".into(), "b".into()],
        };
        assert_eq!(
            err.to_string(),
            "the allow-list names unknown tools: `a`, `b`"
        );
    }
}
