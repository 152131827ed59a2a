//! `agentry demo`, `run` and `resume` as real processes: the binary talks HTTP to a replay
//! server in this test process, which serves recorded provider responses.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use agent_backends::replay::{Cassette, Chunking, ReplayServer};
use agent_types::AgentEvent;
use serde_json::{Value, json};

const ANSWER: &str = "Lisbon is sunny and 19 °C with a light 12 km/h breeze, while Oslo is overcast at 4 °C. Lisbon is 15 °C warmer: pack for a mild spring day there and for winter in Oslo.";

fn recording(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/providers")
        .join(path)
}

fn cassette(path: &str) -> Cassette {
    Cassette::from_file(recording(path)).unwrap()
}

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
    // The user's configuration directory (and trust store) is this test process's own.
    command
        .env("HOME", home())
        .env("XDG_CONFIG_HOME", home().join(".config"))
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    command
}

/// A home directory for this test process, under the target directory.
fn home() -> &'static Path {
    static HOME: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        let home =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-home-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).unwrap();
        home
    })
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

/// A runtime whose worker threads keep the replay server serving while a test blocks on the
/// child process.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

fn serve(runtime: &tokio::runtime::Runtime, cassettes: Vec<Cassette>) -> ReplayServer {
    runtime.block_on(ReplayServer::start(cassettes)).unwrap()
}

fn events(stdout: &str) -> Vec<AgentEvent> {
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line}")))
        .collect()
}

/// An OpenAI Chat Completions stream asking for these calls, in the recordings' chunk shape.
/// (Synthetic, for tools no recording calls; the framing matches `stream-tool-call.sse`.)
fn chat_tool_calls(calls: &[(&str, &str, Value)]) -> Cassette {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1,
                   "model": "gpt-4.1-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
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

#[test]
fn the_demo_streams_the_answer_runs_the_tools_and_ends_with_the_tables() {
    for provider in [
        "anthropic",
        "openai",
        "openai-responses",
        "gemini",
        "ollama",
    ] {
        let (code, stdout, stderr) = run(agentry().args(["demo", "--provider", provider]));
        assert_eq!(code, 0, "{provider}: {stderr}");
        assert!(
            stdout.ends_with(&format!("{ANSWER}\n")),
            "{provider}: {stdout}"
        );
        for call in [
            r#"✓ get_weather {"city":"Lisbon"} · "#,
            r#"✓ get_weather {"city":"Oslo"} · "#,
            "✓ clock {} · ",
            r#"✓ calculator {"expression":"19 - 4"} · "#,
        ] {
            assert!(
                stderr.contains(call),
                "{provider}: {call} missing from\n{stderr}"
            );
        }
        assert!(
            stderr
                .lines()
                .any(|line| line.trim_start().starts_with("call ") && line.ends_with(" cost")),
            "{provider}: {stderr}"
        );
        assert!(stderr.contains("\n  total"), "{provider}: {stderr}");
        assert!(stderr.contains("round  tool"), "{provider}: {stderr}");
        assert!(
            stderr.contains("done · 3 model call(s) · 4 tool call(s) · 1534 tokens in"),
            "{provider}: {stderr}"
        );
    }
}

/// Durations, the server's port and the clock's own output vary from run to run.
fn masked(text: &str) -> String {
    let duration = regex::Regex::new(r"\d+\.\d+ (ms|s)\b").unwrap();
    let address = regex::Regex::new(r"127\.0\.0\.1:\d+").unwrap();
    let size = regex::Regex::new(r"\d+ B\b").unwrap();
    let text = duration.replace_all(text, "[time]");
    let text = address.replace_all(&text, "127.0.0.1:[port]");
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            if line.contains(" clock ") {
                size.replace_all(line, "[n] B").into_owned()
            } else {
                line.to_owned()
            }
        })
        .collect();
    lines.join("\n")
}

#[test]
fn the_demo_output_for_people() {
    let (code, stdout, stderr) = run(agentry().args(["demo"]));
    assert_eq!(code, 0, "{stderr}");
    // Columns move with the width of the masked values, so the snapshot keeps the tables'
    // content rather than their exact spacing.
    let squeezed = regex::Regex::new(r" {2,}").unwrap();
    let stderr = squeezed.replace_all(&masked(&stderr), "  ").into_owned();
    insta::assert_snapshot!("demo_stdout", stdout);
    insta::assert_snapshot!("demo_stderr", stderr);
}

#[test]
fn the_demo_as_json_is_the_documented_event_stream() {
    let (code, stdout, stderr) = run(agentry().args(["demo", "--json", "--provider", "openai"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.is_empty(),
        "JSON mode keeps stderr for errors: {stderr}"
    );
    let events = events(&stdout);
    assert!(matches!(
        events.first(),
        Some(AgentEvent::SessionStart { .. })
    ));
    let Some(AgentEvent::SessionEnd {
        finish_reason,
        messages,
        ..
    }) = events.last()
    else {
        panic!("last event: {:?}", events.last());
    };
    assert_eq!(serde_json::to_value(finish_reason).unwrap(), "stop");
    assert_eq!(messages.len(), 7, "3 assistant turns and 4 tool results");
    let text: String = events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::TextDelta { delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, ANSWER);
    let ended: Vec<&Value> = events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::ToolExecutionStart { arguments, .. } => Some(arguments),
            _ => None,
        })
        .collect();
    assert_eq!(ended.len(), 4);
    let calculator = events.iter().find_map(|event| match event {
        AgentEvent::ToolExecutionEnd {
            tool_name, output, ..
        } if tool_name == "calculator" => Some(output),
        _ => None,
    });
    assert_eq!(
        calculator.unwrap(),
        r#"{"expression":"19 - 4","result":15}"#
    );
}

#[test]
fn a_tripped_budget_exits_3_and_says_which() {
    let (code, _, stderr) = run(agentry().args(["demo", "--max-iterations", "1"]));
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("budget exceeded"), "{stderr}");
    assert!(stderr.contains("iterations"), "{stderr}");

    // A cost budget below what the first call costs.
    let (code, _, stderr) = run(agentry().args(["demo", "--max-cost-usd", "0.0001"]));
    assert_eq!(code, 3, "{stderr}");
}

#[test]
fn usage_mistakes_exit_2_with_a_message() {
    let (code, _, stderr) = run(agentry().args(["run", "--max-iterations", "many", "hi"]));
    assert_eq!(code, 2);
    assert!(stderr.contains("--max-iterations"), "{stderr}");

    let (code, _, stderr) = run(agentry().args([
        "run",
        "--provider",
        "openai-compatible",
        "--model",
        "m",
        "hi",
    ]));
    assert_eq!(code, 2);
    assert!(stderr.contains("--base-url"), "{stderr}");

    let (code, _, stderr) = run(agentry().args([
        "run",
        "--tool",
        "read_file",
        "--base-url",
        "http://127.0.0.1:9",
        "hi",
    ]));
    assert_eq!(code, 2);
    assert!(stderr.contains("--root"), "{stderr}");
}

/// A size every run would refuse is a configuration error when the file is read, naming the
/// file and the key (it was found only when a run started, as "a truncation cap of 10
/// bytes is too small", naming neither).
#[test]
fn a_result_cap_too_small_is_refused_when_the_file_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agentry.toml");
    std::fs::write(&path, "tool_result_max_bytes = 10\n").unwrap();
    let (code, stdout, stderr) = run(agentry().env("AGENTRY_CONFIG", &path).args([
        "run",
        "--base-url",
        "http://127.0.0.1:9",
        "hi",
    ]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("agentry.toml"), "{stderr}");
    assert!(stderr.contains("tool_result_max_bytes = 10"), "{stderr}");
    assert!(stderr.contains("at least 64"), "{stderr}");

    let (code, stdout, stderr) = run(agentry().args(["demo", "--tool-result-max-bytes", "10"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("--tool-result-max-bytes = 10"), "{stderr}");
}

#[test]
fn an_output_limit_outside_the_models_range_exits_2_before_anything_is_sent() {
    for (provider, model, tokens, limit) in [
        ("anthropic", "claude-sonnet-4-5", "4294967295", "64000"),
        ("openai", "gpt-4.1-mini", "32769", "32768"),
        ("gemini", "gemini-2.5-flash", "0", "from 1 to 65536"),
    ] {
        let (code, stdout, stderr) = run(agentry().args([
            "run",
            "--provider",
            provider,
            "--model",
            model,
            "--max-output-tokens",
            tokens,
            "--base-url",
            "http://127.0.0.1:9",
            "hi",
        ]));
        assert_eq!(code, 2, "{provider}: {stderr}");
        assert!(stdout.is_empty());
        assert!(
            stderr.contains("max_output_tokens") && stderr.contains(limit),
            "{provider}: {stderr}"
        );
    }
    // In range, the run goes ahead (and fails to connect: exit 1, not 2).
    let (code, _, stderr) = run(agentry().args([
        "run",
        "--provider",
        "anthropic",
        "--model",
        "claude-sonnet-4-5",
        "--max-output-tokens",
        "64000",
        "--base-url",
        "http://127.0.0.1:9",
        "hi",
    ]));
    assert_eq!(code, 1, "{stderr}");
}

#[test]
fn without_a_key_the_message_names_the_variable_and_the_demo() {
    for (provider, variable) in [
        ("openai", "OPENAI_API_KEY"),
        ("openai-responses", "OPENAI_API_KEY"),
        ("anthropic", "ANTHROPIC_API_KEY"),
        ("gemini", "GEMINI_API_KEY"),
    ] {
        let (code, stdout, stderr) = run(agentry().args(["run", "--provider", provider, "hi"]));
        assert_eq!(code, 2, "{provider}");
        assert!(stdout.is_empty());
        assert!(stderr.contains(variable), "{provider}: {stderr}");
        assert!(stderr.contains("agentry demo"), "{provider}: {stderr}");
    }
}

#[test]
fn each_provider_runs_against_its_recorded_answer() {
    let runtime = runtime();
    for (provider, file, key) in [
        (
            "openai",
            "openai-chat/stream-text-usage.sse",
            "OPENAI_API_KEY",
        ),
        (
            "openai-responses",
            "openai-responses/stream-text.sse",
            "OPENAI_API_KEY",
        ),
        (
            "anthropic",
            "anthropic/stream-text.sse",
            "ANTHROPIC_API_KEY",
        ),
        ("gemini", "gemini/stream-text.sse", "GEMINI_API_KEY"),
        ("ollama", "ollama/stream-text.ndjson", "OLLAMA_HOST"),
        (
            "openai-compatible",
            "openai-chat/stream-text-usage.sse",
            "OPENAI_API_KEY",
        ),
    ] {
        let server = serve(&runtime, vec![cassette(file)]);
        let mut command = agentry();
        command
            .args([
                "run",
                "--provider",
                provider,
                "--base-url",
                &server.url(),
                "--model",
                "test-model",
                "Say hi",
            ])
            .env(key, "test-key");
        let (code, stdout, stderr) = run(&mut command);
        assert_eq!(code, 0, "{provider}: {stderr}");
        assert!(!stdout.trim().is_empty(), "{provider}: no answer");
        assert!(
            stderr.contains("done · 1 model call(s)"),
            "{provider}: {stderr}"
        );
        let requests = server.requests();
        assert_eq!(requests.len(), 1, "{provider}");
        let body = requests[0].json().unwrap();
        assert!(body.to_string().contains("Say hi"), "{provider}: {body}");
    }
}

#[test]
fn a_provider_error_exits_1_with_the_providers_message() {
    let runtime = runtime();
    let server = serve(
        &runtime,
        vec![cassette("anthropic/error-400-invalid-request.json")],
    );
    let (code, _, stderr) = run(agentry()
        .args([
            "run",
            "--provider",
            "anthropic",
            "--base-url",
            &server.url(),
            "hi",
        ])
        .env("ANTHROPIC_API_KEY", "test-key"));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("invalid_request_error"), "{stderr}");
}

#[test]
fn the_prompt_comes_from_stdin_when_none_is_given() {
    let runtime = runtime();
    let server = serve(
        &runtime,
        vec![cassette("openai-chat/stream-text-usage.sse")],
    );
    let mut child = agentry()
        .args(["run", "--provider", "openai", "--base-url", &server.url()])
        .env("OPENAI_API_KEY", "test-key")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"What is in the pipe?\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let body = server.requests()[0].json().unwrap();
    assert_eq!(body["messages"][0]["content"], "What is in the pipe?");
}

#[test]
fn agentry_toml_sets_defaults_that_flags_override() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(
        &runtime,
        vec![
            cassette("openai-chat/stream-text-usage.sse"),
            cassette("openai-chat/stream-text-usage.sse"),
        ],
    );
    std::fs::write(
        dir.path().join("agentry.toml"),
        format!(
            "provider = \"openai-compatible\"\nmodel = \"from-file\"\nbase_url = \"{}\"\nsystem = \"Be terse.\"\n",
            server.url()
        ),
    )
    .unwrap();
    // The file sends the conversation elsewhere: only once the user trusts it.
    let (code, _, stderr) = run(agentry().current_dir(dir.path()).args(["run", "hi"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("agentry trust"), "{stderr}");
    let (code, _, stderr) = run(agentry().current_dir(dir.path()).args(["trust"]));
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = run(agentry().current_dir(dir.path()).args(["run", "hi"]));
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) =
        run(agentry()
            .current_dir(dir.path())
            .args(["run", "--model", "from-flag", "hi"]));
    assert_eq!(code, 0, "{stderr}");
    let requests = server.requests();
    let first = requests[0].json().unwrap();
    assert_eq!(first["model"], "from-file");
    assert_eq!(first["messages"][0]["content"], "Be terse.");
    assert_eq!(requests[1].json().unwrap()["model"], "from-flag");

    std::fs::write(dir.path().join("agentry.toml"), "provder = \"openai\"\n").unwrap();
    let (code, _, stderr) = run(agentry().current_dir(dir.path()).args(["run", "hi"]));
    assert_eq!(code, 2);
    assert!(
        stderr.contains("agentry.toml") && stderr.contains("provder"),
        "{stderr}"
    );
}

#[test]
fn a_remote_tool_suspends_to_a_session_file_and_resume_finishes_it() {
    for session_name in ["chat.jsonl", "chat.db"] {
        let runtime = runtime();
        let dir = tempfile::tempdir().unwrap();
        let session = dir.path().join(session_name);
        let server = serve(
            &runtime,
            vec![
                cassette("openai-chat/stream-tool-call.sse"),
                cassette("openai-chat/stream-text-usage.sse"),
            ],
        );
        let url = server.url();
        let (code, stdout, stderr) = run(agentry()
            .args([
                "run",
                "--provider",
                "openai",
                "--base-url",
                &url,
                "--remote-tool",
                "get_capital",
            ])
            .args([
                "--session",
                session.to_str().unwrap(),
                "What is the capital of the UK?",
            ])
            .env("OPENAI_API_KEY", "test-key"));
        assert_eq!(code, 4, "{stderr}");
        let pending: Value = serde_json::from_str(stdout.trim()).unwrap();
        let call = &pending["pending_tool_calls"][0];
        assert_eq!(call["name"], "get_capital");
        assert_eq!(call["arguments"], json!({"country": "UK"}));
        assert!(stderr.contains("agentry resume --session"), "{stderr}");

        // A new prompt is refused while results are pending.
        let (code, _, stderr) = run(agentry()
            .args([
                "run",
                "--session",
                session.to_str().unwrap(),
                "another question",
            ])
            .env("OPENAI_API_KEY", "test-key"));
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains("agentry resume"), "{stderr}");

        // Results that do not answer the pending call are refused and change nothing.
        let results = dir.path().join("results.json");
        std::fs::write(&results, json!({"call_wrong": "Paris"}).to_string()).unwrap();
        let (code, _, stderr) = run(agentry()
            .args([
                "resume",
                "--session",
                session.to_str().unwrap(),
                "--results",
                results.to_str().unwrap(),
            ])
            .env("OPENAI_API_KEY", "test-key"));
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains("missing results for") && stderr.contains("call_wrong"),
            "{stderr}"
        );
        assert_eq!(server.requests().len(), 1, "nothing was sent");

        let id = call["id"].as_str().unwrap();
        std::fs::write(&results, json!({id: "London"}).to_string()).unwrap();
        let (code, stdout, stderr) = run(agentry()
            .args([
                "resume",
                "--session",
                session.to_str().unwrap(),
                "--results",
                results.to_str().unwrap(),
            ])
            .env("OPENAI_API_KEY", "test-key"));
        assert_eq!(code, 0, "{session_name}: {stderr}");
        assert!(!stdout.trim().is_empty());

        // The second request carried the whole history: question, call, result.
        let second = server.requests()[1].json().unwrap();
        let messages = second["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3, "{second}");
        assert_eq!(messages[2]["role"], "tool");
        assert_eq!(messages[2]["content"], "London");

        let state: Value = serde_json::from_str(
            &std::fs::read_to_string(format!("{}.state.json", session.display())).unwrap(),
        )
        .unwrap();
        assert_eq!(state["session"]["status"], "completed");
        assert_eq!(state["provider"], "openai");

        // Resuming a finished session is a usage error.
        let (code, _, _) = run(agentry()
            .args([
                "resume",
                "--session",
                session.to_str().unwrap(),
                "--results",
                results.to_str().unwrap(),
            ])
            .env("OPENAI_API_KEY", "test-key"));
        assert_eq!(code, 2);
    }
}

#[test]
fn a_session_file_carries_the_conversation_into_the_next_run() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("talk.jsonl");
    let server = serve(
        &runtime,
        vec![
            cassette("anthropic/stream-text.sse"),
            cassette("anthropic/stream-text.sse"),
        ],
    );
    for prompt in ["first question", "second question"] {
        let (code, _, stderr) = run(agentry()
            .args([
                "run",
                "--provider",
                "anthropic",
                "--base-url",
                &server.url(),
            ])
            .args(["--session", session.to_str().unwrap(), prompt])
            .env("ANTHROPIC_API_KEY", "test-key"));
        assert_eq!(code, 0, "{stderr}");
    }
    let second = server.requests()[1].json().unwrap();
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{second}");
    let log = std::fs::read_to_string(&session).unwrap();
    assert_eq!(log.lines().count(), 4, "user, answer, user, answer:\n{log}");
}

#[test]
fn read_file_refuses_escapes_and_symlinks_out_of_the_root() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("notes.txt"), "inside the root").unwrap();
    std::fs::write(dir.path().join("secret.txt"), "outside the root").unwrap();
    let mut calls = vec![
        ("call_in", "read_file", json!({"path": "notes.txt"})),
        ("call_up", "read_file", json!({"path": "../secret.txt"})),
        (
            "call_abs",
            "read_file",
            json!({"path": dir.path().join("secret.txt")}),
        ),
    ];
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("link.txt")).unwrap();
        calls.push(("call_link", "read_file", json!({"path": "link.txt"})));
    }
    let server = serve(
        &runtime,
        vec![
            chat_tool_calls(&calls),
            cassette("openai-chat/stream-text-usage.sse"),
        ],
    );
    let (code, stdout, stderr) = run(agentry()
        .args([
            "run",
            "--json",
            "--provider",
            "openai",
            "--base-url",
            &server.url(),
        ])
        .args([
            "--tool",
            "read_file",
            "--root",
            root.to_str().unwrap(),
            "read them",
        ])
        .env("OPENAI_API_KEY", "test-key"));
    assert_eq!(code, 0, "{stderr}");
    let mut outcomes = std::collections::BTreeMap::new();
    for event in events(&stdout) {
        if let AgentEvent::ToolExecutionEnd {
            call_id,
            output,
            is_error,
            ..
        } = event
        {
            outcomes.insert(call_id.to_string(), (is_error, output));
        }
    }
    assert_eq!(outcomes.len(), calls.len());
    let (failed, output) = &outcomes["call_in"];
    assert!(!failed && output.contains("inside the root"), "{output}");
    for refused in outcomes.keys().filter(|id| *id != "call_in") {
        let (failed, output) = &outcomes[refused];
        assert!(failed, "{refused} was not refused: {output}");
        assert!(output.contains("outside"), "{refused}: {output}");
        assert!(
            !output.contains("outside the root\""),
            "{refused} leaked the file: {output}"
        );
    }
    // What the model saw in the second request matches.
    let second = server.requests()[1].json().unwrap();
    assert!(
        !second.to_string().contains("outside the root\""),
        "{second}"
    );
}

#[cfg(unix)]
#[test]
fn ctrl_c_aborts_with_130_and_leaves_a_readable_session() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("slow.jsonl");
    // The answer trickles in: 64 bytes every 50 ms, seconds in all.
    let slow = cassette("openai-chat/stream-text-usage.sse")
        .with_chunking(Chunking::Every(64))
        .with_chunk_delay(Duration::from_millis(50));
    let server = serve(&runtime, vec![slow]);
    let mut child = agentry()
        .args([
            "run",
            "--json",
            "--provider",
            "openai",
            "--base-url",
            &server.url(),
        ])
        .args(["--session", session.to_str().unwrap(), "count slowly"])
        .env("OPENAI_API_KEY", "test-key")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    // Wait until the answer is streaming, so the interrupt lands mid-call.
    let mut seen = Vec::new();
    loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the run ended early: {seen:?}"
        );
        let streaming = line.contains("\"text_delta\"");
        seen.push(line);
        if streaming {
            break;
        }
    }
    // The shell's builtin `kill`: no procps needed on a bare machine.
    let status = Command::new("sh")
        .args(["-c", &format!("kill -INT {}", child.id())])
        .status()
        .unwrap();
    assert!(status.success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last: Value = serde_json::from_str(rest.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "session_end");
    assert_eq!(last["finish_reason"], "aborted");

    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{}.state.json", session.display())).unwrap(),
    )
    .unwrap();
    assert_eq!(state["session"]["status"], "aborted");
    let log = std::fs::read_to_string(&session).unwrap();
    let first: Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    assert_eq!(first["message"]["role"], "user");
    for line in log.lines() {
        serde_json::from_str::<Value>(line).unwrap();
    }
}

/// An OpenAI Chat Completions stream answering with this text, in the recordings' chunk
/// shape (the content split in two deltas, as a model streams it).
fn chat_text(text: &str) -> Cassette {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1,
                   "model": "gpt-4.1-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let half = text.len() / 2;
    let cut = (half..=text.len())
        .find(|at| text.is_char_boundary(*at))
        .unwrap_or(text.len());
    let mut body = chunk(json!({"role": "assistant", "content": ""}), Value::Null);
    body.push_str(&chunk(json!({"content": &text[..cut]}), Value::Null));
    body.push_str(&chunk(json!({"content": &text[cut..]}), Value::Null));
    body.push_str(&chunk(json!({}), json!("stop")));
    body.push_str("data: [DONE]\n\n");
    Cassette::body(body)
}

fn weather_schema(dir: &Path) -> PathBuf {
    let path = dir.join("schema.json");
    std::fs::write(
        &path,
        json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "celsius": {"type": "integer"}
            },
            "required": ["city", "celsius"]
        })
        .to_string(),
    )
    .unwrap();
    path
}

fn run_openai(server: &ReplayServer, args: &[&str]) -> (i32, String, String) {
    let url = server.url();
    let mut all = vec![
        "run",
        "--provider",
        "openai",
        "--base-url",
        &url,
        "--model",
        "gpt-4.1-mini",
    ];
    all.extend_from_slice(args);
    run(agentry().args(&all).env("OPENAI_API_KEY", "test-key"))
}

#[test]
fn output_schema_prints_only_the_validated_object_on_one_line() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let schema = weather_schema(dir.path());
    let server = serve(
        &runtime,
        vec![chat_text("{\"city\": \"Lisbon\",\n  \"celsius\": 19}")],
    );
    let (code, stdout, stderr) = run_openai(
        &server,
        &[
            "--output-schema",
            schema.to_str().unwrap(),
            "Weather in Lisbon?",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "{\"celsius\":19,\"city\":\"Lisbon\"}\n", "{stderr}");
    // Auto picks OpenAI's native structured output: the strict schema in response_format.
    let body = server.requests()[0].json().unwrap();
    assert_eq!(body["response_format"]["type"], "json_schema", "{body}");
    assert_eq!(body["response_format"]["json_schema"]["strict"], true);
    assert_eq!(
        body["response_format"]["json_schema"]["schema"]["additionalProperties"],
        false
    );

    // --output-strategy tool: a final-answer tool instead, answered by a tool call.
    let server = serve(
        &runtime,
        vec![chat_tool_calls(&[(
            "call_1",
            "final_answer",
            json!({"city": "Oslo", "celsius": 4}),
        )])],
    );
    let (code, stdout, stderr) = run_openai(
        &server,
        &[
            "--output-schema",
            schema.to_str().unwrap(),
            "--output-strategy",
            "tool",
            "Weather in Oslo?",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "{\"celsius\":4,\"city\":\"Oslo\"}\n", "{stderr}");
    let body = server.requests()[0].json().unwrap();
    assert!(body.get("response_format").is_none(), "{body}");
    assert_eq!(
        body["tools"][0]["function"]["name"], "final_answer",
        "{body}"
    );
}

#[test]
fn an_answer_invalid_after_every_retry_exits_1_with_the_problems_on_stderr() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let schema = weather_schema(dir.path());
    let server = serve(
        &runtime,
        vec![
            chat_text(r#"{"city": "Lisbon", "celsius": "warm"}"#),
            chat_text(r#"{"city": "Lisbon"}"#),
        ],
    );
    let (code, stdout, stderr) = run_openai(
        &server,
        &["--output-schema", schema.to_str().unwrap(), "Weather?"],
    );
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stdout, "", "nothing unvalidated reaches stdout");
    assert!(
        stderr.contains("does not match the output schema"),
        "{stderr}"
    );
    assert!(stderr.contains("celsius"), "the problem is named: {stderr}");
    assert!(stderr.contains(r#"answer: {"city": "Lisbon"}"#), "{stderr}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "one retry by default");
    // The retry tells the model what was wrong.
    assert!(
        requests[1].json().unwrap().to_string().contains("celsius"),
        "{}",
        requests[1].json().unwrap()
    );

    // --max-output-retries 0: the first invalid answer ends the run.
    let server = serve(&runtime, vec![chat_text(r#"{"city": 3}"#)]);
    let (code, _, stderr) = run_openai(
        &server,
        &[
            "--output-schema",
            schema.to_str().unwrap(),
            "--max-output-retries",
            "0",
            "Weather?",
        ],
    );
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_bad_output_schema_is_a_usage_error_before_anything_is_sent() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(&runtime, vec![]);
    for (text, expected) in [
        ("{not json", "not JSON"),
        (r#"{"type": "array"}"#, "must describe an object"),
    ] {
        let path = dir.path().join("bad.json");
        std::fs::write(&path, text).unwrap();
        let (code, _, stderr) =
            run_openai(&server, &["--output-schema", path.to_str().unwrap(), "hi"]);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(stderr.contains("bad.json"), "{stderr}");
    }
    // A schema that does not compile: refused by the loop before the first model call.
    let path = dir.path().join("uncompilable.json");
    std::fs::write(
        &path,
        r#"{"type": "object", "properties": {"a": {"type": "nope"}}}"#,
    )
    .unwrap();
    let (code, _, stderr) = run_openai(&server, &["--output-schema", path.to_str().unwrap(), "hi"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("the output schema is not usable"),
        "{stderr}"
    );
    let (code, _, stderr) = run_openai(&server, &["--output-strategy", "tool", "hi"]);
    assert_eq!(code, 2, "needs --output-schema: {stderr}");
    assert!(server.requests().is_empty());
}

#[test]
fn files_go_with_the_prompt_as_image_and_document_parts() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("chart.png");
    let png_bytes = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
    std::fs::write(&png, png_bytes).unwrap();
    let pdf = dir.path().join("report.pdf");
    std::fs::write(&pdf, b"%PDF-1.7\n%%EOF\n").unwrap();
    let server = serve(&runtime, vec![chat_text("Seen both.")]);
    let (code, stdout, stderr) = run_openai(
        &server,
        &[
            "--file",
            png.to_str().unwrap(),
            "--file",
            pdf.to_str().unwrap(),
            "What do these show?",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "Seen both.\n");
    let body = server.requests()[0].json().unwrap();
    let content = &body["messages"][0]["content"];
    assert_eq!(
        content[0],
        json!({"type": "text", "text": "What do these show?"}),
        "{body}"
    );
    // base64 of the PNG bytes above and of the PDF.
    assert_eq!(content[1]["type"], "image_url", "{body}");
    assert_eq!(
        content[1]["image_url"]["url"], "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg==",
        "{body}"
    );
    assert_eq!(content[2]["type"], "file", "{body}");
    assert_eq!(content[2]["file"]["filename"], "report.pdf", "{body}");
    assert_eq!(
        content[2]["file"]["file_data"], "data:application/pdf;base64,JVBERi0xLjcKJSVFT0YK",
        "{body}"
    );

    // The same files to Anthropic: an image block and a document block.
    let server = serve(&runtime, vec![cassette("anthropic/stream-text.sse")]);
    let (code, _, stderr) = run(agentry()
        .args([
            "run",
            "--provider",
            "anthropic",
            "--base-url",
            &server.url(),
            "--file",
            png.to_str().unwrap(),
            "--file",
            pdf.to_str().unwrap(),
            "What do these show?",
        ])
        .env("ANTHROPIC_API_KEY", "test-key"));
    assert_eq!(code, 0, "{stderr}");
    let body = server.requests()[0].json().unwrap();
    let content = &body["messages"][0]["content"];
    assert_eq!(content[1]["type"], "image", "{body}");
    assert_eq!(content[1]["source"]["media_type"], "image/png", "{body}");
    assert_eq!(content[2]["type"], "document", "{body}");
    assert_eq!(
        content[2]["source"]["media_type"], "application/pdf",
        "{body}"
    );
}

#[test]
fn a_file_of_unknown_type_or_too_big_is_refused_with_exit_2_naming_it() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(&runtime, vec![]);
    let docx = dir.path().join("letter.docx");
    std::fs::write(&docx, b"PK\x03\x04 not supported").unwrap();
    let fake = dir.path().join("photo.png");
    std::fs::write(&fake, b"<html>not a png</html>").unwrap();
    let big = dir.path().join("huge.txt");
    let file = std::fs::File::create(&big).unwrap();
    file.set_len(20 * 1024 * 1024 + 1).unwrap();
    for (path, expected) in [
        (&docx, "unknown file type"),
        (&fake, "not png"),
        (&big, "over the 20 MiB limit"),
        (&dir.path().join("missing.pdf"), "cannot read it"),
    ] {
        let (code, _, stderr) = run_openai(&server, &["--file", path.to_str().unwrap(), "hi"]);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(path.to_str().unwrap()), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
    assert!(server.requests().is_empty(), "nothing was sent");
}

#[test]
fn a_structured_refusal_exits_1_with_the_refusal_on_stderr_and_nothing_on_stdout() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let schema = weather_schema(dir.path());
    // The refusal of `openai-chat/refusal.json`, streamed as the Chat API streams refusals.
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1,
                   "model": "gpt-4o-2024-08-06", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let mut body = chunk(
        json!({"role": "assistant", "content": null, "refusal": ""}),
        Value::Null,
    );
    body.push_str(&chunk(
        json!({"refusal": "I'm sorry, but I can't assist with that request."}),
        Value::Null,
    ));
    body.push_str(&chunk(json!({}), json!("stop")));
    body.push_str("data: [DONE]\n\n");
    let server = serve(&runtime, vec![Cassette::body(body)]);
    let (code, stdout, stderr) = run_openai(
        &server,
        &["--output-schema", schema.to_str().unwrap(), "Weather?"],
    );
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stdout, "");
    assert!(
        stderr.contains("error: the model refused to answer")
            && stderr.contains("I'm sorry, but I can't assist"),
        "{stderr}"
    );
}

#[test]
fn structured_output_in_json_mode_and_native_where_the_provider_has_none() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let schema = weather_schema(dir.path());
    let server = serve(
        &runtime,
        vec![chat_text(r#"{"city": "Lisbon", "celsius": 19}"#)],
    );
    let (code, stdout, stderr) = run_openai(
        &server,
        &[
            "--json",
            "--output-schema",
            schema.to_str().unwrap(),
            "Weather?",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let events = events(&stdout);
    assert!(
        events.iter().any(|event| matches!(event,
            AgentEvent::Output { value } if *value == json!({"city": "Lisbon", "celsius": 19}))),
        "{stdout}"
    );

    // Anthropic has no native structured output here: asking for it is a usage error.
    let server = serve(&runtime, vec![]);
    let (code, stdout, stderr) = run(agentry()
        .args([
            "run",
            "--provider",
            "anthropic",
            "--base-url",
            &server.url(),
            "--output-schema",
            schema.to_str().unwrap(),
            "--output-strategy",
            "native",
            "Weather?",
        ])
        .env("ANTHROPIC_API_KEY", "test-key"));
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(server.requests().is_empty());
}

#[test]
fn an_attached_file_is_kept_in_the_session_and_sent_again_in_the_next_run() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("chart.png");
    std::fs::write(&png, b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
    for store in ["s.jsonl", "s.db"] {
        let session = dir.path().join(store);
        let server = serve(
            &runtime,
            vec![chat_text("A chart."), chat_text("Still a chart.")],
        );
        let (code, _, stderr) = run_openai(
            &server,
            &[
                "--session",
                session.to_str().unwrap(),
                "--file",
                png.to_str().unwrap(),
                "What is this?",
            ],
        );
        assert_eq!(code, 0, "{store}: {stderr}");
        let (code, stdout, stderr) = run_openai(
            &server,
            &["--session", session.to_str().unwrap(), "And now?"],
        );
        assert_eq!(code, 0, "{store}: {stderr}");
        assert_eq!(stdout, "Still a chart.\n");
        let second = server.requests()[1].json().unwrap();
        assert_eq!(
            second["messages"][0]["content"][1]["image_url"]["url"],
            "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg==",
            "{store}: {second}"
        );
    }
}

#[test]
fn resume_sends_a_remote_tools_image_result_as_an_image() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("s.jsonl");
    let server = serve(
        &runtime,
        vec![
            chat_tool_calls(&[("call_1", "screenshot", json!({}))]),
            chat_text("A login page."),
        ],
    );
    let (code, _, stderr) = run_openai(
        &server,
        &[
            "--session",
            session.to_str().unwrap(),
            "--remote-tool",
            "screenshot",
            "What is on screen?",
        ],
    );
    assert_eq!(code, 4, "{stderr}");
    let results = dir.path().join("results.json");
    std::fs::write(
        &results,
        json!([{"tool_call_id": "call_1", "content": [
            {"type": "text", "text": "the screen:"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
        ]}])
        .to_string(),
    )
    .unwrap();
    let (code, stdout, stderr) = run(agentry()
        .args([
            "resume",
            "--session",
            session.to_str().unwrap(),
            "--results",
            results.to_str().unwrap(),
            "--provider",
            "openai",
            "--base-url",
            &server.url(),
        ])
        .env("OPENAI_API_KEY", "test-key"));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "A login page.\n");
    let body = server.requests()[1].json().unwrap();
    // The image reaches the model in OpenAI Chat's form, not as JSON text.
    assert!(
        body.to_string()
            .contains("data:image/png;base64,iVBORw0KGgo="),
        "{body}"
    );
    assert!(
        !body.to_string().contains(r#"\"type\":\"image\""#),
        "{body}"
    );
}

#[test]
fn a_structured_run_that_waits_for_a_remote_tool_resumes_to_the_validated_object() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let schema = weather_schema(dir.path());
    let session = dir.path().join("s.jsonl");
    let server = serve(
        &runtime,
        vec![
            chat_tool_calls(&[("call_1", "thermometer", json!({"city": "Oslo"}))]),
            chat_text(r#"{"city": "Oslo", "celsius": 4}"#),
        ],
    );
    let (code, stdout, stderr) = run_openai(
        &server,
        &[
            "--session",
            session.to_str().unwrap(),
            "--remote-tool",
            "thermometer",
            "--output-schema",
            schema.to_str().unwrap(),
            "Weather in Oslo?",
        ],
    );
    assert_eq!(code, 4, "{stderr}");
    // The pending calls are what the caller must act on: still printed.
    assert!(stdout.contains("pending_tool_calls"), "{stdout}");
    let results = dir.path().join("results.json");
    std::fs::write(&results, json!({"call_1": "4 °C"}).to_string()).unwrap();
    let (code, stdout, stderr) = run(agentry()
        .args([
            "resume",
            "--session",
            session.to_str().unwrap(),
            "--results",
            results.to_str().unwrap(),
            "--provider",
            "openai",
            "--base-url",
            &server.url(),
            "--output-schema",
            schema.to_str().unwrap(),
        ])
        .env("OPENAI_API_KEY", "test-key"));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "{\"celsius\":4,\"city\":\"Oslo\"}\n", "{stderr}");
    let body = server.requests()[1].json().unwrap();
    assert_eq!(body["response_format"]["type"], "json_schema", "{body}");
}

#[test]
fn a_file_the_provider_cannot_take_fails_before_any_request_naming_both() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let pdf = dir.path().join("report.pdf");
    std::fs::write(&pdf, b"%PDF-1.7\n%%EOF\n").unwrap();
    let server = serve(&runtime, vec![]);
    let (code, stdout, stderr) = run(agentry().args([
        "run",
        "--provider",
        "ollama",
        "--base-url",
        &server.url(),
        "--file",
        pdf.to_str().unwrap(),
        "Summarize",
    ]));
    assert_eq!(code, 1, "{stdout}{stderr}");
    let lower = stderr.to_lowercase();
    assert!(
        lower.contains("ollama") && lower.contains("file"),
        "{stderr}"
    );
    assert!(server.requests().is_empty(), "nothing was sent");
}

/// The AWS variables of the machine running the tests, removed so each case sets its own.
fn without_aws(command: &mut Command) -> &mut Command {
    for key in [
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_CONFIG_FILE",
        "AWS_BEARER_TOKEN_BEDROCK",
    ] {
        command.env_remove(key);
    }
    command
}

#[test]
fn bedrock_without_a_region_or_credentials_exits_2_naming_what_to_set() {
    let mut command = agentry();
    let (code, stdout, stderr) =
        run(without_aws(&mut command).args(["run", "--provider", "bedrock", "hi"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stdout.is_empty());
    assert!(stderr.contains("AWS_REGION"), "{stderr}");

    let mut command = agentry();
    let (code, _, stderr) = run(without_aws(&mut command)
        .args(["run", "--provider", "bedrock", "hi"])
        .env("AWS_REGION", "eu-west-1"));
    assert_eq!(code, 2, "{stderr}");
    for variable in [
        "AWS_ACCESS_KEY_ID",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_BEARER_TOKEN_BEDROCK",
    ] {
        assert!(stderr.contains(variable), "{variable}: {stderr}");
    }
}

#[test]
fn bedrock_runs_signed_with_sigv4_against_its_recorded_answer() {
    let runtime = runtime();
    let server = serve(&runtime, vec![cassette("bedrock/stream-text.eventstream")]);
    let mut command = agentry();
    let (code, stdout, stderr) = run(without_aws(&mut command)
        .args([
            "run",
            "--provider",
            "bedrock",
            "--base-url",
            &server.url(),
            "Say hi",
        ])
        .env("AWS_REGION", "eu-west-1")
        .env("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
        .env(
            "AWS_SECRET_ACCESS_KEY",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        ));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("Lisbon"), "{stdout}");
    assert!(
        !stderr.contains("wJalrXUtnFEMI"),
        "the secret never reaches the output"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].path,
        "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"
    );
    let authorization = requests[0]
        .headers
        .iter()
        .find(|(name, _)| name == "authorization")
        .map(|(_, value)| value.as_str())
        .unwrap();
    assert!(
        authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
            && authorization.contains("/eu-west-1/bedrock/aws4_request"),
        "{authorization}"
    );
}
