//! The loop's spans built from its own records, straight into the SDK: the cheap path.
//!
//! The loop finds this sink in the subscriber once per run (`agent_loop::span_sink`) and
//! then calls it at each edge with what it already holds: the run's start and totals, each
//! model call's request and outcome, each tool call's trace entry. Nothing is paid per poll
//! or per `tracing` field: one SDK span is built per run, model call and tool call, with its
//! start and end timestamps read once each; keys are static; the values that repeat (the
//! provider, the run's model, the conversation id, tool names) are shared strings kept per
//! run, so an attribute is a refcount, not a copy. The GenAI metrics are recorded as each
//! model call ends, from the same values.
//!
//! Spans still go through the SDK's `Tracer` (its id generator, sampler, span limits,
//! processors and exporter). A run's span is the child of the calling tool call's span for a
//! sub-agent, else of the current OpenTelemetry context (a root, or a caller's span).

use std::any::Any;
use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use agent_loop::span_sink::{
    ChatEnd, ChatStart, RunEnd, RunSpan, RunStart, RunTotals, SpanSink, ToolSpan, ToolStart,
};
use agent_types::{TraceEntry, Usage};
use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanKind, Status, TraceContextExt as _, Tracer as _,
};
use opentelemetry::{Array, Context, Key, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{SdkTracer, Span as SdkSpan};

use crate::{Call, GenAiMetrics};

/// The sink `Telemetry::layer()` puts in the subscriber.
pub(crate) struct Sink {
    shared: Arc<Shared>,
}

struct Shared {
    tracer: SdkTracer,
    metrics: GenAiMetrics,
}

impl Sink {
    pub(crate) fn new(tracer: SdkTracer, metrics: GenAiMetrics) -> Self {
        Self {
            shared: Arc::new(Shared { tracer, metrics }),
        }
    }
}

fn kv(key: &'static str, value: impl Into<Value>) -> KeyValue {
    KeyValue::new(Key::from_static_str(key), value.into())
}

fn int(count: impl TryInto<i64>) -> Value {
    Value::I64(count.try_into().unwrap_or(i64::MAX))
}

/// `value` as a static string when the loop's fixed set has it, else shared.
fn shared(value: &str) -> StringValue {
    match crate::spans::fixed(value) {
        Some(known) => StringValue::from(known),
        None => StringValue::from(Arc::<str>::from(value)),
    }
}

/// `value`, sharing `known`'s string when they are equal (a call's model is the run's).
fn reuse(known: &StringValue, value: &str) -> StringValue {
    if known.as_str() == value {
        known.clone()
    } else {
        shared(value)
    }
}

/// A span's name, `{operation} {target}` or the operation alone.
fn span_name(operation: &'static str, target: Option<&str>) -> Cow<'static, str> {
    match target {
        Some(target) if !target.is_empty() => Cow::Owned(format!("{operation} {target}")),
        _ => Cow::Borrowed(operation),
    }
}

fn build(
    tracer: &SdkTracer,
    name: Cow<'static, str>,
    kind: SpanKind,
    attributes: Vec<KeyValue>,
    parent: &Context,
) -> (SdkSpan, SystemTime) {
    let start = opentelemetry::time::now();
    let mut builder = SpanBuilder::from_name(name)
        .with_kind(kind)
        .with_start_time(start);
    builder.attributes = Some(attributes);
    (tracer.build_with_context(builder, parent), start)
}

/// A call's (or a run's) tokens and cost under the convention's names.
fn push_usage(attributes: &mut Vec<KeyValue>, usage: &Usage, cost_usd: Option<f64>) {
    for_usage(usage, cost_usd, &mut |attribute| attributes.push(attribute));
}

/// Each of a usage's attributes, to `set`.
fn for_usage(usage: &Usage, cost_usd: Option<f64>, set: &mut dyn FnMut(KeyValue)) {
    let pairs = [
        ("gen_ai.usage.input_tokens", usage.input_tokens),
        ("gen_ai.usage.output_tokens", usage.output_tokens),
        (
            "gen_ai.usage.cache_read.input_tokens",
            usage.cache_read_tokens,
        ),
        (
            "gen_ai.usage.cache_creation.input_tokens",
            (usage.cache_write_5m_tokens.is_some() || usage.cache_write_1h_tokens.is_some()).then(
                || {
                    usage
                        .cache_write_5m_tokens
                        .unwrap_or(0)
                        .saturating_add(usage.cache_write_1h_tokens.unwrap_or(0))
                },
            ),
        ),
        (
            "agentry.usage.cache_creation_1h.input_tokens",
            usage.cache_write_1h_tokens,
        ),
        (
            "agentry.usage.reasoning.output_tokens",
            usage.reasoning_tokens,
        ),
    ];
    for (key, count) in pairs {
        if let Some(count) = count {
            set(kv(key, int(count)));
        }
    }
    if let Some(cost) = cost_usd {
        set(kv("agentry.cost_usd", cost));
    }
}

impl SpanSink for Sink {
    fn start_run(&self, start: &RunStart<'_>, parent: Option<&dyn ToolSpan>) -> Arc<dyn RunSpan> {
        let parent = parent
            .and_then(|tool| tool.as_any().downcast_ref::<Tool>())
            .map(|tool| tool.cx.clone())
            .unwrap_or_else(Context::current);
        let provider = shared(start.provider);
        let model = StringValue::from(Arc::<str>::from(start.model));
        let conversation = StringValue::from(Arc::<str>::from(start.conversation_id));
        let mut attributes = Vec::with_capacity(22);
        attributes.push(kv("gen_ai.operation.name", "invoke_agent"));
        attributes.push(kv("gen_ai.provider.name", provider.clone()));
        if let Some(name) = start.agent_name {
            attributes.push(kv("gen_ai.agent.name", shared(name)));
        }
        attributes.push(kv("gen_ai.request.model", model.clone()));
        attributes.push(kv("gen_ai.conversation.id", conversation.clone()));
        attributes.push(kv("agentry.tool_mode", start.tool_mode));
        let (span, _) = build(
            &self.shared.tracer,
            span_name("invoke_agent", start.agent_name),
            SpanKind::Internal,
            attributes,
            &parent,
        );
        Arc::new(Run {
            cx: parent.with_span(span),
            shared: Arc::clone(&self.shared),
            provider,
            model,
            chat_name: format!("chat {}", start.model),
            conversation,
            chat: Mutex::new(None),
        })
    }
}

/// A run's span (in the context its children start in) and the values its calls share.
struct Run {
    cx: Context,
    shared: Arc<Shared>,
    provider: StringValue,
    model: StringValue,
    /// `chat {model}`, for the calls to the run's model.
    chat_name: String,
    conversation: StringValue,
    /// The model call in flight (a run makes one at a time); dropped with the run, it ends.
    chat: Mutex<Option<Chat>>,
}

impl RunSpan for Run {
    fn start_chat(&self, start: &ChatStart<'_>) {
        let provider = reuse(&self.provider, start.provider);
        let model = reuse(&self.model, start.model);
        let name = if start.model == self.model.as_str() {
            Cow::Owned(self.chat_name.clone())
        } else {
            span_name("chat", Some(start.model))
        };
        let mut attributes = Vec::with_capacity(24);
        attributes.push(kv("gen_ai.operation.name", "chat"));
        attributes.push(kv("gen_ai.provider.name", provider.clone()));
        attributes.push(kv("gen_ai.request.model", model.clone()));
        if let Some(max) = start.max_tokens {
            attributes.push(kv("gen_ai.request.max_tokens", int(max)));
        }
        if let Some(temperature) = start.temperature {
            attributes.push(kv("gen_ai.request.temperature", f64::from(temperature)));
        }
        if let Some(top_p) = start.top_p {
            attributes.push(kv("gen_ai.request.top_p", f64::from(top_p)));
        }
        if start.json_output {
            attributes.push(kv("gen_ai.output.type", "json"));
        }
        attributes.push(kv(
            "gen_ai.conversation.id",
            reuse(&self.conversation, start.conversation_id),
        ));
        attributes.push(kv("agentry.iteration", int(start.iteration)));
        if let Some(purpose) = start.purpose {
            attributes.push(kv("agentry.purpose", purpose));
        }
        if let Some(system) = start.system_instructions {
            attributes.push(kv("gen_ai.system_instructions", system.to_owned()));
        }
        if let Some(messages) = &start.input_messages {
            attributes.push(kv("gen_ai.input.messages", messages.clone()));
        }
        let (span, started) = build(
            &self.shared.tracer,
            name,
            SpanKind::Client,
            attributes,
            &self.cx,
        );
        let chat = Chat {
            span,
            started,
            provider,
            model,
        };
        if let Ok(mut slot) = self.chat.lock() {
            // A call still in the slot (never ended) ends now, where it was.
            *slot = Some(chat);
        }
    }

    fn end_chat(&self, end: &ChatEnd<'_>) {
        let chat = self.chat.lock().ok().and_then(|mut slot| slot.take());
        if let Some(chat) = chat {
            chat.end(&self.shared.metrics, end);
        }
    }

    fn start_tool(&self, start: &ToolStart<'_>) -> Arc<dyn ToolSpan> {
        // Room for the end's attributes too: the span's list is never grown.
        let mut attributes = Vec::with_capacity(9);
        attributes.extend([
            kv("gen_ai.operation.name", "execute_tool"),
            kv(
                "gen_ai.tool.name",
                StringValue::from(Arc::clone(start.name)),
            ),
            kv("gen_ai.tool.call.id", start.call_id.to_owned()),
            kv("gen_ai.tool.type", "function"),
            kv("agentry.iteration", int(start.iteration)),
        ]);
        let (span, _) = build(
            &self.shared.tracer,
            span_name("execute_tool", Some(start.name)),
            SpanKind::Internal,
            attributes,
            &self.cx,
        );
        Arc::new(Tool {
            cx: self.cx.with_span(span),
        })
    }

    fn totals(&self, totals: &RunTotals<'_>) {
        let mut attributes = Vec::with_capacity(9);
        attributes.push(kv("agentry.iterations", int(totals.iterations)));
        attributes.push(kv("agentry.model_calls", int(totals.model_calls)));
        push_usage(&mut attributes, totals.usage, totals.cost_usd);
        self.cx.span().set_attributes(attributes);
    }

    fn end(&self, end: &RunEnd) {
        let span = self.cx.span();
        let mut attributes = Vec::with_capacity(3);
        attributes.push(kv("agentry.finish_reason", end.finish_reason));
        if let Some(error) = end.error_type {
            attributes.push(kv("error.type", error));
            span.set_status(Status::error(""));
        }
        if let Some(budget) = end.budget {
            attributes.push(kv("agentry.budget", budget));
        }
        span.set_attributes(attributes);
        span.end_with_timestamp(opentelemetry::time::now());
    }
}

/// A model call's span and what its metrics need.
struct Chat {
    span: SdkSpan,
    started: SystemTime,
    provider: StringValue,
    model: StringValue,
}

impl Chat {
    fn end(self, metrics: &GenAiMetrics, end: &ChatEnd<'_>) {
        let Chat {
            mut span,
            started,
            provider,
            model,
        } = self;
        let response_model = end.response_model.map(|answered| reuse(&model, answered));
        // Straight into the span's list (sized for them at the start): no list of their own.
        let mut set = |attribute: KeyValue| span.set_attribute(attribute);
        if let Some(answered) = &response_model {
            set(kv("gen_ai.response.model", answered.clone()));
        }
        if let Some(id) = end.response_id {
            set(kv("gen_ai.response.id", id.to_owned()));
        }
        if let Some(reason) = end.finish_reason {
            // The convention's type: an array of strings (one reason per call).
            set(kv(
                "gen_ai.response.finish_reasons",
                Value::Array(Array::String(vec![StringValue::from(reason)])),
            ));
        }
        if let Some(usage) = end.usage {
            for_usage(usage, end.cost_usd, &mut set);
        }
        if let Some(first) = end.time_to_first_event {
            set(kv("agentry.time_to_first_chunk", first.as_secs_f64()));
        }
        if let Some(calls) = end.tool_calls {
            set(kv("agentry.tool_calls", int(calls)));
        }
        if let Some(messages) = &end.output_messages {
            set(kv("gen_ai.output.messages", messages.clone()));
        }
        if let Some(error) = end.error_type {
            set(kv("error.type", error));
            span.set_status(Status::error(""));
        }
        let now = opentelemetry::time::now();
        let seconds = now
            .duration_since(started)
            .unwrap_or_default()
            .as_secs_f64();
        span.end_with_timestamp(now);
        metrics.record(
            Call {
                started: None,
                operation: Some(StringValue::from("chat")),
                provider: Some(provider),
                request_model: Some(model),
                response_model,
                error_type: end.error_type.map(StringValue::from),
                input_tokens: end.usage.and_then(|usage| usage.input_tokens),
                output_tokens: end.usage.and_then(|usage| usage.output_tokens),
                cost_usd: end.usage.and(end.cost_usd),
            },
            seconds,
        );
    }
}

/// A tool call's span, in the context a sub-agent's run starts in.
struct Tool {
    cx: Context,
}

impl ToolSpan for Tool {
    fn fail(&self, error_type: &'static str) {
        let span = self.cx.span();
        span.set_attribute(kv("error.type", error_type));
        span.set_status(Status::error(""));
    }

    fn end(&self, trace: &TraceEntry) {
        let span = self.cx.span();
        span.set_attributes([
            kv("agentry.tool.result_bytes", int(trace.result_bytes)),
            kv("agentry.tool.sent_bytes", int(trace.sent_bytes)),
            kv("agentry.tool.truncated", trace.truncated),
        ]);
        // What guardrails decided (`pii:redact,policy:deny`), as the tracing path records it.
        if let Some(decisions) = &trace.guardrail_decisions {
            let mut value = String::new();
            for decision in decisions.iter() {
                if !value.is_empty() {
                    value.push(',');
                }
                value.push_str(&decision.guardrail);
                value.push(':');
                value.push_str(decision.action.as_str());
            }
            span.set_attribute(kv("agentry.guardrails", value));
        }
        span.end_with_timestamp(opentelemetry::time::now());
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
