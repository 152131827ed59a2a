//! The `/api/chat` request body (the rules are in the module docs of [`super`]).

use std::borrow::Cow;

use agent_types::{
    AssistantBlock, AssistantMessage, BackendError, BackendErrorKind, ContentKind, ImageSource,
    Message, ModelRequest, ReasoningEffort, ToolCall, ToolChoice, ToolResult, ToolResultBlock,
    UserBlock, UserMessage,
};
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::http::extras::{TopLevelExtras, nested, refuse_collisions};
use crate::http::json_body;

/// The extra that is merged into `options` instead of the top level.
const OPTIONS: &str = "options";

/// The request body for `request`.
pub(super) fn body(request: &ModelRequest) -> Result<Bytes, BackendError> {
    json_body(&build(request)?)
}

#[derive(Debug, Serialize)]
pub(super) struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    stream: bool,
    /// The JSON Schema the answer must follow (Ollama's structured outputs).
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    think: Option<Think>,
    #[serde(skip_serializing_if = "Option::is_none")]
    options: Option<Options<'a>>,
    #[serde(flatten)]
    extras: TopLevelExtras<'a>,
}

#[derive(Debug, Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Cow<'a, str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    images: Vec<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

impl<'a> WireMessage<'a> {
    fn new(role: &'static str, content: impl Into<Cow<'a, str>>) -> Self {
        Self {
            role,
            content: content.into(),
            images: Vec::new(),
            thinking: None,
            tool_calls: Vec::new(),
            tool_name: None,
            tool_call_id: None,
        }
    }
}

#[derive(Debug, Serialize)]
struct WireToolCall<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    id: &'a str,
    function: WireFunctionCall<'a>,
}

#[derive(Debug, Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: Cow<'a, Value>,
}

#[derive(Debug, Serialize)]
struct WireTool<'a> {
    r#type: &'static str,
    function: WireFunction<'a>,
}

#[derive(Debug, Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

/// `think`: on/off, or a level for models that have levels.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Think {
    Switch(bool),
    Level(&'static str),
}

#[derive(Debug, Serialize)]
struct Options<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    num_predict: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop: &'a [String],
    /// The caller's `extras.options`, merged in.
    #[serde(flatten)]
    extra: Option<&'a Map<String, Value>>,
}

impl Options<'_> {
    /// The names of the fields the adapter sets.
    fn own_keys(&self) -> impl Iterator<Item = &'static str> {
        [
            self.num_predict.map(|_| "num_predict"),
            self.temperature.map(|_| "temperature"),
            self.top_p.map(|_| "top_p"),
            (!self.stop.is_empty()).then_some("stop"),
        ]
        .into_iter()
        .flatten()
    }
}

fn unsupported(message: impl Into<String>) -> BackendError {
    BackendError::new(BackendErrorKind::Unsupported, message)
}

fn invalid(message: impl Into<String>) -> BackendError {
    BackendError::new(BackendErrorKind::InvalidRequest, message)
}

pub(super) fn build(request: &ModelRequest) -> Result<WireRequest<'_>, BackendError> {
    if request.model.trim().is_empty() {
        return Err(invalid(
            "the request names no model; set ModelRequest::model (e.g. `qwen3:8b`)",
        ));
    }
    crate::settings::refuse_out_of_range(
        crate::Provider::Ollama.settings_limits(&request.model),
        &request.settings,
    )?;
    if request.settings.parallel_tool_calls == Some(false) {
        return Err(unsupported(
            "Ollama cannot be told to make one tool call at a time; \
             leave GenerationSettings::parallel_tool_calls unset",
        ));
    }
    let offer_tools = match &request.tool_choice {
        ToolChoice::Auto => true,
        // Ollama has no switch for this; a model offered no tools calls none.
        ToolChoice::None => false,
        ToolChoice::Required | ToolChoice::Tool { .. } => {
            return Err(unsupported(
                "Ollama cannot force a tool call (its only tool choice is `auto`); \
                 use ToolChoice::Auto, or ToolChoice::None to offer no tools",
            ));
        }
    };
    let tools = if offer_tools {
        request
            .tools
            .iter()
            .map(|tool| WireTool {
                r#type: "function",
                function: WireFunction {
                    name: &tool.name,
                    description: &tool.description,
                    parameters: &tool.parameters,
                },
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = request.system.as_deref() {
        messages.push(WireMessage::new("system", system));
    }
    for message in &request.messages {
        messages.push(match message {
            Message::System { content } => WireMessage::new("system", content.as_str()),
            Message::User(user) => user_message(user)?,
            Message::Assistant(assistant) => assistant_message(assistant),
            Message::Tool(result) => tool_message(result)?,
        });
    }
    let wire = WireRequest {
        model: &request.model,
        messages,
        tools,
        stream: request.stream,
        format: request
            .response_format
            .as_ref()
            .map(|format| &format.schema),
        think: think(request),
        options: options(request)?,
        extras: TopLevelExtras {
            extras: &request.extras,
            nested: OPTIONS,
        },
    };
    let sent = [
        Some("model"),
        Some("messages"),
        Some("stream"),
        (!wire.tools.is_empty()).then_some("tools"),
        wire.think.as_ref().map(|_| "think"),
        wire.format.map(|_| "format"),
    ];
    refuse_collisions(&request.extras, sent.into_iter().flatten(), "Ollama", "")?;
    Ok(wire)
}

fn think(request: &ModelRequest) -> Option<Think> {
    let reasoning = request.settings.reasoning.as_ref()?;
    Some(match (reasoning.effort, reasoning.budget_tokens) {
        (_, Some(0)) => Think::Switch(false),
        (Some(effort), _) => Think::Level(match effort {
            ReasoningEffort::Minimal | ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }),
        (None, _) => Think::Switch(true),
    })
}

fn options(request: &ModelRequest) -> Result<Option<Options<'_>>, BackendError> {
    let settings = &request.settings;
    let extra = nested(&request.extras, OPTIONS)?;
    let options = Options {
        num_predict: settings.max_output_tokens,
        temperature: settings.temperature,
        top_p: settings.top_p,
        stop: &settings.stop_sequences,
        extra,
    };
    if let Some(extra) = extra {
        refuse_collisions(extra, options.own_keys(), "Ollama", "options.")?;
    }
    let empty = options.own_keys().next().is_none() && extra.is_none();
    Ok((!empty).then_some(options))
}

fn user_message(user: &UserMessage) -> Result<WireMessage<'_>, BackendError> {
    let mut texts = Vec::new();
    let mut images = Vec::new();
    for block in &user.content {
        match block {
            UserBlock::Text { text } => texts.push(text.as_str()),
            UserBlock::Image { source } => images.push(image(source)?),
            // Ollama's chat API takes text and images only.
            UserBlock::File(_) | UserBlock::Audio(_) => {
                return Err(BackendError::unsupported_content(
                    "Ollama",
                    block.kind(),
                    "a user turn",
                ));
            }
        }
    }
    let content = match texts.as_slice() {
        [] => Cow::Borrowed(""),
        [one] => Cow::Borrowed(*one),
        many => Cow::Owned(many.join("\n\n")),
    };
    Ok(WireMessage {
        images,
        ..WireMessage::new("user", content)
    })
}

/// The base64 data of an image; Ollama takes nothing else.
fn image(source: &ImageSource) -> Result<&str, BackendError> {
    match source {
        ImageSource::Base64 { data, .. } => Ok(data),
        ImageSource::Url { url } => {
            let Some(rest) = url.strip_prefix("data:") else {
                return Err(unsupported(
                    "Ollama takes images only as base64 data and fetches no URLs; \
                     download the image and send it as ImageSource::Base64",
                ));
            };
            match rest.split_once(',') {
                Some((meta, data)) if meta.ends_with(";base64") => Ok(data),
                _ => Err(invalid(
                    "an image `data:` URL must be base64-encoded (`data:image/png;base64,…`)",
                )),
            }
        }
    }
}

fn assistant_message(assistant: &AssistantMessage) -> WireMessage<'_> {
    let mut content: Cow<'_, str> = Cow::Borrowed("");
    let mut thinking: Option<Cow<'_, str>> = None;
    let mut tool_calls = Vec::new();
    let append = |into: &mut Cow<'_, str>, text: &str| match into {
        Cow::Owned(owned) => owned.push_str(text),
        Cow::Borrowed(borrowed) => {
            *into = Cow::Owned(format!("{borrowed}{text}"));
        }
    };
    for block in &assistant.content {
        match block {
            AssistantBlock::Text { text } | AssistantBlock::Refusal { text } => {
                if content.is_empty() {
                    content = Cow::Borrowed(text);
                } else {
                    append(&mut content, text);
                }
            }
            AssistantBlock::Thinking(block) => {
                if block.redacted || block.thinking.is_empty() {
                    continue;
                }
                match &mut thinking {
                    None => thinking = Some(Cow::Borrowed(&block.thinking)),
                    Some(existing) => append(existing, &block.thinking),
                }
            }
            AssistantBlock::ToolCall(call) => tool_calls.push(WireToolCall {
                id: call.id.as_str(),
                function: WireFunctionCall {
                    name: &call.name,
                    arguments: arguments(call),
                },
            }),
        }
    }
    WireMessage {
        thinking,
        tool_calls,
        ..WireMessage::new("assistant", content)
    }
}

/// Ollama's `arguments` must be an object: arguments that are not one (a call whose text was
/// not valid JSON) are wrapped rather than dropped.
fn arguments(call: &ToolCall) -> Cow<'_, Value> {
    match &call.arguments {
        Value::Object(_) => Cow::Borrowed(&call.arguments),
        Value::Null => Cow::Owned(Value::Object(Map::new())),
        other => {
            let mut wrapped = Map::new();
            wrapped.insert("arguments".to_owned(), other.clone());
            Cow::Owned(Value::Object(wrapped))
        }
    }
}

fn tool_message(result: &ToolResult) -> Result<WireMessage<'_>, BackendError> {
    // Text and JSON blocks join as text; images travel in the message's `images`, as in a
    // user turn; files are refused before sending.
    let (text, media) = crate::content::split_tool_result(result, "Ollama", &[ContentKind::Image])?;
    let content = match text {
        text if result.is_error => Cow::Owned(format!("Error: {text}")),
        text => text,
    };
    let images = media
        .into_iter()
        .filter_map(|block| match block {
            ToolResultBlock::Image { source } => Some(image(source)),
            _ => None,
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(WireMessage {
        tool_name: (!result.name.is_empty()).then_some(result.name.as_str()),
        tool_call_id: (!result.tool_call_id.as_str().is_empty())
            .then_some(result.tool_call_id.as_str()),
        images,
        ..WireMessage::new("tool", content)
    })
}
