//! A call's arguments as the JSON text the OpenAI APIs carry them in (`"arguments": "{...}"`),
//! written straight into the request body.
//!
//! `Value::to_string` per call and per request grew a fresh `String` through four or five
//! allocations for every call in the history, on every round (issue 16); serde_json's
//! `collect_str` escapes the `Display` output into the body as it is written instead.

use serde::{Serialize, Serializer};
use serde_json::Value;

/// The text of one call's arguments.
#[derive(Debug)]
pub(crate) enum ArgumentsText<'a> {
    /// Text sent as it is: what the model wrote when it was not JSON, or a fixed stand-in.
    Raw(&'a str),
    /// Arguments serialized as compact JSON (what `Value::to_string` gives).
    Json(&'a Value),
}

impl Serialize for ArgumentsText<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Raw(text) => serializer.serialize_str(text),
            Self::Json(value) => serializer.collect_str(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_text_is_what_to_string_gives_and_nothing_else() {
        let arguments = json!({"city": "Lisbon \"Baixa\"", "days": [1, 2], "note": "é\n\u{1}"});
        let written = serde_json::to_string(&ArgumentsText::Json(&arguments)).unwrap();
        assert_eq!(
            written,
            serde_json::to_string(&arguments.to_string()).unwrap()
        );
        // Through a serializer without `collect_str` of its own, the same string.
        let value = serde_json::to_value(ArgumentsText::Json(&arguments)).unwrap();
        assert_eq!(value, Value::String(arguments.to_string()));
        let raw = serde_json::to_string(&ArgumentsText::Raw("{\"city\": \"Lis")).unwrap();
        assert_eq!(raw, r#""{\"city\": \"Lis""#);
    }
}
