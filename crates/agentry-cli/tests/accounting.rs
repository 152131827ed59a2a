//! `--accounting FILE` and `agentry usage FILE` as real processes: the rows the binary
//! appends equal the run's own model calls and tool calls, and the table sums them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use agent_accounting::SqliteSink;
use agent_backends::replay::{Cassette, ReplayServer};
use agent_types::{AgentEvent, Message};
use serde_json::Value;

fn agentry() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentry"));
    for key in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "AGENTRY_CONFIG",
    ] {
        command.env_remove(key);
    }
    let home = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("accounting-home-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    command
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    command
}

fn run(command: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = command.output().unwrap();
    (
        status.code().unwrap_or(-1),
        String::from_utf8(stdout).unwrap(),
        String::from_utf8(stderr).unwrap(),
    )
}

fn events(stdout: &str) -> Vec<AgentEvent> {
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Each assistant turn's (input, output) tokens and each tool call's (name, id, is_error).
type Calls = (Vec<(u64, u64)>, Vec<(String, String, bool)>);

fn calls(events: &[AgentEvent]) -> Calls {
    let mut models = Vec::new();
    let mut tools = Vec::new();
    for event in events {
        match event {
            AgentEvent::MessageEnd {
                message: Message::Assistant(message),
                ..
            } => {
                let usage = message.usage.unwrap();
                models.push((usage.input_tokens.unwrap(), usage.output_tokens.unwrap()));
            }
            AgentEvent::ToolExecutionEnd {
                tool_name,
                call_id,
                is_error,
                ..
            } => tools.push((tool_name.clone(), call_id.to_string(), *is_error)),
            _ => {}
        }
    }
    (models, tools)
}

fn usage_json(db: &Path, by: &str) -> Value {
    let (code, stdout, stderr) =
        run(agentry().args(["usage", db.to_str().unwrap(), "--by", by, "--json"]));
    assert_eq!(code, 0, "{stderr}");
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn the_demo_appends_a_row_per_call_and_usage_sums_them() {
    let dir = tempfile::tempdir().unwrap();
    let db: PathBuf = dir.path().join("usage.db");
    let mut all_models = Vec::new();
    let mut all_tools = Vec::new();
    for _ in 0..2 {
        let (code, stdout, stderr) = run(agentry().args([
            "demo",
            "--json",
            "--provider",
            "anthropic",
            "--accounting",
            db.to_str().unwrap(),
        ]));
        assert_eq!(code, 0, "{stderr}");
        let (models, tools) = calls(&events(&stdout));
        assert_eq!(models.len(), 3);
        assert_eq!(tools.len(), 4);
        all_models.extend(models);
        all_tools.extend(tools);
    }

    // The rows, read back from the file: one per model call and per tool call, in order.
    let sink = SqliteSink::open(&db).unwrap();
    let rows = sink.model_calls("").unwrap();
    let stored: Vec<(u64, u64)> = rows
        .iter()
        .map(|row| {
            let usage = row.record.usage.unwrap();
            (usage.input_tokens.unwrap(), usage.output_tokens.unwrap())
        })
        .collect();
    assert_eq!(stored, all_models);
    assert!(rows.iter().all(|row| row.provider == "anthropic"));
    assert_ne!(rows[0].session, rows[3].session, "two runs, two sessions");
    let tools = sink.tool_calls("").unwrap();
    let mut stored: Vec<(String, String, bool)> = tools
        .iter()
        .map(|row| {
            (
                row.tool.clone(),
                row.call_id.clone(),
                row.outcome == "error",
            )
        })
        .collect();
    // Events come as calls finish (in parallel); rows in call order.
    stored.sort();
    all_tools.sort();
    assert_eq!(stored, all_tools);
    assert!(tools.iter().all(|row| row.arguments_sha256.len() == 64));

    let by_model = usage_json(&db, "model");
    let data = by_model["data"].as_array().unwrap();
    assert_eq!(data.len(), 1, "{by_model}");
    assert_eq!(data[0]["model_calls"], 6);
    let input: u64 = all_models.iter().map(|(input, _)| input).sum();
    let output: u64 = all_models.iter().map(|(_, output)| output).sum();
    assert_eq!(data[0]["input_tokens"].as_u64().unwrap(), input);
    assert_eq!(data[0]["output_tokens"].as_u64().unwrap(), output);
    assert_eq!(data[0]["tool_calls"], 8);
    assert!(data[0]["cost_usd"].as_f64().unwrap() > 0.0);
    assert_eq!(
        usage_json(&db, "session")["data"].as_array().unwrap().len(),
        2
    );
    assert_eq!(usage_json(&db, "day")["data"].as_array().unwrap().len(), 1);

    let (code, table, stderr) = run(agentry().args(["usage", db.to_str().unwrap()]));
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[0].starts_with("model") && lines[0].contains("cost"),
        "{table}"
    );
    assert!(
        lines[1].starts_with(data[0]["key"].as_str().unwrap()),
        "{table}"
    );
    assert!(lines[2].starts_with("total"), "{table}");
    assert!(lines[2].contains(&format!(" {input} ")), "{table}");
}

#[test]
fn run_appends_rows_and_usage_refuses_a_missing_file() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/providers/openai-chat/stream-text-usage.sse");
    let server = runtime
        .block_on(ReplayServer::start(vec![
            Cassette::from_file(fixture).unwrap(),
        ]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("usage.db");
    let url = server.url();
    let (code, stdout, stderr) = run(agentry()
        .args(["run", "--json", "--provider", "openai", "--base-url", &url])
        .args(["--accounting", db.to_str().unwrap(), "hi"])
        .env("OPENAI_API_KEY", "test-key"));
    assert_eq!(code, 0, "{stderr}");
    let (models, _) = calls(&events(&stdout));
    let rows = SqliteSink::open(&db).unwrap().model_calls("").unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].provider, "openai");
    let usage = rows[0].record.usage.unwrap();
    assert_eq!(
        vec![(usage.input_tokens.unwrap(), usage.output_tokens.unwrap())],
        models
    );

    let missing = dir.path().join("nothing.db");
    let (code, _, stderr) = run(agentry().args(["usage", missing.to_str().unwrap()]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no such accounting file"), "{stderr}");
    assert!(!missing.exists(), "reading usage creates no file");
}

/// Ctrl-C in the middle of a model call: the command exits 130 and the file holds the
/// interrupted call's row (`aborted`, with its error), written before the exit.
#[cfg(unix)]
#[test]
fn ctrl_c_mid_call_leaves_the_calls_aborted_row() {
    use std::io::{BufRead, BufReader};
    use std::time::Duration;

    use agent_backends::replay::Chunking;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/providers/openai-chat/stream-text-usage.sse");
    // The answer trickles in: 64 bytes every 50 ms, seconds in all.
    let slow = Cassette::from_file(fixture)
        .unwrap()
        .with_chunking(Chunking::Every(64))
        .with_chunk_delay(Duration::from_millis(50));
    let server = runtime.block_on(ReplayServer::start(vec![slow])).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("usage.db");
    let mut child = agentry()
        .args([
            "run",
            "--json",
            "--provider",
            "openai",
            "--base-url",
            &server.url(),
        ])
        .args(["--accounting", db.to_str().unwrap(), "count slowly"])
        .env("OPENAI_API_KEY", "test-key")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the run ended early"
        );
        if line.contains("\"text_delta\"") {
            break;
        }
    }
    let status = Command::new("sh")
        .args(["-c", &format!("kill -INT {}", child.id())])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows = SqliteSink::open(&db).unwrap().model_calls("").unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].record.stop_reason, agent_types::StopReason::Aborted);
    assert!(rows[0].error.is_some(), "{rows:?}");
    assert_eq!(rows[0].provider, "openai");
}
