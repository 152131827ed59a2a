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
//! Reported per round: the median sample's wall time, and the measuring thread's CPU time
//! (every span is built, ended and exported on it) averaged over all samples. Run with `cargo bench -p agent-otel --bench otel`.
//! Reported, never asserted.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use agent_backends::Provider;
use agent_backends::replay::{Cassette, ReplayBackend};
use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{Input, Options, generate};
use agent_otel::Telemetry;
use agent_tools::{Registry, Tool};
use agent_types::{Backend, Message, ToolCall, Usage, UserMessage};
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

/// This thread's CPU time in nanoseconds (Linux's schedstat, updated at scheduler ticks), or
/// `None` elsewhere.
fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// One sample, `BATCH` runs of the workload: wall nanoseconds per run, and this thread's CPU
/// nanoseconds for the whole sample (tick-grained: summed over the samples, not per sample).
fn sample<B: Backend>(
    rt: &Runtime,
    backend: &B,
    options: &Options,
    input: &Input,
    before_each: &dyn Fn(),
) -> (f64, u64) {
    let inputs: Vec<Input> = (0..BATCH).map(|_| input.clone()).collect();
    let cpu = thread_cpu_ns();
    let start = Instant::now();
    rt.block_on(async {
        for input in inputs {
            before_each();
            let result = generate(backend, input, options).await.unwrap();
            black_box(result);
        }
    });
    let wall = start.elapsed().as_nanos() as f64 / BATCH as f64;
    let cpu = match (cpu, thread_cpu_ns()) {
        (Some(before), Some(after)) => after - before,
        _ => 0,
    };
    (wall, cpu)
}

/// Median wall time per round and mean CPU time per round over the samples.
fn summary(samples: &[(f64, u64)], rounds: usize) -> (f64, f64) {
    let wall = median(samples.iter().map(|s| s.0).collect()) / rounds as f64;
    let cpu: u64 = samples.iter().map(|s| s.1).sum();
    (wall, cpu as f64 / (samples.len() * BATCH * rounds) as f64)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Samples "off", "bare" and "on" alternately for one workload and prints the rows.
#[allow(clippy::too_many_arguments)]
fn compare<B: Backend>(
    title: &str,
    rt: &Runtime,
    backends: [&B; 3],
    options: &Options,
    input: &Input,
    before_each: &dyn Fn(&B),
    telemetry: &Telemetry,
    spans_per_run: usize,
    rounds: usize,
    exported: &Discard,
) {
    let bare = Arc::new(tracing_subscriber::registry());
    let on = Arc::new(tracing_subscriber::registry().with(telemetry.layer()));
    let [off_backend, bare_backend, on_backend] = backends;
    let run = |variant: usize| match variant {
        0 => sample(rt, off_backend, options, input, &|| {
            before_each(off_backend)
        }),
        1 => {
            let _guard = tracing::subscriber::set_default(bare.clone());
            sample(rt, bare_backend, options, input, &|| {
                before_each(bare_backend)
            })
        }
        _ => {
            let _guard = tracing::subscriber::set_default(on.clone());
            sample(rt, on_backend, options, input, &|| before_each(on_backend))
        }
    };
    for _ in 0..2 {
        for variant in 0..3 {
            run(variant);
        }
    }
    let before = exported.0.load(Ordering::Relaxed);
    let mut samples = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..SAMPLES {
        for (variant, samples) in samples.iter_mut().enumerate() {
            samples.push(run(variant));
        }
    }
    let spans = exported.0.load(Ordering::Relaxed) - before;
    assert_eq!(
        spans,
        SAMPLES * BATCH * spans_per_run,
        "the layer did not see every span"
    );
    println!("{title}");
    let names = [
        "no subscriber",
        "a subscriber without layers",
        "OpenTelemetry layer (spans + metrics)",
    ];
    let (off_wall, off_cpu) = summary(&samples[0], rounds);
    for (name, samples) in names.iter().zip(&samples) {
        let (wall, cpu) = summary(samples, rounds);
        println!(
            "  {name:<40} {:>8.2} µs/round (median wall) {:>+7.1}%   {:>8.2} µs CPU/round (mean) {:>+7.1}%",
            wall / 1000.0,
            (wall - off_wall) / off_wall * 100.0,
            cpu / 1000.0,
            (cpu - off_cpu) / off_cpu * 100.0,
        );
    }
}

/// A tool answering like the demo's (the recorded model ignores what it says).
fn fixed_tool(name: &str) -> Tool {
    Tool::from_json_fn(
        name,
        "A fixed answer.",
        json!({"type": "object"}),
        |_arguments, _ctx| async move { Ok(json!({"city": "Lisbon", "temp_c": 19, "value": 15})) },
    )
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let exported = Discard::default();
    let telemetry = Telemetry::from_providers(
        SdkTracerProvider::builder()
            .with_simple_exporter(exported.clone())
            .build(),
        SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(InMemoryMetricExporter::default()).build())
            .build(),
    );

    // 1. The loop bench's workload, scripted (nothing but the loop).
    let mut tools = Registry::new();
    tools.register(lookup_tool()).unwrap();
    let options = Options::auto().with_tools(tools);
    let (a, b, c) = (script(), script(), script());
    compare(
        &format!(
            "scripted model, {ROUNDS} rounds of {CALLS_PER_ROUND} tools, {HISTORY_MESSAGES}-message history"
        ),
        &rt,
        [&a, &b, &c],
        &options,
        &input(),
        &|_| {},
        &telemetry,
        // invoke_agent, four chat, nine execute_tool
        14,
        ROUNDS,
        &exported,
    );

    // 2. `agentry demo`'s conversation: the real Anthropic adapter over loopback HTTP, two tool
    //    rounds (three calls, then one), three model calls.
    let (model, rounds) = agent_backends::replay::demo(Provider::Anthropic);
    let start = || {
        rt.block_on(ReplayBackend::start(
            Provider::Anthropic,
            std::iter::empty(),
        ))
        .unwrap()
    };
    let (a, b, c) = (start(), start(), start());
    let mut tools = Registry::new();
    for name in ["get_weather", "clock", "calculator"] {
        tools.register(fixed_tool(name)).unwrap();
    }
    let options = Options::auto().with_tools(tools);
    let queue = |backend: &ReplayBackend| {
        for body in rounds {
            backend.server().push(Cassette::body(body));
        }
    };
    compare(
        "the demo's recorded conversation over loopback HTTP (Anthropic adapter), 2 tool rounds",
        &rt,
        [&a, &b, &c],
        &options,
        &Input::new(model).user("What's the weather in Lisbon and in Oslo?"),
        &queue,
        &telemetry,
        // invoke_agent, three chat, four execute_tool
        8,
        2,
        &exported,
    );
    telemetry.shutdown().unwrap();
}
