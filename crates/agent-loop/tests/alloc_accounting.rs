//! What accounting costs a tool round on the heap: the run of `alloc.rs` (three rounds of
//! three parallel calls) with an accounting queue drained by a counting writer on the same
//! thread, against the same run without.
//!
//! Each row is one channel send of a flat row: no lock, no copy of the arguments, results or
//! history. A tool row allocates nothing (its tool name is the `Arc` the handler's context
//! shares, its call id an `Arc` too); a model row copies its record, whose model name and
//! response id are one allocation each; once per run the run's context is built (caller, session, run id, provider). A
//! copied trace entry (its arguments `Value`), a copied tool name, a `Vec` per row or per
//! round, or a boxed send per row would each break the bound.
//!
//! A binary of its own: the counting allocator sees the whole process.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::alloc::System;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{
    AccountingConfig, AccountingQueue, AccountingRow, Input, Options, QueueFull, RowWriter,
    WriteFuture, generate,
};
use agent_tools::{Registry, Tool};
use agent_types::ToolCall;
use serde_json::json;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, Stats, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const ROUNDS: usize = 3;
const CALLS_PER_ROUND: usize = 3;
const RUNS: usize = 20;

fn lookup_tool() -> Tool {
    Tool::from_json_fn(
        "lookup",
        "Looks a key up.",
        json!({"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}),
        |arguments, _ctx| async move { Ok(json!({"key": arguments["key"], "value": 42})) },
    )
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
        })
        .collect();
    turns.push(ScriptedTurn::text("All nine keys hold the value 42."));
    ScriptedBackend::cycle(turns)
}

fn input() -> Input {
    Input::new("bench-model")
        .system("Use the lookup tool for every figure you cite.")
        .user("Check the keys, three at a time, then summarize.")
}

/// Counts rows; allocates nothing.
struct Counting(Arc<AtomicU64>);

impl RowWriter for Counting {
    fn write<'a>(&'a mut self, rows: &'a [AccountingRow]) -> WriteFuture<'a> {
        self.0.fetch_add(rows.len() as u64, Ordering::Relaxed);
        Box::pin(async { Ok(()) })
    }
}

/// Allocations per tool round of `options`' runs, over `RUNS` runs after two warm-up runs.
fn per_round(rt: &tokio::runtime::Runtime, options: &Options) -> f64 {
    let backend = script();
    let run = async |input| {
        let result = generate(&backend, input, options).await.unwrap();
        assert_eq!(result.messages.len(), ROUNDS * (CALLS_PER_ROUND + 1) + 1);
        // Let the writer take the rows, as it would between a server's requests.
        tokio::task::yield_now().await;
    };
    rt.block_on(async {
        for _ in 0..2 {
            run(input()).await;
        }
    });
    let inputs: Vec<Input> = (0..RUNS).map(|_| input()).collect();
    let region = Region::new(GLOBAL);
    rt.block_on(async {
        for input in inputs {
            run(input).await;
        }
    });
    let Stats {
        allocations,
        reallocations,
        ..
    } = region.change();
    (allocations + reallocations) as f64 / (RUNS * ROUNDS) as f64
}

#[test]
fn accounting_allocates_only_model_names_and_each_runs_context() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut tools = Registry::new();
    tools.register(lookup_tool()).unwrap();
    let off = Options::auto().with_tools(tools);
    let (queue, receiver) =
        AccountingQueue::new(AccountingConfig::default().with_when_full(QueueFull::Wait));
    let rows = Arc::new(AtomicU64::new(0));
    rt.spawn(receiver.run(Counting(Arc::clone(&rows))));
    let on = off
        .clone()
        .with_accounting(queue.clone().with_provider("bench"));

    let without = per_round(&rt, &off);
    let with = per_round(&rt, &on);
    rt.block_on(queue.flush());
    let model_calls_per_run = ROUNDS + 1;
    let rows_per_run = (model_calls_per_run + ROUNDS * CALLS_PER_ROUND) as u64;
    assert_eq!(
        rows.load(Ordering::Relaxed),
        (RUNS as u64 + 2) * rows_per_run
    );
    assert_eq!(queue.stats().dropped(), 0);

    let extra = with - without;
    // Per round: a model name and a response id per model call (one more model call per run
    // than rounds); per run: the context's `Arc` and its four strings. Tool rows: nothing.
    let names = 2.0 * model_calls_per_run as f64 / ROUNDS as f64;
    let context = 5.0 / ROUNDS as f64;
    let bound = names + context + 0.5;
    println!(
        "per tool round: {with:.2} allocations with accounting, {without:.2} without: \
         {extra:.2} more (bound {bound:.2}: {names:.2} names and ids, {context:.2} context)"
    );
    assert!(
        extra <= bound,
        "accounting costs {extra:.2} allocations per tool round (bound {bound:.2}): a row \
         copies more than a model name and id, or a send allocates"
    );
}
