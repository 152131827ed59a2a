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

/// node and server-everything's entry script: required under `CI`, else `None` (skip).
fn everything() -> Option<(String, String)> {
    if let Ok(script) = std::env::var("AGENTRY_TEST_MCP_EVERYTHING") {
        let node = std::env::var("AGENTRY_TEST_NODE").unwrap_or_else(|_| "node".into());
        return Some((node, script));
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "AGENTRY_TEST_MCP_EVERYTHING is not set: CI must run `eval \"$(bash .ci/node.sh)\"` first"
    );
    None
}

/// Reference 000's one registry, end to end: the SQLite products catalog (resources as tools)
/// and an imported MCP server's tools (a proxy) listed and called by the Python SDK through
/// `agentry mcp serve`, with the rows checked in the SQLite file afterwards.
#[test]
fn the_products_catalog_and_an_imported_server_are_served_as_one_registry() {
    let Some(python) = python() else { return };
    let Some((node, everything)) = everything() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("products.db");
    let plan = json!({
        "transport": "stdio",
        "command": env!("CARGO_BIN_EXE_agentry"),
        "args": ["mcp", "serve", "--tool", "calculator", "--products-db", db,
                 "--mcp", format!("{node} {everything} stdio"), "--mcp-name", "everything"],
        "env": {"HOME": home(), "XDG_CONFIG_HOME": home().join(".config")},
        "cwd": dir.path(),
        "steps": [
            {"list": true},
            {"call": "create_product", "arguments": {"sku": "KB-01", "name": "Keyboard", "price_cents": 4900, "stock": 3}},
            {"call": "create_product", "arguments": {"sku": "MS-02", "name": "Mouse", "price_cents": 1900}},
            {"call": "create_product", "arguments": {"sku": "KB-01", "name": "Again", "price_cents": 1}},
            {"call": "search_product", "arguments": {"text": "key", "limit": 5}},
            {"call": "update_product", "arguments": {"id": 2, "stock": 7}},
            {"call": "get_product", "arguments": {"id": 99}},
            {"call": "everything_echo", "arguments": {"message": "through the proxy"}},
        ],
    });
    let (ok, steps, stderr) = run_plan(&python, &plan);
    assert!(ok, "{stderr}");
    let listed = names(&steps[0]);
    for tool in [
        "calculator",
        "get_product",
        "search_product",
        "create_product",
        "update_product",
        "delete_product",
        "everything_echo",
    ] {
        assert!(listed.contains(&tool), "{tool} not in {listed:?}");
    }
    // The record type's schema reaches the client as the tool's output schema.
    let create = steps[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == "create_product")
        .unwrap();
    assert_eq!(
        create["outputSchema"]["properties"]["sku"]["type"],
        "string"
    );

    assert_eq!(steps[1]["isError"], false, "{}", steps[1]);
    assert_eq!(steps[1]["structuredContent"]["id"], 1);
    assert_eq!(steps[2]["structuredContent"]["stock"], 0);
    // A taken SKU is an error the client (a model) can act on, not a crash.
    assert_eq!(steps[3]["isError"], true, "{}", steps[3]);
    let found = &steps[4]["structuredContent"];
    assert_eq!(found["records"].as_array().unwrap().len(), 1, "{found}");
    assert_eq!(found["records"][0]["sku"], "KB-01");
    assert_eq!(steps[5]["structuredContent"]["stock"], 7);
    assert_eq!(steps[6]["isError"], true);
    assert_eq!(steps[7]["isError"], false, "{}", steps[7]);
    assert!(
        steps[7]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("through the proxy"),
        "{}",
        steps[7]
    );

    // What the calls committed is in the file, each call its own transaction.
    let rows: Vec<(String, i64)> = {
        let connection = rusqlite::Connection::open(&db).unwrap();
        let mut statement = connection
            .prepare("SELECT sku, stock FROM products ORDER BY id")
            .unwrap();
        statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert_eq!(rows, [("KB-01".to_owned(), 3), ("MS-02".to_owned(), 7)]);
}

/// The proxy passes progress through both hops (the Python SDK's progress callback sees
/// server-everything's progress relayed by `agentry mcp serve`), and a call the SDK abandons
/// does not hold the proxy. (That the cancellation reaches the far server is proven hop by
/// hop: agent-mcp's `a_cancelled_notification_cancels_the_handler` and the client tests where a
/// Python SDK server sees `notifications/cancelled`.)
#[test]
fn the_proxy_relays_progress_and_an_abandoned_call_does_not_hold_it() {
    let Some(python) = python() else { return };
    let Some((node, everything)) = everything() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let long = "everything_trigger-long-running-operation";
    let plan = json!({
        "transport": "stdio",
        "command": env!("CARGO_BIN_EXE_agentry"),
        "args": ["mcp", "serve", "--mcp", format!("{node} {everything} stdio"),
                 "--mcp-name", "everything"],
        "env": {"HOME": home(), "XDG_CONFIG_HOME": home().join(".config")},
        "cwd": dir.path(),
        "steps": [
            {"call": long, "arguments": {"duration": 1, "steps": 4}},
            {"cancel": long, "arguments": {"duration": 60, "steps": 60}, "after": 0.5},
            {"call": "everything_echo", "arguments": {"message": "still here"}},
        ],
    });
    let started = std::time::Instant::now();
    let (ok, steps, stderr) = run_plan(&python, &plan);
    assert!(ok, "{stderr}");
    assert_eq!(steps[0]["isError"], false, "{}", steps[0]);
    let progress = steps[0]["progress"].as_array().unwrap();
    assert!(!progress.is_empty(), "no progress relayed: {}", steps[0]);
    assert_eq!(steps[1]["cancelled"], true, "{}", steps[1]);
    assert!(
        steps[2]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("still here"),
        "{}",
        steps[2]
    );
    // The abandoned 60-second operation did not hold the proxy.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}
