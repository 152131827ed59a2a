//! `agentry serve`'s memory stays bounded under a hostile tool round: a model asking for 300
//! `read_file` calls on a 1 MiB file (and on a 1 MiB file of NUL bytes, which grows about
//! sixfold when JSON-escaped). The server is the real binary, its model a loopback replay
//! server answering in the OpenAI Chat Completions wire format, and the peak resident set
//! (`VmHWM`) is read from `/proc/<pid>/status` after the execute.
//!
//! Before the fix (truncation kept each result's whole allocation; `read_file` read 1 MiB
//! per call whatever the cap) the text round peaked at 488 MiB and the NUL round at 2 GiB.
//! All 300 calls must run (the test checks it): a server-side cap on calls per round would
//! make it prove nothing, so such a cap must be raised to `CALLS` in `config` below.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use agent_backends::replay::{Cassette, ReplayServer};
use serde_json::{Value, json};

#[path = "support/served.rs"]
mod served;
use served::Served;

/// How many `read_file` calls the hostile model asks for in one round.
const CALLS: usize = 300;

/// The size of the file it reads.
const FILE_BYTES: usize = 1024 * 1024;

/// The bound on what the hostile round adds to the server's resident set: its peak minus the
/// idle server's. 300 results of 64 KiB are ~19 MiB; the heap holds at most three copies of
/// them at once (61 MiB at its peak, by valgrind's massif: the history, the `session_end`
/// event's messages and its SSE frame, then the history, the stored document and SQLite's
/// bound copy and row). The rest is glibc keeping freed chunks in its arenas, which depends on
/// how the threads interleave: measured 84–92 MiB on a quiet machine, 101–107 MiB in some runs
/// on a loaded one and 114 MiB once in CI (with `MALLOC_MMAP_THRESHOLD_=65536` the same round
/// adds 70–73 MiB).
const GROWTH_LIMIT_BYTES: u64 = 128 * 1024 * 1024;

/// The bound on the peak itself, less the pages of the binary's own file the idle server has
/// mapped (`RssFile`): 40 MiB of the idle 44 MiB of this debug binary are its code and
/// relocated data, which grow with every feature linked in and say nothing about what a
/// request makes the server allocate (the whole idle peak was 31 MiB before MCP, 48 MiB in CI
/// with the console and guardrails).
const PEAK_LIMIT_BYTES: u64 = 150 * 1024 * 1024;

/// One streamed Chat Completions chunk.
fn chunk(delta: &Value, finish: Option<&str>) -> String {
    let chunk = json!({
        "id": "chatcmpl-hostile",
        "object": "chat.completion.chunk",
        "created": 1_763_806_512,
        "model": "gpt-4.1-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    });
    format!("data: {chunk}\n\n")
}

/// The hostile turn: `CALLS` calls of `read_file` on `path`, each asking for the most bytes.
fn hostile_round(path: &str) -> String {
    let mut body = chunk(&json!({"role": "assistant", "content": null}), None);
    for index in 0..CALLS {
        let arguments = json!({"path": path, "max_bytes": FILE_BYTES}).to_string();
        let call = json!({"tool_calls": [{
            "index": index,
            "id": format!("call_{index:04}"),
            "type": "function",
            "function": {"name": "read_file", "arguments": arguments},
        }]});
        body.push_str(&chunk(&call, None));
    }
    body.push_str(&chunk(&json!({}), Some("tool_calls")));
    body.push_str("data: [DONE]\n\n");
    body
}

/// The model's answer once it has the results.
fn final_round() -> String {
    let mut body = chunk(&json!({"role": "assistant", "content": "Read it."}), None);
    body.push_str(&chunk(&json!({}), Some("stop")));
    body.push_str("data: [DONE]\n\n");
    body
}

fn config(root: &Path, model_url: &str) -> String {
    format!(
        r#"
[server]
tools = ["read_file"]
root = "{root}"

# Let the whole hostile round through, so the bound holds on the results' own caps.
[server.caps]
max_tool_calls_per_round = 300
max_round_result_bytes = 33554432

[server.quotas]
max_session_bytes = 67108864

[server.store]
kind = "sqlite"
path = "sessions.db"

[[server.models]]
name = "hostile"
provider = "openai-compatible"
base_url = "{model_url}/v1"

[[server.tenants]]
name = "acme"
api_keys = ["key-acme-memory-test"]
"#,
        root = root.display()
    )
}

/// What one hostile execute cost the server.
struct Measured {
    /// Peak resident set of the server after start-up.
    idle_peak: u64,
    /// Of the idle resident set, the pages mapped from files (the binary's own, mostly).
    idle_file: u64,
    /// Peak resident set after the execute.
    peak: u64,
    /// Resident set after the execute.
    after: u64,
    /// Bytes of the request that carried the results upstream.
    upstream_request: usize,
}

/// Runs the hostile round against a fresh server reading `file_body` and measures it.
async fn hostile_execute(file_body: &[u8]) -> Measured {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("files");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("big.txt"), file_body).unwrap();
    let model = ReplayServer::start([
        Cassette::body(hostile_round("big.txt")),
        Cassette::body(final_round()),
    ])
    .await
    .unwrap();
    let path = dir.path().join("agentry.toml");
    std::fs::write(&path, config(&root, &model.url())).unwrap();

    let served = Served::start(&path);
    let idle_peak = served.status_bytes("VmHWM");
    let idle_file = served.status_bytes("RssFile");
    let response = reqwest::Client::new()
        .post(format!("{}/v1/sessions/hostile-1/execute", served.url))
        .bearer_auth("key-acme-memory-test")
        .json(&json!({
            "message": "Read big.txt, many times.",
            "context": {"model": "hostile", "tools": ["read_file"]},
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|frame| frame.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let ends: Vec<&Value> = events
        .iter()
        .filter(|event| event["type"] == "tool_execution_end")
        .collect();
    assert_eq!(ends.len(), CALLS);
    // Every call ran and read the file (a refused call would make the round cheap).
    assert!(
        ends.iter()
            .all(|end| end.get("is_error").is_none() && end["truncated"].is_null()),
        "a call failed or was refused: {}",
        ends.iter()
            .find(|end| end.get("is_error").is_some())
            .map_or(String::new(), ToString::to_string)
    );
    let complete = events.last().unwrap();
    assert_eq!(complete["status"], "completed", "{complete}");

    let requests = model.requests();
    assert_eq!(requests.len(), 2, "the results went upstream once");
    let results = requests[1].json().unwrap()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "tool")
        .count();
    assert_eq!(results, CALLS);

    Measured {
        idle_peak,
        idle_file,
        peak: served.status_bytes("VmHWM"),
        after: served.status_bytes("VmRSS"),
        upstream_request: requests[1].body.len(),
    }
}

fn assert_bounded(measured: &Measured) {
    let growth = measured.peak.saturating_sub(measured.idle_peak);
    assert!(
        growth < GROWTH_LIMIT_BYTES,
        "the round added {growth} bytes to the resident set, over {GROWTH_LIMIT_BYTES}"
    );
    let peak = measured.peak.saturating_sub(measured.idle_file);
    assert!(
        peak < PEAK_LIMIT_BYTES,
        "peak RSS {} bytes less {} of the binary's mapped file: {peak}, over {PEAK_LIMIT_BYTES}",
        measured.peak,
        measured.idle_file
    );
}

/// The numbers, for `--no-capture` runs (docs/server.md quotes them).
#[allow(clippy::print_stderr, clippy::cast_precision_loss)]
fn report(variant: &str, measured: &Measured) {
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    eprintln!(
        "{variant}: idle peak {:.1} MiB ({:.1} MiB of it file pages), peak {:.1} MiB, after {:.1} MiB, upstream request {:.1} MiB",
        mib(measured.idle_peak),
        mib(measured.idle_file),
        mib(measured.peak),
        mib(measured.after),
        mib(measured.upstream_request as u64),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_reads_of_a_1_mib_file_add_under_128_mib() {
    let text: Vec<u8> = b"All work and no play makes Jack a dull boy.\n"
        .iter()
        .copied()
        .cycle()
        .take(FILE_BYTES)
        .collect();
    let measured = hostile_execute(&text).await;
    report("text", &measured);
    assert_bounded(&measured);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_reads_of_a_nul_filled_file_add_under_128_mib() {
    let measured = hostile_execute(&vec![0u8; FILE_BYTES]).await;
    report("NUL", &measured);
    assert_bounded(&measured);
}
