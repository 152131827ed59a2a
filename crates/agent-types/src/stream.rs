//! The normalized events a backend yields (documented on [`StreamEvent`]).

use serde::{Deserialize, Serialize};

use crate::id::ToolCallId;
use crate::stop::StopReason;
use crate::usage::Usage;

/// One normalized event of a model call.
///
/// # Order
///
/// Adapters turn each provider's wire format into this sequence:
///
/// ```text
/// message_start
///   ( text_delta | refusal_delta | thinking_delta | thinking_signature | redacted_thinking
///   | tool_call_start (tool_call_delta)* tool_call_end
///   | usage )*
/// finish
/// ```
///
/// `finish` is the last event of a successful call; a failed call ends with an error item
/// instead. `usage` may come at any point (Anthropic reports input tokens at the start, most
/// providers report the rest at the end); each report is a running total for this call, so
/// a consumer combines them with [`Usage::merge`] (the last report wins per field), never by
/// adding them.
///
/// Tool calls are keyed by `index` because providers interleave fragments of parallel calls
/// and send the id and name only in the first fragment. Argument deltas are raw JSON text and
/// may split anywhere, even inside a string escape or a multi-byte character's escape; only
/// `tool_call_end` says the arguments are complete.
///
/// A reasoning block is its `thinking_delta`s, closed by a `thinking_signature` when the
/// provider signs it; `redacted_thinking` is a whole opaque block on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum StreamEvent {
    /// The provider accepted the call and started answering.
    MessageStart {
        /// The provider's id for the response, if it gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The model that answers, as the provider names it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
    },
    /// More answer text.
    TextDelta {
        /// The new text.
        delta: String,
    },
    /// More of a refusal: the model declining to answer, in its own words (kept apart from the
    /// answer text; the call then finishes with `content_filter`).
    RefusalDelta {
        /// The new refusal text.
        delta: String,
    },
    /// More reasoning text.
    ThinkingDelta {
        /// The new reasoning text.
        delta: String,
    },
    /// The opaque signature (or encrypted payload) that closes the current reasoning block.
    ThinkingSignature {
        /// The opaque payload, kept byte for byte.
        signature: String,
        /// The provider's id for the reasoning item (OpenAI Responses).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
    },
    /// A reasoning block the provider redacted; only its opaque data is available.
    RedactedThinking {
        /// The opaque data.
        data: String,
    },
    /// A tool call begins.
    ToolCallStart {
        /// The call's position among this message's tool calls.
        index: u32,
        /// The provider's id for the call.
        id: ToolCallId,
        /// The tool's name.
        name: String,
        /// An opaque signature attached to the call (Gemini thought signatures).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// More argument JSON for the call at `index`.
    ToolCallDelta {
        /// Which call.
        index: u32,
        /// Raw JSON text; concatenated deltas form the arguments.
        delta: String,
    },
    /// The call at `index` is complete.
    ToolCallEnd {
        /// Which call.
        index: u32,
    },
    /// Token counts so far (providers may send several; the last one wins per field).
    Usage(Usage),
    /// The call ended.
    Finish {
        /// Why the model stopped.
        stop_reason: StopReason,
    },
}
