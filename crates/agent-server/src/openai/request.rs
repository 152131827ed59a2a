//! The request side: a Chat Completions body read into our messages, tool specs, tool choice
//! and generation settings, with OpenAI's own 400s for what it would refuse.

use std::collections::HashSet;

use agent_loop::output::{OutputSpec, OutputStrategy};
use agent_types::{
    AssistantBlock, AssistantMessage, AudioBlock, FileBlock, FileSource, GenerationSettings,
    ImageSource, Message, Reasoning, ReasoningEffort, StopReason, ToolCall, ToolChoice, ToolResult,
    ToolResultBlock, ToolSpec, UserBlock, UserMessage,
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::OpenAiError;

/// The body of `POST /v1/chat/completions`. Every field OpenAI defines is read: the ones we
/// implement below, and the rest into [`ChatRequest::rest`], where [`unsupported`] accepts
/// only the ones that change nothing the client gets back (see there) and refuses the others
/// with a 400 naming the field, as OpenAI refuses a field it does not know.
#[derive(Debug, Deserialize)]
pub(crate) struct ChatRequest {
    pub(crate) model: String,
    pub(crate) messages: Vec<InMessage>,
    pub(crate) tools: Option<Vec<InTool>>,
    pub(crate) tool_choice: Option<Value>,
    pub(crate) stream: Option<bool>,
    pub(crate) stream_options: Option<StreamOptions>,
    pub(crate) temperature: Option<f32>,
    pub(crate) top_p: Option<f32>,
    pub(crate) max_tokens: Option<u32>,
    pub(crate) max_completion_tokens: Option<u32>,
    pub(crate) stop: Option<Stop>,
    pub(crate) parallel_tool_calls: Option<bool>,
    pub(crate) n: Option<u32>,
    pub(crate) reasoning_effort: Option<String>,
    /// Structured output, read by [`response_format`].
    pub(crate) response_format: Option<Value>,
    /// Every other field, checked by [`unsupported`].
    #[serde(flatten)]
    pub(crate) rest: serde_json::Map<String, Value>,
}

/// Fields accepted and ignored because they change nothing in the completion the client gets
/// back: attribution and billing hints (`user`, `safety_identifier`, `metadata`,
/// `service_tier`, `prompt_cache_key`). (`seed` would change the sampling; our providers do
/// not offer it, so it is refused below.)
const IGNORED: &[&str] = &[
    "user",
    "safety_identifier",
    "metadata",
    "service_tier",
    "prompt_cache_key",
];

/// Refuses every field of the request that would change the answer if it were honoured and
/// that this server does not implement: 400 `invalid_request_error` with `param` naming it.
///
/// A field sent with its "off" value (`null`, `logprobs: false`, a zero penalty,
/// `modalities: ["text"]`, an empty `logit_bias`,
/// `store: false`) asks for nothing and is accepted, since SDKs send some of these by default.
pub(crate) fn unsupported(rest: &serde_json::Map<String, Value>) -> Result<(), OpenAiError> {
    // Sorted so that the error names the same field whatever order the client sent them in.
    let mut fields: Vec<(&String, &Value)> = rest.iter().collect();
    fields.sort_unstable_by(|a, b| a.0.cmp(b.0));
    for (field, value) in fields {
        if value.is_null() || IGNORED.contains(&field.as_str()) {
            continue;
        }
        let why = match field.as_str() {
            "logprobs" if value == &json!(false) => continue,
            "logprobs" => "log probabilities are not available from this server",
            "top_logprobs" if value == &json!(0) => continue,
            "top_logprobs" => "log probabilities are not available from this server",
            "functions" | "function_call" => {
                "the deprecated `functions` and `function_call` are not supported; use `tools` \
                 and `tool_choice`"
            }
            "modalities" if value == &json!(["text"]) => continue,
            "modalities" | "audio" => "this server answers with text only",
            "prediction" => "predicted outputs are not supported",
            "frequency_penalty" | "presence_penalty" if value.as_f64() == Some(0.0) => continue,
            "frequency_penalty" | "presence_penalty" => {
                "frequency and presence penalties are not supported"
            }
            "logit_bias" if value.as_object().is_some_and(serde_json::Map::is_empty) => continue,
            "logit_bias" => "`logit_bias` is not supported",
            "store" if value == &json!(false) => continue,
            "store" => "this server does not store completions",
            "web_search_options" => "web search is not supported",
            "seed" => "seeded (deterministic) sampling is not supported",
            "verbosity" => "`verbosity` is not supported",
            _ => return Err(unrecognized(field)),
        };
        return Err(OpenAiError::invalid(
            field.as_str(),
            format!("{field}: {why}"),
        ));
    }
    Ok(())
}

/// The error for a request field this server does not know, in OpenAI's words.
pub(crate) fn unrecognized(field: &str) -> OpenAiError {
    OpenAiError::invalid(
        field,
        format!("Unrecognized request argument supplied: {field}"),
    )
}

/// `stream_options`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StreamOptions {
    pub(crate) include_usage: Option<bool>,
}

/// `stop`: one sequence or several.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Stop {
    One(String),
    Many(Vec<String>),
}

/// One message of `messages`, by role. Content stays raw JSON so that a part we do not
/// support gets an error naming it rather than serde's "did not match any variant".
#[derive(Debug, Deserialize)]
///
/// Unknown fields inside messages are not refused: clients send an assistant message back as
/// they received it, with their library's own fields (the OpenAI Node SDK's
/// `parsed_arguments`, LiteLLM's `provider_specific_fields`), which ask for nothing.
#[serde(tag = "role", rename_all = "snake_case")]
pub(crate) enum InMessage {
    System {
        content: Value,
    },
    Developer {
        content: Value,
    },
    User {
        content: Value,
    },
    Assistant {
        content: Option<Value>,
        tool_calls: Option<Vec<InToolCall>>,
        refusal: Option<String>,
    },
    Tool {
        tool_call_id: String,
        content: Value,
    },
}

/// A tool call in an assistant message of the history.
#[derive(Debug, Deserialize)]
pub(crate) struct InToolCall {
    id: String,
    #[serde(rename = "type")]
    kind: Option<String>,
    function: Option<InFunctionCall>,
}

#[derive(Debug, Deserialize)]
struct InFunctionCall {
    name: String,
    #[serde(default)]
    arguments: String,
}

/// One entry of `tools`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InTool {
    #[serde(rename = "type")]
    kind: String,
    function: Option<InFunction>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InFunction {
    name: String,
    description: Option<String>,
    parameters: Option<Value>,
    /// `true` asks for arguments that always match the schema: passed on as the spec's
    /// `strict`, which the OpenAI adapters send upstream (with the schema in strict form).
    strict: Option<bool>,
}

/// `messages`, as the session's system prompt and history.
#[derive(Debug)]
pub(crate) struct Conversation {
    pub(crate) system: Option<String>,
    pub(crate) messages: Vec<Message>,
}

/// Reads `messages`: system and developer messages (wherever they are) become the system
/// prompt, joined by blank lines; the rest become the history. Every assistant tool call must
/// be answered by the tool messages right after it, and the history must end with a user or
/// tool message, because the model is called to continue from it.
pub(crate) fn conversation(messages: Vec<InMessage>) -> Result<Conversation, OpenAiError> {
    let mut system = Vec::new();
    let mut history = Vec::with_capacity(messages.len());
    // The calls of the latest assistant message that no tool message has answered yet.
    let mut open: Vec<(String, String)> = Vec::new();
    let count = messages.len();
    for (at, message) in messages.into_iter().enumerate() {
        let param = format!("messages[{at}]");
        match message {
            InMessage::System { content } | InMessage::Developer { content } => {
                system.push(text(&content, &format!("{param}.content"))?);
            }
            InMessage::User { content } => {
                answered(&open, &param)?;
                history.push(Message::User(user(&content, &format!("{param}.content"))?));
            }
            InMessage::Assistant {
                content,
                tool_calls,
                refusal,
            } => {
                answered(&open, &param)?;
                let message = assistant(content.as_ref(), tool_calls, refusal, &param)?;
                open = message
                    .tool_calls()
                    .map(|call| (call.id.to_string(), call.name.clone()))
                    .collect();
                history.push(Message::Assistant(message));
            }
            InMessage::Tool {
                tool_call_id,
                content,
            } => {
                let Some(position) = open.iter().position(|(id, _)| *id == tool_call_id) else {
                    return Err(OpenAiError::invalid(
                        format!("{param}.tool_call_id"),
                        format!(
                            "tool message {param} answers `{tool_call_id}`, which is not an \
                             unanswered tool call of the assistant message before it"
                        ),
                    ));
                };
                let (id, name) = open.remove(position);
                history.push(Message::Tool(tool_result(
                    id,
                    name,
                    &content,
                    &format!("{param}.content"),
                )?));
            }
        }
    }
    answered(&open, &format!("messages[{count}]"))?;
    match history.last() {
        Some(Message::User(_) | Message::Tool(_)) => {}
        Some(_) => {
            return Err(OpenAiError::invalid(
                "messages",
                "the last message must be from the user or a tool: the model continues from it",
            ));
        }
        None => {
            return Err(OpenAiError::invalid(
                "messages",
                "messages must contain at least one user message (it is empty or holds only \
                 system messages)",
            ));
        }
    }
    Ok(Conversation {
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        messages: history,
    })
}

/// Fails when calls of the previous assistant message are still unanswered at `param`.
fn answered(open: &[(String, String)], param: &str) -> Result<(), OpenAiError> {
    if open.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = open.iter().map(|(id, _)| id.as_str()).collect();
    Err(OpenAiError::invalid(
        "messages",
        format!(
            "an assistant message with `tool_calls` must be followed by tool messages answering \
             each call; before {param} there is none for: {}",
            ids.join(", ")
        ),
    ))
}

/// Text content: a string, or a list of `text` parts (joined by newlines). `null` is empty.
pub(crate) fn text(content: &Value, param: &str) -> Result<String, OpenAiError> {
    match content {
        Value::Null => Ok(String::new()),
        Value::String(text) => Ok(text.clone()),
        Value::Array(parts) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (at, part) in parts.iter().enumerate() {
                match part_type(part) {
                    Some("text") => texts.push(part_text(part, "text", &format!("{param}[{at}]"))?),
                    other => return Err(unsupported_part(other, &format!("{param}[{at}]"))),
                }
            }
            Ok(texts.join("\n"))
        }
        _ => Err(OpenAiError::invalid(
            param,
            format!("{param} must be a string or a list of content parts"),
        )),
    }
}

/// A user turn: a string, or `text`, `image_url`, `file` and `input_audio` parts in order.
pub(crate) fn user(content: &Value, param: &str) -> Result<UserMessage, OpenAiError> {
    let empty = || {
        OpenAiError::invalid(
            param,
            format!("{param} is empty: a user message needs some text or an image"),
        )
    };
    let parts = match content {
        Value::String(text) if text.trim().is_empty() => return Err(empty()),
        Value::String(text) => return Ok(UserMessage::text(text.clone())),
        Value::Array(parts) if !parts.is_empty() => parts,
        _ => {
            return Err(OpenAiError::invalid(
                param,
                format!("{param} must be a string or a non-empty list of content parts"),
            ));
        }
    };
    let mut blocks = Vec::with_capacity(parts.len());
    for (at, part) in parts.iter().enumerate() {
        let param = format!("{param}[{at}]");
        blocks.push(match part_type(part) {
            Some("text") => UserBlock::Text {
                text: part_text(part, "text", &param)?,
            },
            Some("image_url") => UserBlock::Image {
                source: image(part, &param)?,
            },
            Some("file") => UserBlock::File(file(part, &param)?),
            Some("input_audio") => UserBlock::Audio(audio(part, &param)?),
            other => return Err(unsupported_part(other, &param)),
        });
    }
    let blank =
        |block: &UserBlock| matches!(block, UserBlock::Text { text } if text.trim().is_empty());
    if blocks.iter().all(blank) {
        return Err(empty());
    }
    let message = UserMessage { content: blocks };
    crate::attachments::check(&message).map_err(|refused| {
        OpenAiError::invalid(format!("{param}[{}]", refused.index), refused.message)
    })?;
    Ok(message)
}

/// An `image_url` part: a `data:` URL becomes inline bytes, anything else a URL the provider
/// fetches. `detail` is dropped (our image blocks have no such setting).
fn image(part: &Value, param: &str) -> Result<ImageSource, OpenAiError> {
    let url = part
        .get("image_url")
        .and_then(|image| image.get("url"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            OpenAiError::invalid(
                format!("{param}.image_url.url"),
                format!("{param} needs `image_url.url`"),
            )
        })?;
    let Some(data_url) = url.strip_prefix("data:") else {
        return Ok(ImageSource::Url { url: url.into() });
    };
    match data_url_parts(data_url) {
        Some((media_type, data)) => Ok(ImageSource::Base64 {
            media_type: media_type.into(),
            data: data.into(),
        }),
        _ => Err(OpenAiError::invalid(
            format!("{param}.image_url.url"),
            "a data URL image must be `data:<media type>;base64,<data>`",
        )),
    }
}

/// A tool message: a string, or `text`, `image_url` and `file` parts (a provider that
/// cannot take a kind in a tool result refuses it before sending, naming it).
pub(crate) fn tool_result(
    id: String,
    name: String,
    content: &Value,
    param: &str,
) -> Result<ToolResult, OpenAiError> {
    let Value::Array(parts) = content else {
        return Ok(ToolResult::ok(id, name, text(content, param)?));
    };
    let mut blocks = Vec::with_capacity(parts.len());
    for (at, part) in parts.iter().enumerate() {
        let param = format!("{param}[{at}]");
        blocks.push(match part_type(part) {
            Some("text") => ToolResultBlock::Text {
                text: part_text(part, "text", &param)?,
            },
            Some("image_url") => ToolResultBlock::Image {
                source: image(part, &param)?,
            },
            Some("file") => ToolResultBlock::File(file(part, &param)?),
            other => return Err(unsupported_part(other, &param)),
        });
    }
    Ok(ToolResult::with_blocks(id, name, blocks))
}

/// A `file` part: `file_data` (a `data:` URL, or bare base64 of a PDF as OpenAI accepts it)
/// with an optional `filename`, or `file_id` of a file uploaded to the provider.
fn file(part: &Value, param: &str) -> Result<FileBlock, OpenAiError> {
    let file = part.get("file").and_then(Value::as_object).ok_or_else(|| {
        OpenAiError::invalid(
            format!("{param}.file"),
            format!("{param} needs an object `file`"),
        )
    })?;
    let filename = file
        .get("filename")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(data) = file.get("file_data").and_then(Value::as_str) {
        let (media_type, data) = match data.strip_prefix("data:") {
            Some(url) => data_url_parts(url).ok_or_else(|| {
                OpenAiError::invalid(
                    format!("{param}.file.file_data"),
                    "a data URL file must be `data:<media type>;base64,<data>`",
                )
            })?,
            None => ("application/pdf", data),
        };
        return Ok(FileBlock {
            media_type: media_type.to_owned(),
            source: FileSource::Base64 { data: data.into() },
            filename,
        });
    }
    if let Some(file_id) = file.get("file_id").and_then(Value::as_str) {
        // The provider knows the file's type; PDF is what OpenAI's file parts hold.
        return Ok(FileBlock {
            media_type: "application/pdf".to_owned(),
            source: FileSource::FileId {
                file_id: file_id.into(),
            },
            filename,
        });
    }
    Err(OpenAiError::invalid(
        format!("{param}.file"),
        format!("{param} needs `file.file_data` or `file.file_id`"),
    ))
}

/// An `input_audio` part: base64 `data` in `format` `wav` or `mp3`.
fn audio(part: &Value, param: &str) -> Result<AudioBlock, OpenAiError> {
    let audio = part.get("input_audio");
    let data = audio
        .and_then(|audio| audio.get("data"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            OpenAiError::invalid(
                format!("{param}.input_audio.data"),
                format!("{param} needs `input_audio.data`"),
            )
        })?;
    let media_type = match audio
        .and_then(|audio| audio.get("format"))
        .and_then(Value::as_str)
    {
        Some("wav") => "audio/wav",
        Some("mp3") => "audio/mpeg",
        _ => {
            return Err(OpenAiError::invalid(
                format!("{param}.input_audio.format"),
                "`input_audio.format` must be `wav` or `mp3`",
            ));
        }
    };
    Ok(AudioBlock {
        media_type: media_type.to_owned(),
        data: data.to_owned(),
    })
}

/// `<media type>;base64,<data>` (after `data:`).
fn data_url_parts(url: &str) -> Option<(&str, &str)> {
    let (head, data) = url.split_once(',')?;
    let media_type = head.strip_suffix(";base64")?;
    (!media_type.is_empty()).then_some((media_type, data))
}

/// Bounds a caller's schema before it is compiled: a 400 naming the limit.
pub(crate) fn bounded_schema(schema: &Value, param: &str) -> Result<(), OpenAiError> {
    match crate::limits::schema_problem(schema) {
        Some(problem) => Err(OpenAiError::invalid(param, format!("{param} {problem}"))),
        None => Ok(()),
    }
}

/// A `json_schema` output format's object (`name`, `schema`, `description`) as the `Auto`
/// strategy's spec; `param` is where the object sits in the request, for errors.
pub(crate) fn json_schema_output(
    spec: &Value,
    param: &str,
) -> Result<(OutputSpec, OutputStrategy), OpenAiError> {
    let name = spec.get("name").and_then(Value::as_str).ok_or_else(|| {
        OpenAiError::invalid(
            format!("{param}.name"),
            format!("`{param}.name` is required"),
        )
    })?;
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(OpenAiError::invalid(
            format!("{param}.name"),
            format!("`{param}.name` must match ^[a-zA-Z0-9_-]{{1,64}}$"),
        ));
    }
    let schema = spec
        .get("schema")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}));
    bounded_schema(&schema, &format!("{param}.schema"))?;
    let mut output = OutputSpec::from_schema(schema).with_name(name);
    if let Some(description) = spec.get("description").and_then(Value::as_str) {
        output = output.with_description(description);
    }
    Ok((output, OutputStrategy::Auto))
}

/// `response_format`: `text` (or absent) asks for nothing; `json_object` for any JSON object
/// (the `Prompted` strategy with a permissive object schema); `json_schema` for an answer
/// matching the caller's schema (the `Auto` strategy: native where the provider has it).
pub(crate) fn response_format(
    format: Option<&Value>,
) -> Result<Option<(OutputSpec, OutputStrategy)>, OpenAiError> {
    let Some(format) = format.filter(|format| !format.is_null()) else {
        return Ok(None);
    };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some((
            OutputSpec::from_schema(json!({"type": "object"})).with_name("json_object"),
            OutputStrategy::Prompted,
        ))),
        Some("json_schema") => {
            let Some(spec) = format.get("json_schema").filter(|spec| spec.is_object()) else {
                return Err(OpenAiError::invalid(
                    "response_format.json_schema",
                    "`response_format.json_schema` is required for `type: json_schema`",
                ));
            };
            json_schema_output(spec, "response_format.json_schema").map(Some)
        }
        _ => Err(OpenAiError::invalid(
            "response_format.type",
            "`response_format.type` must be `text`, `json_object` or `json_schema`",
        )),
    }
}

/// An assistant turn of the history: text and refusal content, then its tool calls.
fn assistant(
    content: Option<&Value>,
    tool_calls: Option<Vec<InToolCall>>,
    refusal: Option<String>,
    param: &str,
) -> Result<AssistantMessage, OpenAiError> {
    let mut blocks = Vec::new();
    match content {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => {
            if !text.is_empty() {
                blocks.push(AssistantBlock::Text { text: text.clone() });
            }
        }
        Some(Value::Array(parts)) => {
            for (at, part) in parts.iter().enumerate() {
                let param = format!("{param}.content[{at}]");
                match part_type(part) {
                    Some("text") => blocks.push(AssistantBlock::Text {
                        text: part_text(part, "text", &param)?,
                    }),
                    Some("refusal") => blocks.push(AssistantBlock::Refusal {
                        text: part_text(part, "refusal", &param)?,
                    }),
                    other => return Err(unsupported_part(other, &param)),
                }
            }
        }
        Some(_) => {
            return Err(OpenAiError::invalid(
                format!("{param}.content"),
                format!("{param}.content must be a string, a list of content parts or null"),
            ));
        }
    }
    if let Some(text) = refusal.filter(|text| !text.is_empty()) {
        blocks.push(AssistantBlock::Refusal { text });
    }
    let mut calls = 0;
    for (at, call) in tool_calls.into_iter().flatten().enumerate() {
        let param = format!("{param}.tool_calls[{at}]");
        if call.kind.as_deref().is_some_and(|kind| kind != "function") {
            return Err(OpenAiError::invalid(
                format!("{param}.type"),
                "only `function` tool calls are supported",
            ));
        }
        let Some(function) = call.function else {
            return Err(OpenAiError::invalid(
                format!("{param}.function"),
                format!("{param} needs `function`"),
            ));
        };
        blocks.push(AssistantBlock::ToolCall(tool_call(
            call.id,
            function.name,
            function.arguments,
        )));
        calls += 1;
    }
    if blocks.is_empty() {
        return Err(OpenAiError::invalid(
            param,
            format!("the assistant message {param} needs `content` or `tool_calls`"),
        ));
    }
    Ok(AssistantMessage {
        content: blocks,
        stop_reason: Some(if calls > 0 {
            StopReason::ToolCalls
        } else {
            StopReason::Stop
        }),
        ..AssistantMessage::default()
    })
}

/// A call from the history; its arguments arrive as JSON text, which the model may have
/// garbled: then the text is kept as is, flagged, rather than replaced by `{}`.
pub(crate) fn tool_call(id: String, name: String, arguments: String) -> ToolCall {
    if arguments.trim().is_empty() {
        return ToolCall::new(id, name, json!({}));
    }
    match serde_json::from_str::<Value>(&arguments) {
        Ok(parsed) => ToolCall::new(id, name, parsed),
        Err(_) => ToolCall {
            invalid_arguments: true,
            ..ToolCall::new(id, name, Value::String(arguments))
        },
    }
}

fn part_type(part: &Value) -> Option<&str> {
    part.get("type").and_then(Value::as_str)
}

fn part_text(part: &Value, field: &str, param: &str) -> Result<String, OpenAiError> {
    part.get(field)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| {
            OpenAiError::invalid(
                format!("{param}.{field}"),
                format!("the content part {param} needs a string `{field}`"),
            )
        })
}

fn unsupported_part(kind: Option<&str>, param: &str) -> OpenAiError {
    OpenAiError::invalid(
        format!("{param}.type"),
        match kind {
            Some(kind) => {
                format!("content parts of type `{kind}` are not supported here ({param})")
            }
            None => format!("the content part {param} has no `type`"),
        },
    )
}

/// The client's tools (`type: function` only), checked: valid, unique names.
pub(crate) fn tools(tools: Option<Vec<InTool>>) -> Result<Vec<ToolSpec>, OpenAiError> {
    let mut specs = Vec::new();
    let mut names = HashSet::new();
    for (at, tool) in tools.into_iter().flatten().enumerate() {
        let param = format!("tools[{at}]");
        if tool.kind != "function" {
            return Err(OpenAiError::invalid(
                format!("{param}.type"),
                format!(
                    "tools of type `{}` are not supported; use `function`",
                    tool.kind
                ),
            ));
        }
        let Some(function) = tool.function else {
            return Err(OpenAiError::invalid(
                format!("{param}.function"),
                format!("{param} needs `function`"),
            ));
        };
        agent_tools::validate_name(&function.name).map_err(|error| {
            OpenAiError::invalid(format!("{param}.function.name"), error.to_string())
        })?;
        if !names.insert(function.name.clone()) {
            return Err(OpenAiError::invalid(
                format!("{param}.function.name"),
                format!("the tool `{}` is declared twice", function.name),
            ));
        }
        specs.push(
            ToolSpec::new(
                function.name,
                function.description.unwrap_or_default(),
                function
                    .parameters
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
            )
            .with_strict(function.strict == Some(true)),
        );
    }
    Ok(specs)
}

/// `tool_choice`, and whether it forces a tool call (`required` or a named function).
/// `offered` says whether a name is a tool of this request (the client's or the server's).
pub(crate) fn tool_choice(
    choice: Option<&Value>,
    offered: impl Fn(&str) -> bool,
) -> Result<(ToolChoice, bool), OpenAiError> {
    let invalid = |message: String| OpenAiError::invalid("tool_choice", message);
    let Some(choice) = choice else {
        return Ok((ToolChoice::Auto, false));
    };
    match choice {
        Value::Null => Ok((ToolChoice::Auto, false)),
        Value::String(mode) => match mode.as_str() {
            "auto" => Ok((ToolChoice::Auto, false)),
            "none" => Ok((ToolChoice::None, false)),
            "required" => Ok((ToolChoice::Required, true)),
            other => Err(invalid(format!(
                "tool_choice `{other}` is not one of `none`, `auto`, `required`"
            ))),
        },
        Value::Object(object) => {
            if object.get("type").and_then(Value::as_str) != Some("function") {
                return Err(invalid(
                    "only `{\"type\": \"function\", \"function\": {\"name\": …}}` is supported as \
                     an object tool_choice"
                        .into(),
                ));
            }
            let name = object
                .get("function")
                .and_then(|function| function.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| invalid("tool_choice needs `function.name`".into()))?;
            if !offered(name) {
                return Err(invalid(format!(
                    "tool_choice names `{name}`, which is not a tool of this request"
                )));
            }
            Ok((ToolChoice::Tool { name: name.into() }, true))
        }
        _ => Err(invalid("tool_choice must be a string or an object".into())),
    }
}

/// The generation settings the request asks for.
pub(crate) fn settings(request: &ChatRequest) -> Result<GenerationSettings, OpenAiError> {
    let reasoning = match request.reasoning_effort.as_deref() {
        None | Some("none") => None,
        Some(effort) => {
            let effort = match effort {
                "minimal" => ReasoningEffort::Minimal,
                "low" => ReasoningEffort::Low,
                "medium" => ReasoningEffort::Medium,
                "high" | "xhigh" => ReasoningEffort::High,
                other => {
                    return Err(OpenAiError::invalid(
                        "reasoning_effort",
                        format!(
                            "reasoning_effort `{other}` is not one of none, minimal, low, \
                             medium, high, xhigh"
                        ),
                    ));
                }
            };
            Some(Reasoning {
                effort: Some(effort),
                budget_tokens: None,
            })
        }
    };
    Ok(GenerationSettings {
        max_output_tokens: request.max_completion_tokens.or(request.max_tokens),
        temperature: request.temperature,
        top_p: request.top_p,
        stop_sequences: match &request.stop {
            None => Vec::new(),
            Some(Stop::One(stop)) => vec![stop.clone()],
            Some(Stop::Many(stops)) => stops.clone(),
        },
        reasoning,
        parallel_tool_calls: request.parallel_tool_calls,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn read(messages: Value) -> Result<Conversation, OpenAiError> {
        conversation(serde_json::from_value(messages).unwrap())
    }

    #[test]
    fn system_and_developer_messages_become_one_system_prompt() {
        let conversation = read(json!([
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
            {"role": "user", "content": "Hi", "name": "ana"}
        ]))
        .unwrap();
        assert_eq!(
            conversation.system.as_deref(),
            Some("Be brief.\n\nUse tools.")
        );
        assert_eq!(conversation.messages, vec![Message::user("Hi")]);
    }

    #[test]
    fn tool_calls_and_results_round_trip_with_names_and_unparsed_arguments() {
        let conversation = read(json!([
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":"}}
            ]},
            {"role": "tool", "tool_call_id": "c2", "content": "cut off"},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "4 °C"}]}
        ]))
        .unwrap();
        let Message::Assistant(turn) = &conversation.messages[1] else {
            panic!("{:?}", conversation.messages[1]);
        };
        let calls: Vec<&ToolCall> = turn.tool_calls().collect();
        assert_eq!(calls[0].arguments, json!({"city": "Oslo"}));
        assert!(calls[1].invalid_arguments);
        assert_eq!(calls[1].arguments, json!("{\"city\":"));
        let Message::Tool(result) = &conversation.messages[3] else {
            panic!("{:?}", conversation.messages[3]);
        };
        assert_eq!(result.name, "get_weather");
        assert_eq!(result.content, "4 °C");
    }

    #[test]
    fn unanswered_and_unknown_calls_are_refused() {
        let calls =
            json!([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]);
        let error = read(json!([
            {"role": "user", "content": "x"},
            {"role": "assistant", "tool_calls": calls},
            {"role": "user", "content": "y"}
        ]))
        .unwrap_err();
        assert!(
            error.body()["error"]["message"]
                .as_str()
                .unwrap()
                .contains("c1")
        );
        let error = read(json!([
            {"role": "user", "content": "x"},
            {"role": "tool", "tool_call_id": "nope", "content": "r"}
        ]))
        .unwrap_err();
        assert_eq!(error.body()["error"]["param"], "messages[1].tool_call_id");
        let error = read(json!([
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "prefill"}
        ]))
        .unwrap_err();
        assert_eq!(error.body()["error"]["param"], "messages");
    }

    #[test]
    fn images_map_to_image_blocks_and_other_parts_are_refused() {
        let conversation = read(json!([{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO", "detail": "low"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}}
        ]}]))
        .unwrap();
        let Message::User(user) = &conversation.messages[0] else {
            panic!();
        };
        assert_eq!(
            user.content[1],
            UserBlock::Image {
                source: ImageSource::Base64 {
                    media_type: "image/png".into(),
                    data: "iVBO".into()
                }
            }
        );
        let error = read(json!([{"role": "user", "content": [
            {"type": "video_url", "video_url": {"url": "https://example.com/a.mp4"}}
        ]}]))
        .unwrap_err();
        assert_eq!(
            error.body()["error"]["param"],
            "messages[0].content[0].type"
        );
    }

    #[test]
    fn response_formats() {
        assert!(response_format(None).unwrap().is_none());
        assert!(
            response_format(Some(&json!({"type": "text"})))
                .unwrap()
                .is_none()
        );
        let (spec, strategy) = response_format(Some(&json!({"type": "json_object"})))
            .unwrap()
            .unwrap();
        assert_eq!(strategy, OutputStrategy::Prompted);
        assert_eq!(spec.schema(), &json!({"type": "object"}));
        let (spec, strategy) = response_format(Some(&json!({"type": "json_schema",
            "json_schema": {"name": "city", "strict": true,
                            "schema": {"type": "object", "properties": {"n": {"type": "string"}}}}})))
        .unwrap()
        .unwrap();
        assert_eq!(strategy, OutputStrategy::Auto);
        assert_eq!(spec.name(), "city");
        for (format, param) in [
            (
                json!({"type": "json_schema"}),
                "response_format.json_schema",
            ),
            (
                json!({"type": "json_schema", "json_schema": {"schema": {}}}),
                "response_format.json_schema.name",
            ),
            (
                json!({"type": "json_schema", "json_schema": {"name": "a b"}}),
                "response_format.json_schema.name",
            ),
            (
                json!({"type": "json_schema", "json_schema": {"name": "a", "schema": []}}),
                "response_format.json_schema.schema",
            ),
            (json!({"type": "yaml"}), "response_format.type"),
        ] {
            let error = response_format(Some(&format)).err().unwrap();
            assert_eq!(error.body()["error"]["param"], param, "{format}");
        }
    }

    #[test]
    fn file_and_audio_parts_map_to_blocks() {
        let conversation = read(json!([{"role": "user", "content": [
            {"type": "file", "file": {"file_data": "data:text/plain;base64,aGk=", "filename": "a.txt"}},
            {"type": "file", "file": {"file_data": "JVBERi0x"}},
            {"type": "input_audio", "input_audio": {"data": "SUQz", "format": "mp3"}}
        ]}]))
        .unwrap();
        let Message::User(user) = &conversation.messages[0] else {
            panic!();
        };
        assert_eq!(
            user.content[0],
            UserBlock::File(FileBlock::base64("text/plain", "aGk=").with_filename("a.txt"))
        );
        assert_eq!(
            user.content[1],
            UserBlock::File(FileBlock::base64("application/pdf", "JVBERi0x"))
        );
        assert_eq!(
            user.content[2],
            UserBlock::Audio(AudioBlock {
                media_type: "audio/mpeg".into(),
                data: "SUQz".into()
            })
        );
        let error = read(json!([{"role": "user", "content": [
            {"type": "file", "file": {"filename": "a.pdf"}}]}]))
        .unwrap_err();
        assert_eq!(
            error.body()["error"]["param"],
            "messages[0].content[0].file"
        );
    }

    #[test]
    fn tool_choice_forms() {
        let offered = |name: &str| name == "get_weather";
        assert_eq!(
            tool_choice(Some(&json!("required")), offered).unwrap(),
            (ToolChoice::Required, true)
        );
        assert_eq!(
            tool_choice(
                Some(&json!({"type": "function", "function": {"name": "get_weather"}})),
                offered
            )
            .unwrap(),
            (
                ToolChoice::Tool {
                    name: "get_weather".into()
                },
                true
            )
        );
        assert!(
            tool_choice(
                Some(&json!({"type": "function", "function": {"name": "other"}})),
                offered
            )
            .is_err()
        );
        assert_eq!(
            tool_choice(None, offered).unwrap(),
            (ToolChoice::Auto, false)
        );
    }
}
