//! One agent run of 3 tool rounds against a loopback server that returns recorded OpenAI Chat
//! Completions streams instantly, against the floor: raw reqwest making the same four requests
//! and reading the same bodies, with no parsing at all.
//!
//! The difference is everything agentry adds per run: building the requests from the
//! history, framing and decoding the streams, assembling messages, validating arguments,
//! running the (trivial) tools and the loop's bookkeeping. Target: within 10% of the floor.
//! Run with `cargo bench -p agentry --bench loopback --features openai,replay`.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use agentry::backends::http::{HttpClient, HttpOptions, RetryPolicy};
use agentry::backends::openai_chat::OpenAiChat;
use agentry::backends::replay::{Cassette, ReplayServer};
use agentry::tools::{Registry, Tool};
use agentry::{Input, Options, generate};
use serde_json::json;

const RUNS: usize = 200;
const SAMPLES: usize = 9;

fn recording(name: &str) -> Cassette {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/providers/openai-chat");
    Cassette::from_file(root.join(name)).unwrap()
}

/// Three tool rounds (one call, two parallel calls, one call), then the answer.
fn script() -> Vec<Cassette> {
    vec![
        recording("stream-tool-call.sse"),
        recording("stream-parallel-tool-calls-empty-args.sse"),
        recording("stream-tool-call.sse"),
        recording("stream-text-usage.sse"),
    ]
}

fn tools() -> Registry {
    let mut tools = Registry::new();
    for name in ["get_capital", "get_country", "get_product_name"] {
        tools
            .register(Tool::from_json_fn(
                name,
                "a lookup",
                json!({"type": "object"}),
                |_, _| async { Ok(json!("Paris")) },
            ))
            .unwrap();
    }
    tools
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let server = ReplayServer::start([]).await.unwrap();
    let client = HttpClient::new(None).unwrap();
    let backend = OpenAiChat::new("bench-key-0123456789")
        .with_base_url(server.url())
        .with_http(
            HttpOptions::default()
                .with_client(client.clone())
                .with_retry(RetryPolicy::none()),
        );
    let options = Options::auto()
        .with_tools(tools())
        .with_max_repeated_calls(None);
    let raw = reqwest::Client::new();
    let url = format!("{}/chat/completions", server.url());
    let body = serde_json::to_vec(&json!({
        "model": "gpt-4o", "stream": true,
        "messages": [{"role": "user", "content": "What is the capital of France?"}]
    }))
    .unwrap();

    let agentry_run = || async {
        for cassette in script() {
            server.push(cassette);
        }
        let input = Input::new("gpt-4o").user("What is the capital of France?");
        let result = generate(&backend, input, &options).await.unwrap();
        assert_eq!(result.messages.len(), 8, "3 tool rounds and the answer");
    };
    let floor_run = || async {
        for cassette in script() {
            server.push(cassette);
        }
        for _ in 0..4 {
            let response = raw.post(&url).body(body.clone()).send().await.unwrap();
            std::hint::black_box(response.bytes().await.unwrap());
        }
    };

    // Warm both connection pools and allocators.
    for _ in 0..20 {
        agentry_run().await;
        floor_run().await;
    }
    let mut ours = Vec::new();
    let mut floor = Vec::new();
    for _ in 0..SAMPLES {
        let start = Instant::now();
        for _ in 0..RUNS {
            agentry_run().await;
        }
        ours.push(start.elapsed() / RUNS as u32);
        let start = Instant::now();
        for _ in 0..RUNS {
            floor_run().await;
        }
        floor.push(start.elapsed() / RUNS as u32);
    }
    let (ours, floor) = (median(ours), median(floor));
    println!(
        "loopback agent run, 3 tool rounds + answer (4 HTTP calls), median of {SAMPLES}×{RUNS}"
    );
    println!(
        "  agentry (auto loop, OpenAI Chat adapter)  {:>10.1} µs/run",
        ours.as_secs_f64() * 1e6
    );
    println!(
        "  floor (raw reqwest, bodies read as bytes){:>10.1} µs/run",
        floor.as_secs_f64() * 1e6
    );
    println!(
        "  agentry / floor                           {:>10.3}x  (target ≤ 1.10)",
        ours.as_secs_f64() / floor.as_secs_f64()
    );
}
