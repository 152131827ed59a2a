//! Building the Chat Completions request body from a [`ModelRequest`].

use std::borrow::Cow;
use std::sync::Arc;

use agent_types::{
    AssistantBlock, AssistantMessage, BackendError, BackendErrorKind, ContentKind, FileBlock,
    FileSource, ImageSource, Message, ModelRequest, ReasoningEffort, ToolCall, ToolChoice,
    ToolResultBlock, ToolSpec, UserBlock, UserMessage,
};
use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::arguments_text::ArgumentsText;
use crate::tools_json::ToolsJson;

use crate::http::json_body;

/// What the backend adds to every request, beside the request itself.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Options<'a> {
    /// Sent as `prompt_cache_key`.
    pub(super) prompt_cache_key: Option<&'a str>,
    /// Send reasoning text back as `reasoning_content` on assistant messages.
    pub(super) reasoning_in_history: bool,
    /// The backend's serialized tools array (none: serialized for this request alone).
    pub(super) tools: Option<&'a ToolsJson>,
}

/// The serialized request body.
pub(super) fn body(request: &ModelRequest, options: Options<'_>) -> Result<Bytes, BackendError> {
    json_body(&wire_request(request, options)?)
}

/// The request as a JSON value (for tests that read it back).
#[cfg(test)]
pub(super) fn value(request: &ModelRequest, options: Options<'_>) -> Result<Value, BackendError> {
    serde_json::to_value(wire_request(request, options)?)
        .map_err(|error| BackendError::new(BackendErrorKind::InvalidRequest, error.to_string()))
}

fn wire_request<'a>(
    request: &'a ModelRequest,
    options: Options<'a>,
) -> Result<WireRequest<'a>, BackendError> {
    let settings = &request.settings;
    // The same adapter serves compatible servers, whose ranges vary: only what holds for every
    // provider here (the server and the CLI check OpenAI's own ranges through `Api`).
    crate::settings::refuse_out_of_range(
        crate::SettingsLimits {
            scope: "openai-chat",
            ..crate::SettingsLimits::universal()
        },
        settings,
    )?;
    let extras = &request.extras;
    // A key in `extras` replaces the field we would have written: serializing both would put
    // the key in the body twice, and which copy a server keeps is up to its JSON parser.
    let ours = |key: &str| !extras.contains_key(key);

    let has_tools = !request.tools.is_empty();
    let tool_choice = match (&request.tool_choice, has_tools) {
        // `auto` is the default with tools; leaving it out spares servers that do not know
        // `tool_choice` at all.
        (ToolChoice::Auto, _) | (ToolChoice::None, false) => None,
        (choice, true) => Some(WireToolChoice::from(choice)),
        (ToolChoice::Required | ToolChoice::Tool { .. }, false) => {
            return Err(BackendError::new(
                BackendErrorKind::InvalidRequest,
                "the tool choice requires a tool call, but the request declares no tools",
            ));
        }
    };

    let reasoning_effort = match settings.reasoning {
        Some(reasoning) => match (reasoning.effort, reasoning.budget_tokens) {
            (Some(effort), _) => Some(effort_name(effort)),
            (None, Some(_)) if ours("reasoning_effort") => {
                return Err(BackendError::new(
                    BackendErrorKind::Unsupported,
                    "Chat Completions takes a reasoning effort, not a token budget: set \
                     settings.reasoning.effort instead of budget_tokens (or put the server's \
                     own reasoning field in extras)",
                ));
            }
            (None, _) => None,
        },
        None => None,
    };

    // `max_tokens` in extras (for a server that only knows the old name) replaces
    // `max_completion_tokens`: OpenAI rejects a request that sets both.
    let max_completion_tokens = settings
        .max_output_tokens
        .filter(|_| ours("max_completion_tokens") && ours("max_tokens"));

    Ok(WireRequest {
        model: Some(request.model.as_str()).filter(|_| ours("model")),
        messages: if ours("messages") {
            Some(messages(request, options.reasoning_in_history)?)
        } else {
            None
        },
        stream: Some(request.stream).filter(|_| ours("stream")),
        stream_options: (request.stream && ours("stream_options")).then_some(StreamOptions {
            include_usage: true,
        }),
        tools: if has_tools && ours("tools") {
            Some(match options.tools {
                Some(cache) => cache.get(&request.tools, wire_tools)?,
                None => crate::tools_json::serialize(&wire_tools(&request.tools))?,
            })
        } else {
            None
        },
        tool_choice: tool_choice.filter(|_| ours("tool_choice")),
        parallel_tool_calls: settings
            .parallel_tool_calls
            .filter(|_| has_tools && ours("parallel_tool_calls")),
        max_completion_tokens,
        temperature: settings.temperature.filter(|_| ours("temperature")),
        top_p: settings.top_p.filter(|_| ours("top_p")),
        stop: Some(settings.stop_sequences.as_slice())
            .filter(|stop| !stop.is_empty() && ours("stop")),
        reasoning_effort: reasoning_effort.filter(|_| ours("reasoning_effort")),
        prompt_cache_key: options
            .prompt_cache_key
            .filter(|_| ours("prompt_cache_key")),
        response_format: request
            .response_format
            .as_ref()
            .filter(|_| ours("response_format"))
            .map(|format| WireResponseFormat {
                kind: "json_schema",
                json_schema: WireJsonSchema {
                    name: &format.name,
                    schema: &format.schema,
                    strict: format.strict,
                },
            }),
        extras,
    })
}

fn wire_tools(tools: &[ToolSpec]) -> Vec<WireTool<'_>> {
    tools
        .iter()
        .map(|tool| WireTool {
            kind: "function",
            function: WireFunction {
                name: &tool.name,
                description: &tool.description,
                parameters: crate::content::tool_parameters(tool),
                strict: tool.strict,
            },
        })
        .collect()
}

fn effort_name(effort: ReasoningEffort) -> &'static str {
    match effort {
        ReasoningEffort::Minimal => "minimal",
        ReasoningEffort::Low => "low",
        ReasoningEffort::Medium => "medium",
        ReasoningEffort::High => "high",
    }
}

fn messages(
    request: &ModelRequest,
    reasoning_in_history: bool,
) -> Result<Vec<WireMessage<'_>>, BackendError> {
    let mut out = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = &request.system {
        out.push(WireMessage::System { content: system });
    }
    // Chat Completions takes only text in a tool message, so the images and files of a run of
    // tool results follow it in one user turn (after every tool message of the round, as the
    // API requires), each introduced by the call it answers: what the major SDKs do.
    let mut media: Vec<Part<'_>> = Vec::new();
    for message in &request.messages {
        if !matches!(message, Message::Tool(_)) && !media.is_empty() {
            out.push(WireMessage::User {
                content: UserContent::Parts(std::mem::take(&mut media)),
            });
        }
        out.push(match message {
            Message::System { content } => WireMessage::System { content },
            Message::User(user) => WireMessage::User {
                content: user_content(user)?,
            },
            Message::Assistant(assistant) => assistant_message(assistant, reasoning_in_history),
            Message::Tool(result) => {
                let (text, found) = crate::content::split_tool_result(
                    result,
                    PROVIDER,
                    &[ContentKind::Image, ContentKind::File],
                )?;
                if !found.is_empty() {
                    media.push(Part::Text {
                        text: Cow::Owned(format!(
                            "The result of tool call `{}` includes:",
                            result.tool_call_id
                        )),
                    });
                    for block in found {
                        match block {
                            ToolResultBlock::Image { source } => media.push(Part::ImageUrl {
                                image_url: ImageUrl {
                                    url: image_url(source)?,
                                },
                            }),
                            ToolResultBlock::File(file) => media.push(Part::File {
                                file: file_part(file)?,
                            }),
                            ToolResultBlock::Text { .. } | ToolResultBlock::Json { .. } => {}
                        }
                    }
                }
                WireMessage::Tool {
                    tool_call_id: result.tool_call_id.as_str(),
                    // Chat Completions has no error flag on tool messages; the content says
                    // what went wrong. Text and JSON blocks join as text.
                    content: text,
                }
            }
        });
    }
    if !media.is_empty() {
        out.push(WireMessage::User {
            content: UserContent::Parts(media),
        });
    }
    Ok(out)
}

fn user_content(user: &UserMessage) -> Result<UserContent<'_>, BackendError> {
    // One text block goes as a plain string: every compatible server takes that form, while
    // some text-only ones reject the list of parts.
    if let [UserBlock::Text { text }] = user.content.as_slice() {
        return Ok(UserContent::Text(text));
    }
    if user.content.is_empty() {
        return Ok(UserContent::Text(""));
    }
    user.content
        .iter()
        .map(|block| {
            Ok(match block {
                UserBlock::Text { text } => Part::Text {
                    text: Cow::Borrowed(text),
                },
                UserBlock::Image { source } => Part::ImageUrl {
                    image_url: ImageUrl {
                        url: image_url(source)?,
                    },
                },
                UserBlock::File(file) => Part::File {
                    file: file_part(file)?,
                },
                UserBlock::Audio(audio) => Part::InputAudio {
                    input_audio: InputAudio {
                        data: &audio.data,
                        format: audio_format(&audio.media_type).ok_or_else(|| {
                            BackendError::new(
                                BackendErrorKind::Unsupported,
                                format!(
                                    "{PROVIDER} takes audio as wav or mp3, not `{}`; nothing was sent",
                                    audio.media_type
                                ),
                            )
                        })?,
                    },
                },
            })
        })
        .collect::<Result<_, BackendError>>()
        .map(UserContent::Parts)
}

/// The name the provider is refused under.
const PROVIDER: &str = "OpenAI Chat Completions";

/// A file part: inline bytes as a data URL, or an uploaded file's id. Chat Completions does
/// not fetch files by URL.
fn file_part(file: &FileBlock) -> Result<FilePart<'_>, BackendError> {
    match &file.source {
        FileSource::Base64 { data } => Ok(FilePart {
            // OpenAI requires a name next to inline data.
            filename: Some(file.filename.as_deref().unwrap_or("file")),
            file_data: Some(format!("data:{};base64,{data}", file.media_type)),
            file_id: None,
        }),
        FileSource::FileId { file_id } => Ok(FilePart {
            filename: None,
            file_data: None,
            file_id: Some(file_id),
        }),
        FileSource::Url { .. } => Err(BackendError::new(
            BackendErrorKind::Unsupported,
            format!("{PROVIDER} cannot take a file block by URL in a user turn; nothing was sent"),
        )),
    }
}

/// The `input_audio` format for a media type.
fn audio_format(media_type: &str) -> Option<&'static str> {
    match media_type {
        "audio/wav" | "audio/x-wav" | "audio/wave" => Some("wav"),
        "audio/mpeg" | "audio/mp3" => Some("mp3"),
        _ => None,
    }
}

fn image_url(source: &ImageSource) -> Result<Cow<'_, str>, BackendError> {
    match source {
        ImageSource::Url { url } => Ok(Cow::Borrowed(url)),
        ImageSource::Base64 { media_type, data } => {
            if media_type.is_empty() {
                return Err(BackendError::new(
                    BackendErrorKind::InvalidRequest,
                    "an inline image needs a media type (e.g. image/png) to be sent as a data URL",
                ));
            }
            Ok(Cow::Owned(format!("data:{media_type};base64,{data}")))
        }
    }
}

fn assistant_message(message: &AssistantMessage, reasoning_in_history: bool) -> WireMessage<'_> {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut refusal = String::new();
    let mut tool_calls = Vec::new();
    for block in &message.content {
        match block {
            AssistantBlock::Text { text: part } => text.push_str(part),
            // Redacted blocks hold only opaque data no Chat Completions server can read.
            AssistantBlock::Thinking(thinking) if reasoning_in_history && !thinking.redacted => {
                reasoning.push_str(&thinking.thinking);
            }
            AssistantBlock::Thinking(_) => {}
            AssistantBlock::Refusal { text: part } => refusal.push_str(part),
            AssistantBlock::ToolCall(call) => tool_calls.push(WireToolCall {
                id: call.id.as_str(),
                kind: "function",
                function: WireCall {
                    name: &call.name,
                    arguments: arguments_text(call),
                },
            }),
        }
    }
    // `content` may be null only when the message carries tool calls or a refusal.
    let content = if text.is_empty() && (!tool_calls.is_empty() || !refusal.is_empty()) {
        None
    } else {
        Some(text)
    };
    WireMessage::Assistant {
        content,
        refusal: Some(refusal).filter(|refusal| !refusal.is_empty()),
        reasoning_content: Some(reasoning).filter(|reasoning| !reasoning.is_empty()),
        tool_calls: Some(tool_calls).filter(|calls| !calls.is_empty()),
    }
}

/// The argument text of a call as the model wrote it.
fn arguments_text(call: &ToolCall) -> ArgumentsText<'_> {
    match &call.arguments {
        // The model's text was not JSON: send back exactly what it wrote, so the tool error
        // that follows makes sense to it.
        Value::String(raw) if call.invalid_arguments => ArgumentsText::Raw(raw),
        Value::Null => ArgumentsText::Raw("{}"),
        arguments => ArgumentsText::Json(arguments),
    }
}

#[derive(Serialize)]
struct WireRequest<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<Vec<WireMessage<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Spliced as raw JSON: serialized once per tool set (`tools_json`).
    tools: Option<Arc<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<WireResponseFormat<'a>>,
    #[serde(flatten)]
    extras: &'a Map<String, Value>,
}

/// `response_format: {"type": "json_schema", "json_schema": {...}}`: the answer constrained to
/// the schema (strict mode when asked; the loop sends the schema already in strict form).
#[derive(Serialize)]
struct WireResponseFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    json_schema: WireJsonSchema<'a>,
}

#[derive(Serialize)]
struct WireJsonSchema<'a> {
    name: &'a str,
    schema: &'a Value,
    strict: bool,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: UserContent<'a>,
    },
    Assistant {
        content: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        refusal: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning_content: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tool_calls: Option<Vec<WireToolCall<'a>>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: Cow<'a, str>,
    },
}

#[derive(Serialize)]
#[serde(untagged)]
enum UserContent<'a> {
    Text(&'a str),
    Parts(Vec<Part<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: Cow<'a, str> },
    ImageUrl { image_url: ImageUrl<'a> },
    File { file: FilePart<'a> },
    InputAudio { input_audio: InputAudio<'a> },
}

#[derive(Serialize)]
struct FilePart<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    filename: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file_data: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file_id: Option<&'a str>,
}

#[derive(Serialize)]
struct InputAudio<'a> {
    data: &'a str,
    format: &'static str,
}

#[derive(Serialize)]
struct ImageUrl<'a> {
    url: Cow<'a, str>,
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireCall<'a>,
}

#[derive(Serialize)]
struct WireCall<'a> {
    name: &'a str,
    arguments: ArgumentsText<'a>,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: Cow<'a, Value>,
    /// Sent only for a strict tool: left out, the tool is not strict (the API's default).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    strict: bool,
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireToolChoice<'a> {
    Mode(&'static str),
    Named {
        #[serde(rename = "type")]
        kind: &'static str,
        function: Named<'a>,
    },
}

#[derive(Serialize)]
struct Named<'a> {
    name: &'a str,
}

impl<'a> From<&'a ToolChoice> for WireToolChoice<'a> {
    fn from(choice: &'a ToolChoice) -> Self {
        match choice {
            ToolChoice::Auto => Self::Mode("auto"),
            ToolChoice::None => Self::Mode("none"),
            ToolChoice::Required => Self::Mode("required"),
            ToolChoice::Tool { name } => Self::Named {
                kind: "function",
                function: Named { name },
            },
        }
    }
}
