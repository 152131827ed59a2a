//! `agentry worker` and `agentry run --temporal` with the real binary against the Temporal dev
//! server (`.ci/temporal.sh`): the worker serves the model and tools of its flags, the run
//! starts as a workflow, shows the tool call and prints the answer.

#![cfg(feature = "temporal")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use agent_backends::replay::{Cassette, ReplayServer};
use serde_json::{Value, json};

fn agentry(home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentry"));
    for key in ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AGENTRY_CONFIG"] {
        command.env_remove(key);
    }
    command
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("NO_COLOR", "1")
        .env("OPENAI_API_KEY", "test-key")
        .current_dir(home)
        .stdin(Stdio::null());
    command
}

fn chunk(delta: Value, finish: Value) -> String {
    format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1,
               "model": "gpt-4.1-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    )
}

fn cassettes() -> Vec<Cassette> {
    let mut call = chunk(json!({"role": "assistant", "content": null}), Value::Null);
    call.push_str(&chunk(
        json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                               "function": {"name": "calculator", "arguments": "{\"expression\":\"2+3\"}"}}]}),
        Value::Null,
    ));
    call.push_str(&chunk(json!({}), json!("tool_calls")));
    call.push_str("data: [DONE]\n\n");
    let mut answer = chunk(json!({"role": "assistant", "content": ""}), Value::Null);
    answer.push_str(&chunk(json!({"content": "2 + 3 = 5."}), Value::Null));
    answer.push_str(&chunk(json!({}), json!("stop")));
    answer.push_str("data: [DONE]\n\n");
    vec![Cassette::body(call), Cassette::body(answer)]
}

struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_worker_serves_a_run_started_with_temporal() {
    let Ok(addr) = std::env::var("AGENTRY_TEST_TEMPORAL_ADDR") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "AGENTRY_TEST_TEMPORAL_ADDR is not set: CI must run `eval \"$(bash .ci/temporal.sh start)\"` first"
        );
        eprintln!("skipped: AGENTRY_TEST_TEMPORAL_ADDR is not set");
        return;
    };
    let namespace =
        std::env::var("AGENTRY_TEST_TEMPORAL_NAMESPACE").unwrap_or_else(|_| "default".into());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime.block_on(ReplayServer::start(cassettes())).unwrap();
    let url = server.url();
    let home = tempfile::tempdir().unwrap();
    let queue = format!("cli-{}", std::process::id());
    let model = [
        "--provider",
        "openai",
        "--base-url",
        &url,
        "--model",
        "gpt-4.1-mini",
        "--tool",
        "calculator",
    ];
    let temporal = [
        "--temporal",
        &addr,
        "--namespace",
        &namespace,
        "--task-queue",
        &queue,
    ];
    let _worker = Child(
        agentry(home.path())
            .arg("worker")
            .args(temporal)
            .args(model)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(500));
    let workflow = format!("{queue}-run");
    let output = agentry(home.path())
        .arg("run")
        .args(temporal)
        .args(["--workflow", &workflow])
        .args(model)
        .arg("What is 2 + 3?")
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "2 + 3 = 5.");
    assert!(stderr.contains("tool calculator (call_1)"), "{stderr}");
    assert!(stderr.contains(&format!("workflow {workflow}")), "{stderr}");
}
