//! A real `agentry serve` process for the tests that start one: on a free port, its address read
//! from its own stderr, killed and reaped when dropped. One definition, included by each test
//! binary that needs it (`#[path = "support/served.rs"] mod served;`); a binary uses only some
//! of it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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
