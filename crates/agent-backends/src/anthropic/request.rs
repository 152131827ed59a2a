//! The Messages request body, built from a [`ModelRequest`] with borrowed data.

use std::borrow::Cow;

use agent_types::{
    AssistantBlock, BackendError, BackendErrorKind, FileBlock, FileSource, GenerationSettings,
    ImageSource, Message, ModelRequest, Thinking, ToolChoice, ToolResult, ToolResultBlock,
    UserBlock,
};
use serde::Serialize;
use serde_json::{Map, Value};

use super::{CacheLayout, DEFAULT_MAX_TOKENS, MIN_THINKING_BUDGET, thinking_budget};

/// The request body. Fields are declared in the order Anthropic renders a prompt (tools, then
/// system, then messages), so with caching on the serialized body starts with the cached
/// prefix.
#[derive(Debug, Serialize)]
pub(super) struct Body<'a> {
    // Empty on Vertex AI, where the model is in the URL and the body must not name it.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub(super) model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) system: Vec<Block<'a>>,
    pub(super) messages: Vec<Turn<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<ThinkingConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    output_config: Option<OutputConfig<'a>>,
    stream: bool,
    #[serde(flatten)]
    extras: &'a Map<String, Value>,
}

/// `output_config: {"format": {"type": "json_schema", "schema": ...}}`: Anthropic's structured
/// outputs, for the models that have them (the backend declares `structured_output` only when
/// the caller says so, see docs/providers.md).
#[derive(Debug, Serialize)]
struct OutputConfig<'a> {
    format: OutputFormat<'a>,
}

#[derive(Debug, Serialize)]
struct OutputFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    schema: &'a Value,
}

impl Body<'_> {
    /// The top-level fields this body sends, apart from the extras.
    fn fields(&self) -> impl Iterator<Item = &'static str> {
        [
            ("model", true),
            ("max_tokens", true),
            ("tools", !self.tools.is_empty()),
            ("tool_choice", self.tool_choice.is_some()),
            ("system", !self.system.is_empty()),
            ("messages", true),
            ("thinking", self.thinking.is_some()),
            ("temperature", self.temperature.is_some()),
            ("top_p", self.top_p.is_some()),
            ("stop_sequences", !self.stop_sequences.is_empty()),
            ("output_config", self.output_config.is_some()),
            ("stream", true),
        ]
        .into_iter()
        .filter_map(|(name, sent)| sent.then_some(name))
    }
}

/// A tool definition.
#[derive(Debug, Serialize)]
pub(super) struct Tool<'a> {
    /// A server tool's type (the tool-search tool); `None` for the caller's tools.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub(super) kind: Option<&'static str>,
    pub(super) name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input_schema: Option<&'a Value>,
    /// Loaded only when the tool-search tool finds it (`anthropic::tool_search`).
    #[serde(skip_serializing_if = "is_false")]
    pub(super) defer_loading: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) cache_control: Option<CacheControl>,
}

impl Tool<'_> {
    /// A server tool: its type and name only.
    pub(super) fn server(kind: &'static str, name: &'static str) -> Tool<'static> {
        Tool {
            kind: Some(kind),
            name,
            description: None,
            input_schema: None,
            defer_loading: false,
            cache_control: None,
        }
    }
}

#[derive(Debug, Serialize)]
struct WireToolChoice<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "is_false")]
    disable_parallel_tool_use: bool,
}

#[derive(Debug, Serialize)]
struct ThinkingConfig {
    #[serde(rename = "type")]
    kind: &'static str,
    budget_tokens: u32,
}

/// A `cache_control` breakpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(super) struct CacheControl {
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ttl: Option<&'static str>,
}

/// One message of the conversation.
#[derive(Debug, Serialize)]
pub(super) struct Turn<'a> {
    role: Role,
    pub(super) content: Vec<Block<'a>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Role {
    User,
    Assistant,
}

/// A content block (also used for the system prompt's text blocks).
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Block<'a> {
    Text {
        text: Cow<'a, str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    Image {
        source: WireImage<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Cow<'a, Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    Document {
        source: WireDocument<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        title: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: ToolResultContent<'a>,
        #[serde(skip_serializing_if = "is_false")]
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
}

impl<'a> Block<'a> {
    fn text(text: impl Into<Cow<'a, str>>) -> Self {
        Self::Text {
            text: text.into(),
            cache_control: None,
        }
    }

    /// The block's breakpoint slot; `None` for blocks Anthropic does not let carry one
    /// (thinking blocks).
    pub(super) fn cache_slot(&mut self) -> Option<&mut Option<CacheControl>> {
        match self {
            Self::Text { cache_control, .. }
            | Self::Image { cache_control, .. }
            | Self::Document { cache_control, .. }
            | Self::ToolUse { cache_control, .. }
            | Self::ToolResult { cache_control, .. } => Some(cache_control),
            Self::Thinking { .. } | Self::RedactedThinking { .. } => None,
        }
    }
}

/// A tool result's content: a plain string for a text-only result, else a block list.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(super) enum ToolResultContent<'a> {
    Text(&'a str),
    Blocks(Vec<Block<'a>>),
}

/// A document block's source.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum WireDocument<'a> {
    /// Inline PDF bytes.
    Base64 { media_type: &'a str, data: &'a str },
    /// A plain-text document, as its text.
    Text {
        media_type: &'static str,
        data: String,
    },
    /// A PDF Anthropic fetches.
    Url { url: &'a str },
    /// A file uploaded through the Files API.
    File { file_id: &'a str },
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum WireImage<'a> {
    Base64 { media_type: &'a str, data: &'a str },
    Url { url: &'a str },
}

// serde's skip_serializing_if takes a path to a fn(&T) -> bool.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_false(value: &bool) -> bool {
    !*value
}

fn invalid(message: impl Into<String>) -> BackendError {
    BackendError::new(BackendErrorKind::InvalidRequest, message)
}

/// Builds the body for `request`. With a cache layout the tools are sorted and history system
/// notes travel in the user turns; the breakpoints are `cache::mark`'s, applied after.
pub(super) fn build<'a>(
    request: &'a ModelRequest,
    layout: Option<&CacheLayout>,
) -> Result<Body<'a>, BackendError> {
    let settings = &request.settings;
    let budget = thinking_budget_of(settings)?;
    let max_tokens = match (settings.max_output_tokens, budget) {
        (Some(max), Some(budget)) if max <= budget => {
            return Err(invalid(format!(
                "max_output_tokens ({max}) must be larger than the thinking budget ({budget}): \
                 Anthropic counts thinking inside max_tokens"
            )));
        }
        (Some(max), _) => max,
        (None, budget) => DEFAULT_MAX_TOKENS.saturating_add(budget.unwrap_or(0)),
    };
    crate::settings::refuse_out_of_range(
        crate::Provider::Anthropic.settings_limits(&request.model),
        settings,
    )?;
    let tool_choice = tool_choice(request)?;

    let mut tools: Vec<Tool<'a>> = request
        .tools
        .iter()
        .map(|tool| Tool {
            kind: None,
            name: &tool.name,
            description: Some(&tool.description),
            input_schema: Some(&tool.parameters),
            defer_loading: tool.defer_loading,
            cache_control: None,
        })
        .collect();
    let mut system = Vec::new();
    if let Some(text) = request.system.as_deref().filter(|text| !text.is_empty()) {
        system.push(Block::text(text));
    }
    // With caching on, history system notes travel in the user turns (see the module docs);
    // without it they join the system prompt.
    let reminders = layout.is_some();
    if !reminders {
        for message in &request.messages {
            if let Message::System { content } = message
                && !content.is_empty()
            {
                system.push(Block::text(content.as_str()));
            }
        }
    }
    let messages = turns(&request.messages, reminders)?;

    let mut body = Body {
        model: &request.model,
        max_tokens,
        tools: Vec::new(),
        tool_choice,
        system,
        messages,
        thinking: budget.map(|budget_tokens| ThinkingConfig {
            kind: "enabled",
            budget_tokens,
        }),
        temperature: settings.temperature,
        top_p: settings.top_p,
        stop_sequences: &settings.stop_sequences,
        output_config: request.response_format.as_ref().map(|format| OutputConfig {
            format: OutputFormat {
                kind: "json_schema",
                schema: &format.schema,
            },
        }),
        stream: request.stream,
        extras: &request.extras,
    };
    if layout.is_some() {
        // Sorted, so the prefix does not depend on the order the caller registered tools in.
        // The breakpoints are the caller's next step (`cache::mark`): this module builds the
        // body and knows nothing of them.
        tools.sort_by(|a, b| a.name.cmp(b.name));
    }
    body.tools = tools;
    if let Some(field) = body
        .fields()
        .find(|field| request.extras.contains_key(*field))
    {
        return Err(invalid(format!(
            "the request extras set `{field}`, which the Anthropic adapter already sends from \
             the request; use the typed request field or setting instead"
        )));
    }
    Ok(body)
}

/// The thinking budget the settings ask for, if any.
fn thinking_budget_of(settings: &GenerationSettings) -> Result<Option<u32>, BackendError> {
    let Some(reasoning) = settings.reasoning else {
        return Ok(None);
    };
    let budget = match (reasoning.budget_tokens, reasoning.effort) {
        (Some(budget), _) => budget,
        (None, Some(effort)) => thinking_budget(effort),
        (None, None) => return Ok(None),
    };
    match budget {
        0 => Ok(None),
        budget if budget < MIN_THINKING_BUDGET => Err(invalid(format!(
            "a thinking budget of {budget} tokens is below Anthropic's minimum of \
             {MIN_THINKING_BUDGET}"
        ))),
        budget => Ok(Some(budget)),
    }
}

fn tool_choice(request: &ModelRequest) -> Result<Option<WireToolChoice<'_>>, BackendError> {
    let disable_parallel = request.settings.parallel_tool_calls == Some(false);
    if request.tools.is_empty() {
        return match request.tool_choice {
            ToolChoice::Auto | ToolChoice::None => Ok(None),
            ToolChoice::Required | ToolChoice::Tool { .. } => Err(invalid(
                "the tool choice requires a tool call, but the request offers no tools",
            )),
        };
    }
    let (kind, name) = match &request.tool_choice {
        // `auto` is Anthropic's default; it is only spelled out to carry the parallel flag.
        ToolChoice::Auto if !disable_parallel => return Ok(None),
        ToolChoice::Auto => ("auto", None),
        ToolChoice::None => ("none", None),
        ToolChoice::Required => ("any", None),
        ToolChoice::Tool { name } => {
            if !request.tools.iter().any(|tool| tool.name == *name) {
                return Err(invalid(format!(
                    "the tool choice names `{name}`, which is not among the request's tools"
                )));
            }
            ("tool", Some(name.as_str()))
        }
    };
    Ok(Some(WireToolChoice {
        kind,
        name,
        // Anthropic's `none` choice has no such flag.
        disable_parallel_tool_use: disable_parallel && kind != "none",
    }))
}

/// The history as alternating user and assistant turns.
fn turns(history: &[Message], reminders: bool) -> Result<Vec<Turn<'_>>, BackendError> {
    let mut turns: Vec<Turn<'_>> = Vec::with_capacity(history.len());
    for message in history {
        let (role, blocks): (Role, Vec<Block<'_>>) = match message {
            Message::System { content } => {
                if !reminders || content.is_empty() {
                    continue;
                }
                let wrapped = format!("<system-reminder>\n{content}\n</system-reminder>");
                (Role::User, vec![Block::text(wrapped)])
            }
            Message::User(user) => (
                Role::User,
                user.content
                    .iter()
                    .filter_map(|block| user_block(block).transpose())
                    .collect::<Result<_, _>>()?,
            ),
            Message::Assistant(assistant) => (
                Role::Assistant,
                assistant
                    .content
                    .iter()
                    .filter_map(assistant_block)
                    .collect(),
            ),
            Message::Tool(result) => (
                Role::User,
                vec![Block::ToolResult {
                    tool_use_id: result.tool_call_id.as_str(),
                    content: tool_result_content(result)?,
                    is_error: result.is_error,
                    cache_control: None,
                }],
            ),
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
            // Anthropic wants a user turn's tool results before anything else in it; the sort
            // is stable, so every other order is kept.
            turn.content
                .sort_by_key(|block| !matches!(block, Block::ToolResult { .. }));
        }
    }
    Ok(turns)
}

/// A tool result's content: the plain string when it is text only, else Anthropic's block
/// list (text, image and document blocks; a JSON block as its compact text).
fn tool_result_content(result: &ToolResult) -> Result<ToolResultContent<'_>, BackendError> {
    if result.blocks.is_empty() {
        return Ok(ToolResultContent::Text(&result.content));
    }
    let mut blocks = Vec::with_capacity(result.blocks.len() + 1);
    if !result.content.is_empty() {
        blocks.push(Block::text(result.content.as_str()));
    }
    for block in &result.blocks {
        blocks.push(match block {
            // Anthropic rejects empty text blocks.
            ToolResultBlock::Text { text } if text.is_empty() => continue,
            ToolResultBlock::Text { text } => Block::text(text.as_str()),
            ToolResultBlock::Image { source } => image_block(source),
            ToolResultBlock::File(file) => document(file)?,
            ToolResultBlock::Json { value } => Block::text(value.to_string()),
        });
    }
    Ok(ToolResultContent::Blocks(blocks))
}

fn image_block(source: &ImageSource) -> Block<'_> {
    Block::Image {
        source: match source {
            ImageSource::Base64 { media_type, data } => WireImage::Base64 { media_type, data },
            ImageSource::Url { url } => WireImage::Url { url },
        },
        cache_control: None,
    }
}

/// A document block: PDFs inline, by URL or by file id; plain text as its text.
fn document(file: &FileBlock) -> Result<Block<'_>, BackendError> {
    let media_type = file.media_type.as_str();
    let source = match &file.source {
        FileSource::Base64 { data } if media_type == "application/pdf" => {
            WireDocument::Base64 { media_type, data }
        }
        FileSource::Base64 { data } if media_type.starts_with("text/plain") => {
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data)
                .map_err(|error| {
                    invalid(format!(
                        "a text/plain file block's data is not valid base64: {error}"
                    ))
                })?;
            let text = String::from_utf8(bytes)
                .map_err(|_| invalid("a text/plain file block's data is not UTF-8 text"))?;
            WireDocument::Text {
                media_type: "text/plain",
                data: text,
            }
        }
        FileSource::Base64 { .. } => {
            return Err(BackendError::new(
                BackendErrorKind::Unsupported,
                format!(
                    "Anthropic takes PDF and plain-text documents, not a `{media_type}` file block; \
                     nothing was sent"
                ),
            ));
        }
        FileSource::Url { url } => WireDocument::Url { url },
        FileSource::FileId { file_id } => WireDocument::File { file_id },
    };
    Ok(Block::Document {
        source,
        title: file.filename.as_deref(),
        cache_control: None,
    })
}

fn user_block(block: &UserBlock) -> Result<Option<Block<'_>>, BackendError> {
    Ok(Some(match block {
        // Anthropic rejects empty text blocks.
        UserBlock::Text { text } if text.is_empty() => return Ok(None),
        UserBlock::Text { text } => Block::text(text.as_str()),
        UserBlock::Image { source } => image_block(source),
        UserBlock::File(file) => document(file)?,
        UserBlock::Audio(_) => {
            return Err(BackendError::unsupported_content(
                "Anthropic",
                block.kind(),
                "a user turn",
            ));
        }
    }))
}

fn assistant_block(block: &AssistantBlock) -> Option<Block<'_>> {
    Some(match block {
        AssistantBlock::Text { text } | AssistantBlock::Refusal { text } if text.is_empty() => {
            return None;
        }
        // Anthropic has no refusal block: a refusal another provider produced is what the
        // model said, so it goes back as text.
        AssistantBlock::Text { text } | AssistantBlock::Refusal { text } => {
            Block::text(text.as_str())
        }
        AssistantBlock::Thinking(thinking) => return thinking_block(thinking),
        AssistantBlock::ToolCall(call) => Block::ToolUse {
            id: call.id.as_str(),
            name: &call.name,
            input: match &call.arguments {
                arguments @ Value::Object(_) => Cow::Borrowed(arguments),
                // Anthropic only accepts an object here (see the module docs).
                _ => Cow::Owned(Value::Object(Map::new())),
            },
            cache_control: None,
        },
    })
}

/// A thinking block as Anthropic signed it, or `None` for one it would reject: unsigned, or
/// carrying another provider's reasoning-item id.
fn thinking_block(thinking: &Thinking) -> Option<Block<'_>> {
    let signature = thinking.signature.as_deref().filter(|s| !s.is_empty())?;
    if thinking.id.is_some() {
        return None;
    }
    Some(if thinking.redacted {
        Block::RedactedThinking { data: signature }
    } else {
        Block::Thinking {
            thinking: &thinking.thinking,
            signature,
        }
    })
}
