//! The loop's own spans (`invoke_agent`, `chat`, `execute_tool`, target `agent_loop::…`)
//! straight into OpenTelemetry SDK spans, and the GenAI metrics from the `chat` spans as they
//! close.
//!
//! tracing-opentelemetry's general layer builds every span through a `SpanBuilder` of owned
//! values, formats each field into a new `String`, and reads the clock on several edges; on
//! the loop's hot path that doubled the cost of a scripted round. This layer knows the loop's
//! fields: keys are the fields' own `&'static str` names, values from a fixed set (operation,
//! provider, finish reason, error class…) are static strings, the repeating ones (models, the
//! conversation id, tool names) are shared `Arc<str>`s from a small per-thread cache, and the
//! clock is read once at each edge. Spans still go through the SDK's `Tracer` (its id
//! generator, sampler, span limits, processors and exporter); other libraries' spans in the
//! same process go through tracing-opentelemetry as before.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::SystemTime;

use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanKind, Status, TraceContextExt as _, Tracer as _,
};
use opentelemetry::{Array, Context, Key, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{SdkTracer, Span as SdkSpan};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context as LayerContext;
use tracing_subscriber::registry::LookupSpan;

use crate::{Call, GenAiMetrics};

/// Whether a span is one of the loop's (this layer's; every other goes to
/// tracing-opentelemetry).
pub(crate) fn is_loop_span(metadata: &Metadata<'_>) -> bool {
    metadata.is_span() && metadata.target().starts_with("agent_loop")
}

/// The layer for the loop's spans. Its filter lets through the loop's spans at `INFO` and
/// above, and events at `INFO` and above (recorded as span events when inside a loop span).
pub(crate) struct LoopSpans {
    tracer: SdkTracer,
    metrics: GenAiMetrics,
}

impl LoopSpans {
    pub(crate) fn new(tracer: SdkTracer, metrics: GenAiMetrics) -> Self {
        Self { tracer, metrics }
    }

    pub(crate) fn wants(metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::INFO && (metadata.is_event() || is_loop_span(metadata))
    }
}

/// A loop span's OpenTelemetry side, in the `tracing` span's extensions.
struct LoopSpan {
    span: SdkSpan,
    start: SystemTime,
    /// The context children are started in, built when the first child starts.
    children: Option<Context>,
    /// What the metrics need, for `chat` spans.
    call: Option<Call>,
}

impl LoopSpan {
    fn context(&mut self) -> &Context {
        let span = &self.span;
        self.children.get_or_insert_with(|| {
            Context::new().with_remote_span_context(span.span_context().clone())
        })
    }
}

/// Where a visit puts the attributes: the builder's list (creation) or the live span.
enum Sink<'a> {
    List(&'a mut Vec<KeyValue>),
    Span(&'a mut SdkSpan),
}

/// A visit of a loop span's fields.
struct Fields<'a> {
    sink: Sink<'a>,
    name: Option<Cow<'static, str>>,
    kind: Option<SpanKind>,
    status: Option<Status>,
    call: Option<&'a mut Call>,
}

impl<'a> Fields<'a> {
    fn new(sink: Sink<'a>, call: Option<&'a mut Call>) -> Self {
        Self {
            sink,
            name: None,
            kind: None,
            status: None,
            call,
        }
    }

    fn push(&mut self, key: &'static str, value: Value) {
        let attribute = KeyValue::new(Key::from_static_str(key), value);
        match &mut self.sink {
            Sink::List(list) => list.push(attribute),
            Sink::Span(span) => span.set_attribute(attribute),
        }
    }

    fn string(&mut self, field: &Field, value: &str) {
        let key = field.name();
        match key {
            "otel.name" => {
                self.name = Some(match fixed(value) {
                    Some(name) => Cow::Borrowed(name),
                    None => Cow::Owned(value.to_owned()),
                });
                return;
            }
            "otel.kind" => {
                self.kind = span_kind(value);
                return;
            }
            "otel.status_code" => {
                if value.eq_ignore_ascii_case("error") {
                    self.status = Some(Status::error(""));
                } else if value.eq_ignore_ascii_case("ok") {
                    self.status = Some(Status::Ok);
                }
                return;
            }
            "otel.status_message" | "otel.status_description" => {
                self.status = Some(Status::error(value.to_owned()));
                return;
            }
            _ => {}
        }
        let string = string_value(key, value);
        if let Some(call) = self.call.as_deref_mut() {
            let slot = match key {
                "gen_ai.operation.name" => Some(&mut call.operation),
                "gen_ai.provider.name" => Some(&mut call.provider),
                "gen_ai.request.model" => Some(&mut call.request_model),
                "gen_ai.response.model" => Some(&mut call.response_model),
                "error.type" => Some(&mut call.error_type),
                _ => None,
            };
            if let Some(slot) = slot {
                *slot = Some(string.clone());
            }
        }
        let value = if key == "gen_ai.response.finish_reasons" {
            // The convention's type: an array of strings (the loop has one reason per call).
            Value::Array(Array::String(vec![string]))
        } else {
            Value::String(string)
        };
        self.push(key, value);
    }
}

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        // `%value` and `?value` fields. Formatted into a reused per-thread buffer, then kept
        // as a static or shared string when the value repeats (see `string_value`).
        let done = SCRATCH.with(|scratch| {
            let Ok(mut scratch) = scratch.try_borrow_mut() else {
                return false;
            };
            scratch.clear();
            if write!(scratch, "{value:?}").is_err() {
                return false;
            }
            self.string(field, &scratch);
            true
        });
        if !done {
            self.string(field, &format!("{value:?}"));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.string(field, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if let Some(call) = self.call.as_deref_mut() {
            call.record_i64(field, value);
        }
        self.push(field.name(), Value::I64(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        // OpenTelemetry's integers are signed; the loop records i64 anyway.
        match i64::try_from(value) {
            Ok(value) => self.record_i64(field, value),
            Err(_) => self.push(field.name(), Value::String(value.to_string().into())),
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if let Some(call) = self.call.as_deref_mut() {
            call.record_f64(field, value);
        }
        self.push(field.name(), Value::F64(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field.name(), Value::Bool(value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.string(field, &value.to_string());
    }
}

/// `otel.kind`'s value as a span kind.
fn span_kind(value: &str) -> Option<SpanKind> {
    Some(match value.to_ascii_lowercase().as_str() {
        "internal" => SpanKind::Internal,
        "client" => SpanKind::Client,
        "server" => SpanKind::Server,
        "producer" => SpanKind::Producer,
        "consumer" => SpanKind::Consumer,
        _ => return None,
    })
}

/// The loop's values from a fixed set, as static strings (no allocation, no cache).
pub(crate) fn fixed(value: &str) -> Option<&'static str> {
    macro_rules! fixed {
        ($($known:literal),* $(,)?) => {
            match value {
                $($known => Some($known),)*
                _ => None,
            }
        };
    }
    fixed!(
        // span names, operations, tool type, output type
        "invoke_agent",
        "chat",
        "execute_tool",
        "function",
        "json",
        // providers (Backend::provider_name)
        "openai",
        "anthropic",
        "gcp.gemini",
        "gemini",
        "ollama",
        "scripted",
        "replay",
        "unknown",
        // finish reasons
        "stop",
        "length",
        "tool_calls",
        "content_filter",
        "error",
        "aborted",
        // tool modes
        "Auto",
        "Return",
        // budgets
        "iterations",
        "tokens",
        "request_tokens",
        "cost_usd",
        "request_cost_usd",
        // error classes (runs, model calls, tool calls)
        "budget_exceeded",
        "tool_error",
        "config",
        "validation",
        "refused",
        "invalid_output",
        "output_refused",
        "appender",
        "not_implemented",
        "connection",
        "timeout",
        "rate_limited",
        "quota_exceeded",
        "overloaded",
        "server",
        "authentication",
        "invalid_request",
        "protocol",
        "unsupported",
        "unknown_tool",
        "invalid_arguments",
        "fatal",
        "panicked",
        "cancelled",
        "not_run",
        "round_result_limit",
        "_OTHER",
    )
}

/// Fields whose values repeat across spans (the same model, run or tool many times): kept
/// as shared strings from the per-thread cache, which has a row of slots per field.
fn repeats(key: &str) -> Option<usize> {
    Some(match key {
        "gen_ai.request.model" => 0,
        "gen_ai.response.model" => 1,
        "gen_ai.conversation.id" => 2,
        "gen_ai.provider.name" => 3,
        "gen_ai.agent.name" => 4,
        "gen_ai.tool.name" => 5,
        _ => return None,
    })
}

/// A string attribute's value: static when from a fixed set, shared when it repeats, else
/// its own copy (call ids, messages).
fn string_value(key: &str, value: &str) -> StringValue {
    if let Some(known) = fixed(value) {
        return StringValue::from(known);
    }
    if let Some(row) = repeats(key)
        && value.len() <= MAX_CACHED_LEN
    {
        return StringValue::from(cached(row, value));
    }
    StringValue::from(value.to_owned())
}

const ROWS: usize = 6;
const SLOTS: usize = 4;
const MAX_CACHED_LEN: usize = 128;

/// The recent values of each repeating field, replaced round-robin.
#[derive(Default)]
struct Cache {
    rows: [([Option<Arc<str>>; SLOTS], usize); ROWS],
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
    static SCRATCH: RefCell<String> = const { RefCell::new(String::new()) };
}

fn cached(row: usize, value: &str) -> Arc<str> {
    CACHE
        .try_with(|cache| {
            let Ok(mut cache) = cache.try_borrow_mut() else {
                return Arc::from(value);
            };
            let Some((slots, next)) = cache.rows.get_mut(row) else {
                return Arc::from(value);
            };
            if let Some(hit) = slots.iter().flatten().find(|slot| ***slot == *value) {
                return hit.clone();
            }
            let shared: Arc<str> = Arc::from(value);
            if let Some(slot) = slots.get_mut(*next) {
                *slot = Some(shared.clone());
            }
            *next = (*next + 1) % SLOTS;
            shared
        })
        .unwrap_or_else(|_| Arc::from(value))
}

impl<S> Layer<S> for LoopSpans
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        let metadata = attrs.metadata();
        if !is_loop_span(metadata) {
            return;
        }
        let Some(span) = ctx.span(id) else {
            return;
        };
        // The parent: the nearest loop span above this one (the loop's spans nest only in
        // each other), else the current OpenTelemetry context (a root, or a caller's).
        let parent = match span.parent() {
            Some(parent) => parent
                .extensions_mut()
                .get_mut::<LoopSpan>()
                .map(|loop_span| loop_span.context().clone()),
            None => None,
        }
        .unwrap_or_else(Context::current);

        let mut call = (metadata.name() == "chat").then(Call::default);
        let mut attributes = Vec::with_capacity(metadata.fields().len());
        let mut fields = Fields::new(Sink::List(&mut attributes), call.as_mut());
        attrs.record(&mut fields);
        let Fields {
            name, kind, status, ..
        } = fields;
        let start = opentelemetry::time::now();
        let mut builder = SpanBuilder::from_name(name.unwrap_or(Cow::Borrowed(metadata.name())))
            .with_kind(kind.unwrap_or(SpanKind::Internal))
            .with_start_time(start);
        builder.attributes = Some(attributes);
        let mut otel = self.tracer.build_with_context(builder, &parent);
        if let Some(status) = status {
            otel.set_status(status);
        }
        span.extensions_mut().insert(LoopSpan {
            span: otel,
            start,
            children: None,
            call,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut extensions = span.extensions_mut();
        let Some(loop_span) = extensions.get_mut::<LoopSpan>() else {
            return;
        };
        let mut fields = Fields::new(Sink::Span(&mut loop_span.span), loop_span.call.as_mut());
        values.record(&mut fields);
        let Fields { name, status, .. } = fields;
        if let Some(name) = name {
            loop_span.span.update_name(name);
        }
        if let Some(status) = status {
            loop_span.span.set_status(status);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: LayerContext<'_, S>) {
        // An event inside a loop span becomes a span event, as tracing-opentelemetry does:
        // its message is the name, its fields and level the attributes; an `ERROR` event
        // marks the span failed.
        let Some(span) = ctx.event_span(event) else {
            return;
        };
        let mut extensions = span.extensions_mut();
        let Some(loop_span) = extensions.get_mut::<LoopSpan>() else {
            return;
        };
        let metadata = event.metadata();
        let mut attributes = Vec::with_capacity(metadata.fields().len() + 2);
        let mut message = EventMessage::default();
        {
            let mut fields = Fields::new(Sink::List(&mut attributes), None);
            event.record(&mut EventFields {
                fields: &mut fields,
                message: &mut message,
            });
        }
        attributes.push(KeyValue::new(
            Key::from_static_str("level"),
            Value::String(StringValue::from(metadata.level().as_str())),
        ));
        attributes.push(KeyValue::new(
            Key::from_static_str("target"),
            Value::String(StringValue::from(metadata.target().to_owned())),
        ));
        let name = message
            .0
            .map(Cow::Owned)
            .unwrap_or(Cow::Borrowed(metadata.name()));
        loop_span
            .span
            .add_event_with_timestamp(name, opentelemetry::time::now(), attributes);
        if *metadata.level() == Level::ERROR {
            loop_span.span.set_status(Status::error(""));
        }
    }

    fn on_close(&self, id: Id, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let Some(mut loop_span) = span.extensions_mut().remove::<LoopSpan>() else {
            return;
        };
        let end = opentelemetry::time::now();
        if let Some(call) = loop_span.call.take() {
            let seconds = end
                .duration_since(loop_span.start)
                .unwrap_or_default()
                .as_secs_f64();
            self.metrics.record(call, seconds);
        }
        loop_span.span.end_with_timestamp(end);
    }
}

/// An event's `message` field.
#[derive(Default)]
struct EventMessage(Option<String>);

struct EventFields<'a, 'b> {
    fields: &'a mut Fields<'b>,
    message: &'a mut EventMessage,
}

impl Visit for EventFields<'_, '_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message.0 = Some(format!("{value:?}"));
        } else {
            self.fields.record_debug(field, value);
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.0 = Some(value.to_owned());
        } else {
            self.fields.record_str(field, value);
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.fields.record_i64(field, value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.fields.record_u64(field, value);
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.fields.record_f64(field, value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.fields.record_bool(field, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeating_values_are_shared_and_the_cache_stays_bounded() {
        let row = repeats("gen_ai.tool.name").unwrap();
        let first = cached(row, "get_weather");
        assert!(Arc::ptr_eq(&first, &cached(row, "get_weather")));
        // A model inventing tool names cannot grow the cache: it keeps the last few per field.
        for index in 0..1000 {
            cached(row, &format!("tool_{index}"));
        }
        CACHE.with(|cache| {
            let cache = cache.borrow();
            let (slots, _) = &cache.rows[row];
            assert_eq!(slots.iter().flatten().count(), SLOTS);
            assert!(
                slots
                    .iter()
                    .flatten()
                    .all(|value| value.starts_with("tool_9"))
            );
        });
        // Unique values (call ids) and long ones are never cached.
        assert_eq!(repeats("gen_ai.tool.call.id"), None);
        let long = "m".repeat(MAX_CACHED_LEN + 1);
        assert_eq!(string_value("gen_ai.request.model", &long).as_str(), long);
    }

    #[test]
    fn the_loops_fixed_values_need_no_allocation() {
        assert_eq!(fixed("tool_calls"), Some("tool_calls"));
        assert_eq!(fixed("anthropic"), Some("anthropic"));
        assert_eq!(fixed("lookup"), None);
        assert_eq!(span_kind("CLIENT"), Some(SpanKind::Client));
        assert_eq!(span_kind("sideways"), None);
    }
}
