//! Deriving argument schemas from Rust types.

use schemars::JsonSchema;
use schemars::generate::{Contract, SchemaSettings};
use serde_json::Value;

/// `format` values schemars emits for Rust number types; they are not JSON Schema formats
/// and some providers reject unknown formats, while `minimum`/`maximum` already say enough.
const RUST_NUMBER_FORMATS: &[&str] = &[
    "int", "int8", "int16", "int32", "int64", "int128", "uint", "uint8", "uint16", "uint32",
    "uint64", "uint128", "float", "double",
];

/// The JSON Schema of `T`'s deserialized form, shaped for tool parameters.
///
/// The dialect is a subset of JSON Schema draft 2020-12: subschemas are inlined (no `$ref` into
/// `$defs`, which several providers reject), and the root `$schema` and `title` are dropped
/// as noise. Doc comments become `description`s, which the model reads. Only a recursive type
/// cannot be inlined; its schema keeps a `$defs` entry for the recursive part.
pub fn schema_for<T: JsonSchema>() -> Value {
    schema_with::<T>(Contract::Deserialize)
}

/// The JSON Schema of `T`'s serialized form (a tool's result), in the same dialect as
/// [`schema_for`].
pub(crate) fn output_schema_for<T: JsonSchema>() -> Value {
    schema_with::<T>(Contract::Serialize)
}

fn schema_with<T: JsonSchema>(contract: Contract) -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|settings| {
            settings.inline_subschemas = true;
            settings.meta_schema = None;
            settings.contract = contract;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(root) = &mut schema {
        root.remove("title");
        root.remove("$schema");
    }
    strip_number_formats(&mut schema);
    schema
}

fn strip_number_formats(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            let rust_format = map
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|format| RUST_NUMBER_FORMATS.contains(&format));
            if rust_format {
                map.remove("format");
            }
            for (key, child) in map.iter_mut() {
                // `enum`/`const`/`default`/`examples` hold data, not subschemas.
                if !matches!(key.as_str(), "enum" | "const" | "default" | "examples") {
                    strip_number_formats(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_number_formats),
        _ => {}
    }
}

/// The nesting depth of a JSON value (a scalar is 1), counted without recursion so a hostile
/// schema cannot overflow the stack. Callers bound schemas they did not write with it before
/// compiling them.
pub fn json_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 1usize)];
    while let Some((value, level)) = stack.pop() {
        deepest = deepest.max(level);
        match value {
            Value::Object(map) => stack.extend(map.values().map(|v| (v, level + 1))),
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, level + 1))),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    struct Inner {
        n: u32,
    }

    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    struct Outer {
        inner: Inner,
        list: Vec<Inner>,
    }

    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    struct Tree {
        children: Vec<Tree>,
    }

    fn contains_key(value: &Value, key: &str) -> bool {
        match value {
            Value::Object(map) => {
                map.contains_key(key) || map.values().any(|v| contains_key(v, key))
            }
            Value::Array(items) => items.iter().any(|v| contains_key(v, key)),
            _ => false,
        }
    }

    #[test]
    fn nested_types_are_inlined_without_noise() {
        let schema = schema_for::<Outer>();
        assert!(!contains_key(&schema, "$ref"));
        assert!(!contains_key(&schema, "$defs"));
        assert!(schema.get("$schema").is_none());
        assert!(schema.get("title").is_none());
        assert!(!contains_key(&schema, "format"));
        assert_eq!(
            schema["properties"]["inner"]["properties"]["n"]["type"],
            "integer"
        );
        assert_eq!(schema["properties"]["list"]["items"]["type"], "object");
    }

    #[test]
    fn recursive_types_keep_a_definition() {
        let schema = schema_for::<Tree>();
        assert_eq!(schema["type"], "object");
        assert!(contains_key(&schema, "$ref"));
    }

    #[test]
    fn json_depth_counts_nesting_without_recursion() {
        assert_eq!(json_depth(&serde_json::json!(1)), 1);
        assert_eq!(json_depth(&serde_json::json!({"a": [1, {"b": 2}]})), 4);
    }
}
