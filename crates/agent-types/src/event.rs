//! The events a consumer sees while a loop runs (documented on [`AgentEvent`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::AgentError;
use crate::id::{SessionId, ToolCallId};
use crate::message::{Message, Role, ToolCall, ToolResultBlock, is_false};
use crate::stop::StopReason;

/// One event of a running loop, across every model call and tool round.
///
/// # Order
///
/// One run of the loop (a fresh start or a resumption) yields:
///
/// ```text
/// session_start
///   ( message_start{assistant}
///       ( text_start text_delta* text_end
///       | thinking_start thinking_delta* thinking_end
///       | tool_call_start tool_call_delta* tool_call_end )*
///     message_end
///     ( tool_execution_start | tool_execution_delta | sub_agent | tool_execution_end )*
///     ( message_start{tool} message_end )*
///   )*
///   (awaiting_tool_execution | approval_requested)?
///   error?
/// session_end
/// ```
///
/// `session_start` is always first and `session_end` always last, even after an error or a
/// cancellation; `session_end` carries the run's finish reason, the only place it appears.
/// Text and thinking blocks never interleave with anything: each `*_start` is closed by its
/// `*_end` before another block starts. Tool-call events are keyed by `index`, and fragments
/// of parallel calls may interleave the way the provider streamed them. Tool executions of
/// one round may also interleave (they run in parallel by default); they are keyed by
/// `call_id`, and the tool messages follow in call order once the round is done. Every local
/// call gets a `tool_execution_start` and a `tool_execution_end`, including calls refused
/// before running (unknown tool, invalid arguments); remote calls get none and are listed in
/// `awaiting_tool_execution` instead. A round with calls waiting for a person's approval runs
/// none of its calls: they are listed in `approval_requested`, and the whole round's
/// executions come in the run that resumes with the decisions. The complete message, with usage and
/// stop reason, arrives in `message_end`, so a consumer that only wants whole turns can skip
/// every delta.
///
/// # Wire form
///
/// Every event serializes as one JSON object with a `"type"` tag in snake_case, e.g.
/// `{"type":"text_delta","delta":"Hel"}`; this is the format of the server's SSE stream and of
/// the CLI's `--json` output. The set may grow (the enum is `#[non_exhaustive]`): clients in
/// other languages should skip a `type` they do not know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentEvent {
    /// The loop started work on a session; always the first event.
    SessionStart {
        /// The session.
        session_id: SessionId,
    },
    /// The loop stopped; always the last event, after any error.
    SessionEnd {
        /// The session.
        session_id: SessionId,
        /// The messages this call added to the session (not the caller's input).
        messages: Vec<Message>,
        /// Why the run ended: `stop` (final answer), `length`, `content_filter`, `tool_calls`
        /// (suspended for remote tools), `error` or `aborted`. This is the only event that
        /// carries the run's finish reason, so it appears exactly once per run.
        finish_reason: StopReason,
    },
    /// The loop suspended because the model asked for remote tools (tools without a local
    /// handler). Resume the session with one result per call.
    AwaitingToolExecution {
        /// The session.
        session_id: SessionId,
        /// The calls the caller must run.
        tool_calls: Vec<ToolCall>,
    },
    /// The loop suspended because tool calls need a person's approval (docs/approval.md).
    /// Nothing of their round ran; resume the session with one decision per call.
    ApprovalRequested {
        /// The session.
        session_id: SessionId,
        /// The calls waiting for approval: id, tool name and (validated) arguments.
        tool_calls: Vec<ToolCall>,
    },
    /// A message begins: an assistant message when a model call starts streaming, a tool
    /// message when a tool result is about to be appended.
    MessageStart {
        /// Whose message.
        role: Role,
    },
    /// A message is complete. An assistant message carries its usage; `cost_usd` is set when
    /// the rate card prices the model.
    MessageEnd {
        /// The whole message.
        message: Message,
        /// What the model call cost, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
    },
    /// A text block begins.
    TextStart,
    /// More text for the open text block.
    TextDelta {
        /// The new text.
        delta: String,
    },
    /// The text block is complete.
    TextEnd {
        /// The block's whole text.
        text: String,
    },
    /// More of a refusal (the model declining to answer, in its own words); consecutive deltas
    /// form one refusal block of the message.
    RefusalDelta {
        /// The new refusal text.
        delta: String,
    },
    /// A reasoning block begins.
    ThinkingStart,
    /// More reasoning for the open block.
    ThinkingDelta {
        /// The new reasoning text.
        delta: String,
    },
    /// The reasoning block is complete.
    ThinkingEnd {
        /// The block's whole reasoning text (empty when redacted).
        thinking: String,
    },
    /// The model started a tool call.
    ToolCallStart {
        /// The call's position in this message.
        index: u32,
        /// The provider's id for the call.
        id: ToolCallId,
        /// The tool's name.
        name: String,
    },
    /// More raw argument JSON for the call at `index`.
    ToolCallDelta {
        /// Which call.
        index: u32,
        /// Raw JSON text.
        delta: String,
    },
    /// The model finished a tool call; its arguments are parsed.
    ToolCallEnd {
        /// Which call.
        index: u32,
        /// The complete call.
        tool_call: ToolCall,
    },
    /// A local tool handler started.
    ToolExecutionStart {
        /// The call being run.
        call_id: ToolCallId,
        /// The tool.
        tool_name: String,
        /// The arguments the handler receives (after any repair).
        arguments: Value,
    },
    /// A running handler reported progress.
    ToolExecutionDelta {
        /// The call being run.
        call_id: ToolCallId,
        /// The progress text.
        delta: String,
    },
    /// A handler finished (or failed, or was refused before running).
    ToolExecutionEnd {
        /// The call that ran.
        call_id: ToolCallId,
        /// The tool.
        tool_name: String,
        /// What the model will see: the serialized, possibly truncated result, or the error.
        output: String,
        /// Whether `output` describes a failure.
        #[serde(default, skip_serializing_if = "is_false")]
        is_error: bool,
        /// Whether `output` was cut to the result cap (or, for a result with content
        /// blocks, whether text was cut or a block past the binary cap was dropped).
        #[serde(default, skip_serializing_if = "is_false")]
        truncated: bool,
        /// The blocks after `output` when the tool returned content blocks (images, files,
        /// JSON), as the model will see them; left out for a text-only result.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        blocks: Vec<ToolResultBlock>,
    },
    /// The structured answer streamed so far, parsed best-effort (open strings, arrays and
    /// objects closed; an unfinished member left out). Only in a run with an output schema;
    /// not validated, and a later one may differ in any member.
    OutputPartial {
        /// The partial answer (always a JSON object).
        value: Value,
    },
    /// The structured answer, validated against the output schema; just before the run's
    /// last events.
    Output {
        /// The answer.
        value: Value,
    },
    /// A guardrail stopped the run: which one, where and why; `error` (kind
    /// `guardrail_tripped`) and `session_end` follow.
    GuardrailTripped {
        /// The decision, its action `trip`.
        decision: crate::GuardrailDecision,
    },
    /// The loop failed; `session_end` follows.
    Error {
        /// What went wrong, with the partial trace and messages.
        error: AgentError,
    },
    /// An event of a sub-agent, an agent this run called as a tool: `event` is one of the
    /// sub-agent's own events (from its `session_start` to its `session_end`), between the
    /// call's `tool_execution_start` and `tool_execution_end`. `path` names the agents from
    /// this run's child down to the one that emitted it (`["researcher"]` for a child,
    /// `["researcher", "searcher"]` for a grandchild), so `event` is never itself a
    /// `sub_agent` event. `call_id` is this run's tool call the outermost child serves.
    ///
    /// `{"type":"sub_agent","call_id":"call_1","path":["researcher"],
    /// "event":{"type":"text_delta","delta":"Hel"}}`
    SubAgent {
        /// This run's tool call that started the (outermost) sub-agent.
        call_id: ToolCallId,
        /// The agents from this run's child to the emitting one, by tool name.
        path: Vec<String>,
        /// The sub-agent's event.
        event: Box<AgentEvent>,
    },
}
