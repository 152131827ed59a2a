//! The request a backend receives for one model call.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::message::{Message, is_false};

/// A tool as the model sees it: a name, what it does, and a JSON Schema for its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by (`^[a-zA-Z0-9_-]{1,64}$` for every provider).
    pub name: String,
    /// What the tool does and when to use it; the model reads this.
    pub description: String,
    /// JSON Schema of the argument object. Shared: cloning a spec (every model request
    /// carries the registry's specs) copies a pointer, not the schema.
    pub parameters: Arc<Value>,
    /// Ask the provider to constrain the call's arguments to the schema (OpenAI's strict
    /// function calling). Adapters for OpenAI Chat and Responses send `strict: true` with the
    /// schema in strict form ([`strict_schema`](crate::strict_schema)); the other providers
    /// have no such switch and ignore it. Absent from the JSON form when `false`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub strict: bool,
    /// Kept out of the prompt until the provider's own tool search finds it (Anthropic's and
    /// OpenAI's `defer_loading`); only adapters whose [`Capabilities::tool_search`](crate::Capabilities::tool_search)
    /// is set honour it, and the loop sets it only for them. Absent from the JSON form when
    /// `false`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub defer_loading: bool,
}

impl ToolSpec {
    /// A spec from its three parts (not strict).
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters: Arc::new(parameters),
            strict: false,
            defer_loading: false,
        }
    }

    /// Sets [`strict`](Self::strict).
    #[must_use]
    pub fn with_strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }
}

/// Whether and which tools the model must call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// The model must not call tools.
    None,
    /// The model must call at least one tool.
    Required,
    /// The model must call this tool.
    Tool {
        /// The tool's name.
        name: String,
    },
}

/// How hard a reasoning model should think.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningEffort {
    /// The provider's smallest setting.
    Minimal,
    /// Little reasoning.
    Low,
    /// The usual default.
    Medium,
    /// Much reasoning.
    High,
}

/// Reasoning settings. Providers take either an effort level (OpenAI) or a token budget
/// (Anthropic, Gemini); adapters translate whichever is given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reasoning {
    /// Effort level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<ReasoningEffort>,
    /// Token budget for thinking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_tokens: Option<u32>,
}

/// Generation settings common to the providers. `None` leaves the provider's default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerationSettings {
    /// Cap on this call's output tokens (not a budget across a loop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// Sequences that end the output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    /// Reasoning effort or budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<Reasoning>,
    /// Whether the model may ask for several tool calls in one turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
}

/// A JSON Schema the model's answer must follow, for a backend that constrains its output
/// natively ([`Capabilities::structured_output`](crate::Capabilities::structured_output)).
///
/// The loop sends the schema already in strict form (every property required, optional ones
/// nullable, `additionalProperties: false` on every object), which OpenAI's strict mode
/// requires and every other provider accepts; adapters send it as it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseFormat {
    /// A name for the schema (`^[a-zA-Z0-9_-]{1,64}$`); OpenAI requires one.
    pub name: String,
    /// The JSON Schema of the answer (an object schema).
    pub schema: Value,
    /// Ask the provider to enforce the schema strictly where it offers a choice.
    #[serde(default, skip_serializing_if = "is_false")]
    pub strict: bool,
}

/// Everything a backend needs for one model call.
///
/// Backends borrow the request for the life of the call, so the loop keeps one history and
/// never copies it per round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// The provider's model name.
    pub model: String,
    /// The system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// Tools the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Whether and which tools the model must call.
    #[serde(default, skip_serializing_if = "is_auto")]
    pub tool_choice: ToolChoice,
    /// Generation settings.
    #[serde(default, skip_serializing_if = "is_default_settings")]
    pub settings: GenerationSettings,
    /// Provider-specific fields the common settings do not cover, merged into the provider's
    /// request body by its adapter.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extras: Map<String, Value>,
    /// The schema the answer must follow, for backends that constrain output natively;
    /// `None` (the default) leaves the answer free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// Ask the backend to stream (`true`) or to answer in one response.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub stream: bool,
}

impl ModelRequest {
    /// A streaming request for `model` with the given history and defaults elsewhere.
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> Self {
        Self {
            model: model.into(),
            messages,
            ..Self::default()
        }
    }
}

impl Default for ModelRequest {
    /// An empty streaming request (streaming is the default, as in the JSON form).
    fn default() -> Self {
        Self {
            model: String::new(),
            system: None,
            messages: Vec::new(),
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            settings: GenerationSettings::default(),
            extras: Map::new(),
            response_format: None,
            stream: true,
        }
    }
}

fn is_default_settings(settings: &GenerationSettings) -> bool {
    *settings == GenerationSettings::default()
}

fn is_auto(choice: &ToolChoice) -> bool {
    *choice == ToolChoice::Auto
}

fn yes() -> bool {
    true
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_true(value: &bool) -> bool {
    !is_false(value)
}
