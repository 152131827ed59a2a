//! Content blocks through every adapter: the request each mapped block kind produces
//! (insta snapshots of the request's messages), and the typed refusal, before anything is
//! sent, of each kind an adapter does not map.

use agent_types::{
    AssistantBlock, AssistantMessage, AudioBlock, BackendError, BackendErrorKind, FileBlock,
    FileSource, ImageSource, Message, ModelRequest, ToolCall, ToolResult, ToolResultBlock,
    UserBlock, UserMessage,
};
use serde_json::{Value, json};

use crate::anthropic::Anthropic;
use crate::gemini::Gemini;
use crate::http::driver::Protocol;
use crate::ollama::Ollama;
use crate::openai_chat::OpenAiChat;
use crate::openai_responses::OpenAiResponses;

const PNG: &str = "iVBORw0KGgo=";
const PDF: &str = "JVBERi0xLjQK";
/// "Hello, plain text." in base64.
const TEXT: &str = "SGVsbG8sIHBsYWluIHRleHQu";

fn image() -> ImageSource {
    ImageSource::Base64 {
        media_type: "image/png".into(),
        data: PNG.into(),
    }
}

fn pdf() -> FileBlock {
    FileBlock::base64("application/pdf", PDF).with_filename("report.pdf")
}

fn user(blocks: Vec<UserBlock>) -> Vec<Message> {
    vec![Message::User(UserMessage { content: blocks })]
}

/// A tool round whose result holds `blocks`.
fn tool_round(blocks: Vec<ToolResultBlock>) -> Vec<Message> {
    vec![
        Message::user("Chart the sales."),
        Message::Assistant(AssistantMessage {
            content: vec![AssistantBlock::ToolCall(ToolCall::new(
                "call_1",
                "chart",
                json!({}),
            ))],
            ..AssistantMessage::default()
        }),
        Message::Tool(ToolResult::with_blocks("call_1", "chart", blocks)),
    ]
}

fn prepare(
    protocol: &dyn Fn(&ModelRequest) -> Result<Value, BackendError>,
    messages: Vec<Message>,
) -> Result<Value, BackendError> {
    protocol(&ModelRequest::new("test-model", messages))
}

fn body<P: Protocol>(backend: &P, request: &ModelRequest) -> Result<Value, BackendError> {
    let prepared = backend.prepare(request)?;
    Ok(serde_json::from_slice(&prepared.body).unwrap())
}

/// The part of a body that carries the history.
fn history(body: &Value) -> Value {
    for key in ["messages", "input", "contents"] {
        if let Some(value) = body.get(key) {
            return value.clone();
        }
    }
    panic!("no history in {body}");
}

fn refused(result: Result<Value, BackendError>, provider: &str, kind: &str) {
    let error = result.expect_err("the adapter sent a block it cannot take");
    assert_eq!(error.kind, BackendErrorKind::Unsupported, "{error:?}");
    assert!(error.message.contains(provider), "{}", error.message);
    assert!(error.message.contains(kind), "{}", error.message);
}

fn text_and_json() -> Vec<ToolResultBlock> {
    vec![
        ToolResultBlock::Text {
            text: "3 rows".into(),
        },
        ToolResultBlock::Json {
            value: json!({"rows": 3, "total": 12.5}),
        },
    ]
}

fn image_result() -> Vec<ToolResultBlock> {
    vec![
        ToolResultBlock::Text {
            text: "The chart:".into(),
        },
        ToolResultBlock::Image { source: image() },
    ]
}

fn file_result() -> Vec<ToolResultBlock> {
    vec![ToolResultBlock::File(pdf())]
}

#[test]
fn anthropic_maps_documents_and_rich_tool_results() {
    let anthropic = |r: &ModelRequest| body(&Anthropic::new("sk-test"), r);
    let documents = prepare(
        &anthropic,
        user(vec![
            UserBlock::Text {
                text: "Summarize both.".into(),
            },
            UserBlock::File(pdf()),
            UserBlock::File(FileBlock::base64("text/plain", TEXT)),
            UserBlock::File(FileBlock {
                media_type: "application/pdf".into(),
                source: FileSource::Url {
                    url: "https://example.com/a.pdf".into(),
                },
                filename: None,
            }),
            UserBlock::File(FileBlock {
                media_type: "application/pdf".into(),
                source: FileSource::FileId {
                    file_id: "file_011".into(),
                },
                filename: None,
            }),
        ]),
    )
    .unwrap();
    insta::assert_json_snapshot!("anthropic_user_documents", history(&documents));
    let rich = prepare(
        &anthropic,
        tool_round(vec![
            ToolResultBlock::Text {
                text: "The chart and its data:".into(),
            },
            ToolResultBlock::Image { source: image() },
            ToolResultBlock::File(pdf()),
            ToolResultBlock::Json {
                value: json!({"rows": 3}),
            },
        ]),
    )
    .unwrap();
    insta::assert_json_snapshot!("anthropic_tool_result_blocks", history(&rich));
    // A text-only result stays a plain string.
    let plain = prepare(
        &anthropic,
        tool_round(vec![ToolResultBlock::Text { text: "ok".into() }]),
    )
    .unwrap();
    assert_eq!(history(&plain)[2]["content"][0]["content"], "ok");

    refused(
        prepare(
            &anthropic,
            user(vec![UserBlock::Audio(AudioBlock {
                media_type: "audio/wav".into(),
                data: "UklGRg==".into(),
            })]),
        ),
        "Anthropic",
        "audio",
    );
    let spreadsheet = FileBlock::base64("application/vnd.ms-excel", "AAAA");
    refused(
        prepare(&anthropic, user(vec![UserBlock::File(spreadsheet)])),
        "Anthropic",
        "application/vnd.ms-excel",
    );
}

#[test]
fn openai_chat_maps_files_audio_and_text_tool_results() {
    let chat = |r: &ModelRequest| body(&OpenAiChat::new("sk-test"), r);
    let parts = prepare(
        &chat,
        user(vec![
            UserBlock::Text {
                text: "What is in these?".into(),
            },
            UserBlock::File(pdf()),
            UserBlock::File(FileBlock {
                media_type: "application/pdf".into(),
                source: FileSource::FileId {
                    file_id: "file-abc".into(),
                },
                filename: None,
            }),
            UserBlock::Audio(AudioBlock {
                media_type: "audio/wav".into(),
                data: "UklGRg==".into(),
            }),
        ]),
    )
    .unwrap();
    insta::assert_json_snapshot!("openai_chat_user_files_audio", history(&parts));
    let json_result = prepare(&chat, tool_round(text_and_json())).unwrap();
    insta::assert_json_snapshot!("openai_chat_tool_result_text_json", history(&json_result));

    // Images and files of tool results follow the round's tool messages in one user turn.
    let mut messages = tool_round(image_result());
    messages.push(Message::user("And now?"));
    let media = prepare(&chat, messages).unwrap();
    insta::assert_json_snapshot!("openai_chat_tool_result_image_follows", history(&media));
    let media = prepare(&chat, tool_round(file_result())).unwrap();
    insta::assert_json_snapshot!("openai_chat_tool_result_file_follows", history(&media));
    let file_by_url = FileBlock {
        media_type: "application/pdf".into(),
        source: FileSource::Url {
            url: "https://example.com/a.pdf".into(),
        },
        filename: None,
    };
    refused(
        prepare(&chat, tool_round(vec![ToolResultBlock::File(file_by_url)])),
        "OpenAI Chat",
        "file",
    );
    refused(
        prepare(
            &chat,
            user(vec![UserBlock::Audio(AudioBlock {
                media_type: "audio/ogg".into(),
                data: "T2dn".into(),
            })]),
        ),
        "OpenAI Chat",
        "audio/ogg",
    );
    let by_url = FileBlock {
        media_type: "application/pdf".into(),
        source: FileSource::Url {
            url: "https://example.com/a.pdf".into(),
        },
        filename: None,
    };
    refused(
        prepare(&chat, user(vec![UserBlock::File(by_url)])),
        "OpenAI Chat",
        "file",
    );
}

#[test]
fn openai_responses_maps_input_files_and_text_tool_results() {
    let responses = |r: &ModelRequest| body(&OpenAiResponses::new("sk-test"), r);
    let parts = prepare(
        &responses,
        user(vec![
            UserBlock::Text {
                text: "Summarize.".into(),
            },
            UserBlock::File(pdf()),
            UserBlock::File(FileBlock {
                media_type: "application/pdf".into(),
                source: FileSource::Url {
                    url: "https://example.com/a.pdf".into(),
                },
                filename: None,
            }),
            UserBlock::File(FileBlock {
                media_type: "application/pdf".into(),
                source: FileSource::FileId {
                    file_id: "file-abc".into(),
                },
                filename: None,
            }),
        ]),
    )
    .unwrap();
    insta::assert_json_snapshot!("openai_responses_user_files", history(&parts));
    let json_result = prepare(&responses, tool_round(text_and_json())).unwrap();
    insta::assert_json_snapshot!(
        "openai_responses_tool_result_text_json",
        history(&json_result)
    );

    let mut blocks = image_result();
    blocks.extend(file_result());
    let media = prepare(&responses, tool_round(blocks)).unwrap();
    insta::assert_json_snapshot!("openai_responses_tool_result_media", history(&media));
    refused(
        prepare(
            &responses,
            user(vec![UserBlock::Audio(AudioBlock {
                media_type: "audio/wav".into(),
                data: "UklGRg==".into(),
            })]),
        ),
        "OpenAI Responses",
        "audio",
    );
}

#[test]
fn gemini_maps_every_block_kind() {
    let gemini = |r: &ModelRequest| body(&Gemini::new("key"), r);
    let parts = prepare(
        &gemini,
        user(vec![
            UserBlock::Text {
                text: "Summarize and transcribe.".into(),
            },
            UserBlock::File(pdf()),
            UserBlock::File(FileBlock {
                media_type: "application/pdf".into(),
                source: FileSource::FileId {
                    file_id: "https://generativelanguage.googleapis.com/v1beta/files/abc".into(),
                },
                filename: None,
            }),
            UserBlock::Audio(AudioBlock {
                media_type: "audio/wav".into(),
                data: "UklGRg==".into(),
            }),
        ]),
    )
    .unwrap();
    insta::assert_json_snapshot!("gemini_user_files_audio", history(&parts));
    let json_result = prepare(
        &gemini,
        tool_round(vec![ToolResultBlock::Json {
            value: json!({"rows": 3}),
        }]),
    )
    .unwrap();
    insta::assert_json_snapshot!("gemini_tool_result_json", history(&json_result));

    // Images and files travel as the function response's own parts; Gemini refuses no
    // block kind.
    let mut blocks = image_result();
    blocks.extend(file_result());
    let media = prepare(&gemini, tool_round(blocks)).unwrap();
    insta::assert_json_snapshot!("gemini_tool_result_media", history(&media));
}

#[test]
fn ollama_maps_images_and_text_tool_results_and_refuses_files_and_audio() {
    let ollama = |r: &ModelRequest| body(&Ollama::new(), r);
    let json_result = prepare(&ollama, tool_round(text_and_json())).unwrap();
    insta::assert_json_snapshot!("ollama_tool_result_text_json", history(&json_result));

    let images = prepare(&ollama, tool_round(image_result())).unwrap();
    insta::assert_json_snapshot!("ollama_tool_result_image", history(&images));
    let by_url = ToolResultBlock::Image {
        source: ImageSource::Url {
            url: "https://example.com/a.png".into(),
        },
    };
    refused(prepare(&ollama, tool_round(vec![by_url])), "Ollama", "URL");
    refused(
        prepare(&ollama, tool_round(file_result())),
        "Ollama",
        "file",
    );
    refused(
        prepare(&ollama, user(vec![UserBlock::File(pdf())])),
        "Ollama",
        "file",
    );
    refused(
        prepare(
            &ollama,
            user(vec![UserBlock::Audio(AudioBlock {
                media_type: "audio/wav".into(),
                data: "UklGRg==".into(),
            })]),
        ),
        "Ollama",
        "audio",
    );
}

#[test]
fn strict_tools_are_ignored_where_a_provider_has_no_strict_mode() {
    let tool = agent_types::ToolSpec::new(
        "get_weather",
        "Current weather.",
        json!({"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"]}),
    );
    let request = |strict: bool| ModelRequest {
        tools: vec![tool.clone().with_strict(strict)],
        ..ModelRequest::new("test-model", vec![Message::user("Weather?")])
    };
    let bodies = |strict: bool| {
        [
            body(&Anthropic::new("k"), &request(strict)).unwrap(),
            body(&Gemini::new("k"), &request(strict)).unwrap(),
            body(&Ollama::new(), &request(strict)).unwrap(),
        ]
    };
    // Byte for byte the same request: the schema as written, no `strict` anywhere.
    assert_eq!(bodies(true), bodies(false));
    for body in bodies(true) {
        assert!(!body.to_string().contains("strict"), "{body}");
    }
}
