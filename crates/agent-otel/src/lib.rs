//! OpenTelemetry export for agentry's loop.
//!
//! The loop (`agent-loop`) emits plain `tracing` spans named and attributed after
//! OpenTelemetry's GenAI semantic conventions: `invoke_agent {name}` per run, `chat {model}`
//! per model call, `execute_tool {tool}` per tool call (docs/observability.md lists every
//! attribute). This crate turns them into OpenTelemetry data and ships it over OTLP/HTTP:
//!
//! - spans: the loop's own built from its records straight into the SDK's spans (the loop
//!   finds the layer's sink in the subscriber, `agent_loop::span_sink`), every other
//!   library's through `tracing-opentelemetry`'s layer;
//! - the GenAI client metrics, `gen_ai.client.token.usage` and
//!   `gen_ai.client.operation.duration`, plus the `agentry.gen_ai.client.cost` counter, from
//!   each `chat` span as it closes ([`GenAiMetrics`]);
//! - configured by the standard variables: `OTEL_EXPORTER_OTLP_ENDPOINT` (and the
//!   per-signal `_TRACES_`/`_METRICS_` forms), `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`,
//!   the default, or `http/json`), `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`,
//!   `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`.
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt;
//! # fn main() -> Result<(), agent_otel::Error> {
//! if let Some(telemetry) = agent_otel::Telemetry::from_env()? {
//!     let subscriber = tracing_subscriber::registry().with(telemetry.layer());
//!     tracing::subscriber::set_global_default(subscriber).ok();
//!     // … run agents …
//!     telemetry.shutdown()?; // flushes every span and metric
//! }
//! # Ok(()) }
//! ```
//!
//! A program with its own OpenTelemetry pipeline needs none of this: put
//! `tracing_opentelemetry::layer()` with its tracer, and [`GenAiMetrics::new`] with its meter,
//! on its subscriber (it gives up the cheap path for the loop's spans, and
//! `gen_ai.response.finish_reasons` is then a plain string).

use std::time::Instant;

use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{Key, KeyValue, StringValue, Value};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

mod run_spans;
mod spans;

/// What can go wrong setting up or flushing the export.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` names a protocol this build does not speak.
    #[error(
        "OTEL_EXPORTER_OTLP_PROTOCOL={0:?} is not supported: use http/protobuf (the default) or http/json"
    )]
    Protocol(String),
    /// The OTLP exporter could not be built (a bad endpoint or header, for example).
    #[error("cannot build the OTLP exporter: {0}")]
    Build(#[from] opentelemetry_otlp::ExporterBuildError),
    /// Flushing or shutting down lost data.
    #[error("cannot flush the telemetry: {0}")]
    Flush(String),
}

/// The variables that turn the export on: any OTLP endpoint.
const ENDPOINT_VARS: [&str; 3] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
];

/// The service name when `OTEL_SERVICE_NAME` (or `service.name` in
/// `OTEL_RESOURCE_ATTRIBUTES`) does not give one.
pub const DEFAULT_SERVICE_NAME: &str = "agentry";

/// The tracer and meter scope name.
const SCOPE: &str = "agentry";

/// An OTLP/HTTP export of the loop's spans and metrics. Call [`Telemetry::shutdown`] before
/// the process exits: spans and metrics are batched, and what is not flushed is lost.
#[derive(Debug)]
pub struct Telemetry {
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
}

impl Telemetry {
    /// The export the `OTEL_*` variables describe, or `None` when no OTLP endpoint is set
    /// (`OTEL_EXPORTER_OTLP_ENDPOINT` or a per-signal endpoint).
    ///
    /// Call it outside an async runtime's worker or from any thread: the exporter's HTTP
    /// client and the batch processors run on their own threads.
    pub fn from_env() -> Result<Option<Self>, Error> {
        let set = |name: &str| std::env::var_os(name).is_some_and(|value| !value.is_empty());
        if !ENDPOINT_VARS.iter().any(|name| set(name)) {
            return Ok(None);
        }
        let protocol = protocol_from_env()?;
        let resource = resource();
        let spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .build()?;
        let metrics = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .build()?;
        let tracer_provider = SdkTracerProvider::builder()
            .with_batch_exporter(spans)
            .with_resource(resource.clone())
            .build();
        let meter_provider = SdkMeterProvider::builder()
            .with_periodic_exporter(metrics)
            .with_resource(resource)
            .build();
        Ok(Some(Self {
            tracer_provider,
            meter_provider,
        }))
    }

    /// Built from providers the caller configured (other exporters, tests with in-memory
    /// ones). [`Telemetry::shutdown`] shuts them down.
    pub fn from_providers(
        tracer_provider: SdkTracerProvider,
        meter_provider: SdkMeterProvider,
    ) -> Self {
        Self {
            tracer_provider,
            meter_provider,
        }
    }

    /// The layer to add to a `tracing` subscriber: spans to OpenTelemetry spans and the GenAI
    /// metrics, for spans and events at `INFO` and above (the loop's level).
    ///
    /// The loop finds this layer's span sink in the subscriber once per run and builds its
    /// spans (`invoke_agent`, `chat`, `execute_tool`) straight into the SDK from its own
    /// records, making no `tracing` span for them; the metrics are recorded as each model
    /// call ends. Every other span (another library's) goes through tracing-opentelemetry.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let tracer = self.tracer_provider.tracer(SCOPE);
        let metrics = GenAiMetrics::new(&self.meter_provider.meter(SCOPE));
        // The hook's filter enables nothing: it takes part in no span or event, it only
        // carries the sink for the loop to find.
        let sink = run_spans::Sink::new(tracer, metrics);
        let hook = agent_loop::span_sink::SpanHook::new(std::sync::Arc::new(sink))
            .with_filter(tracing_subscriber::filter::LevelFilter::OFF);
        hook.and_then(self.tracing_layer())
    }

    /// [`layer`](Self::layer) without the loop's span sink: the loop then makes its
    /// `tracing` spans, and this layer turns them into OpenTelemetry spans (the loop's through
    /// a layer written for their fields, every other through tracing-opentelemetry). For a
    /// subscriber that must see the loop's spans as `tracing` spans too (a log showing them);
    /// it costs a registry lookup per poll of each span's future, which `layer` does not.
    pub fn tracing_layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let tracer = self.tracer_provider.tracer(SCOPE);
        let metrics = GenAiMetrics::new(&self.meter_provider.meter(SCOPE));
        let loop_spans = spans::LoopSpans::new(tracer.clone(), metrics)
            .with_filter(filter_fn(spans::LoopSpans::wants));
        let other_spans = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            // Timestamps on every enter and exit of a span (each poll of an instrumented
            // future) and per-span location and thread attributes cost every stream event;
            // the span's own start and end are what a trace shows.
            .with_tracked_inactivity(false)
            .with_location(false)
            .with_threads(false)
            // Attaching an OpenTelemetry context on every enter serves OpenTelemetry-native
            // instrumentation inside our spans; the loop has none, and it costs every poll.
            .with_context_activation(false)
            .with_filter(filter_fn(|metadata| {
                *metadata.level() <= Level::INFO && !spans::is_loop_span(metadata)
            }));
        loop_spans.and_then(other_spans)
    }

    /// Sends everything still batched, now.
    pub fn flush(&self) -> Result<(), Error> {
        let spans = self.tracer_provider.force_flush();
        let metrics = self.meter_provider.force_flush();
        spans
            .and(metrics)
            .map_err(|error| Error::Flush(error.to_string()))
    }

    /// Flushes and stops the export. Blocks until the exporter answered (or timed out):
    /// call it from a thread that may block, not from an async task's worker.
    pub fn shutdown(&self) -> Result<(), Error> {
        let spans = self.tracer_provider.shutdown();
        let metrics = self.meter_provider.shutdown();
        spans
            .and(metrics)
            .map_err(|error| Error::Flush(error.to_string()))
    }
}

/// `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`, else
/// `http/protobuf` (the specification's default). The OTLP crate only compiles a default in.
fn protocol_from_env() -> Result<Protocol, Error> {
    let value = std::env::var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_default();
    parse_protocol(&value)
}

fn parse_protocol(value: &str) -> Result<Protocol, Error> {
    match value.trim() {
        "" | "http/protobuf" => Ok(Protocol::HttpBinary),
        "http/json" => Ok(Protocol::HttpJson),
        other => Err(Error::Protocol(other.to_owned())),
    }
}

/// The SDK's resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, the SDK's own
/// attributes), named `agentry` when the environment names no service.
fn resource() -> Resource {
    let named = std::env::var_os("OTEL_SERVICE_NAME").is_some_and(|name| !name.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES")
            .is_ok_and(|attributes| attributes.contains("service.name="));
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name(DEFAULT_SERVICE_NAME).build()
    }
}

/// The GenAI client metrics, recorded from the loop's `chat` spans as they close:
///
/// - `gen_ai.client.token.usage` (histogram, `{token}`), once per token type (`input`,
///   `output`) the provider reported;
/// - `gen_ai.client.operation.duration` (histogram, `s`), the call from its request to its
///   last event, with `error.type` when it failed;
/// - `agentry.gen_ai.client.cost` (counter, `USD`), the call's cost from the rate card.
///
/// Each carries `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model` and
/// `gen_ai.response.model` (when known). Fields are read once per call, not per stream event.
#[derive(Debug, Clone)]
pub struct GenAiMetrics {
    token_usage: Histogram<u64>,
    duration: Histogram<f64>,
    cost: Counter<f64>,
}

impl GenAiMetrics {
    /// The instruments, created on `meter` with the conventions' units and bucket boundaries.
    pub fn new(meter: &Meter) -> Self {
        let token_usage = meter
            .u64_histogram("gen_ai.client.token.usage")
            .with_unit("{token}")
            .with_description("Number of input and output tokens used.")
            .with_boundaries(vec![
                1.0,
                4.0,
                16.0,
                64.0,
                256.0,
                1024.0,
                4096.0,
                16384.0,
                65536.0,
                262_144.0,
                1_048_576.0,
                4_194_304.0,
                16_777_216.0,
                67_108_864.0,
            ])
            .build();
        let duration = meter
            .f64_histogram("gen_ai.client.operation.duration")
            .with_unit("s")
            .with_description("GenAI operation duration.")
            .with_boundaries(vec![
                0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96,
                81.92,
            ])
            .build();
        let cost = meter
            .f64_counter("agentry.gen_ai.client.cost")
            .with_unit("USD")
            .with_description("Cost of model calls from the rate card, in US dollars.")
            .build();
        Self {
            token_usage,
            duration,
            cost,
        }
    }
}

/// What a `chat` span said, gathered for its close. Strings from a fixed set (the operation,
/// the provider) are kept as static strs, so a call allocates only for its model names.
#[derive(Default)]
pub(crate) struct Call {
    pub(crate) started: Option<Instant>,
    pub(crate) operation: Option<StringValue>,
    pub(crate) provider: Option<StringValue>,
    pub(crate) request_model: Option<StringValue>,
    pub(crate) response_model: Option<StringValue>,
    pub(crate) error_type: Option<StringValue>,
    pub(crate) input_tokens: Option<u64>,
    pub(crate) output_tokens: Option<u64>,
    pub(crate) cost_usd: Option<f64>,
}

/// `value` as a static str when it is one of the values the loop records from a fixed set.
fn known(value: &str) -> StringValue {
    const KNOWN: [&str; 12] = [
        "chat",
        "anthropic",
        "openai",
        "gcp.gemini",
        "gemini",
        "scripted",
        "replay",
        "timeout",
        "rate_limited",
        "refused",
        "_OTHER",
        "tool_error",
    ];
    match KNOWN.iter().find(|known| **known == value) {
        Some(known) => StringValue::from(*known),
        None => StringValue::from(value.to_owned()),
    }
}

impl Visit for Call {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        // `%value` fields (the model names) arrive here; only the ones kept are formatted.
        let slot = match field.name() {
            "gen_ai.request.model" => &mut self.request_model,
            "gen_ai.response.model" => &mut self.response_model,
            _ => return,
        };
        *slot = Some(StringValue::from(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        let (slot, fixed) = match field.name() {
            "gen_ai.operation.name" => (&mut self.operation, true),
            "gen_ai.provider.name" => (&mut self.provider, true),
            "gen_ai.request.model" => (&mut self.request_model, false),
            "gen_ai.response.model" => (&mut self.response_model, false),
            "error.type" => (&mut self.error_type, true),
            _ => return,
        };
        *slot = Some(if fixed {
            known(value)
        } else {
            StringValue::from(value.to_owned())
        });
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        // The loop records counts as i64 (OpenTelemetry's integer type); never negative.
        let value = u64::try_from(value).unwrap_or(0);
        match field.name() {
            "gen_ai.usage.input_tokens" => self.input_tokens = Some(value),
            "gen_ai.usage.output_tokens" => self.output_tokens = Some(value),
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.record_i64(field, i64::try_from(value).unwrap_or(i64::MAX));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if field.name() == "agentry.cost_usd" {
            self.cost_usd = Some(value);
        }
    }
}

/// Whether a span is one of the loop's model calls.
fn is_model_call(metadata: &tracing::Metadata<'_>) -> bool {
    metadata.name() == "chat" && metadata.target().starts_with("agent_loop")
}

impl<S> Layer<S> for GenAiMetrics
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if !is_model_call(attrs.metadata()) {
            return;
        }
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut call = Call {
            started: Some(Instant::now()),
            ..Call::default()
        };
        attrs.record(&mut call);
        span.extensions_mut().insert(call);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        if !is_model_call(span.metadata()) {
            return;
        }
        if let Some(call) = span.extensions_mut().get_mut::<Call>() {
            values.record(call);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let Some(call) = span.extensions_mut().remove::<Call>() else {
            return;
        };
        let seconds = call.started.map(|started| started.elapsed().as_secs_f64());
        self.record_call(call, seconds);
    }
}

impl GenAiMetrics {
    /// Records one model call. The attribute lists are in key order, the order the SDK
    /// stores them in, so each measurement hashes its attributes once.
    pub(crate) fn record(&self, call: Call, seconds: f64) {
        self.record_call(call, Some(seconds));
    }

    fn record_call(&self, call: Call, seconds: Option<f64>) {
        let value = |value: StringValue| Value::String(value);
        let mut attributes = Vec::with_capacity(6);
        // `error.type` sorts first; it goes on the duration only.
        let error = call
            .error_type
            .map(|error| KeyValue::new(Key::from_static_str("error.type"), value(error)));
        attributes.push(KeyValue::new(
            Key::from_static_str("gen_ai.operation.name"),
            value(call.operation.unwrap_or(StringValue::from("chat"))),
        ));
        if let Some(provider) = call.provider {
            attributes.push(KeyValue::new(
                Key::from_static_str("gen_ai.provider.name"),
                value(provider),
            ));
        }
        if let Some(model) = call.request_model {
            attributes.push(KeyValue::new(
                Key::from_static_str("gen_ai.request.model"),
                value(model),
            ));
        }
        if let Some(model) = call.response_model {
            attributes.push(KeyValue::new(
                Key::from_static_str("gen_ai.response.model"),
                value(model),
            ));
        }
        if let Some(cost) = call.cost_usd {
            self.cost.add(cost, &attributes);
        }
        let base = attributes.len();
        for (kind, tokens) in [("input", call.input_tokens), ("output", call.output_tokens)] {
            if let Some(tokens) = tokens {
                attributes.truncate(base);
                attributes.push(KeyValue::new(
                    Key::from_static_str("gen_ai.token.type"),
                    value(StringValue::from(kind)),
                ));
                self.token_usage.record(tokens, &attributes);
            }
        }
        attributes.truncate(base);
        if let Some(error) = error {
            attributes.insert(0, error);
        }
        if let Some(seconds) = seconds {
            self.duration.record(seconds, &attributes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_protocol_variable_is_read_and_grpc_is_refused() {
        assert!(matches!(parse_protocol(""), Ok(Protocol::HttpBinary)));
        assert!(matches!(
            parse_protocol("http/protobuf"),
            Ok(Protocol::HttpBinary)
        ));
        assert!(matches!(
            parse_protocol("http/json"),
            Ok(Protocol::HttpJson)
        ));
        let error = parse_protocol("grpc").unwrap_err();
        assert!(error.to_string().contains("http/protobuf"), "{error}");
    }
}
