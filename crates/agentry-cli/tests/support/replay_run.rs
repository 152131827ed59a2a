//! The binary run against a recorded OpenAI Chat Completions stream on loopback, for the test
//! binaries that drive `agentry run`/`agentry resume` with a session file. One definition,
//! included by each (`#[path = "support/replay_run.rs"] mod replay_run;`); a binary uses only
//! some of it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use agent_backends::replay::{Cassette, ReplayServer};
use serde_json::{Value, json};

/// A recorded provider response under `fixtures/providers`.
pub(crate) fn recording(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/providers")
        .join(path)
}

pub(crate) fn cassette(path: &str) -> Cassette {
    Cassette::from_file(recording(path)).unwrap()
}

/// The binary with no provider keys and no configuration from the machine running the tests.
pub(crate) fn agentry(home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentry"));
    for key in ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AGENTRY_CONFIG"] {
        command.env_remove(key);
    }
    command
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("NO_COLOR", "1")
        .env("OPENAI_API_KEY", "test-key")
        .stdin(Stdio::null());
    command
}

pub(crate) fn run(command: &mut Command) -> (i32, String, String) {
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

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

pub(crate) fn serve(runtime: &tokio::runtime::Runtime, cassettes: Vec<Cassette>) -> ReplayServer {
    runtime.block_on(ReplayServer::start(cassettes)).unwrap()
}

pub(crate) fn chunk(delta: Value, finish: Value) -> String {
    format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1,
               "model": "gpt-4.1-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    )
}

/// An OpenAI Chat Completions stream asking for these calls (the framing of the recorded
/// `openai-chat/stream-tool-call.sse`).
pub(crate) fn tool_calls(calls: &[(&str, &str, Value)]) -> Cassette {
    let mut body = chunk(json!({"role": "assistant", "content": null}), Value::Null);
    for (index, (id, name, arguments)) in calls.iter().enumerate() {
        body.push_str(&chunk(
            json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                                   "function": {"name": name, "arguments": arguments.to_string()}}]}),
            Value::Null,
        ));
    }
    body.push_str(&chunk(json!({}), json!("tool_calls")));
    body.push_str("data: [DONE]\n\n");
    Cassette::body(body)
}

pub(crate) fn text(answer: &str) -> Cassette {
    let mut body = chunk(json!({"role": "assistant", "content": ""}), Value::Null);
    body.push_str(&chunk(json!({"content": answer}), Value::Null));
    body.push_str(&chunk(json!({}), json!("stop")));
    body.push_str("data: [DONE]\n\n");
    Cassette::body(body)
}

/// A replay server with these cassettes and a scratch directory holding the session and `HOME`.
pub(crate) struct Setup {
    _runtime: tokio::runtime::Runtime,
    pub(crate) server: ReplayServer,
    pub(crate) dir: tempfile::TempDir,
}

impl Setup {
    pub(crate) fn new(cassettes: Vec<Cassette>) -> Self {
        let runtime = runtime();
        let server = serve(&runtime, cassettes);
        Self {
            _runtime: runtime,
            server,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub(crate) fn session(&self) -> PathBuf {
        self.dir.path().join("chat.jsonl")
    }

    pub(crate) fn agentry(&self) -> Command {
        let mut command = agentry(&self.dir.path().join("home"));
        command.current_dir(self.dir.path());
        command
    }

    pub(crate) fn run(&self, extra: &[&str]) -> (i32, String, String) {
        let url = self.server.url();
        let session = self.session();
        run(self
            .agentry()
            .args(["run", "--provider", "openai", "--base-url", &url])
            .args(["--model", "gpt-4.1-mini", "--tool", "calculator"])
            .args(["--session", session.to_str().unwrap()])
            .args(extra))
    }

    pub(crate) fn resume(&self, extra: &[&str]) -> (i32, String, String) {
        let session = self.session();
        run(self
            .agentry()
            .args(["resume", "--session", session.to_str().unwrap()])
            .args(extra))
    }

    /// The session's log and state file, byte for byte.
    pub(crate) fn files(&self) -> (Vec<u8>, Vec<u8>) {
        let log = std::fs::read(self.session()).unwrap();
        let state = std::fs::read(format!("{}.state.json", self.session().display())).unwrap();
        (log, state)
    }

    /// The tool messages of the `n`th request the provider got.
    pub(crate) fn tool_messages(&self, n: usize) -> Vec<Value> {
        let request = self.server.requests()[n].json().unwrap();
        request["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|message| message["role"] == "tool")
            .cloned()
            .collect()
    }
}
