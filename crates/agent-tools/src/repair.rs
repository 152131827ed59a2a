//! Lenient repair: fixing the usual model mistakes in tool arguments, guided by the schema.

use std::fmt;

use serde_json::{Map, Number, Value};

/// What a repair changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RepairKind {
    /// A JSON object or array sent as a string was parsed.
    ParsedJsonString,
    /// A number sent as a string (`"5"`) became a number.
    StringToNumber,
    /// A boolean sent as a string (`"true"`) became a boolean.
    StringToBoolean,
    /// A `null` for an optional argument that does not accept `null` was dropped.
    DroppedNull,
}

/// One repair: where, what kind, and the value before and after.
#[derive(Debug, Clone, PartialEq)]
pub struct Repair {
    /// JSON Pointer to the repaired value (`""` is the whole argument object).
    pub path: String,
    /// What was done.
    pub kind: RepairKind,
    /// The value the model sent.
    pub before: Value,
    /// The value after the repair; `None` when it was dropped.
    pub after: Option<Value>,
}

impl fmt::Display for Repair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str("the arguments: ")?;
        } else {
            write!(f, "argument `{}`: ", self.path)?;
        }
        match (self.kind, &self.after) {
            (RepairKind::ParsedJsonString, Some(after)) => write!(
                f,
                "parsed the JSON text in a string into {}",
                if after.is_array() {
                    "an array"
                } else {
                    "an object"
                }
            ),
            (RepairKind::DroppedNull, _) => {
                f.write_str("dropped a null for an optional argument that does not accept null")
            }
            (_, Some(after)) => {
                let noun = if after.is_boolean() {
                    "boolean"
                } else {
                    "number"
                };
                write!(
                    f,
                    "converted the string {} to the {noun} {after}",
                    self.before
                )
            }
            (_, None) => write!(f, "removed {}", self.before),
        }
    }
}

// JSON types as bits, so a schema's `type` (one name or a list, possibly spread over
// `anyOf`/`oneOf` branches) is a cheap set.
const NULL: u8 = 1;
const BOOLEAN: u8 = 1 << 1;
const INTEGER: u8 = 1 << 2;
const NUMBER: u8 = 1 << 3;
const STRING: u8 = 1 << 4;
const ARRAY: u8 = 1 << 5;
const OBJECT: u8 = 1 << 6;

fn type_bit(name: &str) -> u8 {
    match name {
        "null" => NULL,
        "boolean" => BOOLEAN,
        "integer" => INTEGER,
        "number" => NUMBER,
        "string" => STRING,
        "array" => ARRAY,
        "object" => OBJECT,
        _ => 0,
    }
}

/// The types a schema allows; 0 means the schema does not say.
fn types_of(schema: &Value) -> u8 {
    let mut types = match schema.get("type") {
        Some(Value::String(name)) => type_bit(name),
        Some(Value::Array(names)) => names
            .iter()
            .filter_map(Value::as_str)
            .fold(0, |acc, name| acc | type_bit(name)),
        _ => 0,
    };
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = schema.get(key) {
            types |= branches
                .iter()
                .fold(0, |acc, branch| acc | types_of(branch));
        }
    }
    types
}

/// The schema (or the first `anyOf`/`oneOf`/`allOf` branch) that holds `keyword`.
fn branch_with<'s>(schema: &'s Value, keyword: &str) -> Option<&'s Value> {
    if schema.get(keyword).is_some() {
        return Some(schema);
    }
    ["anyOf", "oneOf", "allOf"]
        .iter()
        .filter_map(|key| schema.get(*key).and_then(Value::as_array))
        .flatten()
        .find_map(|branch| branch_with(branch, keyword))
}

fn push_pointer(path: &str, segment: &str) -> String {
    let mut out = String::with_capacity(path.len() + segment.len() + 1);
    out.push_str(path);
    out.push('/');
    for c in segment.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
    out
}

/// Repairs `value` in place where `schema` shows what the model meant, and reports every
/// change.
///
/// Repairs: a string holding a JSON object or array where the schema wants one (parsed), a
/// string holding a number where it wants a number or integer, `"true"`/`"false"` where it
/// wants a boolean, and a `null` for an optional property whose schema does not allow
/// `null` (dropped). Objects and arrays are walked recursively through `properties` and
/// `items`. Nothing is guessed where the schema says nothing, and a value the schema already
/// accepts is left alone.
pub fn repair(schema: &Value, value: &mut Value) -> Vec<Repair> {
    let mut repairs = Vec::new();
    repair_at(schema, value, "", &mut repairs);
    repairs
}

fn repair_at(schema: &Value, value: &mut Value, path: &str, repairs: &mut Vec<Repair>) {
    let types = types_of(schema);
    if let Value::String(text) = value
        && types != 0
        && types & STRING == 0
        && let Some((fixed, kind)) = coerce_string(text, types)
    {
        let before = std::mem::replace(value, fixed);
        repairs.push(Repair {
            path: path.to_owned(),
            kind,
            before,
            after: Some(value.clone()),
        });
    }
    match value {
        Value::Object(map) => {
            if let Some(object_schema) = branch_with(schema, "properties") {
                repair_object(object_schema, map, path, repairs);
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = branch_with(schema, "items").and_then(|s| s.get("items")) {
                for (index, item) in items.iter_mut().enumerate() {
                    let item_path = push_pointer(path, &index.to_string());
                    repair_at(item_schema, item, &item_path, repairs);
                }
            }
        }
        _ => {}
    }
}

fn repair_object(
    schema: &Value,
    map: &mut Map<String, Value>,
    path: &str,
    repairs: &mut Vec<Repair>,
) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required = |key: &str| {
        schema
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|names| names.iter().any(|name| name.as_str() == Some(key)))
    };
    map.retain(|key, child| {
        let drop = child.is_null()
            && !required(key)
            && properties.get(key).is_some_and(|property| {
                let types = types_of(property);
                types != 0 && types & NULL == 0
            });
        if drop {
            repairs.push(Repair {
                path: push_pointer(path, key),
                kind: RepairKind::DroppedNull,
                before: Value::Null,
                after: None,
            });
        }
        !drop
    });
    for (key, child) in map.iter_mut() {
        if let Some(property) = properties.get(key) {
            repair_at(property, child, &push_pointer(path, key), repairs);
        }
    }
}

fn coerce_string(text: &str, types: u8) -> Option<(Value, RepairKind)> {
    let trimmed = text.trim();
    if types & (OBJECT | ARRAY) != 0
        && let Ok(parsed) = serde_json::from_str::<Value>(trimmed)
    {
        let wanted = match &parsed {
            Value::Object(_) => types & OBJECT != 0,
            Value::Array(_) => types & ARRAY != 0,
            _ => false,
        };
        if wanted {
            return Some((parsed, RepairKind::ParsedJsonString));
        }
    }
    if types & (INTEGER | NUMBER) != 0 {
        if let Ok(n) = trimmed.parse::<i64>() {
            return Some((Value::from(n), RepairKind::StringToNumber));
        }
        if let Ok(n) = trimmed.parse::<u64>() {
            return Some((Value::from(n), RepairKind::StringToNumber));
        }
        if types & NUMBER != 0
            && let Some(n) = trimmed.parse::<f64>().ok().and_then(Number::from_f64)
        {
            return Some((Value::Number(n), RepairKind::StringToNumber));
        }
    }
    if types & BOOLEAN != 0 {
        if trimmed.eq_ignore_ascii_case("true") {
            return Some((Value::Bool(true), RepairKind::StringToBoolean));
        }
        if trimmed.eq_ignore_ascii_case("false") {
            return Some((Value::Bool(false), RepairKind::StringToBoolean));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "ratio": {"type": "number"},
                "metric": {"type": "boolean"},
                "note": {"type": "string"},
                "maybe": {"type": ["string", "null"]},
                "filter": {
                    "type": "object",
                    "properties": {"max": {"type": "integer"}}
                },
                "tags": {"type": "array", "items": {"type": "integer"}},
                "pick": {"anyOf": [{"type": "integer"}, {"type": "null"}]}
            },
            "required": ["city", "days"]
        })
    }

    #[test]
    fn repairs_scalars_by_schema_type() {
        let mut args =
            json!({"city": "5", "days": "3", "ratio": "0.5", "metric": "TRUE", "pick": "7"});
        let repairs = repair(&schema(), &mut args);
        assert_eq!(
            args,
            json!({"city": "5", "days": 3, "ratio": 0.5, "metric": true, "pick": 7})
        );
        let paths: Vec<_> = repairs.iter().map(|r| (r.path.as_str(), r.kind)).collect();
        assert_eq!(
            paths,
            [
                ("/days", RepairKind::StringToNumber),
                ("/metric", RepairKind::StringToBoolean),
                ("/pick", RepairKind::StringToNumber),
                ("/ratio", RepairKind::StringToNumber),
            ]
        );
        assert_eq!(
            repairs[0].to_string(),
            "argument `/days`: converted the string \"3\" to the number 3"
        );
    }

    #[test]
    fn parses_stringified_json_and_recurses_into_it() {
        let mut args =
            json!({"city": "x", "days": 1, "filter": "{\"max\": \"9\"}", "tags": "[1, \"2\"]"});
        let repairs = repair(&schema(), &mut args);
        assert_eq!(args["filter"], json!({"max": 9}));
        assert_eq!(args["tags"], json!([1, 2]));
        let paths: Vec<_> = repairs.iter().map(|r| r.path.as_str()).collect();
        assert_eq!(paths, ["/filter", "/filter/max", "/tags", "/tags/1"]);
        assert_eq!(
            repairs[0].to_string(),
            "argument `/filter`: parsed the JSON text in a string into an object"
        );
    }

    #[test]
    fn parses_a_whole_argument_object_sent_as_a_string() {
        let mut args = json!("{\"city\": \"Oslo\", \"days\": 2}");
        let repairs = repair(&schema(), &mut args);
        assert_eq!(args, json!({"city": "Oslo", "days": 2}));
        assert_eq!(repairs.len(), 1);
        assert_eq!(repairs[0].path, "");
    }

    #[test]
    fn drops_nulls_only_for_optional_non_nullable_properties() {
        let mut args =
            json!({"city": null, "days": 1, "note": null, "maybe": null, "unknown": null});
        let repairs = repair(&schema(), &mut args);
        assert_eq!(
            args,
            json!({"city": null, "days": 1, "maybe": null, "unknown": null})
        );
        assert_eq!(repairs.len(), 1);
        assert_eq!(repairs[0].kind, RepairKind::DroppedNull);
        assert_eq!(repairs[0].path, "/note");
        assert_eq!(repairs[0].after, None);
    }

    #[test]
    fn leaves_unrepairable_values_alone() {
        let mut args = json!({"city": "x", "days": "three", "metric": "yes", "filter": "[1]"});
        let before = args.clone();
        assert!(repair(&schema(), &mut args).is_empty());
        assert_eq!(args, before);
    }

    #[test]
    fn pointers_escape_special_characters() {
        assert_eq!(push_pointer("/a", "b/c~d"), "/a/b~1c~0d");
    }
}
