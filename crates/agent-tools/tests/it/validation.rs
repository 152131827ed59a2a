//! Validation failures and repairs, as the model and the caller see them.

use agent_tools::{ArgumentValidator, RepairKind, ValidationMode};
use serde_json::{Value, json};

fn weather() -> ArgumentValidator {
    ArgumentValidator::new(&json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 1},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "units": {"type": "string", "enum": ["metric", "imperial"]},
            "hourly": {"type": "boolean"},
            "near": {
                "type": "object",
                "properties": {
                    "lat": {"type": "number"},
                    "lon": {"type": "number"}
                },
                "required": ["lat", "lon"]
            },
            "alerts": {"type": "array", "items": {"type": "string"}, "maxItems": 2}
        },
        "required": ["city"],
        "additionalProperties": false
    }))
    .unwrap()
}

/// The model-facing message for `args` under `mode`.
fn check(args: Value, mode: ValidationMode) -> String {
    match weather().validate(args, mode) {
        Ok(validated) => format!("ok: {}", validated.arguments),
        Err(invalid) => invalid.to_string(),
    }
}

#[test]
fn failure_messages() {
    let cases = [
        ("wrong type", json!({"city": 5})),
        ("missing required", json!({"days": 3})),
        ("nested", json!({"city": "Oslo", "near": {"lat": "north"}})),
        (
            "enum and bounds",
            json!({"city": "", "days": 30, "units": "kelvin"}),
        ),
        ("unexpected", json!({"city": "Oslo", "country": "NO"})),
        ("array", json!({"city": "Oslo", "alerts": ["a", 2, "c"]})),
        ("not an object", json!("Oslo")),
        ("null", Value::Null),
    ];
    let rendered: Vec<String> = cases
        .into_iter()
        .map(|(name, args)| format!("## {name}\n{}", check(args, ValidationMode::Strict)))
        .collect();
    insta::assert_snapshot!(rendered.join("\n\n"));
}

#[test]
fn lenient_repairs_each_kind_and_reports_them() {
    let args = json!({
        "city": "Oslo",
        "days": "3",
        "hourly": "true",
        "units": null,
        "near": "{\"lat\": \"59.9\", \"lon\": 10.75}",
        "alerts": "[\"wind\"]"
    });
    let validated = weather().validate(args, ValidationMode::Lenient).unwrap();
    assert_eq!(
        validated.arguments,
        json!({
            "city": "Oslo",
            "days": 3,
            "hourly": true,
            "near": {"lat": 59.9, "lon": 10.75},
            "alerts": ["wind"]
        })
    );
    let kinds: Vec<(&str, RepairKind)> = validated
        .repairs
        .iter()
        .map(|r| (r.path.as_str(), r.kind))
        .collect();
    assert_eq!(
        kinds,
        // Within an object, dropped nulls come first, then each property in key order.
        [
            ("/units", RepairKind::DroppedNull),
            ("/alerts", RepairKind::ParsedJsonString),
            ("/days", RepairKind::StringToNumber),
            ("/hourly", RepairKind::StringToBoolean),
            ("/near", RepairKind::ParsedJsonString),
            ("/near/lat", RepairKind::StringToNumber),
        ]
    );
    let report: Vec<String> = validated.repairs.iter().map(ToString::to_string).collect();
    insta::assert_snapshot!(report.join("\n"));
}

#[test]
fn lenient_repairs_a_stringified_argument_object() {
    let validated = weather()
        .validate(
            json!("{\"city\": \"Oslo\", \"days\": \"2\"}"),
            ValidationMode::Lenient,
        )
        .unwrap();
    assert_eq!(validated.arguments, json!({"city": "Oslo", "days": 2}));
    assert_eq!(validated.repairs.len(), 2);
    assert_eq!(
        validated.repairs[0].to_string(),
        "the arguments: parsed the JSON text in a string into an object"
    );
}

#[test]
fn lenient_failure_keeps_the_repairs_it_tried() {
    let invalid = weather()
        .validate(
            json!({"city": "Oslo", "days": "99"}),
            ValidationMode::Lenient,
        )
        .unwrap_err();
    assert_eq!(invalid.repairs.len(), 1);
    insta::assert_snapshot!(invalid.to_string());
}

#[test]
fn lenient_leaves_valid_arguments_untouched() {
    let args = json!({"city": "Oslo", "days": 2});
    let validated = weather()
        .validate(args.clone(), ValidationMode::Lenient)
        .unwrap();
    assert_eq!(validated.arguments, args);
    assert!(validated.repairs.is_empty());
}

#[test]
fn modes_differ_on_the_same_input() {
    let args = json!({"city": "Oslo", "days": "2"});
    assert!(check(args.clone(), ValidationMode::Strict).starts_with("the arguments do not match"));
    assert_eq!(
        check(args.clone(), ValidationMode::Lenient),
        r#"ok: {"city":"Oslo","days":2}"#
    );
    assert_eq!(
        check(args, ValidationMode::None),
        r#"ok: {"city":"Oslo","days":"2"}"#
    );
}
