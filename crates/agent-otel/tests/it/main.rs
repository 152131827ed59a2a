//! The loop's spans and metrics through the real OpenTelemetry SDK (in-memory exporters, no
//! network): span names, kinds, parents, attributes and status as OpenTelemetry records them,
//! and the GenAI metrics with the conventions' attributes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{Input, Options, generate};
use agent_otel::Telemetry;
use agent_tools::{Registry, Tool};
use agent_types::{BackendError, BackendErrorKind, ModelPrice, RateCard, ToolCall, Usage};
use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::{Array, KeyValue, Value};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;

struct Exported {
    spans: Vec<SpanData>,
    metrics: Vec<ResourceMetrics>,
}

/// Runs `f` under the agent-otel layer over in-memory exporters; returns what was exported.
async fn export<F: Future>(f: F) -> (F::Output, Exported) {
    let spans = InMemorySpanExporter::default();
    let metrics = InMemoryMetricExporter::default();
    let telemetry = Telemetry::from_providers(
        SdkTracerProvider::builder()
            .with_simple_exporter(spans.clone())
            .build(),
        SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(metrics.clone()).build())
            .build(),
    );
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let output = {
        let _guard = tracing::subscriber::set_default(subscriber);
        f.await
    };
    telemetry.flush().unwrap();
    let exported = Exported {
        spans: spans.get_finished_spans().unwrap(),
        metrics: metrics.get_finished_metrics().unwrap(),
    };
    telemetry.shutdown().unwrap();
    (output, exported)
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|span| span.name == name).collect()
}

fn weather() -> Registry {
    let mut registry = Registry::new();
    registry
        .register(Tool::from_json_fn(
            "get_weather",
            "Weather for a city.",
            json!({"type": "object", "properties": {"city": {"type": "string"}}}),
            |args: serde_json::Value, _ctx| async move {
                Ok(json!({"city": args["city"], "temp_c": 20}))
            },
        ))
        .unwrap();
    registry
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        ..Usage::default()
    }
}

/// Every data point of metric `name` as (attributes, sum or value, count).
fn points(metrics: &[ResourceMetrics], name: &str) -> Vec<(Vec<KeyValue>, f64, u64)> {
    let mut found = Vec::new();
    for resource in metrics {
        for scope in resource.scope_metrics() {
            for metric in scope.metrics().filter(|metric| metric.name() == name) {
                match metric.data() {
                    AggregatedMetrics::U64(MetricData::Histogram(h)) => {
                        for p in h.data_points() {
                            found.push((
                                p.attributes().cloned().collect(),
                                p.sum() as f64,
                                p.count(),
                            ));
                        }
                    }
                    AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                        for p in h.data_points() {
                            found.push((p.attributes().cloned().collect(), p.sum(), p.count()));
                        }
                    }
                    AggregatedMetrics::F64(MetricData::Sum(s)) => {
                        for p in s.data_points() {
                            found.push((p.attributes().cloned().collect(), p.value(), 1));
                        }
                    }
                    other => panic!("unexpected data for {name}: {other:?}"),
                }
            }
        }
    }
    found
}

fn has(attributes: &[KeyValue], key: &str, value: &str) -> bool {
    attributes
        .iter()
        .any(|kv| kv.key.as_str() == key && kv.value.as_str() == value)
}

#[tokio::test]
async fn the_sdk_gets_genai_spans_in_a_tree_and_the_client_metrics() {
    let rate_card = RateCard::new().with(
        "m",
        ModelPrice {
            input_per_mtok: 1.0,
            output_per_mtok: 2.0,
            ..ModelPrice::default()
        },
    );
    let options = Options::auto()
        .with_tools(weather())
        .with_rate_card(rate_card)
        .with_agent_name("travel");
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_calls([
            ToolCall::new("call_1", "get_weather", json!({"city": "Lisbon"})),
            ToolCall::new("call_2", "get_weather", json!({"city": "Oslo"})),
        ])
        .with_usage(usage(100, 20)),
        ScriptedTurn::text("Lisbon is warmer.").with_usage(usage(150, 10)),
    ]);

    let (result, exported) = export(generate(
        &backend,
        Input::new("m").user("Lisbon or Oslo?"),
        &options,
    ))
    .await;
    let result = result.unwrap();
    let spans = &exported.spans;

    let run = named(spans, "invoke_agent travel");
    assert_eq!(
        run.len(),
        1,
        "{:#?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let run = run[0];
    assert_eq!(run.span_kind, SpanKind::Internal);
    assert_eq!(
        attribute(run, "gen_ai.usage.input_tokens"),
        Some(&Value::I64(250))
    );
    assert_eq!(
        attribute(run, "gen_ai.conversation.id")
            .map(Value::as_str)
            .as_deref(),
        Some(result.session_id.to_string().as_str())
    );
    let trace_id = run.span_context.trace_id();

    let chats = named(spans, "chat m");
    assert_eq!(chats.len(), 2);
    for chat in &chats {
        assert_eq!(chat.span_kind, SpanKind::Client);
        assert_eq!(chat.parent_span_id, run.span_context.span_id());
        assert_eq!(chat.span_context.trace_id(), trace_id);
        assert_eq!(
            attribute(chat, "gen_ai.operation.name")
                .map(Value::as_str)
                .as_deref(),
            Some("chat")
        );
        assert_eq!(chat.status, Status::Unset);
    }
    assert_eq!(
        attribute(chats[0], "gen_ai.usage.output_tokens"),
        Some(&Value::I64(20))
    );
    let tools = named(spans, "execute_tool get_weather");
    assert_eq!(tools.len(), 2);
    for tool in &tools {
        assert_eq!(tool.parent_span_id, run.span_context.span_id());
        assert_eq!(tool.span_kind, SpanKind::Internal);
    }

    // Tokens per type and call: 100 + 150 in, 20 + 10 out, two calls each.
    let tokens = points(&exported.metrics, "gen_ai.client.token.usage");
    let input = tokens
        .iter()
        .find(|(attributes, _, _)| has(attributes, "gen_ai.token.type", "input"))
        .unwrap();
    assert_eq!((input.1, input.2), (250.0, 2));
    for key in [
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.request.model",
        "gen_ai.response.model",
    ] {
        assert!(
            input.0.iter().any(|kv| kv.key.as_str() == key),
            "{key} missing: {:?}",
            input.0
        );
    }
    assert!(has(&input.0, "gen_ai.provider.name", "scripted"));
    let output = tokens
        .iter()
        .find(|(attributes, _, _)| has(attributes, "gen_ai.token.type", "output"))
        .unwrap();
    assert_eq!((output.1, output.2), (30.0, 2));
    let durations = points(&exported.metrics, "gen_ai.client.operation.duration");
    assert_eq!(durations.iter().map(|p| p.2).sum::<u64>(), 2);
    let cost = points(&exported.metrics, "agentry.gen_ai.client.cost");
    let total: f64 = cost.iter().map(|p| p.1).sum();
    assert!(
        (total - result.cost_usd.unwrap()).abs() < 1e-12,
        "{total} vs {:?}",
        result.cost_usd
    );
}

#[tokio::test]
async fn a_failed_model_call_is_an_error_span_and_an_errored_duration() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::new().fail_with(BackendError::new(BackendErrorKind::Overloaded, "busy"))
    ]);
    let (result, exported) = export(generate(
        &backend,
        Input::new("m").user("?"),
        &Options::auto(),
    ))
    .await;
    assert!(result.is_err());
    let chat = named(&exported.spans, "chat m")[0];
    assert!(
        matches!(chat.status, Status::Error { .. }),
        "{:?}",
        chat.status
    );
    assert_eq!(
        attribute(chat, "error.type").map(Value::as_str).as_deref(),
        Some("overloaded")
    );
    let run = named(&exported.spans, "invoke_agent")[0];
    assert!(matches!(run.status, Status::Error { .. }));
    let durations = points(&exported.metrics, "gen_ai.client.operation.duration");
    assert_eq!(durations.len(), 1);
    assert!(has(&durations[0].0, "error.type", "overloaded"));
}

/// The spans of `f` (plain `tracing` code, no loop) as the layer exports them.
fn export_sync(f: impl FnOnce()) -> Vec<SpanData> {
    let spans = InMemorySpanExporter::default();
    let telemetry = Telemetry::from_providers(
        SdkTracerProvider::builder()
            .with_simple_exporter(spans.clone())
            .build(),
        SdkMeterProvider::builder().build(),
    );
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    tracing::subscriber::with_default(subscriber, f);
    telemetry.flush().unwrap();
    let exported = spans.get_finished_spans().unwrap();
    telemetry.shutdown().unwrap();
    exported
}

#[tokio::test]
async fn finish_reasons_is_a_string_array() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_calls([ToolCall::new("c1", "get_weather", json!({"city": "Oslo"}))]),
        ScriptedTurn::text("Cold."),
    ]);
    let options = Options::auto().with_tools(weather());
    let (result, exported) = export(generate(&backend, Input::new("m").user("?"), &options)).await;
    result.unwrap();
    let reasons: Vec<_> = named(&exported.spans, "chat m")
        .iter()
        .map(|chat| attribute(chat, "gen_ai.response.finish_reasons").cloned())
        .collect();
    assert_eq!(
        reasons,
        [
            Some(Value::Array(Array::String(vec!["tool_calls".into()]))),
            Some(Value::Array(Array::String(vec!["stop".into()]))),
        ]
    );
}

#[test]
fn a_loop_span_exports_any_field_it_records() {
    // A field the layer has never heard of (the lead's `gen_ai.response.id`, say) is exported
    // with its type, whether recorded at creation or later.
    let spans = export_sync(|| {
        let span = tracing::info_span!(
            target: "agent_loop::run",
            "chat",
            otel.name = "chat m",
            otel.kind = "client",
            gen_ai.request.seed = 7_i64,
            gen_ai.response.id = tracing::field::Empty,
        );
        span.record("gen_ai.response.id", "msg_01XFDUDYJgAACzvnptvVoYEL");
    });
    let chat = named(&spans, "chat m")[0];
    assert_eq!(chat.span_kind, SpanKind::Client);
    assert_eq!(
        attribute(chat, "gen_ai.response.id")
            .map(Value::as_str)
            .as_deref(),
        Some("msg_01XFDUDYJgAACzvnptvVoYEL")
    );
    assert_eq!(attribute(chat, "gen_ai.request.seed"), Some(&Value::I64(7)));
}

#[test]
fn other_spans_go_through_tracing_opentelemetry_and_events_become_span_events() {
    let spans = export_sync(|| {
        let other = tracing::info_span!(target: "some_library", "fetch", http.method = "GET");
        other.in_scope(|| {
            tracing::info!(target: "some_library", "fetched");
        });
        let _hidden = tracing::debug_span!(target: "some_library", "detail");
        let run = tracing::info_span!(
            target: "agent_loop::run",
            "invoke_agent",
            otel.name = "invoke_agent",
        );
        run.in_scope(|| {
            tracing::warn!(error = "disk full", "could not store the results");
        });
    });
    let names: Vec<&str> = spans.iter().map(|span| span.name.as_ref()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    let other = named(&spans, "fetch")[0];
    assert_eq!(
        attribute(other, "http.method")
            .map(Value::as_str)
            .as_deref(),
        Some("GET")
    );
    assert_eq!(other.events.len(), 1);
    let run = named(&spans, "invoke_agent")[0];
    let event = run.events.iter().next().unwrap();
    assert_eq!(event.name, "could not store the results");
    assert!(
        event
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == "error" && kv.value.as_str() == "disk full"),
        "{:?}",
        event.attributes
    );
    assert!(
        event
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == "level" && kv.value.as_str() == "WARN")
    );
}

/// Counts the `tracing` spans the loop makes (target `agent_loop::…`).
struct CountLoopSpans(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CountLoopSpans {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attrs.metadata().target().starts_with("agent_loop") {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

#[tokio::test]
async fn with_the_layer_the_loop_makes_no_tracing_span_and_the_sdk_still_gets_every_span() {
    // The cost issue 14 measured: each loop span went through the `tracing` registry on every
    // poll. With the layer, the loop hands its records to the layer's sink instead.
    let made = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let spans = InMemorySpanExporter::default();
    let telemetry = Telemetry::from_providers(
        SdkTracerProvider::builder()
            .with_simple_exporter(spans.clone())
            .build(),
        SdkMeterProvider::builder().build(),
    );
    let subscriber = tracing_subscriber::registry()
        .with(telemetry.layer())
        .with(CountLoopSpans(made.clone()));
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_calls([ToolCall::new("c1", "get_weather", json!({"city": "Oslo"}))]),
        ScriptedTurn::text("Cold."),
    ]);
    let options = Options::auto().with_tools(weather());
    {
        let _guard = tracing::subscriber::set_default(subscriber);
        generate(&backend, Input::new("m").user("?"), &options)
            .await
            .unwrap();
    }
    telemetry.flush().unwrap();
    let exported = spans.get_finished_spans().unwrap();
    telemetry.shutdown().unwrap();
    assert_eq!(made.load(std::sync::atomic::Ordering::Relaxed), 0);
    let mut names: Vec<&str> = exported.iter().map(|span| span.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "chat m",
            "chat m",
            "execute_tool get_weather",
            "invoke_agent"
        ]
    );

    // Without the layer, a subscriber of its own still gets the loop's `tracing` spans.
    let made = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let subscriber = tracing_subscriber::registry().with(CountLoopSpans(made.clone()));
    let backend = ScriptedBackend::new([ScriptedTurn::text("Hi.")]);
    {
        let _guard = tracing::subscriber::set_default(subscriber);
        generate(&backend, Input::new("m").user("?"), &Options::auto())
            .await
            .unwrap();
    }
    assert_eq!(made.load(std::sync::atomic::Ordering::Relaxed), 2);
}

#[tokio::test]
async fn a_sub_agents_run_nests_under_the_calling_tools_span() {
    let child = agent_loop::Agent::builder_shared(
        std::sync::Arc::new(ScriptedBackend::new([
            ScriptedTurn::tool_call("c1", "get_weather", json!({"city": "Denver"})),
            ScriptedTurn::text("Sunny."),
        ])),
        "child-model",
    )
    .tools(weather())
    .name("researcher")
    .build();
    let mut tools = Registry::new();
    tools
        .register(child.as_tool("researcher", "Researches."))
        .unwrap();
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("p1", "researcher", json!({"input": "Denver?"})),
        ScriptedTurn::text("Sunny in Denver."),
    ]);
    let options = Options::auto().with_tools(tools);
    let (result, exported) = export(generate(
        &backend,
        Input::new("parent-model").user("?"),
        &options,
    ))
    .await;
    result.unwrap();
    let spans = &exported.spans;
    let parent = named(spans, "invoke_agent")[0];
    let call = named(spans, "execute_tool researcher")[0];
    assert_eq!(call.parent_span_id, parent.span_context.span_id());
    let sub = named(spans, "invoke_agent researcher")[0];
    assert_eq!(sub.parent_span_id, call.span_context.span_id());
    assert_eq!(sub.span_context.trace_id(), parent.span_context.trace_id());
    let sub_chats = named(spans, "chat child-model");
    assert_eq!(sub_chats.len(), 2);
    for chat in sub_chats {
        assert_eq!(chat.parent_span_id, sub.span_context.span_id());
    }
    let sub_tool = named(spans, "execute_tool get_weather")[0];
    assert_eq!(sub_tool.parent_span_id, sub.span_context.span_id());
    // The parent's own calls stay the parent's.
    for chat in named(spans, "chat parent-model") {
        assert_eq!(chat.parent_span_id, parent.span_context.span_id());
    }
}

#[tokio::test]
async fn message_content_reaches_the_spans_only_when_the_run_opts_in() {
    let run = |content: bool| async move {
        let backend = ScriptedBackend::new([ScriptedTurn::text("The secret is aubergine.")]);
        let options = Options::auto().with_trace_content(content);
        let (result, exported) = export(generate(
            &backend,
            Input::new("m")
                .system("Be brief.")
                .user("my password is hunter2"),
            &options,
        ))
        .await;
        result.unwrap();
        exported.spans
    };
    let spans = run(false).await;
    for span in &spans {
        for kv in &span.attributes {
            let text = kv.value.as_str();
            assert!(
                !text.contains("hunter2")
                    && !text.contains("aubergine")
                    && !text.contains("Be brief"),
                "{} carries content: {}",
                span.name,
                kv.key
            );
        }
    }
    let spans = run(true).await;
    let chat = named(&spans, "chat m")[0];
    let text = |key: &str| attribute(chat, key).map(|v| v.as_str().into_owned());
    assert!(text("gen_ai.input.messages").unwrap().contains("hunter2"));
    assert!(
        text("gen_ai.output.messages")
            .unwrap()
            .contains("The secret is aubergine.")
    );
    assert_eq!(
        text("gen_ai.system_instructions").as_deref(),
        Some("Be brief.")
    );
}
