//! What the workspace's fuzz properties share (a dev-dependency only): the case count read
//! from `AGENTRY_FUZZ_CASES`, a generator of small JSON values with the edge cases decoders
//! trip on, and edits of a JSON document at a random node. Each crate's fuzz tests pass their
//! own vocabulary (keys, strings) so mutations stay close to what their parsers read.
//!
//! ```
//! use agentry_fuzz_support::{apply, edge_numbers, json_edit, json_value};
//! use proptest::strategy::{Strategy, ValueTree};
//! use proptest::test_runner::TestRunner;
//! use serde_json::json;
//!
//! let values = json_value(edge_numbers(), vec!["user", "tool"], ".{0,4}", "[a-z]{1,4}");
//! let edits = json_edit(vec!["role", "content"], "[a-z]{1,4}", values);
//! let mut runner = TestRunner::deterministic();
//! let mut document = json!({"role": "user", "content": [{"type": "text"}]});
//! for _ in 0..32 {
//!     let edit = edits.new_tree(&mut runner).unwrap().current();
//!     apply(&mut document, &edit);
//! }
//! // Whatever the edits did, the document is still JSON that serializes.
//! assert!(serde_json::to_string(&document).is_ok());
//! ```

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Value, json};

/// The cases per property: `AGENTRY_FUZZ_CASES` (set by `cargo xtask fuzz` for a long
/// campaign and by `cargo xtask ci` for a short one), or `default` for a plain `cargo test`.
pub fn config(default: u32) -> Config {
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

/// Numbers at the edges of the integer and float ranges decoders convert to.
pub fn edge_numbers() -> Vec<Value> {
    vec![
        json!(0),
        json!(-1),
        json!(1),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(1e308),
        json!(-0.5),
        json!(4_294_967_296_u64),
    ]
}

/// A random JSON value up to three levels deep: `null`, booleans, one of `numbers`, any `i64`,
/// one of `strings`, text matching `text`; arrays and objects (keys matching `key`) of them.
pub fn json_value(
    numbers: Vec<Value>,
    strings: Vec<&'static str>,
    text: &'static str,
    key: &'static str,
) -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop::sample::select(numbers),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(strings).prop_map(|text| Value::String(text.to_owned())),
        text.prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key, inner), 0..4)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
    .boxed()
}

/// One edit of a JSON document at a random node (nodes counted root first, depth first).
#[derive(Debug, Clone)]
pub enum JsonEdit {
    /// Replace the n-th node with another value.
    Replace(prop::sample::Index, Value),
    /// Remove the n-th node from its parent.
    Remove(prop::sample::Index),
    /// Put a key (often a known one) with a value into the n-th node, if an object.
    Insert(prop::sample::Index, String, Value),
}

/// Edits whose inserted keys are one of `keys` or match `key`, and whose values come from
/// `value`.
pub fn json_edit(
    keys: Vec<&'static str>,
    key: &'static str,
    value: BoxedStrategy<Value>,
) -> BoxedStrategy<JsonEdit> {
    let key = prop_oneof![prop::sample::select(keys).prop_map(str::to_owned), key];
    prop_oneof![
        (any::<prop::sample::Index>(), value.clone()).prop_map(|(at, v)| JsonEdit::Replace(at, v)),
        any::<prop::sample::Index>().prop_map(JsonEdit::Remove),
        (any::<prop::sample::Index>(), key, value)
            .prop_map(|(at, k, v)| JsonEdit::Insert(at, k, v)),
    ]
    .boxed()
}

/// JSON pointers of every node below `at`, depth first.
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

/// Applies `edit` to `value` (an edit that does not fit the node it lands on does nothing).
pub fn apply(value: &mut Value, edit: &JsonEdit) {
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
