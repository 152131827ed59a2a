//! Benchmarks for the agent loop, with a small in-file harness (no bench framework).
//!
//! Three questions, each answered next to a baseline measured in the same run:
//!
//! 1. **Loop overhead per tool round.** A scripted model asks for three trivial tools in each
//!    of three rounds, then answers (four model calls per run), on top of a 50-message
//!    history. `generate` (events off) and `generate_stream` (events on, every event read)
//!    are timed against a hand-written minimal loop driving the same scripted streams and the
//!    same tool functions. Reported per tool round: run time / 3.
//! 2. **Allocations per round**, counted by a global allocator wrapper: allocations and bytes
//!    for each variant, and the same run on an empty history. A loop that copied the history
//!    each round would allocate about the history's size more per round on the long history.
//! 3. **10,000 concurrent suspended sessions.** Each session runs in `auto` mode until the
//!    model asks for a remote tool. All 10,000 runs are in flight at once (the model calls
//!    wait at a gate until every run has reached it), then every session stays suspended.
//!    Reported per session: live heap in flight and once suspended, minus the heap of its
//!    own messages, cross-checked against the process's RSS.
//!
//! 4. **Accounting on against off.** The run of question 1 with an accounting queue
//!    (`Options::with_accounting`, waiting mode) drained on the same thread by a writer that
//!    does a store's CPU work short of I/O (writes each tool row's argument hash as hex, sums
//!    every row's tokens), against the same run without: the CPU a round costs more (≤ 5%);
//!    the loop sends each row when its call ends and hashes each call's arguments.
//!
//! Run with `cargo bench -p agent-loop --bench loop` (`ONLY_ACCOUNTING=1` for question 4 alone) (or `cargo xtask bench`). Timings are
//! reported, never asserted: nothing here fails on a slow machine.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;
use std::hint::black_box;
use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{Input, Options, Session, SessionStatus, execute, generate, generate_stream};
use agent_tools::{Registry, Tool};
use agent_types::{
    AssistantBlock, AssistantMessage, Backend, BackendStream, Capabilities, Message, ModelRequest,
    StreamEvent, ToolCall, ToolResult, Usage,
};
use futures_util::StreamExt;
use futures_util::future::{join, join_all};
use serde_json::{Value, json};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, Stats, StatsAlloc};
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

// Counts every allocation of the process. The counting is a few atomic adds per call, paid by
// the loop and the baseline alike. (`stats_alloc` because a `GlobalAlloc` impl is `unsafe`
// and the workspace forbids unsafe code in every target.)
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const SAMPLES: usize = 15;
/// Runs per sample.
const BATCH: usize = 100;
const ROUNDS: usize = 3;
const CALLS_PER_ROUND: usize = 3;
const HISTORY_MESSAGES: usize = 50;
const SESSIONS: usize = 10_000;
const MODEL: &str = "bench-model";

// ---------------------------------------------------------------------------------------------
// Harness

/// One measured variant: median time per run, and what one run allocates.
struct Measured {
    ns_per_run: f64,
    allocs_per_run: f64,
    bytes_per_run: f64,
}

impl Measured {
    fn ns_per_round(&self) -> f64 {
        self.ns_per_run / ROUNDS as f64
    }

    fn allocs_per_round(&self) -> f64 {
        self.allocs_per_run / ROUNDS as f64
    }

    fn bytes_per_round(&self) -> f64 {
        self.bytes_per_run / ROUNDS as f64
    }
}

/// Runs `op` on `BATCH` clones of `input` per sample, after a warm-up. The clones are made
/// before the timed (and counted) region; what a run allocates, including its input's
/// history being freed at the end, is inside it.
fn measure<I: Clone, T>(rt: &Runtime, input: &I, mut op: impl AsyncFnMut(I) -> T) -> Measured {
    let sample = |op: &mut _| {
        let inputs: Vec<I> = (0..BATCH).map(|_| input.clone()).collect();
        let region = Region::new(GLOBAL);
        let start = Instant::now();
        rt.block_on(run_all(inputs, op));
        let elapsed = start.elapsed();
        (elapsed.as_nanos() as f64 / BATCH as f64, region.change())
    };
    for _ in 0..2 {
        sample(&mut op);
    }
    let mut samples: Vec<(f64, Stats)> = (0..SAMPLES).map(|_| sample(&mut op)).collect();
    samples.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (ns_per_run, stats) = samples[SAMPLES / 2];
    Measured {
        ns_per_run,
        allocs_per_run: (stats.allocations + stats.reallocations) as f64 / BATCH as f64,
        bytes_per_run: stats.bytes_allocated as f64 / BATCH as f64,
    }
}

async fn run_all<I, T>(inputs: Vec<I>, op: &mut impl AsyncFnMut(I) -> T) {
    for input in inputs {
        black_box(op(input).await);
    }
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1_000_000.0 {
        format!("{:.2} ms", ns / 1_000_000.0)
    } else if ns >= 1_000.0 {
        format!("{:.2} µs", ns / 1_000.0)
    } else {
        format!("{ns:.0} ns")
    }
}

fn fmt_bytes(bytes: f64) -> String {
    if bytes.abs() >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
    } else if bytes.abs() >= 1024.0 {
        format!("{:.1} KiB", bytes / 1024.0)
    } else {
        format!("{bytes:.0} B")
    }
}

/// A timing row in the agent-tools bench's format (ratio = baseline / measured), with the
/// overhead over the baseline per round.
fn row(name: &str, measured: &Measured, baseline_name: &str, baseline: &Measured, extra: &str) {
    let ns = measured.ns_per_round();
    let baseline_ns = baseline.ns_per_round();
    println!(
        "{name:<44} {:>10}/round   baseline {baseline_name:<24} {:>10}/round   {:>5.2}x   overhead {:>10}/round{extra}",
        fmt_ns(ns),
        fmt_ns(baseline_ns),
        baseline_ns / ns,
        fmt_ns(ns - baseline_ns),
    );
}

fn alloc_row(name: &str, measured: &Measured) {
    println!(
        "  {name:<42} {:>8.1} allocs/round {:>11}/round",
        measured.allocs_per_round(),
        fmt_bytes(measured.bytes_per_round()),
    );
}

/// Live heap bytes of the whole process, as the counting allocator sees them.
fn live_heap() -> i64 {
    let stats = GLOBAL.stats();
    stats.bytes_allocated as i64 - stats.bytes_deallocated as i64
}

/// `(VmRSS, VmHWM)` in bytes, from `/proc/self/status` (Linux only).
fn rss() -> Option<(i64, i64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<i64> {
        let line = status.lines().find(|line| line.starts_with(name))?;
        let kib: i64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

// ---------------------------------------------------------------------------------------------
// The workload

/// The trivial tool both loops run: echoes its key with a value.
async fn lookup(arguments: Value) -> Value {
    json!({"key": arguments["key"], "value": 42})
}

fn lookup_tool() -> Tool {
    Tool::from_json_fn(
        "lookup",
        "Looks a key up.",
        json!({
            "type": "object",
            "properties": {"key": {"type": "string"}},
            "required": ["key"]
        }),
        |arguments, _ctx| async move { Ok(lookup(arguments).await) },
    )
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        ..Usage::default()
    }
}

/// Three rounds of three parallel `lookup` calls, then an answer: one run's four model calls.
/// Keys differ per call so cycle detection never trips.
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
    turns.push(
        ScriptedTurn::text("All nine keys hold the value 42, so the report is consistent.")
            .with_usage(usage(30_500, 20)),
    );
    ScriptedBackend::cycle(turns)
}

/// Filler prose of about `bytes` bytes.
fn prose(seed: usize, bytes: usize) -> String {
    let mut text = format!("Message {seed}. ");
    let words = [
        "the",
        "quarterly",
        "report",
        "shows",
        "revenue",
        "in",
        "three",
        "regions",
        "with",
        "costs",
        "rising",
        "slower",
        "than",
        "expected",
        "while",
        "margins",
        "held",
    ];
    let mut i = seed;
    while text.len() < bytes {
        text.push_str(words[i % words.len()]);
        text.push(' ');
        i += 7;
    }
    text
}

/// A realistic prior conversation of `HISTORY_MESSAGES` messages, a few KB each: questions,
/// tool calls with their (larger) results, and answers.
fn history() -> Vec<Message> {
    let mut messages = Vec::with_capacity(HISTORY_MESSAGES);
    let mut turn = 0;
    while messages.len() + 4 <= HISTORY_MESSAGES {
        let id = format!("old_call_{turn}");
        messages.push(Message::user(prose(turn, 1_200)));
        messages.push(Message::Assistant(AssistantMessage {
            content: vec![AssistantBlock::ToolCall(ToolCall::new(
                id.as_str(),
                "lookup",
                json!({"key": format!("report-{turn}")}),
            ))],
            stop_reason: Some(agent_types::StopReason::ToolCalls),
            usage: Some(usage(2_000, 40)),
            model: Some(MODEL.to_owned()),
        }));
        messages.push(Message::Tool(ToolResult::ok(
            id.as_str(),
            "lookup",
            json!({"rows": prose(turn + 1, 4_000)}).to_string(),
        )));
        messages.push(Message::Assistant(AssistantMessage::text(prose(
            turn + 2,
            2_000,
        ))));
        turn += 1;
    }
    while messages.len() < HISTORY_MESSAGES {
        messages.push(Message::user(prose(turn, 1_000)));
        messages.push(Message::Assistant(AssistantMessage::text(prose(
            turn + 3,
            1_500,
        ))));
        turn += 1;
    }
    messages.truncate(HISTORY_MESSAGES);
    messages
}

fn input(prior: Vec<Message>) -> Input {
    Input::new(MODEL)
        .system("You are a careful analyst. Use the lookup tool for every figure you cite.")
        .messages(prior)
        .user("Check keys for the three regions, three at a time, then summarize.")
}

/// The baseline: the least a hand-written loop does with the same backend and tools. Fold the
/// stream into a message, run the round's calls concurrently, push the results, call again.
/// No validation, truncation, budgets, trace, hooks, accounting or events.
async fn hand_written_loop(backend: &ScriptedBackend, tools: &Registry, input: Input) -> Message {
    let Input {
        model,
        system,
        messages,
        ..
    } = input;
    let mut request = ModelRequest::new(model, messages);
    request.system = system;
    request.tools = tools.specs();
    loop {
        let mut message = AssistantMessage::default();
        let mut arguments: Vec<String> = Vec::new();
        let mut stream = backend.stream(&request);
        while let Some(event) = stream.next().await {
            match event.unwrap() {
                StreamEvent::TextDelta { delta } => match message.content.last_mut() {
                    Some(AssistantBlock::Text { text }) => text.push_str(&delta),
                    _ => message.content.push(AssistantBlock::Text { text: delta }),
                },
                StreamEvent::ToolCallStart { id, name, .. } => {
                    message.content.push(AssistantBlock::ToolCall(ToolCall::new(
                        id,
                        name,
                        Value::Null,
                    )));
                    arguments.push(String::new());
                }
                StreamEvent::ToolCallDelta { delta, .. } => {
                    arguments.last_mut().unwrap().push_str(&delta);
                }
                StreamEvent::Usage(usage) => message.usage = Some(usage),
                StreamEvent::Finish { stop_reason } => message.stop_reason = Some(stop_reason),
                _ => {}
            }
        }
        drop(stream);
        let mut calls = Vec::with_capacity(arguments.len());
        let mut arguments = arguments.into_iter();
        for block in &mut message.content {
            if let AssistantBlock::ToolCall(call) = block {
                call.arguments = serde_json::from_str(&arguments.next().unwrap()).unwrap();
                calls.push(call.clone());
            }
        }
        request.messages.push(Message::Assistant(message));
        if calls.is_empty() {
            return request.messages.pop().unwrap();
        }
        let outputs = join_all(calls.iter().map(|call| lookup(call.arguments.clone()))).await;
        for (call, output) in calls.into_iter().zip(outputs) {
            request.messages.push(Message::Tool(ToolResult::ok(
                call.id,
                call.name,
                output.to_string(),
            )));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 1 and 2: overhead and allocations per round

fn bench_rounds(rt: &Runtime) {
    let mut tools = Registry::new();
    tools.register(lookup_tool()).unwrap();
    let options = Options::auto().with_tools(tools.clone());

    let long = input(history());
    let short = input(Vec::new());
    let history_json = serde_json::to_string(&long.messages).unwrap().len();

    // Each variant gets its own backend, so every run starts at the script's first turn.
    let check = |message: &Message| {
        assert!(
            matches!(message, Message::Assistant(m) if m.text_content().starts_with("All nine"))
        );
    };
    let baseline_backend = script();
    let baseline = measure(rt, &long, async |input| {
        let answer = hand_written_loop(&baseline_backend, &tools, input).await;
        check(&answer);
        answer
    });
    let backend = script();
    let generated = measure(rt, &long, async |input| {
        let result = generate(&backend, input, &options).await.unwrap();
        assert_eq!(result.messages.len(), ROUNDS * (CALLS_PER_ROUND + 1) + 1);
        result
    });
    let backend = script();
    let streamed = measure(rt, &long, async |input| {
        let mut stream = generate_stream(&backend, input, &options);
        let mut events = 0_usize;
        while let Some(event) = stream.next().await {
            black_box(&event);
            events += 1;
        }
        let result = stream.result().await.unwrap();
        assert_eq!(result.messages.len(), ROUNDS * (CALLS_PER_ROUND + 1) + 1);
        (events, result)
    });
    let baseline_backend = script();
    let baseline_short = measure(rt, &short, async |input| {
        hand_written_loop(&baseline_backend, &tools, input).await
    });
    let backend = script();
    let generated_short = measure(rt, &short, async |input| {
        generate(&backend, input, &options).await.unwrap()
    });
    let backend = script();
    let streamed_short = measure(rt, &short, async |input| {
        let mut stream = generate_stream(&backend, input, &options);
        while let Some(event) = stream.next().await {
            black_box(&event);
        }
        stream.result().await.unwrap()
    });

    println!(
        "\n1. loop overhead: {ROUNDS} rounds x {CALLS_PER_ROUND} parallel trivial tools + answer \
         (4 model calls), auto mode, scripted backend; history {} messages ({} as JSON)",
        HISTORY_MESSAGES + 1,
        fmt_bytes(history_json as f64),
    );
    let target = |measured: &Measured, baseline: &Measured| {
        let overhead = measured.ns_per_round() - baseline.ns_per_round();
        if overhead <= 20_000.0 {
            "  (target ≤ 20 µs: met)"
        } else {
            "  (target ≤ 20 µs: MISSED)"
        }
    };
    row(
        "generate, events off",
        &generated,
        "hand-written loop",
        &baseline,
        target(&generated, &baseline),
    );
    row(
        "generate_stream, events on and read",
        &streamed,
        "hand-written loop",
        &baseline,
        target(&streamed, &baseline),
    );
    row(
        "generate, events off, empty history",
        &generated_short,
        "hand-written loop",
        &baseline_short,
        target(&generated_short, &baseline_short),
    );

    println!(
        "\n2. allocations per tool round (run total / {ROUNDS}; allocs = allocations + reallocations)"
    );
    alloc_row("hand-written loop", &baseline);
    alloc_row("generate, events off", &generated);
    alloc_row("generate_stream, events on", &streamed);
    alloc_row("hand-written loop, empty history", &baseline_short);
    alloc_row("generate, events off, empty history", &generated_short);
    alloc_row("generate_stream, events on, empty history", &streamed_short);
    // A per-round copy of the history would add about its size to every round of the long
    // run and nothing to the short one. Growing the history's vector once per run (which
    // the hand-written loop does too) adds a few hundred bytes per message, per run.
    println!(
        "  what the {}-message history ({}) adds per round:",
        HISTORY_MESSAGES + 1,
        fmt_bytes(history_json as f64),
    );
    for (name, long, short) in [
        ("hand-written loop", &baseline, &baseline_short),
        ("generate", &generated, &generated_short),
        ("generate_stream", &streamed, &streamed_short),
    ] {
        let growth = long.bytes_per_round() - short.bytes_per_round();
        let verdict = if growth < history_json as f64 / 4.0 {
            "no per-round copy of the history"
        } else {
            "the history looks COPIED every round"
        };
        println!(
            "  {name:<42} {:>+8.1} allocs/round {:>11}/round   {verdict}",
            long.allocs_per_round() - short.allocs_per_round(),
            fmt_bytes(growth),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 4: accounting on against off

/// A writer doing a store's CPU work without the I/O: each tool row's argument hash written
/// as hex (the loop hashed the arguments when the call ended), each model row's tokens summed.
#[derive(Default)]
struct CountingWriter {
    rows: u64,
    bytes: u64,
    tokens: u64,
}

struct Counting<'a>(&'a mut u64);

impl std::io::Write for Counting<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        *self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl agent_loop::RowWriter for CountingWriter {
    fn write<'a>(
        &'a mut self,
        rows: &'a [agent_loop::AccountingRow],
    ) -> agent_loop::WriteFuture<'a> {
        for row in rows {
            self.rows += 1;
            match row {
                agent_loop::AccountingRow::ModelCall(row) => {
                    self.tokens += row.record.usage.and_then(|u| u.total_tokens()).unwrap_or(0);
                }
                agent_loop::AccountingRow::ToolCall(row) => {
                    // The loop hashed the arguments; a store writes the hash as hex.
                    for byte in row.arguments_sha256 {
                        write!(Counting(&mut self.bytes), "{byte:02x}").unwrap();
                    }
                    self.bytes += row.arguments_bytes;
                }
            }
        }
        black_box((self.bytes, self.tokens));
        Box::pin(async { Ok(()) })
    }
}

fn bench_accounting(rt: &Runtime) {
    let mut tools = Registry::new();
    tools.register(lookup_tool()).unwrap();
    let off = Options::auto().with_tools(tools.clone());
    let (queue, receiver) = agent_loop::AccountingQueue::new(
        agent_loop::AccountingConfig::default().with_when_full(agent_loop::QueueFull::Wait),
    );
    // The writer runs on the bench's one thread: its CPU is inside the timed region.
    rt.spawn(receiver.run(CountingWriter::default()));
    let on = off
        .clone()
        .with_accounting(queue.clone().with_provider("bench"));
    let long = input(history());
    // Alternated, twice, so drift on a shared machine hits both sides alike.
    let mut pairs = Vec::new();
    for _ in 0..2 {
        let backend = script();
        let without = measure(rt, &long, async |input| {
            generate(&backend, input, &off).await.unwrap()
        });
        let backend = script();
        let with = measure(rt, &long, async |input| {
            generate(&backend, input, &on).await.unwrap()
        });
        pairs.push((without, with));
    }
    rt.block_on(queue.flush());
    let stats = queue.stats();
    println!(
        "\n4. accounting: the run of 1 with an accounting queue drained by a counting writer on the \
         same thread, against without ({} rows written, {} dropped)",
        stats.written(),
        stats.dropped()
    );
    for (without, with) in &pairs {
        let more = with.ns_per_round() / without.ns_per_round() - 1.0;
        let verdict = if more <= 0.05 { "met" } else { "MISSED" };
        row(
            "generate + accounting",
            with,
            "generate, accounting off",
            without,
            &format!("  {:+.1}% CPU/round (target ≤ 5%: {verdict})", more * 100.0),
        );
        alloc_row("generate, accounting off", without);
        alloc_row("generate + accounting", with);
    }
}

// ---------------------------------------------------------------------------------------------
// 3: many suspended sessions

/// A backend whose model calls all wait at one gate, so every run is in flight at once
/// before any of them gets an answer.
struct Gated {
    inner: ScriptedBackend,
    open: CancellationToken,
    waiting: AtomicUsize,
}

impl Backend for Gated {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn stream<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        let inner = self.inner.stream(request);
        Box::pin(async_stream::stream! {
            self.waiting.fetch_add(1, Ordering::Relaxed);
            self.open.cancelled().await;
            let mut inner = inner;
            while let Some(item) = inner.next().await {
                yield item;
            }
        })
    }
}

fn bench_sessions(rt: &Runtime) {
    let mut tools = Registry::new();
    tools
        .register(Tool::remote(
            "approve_refund",
            "Asks a human to approve a refund.",
            json!({
                "type": "object",
                "properties": {
                    "order": {"type": "string"},
                    "amount_eur": {"type": "number"}
                },
                "required": ["order", "amount_eur"]
            }),
        ))
        .unwrap();
    let options = Options::auto().with_tools(tools);
    let backend = Gated {
        inner: ScriptedBackend::cycle([ScriptedTurn::tool_call(
            "call_1",
            "approve_refund",
            json!({"order": "A-1234", "amount_eur": 120.5}),
        )
        .with_usage(usage(400, 30))]),
        open: CancellationToken::new(),
        waiting: AtomicUsize::new(0),
    };

    let rss_before = rss();
    let heap_before = live_heap();
    let mut sessions: Vec<Session> = (0..SESSIONS)
        .map(|_| Session::new(MODEL).with_system("You handle refunds."))
        .collect();
    let (in_flight, heap_in_flight, rss_in_flight) = rt.block_on(async {
        let runs = join_all(sessions.iter_mut().map(|session| {
            execute(
                session,
                "Please refund order A-1234 (120.50 EUR).",
                &backend,
                &options,
            )
        }));
        // `join` polls the runs first: by the time the probe runs, each run has made its
        // model call and waits at the gate.
        let probe = async {
            let snapshot = (backend.waiting.load(Ordering::Relaxed), live_heap(), rss());
            backend.open.cancel();
            snapshot
        };
        let (results, snapshot) = join(runs, probe).await;
        for result in results {
            assert_eq!(result.unwrap().status, SessionStatus::AwaitingToolExecution);
        }
        snapshot
    });
    let heap_suspended = live_heap();
    let rss_after = rss();

    // The heap the messages themselves hold, measured by cloning them (a clone allocates
    // the same strings, maps and vectors, without spare capacity).
    let mut messages_heap = 0_i64;
    for session in &sessions {
        let region = Region::new(GLOBAL);
        let copy = black_box(session.messages.clone());
        messages_heap += region.change().bytes_allocated as i64;
        drop(copy);
    }
    // The same for a whole session: what a deep copy of it allocates. Retained heap beyond
    // this and the inline struct is spare capacity, or memory held outside the session.
    let mut session_heap = 0_i64;
    for session in &sessions {
        let region = Region::new(GLOBAL);
        let copy = black_box(session.clone());
        session_heap += region.change().bytes_allocated as i64;
        drop(copy);
    }
    let json = sessions[0].to_json().unwrap();
    assert!(
        sessions
            .iter()
            .all(|s| s.status == SessionStatus::AwaitingToolExecution)
    );

    let n = SESSIONS as f64;
    let per = |bytes: i64| bytes as f64 / n;
    let messages_per = per(messages_heap);
    let suspended_per = per(heap_suspended - heap_before);
    let in_flight_per = per(heap_in_flight - heap_before);
    let beyond = suspended_per - messages_per;
    let target = if beyond <= 4096.0 {
        "(target ≤ 4 KiB: met)"
    } else {
        "(target ≤ 4 KiB: MISSED)"
    };
    println!(
        "\n3. {SESSIONS} sessions on one current-thread runtime, each run in auto mode until it \
         suspends for a remote tool ({in_flight} runs in flight at once at the gate)"
    );
    println!(
        "  heap per suspended session                 {:>10}   (struct {} B + deep contents {} + spare capacity)",
        fmt_bytes(suspended_per),
        std::mem::size_of::<Session>(),
        fmt_bytes(per(session_heap)),
    );
    let messages_label = format!("of which its {} messages", sessions[0].messages.len());
    println!("    {messages_label:<41}{:>10}", fmt_bytes(messages_per));
    println!(
        "    {:<41}{:>10}   {target}",
        "beyond its messages",
        fmt_bytes(beyond),
    );
    println!(
        "  heap per run while in flight               {:>10}   (session + run future + model stream; freed when the run ends)",
        fmt_bytes(in_flight_per),
    );
    match (rss_before, rss_in_flight, rss_after) {
        (Some((rss0, hwm0)), Some((rss1, _)), Some((rss2, hwm2))) => {
            // VmHWM is the process's peak so far: it says something only if this part raised it.
            let peak = if hwm2 > hwm0 {
                fmt_bytes(per(hwm2 - rss0))
            } else {
                "n/a".to_owned()
            };
            println!(
                "  RSS per session: in flight {:>10}, suspended {:>10}, peak (VmHWM) {:>10}   \
                 (process view: includes allocator slack and freed memory kept by malloc)",
                fmt_bytes(per(rss1 - rss0)),
                fmt_bytes(per(rss2 - rss0)),
                peak,
            );
        }
        _ => println!("  RSS: /proc/self/status not readable here"),
    }
    println!(
        "  one suspended session as JSON              {:>10}   (Session::to_json)",
        fmt_bytes(json.len() as f64),
    );
    drop(sessions);
}

fn main() {
    let start = Instant::now();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    println!(
        "agent-loop benchmarks: median of {SAMPLES} samples of {BATCH} runs; ratio = baseline / measured; \
         overhead = measured - baseline"
    );
    if std::env::var_os("ONLY_ACCOUNTING").is_none() {
        // Sessions first, while the process's peak RSS is still low.
        bench_sessions(&rt);
        bench_rounds(&rt);
    }
    bench_accounting(&rt);
    println!("\ntotal {:.1} s", start.elapsed().as_secs_f64());
}
