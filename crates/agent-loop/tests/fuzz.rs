//! Fuzzing session loading: `Session::from_json` on arbitrary text and on the stored v1
//! session (and its format-2 rewrite) mutated at any JSON node. A session that loads must
//! round-trip, and a run continued from it (a user message, or results for its pending calls)
//! ends in a result or a typed error, never a panic. Cases per property: `AGENTRY_FUZZ_CASES`
//! (see docs/reliability.md).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{Options, Session, SessionInput, execute};
use agent_tools::{Registry, Tool};
use agent_types::ToolResult;
use agentry_fuzz_support::{JsonEdit, apply, config, edge_numbers};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Edits drawing keys from `keys` and strings from `strings`.
fn json_edit(
    keys: Vec<&'static str>,
    strings: Vec<&'static str>,
) -> impl Strategy<Value = JsonEdit> {
    let value =
        agentry_fuzz_support::json_value(edge_numbers(), strings, ".{0,12}", "[a-z_]{1,10}");
    agentry_fuzz_support::json_edit(keys, "[a-z_]{1,10}", value)
}

const KEYS: [&str; 24] = [
    "format",
    "id",
    "status",
    "model",
    "system",
    "messages",
    "role",
    "content",
    "type",
    "text",
    "tool_call_id",
    "name",
    "arguments",
    "pending_tool_calls",
    "suspended",
    "iterations",
    "tokens",
    "cost_usd",
    "last_call",
    "times",
    "usage",
    "approval",
    "remote_tools",
    "blocks",
];

const STRINGS: [&str; 20] = [
    "",
    "idle",
    "completed",
    "awaiting_tool_execution",
    "awaiting_approval",
    "failed",
    "user",
    "assistant",
    "tool",
    "system",
    "text",
    "tool_call",
    "image",
    "thinking",
    "call_p",
    "call_w",
    "approve_payment",
    "get_weather",
    "base64",
    "\u{0}",
];

/// The stored v1 session and its format-2 rewrite.
fn seeds() -> &'static [Value; 2] {
    static SEEDS: OnceLock<[Value; 2]> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/sessions/v1/session.json"
        ))
        .unwrap();
        let v2 = Session::from_json(&text).unwrap().to_json().unwrap();
        [
            serde_json::from_str(&text).unwrap(),
            serde_json::from_str(&v2).unwrap(),
        ]
    })
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    })
}

fn options() -> Options {
    let mut registry = Registry::new();
    registry
        .register(Tool::remote(
            "approve_payment",
            "Asks a human.",
            json!({"type": "object", "properties": {"amount_usd": {"type": "number"}}}),
        ))
        .unwrap();
    Options::auto()
        .with_tools(registry)
        .with_max_tool_iterations(3)
}

/// Loads `text`; if it loads, checks the round trip and continues a run from it.
fn check(text: &str) -> Result<(), TestCaseError> {
    let Ok(session) = Session::from_json(text) else {
        return Ok(());
    };
    let written = session
        .to_json()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let again = Session::from_json(&written).map_err(|e| {
        TestCaseError::fail(format!("a loaded session does not reload: {e}\n{written}"))
    })?;
    prop_assert_eq!(&again.to_json().unwrap(), &written);
    let results: Vec<ToolResult> = session
        .pending_tool_calls
        .iter()
        .map(|call| ToolResult::ok(call.id.clone(), call.name.clone(), "ok"))
        .collect();
    for input in [SessionInput::from("Continue."), SessionInput::from(results)] {
        let mut session = session.clone();
        let backend = ScriptedBackend::new([ScriptedTurn::text("Done.")]);
        let _ = runtime().block_on(execute(&mut session, input, &backend, &options()));
        // Whatever happened, the session is still one that saves and reloads.
        let written = session
            .to_json()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(Session::from_json(&written).is_ok(), "{}", written);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    /// Arbitrary text as a session.
    #[test]
    fn fuzz_session_json_arbitrary(text in "(\\PC|[{}\\[\\]\":,])*") {
        check(&text)?;
    }

    /// The stored sessions mutated at any node: loads and continues, or a typed error.
    #[test]
    fn fuzz_session_json_mutated(
        seed in 0usize..2,
        edits in prop::collection::vec(json_edit(KEYS.to_vec(), STRINGS.to_vec()), 1..6),
    ) {
        let mut value = seeds()[seed].clone();
        for edit in &edits {
            apply(&mut value, edit);
        }
        check(&value.to_string())?;
    }
}
