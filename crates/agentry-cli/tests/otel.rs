//! OpenTelemetry export end to end: the `agentry` binary exports to a real OTLP/HTTP receiver
//! (tests/otlp/receiver.py, decoding with the official `opentelemetry-proto` Python package),
//! and what arrives is checked against the demo's own `--json` output.
//!
//! The receiver's interpreter comes from AGENTRY_TEST_OTEL_PYTHON (`eval "$(bash
//! .ci/python.sh)"`); under CI a missing variable fails the test, elsewhere it skips.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The binary with no provider keys and no configuration from the machine running the tests.
fn agentry(home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentry"));
    for key in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "OLLAMA_HOST",
        "AGENTRY_CONFIG",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
    ] {
        command.env_remove(key);
    }
    command
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    command
}

fn python() -> Option<std::ffi::OsString> {
    if let Some(program) = std::env::var_os("AGENTRY_TEST_OTEL_PYTHON") {
        return Some(program);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "AGENTRY_TEST_OTEL_PYTHON is not set: CI must run `eval \"$(bash .ci/python.sh)\"` first"
    );
    #[allow(clippy::print_stderr)]
    {
        eprintln!(
            "skipped: AGENTRY_TEST_OTEL_PYTHON is not set (run `eval \"$(bash .ci/python.sh)\"`)"
        );
    }
    None
}

/// The receiver process, killed when dropped.
struct Receiver {
    child: Child,
    out: PathBuf,
    endpoint: String,
    _dir: tempfile::TempDir,
}

impl Receiver {
    fn start(python: &std::ffi::OsStr) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("otlp.jsonl");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp/receiver.py");
        let mut child = Command::new(python)
            .arg(script)
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("the receiver said {line:?}"));
        Self {
            child,
            out,
            endpoint: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        }
    }

    /// Every request received so far, as (signal, content type, headers, body).
    fn received(&self) -> Vec<Value> {
        let Ok(text) = std::fs::read_to_string(&self.out) else {
            return Vec::new();
        };
        text.lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    fn spans(&self) -> Vec<Value> {
        let mut spans = Vec::new();
        for request in self.received() {
            if request["signal"] != "traces" {
                continue;
            }
            for resource in request["body"]["resourceSpans"].as_array().unwrap() {
                for scope in resource["scopeSpans"].as_array().unwrap() {
                    for span in scope["spans"].as_array().unwrap() {
                        let mut span = span.clone();
                        span["resource"] = resource["resource"].clone();
                        spans.push(span);
                    }
                }
            }
        }
        spans.sort_by_key(|span| {
            span["startTimeUnixNano"]
                .as_str()
                .unwrap()
                .parse::<u128>()
                .unwrap()
        });
        spans
    }

    /// Every data point of metric `name`.
    fn points(&self, name: &str) -> Vec<Value> {
        let mut points = Vec::new();
        for request in self.received() {
            if request["signal"] != "metrics" {
                continue;
            }
            for resource in request["body"]["resourceMetrics"].as_array().unwrap() {
                for scope in resource["scopeMetrics"].as_array().unwrap() {
                    for metric in scope["metrics"].as_array().unwrap() {
                        if metric["name"] != name {
                            continue;
                        }
                        let data = metric
                            .get("histogram")
                            .or_else(|| metric.get("sum"))
                            .unwrap();
                        points.extend(data["dataPoints"].as_array().unwrap().iter().cloned());
                    }
                }
            }
        }
        points
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An attribute list (OTLP JSON) as a map of plain JSON values.
fn attributes(item: &Value) -> HashMap<String, Value> {
    item["attributes"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|kv| {
                    let value = &kv["value"];
                    let plain = if let Some(text) = value.get("stringValue") {
                        text.clone()
                    } else if let Some(int) = value.get("intValue") {
                        // OTLP JSON writes 64-bit integers as strings.
                        Value::from(int.as_str().unwrap().parse::<i64>().unwrap())
                    } else if let Some(double) = value.get("doubleValue") {
                        double.clone()
                    } else if let Some(flag) = value.get("boolValue") {
                        flag.clone()
                    } else {
                        value.clone()
                    };
                    (kv["key"].as_str().unwrap().to_owned(), plain)
                })
                .collect()
        })
        .unwrap_or_default()
}

fn events(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn the_demo_exports_its_span_tree_and_metrics_to_a_real_otlp_receiver() {
    let Some(python) = python() else { return };
    let receiver = Receiver::start(&python);
    let home = tempfile::tempdir().unwrap();
    let output = agentry(home.path())
        .args(["demo", "--json"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .env(
            "OTEL_EXPORTER_OTLP_HEADERS",
            "authorization=Bearer otel-test",
        )
        .env("OTEL_SERVICE_NAME", "agentry-otel-test")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    // What the demo itself reported: its session, each model call's usage and cost, and the
    // tool calls it made.
    let events = events(&output);
    let session_id = events
        .iter()
        .find(|event| event["type"] == "session_start")
        .unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let calls: Vec<&Value> = events
        .iter()
        .filter(|event| event["type"] == "message_end" && event["message"]["role"] == "assistant")
        .collect();
    assert_eq!(calls.len(), 3);
    let tool_ids: Vec<&str> = events
        .iter()
        .filter(|event| event["type"] == "tool_execution_start")
        .map(|event| event["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(tool_ids.len(), 4);

    // Headers and resource, from the standard variables.
    let received = receiver.received();
    assert!(received.iter().any(|request| request["signal"] == "traces"));
    for request in &received {
        assert_eq!(request["content_type"], "application/x-protobuf");
        assert_eq!(request["headers"]["authorization"], "Bearer otel-test");
    }

    let spans = receiver.spans();
    let service = attributes(&spans[0]["resource"]);
    assert_eq!(service["service.name"], "agentry-otel-test");
    let names: Vec<&str> = spans
        .iter()
        .map(|span| span["name"].as_str().unwrap())
        .collect();
    // One run; three model calls; the first round's three calls run together, then one.
    assert_eq!(
        names,
        [
            "invoke_agent",
            "chat claude-sonnet-4-5",
            "execute_tool get_weather",
            "execute_tool get_weather",
            "execute_tool clock",
            "chat claude-sonnet-4-5",
            "execute_tool calculator",
            "chat claude-sonnet-4-5",
        ]
    );
    let run = &spans[0];
    assert_eq!(run.get("parentSpanId"), None, "the run is the root");
    assert_eq!(run["kind"], "SPAN_KIND_INTERNAL");
    for span in &spans[1..] {
        assert_eq!(span["traceId"], run["traceId"]);
        assert_eq!(span["parentSpanId"], run["spanId"], "{}", span["name"]);
    }
    let run_attributes = attributes(run);
    assert_eq!(run_attributes["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(run_attributes["gen_ai.provider.name"], "anthropic");
    assert_eq!(
        run_attributes["gen_ai.conversation.id"],
        session_id.as_str()
    );
    assert_eq!(run_attributes["agentry.finish_reason"], "stop");
    assert_eq!(run_attributes["agentry.model_calls"], 3);

    // Each model call's span carries that call's numbers, as the demo printed them.
    let chats: Vec<&Value> = spans
        .iter()
        .filter(|span| span["name"].as_str().unwrap().starts_with("chat "))
        .collect();
    let mut totals = (0, 0, 0.0);
    // The recorded responses' ids, round by round (fixtures/demo/anthropic/round-N.sse).
    let response_ids = [
        "msg_01aCAKkCQ2Qqe2XQAGfcfqD2",
        "msg_01cALXw0Q5ZiL72Kh3wldivr",
        "msg_01CTZlqF49dMhOHzwVylUsJp",
    ];
    for ((chat, call), response_id) in chats.iter().zip(&calls).zip(response_ids) {
        let chat_attributes = attributes(chat);
        assert_eq!(chat_attributes["gen_ai.response.id"], response_id);
        let usage = &call["message"]["usage"];
        assert_eq!(chat["kind"], "SPAN_KIND_CLIENT");
        assert_eq!(chat_attributes["gen_ai.operation.name"], "chat");
        assert_eq!(chat_attributes["gen_ai.provider.name"], "anthropic");
        assert_eq!(chat_attributes["gen_ai.request.model"], "claude-sonnet-4-5");
        assert_eq!(
            chat_attributes["gen_ai.response.model"],
            call["message"]["model"]
        );
        assert_eq!(
            chat_attributes["gen_ai.usage.input_tokens"],
            usage["input_tokens"]
        );
        assert_eq!(
            chat_attributes["gen_ai.usage.output_tokens"],
            usage["output_tokens"]
        );
        assert_eq!(
            chat_attributes["gen_ai.usage.cache_read.input_tokens"],
            usage["cache_read_tokens"]
        );
        assert_eq!(chat_attributes["agentry.cost_usd"], call["cost_usd"]);
        let reason = match call["message"]["stop_reason"].as_str().unwrap() {
            "tool_calls" => "tool_calls",
            "stop" => "stop",
            other => panic!("unexpected stop reason {other}"),
        };
        // The convention's type: an array of strings.
        assert_eq!(
            chat_attributes["gen_ai.response.finish_reasons"],
            serde_json::json!({"arrayValue": {"values": [{"stringValue": reason}]}})
        );
        assert_eq!(
            chat_attributes["gen_ai.conversation.id"],
            session_id.as_str()
        );
        assert!(
            !chat_attributes.contains_key("gen_ai.input.messages"),
            "content is opt-in"
        );
        assert!(!chat_attributes.contains_key("gen_ai.output.messages"));
        totals.0 += usage["input_tokens"].as_i64().unwrap();
        totals.1 += usage["output_tokens"].as_i64().unwrap();
        totals.2 += call["cost_usd"].as_f64().unwrap();
    }
    assert_eq!(run_attributes["gen_ai.usage.input_tokens"], totals.0);
    assert_eq!(run_attributes["gen_ai.usage.output_tokens"], totals.1);

    let tools: Vec<&Value> = spans
        .iter()
        .filter(|span| span["name"].as_str().unwrap().starts_with("execute_tool "))
        .collect();
    let mut seen_ids: Vec<String> = tools
        .iter()
        .map(|tool| {
            let tool_attributes = attributes(tool);
            assert_eq!(tool_attributes["gen_ai.operation.name"], "execute_tool");
            assert_eq!(
                format!(
                    "execute_tool {}",
                    tool_attributes["gen_ai.tool.name"].as_str().unwrap()
                ),
                tool["name"].as_str().unwrap()
            );
            assert_eq!(tool_attributes["agentry.tool.truncated"], false);
            tool_attributes["gen_ai.tool.call.id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    seen_ids.sort();
    let mut expected: Vec<String> = tool_ids.iter().map(|id| (*id).to_owned()).collect();
    expected.sort();
    assert_eq!(seen_ids, expected);

    // The metrics agree with the demo's numbers.
    let tokens = receiver.points("gen_ai.client.token.usage");
    let by_type = |kind: &str| {
        tokens
            .iter()
            .find(|point| attributes(point)["gen_ai.token.type"] == kind)
            .unwrap_or_else(|| panic!("no {kind} token point in {tokens:?}"))
            .clone()
    };
    let input = by_type("input");
    assert_eq!(input["count"], "3");
    assert_eq!(input["sum"].as_f64().unwrap(), totals.0 as f64);
    let input_attributes = attributes(&input);
    assert_eq!(input_attributes["gen_ai.operation.name"], "chat");
    assert_eq!(input_attributes["gen_ai.provider.name"], "anthropic");
    assert_eq!(
        input_attributes["gen_ai.request.model"],
        "claude-sonnet-4-5"
    );
    assert_eq!(
        input_attributes["gen_ai.response.model"],
        "claude-sonnet-4-5"
    );
    let output_tokens = by_type("output");
    assert_eq!(output_tokens["sum"].as_f64().unwrap(), totals.1 as f64);
    let durations = receiver.points("gen_ai.client.operation.duration");
    assert_eq!(durations.len(), 1);
    assert_eq!(durations[0]["count"], "3");
    let cost = receiver.points("agentry.gen_ai.client.cost");
    let exported: f64 = cost
        .iter()
        .map(|point| point["asDouble"].as_f64().unwrap())
        .sum();
    assert!(
        (exported - totals.2).abs() < 1e-9,
        "{exported} vs {}",
        totals.2
    );
}

#[test]
fn otlp_http_json_is_used_when_the_protocol_variable_asks() {
    let Some(python) = python() else { return };
    let receiver = Receiver::start(&python);
    let home = tempfile::tempdir().unwrap();
    let output = agentry(home.path())
        .args(["demo", "--json"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let received = receiver.received();
    assert!(!received.is_empty());
    for request in &received {
        assert_eq!(request["content_type"], "application/json");
    }
    let spans = receiver.spans();
    assert_eq!(spans.len(), 8);
    // Without OTEL_SERVICE_NAME the service is `agentry`.
    assert_eq!(attributes(&spans[0]["resource"])["service.name"], "agentry");
}

#[test]
fn an_unsupported_otlp_protocol_is_a_usage_error() {
    let home = tempfile::tempdir().unwrap();
    let output = agentry(home.path())
        .args(["demo"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("grpc") && stderr.contains("http/protobuf"),
        "{stderr}"
    );
}

/// A signal in the middle of a model call: the process exits with `code`, and the run's spans
/// reach the receiver; with `aborted`, they say the run was aborted.
#[cfg(unix)]
fn signal_mid_run(signal: &str, code: i32, aborted: bool) {
    let Some(python) = python() else { return };
    let receiver = Receiver::start(&python);
    // A provider that accepts the connection and never answers.
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base_url = format!("http://{}", upstream.local_addr().unwrap());
    let home = tempfile::tempdir().unwrap();
    let mut child = agentry(home.path())
        .args([
            "run",
            "--provider",
            "openai",
            "--model",
            "gpt-4.1-mini",
            "--base-url",
            &base_url,
            "hi",
        ])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The model call is under way once the request's connection arrives.
    let (_held, _) = upstream.accept().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let killed = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "agentry did not exit after {signal}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(code));
    let spans = receiver.spans();
    let names: Vec<&str> = spans
        .iter()
        .map(|span| span["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["invoke_agent", "chat gpt-4.1-mini"]);
    if aborted {
        for span in &spans {
            assert_eq!(
                attributes(span)["error.type"],
                "aborted",
                "{}",
                span["name"]
            );
            assert_eq!(span["status"]["code"], "STATUS_CODE_ERROR");
        }
    }
}

/// SIGTERM: the command is dropped (ending its spans), flushed, and the process exits 143.
#[cfg(unix)]
#[test]
fn sigterm_mid_run_still_exports_the_runs_spans() {
    signal_mid_run("-TERM", 143, false);
}

/// Ctrl-C: the run is cancelled and winds down (exit 130); its spans say it was aborted.
#[cfg(unix)]
#[test]
fn ctrl_c_mid_run_exports_the_aborted_runs_spans() {
    signal_mid_run("-INT", 130, true);
}

/// `agentry serve` exports its runs too, and SIGTERM's drain ends with a flush: the run that
/// was streaming when the signal came is in the receiver once the process has exited.
#[cfg(unix)]
#[test]
fn serve_exports_and_flushes_after_the_sigterm_drain() {
    let Some(python) = python() else { return };
    let receiver = Receiver::start(&python);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentry.toml");
    // Each streamed model event is held back 40 ms: the run is still going at SIGTERM.
    std::fs::write(
        &config,
        r#"
[server]
tools = ["calculator", "clock"]

[server.store]
kind = "sqlite"
path = "sessions.db"

[[server.models]]
name = "demo"
provider = "replay"
recording = "anthropic"
event_delay_ms = 40

[[server.tenants]]
name = "acme"
api_keys = ["key-acme-test-0001"]
"#,
    )
    .unwrap();
    let mut child = agentry(dir.path())
        .current_dir(dir.path())
        .args([
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let url = loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "agentry serve exited early"
        );
        if let Some(url) = line.trim().strip_prefix("agentry serve: listening on ") {
            break url.to_owned();
        }
    };
    // The log goes on (and the pipe must not fill) while the test waits.
    let log = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
        rest
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let body = runtime.block_on(async {
        let mut response = reqwest::Client::new()
            .post(format!("{url}/v1/sessions/otel-1/execute"))
            .bearer_auth("key-acme-test-0001")
            .json(&serde_json::json!({
                "message": "Weather?",
                "context": {"model": "demo", "tools": ["calculator", "clock"]},
            }))
            .send()
            .await
            .unwrap();
        let mut body =
            String::from_utf8(response.chunk().await.unwrap().unwrap().to_vec()).unwrap();
        let killed = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        while let Some(chunk) = response.chunk().await.unwrap() {
            body.push_str(std::str::from_utf8(&chunk).unwrap());
        }
        body
    });
    assert!(body.contains("execute_complete"), "{body}");
    let status = child.wait().unwrap();
    let log = log.join().unwrap();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("drained and stopped"), "{log}");

    let spans = receiver.spans();
    let run = spans
        .iter()
        .find(|span| span["name"] == "invoke_agent")
        .unwrap_or_else(|| panic!("no run span in {spans:?}"));
    let chats: Vec<&Value> = spans
        .iter()
        .filter(|span| span["name"] == "chat claude-sonnet-4-5")
        .collect();
    assert!(!chats.is_empty());
    for chat in chats {
        assert_eq!(chat["parentSpanId"], run["spanId"]);
    }
    assert_eq!(attributes(run)["gen_ai.conversation.id"], "otel-1");
    assert!(!receiver.points("gen_ai.client.token.usage").is_empty());
}
