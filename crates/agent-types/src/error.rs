//! Errors: [`AgentError`] for whatever ends a loop, [`BackendError`] for a failed model call.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::message::{AssistantMessage, Message};
use crate::trace::TraceEntry;

/// Which budget ran out, with what was used and what was allowed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "limit", rename_all = "snake_case")]
pub enum Budget {
    /// Model → tools → model rounds.
    Iterations {
        /// Rounds run.
        used: u32,
        /// Rounds allowed.
        max: u32,
    },
    /// Cumulative tokens (input + output + tool output) across the loop.
    Tokens {
        /// Tokens spent.
        used: u64,
        /// Tokens allowed.
        max: u64,
    },
    /// Cumulative cost in US dollars.
    CostUsd {
        /// Dollars spent.
        used: f64,
        /// Dollars allowed.
        max: f64,
    },
    /// The same tool with the same arguments, called again and again.
    RepeatedCall {
        /// The tool.
        tool: String,
        /// Consecutive identical calls seen.
        times: u32,
    },
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Iterations { used, max } => write!(f, "tool iterations: {used} of {max}"),
            Self::Tokens { used, max } => write!(f, "token budget: {used} of {max} tokens"),
            Self::CostUsd { used, max } => write!(f, "cost budget: ${used:.6} of ${max:.6}"),
            Self::RepeatedCall { tool, times } => write!(
                f,
                "`{tool}` was called {times} times in a row with the same arguments"
            ),
        }
    }
}

/// What kind of failure ended the loop. Each kind maps to an HTTP status via
/// [`AgentError::status`].
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// The call was set up wrongly (a local tool without a handler, tools on a backend without
    /// tool support, a duplicate tool name). 400.
    #[error("configuration error")]
    Config,
    /// Input failed validation (tool arguments under `abort`, wrong tool-result ids). 422.
    #[error("validation failed")]
    Validation,
    /// A budget ran out. 429.
    #[error("budget exceeded ({budget})")]
    BudgetExceeded {
        /// Which budget.
        budget: Budget,
    },
    /// The caller cancelled. 499.
    #[error("aborted")]
    Aborted,
    /// A tool failed and the error mode says to stop. 500.
    #[error("tool `{tool}` failed")]
    Tool {
        /// The tool's name.
        tool: String,
    },
    /// The model call failed. 502, or the provider's own status for client errors.
    #[error("backend error")]
    Backend {
        /// The backend's error.
        error: BackendError,
    },
    /// The feature exists in the API but not in this build or backend. 501.
    #[error("not implemented")]
    NotImplemented,
    /// The conversation appender failed. 500.
    #[error("conversation appender failed")]
    Appender,
}

/// The error that ends a loop. It carries what the loop had done when it stopped: the trace
/// of every tool call (whether or not a trace was asked for) and the messages produced.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[error("{kind}: {message}")]
pub struct AgentError {
    /// What kind of failure.
    #[serde(flatten)]
    pub kind: ErrorKind,
    /// A sentence saying what happened and, where possible, what to do about it.
    pub message: String,
    /// Every tool call run before the failure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partial_trace: Vec<TraceEntry>,
    /// The messages the loop produced before the failure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partial_messages: Vec<Message>,
}

impl AgentError {
    /// An error of `kind` with a message and nothing partial.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            partial_trace: Vec::new(),
            partial_messages: Vec::new(),
        }
    }

    /// A configuration error.
    pub fn config(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Config, message)
    }

    /// A budget error; the message names the budget.
    pub fn budget(budget: Budget) -> Self {
        let message = format!("{budget}; raise the limit or narrow the task");
        Self::new(ErrorKind::BudgetExceeded { budget }, message)
    }

    /// Attaches what the loop had done.
    pub fn with_partial(mut self, trace: Vec<TraceEntry>, messages: Vec<Message>) -> Self {
        self.partial_trace = trace;
        self.partial_messages = messages;
        self
    }

    /// The HTTP status a server answers with.
    pub fn status(&self) -> u16 {
        match &self.kind {
            ErrorKind::Config => 400,
            ErrorKind::Validation => 422,
            ErrorKind::BudgetExceeded { .. } => 429,
            ErrorKind::Aborted => 499,
            ErrorKind::Tool { .. } | ErrorKind::Appender => 500,
            ErrorKind::Backend { error } => error.agent_status(),
            ErrorKind::NotImplemented => 501,
        }
    }

    /// `true` when the caller cancelled.
    pub fn is_aborted(&self) -> bool {
        matches!(self.kind, ErrorKind::Aborted)
    }

    /// The budget that ran out, if that is what happened.
    pub fn budget_exceeded(&self) -> Option<&Budget> {
        match &self.kind {
            ErrorKind::BudgetExceeded { budget } => Some(budget),
            _ => None,
        }
    }
}

impl From<BackendError> for AgentError {
    fn from(error: BackendError) -> Self {
        let message = error.to_string();
        Self::new(ErrorKind::Backend { error }, message)
    }
}

/// What went wrong in a model call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BackendErrorKind {
    /// The request could not be sent or the connection broke.
    Connection,
    /// The call took longer than its timeout.
    Timeout,
    /// Rate limited (HTTP 429).
    RateLimited,
    /// The provider is overloaded (Anthropic 529, `overloaded_error`).
    Overloaded,
    /// The provider failed (HTTP 5xx).
    Server,
    /// Credentials missing or rejected (HTTP 401/403).
    Authentication,
    /// The provider rejected the request (HTTP 400/404/422…).
    InvalidRequest,
    /// The response could not be parsed.
    Protocol,
    /// The backend lacks a capability the request needs.
    Unsupported,
}

/// A failed model call: what kind, the provider's status and message, and whatever part of
/// the answer had already streamed in (so a mid-stream failure loses nothing).
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[error("{message}")]
pub struct BackendError {
    /// What went wrong.
    pub kind: BackendErrorKind,
    /// The provider's message, or ours.
    pub message: String,
    /// The HTTP status, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// How long the provider asked us to wait before retrying.
    #[serde(
        default,
        rename = "retry_after_ms",
        skip_serializing_if = "Option::is_none",
        with = "millis_opt"
    )]
    pub retry_after: Option<Duration>,
    /// The message assembled before a mid-stream failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<Box<AssistantMessage>>,
}

impl BackendError {
    /// An error of `kind` with a message and nothing else.
    pub fn new(kind: BackendErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            status: None,
            retry_after: None,
            partial: None,
        }
    }

    /// Whether sending the same request again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self.kind {
            BackendErrorKind::Connection
            | BackendErrorKind::Timeout
            | BackendErrorKind::RateLimited
            | BackendErrorKind::Overloaded
            | BackendErrorKind::Server => true,
            BackendErrorKind::Authentication
            | BackendErrorKind::InvalidRequest
            | BackendErrorKind::Protocol
            | BackendErrorKind::Unsupported => false,
        }
    }

    /// The status an agent server answers with: the provider's client-side statuses pass
    /// through, everything else is a bad gateway.
    fn agent_status(&self) -> u16 {
        match (self.kind, self.status) {
            (BackendErrorKind::RateLimited, _) => 429,
            (BackendErrorKind::Timeout, _) => 504,
            (BackendErrorKind::Unsupported, _) => 400,
            (BackendErrorKind::InvalidRequest, Some(status)) if (400..500).contains(&status) => {
                status
            }
            _ => 502,
        }
    }
}

mod millis_opt {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        value: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}
