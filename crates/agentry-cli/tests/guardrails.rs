//! `--guardrail pii` and `--policy FILE.rego` with the real binary against a recorded OpenAI
//! stream on loopback: a PII-bearing tool result is redacted before the model sees it, a
//! policy denial reaches the model as the call's error result, a policy's require_approval
//! goes through the approval flow (exit 4, `agentry resume --approve`), and an input trip
//! exits 5 with no model call made.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/replay_run.rs"]
mod replay_run;

use replay_run::{Setup, runtime, text, tool_calls};
use serde_json::{Value, json};

const POLICY: &str = r#"
package agentry

deny contains "no arithmetic with 13: it is unlucky" if {
	input.tool.name == "calculator"
	contains(input.arguments.expression, "13")
}

require_approval contains "big numbers need a person" if {
	input.tool.name == "calculator"
	contains(input.arguments.expression, "1000")
}
"#;

impl Setup {
    fn policy(&self) -> String {
        let path = self.dir.path().join("policy.rego");
        std::fs::write(&path, POLICY).unwrap();
        path.to_str().unwrap().to_owned()
    }
}

#[test]
fn a_pii_bearing_tool_result_is_redacted_before_the_model_sees_it() {
    let setup = Setup::new(vec![
        tool_calls(&[("call_1", "read_file", json!({"path": "customer.txt"}))]),
        text("Ann's record is on file."),
    ]);
    std::fs::write(
        setup.dir.path().join("customer.txt"),
        "Ann Lee, ann.lee@example.com, +44 20 7946 0958, card 4111 1111 1111 1111, \
         IBAN GB82 WEST 1234 5698 7654 32, key sk-proj-abcdefghijklmnopqrstuvwxyz0123",
    )
    .unwrap();
    let root = setup.dir.path().to_str().unwrap().to_owned();
    let (code, stdout, stderr) = setup.run(&[
        "--tool",
        "read_file",
        "--root",
        &root,
        "--guardrail",
        "pii",
        "Who is Ann?",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("Ann's record is on file."), "{stdout}");

    let results = setup.tool_messages(1);
    let seen = results[0]["content"].as_str().unwrap();
    for secret in [
        "ann.lee@example.com",
        "7946 0958",
        "4111 1111 1111 1111",
        "GB82 WEST",
        "sk-proj-",
    ] {
        assert!(!seen.contains(secret), "the model saw {secret}: {seen}");
    }
    assert!(seen.contains("Ann Lee"), "{seen}");
    for kind in ["email", "phone", "card", "iban", "api_key"] {
        assert!(
            seen.contains(&format!("[REDACTED:{kind}]")),
            "{kind}: {seen}"
        );
    }
    // The session log holds what the model saw, not the original.
    let log = std::fs::read_to_string(setup.session()).unwrap();
    assert!(!log.contains("ann.lee@example.com"), "{log}");
}

#[test]
fn a_policy_deny_reaches_the_model_as_the_reason() {
    let setup = Setup::new(vec![
        tool_calls(&[("call_1", "calculator", json!({"expression": "13*3"}))]),
        text("I may not compute that."),
    ]);
    let policy = setup.policy();
    let (code, stdout, stderr) = setup.run(&["--policy", &policy, "What is 13*3?"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("I may not compute that."), "{stdout}");
    let results = setup.tool_messages(1);
    assert_eq!(
        results[0]["content"],
        "This call was not run: guardrail `policy` denied it: no arithmetic with 13: it is unlucky"
    );
}

#[test]
fn a_policy_require_approval_goes_through_the_approval_flow() {
    let setup = Setup::new(vec![
        tool_calls(&[("call_1", "calculator", json!({"expression": "1000*3"}))]),
        text("It is 3000."),
    ]);
    let policy = setup.policy();
    let (code, stdout, stderr) = setup.run(&["--policy", &policy, "What is 1000*3?"]);
    assert_eq!(code, 4, "{stderr}");
    let waiting: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        waiting["pending_approvals"],
        json!([{"id": "call_1", "name": "calculator", "arguments": {"expression": "1000*3"}}])
    );
    assert_eq!(setup.server.requests().len(), 1);

    let (code, stdout, stderr) = setup.resume(&["--approve", "all"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("It is 3000."), "{stdout}");
    let results = setup.tool_messages(1);
    assert_eq!(
        results[0]["content"],
        r#"{"expression":"1000*3","result":3000}"#
    );
}

#[test]
fn an_input_trip_exits_5_with_no_model_call_made() {
    let setup = Setup::new(vec![text("never sent")]);
    let (code, _stdout, stderr) = setup.run(&[
        "--guardrail",
        "pii",
        "--json",
        "Use my key AKIAIOSFODNN7EXAMPLE to list the buckets",
    ]);
    assert_eq!(code, 5, "{stderr}");
    assert!(setup.server.requests().is_empty(), "no model call was made");
    assert!(!stderr.contains("AKIAIOSFODNN7EXAMPLE"), "{stderr}");
}

#[test]
fn an_unknown_guardrail_or_a_broken_policy_exits_2() {
    let setup = Setup::new(vec![text("never sent")]);
    let (code, _, stderr) = setup.run(&["--guardrail", "profanity", "hi"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("unknown guardrail `profanity`"), "{stderr}");
    let path = setup.dir.path().join("bad.rego");
    std::fs::write(&path, "package agentry\ndeny contains if {").unwrap();
    let (code, _, stderr) = setup.run(&["--policy", path.to_str().unwrap(), "hi"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(setup.server.requests().is_empty());
}

#[path = "support/served.rs"]
mod served;

/// Every SSE event of one execute.
fn execute(url: &str, id: &str, body: Value) -> Vec<Value> {
    runtime().block_on(async {
        let response = reqwest::Client::new()
            .post(format!("{url}/v1/sessions/{id}/execute"))
            .bearer_auth("key-acme-guard-0001")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response
            .text()
            .await
            .unwrap()
            .split("\n\n")
            .filter_map(|frame| frame.strip_prefix("data: "))
            .map(|data| serde_json::from_str(data).unwrap())
            .collect()
    })
}

#[test]
fn a_tenants_guardrails_redact_deny_ask_and_trip_on_a_real_server() {
    let setup = Setup::new(vec![
        tool_calls(&[("call_1", "read_file", json!({"path": "customer.txt"}))]),
        text("Ann's record is on file."),
        tool_calls(&[("call_2", "calculator", json!({"expression": "13*3"}))]),
        text("I may not compute that."),
        tool_calls(&[("call_3", "calculator", json!({"expression": "1000*3"}))]),
        text("It is 3000."),
    ]);
    let dir = setup.dir.path();
    std::fs::write(
        dir.join("customer.txt"),
        "Ann Lee <ann.lee@example.com>, card 4111 1111 1111 1111",
    )
    .unwrap();
    // Written beside the configuration, which names it relatively.
    setup.policy();
    let config = dir.join("agentry.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[server]
tools = ["calculator", "read_file"]
root = "{root}"

[server.store]
kind = "sqlite"
path = "sessions.db"

[[server.models]]
name = "guarded"
provider = "openai-compatible"
base_url = "{upstream}/v1"

[[server.tenants]]
name = "acme"
api_keys = ["key-acme-guard-0001"]

[server.tenants.guardrails]
pii = true
policy = "policy.rego"
"#,
            root = dir.display(),
            upstream = setup.server.url(),
        ),
    )
    .unwrap();
    let served = served::Served::start(&config);
    let context = json!({"model": "guarded", "tools": ["calculator", "read_file"]});

    // PII in a tool result: redacted before the model and the client see it.
    let events = execute(
        &served.url,
        "pii-1",
        json!({"message": "Who is Ann?", "context": context}),
    );
    let seen = setup.tool_messages(1)[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!seen.contains("ann.lee@example.com"), "{seen}");
    assert!(!seen.contains("4111 1111"), "{seen}");
    assert!(
        seen.contains("[REDACTED:email]") && seen.contains("[REDACTED:card]"),
        "{seen}"
    );
    let end = events
        .iter()
        .find(|event| event["type"] == "tool_execution_end")
        .unwrap();
    assert!(
        !end["output"].as_str().unwrap().contains("ann.lee"),
        "{end}"
    );
    assert_eq!(events.last().unwrap()["status"], "completed");

    // A policy denial reaches the model as the reason.
    execute(
        &served.url,
        "deny-1",
        json!({"message": "13*3?", "context": context}),
    );
    assert_eq!(
        setup.tool_messages(3)[0]["content"],
        "This call was not run: guardrail `policy` denied it: no arithmetic with 13: it is unlucky"
    );

    // require_approval: the session waits, and the decision runs the call.
    let events = execute(
        &served.url,
        "ask-1",
        json!({"message": "1000*3?", "context": context}),
    );
    let complete = events.last().unwrap();
    assert_eq!(complete["status"], "awaiting_approval", "{complete}");
    assert_eq!(complete["pending_approvals"][0]["id"], "call_3");
    let events = execute(
        &served.url,
        "ask-1",
        json!({"approvals": [{"call_id": "call_3", "approved": true}]}),
    );
    assert_eq!(events.last().unwrap()["status"], "completed");
    assert_eq!(
        setup.tool_messages(5)[0]["content"],
        r#"{"expression":"1000*3","result":3000}"#
    );

    // An input trip: the typed error and its event, and no model call.
    let before = setup.server.requests().len();
    let events = execute(
        &served.url,
        "trip-1",
        json!({"message": "use AKIAIOSFODNN7EXAMPLE", "context": context}),
    );
    let trip = events
        .iter()
        .find(|event| event["type"] == "guardrail_tripped")
        .unwrap();
    assert_eq!(trip["decision"]["guardrail"], "pii");
    assert_eq!(trip["decision"]["stage"], "input");
    let error = events
        .iter()
        .find(|event| event["type"] == "error")
        .unwrap();
    assert_eq!(error["error"]["kind"], "guardrail_tripped", "{error}");
    assert_eq!(
        setup.server.requests().len(),
        before,
        "no model call was made"
    );
}
