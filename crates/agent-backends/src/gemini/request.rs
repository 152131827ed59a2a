//! The `generateContent` request body (the rules are in the module docs of [`super`]).

use std::borrow::Cow;

use agent_types::{
    AssistantBlock, AssistantMessage, BackendError, BackendErrorKind, ContentKind, FileBlock,
    FileSource, ImageSource, Message, ModelRequest, Reasoning, ReasoningEffort, ToolCall,
    ToolChoice, ToolResult, ToolResultBlock, UserBlock, UserMessage,
};
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Map, Value};

use super::schema::to_gemini_schema;
use super::{GENERATED_ID_PREFIX, thinking_budget};
use crate::http::extras::{TopLevelExtras, nested, refuse_collisions};
use crate::http::json_body;

/// The extra that is merged into `generationConfig` instead of the top level.
const GENERATION_CONFIG: &str = "generationConfig";

/// The request body for `request`.
pub(super) fn body(request: &ModelRequest) -> Result<Bytes, BackendError> {
    json_body(&build(request)?)
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WireRequest<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<SystemInstruction<'a>>,
    contents: Vec<Content<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<ToolGroup<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<ToolConfig<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    generation_config: Option<GenerationConfig<'a>>,
    #[serde(flatten)]
    extras: TopLevelExtras<'a>,
}

#[derive(Debug, Serialize)]
struct SystemInstruction<'a> {
    parts: Vec<TextPart<'a>>,
}

#[derive(Debug, Serialize)]
struct TextPart<'a> {
    text: &'a str,
}

#[derive(Debug, Serialize)]
struct Content<'a> {
    role: &'static str,
    parts: Vec<Part<'a>>,
}

/// One part; exactly one of the data fields is set, `thoughtSignature` may accompany it.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inline_data: Option<Blob<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file_data: Option<FileData<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_call: Option<FunctionCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_response: Option<FunctionResponse<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought_signature: Option<&'a str>,
}

impl<'a> Part<'a> {
    fn text(text: &'a str) -> Self {
        Self {
            text: Some(text),
            ..Self::default()
        }
    }

    /// The empty text part that carries a signature with nothing of its own to sign.
    fn signature(signature: &'a str) -> Self {
        Self {
            text: Some(""),
            thought_signature: Some(signature),
            ..Self::default()
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Blob<'a> {
    mime_type: &'a str,
    data: &'a str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct FileData<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    mime_type: Option<&'a str>,
    file_uri: &'a str,
}

#[derive(Debug, Serialize)]
struct FunctionCall<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    name: &'a str,
    args: Cow<'a, Value>,
}

#[derive(Debug, Serialize)]
struct FunctionResponse<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    name: &'a str,
    response: ResponseBody<'a>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    parts: Vec<Part<'a>>,
}

/// `{"result": …}` or `{"error": "…"}` (serde's external tagging is exactly that shape).
#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
enum ResponseBody<'a> {
    Result(Value),
    Error(Cow<'a, str>),
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolGroup<'a> {
    function_declarations: Vec<FunctionDeclaration<'a>>,
}

#[derive(Debug, Serialize)]
struct FunctionDeclaration<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<Value>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolConfig<'a> {
    function_calling_config: FunctionCallingConfig<'a>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct FunctionCallingConfig<'a> {
    mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    allowed_function_names: Option<[&'a str; 1]>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct GenerationConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking_config: Option<ThinkingConfig>,
    /// `application/json` with a response schema (native structured output).
    #[serde(skip_serializing_if = "Option::is_none")]
    response_mime_type: Option<&'static str>,
    /// The answer's schema, in Gemini's OpenAPI subset (as tool parameters are).
    #[serde(skip_serializing_if = "Option::is_none")]
    response_schema: Option<Value>,
    /// The caller's `extras.generationConfig`, merged in.
    #[serde(flatten)]
    extra: Option<&'a Map<String, Value>>,
}

impl GenerationConfig<'_> {
    /// The wire names of the fields the adapter sets.
    fn own_keys(&self) -> impl Iterator<Item = &'static str> {
        [
            self.max_output_tokens.map(|_| "maxOutputTokens"),
            self.temperature.map(|_| "temperature"),
            self.top_p.map(|_| "topP"),
            (!self.stop_sequences.is_empty()).then_some("stopSequences"),
            self.thinking_config.as_ref().map(|_| "thinkingConfig"),
            self.response_mime_type.map(|_| "responseMimeType"),
            self.response_schema.as_ref().map(|_| "responseSchema"),
        ]
        .into_iter()
        .flatten()
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ThinkingConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking_budget: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking_level: Option<&'static str>,
    include_thoughts: bool,
}

pub(super) fn build(request: &ModelRequest) -> Result<WireRequest<'_>, BackendError> {
    if request.settings.parallel_tool_calls == Some(false) {
        return Err(BackendError::new(
            BackendErrorKind::Unsupported,
            "Gemini cannot be told to make one tool call at a time; \
             leave GenerationSettings::parallel_tool_calls unset",
        ));
    }
    crate::settings::refuse_out_of_range(
        crate::Provider::Gemini.settings_limits(&request.model),
        &request.settings,
    )?;
    let mut system = Vec::new();
    if let Some(text) = request.system.as_deref() {
        system.push(TextPart { text });
    }
    let contents = contents(&request.messages, &mut system)?;
    let tools = if request.tools.is_empty() {
        Vec::new()
    } else {
        vec![ToolGroup {
            function_declarations: request
                .tools
                .iter()
                .map(|tool| FunctionDeclaration {
                    name: &tool.name,
                    description: &tool.description,
                    parameters: parameters(&tool.parameters),
                })
                .collect(),
        }]
    };
    let wire = WireRequest {
        system_instruction: (!system.is_empty()).then_some(SystemInstruction { parts: system }),
        contents,
        tools,
        tool_config: tool_config(request)?,
        generation_config: generation_config(request)?,
        extras: TopLevelExtras {
            extras: &request.extras,
            nested: GENERATION_CONFIG,
        },
    };
    let sent = [
        Some("contents"),
        wire.system_instruction
            .as_ref()
            .map(|_| "systemInstruction"),
        (!wire.tools.is_empty()).then_some("tools"),
        wire.tool_config.as_ref().map(|_| "toolConfig"),
    ];
    refuse_collisions(&request.extras, sent.into_iter().flatten(), "Gemini", "")?;
    Ok(wire)
}

fn invalid(message: impl Into<String>) -> BackendError {
    BackendError::new(BackendErrorKind::InvalidRequest, message)
}

/// A tool's parameters, rewritten to Gemini's schema subset; none for a tool without
/// parameters (`null` or `{}`).
fn parameters(schema: &Value) -> Option<Value> {
    match schema {
        Value::Null => None,
        Value::Object(map) if map.is_empty() => None,
        schema => Some(to_gemini_schema(schema)),
    }
}

fn tool_config(request: &ModelRequest) -> Result<Option<ToolConfig<'_>>, BackendError> {
    let (mode, allowed) = match &request.tool_choice {
        ToolChoice::Auto => return Ok(None),
        ToolChoice::None if request.tools.is_empty() => return Ok(None),
        ToolChoice::None => ("NONE", None),
        ToolChoice::Required if request.tools.is_empty() => {
            return Err(invalid(
                "tool_choice `required` asks for a tool call, but the request offers no tools",
            ));
        }
        ToolChoice::Required => ("ANY", None),
        ToolChoice::Tool { name } => {
            if !request.tools.iter().any(|tool| tool.name == *name) {
                return Err(invalid(format!(
                    "tool_choice names `{name}`, which is not among the request's tools"
                )));
            }
            ("ANY", Some([name.as_str()]))
        }
    };
    Ok(Some(ToolConfig {
        function_calling_config: FunctionCallingConfig {
            mode,
            allowed_function_names: allowed,
        },
    }))
}

fn generation_config(request: &ModelRequest) -> Result<Option<GenerationConfig<'_>>, BackendError> {
    let settings = &request.settings;
    let extra = nested(&request.extras, GENERATION_CONFIG)?;
    let config = GenerationConfig {
        max_output_tokens: settings.max_output_tokens,
        temperature: settings.temperature,
        top_p: settings.top_p,
        stop_sequences: &settings.stop_sequences,
        thinking_config: settings
            .reasoning
            .as_ref()
            .map(|reasoning| thinking_config(&request.model, reasoning)),
        response_mime_type: request.response_format.as_ref().map(|_| "application/json"),
        response_schema: request
            .response_format
            .as_ref()
            .map(|format| super::schema::to_gemini_schema(&format.schema)),
        extra,
    };
    if let Some(extra) = extra {
        refuse_collisions(extra, config.own_keys(), "Gemini", "generationConfig.")?;
    }
    let empty = config.own_keys().next().is_none() && extra.is_none();
    Ok((!empty).then_some(config))
}

fn thinking_config(model: &str, reasoning: &Reasoning) -> ThinkingConfig {
    let base = model.rsplit('/').next().unwrap_or(model);
    let budgets_only = base.starts_with("gemini-1") || base.starts_with("gemini-2");
    match (reasoning.budget_tokens, reasoning.effort) {
        (Some(budget), _) => ThinkingConfig {
            thinking_budget: Some(budget),
            thinking_level: None,
            include_thoughts: budget != 0,
        },
        (None, Some(effort)) if budgets_only => ThinkingConfig {
            thinking_budget: Some(thinking_budget(effort)),
            thinking_level: None,
            include_thoughts: true,
        },
        (None, Some(effort)) => ThinkingConfig {
            thinking_budget: None,
            thinking_level: Some(match effort {
                ReasoningEffort::Minimal => "minimal",
                ReasoningEffort::Low => "low",
                ReasoningEffort::Medium => "medium",
                ReasoningEffort::High => "high",
            }),
            include_thoughts: true,
        },
        (None, None) => ThinkingConfig {
            thinking_budget: None,
            thinking_level: None,
            include_thoughts: true,
        },
    }
}

fn contents<'a>(
    messages: &'a [Message],
    system: &mut Vec<TextPart<'a>>,
) -> Result<Vec<Content<'a>>, BackendError> {
    let mut contents = Vec::with_capacity(messages.len());
    let mut at = 0;
    while let Some(message) = messages.get(at) {
        let content = match message {
            Message::System { content } => {
                system.push(TextPart { text: content });
                at += 1;
                continue;
            }
            Message::User(user) => Content {
                role: "user",
                parts: user_parts(user)?,
            },
            Message::Assistant(assistant) => Content {
                role: "model",
                parts: model_parts(assistant),
            },
            Message::Tool(_) => {
                let end = messages[at..]
                    .iter()
                    .position(|message| !matches!(message, Message::Tool(_)))
                    .map_or(messages.len(), |length| at + length);
                let content = Content {
                    role: "user",
                    parts: function_responses(&messages[..at], &messages[at..end])?,
                };
                at = end;
                contents.push(content);
                continue;
            }
        };
        if !content.parts.is_empty() {
            contents.push(content);
        }
        at += 1;
    }
    Ok(contents)
}

fn user_parts(user: &UserMessage) -> Result<Vec<Part<'_>>, BackendError> {
    user.content
        .iter()
        .map(|block| match block {
            UserBlock::Text { text } => Ok(Part::text(text)),
            UserBlock::Image { source } => image(source),
            UserBlock::File(file) => Ok(file_part(file)),
            UserBlock::Audio(audio) => Ok(Part {
                inline_data: Some(Blob {
                    mime_type: &audio.media_type,
                    data: &audio.data,
                }),
                ..Part::default()
            }),
        })
        .collect()
}

/// A file as `inlineData` (base64) or `fileData` (a URL, or an uploaded file's URI: the
/// Files API's `files/…` or its full address).
fn file_part(file: &FileBlock) -> Part<'_> {
    match &file.source {
        FileSource::Base64 { data } => Part {
            inline_data: Some(Blob {
                mime_type: &file.media_type,
                data,
            }),
            ..Part::default()
        },
        FileSource::Url { url: uri } | FileSource::FileId { file_id: uri } => Part {
            file_data: Some(FileData {
                mime_type: Some(&file.media_type),
                file_uri: uri,
            }),
            ..Part::default()
        },
    }
}

fn image(source: &ImageSource) -> Result<Part<'_>, BackendError> {
    Ok(match source {
        ImageSource::Base64 { media_type, data } => Part {
            inline_data: Some(Blob {
                mime_type: media_type,
                data,
            }),
            ..Part::default()
        },
        ImageSource::Url { url } if url.starts_with("data:") => {
            let (mime_type, data) = data_url(url)?;
            Part {
                inline_data: Some(Blob { mime_type, data }),
                ..Part::default()
            }
        }
        ImageSource::Url { url } => Part {
            file_data: Some(FileData {
                mime_type: image_mime_type(url),
                file_uri: url,
            }),
            ..Part::default()
        },
    })
}

/// The MIME type and base64 payload of a `data:<type>;base64,<data>` URL.
fn data_url(url: &str) -> Result<(&str, &str), BackendError> {
    let rest = url.strip_prefix("data:").unwrap_or(url);
    let (meta, data) = rest
        .split_once(',')
        .ok_or_else(|| invalid("an image `data:` URL has no `,` before its data"))?;
    let mime_type = meta.strip_suffix(";base64").ok_or_else(|| {
        invalid("an image `data:` URL must be base64-encoded (`data:image/png;base64,…`)")
    })?;
    if mime_type.is_empty() {
        return Err(invalid("an image `data:` URL names no MIME type"));
    }
    Ok((mime_type, data))
}

/// The MIME type a URL's file extension implies, for the image types Gemini reads.
fn image_mime_type(url: &str) -> Option<&'static str> {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let extension = path.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match extension.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "webp" => "image/webp",
        "gif" => "image/gif",
        "heic" => "image/heic",
        "heif" => "image/heif",
        _ => return None,
    })
}

/// The parts of a model turn, in the order the model produced them, with every thought
/// signature on the part it came with.
fn model_parts(message: &AssistantMessage) -> Vec<Part<'_>> {
    let mut parts = Vec::with_capacity(message.content.len());
    // The signature of a signed thinking block, waiting for the part it belongs to.
    let mut pending: Option<&str> = None;
    for block in &message.content {
        match block {
            AssistantBlock::Thinking(thinking) => {
                if thinking.redacted {
                    continue;
                }
                if let Some(signature) = thinking.signature.as_deref()
                    && let Some(earlier) = pending.replace(signature)
                {
                    parts.push(Part::signature(earlier));
                }
            }
            AssistantBlock::Text { text } | AssistantBlock::Refusal { text } => {
                if text.is_empty() && pending.is_none() {
                    continue;
                }
                parts.push(Part {
                    thought_signature: pending.take(),
                    ..Part::text(text)
                });
            }
            AssistantBlock::ToolCall(call) => {
                let signature = match (call.signature.as_deref(), pending.take()) {
                    (Some(own), Some(carried)) => {
                        parts.push(Part::signature(carried));
                        Some(own)
                    }
                    (own, carried) => own.or(carried),
                };
                parts.push(Part {
                    function_call: Some(FunctionCall {
                        id: provider_id(call.id.as_str()),
                        name: &call.name,
                        args: arguments(call),
                    }),
                    thought_signature: signature,
                    ..Part::default()
                });
            }
        }
    }
    if let Some(signature) = pending {
        parts.push(Part::signature(signature));
    }
    parts
}

/// A call id Gemini issued, or none for one the adapter made up.
fn provider_id(id: &str) -> Option<&str> {
    (!id.is_empty() && !id.starts_with(GENERATED_ID_PREFIX)).then_some(id)
}

/// Gemini's `args` must be an object: arguments that are not one (a call whose text was not
/// valid JSON, from another provider) are wrapped rather than dropped.
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

/// The `functionResponse` parts for a run of tool results, in the order of the calls they
/// answer (`before` is the history before the run).
fn function_responses<'a>(
    before: &'a [Message],
    results: &'a [Message],
) -> Result<Vec<Part<'a>>, BackendError> {
    let calls: Vec<&ToolCall> = before
        .iter()
        .rev()
        .find_map(|message| match message {
            Message::Assistant(assistant) => Some(assistant.tool_calls().collect()),
            _ => None,
        })
        .unwrap_or_default();
    let position = |result: &ToolResult| {
        calls
            .iter()
            .position(|call| call.id == result.tool_call_id)
            .unwrap_or(usize::MAX)
    };
    let mut ordered: Vec<&ToolResult> = results
        .iter()
        .filter_map(|message| match message {
            Message::Tool(result) => Some(result),
            _ => None,
        })
        .collect();
    // Stable: results for unknown calls keep their relative order, after the known ones.
    ordered.sort_by_key(|result| position(result));
    ordered
        .into_iter()
        .map(|result| {
            let name = if result.name.is_empty() {
                calls
                    .iter()
                    .find(|call| call.id == result.tool_call_id)
                    .map(|call| call.name.as_str())
                    .ok_or_else(|| {
                        invalid(format!(
                            "the tool result for call `{}` has no tool name and answers no call \
                             of the preceding assistant turn; Gemini needs the name",
                            result.tool_call_id
                        ))
                    })?
            } else {
                result.name.as_str()
            };
            // Text and JSON blocks join as text (a JSON-only result parses back to its
            // value below); images and files travel as the function response's own parts
            // (Gemini's multimodal function responses).
            let (content, media) = crate::content::split_tool_result(
                result,
                "Gemini",
                &[ContentKind::Image, ContentKind::File],
            )?;
            let parts = media
                .into_iter()
                .filter_map(|block| match block {
                    ToolResultBlock::Image { source } => Some(image(source)),
                    ToolResultBlock::File(file) => Some(Ok(file_part(file))),
                    ToolResultBlock::Text { .. } | ToolResultBlock::Json { .. } => None,
                })
                .collect::<Result<Vec<_>, _>>()?;
            let response = if result.is_error {
                ResponseBody::Error(content)
            } else {
                ResponseBody::Result(
                    serde_json::from_str(&content)
                        .unwrap_or_else(|_| Value::String(content.into_owned())),
                )
            };
            Ok(Part {
                function_response: Some(FunctionResponse {
                    id: provider_id(result.tool_call_id.as_str()),
                    name,
                    response,
                    parts,
                }),
                ..Part::default()
            })
        })
        .collect()
}
