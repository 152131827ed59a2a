//! The time per tool call of one trivial `echo` tool: in process (what the loop does:
//! validate with the compiled schema, invoke, collect), over MCP on an in-memory duplex (the
//! protocol alone), over MCP stdio (a child process: this binary, started once with
//! `--serve-stdio`) and over MCP streamable HTTP on loopback, as ratios to in process, in one
//! run. No call compiles a schema or spawns a process: the registry compiles once, the child is
//! spawned once.
//!
//! Run with `cargo bench -p agent-mcp --bench transport`; `AGENTRY_MCP_BENCH_CALLS` sets the
//! calls per sample (default 500).

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::process::Stdio;
use std::time::{Duration, Instant};

use agent_mcp::server::{HttpOptions, HttpService, ServerOptions, serve_io};
use agent_tools::{Caller, Registry, Tool, ToolContext, ToolError, ValidationMode, collect_output};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

const SERVE_FLAG: &str = "--serve-stdio";
const SAMPLES: usize = 5;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Echo {
    /// What to say back.
    text: String,
}

fn registry() -> Registry {
    let mut tools = Registry::new();
    tools
        .register(Tool::from_fn(
            "echo",
            "Says it back.",
            |args: Echo, _ctx| async move { Ok::<_, ToolError>(json!({"echo": args.text})) },
        ))
        .unwrap();
    tools
}

fn params() -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new("echo");
    params.arguments = json!({"text": "hello"}).as_object().cloned();
    params
}

/// Median nanoseconds per call over `SAMPLES` samples of `calls` calls, after one warm-up
/// sample.
async fn measure<F, Fut>(calls: usize, mut call: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for _ in 0..calls.min(50) {
        call().await;
    }
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let started = Instant::now();
        for _ in 0..calls {
            call().await;
        }
        samples.push(started.elapsed().as_nanos() as f64 / calls as f64);
    }
    samples.sort_by(f64::total_cmp);
    samples[SAMPLES / 2]
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

/// The stdio server this bench talks to: the same binary, in a child process.
async fn serve_stdio_child() {
    serve_io(
        &registry(),
        Caller::new("bench"),
        ServerOptions::default(),
        tokio::io::stdin(),
        tokio::io::stdout(),
    )
    .await
    .unwrap();
}

/// One `tools/call` over streamable HTTP with a raw client (the session's SSE answer parsed).
async fn http_call(client: &reqwest::Client, url: &str, session: &str, id: u64) {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hello"}}});
    let text = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-06-18")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let answered = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .any(|message| message["result"]["structuredContent"]["echo"] == "hello");
    assert!(answered, "{text}");
}

async fn bench(calls: usize) {
    let tools = registry();

    // In process: what the loop does for one call.
    let echo = tools.get("echo").unwrap();
    let in_process = measure(calls, || async {
        let validated = echo
            .validate(json!({"text": "hello"}), ValidationMode::Strict)
            .unwrap();
        let output =
            collect_output(echo.invoke(validated.arguments, ToolContext::new("c", "echo"))).await;
        assert_eq!(output.result.unwrap()["echo"], "hello");
    })
    .await;

    // MCP over an in-memory duplex: the protocol's own cost.
    let (client_side, server_side) = tokio::io::duplex(64 * 1024);
    let (read, write) = tokio::io::split(server_side);
    let served = tools.clone();
    tokio::spawn(async move {
        let _ = serve_io(
            &served,
            Caller::new("bench"),
            ServerOptions::default(),
            read,
            write,
        )
        .await;
    });
    let duplex = ().serve(client_side).await.unwrap();
    let over_duplex = measure(calls, || async {
        let result = duplex.call_tool(params()).await.unwrap();
        assert_eq!(result.structured_content.unwrap()["echo"], "hello");
    })
    .await;

    // MCP over stdio: this binary as a child process, spawned once.
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .arg(SERVE_FLAG)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let child_id = child.id();
    let stdio =
        ().serve((child.stdout.take().unwrap(), child.stdin.take().unwrap()))
            .await
            .unwrap();
    let over_stdio = measure(calls, || async {
        let result = stdio.call_tool(params()).await.unwrap();
        assert_eq!(result.structured_content.unwrap()["echo"], "hello");
    })
    .await;
    // The same child served every call.
    assert_eq!(child.id(), child_id);
    assert!(child.try_wait().unwrap().is_none());

    // MCP over streamable HTTP on loopback.
    let service = HttpService::new(&tools, ServerOptions::default(), HttpOptions::default())
        .with_anonymous(Caller::new("bench"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    // An SSE answer goes out in several small writes: without TCP_NODELAY each call waits
    // for a delayed ACK.
    let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
        let _ = stream.set_nodelay(true);
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, axum::Router::new().nest_service("/mcp", service)).await;
    });
    let client = reqwest::Client::new();
    let opened = client
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = opened.text().await;
    client
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .body(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string())
        .send()
        .await
        .unwrap();
    let next_id = std::cell::Cell::new(1u64);
    let over_http = measure(calls, || {
        let id = next_id.get();
        next_id.set(id + 1);
        let (client, url, session) = (&client, &url, &session);
        async move { http_call(client, url, session, id).await }
    })
    .await;

    println!(
        "agent-mcp transport: time per `echo` tool call ({calls} calls × {SAMPLES} samples, median)"
    );
    println!("{:<28} {:>12} {:>10}", "path", "per call", "ratio");
    for (name, ns) in [
        ("in process (validate+invoke)", in_process),
        ("MCP, in-memory duplex", over_duplex),
        ("MCP, stdio (child process)", over_stdio),
        ("MCP, streamable HTTP", over_http),
    ] {
        println!("{name:<28} {:>12} {:>9.1}x", fmt_ns(ns), ns / in_process);
    }
    drop(stdio);
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if std::env::args().any(|arg| arg == SERVE_FLAG) {
        runtime.block_on(serve_stdio_child());
        return;
    }
    // `cargo test --benches` runs this too: a few calls show it works without the wait.
    let calls = std::env::var("AGENTRY_MCP_BENCH_CALLS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) { 20 } else { 500 });
    runtime.block_on(bench(calls));
}
