//! The Converse request body, built from a [`ModelRequest`] with borrowed data.

use std::borrow::Cow;

use agent_types::{
    AssistantBlock, BackendError, BackendErrorKind, FileBlock, FileSource, ImageSource, Message,
    ModelRequest, Thinking, ToolChoice, ToolResult, ToolResultBlock, UserBlock,
};
use serde::Serialize;
use serde_json::{Map, Value};

/// The `maxTokens` sent with thinking on and no `max_output_tokens` (the budget is added).
const DEFAULT_MAX_TOKENS: u32 = 4096;
/// Claude's smallest thinking budget.
const MIN_THINKING_BUDGET: u32 = 1024;

/// The request body. Fields in the order Bedrock renders a prompt (tools, system, messages).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Body<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) tool_config: Option<ToolConfig<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) system: Vec<Block<'a>>,
    pub(super) messages: Vec<Turn<'a>>,
    #[serde(skip_serializing_if = "InferenceConfig::is_empty")]
    inference_config: InferenceConfig<'a>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    additional_model_request_fields: Map<String, Value>,
    #[serde(flatten)]
    extras: &'a Map<String, Value>,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct InferenceConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
}

impl InferenceConfig<'_> {
    fn is_empty(&self) -> bool {
        self.max_tokens.is_none()
            && self.temperature.is_none()
            && self.top_p.is_none()
            && self.stop_sequences.is_empty()
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ToolConfig<'a> {
    pub(super) tools: Vec<ToolEntry<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
}

/// One entry of `toolConfig.tools`: a tool, or a cache point after the tools.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) enum ToolEntry<'a> {
    ToolSpec {
        name: &'a str,
        // Converse refuses an empty description (minimum length 1).
        #[serde(skip_serializing_if = "str::is_empty")]
        description: &'a str,
        #[serde(rename = "inputSchema")]
        input_schema: Json<'a>,
    },
    CachePoint(CachePoint),
}

impl ToolEntry<'_> {
    fn name(&self) -> &str {
        match self {
            Self::ToolSpec { name, .. } => name,
            Self::CachePoint(_) => "",
        }
    }
}

#[derive(Debug, Serialize)]
pub(super) struct Json<'a> {
    json: &'a Value,
}

/// A `cachePoint` marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(super) struct CachePoint {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<&'static str>,
}

impl CachePoint {
    pub(super) fn new(ttl: Option<&'static str>) -> Self {
        Self {
            kind: "default",
            ttl,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Role {
    User,
    Assistant,
}

/// One message.
#[derive(Debug, Serialize)]
pub(super) struct Turn<'a> {
    role: Role,
    pub(super) content: Vec<Block<'a>>,
}

/// A content block (a one-key object on the wire).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) enum Block<'a> {
    Text(Cow<'a, str>),
    Image(Media<'a>),
    Document(Document<'a>),
    ToolUse {
        #[serde(rename = "toolUseId")]
        tool_use_id: &'a str,
        name: &'a str,
        input: Cow<'a, Value>,
    },
    ToolResult {
        #[serde(rename = "toolUseId")]
        tool_use_id: &'a str,
        content: Vec<Block<'a>>,
        status: &'static str,
    },
    Json(&'a Value),
    ReasoningContent(Reasoning<'a>),
    CachePoint(CachePoint),
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) enum Reasoning<'a> {
    ReasoningText { text: &'a str, signature: &'a str },
    RedactedContent(&'a str),
}

#[derive(Debug, Serialize)]
pub(super) struct Media<'a> {
    format: &'a str,
    source: Source<'a>,
}

#[derive(Debug, Serialize)]
pub(super) struct Document<'a> {
    format: &'a str,
    name: String,
    source: Source<'a>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
enum Source<'a> {
    Bytes(&'a str),
    S3Location { uri: &'a str },
}

fn invalid(message: impl Into<String>) -> BackendError {
    BackendError::new(BackendErrorKind::InvalidRequest, message)
}

fn unsupported(message: impl Into<String>) -> BackendError {
    BackendError::new(BackendErrorKind::Unsupported, message)
}

/// Whether `model` (a model id, inference profile id or ARN) is an Anthropic model, which
/// takes Claude's `thinking` field.
pub(super) fn is_claude(model: &str) -> bool {
    model.contains("anthropic.") || model.contains("claude")
}

/// Builds the body for `request`, with the two cache points when `cache` is given.
pub(super) fn build(
    request: &ModelRequest,
    cache: Option<CachePoint>,
) -> Result<Body<'_>, BackendError> {
    let settings = &request.settings;
    crate::settings::refuse_out_of_range(
        crate::Provider::Bedrock.settings_limits(&request.model),
        settings,
    )?;
    let budget = thinking_budget(request)?;
    let max_tokens = match (settings.max_output_tokens, budget) {
        (Some(max), Some(budget)) if max <= budget => {
            return Err(invalid(format!(
                "max_output_tokens ({max}) must be larger than the thinking budget ({budget}): \
                 Claude counts thinking inside maxTokens"
            )));
        }
        (Some(max), _) => Some(max),
        (None, Some(budget)) => Some(DEFAULT_MAX_TOKENS.saturating_add(budget)),
        (None, None) => None,
    };
    if request.response_format.is_some() {
        return Err(unsupported(
            "the Bedrock adapter does not send a response format (Converse has no JSON-schema \
             output); use the tool strategy for structured output",
        ));
    }

    let mut system = Vec::new();
    if let Some(text) = request.system.as_deref().filter(|text| !text.is_empty()) {
        system.push(Block::Text(Cow::Borrowed(text)));
    }
    let reminders = cache.is_some();
    if !reminders {
        for message in &request.messages {
            if let Message::System { content } = message
                && !content.is_empty()
            {
                system.push(Block::Text(Cow::Borrowed(content.as_str())));
            }
        }
    }
    let mut messages = turns(&request.messages, reminders)?;

    let mut tool_config = tool_config(request)?;
    let mut additional = Map::new();
    if let Some(budget) = budget {
        additional.insert(
            "thinking".into(),
            serde_json::json!({"type": "enabled", "budget_tokens": budget}),
        );
    }

    if let Some(point) = cache {
        // The prefix: sorted tools and the static system prompt, closed by one cache point
        // (after the tools when there is no system prompt).
        if let Some(config) = &mut tool_config {
            config.tools.sort_by(|a, b| a.name().cmp(b.name()));
        }
        if !system.is_empty() {
            system.push(Block::CachePoint(point));
        } else if let Some(config) = &mut tool_config {
            config.tools.push(ToolEntry::CachePoint(point));
        }
        // The tail: after the newest message's content.
        if let Some(turn) = messages.last_mut() {
            turn.content.push(Block::CachePoint(point));
        }
    }

    for field in [
        "toolConfig",
        "system",
        "messages",
        "inferenceConfig",
        "additionalModelRequestFields",
    ] {
        if request.extras.contains_key(field)
            && (field != "additionalModelRequestFields" || !additional.is_empty())
        {
            return Err(invalid(format!(
                "the request extras set `{field}`, which the Bedrock adapter already sends from \
                 the request; use the typed request field or setting instead"
            )));
        }
    }

    Ok(Body {
        tool_config,
        system,
        messages,
        inference_config: InferenceConfig {
            max_tokens,
            temperature: settings.temperature,
            top_p: settings.top_p,
            stop_sequences: &settings.stop_sequences,
        },
        additional_model_request_fields: additional,
        extras: &request.extras,
    })
}

/// Claude's thinking budget, if the settings ask for reasoning.
fn thinking_budget(request: &ModelRequest) -> Result<Option<u32>, BackendError> {
    let Some(reasoning) = request.settings.reasoning else {
        return Ok(None);
    };
    let budget = match (reasoning.budget_tokens, reasoning.effort) {
        (Some(budget), _) => budget,
        (None, Some(effort)) => match effort {
            agent_types::ReasoningEffort::Minimal => MIN_THINKING_BUDGET,
            agent_types::ReasoningEffort::Low => 4_096,
            agent_types::ReasoningEffort::Medium => 16_384,
            agent_types::ReasoningEffort::High => 32_768,
        },
        (None, None) => return Ok(None),
    };
    if budget == 0 {
        return Ok(None);
    }
    if !is_claude(&request.model) {
        return Err(unsupported(format!(
            "the Bedrock adapter sends a thinking budget to Anthropic models only, not to `{}`; \
             pass the model's own reasoning field through the request extras \
             (`additionalModelRequestFields`)",
            request.model
        )));
    }
    if budget < MIN_THINKING_BUDGET {
        return Err(invalid(format!(
            "a thinking budget of {budget} tokens is below Claude's minimum of {MIN_THINKING_BUDGET}"
        )));
    }
    Ok(Some(budget))
}

fn tool_config(request: &ModelRequest) -> Result<Option<ToolConfig<'_>>, BackendError> {
    if request.tools.is_empty() {
        return match request.tool_choice {
            ToolChoice::Auto | ToolChoice::None => Ok(None),
            ToolChoice::Required | ToolChoice::Tool { .. } => Err(invalid(
                "the tool choice requires a tool call, but the request offers no tools",
            )),
        };
    }
    let tools = request
        .tools
        .iter()
        .map(|tool| ToolEntry::ToolSpec {
            name: &tool.name,
            description: &tool.description,
            input_schema: Json {
                json: &tool.parameters,
            },
        })
        .collect();
    let tool_choice = match &request.tool_choice {
        ToolChoice::Auto => None,
        // Converse has no `none`: the tools stay (a history with toolUse blocks needs them)
        // and the model is left to choose (docs/providers.md).
        ToolChoice::None => None,
        ToolChoice::Required => Some(serde_json::json!({"any": {}})),
        ToolChoice::Tool { name } => {
            if !request.tools.iter().any(|tool| tool.name == *name) {
                return Err(invalid(format!(
                    "the tool choice names `{name}`, which is not among the request's tools"
                )));
            }
            Some(serde_json::json!({"tool": {"name": name}}))
        }
    };
    Ok(Some(ToolConfig { tools, tool_choice }))
}

/// The history as alternating user and assistant turns, tool results first in a user turn.
fn turns(history: &[Message], reminders: bool) -> Result<Vec<Turn<'_>>, BackendError> {
    let mut turns: Vec<Turn<'_>> = Vec::with_capacity(history.len());
    let mut documents = 0usize;
    for message in history {
        let (role, blocks): (Role, Vec<Block<'_>>) = match message {
            Message::System { content } => {
                if !reminders || content.is_empty() {
                    continue;
                }
                let wrapped = format!("<system-reminder>\n{content}\n</system-reminder>");
                (Role::User, vec![Block::Text(Cow::Owned(wrapped))])
            }
            Message::User(user) => {
                let mut blocks = Vec::with_capacity(user.content.len());
                for block in &user.content {
                    match block {
                        UserBlock::Text { text } if text.is_empty() => {}
                        UserBlock::Text { text } => blocks.push(Block::Text(Cow::Borrowed(text))),
                        UserBlock::Image { source } => blocks.push(image(source)?),
                        UserBlock::File(file) => blocks.push(document(file, &mut documents)?),
                        UserBlock::Audio(_) => {
                            return Err(BackendError::unsupported_content(
                                "Bedrock",
                                block.kind(),
                                "a user turn",
                            ));
                        }
                    }
                }
                (Role::User, blocks)
            }
            Message::Assistant(assistant) => (
                Role::Assistant,
                assistant
                    .content
                    .iter()
                    .filter_map(assistant_block)
                    .collect(),
            ),
            Message::Tool(result) => (Role::User, vec![tool_result(result, &mut documents)?]),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => turns.push(Turn {
                role,
                content: blocks,
            }),
        }
    }
    for turn in &mut turns {
        if turn.role == Role::User {
            turn.content
                .sort_by_key(|block| !matches!(block, Block::ToolResult { .. }));
        }
    }
    Ok(turns)
}

fn tool_result<'a>(
    result: &'a ToolResult,
    documents: &mut usize,
) -> Result<Block<'a>, BackendError> {
    let mut content = Vec::with_capacity(result.blocks.len() + 1);
    if !result.content.is_empty() || result.blocks.is_empty() {
        content.push(Block::Text(Cow::Borrowed(result.content.as_str())));
    }
    for block in &result.blocks {
        content.push(match block {
            ToolResultBlock::Text { text } if text.is_empty() => continue,
            ToolResultBlock::Text { text } => Block::Text(Cow::Borrowed(text)),
            ToolResultBlock::Image { source } => image(source)?,
            ToolResultBlock::File(file) => document(file, documents)?,
            ToolResultBlock::Json { value } => Block::Json(value),
        });
    }
    Ok(Block::ToolResult {
        tool_use_id: result.tool_call_id.as_str(),
        content,
        status: if result.is_error { "error" } else { "success" },
    })
}

/// The image format Converse names from a media type.
fn image_format(media_type: &str) -> Option<&'static str> {
    Some(match media_type {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpeg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        _ => return None,
    })
}

fn image(source: &ImageSource) -> Result<Block<'_>, BackendError> {
    match source {
        ImageSource::Base64 { media_type, data } => {
            let format = image_format(media_type).ok_or_else(|| {
                unsupported(format!(
                    "Bedrock takes PNG, JPEG, GIF and WebP images, not `{media_type}`; nothing was sent"
                ))
            })?;
            Ok(Block::Image(Media {
                format,
                source: Source::Bytes(data),
            }))
        }
        ImageSource::Url { url } if url.starts_with("s3://") => {
            let format = url
                .rsplit('.')
                .next()
                .and_then(|ext| image_format(&format!("image/{}", ext.to_ascii_lowercase())))
                .ok_or_else(|| {
                    unsupported(format!(
                        "the image format of `{}` cannot be told from its name (png, jpeg, gif, webp)",
                        crate::http::status::clip(url, 100)
                    ))
                })?;
            Ok(Block::Image(Media {
                format,
                source: Source::S3Location { uri: url },
            }))
        }
        ImageSource::Url { .. } => Err(unsupported(
            "Bedrock takes images as bytes or s3:// locations, not web URLs; download the image \
             and send it inline",
        )),
    }
}

/// The document format Converse names from a media type.
fn document_format(media_type: &str) -> Option<&'static str> {
    let media = media_type.split(';').next().unwrap_or("").trim();
    Some(match media {
        "application/pdf" => "pdf",
        "text/csv" => "csv",
        "application/msword" => "doc",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document" => "docx",
        "application/vnd.ms-excel" => "xls",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" => "xlsx",
        "text/html" => "html",
        "text/plain" => "txt",
        "text/markdown" => "md",
        _ => return None,
    })
}

/// A document block. Converse requires a name of letters, digits, spaces, hyphens,
/// parentheses and brackets, unique within a request: the file name cleaned up, else
/// `document-N`.
fn document<'a>(file: &'a FileBlock, count: &mut usize) -> Result<Block<'a>, BackendError> {
    let format = document_format(&file.media_type).ok_or_else(|| {
        unsupported(format!(
            "Bedrock takes pdf, csv, doc(x), xls(x), html, txt and md documents, not a `{}` file \
             block; nothing was sent",
            file.media_type
        ))
    })?;
    *count += 1;
    let cleaned: String = file
        .filename
        .as_deref()
        .unwrap_or("")
        .rsplit_once('.')
        .map_or(file.filename.as_deref().unwrap_or(""), |(stem, _)| stem)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, ' ' | '-' | '(' | ')' | '[' | ']') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let name = if cleaned.trim().is_empty() {
        format!("document-{count}")
    } else {
        format!("{} {count}", cleaned.trim())
    };
    let source = match &file.source {
        FileSource::Base64 { data } => Source::Bytes(data),
        FileSource::Url { url } if url.starts_with("s3://") => Source::S3Location { uri: url },
        FileSource::Url { .. } | FileSource::FileId { .. } => {
            return Err(unsupported(
                "Bedrock takes documents as bytes or s3:// locations, not web URLs or file ids",
            ));
        }
    };
    Ok(Block::Document(Document {
        format,
        name,
        source,
    }))
}

fn assistant_block(block: &AssistantBlock) -> Option<Block<'_>> {
    Some(match block {
        AssistantBlock::Text { text } | AssistantBlock::Refusal { text } if text.is_empty() => {
            return None;
        }
        AssistantBlock::Text { text } | AssistantBlock::Refusal { text } => {
            Block::Text(Cow::Borrowed(text))
        }
        AssistantBlock::Thinking(thinking) => return reasoning_block(thinking),
        AssistantBlock::ToolCall(call) => Block::ToolUse {
            tool_use_id: call.id.as_str(),
            name: &call.name,
            input: match &call.arguments {
                arguments @ Value::Object(_) => Cow::Borrowed(arguments),
                // Converse takes an object here, like Anthropic.
                _ => Cow::Owned(Value::Object(Map::new())),
            },
        },
    })
}

/// A reasoning block as the model signed it; unsigned reasoning (another provider's, or cut
/// off) and another provider's reasoning items are left out, as Claude rejects them.
fn reasoning_block(thinking: &Thinking) -> Option<Block<'_>> {
    let signature = thinking.signature.as_deref().filter(|s| !s.is_empty())?;
    if thinking.id.is_some() {
        return None;
    }
    Some(Block::ReasoningContent(if thinking.redacted {
        Reasoning::RedactedContent(signature)
    } else {
        Reasoning::ReasoningText {
            text: &thinking.thinking,
            signature,
        }
    }))
}
