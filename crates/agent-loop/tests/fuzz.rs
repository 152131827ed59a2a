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
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Value, json};

/// The cases per property: `AGENTRY_FUZZ_CASES`, or a short default for a plain `cargo test`.
fn config(default: u32) -> Config {
    let cases = std::env::var("AGENTRY_FUZZ_CASES")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default);
    Config {
        cases,
        max_shrink_iters: 2048,
        ..Config::default()
    }
}

/// One edit of a JSON document at a random node.
#[derive(Debug, Clone)]
enum JsonEdit {
    /// Replace the n-th node with another value.
    Replace(prop::sample::Index, Value),
    /// Remove the n-th node from its parent.
    Remove(prop::sample::Index),
    /// Put a key (often a known one) with a value into the n-th node, if an object.
    Insert(prop::sample::Index, String, Value),
}

fn json_edit(
    keys: Vec<&'static str>,
    strings: Vec<&'static str>,
) -> impl Strategy<Value = JsonEdit> {
    let key = prop_oneof![
        prop::sample::select(keys).prop_map(str::to_owned),
        "[a-z_]{1,10}"
    ];
    let value = json_value(strings);
    prop_oneof![
        (any::<prop::sample::Index>(), value.clone()).prop_map(|(at, v)| JsonEdit::Replace(at, v)),
        any::<prop::sample::Index>().prop_map(JsonEdit::Remove),
        (any::<prop::sample::Index>(), key, value)
            .prop_map(|(at, k, v)| JsonEdit::Insert(at, k, v)),
    ]
}

/// A random JSON value, small, with the edge cases decoders trip on.
fn json_value(strings: Vec<&'static str>) -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop::sample::select(vec![
            json!(0),
            json!(-1),
            json!(1),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(1e308),
            json!(-0.5),
            json!(4_294_967_296_u64),
        ]),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(strings).prop_map(|text| Value::String(text.to_owned())),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-z_]{1,10}", inner), 0..4)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
    .boxed()
}

fn pointers(value: &Value, at: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let path = format!("{at}/{}", key.replace('~', "~0").replace('/', "~1"));
                out.push(path.clone());
                pointers(child, &path, out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                let path = format!("{at}/{i}");
                out.push(path.clone());
                pointers(child, &path, out);
            }
        }
        _ => {}
    }
}

fn apply(value: &mut Value, edit: &JsonEdit) {
    let mut all = vec![String::new()];
    pointers(value, "", &mut all);
    match edit {
        JsonEdit::Replace(at, with) => {
            if let Some(node) = value.pointer_mut(at.get(all.as_slice()).as_str()) {
                *node = with.clone();
            }
        }
        JsonEdit::Remove(at) => {
            let path = at.get(all.as_slice()).as_str();
            let Some((parent, last)) = path.rsplit_once('/') else {
                return;
            };
            match value.pointer_mut(parent) {
                Some(Value::Object(map)) => {
                    map.remove(&last.replace("~1", "/").replace("~0", "~"));
                }
                Some(Value::Array(items)) => {
                    if let Ok(i) = last.parse::<usize>()
                        && i < items.len()
                    {
                        items.remove(i);
                    }
                }
                _ => {}
            }
        }
        JsonEdit::Insert(at, key, with) => {
            if let Some(Value::Object(map)) = value.pointer_mut(at.get(all.as_slice()).as_str()) {
                map.insert(key.clone(), with.clone());
            }
        }
    }
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
