//! Starting server-everything over stdio or streamable HTTP, and calling imported tools.

use std::ffi::OsString;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use agent_mcp::client::ServerConfig;
use agent_tools::{Registry, ToolContent, ToolContext, ToolOutput, collect_output};
use serde_json::Value;

/// server-everything's entry script (`$AGENTRY_TEST_MCP_EVERYTHING`) and node, or `None` to
/// skip outside CI; under `CI` a missing one fails the test.
pub(crate) fn everything() -> Option<(OsString, OsString)> {
    let script = std::env::var_os("AGENTRY_TEST_MCP_EVERYTHING");
    let node = std::env::var_os("AGENTRY_TEST_NODE").unwrap_or_else(|| "node".into());
    if let Some(script) = script {
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

/// server-everything over stdio, as server `everything`.
pub(crate) fn stdio_config() -> Option<ServerConfig> {
    let (node, script) = everything()?;
    Some(ServerConfig::stdio(
        "everything",
        node.to_string_lossy(),
        [script.to_string_lossy().into_owned(), "stdio".to_owned()],
    ))
}

/// A server-everything process serving streamable HTTP on a port of its own; killed on drop.
pub(crate) struct HttpServer {
    pub(crate) child: tokio::process::Child,
    pub(crate) port: u16,
    node: OsString,
    script: OsString,
}

impl HttpServer {
    pub(crate) async fn start() -> Option<Self> {
        let (node, script) = everything()?;
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = spawn_http(&node, &script, port).await;
        Some(Self {
            child,
            port,
            node,
            script,
        })
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    pub(crate) fn config(&self) -> ServerConfig {
        ServerConfig::http("everything", self.url())
    }

    /// Kills the server and starts a new one on the same port.
    pub(crate) async fn kill(&mut self) {
        self.child.kill().await.unwrap();
    }

    pub(crate) async fn restart(&mut self) {
        self.child = spawn_http(&self.node, &self.script, self.port).await;
    }
}

async fn spawn_http(node: &OsString, script: &OsString, port: u16) -> tokio::process::Child {
    let child = tokio::process::Command::new(node)
        .arg(script)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let started = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "server-everything did not listen on {port}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child
}

/// Calls `name` from `registry` with `arguments` validated strictly, as the loop does.
pub(crate) async fn call(
    registry: &Registry,
    name: &str,
    arguments: Value,
) -> (ToolOutput, Option<ToolContent>) {
    let tool = registry
        .get(name)
        .unwrap_or_else(|| panic!("no tool {name}"));
    let valid = tool
        .validate(arguments, agent_tools::ValidationMode::Strict)
        .unwrap();
    let context = ToolContext::new("call_1", name);
    let output = collect_output(tool.invoke(valid.arguments, context.clone())).await;
    (output, context.take_content())
}

/// The text of every text block.
pub(crate) fn text(content: &ToolContent) -> String {
    content
        .blocks()
        .iter()
        .filter_map(|block| match block {
            agent_types::ToolResultBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A server built on the official Python SDK (`tests/python/fixture_server.py`), run with
/// `$AGENTRY_TEST_MCP_PYTHON`; markers go to `dir`. `None` skips outside CI.
pub(crate) fn python_fixture(dir: &std::path::Path) -> Option<ServerConfig> {
    let Some(python) = std::env::var_os("AGENTRY_TEST_MCP_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "AGENTRY_TEST_MCP_PYTHON is not set: CI must run `eval \"$(bash .ci/python.sh)\"` first"
        );
        eprintln!(
            "skipped: AGENTRY_TEST_MCP_PYTHON is not set (run `eval \"$(bash .ci/python.sh)\"`)"
        );
        return None;
    };
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/fixture_server.py");
    Some(ServerConfig::stdio(
        "fixture",
        python.to_string_lossy(),
        [script.display().to_string(), dir.display().to_string()],
    ))
}
