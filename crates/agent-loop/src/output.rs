//! Structured output: a final answer that must match a JSON Schema, validated by the loop.
//!
//! An [`OutputSpec`] holds the schema, compiled once into a validator, and the schema's
//! strict form for providers that constrain output natively. How the model is asked for the
//! answer is the [`OutputStrategy`]:
//!
//! - [`Native`](OutputStrategy::Native): the provider constrains the output itself
//!   ([`ModelRequest::response_format`](agent_types::ModelRequest::response_format); OpenAI
//!   Chat's `response_format` and Responses' `text.format` json_schema in strict mode,
//!   Gemini's `responseSchema`, Ollama's `format`). Needs a backend
//!   with the `structured_output` capability.
//! - [`Tool`](OutputStrategy::Tool): a final-answer tool (named [`OutputSpec::name`]) the model
//!   must call; its arguments are the answer. Works with every backend that takes tools, and
//!   alongside other tools: the loop recognises the call as the answer and never runs it.
//! - [`Prompted`](OutputStrategy::Prompted): the schema goes into the system prompt and the
//!   answer is parsed from the text (a ```` ```json ```` fence around it is fine).
//! - [`Auto`](OutputStrategy::Auto) (the default): `Native` when the backend has it, else
//!   `Tool` when the backend takes tools, else `Prompted`.
//!
//! Whatever the strategy, the answer is validated against the original schema. An answer
//! that fails goes back to the model with the problems for another try, up to
//! `max_output_retries` times (each a model call counted against every budget and against
//! `max_tool_iterations`); after that the run ends with an `invalid_output` error (422) that
//! keeps the last answer's raw text. A refusal ends the run with `output_refused` (422).
//!
//! Streaming consumers get [`AgentEvent::OutputPartial`] events (the answer so far, parsed
//! best-effort) while the answer streams, then one [`AgentEvent::Output`] with the validated
//! answer. A run without an output schema pays for none of this.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use agent_backends::{ScriptedBackend, ScriptedTurn};
//! use agent_loop::{Input, Options, generate};
//! use serde_json::json;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Weather {
//!     city: String,
//!     temp_c: i32,
//! }
//!
//! // A backend without native structured output: `auto` uses the final-answer tool.
//! let backend = ScriptedBackend::new([ScriptedTurn::tool_call(
//!     "call_1",
//!     "final_answer",
//!     json!({"city": "Oslo", "temp_c": 3}),
//! )]);
//! let options = Options::default().with_output::<Weather>();
//! let result = generate(&backend, Input::new("m").user("Weather in Oslo?"), &options)
//!     .await
//!     .unwrap();
//! let weather: Weather = result.output().unwrap();
//! assert_eq!((weather.city.as_str(), weather.temp_c), ("Oslo", 3));
//! # });
//! ```

use std::fmt::Write as _;
use std::sync::Arc;

use agent_tools::{ArgumentValidator, ValidationMode};
use agent_types::{
    AgentError, AgentEvent, ErrorKind, InvalidOutput, ResponseFormat, ToolSpec, drop_optional_nulls,
};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// OpenAI's strict-mode form of a schema; it lives in agent-types so the adapters' strict
/// tools use the same transformation.
pub use agent_types::strict_schema;

/// How the model is asked for a structured answer. See the [module docs](self).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum OutputStrategy {
    /// `Native` when the backend supports it, else `Tool`, else `Prompted`.
    #[default]
    Auto,
    /// The provider's own schema-constrained output; a configuration error on a backend
    /// without the `structured_output` capability.
    Native,
    /// A final-answer tool the model must call.
    Tool,
    /// The schema in the system prompt, the answer parsed from the text.
    Prompted,
}

/// The name of the final-answer tool and of the native schema unless set otherwise.
pub const DEFAULT_OUTPUT_NAME: &str = "final_answer";

/// An output schema, compiled once. Cheap to clone (shared behind an `Arc`): build it once
/// and attach it to every run's [`Options`](crate::Options).
#[derive(Clone)]
pub struct OutputSpec {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    description: String,
    schema: Value,
    strict: Value,
    /// Shared so a renamed copy does not compile the schema again.
    validator: Arc<Result<ArgumentValidator, String>>,
}

impl OutputSpec {
    /// The schema of `T` (derived as tool parameters are, see [`agent_tools::schema_for`]).
    /// `T` must serialize as a JSON object (a struct or a map), as every provider requires.
    pub fn of<T: JsonSchema + DeserializeOwned>() -> Self {
        Self::from_schema(agent_tools::schema_for::<T>())
    }

    /// A raw JSON Schema (an object schema). A schema that does not compile is reported when
    /// the run starts, as a configuration error (400).
    pub fn from_schema(schema: Value) -> Self {
        let validator = ArgumentValidator::new(&schema).map_err(|error| {
            error
                .to_string()
                .replace("tool parameters", "the output schema")
        });
        let strict = strict_schema(&schema);
        Self {
            inner: Arc::new(Inner {
                name: DEFAULT_OUTPUT_NAME.to_owned(),
                description: "Give your final answer by calling this tool with the answer as \
                              its arguments. Call it once, when the answer is complete."
                    .to_owned(),
                schema,
                strict,
                validator: Arc::new(validator),
            }),
        }
    }

    /// Renames the final-answer tool and the native schema (`^[a-zA-Z0-9_-]{1,64}$`).
    #[must_use]
    pub fn with_name(self, name: impl Into<String>) -> Self {
        self.rebuilt(|inner| inner.name = name.into())
    }

    /// Sets the final-answer tool's description (what the model reads about it).
    #[must_use]
    pub fn with_description(self, description: impl Into<String>) -> Self {
        self.rebuilt(|inner| inner.description = description.into())
    }

    fn rebuilt(self, change: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = match Arc::try_unwrap(self.inner) {
            Ok(inner) => inner,
            Err(shared) => Inner {
                name: shared.name.clone(),
                description: shared.description.clone(),
                schema: shared.schema.clone(),
                strict: shared.strict.clone(),
                validator: Arc::clone(&shared.validator),
            },
        };
        change(&mut inner);
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The final-answer tool's and the native schema's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The schema as given (or derived); answers are validated against it.
    pub fn schema(&self) -> &Value {
        &self.inner.schema
    }

    /// The schema in OpenAI's strict form (see [`strict_schema`]), sent by `Native`.
    pub fn strict_schema(&self) -> &Value {
        &self.inner.strict
    }

    /// The configuration error of a schema that does not compile.
    pub(crate) fn check(&self) -> Result<(), AgentError> {
        match self.inner.validator.as_ref() {
            Ok(_) => validate_name(&self.inner.name),
            Err(reason) => Err(AgentError::config(format!(
                "the output schema is not usable: {reason}"
            ))),
        }
    }

    pub(crate) fn tool_spec(&self) -> ToolSpec {
        ToolSpec::new(
            self.inner.name.clone(),
            self.inner.description.clone(),
            self.inner.schema.clone(),
        )
    }

    pub(crate) fn response_format(&self) -> ResponseFormat {
        ResponseFormat {
            name: self.inner.name.clone(),
            schema: self.inner.strict.clone(),
            strict: true,
        }
    }

    /// The instructions `Prompted` appends to the system prompt.
    pub(crate) fn prompt(&self) -> String {
        let mut text = String::from(
            "Give your final answer as a single JSON value matching this JSON Schema, and \
             nothing else (no prose before or after it):\n",
        );
        let _ = write!(text, "{}", self.inner.schema);
        text
    }

    /// Validates an answer: nulls standing for absent optional properties (what strict mode
    /// makes the model send) are dropped first, then the value must match the schema.
    pub(crate) fn validate(&self, mut value: Value) -> Result<Value, Vec<String>> {
        let Ok(validator) = self.inner.validator.as_ref() else {
            return Err(vec!["the output schema does not compile".to_owned()]);
        };
        drop_optional_nulls(&self.inner.schema, &mut value);
        validator
            .validate(value, ValidationMode::Strict)
            .map(|validated| validated.arguments)
            .map_err(|invalid| {
                invalid
                    .problems
                    .into_iter()
                    .map(|problem| {
                        if problem.path.is_empty() {
                            problem.message
                        } else {
                            format!("{}: {}", problem.path, problem.message)
                        }
                    })
                    .collect()
            })
    }
}

impl std::fmt::Debug for OutputSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSpec")
            .field("name", &self.inner.name)
            .field("schema", &self.inner.schema)
            .field("compiled", &self.inner.validator.is_ok())
            .finish()
    }
}

/// An output spec as data: its name, description and schema (the compiled validator is
/// rebuilt when read), so a durable driver's state and config can carry it.
#[derive(serde::Serialize, serde::Deserialize)]
struct SpecData<'a> {
    name: std::borrow::Cow<'a, str>,
    description: std::borrow::Cow<'a, str>,
    schema: std::borrow::Cow<'a, Value>,
}

impl serde::Serialize for OutputSpec {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        SpecData {
            name: std::borrow::Cow::Borrowed(&self.inner.name),
            description: std::borrow::Cow::Borrowed(&self.inner.description),
            schema: std::borrow::Cow::Borrowed(&self.inner.schema),
        }
        .serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for OutputSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let data = SpecData::deserialize(deserializer)?;
        Ok(Self::from_schema(data.schema.into_owned())
            .with_name(data.name.into_owned())
            .with_description(data.description.into_owned()))
    }
}

fn validate_name(name: &str) -> Result<(), AgentError> {
    agent_tools::validate_name(name).map_err(|error| {
        AgentError::config(format!("the output name `{name}` is not usable: {error}"))
    })
}

/// The JSON value in a text answer: the whole text, the inside of a ```` ``` ```` fence
/// (`json` or no language), or else the span from the first `{` to the last `}`.
pub(crate) fn parse_text(text: &str) -> Result<Value, String> {
    let trimmed = text.trim();
    if let Ok(value) = serde_json::from_str(trimmed) {
        return Ok(value);
    }
    if let Some(start) = trimmed.find("```") {
        let after = &trimmed[start + 3..];
        // The fence's language tag runs to the end of its line.
        let body = after.find('\n').map_or(after, |eol| &after[eol + 1..]);
        let body = body.find("```").map_or(body, |end| &body[..end]);
        if let Ok(value) = serde_json::from_str(body.trim()) {
            return Ok(value);
        }
    }
    if let (Some(open), Some(close)) = (trimmed.find('{'), trimmed.rfind('}'))
        && open < close
        && let Ok(value) = serde_json::from_str(&trimmed[open..=close])
    {
        return Ok(value);
    }
    Err(match serde_json::from_str::<Value>(trimmed) {
        Err(error) => format!("the answer is not JSON: {error}"),
        Ok(_) => "the answer is not JSON".to_owned(),
    })
}

/// Follows one model call's stream for the answer and turns its growth into
/// [`AgentEvent::OutputPartial`] events. Built only when a consumer listens and the run has
/// an output schema, so the text path never pays for it.
pub struct PartialOutput<'o> {
    /// The final-answer tool's name under `Tool`; `None` reads the text.
    tool: Option<&'o str>,
    /// The index of the final-answer call in this message, once it started.
    call: Option<u32>,
    text: String,
    /// How long `text` was at the last parse.
    parsed_at: usize,
    last: Option<Value>,
}

/// Text growth after which a partial answer is parsed again even without a delimiter, so a
/// long string still shows progress; between delimiters parsing waits for it, which keeps a
/// long answer from being re-read on every small delta.
const REPARSE_BYTES: usize = 64;

impl<'o> PartialOutput<'o> {
    /// Following the answer to `spec` as `strategy` asks for it (the final-answer tool's
    /// arguments under `Tool`, else the text).
    pub fn new(spec: &'o OutputSpec, strategy: OutputStrategy) -> Self {
        Self {
            tool: (strategy == OutputStrategy::Tool).then(|| spec.name()),
            call: None,
            text: String::new(),
            parsed_at: 0,
            last: None,
        }
    }

    /// Follows `event`; `true` when the partial answer changed (then [`latest`](Self::latest)
    /// is the event to send).
    pub fn observe(&mut self, event: &AgentEvent) -> bool {
        let delta = match (event, self.tool) {
            (AgentEvent::TextDelta { delta }, None) => delta,
            (AgentEvent::ToolCallStart { index, name, .. }, Some(tool)) => {
                if name == tool {
                    self.call = Some(*index);
                }
                return false;
            }
            (AgentEvent::ToolCallDelta { index, delta }, Some(_)) if self.call == Some(*index) => {
                delta
            }
            _ => return false,
        };
        self.text.push_str(delta);
        let delimited = delta.contains(['"', ',', '}', ']']);
        if !delimited && self.text.len() - self.parsed_at < REPARSE_BYTES {
            return false;
        }
        self.parsed_at = self.text.len();
        let Some(value) = partial_value(&self.text) else {
            return false;
        };
        if self.last.as_ref() == Some(&value) {
            return false;
        }
        self.last = Some(value);
        true
    }

    /// The latest partial answer as an event, once there is one.
    pub fn latest(&self) -> Option<AgentEvent> {
        self.last
            .clone()
            .map(|value| AgentEvent::OutputPartial { value })
    }
}

/// The object in a streamed answer so far, closed best-effort: an open string, array or
/// object is closed, and a member cut mid-way (a key without its value, a half-written
/// literal) is left out. `None` before the first `{` or while nothing parses.
pub(crate) fn partial_value(text: &str) -> Option<Value> {
    let start = text.find('{')?;
    let mut body = &text[start..];
    // Each failed try cuts back to the last member separator; a few tries cover the cases
    // a stream produces (a half key, a half literal, a dangling `:`).
    for _ in 0..4 {
        let scan = scan(body);
        if let Some(end) = scan.complete {
            // The object is whole: what follows (a closing fence, prose) is not part of it.
            return serde_json::from_str(&body[..end]).ok();
        }
        let mut candidate = String::with_capacity(body.len() + scan.open.len() + 1);
        candidate.push_str(body);
        if scan.in_string {
            candidate.push('"');
        }
        let trimmed = candidate.trim_end().trim_end_matches(',').len();
        candidate.truncate(trimmed);
        for closer in scan.open.iter().rev() {
            candidate.push(*closer);
        }
        if let Ok(value) = serde_json::from_str::<Value>(&candidate)
            && value.is_object()
        {
            return Some(value);
        }
        body = &body[..scan.last_separator?];
    }
    None
}

struct Scan {
    /// The closers of the containers still open, outermost first.
    open: Vec<char>,
    in_string: bool,
    /// Where the last `,` outside strings is, or else just after the last `{`/`[`.
    last_separator: Option<usize>,
    /// Just after the `}` that closes the outermost object, when it is closed.
    complete: Option<usize>,
}

fn scan(text: &str) -> Scan {
    let mut open = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    let mut last_separator = None;
    for (at, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => {
                open.push('}');
                last_separator = Some(at + 1);
            }
            '[' => {
                open.push(']');
                last_separator = Some(at + 1);
            }
            '}' | ']' => {
                open.pop();
                if open.is_empty() {
                    return Scan {
                        open,
                        in_string,
                        last_separator,
                        complete: Some(at + 1),
                    };
                }
            }
            ',' => last_separator = Some(at),
            _ => {}
        }
    }
    // A cut that does not shorten the text would loop.
    let last_separator = last_separator.filter(|&at| at < text.len());
    Scan {
        open,
        in_string,
        last_separator,
        complete: None,
    }
}

/// The error that ends a run whose answers stayed invalid.
pub(crate) fn invalid_output(raw: String, errors: Vec<String>, tries: u32) -> AgentError {
    let message = format!(
        "the model's answer does not match the output schema after {tries} tr{}: {}",
        if tries == 1 { "y" } else { "ies" },
        errors.join("; ")
    );
    AgentError::new(
        ErrorKind::InvalidOutput {
            output: Box::new(InvalidOutput { raw, errors }),
        },
        message,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn nulls_for_optional_members_are_dropped_before_validation() {
        let spec = OutputSpec::from_schema(json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "inner": {"type": "object", "properties": {"x": {"type": "integer"}}}
            },
            "required": ["city"]
        }));
        assert_eq!(
            spec.validate(json!({"city": "Oslo", "days": null, "inner": {"x": null}}))
                .unwrap(),
            json!({"city": "Oslo", "inner": {}})
        );
        // A required member stays, and fails.
        let errors = spec.validate(json!({"city": null})).unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("city"), "{errors:?}");
    }

    #[test]
    fn text_answers_parse_bare_fenced_or_embedded() {
        assert_eq!(parse_text(" {\"a\":1} ").unwrap(), json!({"a": 1}));
        assert_eq!(
            parse_text("Here it is:\n```json\n{\"a\": [1, 2]}\n```\nDone.").unwrap(),
            json!({"a": [1, 2]})
        );
        assert_eq!(parse_text("```\n{\"a\":1}\n```").unwrap(), json!({"a": 1}));
        assert_eq!(
            parse_text("The answer is {\"a\": {\"b\": 2}}.").unwrap(),
            json!({"a": {"b": 2}})
        );
        let error = parse_text("It is sunny.").unwrap_err();
        assert!(error.starts_with("the answer is not JSON"), "{error}");
    }

    #[test]
    fn partial_answers_close_what_is_open_and_leave_out_half_members() {
        let cases = [
            ("", None),
            ("```json\n", None),
            ("{", Some(json!({}))),
            (r#"{"ci"#, Some(json!({}))),
            (r#"{"city""#, Some(json!({}))),
            (r#"{"city": "#, Some(json!({}))),
            (r#"{"city": "Os"#, Some(json!({"city": "Os"}))),
            (r#"{"city": "Oslo", "temp"#, Some(json!({"city": "Oslo"}))),
            (
                r#"{"city": "Oslo", "ok": tr"#,
                Some(json!({"city": "Oslo"})),
            ),
            (
                r#"{"city": "Oslo", "temp_c": 3"#,
                Some(json!({"city": "Oslo", "temp_c": 3})),
            ),
            (r#"{"tags": ["a", "b"#, Some(json!({"tags": ["a", "b"]}))),
            (
                r#"{"in": {"x": 1, "y": [{"z": "q\"u"#,
                Some(json!({"in": {"x": 1, "y": [{"z": "q\"u"}]}})),
            ),
            (
                "```json\n{\"city\": \"Oslo\"}\n```",
                Some(json!({"city": "Oslo"})),
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(partial_value(text), expected, "{text}");
        }
    }

    #[test]
    fn partial_parsing_waits_for_a_delimiter_or_64_new_bytes() {
        let spec = OutputSpec::from_schema(json!({"type": "object"}));
        let mut partial = PartialOutput::new(&spec, OutputStrategy::Prompted);
        let mut delta = |text: &str| {
            partial.observe(&AgentEvent::TextDelta {
                delta: text.to_owned(),
            })
        };
        assert!(delta("{\"story\": \""), "a delimiter: parsed");
        // A long string streamed in small pieces: one partial per 64 bytes, not per piece.
        let mut emitted = 0;
        for _ in 0..255 {
            if delta("ab") {
                emitted += 1;
            }
        }
        assert_eq!(emitted, 510 / REPARSE_BYTES);
        assert!(delta("\"}"), "the closing delimiter is parsed");
        let Some(AgentEvent::OutputPartial { value }) = partial.latest() else {
            panic!("a partial answer is there");
        };
        assert_eq!(value["story"].as_str().map(str::len), Some(510));
    }

    #[test]
    fn a_schema_that_is_not_an_object_schema_is_a_configuration_error() {
        let error = OutputSpec::from_schema(json!({"type": "string"}))
            .check()
            .unwrap_err();
        assert_eq!(error.kind, ErrorKind::Config);
        assert!(error.message.contains("output schema"), "{}", error.message);
    }
}
