//! The trace: one entry per tool invocation.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::id::ToolCallId;

/// What happened when one tool call ran (or was refused).
///
/// Sizes are of the JSON-serialized result: `result_bytes` before truncation, `sent_bytes`
/// after, so a trace shows what the model saw as well as what the tool produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceEntry {
    /// The loop round, starting at 1.
    pub iteration: u32,
    /// The call's id.
    pub call_id: ToolCallId,
    /// The tool's name as the model wrote it.
    pub tool_name: String,
    /// The arguments the handler received (after any lenient repair).
    pub arguments: Value,
    /// Size of the full serialized result in bytes.
    pub result_bytes: u64,
    /// Size of what was sent to the model in bytes (after truncation).
    pub sent_bytes: u64,
    /// Whether the result was cut to fit the cap.
    pub truncated: bool,
    /// Wall time the handler ran, in microseconds on the wire.
    #[serde(rename = "duration_us", with = "micros")]
    pub duration: Duration,
    /// What went wrong, if the call failed (validation, unknown tool, handler error, timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The repairs lenient validation made to the model's arguments, in words
    /// (e.g. `/count: parsed the string "5" as a number`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repairs: Vec<String>,
    /// When the tool is an agent (a sub-agent called as a tool), the trace of its run: one
    /// entry per tool call it made, nested the same way for its own sub-agents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sub_trace: Vec<TraceEntry>,
    /// What guardrails decided about this call (a denial, a rewrite of its arguments, a
    /// redaction of its result…), in the order they decided; read it with
    /// [`guardrails`](Self::guardrails). Boxed and `None` without decisions, so an entry
    /// (kept several times in every tool call's future) grows by one pointer only.
    #[serde(
        rename = "guardrails",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub guardrail_decisions: Option<Box<Vec<crate::GuardrailDecision>>>,
}

impl TraceEntry {
    /// What guardrails decided about this call, in order (empty when none decided).
    pub fn guardrails(&self) -> &[crate::GuardrailDecision] {
        self.guardrail_decisions
            .as_deref()
            .map_or(&[], Vec::as_slice)
    }
}

mod micros {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        // Saturate instead of failing: a trace entry is never worth an error.
        s.serialize_u64(u64::try_from(value.as_micros()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_micros)
    }
}
