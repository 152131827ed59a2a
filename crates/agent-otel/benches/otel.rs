//! The cost of the OpenTelemetry layer on the loop, measured against the same loop without a
//! subscriber, in one run (issue 14's budget: at most 5% more CPU per tool round).
//!
//! The workload is the loop bench's (crates/agent-loop/benches/loop.rs): a scripted model asks
//! for three trivial tools in each of three rounds, then answers, on top of a 50-message
//! history. "on" runs it under `tracing_subscriber::registry()` with `Telemetry::layer()`:
//! tracing-opentelemetry's span layer and the GenAI metrics layer, over a span processor that
//! exports synchronously to an exporter that drops the spans (so every span's whole life,
//! export included, is on the measured thread) and a periodic metric reader (aggregation on
//! every call; its collection, every 60 s, does not fall in the run). Samples of "off" and "on" alternate, so drift hits both.
//!
//! Run with `cargo bench -p agent-otel --bench otel`. Reported, never asserted.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{Input, Options, generate};
use agent_otel::Telemetry;
use agent_tools::{Registry, Tool};
use agent_types::{Message, ToolCall, Usage, UserMessage};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use serde_json::json;
use tokio::runtime::Runtime;
use tracing_subscriber::layer::SubscriberExt;

const SAMPLES: usize = 21;
const BATCH: usize = 100;
const ROUNDS: usize = 3;
const CALLS_PER_ROUND: usize = 3;
const HISTORY_MESSAGES: usize = 50;

/// Drops what it is given; counts the spans so the bench can check the layer saw them.
#[derive(Debug, Clone, Default)]
struct Discard(Arc<AtomicUsize>);

impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.fetch_add(batch.len(), Ordering::Relaxed);
        black_box(batch);
        Ok(())
    }
}

fn lookup_tool() -> Tool {
    Tool::from_json_fn(
        "lookup",
        "Looks a key up.",
        json!({"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}),
        |arguments, _ctx| async move { Ok(json!({"key": arguments["key"], "value": 42})) },
    )
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        ..Usage::default()
    }
}

fn script() -> ScriptedBackend {
    let mut turns: Vec<ScriptedTurn> = (0..ROUNDS)
        .map(|round| {
            ScriptedTurn::tool_calls((0..CALLS_PER_ROUND).map(|call| {
                ToolCall::new(
                    format!("call_{round}_{call}"),
                    "lookup",
                    json!({"key": format!("key-{round}-{call}")}),
                )
            }))
            .with_usage(usage(30_000, 60))
        })
        .collect();
    turns.push(ScriptedTurn::text("All nine keys hold 42.").with_usage(usage(30_500, 20)));
    ScriptedBackend::cycle(turns)
}

fn input() -> Input {
    let mut input = Input::new("bench-model");
    for index in 0..HISTORY_MESSAGES {
        let text = format!(
            "Message {index}: {}",
            "lorem ipsum dolor sit amet ".repeat(20)
        );
        input.messages.push(if index % 2 == 0 {
            Message::User(UserMessage::text(text))
        } else {
            Message::Assistant(agent_types::AssistantMessage::text(text))
        });
    }
    input.user("Look up the nine keys and report.")
}

/// Nanoseconds per run of one sample: `BATCH` runs of the workload.
fn sample(rt: &Runtime, backend: &ScriptedBackend, options: &Options, input: &Input) -> f64 {
    let inputs: Vec<Input> = (0..BATCH).map(|_| input.clone()).collect();
    let start = Instant::now();
    rt.block_on(async {
        for input in inputs {
            let result = generate(backend, input, options).await.unwrap();
            black_box(result);
        }
    });
    start.elapsed().as_nanos() as f64 / BATCH as f64
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut tools = Registry::new();
    tools.register(lookup_tool()).unwrap();
    let options = Options::auto().with_tools(tools);
    let input = input();

    let exported = Discard::default();
    let telemetry = Telemetry::from_providers(
        SdkTracerProvider::builder()
            .with_simple_exporter(exported.clone())
            .build(),
        SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(InMemoryMetricExporter::default()).build())
            .build(),
    );
    let subscriber = Arc::new(tracing_subscriber::registry().with(telemetry.layer()));

    // A subscriber with no layer: what the loop's own span creation and recording cost.
    let bare = Arc::new(tracing_subscriber::registry());
    let bare_backend = script();
    let bare_run = |rt: &Runtime| {
        let _guard = tracing::subscriber::set_default(bare.clone());
        sample(rt, &bare_backend, &options, &input)
    };
    let off_backend = script();
    let on_backend = script();
    let on = |rt: &Runtime| {
        let _guard = tracing::subscriber::set_default(subscriber.clone());
        sample(rt, &on_backend, &options, &input)
    };
    // Warm-up.
    for _ in 0..2 {
        sample(&rt, &off_backend, &options, &input);
        bare_run(&rt);
        on(&rt);
    }
    let before = exported.0.load(Ordering::Relaxed);
    let (mut off_ns, mut bare_ns, mut on_ns) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        off_ns.push(sample(&rt, &off_backend, &options, &input));
        bare_ns.push(bare_run(&rt));
        on_ns.push(on(&rt));
    }
    let spans = exported.0.load(Ordering::Relaxed) - before;
    // One run: invoke_agent, four chat, nine execute_tool.
    assert_eq!(
        spans,
        SAMPLES * BATCH * 14,
        "the layer did not see every span"
    );
    telemetry.shutdown().unwrap();

    let off = median(off_ns) / ROUNDS as f64;
    let bare = median(bare_ns) / ROUNDS as f64;
    let on = median(on_ns) / ROUNDS as f64;
    println!(
        "loop, no subscriber                          {:>10.2} µs/round",
        off / 1000.0
    );
    println!(
        "loop, a subscriber without layers            {:>10.2} µs/round   +{:.2} µs/round  (+{:.1}%)",
        bare / 1000.0,
        (bare - off) / 1000.0,
        (bare - off) / off * 100.0
    );
    println!(
        "loop, OpenTelemetry layer (spans + metrics)  {:>10.2} µs/round   +{:.2} µs/round  (+{:.1}%)",
        on / 1000.0,
        (on - off) / 1000.0,
        (on - off) / off * 100.0
    );
}
