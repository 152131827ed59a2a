//! The request body: a [`ModelRequest`] in the Responses API's shape.
//!
//! The wire structs borrow from the request, so building a body copies nothing but the few
//! strings the API wants in another form (image data URLs, tool arguments as JSON text).

use std::borrow::Cow;
use std::sync::Arc;

use agent_types::{
    AssistantBlock, BackendError, BackendErrorKind, ContentKind, FileBlock, FileSource,
    ImageSource, Message, ModelRequest, ReasoningEffort, Thinking, ToolChoice, ToolResultBlock,
    ToolSpec, UserBlock,
};
use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::arguments_text::ArgumentsText;
use crate::http::json_body;
use crate::tools_json::ToolsJson;

/// What the backend's configuration adds to every request.
#[derive(Debug, Clone, Copy)]
pub(super) struct Settings<'a> {
    /// Whether OpenAI keeps the response (`store`).
    pub(super) store: bool,
    /// Ask for encrypted reasoning: `Some` forces it on or off, `None` decides per request.
    pub(super) encrypted_reasoning: Option<bool>,
    /// The `prompt_cache_key`.
    pub(super) prompt_cache_key: Option<&'a str>,
    /// The backend's serialized tools array (none: serialized for this request alone).
    pub(super) tools: Option<&'a ToolsJson>,
}

/// The JSON body for `request`.
pub(super) fn body(request: &ModelRequest, settings: Settings<'_>) -> Result<Bytes, BackendError> {
    json_body(&build(request, settings)?)
}

/// The body before serialization (the tests look at it as JSON).
pub(super) fn build<'a>(
    request: &'a ModelRequest,
    settings: Settings<'a>,
) -> Result<Body<'a>, BackendError> {
    let generation = &request.settings;
    if !generation.stop_sequences.is_empty() {
        return Err(BackendError::new(
            BackendErrorKind::Unsupported,
            "the OpenAI Responses API has no stop sequences; remove `stop_sequences` \
             or use the Chat Completions adapter",
        ));
    }
    crate::settings::refuse_out_of_range(
        crate::Provider::OpenAiResponses.settings_limits(&request.model),
        generation,
    )?;
    let extras = &request.extras;
    // A caller who sets `store` through the extras decides what the server keeps, and with
    // it whether a reasoning item can be sent back by id alone.
    let store = extras
        .get("store")
        .and_then(Value::as_bool)
        .unwrap_or(settings.store);
    let input = input(&request.messages, store)?;
    let replays_reasoning = input
        .iter()
        .any(|item| matches!(item, Item::Reasoning { .. }));
    let encrypted = settings.encrypted_reasoning.unwrap_or_else(|| {
        generation.reasoning.is_some() || replays_reasoning || is_reasoning_model(&request.model)
    });
    let (tools, tool_choice) = tools(request, settings.tools)?;
    let mut body = Body {
        model: Some(&request.model),
        instructions: request.system.as_deref(),
        input: Some(input),
        tools,
        tool_choice,
        parallel_tool_calls: generation.parallel_tool_calls,
        max_output_tokens: generation.max_output_tokens,
        temperature: generation.temperature,
        top_p: generation.top_p,
        reasoning: generation.reasoning.map(|reasoning| ReasoningParam {
            effort: reasoning
                .effort
                .map(effort_name)
                .or_else(|| reasoning.budget_tokens.map(effort_for_budget)),
            summary: "auto",
        }),
        store: Some(settings.store),
        include: encrypted.then_some(["reasoning.encrypted_content"]),
        prompt_cache_key: settings.prompt_cache_key,
        text: request.response_format.as_ref().map(|format| TextParam {
            format: TextFormat {
                kind: "json_schema",
                name: &format.name,
                schema: &format.schema,
                strict: format.strict,
            },
        }),
        stream: request.stream.then_some(true),
        extras,
    };
    body.yield_to(extras);
    Ok(body)
}

/// The request body. Every field is optional so that a key the caller put in `extras`
/// replaces ours rather than appearing twice.
#[derive(Debug, Serialize)]
pub(super) struct Body<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input: Option<Vec<Item<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Spliced as raw JSON: serialized once per tool set (`tools_json`).
    tools: Option<Arc<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Choice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<ReasoningParam>,
    #[serde(skip_serializing_if = "Option::is_none")]
    store: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    include: Option<[&'static str; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<TextParam<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(flatten)]
    extras: &'a Map<String, Value>,
}

/// `text: {"format": {"type": "json_schema", ...}}`: the answer constrained to the schema.
#[derive(Debug, Serialize)]
struct TextParam<'a> {
    format: TextFormat<'a>,
}

#[derive(Debug, Serialize)]
struct TextFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    schema: &'a Value,
    strict: bool,
}

impl Body<'_> {
    /// Drops every field the caller set through `extras`.
    fn yield_to(&mut self, extras: &Map<String, Value>) {
        if extras.is_empty() {
            return;
        }
        let set = |key: &str| extras.contains_key(key);
        if set("model") {
            self.model = None;
        }
        if set("instructions") {
            self.instructions = None;
        }
        if set("input") {
            self.input = None;
        }
        if set("tools") {
            self.tools = None;
        }
        if set("tool_choice") {
            self.tool_choice = None;
        }
        if set("parallel_tool_calls") {
            self.parallel_tool_calls = None;
        }
        if set("max_output_tokens") {
            self.max_output_tokens = None;
        }
        if set("temperature") {
            self.temperature = None;
        }
        if set("top_p") {
            self.top_p = None;
        }
        if set("reasoning") {
            self.reasoning = None;
        }
        if set("store") {
            self.store = None;
        }
        if set("include") {
            self.include = None;
        }
        if set("prompt_cache_key") {
            self.prompt_cache_key = None;
        }
        if set("text") {
            self.text = None;
        }
        if set("stream") {
            self.stream = None;
        }
    }
}

/// One item of `input`.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Item<'a> {
    Message {
        role: &'static str,
        content: Vec<Part<'a>>,
    },
    Reasoning {
        id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<&'a str>,
        summary: Vec<Summary<'a>>,
    },
    FunctionCall {
        call_id: &'a str,
        name: &'a str,
        arguments: ArgumentsText<'a>,
    },
    FunctionCallOutput {
        call_id: &'a str,
        output: Output<'a>,
    },
}

/// A function call's output: a string, or a content array when it carries images or files.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Output<'a> {
    Text(Cow<'a, str>),
    Parts(Vec<OutputPart<'a>>),
}

// The variants are named after the API's `type` tags, which all start with `input_`.
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutputPart<'a> {
    InputText {
        text: Cow<'a, str>,
    },
    InputImage {
        image_url: Cow<'a, str>,
        detail: &'static str,
    },
    InputFile {
        #[serde(skip_serializing_if = "Option::is_none")]
        filename: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        file_data: Option<Cow<'a, str>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        file_id: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        file_url: Option<&'a str>,
    },
}

fn input_image(source: &ImageSource) -> Part<'_> {
    Part::InputImage {
        image_url: match source {
            ImageSource::Base64 { media_type, data } => {
                Cow::Owned(format!("data:{media_type};base64,{data}"))
            }
            ImageSource::Url { url } => Cow::Borrowed(url.as_str()),
        },
        detail: "auto",
    }
}

fn input_file(file: &FileBlock) -> Part<'_> {
    match &file.source {
        FileSource::Base64 { data } => Part::InputFile {
            // OpenAI requires a name next to inline data.
            filename: Some(file.filename.as_deref().unwrap_or("file")),
            file_data: Some(Cow::Owned(format!(
                "data:{};base64,{data}",
                file.media_type
            ))),
            file_id: None,
            file_url: None,
        },
        FileSource::Url { url } => Part::InputFile {
            filename: file.filename.as_deref(),
            file_data: None,
            file_id: None,
            file_url: Some(url.as_str()),
        },
        FileSource::FileId { file_id } => Part::InputFile {
            filename: None,
            file_data: None,
            file_id: Some(file_id.as_str()),
            file_url: None,
        },
    }
}

/// One content part of a message item.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    InputText {
        text: &'a str,
    },
    InputImage {
        image_url: Cow<'a, str>,
        detail: &'static str,
    },
    InputFile {
        #[serde(skip_serializing_if = "Option::is_none")]
        filename: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        file_data: Option<Cow<'a, str>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        file_id: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        file_url: Option<&'a str>,
    },
    OutputText {
        text: &'a str,
    },
    Refusal {
        refusal: &'a str,
    },
}

/// One part of a reasoning item's summary.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename = "summary_text")]
struct Summary<'a> {
    text: &'a str,
}

/// A function tool. The Responses API puts name and schema at the top level (not under
/// `function` as Chat Completions does).
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename = "function")]
struct Tool<'a> {
    name: &'a str,
    description: &'a str,
    parameters: Cow<'a, Value>,
    /// Always sent: left out, the Responses API rewrites a schema it can make strict into strict
    /// mode, which marks every optional parameter required. agentry validates arguments
    /// against the schema as written; a tool declared strict is sent with its schema in
    /// strict form.
    strict: bool,
    /// Loaded only when the hosted `tool_search` finds it (`super::tool_search`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    defer_loading: bool,
}

/// An entry of `tools`: a function, or the hosted tool search that loads deferred ones.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum WireTool<'a> {
    Function(Tool<'a>),
    Hosted {
        #[serde(rename = "type")]
        kind: &'static str,
    },
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Choice<'a> {
    Mode(&'static str),
    Function {
        #[serde(rename = "type")]
        kind: &'static str,
        name: &'a str,
    },
}

#[derive(Debug, Serialize)]
struct ReasoningParam {
    #[serde(skip_serializing_if = "Option::is_none")]
    effort: Option<&'static str>,
    summary: &'static str,
}

/// The name the provider is refused under.
const PROVIDER: &str = "OpenAI Responses";

fn input(messages: &[Message], store: bool) -> Result<Vec<Item<'_>>, BackendError> {
    let mut items = Vec::with_capacity(messages.len());
    for message in messages {
        match message {
            Message::System { content } => items.push(Item::Message {
                role: "system",
                content: vec![Part::InputText { text: content }],
            }),
            Message::User(user) => {
                let content = user
                    .content
                    .iter()
                    .map(|block| match block {
                        UserBlock::Text { text } => Ok(Part::InputText { text }),
                        UserBlock::Image { source } => Ok(input_image(source)),
                        UserBlock::File(file) => Ok(input_file(file)),
                        UserBlock::Audio(_) => Err(BackendError::unsupported_content(
                            PROVIDER,
                            block.kind(),
                            "a user turn",
                        )),
                    })
                    .collect::<Result<_, BackendError>>()?;
                items.push(Item::Message {
                    role: "user",
                    content,
                });
            }
            Message::Assistant(assistant) => {
                for block in &assistant.content {
                    match block {
                        AssistantBlock::Text { text } if text.is_empty() => {}
                        AssistantBlock::Text { text } => items.push(Item::Message {
                            role: "assistant",
                            content: vec![Part::OutputText { text }],
                        }),
                        AssistantBlock::Refusal { text } => items.push(Item::Message {
                            role: "assistant",
                            content: vec![Part::Refusal { refusal: text }],
                        }),
                        AssistantBlock::Thinking(thinking) => {
                            if let Some(item) = reasoning(thinking, store) {
                                items.push(item);
                            }
                        }
                        AssistantBlock::ToolCall(call) => {
                            let arguments = match &call.arguments {
                                // The model's own text, kept as it wrote it.
                                Value::String(raw) if call.invalid_arguments => {
                                    ArgumentsText::Raw(raw)
                                }
                                arguments => ArgumentsText::Json(arguments),
                            };
                            items.push(Item::FunctionCall {
                                call_id: call.id.as_str(),
                                name: &call.name,
                                arguments,
                            });
                        }
                    }
                }
            }
            Message::Tool(result) => {
                // Text and JSON blocks join as text; with images or files the output is a
                // content array: the text, then each of them.
                let (text, media) = crate::content::split_tool_result(
                    result,
                    PROVIDER,
                    &[ContentKind::Image, ContentKind::File],
                )?;
                // The API has no error flag on a function result; the text says it instead.
                let text = match text {
                    text if result.is_error => Cow::Owned(format!("Error: {text}")),
                    text => text,
                };
                let output = if media.is_empty() {
                    Output::Text(text)
                } else {
                    let mut parts = Vec::with_capacity(media.len() + 1);
                    if !text.is_empty() {
                        parts.push(OutputPart::InputText { text });
                    }
                    for block in media {
                        parts.push(match block {
                            ToolResultBlock::Image { source } => match input_image(source) {
                                Part::InputImage { image_url, detail } => {
                                    OutputPart::InputImage { image_url, detail }
                                }
                                _ => continue,
                            },
                            ToolResultBlock::File(file) => match input_file(file) {
                                Part::InputFile {
                                    filename,
                                    file_data,
                                    file_id,
                                    file_url,
                                } => OutputPart::InputFile {
                                    filename,
                                    file_data,
                                    file_id,
                                    file_url,
                                },
                                _ => continue,
                            },
                            ToolResultBlock::Text { .. } | ToolResultBlock::Json { .. } => continue,
                        });
                    }
                    Output::Parts(parts)
                };
                items.push(Item::FunctionCallOutput {
                    call_id: result.tool_call_id.as_str(),
                    output,
                });
            }
        }
    }
    Ok(items)
}

/// The reasoning item for a thinking block, or `None` when the block cannot be sent back.
///
/// Only blocks this API produced have an item id; reasoning from another provider (an
/// Anthropic signature, a redacted block) means nothing to OpenAI and is left out. Without
/// stored responses, an item without its encrypted content would be looked up by id and
/// not found, so it is left out too.
fn reasoning(thinking: &Thinking, store: bool) -> Option<Item<'_>> {
    if thinking.redacted {
        return None;
    }
    let id = thinking.id.as_deref()?;
    let encrypted = thinking.signature.as_deref().filter(|s| !s.is_empty());
    if encrypted.is_none() && !store {
        return None;
    }
    let summary = if thinking.thinking.is_empty() {
        Vec::new()
    } else {
        vec![Summary {
            text: &thinking.thinking,
        }]
    };
    Some(Item::Reasoning {
        id,
        encrypted_content: encrypted,
        summary,
    })
}

type ToolParts<'a> = (Option<Arc<RawValue>>, Option<Choice<'a>>);

fn tools<'a>(
    request: &'a ModelRequest,
    cache: Option<&ToolsJson>,
) -> Result<ToolParts<'a>, BackendError> {
    if request.tools.is_empty() {
        return match &request.tool_choice {
            ToolChoice::Auto | ToolChoice::None => Ok((None, None)),
            ToolChoice::Required | ToolChoice::Tool { .. } => Err(BackendError::new(
                BackendErrorKind::InvalidRequest,
                "tool_choice asks for a tool call but the request declares no tools",
            )),
        };
    }
    let wire = |tools: &'a [ToolSpec]| {
        let mut wire: Vec<WireTool<'a>> = tools
            .iter()
            .map(|tool| {
                WireTool::Function(Tool {
                    name: &tool.name,
                    description: &tool.description,
                    parameters: crate::content::tool_parameters(tool),
                    strict: tool.strict,
                    defer_loading: tool.defer_loading,
                })
            })
            .collect();
        if tools.iter().any(|tool| tool.defer_loading) {
            // The hosted search loads the deferred tools the model asks for (docs/mcp.md).
            wire.push(WireTool::Hosted {
                kind: "tool_search",
            });
        }
        wire
    };
    let tools = match cache {
        Some(cache) => cache.get(&request.tools, wire)?,
        None => crate::tools_json::serialize(&wire(&request.tools))?,
    };
    let choice = match &request.tool_choice {
        ToolChoice::Auto => Choice::Mode("auto"),
        ToolChoice::None => Choice::Mode("none"),
        ToolChoice::Required => Choice::Mode("required"),
        ToolChoice::Tool { name } => {
            if !request.tools.iter().any(|tool| tool.name == *name) {
                return Err(BackendError::new(
                    BackendErrorKind::InvalidRequest,
                    format!("tool_choice names `{name}`, which is not among the request's tools"),
                ));
            }
            Choice::Function {
                kind: "function",
                name,
            }
        }
    };
    Ok((Some(tools), Some(choice)))
}

fn effort_name(effort: ReasoningEffort) -> &'static str {
    match effort {
        ReasoningEffort::Minimal => "minimal",
        ReasoningEffort::Low => "low",
        ReasoningEffort::Medium => "medium",
        ReasoningEffort::High => "high",
    }
}

/// OpenAI takes an effort level, not a token budget: the budget picks the nearest level.
fn effort_for_budget(budget: u32) -> &'static str {
    match budget {
        0..=1_023 => "minimal",
        1_024..=4_095 => "low",
        4_096..=16_383 => "medium",
        _ => "high",
    }
}

/// Whether `model` names a reasoning model, which returns reasoning items. Non-reasoning
/// models (gpt-4o, gpt-4.1) reject a request that asks for encrypted reasoning, so it is only
/// asked for when the name says so, reasoning settings are given, or the history already
/// carries reasoning; [`with_encrypted_reasoning`](super::OpenAiResponses::with_encrypted_reasoning)
/// overrides the guess (for deployments with names of their own).
fn is_reasoning_model(model: &str) -> bool {
    let name = model.rsplit('/').next().unwrap_or(model);
    let o_series = name.len() >= 2
        && name.starts_with('o')
        && name.as_bytes().get(1).is_some_and(u8::is_ascii_digit);
    let gpt5 = name.starts_with("gpt-5") && !name.contains("-chat");
    o_series || gpt5 || name.starts_with("codex")
}

#[cfg(test)]
mod tests {
    use super::is_reasoning_model;

    #[test]
    fn reasoning_models_by_name() {
        for model in [
            "o1",
            "o3-mini",
            "o4-mini-2025-04-16",
            "gpt-5",
            "gpt-5-mini",
            "gpt-5.1-codex",
            "openai/gpt-5",
            "codex-mini-latest",
        ] {
            assert!(is_reasoning_model(model), "{model}");
        }
        for model in [
            "gpt-4o",
            "gpt-4.1-mini",
            "gpt-5-chat-latest",
            "omni-moderation-latest",
            "o",
            "",
        ] {
            assert!(!is_reasoning_model(model), "{model}");
        }
    }
}
