//! The console and the run report through the real binary: `agentry run --report` writes one
//! self-contained page, and a real Chromium (Selenium, `.ci/browser.sh`) drives `/console` of a
//! real `agentry serve` and opens the report.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use agent_backends::replay::{Cassette, ReplayServer};
use serde_json::{Value, json};

#[path = "support/served.rs"]
mod served;
use served::Served;

/// Text a hostile model (or tool, or user) could put in a session: markup and the end of
/// the report's `<script>` element.
const HOSTILE: &str =
    "<img src=x onerror=window.__pwned=1> </script><script>window.__pwned=1</script><!--";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// An OpenAI Chat Completions stream: `content` with `calls`, then the finish reason.
fn chat(content: &str, calls: &[(&str, &str, Value)]) -> Cassette {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1,
                   "model": "gpt-4.1-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let mut body = chunk(
        json!({"role": "assistant", "content": content}),
        Value::Null,
    );
    for (index, (id, name, arguments)) in calls.iter().enumerate() {
        body.push_str(&chunk(
            json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                                   "function": {"name": name, "arguments": arguments.to_string()}}]}),
            Value::Null,
        ));
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    body.push_str(&chunk(json!({}), json!(finish)));
    body.push_str(&format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1,
               "model": "gpt-4.1-mini", "choices": [],
               "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}})
    ));
    body.push_str("data: [DONE]\n\n");
    Cassette::body(body)
}

/// Runs `agentry run --report` on a replayed model that calls the calculator, then answers
/// with hostile text; returns the report's path (in `dir`).
fn write_report(dir: &Path) -> PathBuf {
    let runtime = runtime();
    let server = runtime
        .block_on(ReplayServer::start(vec![
            chat(
                "Let me compute.",
                &[("call_1", "calculator", json!({"expression": "19 - 4"}))],
            ),
            chat(&format!("It is 15. {HOSTILE}"), &[]),
        ]))
        .unwrap();
    let report = dir.join("run.html");
    let output = Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args(["run", "--provider", "openai", "--base-url", &server.url()])
        .args(["--model", "gpt-4.1-mini", "--tool", "calculator"])
        .args(["--report", report.to_str().unwrap(), "How much warmer?"])
        .env("OPENAI_API_KEY", "test-key")
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir.join(".config"))
        .env_remove("AGENTRY_CONFIG")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    report
}

/// The JSON the report embeds, read back as a browser would.
fn embedded(page: &str) -> Value {
    let start = page
        .find("<script type=\"application/json\" id=\"agentry-report\">")
        .unwrap();
    let rest = &page[start..];
    let open = rest.find('>').unwrap() + 1;
    let close = rest.find("</script>").unwrap();
    serde_json::from_str(&rest[open..close]).unwrap()
}

#[test]
fn run_report_is_one_self_contained_page_of_the_conversation_timeline_and_usage() {
    let dir = tempfile::tempdir().unwrap();
    let page = std::fs::read_to_string(write_report(dir.path())).unwrap();
    // Self-contained: no request anywhere, the console's own renderer inline.
    assert!(page.starts_with("<!doctype html>"));
    assert!(!page.contains("src=\"http") && !page.contains("href=\"http"));
    assert!(page.contains("function timelineView"));
    assert!(page.contains("default-src 'none'; script-src 'sha256-"));
    // The hostile answer cannot end the data element: the page's only `</script>`s are its
    // own two, and the data reads back whole.
    assert_eq!(page.matches("</script>").count(), 2);
    assert!(!page.contains("<img"));
    let data = embedded(&page);
    let messages = data["session"]["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!(
        last["content"][0]["text"],
        format!("It is 15. {HOSTILE}"),
        "{last}"
    );
    assert_eq!(data["session"]["status"], "completed");
    assert_eq!(data["provider"], "openai");
    // The timeline: two model calls (rounds 1 and 2) with tokens, the calculator in round 1.
    let models = data["timeline"]["model_calls"].as_array().unwrap();
    assert_eq!(models.len(), 2, "{data}");
    assert_eq!(
        (models[0]["round"].clone(), models[1]["round"].clone()),
        (json!(1), json!(2))
    );
    assert_eq!(models[0]["input_tokens"], 120);
    assert!(models[0]["latency_ms"].as_f64().unwrap() > 0.0);
    let tools = data["timeline"]["tool_calls"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["tool"], "calculator");
    assert_eq!(tools[0]["round"], 1);
    assert_eq!(tools[0]["outcome"], "ok");
}

#[test]
fn report_and_accounting_are_one_or_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args(["run", "--report", "a.html", "--accounting", "a.db", "hi"])
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--report") && stderr.contains("--accounting"),
        "{stderr}"
    );
    assert!(!dir.path().join("a.html").exists());
}

const CONSOLE_CONFIG: &str = r#"
[server]
tools = ["calculator", "clock"]

[server.store]
kind = "sqlite"
path = "data/sessions.db"

[[server.models]]
name = "demo"
provider = "replay"
recording = "anthropic"
# Slow enough that the browser sees the turn stream in before the page redraws it.
event_delay_ms = 30

[[server.tenants]]
name = "acme"
api_keys = ["key-acme-console-0001"]
require_approval = ["calculator"]

[[server.tenants]]
name = "other"
api_keys = ["key-other-console-01"]
"#;

async fn create(url: &str, key: &str, body: Value) -> String {
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/sessions"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let created: Value = response.json().await.unwrap();
    created["id"].as_str().unwrap().to_owned()
}

/// The browser's Python (with Selenium) and Chromium, from `.ci/browser.sh`; under `CI` a
/// missing one fails the test, elsewhere it is skipped.
#[allow(clippy::print_stderr)]
fn browser() -> Option<(String, String)> {
    let python = std::env::var("AGENTRY_TEST_BROWSER_PYTHON").ok();
    let chromium = std::env::var("AGENTRY_TEST_CHROMIUM").ok();
    match (python, chromium) {
        (Some(python), Some(chromium)) => Some((python, chromium)),
        _ if std::env::var_os("CI").is_some() => panic!(
            "AGENTRY_TEST_BROWSER_PYTHON and AGENTRY_TEST_CHROMIUM are required under CI \
             (eval \"$(bash .ci/browser.sh)\")"
        ),
        _ => {
            eprintln!("skipped: no browser (eval \"$(bash .ci/browser.sh)\")");
            None
        }
    }
}

/// The sessions one browser run needs: one whose text is markup, one of another tenant, and
/// one waiting for the results of two remote calls (the recorded model asks for the weather
/// in Lisbon and Oslo).
async fn sessions(url: &str) -> (String, String, String) {
    let hostile = create(
        url,
        "key-acme-console-0001",
        json!({"model": "demo", "system": HOSTILE, "messages": [
            {"role": "user", "content": [{"type": "text", "text": HOSTILE}]}]}),
    )
    .await;
    let foreign = create(url, "key-other-console-01", json!({"model": "demo"})).await;
    let remote = create(
        url,
        "key-acme-console-0001",
        // The clock's result (about 70 bytes) is cut to 64: the console marks it truncated.
        json!({"model": "demo", "tools": ["calculator", "clock"], "remote_tools": [
            {"name": "get_weather", "description": "Weather.", "parameters": {"type": "object"}}],
            "options": {"tool_result_max_bytes": 64}}),
    )
    .await;
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/sessions/{remote}/execute"))
        .bearer_auth("key-acme-console-0001")
        .json(&json!({"message": "Weather in Lisbon and Oslo?"}))
        .send()
        .await
        .unwrap();
    let events = response.text().await.unwrap();
    assert!(
        events.contains("\"status\":\"awaiting_tool_execution\""),
        "{events}"
    );
    (hostile, foreign, remote)
}

/// The path prefix the reverse proxy serves the server under.
const PREFIX: &str = "/agentry";

/// A reverse proxy on loopback serving `upstream` under [`PREFIX`], as nginx's
/// `location /agentry/ { proxy_pass http://upstream/; }` does: the prefix is cut from the
/// request's path, redirects and bodies (streams too) pass unchanged. Its base URL.
async fn prefix_proxy(upstream: String) -> String {
    use axum::body::Body;
    use axum::extract::{Request, State};
    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};

    async fn forward(State(upstream): State<String>, request: Request) -> Response {
        let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
        let Some(rest) = path.strip_prefix(PREFIX).map(str::to_owned) else {
            return StatusCode::NOT_FOUND.into_response();
        };
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let (parts, body) = request.into_parts();
        let mut outgoing = client.request(parts.method, format!("{upstream}{rest}"));
        for (name, value) in &parts.headers {
            if name != "host" {
                outgoing = outgoing.header(name, value);
            }
        }
        let body = axum::body::to_bytes(body, 16 << 20).await.unwrap();
        let answer = outgoing.body(body).send().await.unwrap();
        let mut response = Response::builder().status(answer.status());
        for (name, value) in answer.headers() {
            if name != "transfer-encoding" && name != "connection" {
                response = response.header(name, value);
            }
        }
        response
            .body(Body::from_stream(answer.bytes_stream()))
            .unwrap()
    }

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(forward).with_state(upstream);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}")
}

/// Drives the console at `url` (the server's, or the proxy's with its prefix) in Chromium.
fn browse(
    (python, chromium): (&str, &str),
    url: &str,
    (hostile, foreign, remote): &(String, String, String),
    out: &Path,
    report: &Path,
) {
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/console_test.py");
    let output = Command::new(python)
        .arg(script)
        .args([url, "key-acme-console-0001", hostile, foreign])
        .arg(out)
        .arg(report)
        .arg(remote)
        .env("AGENTRY_TEST_CHROMIUM", chromium)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("console_test: ok"),
        "{url}: {stdout}\n{stderr}"
    );
    for shot in [
        "console-approval.png",
        "console-session.png",
        "console-usage.png",
        "report.png",
    ] {
        let bytes = std::fs::read(out.join(shot)).unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "{shot}");
    }
}

#[test]
fn the_console_in_a_real_browser() {
    let Some((python, chromium)) = browser() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentry.toml");
    std::fs::write(&config, CONSOLE_CONFIG).unwrap();
    let report = write_report(dir.path());
    let served = Served::start(&config);
    let url = served.url.clone();
    let runtime = runtime();
    let first = runtime.block_on(sessions(&url));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    browse((&python, &chromium), &url, &first, &out, &report);
    // `AGENTRY_UPDATE_DOCS=1` refreshes the two screenshots docs/console.md shows.
    if std::env::var_os("AGENTRY_UPDATE_DOCS").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
        for shot in ["console-session.png", "console-usage.png"] {
            std::fs::copy(out.join(shot), docs.join(shot)).unwrap();
        }
    }

    // The same console behind a reverse proxy under a path prefix: every page, asset and API
    // request must stay under the prefix (the proxy answers 404 to anything else). With
    // absolute URLs the page loaded no script and no style there.
    let proxy = runtime.block_on(prefix_proxy(url.clone()));
    let second = runtime.block_on(sessions(&url));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots-prefixed");
    browse(
        (&python, &chromium),
        &format!("{proxy}{PREFIX}"),
        &second,
        &out,
        &report,
    );
    drop(served);
}
