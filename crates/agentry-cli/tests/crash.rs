//! `agentry run --session` killed with SIGKILL mid-run, then continued: the state file and
//! the log keep every completed turn, completed tool calls are not run again, and calls the
//! killed run left unanswered get an error result saying why.

#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use agent_backends::replay::{Cassette, Chunking, ReplayServer};
use serde_json::{Value, json};

/// The binary with no provider keys and no configuration from the machine running the tests.
fn agentry() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentry"));
    for key in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "OLLAMA_HOST",
        "AGENTRY_CONFIG",
    ] {
        command.env_remove(key);
    }
    command
        .env("HOME", home())
        .env("XDG_CONFIG_HOME", home().join(".config"))
        .env("NO_COLOR", "1")
        .env("OPENAI_API_KEY", "test-key")
        .stdin(Stdio::null());
    command
}

fn home() -> &'static Path {
    static HOME: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        let home = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("crash-home-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).unwrap();
        home
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

fn chunk(delta: Value, finish: Value) -> String {
    format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1,
               "model": "gpt-4.1-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    )
}

fn usage_chunk() -> String {
    format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1,
               "model": "gpt-4.1-mini", "choices": [],
               "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55}})
    )
}

/// Round 1: the model asks for the calculator.
fn asks_calculator() -> Cassette {
    let mut body = chunk(json!({"role": "assistant", "content": null}), Value::Null);
    body.push_str(&chunk(
        json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                               "function": {"name": "calculator",
                                            "arguments": "{\"expression\":\"6*7\"}"}}]}),
        Value::Null,
    ));
    body.push_str(&chunk(json!({}), json!("tool_calls")));
    body.push_str(&usage_chunk());
    body.push_str("data: [DONE]\n\n");
    Cassette::body(body)
}

fn answers(text: &str) -> Cassette {
    let mut body = chunk(json!({"role": "assistant", "content": ""}), Value::Null);
    body.push_str(&chunk(json!({"content": text}), Value::Null));
    body.push_str(&chunk(json!({}), json!("stop")));
    body.push_str(&usage_chunk());
    body.push_str("data: [DONE]\n\n");
    Cassette::body(body)
}

fn log_lines(session: &Path) -> Vec<Value> {
    std::fs::read_to_string(session)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn state(session: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(format!("{}.state.json", session.display())).unwrap(),
    )
    .unwrap()
}

/// Starts a run whose second model call stalls, and kills the process with SIGKILL once the
/// upstream has that call: round 1 (the calculator call and its result) has completed.
fn killed_after_round_one(runtime: &tokio::runtime::Runtime, session: &Path) -> ReplayServer {
    let stalled = answers("never sent")
        .with_chunking(Chunking::Every(8))
        .with_chunk_delay(Duration::from_secs(600));
    let server = runtime
        .block_on(ReplayServer::start(vec![asks_calculator(), stalled]))
        .unwrap();
    let mut child = agentry()
        .args(["run", "--json", "--provider", "openai", "--base-url"])
        .arg(server.url())
        .args(["--tool", "calculator", "--session"])
        .arg(session)
        .arg("what is 6*7?")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.requests().len() < 2 {
        if let Some(status) = child.try_wait().unwrap() {
            let Output { stderr, .. } = child.wait_with_output().unwrap();
            panic!(
                "the run ended early ({status}): {}",
                String::from_utf8_lossy(&stderr)
            );
        }
        assert!(
            Instant::now() < deadline,
            "the second model call never came"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SIGKILL: no handler, no final save.
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    server
}

fn continue_run(server: &ReplayServer, session: &Path, prompt: &str) -> (i32, String) {
    let Output { status, stderr, .. } = agentry()
        .args(["run", "--provider", "openai", "--base-url"])
        .arg(server.url())
        .arg("--session")
        .arg(session)
        .arg(prompt)
        .output()
        .unwrap();
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// How many messages of `messages` answer `call_1`, and how many ask for it.
fn call_1(messages: &[Value]) -> (usize, usize) {
    let asked = messages
        .iter()
        .filter(|message| {
            message.to_string().contains("\"call_1\"") && message["role"] == "assistant"
        })
        .count();
    let answered = messages
        .iter()
        .filter(|message| message["role"] == "tool" && message["tool_call_id"] == "call_1")
        .count();
    (asked, answered)
}

#[test]
fn a_run_killed_mid_way_continues_without_running_completed_calls_again() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("crash.jsonl");
    let server = killed_after_round_one(&runtime, &session);

    // The state file followed the turns: a run under way, round 1's tokens counted.
    let killed = state(&session);
    assert_eq!(killed["session"]["status"], "running", "{killed}");
    assert_eq!(killed["session"]["usage"]["input_tokens"], 50, "{killed}");
    let log = log_lines(&session);
    let roles: Vec<&str> = log
        .iter()
        .map(|turn| turn["message"]["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool"], "{log:?}");
    assert!(log[2].to_string().contains("42"), "{log:?}");

    server.push(answers("Still 42."));
    let (code, stderr) = continue_run(&server, &session, "and again?");
    assert_eq!(code, 0, "{stderr}");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let third = requests[2].json().unwrap();
    let messages = third["messages"].as_array().unwrap();
    // Round 1 once: one call, one result (the calculator did not run again).
    assert_eq!(call_1(messages), (1, 1), "{third}");
    assert_eq!(messages.last().unwrap()["content"], "and again?", "{third}");
    let log = log_lines(&session);
    let results = log
        .iter()
        .filter(|turn| turn["message"]["role"] == "tool")
        .count();
    assert_eq!(results, 1, "{log:?}");
    assert_eq!(log.len(), 5, "user, call, result, user, answer: {log:?}");
    let after = state(&session);
    assert_eq!(after["session"]["status"], "completed", "{after}");
    assert_eq!(after["session"]["usage"]["input_tokens"], 100, "{after}");
}

#[test]
fn calls_a_killed_run_left_unanswered_are_closed_in_the_log_saying_why() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("dangling.jsonl");
    let server = killed_after_round_one(&runtime, &session);
    // What a kill between the assistant turn and its results leaves: the log without the
    // result line (the state file is the killed run's own).
    let text = std::fs::read_to_string(&session).unwrap();
    let kept: Vec<&str> = text.lines().take(2).collect();
    std::fs::write(&session, format!("{}\n", kept.join("\n"))).unwrap();

    server.push(answers("I could not compute it."));
    server.push(answers("Fine."));
    for prompt in ["what happened?", "and now?"] {
        let (code, stderr) = continue_run(&server, &session, prompt);
        assert_eq!(code, 0, "{stderr}");
    }
    let log = log_lines(&session);
    // The closing result sits right after the call, in the log itself, so every later run
    // (not only the next) sends a valid history.
    assert_eq!(log[2]["message"]["role"], "tool", "{log:?}");
    assert_eq!(log[2]["message"]["tool_call_id"], "call_1", "{log:?}");
    assert_eq!(log[2]["message"]["is_error"], true, "{log:?}");
    let why = log[2]["message"]["content"].as_str().unwrap();
    assert!(why.contains("killed or crashed"), "{why}");
    for request in &server.requests()[2..] {
        let body = request.json().unwrap();
        assert_eq!(
            call_1(body["messages"].as_array().unwrap()),
            (1, 1),
            "{body}"
        );
    }
}

#[test]
fn a_sqlite_session_killed_mid_way_continues_the_same_way() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("crash.db");
    let server = killed_after_round_one(&runtime, &session);
    let killed = state(&session);
    assert_eq!(killed["session"]["status"], "running", "{killed}");
    assert_eq!(killed["session"]["usage"]["input_tokens"], 50, "{killed}");

    server.push(answers("Still 42."));
    server.push(answers("Yes."));
    for prompt in ["and again?", "sure?"] {
        let (code, stderr) = continue_run(&server, &session, prompt);
        assert_eq!(code, 0, "{stderr}");
    }
    for request in &server.requests()[2..] {
        let body = request.json().unwrap();
        assert_eq!(
            call_1(body["messages"].as_array().unwrap()),
            (1, 1),
            "{body}"
        );
    }
    let last = server.requests()[3].json().unwrap();
    // user, call, result, user, answer, user: every turn once.
    assert_eq!(last["messages"].as_array().unwrap().len(), 6, "{last}");
    assert_eq!(state(&session)["session"]["status"], "completed");
}
