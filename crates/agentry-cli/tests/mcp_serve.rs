//! `agentry mcp serve` as a real process, driven by the official Python MCP client (PyPI
//! `mcp`, the script in agent-mcp's tests) over stdio and streamable HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

const CLIENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../agent-mcp/tests/mcp_client/client.py"
);
const KEY: &str = "mcp-test-key-0123456789";

/// `AGENTRY_TEST_MCP_PYTHON`: required under `CI`, else the test is skipped.
fn python() -> Option<OsString> {
    if let Some(python) = std::env::var_os("AGENTRY_TEST_MCP_PYTHON") {
        return Some(python);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "AGENTRY_TEST_MCP_PYTHON is not set: CI must run `eval \"$(bash .ci/python.sh)\"` first"
    );
    #[allow(clippy::print_stderr)]
    {
        eprintln!("skipped: AGENTRY_TEST_MCP_PYTHON is not set");
    }
    None
}

/// A home directory for this test process, so no configuration of the machine leaks in.
fn home() -> &'static Path {
    static HOME: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        let home =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("mcp-home-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).unwrap();
        home
    })
}

fn agentry() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentry"));
    command
        .env_remove("AGENTRY_CONFIG")
        .env_remove("AGENTRY_MCP_KEY")
        .env("HOME", home())
        .env("XDG_CONFIG_HOME", home().join(".config"))
        .stdin(Stdio::null());
    command
}

fn run_plan(python: &OsString, plan: &Value) -> (bool, Vec<Value>, String) {
    let output = Command::new(python)
        .arg(CLIENT)
        .arg(plan.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let steps = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (
        output.status.success(),
        steps,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn names(step: &Value) -> Vec<&str> {
    step["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{step}"))
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect()
}

#[test]
fn stdio_serves_the_configured_tools_to_the_python_sdk() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home().join(".config/agentry")).unwrap();
    // The tools come from agentry.toml as for `agentry run` (the user's own file here).
    let config = dir.path().join("mine.toml");
    std::fs::write(&config, "tools = [\"calculator\", \"clock\"]\n").unwrap();
    let plan = json!({
        "transport": "stdio",
        "command": env!("CARGO_BIN_EXE_agentry"),
        "args": ["mcp", "serve", "--config", config],
        "env": {"HOME": home(), "XDG_CONFIG_HOME": home().join(".config")},
        "cwd": dir.path(),
        "steps": [
            {"list": true},
            {"call": "calculator", "arguments": {"expression": "2 + 3 * 4"}},
            {"call": "calculator", "arguments": {"expression": "1 / "}},
            {"call": "calculator", "arguments": {}},
            {"call": "read_file", "arguments": {"path": "x"}},
        ],
    });
    let (ok, steps, stderr) = run_plan(&python, &plan);
    assert!(ok, "{stderr}");
    assert_eq!(names(&steps[0]), ["calculator", "clock"]);
    assert_eq!(
        steps[0]["tools"][0]["inputSchema"]["required"],
        json!(["expression"])
    );
    assert_eq!(steps[1]["structuredContent"]["result"], 14);
    assert_eq!(steps[1]["isError"], false);
    assert_eq!(steps[2]["isError"], true);
    assert!(
        steps[2]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("could not evaluate"),
        "{}",
        steps[2]
    );
    // Arguments are checked against the schema before the handler runs.
    assert_eq!(steps[3]["isError"], true);
    assert!(
        steps[4]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool `read_file`")
    );
}

/// `agentry mcp serve --listen`, with its stderr's address line read.
struct Listening {
    child: Child,
    url: String,
}

impl Listening {
    fn start(listen: &str, args: &[&str], key: Option<&str>) -> Self {
        let mut command = agentry();
        command
            .args(["mcp", "serve", "--listen", listen])
            .args(args)
            .current_dir(home())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(key) = key {
            command.env("AGENTRY_MCP_KEY", key);
        }
        let mut child = command.spawn().unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("agentry mcp serve said where it listens")
                .unwrap();
            if let Some(at) = line.find("http://") {
                break line[at..].to_owned();
            }
        };
        Self { child, url }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn http_serves_the_python_sdk_with_the_key_and_refuses_it_without() {
    let Some(python) = python() else { return };
    let served = Listening::start("127.0.0.1:0", &["--tool", "calculator"], Some(KEY));
    let steps = json!([
        {"list": true},
        {"call": "calculator", "arguments": {"expression": "6 * 7"}},
    ]);
    let (ok, with_key, stderr) = run_plan(
        &python,
        &json!({"transport": "http", "url": served.url, "key": KEY, "steps": steps}),
    );
    assert!(ok, "{stderr}");
    assert_eq!(names(&with_key[0]), ["calculator"]);
    assert_eq!(with_key[1]["structuredContent"]["result"], 42);
    let (ok, without, _) = run_plan(
        &python,
        &json!({"transport": "http", "url": served.url, "key": null, "steps": steps}),
    );
    assert!(!ok && without.is_empty(), "{without:?}");
    let (ok, wrong, _) = run_plan(
        &python,
        &json!({"transport": "http", "url": served.url, "key": "not-the-key-0123456789", "steps": steps}),
    );
    assert!(!ok && wrong.is_empty(), "{wrong:?}");
}

#[test]
fn loopback_without_a_key_is_open_to_this_machine() {
    let Some(python) = python() else { return };
    // A bare port binds loopback.
    let served = Listening::start("0", &["--tool", "clock"], None);
    assert!(
        served.url.starts_with("http://127.0.0.1:"),
        "{}",
        served.url
    );
    let (ok, steps, stderr) = run_plan(
        &python,
        &json!({"transport": "http", "url": served.url, "key": null, "steps": [{"list": true}]}),
    );
    assert!(ok, "{stderr}");
    assert_eq!(names(&steps[0]), ["clock"]);
}

#[test]
fn a_public_address_needs_a_key() {
    let output = agentry()
        .args(["mcp", "serve", "--listen", "0.0.0.0:0", "--tool", "clock"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("AGENTRY_MCP_KEY"), "{stderr}");

    let short = agentry()
        .args(["mcp", "serve", "--listen", "0.0.0.0:0", "--tool", "clock"])
        .env("AGENTRY_MCP_KEY", "short")
        .output()
        .unwrap();
    assert_eq!(short.status.code(), Some(2));
}

#[test]
fn an_untrusted_project_file_cannot_serve_read_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("agentry.toml"),
        "tools = [\"read_file\"]\nroot = \"/\"\n",
    )
    .unwrap();
    let output = agentry()
        .args(["mcp", "serve"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("not trusted") && stderr.contains("read_file"),
        "{stderr}"
    );
    // Nothing was served: the refusal comes before stdin is read.
    assert!(output.stdout.is_empty());
}
