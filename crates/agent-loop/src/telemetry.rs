//! The names the loop's spans carry: OpenTelemetry's GenAI semantic conventions where they
//! have one, `agentry.*` where they do not (docs/observability.md lists them all).
//!
//! Plain `tracing`: any subscriber sees the same spans, and tracing-opentelemetry turns them
//! into OpenTelemetry spans (it reads `otel.name`, `otel.kind` and `otel.status_code`). The
//! helpers here return `&'static str` or lazy `Display` values, so a run without a subscriber
//! formats and allocates nothing for its spans.

use std::fmt;

use agent_types::{AgentError, BackendErrorKind, Budget, ErrorKind, StopReason, Usage};

/// A span's OpenTelemetry name, `{operation} {target}` (or the operation alone), formatted
/// only when a subscriber records it.
pub(crate) struct SpanName<'a>(pub(crate) &'static str, pub(crate) Option<&'a str>);

impl fmt::Display for SpanName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(target) if !target.is_empty() => write!(f, "{} {target}", self.0),
            _ => f.write_str(self.0),
        }
    }
}

/// `gen_ai.response.finish_reasons`' value for a stop reason.
pub(crate) fn finish_reason(reason: StopReason) -> &'static str {
    match reason {
        StopReason::Stop => "stop",
        StopReason::Length => "length",
        StopReason::ToolCalls => "tool_calls",
        StopReason::ContentFilter => "content_filter",
        StopReason::Error => "error",
        StopReason::Aborted => "aborted",
    }
}

/// `error.type` for a run or model-call failure: a low-cardinality class, never the message.
pub(crate) fn error_type(error: &AgentError) -> &'static str {
    match &error.kind {
        ErrorKind::Config => "config",
        ErrorKind::Validation => "validation",
        ErrorKind::BudgetExceeded { .. } => "budget_exceeded",
        ErrorKind::Aborted => "aborted",
        ErrorKind::Tool { .. } => "tool_error",
        ErrorKind::Backend { error } => backend_error_type(error.kind),
        ErrorKind::NotImplemented => "not_implemented",
        ErrorKind::Appender => "appender",
        ErrorKind::Refused => "refused",
        ErrorKind::InvalidOutput { .. } => "invalid_output",
        ErrorKind::OutputRefused { .. } => "output_refused",
        ErrorKind::GuardrailTripped { .. } => "guardrail_tripped",
        _ => "_OTHER",
    }
}

fn backend_error_type(kind: BackendErrorKind) -> &'static str {
    match kind {
        BackendErrorKind::Connection => "connection",
        BackendErrorKind::Timeout => "timeout",
        BackendErrorKind::RateLimited => "rate_limited",
        BackendErrorKind::QuotaExceeded => "quota_exceeded",
        BackendErrorKind::Overloaded => "overloaded",
        BackendErrorKind::Server => "server",
        BackendErrorKind::Authentication => "authentication",
        BackendErrorKind::InvalidRequest => "invalid_request",
        BackendErrorKind::Protocol => "protocol",
        BackendErrorKind::Unsupported => "unsupported",
        _ => "_OTHER",
    }
}

/// `agentry.budget`: which budget ended the run, when one did.
pub(crate) fn budget(error: &AgentError) -> Option<&'static str> {
    match &error.kind {
        ErrorKind::BudgetExceeded { budget } => Some(match budget {
            Budget::Iterations { .. } => "iterations",
            Budget::Tokens { .. } => "tokens",
            Budget::RequestTokens { .. } => "request_tokens",
            Budget::CostUsd { .. } => "cost_usd",
            Budget::RequestCostUsd { .. } => "request_cost_usd",
            _ => "_OTHER",
        }),
        _ => None,
    }
}

/// A count as OpenTelemetry's integer type: tracing-opentelemetry records `i64` as an
/// integer attribute but a `u64` as its decimal text.
pub(crate) fn int(count: impl TryInto<i64>) -> i64 {
    count.try_into().unwrap_or(i64::MAX)
}

/// Marks a span failed: `error.type` and the OpenTelemetry status.
pub(crate) fn record_error(span: &tracing::Span, error: &AgentError) {
    span.record("error.type", error_type(error));
    span.record("otel.status_code", "ERROR");
}

/// Records a call's (or a run's) token counts and cost under the convention's names.
/// `gen_ai.usage.cache_creation.input_tokens` counts every cache write; the 1-hour share is
/// also in `agentry.usage.cache_creation_1h.input_tokens` (it is billed differently).
pub(crate) fn record_usage(span: &tracing::Span, usage: &Usage, cost_usd: Option<f64>) {
    let written = (usage.cache_write_5m_tokens.is_some() || usage.cache_write_1h_tokens.is_some())
        .then(|| {
            usage
                .cache_write_5m_tokens
                .unwrap_or(0)
                .saturating_add(usage.cache_write_1h_tokens.unwrap_or(0))
        });
    // One `record` for all of them: each is a trip through every layer (a span lookup and a
    // lock of its extensions); absent values (`None`) are not recorded.
    tracing::record_all!(
        span,
        gen_ai.usage.input_tokens = usage.input_tokens.map(int),
        gen_ai.usage.output_tokens = usage.output_tokens.map(int),
        gen_ai.usage.cache_read.input_tokens = usage.cache_read_tokens.map(int),
        gen_ai.usage.cache_creation.input_tokens = written.map(int),
        agentry.usage.cache_creation_1h.input_tokens = usage.cache_write_1h_tokens.map(int),
        agentry.usage.reasoning.output_tokens = usage.reasoning_tokens.map(int),
        agentry.cost_usd = cost_usd,
    );
}
