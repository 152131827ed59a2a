//! Argument validation against a schema compiled once, in three modes.

use std::fmt;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{Draft, JsonType, ValidationError, Validator};
use serde_json::Value;

use crate::error::Error;
use crate::repair::{Repair, repair};

/// How strictly arguments are checked before a handler sees them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ValidationMode {
    /// Arguments must match the schema as sent.
    #[default]
    Strict,
    /// Repair the usual model mistakes (see [`repair`](crate::repair())), then validate.
    Lenient,
    /// No check: the handler gets whatever the model sent.
    None,
}

/// A tool's parameters schema, compiled once; validating costs no compilation.
#[derive(Debug)]
pub struct ArgumentValidator {
    schema: Value,
    validator: Validator,
}

impl ArgumentValidator {
    /// Compiles `schema` (draft 2020-12 unless the schema's `$schema` says otherwise).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSchema`] when the schema is not valid JSON Schema, or does not describe
    /// an object (`"type": "object"`), which every provider requires of tool parameters.
    pub fn new(schema: &Value) -> Result<Self, Error> {
        let invalid = |reason: String| Error::InvalidSchema {
            tool: String::new(),
            reason,
        };
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(invalid(
                "tool parameters must be described by an object schema (`\"type\": \"object\"`)"
                    .to_owned(),
            ));
        }
        let validator = jsonschema::options()
            .with_draft(Draft::Draft202012)
            .build(schema)
            .map_err(|e| invalid(e.to_string()))?;
        Ok(Self {
            schema: schema.clone(),
            validator,
        })
    }

    /// The schema this validator checks against.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// Whether `arguments` match the schema as they are.
    pub fn is_valid(&self, arguments: &Value) -> bool {
        self.validator.is_valid(arguments)
    }

    /// Checks `arguments` under `mode`, returning them (repaired, in lenient mode) or every
    /// problem found, in words a model can act on.
    ///
    /// # Errors
    ///
    /// [`InvalidArguments`] listing each failing path, and any repairs tried first.
    pub fn validate(
        &self,
        mut arguments: Value,
        mode: ValidationMode,
    ) -> Result<Validated, InvalidArguments> {
        if mode == ValidationMode::None || self.validator.is_valid(&arguments) {
            return Ok(Validated {
                arguments,
                repairs: Vec::new(),
            });
        }
        let repairs = if mode == ValidationMode::Lenient {
            let repairs = repair(&self.schema, &mut arguments);
            if !repairs.is_empty() && self.validator.is_valid(&arguments) {
                return Ok(Validated { arguments, repairs });
            }
            repairs
        } else {
            Vec::new()
        };
        let problems = self
            .validator
            .iter_errors(&arguments)
            .flat_map(|error| describe(&error))
            .collect();
        Err(InvalidArguments { problems, repairs })
    }
}

/// Arguments that passed validation.
#[derive(Debug, Clone, PartialEq)]
pub struct Validated {
    /// The arguments to hand to the handler (repaired, in lenient mode).
    pub arguments: Value,
    /// Every repair made; empty unless the mode is lenient.
    pub repairs: Vec<Repair>,
}

/// One way the arguments fail the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// JSON Pointer to the failing value (`""` is the whole argument object).
    pub path: String,
    /// What is wrong, as a sentence for the model, naming the argument.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Arguments that failed validation: every problem, and the repairs tried first (lenient
/// mode). Its `Display` is the message to send back to the model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct InvalidArguments {
    /// Each failing path with what is wrong there.
    pub problems: Vec<Problem>,
    /// Repairs made before validating (lenient mode); they were not enough.
    pub repairs: Vec<Repair>,
}

impl fmt::Display for InvalidArguments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the arguments do not match the tool's parameters schema:")?;
        for problem in &self.problems {
            write!(f, "\n- {problem}")?;
        }
        Ok(())
    }
}

fn subject(path: &str) -> String {
    if path.is_empty() {
        "the arguments".to_owned()
    } else {
        format!("argument `{path}`")
    }
}

fn within(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!(" in `{path}`")
    }
}

fn type_name(ty: JsonType) -> &'static str {
    match ty {
        JsonType::Array => "an array",
        JsonType::Boolean => "a boolean",
        JsonType::Integer => "an integer",
        JsonType::Null => "null",
        JsonType::Number => "a number",
        JsonType::Object => "an object",
        JsonType::String => "a string",
    }
}

fn expected_types(kind: &TypeKind) -> String {
    match kind {
        TypeKind::Single(ty) => type_name(*ty).to_owned(),
        TypeKind::Multiple(set) => set.iter().map(type_name).collect::<Vec<_>>().join(" or "),
    }
}

/// The value in words: "the number 5", "the string \"Denver\"", "an object".
fn describe_value(value: &Value) -> String {
    const MAX_SHOWN: usize = 40;
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() > MAX_SHOWN => {
            let shown: String = s.chars().take(MAX_SHOWN).collect();
            format!("the string {}…", Value::String(shown))
        }
        Value::String(_) => format!("the string {value}"),
        Value::Array(items) => format!("an array of {} items", items.len()),
        Value::Object(_) => "an object".to_owned(),
    }
}

fn plural(count: u64, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

fn list_values(options: &Value) -> String {
    match options {
        Value::Array(items) => items
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// Renders one jsonschema error as model-facing problems (an `additionalProperties` error
/// names several arguments, so it becomes one problem each).
fn describe(error: &ValidationError<'_>) -> Vec<Problem> {
    let path = error.instance_path().as_str().to_owned();
    let got = describe_value(error.instance());
    let at = subject(&path);
    let message = match error.kind() {
        ValidationErrorKind::Type { kind } => {
            format!("{at}: expected {}, got {got}", expected_types(kind))
        }
        ValidationErrorKind::Required { property } => {
            let name = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_owned);
            format!("missing required argument `{name}`{}", within(&path))
        }
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            return unexpected
                .iter()
                .map(|name| Problem {
                    path: path.clone(),
                    message: format!(
                        "unexpected argument `{name}`{}: the tool does not take it",
                        within(&path)
                    ),
                })
                .collect();
        }
        ValidationErrorKind::Enum { options } => {
            format!("{at}: expected one of {}, got {got}", list_values(options))
        }
        ValidationErrorKind::Constant { expected_value } => {
            format!("{at}: expected exactly {expected_value}, got {got}")
        }
        ValidationErrorKind::Minimum { limit } => {
            format!("{at}: expected at least {limit}, got {got}")
        }
        ValidationErrorKind::Maximum { limit } => {
            format!("{at}: expected at most {limit}, got {got}")
        }
        ValidationErrorKind::ExclusiveMinimum { limit } => {
            format!("{at}: expected more than {limit}, got {got}")
        }
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            format!("{at}: expected less than {limit}, got {got}")
        }
        ValidationErrorKind::MinLength { limit } => {
            format!(
                "{at}: expected at least {}, got {got}",
                plural(*limit, "character")
            )
        }
        ValidationErrorKind::MaxLength { limit } => {
            format!(
                "{at}: expected at most {}, got {got}",
                plural(*limit, "character")
            )
        }
        ValidationErrorKind::MinItems { limit } => {
            format!(
                "{at}: expected at least {}, got {got}",
                plural(*limit, "item")
            )
        }
        ValidationErrorKind::MaxItems { limit } => {
            format!(
                "{at}: expected at most {}, got {got}",
                plural(*limit, "item")
            )
        }
        ValidationErrorKind::Pattern { pattern } => {
            format!("{at}: expected a string matching the pattern `{pattern}`, got {got}")
        }
        ValidationErrorKind::Format { format } => {
            format!("{at}: expected a string in the `{format}` format, got {got}")
        }
        ValidationErrorKind::AnyOf { .. } | ValidationErrorKind::OneOfNotValid { .. } => {
            format!("{at}: {got} matches none of the allowed forms")
        }
        ValidationErrorKind::OneOfMultipleValid { .. } => {
            format!("{at}: {got} matches more than one of the allowed forms")
        }
        _ => format!("{at}: {error}"),
    };
    vec![Problem { path, message }]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn validator() -> ArgumentValidator {
        ArgumentValidator::new(&json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer", "minimum": 1},
                "metric": {"type": "boolean"}
            },
            "required": ["city"],
            "additionalProperties": false
        }))
        .unwrap()
    }

    #[test]
    fn strict_accepts_valid_and_rejects_invalid() {
        let v = validator();
        let ok = v
            .validate(json!({"city": "Oslo", "days": 2}), ValidationMode::Strict)
            .unwrap();
        assert!(ok.repairs.is_empty());
        let err = v
            .validate(json!({"city": 5}), ValidationMode::Strict)
            .unwrap_err();
        assert_eq!(
            err.problems[0].message,
            "argument `/city`: expected a string, got the number 5"
        );
        assert_eq!(err.problems[0].path, "/city");
    }

    #[test]
    fn strict_does_not_repair() {
        let err = validator()
            .validate(json!({"city": "Oslo", "days": "2"}), ValidationMode::Strict)
            .unwrap_err();
        assert!(err.repairs.is_empty());
        assert_eq!(err.problems.len(), 1);
    }

    #[test]
    fn lenient_repairs_then_validates() {
        let ok = validator()
            .validate(
                json!({"city": "Oslo", "days": "2", "metric": "false"}),
                ValidationMode::Lenient,
            )
            .unwrap();
        assert_eq!(
            ok.arguments,
            json!({"city": "Oslo", "days": 2, "metric": false})
        );
        assert_eq!(ok.repairs.len(), 2);
    }

    #[test]
    fn lenient_reports_what_repair_could_not_fix() {
        let err = validator()
            .validate(
                json!({"city": "Oslo", "days": "0"}),
                ValidationMode::Lenient,
            )
            .unwrap_err();
        assert_eq!(err.repairs.len(), 1);
        assert_eq!(
            err.to_string(),
            "the arguments do not match the tool's parameters schema:\n- argument `/days`: expected at least 1, got the number 0"
        );
    }

    #[test]
    fn none_passes_anything() {
        let ok = validator()
            .validate(json!("junk"), ValidationMode::None)
            .unwrap();
        assert_eq!(ok.arguments, json!("junk"));
    }

    #[test]
    fn missing_unexpected_and_non_object_arguments_are_described() {
        let v = validator();
        let err = v
            .validate(json!({"extra": 1, "more": 2}), ValidationMode::Strict)
            .unwrap_err();
        let messages: Vec<_> = err.problems.iter().map(|p| p.message.as_str()).collect();
        assert!(messages.contains(&"missing required argument `city`"));
        assert!(messages.contains(&"unexpected argument `extra`: the tool does not take it"));
        assert!(messages.contains(&"unexpected argument `more`: the tool does not take it"));
        let err = v
            .validate(json!([1, 2]), ValidationMode::Lenient)
            .unwrap_err();
        assert_eq!(
            err.problems[0].message,
            "the arguments: expected an object, got an array of 2 items"
        );
    }

    #[test]
    fn invalid_schemas_are_rejected() {
        assert!(matches!(
            ArgumentValidator::new(
                &json!({"type": "object", "properties": {"a": {"type": "strin"}}})
            ),
            Err(Error::InvalidSchema { .. })
        ));
        assert!(matches!(
            ArgumentValidator::new(&json!({"type": "string"})),
            Err(Error::InvalidSchema { .. })
        ));
    }
}
