//! JSON Schema helpers shared by the layers that speak OpenAI's strict mode: the loop's
//! structured output and the adapters' strict tools.

use serde_json::{Map, Value};

/// OpenAI's strict-mode form of a schema: on every object, every property is listed in
/// `required` and `additionalProperties` is `false`; a property that was optional becomes
/// nullable (`null` added to its `type`, or the schema wrapped in `anyOf` with
/// `{"type": "null"}`), so the model says "absent" with `null`. [`drop_optional_nulls`] removes
/// those nulls again before an answer or arguments are validated against the original schema.
///
/// Keywords strict mode does not support (some `format`s, `minLength` and the like on older
/// models) are left as they are: the provider reports them.
pub fn strict_schema(schema: &Value) -> Value {
    let mut strict = schema.clone();
    make_strict(&mut strict);
    strict
}

fn make_strict(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    for key in ["items", "not", "additionalItems", "contains"] {
        if let Some(child) = map.get_mut(key) {
            make_strict(child);
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(children)) = map.get_mut(key) {
            children.iter_mut().for_each(make_strict);
        }
    }
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = map.get_mut(key) {
            defs.values_mut().for_each(make_strict);
        }
    }
    let is_object =
        map.get("type").and_then(Value::as_str) == Some("object") || map.contains_key("properties");
    if !is_object {
        return;
    }
    let required: Vec<String> = map
        .get("required")
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let mut all = Vec::new();
    if let Some(Value::Object(properties)) = map.get_mut("properties") {
        for (name, property) in properties.iter_mut() {
            make_strict(property);
            if !required.iter().any(|r| r == name) {
                make_nullable(property);
            }
            all.push(Value::String(name.clone()));
        }
    }
    map.insert("required".to_owned(), Value::Array(all));
    map.insert("additionalProperties".to_owned(), Value::Bool(false));
}

fn make_nullable(schema: &mut Value) {
    let null = Value::String("null".to_owned());
    // `true` (anything) already takes null.
    if let Value::Object(map) = schema {
        match map.get_mut("type") {
            Some(Value::String(kind)) if kind != "null" => {
                let kind = Value::String(std::mem::take(kind));
                map.insert("type".to_owned(), Value::Array(vec![kind, null]));
                if let Some(Value::Array(values)) = map.get_mut("enum")
                    && !values.contains(&Value::Null)
                {
                    values.push(Value::Null);
                }
            }
            Some(Value::Array(kinds)) => {
                if !kinds.contains(&null) {
                    kinds.push(null);
                }
                if let Some(Value::Array(values)) = map.get_mut("enum")
                    && !values.contains(&Value::Null)
                {
                    values.push(Value::Null);
                }
            }
            Some(_) => {}
            None => {
                let inner = Value::Object(std::mem::take(map));
                let mut null_schema = Map::new();
                null_schema.insert("type".to_owned(), Value::String("null".to_owned()));
                map.insert(
                    "anyOf".to_owned(),
                    Value::Array(vec![inner, Value::Object(null_schema)]),
                );
            }
        }
    }
}

/// Removes `null` members `schema` (the original, not the strict form) does not require,
/// recursively through `properties` and `items`: strict mode makes the model send absent
/// optional properties as `null`, which the original schema may not allow.
pub fn drop_optional_nulls(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(members) => {
            let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
                return;
            };
            let required = schema.get("required").and_then(Value::as_array);
            let is_required =
                |name: &str| required.is_some_and(|names| names.iter().any(|n| n == name));
            members.retain(|name, member| !member.is_null() || is_required(name));
            for (name, member) in members.iter_mut() {
                if let Some(property) = properties.get(name) {
                    drop_optional_nulls(property, member);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                items
                    .iter_mut()
                    .for_each(|member| drop_optional_nulls(item, member));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn strict_form_requires_everything_and_makes_optionals_nullable() {
        let schema = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "unit": {"type": "string", "enum": ["c", "f"]},
                "tags": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "note": {}}
                }},
                "any": {"anyOf": [{"type": "string"}, {"type": "integer"}]}
            },
            "required": ["city"]
        });
        assert_eq!(
            strict_schema(&schema),
            json!({
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": ["integer", "null"]},
                    "unit": {"type": ["string", "null"], "enum": ["c", "f", null]},
                    "tags": {"type": ["array", "null"], "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": ["string", "null"]},
                            "note": {"anyOf": [{}, {"type": "null"}]}
                        },
                        "required": ["name", "note"],
                        "additionalProperties": false
                    }},
                    "any": {"anyOf": [
                        {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                        {"type": "null"}
                    ]}
                },
                "required": ["any", "city", "days", "tags", "unit"],
                "additionalProperties": false
            })
        );
    }
}
