//! The Anthropic adapter against every recorded fixture, the request bodies it builds (pinned
//! with insta), and the prompt-cache layout.

use agent_types::{
    AssistantBlock, AssistantMessage, BackendError, BackendErrorKind, GenerationSettings,
    ImageSource, Message, MessageAssembler, ModelRequest, Reasoning, ReasoningEffort, StopReason,
    StreamEvent, Thinking, ToolCall, ToolChoice, ToolResult, ToolSpec, Usage, UserBlock,
    UserMessage,
};
use serde_json::{Value, json};

use super::decode::WireDecoder;
use super::{Anthropic, CacheLayout, CacheTtl};
use crate::framing::SseParser;
use crate::http::driver::{Decoder, Frame, Protocol};

/// Snapshots live in `src/snapshots/` (named `agent_backends__anthropic__tests__*`).
macro_rules! snapshot {
    ($name:expr, $value:expr) => {
        insta::with_settings!({snapshot_path => "../snapshots"}, {
            insta::assert_json_snapshot!($name, $value);
        })
    };
}

// ---------------------------------------------------------------------------------------------
// Helpers

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../../fixtures/providers/anthropic/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|error| panic!("{path}: {error}"))
}

fn fixture_json(name: &str) -> Value {
    serde_json::from_slice(&fixture(name)).unwrap()
}

/// Feeds an SSE body to a fresh decoder in chunks of `chunk` bytes: the events pushed, and the
/// error that stopped the stream, if any.
fn decode_sse(bytes: &[u8], chunk: usize) -> (Vec<StreamEvent>, Option<BackendError>) {
    let mut parser = SseParser::new();
    let mut decoder = WireDecoder::new();
    let mut out = Vec::new();
    for piece in bytes.chunks(chunk) {
        let fed = parser.feed(piece, &mut |event| {
            decoder.frame(
                Frame {
                    event: event.event,
                    data: event.data,
                },
                &mut out,
            )
        });
        if let Err(error) = fed {
            return (out, Some(error));
        }
    }
    let finished = parser
        .finish(&mut |event| {
            decoder.frame(
                Frame {
                    event: event.event,
                    data: event.data,
                },
                &mut out,
            )
        })
        .and_then(|()| decoder.end(&mut out));
    (out, finished.err())
}

/// Decodes an SSE fixture byte by byte and in one piece, asserts both give the same result,
/// and returns it.
fn replay_sse(name: &str) -> (Vec<StreamEvent>, Option<BackendError>) {
    let bytes = fixture(name);
    let whole = decode_sse(&bytes, bytes.len());
    let bytewise = decode_sse(&bytes, 1);
    assert_eq!(
        whole, bytewise,
        "{name}: 1-byte chunks differ from one piece"
    );
    let sevens = decode_sse(&bytes, 7);
    assert_eq!(whole, sevens, "{name}: 7-byte chunks differ from one piece");
    whole
}

fn replay_body(name: &str) -> Result<Vec<StreamEvent>, BackendError> {
    let bytes = fixture(name);
    let text = std::str::from_utf8(&bytes).unwrap();
    let mut out = Vec::new();
    WireDecoder::new().body(text, &mut out)?;
    Ok(out)
}

/// Checks the event order contract and folds the events into a message.
fn assemble(events: &[StreamEvent]) -> AssistantMessage {
    assert!(
        matches!(events.first(), Some(StreamEvent::MessageStart { .. })),
        "message_start first: {events:?}"
    );
    let finishes = events
        .iter()
        .filter(|event| matches!(event, StreamEvent::Finish { .. }))
        .count();
    assert!(finishes <= 1, "one finish at most: {events:?}");
    if finishes == 1 {
        assert!(matches!(events.last(), Some(StreamEvent::Finish { .. })));
    }
    let mut assembler = MessageAssembler::new(false);
    for event in events {
        assembler.push(event.clone()).unwrap();
    }
    if finishes == 1 {
        assembler.finish()
    } else {
        assembler.finish_partial(StopReason::Error)
    }
}

/// What SOURCES.md says a fixture must produce.
struct Expected {
    text_start: &'static str,
    text_chars: usize,
    thinking_chars: usize,
    redacted: usize,
    tools: &'static [(&'static str, &'static str)],
    stop: StopReason,
    usage: Usage,
}

fn usage(input: u64, output: u64, read: u64, write_5m: u64, write_1h: Option<u64>) -> Usage {
    Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        cache_read_tokens: Some(read),
        cache_write_5m_tokens: Some(write_5m),
        cache_write_1h_tokens: write_1h,
        reasoning_tokens: None,
    }
}

fn check(message: &AssistantMessage, expected: &Expected) {
    let text = message.text_content();
    assert!(
        text.starts_with(expected.text_start),
        "text starts with {:?}: {text:?}",
        expected.text_start
    );
    assert_eq!(text.chars().count(), expected.text_chars, "text chars");
    let thinking: usize = message
        .content
        .iter()
        .filter_map(|block| match block {
            AssistantBlock::Thinking(thinking) if !thinking.redacted => {
                Some(thinking.thinking.chars().count())
            }
            _ => None,
        })
        .sum();
    assert_eq!(thinking, expected.thinking_chars, "thinking chars");
    let redacted = message
        .content
        .iter()
        .filter(|block| matches!(block, AssistantBlock::Thinking(t) if t.redacted))
        .count();
    assert_eq!(redacted, expected.redacted, "redacted blocks");
    let calls: Vec<(String, String)> = message
        .tool_calls()
        .map(|call| {
            assert!(!call.invalid_arguments, "{call:?}");
            (call.name.clone(), call.arguments.to_string())
        })
        .collect();
    let want: Vec<(String, String)> = expected
        .tools
        .iter()
        .map(|(name, args)| ((*name).to_owned(), (*args).to_owned()))
        .collect();
    assert_eq!(calls, want, "tool calls");
    assert_eq!(message.stop_reason, Some(expected.stop), "stop reason");
    assert_eq!(message.usage, Some(expected.usage), "usage");
}

fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest::new("claude-sonnet-4-5", messages)
}

fn prepare(backend: &Anthropic, request: &ModelRequest) -> Vec<u8> {
    backend.prepare(request).unwrap().body.to_vec()
}

fn body(backend: &Anthropic, request: &ModelRequest) -> Value {
    serde_json::from_slice(&prepare(backend, request)).unwrap()
}

fn plain() -> Anthropic {
    Anthropic::new("sk-test")
}

fn cached() -> Anthropic {
    Anthropic::new("sk-test").with_cache(CacheLayout::new())
}

fn count(haystack: &[u8], needle: &str) -> usize {
    haystack
        .windows(needle.len())
        .filter(|window| *window == needle.as_bytes())
        .count()
}

// ---------------------------------------------------------------------------------------------
// Non-streaming fixtures

#[test]
fn text_json() {
    let message = assemble(&replay_body("text.json").unwrap());
    check(
        &message,
        &Expected {
            text_start: "Hello! As an AI language model, I don't have feelings, but I",
            text_chars: 134,
            thinking_chars: 0,
            redacted: 0,
            tools: &[],
            stop: StopReason::Stop,
            usage: usage(13, 35, 0, 0, Some(0)),
        },
    );
    assert_eq!(message.model.as_deref(), Some("claude-3-opus-20240229"));
}

#[test]
fn text_max_tokens_json() {
    let message = assemble(&replay_body("text-max-tokens.json").unwrap());
    check(
        &message,
        &Expected {
            text_start: "<thinking>\nThe get_weather tool is relevant for answering th",
            text_chars: 479,
            thinking_chars: 0,
            redacted: 0,
            tools: &[],
            stop: StopReason::Length,
            usage: usage(611, 100, 0, 0, Some(0)),
        },
    );
}

#[test]
fn tool_use_parallel_4_json() {
    let events = replay_body("tool-use-parallel-4.json").unwrap();
    let message = assemble(&events);
    check(
        &message,
        &Expected {
            text_start: "I'll help you find out who is the youngest by retrieving inf",
            text_chars: 156,
            thinking_chars: 0,
            redacted: 0,
            tools: &[
                ("retrieve_entity_info", r#"{"name":"Alice"}"#),
                ("retrieve_entity_info", r#"{"name":"Bob"}"#),
                ("retrieve_entity_info", r#"{"name":"Charlie"}"#),
                ("retrieve_entity_info", r#"{"name":"Daisy"}"#),
            ],
            stop: StopReason::ToolCalls,
            usage: usage(423, 202, 0, 0, Some(0)),
        },
    );
    // Calls are indexed 0.. in output order, with the provider's ids.
    let starts: Vec<(u32, &str)> = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::ToolCallStart { index, id, .. } => Some((*index, id.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(
        starts,
        [
            (0, "toolu_0167cfEnoQaPviGdVXA95zcu"),
            (1, "toolu_01EEe2V5HD1Ac4rKiUR4HD2T"),
            (2, "toolu_01XFyAjstT3966qvRynZyVPo"),
            (3, "toolu_013mnQZbgtK2oe3Mo3XKJsx3"),
        ]
    );
}

#[test]
fn thinking_tool_use_json() {
    let message = assemble(&replay_body("thinking-tool-use.json").unwrap());
    check(
        &message,
        &Expected {
            text_start: "I'll help you find the largest city in your country. First, ",
            text_chars: 103,
            thinking_chars: 376,
            redacted: 0,
            tools: &[("get_user_country", "{}")],
            stop: StopReason::ToolCalls,
            usage: usage(398, 155, 0, 0, Some(0)),
        },
    );
    // Order as produced: thinking (signed), text, tool call.
    let fixture = fixture_json("thinking-tool-use.json");
    match &message.content[..] {
        [
            AssistantBlock::Thinking(thinking),
            AssistantBlock::Text { .. },
            AssistantBlock::ToolCall(_),
        ] => assert_eq!(
            thinking.signature.as_deref(),
            fixture["content"][0]["signature"].as_str()
        ),
        other => panic!("unexpected blocks: {other:?}"),
    }
}

#[test]
fn cache_read_write_json() {
    let message = assemble(&replay_body("cache-read-write.json").unwrap());
    // Anthropic's input (3) excludes the cache: normalized input is 3 + 1111 read + 418 written.
    check(
        &message,
        &Expected {
            text_start: "Python is a beginner-friendly, versatile programming languag",
            text_chars: 164,
            thinking_chars: 0,
            redacted: 0,
            tools: &[],
            stop: StopReason::Stop,
            usage: usage(1532, 33, 1111, 418, Some(0)),
        },
    );
    let usage = message.usage.unwrap();
    assert_eq!(usage.uncached_input_tokens(), 3);
}

// ---------------------------------------------------------------------------------------------
// HTTP error fixtures

fn http_error(name: &str, status: u16) -> BackendError {
    plain().error(status, &fixture(name))
}

#[test]
fn error_400_invalid_request() {
    let error = http_error("error-400-invalid-request.json", 400);
    assert_eq!(
        error.message,
        "invalid_request_error: This model does not support effort level 'xhigh'. \
         Supported levels: high, low, max, medium."
    );
    assert_eq!(error.kind, BackendErrorKind::InvalidRequest);
    assert_eq!(error.status, Some(400));
    assert!(!error.is_retryable());
}

#[test]
fn error_404_not_found() {
    let error = http_error("error-404-not-found.json", 404);
    assert_eq!(error.message, "not_found_error: model: claude-sonet-4-5");
    assert_eq!(error.kind, BackendErrorKind::InvalidRequest);
    assert!(!error.is_retryable());
}

#[test]
fn error_429_rate_limit() {
    let error = http_error("error-429-rate-limit.json", 429);
    assert_eq!(
        error.message,
        "rate_limit_error: Your account has hit a rate limit."
    );
    assert_eq!(error.kind, BackendErrorKind::RateLimited);
    assert!(error.is_retryable());
}

#[test]
fn error_529_overloaded() {
    let error = http_error("error-529-overloaded.json", 529);
    assert_eq!(error.message, "overloaded_error: Overloaded");
    assert_eq!(error.kind, BackendErrorKind::Overloaded);
    assert!(error.is_retryable());
}

#[test]
fn error_type_refines_the_status() {
    // An overloaded error behind a plain 500, a billing error behind a 400.
    let body = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    assert_eq!(plain().error(500, body).kind, BackendErrorKind::Overloaded);
    let body = br#"{"type":"error","error":{"type":"billing_error","message":"Your credit balance is too low"}}"#;
    let error = plain().error(400, body);
    assert_eq!(error.kind, BackendErrorKind::QuotaExceeded);
    assert!(!error.is_retryable());
    // A body that is not Anthropic's JSON falls back to the status.
    let error = plain().error(503, b"upstream connect error");
    assert_eq!(error.kind, BackendErrorKind::Server);
    assert_eq!(error.message, "HTTP 503: upstream connect error");
}

// ---------------------------------------------------------------------------------------------
// Streaming fixtures

fn stream_message(name: &str) -> (Vec<StreamEvent>, AssistantMessage) {
    let (events, error) = replay_sse(name);
    assert!(error.is_none(), "{name}: {error:?}");
    let message = assemble(&events);
    (events, message)
}

#[test]
fn stream_text() {
    let (events, message) = stream_message("stream-text.sse");
    check(
        &message,
        &Expected {
            text_start: "Hello",
            text_chars: 5,
            thinking_chars: 0,
            redacted: 0,
            tools: &[],
            stop: StopReason::Stop,
            usage: usage(10, 4, 0, 0, Some(0)),
        },
    );
    assert_eq!(
        events[0],
        StreamEvent::MessageStart {
            id: Some("msg_01T8kTq7cYyYJeQ5DxcVUc6D".into()),
            model: Some("claude-haiku-4-5-20251001".into()),
        }
    );
    // The input count arrives with message_start, before any output.
    assert!(matches!(
        events[1],
        StreamEvent::Usage(Usage {
            input_tokens: Some(10),
            output_tokens: Some(2),
            ..
        })
    ));
}

#[test]
fn stream_thinking() {
    let (events, message) = stream_message("stream-thinking.sse");
    check(
        &message,
        &Expected {
            text_start: "Here are the basic steps for safely crossing the street:\n\n**",
            text_chars: 1021,
            thinking_chars: 202,
            redacted: 0,
            tools: &[],
            stop: StopReason::Stop,
            usage: usage(43, 282, 0, 0, Some(0)),
        },
    );
    // The signature only comes as a signature_delta; it closes the thinking block.
    let signatures: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::ThinkingSignature { signature, id } => {
                assert_eq!(*id, None);
                Some(signature.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(signatures.len(), 1);
    assert!(signatures[0].starts_with("EvMCCkYICxgCKkCHP2cSuEdcJK"));
    // The empty thinking_delta produces no event.
    assert!(
        !events
            .iter()
            .any(|event| matches!(event, StreamEvent::ThinkingDelta { delta } if delta.is_empty()))
    );
}

#[test]
fn stream_redacted_thinking() {
    let (events, message) = stream_message("stream-redacted-thinking.sse");
    check(
        &message,
        &Expected {
            text_start: "I notice that you've sent what appears to be some kind of te",
            text_chars: 359,
            thinking_chars: 0,
            redacted: 2,
            tools: &[],
            stop: StopReason::Stop,
            usage: usage(92, 189, 0, 0, Some(0)),
        },
    );
    let data: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::RedactedThinking { data } => Some(data.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(data.len(), 2);
    assert!(data[0].starts_with("EqkECkYIBxgCKkA8AZ4no"));
    assert!(data[1].starts_with("EtgBCkYIBxgCKkDQfGkwz"));
}

#[test]
fn stream_thinking_tool_use_empty_args() {
    let (_, message) = stream_message("stream-thinking-tool-use-empty-args.sse");
    check(
        &message,
        &Expected {
            text_start: "",
            text_chars: 0,
            thinking_chars: 180,
            redacted: 0,
            tools: &[("fixed_version", "{}")],
            stop: StopReason::ToolCalls,
            usage: Usage {
                reasoning_tokens: Some(53),
                ..usage(598, 92, 0, 0, Some(0))
            },
        },
    );
}

#[test]
fn stream_parallel_tool_use_empty_args() {
    let (events, message) = stream_message("stream-parallel-tool-use-empty-args.sse");
    check(
        &message,
        &Expected {
            text_start: "",
            text_chars: 0,
            thinking_chars: 0,
            redacted: 0,
            tools: &[
                ("pelican_name_generator", "{}"),
                ("pelican_name_generator", "{}"),
            ],
            stop: StopReason::ToolCalls,
            usage: usage(542, 62, 0, 0, Some(0)),
        },
    );
    // Empty arguments are sent as `{}`, and every call ends before the finish.
    let tail: Vec<&StreamEvent> = events
        .iter()
        .filter(|event| {
            matches!(
                event,
                StreamEvent::ToolCallDelta { .. } | StreamEvent::ToolCallEnd { .. }
            )
        })
        .collect();
    assert_eq!(
        tail,
        [
            &StreamEvent::ToolCallDelta {
                index: 0,
                delta: "{}".into()
            },
            &StreamEvent::ToolCallEnd { index: 0 },
            &StreamEvent::ToolCallDelta {
                index: 1,
                delta: "{}".into()
            },
            &StreamEvent::ToolCallEnd { index: 1 },
        ]
    );
}

#[test]
fn stream_tool_use_args() {
    let (events, message) = stream_message("stream-tool-use-args.sse");
    check(
        &message,
        &Expected {
            text_start: "",
            text_chars: 0,
            thinking_chars: 0,
            redacted: 0,
            tools: &[("weather", r#"{"location":"San Francisco"}"#)],
            stop: StopReason::ToolCalls,
            usage: usage(843, 28, 0, 0, Some(0)),
        },
    );
    // The first fragment is empty and produces no delta; the others pass through raw.
    let deltas: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::ToolCallDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, [r#"{"location": "San Francisco"#, r#""}"#]);
}

#[test]
fn stream_stop_sequence() {
    let (_, message) = stream_message("stream-stop-sequence.sse");
    check(
        &message,
        &Expected {
            text_start: "\ndef pelican():\n    return \"A large waterbird with a long bi",
            text_chars: 102,
            thinking_chars: 0,
            redacted: 0,
            tools: &[],
            stop: StopReason::Stop,
            usage: usage(16, 28, 0, 0, Some(0)),
        },
    );
}

#[test]
fn stream_cache_read() {
    let (_, message) = stream_message("stream-cache-read.sse");
    check(
        &message,
        &Expected {
            text_start: "cache probe ready",
            text_chars: 17,
            thinking_chars: 0,
            redacted: 0,
            tools: &[],
            stop: StopReason::Stop,
            usage: usage(4515, 6, 4512, 0, Some(0)),
        },
    );
}

#[test]
fn stream_midstream_error_spliced() {
    let (events, error) = replay_sse("stream-midstream-error-spliced.sse");
    let error = error.expect("the stream ends in an error");
    assert_eq!(error.message, "overloaded_error: Overloaded");
    assert_eq!(error.kind, BackendErrorKind::Overloaded);
    assert!(error.is_retryable());
    // What came before the error is the partial message (the driver attaches it).
    assert!(
        !events
            .iter()
            .any(|event| matches!(event, StreamEvent::Finish { .. }))
    );
    let partial = assemble(&events);
    assert_eq!(partial.text_content(), "- Captain\n- Sc");
    assert_eq!(partial.text_content().chars().count(), 14);
    assert_eq!(partial.stop_reason, Some(StopReason::Error));
    assert_eq!(partial.usage, Some(usage(17, 1, 0, 0, Some(0))));
}

// ---------------------------------------------------------------------------------------------
// Decoder edge cases

fn frames(lines: &[&str]) -> (Vec<StreamEvent>, Result<(), BackendError>) {
    let mut decoder = WireDecoder::new();
    let mut out = Vec::new();
    for data in lines {
        let value: Value = serde_json::from_str(data).unwrap_or(Value::Null);
        let event = value["type"].as_str().unwrap_or("").to_owned();
        if let Err(error) = decoder.frame(
            Frame {
                event: &event,
                data,
            },
            &mut out,
        ) {
            return (out, Err(error));
        }
    }
    let end = decoder.end(&mut out);
    (out, end)
}

const START: &str = r#"{"type":"message_start","message":{"id":"msg_1","model":"claude-x","usage":{"input_tokens":5,"output_tokens":1}}}"#;

#[test]
fn refusal_keeps_its_text_and_filters() {
    let (events, end) = frames(&[
        START,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"I can't help with that."}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"refusal"},"usage":{"output_tokens":7}}"#,
        r#"{"type":"message_stop"}"#,
    ]);
    end.unwrap();
    let message = assemble(&events);
    assert_eq!(message.stop_reason, Some(StopReason::ContentFilter));
    assert_eq!(message.text_content(), "I can't help with that.");
}

#[test]
fn stop_reasons_map() {
    for (raw, expected) in [
        ("end_turn", StopReason::Stop),
        ("stop_sequence", StopReason::Stop),
        ("pause_turn", StopReason::Stop),
        ("max_tokens", StopReason::Length),
        ("model_context_window_exceeded", StopReason::Length),
        ("tool_use", StopReason::ToolCalls),
        ("refusal", StopReason::ContentFilter),
        ("something_new", StopReason::Stop),
    ] {
        let delta = format!(r#"{{"type":"message_delta","delta":{{"stop_reason":"{raw}"}}}}"#);
        let (events, end) = frames(&[START, &delta, r#"{"type":"message_stop"}"#]);
        end.unwrap();
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Finish {
                stop_reason: expected
            }),
            "{raw}"
        );
    }
}

#[test]
fn unknown_events_blocks_and_deltas_are_ignored() {
    let (events, end) = frames(&[
        START,
        r#"{"type":"ping"}"#,
        r#"{"type":"brand_new_event","payload":{"x":1}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"query\":\"x\"}"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"","citations":[]}}"#,
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"citations_delta","citation":{"type":"char_location"}}}"#,
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Found it."}}"#,
        r#"{"type":"content_block_delta","index":7,"delta":{"type":"text_delta","text":"orphan"}}"#,
        r#"{"type":"content_block_stop","index":1}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_details":{"x":1}},"usage":{"output_tokens":9,"server_tool_use":{"web_search_requests":1}}}"#,
        r#"{"type":"message_stop"}"#,
    ]);
    end.unwrap();
    let message = assemble(&events);
    assert_eq!(message.text_content(), "Found it.");
    assert_eq!(message.tool_calls().count(), 0);
    assert_eq!(message.stop_reason, Some(StopReason::Stop));
}

#[test]
fn malformed_json_is_a_protocol_error() {
    let (_, end) = frames(&[START, r#"{"type":"content_block_delta","index":0,"delta":"#]);
    let error = end.unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::Protocol);
    assert!(
        error
            .message
            .starts_with("Anthropic sent an event that could not be parsed"),
        "{error}"
    );
    // With an SSE event name, the message names it.
    let mut decoder = WireDecoder::new();
    let error = decoder
        .frame(
            Frame {
                event: "message_delta",
                data: "{not json",
            },
            &mut Vec::new(),
        )
        .unwrap_err();
    assert!(error.message.contains("a `message_delta` event"), "{error}");
    assert!(error.message.ends_with("{not json"), "{error}");
    // A non-streamed body that is not JSON.
    let error = WireDecoder::new()
        .body("<html>", &mut Vec::new())
        .unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::Protocol);
}

#[test]
fn in_stream_error_kinds() {
    for (kind, expected) in [
        ("rate_limit_error", BackendErrorKind::RateLimited),
        ("api_error", BackendErrorKind::Server),
        ("invalid_request_error", BackendErrorKind::InvalidRequest),
        ("mystery_error", BackendErrorKind::Server),
    ] {
        let data = format!(r#"{{"type":"error","error":{{"type":"{kind}","message":"m"}}}}"#);
        let (_, end) = frames(&[START, &data]);
        let error = end.unwrap_err();
        assert_eq!(error.kind, expected, "{kind}");
        assert_eq!(error.message, format!("{kind}: m"));
    }
    // An error document in place of a non-streamed message.
    let mut out = Vec::new();
    let error = WireDecoder::new()
        .body(
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            &mut out,
        )
        .unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::Overloaded);
    assert!(out.is_empty());
}

#[test]
fn a_stream_without_message_stop() {
    // It said why it stopped: complete, the finish comes at the end of the body.
    let (events, end) = frames(&[
        START,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
    ]);
    end.unwrap();
    assert_eq!(
        events.last(),
        Some(&StreamEvent::Finish {
            stop_reason: StopReason::Stop
        })
    );
    // It did not: no finish, the driver reports the stream as cut off.
    let (events, end) = frames(&[
        START,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"n","input":{}}}"#,
    ]);
    end.unwrap();
    assert!(
        !events
            .iter()
            .any(|event| matches!(event, StreamEvent::Finish { .. }))
    );
    // Nothing after the finish.
    let (events, end) = frames(&[
        START,
        r#"{"type":"message_stop"}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"late"}}"#,
    ]);
    end.unwrap();
    assert!(matches!(events.last(), Some(StreamEvent::Finish { .. })));
}

#[test]
fn cache_write_breakdown_and_its_absence() {
    // With the breakdown: 5-minute and 1-hour writes apart.
    let (events, _) = frames(&[
        r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":100,"cache_creation_input_tokens":300,"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":200},"output_tokens":1}}}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":12,"output_tokens_details":{"thinking_tokens":4}}}"#,
        r#"{"type":"message_stop"}"#,
    ]);
    let message = assemble(&events);
    assert_eq!(
        message.usage,
        Some(Usage {
            input_tokens: Some(410),
            output_tokens: Some(12),
            cache_read_tokens: Some(100),
            cache_write_5m_tokens: Some(100),
            cache_write_1h_tokens: Some(200),
            reasoning_tokens: Some(4),
        })
    );
    // Without it, every write counts as a 5-minute one; unknown fields stay unknown.
    let (events, _) = frames(&[
        r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_creation_input_tokens":300}}}"#,
        r#"{"type":"message_stop"}"#,
    ]);
    let message = assemble(&events);
    assert_eq!(
        message.usage,
        Some(Usage {
            input_tokens: Some(310),
            cache_write_5m_tokens: Some(300),
            ..Usage::default()
        })
    );
}

#[test]
fn non_streamed_redacted_thinking_and_tool_input() {
    let body = json!({
        "type": "message", "id": "msg_2", "model": "claude-x", "role": "assistant",
        "content": [
            {"type": "redacted_thinking", "data": "opaque=="},
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"b": [1, 2], "a": "x"}},
            {"type": "server_tool_use", "id": "srv", "name": "web_search", "input": {}}
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 1, "output_tokens": 2}
    })
    .to_string();
    let mut out = Vec::new();
    WireDecoder::new().body(&body, &mut out).unwrap();
    let message = assemble(&out);
    assert_eq!(
        message.content[0],
        AssistantBlock::Thinking(Thinking {
            signature: Some("opaque==".into()),
            redacted: true,
            ..Thinking::default()
        })
    );
    let call = message.tool_calls().next().unwrap();
    assert_eq!(call.arguments, json!({"a": "x", "b": [1, 2]}));
    assert_eq!(message.tool_calls().count(), 1);
}

// ---------------------------------------------------------------------------------------------
// Requests: headers, URL, validation

#[test]
fn url_and_headers() {
    let backend = Anthropic::new("sk-ant-secret")
        .with_base_url("http://127.0.0.1:9/")
        .with_beta("interleaved-thinking-2025-05-14")
        .with_beta("extended-cache-ttl-2025-04-11");
    let prepared = backend
        .prepare(&request(vec![Message::user("hi")]))
        .unwrap();
    assert_eq!(prepared.url, "http://127.0.0.1:9/v1/messages");
    let headers = &prepared.headers;
    assert_eq!(headers["x-api-key"], "sk-ant-secret");
    assert!(headers["x-api-key"].is_sensitive());
    assert_eq!(headers["anthropic-version"], "2023-06-01");
    assert_eq!(
        headers["anthropic-beta"],
        "interleaved-thinking-2025-05-14,extended-cache-ttl-2025-04-11"
    );
    assert_eq!(headers["content-type"], "application/json");
    assert!(
        !plain()
            .prepare(&request(vec![]))
            .unwrap()
            .headers
            .contains_key("anthropic-beta")
    );
    // The key never reaches a debug print.
    assert!(!format!("{backend:?}").contains("sk-ant-secret"));
    let error = plain()
        .with_beta("bad\nbeta")
        .prepare(&request(vec![]))
        .unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::InvalidRequest);
}

#[test]
fn capabilities() {
    let caps = agent_types::Backend::capabilities(&plain());
    assert!(caps.tools && caps.streaming && caps.parallel_tool_calls);
    assert!(caps.thinking && caps.prompt_caching && caps.usage_reporting);
}

fn with_settings(settings: GenerationSettings) -> ModelRequest {
    ModelRequest {
        settings,
        ..request(vec![Message::user("hi")])
    }
}

fn budget(tokens: u32) -> Option<Reasoning> {
    Some(Reasoning {
        effort: None,
        budget_tokens: Some(tokens),
    })
}

#[test]
fn max_tokens_and_thinking_budget() {
    // No settings: the documented default.
    let sent = body(&plain(), &request(vec![Message::user("hi")]));
    assert_eq!(sent["max_tokens"], 4096);
    assert!(sent.get("thinking").is_none());
    // A budget: the default grows by it, so the budget stays below max_tokens.
    let sent = body(
        &plain(),
        &with_settings(GenerationSettings {
            reasoning: budget(2000),
            ..GenerationSettings::default()
        }),
    );
    assert_eq!(sent["max_tokens"], 6096);
    assert_eq!(
        sent["thinking"],
        json!({"type": "enabled", "budget_tokens": 2000})
    );
    // An effort maps to a documented budget.
    for (effort, tokens) in [
        (ReasoningEffort::Minimal, 1024),
        (ReasoningEffort::Low, 4096),
        (ReasoningEffort::Medium, 16384),
        (ReasoningEffort::High, 32768),
    ] {
        let sent = body(
            &plain(),
            &with_settings(GenerationSettings {
                max_output_tokens: Some(40_000),
                reasoning: Some(Reasoning {
                    effort: Some(effort),
                    budget_tokens: None,
                }),
                ..GenerationSettings::default()
            }),
        );
        assert_eq!(sent["thinking"]["budget_tokens"], tokens, "{effort:?}");
        assert_eq!(sent["max_tokens"], 40_000);
    }
    // A budget of zero is no thinking.
    let sent = body(
        &plain(),
        &with_settings(GenerationSettings {
            reasoning: budget(0),
            ..GenerationSettings::default()
        }),
    );
    assert!(sent.get("thinking").is_none());
}

#[test]
fn impossible_settings_fail_before_sending() {
    let cases = [
        (
            GenerationSettings {
                max_output_tokens: Some(1024),
                reasoning: budget(1024),
                ..GenerationSettings::default()
            },
            "max_output_tokens (1024) must be larger than the thinking budget (1024)",
        ),
        (
            GenerationSettings {
                reasoning: budget(500),
                ..GenerationSettings::default()
            },
            "a thinking budget of 500 tokens is below Anthropic's minimum of 1024",
        ),
    ];
    for (settings, message) in cases {
        let error = plain().prepare(&with_settings(settings)).unwrap_err();
        assert_eq!(error.kind, BackendErrorKind::InvalidRequest);
        assert!(error.message.starts_with(message), "{error}");
    }
}

fn weather_tool() -> ToolSpec {
    ToolSpec::new(
        "get_weather",
        "Current weather for a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
}

#[test]
fn tool_choice_mapping() {
    let with = |choice: ToolChoice, parallel: Option<bool>| {
        let request = ModelRequest {
            tools: vec![weather_tool()],
            tool_choice: choice,
            settings: GenerationSettings {
                parallel_tool_calls: parallel,
                ..GenerationSettings::default()
            },
            ..request(vec![Message::user("hi")])
        };
        body(&plain(), &request).get("tool_choice").cloned()
    };
    assert_eq!(with(ToolChoice::Auto, None), None);
    assert_eq!(with(ToolChoice::Auto, Some(true)), None);
    assert_eq!(
        with(ToolChoice::Auto, Some(false)),
        Some(json!({"type": "auto", "disable_parallel_tool_use": true}))
    );
    assert_eq!(
        with(ToolChoice::None, Some(false)),
        Some(json!({"type": "none"}))
    );
    assert_eq!(
        with(ToolChoice::Required, None),
        Some(json!({"type": "any"}))
    );
    assert_eq!(
        with(
            ToolChoice::Tool {
                name: "get_weather".into()
            },
            Some(false)
        ),
        Some(json!({"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true}))
    );

    // Choices that cannot be honoured are errors, not silently dropped.
    let unknown = ModelRequest {
        tools: vec![weather_tool()],
        tool_choice: ToolChoice::Tool {
            name: "get_time".into(),
        },
        ..request(vec![Message::user("hi")])
    };
    let error = plain().prepare(&unknown).unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::InvalidRequest);
    assert!(error.message.contains("`get_time`"), "{error}");
    let no_tools = ModelRequest {
        tool_choice: ToolChoice::Required,
        ..request(vec![Message::user("hi")])
    };
    assert_eq!(
        plain().prepare(&no_tools).unwrap_err().kind,
        BackendErrorKind::InvalidRequest
    );
    // `none` without tools is simply nothing to send.
    let none = ModelRequest {
        tool_choice: ToolChoice::None,
        ..request(vec![Message::user("hi")])
    };
    assert!(body(&plain(), &none).get("tool_choice").is_none());
}

#[test]
fn extras_are_merged_and_may_not_repeat_fields() {
    let mut extras = serde_json::Map::new();
    extras.insert("top_k".into(), json!(40));
    extras.insert("metadata".into(), json!({"user_id": "u-1"}));
    let sent = body(
        &plain(),
        &ModelRequest {
            extras,
            ..request(vec![Message::user("hi")])
        },
    );
    assert_eq!(sent["top_k"], 40);
    assert_eq!(sent["metadata"], json!({"user_id": "u-1"}));

    let mut extras = serde_json::Map::new();
    extras.insert("max_tokens".into(), json!(10));
    let error = plain()
        .prepare(&ModelRequest {
            extras,
            ..request(vec![Message::user("hi")])
        })
        .unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::InvalidRequest);
    assert!(error.message.contains("`max_tokens`"), "{error}");

    // A field the adapter does not send this time is the caller's to set.
    let mut extras = serde_json::Map::new();
    extras.insert("temperature".into(), json!(0.5));
    let sent = body(
        &plain(),
        &ModelRequest {
            extras,
            ..request(vec![Message::user("hi")])
        },
    );
    assert_eq!(sent["temperature"], 0.5);
}

#[test]
fn history_edge_cases() {
    let history = vec![
        Message::user("go"),
        Message::Assistant(AssistantMessage {
            content: vec![
                // Unsigned thinking and another provider's reasoning item are left out.
                AssistantBlock::Thinking(Thinking {
                    thinking: "unsigned".into(),
                    ..Thinking::default()
                }),
                AssistantBlock::Thinking(Thinking {
                    thinking: String::new(),
                    signature: Some("gAAAA-encrypted".into()),
                    id: Some("rs_1".into()),
                    redacted: false,
                }),
                AssistantBlock::Text {
                    text: String::new(),
                },
                AssistantBlock::ToolCall(ToolCall {
                    invalid_arguments: true,
                    ..ToolCall::new("toolu_1", "get_weather", json!("{\"city\": \"Par"))
                }),
            ],
            stop_reason: Some(StopReason::ToolCalls),
            ..AssistantMessage::default()
        }),
        // A note between the call and its result: the result still comes first in the turn.
        Message::system("note"),
        Message::Tool(ToolResult::error(
            "toolu_1",
            "get_weather",
            "arguments are not valid JSON",
        )),
        // A refusal from another provider goes back as text.
        Message::Assistant(AssistantMessage {
            content: vec![AssistantBlock::Refusal {
                text: "I can't.".into(),
            }],
            ..AssistantMessage::default()
        }),
        // An assistant turn with nothing Anthropic accepts disappears, and the turns around
        // it merge.
        Message::Assistant(AssistantMessage {
            content: vec![AssistantBlock::Thinking(Thinking::default())],
            ..AssistantMessage::default()
        }),
        Message::user("ok"),
    ];
    let sent = body(&cached(), &request(history));
    assert_eq!(
        sent["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "go"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": "arguments are not valid JSON", "is_error": true},
                {"type": "text", "text": "<system-reminder>\nnote\n</system-reminder>"}
            ]},
            {"role": "assistant", "content": [{"type": "text", "text": "I can't."}]},
            {"role": "user", "content": [
                {"type": "text", "text": "ok", "cache_control": {"type": "ephemeral"}}
            ]}
        ])
    );
}

// ---------------------------------------------------------------------------------------------
// Requests: pinned bodies

fn image_request() -> ModelRequest {
    ModelRequest {
        system: Some("You describe images precisely.".into()),
        messages: vec![Message::User(UserMessage {
            content: vec![
                UserBlock::Text {
                    text: "What is in these two images?".into(),
                },
                UserBlock::Image {
                    source: ImageSource::Base64 {
                        media_type: "image/png".into(),
                        data: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==".into(),
                    },
                },
                UserBlock::Image {
                    source: ImageSource::Url {
                        url: "https://example.com/cat.jpg".into(),
                    },
                },
            ],
        })],
        ..request(vec![])
    }
}

#[test]
fn request_system_user_text_and_images() {
    let sent = body(&plain(), &image_request());
    snapshot!("request_system_user_text_and_images", sent);
}

/// A finished multi-round conversation: signed and redacted thinking, text, two parallel
/// calls, one failing, a system note, and a follow-up question.
fn multi_round_history() -> Vec<Message> {
    vec![
        Message::user("Compare the weather in Paris and Oslo."),
        Message::Assistant(AssistantMessage {
            content: vec![
                AssistantBlock::Thinking(Thinking {
                    thinking: "I need both cities; call the tool twice.".into(),
                    signature: Some("sig-round-1==".into()),
                    ..Thinking::default()
                }),
                AssistantBlock::Thinking(Thinking {
                    signature: Some("redacted-data==".into()),
                    redacted: true,
                    ..Thinking::default()
                }),
                AssistantBlock::Text {
                    text: "Checking both cities.".into(),
                },
                AssistantBlock::ToolCall(ToolCall::new(
                    "toolu_paris",
                    "get_weather",
                    json!({"city": "Paris"}),
                )),
                AssistantBlock::ToolCall(ToolCall::new(
                    "toolu_oslo",
                    "get_weather",
                    json!({"city": "Oslo"}),
                )),
            ],
            stop_reason: Some(StopReason::ToolCalls),
            ..AssistantMessage::default()
        }),
        Message::Tool(ToolResult::ok(
            "toolu_paris",
            "get_weather",
            r#"{"temp_c":18,"sky":"clear"}"#,
        )),
        Message::Tool(ToolResult::error(
            "toolu_oslo",
            "get_weather",
            "upstream timeout; try again",
        )),
        Message::system("The user prefers Celsius."),
        Message::Assistant(AssistantMessage {
            content: vec![AssistantBlock::Text {
                text: "Paris is 18 °C and clear; Oslo's report timed out.".into(),
            }],
            stop_reason: Some(StopReason::Stop),
            ..AssistantMessage::default()
        }),
        Message::user("Try Oslo again."),
    ]
}

#[test]
fn request_multi_round_history() {
    let request = ModelRequest {
        system: Some("You are a weather assistant.".into()),
        tools: vec![weather_tool()],
        ..request(multi_round_history())
    };
    let sent = body(&plain(), &request);
    // Without caching the history's system note joins the system prompt.
    assert_eq!(
        sent["system"],
        json!([
            {"type": "text", "text": "You are a weather assistant."},
            {"type": "text", "text": "The user prefers Celsius."}
        ])
    );
    snapshot!("request_multi_round_history", sent);
}

#[test]
fn request_tools_choice_and_settings() {
    let mut extras = serde_json::Map::new();
    extras.insert("top_k".into(), json!(20));
    let request = ModelRequest {
        tools: vec![
            weather_tool(),
            ToolSpec::new(
                "get_time",
                "Current time in a zone.",
                json!({"type": "object"}),
            ),
        ],
        // Anthropic does not combine thinking with a forced tool choice; `auto` carries the
        // parallel flag.
        tool_choice: ToolChoice::Auto,
        settings: GenerationSettings {
            max_output_tokens: Some(8000),
            temperature: Some(1.0),
            top_p: Some(0.95),
            stop_sequences: vec!["</answer>".into()],
            reasoning: Some(Reasoning {
                effort: Some(ReasoningEffort::Low),
                budget_tokens: None,
            }),
            parallel_tool_calls: Some(false),
        },
        extras,
        stream: false,
        ..request(vec![Message::user("What time is it in Tokyo?")])
    };
    let sent = body(&plain(), &request);
    // Without caching, tools keep the caller's order.
    assert_eq!(sent["tools"][0]["name"], "get_weather");
    snapshot!("request_tools_choice_and_settings", sent);
}

// ---------------------------------------------------------------------------------------------
// Requests against the recorded request bodies (same fields and nesting)

fn recorded(name: &str) -> Value {
    fixture_json(name)
}

#[test]
fn matches_recorded_requests() {
    // Plain streaming text.
    let mine = body(
        &plain(),
        &ModelRequest {
            settings: GenerationSettings {
                max_output_tokens: Some(8192),
                temperature: Some(1.0),
                ..GenerationSettings::default()
            },
            ..ModelRequest::new(
                "claude-haiku-4-5-20251001",
                vec![Message::user("Say just hello")],
            )
        },
    );
    assert_eq!(mine, recorded("stream-text.request.json"));

    // Tools with an empty description.
    let mine = body(
        &plain(),
        &ModelRequest {
            tools: vec![ToolSpec::new(
                "pelican_name_generator",
                "",
                json!({"properties": {}, "type": "object"}),
            )],
            settings: GenerationSettings {
                max_output_tokens: Some(8192),
                temperature: Some(1.0),
                ..GenerationSettings::default()
            },
            ..ModelRequest::new(
                "claude-haiku-4-5-20251001",
                vec![Message::user("Two names for a pet pelican")],
            )
        },
    );
    assert_eq!(
        mine,
        recorded("stream-parallel-tool-use-empty-args.request.json")
    );

    // An assistant prefill and stop sequences.
    let mine = body(
        &plain(),
        &ModelRequest {
            settings: GenerationSettings {
                max_output_tokens: Some(8192),
                temperature: Some(1.0),
                stop_sequences: vec!["```".into()],
                ..GenerationSettings::default()
            },
            ..ModelRequest::new(
                "claude-haiku-4-5-20251001",
                vec![
                    Message::user("Very short function describing a pelican"),
                    Message::Assistant(AssistantMessage::text("```python")),
                ],
            )
        },
    );
    assert_eq!(mine, recorded("stream-stop-sequence.request.json"));

    // Thinking with tools (the recorded client also sent `display`, which has no setting).
    let mine = body(
        &plain(),
        &ModelRequest {
            tools: vec![ToolSpec::new(
                "fixed_version",
                "Return a fixed test version string",
                json!({"properties": {}, "type": "object"}),
            )],
            settings: GenerationSettings {
                max_output_tokens: Some(64000),
                temperature: Some(1.0),
                reasoning: budget(1024),
                ..GenerationSettings::default()
            },
            ..ModelRequest::new(
                "claude-haiku-4-5-20251001",
                vec![Message::user(
                    "Use the fixed_version tool. Then tell me the version and make one short joke about it. Think about it first.",
                )],
            )
        },
    );
    let mut expected = recorded("stream-thinking-tool-use-empty-args.request.json");
    expected["thinking"]
        .as_object_mut()
        .unwrap()
        .remove("display");
    assert_eq!(mine, expected);

    // Non-streamed thinking with an explicit `auto` choice (we leave the default unsaid).
    let mine = body(
        &plain(),
        &ModelRequest {
            tools: vec![ToolSpec::new(
                "get_user_country",
                "",
                json!({"additionalProperties": false, "properties": {}, "type": "object"}),
            )],
            settings: GenerationSettings {
                max_output_tokens: Some(4096),
                reasoning: budget(3000),
                ..GenerationSettings::default()
            },
            stream: false,
            ..ModelRequest::new(
                "claude-sonnet-4-0",
                vec![Message::user(
                    "What is the largest city in the user country?",
                )],
            )
        },
    );
    let mut expected = recorded("thinking-tool-use.request.json");
    expected.as_object_mut().unwrap().remove("tool_choice");
    assert_eq!(mine, expected);

    // The system prompt as a string in the recording, as text blocks here.
    let original = recorded("tool-use-parallel-4.request.json");
    let system = original["system"].as_str().unwrap();
    let mine = body(
        &plain(),
        &ModelRequest {
            system: Some(system.into()),
            tools: vec![ToolSpec::new(
                "retrieve_entity_info",
                "Get the knowledge about the given entity.",
                original["tools"][0]["input_schema"].clone(),
            )],
            stream: false,
            ..ModelRequest::new(
                "claude-haiku-4-5",
                vec![Message::user(
                    "Alice, Bob, Charlie and Daisy are a family. Who is the youngest?",
                )],
            )
        },
    );
    let mut expected = original.clone();
    expected["system"] = json!([{"type": "text", "text": system}]);
    expected.as_object_mut().unwrap().remove("tool_choice");
    assert_eq!(mine, expected);
}

#[test]
fn the_cache_layout_matches_a_recorded_cached_request() {
    // A real request that produced a cache hit: a breakpoint on the system prompt and one on
    // the newest message, exactly what the layout sends.
    let original = recorded("stream-cache-read.request.json");
    let mine = body(
        &cached(),
        &ModelRequest {
            system: Some(original["system"][0]["text"].as_str().unwrap().into()),
            settings: GenerationSettings {
                max_output_tokens: Some(32),
                ..GenerationSettings::default()
            },
            ..ModelRequest::new(
                "claude-sonnet-4-6",
                vec![Message::user("Reply with exactly: cache probe ready")],
            )
        },
    );
    assert_eq!(mine, original);
}

#[test]
fn automatic_caching_through_extras() {
    // Anthropic's top-level `cache_control` (automatic caching) is a provider field: extras.
    let original = recorded("cache-read-write.request.json");
    let mut extras = serde_json::Map::new();
    extras.insert("cache_control".into(), original["cache_control"].clone());
    let messages = original["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|turn| {
            let text = turn["content"][0]["text"].as_str().unwrap();
            match turn["role"].as_str().unwrap() {
                "user" => Message::user(text),
                _ => Message::Assistant(AssistantMessage::text(text)),
            }
        })
        .collect();
    let mine = body(
        &plain(),
        &ModelRequest {
            system: Some(original["system"].as_str().unwrap().into()),
            extras,
            stream: false,
            ..ModelRequest::new("claude-sonnet-4-5", messages)
        },
    );
    let mut expected = original.clone();
    expected["system"] = json!([{"type": "text", "text": original["system"]}]);
    assert_eq!(mine, expected);
}

// ---------------------------------------------------------------------------------------------
// Round trips: what a response produced goes back unchanged

#[test]
fn signatures_round_trip() {
    for name in [
        "stream-thinking-tool-use-empty-args.sse",
        "stream-redacted-thinking.sse",
        "stream-thinking.sse",
    ] {
        let (_, message) = stream_message(name);
        round_trip(name, message);
    }
    round_trip(
        "thinking-tool-use.json",
        assemble(&replay_body("thinking-tool-use.json").unwrap()),
    );
}

fn round_trip(name: &str, message: AssistantMessage) {
    let mut history = vec![
        Message::user("question"),
        Message::Assistant(message.clone()),
    ];
    for call in message.tool_calls() {
        history.push(Message::Tool(ToolResult::ok(
            call.id.clone(),
            call.name.clone(),
            "result",
        )));
    }
    if message.tool_calls().next().is_none() {
        history.push(Message::user("and then?"));
    }
    for backend in [plain(), cached()] {
        let sent = body(&backend, &request(history.clone()));
        let blocks = sent["messages"][1]["content"].as_array().unwrap();
        let mut expected = Vec::new();
        for block in &message.content {
            expected.push(match block {
                AssistantBlock::Thinking(t) if t.redacted => {
                    json!({"type": "redacted_thinking", "data": t.signature})
                }
                AssistantBlock::Thinking(t) => {
                    json!({"type": "thinking", "thinking": t.thinking, "signature": t.signature})
                }
                AssistantBlock::Text { text } => json!({"type": "text", "text": text}),
                AssistantBlock::ToolCall(call) => json!({
                    "type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments
                }),
                AssistantBlock::Refusal { .. } => unreachable!(),
            });
        }
        assert_eq!(blocks, &expected, "{name}");
        let signed = message.content.iter().any(|block| {
            matches!(block, AssistantBlock::Thinking(t) if t.signature.as_ref().is_some_and(|s| !s.is_empty()))
        });
        assert!(signed, "{name} has a signed block");
    }
}

// ---------------------------------------------------------------------------------------------
// The prompt-cache layout

fn tools_unsorted() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "search_docs",
            "Full-text search over the docs.",
            json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
        ),
        weather_tool(),
        ToolSpec::new(
            "read_file",
            "Read a file of the workspace.",
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        ),
    ]
}

const STATIC_SYSTEM: &str = "You are a careful research assistant. Cite the tool results you use.";

fn cache_request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        system: Some(STATIC_SYSTEM.into()),
        tools: tools_unsorted(),
        ..request(messages)
    }
}

fn call_round(id: &str, name: &str, args: Value, result: &str) -> [Message; 2] {
    [
        Message::Assistant(AssistantMessage {
            content: vec![
                AssistantBlock::Thinking(Thinking {
                    thinking: format!("Next: {name}."),
                    signature: Some(format!("sig-{id}")),
                    ..Thinking::default()
                }),
                AssistantBlock::ToolCall(ToolCall::new(id, name, args)),
            ],
            stop_reason: Some(StopReason::ToolCalls),
            ..AssistantMessage::default()
        }),
        Message::Tool(ToolResult::ok(id, name, result)),
    ]
}

/// (b): two rounds, with a dynamic system note, ending in a tool result.
fn history_b() -> Vec<Message> {
    let mut history = vec![
        Message::system("Current date: 2026-11-22."),
        Message::user("Where is the retry policy documented, and what does it default to?"),
    ];
    history.extend(call_round(
        "toolu_a",
        "search_docs",
        json!({"query": "retry policy"}),
        r#"[{"path":"docs/http.md","line":42}]"#,
    ));
    history.push(Message::system("Only 2 tool rounds remain."));
    history.extend(call_round(
        "toolu_b",
        "read_file",
        json!({"path": "docs/http.md"}),
        "RetryPolicy defaults to 2 retries with exponential backoff.",
    ));
    history
}

/// (c): (b) plus one more round.
fn history_c() -> Vec<Message> {
    let mut history = history_b();
    history.extend(call_round(
        "toolu_c",
        "get_weather",
        json!({"city": "Paris"}),
        r#"{"temp_c":18}"#,
    ));
    history
}

/// The serialized body up to and including the start of the messages array: tools, system
/// and everything else the body sends before the conversation.
fn prefix(bytes: &[u8]) -> &[u8] {
    let marker = b"\"messages\":[";
    let at = bytes
        .windows(marker.len())
        .position(|window| window == marker)
        .unwrap();
    &bytes[..at + marker.len()]
}

fn strip_cache_control(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("cache_control");
            map.values_mut().for_each(strip_cache_control);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_cache_control),
        _ => {}
    }
}

/// Where the breakpoints are, as JSON pointers.
fn breakpoints(value: &Value, at: &str, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let here = format!("{at}/{key}");
                if key == "cache_control" {
                    found.push(at.to_owned());
                } else {
                    breakpoints(inner, &here, found);
                }
            }
        }
        Value::Array(items) => {
            for (i, inner) in items.iter().enumerate() {
                breakpoints(inner, &format!("{at}/{i}"), found);
            }
        }
        _ => {}
    }
}

fn breakpoints_of(value: &Value) -> Vec<String> {
    let mut found = Vec::new();
    breakpoints(value, "", &mut found);
    found
}

#[test]
fn cache_a_first_request() {
    let request = cache_request(vec![Message::user("Where is the retry policy documented?")]);
    let bytes = prepare(&cached(), &request);
    assert_eq!(count(&bytes, "\"cache_control\""), 2);
    let sent: Value = serde_json::from_slice(&bytes).unwrap();
    let names: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["get_weather", "read_file", "search_docs"]);
    assert_eq!(
        breakpoints_of(&sent),
        ["/messages/0/content/0", "/system/0"]
    );
    snapshot!("cache_a_first_request", sent);
}

#[test]
fn cache_b_c_prefix_is_byte_stable_and_the_tail_moves() {
    let request_b = cache_request(history_b());
    let request_c = cache_request(history_c());
    let bytes_b = prepare(&cached(), &request_b);
    let bytes_c = prepare(&cached(), &request_c);
    assert_eq!(count(&bytes_b, "\"cache_control\""), 2);
    assert_eq!(count(&bytes_c, "\"cache_control\""), 2);

    // The prefix (tools, system, and everything before the conversation) is byte-identical.
    assert_eq!(
        String::from_utf8_lossy(prefix(&bytes_b)),
        String::from_utf8_lossy(prefix(&bytes_c))
    );
    // Also against the first request and whatever order the caller registered tools in.
    let mut shuffled = cache_request(history_c());
    shuffled.tools.reverse();
    assert_eq!(prefix(&prepare(&cached(), &shuffled)), prefix(&bytes_b));
    let first = cache_request(vec![Message::user("hello")]);
    assert_eq!(prefix(&prepare(&cached(), &first)), prefix(&bytes_b));

    let sent_b: Value = serde_json::from_slice(&bytes_b).unwrap();
    let sent_c: Value = serde_json::from_slice(&bytes_c).unwrap();
    // The history's system notes stay out of the prefix: the system is the static prompt only.
    assert_eq!(
        sent_b["system"],
        json!([{"type": "text", "text": STATIC_SYSTEM, "cache_control": {"type": "ephemeral"}}])
    );
    // (b) ends in a tool result: the tail breakpoint is on it.
    let turns_b = sent_b["messages"].as_array().unwrap();
    let last_b = turns_b.len() - 1;
    assert_eq!(
        breakpoints_of(&sent_b),
        ["/messages/4/content/0".to_owned(), "/system/0".to_owned()]
    );
    assert_eq!(last_b, 4);
    assert_eq!(turns_b[last_b]["content"][0]["type"], "tool_result");
    // (c): the tail moved to the newest tool result.
    assert_eq!(
        breakpoints_of(&sent_c),
        ["/messages/6/content/0".to_owned(), "/system/0".to_owned()]
    );
    // The conversation of (b) is a prefix of (c)'s, apart from the tail marker.
    let mut unmarked_b = sent_b["messages"].clone();
    strip_cache_control(&mut unmarked_b);
    let mut unmarked_c = sent_c["messages"].clone();
    strip_cache_control(&mut unmarked_c);
    let len_b = unmarked_b.as_array().unwrap().len();
    assert_eq!(
        unmarked_c.as_array().unwrap()[..len_b],
        unmarked_b.as_array().unwrap()[..]
    );
    // The caller's history was not touched by the marker.
    assert_eq!(request_b.messages, history_b());

    snapshot!("cache_b_history_ending_in_tool_result", sent_b);
    snapshot!("cache_c_after_one_more_round", sent_c);
}

#[test]
fn cache_d_one_hour_ttl() {
    let backend =
        Anthropic::new("sk-test").with_cache(CacheLayout::new().with_ttl(CacheTtl::OneHour));
    let bytes = prepare(&backend, &cache_request(history_b()));
    assert_eq!(count(&bytes, "\"cache_control\""), 2);
    assert_eq!(
        count(&bytes, r#""cache_control":{"type":"ephemeral","ttl":"1h"}"#),
        2
    );
    let sent: Value = serde_json::from_slice(&bytes).unwrap();
    snapshot!("cache_d_one_hour_ttl", sent);
}

#[test]
fn cache_e_off_sends_no_markers() {
    let bytes = prepare(&plain(), &cache_request(history_b()));
    assert_eq!(count(&bytes, "cache_control"), 0);
    let sent: Value = serde_json::from_slice(&bytes).unwrap();
    // Caller's tool order, and the system notes in the system prompt.
    assert_eq!(sent["tools"][0]["name"], "search_docs");
    assert_eq!(sent["system"].as_array().unwrap().len(), 3);
    snapshot!("cache_e_off_no_markers", sent);
}

#[test]
fn cache_prefix_breakpoint_goes_on_the_last_tool_without_a_system_prompt() {
    let request = ModelRequest {
        tools: tools_unsorted(),
        ..request(vec![Message::user("hi")])
    };
    let sent = body(&cached(), &request);
    assert_eq!(breakpoints_of(&sent), ["/messages/0/content/0", "/tools/2"]);
    assert_eq!(sent["tools"][2]["name"], "search_docs");
    // Neither tools nor system: only the tail.
    let sent = body(&cached(), &request_without_tools());
    assert_eq!(breakpoints_of(&sent), ["/messages/0/content/0"]);
}

fn request_without_tools() -> ModelRequest {
    request(vec![Message::user("hi")])
}

#[test]
fn cache_tail_skips_blocks_that_cannot_carry_a_marker() {
    // A prefill ending in a signed thinking block: the marker goes on the text before it.
    let request = cache_request(vec![
        Message::user("hi"),
        Message::Assistant(AssistantMessage {
            content: vec![
                AssistantBlock::Text {
                    text: "Let me think.".into(),
                },
                AssistantBlock::Thinking(Thinking {
                    thinking: "…".into(),
                    signature: Some("sig".into()),
                    ..Thinking::default()
                }),
            ],
            ..AssistantMessage::default()
        }),
    ]);
    let sent = body(&cached(), &request);
    assert_eq!(
        breakpoints_of(&sent),
        ["/messages/1/content/0", "/system/0"]
    );
}

#[test]
fn a_trailing_system_note_is_the_tail_with_caching() {
    let mut history = history_b();
    history.push(Message::system("Answer now."));
    let sent = body(&cached(), &cache_request(history));
    let turns = sent["messages"].as_array().unwrap();
    let last = &turns[turns.len() - 1]["content"];
    // Tool result first, then the reminder, which carries the tail marker.
    assert_eq!(last[0]["type"], "tool_result");
    assert_eq!(
        last[1],
        json!({
            "type": "text",
            "text": "<system-reminder>\nAnswer now.\n</system-reminder>",
            "cache_control": {"type": "ephemeral"}
        })
    );
    assert_eq!(breakpoints_of(&sent).len(), 2);
}

#[test]
fn request_native_structured_output() {
    let asked = ModelRequest {
        response_format: Some(agent_types::ResponseFormat {
            name: "weather_report".into(),
            schema: json!({
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "note": {"type": ["string", "null"]}
                },
                "required": ["city", "note"],
                "additionalProperties": false
            }),
            strict: true,
        }),
        ..request(vec![Message::user("Weather in Oslo?")])
    };
    let sent = body(&plain(), &asked);
    assert_eq!(sent["output_config"]["format"]["type"], "json_schema");
    snapshot!("request_native_structured_output", sent);
    // Declared only on request: Anthropic's structured outputs depend on the model.
    assert!(!plain().capabilities().structured_output);
    // Without a response format, no `output_config`.
    let sent = body(&plain(), &request(vec![Message::user("x")]));
    assert!(sent.get("output_config").is_none());
}

#[test]
fn blocks_agentry_cannot_carry_are_refused_by_name_never_dropped() {
    let cases = [
        (
            json!({"type": "server_tool_use", "id": "srvtoolu_2", "name": "code_execution", "input": {"code": "print(1)"}}),
            "a `server_tool_use` content block (`code_execution`)",
        ),
        (
            json!({"type": "code_execution_tool_result", "tool_use_id": "srvtoolu_2",
                "content": {"type": "code_execution_result", "stdout": "1", "stderr": "", "return_code": 0}}),
            "a `code_execution_tool_result` content block",
        ),
        (
            json!({"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "echo", "server_name": "s", "input": {}}),
            "a `mcp_tool_use` content block",
        ),
        (
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}),
            "a `image` content block",
        ),
    ];
    for (block, named) in cases {
        let check = |error: BackendError| {
            assert_eq!(error.kind, BackendErrorKind::Unsupported, "{error}");
            assert!(
                error
                    .message
                    .starts_with(&format!("Anthropic answered with {named}")),
                "{error}"
            );
        };
        // Streamed: refused at the block's start.
        let start =
            json!({"type": "content_block_start", "index": 1, "content_block": block}).to_string();
        let (events, end) = frames(&[
            START,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"Here"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            &start,
        ]);
        check(end.expect_err(named));
        assert!(
            !events
                .iter()
                .any(|event| matches!(event, StreamEvent::Finish { .. }))
        );
        // Whole.
        let body =
            json!({"type": "message", "id": "msg_3", "model": "claude-x", "role": "assistant",
            "content": [{"type": "text", "text": "Here"}, block], "stop_reason": "end_turn"})
            .to_string();
        check(
            WireDecoder::new()
                .body(&body, &mut Vec::new())
                .expect_err(named),
        );
    }
}

#[test]
fn hosted_search_results_are_skipped() {
    let body = json!({"type": "message", "id": "msg_4", "model": "claude-x", "role": "assistant",
        "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_fetch", "input": {"url": "https://example.com"}},
            {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_1", "content": {"type": "web_fetch_result"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_0", "content": []},
            {"type": "text", "text": "Found it.", "citations": [{"type": "web_search_result_location"}]}
        ],
        "stop_reason": "end_turn"})
    .to_string();
    let mut out = Vec::new();
    WireDecoder::new().body(&body, &mut out).unwrap();
    assert_eq!(assemble(&out).text_content(), "Found it.");
}

// The adapter's modules have a direction (issue 16): `request` builds the body and `cache`
// marks it, so `request` never names `cache` (the cache_* snapshots hold the behaviour).
#[test]
fn request_builds_the_body_without_reaching_into_cache() {
    let source = include_str!("request.rs");
    for line in source
        .lines()
        .filter(|line| line.trim_start().starts_with("use "))
    {
        let names = line.replace(['{', '}', ',', ';', ':'], " ");
        assert!(
            !names.split_whitespace().any(|name| name == "cache"),
            "request.rs imports cache: {line}"
        );
    }
    assert!(
        !source.contains("cache::mark("),
        "request.rs calls cache::mark"
    );
}
