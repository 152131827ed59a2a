//! What a run returns: [`GenerateResult`] and one [`ModelCallRecord`] per model call.

use std::time::Duration;

use agent_types::{
    AgentError, AssistantMessage, ErrorKind, InvalidOutput, Message, SessionId, StopReason,
    ToolCall, TraceEntry, Usage,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::session::SessionStatus;

/// Accounting for one model call: what it consumed, cost and took, and what it asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCallRecord {
    /// How many tool rounds the run had finished when this call started: 0 for a run's first
    /// call, 1 for the call after round 1 (the trace numbers rounds from 1).
    pub iteration: u32,
    /// The model that answered (as the provider named it, or as requested).
    pub model: String,
    /// Tokens, cache tokens included, when the provider reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// What the call cost, when the rate card prices the model and usage is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// From sending the request to the last event.
    #[serde(rename = "latency_us", with = "micros")]
    pub latency: Duration,
    /// From sending the request to the first event.
    #[serde(rename = "first_event_us", with = "micros")]
    pub time_to_first_event: Duration,
    /// How many tool calls the model asked for.
    pub tool_calls: u32,
    /// Why the model stopped.
    pub stop_reason: StopReason,
    /// The provider's id for the response (`gen_ai.response.id`), when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
}

/// The outcome of [`generate`](crate::generate) or [`execute`](crate::execute).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateResult {
    /// The session the run belonged to.
    pub session_id: SessionId,
    /// `completed`, or `awaiting_tool_execution` when tool calls wait for the caller (remote
    /// tools, or any call in `return` mode).
    pub status: SessionStatus,
    /// The last assistant message: the final answer, or the turn asking for tools.
    pub message: AssistantMessage,
    /// Why the run ended: the model's stop reason, or `tool_calls` when it waits for results.
    pub finish_reason: StopReason,
    /// The messages this run added, in order (assistant turns and tool results; the caller's
    /// input only with `echo_input`).
    pub messages: Vec<Message>,
    /// The calls the caller must run before resuming, in call order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_tool_calls: Vec<ToolCall>,
    /// Tokens over every model call of this run, sub-agents' ([`Agent::as_tool`](crate::Agent::as_tool)) included.
    pub usage: Usage,
    /// Dollars over every model call of this run (plus what handlers reported); `None` when
    /// nothing could be priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// One record per model call.
    pub model_calls: Vec<ModelCallRecord>,
    /// One entry per tool call, when `include_tool_trace` was set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trace: Vec<TraceEntry>,
    /// The structured answer, validated against the run's output schema; `None` when the
    /// run had no output schema (or is waiting for tool results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// The calls waiting for a person's approval, when `status` is `awaiting_approval`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_approvals: Vec<ToolCall>,
}

impl GenerateResult {
    /// The final answer's text.
    pub fn text(&self) -> String {
        self.message.text_content()
    }

    /// The structured answer as a `T`.
    ///
    /// # Errors
    ///
    /// A configuration error when the run had no output schema or ended without an answer;
    /// an `invalid_output` error (keeping the raw JSON) when the validated answer does not
    /// deserialize into `T` (a `T` other than the schema's).
    pub fn output<T: DeserializeOwned>(&self) -> Result<T, AgentError> {
        let Some(value) = &self.output else {
            return Err(AgentError::config(
                "the run has no structured answer: set an output schema (`Options::with_output`)                  and read the result of a completed run",
            ));
        };
        T::deserialize(value).map_err(|error| {
            let errors = vec![error.to_string()];
            AgentError::new(
                ErrorKind::InvalidOutput {
                    output: Box::new(InvalidOutput {
                        raw: value.to_string(),
                        errors,
                    }),
                },
                format!("the structured answer does not deserialize into the asked type: {error}"),
            )
        })
    }

    /// The tool calls of the last assistant message (what `return` mode hands back).
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.message.tool_calls()
    }
}

mod micros {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(value.as_micros()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_micros)
    }
}
