//! Guardrail decisions: what a guardrail decided about a run's input, a tool call, a tool
//! result or the final answer, as the trace, the events and a trip's error carry it.

use serde::{Deserialize, Serialize};

use crate::id::ToolCallId;

/// Where in a run a guardrail looked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum GuardrailStage {
    /// The caller's input, before (or while) the first model call.
    Input,
    /// A tool call, before it runs.
    ToolCall,
    /// A tool call's result, before the model sees it.
    ToolResult,
    /// The final answer (text or structured output).
    Output,
}

impl GuardrailStage {
    /// The stage as the wire spells it (`tool_call`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Input => "input",
            Self::ToolCall => "tool_call",
            Self::ToolResult => "tool_result",
            Self::Output => "output",
        }
    }
}

impl std::fmt::Display for GuardrailStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a guardrail did. Passing checks are not recorded: a decision is something that
/// changed or stopped the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum GuardrailAction {
    /// The run ended with a `guardrail_tripped` error.
    Trip,
    /// The tool call was not run; the model saw the reason.
    Deny,
    /// The tool call runs with other arguments (the trace's `arguments` are the new ones).
    Rewrite,
    /// The tool call waits for a person's approval.
    RequireApproval,
    /// Parts of the tool result were redacted before the model saw it.
    Redact,
    /// The tool result was replaced before the model saw it.
    Replace,
    /// The answer went back to the model with the reason, for another try.
    Retry,
}

impl GuardrailAction {
    /// The action as the wire spells it (`require_approval`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Trip => "trip",
            Self::Deny => "deny",
            Self::Rewrite => "rewrite",
            Self::RequireApproval => "require_approval",
            Self::Redact => "redact",
            Self::Replace => "replace",
            Self::Retry => "retry",
        }
    }
}

/// One guardrail decision: which guardrail, where, what it did and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardrailDecision {
    /// The guardrail's name (`pii`, `policy`, or an application's own).
    pub guardrail: String,
    /// Where it looked.
    pub stage: GuardrailStage,
    /// What it did.
    pub action: GuardrailAction,
    /// Why, in words (for a redaction: what was redacted, never the redacted text).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The tool call it concerned, for the tool stages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<ToolCallId>,
}

impl GuardrailDecision {
    /// A decision of `guardrail` at `stage`.
    pub fn new(
        guardrail: impl Into<String>,
        stage: GuardrailStage,
        action: GuardrailAction,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            guardrail: guardrail.into(),
            stage,
            action,
            reason: reason.into(),
            call_id: None,
        }
    }

    /// The same decision, about the tool call `call_id`.
    #[must_use]
    pub fn for_call(mut self, call_id: ToolCallId) -> Self {
        self.call_id = Some(call_id);
        self
    }
}
