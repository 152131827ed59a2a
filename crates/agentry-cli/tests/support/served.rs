//! A real `agentry serve` process for the tests that start one: on a free port, its address read
//! from its own stderr, killed and reaped when dropped. One definition, included by each test
//! binary that needs it (`#[path = "support/served.rs"] mod served;`); a binary uses only some
//! of it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agent_backends::replay::{Cassette, ReplayServer};
use serde_json::Value;

/// A server process and its base URL.
pub(crate) struct Served {
    pub(crate) child: Child,
    pub(crate) url: String,
    pub(crate) stderr: mpsc::Receiver<String>,
    /// The lines before the listening line.
    pub(crate) early: Vec<String>,
}

impl Served {
    /// Starts `agentry serve --config <config>` on a free port and waits for its address.
    pub(crate) fn start(config: &Path) -> Self {
        Self::start_with(config, &[], &[])
    }

    /// As [`start`](Self::start), with more arguments and environment variables. The test
    /// runner's `RUST_LOG` is not passed on (it would change what stderr holds), unless `env`
    /// sets it.
    pub(crate) fn start_with(config: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentry"))
            .args([
                "serve",
                "--config",
                config.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ])
            .args(args)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (lines, stderr) = mpsc::channel();
        let pipe = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in pipe.lines().map_while(Result::ok) {
                let _ = lines.send(line);
            }
        });
        let mut early = Vec::new();
        let url = loop {
            let line = stderr
                .recv_timeout(Duration::from_secs(60))
                .expect("agentry serve did not say where it listens");
            if let Some(url) = line.strip_prefix("agentry serve: listening on ") {
                break url.to_owned();
            }
            early.push(line);
        };
        Self {
            child,
            url,
            stderr,
            early,
        }
    }

    /// Sends SIGTERM (through the shell's `kill`: no extra tools needed).
    pub(crate) fn terminate(&self) {
        let status = Command::new("sh")
            .args(["-c", &format!("kill -TERM {}", self.child.id())])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// `kill -9` (SIGKILL: no drain, no final save, no lease release), then reaps it.
    pub(crate) fn kill_9(&mut self) -> Option<ExitStatus> {
        let _ = self.child.kill();
        self.child.wait().ok()
    }

    /// Waits for the exit; the exit code and every line of stderr.
    pub(crate) fn wait(mut self) -> (i32, Vec<String>) {
        let status = self.child.wait().unwrap();
        let mut lines = std::mem::take(&mut self.early);
        // Until the pipe closes: every line, not only those already read.
        lines.extend(self.stderr.iter());
        (status.code().unwrap_or(-1), lines)
    }

    /// Waits at most `limit` for the exit: the exit code and every line of stderr; `None` (the
    /// process still running) after it.
    pub(crate) fn wait_within(&mut self, limit: Duration) -> Option<(i32, Vec<String>)> {
        let started = Instant::now();
        while started.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut lines = std::mem::take(&mut self.early);
                lines.extend(self.stderr.iter());
                return Some((status.code().unwrap_or(-1), lines));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// A `kB` field of `/proc/<pid>/status`, in bytes.
    pub(crate) fn status_bytes(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .unwrap_or_else(|| panic!("no {field} in /proc/<pid>/status"));
        let kib: u64 = line
            .trim_start_matches(':')
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap();
        kib * 1024
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The sum of a counter's series on a server's `/metrics` whose labels contain `label`.
pub(crate) async fn metric(url: &str, name: &str, label: &str) -> f64 {
    let text = reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|line| line.starts_with(&format!("{name}{{")) && line.contains(label))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// How many calculator calls this server process ran, from its `/metrics`.
pub(crate) async fn calculator_calls(url: &str) -> f64 {
    metric(url, "agentry_tool_calls_total", "tool=\"calculator\"").await
}

/// An OpenAI chat-completions stream answering `text` (70 tokens in, 5 out).
pub(crate) fn answer_stream(text: &str) -> String {
    let delta = serde_json::json!({"choices": [{"index": 0,
        "delta": {"role": "assistant", "content": text}, "finish_reason": null}]});
    let end = serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 70, "completion_tokens": 5, "total_tokens": 75}});
    format!("data: {delta}\n\ndata: {end}\n\ndata: [DONE]\n\n")
}

/// The key of tenant `acme` in the configurations [`config`] writes.
pub(crate) const KEY: &str = "key-acme-test-0001";

/// Writes `dir/agentry.toml`: the calculator, a 2 s execute lease, the store `store` (the
/// body of `[server.store]`), then `extra`, and model `up` at `upstream`; tenant `acme`.
pub(crate) fn config(dir: &Path, store: &str, extra: &str, upstream: &str) -> PathBuf {
    let path = dir.join("agentry.toml");
    let text = format!(
        r#"
[server]
tools = ["calculator"]
execute_lease_secs = 2

[server.store]
{store}
{extra}
[[server.models]]
name = "up"
provider = "openai-compatible"
base_url = "{upstream}/v1"

[[server.tenants]]
name = "acme"
api_keys = ["{KEY}"]
"#
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// A runtime whose worker thread keeps requests going while a test blocks on a process.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

pub(crate) fn sse(body: String) -> Cassette {
    Cassette::new(200, "text/event-stream", body)
}

/// An OpenAI chat-completions stream asking for the calculator on `expression` as call `id`,
/// with `(prompt, completion)` tokens of usage.
pub(crate) fn calculator_call(
    id: &str,
    expression: &str,
    (prompt, completion): (u32, u32),
) -> String {
    let call = serde_json::json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
        {"index": 0, "id": id, "type": "function",
         "function": {"name": "calculator", "arguments": format!("{{\"expression\": \"{expression}\"}}")}}
    ]}, "finish_reason": null}]});
    let end = serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion}});
    format!("data: {call}\n\ndata: {end}\n\ndata: [DONE]\n\n")
}

/// Blocks until `upstream` has had `n` requests (`what` names the one awaited when it never
/// comes within a minute).
pub(crate) fn wait_for_requests(upstream: &ReplayServer, n: usize, what: &str) {
    let started = Instant::now();
    while upstream.requests().len() < n {
        assert!(started.elapsed() < Duration::from_secs(60), "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends an execute on `runtime` and lets it run; its outcome is not awaited (the process
/// serving it is about to be killed).
pub(crate) fn execute_in_background(
    runtime: &tokio::runtime::Runtime,
    url: &str,
    id: &str,
    body: Value,
) {
    let url = format!("{url}/v1/sessions/{id}/execute");
    runtime.spawn(async move {
        let sent = reqwest::Client::new()
            .post(url)
            .bearer_auth(KEY)
            .json(&body)
            .send()
            .await;
        if let Ok(response) = sent {
            let _ = response.text().await;
        }
    });
}

/// Sends an execute, retrying while the lease of a cut-off run lasts (409); its SSE frames.
pub(crate) async fn execute(url: &str, id: &str, body: &Value) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let response = reqwest::Client::new()
            .post(format!("{url}/v1/sessions/{id}/execute"))
            .bearer_auth(KEY)
            .json(body)
            .send()
            .await
            .unwrap();
        if response.status() == 409 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the lease stayed"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
        let text = response.text().await.unwrap();
        return text
            .split("\n\n")
            .filter_map(|frame| frame.strip_prefix("data: "))
            .map(|data| serde_json::from_str::<Value>(data).unwrap())
            .collect();
    }
}

/// `GET` a session, retrying while the store is away (a 5xx).
pub(crate) async fn session(url: &str, id: &str) -> Value {
    let started = Instant::now();
    loop {
        let response = reqwest::Client::new()
            .get(format!("{url}/v1/sessions/{id}"))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        if response.status().is_success() {
            return response.json().await.unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "GET session: {}",
            response.text().await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How many tool results the `n`th request to `upstream` carried, and the request.
pub(crate) fn tool_results_sent(upstream: &ReplayServer, n: usize) -> (usize, Value) {
    let sent = upstream.requests()[n].json().unwrap();
    let results = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "tool")
        .count();
    (results, sent)
}
