//! Benchmarks for agent-tools, with a small in-file harness (no bench framework).
//!
//! Each measurement runs a fixed batch of operations per sample after a warm-up and reports
//! the median time per operation, next to a baseline measured in the same run.
//! Run with `cargo bench -p agent-tools --bench tools`.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use agent_tools::{
    ArgumentValidator, RegisteredTool, Registry, Tool, TruncationPolicy, ValidationMode, truncate,
};
use serde_json::{Value, json};

const SAMPLES: usize = 15;

/// Median nanoseconds per operation of `op`, run `batch` times per sample. `setup` runs
/// before each sample, outside the timed region, and its output is handed to `op`.
fn measure_with<S, T>(
    batch: usize,
    mut setup: impl FnMut() -> S,
    mut op: impl FnMut(&mut S) -> T,
) -> f64 {
    // Warm-up: caches, branch predictors, allocator pools.
    for _ in 0..2 {
        let mut state = setup();
        for _ in 0..batch {
            black_box(op(&mut state));
        }
    }
    let mut per_op: Vec<f64> = (0..SAMPLES)
        .map(|_| {
            let mut state = setup();
            let start = Instant::now();
            for _ in 0..batch {
                black_box(op(&mut state));
            }
            let elapsed = start.elapsed().as_nanos() as f64 / batch as f64;
            drop(state);
            elapsed
        })
        .collect();
    per_op.sort_by(f64::total_cmp);
    per_op[SAMPLES / 2]
}

fn measure<T>(batch: usize, mut op: impl FnMut() -> T) -> f64 {
    measure_with(batch, || (), |()| op())
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

fn row(name: &str, ns: f64, baseline_name: &str, baseline_ns: f64, extra: &str) {
    println!(
        "{name:<44} {:>10}/op   baseline {baseline_name:<30} {:>10}/op   {:>9.1}x{extra}",
        fmt_ns(ns),
        fmt_ns(baseline_ns),
        baseline_ns / ns,
    );
}

fn weather_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 1},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "units": {"type": "string", "enum": ["metric", "imperial"]}
        },
        "required": ["city", "days"],
        "additionalProperties": false
    })
}

fn bench_validation() {
    let schema = weather_schema();
    let validator = ArgumentValidator::new(&schema).unwrap();
    let args = json!({"city": "Denver", "days": 3, "units": "metric"});
    let compiled = measure(20_000, || {
        validator
            .validate(black_box(args.clone()), ValidationMode::Strict)
            .is_ok()
    });
    let per_call = measure(100, || {
        ArgumentValidator::new(black_box(&schema))
            .unwrap()
            .validate(black_box(args.clone()), ValidationMode::Strict)
            .is_ok()
    });
    let target = if compiled <= 2_000.0 {
        "  (target ≤ 2 µs: met)"
    } else {
        "  (target ≤ 2 µs: MISSED)"
    };
    row(
        "validate 3-field args, compiled once",
        compiled,
        "compile schema per call",
        per_call,
        target,
    );

    let broken = json!({"city": "Denver", "days": "3", "units": null});
    assert_eq!(
        validator
            .validate(broken.clone(), ValidationMode::Lenient)
            .unwrap()
            .repairs
            .len(),
        2
    );
    let lenient = measure(20_000, || {
        validator
            .validate(black_box(broken.clone()), ValidationMode::Lenient)
            .is_ok()
    });
    row(
        "lenient repair+validate, 2 repairs",
        lenient,
        "strict validate, no repair",
        compiled,
        "",
    );
}

fn bench_truncation() {
    // Mixed 1-, 2- and 4-byte characters, so the cut has to find a boundary.
    let unit = "héllo wörld 😀 data,";
    let big: String = unit.repeat(10 * 1024 * 1024 / unit.len());
    let bytes = big.len() as f64;
    let policy = TruncationPolicy::default();
    let gbps = |ns: f64| bytes / ns; // bytes per ns = GB/s

    // The strings to cut are cloned before each sample, so copying 10 MB is not timed. Our
    // `truncate` frees its input itself (it keeps a copy of the kept prefix, not the 10 MB
    // allocation), so that free is timed; the naive one's input is dropped after the sample.
    let batch = 4;
    let fresh = || {
        let inputs: Vec<String> = (0..batch).map(|_| big.clone()).collect();
        (inputs, Vec::with_capacity(batch))
    };
    let in_place = measure_with(batch, fresh, |(inputs, kept)| {
        let out = truncate(inputs.pop().unwrap(), &policy);
        let sent = out.sent_bytes;
        kept.push(out.text);
        sent
    });
    let naive = measure_with(batch, fresh, |(inputs, kept)| {
        let input = inputs.pop().unwrap();
        let out = naive_truncate(&input, policy.max_bytes());
        let sent = out.len();
        kept.push(input);
        kept.push(out);
        sent
    });
    row(
        "truncate 10 MB result (escaping counted)",
        in_place,
        "char-by-char copy",
        naive,
        &format!(
            "  ({:.0} GB/s; naive {:.1} GB/s)",
            gbps(in_place),
            gbps(naive)
        ),
    );

    // A string result is moved into the truncator (no copy), so the per-byte cost a caller
    // really pays is serializing a large non-string result; measure that end to end.
    let value = json!({ "report": big });
    let serialized = measure(8, || {
        truncate(black_box(&value).to_string(), &policy).sent_bytes
    });
    let naive_serialized = measure(8, || {
        let text = black_box(&value).to_string();
        naive_truncate(&text, policy.max_bytes()).len()
    });
    row(
        "serialize+truncate 10 MB JSON object",
        serialized,
        "serialize + char-by-char copy",
        naive_serialized,
        &format!("  ({:.1} GB/s)", gbps(serialized)),
    );
}

/// The baseline: walk the text char by char, copying into a new String until the budget
/// is spent, then append the marker.
fn naive_truncate(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let marker = agent_tools::marker(text.len());
    let mut out = String::new();
    for c in text.chars() {
        if out.len() + c.len_utf8() + marker.len() > max_bytes {
            break;
        }
        out.push(c);
    }
    out.push_str(&marker);
    out
}

fn bench_registry() {
    let mut registry = Registry::new();
    for i in 0..200 {
        let name = format!("get_resource_{i:03}");
        registry
            .register(Tool::remote(name, "A resource.", json!({"type": "object"})))
            .unwrap();
    }
    let list: Vec<Arc<RegisteredTool>> = registry.iter().cloned().collect();
    // Look up every name in a scrambled order so neither side benefits from locality.
    let queries: Vec<String> = (0..200)
        .map(|i| format!("get_resource_{:03}", (i * 73) % 200))
        .collect();
    let mut next = 0;
    let lookup = measure(100_000, || {
        next = (next + 1) % queries.len();
        registry.get(black_box(&queries[next])).is_some()
    });
    let mut next = 0;
    let scan = measure(20_000, || {
        next = (next + 1) % queries.len();
        let name = black_box(&queries[next]);
        list.iter().any(|tool| tool.name() == name)
    });
    row(
        "registry lookup among 200 tools",
        lookup,
        "linear scan",
        scan,
        "",
    );
}

fn main() {
    let start = Instant::now();
    println!("agent-tools benchmarks: median of {SAMPLES} samples; ratio = baseline / measured");
    bench_validation();
    bench_truncation();
    bench_registry();
    println!("total {:.1} s", start.elapsed().as_secs_f64());
}
