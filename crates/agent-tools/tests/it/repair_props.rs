//! Property tests for lenient repair: it never touches valid arguments, it undoes exactly the
//! mistakes models make (one reported repair per mistake), and repairing twice changes nothing.

use agent_tools::{ArgumentValidator, RepairKind, ValidationMode, repair};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 1},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "units": {"type": "string", "enum": ["metric", "imperial"]},
            "hourly": {"type": "boolean"},
            "alerts": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["city", "days"],
        "additionalProperties": false
    })
}

/// Arguments that satisfy [`schema`].
fn valid_args() -> impl Strategy<Value = Map<String, Value>> {
    (
        "[A-Za-z][A-Za-z ]{0,11}",
        1u8..=14,
        proptest::option::of(prop_oneof![Just("metric"), Just("imperial")]),
        proptest::option::of(any::<bool>()),
        proptest::option::of(proptest::collection::vec("[a-z]{0,6}", 0..3)),
    )
        .prop_map(|(city, days, units, hourly, alerts)| {
            let mut args = Map::new();
            args.insert("city".into(), json!(city));
            args.insert("days".into(), json!(days));
            if let Some(units) = units {
                args.insert("units".into(), json!(units));
            }
            if let Some(hourly) = hourly {
                args.insert("hourly".into(), json!(hourly));
            }
            if let Some(alerts) = alerts {
                args.insert("alerts".into(), json!(alerts));
            }
            args
        })
}

/// Which model mistakes to apply to a valid argument object.
#[derive(Debug, Clone, Copy)]
struct Mistakes {
    days_as_string: bool,
    hourly_as_string: bool,
    alerts_as_string: bool,
    null_units: bool,
    whole_object_as_string: bool,
}

fn mistakes() -> impl Strategy<Value = Mistakes> {
    any::<[bool; 5]>().prop_map(|m| Mistakes {
        days_as_string: m[0],
        hourly_as_string: m[1],
        alerts_as_string: m[2],
        null_units: m[3],
        whole_object_as_string: m[4],
    })
}

/// Applies `mistakes` to `args`; returns the garbled value and the repairs it should need.
fn garble(args: &Map<String, Value>, mistakes: Mistakes) -> (Value, Vec<RepairKind>) {
    let mut garbled = args.clone();
    let mut expected = Vec::new();
    if mistakes.days_as_string {
        garbled.insert("days".into(), json!(args["days"].to_string()));
        expected.push(RepairKind::StringToNumber);
    }
    if mistakes.hourly_as_string && args.contains_key("hourly") {
        garbled.insert("hourly".into(), json!(args["hourly"].to_string()));
        expected.push(RepairKind::StringToBoolean);
    }
    if mistakes.alerts_as_string && args.contains_key("alerts") {
        garbled.insert("alerts".into(), json!(args["alerts"].to_string()));
        expected.push(RepairKind::ParsedJsonString);
    }
    if mistakes.null_units && !args.contains_key("units") {
        garbled.insert("units".into(), Value::Null);
        expected.push(RepairKind::DroppedNull);
    }
    let mut garbled = Value::Object(garbled);
    if mistakes.whole_object_as_string {
        garbled = json!(garbled.to_string());
        expected.push(RepairKind::ParsedJsonString);
    }
    (garbled, expected)
}

fn sorted(mut kinds: Vec<RepairKind>) -> Vec<String> {
    kinds.sort_by_key(|kind| format!("{kind:?}"));
    kinds.into_iter().map(|kind| format!("{kind:?}")).collect()
}

/// Any JSON value, nested a few levels.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[ -~]{0,8}".prop_map(Value::String),
        prop_oneof![
            Just("5"),
            Just("true"),
            Just("{\"a\":1}"),
            Just("[1]"),
            Just("-0.5e3")
        ]
        .prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("city".to_owned()),
                    Just("days".to_owned()),
                    Just("hourly".to_owned()),
                    Just("alerts".to_owned()),
                    Just("units".to_owned()),
                    "[a-z]{1,4}"
                ],
                inner,
                0..5
            )
            .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn valid_arguments_are_never_repaired(args in valid_args()) {
        let validator = ArgumentValidator::new(&schema()).unwrap();
        let value = Value::Object(args);
        let validated = validator.validate(value.clone(), ValidationMode::Lenient).unwrap();
        prop_assert!(validated.repairs.is_empty(), "{:?}", validated.repairs);
        prop_assert_eq!(validated.arguments, value);
    }

    #[test]
    fn lenient_mode_undoes_each_model_mistake(args in valid_args(), mistakes in mistakes()) {
        let validator = ArgumentValidator::new(&schema()).unwrap();
        let (garbled, expected) = garble(&args, mistakes);
        let validated = validator.validate(garbled.clone(), ValidationMode::Lenient).unwrap();
        prop_assert_eq!(&validated.arguments, &Value::Object(args));
        let made: Vec<RepairKind> = validated.repairs.iter().map(|r| r.kind).collect();
        prop_assert_eq!(sorted(made), sorted(expected.clone()));
        // Strict mode rejects exactly the garbled inputs.
        let strict = validator.validate(garbled, ValidationMode::Strict);
        prop_assert_eq!(strict.is_ok(), expected.is_empty());
    }

    #[test]
    fn repair_is_total_and_idempotent(mut value in any_json()) {
        let schema = schema();
        let _first = repair(&schema, &mut value);
        let once = value.clone();
        let second = repair(&schema, &mut value);
        prop_assert!(second.is_empty(), "second pass repaired again: {:?}", second);
        prop_assert_eq!(value, once);
    }
}
