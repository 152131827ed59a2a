//! Agent runs against a loopback mock LLM, sequential and 256 at once, each against the floor:
//! a hand-written reqwest + serde loop making the same requests, in the same run.
//!
//! One run is 3 tool rounds of 3 parallel `get_weather` calls each, then a ~200-token
//! streamed answer: 4 streamed Chat Completions requests, whose history grows as a real
//! run's does. The mock (a child process, so its CPU is not the client's) picks the response
//! from the number of tool results in the request and writes it as the recorded OpenAI
//! streams are shaped (`chat.completion.chunk`s, one HTTP chunk per SSE event).
//!
//! - **floor**: reqwest, typed serde structs for the request, borrowed serde structs per SSE
//!   line, tool-call fragments assembled by index, the tool run, the history appended: what a
//!   careful hand-written client does, and nothing more.
//! - **agentry (events)**: `generate_stream` in auto mode with every event read: the target.
//! - **agentry (generate)**: `generate`, no events built.
//!
//! Both run on one current-thread tokio runtime (the client on one core) with the same
//! reqwest settings. CPU is the whole process's (the sum of `/proc/self/task/*/schedstat`),
//! per run; the scenarios are interleaved in one process and repeated, and the medians are
//! printed with their spread (min–max). Peak RSS of the 256-concurrent phase is measured in
//! a fresh child process per variant (`VmHWM`), so one never inherits the other's peak.
//!
//! Targets (issue 16): sequential ≤ 1.10x the floor, 256 concurrent ≤ 1.30x, peak RSS ≤ the
//! floor's + 20%. Numbers are printed, never asserted. Linux only (`/proc`). Run with
//! `cargo bench -p agentry --bench loopback --features openai,replay` (or `cargo xtask
//! bench`). To profile one variant alone, set `AGENTRY_LOOPBACK_ONLY` to
//! `seq-floor|seq-events|conc-floor|conc-events` and `AGENTRY_LOOPBACK_SECS`.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::borrow::Cow;
use std::hint::black_box;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentry::backends::http::{HttpClient, HttpOptions, RetryPolicy};
use agentry::backends::openai_chat::OpenAiChat;
use agentry::tools::{Registry, Tool};
use agentry::{Input, Options, generate, generate_stream};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ROLE: &str = "AGENTRY_LOOPBACK_ROLE";
const PORT_LINE: &str = "agentry-loopback-port ";
const KEY: &str = "bench-key-0123456789";
const MODEL: &str = "gpt-4o";
const PROMPT: &str = "What's the weather in Lisbon, Oslo and Paris, three times over?";
const CITIES: [&str; 3] = ["Lisbon", "Oslo", "Paris"];
const TOOL_ROUNDS: usize = 3;
const ANSWER_TOKENS: usize = 200;

/// Runs at once in the concurrent scenario.
const CONCURRENT: usize = 256;
/// Sequential runs per sample.
const SEQUENTIAL_RUNS: usize = 200;
/// Batches of [`CONCURRENT`] runs per sample.
const BATCHES: usize = 2;
/// Interleaved repetitions of every scenario.
const SAMPLES: usize = 7;
/// Fresh child processes per variant for the RSS figure.
const RSS_SAMPLES: usize = 3;

const TARGET_SEQUENTIAL: f64 = 1.10;
const TARGET_CONCURRENT: f64 = 1.30;
const TARGET_RSS: f64 = 1.20;

fn main() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => server(),
        Ok("rss") => rss_child(),
        _ => parent(),
    }
}

// ---------------------------------------------------------------------------------------------
// The mock LLM (child process)

/// One `chat.completion.chunk`, shaped as the recorded OpenAI streams are.
fn chunk(delta: &Value, finish: Option<&str>) -> String {
    json!({
        "id": "chatcmpl-C1KMEUDb1vVwsROQUCZTgG6A6vtWo", "object": "chat.completion.chunk",
        "created": 1_754_432_618, "model": "gpt-4o-2024-08-06", "service_tier": "default",
        "system_fingerprint": "fp_ff25b2783a", "usage": null,
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        "obfuscation": "jP9abrn9XF3"
    })
    .to_string()
}

fn usage_chunk(prompt: u32, completion: u32) -> String {
    json!({
        "id": "chatcmpl-C1KMEUDb1vVwsROQUCZTgG6A6vtWo", "object": "chat.completion.chunk",
        "created": 1_754_432_618, "model": "gpt-4o-2024-08-06", "service_tier": "default",
        "system_fingerprint": "fp_ff25b2783a", "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
        "obfuscation": "Ohcj4NkgRRFLL"
    })
    .to_string()
}

/// A whole HTTP response: headers, then every SSE event in its own HTTP chunk.
fn response(events: &[String]) -> Vec<u8> {
    let mut out = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n\
        cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        .to_vec();
    let mut push = |data: &str| {
        let event = format!("data: {data}\n\n");
        out.extend_from_slice(format!("{:x}\r\n", event.len()).as_bytes());
        out.extend_from_slice(event.as_bytes());
        out.extend_from_slice(b"\r\n");
    };
    for event in events {
        push(event);
    }
    push("[DONE]");
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// Round `round`'s three parallel calls, their arguments in three fragments each.
fn tool_round(round: usize) -> Vec<u8> {
    let mut events = vec![chunk(&json!({"role": "assistant", "content": null}), None)];
    for (index, city) in CITIES.iter().enumerate() {
        events.push(chunk(
            &json!({"tool_calls": [{"index": index, "id": format!("call_r{round}c{index}_3rqTYrA6H21AYUaRGP4F"),
                "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}),
            None,
        ));
        for fragment in ["{\"city\"", ": \"", &format!("{city}\"}}")] {
            events.push(chunk(
                &json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}),
                None,
            ));
        }
    }
    events.push(chunk(&json!({}), Some("tool_calls")));
    events.push(usage_chunk(364, 40));
    response(&events)
}

/// The answer: about 200 tokens, one per chunk.
fn answer() -> Vec<u8> {
    const WORDS: [&str; 10] = [
        " Lisbon",
        " is",
        " sunny",
        " at",
        " 19",
        "°C,",
        " Oslo",
        " overcast",
        " and",
        " cold.",
    ];
    let mut events = vec![chunk(&json!({"role": "assistant", "content": ""}), None)];
    for index in 0..ANSWER_TOKENS {
        events.push(chunk(&json!({"content": WORDS[index % WORDS.len()]}), None));
    }
    events.push(chunk(&json!({}), Some("stop")));
    events.push(usage_chunk(612, ANSWER_TOKENS as u32));
    response(&events)
}

/// The mock: HTTP/1.1 keep-alive, the response picked by the request's tool results.
fn server() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut responses: Vec<Arc<[u8]>> = (0..TOOL_ROUNDS).map(|r| tool_round(r).into()).collect();
    responses.push(answer().into());
    let responses: Arc<[Arc<[u8]>]> = responses.into();
    runtime.block_on(async move {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        // A burst of 256 connects overflows the default backlog of 128.
        let listener = socket.listen(1024).unwrap();
        println!("{PORT_LINE}{}", listener.local_addr().unwrap().port());
        std::io::stdout().flush().unwrap();
        let (closed_tx, closed_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            let _ = closed_tx.send(());
        });
        let accept = async {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                stream.set_nodelay(true).unwrap();
                tokio::spawn(connection(stream, responses.clone()));
            }
        };
        tokio::select! {
            () = accept => {}
            _ = closed_rx => {}
        }
    });
}

async fn connection(mut stream: tokio::net::TcpStream, responses: Arc<[Arc<[u8]>]>) {
    let mut buffer = Vec::with_capacity(16 * 1024);
    loop {
        // Headers, then a Content-Length body.
        let head_end = loop {
            if let Some(at) = find(&buffer, b"\r\n\r\n") {
                break at + 4;
            }
            if read_more(&mut stream, &mut buffer).await == 0 {
                return;
            }
        };
        let head = std::str::from_utf8(&buffer[..head_end]).unwrap();
        let length: usize = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().unwrap())
            })
            .unwrap_or(0);
        while buffer.len() < head_end + length {
            if read_more(&mut stream, &mut buffer).await == 0 {
                return;
            }
        }
        let body = &buffer[head_end..head_end + length];
        let results = count(body, b"\"tool_call_id\"");
        let round = (results / CITIES.len()).min(TOOL_ROUNDS);
        if stream.write_all(&responses[round]).await.is_err() {
            return;
        }
        buffer.drain(..head_end + length);
    }
}

async fn read_more(stream: &mut tokio::net::TcpStream, buffer: &mut Vec<u8>) -> usize {
    buffer.reserve(16 * 1024);
    stream.read_buf(buffer).await.unwrap_or(0)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|window| *window == needle)
        .count()
}

// ---------------------------------------------------------------------------------------------
// The floor: a hand-written reqwest + serde loop

#[derive(Serialize)]
struct FloorRequest<'a> {
    model: &'a str,
    stream: bool,
    stream_options: StreamOptions,
    messages: &'a [FloorMessage],
    tools: &'a Value,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum FloorMessage {
    User {
        content: String,
    },
    Assistant {
        content: Option<String>,
        tool_calls: Vec<OutCall>,
    },
    Tool {
        tool_call_id: String,
        content: String,
    },
}

#[derive(Serialize, Default)]
struct OutCall {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    function: OutFunction,
}

#[derive(Serialize, Default)]
struct OutFunction {
    name: String,
    arguments: String,
}

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    choices: Vec<Choice<'a>>,
    #[serde(default)]
    usage: Option<FloorUsage>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Vec<CallDelta<'a>>,
}

#[derive(Deserialize)]
struct CallDelta<'a> {
    index: usize,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct FunctionDelta<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct FloorUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
}

#[derive(Deserialize)]
struct WeatherArguments<'a> {
    #[serde(borrow)]
    city: Cow<'a, str>,
}

fn weather(city: &str) -> Value {
    match city {
        "Oslo" => json!({"city": "Oslo", "conditions": "overcast", "temp_c": 4}),
        _ => json!({"city": city, "conditions": "sunny", "temp_c": 19}),
    }
}

fn tools_json() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}}}])
}

struct Floor {
    client: reqwest::Client,
    url: String,
    tools: Value,
}

impl Floor {
    async fn run(&self) -> usize {
        let mut messages = vec![FloorMessage::User {
            content: PROMPT.to_owned(),
        }];
        let mut tokens = 0u64;
        loop {
            let body = serde_json::to_vec(&FloorRequest {
                model: MODEL,
                stream: true,
                stream_options: StreamOptions {
                    include_usage: true,
                },
                messages: &messages,
                tools: &self.tools,
            })
            .unwrap();
            let response = self
                .client
                .post(&self.url)
                .bearer_auth(KEY)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            assert!(response.status().is_success());
            let mut text = String::new();
            let mut calls: Vec<OutCall> = Vec::new();
            let mut pending = Vec::new();
            let mut stream = response.bytes_stream();
            while let Some(bytes) = stream.next().await {
                pending.extend_from_slice(&bytes.unwrap());
                let mut start = 0;
                while let Some(end) = pending[start..].iter().position(|&b| b == b'\n') {
                    let line = &pending[start..start + end];
                    start += end + 1;
                    let Some(data) = line.strip_prefix(b"data: ") else {
                        continue;
                    };
                    if data == b"[DONE]" {
                        continue;
                    }
                    let chunk: Chunk<'_> = serde_json::from_slice(data).unwrap();
                    if let Some(usage) = chunk.usage {
                        tokens += usage.prompt_tokens + usage.completion_tokens;
                    }
                    for choice in chunk.choices {
                        black_box(&choice.finish_reason);
                        let Some(delta) = choice.delta else { continue };
                        if let Some(content) = delta.content {
                            text.push_str(&content);
                        }
                        for call in delta.tool_calls {
                            if call.index >= calls.len() {
                                calls.resize_with(call.index + 1, OutCall::default);
                            }
                            let out = &mut calls[call.index];
                            if let Some(id) = call.id {
                                out.id = id.into_owned();
                                out.kind = "function";
                            }
                            if let Some(function) = call.function {
                                if let Some(name) = function.name {
                                    out.function.name.push_str(&name);
                                }
                                if let Some(arguments) = function.arguments {
                                    out.function.arguments.push_str(&arguments);
                                }
                            }
                        }
                    }
                }
                pending.drain(..start);
            }
            if calls.is_empty() {
                black_box(tokens);
                return text.len();
            }
            let mut results = Vec::with_capacity(calls.len());
            for call in &calls {
                let arguments: WeatherArguments<'_> =
                    serde_json::from_str(&call.function.arguments).unwrap();
                results.push(FloorMessage::Tool {
                    tool_call_id: call.id.clone(),
                    content: weather(&arguments.city).to_string(),
                });
            }
            messages.push(FloorMessage::Assistant {
                content: (!text.is_empty()).then_some(text),
                tool_calls: calls,
            });
            messages.extend(results);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// agentry

struct Agentry {
    backend: OpenAiChat,
    options: Options,
}

impl Agentry {
    fn new(url: &str) -> Self {
        let mut tools = Registry::new();
        tools
            .register(Tool::from_json_fn(
                "get_weather",
                "Current weather for a city.",
                json!({"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]}),
                |arguments, _| async move {
                    Ok(weather(arguments["city"].as_str().unwrap_or_default()))
                },
            ))
            .unwrap();
        let client = HttpClient::new(None).unwrap();
        let backend = OpenAiChat::new(KEY).with_base_url(url).with_http(
            HttpOptions::default()
                .with_client(client)
                .with_retry(RetryPolicy::none()),
        );
        let options = Options::auto()
            .with_tools(tools)
            .with_max_repeated_calls(None);
        Self { backend, options }
    }

    /// One run with every event read (the target).
    async fn run_events(&self) -> usize {
        let input = Input::new(MODEL).user(PROMPT);
        let mut stream = generate_stream(&self.backend, input, &self.options);
        let mut events = 0usize;
        while let Some(event) = stream.next().await {
            black_box(&event);
            events += 1;
        }
        let result = stream.result().await.unwrap();
        assert_eq!(result.model_calls.len(), TOOL_ROUNDS + 1);
        black_box(events);
        result.text().len()
    }

    /// One run through `generate` (no events built).
    async fn run_generate(&self) -> usize {
        let input = Input::new(MODEL).user(PROMPT);
        let result = generate(&self.backend, input, &self.options).await.unwrap();
        assert_eq!(result.model_calls.len(), TOOL_ROUNDS + 1);
        result.text().len()
    }
}

// ---------------------------------------------------------------------------------------------
// The scenarios

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Floor,
    Events,
    Generate,
}

impl Variant {
    const ALL: [Variant; 3] = [Variant::Floor, Variant::Events, Variant::Generate];

    fn name(self) -> &'static str {
        match self {
            Variant::Floor => "floor (reqwest + serde by hand)",
            Variant::Events => "agentry (events read)",
            Variant::Generate => "agentry (generate)",
        }
    }
}

struct Clients {
    floor: Floor,
    agentry: Agentry,
}

impl Clients {
    fn new(port: u16) -> Arc<Self> {
        let base = format!("http://127.0.0.1:{port}/v1");
        let client = reqwest::Client::builder()
            .tcp_keepalive(Duration::from_secs(60))
            .pool_idle_timeout(Duration::from_secs(90))
            .build()
            .unwrap();
        Arc::new(Self {
            floor: Floor {
                client,
                url: format!("{base}/chat/completions"),
                tools: tools_json(),
            },
            agentry: Agentry::new(&base),
        })
    }

    async fn run(&self, variant: Variant) -> usize {
        let text = match variant {
            Variant::Floor => self.floor.run().await,
            Variant::Events => self.agentry.run_events().await,
            Variant::Generate => self.agentry.run_generate().await,
        };
        assert!(text > 500, "the answer was read ({text} bytes)");
        text
    }

    async fn sequential(&self, variant: Variant, runs: usize) {
        for _ in 0..runs {
            self.run(variant).await;
        }
    }

    /// `CONCURRENT` runs at once, each its own task (as a server would run them).
    async fn concurrent(self: &Arc<Self>, variant: Variant) {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..CONCURRENT {
            let clients = self.clone();
            tasks.spawn(async move { clients.run(variant).await });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    }
}

/// CPU time of the whole process so far, in nanoseconds: every thread's time on a CPU.
fn cpu_ns() -> u64 {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| {
            let path = task.ok()?.path().join("schedstat");
            let text = std::fs::read_to_string(path).ok()?;
            text.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

/// A `/proc/self/status` field in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

fn spread(mut samples: Vec<f64>) -> Spread {
    samples.sort_by(f64::total_cmp);
    Spread {
        median: samples[samples.len() / 2],
        min: samples[0],
        max: samples[samples.len() - 1],
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// The parent: the CPU comparison in-process, the RSS one in fresh children

struct Mock {
    child: std::process::Child,
    port: u16,
}

impl Mock {
    fn start() -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(ROLE, "server")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix(PORT_LINE)
            .unwrap()
            .parse()
            .unwrap();
        Self { child, port }
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn parent() {
    let mock = Mock::start();
    let runtime = runtime();
    let clients = Clients::new(mock.port);
    if let Ok(only) = std::env::var("AGENTRY_LOOPBACK_ONLY") {
        profile_one(&runtime, &clients, &only);
        return;
    }
    runtime.block_on(async {
        // Warm both pools (256 connections each), allocators and code paths.
        for variant in Variant::ALL {
            clients.concurrent(variant).await;
            clients.sequential(variant, 20).await;
        }
    });

    let mut sequential: Vec<Vec<f64>> = vec![Vec::new(); 3];
    let mut concurrent: Vec<Vec<f64>> = vec![Vec::new(); 3];
    for sample in 0..SAMPLES {
        // Rotate the order so no variant always runs after the same one.
        for offset in 0..3 {
            let index = (sample + offset) % 3;
            let variant = Variant::ALL[index];
            let start = cpu_ns();
            runtime.block_on(clients.sequential(variant, SEQUENTIAL_RUNS));
            sequential[index].push((cpu_ns() - start) as f64 / 1e6 / SEQUENTIAL_RUNS as f64);
            let start = cpu_ns();
            runtime.block_on(async {
                for _ in 0..BATCHES {
                    clients.concurrent(variant).await;
                }
            });
            concurrent[index].push((cpu_ns() - start) as f64 / 1e6 / (BATCHES * CONCURRENT) as f64);
        }
    }

    println!(
        "loopback agent runs: {TOOL_ROUNDS} tool rounds × {} parallel calls + a {ANSWER_TOKENS}-token \
         streamed answer (4 SSE requests per run)",
        CITIES.len()
    );
    println!(
        "client CPU per run (whole process, current-thread runtime), median [min–max] of {SAMPLES} \
         interleaved samples\n"
    );
    let sequential_ratio = report(
        &format!("sequential ({SEQUENTIAL_RUNS} runs per sample)"),
        &sequential,
        TARGET_SEQUENTIAL,
    );
    let concurrent_ratio = report(
        &format!("{CONCURRENT} concurrent ({BATCHES} batches per sample)"),
        &concurrent,
        TARGET_CONCURRENT,
    );
    drop(runtime);

    // Peak RSS, each variant in fresh children, interleaved.
    let mut peaks: Vec<Vec<f64>> = vec![Vec::new(); 3];
    for _ in 0..RSS_SAMPLES {
        for (index, variant) in Variant::ALL.iter().enumerate() {
            peaks[index].push(rss_of(mock.port, *variant));
        }
    }
    println!(
        "peak RSS of the {CONCURRENT}-concurrent phase (VmHWM of a fresh process), median [min–max] \
         of {RSS_SAMPLES}"
    );
    let floor = spread(peaks[0].clone()).median;
    let mut rss_ratio = f64::NAN;
    for (index, variant) in Variant::ALL.iter().enumerate() {
        let peak = spread(peaks[index].clone());
        let ratio = peak.median / floor;
        if *variant == Variant::Events {
            rss_ratio = ratio;
        }
        let target = if index == 0 {
            String::new()
        } else {
            format!(
                "{ratio:>6.3}x  (target ≤ {TARGET_RSS:.2}: {})",
                verdict(ratio <= TARGET_RSS)
            )
        };
        println!(
            "  {:<34} {:>7.1} MB [{:.1}–{:.1}]  {target}",
            variant.name(),
            peak.median / 1024.0,
            peak.min / 1024.0,
            peak.max / 1024.0,
        );
    }
    // The lines `cargo xtask bench` gathers into its targets table.
    println!();
    target_line(
        "sequential CPU/run vs floor (events read)",
        sequential_ratio,
        TARGET_SEQUENTIAL,
    );
    target_line(
        "256 concurrent CPU/run vs floor (events read)",
        concurrent_ratio,
        TARGET_CONCURRENT,
    );
    target_line("peak RSS 256 concurrent vs floor", rss_ratio, TARGET_RSS);
}

/// `TARGET <name> | <ratio>x | <= <target> | MET|NOT MET` (read by `cargo xtask bench`).
fn target_line(name: &str, ratio: f64, target: f64) {
    println!(
        "TARGET {name} | {ratio:.3}x | <= {target:.2} | {}",
        if ratio <= target { "MET" } else { "NOT MET" }
    );
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

/// Prints one scenario; returns the events-read variant's ratio to the floor.
fn report(title: &str, samples: &[Vec<f64>], target: f64) -> f64 {
    println!("{title}");
    let floor = spread(samples[0].clone()).median;
    let mut events_ratio = f64::NAN;
    for (index, variant) in Variant::ALL.iter().enumerate() {
        let cpu = spread(samples[index].clone());
        let ratio = cpu.median / floor;
        let target = if index == 0 {
            String::new()
        } else if *variant == Variant::Events {
            events_ratio = ratio;
            format!(
                "{ratio:>6.3}x  (target ≤ {target:.2}: {})",
                verdict(ratio <= target)
            )
        } else {
            format!("{ratio:>6.3}x")
        };
        println!(
            "  {:<34} {:>7.3} ms [{:.3}–{:.3}]  {target}",
            variant.name(),
            cpu.median,
            cpu.min,
            cpu.max,
        );
    }
    println!();
    events_ratio
}

/// One variant's 256-concurrent phase in a fresh process: its `VmHWM` in KiB.
fn rss_of(port: u16, variant: Variant) -> f64 {
    let output = Command::new(std::env::current_exe().unwrap())
        .env(ROLE, "rss")
        .env("AGENTRY_LOOPBACK_PORT", port.to_string())
        .env("AGENTRY_LOOPBACK_VARIANT", format!("{variant:?}"))
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(output.status.success(), "the RSS child failed");
    let text = String::from_utf8(output.stdout).unwrap();
    text.trim().strip_prefix("VmHWM ").unwrap().parse().unwrap()
}

fn rss_child() {
    let port: u16 = std::env::var("AGENTRY_LOOPBACK_PORT")
        .unwrap()
        .parse()
        .unwrap();
    let variant = match std::env::var("AGENTRY_LOOPBACK_VARIANT").unwrap().as_str() {
        "Floor" => Variant::Floor,
        "Events" => Variant::Events,
        _ => Variant::Generate,
    };
    let runtime = runtime();
    let clients = Clients::new(port);
    runtime.block_on(async {
        for _ in 0..BATCHES {
            clients.concurrent(variant).await;
        }
    });
    println!("VmHWM {}", status_kib("VmHWM:"));
}

/// One scenario alone for `AGENTRY_LOOPBACK_SECS` seconds (default 10), for a profiler.
fn profile_one(runtime: &tokio::runtime::Runtime, clients: &Arc<Clients>, only: &str) {
    let seconds: u64 = std::env::var("AGENTRY_LOOPBACK_SECS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(10);
    let (concurrent, variant) = match only {
        "seq-floor" => (false, Variant::Floor),
        "seq-events" => (false, Variant::Events),
        "seq-generate" => (false, Variant::Generate),
        "conc-floor" => (true, Variant::Floor),
        "conc-events" => (true, Variant::Events),
        "conc-generate" => (true, Variant::Generate),
        other => panic!("AGENTRY_LOOPBACK_ONLY={other}: not a scenario"),
    };
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut runs = 0usize;
    let start = cpu_ns();
    runtime.block_on(async {
        while Instant::now() < end {
            if concurrent {
                clients.concurrent(variant).await;
                runs += CONCURRENT;
            } else {
                clients.sequential(variant, 20).await;
                runs += 20;
            }
        }
    });
    println!(
        "{only}: {runs} runs, {:.3} ms CPU per run",
        (cpu_ns() - start) as f64 / 1e6 / runs as f64
    );
}
