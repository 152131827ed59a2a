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

/// The dev server's address and namespace, and PostgreSQL's URL when `events` asks for the
/// live event log; `None` (the test skips) when a service is missing outside CI.
fn services(events: bool) -> Option<(String, String, Option<String>)> {
    let addr = std::env::var("AGENTRY_TEST_TEMPORAL_ADDR").ok();
    let url = std::env::var("AGENTRY_TEST_POSTGRES_URL").ok();
    let (Some(addr), true) = (addr, !events || url.is_some()) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "the Temporal dev server (and, for live events, PostgreSQL) are required under CI: \
             run `eval \"$(bash .ci/temporal.sh start)\"` and `.ci/postgres.sh` first"
        );
        eprintln!("skipped: AGENTRY_TEST_TEMPORAL_ADDR or AGENTRY_TEST_POSTGRES_URL is not set");
        return None;
    };
    let namespace =
        std::env::var("AGENTRY_TEST_TEMPORAL_NAMESPACE").unwrap_or_else(|_| "default".into());
    Some((addr, namespace, url.filter(|_| events)))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// The flags of the recorded model at `url` with the calculator.
fn model(url: &str) -> Vec<String> {
    [
        "--provider",
        "openai",
        "--base-url",
        url,
        "--model",
        "gpt-4.1-mini",
        "--tool",
        "calculator",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The flags naming the dev server, the task queue and, when given, the event log.
fn temporal(addr: &str, namespace: &str, queue: &str, events: Option<&str>) -> Vec<String> {
    let mut flags = [
        "--temporal",
        addr,
        "--namespace",
        namespace,
        "--task-queue",
        queue,
    ]
    .map(str::to_owned)
    .to_vec();
    if let Some(events) = events {
        flags.extend(["--events".to_owned(), events.to_owned()]);
    }
    flags
}

/// `agentry worker` with `flags`, given half a second to start polling.
fn worker(home: &Path, flags: &[&[String]], extra: &[&str]) -> Child {
    let mut command = agentry(home);
    command.arg("worker");
    for group in flags {
        command.args(*group);
    }
    let child = Child(command.args(extra).stdout(Stdio::null()).spawn().unwrap());
    std::thread::sleep(Duration::from_millis(500));
    child
}

#[test]
fn a_worker_serves_a_run_started_with_temporal() {
    let Some((addr, namespace, _)) = services(false) else {
        return;
    };
    let runtime = runtime();
    let server = runtime.block_on(ReplayServer::start(cassettes())).unwrap();
    let home = tempfile::tempdir().unwrap();
    let queue = format!("cli-{}", std::process::id());
    let model = model(&server.url());
    let temporal = temporal(&addr, &namespace, &queue, None);
    let _worker = worker(home.path(), &[&temporal, &model], &[]);
    let workflow = format!("{queue}-run");
    let output = agentry(home.path())
        .arg("run")
        .args(&temporal)
        .args(["--workflow", &workflow])
        .args(&model)
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

/// A recorded three-round run: the calculator twice, then the answer.
fn three_rounds() -> Vec<Cassette> {
    let call = |id: &str, expression: &str| {
        let mut body = chunk(json!({"role": "assistant", "content": null}), Value::Null);
        body.push_str(&chunk(
            json!({"tool_calls": [{"index": 0, "id": id, "type": "function",
                                   "function": {"name": "calculator",
                                                "arguments": json!({"expression": expression}).to_string()}}]}),
            Value::Null,
        ));
        body.push_str(&chunk(json!({}), json!("tool_calls")));
        body.push_str("data: [DONE]\n\n");
        Cassette::body(body)
    };
    let mut answer = chunk(json!({"role": "assistant", "content": ""}), Value::Null);
    answer.push_str(&chunk(json!({"content": "2 + 3 = 5, "}), Value::Null));
    answer.push_str(&chunk(json!({"content": "and 5 × 4 = 20."}), Value::Null));
    answer.push_str(&chunk(json!({}), json!("stop")));
    answer.push_str("data: [DONE]\n\n");
    vec![
        call("call_1", "2+3"),
        call("call_2", "5*4"),
        Cassette::body(answer),
    ]
}

/// The events of `--json` output, the session's id (new in every run) left out.
fn events_of(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|line| {
            let mut event: Value = serde_json::from_str(line).unwrap();
            event.as_object_mut().unwrap().remove("session_id");
            event
        })
        .collect()
}

/// `agentry run --temporal --events URL` prints what the in-process `agentry run` prints for
/// the same recorded 3-round run: with `--json` the same event lines (types, order, text,
/// calls, messages), without it the same answer on stdout and the same tool lines.
#[test]
fn run_with_live_events_prints_what_the_in_process_run_prints() {
    let Some((addr, namespace, Some(events))) = services(true) else {
        return;
    };
    let runtime = runtime();
    let home = tempfile::tempdir().unwrap();
    let question = "What is (2 + 3) × 4?";
    let in_process = |json: bool| {
        let server = runtime
            .block_on(ReplayServer::start(three_rounds()))
            .unwrap();
        let mut command = agentry(home.path());
        command.arg("run").args(model(&server.url()));
        if json {
            command.arg("--json");
        }
        let output = command.arg(question).output().unwrap();
        assert!(output.status.success(), "{output:?}");
        output
    };

    let queue = format!("tevents-cli-{}", std::process::id());
    let temporal = temporal(&addr, &namespace, &queue, Some(&events));
    for json in [true, false] {
        let local = in_process(json);
        // A worker per run, on its own recording of the same model.
        let server = runtime
            .block_on(ReplayServer::start(three_rounds()))
            .unwrap();
        let _worker = worker(home.path(), &[&temporal, &model(&server.url())], &[]);
        let workflow = format!("{queue}-{json}");
        let mut command = agentry(home.path());
        command
            .arg("run")
            .args(&temporal)
            .args(["--workflow", &workflow])
            .args(model(&server.url()));
        if json {
            command.arg("--json");
        }
        let durable = command.arg(question).output().unwrap();
        let stdout = String::from_utf8(durable.stdout).unwrap();
        let stderr = String::from_utf8(durable.stderr).unwrap();
        assert!(durable.status.success(), "{stdout}\n{stderr}");
        let local_stdout = String::from_utf8(local.stdout).unwrap();
        if json {
            let (durable, local) = (events_of(&stdout), events_of(&local_stdout));
            assert_eq!(durable.len(), 26, "{stdout}");
            assert_eq!(durable, local);
        } else {
            assert_eq!(stdout, local_stdout);
            assert_eq!(stdout.trim(), "2 + 3 = 5, and 5 × 4 = 20.");
            let local_stderr = String::from_utf8(local.stderr).unwrap();
            for line in local_stderr.lines().filter(|l| l.contains("calculator {")) {
                // The tool lines, without their timings.
                let shown = line.split(" · ").next().unwrap();
                assert!(stderr.contains(shown), "{shown}\n{stderr}");
            }
        }
    }
}

/// With `--events`, a run that waits for approval prints its waiting calls and exits 4;
/// `agentry resume --temporal --events --approve all` signals it and streams the rest (the
/// call's execution, the answer) as the in-process resume does.
#[test]
fn run_and_resume_with_live_events_across_an_approval() {
    let Some((addr, namespace, Some(events))) = services(true) else {
        return;
    };
    let runtime = runtime();
    let server = runtime.block_on(ReplayServer::start(cassettes())).unwrap();
    let home = tempfile::tempdir().unwrap();
    let queue = format!("tevents-approve-{}", std::process::id());
    let model = model(&server.url());
    let temporal = temporal(&addr, &namespace, &queue, Some(&events));
    let _worker = worker(
        home.path(),
        &[&temporal, &model],
        &["--require-approval", "calculator"],
    );
    let workflow = format!("{queue}-run");
    let run = agentry(home.path())
        .arg("run")
        .args(&temporal)
        .args(["--workflow", &workflow, "--json"])
        .args(&model)
        .arg("What is 2 + 3?")
        .output()
        .unwrap();
    let stdout = String::from_utf8(run.stdout).unwrap();
    assert_eq!(run.status.code(), Some(4), "{stdout}");
    let kinds: Vec<String> = stdout
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("session_end"),
        "{stdout}"
    );
    assert!(kinds.contains(&"approval_requested".to_owned()), "{stdout}");

    let resumed = agentry(home.path())
        .arg("resume")
        .args(&temporal)
        .args(["--workflow", &workflow, "--approve", "all"])
        .output()
        .unwrap();
    let stdout = String::from_utf8(resumed.stdout).unwrap();
    let stderr = String::from_utf8(resumed.stderr).unwrap();
    assert!(resumed.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "2 + 3 = 5.");
    assert!(stderr.contains("calculator"), "{stderr}");
}
