//! JSON Schema → the subset of OpenAPI 3.0 schema Gemini's `parameters` accepts.
//!
//! Gemini's `Schema` object knows `type`, `format`, `title`, `description`, `nullable`,
//! `enum` (strings only), `items`, `minItems`, `maxItems`, `properties`, `required`,
//! `minProperties`, `maxProperties`, `minLength`, `maxLength`, `pattern`, `example`, `default`,
//! `anyOf`, `propertyOrdering`, `minimum` and `maximum`, and rejects the request when it sees
//! anything else. The rewrite keeps those, translates what has an equivalent and drops the
//! rest:
//!
//! - local `$ref`s (`#/$defs/…`, `#/definitions/…`) are inlined; a reference back to a type
//!   being expanded (a recursive type) becomes an untyped schema, so a tree type is expanded
//!   one level rather than without end;
//! - `allOf` members are merged into one schema (properties and `required` united);
//! - `oneOf` becomes `anyOf`; a `{"type": "null"}` member of `anyOf` becomes `nullable: true`,
//!   and an `anyOf` left with one member is merged into its parent;
//! - `type: ["T", "null"]` becomes `type: T, nullable: true`; several non-null types become an
//!   `anyOf`; type names are upper-cased (`STRING`, `OBJECT`, …), Gemini's spelling;
//! - `const` (a string) becomes a one-value `enum`; an `enum` with values that are not all
//!   strings is dropped (Gemini's enums are strings);
//! - `format` is kept where Gemini accepts it (`enum`, `date-time` for strings; `float`,
//!   `double`, `int32`, `int64` for numbers) and dropped elsewhere;
//! - `required` names without a property are dropped;
//! - tuple-style `items` (an array) is dropped.

use serde_json::{Map, Value};

/// How deep nesting is followed before the schema is cut off (a guard against pathological
/// input; real tool schemas are far shallower).
const MAX_DEPTH: usize = 32;

/// Keywords copied as they are.
const COPIED: [&str; 14] = [
    "title",
    "description",
    "nullable",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "default",
    "minimum",
    "maximum",
];

/// `schema` rewritten for Gemini.
pub(super) fn to_gemini_schema(schema: &Value) -> Value {
    let mut converted = Value::Object(convert(schema, schema, &mut Vec::new(), 0));
    prune_required(&mut converted);
    converted
}

/// Converts one schema node. `refs` holds the `$ref`s being expanded on the way here, so a
/// recursive type is expanded once and then cut off instead of growing without end.
fn convert(
    schema: &Value,
    root: &Value,
    refs: &mut Vec<String>,
    depth: usize,
) -> Map<String, Value> {
    let Value::Object(input) = schema else {
        // `true` (anything) and malformed schemas: no constraint.
        return Map::new();
    };
    if depth > MAX_DEPTH {
        return Map::new();
    }

    if let Some(reference) = input.get("$ref").and_then(Value::as_str) {
        let target = resolve(root, reference)
            .and_then(Value::as_object)
            .filter(|_| !refs.iter().any(|seen| seen == reference));
        // A dangling or cyclic reference keeps only the keywords beside it.
        let mut merged = target.cloned().unwrap_or_default();
        // Keywords next to the `$ref` (a description) refine the target.
        for (key, value) in input {
            if key != "$ref" {
                merged.insert(key.clone(), value.clone());
            }
        }
        if target.is_some() {
            refs.push(reference.to_owned());
        }
        let out = convert(&Value::Object(merged), root, refs, depth + 1);
        if target.is_some() {
            refs.pop();
        }
        return out;
    }

    if let Some(Value::Array(members)) = input.get("allOf") {
        let rest: Map<String, Value> = input
            .iter()
            .filter(|(key, _)| key.as_str() != "allOf")
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        let mut out = convert(&Value::Object(rest), root, refs, depth + 1);
        for member in members {
            let member = convert(member, root, refs, depth + 1);
            merge_into(&mut out, member);
        }
        return out;
    }

    let mut out = Map::new();
    let mut nullable = false;

    match input.get("type") {
        Some(Value::String(name)) if name == "null" => nullable = true,
        Some(Value::String(name)) => {
            out.insert("type".into(), type_name(name));
        }
        Some(Value::Array(names)) => {
            let names: Vec<&str> = names.iter().filter_map(Value::as_str).collect();
            nullable |= names.contains(&"null");
            let real: Vec<&str> = names.into_iter().filter(|name| *name != "null").collect();
            match real.as_slice() {
                [] => {}
                [one] => {
                    out.insert("type".into(), type_name(one));
                }
                many => {
                    let members = many
                        .iter()
                        .map(|name| {
                            let mut member = Map::new();
                            member.insert("type".into(), type_name(name));
                            Value::Object(member)
                        })
                        .collect();
                    out.insert("anyOf".into(), Value::Array(members));
                }
            }
        }
        _ => {}
    }

    for key in COPIED {
        if let Some(value) = input.get(key) {
            out.insert(key.into(), value.clone());
        }
    }
    if let Some(Value::Array(order)) = input.get("propertyOrdering") {
        out.insert("propertyOrdering".into(), Value::Array(order.clone()));
    }

    let strings = |values: &[Value]| values.iter().all(Value::is_string);
    match (input.get("enum"), input.get("const")) {
        (Some(Value::Array(values)), _) if strings(values) => {
            out.insert("enum".into(), Value::Array(values.clone()));
        }
        (None, Some(Value::String(value))) => {
            out.insert(
                "enum".into(),
                Value::Array(vec![Value::String(value.clone())]),
            );
        }
        _ => {}
    }
    if out.contains_key("enum") && !out.contains_key("type") {
        out.insert("type".into(), Value::String("STRING".into()));
    }

    if let Some(Value::String(format)) = input.get("format") {
        let allowed = match out.get("type").and_then(Value::as_str) {
            Some("STRING") => matches!(format.as_str(), "enum" | "date-time"),
            Some("NUMBER") => matches!(format.as_str(), "float" | "double"),
            Some("INTEGER") => matches!(format.as_str(), "int32" | "int64"),
            _ => false,
        };
        if allowed {
            out.insert("format".into(), Value::String(format.clone()));
        }
    }

    if let Some(Value::Object(properties)) = input.get("properties") {
        let converted: Map<String, Value> = properties
            .iter()
            .map(|(name, property)| {
                let property = convert(property, root, refs, depth + 1);
                (name.clone(), Value::Object(property))
            })
            .collect();
        out.insert("properties".into(), Value::Object(converted));
    }
    if let Some(Value::Array(required)) = input.get("required") {
        let names: Vec<Value> = required
            .iter()
            .filter(|name| name.is_string())
            .cloned()
            .collect();
        out.insert("required".into(), Value::Array(names));
    }

    if let Some(items @ Value::Object(_)) = input.get("items") {
        let items = convert(items, root, refs, depth + 1);
        out.insert("items".into(), Value::Object(items));
    }

    let alternatives = input
        .get("anyOf")
        .or_else(|| input.get("oneOf"))
        .and_then(Value::as_array);
    if let Some(alternatives) = alternatives {
        let mut members = Vec::with_capacity(alternatives.len());
        for alternative in alternatives {
            let member = convert(alternative, root, refs, depth + 1);
            if is_null(&member) {
                nullable = true;
            } else {
                members.push(member);
            }
        }
        if members.len() == 1 && !out.contains_key("type") && !out.contains_key("anyOf") {
            // `anyOf: [T, null]`, the usual spelling of an optional value: T itself, with the
            // parent's own keywords (its description) taking precedence.
            for (key, value) in members.remove(0) {
                out.entry(key).or_insert(value);
            }
        } else if !members.is_empty() {
            out.insert(
                "anyOf".into(),
                Value::Array(members.into_iter().map(Value::Object).collect()),
            );
        }
    }

    if nullable {
        out.insert("nullable".into(), Value::Bool(true));
    }
    out
}

/// A converted `{"type": "null"}`: only `nullable` (and perhaps a description) is left.
fn is_null(member: &Map<String, Value>) -> bool {
    member.get("nullable") == Some(&Value::Bool(true))
        && member
            .keys()
            .all(|key| matches!(key.as_str(), "nullable" | "description" | "title"))
}

/// Merges an `allOf` member into `target`: properties and `required` are united, other
/// keywords are taken where `target` has none.
fn merge_into(target: &mut Map<String, Value>, member: Map<String, Value>) {
    for (key, value) in member {
        match (key.as_str(), target.get_mut(&key), value) {
            ("properties", Some(Value::Object(mine)), Value::Object(theirs)) => {
                for (name, property) in theirs {
                    mine.entry(name).or_insert(property);
                }
            }
            ("required", Some(Value::Array(mine)), Value::Array(theirs)) => {
                for name in theirs {
                    if !mine.contains(&name) {
                        mine.push(name);
                    }
                }
            }
            (_, Some(_), _) => {}
            (_, None, value) => {
                target.insert(key, value);
            }
        }
    }
}

/// Drops `required` names that have no property (Gemini rejects them), everywhere.
fn prune_required(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    let known: Option<Vec<String>> = match map.get("properties") {
        Some(Value::Object(properties)) => Some(properties.keys().cloned().collect()),
        _ => None,
    };
    if let Some(Value::Array(required)) = map.get_mut("required") {
        required.retain(|name| {
            name.as_str().is_some_and(|name| {
                known
                    .as_ref()
                    .is_some_and(|known| known.iter().any(|k| k == name))
            })
        });
    }
    if map
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
    {
        map.remove("required");
    }
    if let Some(Value::Object(properties)) = map.get_mut("properties") {
        properties.values_mut().for_each(prune_required);
    }
    if let Some(items) = map.get_mut("items") {
        prune_required(items);
    }
    if let Some(Value::Array(members)) = map.get_mut("anyOf") {
        members.iter_mut().for_each(prune_required);
    }
}

/// The target of a local JSON pointer reference (`#/$defs/Name`).
fn resolve<'r>(root: &'r Value, reference: &str) -> Option<&'r Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    root.pointer(pointer)
}

fn type_name(name: &str) -> Value {
    Value::String(name.to_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn rejected_keywords_are_dropped_and_types_upper_cased() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "city": {"type": "string", "description": "City name", "minLength": 1,
                         "format": "hostname"},
                "days": {"type": "integer", "exclusiveMinimum": 0, "maximum": 14,
                         "format": "int32", "multipleOf": 1},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                "when": {"type": "string", "format": "date-time"}
            },
            "required": ["city", "ghost"]
        });
        assert_eq!(
            to_gemini_schema(&schema),
            json!({
                "type": "OBJECT",
                "properties": {
                    "city": {"type": "STRING", "description": "City name", "minLength": 1},
                    "days": {"type": "INTEGER", "maximum": 14, "format": "int32"},
                    "tags": {"type": "ARRAY", "items": {"type": "STRING"}},
                    "when": {"type": "STRING", "format": "date-time"}
                },
                "required": ["city"]
            })
        );
    }

    #[test]
    fn optional_values_become_nullable() {
        let schema = json!({
            "type": "object",
            "properties": {
                "a": {"type": ["string", "null"]},
                "b": {"anyOf": [{"type": "integer"}, {"type": "null"}], "description": "B"},
                "c": {"oneOf": [{"type": "string"}, {"type": "number"}]},
                "d": {"type": ["string", "integer"]},
                "e": {"const": "fixed"},
                "f": {"enum": [1, 2, 3], "type": "integer"}
            }
        });
        assert_eq!(
            to_gemini_schema(&schema),
            json!({
                "type": "OBJECT",
                "properties": {
                    "a": {"type": "STRING", "nullable": true},
                    "b": {"type": "INTEGER", "description": "B", "nullable": true},
                    "c": {"anyOf": [{"type": "STRING"}, {"type": "NUMBER"}]},
                    "d": {"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]},
                    "e": {"type": "STRING", "enum": ["fixed"]},
                    "f": {"type": "INTEGER"}
                }
            })
        );
    }

    #[test]
    fn refs_and_all_of_are_inlined() {
        let schema = json!({
            "type": "object",
            "$defs": {
                "Point": {"type": "object", "properties": {"x": {"type": "number"}},
                          "required": ["x"]},
                "Tree": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Tree"}}}
            },
            "properties": {
                "at": {"$ref": "#/$defs/Point", "description": "Where"},
                "both": {"allOf": [{"$ref": "#/$defs/Point"},
                                   {"properties": {"y": {"type": "number"}}, "required": ["y"]}]},
                "tree": {"$ref": "#/$defs/Tree"},
                "dangling": {"$ref": "#/$defs/Nothing", "type": "string"}
            }
        });
        let converted = to_gemini_schema(&schema);
        assert_eq!(
            converted["properties"]["at"],
            json!({"type": "OBJECT", "description": "Where",
                   "properties": {"x": {"type": "NUMBER"}}, "required": ["x"]})
        );
        assert_eq!(
            converted["properties"]["both"],
            json!({"type": "OBJECT",
                   "properties": {"x": {"type": "NUMBER"}, "y": {"type": "NUMBER"}},
                   "required": ["x", "y"]})
        );
        assert_eq!(
            converted["properties"]["dangling"],
            json!({"type": "STRING"})
        );
        assert!(converted.get("$defs").is_none());
        // A recursive type is expanded once, then cut off.
        assert_eq!(
            converted["properties"]["tree"],
            json!({"type": "OBJECT", "properties": {"child": {}}})
        );
    }

    #[test]
    fn non_schemas_do_not_panic() {
        assert_eq!(to_gemini_schema(&json!(true)), json!({}));
        assert_eq!(
            to_gemini_schema(&json!({"type": 5, "items": [1]})),
            json!({})
        );
        assert_eq!(
            to_gemini_schema(&json!({"$ref": "#"})),
            json!({}),
            "a schema that refers to itself"
        );
    }
}
