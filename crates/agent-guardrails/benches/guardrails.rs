//! Guardrail overhead per tool round, with a small in-file harness (no bench framework).
//!
//! A scripted model asks for one tool whose result is 64 KB of record-like text, then
//! answers: one tool round per run. Timed with the PII guardrail (every result redacted
//! before the model sees it) against the same run without guardrails, measured in the same
//! run, for a result with no PII (the common case: one scan, nothing copied) and for one with
//! an email or a card number in every ~1 KB. The Rego policy's cost per call is reported
//! beside it, and the redactor's raw throughput.
//!
//! Run with `cargo bench -p agent-guardrails --bench guardrails` (or `cargo xtask bench`).
//! Timings are reported, never asserted.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Instant;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_guardrails::{PiiGuardrail, PolicyGuardrail, Redactor};
use agent_loop::{Input, Options, generate};
use agent_tools::{Registry, Tool, ToolError};
use serde_json::json;

const SAMPLES: usize = 15;
const BATCH: usize = 20;
const RESULT_BYTES: usize = 64 * 1024;

/// 64 KB of record-like lines; with `pii`, an email or a card number in every ~1 KB.
fn payload(pii: bool) -> String {
    let mut text = String::with_capacity(RESULT_BYTES + 128);
    let mut line = 0;
    while text.len() < RESULT_BYTES {
        line += 1;
        text.push_str(&format!(
            "row {line:05}: status shipped, warehouse north-{}, items 3, total 42.50 EUR; ",
            line % 7
        ));
        if pii && line % 12 == 0 {
            if line % 24 == 0 {
                text.push_str("contact ann.lee@example.com; ");
            } else {
                text.push_str("card 4111 1111 1111 1111; ");
            }
        }
    }
    text.truncate(RESULT_BYTES);
    text
}

fn tools(result: String) -> Registry {
    let mut tools = Registry::new();
    tools
        .register(Tool::from_json_fn(
            "export",
            "Exports the orders.",
            json!({"type": "object", "properties": {}}),
            move |_args: serde_json::Value, _ctx| {
                let result = result.clone();
                async move { Ok::<_, ToolError>(serde_json::Value::String(result)) }
            },
        ))
        .unwrap();
    tools
}

/// Median ns per run of `options` over the scripted round.
fn time_runs(rt: &tokio::runtime::Runtime, options: &Options) -> f64 {
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let started = Instant::now();
        for _ in 0..BATCH {
            let backend = ScriptedBackend::new([
                ScriptedTurn::tool_call("call_1", "export", json!({})),
                ScriptedTurn::text("done"),
            ]);
            let result = rt
                .block_on(generate(&backend, Input::new("m").user("export"), options))
                .unwrap();
            black_box(result);
        }
        samples.push(started.elapsed().as_nanos() as f64 / BATCH as f64);
    }
    samples.sort_by(f64::total_cmp);
    samples[SAMPLES / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    println!(
        "agent-guardrails benchmarks: one tool round with a {} KB result, median of {SAMPLES} \
         samples of {BATCH} runs",
        RESULT_BYTES / 1024
    );
    for (label, pii) in [
        ("no PII in the result", false),
        ("a match every ~1 KB", true),
    ] {
        let tools = tools(payload(pii));
        let bare = Options::auto()
            .with_tools(tools)
            .with_tool_result_max_bytes(2 * RESULT_BYTES);
        let guarded = bare
            .clone()
            .with_guardrails(PiiGuardrail::new().into_guardrails());
        let without = time_runs(&rt, &bare);
        let with = time_runs(&rt, &guarded);
        println!(
            "guardrail overhead per round (PII redaction, 64 KB result, {label}): {:.1} µs \
             ({:.1} µs without, {:.1} µs with, ratio {:.2})",
            (with - without) / 1e3,
            without / 1e3,
            with / 1e3,
            with / without
        );
    }

    let text = payload(true);
    let started = Instant::now();
    let mut redacted = 0;
    for _ in 0..100 {
        redacted += Redactor::new()
            .redact(black_box(&text))
            .map_or(0, |(_, counts)| counts.total());
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "redactor throughput: {:.0} MB/s ({redacted} redactions in 100 passes of 64 KB)",
        100.0 * RESULT_BYTES as f64 / secs / 1e6
    );

    let policy = PolicyGuardrail::from_file(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/examples/guardrails.rego"
    ))
    .unwrap();
    let input = json!({
        "caller": {"principal": "ann", "tenant": "acme", "permissions": []},
        "tool": {"name": "read_file", "description": ""},
        "call_id": "call_1",
        "arguments": {"path": "workspace/notes.txt"},
    });
    let started = Instant::now();
    for _ in 0..1000 {
        black_box(policy.evaluate(black_box(&input)).unwrap());
    }
    println!(
        "policy guardrail per tool call (docs/examples/guardrails.rego): {:.1} µs",
        started.elapsed().as_secs_f64() * 1e6 / 1000.0
    );
}
