//! The official Python MCP client (PyPI `mcp`) against the server over stdio, as MCP clients
//! run servers: a child process. The child is this binary started with `--serve` (so the test
//! has no harness: the libtest harness would write to the stdout the protocol needs).
//!
//! Checks: list (a tool needing a permission the stdio caller lacks is absent), call,
//! progress, cancel (the handler in the child observes it while the connection stays open).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    clippy::print_stdout
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_mcp::server::{ServerOptions, serve_stdio};
use agent_tools::{Caller, Registry, Tool, ToolError, ToolEvent};
use serde_json::{Value, json};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Echo {
    text: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Empty {}

fn registry(cancellations: &Arc<AtomicUsize>) -> Registry {
    let mut tools = Registry::new();
    tools
        .register(Tool::from_fn(
            "echo",
            "Says it back.",
            |args: Echo, _ctx| async move { Ok::<_, ToolError>(json!({"echo": args.text})) },
        ))
        .unwrap();
    tools
        .register(Tool::streaming(
            "count",
            "Counts to 2.",
            |_args: Empty, _ctx| {
                async_stream::stream! {
                    yield ToolEvent::delta("one");
                    yield ToolEvent::delta("two");
                    yield ToolEvent::ok(2);
                }
            },
        ))
        .unwrap();
    let counter = Arc::clone(cancellations);
    tools
        .register(Tool::from_fn(
            "slow",
            "Waits until cancelled.",
            move |_args: Empty, ctx| {
                let counter = Arc::clone(&counter);
                async move {
                    // Counted when the guard drops this future after the token fired.
                    struct Observe(Arc<AtomicUsize>, tokio_util::sync::CancellationToken);
                    impl Drop for Observe {
                        fn drop(&mut self) {
                            if self.1.is_cancelled() {
                                self.0.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                    let _observe = Observe(counter, ctx.cancellation().clone());
                    ctx.cancellation().cancelled().await;
                    Ok::<_, ToolError>("cancelled")
                }
            },
        ))
        .unwrap();
    let counted = Arc::clone(cancellations);
    tools
        .register(Tool::from_fn(
            "cancellations",
            "How many `slow` calls saw their cancellation.",
            move |_args: Empty, _ctx| {
                let counted = Arc::clone(&counted);
                async move { Ok::<_, ToolError>(counted.load(Ordering::SeqCst).to_string()) }
            },
        ))
        .unwrap();
    tools
        .register(
            Tool::from_fn("secret", "Admins only.", |_args: Empty, _ctx| async move {
                Ok::<_, ToolError>("the secret")
            })
            .requires_permission("admin"),
        )
        .unwrap();
    tools
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if std::env::args().any(|arg| arg == "--serve") {
        let tools = registry(&Arc::new(AtomicUsize::new(0)));
        runtime
            .block_on(serve_stdio(
                &tools,
                Caller::new("stdio"),
                ServerOptions::default(),
            ))
            .unwrap();
        return;
    }
    // `cargo test -- --list` (nextest's discovery) must not run anything.
    if std::env::args().any(|arg| arg == "--list") {
        // Listed once, as a test that is not ignored.
        if !std::env::args().any(|arg| arg == "--ignored") {
            println!("stdio_python: test");
        }
        return;
    }
    let Some(python) = std::env::var_os("AGENTRY_TEST_MCP_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "AGENTRY_TEST_MCP_PYTHON is not set: CI must run `eval \"$(bash .ci/python.sh)\"` first"
        );
        eprintln!("skipped: AGENTRY_TEST_MCP_PYTHON is not set");
        return;
    };
    let plan = json!({
        "transport": "stdio",
        "command": std::env::current_exe().unwrap(),
        "args": ["--serve"],
        "steps": [
            {"list": true},
            {"call": "echo", "arguments": {"text": "hi"}},
            {"call": "count"},
            {"call": "secret"},
            {"cancel": "slow", "after": 1.0},
            {"until": "cancellations", "text": "1"},
        ],
    });
    let output = std::process::Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/mcp_client/client.py"
        ))
        .arg(plan.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the Python client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let steps: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let names: Vec<&str> = steps[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cancellations", "count", "echo", "slow"]);
    assert_eq!(steps[1]["structuredContent"], json!({"echo": "hi"}));
    assert_eq!(steps[2]["progress"], json!(["one", "two"]));
    assert!(
        steps[3]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool `secret`"),
        "{}",
        steps[3]
    );
    assert_eq!(steps[4]["cancelled"], true);
    // The child's handler saw its cancellation while the connection was still open.
    assert_eq!(steps[5]["until"], "1");
    eprintln!("stdio_python: ok");
}
