//! Errors: [`AgentError`] for whatever ends a loop, [`BackendError`] for a failed model call.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::message::{AssistantMessage, Message};
use crate::trace::TraceEntry;
use crate::usage::Usage;

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
    /// Cumulative tokens across the run: every model call's input and output tokens (the
    /// run's `usage`, input + output) plus tokens tool handlers reported.
    Tokens {
        /// Tokens spent.
        used: u64,
        /// Tokens allowed.
        max: u64,
    },
    /// A model call refused before it was sent: its request's estimated input tokens do not
    /// leave room for any output within what is left of the token budget. Nothing was sent.
    RequestTokens {
        /// Tokens spent before the call (as in [`Budget::Tokens`]).
        used: u64,
        /// The request's estimated input tokens.
        estimated_input: u64,
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
    /// A model call refused before it was sent: its request's estimated input, priced at the
    /// model's input rate, does not leave room for any output within what is left of the cost
    /// budget. Nothing was sent.
    RequestCostUsd {
        /// Dollars spent before the call.
        used: f64,
        /// The request's estimated input tokens.
        estimated_input: u64,
        /// What those input tokens cost.
        estimated_usd: f64,
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
            Self::RequestTokens {
                used,
                estimated_input,
                max,
            } => write!(
                f,
                "token budget: the next request's input is estimated at {estimated_input} tokens \
                 but {} of {max} tokens are left ({used} used); nothing was sent",
                max.saturating_sub(*used)
            ),
            Self::RequestCostUsd {
                used,
                estimated_input,
                estimated_usd,
                max,
            } => write!(
                f,
                "cost budget: the next request's input is estimated at {estimated_input} tokens \
                 (${estimated_usd:.6}) but ${:.6} of ${max:.6} is left (${used:.6} used); \
                 nothing was sent",
                (max - used).max(0.0)
            ),
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
        /// The backend's error (boxed: it is the largest kind, and keeping `AgentError` small
        /// keeps every `Result` that carries it cheap to move).
        error: Box<BackendError>,
    },
    /// The feature exists in the API but not in this build or backend. 501.
    #[error("not implemented")]
    NotImplemented,
    /// The conversation appender failed. 500.
    #[error("conversation appender failed")]
    Appender,
    /// A gate (a hook run before each model call, e.g. a tenancy or policy check) refused
    /// the request. 403.
    #[error("refused")]
    Refused,
    /// The model's final answer did not match the run's output schema, after every retry
    /// (`max_output_retries`). 422.
    #[error("the answer does not match the output schema")]
    InvalidOutput {
        /// The last answer and what is wrong with it; in JSON, `raw` and `errors` beside
        /// `kind` (boxed: it is rarely read, and keeps `AgentError` small).
        #[serde(flatten)]
        output: Box<InvalidOutput>,
    },
    /// The model refused to give a structured answer (a refusal instead of content). 422.
    #[error("the model refused to answer")]
    OutputRefused {
        /// The model's refusal, as it gave it.
        refusal: String,
    },
    /// A guardrail stopped the run (its input, or its answer without a retry left). 403.
    #[error("guardrail `{guardrail}` tripped on the {stage}")]
    GuardrailTripped {
        /// The guardrail's name.
        guardrail: String,
        /// Where it looked.
        stage: crate::GuardrailStage,
    },
}

/// A structured answer that failed the output schema: what the model sent and why it fails.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvalidOutput {
    /// The last answer as the model gave it (the final-answer tool's arguments as JSON, or
    /// the text).
    pub raw: String,
    /// What is wrong with it: each problem, after the JSON Pointer of its place.
    #[serde(default)]
    pub errors: Vec<String>,
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
    /// What the run spent before the failure, in JSON as `usage` and `cost_usd` beside the
    /// other fields (each left out when unknown). Boxed: it is rarely read, and keeping
    /// `AgentError` small keeps every `Result` that carries it cheap to move.
    #[serde(flatten, default)]
    pub spent: Box<Spend>,
}

/// What a run spent: the same two numbers a successful run reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    /// Tokens the run's model calls consumed (input + output as the provider reported them).
    /// Empty when no call reported usage.
    #[serde(default, skip_serializing_if = "Usage::is_unknown")]
    pub usage: Usage,
    /// Dollars: model calls priced by the rate card plus what handlers reported; `None` when
    /// nothing could be priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl AgentError {
    /// An error of `kind` with a message and nothing partial.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            partial_trace: Vec::new(),
            partial_messages: Vec::new(),
            spent: Box::default(),
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

    /// Attaches what the run spent before it failed.
    #[must_use]
    pub fn with_spend(mut self, usage: Usage, cost_usd: Option<f64>) -> Self {
        *self.spent = Spend { usage, cost_usd };
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
            ErrorKind::Refused | ErrorKind::GuardrailTripped { .. } => 403,
            ErrorKind::InvalidOutput { .. } | ErrorKind::OutputRefused { .. } => 422,
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
        Self::new(
            ErrorKind::Backend {
                error: Box::new(error),
            },
            message,
        )
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
    /// Rate limited (HTTP 429): waiting helps.
    RateLimited,
    /// The account's quota or credit is used up (OpenAI `insufficient_quota`, also sent as
    /// HTTP 429): waiting does not help, so it is not retryable.
    QuotaExceeded,
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

    /// The error an adapter returns, before sending anything, for a content block its
    /// provider cannot take: [`Unsupported`](BackendErrorKind::Unsupported) (400), naming the
    /// provider, the block kind and where it sat (`"a tool result"`, `"a user turn"`).
    pub fn unsupported_content(provider: &str, kind: crate::ContentKind, place: &str) -> Self {
        let article = match kind {
            crate::ContentKind::Image | crate::ContentKind::Audio => "an",
            _ => "a",
        };
        Self::new(
            BackendErrorKind::Unsupported,
            format!("{provider} cannot take {article} {kind} block in {place}; nothing was sent"),
        )
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
            | BackendErrorKind::QuotaExceeded
            | BackendErrorKind::InvalidRequest
            | BackendErrorKind::Protocol
            | BackendErrorKind::Unsupported => false,
        }
    }

    /// The status an agent server answers with: the provider's client-side statuses pass
    /// through, everything else is a bad gateway.
    fn agent_status(&self) -> u16 {
        match (self.kind, self.status) {
            (BackendErrorKind::RateLimited | BackendErrorKind::QuotaExceeded, _) => 429,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(kind: BackendErrorKind, status: Option<u16>) -> AgentError {
        AgentError::from(BackendError {
            status,
            ..BackendError::new(kind, "provider said no")
        })
    }

    #[test]
    fn status_of_every_kind() {
        let cases = [
            (ErrorKind::Config, 400),
            (ErrorKind::Validation, 422),
            (
                ErrorKind::BudgetExceeded {
                    budget: Budget::Iterations { used: 10, max: 10 },
                },
                429,
            ),
            (ErrorKind::Aborted, 499),
            (
                ErrorKind::Tool {
                    tool: "get_weather".into(),
                },
                500,
            ),
            (ErrorKind::NotImplemented, 501),
            (ErrorKind::Refused, 403),
            (
                ErrorKind::GuardrailTripped {
                    guardrail: "pii".into(),
                    stage: crate::GuardrailStage::Input,
                },
                403,
            ),
            (ErrorKind::Appender, 500),
            (
                ErrorKind::InvalidOutput {
                    output: Box::new(InvalidOutput {
                        raw: "{\"city\": 3}".into(),
                        errors: vec!["/city: 3 is not of type \"string\"".into()],
                    }),
                },
                422,
            ),
            (
                ErrorKind::OutputRefused {
                    refusal: "I can't help with that.".into(),
                },
                422,
            ),
            (
                ErrorKind::Backend {
                    error: Box::new(BackendError::new(BackendErrorKind::Server, "boom")),
                },
                502,
            ),
        ];
        for (kind, status) in cases {
            let error = AgentError::new(kind.clone(), "x");
            assert_eq!(error.status(), status, "{kind:?}");
        }
    }

    #[test]
    fn status_of_every_backend_kind() {
        use BackendErrorKind::*;
        let cases = [
            (Connection, None, 502),
            (Timeout, None, 504),
            (RateLimited, Some(429), 429),
            // Rate limiting is 429 whatever status the adapter recorded.
            (RateLimited, None, 429),
            (Overloaded, Some(529), 502),
            (Server, Some(500), 502),
            (Server, Some(503), 502),
            // Our credentials are not the caller's fault: a bad gateway, not a 401.
            (Authentication, Some(401), 502),
            (Authentication, Some(403), 502),
            // The provider rejected the request the caller shaped: its 4xx passes through.
            (InvalidRequest, Some(400), 400),
            (InvalidRequest, Some(404), 404),
            (InvalidRequest, Some(413), 413),
            (InvalidRequest, Some(422), 422),
            // ...but never a 5xx or a missing status.
            (InvalidRequest, Some(500), 502),
            (InvalidRequest, None, 502),
            (Protocol, None, 502),
            (Protocol, Some(200), 502),
            (Unsupported, None, 400),
        ];
        for (kind, status, expected) in cases {
            assert_eq!(
                backend(kind, status).status(),
                expected,
                "{kind:?} with {status:?}"
            );
        }
    }

    #[test]
    fn retryable_backend_kinds() {
        use BackendErrorKind::*;
        for kind in [Connection, Timeout, RateLimited, Overloaded, Server] {
            assert!(BackendError::new(kind, "x").is_retryable(), "{kind:?}");
        }
        for kind in [Authentication, InvalidRequest, Protocol, Unsupported] {
            assert!(!BackendError::new(kind, "x").is_retryable(), "{kind:?}");
        }
    }

    #[test]
    fn budget_display_texts() {
        assert_eq!(
            Budget::Iterations { used: 10, max: 10 }.to_string(),
            "tool iterations: 10 of 10"
        );
        assert_eq!(
            Budget::Tokens {
                used: 120_500,
                max: 100_000
            }
            .to_string(),
            "token budget: 120500 of 100000 tokens"
        );
        assert_eq!(
            Budget::CostUsd {
                used: 0.0125,
                max: 0.01
            }
            .to_string(),
            "cost budget: $0.012500 of $0.010000"
        );
        assert_eq!(
            Budget::RequestTokens {
                used: 1_200,
                estimated_input: 5_800_000,
                max: 100_000
            }
            .to_string(),
            "token budget: the next request's input is estimated at 5800000 tokens but 98800 \
             of 100000 tokens are left (1200 used); nothing was sent"
        );
        assert_eq!(
            Budget::RequestCostUsd {
                used: 0.5,
                estimated_input: 5_800_000,
                estimated_usd: 17.4,
                max: 1.0
            }
            .to_string(),
            "cost budget: the next request's input is estimated at 5800000 tokens ($17.400000) \
             but $0.500000 of $1.000000 is left ($0.500000 used); nothing was sent"
        );
        assert_eq!(
            Budget::RepeatedCall {
                tool: "search_docs".into(),
                times: 3
            }
            .to_string(),
            "`search_docs` was called 3 times in a row with the same arguments"
        );
    }

    #[test]
    fn budget_error_names_the_budget() {
        let budget = Budget::Iterations { used: 3, max: 3 };
        let error = AgentError::budget(budget.clone());
        assert_eq!(error.budget_exceeded(), Some(&budget));
        assert_eq!(
            error.message,
            "tool iterations: 3 of 3; raise the limit or narrow the task"
        );
        assert_eq!(
            error.to_string(),
            "budget exceeded (tool iterations: 3 of 3): \
             tool iterations: 3 of 3; raise the limit or narrow the task"
        );
        assert!(!error.is_aborted());
        assert_eq!(AgentError::config("x").budget_exceeded(), None);
    }

    #[test]
    fn aborted_is_its_own_kind() {
        let aborted = AgentError::new(ErrorKind::Aborted, "cancelled by caller");
        assert!(aborted.is_aborted());
        assert_eq!(aborted.to_string(), "aborted: cancelled by caller");
        assert!(!backend(BackendErrorKind::Connection, None).is_aborted());
    }

    #[test]
    fn backend_error_converts_with_its_message() {
        let error = backend(BackendErrorKind::Server, Some(500));
        assert_eq!(error.message, "provider said no");
        assert_eq!(error.to_string(), "backend error: provider said no");
        assert!(matches!(
            error.kind,
            ErrorKind::Backend { ref error } if error.status == Some(500)
        ));
    }

    #[test]
    fn with_partial_keeps_trace_and_messages() {
        let error = AgentError::config("x").with_partial(
            Vec::new(),
            vec![Message::user("hi"), Message::system("be brief")],
        );
        assert_eq!(error.partial_messages.len(), 2);
        assert!(error.partial_trace.is_empty());
    }

    #[test]
    fn spend_is_carried_and_serialized_only_when_known() {
        let bare = serde_json::to_value(AgentError::config("x")).unwrap();
        assert!(
            bare.get("usage").is_none() && bare.get("cost_usd").is_none(),
            "{bare}"
        );
        let usage = Usage {
            input_tokens: Some(1_000),
            output_tokens: Some(28),
            ..Usage::default()
        };
        let error = AgentError::budget(Budget::Tokens {
            used: 1_028,
            max: 1_000,
        })
        .with_spend(usage, Some(0.25));
        let json = serde_json::to_value(&error).unwrap();
        assert_eq!(json["usage"]["input_tokens"], 1_000);
        assert_eq!(json["cost_usd"], 0.25);
        let back: AgentError = serde_json::from_value(json).unwrap();
        assert_eq!(back, error);
    }
}
