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

/// A user turn: text and images in order.
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

/// The result of one tool call, as the model will see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The call this answers.
    pub tool_call_id: ToolCallId,
    /// The tool's name; some providers (Gemini) require it next to the result. May be left
    /// out (empty) in results a caller sends back: the loop fills it from the pending call.
    #[serde(default)]
    pub name: String,
    /// The result text: the handler's JSON-serialized output (possibly truncated) or an error
    /// message the model can act on.
    pub content: String,
    /// `true` when `content` describes a failure.
    #[serde(default, skip_serializing_if = "is_false")]
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
}
