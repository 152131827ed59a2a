//! Parse + normalize throughput on the recorded provider streams, against a baseline measured
//! in the same run: eventsource-stream for the SSE framing and `serde_json::Value` for every
//! payload (what a typical client does before it normalizes anything).
//!
//! Bodies are fed in 4 KiB pieces, the size of a typical socket read. "ours" is the whole
//! adapter path minus HTTP (`agent_backends::replay::decode`): framing, typed decoding, and the
//! normalized events. The framing-only rows keep the claim about our SSE parser checked on its
//! own. Run with `cargo bench -p agent-backends --bench parse --features providers,replay`.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::path::Path;

use agent_backends::Provider;
use agent_backends::framing::SseParser;
use agent_backends::replay::{Cassette, decode};
use agent_types::{Message, ModelRequest};
use bytes::Bytes;
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::Value;

const SAMPLES: usize = 21;
const PIECE: usize = 4096;
/// Issue 16: parse + normalize at least this many times the baseline's throughput.
const TARGET: f64 = 3.0;

/// This thread's CPU time in seconds: on a machine shared with other work, wall time would
/// count the time the scheduler gave to others.
fn cpu_seconds() -> f64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    now.tv_sec as f64 + now.tv_nsec as f64 / 1e9
}

/// Median CPU seconds per pass over `bytes` of input of `ours` and of `base`, their samples
/// interleaved (ours, base, ours, …) so that cache and frequency effects of other work on the
/// machine hit both alike. A sample is enough passes for about 256 KiB of input.
fn measure(bytes: usize, mut ours: impl FnMut(), mut base: impl FnMut()) -> (f64, f64) {
    for _ in 0..3 {
        ours();
        base();
    }
    let passes = (256 * 1024 / bytes.max(1)).clamp(10, 1000);
    let time = |op: &mut dyn FnMut()| {
        let start = cpu_seconds();
        for _ in 0..passes {
            op();
        }
        (cpu_seconds() - start) / passes as f64
    };
    let mut samples: (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        samples.0.push(time(&mut ours));
        samples.1.push(time(&mut base));
    }
    samples.0.sort_by(f64::total_cmp);
    samples.1.sort_by(f64::total_cmp);
    (samples.0[SAMPLES / 2], samples.1[SAMPLES / 2])
}

struct Recording {
    provider: Provider,
    name: String,
    cassette: Cassette,
}

fn recordings(extension: &str) -> Vec<Recording> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/providers");
    let mut found = Vec::new();
    for provider in Provider::ALL {
        let mut paths: Vec<_> = std::fs::read_dir(root.join(provider.name()))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.to_str().unwrap().ends_with(extension))
            .filter(|path| !path.to_str().unwrap().ends_with(".request.json"))
            .collect();
        paths.sort();
        for path in paths {
            let cassette = Cassette::from_file(&path).unwrap();
            if cassette.status != 200 || !cassette.is_stream() {
                continue;
            }
            found.push(Recording {
                provider,
                name: format!(
                    "{}/{}",
                    provider.name(),
                    path.file_name().unwrap().to_str().unwrap()
                ),
                cassette,
            });
        }
    }
    found
}

fn ours(recording: &Recording, request: &ModelRequest) {
    let events = decode(
        recording.provider,
        request,
        Some(&recording.cassette.content_type),
        &recording.cassette.body,
        PIECE,
    );
    black_box(events.ok());
}

fn baseline_sse(body: &Bytes, runtime: &tokio::runtime::Runtime, parse_json: bool) {
    let pieces: Vec<Result<Bytes, std::convert::Infallible>> = body
        .chunks(PIECE)
        .map(|piece| Ok(body.slice_ref(piece)))
        .collect();
    runtime.block_on(async {
        let mut events = futures_util::stream::iter(pieces).eventsource();
        while let Some(event) = events.next().await {
            let event = event.unwrap();
            if parse_json {
                black_box(serde_json::from_str::<Value>(&event.data).ok());
            } else {
                black_box(event.data.len());
            }
        }
    });
}

fn ours_framing(body: &[u8]) {
    let mut parser = SseParser::new();
    let mut total = 0usize;
    let mut on = |event: agent_backends::framing::SseEvent<'_>| {
        total += event.data.len();
        Ok(())
    };
    for piece in body.chunks(PIECE) {
        parser.feed(piece, &mut on).unwrap();
    }
    parser.finish(&mut on).unwrap();
    black_box(total);
}

fn baseline_lines(body: &[u8]) {
    for line in body.split(|&b| b == b'\n').filter(|line| !line.is_empty()) {
        black_box(serde_json::from_slice::<Value>(line).ok());
    }
}

fn mb_per_s(bytes: usize, seconds: f64) -> f64 {
    bytes as f64 / seconds / 1e6
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let request = ModelRequest::new("bench", vec![Message::user("hi")]);

    println!(
        "parse + normalize, 4 KiB pieces (median CPU time of {SAMPLES} samples of ~256 KiB each, \
         ours and the baseline interleaved)\n"
    );
    println!(
        "{:<58} {:>9} {:>12} {:>12} {:>7}",
        "recording", "bytes", "ours MB/s", "base MB/s", "ratio"
    );
    let mut totals = (0usize, 0.0f64, 0.0f64);
    for recording in recordings(".sse") {
        let bytes = recording.cassette.body.len();
        let (ours_s, base_s) = measure(
            bytes,
            || ours(&recording, &request),
            || baseline_sse(&recording.cassette.body, &runtime, true),
        );
        totals.0 += bytes;
        totals.1 += ours_s;
        totals.2 += base_s;
        println!(
            "{:<58} {:>9} {:>12.1} {:>12.1} {:>6.1}x",
            recording.name,
            bytes,
            mb_per_s(bytes, ours_s),
            mb_per_s(bytes, base_s),
            base_s / ours_s
        );
    }
    let ratio = totals.2 / totals.1;
    println!(
        "{:<58} {:>9} {:>12.1} {:>12.1} {:>6.1}x   (baseline: eventsource-stream + serde_json::Value; \
         target ≥ {TARGET:.1}x: {})",
        "ALL SSE RECORDINGS",
        totals.0,
        mb_per_s(totals.0, totals.1),
        mb_per_s(totals.0, totals.2),
        ratio,
        if ratio >= TARGET { "met" } else { "NOT met" }
    );
    // Read by `cargo xtask bench` into its targets table.
    println!(
        "TARGET parse + normalize speed-up vs eventsource+Value | {ratio:.2}x | >= {TARGET:.1} | {}",
        if ratio >= TARGET { "MET" } else { "NOT MET" }
    );

    let mut lines = (0usize, 0.0f64, 0.0f64);
    for recording in recordings(".ndjson") {
        let bytes = recording.cassette.body.len();
        lines.0 += bytes;
        let (ours_s, base_s) = measure(
            bytes,
            || ours(&recording, &request),
            || baseline_lines(&recording.cassette.body),
        );
        lines.1 += ours_s;
        lines.2 += base_s;
    }
    println!(
        "{:<58} {:>9} {:>12.1} {:>12.1} {:>6.1}x   (baseline: split lines + serde_json::Value)",
        "ALL NDJSON RECORDINGS",
        lines.0,
        mb_per_s(lines.0, lines.1),
        mb_per_s(lines.0, lines.2),
        lines.2 / lines.1
    );

    println!("\nSSE framing alone (no JSON), all SSE recordings");
    let all: Vec<Recording> = recordings(".sse");
    let bytes: usize = all.iter().map(|r| r.cassette.body.len()).sum();
    let (ours_s, base_s) = measure(
        bytes,
        || all.iter().for_each(|r| ours_framing(&r.cassette.body)),
        || {
            all.iter()
                .for_each(|r| baseline_sse(&r.cassette.body, &runtime, false));
        },
    );
    println!(
        "{:<58} {:>9} {:>12.1} {:>12.1} {:>6.1}x   (baseline: eventsource-stream)",
        "SseParser",
        bytes,
        mb_per_s(bytes, ours_s),
        mb_per_s(bytes, base_s),
        base_s / ours_s
    );
}
