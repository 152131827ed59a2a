//! The derived schema of a typical argument type.

use agent_tools::schema_for;
use schemars::JsonSchema;
use serde::Deserialize;

/// Search for flights.
#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
struct SearchFlights {
    /// Where the trip starts.
    origin: Airport,
    /// Where it ends.
    destination: Airport,
    /// Cabin class.
    cabin: Cabin,
    /// Travellers' ages, one per passenger.
    passengers: Vec<u8>,
    /// Most stops acceptable; any number when absent.
    max_stops: Option<u32>,
    /// Price ceiling in US dollars.
    max_price: Option<f64>,
}

/// An airport.
#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
struct Airport {
    /// IATA code, e.g. `DEN`.
    code: String,
    /// Terminal, when known.
    terminal: Option<String>,
}

#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Cabin {
    Economy,
    PremiumEconomy,
    Business,
}

fn walk(value: &serde_json::Value, found: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, child) in map {
                if key.starts_with('$') {
                    found.push(key.clone());
                }
                walk(child, found);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| walk(v, found)),
        _ => {}
    }
}

#[test]
fn typical_args_schema_is_inlined() {
    let schema = schema_for::<SearchFlights>();
    let mut dollar_keys = Vec::new();
    walk(&schema, &mut dollar_keys);
    assert!(dollar_keys.is_empty(), "found {dollar_keys:?}");
    insta::assert_json_snapshot!(schema);
}

#[test]
fn derived_schema_compiles_and_accepts_a_good_call() {
    let validator = agent_tools::ArgumentValidator::new(&schema_for::<SearchFlights>()).unwrap();
    let good = serde_json::json!({
        "origin": {"code": "DEN"},
        "destination": {"code": "SFO", "terminal": null},
        "cabin": "premium_economy",
        "passengers": [34, 5]
    });
    assert!(validator.is_valid(&good));
}
