//! Conversation messages: system, user, assistant and tool results.
//!
//! The JSON form is tagged by `"role"`; content blocks are tagged by `"type"`. An assistant
//! message keeps its blocks in the order the model produced them, because providers that sign
//! reasoning (Anthropic thinking signatures, Gemini thought signatures, OpenAI encrypted
//! reasoning) reject a later request whose history reorders or drops them.

use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::id::ToolCallId;
use crate::stop::StopReason;
use crate::usage::Usage;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Instructions for the model. Most requests carry the system prompt separately in
    /// [`ModelRequest::system`](crate::ModelRequest::system); this variant exists for histories
    /// that interleave system notes.
    System {
        /// The instruction text.
        content: String,
    },
    /// What the user said.
    User(UserMessage),
    /// What the model answered.
    Assistant(AssistantMessage),
    /// The result of one tool call, fed back to the model.
    Tool(ToolResult),
}

impl Message {
    /// A system message.
    pub fn system(text: impl Into<String>) -> Self {
        Self::System {
            content: text.into(),
        }
    }

    /// A user message with one text block.
    pub fn user(text: impl Into<String>) -> Self {
        Self::User(UserMessage::text(text))
    }

    /// The role name as it appears in the JSON form.
    pub fn role(&self) -> Role {
        match self {
            Self::System { .. } => Role::System,
            Self::User(_) => Role::User,
            Self::Assistant(_) => Role::Assistant,
            Self::Tool(_) => Role::Tool,
        }
    }
}

impl From<UserMessage> for Message {
    fn from(message: UserMessage) -> Self {
        Self::User(message)
    }
}

impl From<AssistantMessage> for Message {
    fn from(message: AssistantMessage) -> Self {
        Self::Assistant(message)
    }
}

impl From<ToolResult> for Message {
    fn from(result: ToolResult) -> Self {
        Self::Tool(result)
    }
}

/// The role of a [`Message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// [`Message::System`].
    System,
    /// [`Message::User`].
    User,
    /// [`Message::Assistant`].
    Assistant,
    /// [`Message::Tool`].
    Tool,
}

/// A user turn: text, images, files (documents) and audio, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    /// The blocks of the turn. In JSON a bare string is accepted as one text block.
    #[serde(deserialize_with = "user_content")]
    pub content: Vec<UserBlock>,
}

impl UserMessage {
    /// A user turn with one text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![UserBlock::Text { text: text.into() }],
        }
    }
}

impl From<&str> for UserMessage {
    fn from(text: &str) -> Self {
        Self::text(text)
    }
}

impl From<String> for UserMessage {
    fn from(text: String) -> Self {
        Self::text(text)
    }
}

fn user_content<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<UserBlock>, D::Error> {
    // A visitor rather than an untagged enum: with `untagged`, a malformed block anywhere in
    // the list is reported only as "did not match any variant", hiding which field is wrong.
    struct Content;

    impl<'de> Visitor<'de> for Content {
        type Value = Vec<UserBlock>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string or a list of user content blocks")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            Ok(vec![UserBlock::Text { text: text.into() }])
        }

        fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
            Ok(vec![UserBlock::Text { text }])
        }

        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            Vec::deserialize(de::value::SeqAccessDeserializer::new(seq))
        }
    }

    deserializer.deserialize_any(Content)
}

/// One block of a user turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum UserBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, inline or by URL.
    Image {
        /// Where the image bytes come from.
        source: ImageSource,
    },
    /// A file or document (a PDF, plain text), inline, by URL or by a provider file id.
    File(FileBlock),
    /// A sound clip, inline. Only some providers take audio; the others refuse it before
    /// sending.
    Audio(AudioBlock),
}

impl UserBlock {
    /// The kind of the block, as an adapter names it when it refuses one.
    pub fn kind(&self) -> ContentKind {
        match self {
            Self::Text { .. } => ContentKind::Text,
            Self::Image { .. } => ContentKind::Image,
            Self::File(_) => ContentKind::File,
            Self::Audio(_) => ContentKind::Audio,
        }
    }
}

/// A file or document block: its media type, where its bytes come from and, optionally, its
/// name.
///
/// ```json
/// {"type": "file", "media_type": "application/pdf", "source": {"type": "base64", "data": "JVBERi0x"}, "filename": "report.pdf"}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileBlock {
    /// The MIME type, e.g. `application/pdf` or `text/plain`.
    pub media_type: String,
    /// Where the bytes come from.
    pub source: FileSource,
    /// The file's name, where the provider shows one to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
}

impl FileBlock {
    /// An inline file from its base64 text.
    pub fn base64(media_type: impl Into<String>, data: impl Into<String>) -> Self {
        Self {
            media_type: media_type.into(),
            source: FileSource::Base64 { data: data.into() },
            filename: None,
        }
    }

    /// Sets the file name.
    #[must_use]
    pub fn with_filename(mut self, filename: impl Into<String>) -> Self {
        self.filename = Some(filename.into());
        self
    }
}

/// Where a file's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FileSource {
    /// Inline bytes, base64-encoded (standard alphabet, padded).
    Base64 {
        /// The base64 text.
        data: String,
    },
    /// A URL the provider fetches itself.
    Url {
        /// The address.
        url: String,
    },
    /// A file already uploaded to the provider (OpenAI `file-…`, Anthropic Files API,
    /// a Gemini file URI).
    FileId {
        /// The provider's id for the file.
        file_id: String,
    },
}

/// An inline sound clip.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AudioBlock {
    /// The MIME type, e.g. `audio/wav` or `audio/mpeg`.
    pub media_type: String,
    /// The bytes, base64-encoded (standard alphabet, padded).
    pub data: String,
}

/// The kinds of content block, as adapters name them when they refuse one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContentKind {
    /// Text.
    Text,
    /// An image.
    Image,
    /// A file or document.
    File,
    /// Audio.
    Audio,
    /// A structured JSON value.
    Json,
}

impl ContentKind {
    /// The name used in the wire form and in error messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Image => "image",
            Self::File => "file",
            Self::Audio => "audio",
            Self::Json => "json",
        }
    }
}

impl fmt::Display for ContentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where an image's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ImageSource {
    /// Inline bytes, base64-encoded (standard alphabet, padded).
    Base64 {
        /// The MIME type, e.g. `image/png`.
        media_type: String,
        /// The base64 text.
        data: String,
    },
    /// A URL the provider fetches itself.
    Url {
        /// The address.
        url: String,
    },
}

/// What the model produced in one model call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// Text, thinking and tool-call blocks in the order the model produced them. Keep that
    /// order when sending the history back: providers that sign reasoning (Anthropic thinking
    /// signatures, Gemini thought signatures, OpenAI encrypted reasoning) reject a request
    /// whose history reorders or drops signed blocks.
    pub content: Vec<AssistantBlock>,
    /// Why the model stopped; `None` while the message is still being assembled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// Tokens this model call consumed, when the provider reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The model that produced the message, as the provider named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl AssistantMessage {
    /// An assistant message with one text block, stopped normally.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![AssistantBlock::Text { text: text.into() }],
            stop_reason: Some(StopReason::Stop),
            ..Self::default()
        }
    }

    /// The tool calls of this message, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.content.iter().filter_map(|block| match block {
            AssistantBlock::ToolCall(call) => Some(call),
            _ => None,
        })
    }

    /// All text blocks joined, without separators.
    pub fn text_content(&self) -> String {
        self.content
            .iter()
            .filter_map(|block| match block {
                AssistantBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// One block of an assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AssistantBlock {
    /// Visible answer text.
    Text {
        /// The text.
        text: String,
    },
    /// Reasoning the model exposed (or an opaque stand-in for reasoning it hid).
    Thinking(Thinking),
    /// A request to run a tool.
    ToolCall(ToolCall),
    /// The model declined to answer, in its own words (OpenAI's `refusal`). Kept apart from
    /// the answer text so a refusal is never mistaken for an answer, and never dropped; the
    /// message's stop reason is `content_filter`.
    Refusal {
        /// The refusal text.
        text: String,
    },
}

/// A reasoning block. The provider's signature or encrypted payload is kept byte for byte so it
/// can be sent back on the next request; agentry never interprets it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thinking {
    /// The reasoning text; empty when the provider only returned an opaque payload.
    pub thinking: String,
    /// The provider's opaque signature or encrypted reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// `true` when the provider redacted the reasoning and `signature` holds the opaque data
    /// (Anthropic `redacted_thinking`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub redacted: bool,
    /// The provider's id for the reasoning item, where it has one (OpenAI Responses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// A tool call the model asked for. The arguments are always parsed JSON: adapters whose
/// provider sends a string parse it before anyone sees the call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for the call.
    pub id: ToolCallId,
    /// The tool's name, as the model wrote it (it may name no declared tool).
    pub name: String,
    /// The arguments; `{}` when the model sent none. When the model's argument text was not
    /// valid JSON, this is that text as a JSON string and `invalid_arguments` is set.
    pub arguments: Value,
    /// An opaque provider signature attached to the call (Gemini thought signatures), sent back
    /// unchanged with the history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// The argument text was not valid JSON (cut off mid-stream, or malformed by the model):
    /// `arguments` holds the raw text as a string rather than a silently invented `{}`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub invalid_arguments: bool,
}

impl ToolCall {
    /// A call with the given id, name and arguments.
    pub fn new(id: impl Into<ToolCallId>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
            signature: None,
            invalid_arguments: false,
        }
    }
}

/// The result of one tool call, as the model will see it: a list of content blocks.
///
/// The list is kept as `content` (the leading text, the whole result for a text-only one)
/// plus `blocks` (everything after it: images, files, JSON values, more text). That keeps the
/// common text-only result a plain `String` that hooks and callers edit in place, and its
/// wire form a plain string; see [`ToolResult::to_blocks`] for the list as one.
///
/// In JSON, `content` is a string when `blocks` is empty and the full block list otherwise
/// (the leading text, when not empty, as its first `text` block).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// The call this answers.
    pub tool_call_id: ToolCallId,
    /// The tool's name; some providers (Gemini) require it next to the result. May be left
    /// out (empty) in results a caller sends back: the loop fills it from the pending call.
    pub name: String,
    /// The result text: the handler's JSON-serialized output (possibly truncated) or an error
    /// message the model can act on. With `blocks`, the text before them (possibly empty).
    pub content: String,
    /// The blocks after `content`, in order; empty for a text-only result.
    pub blocks: Vec<ToolResultBlock>,
    /// `true` when `content` describes a failure.
    pub is_error: bool,
}

impl ToolResult {
    /// A successful result.
    pub fn ok(
        tool_call_id: impl Into<ToolCallId>,
        name: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Self {
            tool_call_id: tool_call_id.into(),
            name: name.into(),
            content: content.into(),
            blocks: Vec::new(),
            is_error: false,
        }
    }

    /// A failed result; `content` says what went wrong.
    pub fn error(
        tool_call_id: impl Into<ToolCallId>,
        name: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Self {
            is_error: true,
            ..Self::ok(tool_call_id, name, content)
        }
    }

    /// A successful result made of `blocks`, in order. A leading text block becomes
    /// `content`.
    pub fn with_blocks(
        tool_call_id: impl Into<ToolCallId>,
        name: impl Into<String>,
        blocks: Vec<ToolResultBlock>,
    ) -> Self {
        let (content, blocks) = split_leading_text(blocks);
        Self {
            tool_call_id: tool_call_id.into(),
            name: name.into(),
            content,
            blocks,
            is_error: false,
        }
    }

    /// `true` when the result is text only (no `blocks`): the form every provider takes.
    pub fn is_text_only(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The whole result as one block list: `content` as a text block (left out when empty
    /// and other blocks follow), then `blocks`.
    pub fn to_blocks(&self) -> Vec<ToolResultBlock> {
        let mut all = Vec::with_capacity(self.blocks.len() + 1);
        if !self.content.is_empty() || self.blocks.is_empty() {
            all.push(ToolResultBlock::Text {
                text: self.content.clone(),
            });
        }
        all.extend(self.blocks.iter().cloned());
        all
    }

    /// The first block (after `content`) that is not text, if any.
    pub fn first_non_text(&self) -> Option<&ToolResultBlock> {
        self.blocks
            .iter()
            .find(|block| !matches!(block, ToolResultBlock::Text { .. }))
    }
}

fn split_leading_text(mut blocks: Vec<ToolResultBlock>) -> (String, Vec<ToolResultBlock>) {
    if let Some(ToolResultBlock::Text { .. }) = blocks.first()
        && let ToolResultBlock::Text { text } = blocks.remove(0)
    {
        return (text, blocks);
    }
    (String::new(), blocks)
}

/// One block of a tool result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolResultBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, inline or by URL.
    Image {
        /// Where the image bytes come from.
        source: ImageSource,
    },
    /// A file or document.
    File(FileBlock),
    /// A structured value (MCP's `structuredContent`). Providers without a structured form
    /// get its compact JSON text.
    Json {
        /// The value.
        value: Value,
    },
}

impl ToolResultBlock {
    /// The kind of the block, as an adapter names it when it refuses one.
    pub fn kind(&self) -> ContentKind {
        match self {
            Self::Text { .. } => ContentKind::Text,
            Self::Image { .. } => ContentKind::Image,
            Self::File(_) => ContentKind::File,
            Self::Json { .. } => ContentKind::Json,
        }
    }
}

/// The JSON form of a [`ToolResult`]: what serde reads and writes.
#[derive(Serialize, Deserialize)]
struct ToolResultWire<'a> {
    tool_call_id: std::borrow::Cow<'a, ToolCallId>,
    #[serde(default)]
    name: std::borrow::Cow<'a, str>,
    content: ToolContentWire<'a>,
    #[serde(default, skip_serializing_if = "is_false")]
    is_error: bool,
}

/// A text-only result's content as a string, any other as the block list.
enum ToolContentWire<'a> {
    Borrowed {
        text: &'a str,
        blocks: &'a [ToolResultBlock],
    },
    Owned(String, Vec<ToolResultBlock>),
}

impl Serialize for ToolContentWire<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let (text, blocks) = match self {
            Self::Borrowed { text, blocks } => (*text, *blocks),
            Self::Owned(text, blocks) => (text.as_str(), blocks.as_slice()),
        };
        if blocks.is_empty() {
            return serializer.serialize_str(text);
        }
        let lead = usize::from(!text.is_empty());
        let mut seq = serializer.serialize_seq(Some(blocks.len() + lead))?;
        if lead == 1 {
            #[derive(Serialize)]
            #[serde(tag = "type", rename = "text")]
            struct Text<'t> {
                text: &'t str,
            }
            seq.serialize_element(&Text { text })?;
        }
        for block in blocks {
            seq.serialize_element(block)?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for ToolContentWire<'_> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // A visitor rather than an untagged enum, for the same reason as `user_content`.
        struct Content;

        impl<'de> Visitor<'de> for Content {
            type Value = (String, Vec<ToolResultBlock>);

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a list of tool result content blocks")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok((text.into(), Vec::new()))
            }

            fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
                Ok((text, Vec::new()))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                let blocks: Vec<ToolResultBlock> =
                    Vec::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
                Ok(split_leading_text(blocks))
            }
        }

        let (text, blocks) = deserializer.deserialize_any(Content)?;
        Ok(Self::Owned(text, blocks))
    }
}

impl Serialize for ToolResult {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ToolResultWire {
            tool_call_id: std::borrow::Cow::Borrowed(&self.tool_call_id),
            name: std::borrow::Cow::Borrowed(&self.name),
            content: ToolContentWire::Borrowed {
                text: &self.content,
                blocks: &self.blocks,
            },
            is_error: self.is_error,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ToolResult {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = ToolResultWire::deserialize(deserializer)?;
        let (content, blocks) = match wire.content {
            ToolContentWire::Owned(text, blocks) => (text, blocks),
            ToolContentWire::Borrowed { text, blocks } => (text.to_owned(), blocks.to_vec()),
        };
        Ok(Self {
            tool_call_id: wire.tool_call_id.into_owned(),
            name: wire.name.into_owned(),
            content,
            blocks,
            is_error: wire.is_error,
        })
    }
}

// serde's skip_serializing_if takes a path to a fn(&T) -> bool.
#[allow(clippy::trivially_copy_pass_by_ref)]
pub(crate) fn is_false(value: &bool) -> bool {
    !*value
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn user_content_accepts_a_bare_string() {
        let message: Message =
            serde_json::from_value(json!({"role": "user", "content": "hello"})).unwrap();
        assert_eq!(message, Message::user("hello"));
        // It is written back in the block form.
        assert_eq!(
            serde_json::to_value(&message).unwrap(),
            json!({"role": "user", "content": [{"type": "text", "text": "hello"}]})
        );
        let direct: UserMessage = serde_json::from_str(r#"{"content":"hi"}"#).unwrap();
        assert_eq!(direct, UserMessage::text("hi"));
        let escaped: UserMessage = serde_json::from_str(r#"{"content":"a\nb"}"#).unwrap();
        assert_eq!(escaped, UserMessage::text("a\nb"));
    }

    #[test]
    fn user_content_accepts_blocks() {
        let message: Message = serde_json::from_value(json!({
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
            ]
        }))
        .unwrap();
        let Message::User(user) = message else {
            panic!("not a user message: {message:?}");
        };
        assert_eq!(user.content.len(), 2);
        assert_eq!(
            user.content[1],
            UserBlock::Image {
                source: ImageSource::Url {
                    url: "https://example.com/a.png".into()
                }
            }
        );
    }

    #[test]
    fn user_content_errors_name_the_problem() {
        let error = serde_json::from_value::<Message>(json!({
            "role": "user",
            "content": [{"type": "image", "source": {"type": "url"}}]
        }))
        .unwrap_err()
        .to_string();
        assert!(error.contains("missing field `url`"), "{error}");

        let error = serde_json::from_value::<Message>(json!({"role": "user", "content": 5}))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("a string or a list of user content blocks"),
            "{error}"
        );
    }

    #[test]
    fn roles() {
        assert_eq!(Message::system("s").role(), Role::System);
        assert_eq!(Message::user("u").role(), Role::User);
        assert_eq!(
            Message::from(AssistantMessage::text("a")).role(),
            Role::Assistant
        );
        assert_eq!(
            Message::from(ToolResult::ok("c", "t", "r")).role(),
            Role::Tool
        );
    }

    #[test]
    fn assistant_helpers() {
        let message = AssistantMessage {
            content: vec![
                AssistantBlock::Text {
                    text: "Let me ".into(),
                },
                AssistantBlock::Thinking(Thinking {
                    thinking: "hidden".into(),
                    ..Thinking::default()
                }),
                AssistantBlock::ToolCall(ToolCall::new("c1", "a", json!({}))),
                AssistantBlock::Text {
                    text: "check.".into(),
                },
                AssistantBlock::ToolCall(ToolCall::new("c2", "b", json!({"x": 1}))),
            ],
            ..AssistantMessage::default()
        };
        assert_eq!(message.text_content(), "Let me check.");
        let ids: Vec<&str> = message.tool_calls().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["c1", "c2"]);
        assert_eq!(
            AssistantMessage::text("done").stop_reason,
            Some(StopReason::Stop)
        );
    }

    #[test]
    fn tool_result_constructors() {
        let ok = ToolResult::ok("c1", "get_weather", "{\"temp\":21}");
        assert!(!ok.is_error);
        let err = ToolResult::error("c1", "get_weather", "city not found");
        assert!(err.is_error);
        assert_eq!(err.tool_call_id, ok.tool_call_id);
        assert_eq!(err.name, "get_weather");
    }

    #[test]
    fn a_text_only_tool_result_reads_and_writes_a_plain_string() {
        let result = ToolResult::ok("c1", "get_weather", "{\"temp\":21}");
        let json = json!({"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "{\"temp\":21}"});
        assert_eq!(
            serde_json::to_value(Message::from(result.clone())).unwrap(),
            json
        );
        assert_eq!(
            serde_json::from_value::<Message>(json).unwrap(),
            Message::from(result)
        );
        // Today's forms: `name` left out, `is_error` present.
        let old: ToolResult =
            serde_json::from_str(r#"{"tool_call_id":"c1","content":"boom","is_error":true}"#)
                .unwrap();
        assert_eq!(old, ToolResult::error("c1", "", "boom"));
        assert!(old.is_text_only());
    }

    #[test]
    fn a_rich_tool_result_reads_and_writes_its_block_list() {
        let result = ToolResult::with_blocks(
            "c1",
            "chart",
            vec![
                ToolResultBlock::Text {
                    text: "Here:".into(),
                },
                ToolResultBlock::Image {
                    source: ImageSource::Base64 {
                        media_type: "image/png".into(),
                        data: "iVBORw0KGgo=".into(),
                    },
                },
                ToolResultBlock::File(
                    FileBlock::base64("application/pdf", "JVBERi0x").with_filename("r.pdf"),
                ),
                ToolResultBlock::Json {
                    value: json!({"rows": 3}),
                },
            ],
        );
        assert_eq!(result.content, "Here:");
        assert_eq!(result.blocks.len(), 3);
        let json = serde_json::to_value(&result).unwrap();
        assert_eq!(
            json,
            json!({"tool_call_id": "c1", "name": "chart", "content": [
                {"type": "text", "text": "Here:"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "file", "media_type": "application/pdf", "source": {"type": "base64", "data": "JVBERi0x"}, "filename": "r.pdf"},
                {"type": "json", "value": {"rows": 3}}
            ]})
        );
        assert_eq!(serde_json::from_value::<ToolResult>(json).unwrap(), result);
        assert_eq!(result.to_blocks().len(), 4);
        assert_eq!(
            result.first_non_text().map(ToolResultBlock::kind),
            Some(ContentKind::Image)
        );

        // No leading text: the list starts with the image, and reads back the same.
        let image_only = ToolResult::with_blocks("c2", "shot", result.blocks[..1].to_vec());
        assert_eq!(image_only.content, "");
        let json = serde_json::to_value(&image_only).unwrap();
        assert_eq!(json["content"].as_array().unwrap().len(), 1);
        assert_eq!(
            serde_json::from_value::<ToolResult>(json).unwrap(),
            image_only
        );
        // A one-text-block list reads as the plain text.
        let listed: ToolResult = serde_json::from_value(
            json!({"tool_call_id": "c3", "content": [{"type": "text", "text": "hi"}]}),
        )
        .unwrap();
        assert_eq!(listed, ToolResult::ok("c3", "", "hi"));
    }

    #[test]
    fn tool_result_content_errors_name_the_problem() {
        let error = serde_json::from_value::<ToolResult>(
            json!({"tool_call_id": "c1", "content": [{"type": "file", "source": {"type": "base64", "data": "x"}}]}),
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("missing field `media_type`"), "{error}");
        let error =
            serde_json::from_value::<ToolResult>(json!({"tool_call_id": "c1", "content": 5}))
                .unwrap_err()
                .to_string();
        assert!(
            error.contains("a string or a list of tool result content blocks"),
            "{error}"
        );
    }

    #[test]
    fn user_turns_take_files_and_audio() {
        let message: Message = serde_json::from_value(json!({"role": "user", "content": [
            {"type": "file", "media_type": "text/plain", "source": {"type": "file_id", "file_id": "file-1"}},
            {"type": "file", "media_type": "application/pdf", "source": {"type": "url", "url": "https://example.com/a.pdf"}, "filename": "a.pdf"},
            {"type": "audio", "media_type": "audio/wav", "data": "UklGRg=="}
        ]}))
        .unwrap();
        let Message::User(user) = &message else {
            panic!("{message:?}");
        };
        let kinds: Vec<ContentKind> = user.content.iter().map(UserBlock::kind).collect();
        assert_eq!(
            kinds,
            [ContentKind::File, ContentKind::File, ContentKind::Audio]
        );
        let back: Message =
            serde_json::from_value(serde_json::to_value(&message).unwrap()).unwrap();
        assert_eq!(back, message);
    }
}
