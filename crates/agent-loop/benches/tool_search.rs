//! Request tokens per round for a 500-tool catalog with and without tool search, in one run.
//!
//! The same scripted three-round run (round 1: the model looks for a tool; round 2: it calls
//! it; round 3: it answers) over the same 500 tools, once offering every tool each round and
//! once through `Options::with_tool_search` (the always-loaded set empty, five tools per
//! search). Each request the backend received is counted with the loop's own estimate
//! (`ByteEstimate`: the system prompt and tool definitions plus every message), and its
//! bytes as JSON. Also reported: building the BM25 index (done once per catalog) and one
//! search. Figures are reported, never asserted.
//!
//! Run with `cargo bench -p agent-loop --bench tool_search` (or `cargo xtask bench`).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{ByteEstimate, Input, Options, TokenCounter, ToolSearch, generate};
use agent_tools::{Registry, Tool, ToolIndex};
use agent_types::ModelRequest;
use serde_json::json;

const SYSTEM: &str = "You operate the company's back office through its tools.";

fn catalog() -> Registry {
    let objects = [
        "invoice",
        "customer",
        "ticket",
        "calendar",
        "repository",
        "payment",
        "email",
        "document",
        "shipment",
        "contract",
    ];
    let mut tools = Registry::new();
    for system in 0..10 {
        for object in objects {
            for verb in ["create", "get", "list", "update", "delete"] {
                tools
                    .register(Tool::from_json_fn(
                        format!("s{system}_{verb}_{object}"),
                        format!("{verb} a {object} in system {system}."),
                        json!({"type": "object", "properties": {format!("{object}_id"): {"type": "string", "description": "The record's id."}}, "required": [format!("{object}_id")]}),
                        |_, _| async { Ok(json!("done")) },
                    ))
                    .unwrap();
            }
        }
    }
    tools
}

fn script(search: bool) -> ScriptedBackend {
    let mut turns = Vec::new();
    if search {
        turns.push(ScriptedTurn::tool_call(
            "c1",
            "search_tools",
            json!({"query": "create an invoice in system 7"}),
        ));
    } else {
        // Without search the model has every tool; round 1 is a lookup with one of them.
        turns.push(ScriptedTurn::tool_call(
            "c1",
            "s7_get_customer",
            json!({"customer_id": "C-7"}),
        ));
    }
    turns.push(ScriptedTurn::tool_call(
        "c2",
        "s7_create_invoice",
        json!({"invoice_id": "INV-42"}),
    ));
    turns.push(ScriptedTurn::text("Invoice INV-42 created."));
    ScriptedBackend::new(turns).recording()
}

fn tokens(request: &ModelRequest) -> (u64, usize) {
    let counter = ByteEstimate;
    let preamble = counter.preamble_tokens(request.system.as_deref(), &request.tools);
    let messages: u64 = request
        .messages
        .iter()
        .map(|m| counter.message_tokens(m))
        .sum();
    (
        preamble + messages,
        serde_json::to_vec(request).unwrap().len(),
    )
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("tool search: request tokens per round, 500-tool catalog (ByteEstimate)");
    let mut totals = [0u64; 2];
    let mut per_round: Vec<Vec<(u64, usize, usize)>> = Vec::new();
    for (at, search) in [false, true].into_iter().enumerate() {
        let backend = script(search);
        let mut options = Options::auto().with_tools(catalog());
        if search {
            options = options.with_tool_search(ToolSearch::new()).unwrap();
        }
        let input = Input::new("m")
            .system(SYSTEM)
            .user("Bill customer 7 for INV-42.");
        let result = rt.block_on(generate(&backend, input, &options)).unwrap();
        assert_eq!(result.text(), "Invoice INV-42 created.");
        let rounds: Vec<(u64, usize, usize)> = backend
            .requests()
            .iter()
            .map(|request| {
                let (tokens, bytes) = tokens(request);
                (tokens, bytes, request.tools.len())
            })
            .collect();
        totals[at] = rounds.iter().map(|r| r.0).sum();
        per_round.push(rounds);
    }
    println!(
        "  {:<8}{:>22}{:>22}{:>10}",
        "round", "all 500 tools", "tool search", "ratio"
    );
    for (round, (&(a, ab, at), &(s, sb, st))) in per_round[0].iter().zip(&per_round[1]).enumerate()
    {
        println!(
            "  {:<8}{:>10} tok {:>3} tools{:>10} tok {:>3} tools{:>9.1}%   ({ab} vs {sb} bytes)",
            round + 1,
            a,
            at,
            s,
            st,
            100.0 * s as f64 / a as f64
        );
    }
    println!(
        "  {:<8}{:>10} tok{:>20} tok{:>19.1}%",
        "total",
        totals[0],
        totals[1],
        100.0 * totals[1] as f64 / totals[0] as f64
    );

    let tools = catalog();
    let started = Instant::now();
    let builds = 200;
    for _ in 0..builds {
        std::hint::black_box(ToolIndex::build(&tools));
    }
    let build = started.elapsed().as_secs_f64() / f64::from(builds) * 1e6;
    let index = ToolIndex::build(&tools);
    let started = Instant::now();
    let searches = 20_000;
    for i in 0..searches {
        let query = if i % 2 == 0 {
            "create an invoice in system 7"
        } else {
            "list shipments"
        };
        std::hint::black_box(index.search(query, 5));
    }
    let search = started.elapsed().as_secs_f64() / f64::from(searches) * 1e6;
    println!("  index build (once per catalog): {build:.0} µs; one search: {search:.1} µs");
}
