//! Issue 14's gate, measured: the loop with the OpenTelemetry layer and the accounting sink on,
//! against both off, in one run (budget: at most 5% more CPU per tool round).
//!
//! Two workloads: (a) the loop bench's (crates/agent-loop/benches/loop.rs), a scripted model
//! asking for three trivial tools in each of three rounds, then answering, on top of a
//! 50-message history; (b) `agentry demo`'s recorded conversation through the real Anthropic
//! adapter over loopback HTTP. Four variants, samples interleaved so drift hits them alike:
//!
//! - off: no subscriber, no accounting;
//! - accounting: the accounting queue on, drained by a writer doing a store's CPU work without
//!   the I/O (each tool row's arguments serialized, as the SQL sinks do to hash them; each
//!   model row's tokens summed), on the runtime's thread;
//! - main's pipeline + accounting: tracing-opentelemetry's layer and the `GenAiMetrics` layer,
//!   as `Telemetry::layer()` was before the loop's spans got their own layer;
//! - main's `Telemetry::layer()` + accounting: the loop's `tracing` spans through the layer
//!   written for them (`Telemetry::tracing_layer()`, what `layer()` was before the span sink);
//! - `Telemetry::layer()` alone, and with accounting: the layer as shipped (the loop builds
//!   its spans through the layer's sink, no `tracing` span).
//!
//! As production runs them: spans through the SDK's batch processor (exported off the loop's
//! thread) to an exporter that counts and drops them, metrics aggregated by a periodic reader
//! (collection every 60 s: never in the run). Each sample is `BATCH` runs, then the span
//! processor's flush and the accounting queue's flush, so a sample pays for its own export and
//! writes. CPU is the whole process's (every thread's, from `/proc/self/task/*/schedstat`: the
//! exporter's thread counts), per round;
//! the median sample is reported. Run with `cargo bench -p agent-otel --bench otel`
//! (`PROFILE_VARIANT=4` runs the last variant alone on (a), for `perf record`;
//! with `PROFILE_DEMO=1` on (b) too). Reported,
//! never asserted.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use agent_backends::Provider;
use agent_backends::replay::{Cassette, ReplayBackend};
use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{
    AccountingConfig, AccountingQueue, AccountingRow, Input, Options, QueueFull, RowWriter,
    WriteFuture, generate,
};
use agent_otel::{GenAiMetrics, Telemetry};
use agent_tools::{Registry, Tool};
use agent_types::{Backend, Message, ToolCall, Usage, UserMessage};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
};
use serde_json::json;
use tokio::runtime::Runtime;
use tracing::Level;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;

const SAMPLES: usize = 31;
const BATCH: usize = 200;
const ROUNDS: usize = 3;
const CALLS_PER_ROUND: usize = 3;
const HISTORY_MESSAGES: usize = 50;

/// Drops what it is given; counts the spans so the bench can check every one was exported.
#[derive(Debug, Clone, Default)]
struct Discard(Arc<AtomicUsize>);

impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.fetch_add(batch.len(), Ordering::Relaxed);
        black_box(batch);
        Ok(())
    }
}

/// A writer doing a store's CPU work without the I/O: each tool row's sizes and digest (the
/// loop measured and hashed the arguments when the call ended), each model row's tokens summed.
#[derive(Default)]
struct CountingWriter {
    rows: u64,
    bytes: u64,
    tokens: u64,
}

impl RowWriter for CountingWriter {
    fn write<'a>(&'a mut self, rows: &'a [AccountingRow]) -> WriteFuture<'a> {
        for row in rows {
            self.rows += 1;
            match row {
                AccountingRow::ModelCall(row) => {
                    self.tokens += row.record.usage.and_then(|u| u.total_tokens()).unwrap_or(0);
                }
                AccountingRow::ToolCall(row) => {
                    // The loop already measured and hashed the arguments (no copy reaches the
                    // queue); a store writes these.
                    self.bytes +=
                        row.arguments_bytes + u64::from(black_box(row.arguments_sha256)[0]);
                }
            }
        }
        black_box((self.rows, self.bytes, self.tokens));
        Box::pin(async { Ok(()) })
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

/// The whole process's CPU time in nanoseconds: every live thread's run time from Linux's
/// schedstat, the loop's thread and the exporter's alike (`getrusage` needs `unsafe`, which
/// the workspace forbids; the threads here live for the whole bench).
fn process_cpu_ns() -> u64 {
    std::fs::read_dir("/proc/self/task")
        .expect("Linux /proc")
        .map(|task| {
            let path = task.unwrap().path().join("schedstat");
            std::fs::read_to_string(path)
                .ok()
                .and_then(|text| text.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// What a variant runs with.
struct Variant {
    name: &'static str,
    subscriber: Option<tracing::Dispatch>,
    accounting: Option<AccountingQueue>,
}

/// Everything the variants share.
struct Bench<'a> {
    rt: &'a Runtime,
    tracer_provider: &'a SdkTracerProvider,
    exported: &'a Discard,
    variants: &'a [Variant],
}

impl Bench<'_> {
    /// One sample: `BATCH` runs, then the span export and the accounting writes of those runs
    /// are flushed. Returns wall and process CPU nanoseconds for the sample.
    fn sample<B: Backend>(
        &self,
        variant: &Variant,
        backend: &B,
        options: &Options,
        input: &Input,
        before_each: &dyn Fn(&B),
    ) -> (u64, u64) {
        let options = match &variant.accounting {
            Some(queue) => options
                .clone()
                .with_accounting(queue.clone().with_provider("bench")),
            None => options.clone(),
        };
        let inputs: Vec<Input> = (0..BATCH).map(|_| input.clone()).collect();
        let _guard = variant
            .subscriber
            .as_ref()
            .map(tracing::dispatcher::set_default);
        let cpu = process_cpu_ns();
        let start = Instant::now();
        self.rt.block_on(async {
            for input in inputs {
                before_each(backend);
                let result = generate(backend, input, &options).await.unwrap();
                black_box(result);
            }
            if let Some(queue) = &variant.accounting {
                queue.flush().await;
            }
        });
        if variant.subscriber.is_some() {
            self.tracer_provider.force_flush().unwrap();
        }
        let wall = start.elapsed().as_nanos() as u64;
        (wall, process_cpu_ns() - cpu)
    }

    /// Samples every variant in turn and prints per-round medians against "off".
    #[allow(clippy::too_many_arguments)]
    fn compare<B: Backend>(
        &self,
        title: &str,
        backends: &[B],
        options: &Options,
        input: &Input,
        before_each: &dyn Fn(&B),
        spans_per_run: usize,
        rounds: usize,
    ) {
        let run = |index: usize| {
            self.sample(
                &self.variants[index],
                &backends[index],
                options,
                input,
                before_each,
            )
        };
        if let Some(only) = std::env::var("PROFILE_VARIANT")
            .ok()
            .and_then(|value| value.parse::<usize>().ok())
        {
            // For `perf record`: one variant, many samples, nothing printed.
            for _ in 0..SAMPLES * 4 {
                run(only);
            }
            return;
        }
        for _ in 0..2 {
            for index in 0..self.variants.len() {
                run(index);
            }
        }
        let before = self.exported.0.load(Ordering::Relaxed);
        let mut samples = vec![Vec::new(); self.variants.len()];
        for _ in 0..SAMPLES {
            for (index, samples) in samples.iter_mut().enumerate() {
                samples.push(run(index));
            }
        }
        let traced = self
            .variants
            .iter()
            .filter(|variant| variant.subscriber.is_some())
            .count();
        let spans = self.exported.0.load(Ordering::Relaxed) - before;
        assert_eq!(
            spans,
            traced * SAMPLES * BATCH * spans_per_run,
            "not every span was exported"
        );
        println!("{title}");
        let per_round = |values: Vec<u64>| median(values) as f64 / (BATCH * rounds) as f64 / 1000.0;
        let off_cpu = per_round(samples[0].iter().map(|s| s.1).collect());
        let off_wall = per_round(samples[0].iter().map(|s| s.0).collect());
        for (variant, samples) in self.variants.iter().zip(&samples) {
            let cpu = per_round(samples.iter().map(|s| s.1).collect());
            let wall = per_round(samples.iter().map(|s| s.0).collect());
            println!(
                "  {:<40} {cpu:>8.2} µs CPU/round {:>+7.1}%   {wall:>8.2} µs wall/round {:>+7.1}%",
                variant.name,
                (cpu - off_cpu) / off_cpu * 100.0,
                (wall - off_wall) / off_wall * 100.0,
            );
        }
        // Issue 14's gate: the last variant (layer + accounting) against off, and what one
        // exported span costs (the layer alone against off, per span).
        let cpu = |index: usize| per_round(samples[index].iter().map(|s| s.1).collect());
        let (on, alone) = (cpu(self.variants.len() - 1), cpu(self.variants.len() - 2));
        let more = (on - off_cpu) / off_cpu * 100.0;
        let per_span = (alone - off_cpu) * rounds as f64 / spans_per_run as f64;
        println!(
            "  gate: layer + accounting {more:+.1}% CPU/round against off (<= 5%: {}); \
             {per_span:.2} µs CPU per exported span ({spans_per_run} spans per run, {rounds} rounds)",
            if more <= 5.0 { "met" } else { "NOT met" },
        );
    }
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values[values.len() / 2]
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
    // As production: the batch processor (its own thread), a periodic metric reader. Its
    // queue is made long enough to hold a sample's spans: on a loaded machine the default
    // 2048 overflows and drops spans, which would hide their cost. A queue that long (26 MB
    // of span slots) also makes each span's trip through it a cache miss, which the default
    // does not: `OTEL_BSP_MAX_QUEUE_SIZE` (the SDK's variable) sets it, e.g. to the default
    // 2048, and the run still fails if a span is dropped.
    let queue_size = std::env::var("OTEL_BSP_MAX_QUEUE_SIZE")
        .ok()
        .and_then(|size| size.parse().ok())
        .unwrap_or(1 << 16);
    println!("batch span processor queue: {queue_size} spans");
    let processor = BatchSpanProcessor::builder(exported.clone())
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(queue_size)
                .build(),
        )
        .build();
    let tracer_provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .build();
    let meter_provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(InMemoryMetricExporter::default()).build())
        .build();
    let telemetry = Telemetry::from_providers(tracer_provider.clone(), meter_provider.clone());

    // main's pipeline before the loop's own span layer: tracing-opentelemetry for every span,
    // the GenAiMetrics layer beside it.
    let main_layer = tracing_opentelemetry::layer()
        .with_tracer(tracer_provider.tracer("agentry"))
        .with_tracked_inactivity(false)
        .with_location(false)
        .with_threads(false)
        .with_context_activation(false)
        .and_then(GenAiMetrics::new(&meter_provider.meter("agentry")))
        .with_filter(Targets::new().with_default(Level::INFO));

    let (queue, receiver) =
        AccountingQueue::new(AccountingConfig::default().with_when_full(QueueFull::Wait));
    // The writer runs on the bench's runtime thread, beside the loop.
    rt.spawn(receiver.run(CountingWriter::default()));

    let variants = [
        Variant {
            name: "off",
            subscriber: None,
            accounting: None,
        },
        Variant {
            name: "accounting only",
            subscriber: None,
            accounting: Some(queue.clone()),
        },
        Variant {
            name: "main's OTel pipeline + accounting",
            subscriber: Some(tracing::Dispatch::new(
                tracing_subscriber::registry().with(main_layer),
            )),
            accounting: Some(queue.clone()),
        },
        Variant {
            name: "main's Telemetry::layer() + accounting",
            subscriber: Some(tracing::Dispatch::new(
                tracing_subscriber::registry().with(telemetry.tracing_layer()),
            )),
            accounting: Some(queue.clone()),
        },
        Variant {
            name: "Telemetry::layer() alone",
            subscriber: Some(tracing::Dispatch::new(
                tracing_subscriber::registry().with(telemetry.layer()),
            )),
            accounting: None,
        },
        Variant {
            name: "Telemetry::layer() + accounting",
            subscriber: Some(tracing::Dispatch::new(
                tracing_subscriber::registry().with(telemetry.layer()),
            )),
            accounting: Some(queue.clone()),
        },
    ];
    let bench = Bench {
        rt: &rt,
        tracer_provider: &tracer_provider,
        exported: &exported,
        variants: &variants,
    };

    // (a) The loop bench's workload, scripted (nothing but the loop).
    let mut tools = Registry::new();
    tools.register(lookup_tool()).unwrap();
    let options = Options::auto().with_tools(tools);
    let backends: Vec<ScriptedBackend> = variants.iter().map(|_| script()).collect();
    bench.compare(
        &format!(
            "(a) scripted model, {ROUNDS} rounds of {CALLS_PER_ROUND} tools, {HISTORY_MESSAGES}-message history"
        ),
        &backends,
        &options,
        &input(),
        &|_| {},
        // invoke_agent, four chat, nine execute_tool
        14,
        ROUNDS,
    );

    if std::env::var_os("PROFILE_VARIANT").is_some() && std::env::var_os("PROFILE_DEMO").is_none() {
        return;
    }
    // (b) `agentry demo`'s conversation: the real Anthropic adapter over loopback HTTP, two
    //     tool rounds (three calls, then one), three model calls.
    let (model, rounds) = agent_backends::replay::demo(Provider::Anthropic);
    let backends: Vec<ReplayBackend> = variants
        .iter()
        .map(|_| {
            rt.block_on(ReplayBackend::start(
                Provider::Anthropic,
                std::iter::empty(),
            ))
            .unwrap()
        })
        .collect();
    let mut tools = Registry::new();
    for name in ["get_weather", "clock", "calculator"] {
        tools.register(fixed_tool(name)).unwrap();
    }
    let options = Options::auto().with_tools(tools);
    let queue_bodies = |backend: &ReplayBackend| {
        for body in rounds {
            backend.server().push(Cassette::body(body));
        }
    };
    bench.compare(
        "(b) the demo's recorded conversation over loopback HTTP (Anthropic adapter), 2 tool rounds",
        &backends,
        &options,
        &Input::new(model).user("What's the weather in Lisbon and in Oslo?"),
        &queue_bodies,
        // invoke_agent, three chat, four execute_tool
        8,
        2,
    );
    let stats = queue.stats();
    println!(
        "accounting: {} rows written, {} dropped",
        stats.written(),
        stats.dropped()
    );
    telemetry.shutdown().unwrap();
}
