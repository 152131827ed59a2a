//! Messages, blocks, ids, roles and stop reasons.

use agent_types::{
    AssistantBlock, AssistantMessage, ImageSource, Message, Role, SessionId, StopReason, Thinking,
    ToolCall, ToolCallId, ToolResult, UserBlock, UserMessage,
};
use serde_json::json;

use crate::{check, full_assistant, weather_call};

#[test]
fn system_message() {
    check!("message_system", Message::system("You are terse."));
}

#[test]
fn user_message_text() {
    check!(
        "message_user_text",
        Message::user("What's the weather in Denver?")
    );
}

#[test]
fn user_message_with_images() {
    check!(
        "message_user_images",
        Message::User(UserMessage {
            content: vec![
                UserBlock::Text {
                    text: "Compare these two.".into()
                },
                UserBlock::Image {
                    source: ImageSource::Base64 {
                        media_type: "image/png".into(),
                        data: "iVBORw0KGgo=".into(),
                    },
                },
                UserBlock::Image {
                    source: ImageSource::Url {
                        url: "https://example.com/cat.jpg".into(),
                    },
                },
            ],
        })
    );
}

#[test]
fn assistant_message_full() {
    check!("message_assistant_full", Message::from(full_assistant()));
}

#[test]
fn assistant_message_minimal() {
    // Still being assembled: no stop reason, usage or model yet.
    check!(
        "message_assistant_minimal",
        Message::Assistant(AssistantMessage {
            content: vec![AssistantBlock::Text { text: "Hi".into() }],
            ..AssistantMessage::default()
        })
    );
}

#[test]
fn assistant_message_every_stop_reason() {
    for (reason, name) in [
        (StopReason::Stop, "stop"),
        (StopReason::Length, "length"),
        (StopReason::ToolCalls, "tool_calls"),
        (StopReason::ContentFilter, "content_filter"),
        (StopReason::Error, "error"),
        (StopReason::Aborted, "aborted"),
    ] {
        let message = Message::Assistant(AssistantMessage {
            stop_reason: Some(reason),
            ..AssistantMessage::default()
        });
        let json = crate::round_trip(&message);
        assert_eq!(
            json,
            format!(r#"{{"role":"assistant","content":[],"stop_reason":"{name}"}}"#)
        );
    }
}

#[test]
fn thinking_blocks() {
    check!(
        "block_thinking_signed",
        AssistantBlock::Thinking(Thinking {
            thinking: "Denver is in Colorado.".into(),
            signature: Some("c2lnbmF0dXJl".into()),
            ..Thinking::default()
        })
    );
    check!(
        "block_thinking_redacted",
        AssistantBlock::Thinking(Thinking {
            thinking: String::new(),
            signature: Some("EmwKAhgBEgy3va3pzix/LafPsn4a".into()),
            redacted: true,
            id: None,
        })
    );
    check!(
        "block_thinking_openai_encrypted",
        AssistantBlock::Thinking(Thinking {
            thinking: "**Checking the forecast**".into(),
            signature: Some("gAAAAABo_encrypted".into()),
            redacted: false,
            id: Some("rs_68c1".into()),
        })
    );
    check!(
        "block_thinking_bare",
        AssistantBlock::Thinking(Thinking {
            thinking: "unsigned".into(),
            ..Thinking::default()
        })
    );
}

#[test]
fn tool_call_blocks() {
    check!("block_tool_call", AssistantBlock::ToolCall(weather_call()));
    check!(
        "block_tool_call_signed",
        AssistantBlock::ToolCall(ToolCall {
            signature: Some("CiQB0e2Kb_gemini_thought_signature".into()),
            ..ToolCall::new("call_2", "list_files", json!({}))
        })
    );
    check!(
        "block_text",
        AssistantBlock::Text {
            text: "Sunny, 21 °C.".into()
        }
    );
}

#[test]
fn tool_results() {
    check!(
        "message_tool_ok",
        Message::from(ToolResult::ok("call_1", "get_weather", r#"{"temp_c":21}"#))
    );
    check!(
        "message_tool_error",
        Message::from(ToolResult::error(
            "call_1",
            "get_weather",
            "unknown city `Denvr`; did you mean `Denver`?"
        ))
    );
    check!(
        "tool_result_bare",
        ToolResult::ok("call_1", "get_weather", "ok")
    );
}

#[test]
fn tool_result_blocks() {
    use agent_types::{FileBlock, FileSource, ToolResultBlock};

    check!(
        "message_tool_blocks",
        Message::from(ToolResult::with_blocks(
            "call_2",
            "chart",
            vec![
                ToolResultBlock::Text {
                    text: "Sales by region:".into()
                },
                ToolResultBlock::Image {
                    source: ImageSource::Base64 {
                        media_type: "image/png".into(),
                        data: "iVBORw0KGgo=".into()
                    }
                },
                ToolResultBlock::File(
                    FileBlock::base64("application/pdf", "JVBERi0xLjQK").with_filename("sales.pdf")
                ),
                ToolResultBlock::File(FileBlock {
                    media_type: "text/plain".into(),
                    source: FileSource::FileId {
                        file_id: "file-abc123".into()
                    },
                    filename: None
                }),
                ToolResultBlock::Json {
                    value: serde_json::json!({"north": 120, "south": 95})
                },
            ],
        ))
    );
}

#[test]
fn user_files_and_audio() {
    use agent_types::{AudioBlock, FileBlock, FileSource};

    check!(
        "message_user_file_audio",
        Message::User(UserMessage {
            content: vec![
                UserBlock::Text {
                    text: "Summarize the report and the voice note.".into()
                },
                UserBlock::File(FileBlock {
                    media_type: "application/pdf".into(),
                    source: FileSource::Url {
                        url: "https://example.com/report.pdf".into()
                    },
                    filename: Some("report.pdf".into())
                }),
                UserBlock::Audio(AudioBlock {
                    media_type: "audio/wav".into(),
                    data: "UklGRiQAAABXQVZF".into()
                }),
            ]
        })
    );
}

#[test]
fn roles() {
    check!(
        "roles",
        vec![Role::System, Role::User, Role::Assistant, Role::Tool]
    );
}

#[test]
fn stop_reasons() {
    check!(
        "stop_reasons",
        vec![
            StopReason::Stop,
            StopReason::Length,
            StopReason::ToolCalls,
            StopReason::ContentFilter,
            StopReason::Error,
            StopReason::Aborted,
        ]
    );
}

#[test]
fn ids_are_plain_strings() {
    assert_eq!(
        crate::round_trip(&ToolCallId::new("toolu_01A")),
        r#""toolu_01A""#
    );
    assert_eq!(
        crate::round_trip(&SessionId::from("sess-42")),
        r#""sess-42""#
    );
    check!(
        "ids",
        (
            ToolCallId::from("call_1"),
            SessionId::from(String::from("sess-42"))
        )
    );
    let id = ToolCallId::from(String::from("call_9"));
    assert_eq!(id.as_str(), "call_9");
    assert_eq!(id.to_string(), "call_9");
    assert_eq!(AsRef::<str>::as_ref(&id), "call_9");
    let session = SessionId::new("s");
    assert_eq!(session.as_str(), "s");
    assert_eq!(session.to_string(), "s");
    assert_eq!(AsRef::<str>::as_ref(&session), "s");
}
