//! Rows as stored: the flat columns of `model_calls` and `tool_calls`.

use agent_loop::{ModelCallRecord, ModelCallRow, ToolCallRow};
use agent_types::{StopReason, Usage};

/// A `model_calls` row read back.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StoredModelCall {
    /// When the call ended, microseconds since the Unix epoch.
    pub at_us: i64,
    /// The tenant (empty for none).
    pub tenant: String,
    /// The caller's principal.
    pub caller: String,
    /// The session.
    pub session: String,
    /// The run.
    pub run_id: String,
    /// The provider.
    pub provider: String,
    /// The call as the loop recorded it (`round` is its `iteration`).
    pub record: ModelCallRecord,
    /// Why the call failed.
    pub error: Option<String>,
}

/// A `tool_calls` row read back.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StoredToolCall {
    /// When the call ended, microseconds since the Unix epoch.
    pub at_us: i64,
    /// The tenant (empty for none).
    pub tenant: String,
    /// The caller's principal.
    pub caller: String,
    /// The session.
    pub session: String,
    /// The run.
    pub run_id: String,
    /// The tool round, from 1.
    pub round: i64,
    /// The tool's name.
    pub tool: String,
    /// The call's id.
    pub call_id: String,
    /// Bytes of the arguments as compact JSON.
    pub arguments_bytes: i64,
    /// SHA-256 of the arguments as compact JSON, lowercase hex.
    pub arguments_sha256: String,
    /// Bytes of the full result.
    pub result_bytes: i64,
    /// Bytes sent to the model.
    pub sent_bytes: i64,
    /// Whether the result was cut.
    pub truncated: bool,
    /// Handler wall time, microseconds.
    pub duration_us: i64,
    /// `ok` or `error`.
    pub outcome: String,
    /// Why the call failed.
    pub error: Option<String>,
    /// What guardrails decided about the call, as `name:action` pairs joined by commas
    /// (`pii:redact,policy:deny`); `None` when none decided anything (and for rows stored
    /// before schema version 4).
    pub guardrails: Option<String>,
}

/// The size and SHA-256 (lowercase hex) of `arguments` serialized as compact JSON, as a
/// `tool_calls` row stores them.
pub fn arguments_digest(arguments: &serde_json::Value) -> (i64, String) {
    let (bytes, digest) = agent_loop::audit::arguments_digest(arguments);
    (to_i64(bytes), hex(&digest))
}

/// `digest` in lowercase hex.
pub(crate) fn hex(digest: &[u8; 32]) -> String {
    let mut hex = String::with_capacity(64);
    for byte in digest {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    hex
}

const HEX: &[u8; 16] = b"0123456789abcdef";

pub(crate) fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub(crate) fn opt_i64(value: Option<u64>) -> Option<i64> {
    value.map(to_i64)
}

pub(crate) fn micros(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

pub(crate) fn stop_name(reason: StopReason) -> String {
    serde_json::to_value(reason)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{reason:?}"))
}

pub(crate) fn stop_parse(name: &str) -> StopReason {
    serde_json::from_value(serde_json::Value::String(name.to_owned())).unwrap_or(StopReason::Error)
}

/// The flat columns of a model row, in `model_calls` column order (after `id`).
pub(crate) struct ModelColumns<'a> {
    pub at_us: i64,
    pub tenant: &'a str,
    pub caller: &'a str,
    pub session: &'a str,
    pub run_id: &'a str,
    pub round: i64,
    pub provider: &'a str,
    pub model: &'a str,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub cache_read_tokens: Option<i64>,
    pub cache_write_5m_tokens: Option<i64>,
    pub cache_write_1h_tokens: Option<i64>,
    pub reasoning_tokens: Option<i64>,
    pub cost_usd: Option<f64>,
    pub latency_us: i64,
    pub first_event_us: i64,
    pub tool_calls: i64,
    pub stop_reason: String,
    pub error: Option<&'a str>,
    pub response_id: Option<&'a str>,
}

impl<'a> ModelColumns<'a> {
    pub(crate) fn of(row: &'a ModelCallRow) -> Self {
        let usage = row.record.usage.unwrap_or_default();
        Self {
            at_us: row.at_us,
            tenant: row.context.tenant.as_deref().unwrap_or(""),
            caller: &row.context.caller,
            session: &row.context.session,
            run_id: &row.context.run_id,
            round: i64::from(row.record.iteration),
            provider: &row.context.provider,
            model: &row.record.model,
            input_tokens: opt_i64(usage.input_tokens),
            output_tokens: opt_i64(usage.output_tokens),
            cache_read_tokens: opt_i64(usage.cache_read_tokens),
            cache_write_5m_tokens: opt_i64(usage.cache_write_5m_tokens),
            cache_write_1h_tokens: opt_i64(usage.cache_write_1h_tokens),
            reasoning_tokens: opt_i64(usage.reasoning_tokens),
            cost_usd: row.record.cost_usd,
            latency_us: micros(row.record.latency),
            first_event_us: micros(row.record.time_to_first_event),
            tool_calls: i64::from(row.record.tool_calls),
            stop_reason: stop_name(row.record.stop_reason),
            error: row.error.as_deref(),
            response_id: row.record.response_id.as_deref(),
        }
    }
}

/// The flat columns of a tool row, in `tool_calls` column order (after `id`).
pub(crate) struct ToolColumns<'a> {
    pub at_us: i64,
    pub tenant: &'a str,
    pub caller: &'a str,
    pub session: &'a str,
    pub run_id: &'a str,
    pub round: i64,
    pub tool: &'a str,
    pub call_id: &'a str,
    pub arguments_bytes: i64,
    pub arguments_sha256: String,
    pub result_bytes: i64,
    pub sent_bytes: i64,
    pub truncated: bool,
    pub duration_us: i64,
    pub outcome: &'static str,
    pub error: Option<&'a str>,
    pub guardrails: Option<&'a str>,
}

impl<'a> ToolColumns<'a> {
    pub(crate) fn of(row: &'a ToolCallRow) -> Self {
        Self {
            at_us: row.at_us,
            tenant: row.context.tenant.as_deref().unwrap_or(""),
            caller: &row.context.caller,
            session: &row.context.session,
            run_id: &row.context.run_id,
            round: i64::from(row.round),
            tool: &row.tool,
            call_id: row.call_id.as_str(),
            arguments_bytes: to_i64(row.arguments_bytes),
            arguments_sha256: hex(&row.arguments_sha256),
            result_bytes: to_i64(row.result_bytes),
            sent_bytes: to_i64(row.sent_bytes),
            truncated: row.truncated,
            duration_us: micros(row.duration),
            outcome: row.outcome(),
            error: row.error.as_deref(),
            guardrails: row.guardrails.as_deref(),
        }
    }
}

/// Rebuilds a record from stored columns (`None` tokens stay `None`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_from(
    round: i64,
    model: String,
    tokens: [Option<i64>; 6],
    cost_usd: Option<f64>,
    latency_us: i64,
    first_event_us: i64,
    tool_calls: i64,
    stop_reason: &str,
    response_id: Option<String>,
) -> ModelCallRecord {
    let [input, output, read, w5, w1, reasoning] =
        tokens.map(|t| t.and_then(|t| u64::try_from(t).ok()));
    let usage = Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: read,
        cache_write_5m_tokens: w5,
        cache_write_1h_tokens: w1,
        reasoning_tokens: reasoning,
    };
    ModelCallRecord {
        iteration: u32::try_from(round).unwrap_or(u32::MAX),
        model,
        usage: (!usage.is_unknown()).then_some(usage),
        cost_usd,
        latency: std::time::Duration::from_micros(u64::try_from(latency_us).unwrap_or(0)),
        time_to_first_event: std::time::Duration::from_micros(
            u64::try_from(first_event_us).unwrap_or(0),
        ),
        tool_calls: u32::try_from(tool_calls).unwrap_or(u32::MAX),
        stop_reason: stop_parse(stop_reason),
        response_id,
    }
}
