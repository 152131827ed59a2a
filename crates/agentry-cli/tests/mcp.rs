//! `agentry run --mcp`, `[[mcp]]` in agentry.toml and `agentry mcp tools` as real processes,
//! against server-everything (`$AGENTRY_TEST_MCP_EVERYTHING`, installed by `.ci/node.sh`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use agent_backends::replay::{Cassette, ReplayServer};
use agent_types::AgentEvent;
use serde_json::{Value, json};

/// node and server-everything's entry script, or `None` to skip outside CI; under `CI` a
/// missing one fails the test.
fn everything() -> Option<(String, String)> {
    let node = std::env::var("AGENTRY_TEST_NODE").unwrap_or_else(|_| "node".to_owned());
    if let Ok(script) = std::env::var("AGENTRY_TEST_MCP_EVERYTHING") {
        return Some((node, script));
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "AGENTRY_TEST_MCP_EVERYTHING is not set: CI must run `eval \"$(bash .ci/node.sh)\"` first"
    );
    eprintln!(
        "skipped: AGENTRY_TEST_MCP_EVERYTHING is not set (run `eval \"$(bash .ci/node.sh)\"`)"
    );
    None
}

/// `--mcp` for server-everything over stdio, quoted for the shell-like split.
fn stdio_flag(node: &str, script: &str) -> String {
    format!("'{node}' '{script}' stdio")
}

/// The binary with no provider keys and no configuration from the machine running the tests.
fn agentry(home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentry"));
    for key in ["OPENAI_API_KEY", "AGENTRY_CONFIG", "RUST_LOG"] {
        command.env_remove(key);
    }
    command
        .env("HOME", home)
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

fn lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line}")))
        .collect()
}

fn chunk(delta: Value, finish: Value) -> String {
    format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1,
               "model": "gpt-4.1-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    )
}

/// An OpenAI Chat Completions stream asking for one call (synthetic, in the recordings' shape).
fn chat_tool_call(id: &str, name: &str, arguments: &Value) -> Cassette {
    let mut body = chunk(json!({"role": "assistant", "content": null}), Value::Null);
    body.push_str(&chunk(
        json!({"tool_calls": [{"index": 0, "id": id, "type": "function",
                               "function": {"name": name, "arguments": arguments.to_string()}}]}),
        Value::Null,
    ));
    body.push_str(&chunk(json!({}), json!("tool_calls")));
    body.push_str("data: [DONE]\n\n");
    Cassette::body(body)
}

fn chat_text(text: &str) -> Cassette {
    let mut body = chunk(json!({"role": "assistant", "content": text}), Value::Null);
    body.push_str(&chunk(json!({}), json!("stop")));
    body.push_str("data: [DONE]\n\n");
    Cassette::body(body)
}

#[test]
fn mcp_tools_prints_one_json_line_per_imported_tool() {
    let Some((node, script)) = everything() else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let flag = stdio_flag(&node, &script);
    let (code, stdout, stderr) = run(agentry(home.path()).args(["mcp", "tools", "--mcp", &flag]));
    assert_eq!(code, 0, "{stderr}");
    let tools = lines(&stdout);
    assert!(tools.len() >= 10, "{stdout}");
    for tool in &tools {
        let keys: Vec<&String> = tool.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["description", "input_schema", "name"], "{tool}");
        assert_eq!(tool["input_schema"]["type"], "object", "{tool}");
    }
    // The name defaults to the package the launcher runs.
    let echo = tools
        .iter()
        .find(|tool| tool["name"] == "server-everything_echo")
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(
        echo["input_schema"]["properties"]["message"]["type"],
        "string"
    );

    // --mcp-name names it; RUST_LOG=info shows the server's own stderr, by server.
    let (code, stdout, stderr) = run(agentry(home.path())
        .args(["mcp", "tools", "--mcp", &flag, "--mcp-name", "ev"])
        .env("RUST_LOG", "agent_mcp=info"));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        lines(&stdout)
            .iter()
            .any(|tool| tool["name"] == "ev_get-sum")
    );
    assert!(
        stderr.contains("Starting default (STDIO) server") && stderr.contains("server=ev"),
        "{stderr}"
    );
}

#[test]
fn mcp_tools_over_streamable_http() {
    let Some((node, script)) = everything() else {
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new(&node)
        .args([&script, "streamableHttp"])
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(started.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(50));
    }
    let home = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let (code, stdout, stderr) = run(agentry(home.path()).args(["mcp", "tools", "--mcp", &url]));
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(code, 0, "{stderr}");
    let names: Vec<String> = lines(&stdout)
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.contains(&"127_0_0_1_echo".to_owned()), "{names:?}");
}

#[test]
fn run_with_mcp_gives_the_model_the_servers_tools_and_runs_them() {
    let Some((node, script)) = everything() else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime
        .block_on(ReplayServer::start([
            chat_tool_call("call_1", "everything_get-sum", &json!({"a": 2, "b": 3})),
            chat_text("It is 5."),
        ]))
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let url = server.url();
    let flag = stdio_flag(&node, &script);
    let (code, stdout, stderr) = run(agentry(home.path())
        .args([
            "run",
            "--provider",
            "openai",
            "--base-url",
            &url,
            "--model",
            "gpt-4.1-mini",
            "--json",
            "--mcp",
            &flag,
            "--mcp-name",
            "everything",
            "add 2 and 3",
        ])
        .env("OPENAI_API_KEY", "test-key"));
    assert_eq!(code, 0, "{stderr}");
    let events: Vec<AgentEvent> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let output = events
        .iter()
        .find_map(|event| match event {
            AgentEvent::ToolExecutionEnd {
                tool_name,
                output,
                is_error,
                ..
            } => Some((tool_name.clone(), output.clone(), *is_error)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(output.0, "everything_get-sum");
    assert!(output.1.contains("The sum of 2 and 3 is 5."), "{output:?}");
    assert!(!output.2);
    // The model was offered the server's tools with their schemas.
    let first = server.requests()[0].json().unwrap();
    let offered = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["function"]["name"] == "everything_get-sum")
        .cloned()
        .unwrap_or_else(|| panic!("{first}"));
    assert_eq!(
        offered["function"]["parameters"]["properties"]["a"]["type"],
        "number"
    );
}

/// A project directory with an agentry.toml whose [[mcp]] would leave a marker if started.
fn planted(marker: &Path, node: &str, script: &str) -> tempfile::TempDir {
    let project = tempfile::tempdir().unwrap();
    let toml = format!(
        "[[mcp]]\nname = \"planted\"\ncommand = \"sh\"\nargs = [\"-c\", \"touch '{}'; exec '{}' '{}' stdio\"]\nallow = [\"echo\"]\n",
        marker.display(),
        node,
        script
    );
    std::fs::write(project.path().join("agentry.toml"), toml).unwrap();
    project
}

#[test]
fn an_untrusted_projects_mcp_servers_are_not_started_until_trusted() {
    let Some((node, script)) = everything() else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let marker: PathBuf = scratch.path().join("started");
    let project = planted(&marker, &node, &script);

    let (code, stdout, stderr) = run(agentry(home.path())
        .current_dir(project.path())
        .args(["mcp", "tools"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("refused: the project configuration agentry.toml is not trusted"),
        "{stderr}"
    );
    assert!(stderr.contains("[[mcp]] command = \"sh -c"), "{stderr}");
    assert!(stderr.contains("Nothing was started"), "{stderr}");
    assert!(!marker.exists(), "the planted server was started");

    // `agentry run` refuses it the same way, before any request.
    let (code, _, stderr) = run(agentry(home.path())
        .current_dir(project.path())
        .args([
            "run",
            "--provider",
            "openai",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "hi",
        ])
        .env("OPENAI_API_KEY", "test-key"));
    assert_eq!(code, 2, "{stderr}");
    assert!(!marker.exists(), "the planted server was started");

    let (code, stdout, stderr) = run(agentry(home.path())
        .current_dir(project.path())
        .args(["trust", "agentry.toml"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("it may now set: [[mcp]] command = \"sh -c"),
        "{stdout}"
    );
    let (code, stdout, stderr) = run(agentry(home.path())
        .current_dir(project.path())
        .args(["mcp", "tools"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(marker.exists());
    let names: Vec<Value> = lines(&stdout)
        .iter()
        .map(|tool| tool["name"].clone())
        .collect();
    assert_eq!(names, [json!("planted_echo")]);
}

#[test]
fn mcp_usage_mistakes_exit_2_and_an_unreachable_server_exits_1() {
    let home = tempfile::tempdir().unwrap();
    let (code, _, stderr) = run(agentry(home.path()).args(["mcp", "tools"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no MCP server"), "{stderr}");
    let (code, _, stderr) = run(agentry(home.path()).args(["mcp", "tools", "--mcp", "node 'open"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("unbalanced quotes"), "{stderr}");
    let (code, _, stderr) = run(agentry(home.path()).args([
        "mcp",
        "tools",
        "--mcp",
        "/nonexistent/server",
        "--mcp-name",
        "a",
        "--mcp-name",
        "b",
    ]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("2 --mcp-name for 1 --mcp"), "{stderr}");
    let (code, _, stderr) =
        run(agentry(home.path()).args(["mcp", "tools", "--mcp", "/nonexistent/mcp-thing"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("cannot connect to MCP server `mcp-thing`: cannot start"),
        "{stderr}"
    );
}

/// The Python SDK fixture of agent-mcp serving streamable HTTP on a free port, or `None` to
/// skip outside CI.
fn python_fixture_http(dir: &Path) -> Option<(std::process::Child, u16)> {
    let Ok(python) = std::env::var("AGENTRY_TEST_MCP_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "AGENTRY_TEST_MCP_PYTHON is not set: CI must run `eval \"$(bash .ci/python.sh)\"` first"
        );
        eprintln!("skipped: AGENTRY_TEST_MCP_PYTHON is not set");
        return None;
    };
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent-mcp/tests/python/fixture_server.py");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(python)
        .arg(script)
        .arg(dir)
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(started.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(50));
    }
    Some((child, port))
}

#[test]
fn an_mcp_entry_sends_headers_and_a_bearer_token_from_the_environment() {
    let scratch = tempfile::tempdir().unwrap();
    let Some((mut fixture, port)) = python_fixture_http(scratch.path()) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime
        .block_on(ReplayServer::start([
            chat_tool_call("call_1", "fixture_headers", &json!({})),
            chat_text("Done."),
        ]))
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let config = scratch.path().join("agentry.toml");
    std::fs::write(
        &config,
        format!(
            "[[mcp]]\nname = \"fixture\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n\
             headers = {{ \"X-Agentry-Test\" = \"from-${{AGENTRY_TEST_HEADER_VALUE}}\" }}\n\
             bearer_env = \"AGENTRY_TEST_MCP_TOKEN\"\nallow = [\"headers\"]\n"
        ),
    )
    .unwrap();
    let url = server.url();
    let (code, stdout, stderr) = run(agentry(home.path())
        .args([
            "run",
            "--provider",
            "openai",
            "--base-url",
            &url,
            "--model",
            "gpt-4.1-mini",
            "--json",
            "--config",
        ])
        .arg(&config)
        .arg("who am I?")
        .env("OPENAI_API_KEY", "test-key")
        .env("AGENTRY_TEST_HEADER_VALUE", "env")
        .env("AGENTRY_TEST_MCP_TOKEN", "tok-123"));
    let _ = fixture.kill();
    let _ = fixture.wait();
    assert_eq!(code, 0, "{stderr}");
    let output = stdout
        .lines()
        .map(|line| serde_json::from_str::<AgentEvent>(line).unwrap())
        .find_map(|event| match event {
            AgentEvent::ToolExecutionEnd { output, .. } => Some(output),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(output.contains("Bearer tok-123"), "{output}");
    assert!(output.contains("from-env"), "{output}");
    // The secrets are not echoed anywhere else.
    assert!(!stderr.contains("tok-123"), "{stderr}");

    // A variable that is not set stops the command, naming it and not the value.
    let (code, _, stderr) = run(agentry(home.path())
        .args(["mcp", "tools", "--config"])
        .arg(&config)
        .env("AGENTRY_TEST_MCP_TOKEN", "tok-123"));
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("[[mcp]] fixture: headers.X-Agentry-Test: the environment variable AGENTRY_TEST_HEADER_VALUE is not set"),
        "{stderr}"
    );
}

/// `--tool-search-threshold`: over it the model gets `search_tools` only, and the tool its
/// search found from the next request on (docs/mcp.md, "Large tool catalogs").
#[test]
fn run_with_tool_search_offers_search_tools_then_what_it_found() {
    let Some((node, script)) = everything() else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime
        .block_on(ReplayServer::start([
            chat_tool_call(
                "call_1",
                "search_tools",
                &json!({"query": "sum of two numbers"}),
            ),
            chat_tool_call("call_2", "everything_get-sum", &json!({"a": 2, "b": 3})),
            chat_text("It is 5."),
        ]))
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let url = server.url();
    let flag = stdio_flag(&node, &script);
    let (code, stdout, stderr) = run(agentry(home.path())
        .args([
            "run",
            "--provider",
            "openai",
            "--base-url",
            &url,
            "--model",
            "gpt-4.1-mini",
            "--json",
            "--mcp",
            &flag,
            "--mcp-name",
            "everything",
            "--tool-search-threshold",
            "3",
            "add 2 and 3",
        ])
        .env("OPENAI_API_KEY", "test-key"));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("The sum of 2 and 3 is 5."), "{stdout}");
    let offered = |at: usize| -> Vec<String> {
        let request = server.requests()[at].json().unwrap();
        request["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|tool| tool["function"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(offered(0), ["search_tools"]);
    let second = offered(1);
    assert!(
        second.contains(&"everything_get-sum".to_owned()),
        "{second:?}"
    );
    assert!(second.len() <= 6, "{second:?}");
}
