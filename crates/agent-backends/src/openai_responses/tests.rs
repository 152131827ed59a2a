//! Every recording of `fixtures/providers/openai-responses/` through the decoder, the request
//! bodies as reviewed snapshots, and the round trip of reasoning items.

use agent_types::{
    AssistantBlock, AssistantMessage, BackendError, BackendErrorKind, GenerationSettings,
    ImageSource, Message, MessageAssembler, ModelRequest, Reasoning, ReasoningEffort, StopReason,
    StreamEvent, Thinking, ToolCall, ToolChoice, ToolResult, ToolSpec, Usage, UserBlock,
    UserMessage,
};
use serde_json::{Value, json};

use super::{OpenAiResponses, WireDecoder};
use crate::framing::SseParser;
use crate::http::driver::{Decoder, Frame, Protocol};

// ---------------------------------------------------------------------------------------------
// Helpers

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../../fixtures/providers/openai-responses/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// What one decoded response produced: its events, then the error that ended it, if any.
#[derive(Debug, PartialEq)]
struct Decoded {
    events: Vec<StreamEvent>,
    error: Option<BackendError>,
}

impl Decoded {
    fn message(&self) -> AssistantMessage {
        let mut assembler = MessageAssembler::new(false);
        for event in &self.events {
            assembler.push(event.clone()).unwrap();
        }
        assembler.finish()
    }

    fn ok(self) -> Vec<StreamEvent> {
        assert_eq!(self.error, None);
        self.events
    }
}

/// An SSE body through the real SSE parser, `chunk` bytes at a time.
fn decode_sse(bytes: &[u8], chunk: usize) -> Decoded {
    let mut decoder = WireDecoder::new();
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    let mut feed = |decoder: &mut WireDecoder, events: &mut Vec<StreamEvent>| {
        for piece in bytes.chunks(chunk) {
            parser.feed(piece, &mut |event| {
                decoder.frame(
                    Frame {
                        event: event.event,
                        data: event.data,
                    },
                    events,
                )
            })?;
        }
        parser.finish(&mut |event| {
            decoder.frame(
                Frame {
                    event: event.event,
                    data: event.data,
                },
                events,
            )
        })?;
        decoder.end(events)
    };
    let error = feed(&mut decoder, &mut events).err();
    Decoded { events, error }
}

/// An SSE body decoded whole and one byte at a time: both must agree.
fn sse(name: &str) -> Decoded {
    let bytes = fixture(name);
    let whole = decode_sse(&bytes, bytes.len());
    let bytewise = decode_sse(&bytes, 1);
    assert_eq!(whole, bytewise, "{name}: chunking changed the events");
    let sevens = decode_sse(&bytes, 7);
    assert_eq!(whole, sevens, "{name}: chunking changed the events");
    whole
}

/// A non-streaming body.
fn json_body(name: &str) -> Decoded {
    let bytes = fixture(name);
    let text = std::str::from_utf8(&bytes).unwrap();
    let mut decoder = WireDecoder::new();
    let mut events = Vec::new();
    let error = decoder
        .body(text, &mut events)
        .and_then(|()| decoder.end(&mut events))
        .err();
    Decoded { events, error }
}

fn usage(
    input: u64,
    output: u64,
    cache_read: Option<u64>,
    reasoning: Option<u64>,
) -> Option<Usage> {
    Some(Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        cache_read_tokens: cache_read,
        cache_write_5m_tokens: None,
        cache_write_1h_tokens: None,
        reasoning_tokens: reasoning,
    })
}

fn thinking_blocks(message: &AssistantMessage) -> Vec<&Thinking> {
    message
        .content
        .iter()
        .filter_map(|block| match block {
            AssistantBlock::Thinking(thinking) => Some(thinking),
            _ => None,
        })
        .collect()
}

fn thinking_chars(message: &AssistantMessage) -> usize {
    thinking_blocks(message)
        .iter()
        .map(|t| t.thinking.chars().count())
        .sum()
}

/// The text, its length in chars, and its first 60 chars match SOURCES.md.
fn assert_text(message: &AssistantMessage, prefix: &str, chars: usize) {
    let text = message.text_content();
    assert_eq!(text.chars().count(), chars, "text length");
    assert!(
        text.starts_with(prefix),
        "text starts {:?}",
        text.chars().take(60).collect::<String>()
    );
}

/// The reasoning item of an `output_item.done` event in a recording, as (id, encrypted).
fn recorded_reasoning(name: &str) -> (String, String) {
    let bytes = fixture(name);
    let text = std::str::from_utf8(&bytes).unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .find(|event| {
            event["type"] == "response.output_item.done" && event["item"]["type"] == "reasoning"
        })
        .map(|event| {
            (
                event["item"]["id"].as_str().unwrap().to_owned(),
                event["item"]["encrypted_content"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
        })
        .unwrap()
}

fn backend() -> OpenAiResponses {
    OpenAiResponses::new("sk-test")
}

/// The body `backend` sends for `request`, as JSON.
fn body_of(backend: &OpenAiResponses, request: &ModelRequest) -> Value {
    let prepared = backend.prepare(request).unwrap();
    serde_json::from_slice(&prepared.body).unwrap()
}

fn snapshot(name: &str, value: &Value) {
    insta::with_settings!({ snapshot_path => "../snapshots", sort_maps => true }, {
        insta::assert_json_snapshot!(name, value);
    });
}

// ---------------------------------------------------------------------------------------------
// Recordings: non-streaming bodies

#[test]
fn text_json() {
    let decoded = json_body("text.json");
    let message = decoded.message();
    let events = decoded.ok();
    assert_eq!(
        events[0],
        StreamEvent::MessageStart {
            id: Some("resp_67e547c5a2f08191802a1f43620f348503a2086afed73b47".into()),
            model: Some("gpt-4o-2024-08-06".into()),
        }
    );
    assert_text(
        &message,
        "It seems \"Londos\" might be incorrect or unknown. If you mean",
        175,
    );
    assert_eq!(thinking_chars(&message), 0);
    assert_eq!(message.tool_calls().count(), 0);
    assert_eq!(message.stop_reason, Some(StopReason::Stop));
    assert_eq!(message.usage, usage(335, 44, Some(0), Some(0)));
    assert_eq!(message.model.as_deref(), Some("gpt-4o-2024-08-06"));
}

#[test]
fn parallel_function_calls_json() {
    let decoded = json_body("parallel-function-calls.json");
    let message = decoded.message();
    let events = decoded.ok();
    assert_text(&message, "", 0);
    let calls: Vec<&ToolCall> = message.tool_calls().collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].id.as_str(), "call_LWVp74L5HaH2KNvgVz9PJsrj");
    assert_eq!(calls[0].name, "get_location");
    assert_eq!(calls[0].arguments, json!({"loc_name": "Londos"}));
    assert_eq!(calls[1].id.as_str(), "call_YnRAWeTyxI91m5uNa5bxXwVO");
    assert_eq!(calls[1].name, "get_location");
    assert_eq!(calls[1].arguments, json!({"loc_name": "London"}));
    // Indexes count function calls, starting at 0.
    let starts: Vec<u32> = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::ToolCallStart { index, .. } => Some(*index),
            _ => None,
        })
        .collect();
    assert_eq!(starts, [0, 1]);
    assert_eq!(message.stop_reason, Some(StopReason::ToolCalls));
    // All zero as recorded: zero, not unknown.
    assert_eq!(message.usage, usage(0, 0, Some(0), Some(0)));
}

#[test]
fn cached_tokens_json() {
    let message = json_body("cached-tokens.json").message();
    assert_text(&message, "OK", 2);
    assert_eq!(message.stop_reason, Some(StopReason::Stop));
    assert_eq!(message.usage, usage(4020, 5, Some(4012), Some(0)));
    let usage = message.usage.unwrap();
    assert_eq!(usage.uncached_input_tokens(), 8);
}

#[test]
fn incomplete_max_output_tokens_json() {
    let message = json_body("incomplete-max-output-tokens.json").message();
    assert_text(
        &message,
        "On the windswept coast of Whaler’s Bay, the old lighthouse s",
        64,
    );
    assert_eq!(message.stop_reason, Some(StopReason::Length));
    assert_eq!(message.usage, usage(30, 16, Some(0), Some(0)));
}

#[test]
fn refusal_json() {
    let message = json_body("refusal.json").message();
    // The refusal is kept, in its own block, and is not answer text.
    assert_text(&message, "", 0);
    assert_eq!(
        message.content,
        [AssistantBlock::Refusal {
            text: "I'm sorry, I can't assist with that.".into()
        }]
    );
    assert_eq!(message.stop_reason, Some(StopReason::ContentFilter));
    assert_eq!(message.usage, usage(43, 11, Some(0), Some(0)));
}

#[test]
fn error_400_invalid_request_json() {
    let error = backend().error(400, &fixture("error-400-invalid-request.json"));
    assert_eq!(
        error.message,
        "invalid_request_error/decimal_below_min_value: Invalid 'temperature': decimal below \
         minimum value. Expected a value >= 0, but got -1 instead."
    );
    assert_eq!(error.kind, BackendErrorKind::InvalidRequest);
    assert_eq!(error.status, Some(400));
    assert!(!error.is_retryable());
}

const QUOTA: &str = "insufficient_quota/insufficient_quota: You exceeded your current quota, \
                     please check your plan and billing details. For more information on this \
                     error, read the docs: \
                     https://platform.openai.com/docs/guides/error-codes/api-errors.";

#[test]
fn error_insufficient_quota_json() {
    // OpenAI sends an exhausted quota as a 429, like a rate limit; waiting does not help.
    let error = backend().error(429, &fixture("error-insufficient-quota.json"));
    assert_eq!(error.message, QUOTA);
    assert_eq!(error.kind, BackendErrorKind::QuotaExceeded);
    assert!(!error.is_retryable());
}

#[test]
fn error_bodies_that_are_not_openai_json() {
    let error = backend().error(
        429,
        br#"{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}"#,
    );
    assert_eq!(error.message, "requests/rate_limit_exceeded: slow down");
    assert_eq!(error.kind, BackendErrorKind::RateLimited);
    assert!(error.is_retryable());

    // A compatible server with a numeric code and no type.
    let error = backend().error(503, br#"{"error":{"message":"busy","code":503}}"#);
    assert_eq!(error.message, "503: busy");
    assert_eq!(error.kind, BackendErrorKind::Server);

    let error = backend().error(502, b"<html><title>Bad Gateway</title></html>");
    assert!(error.message.contains("HTML page"), "{}", error.message);
    assert_eq!(error.kind, BackendErrorKind::Server);
}

// ---------------------------------------------------------------------------------------------
// Recordings: streams

#[test]
fn stream_text_sse() {
    let decoded = sse("stream-text.sse");
    let message = decoded.message();
    let events = decoded.ok();
    assert_eq!(
        events[0],
        StreamEvent::MessageStart {
            id: Some("resp_67e554a21aa88191b65876ac5e5bbe0406c52f0e511c76ed".into()),
            model: Some("gpt-4o-2024-08-06".into()),
        }
    );
    let deltas = events
        .iter()
        .filter(|event| matches!(event, StreamEvent::TextDelta { .. }))
        .count();
    assert_eq!(
        deltas, 7,
        "one event per delta, none repeated by the done events"
    );
    assert_text(&message, "The capital of France is Paris.", 31);
    assert_eq!(thinking_chars(&message), 0);
    assert_eq!(message.stop_reason, Some(StopReason::Stop));
    assert_eq!(message.usage, usage(278, 9, Some(0), Some(0)));
    assert_eq!(
        events.last(),
        Some(&StreamEvent::Finish {
            stop_reason: StopReason::Stop
        })
    );
}

#[test]
fn stream_function_call_sse() {
    let decoded = sse("stream-function-call.sse");
    let message = decoded.message();
    let events = decoded.ok();
    assert_text(&message, "", 0);
    let calls: Vec<&ToolCall> = message.tool_calls().collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].id.as_str(), "call_kL0PCQV7M2WMoVX8V8OtYSAL");
    assert_eq!(calls[0].name, "get_capital");
    assert_eq!(calls[0].arguments, json!({"country": "France"}));
    assert!(!calls[0].invalid_arguments);
    assert_eq!(message.stop_reason, Some(StopReason::ToolCalls));
    assert_eq!(message.usage, usage(255, 16, Some(0), Some(0)));
    // start, 5 deltas, end — once each.
    let call_events: Vec<&StreamEvent> = events
        .iter()
        .filter(|event| {
            matches!(
                event,
                StreamEvent::ToolCallStart { .. }
                    | StreamEvent::ToolCallDelta { .. }
                    | StreamEvent::ToolCallEnd { .. }
            )
        })
        .collect();
    assert_eq!(call_events.len(), 7);
    assert_eq!(call_events[6], &StreamEvent::ToolCallEnd { index: 0 });
}

#[test]
fn stream_reasoning_summary_text_sse() {
    let decoded = sse("stream-reasoning-summary-text.sse");
    let message = decoded.message();
    decoded.ok();
    assert_text(
        &message,
        "I'm not a road safety professional, but here are some genera",
        1251,
    );
    // Four summary parts (460 + 517 + 540 + 505), joined without a separator.
    assert_eq!(thinking_chars(&message), 2022);
    let blocks = thinking_blocks(&message);
    assert_eq!(blocks.len(), 1);
    let (id, encrypted) = recorded_reasoning("stream-reasoning-summary-text.sse");
    assert_eq!(blocks[0].id.as_deref(), Some(id.as_str()));
    assert_eq!(blocks[0].signature.as_deref(), Some(encrypted.as_str()));
    assert!(
        blocks[0]
            .thinking
            .starts_with("**Providing street crossing instructions**")
    );
    // Reasoning first, then the answer.
    assert!(matches!(message.content[0], AssistantBlock::Thinking(_)));
    assert!(matches!(message.content[1], AssistantBlock::Text { .. }));
    assert_eq!(message.stop_reason, Some(StopReason::Stop));
    assert_eq!(message.usage, usage(13, 1680, Some(0), Some(1408)));
}

#[test]
fn stream_reasoning_function_call_sse() {
    let decoded = sse("stream-reasoning-function-call.sse");
    let message = decoded.message();
    let events = decoded.ok();
    assert_text(&message, "", 0);
    // An empty summary still yields a (signed) thinking block: the encrypted reasoning must go
    // back with the function call's result.
    assert_eq!(thinking_chars(&message), 0);
    let blocks = thinking_blocks(&message);
    assert_eq!(blocks.len(), 1);
    let (id, encrypted) = recorded_reasoning("stream-reasoning-function-call.sse");
    assert_eq!(blocks[0].id.as_deref(), Some(id.as_str()));
    assert_eq!(blocks[0].signature.as_deref(), Some(encrypted.as_str()));
    let calls: Vec<&ToolCall> = message.tool_calls().collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].id.as_str(), "call_CWXgs68YprAjp6t0371hiPOI");
    assert_eq!(calls[0].name, "final_result");
    assert_eq!(calls[0].arguments, json!({"result": 6666}));
    // The function call is the second output item but the first call: index 0.
    assert!(events.contains(&StreamEvent::ToolCallEnd { index: 0 }));
    assert_eq!(message.stop_reason, Some(StopReason::ToolCalls));
    assert_eq!(message.usage, usage(53, 469, Some(0), Some(448)));
}

#[test]
fn stream_failed_insufficient_quota_sse() {
    let decoded = sse("stream-failed-insufficient-quota.sse");
    let error = decoded.error.clone().unwrap();
    assert_eq!(error.message, QUOTA);
    assert_eq!(error.kind, BackendErrorKind::QuotaExceeded);
    assert!(!error.is_retryable());
    // Nothing but the start came before the error.
    assert_eq!(
        decoded.events,
        [StreamEvent::MessageStart {
            id: Some("resp_05500b38c2cd9bfc00691c7c9d222481a3b595421266dab424".into()),
            model: Some("gpt-5-nano-2025-08-07".into()),
        }]
    );
}

// ---------------------------------------------------------------------------------------------
// Streams the recordings do not cover

fn decode_lines(lines: &[Value]) -> Decoded {
    let mut text = String::new();
    for line in lines {
        text.push_str("data: ");
        text.push_str(&line.to_string());
        text.push_str("\n\n");
    }
    decode_sse(text.as_bytes(), text.len())
}

fn created() -> Value {
    json!({"type": "response.created", "response": {"id": "resp_1", "model": "m", "output": []}})
}

fn completed(status: &str, extra: Value) -> Value {
    let mut response = json!({"id": "resp_1", "status": status, "output": [],
        "usage": {"input_tokens": 5, "output_tokens": 3}});
    if let (Some(response), Some(extra)) = (response.as_object_mut(), extra.as_object()) {
        response.extend(extra.clone());
    }
    json!({"type": format!("response.{status}"), "response": response})
}

#[test]
fn done_events_fill_in_what_a_server_did_not_stream() {
    // A server that sends only the finished parts: each text is emitted once.
    let decoded = decode_lines(&[
        created(),
        json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
        json!({"type": "response.reasoning_summary_text.done", "output_index": 0,
            "item_id": "rs_1", "summary_index": 0, "text": "Think"}),
        json!({"type": "response.output_item.done", "output_index": 0,
            "item": {"type": "reasoning", "id": "rs_1", "encrypted_content": "enc",
                "summary": [{"type": "summary_text", "text": "Think"}]}}),
        json!({"type": "response.output_item.added", "output_index": 1,
            "item": {"type": "message", "id": "msg_1", "content": []}}),
        json!({"type": "response.output_text.done", "output_index": 1, "item_id": "msg_1",
            "content_index": 0, "text": "Hello"}),
        json!({"type": "response.output_item.done", "output_index": 1,
            "item": {"type": "message", "id": "msg_1",
                "content": [{"type": "output_text", "text": "Hello"}]}}),
        json!({"type": "response.output_item.added", "output_index": 2,
            "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f",
                "arguments": ""}}),
        json!({"type": "response.output_item.done", "output_index": 2,
            "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f",
                "arguments": "{\"a\":1}"}}),
        completed("completed", json!({})),
    ]);
    let message = decoded.message();
    let events = decoded.ok();
    assert_eq!(message.text_content(), "Hello");
    assert_eq!(
        message.content[0],
        AssistantBlock::Thinking(Thinking {
            thinking: "Think".into(),
            signature: Some("enc".into()),
            redacted: false,
            id: Some("rs_1".into()),
        })
    );
    let calls: Vec<&ToolCall> = message.tool_calls().collect();
    assert_eq!(calls[0].arguments, json!({"a": 1}));
    assert_eq!(message.stop_reason, Some(StopReason::ToolCalls));
    let texts = events
        .iter()
        .filter(|event| matches!(event, StreamEvent::TextDelta { .. }))
        .count();
    assert_eq!(texts, 1);
}

#[test]
fn a_stream_with_only_the_completed_response_is_read_from_its_output() {
    let decoded = decode_lines(&[completed(
        "completed",
        json!({"model": "m", "output": [
            {"type": "message", "content": [{"type": "output_text", "text": "Hi"}]},
            {"type": "function_call", "call_id": "call_9", "name": "g", "arguments": "{}"},
        ]}),
    )]);
    let message = decoded.message();
    let events = decoded.ok();
    assert!(matches!(events[0], StreamEvent::MessageStart { .. }));
    assert_eq!(message.text_content(), "Hi");
    assert_eq!(message.tool_calls().next().unwrap().id.as_str(), "call_9");
    assert_eq!(message.stop_reason, Some(StopReason::ToolCalls));
    assert_eq!(message.usage, usage(5, 3, None, None));
}

#[test]
fn unknown_events_and_fields_are_ignored() {
    let decoded = decode_lines(&[
        created(),
        json!({"type": "response.web_search_call.in_progress", "output_index": 0}),
        json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"type": "web_search_call", "id": "ws_1", "action": {"query": "x"}}}),
        json!({"type": "response.output_item.done", "output_index": 0,
            "item": {"type": "web_search_call", "id": "ws_1", "status": "completed"}}),
        json!({"type": "response.output_text.delta", "output_index": 1, "item_id": "msg_1",
            "delta": "ok", "logprobs": [], "obfuscation": "xyz"}),
        json!({"type": "response.output_text.annotation.added", "annotation": {"url": "u"}}),
        json!({"type": "keepalive"}),
        completed("completed", json!({})),
    ]);
    let message = decoded.message();
    decoded.ok();
    assert_eq!(message.text_content(), "ok");
    assert_eq!(message.stop_reason, Some(StopReason::Stop));
}

#[test]
fn incomplete_for_content_filter_is_a_content_filter_stop() {
    let decoded = decode_lines(&[
        created(),
        json!({"type": "response.output_text.delta", "output_index": 0, "delta": "Par"}),
        completed(
            "incomplete",
            json!({"incomplete_details": {"reason": "content_filter"}}),
        ),
    ]);
    assert_eq!(
        decoded.message().stop_reason,
        Some(StopReason::ContentFilter)
    );
}

#[test]
fn a_streamed_refusal_is_kept_and_stops_with_content_filter() {
    let decoded = decode_lines(&[
        created(),
        json!({"type": "response.refusal.delta", "output_index": 0, "item_id": "msg_1",
            "content_index": 0, "delta": "I can't "}),
        json!({"type": "response.refusal.delta", "output_index": 0, "item_id": "msg_1",
            "content_index": 0, "delta": "help."}),
        json!({"type": "response.refusal.done", "output_index": 0, "item_id": "msg_1",
            "content_index": 0, "refusal": "I can't help."}),
        json!({"type": "response.output_item.done", "output_index": 0,
            "item": {"type": "message", "id": "msg_1",
                "content": [{"type": "refusal", "refusal": "I can't help."}]}}),
        completed("completed", json!({})),
    ]);
    let message = decoded.message();
    assert_eq!(
        message.content,
        [AssistantBlock::Refusal {
            text: "I can't help.".into()
        }]
    );
    assert_eq!(message.stop_reason, Some(StopReason::ContentFilter));
}

#[test]
fn in_band_errors() {
    // The documented flat shape of the `error` event.
    let decoded = decode_lines(&[
        created(),
        json!({"type": "error", "code": "server_error", "message": "boom", "param": null}),
    ]);
    let error = decoded.error.unwrap();
    assert_eq!(error.message, "server_error: boom");
    assert_eq!(error.kind, BackendErrorKind::Server);
    assert!(error.is_retryable());

    let decoded = decode_lines(&[
        created(),
        json!({"type": "error", "error": {"type": "tokens", "code": "rate_limit_exceeded",
            "message": "slow down"}}),
    ]);
    let error = decoded.error.unwrap();
    assert_eq!(error.message, "tokens/rate_limit_exceeded: slow down");
    assert_eq!(error.kind, BackendErrorKind::RateLimited);

    // `response.failed` without a preceding error event.
    let decoded = decode_lines(&[
        created(),
        json!({"type": "response.failed", "response": {"status": "failed",
            "error": {"code": "invalid_prompt", "message": "flagged"}}}),
    ]);
    let error = decoded.error.unwrap();
    assert_eq!(error.message, "invalid_prompt: flagged");
    assert_eq!(error.kind, BackendErrorKind::InvalidRequest);

    let decoded = decode_lines(&[
        created(),
        json!({"type": "response.failed", "response": {}}),
    ]);
    assert_eq!(decoded.error.unwrap().kind, BackendErrorKind::Server);
}

#[test]
fn malformed_frames_are_protocol_errors() {
    let mut decoder = WireDecoder::new();
    let mut out = Vec::new();
    let error = decoder
        .frame(
            Frame {
                event: "response.output_text.delta",
                data: "{\"type\": \"response.output_text.delta\", \"delta\": ",
            },
            &mut out,
        )
        .unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::Protocol);
    assert!(
        error.message.contains("a stream event"),
        "{}",
        error.message
    );

    let decoded = decode_lines(&[
        created(),
        json!({"type": "response.function_call_arguments.delta", "output_index": 3,
            "item_id": "fc_x", "delta": "{"}),
    ]);
    assert_eq!(decoded.error.unwrap().kind, BackendErrorKind::Protocol);

    let mut decoder = WireDecoder::new();
    let error = decoder.body("not json", &mut Vec::new()).unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::Protocol);
    assert!(error.message.contains("not json"), "{}", error.message);
}

#[test]
fn the_event_name_stands_in_for_a_missing_type() {
    let mut decoder = WireDecoder::new();
    let mut out = Vec::new();
    decoder
        .frame(
            Frame {
                event: "response.output_text.delta",
                data: r#"{"output_index":0,"delta":"x"}"#,
            },
            &mut out,
        )
        .unwrap();
    assert_eq!(out[1], StreamEvent::TextDelta { delta: "x".into() });
}

#[test]
fn nothing_follows_the_finish() {
    let decoded = decode_lines(&[
        created(),
        completed("completed", json!({})),
        json!({"type": "response.output_text.delta", "output_index": 0, "delta": "late"}),
    ]);
    let events = decoded.ok();
    assert!(matches!(events.last(), Some(StreamEvent::Finish { .. })));
}

#[test]
fn non_streaming_failures() {
    let mut decoder = WireDecoder::new();
    let error = decoder
        .body(
            r#"{"id":"r","status":"failed","output":[],"error":{"code":"server_error","message":"x"}}"#,
            &mut Vec::new(),
        )
        .unwrap_err();
    assert_eq!(error.message, "server_error: x");

    let mut decoder = WireDecoder::new();
    let error = decoder
        .body(
            r#"{"id":"r","status":"queued","output":[]}"#,
            &mut Vec::new(),
        )
        .unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::Protocol);
    assert!(error.message.contains("queued"), "{}", error.message);
}

// ---------------------------------------------------------------------------------------------
// Request building

fn image_request() -> ModelRequest {
    ModelRequest {
        system: Some("You describe images.".into()),
        ..ModelRequest::new(
            "gpt-4o",
            vec![Message::User(UserMessage {
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
                            url: "https://example.com/cat.jpg".into(),
                        },
                    },
                ],
            })],
        )
    }
}

#[test]
fn request_system_user_text_and_images() {
    let body = body_of(&backend(), &image_request());
    snapshot("request_system_user_text_and_images", &body);
    // A non-reasoning model is not asked for encrypted reasoning (it would reject the request).
    assert!(body.get("include").is_none());
    assert_eq!(body["store"], false);
    assert_eq!(body["stream"], true);
}

fn weather_tool() -> ToolSpec {
    ToolSpec::new(
        "get_weather",
        "Current weather for a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
}

/// A user turn, a reasoning model's turn with reasoning, text and two parallel calls, their
/// results (one failed), then a second turn with a refusal and a final answer.
fn history_request() -> ModelRequest {
    let first = AssistantMessage {
        content: vec![
            AssistantBlock::Thinking(Thinking {
                thinking: "**Checking both cities**\n\nI should call the tool twice.".into(),
                signature: Some("gAAAAAB-encrypted-1".into()),
                redacted: false,
                id: Some("rs_1".into()),
            }),
            AssistantBlock::Text {
                text: "Let me check both.".into(),
            },
            AssistantBlock::ToolCall(ToolCall::new(
                "call_a",
                "get_weather",
                json!({"city": "Paris"}),
            )),
            AssistantBlock::ToolCall(ToolCall::new(
                "call_b",
                "get_weather",
                json!({"city": "Tokyo"}),
            )),
        ],
        stop_reason: Some(StopReason::ToolCalls),
        ..AssistantMessage::default()
    };
    let second = AssistantMessage {
        content: vec![
            // Reasoning with no summary: only the encrypted content goes back.
            AssistantBlock::Thinking(Thinking {
                thinking: String::new(),
                signature: Some("gAAAAAB-encrypted-2".into()),
                redacted: false,
                id: Some("rs_2".into()),
            }),
            AssistantBlock::Text {
                text: "Paris is sunny; Tokyo could not be reached.".into(),
            },
        ],
        stop_reason: Some(StopReason::Stop),
        ..AssistantMessage::default()
    };
    let refused = AssistantMessage {
        content: vec![AssistantBlock::Refusal {
            text: "I can't help with that.".into(),
        }],
        stop_reason: Some(StopReason::ContentFilter),
        ..AssistantMessage::default()
    };
    ModelRequest {
        system: Some("You are a weather assistant.".into()),
        tools: vec![weather_tool()],
        ..ModelRequest::new(
            "gpt-5",
            vec![
                Message::user("Weather in Paris and Tokyo?"),
                first.into(),
                ToolResult::ok("call_a", "get_weather", r#"{"sky":"sunny"}"#).into(),
                ToolResult::error("call_b", "get_weather", "timed out after 10 s").into(),
                second.into(),
                Message::system("Answer in one sentence from now on."),
                Message::user("Now do something forbidden."),
                refused.into(),
                Message::user("Fine. Thanks!"),
            ],
        )
    }
}

#[test]
fn request_multi_round_history() {
    let body = body_of(&backend(), &history_request());
    snapshot("request_multi_round_history", &body);
    let input = body["input"].as_array().unwrap();
    let types: Vec<&str> = input
        .iter()
        .map(|item| item["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "message",
            "reasoning",
            "message",
            "function_call",
            "function_call",
            "function_call_output",
            "function_call_output",
            "reasoning",
            "message",
            "message",
            "message",
            "message",
            "message",
        ]
    );
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
}

#[test]
fn request_tools_choice_and_settings() {
    let request = ModelRequest {
        tools: vec![
            weather_tool(),
            ToolSpec::new(
                "get_time",
                "The time in a timezone.",
                json!({"type": "object"}),
            ),
        ],
        tool_choice: ToolChoice::Tool {
            name: "get_weather".into(),
        },
        settings: GenerationSettings {
            max_output_tokens: Some(2048),
            temperature: Some(0.5),
            top_p: Some(0.9),
            stop_sequences: Vec::new(),
            reasoning: Some(Reasoning {
                effort: Some(ReasoningEffort::High),
                budget_tokens: None,
            }),
            parallel_tool_calls: Some(false),
        },
        extras: json!({"service_tier": "flex", "store": true, "metadata": {"run": "7"}})
            .as_object()
            .cloned()
            .unwrap(),
        stream: false,
        ..ModelRequest::new("my-deployment", vec![Message::user("Weather in Oslo?")])
    };
    let backend = backend().with_prompt_cache_key("weather-v1");
    let body = body_of(&backend, &request);
    snapshot("request_tools_choice_and_settings", &body);
    // The caller's `store` replaces ours: one key, the caller's value.
    let text = String::from_utf8(backend.prepare(&request).unwrap().body.to_vec()).unwrap();
    assert_eq!(text.matches("\"store\"").count(), 1);
    assert_eq!(body["store"], true);
    assert!(body.get("stream").is_none());
}

#[test]
fn tool_choice_modes() {
    let mut request = ModelRequest {
        tools: vec![weather_tool()],
        ..ModelRequest::new("gpt-4o", vec![Message::user("hi")])
    };
    for (choice, wire) in [
        (ToolChoice::Auto, json!("auto")),
        (ToolChoice::None, json!("none")),
        (ToolChoice::Required, json!("required")),
    ] {
        request.tool_choice = choice;
        assert_eq!(body_of(&backend(), &request)["tool_choice"], wire);
    }
}

#[test]
fn reasoning_budget_picks_an_effort() {
    let mut request = ModelRequest::new("o3", vec![Message::user("hi")]);
    for (budget, effort) in [
        (0, "minimal"),
        (1_000, "minimal"),
        (2_000, "low"),
        (8_000, "medium"),
        (32_000, "high"),
    ] {
        request.settings.reasoning = Some(Reasoning {
            effort: None,
            budget_tokens: Some(budget),
        });
        let body = body_of(&backend(), &request);
        assert_eq!(
            body["reasoning"],
            json!({"effort": effort, "summary": "auto"}),
            "{budget}"
        );
    }
}

#[test]
fn encrypted_reasoning_is_asked_for_only_where_it_works() {
    let plain = ModelRequest::new("gpt-4.1", vec![Message::user("hi")]);
    assert!(body_of(&backend(), &plain).get("include").is_none());
    let forced = backend().with_encrypted_reasoning(true);
    assert_eq!(
        body_of(&forced, &plain)["include"],
        json!(["reasoning.encrypted_content"])
    );
    let reasoning = ModelRequest::new("o4-mini", vec![Message::user("hi")]);
    assert_eq!(
        body_of(&backend(), &reasoning)["include"],
        json!(["reasoning.encrypted_content"])
    );
    let off = backend().with_encrypted_reasoning(false);
    assert!(body_of(&off, &reasoning).get("include").is_none());
}

#[test]
fn reasoning_that_cannot_be_sent_back_is_left_out() {
    let foreign = AssistantMessage {
        content: vec![
            // Anthropic thinking: a signature but no item id.
            AssistantBlock::Thinking(Thinking {
                thinking: "hmm".into(),
                signature: Some("anthropic-signature".into()),
                redacted: false,
                id: None,
            }),
            AssistantBlock::Thinking(Thinking {
                thinking: String::new(),
                signature: Some("opaque".into()),
                redacted: true,
                id: None,
            }),
            // Ours, but without encrypted content (asked for none).
            AssistantBlock::Thinking(Thinking {
                thinking: "summary".into(),
                signature: Some(String::new()),
                redacted: false,
                id: Some("rs_9".into()),
            }),
            AssistantBlock::Text {
                text: "Done.".into(),
            },
        ],
        ..AssistantMessage::default()
    };
    let request = ModelRequest::new("gpt-4o", vec![Message::user("hi"), foreign.into()]);
    let body = body_of(&backend(), &request);
    let types: Vec<&str> = body["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["message", "message"]);

    // With stored responses, the id alone is enough.
    let stored = backend().with_store(true);
    let body = body_of(&stored, &request);
    assert_eq!(
        body["input"][1],
        json!({"type": "reasoning", "id": "rs_9",
            "summary": [{"type": "summary_text", "text": "summary"}]})
    );
}

#[test]
fn invalid_arguments_go_back_as_the_model_wrote_them() {
    let mut call = ToolCall::new("call_1", "f", Value::String("{\"a\": 1".into()));
    call.invalid_arguments = true;
    let assistant = AssistantMessage {
        content: vec![AssistantBlock::ToolCall(call)],
        ..AssistantMessage::default()
    };
    let request = ModelRequest::new("gpt-4o", vec![Message::user("hi"), assistant.into()]);
    let body = body_of(&backend(), &request);
    assert_eq!(body["input"][1]["arguments"], "{\"a\": 1");
}

#[test]
fn what_the_api_cannot_express_is_refused_before_sending() {
    let mut request = ModelRequest::new("gpt-4o", vec![Message::user("hi")]);
    request.settings.stop_sequences = vec!["END".into()];
    let error = backend().prepare(&request).unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::Unsupported);
    assert!(
        error.message.contains("stop sequences"),
        "{}",
        error.message
    );

    let mut request = ModelRequest::new("gpt-4o", vec![Message::user("hi")]);
    request.tool_choice = ToolChoice::Required;
    let error = backend().prepare(&request).unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::InvalidRequest);

    request.tools = vec![weather_tool()];
    request.tool_choice = ToolChoice::Tool {
        name: "get_time".into(),
    };
    let error = backend().prepare(&request).unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::InvalidRequest);
    assert!(error.message.contains("get_time"), "{}", error.message);
}

#[test]
fn url_and_headers() {
    let request = ModelRequest::new("gpt-4o", vec![Message::user("hi")]);
    let prepared = backend().prepare(&request).unwrap();
    assert_eq!(prepared.url, "https://api.openai.com/v1/responses");
    let auth = prepared.headers.get("authorization").unwrap();
    assert_eq!(auth, "Bearer sk-test");
    assert!(auth.is_sensitive());
    assert_eq!(
        prepared.headers.get("content-type").unwrap(),
        "application/json"
    );

    let local = OpenAiResponses::new("").with_base_url("http://localhost:8080/v1/");
    let prepared = local.prepare(&request).unwrap();
    assert_eq!(prepared.url, "http://localhost:8080/v1/responses");
    assert!(prepared.headers.get("authorization").is_none());
}

// ---------------------------------------------------------------------------------------------
// Agreement with the requests the recorded clients sent

fn recorded_request(name: &str) -> Value {
    serde_json::from_slice(&fixture(name)).unwrap()
}

fn keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys
}

#[test]
fn function_call_history_matches_the_recorded_client() {
    // text.request.json: a user turn, two parallel calls and their results.
    let recorded = recorded_request("text.request.json");
    let tool = &recorded["tools"][0];
    let assistant = AssistantMessage {
        content: vec![
            AssistantBlock::ToolCall(ToolCall::new(
                "call_LWVp74L5HaH2KNvgVz9PJsrj",
                "get_location",
                json!({"loc_name": "Londos"}),
            )),
            AssistantBlock::ToolCall(ToolCall::new(
                "call_YnRAWeTyxI91m5uNa5bxXwVO",
                "get_location",
                json!({"loc_name": "London"}),
            )),
        ],
        ..AssistantMessage::default()
    };
    let request = ModelRequest {
        tools: vec![ToolSpec::new(
            "get_location",
            "",
            tool["parameters"].clone(),
        )],
        stream: false,
        ..ModelRequest::new(
            "gpt-4o",
            vec![
                Message::user("What is the location of Londos and London?"),
                assistant.into(),
                ToolResult::ok(
                    "call_LWVp74L5HaH2KNvgVz9PJsrj",
                    "get_location",
                    "Wrong location, I only know about \"London\".\n\nFix the errors and try again.",
                )
                .into(),
                ToolResult::ok("call_YnRAWeTyxI91m5uNa5bxXwVO", "get_location", "{\"lat\": 51, \"lng\": 0}")
                    .into(),
            ],
        )
    };
    let body = body_of(&backend(), &request);
    // The call and result items are the recorded ones, field for field (the recorded client
    // also sent an empty assistant message, which we leave out).
    let recorded_items = recorded["input"].as_array().unwrap();
    let ours = body["input"].as_array().unwrap();
    assert_eq!(ours[1..], recorded_items[2..]);
    // The tool has the recorded fields, flat; only `strict` differs, deliberately.
    let ours_tool = &body["tools"][0];
    assert_eq!(keys(ours_tool), keys(tool));
    assert_eq!(ours_tool["name"], tool["name"]);
    assert_eq!(ours_tool["type"], "function");
    assert_eq!(ours_tool["parameters"], tool["parameters"]);
    assert_eq!(ours_tool["strict"], false);
    assert_eq!(body["tool_choice"], recorded["tool_choice"]);
    assert_eq!(body["model"], recorded["model"]);
}

#[test]
fn user_message_matches_the_recorded_client() {
    let recorded = recorded_request("incomplete-max-output-tokens.request.json");
    let request = ModelRequest {
        system: Some("You are a storyteller.".into()),
        settings: GenerationSettings {
            max_output_tokens: Some(16),
            ..GenerationSettings::default()
        },
        stream: false,
        ..ModelRequest::new(
            "gpt-4o",
            vec![Message::user(
                "Write a story of at least 150 words about a lighthouse keeper.",
            )],
        )
    };
    let body = body_of(&backend(), &request);
    for key in ["input", "instructions", "max_output_tokens", "model"] {
        assert_eq!(body[key], recorded[key], "{key}");
    }
}

#[test]
fn reasoning_settings_match_the_recorded_client() {
    let recorded = recorded_request("stream-reasoning-function-call.request.json");
    let request = ModelRequest {
        tools: vec![ToolSpec::new(
            "final_result",
            "The final response which ends this conversation",
            recorded["tools"][0]["parameters"].clone(),
        )],
        tool_choice: ToolChoice::Required,
        settings: GenerationSettings {
            reasoning: Some(Reasoning {
                effort: Some(ReasoningEffort::Low),
                budget_tokens: None,
            }),
            ..GenerationSettings::default()
        },
        ..ModelRequest::new("gpt-5", vec![Message::user("Calculate 100 * 200 / 3")])
    };
    let body = body_of(&backend(), &request);
    for key in ["include", "tool_choice", "stream", "model"] {
        assert_eq!(body[key], recorded[key], "{key}");
    }
    assert_eq!(keys(&body["reasoning"]), keys(&recorded["reasoning"]));
    assert_eq!(body["reasoning"]["effort"], "low");
    assert_eq!(body["reasoning"]["summary"], "auto");
    assert_eq!(keys(&body["tools"][0]), keys(&recorded["tools"][0]));
}

#[test]
fn prompt_cache_key_matches_the_recorded_client() {
    let recorded = recorded_request("cached-tokens.request.json");
    let key = recorded["prompt_cache_key"].as_str().unwrap();
    let request = ModelRequest::new("gpt-5.6-sol", vec![Message::user("Reply with exactly: OK")]);
    let body = body_of(&backend().with_prompt_cache_key(key), &request);
    assert_eq!(body["prompt_cache_key"], recorded["prompt_cache_key"]);
    assert_eq!(body["include"], recorded["include"]);
}

// ---------------------------------------------------------------------------------------------
// Round trips: what a response produced goes back unchanged

#[test]
fn reasoning_and_calls_from_a_stream_go_back_unchanged() {
    let message = sse("stream-reasoning-function-call.sse").message();
    let call_id = message.tool_calls().next().unwrap().id.clone();
    let request = ModelRequest::new(
        "gpt-5",
        vec![
            Message::user("Calculate 100 * 200 / 3"),
            message.into(),
            ToolResult::ok(call_id, "final_result", "ok").into(),
        ],
    );
    let body = body_of(&backend(), &request);
    let (id, encrypted) = recorded_reasoning("stream-reasoning-function-call.sse");
    assert_eq!(
        body["input"][1],
        json!({"type": "reasoning", "id": id, "encrypted_content": encrypted, "summary": []})
    );
    // The reasoning item comes before the function call it led to.
    assert_eq!(
        body["input"][2],
        json!({"type": "function_call", "call_id": "call_CWXgs68YprAjp6t0371hiPOI",
            "name": "final_result", "arguments": "{\"result\":6666}"})
    );
    assert_eq!(
        body["input"][3],
        json!({"type": "function_call_output", "call_id": "call_CWXgs68YprAjp6t0371hiPOI",
            "output": "ok"})
    );
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
}

#[test]
fn a_reasoning_summary_goes_back_with_its_item() {
    let message = sse("stream-reasoning-summary-text.sse").message();
    let thinking = thinking_blocks(&message)[0].thinking.clone();
    let answer = message.text_content();
    let request = ModelRequest::new(
        "o3-mini",
        vec![
            Message::user("How do I cross the street?"),
            message.into(),
            Message::user("Thanks"),
        ],
    );
    let body = body_of(&backend(), &request);
    let (id, encrypted) = recorded_reasoning("stream-reasoning-summary-text.sse");
    assert_eq!(
        body["input"][1],
        json!({"type": "reasoning", "id": id, "encrypted_content": encrypted,
            "summary": [{"type": "summary_text", "text": thinking}]})
    );
    assert_eq!(
        body["input"][2],
        json!({"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": answer}]})
    );
}

#[test]
fn a_message_survives_json_and_goes_back_the_same() {
    // Sessions are stored as JSON: the encrypted reasoning must survive that too.
    let message = sse("stream-reasoning-function-call.sse").message();
    let stored = serde_json::to_string(&message).unwrap();
    let restored: AssistantMessage = serde_json::from_str(&stored).unwrap();
    let before = ModelRequest::new("gpt-5", vec![message.into()]);
    let after = ModelRequest::new("gpt-5", vec![restored.into()]);
    assert_eq!(body_of(&backend(), &before), body_of(&backend(), &after));
}

// ---------------------------------------------------------------------------------------------
// Over HTTP: the real driver and client against a loopback server

#[cfg(feature = "replay")]
mod loopback {
    use agent_types::{Backend, BackendErrorKind, Message, ModelRequest, StreamEvent};
    use futures_util::StreamExt;

    use super::{QUOTA, fixture, json_body, sse};
    use crate::http::RetryPolicy;
    use crate::openai_responses::OpenAiResponses;
    use crate::replay::{Cassette, Chunking, ReplayServer};

    async fn call(
        cassette: Cassette,
        stream: bool,
    ) -> (
        Vec<StreamEvent>,
        Option<agent_types::BackendError>,
        ReplayServer,
    ) {
        let server = ReplayServer::start([cassette]).await.unwrap();
        let backend = OpenAiResponses::new("sk-loopback")
            .with_base_url(format!("{}/v1", server.url()))
            .with_retry(RetryPolicy::none());
        let mut request = ModelRequest::new("gpt-5", vec![Message::user("hi")]);
        request.stream = stream;
        let mut events = Vec::new();
        let mut error = None;
        let mut calls = backend.stream(&request);
        while let Some(item) = calls.next().await {
            match item {
                Ok(event) => events.push(event),
                Err(failure) => error = Some(failure),
            }
        }
        drop(calls);
        (events, error, server)
    }

    #[tokio::test]
    async fn every_recording_over_http_gives_the_decoder_events() {
        for name in [
            "stream-text.sse",
            "stream-function-call.sse",
            "stream-reasoning-summary-text.sse",
            "stream-reasoning-function-call.sse",
        ] {
            let cassette = Cassette::new(200, "text/event-stream", fixture(name))
                .with_chunking(Chunking::Every(5));
            let (events, error, server) = call(cassette, true).await;
            assert_eq!(error, None, "{name}");
            assert_eq!(events, sse(name).events, "{name}");
            let requests = server.requests();
            assert_eq!(requests[0].path, "/v1/responses");
            assert_eq!(
                requests[0].header("authorization"),
                Some("Bearer sk-loopback")
            );
            assert_eq!(requests[0].json().unwrap()["stream"], true);
        }
        for name in [
            "text.json",
            "parallel-function-calls.json",
            "cached-tokens.json",
            "incomplete-max-output-tokens.json",
            "refusal.json",
        ] {
            let cassette = Cassette::new(200, "application/json", fixture(name));
            let (events, error, _server) = call(cassette, false).await;
            assert_eq!(error, None, "{name}");
            assert_eq!(events, json_body(name).events, "{name}");
        }
    }

    #[tokio::test]
    async fn errors_over_http() {
        let cassette = Cassette::new(
            429,
            "application/json",
            fixture("error-insufficient-quota.json"),
        );
        let (events, error, _server) = call(cassette, true).await;
        assert!(events.is_empty());
        let error = error.unwrap();
        assert_eq!(error.message, QUOTA);
        assert_eq!(error.kind, BackendErrorKind::QuotaExceeded);
        assert_eq!(error.status, Some(429));

        let cassette = Cassette::new(
            200,
            "text/event-stream",
            fixture("stream-failed-insufficient-quota.sse"),
        );
        let (events, error, _server) = call(cassette, true).await;
        // Nothing but the start had come, which the driver holds back: no events reached us.
        assert!(events.is_empty(), "{events:?}");
        let error = error.unwrap();
        assert_eq!(error.message, QUOTA);
        assert!(!error.is_retryable());

        // A stream cut before `response.completed` is an error carrying what had arrived.
        let bytes = fixture("stream-text.sse");
        let cassette =
            Cassette::new(200, "text/event-stream", bytes.clone()).cut_after(bytes.len() / 2);
        let (_events, error, _server) = call(cassette, true).await;
        let error = error.unwrap();
        let partial = error.partial.unwrap();
        assert!(
            partial.text_content().starts_with("The capital"),
            "{partial:?}"
        );
    }
}

#[test]
fn request_native_structured_output() {
    let request = ModelRequest {
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
        ..ModelRequest::new("gpt-5-mini", vec![Message::user("Weather in Oslo?")])
    };
    let body = body_of(&backend(), &request);
    snapshot("request_native_structured_output", &body);
    assert_eq!(body["text"]["format"]["type"], "json_schema");
    assert_eq!(body["text"]["format"]["strict"], true);

    // `text` in extras replaces ours.
    let mut request = request;
    request
        .extras
        .insert("text".into(), json!({"format": {"type": "json_object"}}));
    assert_eq!(
        body_of(&backend(), &request)["text"],
        json!({"format": {"type": "json_object"}})
    );
    let plain = ModelRequest::new("gpt-5-mini", vec![Message::user("x")]);
    assert!(body_of(&backend(), &plain).get("text").is_none());
}

/// A non-streaming body given inline.
fn decode_body(body: &Value) -> Decoded {
    let text = body.to_string();
    let mut decoder = WireDecoder::new();
    let mut events = Vec::new();
    let error = decoder
        .body(&text, &mut events)
        .and_then(|()| decoder.end(&mut events))
        .err();
    Decoded { events, error }
}

#[test]
fn output_items_and_parts_agentry_cannot_carry_are_refused_by_name() {
    let image = json!({"type": "image_generation_call", "id": "ig_1", "status": "completed",
        "result": "iVBORw0KGgo="});
    let message = |part: Value| {
        json!({"type": "message", "id": "msg_1", "role": "assistant", "content": [
            {"type": "output_text", "text": "Here", "annotations": []}, part]})
    };
    let cases = [
        (
            image.clone(),
            "an output item of type `image_generation_call`",
        ),
        (
            json!({"type": "code_interpreter_call", "id": "ci_1", "code": "print(1)"}),
            "an output item of type `code_interpreter_call`",
        ),
        (
            json!({"type": "brand_new_item", "id": "x_1"}),
            "an output item of type `brand_new_item`",
        ),
        (
            message(json!({"type": "output_audio", "data": "UklGRg=="})),
            "a message part of type `output_audio`",
        ),
    ];
    for (item, named) in cases {
        let expect = |decoded: Decoded, how: &str| {
            let error = decoded
                .error
                .unwrap_or_else(|| panic!("{how}: {named}: no error"));
            assert_eq!(error.kind, BackendErrorKind::Unsupported, "{how}: {error}");
            assert!(
                error
                    .message
                    .starts_with(&format!("OpenAI Responses answered with {named}")),
                "{how}: {error}"
            );
            assert!(
                !decoded
                    .events
                    .iter()
                    .any(|event| matches!(event, StreamEvent::Finish { .. })),
                "{how}: finished"
            );
        };
        // Non-streaming: the response object's output list.
        expect(
            decode_body(&json!({"id": "resp_1", "status": "completed", "output": [item.clone()]})),
            "body",
        );
        // Streamed: announced then finished (the part check runs on the finished message,
        // since its text already streamed as deltas).
        expect(
            decode_lines(&[
                created(),
                json!({"type": "response.output_text.delta", "output_index": 0, "item_id": "msg_1",
                    "delta": "Here"}),
                json!({"type": "response.output_item.done", "output_index": 0, "item": item.clone()}),
                completed("completed", json!({})),
            ]),
            "done",
        );
        // Streamed by a server that puts the output only in `response.completed`.
        expect(
            decode_lines(&[created(), completed("completed", json!({"output": [item]}))]),
            "completed",
        );
    }
    // An announced item is refused at once.
    let decoded = decode_lines(&[
        created(),
        json!({"type": "response.output_item.added", "output_index": 0, "item": image}),
    ]);
    assert_eq!(
        decoded.error.map(|error| error.kind),
        Some(BackendErrorKind::Unsupported)
    );
}

#[test]
fn hosted_search_items_are_skipped_in_a_whole_body() {
    let decoded = decode_body(&json!({"id": "resp_1", "status": "completed", "output": [
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"query": "x"}},
        {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["x"]},
        {"type": "message", "id": "msg_1", "content": [
            {"type": "output_text", "text": "Found it.", "annotations": [{"type": "url_citation"}]}]}
    ]}));
    let message = decoded.message();
    decoded.ok();
    assert_eq!(message.text_content(), "Found it.");
}

#[test]
fn request_strict_tool() {
    let strict = ToolSpec::new(
        "get_weather",
        "Current weather for a city.",
        json!({"type": "object", "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["c", "f"]}
        }, "required": ["city"]}),
    )
    .with_strict(true);
    let request = ModelRequest {
        tools: vec![
            strict.clone(),
            ToolSpec::new("get_time", "The time.", json!({"type": "object"})),
        ],
        ..ModelRequest::new("gpt-4.1", vec![Message::user("Weather in Oslo?")])
    };
    let body = body_of(&backend(), &request);
    assert_eq!(body["tools"][0]["strict"], json!(true));
    assert_eq!(
        body["tools"][0]["parameters"],
        agent_types::strict_schema(&strict.parameters)
    );
    // Not strict: `strict: false` as always, the schema as written.
    assert_eq!(body["tools"][1]["strict"], json!(false));
    assert_eq!(body["tools"][1]["parameters"], json!({"type": "object"}));
    snapshot("request_strict_tool", &body);
}

// Issue 16: the event type is read from where OpenAI writes it (first) without a second parse
// of the event. Every recording decodes to the same events when each event's `type` is moved
// to the end, where only the full parse finds it.
#[test]
fn the_type_read_up_front_decodes_as_the_full_parse_does() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/providers/openai-responses");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("sse") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        let mut moved = 0;
        let reordered: String = text
            .split_inclusive('\n')
            .map(|line| {
                let Some(json) = line.trim_end().strip_prefix("data: ") else {
                    return line.to_owned();
                };
                let Some(rest) = json.strip_prefix(r#"{"type":""#) else {
                    return line.to_owned();
                };
                let end = rest.find('"').unwrap();
                let kind = &rest[..end];
                // `,` and the other members, then the closing brace.
                let Some(members) = rest[end + 1..].strip_prefix(',') else {
                    return line.to_owned();
                };
                let members = members.strip_suffix('}').unwrap();
                moved += 1;
                let line = format!("data: {{{members},\"type\":\"{kind}\"}}\n");
                assert_eq!(super::decode::leading_type(&line[6..]), None);
                line
            })
            .collect();
        assert!(
            moved > 0,
            "{}: no event starts with its type",
            path.display()
        );
        let fast = decode_sse(&bytes, 4096);
        let slow = decode_sse(reordered.as_bytes(), 4096);
        assert_eq!(fast, slow, "{}", path.display());
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} recordings");
}

#[test]
fn the_leading_type_is_read_only_from_the_plain_layout() {
    use super::decode::leading_type;
    assert_eq!(
        leading_type(r#"{"type":"response.output_text.delta","delta":"a"}"#),
        Some("response.output_text.delta")
    );
    assert_eq!(leading_type(r#"{ "type":"x"}"#), None);
    assert_eq!(leading_type(r#"{"type":"a\"b","x":1}"#), None);
    assert_eq!(leading_type(r#"{"type":"unterminated"#), None);
    assert_eq!(leading_type(r#"{"delta":"a","type":"x"}"#), None);
}

// Issue 16: the tools array is serialized once per tool set and spliced into each body; the
// bytes are those of a body built without the backend's cache.
#[test]
fn the_cached_tools_array_sends_the_bytes_of_one_built_from_scratch() {
    let registry = [
        ToolSpec::new(
            "get_weather",
            "Weather for a city.",
            json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        ),
        ToolSpec::new("clock", "The time.", json!({"type": "object"})).with_strict(true),
    ];
    let request = |tools: &[ToolSpec]| {
        let mut request = ModelRequest::new("gpt-5", vec![Message::user("x")]);
        request.tools = tools.to_vec();
        request
    };
    let fresh = |request: &ModelRequest| {
        super::request::body(
            request,
            super::request::Settings {
                store: false,
                encrypted_reasoning: None,
                prompt_cache_key: None,
                tools: None,
            },
        )
        .unwrap()
    };
    let backend = backend();
    for tools in [&registry[..], &registry[..], &registry[..1], &registry[..]] {
        let request = request(tools);
        assert_eq!(
            &backend.prepare(&request).unwrap().body[..],
            &fresh(&request)[..]
        );
    }
}
