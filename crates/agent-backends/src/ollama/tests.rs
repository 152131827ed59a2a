//! Ollama: every recorded response through the decoder, request bodies, errors.

use agent_types::{
    AssistantBlock, AssistantMessage, BackendError, BackendErrorKind, GenerationSettings,
    ImageSource, Message, MessageAssembler, ModelRequest, Reasoning, ReasoningEffort, StopReason,
    StreamEvent, Thinking, ToolCall, ToolChoice, ToolResult, ToolSpec, Usage, UserBlock,
    UserMessage,
};
use serde_json::{Value, json};

use super::decode::WireDecoder;
use super::{Ollama, host_url};
use crate::framing::NdjsonParser;
use crate::http::driver::{Decoder, Frame, Protocol};

macro_rules! fixture {
    ($name:literal) => {
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/providers/ollama/",
            $name
        ))
        .expect(concat!("fixture ", $name))
    };
}

/// Decodes `body` fed in `chunk`-byte pieces: NDJSON through the line parser, or (`whole`) as
/// one non-streaming body.
fn decode(body: &[u8], whole: bool, chunk: usize) -> Result<Vec<StreamEvent>, BackendError> {
    let mut decoder = WireDecoder::default();
    let mut out = Vec::new();
    if whole {
        let text = std::str::from_utf8(body).expect("UTF-8 body");
        decoder.body(text, &mut out)?;
    } else {
        let mut parser = NdjsonParser::new();
        for piece in body.chunks(chunk.max(1)) {
            parser.feed(piece, &mut |line| {
                decoder.frame(
                    Frame {
                        event: "",
                        data: line,
                    },
                    &mut out,
                )
            })?;
        }
        parser.finish(&mut |line| {
            decoder.frame(
                Frame {
                    event: "",
                    data: line,
                },
                &mut out,
            )
        })?;
    }
    decoder.end(&mut out)?;
    Ok(out)
}

fn decode_both_ways(body: &[u8], whole: bool) -> Vec<StreamEvent> {
    let at_once = decode(body, whole, body.len()).expect("decodes in one piece");
    if whole {
        return at_once;
    }
    let bytewise = decode(body, whole, 1).expect("decodes byte by byte");
    assert_eq!(at_once, bytewise, "1-byte chunks change the events");
    at_once
}

fn assemble(events: &[StreamEvent]) -> AssistantMessage {
    let mut assembler = MessageAssembler::new(false);
    for event in events {
        assembler.push(event.clone()).expect("events in order");
    }
    assembler.finish()
}

/// What SOURCES.md says a recording holds.
struct Expected {
    text_start: &'static str,
    text_chars: usize,
    thinking_chars: usize,
    calls: &'static [(&'static str, &'static str)],
    stop: StopReason,
    input: u64,
    output: u64,
}

fn check(body: &[u8], whole: bool, expected: &Expected) -> AssistantMessage {
    let events = decode_both_ways(body, whole);
    assert!(
        matches!(events.first(), Some(StreamEvent::MessageStart { .. })),
        "{events:?}"
    );
    assert_eq!(
        events.last(),
        Some(&StreamEvent::Finish {
            stop_reason: expected.stop
        })
    );
    let message = assemble(&events);
    let text = message.text_content();
    assert!(
        text.starts_with(expected.text_start),
        "text starts {:?}",
        text.chars().take(60).collect::<String>()
    );
    assert_eq!(text.chars().count(), expected.text_chars, "text length");
    let thinking: String = message
        .content
        .iter()
        .filter_map(|block| match block {
            AssistantBlock::Thinking(thinking) => Some(thinking.thinking.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        thinking.chars().count(),
        expected.thinking_chars,
        "thinking length"
    );
    let calls: Vec<(String, String)> = message
        .tool_calls()
        .map(|call| (call.name.clone(), call.arguments.to_string()))
        .collect();
    let expected_calls: Vec<(String, String)> = expected
        .calls
        .iter()
        .map(|(name, args)| ((*name).to_owned(), (*args).to_owned()))
        .collect();
    assert_eq!(calls, expected_calls);
    assert_eq!(message.stop_reason, Some(expected.stop));
    assert_eq!(
        message.usage,
        Some(Usage {
            input_tokens: Some(expected.input),
            output_tokens: Some(expected.output),
            ..Usage::default()
        })
    );
    message
}

#[test]
fn stream_text() {
    let message = check(
        &fixture!("stream-text.ndjson"),
        false,
        &Expected {
            text_start: "Okay, here we go!\n\n1, 2, 3, 4, 5\n",
            text_chars: 33,
            thinking_chars: 0,
            calls: &[],
            stop: StopReason::Stop,
            input: 16,
            output: 22,
        },
    );
    assert_eq!(message.model.as_deref(), Some("gemma3:1b"));
}

#[test]
fn stream_thinking_then_text() {
    check(
        &fixture!("stream-thinking-text.ndjson"),
        false,
        &Expected {
            text_start: "The current weather in Tokyo is sunny with light clouds, 72°",
            text_chars: 230,
            thinking_chars: 1837,
            calls: &[],
            stop: StopReason::Stop,
            input: 792,
            output: 478,
        },
    );
}

#[test]
fn thinking_and_text_in_one_body() {
    let message = check(
        &fixture!("thinking-text.json"),
        true,
        &Expected {
            text_start: "The first train leaves Station A at 60 km/h. The second trai",
            text_chars: 882,
            thinking_chars: 3915,
            calls: &[],
            stop: StopReason::Stop,
            input: 83,
            output: 1558,
        },
    );
    assert!(matches!(
        &message.content[..],
        [AssistantBlock::Thinking(_), AssistantBlock::Text { .. }]
    ));
}

#[test]
fn stream_cut_by_the_token_limit() {
    check(
        &fixture!("stream-text-length.ndjson"),
        false,
        &Expected {
            text_start: "Hello there! I’m doing well, thanks for asking. As an AI, I ",
            text_chars: 185,
            thinking_chars: 0,
            calls: &[],
            stop: StopReason::Length,
            input: 15,
            output: 50,
        },
    );
}

#[test]
fn a_tool_call_with_thinking_keeps_its_id() {
    let message = check(
        &fixture!("tool-call-thinking.json"),
        true,
        &Expected {
            text_start: "",
            text_chars: 0,
            thinking_chars: 66,
            calls: &[("getWeather", r#"{"location":"San Francisco, CA"}"#)],
            stop: StopReason::ToolCalls,
            input: 145,
            output: 44,
        },
    );
    let call = message.tool_calls().next().expect("a call");
    assert_eq!(call.id.as_str(), "call_mo1wm122");
}

#[test]
fn stream_text_then_a_tool_call() {
    check(
        &fixture!("stream-tool-call.ndjson"),
        false,
        &Expected {
            text_start: "Okay, the user wants me to calculate 2 minus 5. Let me think",
            text_chars: 1067,
            thinking_chars: 0,
            calls: &[("subtract", r#"{"x":2,"y":5}"#)],
            stop: StopReason::ToolCalls,
            input: 237,
            output: 321,
        },
    );
}

#[test]
fn one_body_cut_by_the_token_limit() {
    check(
        &fixture!("length.json"),
        true,
        &Expected {
            text_start: "Hmm, the user wants a concise explanation of Rust and why me",
            text_chars: 129,
            thinking_chars: 0,
            calls: &[],
            stop: StopReason::Length,
            input: 42,
            output: 24,
        },
    );
}

#[test]
fn error_400_no_tools() {
    let error = Ollama::new().error(400, &fixture!("error-400-no-tools.json"));
    assert_eq!(
        error.message,
        "registry.ollama.ai/library/gemma3:1b does not support tools"
    );
    // The model lacks a capability the request uses.
    assert_eq!(error.kind, BackendErrorKind::Unsupported);
    assert!(!error.is_retryable());

    let missing = Ollama::new().error(404, br#"{"error":"model 'llama9' not found"}"#);
    assert_eq!(missing.message, "model 'llama9' not found");
    assert_eq!(missing.kind, BackendErrorKind::InvalidRequest);
    let busy = Ollama::new().error(
        503,
        br#"{"error":"server busy, please try again.  maximum pending requests exceeded"}"#,
    );
    assert_eq!(busy.kind, BackendErrorKind::Overloaded);
    assert!(busy.is_retryable());
    let plain = Ollama::new().error(500, b"upstream exploded");
    assert!(plain.message.contains("upstream exploded"), "{plain}");
}

#[test]
fn an_error_line_in_the_stream_is_returned_as_it_is() {
    let body = b"{\"model\":\"m\",\"created_at\":\"t\",\"message\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"done\":false}\n\
                 {\"error\":\"an error was encountered while running the model: out of memory\"}\n";
    let mut decoder = WireDecoder::default();
    let mut out = Vec::new();
    let mut parser = NdjsonParser::new();
    let error = parser
        .feed(body, &mut |line| {
            decoder.frame(
                Frame {
                    event: "",
                    data: line,
                },
                &mut out,
            )
        })
        .expect_err("an in-band error");
    assert_eq!(
        error.message,
        "an error was encountered while running the model: out of memory"
    );
    assert_eq!(error.kind, BackendErrorKind::Server);
    assert!(out.contains(&StreamEvent::TextDelta {
        delta: "Hel".into()
    }));
}

#[test]
fn malformed_and_cut_off_streams() {
    let error = decode(b"{\"message\": {\"content\": \"x\"\n", false, 3).expect_err("bad JSON");
    assert_eq!(error.kind, BackendErrorKind::Protocol);
    assert!(error.message.contains("Ollama chat chunk"), "{error}");

    // No `done` chunk: no finish, and the driver reports the early end.
    let cut = b"{\"model\":\"m\",\"message\":{\"content\":\"Hel\"},\"done\":false}\n";
    let events = decode(cut, false, 4).expect("decodes");
    assert!(
        !events
            .iter()
            .any(|event| matches!(event, StreamEvent::Finish { .. }))
    );
}

#[test]
fn a_pretty_printed_body_and_lines_read_whole_decode_the_same() {
    let body = fixture!("tool-call-thinking.json");
    let compact = decode(&body, true, 0).expect("decodes");
    let value: Value = serde_json::from_slice(&body).expect("json");
    let pretty = serde_json::to_vec_pretty(&value).expect("json");
    assert_eq!(decode(&pretty, true, 0).expect("decodes"), compact);

    // NDJSON served as `application/json` reaches `body`: the same events as the line parser.
    let lines = fixture!("stream-text.ndjson");
    assert_eq!(
        decode(&lines, true, 0).expect("decodes"),
        decode(&lines, false, 64).expect("decodes")
    );
}

#[test]
fn calls_without_ids_get_stable_unique_ones() {
    let body = b"{\"model\":\"qwen3\",\"created_at\":\"2026-01-02T03:04:05.6Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\",\
                 \"tool_calls\":[{\"function\":{\"name\":\"a\",\"arguments\":{\"x\":1}}},\
                 {\"function\":{\"name\":\"b\",\"arguments\":\"{\\\"y\\\":2}\"}}]},\"done\":false}\n\
                 {\"model\":\"qwen3\",\"created_at\":\"2026-01-02T03:04:06Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\
                 \"done\":true,\"done_reason\":\"stop\"}\n";
    let first = assemble(&decode(body, false, 5).expect("decodes"));
    let again = assemble(&decode(body, false, 64).expect("decodes"));
    let ids: Vec<&str> = first.tool_calls().map(|call| call.id.as_str()).collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1]);
    assert!(ids.iter().all(|id| id.starts_with("call_")), "{ids:?}");
    assert_eq!(
        ids,
        again
            .tool_calls()
            .map(|call| call.id.as_str())
            .collect::<Vec<_>>()
    );
    // Arguments sent as JSON text (by OpenAI-style servers) are read too.
    let arguments: Vec<&Value> = first.tool_calls().map(|call| &call.arguments).collect();
    assert_eq!(arguments, [&json!({"x": 1}), &json!({"y": 2})]);
    assert_eq!(first.stop_reason, Some(StopReason::ToolCalls));
    // No counts in the done chunk: no usage, rather than zeros.
    assert_eq!(first.usage, None);
}

#[test]
fn ollama_host_is_read_like_the_cli_reads_it() {
    for (value, url) in [
        ("gpu-box", "http://gpu-box:11434"),
        ("gpu-box:8080", "http://gpu-box:8080"),
        (":9999", "http://127.0.0.1:9999"),
        ("0.0.0.0", "http://127.0.0.1:11434"),
        ("0.0.0.0:11434", "http://127.0.0.1:11434"),
        ("  10.0.0.5:11434  ", "http://10.0.0.5:11434"),
        ("http://ollama.lan", "http://ollama.lan:80"),
        (
            "https://ollama.example.com",
            "https://ollama.example.com:443",
        ),
        (
            "https://proxy.example.com:8443/ollama/",
            "https://proxy.example.com:8443/ollama",
        ),
        ("[::1]:11435", "http://[::1]:11435"),
        ("[::]", "http://[::1]:11434"),
        ("::1", "http://[::1]:11434"),
        ("host:notaport", "http://host:11434"),
    ] {
        assert_eq!(host_url(value), url, "OLLAMA_HOST={value}");
    }
}

// ---------------------------------------------------------------------------------------------
// Requests

fn body_of(request: &ModelRequest) -> Value {
    let prepared = Ollama::new().prepare(request).expect("prepares");
    serde_json::from_slice(&prepared.body).expect("JSON body")
}

/// Snapshots live in `src/snapshots/`, next to the other adapters'.
fn snapshot(name: &str, value: &Value) {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("../snapshots");
    settings.set_sort_maps(true);
    settings.bind(|| insta::assert_json_snapshot!(name, value));
}

#[test]
fn url_and_headers() {
    let request = ModelRequest::new("qwen3:8b", vec![Message::user("Hi")]);
    let prepared = Ollama::new().prepare(&request).expect("prepares");
    assert_eq!(prepared.url, "http://localhost:11434/api/chat");
    assert!(prepared.headers.get("authorization").is_none());
    let keyed = Ollama::new()
        .with_base_url("https://ollama.com/")
        .with_api_key("k-1")
        .prepare(&request)
        .expect("prepares");
    assert_eq!(keyed.url, "https://ollama.com/api/chat");
    let auth = keyed.headers.get("authorization").expect("auth header");
    assert_eq!(auth, "Bearer k-1");
    assert!(auth.is_sensitive());
}

#[test]
fn request_system_user_text_and_images() {
    let request = ModelRequest {
        system: Some("You describe pictures.".into()),
        messages: vec![
            Message::system("Answer in English."),
            Message::User(UserMessage {
                content: vec![
                    UserBlock::Text {
                        text: "What is in these pictures?".into(),
                    },
                    UserBlock::Image {
                        source: ImageSource::Base64 {
                            media_type: "image/png".into(),
                            data: "iVBORw0KGgo=".into(),
                        },
                    },
                    UserBlock::Image {
                        source: ImageSource::Url {
                            url: "data:image/jpeg;base64,/9j/4AAQ".into(),
                        },
                    },
                    UserBlock::Text {
                        text: "Be brief.".into(),
                    },
                ],
            }),
        ],
        ..ModelRequest::new("llava:13b", Vec::new())
    };
    snapshot("request_system_user_text_and_images", &body_of(&request));

    let url = ModelRequest::new(
        "llava:13b",
        vec![Message::User(UserMessage {
            content: vec![UserBlock::Image {
                source: ImageSource::Url {
                    url: "https://example.com/cat.png".into(),
                },
            }],
        })],
    );
    let error = Ollama::new().prepare(&url).expect_err("URL images");
    assert_eq!(error.kind, BackendErrorKind::Unsupported);
    assert!(error.message.contains("base64"), "{error}");
}

#[test]
fn request_multi_round_history() {
    let history = vec![
        Message::user("Weather in Paris and Rome?"),
        Message::Assistant(AssistantMessage {
            content: vec![
                AssistantBlock::Thinking(Thinking {
                    thinking: "Two cities, two calls.".into(),
                    ..Thinking::default()
                }),
                AssistantBlock::Text {
                    text: "Checking.".into(),
                },
                AssistantBlock::ToolCall(ToolCall::new(
                    "call_1",
                    "get_weather",
                    json!({"city": "Paris"}),
                )),
                AssistantBlock::ToolCall(ToolCall {
                    invalid_arguments: true,
                    ..ToolCall::new("call_2", "get_weather", json!("{\"city\": \"Ro"))
                }),
            ],
            stop_reason: Some(StopReason::ToolCalls),
            ..AssistantMessage::default()
        }),
        Message::Tool(ToolResult::ok("call_1", "get_weather", r#"{"temp_c": 21}"#)),
        Message::Tool(ToolResult::error(
            "call_2",
            "get_weather",
            "the arguments are not valid JSON",
        )),
        Message::Assistant(AssistantMessage {
            content: vec![
                AssistantBlock::Thinking(Thinking {
                    thinking: "Rome failed; ".into(),
                    ..Thinking::default()
                }),
                AssistantBlock::Thinking(Thinking {
                    thinking: "report Paris.".into(),
                    signature: Some("another provider's".into()),
                    ..Thinking::default()
                }),
                AssistantBlock::Text {
                    text: "Paris is 21°C. ".into(),
                },
                AssistantBlock::Text {
                    text: "Rome did not answer.".into(),
                },
            ],
            stop_reason: Some(StopReason::Stop),
            ..AssistantMessage::default()
        }),
        Message::user("Thanks."),
    ];
    let body = body_of(&ModelRequest::new("qwen3:8b", history));
    assert_eq!(
        body["messages"][1]["tool_calls"],
        json!([
            {"id": "call_1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"id": "call_2", "function": {"name": "get_weather",
                                          "arguments": {"arguments": "{\"city\": \"Ro"}}}
        ])
    );
    assert_eq!(
        body["messages"][3],
        json!({"role": "tool", "content": "Error: the arguments are not valid JSON",
               "tool_name": "get_weather", "tool_call_id": "call_2"})
    );
    snapshot("request_multi_round_history", &body);
}

#[test]
fn request_tools_tool_choice_and_settings() {
    let mut extras = serde_json::Map::new();
    extras.insert("keep_alive".into(), json!("10m"));
    extras.insert("options".into(), json!({"num_ctx": 8192, "seed": 7}));
    let request = ModelRequest {
        tools: vec![ToolSpec::new(
            "get_weather",
            "Current weather for a city.",
            json!({
                "type": "object",
                "properties": {"city": {"type": "string", "description": "City name"}},
                "required": ["city"],
                "additionalProperties": false
            }),
        )],
        tool_choice: ToolChoice::Auto,
        settings: GenerationSettings {
            max_output_tokens: Some(512),
            temperature: Some(0.2),
            top_p: Some(0.9),
            stop_sequences: vec!["</answer>".into()],
            reasoning: Some(Reasoning {
                effort: Some(ReasoningEffort::Medium),
                budget_tokens: None,
            }),
            parallel_tool_calls: None,
        },
        extras,
        stream: false,
        ..ModelRequest::new("gpt-oss:20b", vec![Message::user("Weather in Oslo?")])
    };
    snapshot("request_tools_tool_choice_and_settings", &body_of(&request));
}

#[test]
fn think_settings() {
    let think = |reasoning: Option<Reasoning>| {
        let request = ModelRequest {
            settings: GenerationSettings {
                reasoning,
                ..GenerationSettings::default()
            },
            ..ModelRequest::new("qwen3:8b", vec![Message::user("x")])
        };
        body_of(&request).get("think").cloned()
    };
    assert_eq!(think(None), None);
    assert_eq!(think(Some(Reasoning::default())), Some(json!(true)));
    assert_eq!(
        think(Some(Reasoning {
            effort: None,
            budget_tokens: Some(4096)
        })),
        Some(json!(true))
    );
    assert_eq!(
        think(Some(Reasoning {
            effort: Some(ReasoningEffort::High),
            budget_tokens: Some(0)
        })),
        Some(json!(false))
    );
    assert_eq!(
        think(Some(Reasoning {
            effort: Some(ReasoningEffort::Minimal),
            budget_tokens: None
        })),
        Some(json!("low"))
    );
}

#[test]
fn what_ollama_cannot_express_is_refused() {
    let tools = vec![ToolSpec::new("a", "A", json!({"type": "object"}))];
    let with = |choice: ToolChoice, parallel: Option<bool>| {
        let request = ModelRequest {
            tools: tools.clone(),
            tool_choice: choice,
            settings: GenerationSettings {
                parallel_tool_calls: parallel,
                ..GenerationSettings::default()
            },
            ..ModelRequest::new("qwen3:8b", vec![Message::user("x")])
        };
        Ollama::new()
            .prepare(&request)
            .map(|prepared| serde_json::from_slice::<Value>(&prepared.body).expect("json"))
    };
    for choice in [ToolChoice::Required, ToolChoice::Tool { name: "a".into() }] {
        let error = with(choice, None).expect_err("cannot force a call");
        assert_eq!(error.kind, BackendErrorKind::Unsupported);
    }
    let error = with(ToolChoice::Auto, Some(false)).expect_err("no serial mode");
    assert_eq!(error.kind, BackendErrorKind::Unsupported);
    // `none`: the model is offered no tools.
    let body = with(ToolChoice::None, Some(true)).expect("prepares");
    assert!(body.get("tools").is_none());

    let mut colliding = ModelRequest {
        settings: GenerationSettings {
            temperature: Some(0.1),
            ..GenerationSettings::default()
        },
        ..ModelRequest::new("qwen3:8b", vec![Message::user("x")])
    };
    colliding
        .extras
        .insert("options".into(), json!({"temperature": 1}));
    let error = Ollama::new().prepare(&colliding).expect_err("collision");
    assert!(error.message.contains("options.temperature"), "{error}");
    colliding.extras.clear();
    colliding.extras.insert("stream".into(), json!(false));
    let error = Ollama::new().prepare(&colliding).expect_err("collision");
    assert_eq!(error.kind, BackendErrorKind::InvalidRequest);
}

/// The fields we send agree with what real clients sent in the recordings.
#[test]
fn fields_agree_with_recorded_requests() {
    let recorded = |bytes: Vec<u8>| -> Value { serde_json::from_slice(&bytes).expect("json") };

    // length: a system prompt, num_predict, thinking off, not streamed.
    let request = ModelRequest {
        system: Some("You are a concise assistant. Answer directly.".into()),
        settings: GenerationSettings {
            max_output_tokens: Some(24),
            reasoning: Some(Reasoning {
                effort: None,
                budget_tokens: Some(0),
            }),
            ..GenerationSettings::default()
        },
        stream: false,
        ..ModelRequest::new(
            "qwen3:4b",
            vec![Message::user(
                "In one or two sentences, explain what Rust programming language is and why memory safety matters.",
            )],
        )
    };
    assert_eq!(body_of(&request), recorded(fixture!("length.request.json")));

    // stream-thinking-text: an assistant turn with thinking and a call, a tool result.
    let theirs = recorded(fixture!("stream-thinking-text.request.json"));
    let text = |at: usize| {
        theirs["messages"][at]["content"]
            .as_str()
            .expect("text")
            .to_owned()
    };
    let thinking = theirs["messages"][2]["thinking"]
        .as_str()
        .expect("thinking")
        .to_owned();
    let tool = &theirs["tools"][0]["function"];
    let request = ModelRequest {
        system: Some(text(0)),
        tools: vec![ToolSpec::new(
            tool["name"].as_str().expect("name"),
            tool["description"].as_str().expect("description"),
            tool["parameters"].clone(),
        )],
        settings: GenerationSettings {
            reasoning: Some(Reasoning::default()),
            ..GenerationSettings::default()
        },
        ..ModelRequest::new(
            "qwen3:4b",
            vec![
                Message::user(text(1)),
                Message::Assistant(AssistantMessage {
                    content: vec![
                        AssistantBlock::Thinking(Thinking {
                            thinking,
                            ..Thinking::default()
                        }),
                        AssistantBlock::ToolCall(ToolCall::new(
                            "call_1",
                            "get_weather",
                            json!({"city": "Tokyo"}),
                        )),
                    ],
                    ..AssistantMessage::default()
                }),
                Message::Tool(ToolResult::ok("call_1", "get_weather", text(3))),
            ],
        )
    };
    let ours = body_of(&request);
    for key in ["model", "stream", "think", "tools"] {
        assert_eq!(ours[key], theirs[key], "{key}");
    }
    for at in [0, 1] {
        assert_eq!(ours["messages"][at], theirs["messages"][at], "message {at}");
    }
    for key in ["role", "content", "thinking"] {
        assert_eq!(
            ours["messages"][2][key], theirs["messages"][2][key],
            "{key}"
        );
    }
    assert_eq!(
        ours["messages"][2]["tool_calls"][0]["function"],
        theirs["messages"][2]["tool_calls"][0]["function"]
    );
    for key in ["role", "content", "tool_name"] {
        assert_eq!(
            ours["messages"][3][key], theirs["messages"][3][key],
            "{key}"
        );
    }
}

/// A message assembled from a recording, put back into a history, carries its thinking, its
/// calls (with their ids and object arguments) and the results' ids.
#[test]
fn round_trip_of_a_call_with_thinking() {
    let message =
        assemble(&decode(&fixture!("tool-call-thinking.json"), true, 0).expect("decodes"));
    let history = vec![
        Message::user("What's the weather like in San Francisco?"),
        Message::Assistant(message),
        Message::Tool(ToolResult::ok("call_mo1wm122", "getWeather", "Foggy, 14°C")),
    ];
    let body = body_of(&ModelRequest::new("gpt-oss:120b", history));
    assert_eq!(
        body["messages"][1],
        json!({
            "role": "assistant",
            "content": "",
            "thinking": "User asks about weather in San Francisco. Use function getWeather.",
            "tool_calls": [{"id": "call_mo1wm122",
                            "function": {"name": "getWeather",
                                         "arguments": {"location": "San Francisco, CA"}}}]
        })
    );
    assert_eq!(body["messages"][2]["tool_call_id"], "call_mo1wm122");
}

#[test]
fn request_native_structured_output() {
    let request = ModelRequest {
        response_format: Some(agent_types::ResponseFormat {
            name: "weather_report".into(),
            schema: json!({
                "type": "object",
                "properties": {"city": {"type": "string"}, "temp_c": {"type": "integer"}},
                "required": ["city", "temp_c"],
                "additionalProperties": false
            }),
            strict: true,
        }),
        stream: false,
        ..ModelRequest::new("qwen3:8b", vec![Message::user("Weather in Oslo?")])
    };
    let body = body_of(&request);
    snapshot("request_native_structured_output", &body);
    assert_eq!(body["format"]["required"], json!(["city", "temp_c"]));

    // `format` in extras as well would send the key twice: refused, naming it.
    let mut colliding = request;
    colliding.extras.insert("format".into(), json!("json"));
    let error = super::request::body(&colliding).unwrap_err();
    assert!(error.message.contains("format"), "{}", error.message);
    // Without a response format, no `format`.
    let plain = ModelRequest::new("qwen3:8b", vec![Message::user("x")]);
    assert!(body_of(&plain).get("format").is_none());
}

#[test]
fn images_in_an_answer_are_refused_never_dropped() {
    let lines = b"{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"Here\"},\"done\":false}\n\
{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"\",\"images\":[\"iVBORw0KGgo=\"]},\"done\":true,\"done_reason\":\"stop\"}\n";
    for (whole, chunk) in [(false, 5), (true, 0)] {
        let error = decode(lines, whole, chunk).expect_err("images");
        assert_eq!(error.kind, BackendErrorKind::Unsupported, "{error}");
        assert!(
            error
                .message
                .starts_with("Ollama answered with images (`message.images`)"),
            "{error}"
        );
    }
    // An empty or null list is nothing.
    let body = b"{\"model\":\"m\",\"message\":{\"content\":\"ok\",\"images\":null},\"done\":true}";
    let events = decode(body, true, 0).expect("decodes");
    assert_eq!(assemble(&events).text_content(), "ok");
    let body = b"{\"model\":\"m\",\"message\":{\"content\":\"ok\",\"images\":[]},\"done\":true}";
    assert!(decode(body, true, 0).is_ok());
}
