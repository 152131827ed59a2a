//! The cost of a tool call through the MCP client, next to the same call in-process.
//!
//! One run measures the median time per `echo` call three ways: an in-process tool with the
//! same schema (the baseline), server-everything over MCP stdio, and server-everything over
//! MCP streamable HTTP, each through the registry exactly as the loop calls it (validate, then
//! invoke), and reports each as a ratio to the baseline. It also checks what the MCP path must
//! not add per call: the stdio server is spawned once for the whole run (its wrapper appends
//! its pid to a file), and no schema is compiled (the registry's tools were compiled at import).
//!
//! Needs `$AGENTRY_TEST_MCP_EVERYTHING` (server-everything's entry script, `.ci/node.sh`).
//! Run with `cargo bench -p agent-mcp --bench client`.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::time::{Duration, Instant};

use agent_mcp::client::{McpClient, ServerConfig};
use agent_tools::{Registry, Tool, ToolContext, ToolError, ValidationMode, collect_output};
use serde_json::{Value, json};

const SAMPLES: usize = 9;
const BATCH: usize = 100;

/// Median time per call of `name` in `registry`, `BATCH` calls per sample after a warm-up.
async fn per_call(registry: &Registry, name: &str) -> Duration {
    let tool = registry.get(name).unwrap().clone();
    let call = || {
        let tool = tool.clone();
        async move {
            let valid = tool
                .validate(json!({"message": "hello"}), ValidationMode::Strict)
                .unwrap();
            let output =
                collect_output(tool.invoke(valid.arguments, ToolContext::new("c", name))).await;
            assert!(output.result.is_ok(), "{:?}", output.result);
        }
    };
    for _ in 0..BATCH {
        call().await;
    }
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let start = Instant::now();
        for _ in 0..BATCH {
            call().await;
        }
        samples.push(start.elapsed() / BATCH as u32);
    }
    samples.sort();
    samples[SAMPLES / 2]
}

fn in_process() -> Registry {
    let mut registry = Registry::new();
    registry
        .register(Tool::from_json_fn(
            "echo",
            "Echoes back the input string",
            json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}),
            |args: Value, _ctx| async move {
                Ok::<_, ToolError>(json!(format!("Echo: {}", args["message"].as_str().unwrap_or_default())))
            },
        ))
        .unwrap();
    registry
}

fn main() {
    let Some(script) = std::env::var_os("AGENTRY_TEST_MCP_EVERYTHING") else {
        eprintln!(
            "skipped: AGENTRY_TEST_MCP_EVERYTHING is not set (run `eval \"$(bash .ci/node.sh)\"`)"
        );
        return;
    };
    let node = std::env::var("AGENTRY_TEST_NODE").unwrap_or_else(|_| "node".to_owned());
    let script = script.to_string_lossy().into_owned();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        let stdio = McpClient::connect(ServerConfig::stdio(
            "everything",
            "sh",
            [
                "-c".to_owned(),
                format!(
                    "echo $$ >> '{}'; exec '{node}' '{script}' stdio",
                    pids.display()
                ),
            ],
        ))
        .await
        .unwrap();

        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut http_server = tokio::process::Command::new(&node)
            .args([&script, "streamableHttp"])
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let started = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(started.elapsed() < Duration::from_secs(20));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let http = McpClient::connect(ServerConfig::http(
            "everything",
            format!("http://127.0.0.1:{port}/mcp"),
        ))
        .await
        .unwrap();

        let baseline = per_call(&in_process(), "echo").await;
        let over_stdio = per_call(&stdio.registry(), "everything_echo").await;
        let over_http = per_call(&http.registry(), "everything_echo").await;
        let ratio = |d: Duration| d.as_secs_f64() / baseline.as_secs_f64();
        println!("tool call (echo, validated then invoked through the registry), median per call:");
        println!("  in-process        {:>10.2?}  1.0x", baseline);
        println!(
            "  MCP stdio         {:>10.2?}  {:.0}x",
            over_stdio,
            ratio(over_stdio)
        );
        println!(
            "  MCP HTTP          {:>10.2?}  {:.0}x",
            over_http,
            ratio(over_http)
        );

        let spawned = std::fs::read_to_string(&pids).unwrap().lines().count();
        println!(
            "  stdio server processes spawned for {} calls: {spawned}",
            (SAMPLES + 1) * BATCH
        );
        assert_eq!(spawned, 1, "the MCP path spawned a process per call");
        http_server.kill().await.unwrap();
    });
}
