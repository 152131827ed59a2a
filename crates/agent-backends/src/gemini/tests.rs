//! Gemini: every recorded response through the decoder, request bodies, errors.

use std::time::Duration;

use agent_types::{
    AssistantBlock, AssistantMessage, BackendError, BackendErrorKind, GenerationSettings,
    ImageSource, Message, MessageAssembler, ModelRequest, Reasoning, ReasoningEffort, StopReason,
    StreamEvent, Thinking, ToolCall, ToolChoice, ToolResult, ToolSpec, Usage, UserBlock,
    UserMessage,
};
use serde_json::{Value, json};

use super::decode::WireDecoder;
use super::{GENERATED_ID_PREFIX, Gemini};
use crate::framing::{JsonArrayParser, SseParser};
use crate::http::driver::{Decoder, Frame, Protocol};

macro_rules! fixture {
    ($name:literal) => {
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/providers/gemini/",
            $name
        ))
        .expect(concat!("fixture ", $name))
    };
}

/// How a recorded body is framed.
#[derive(Debug, Clone, Copy)]
enum Framing {
    /// `alt=sse`.
    Sse,
    /// `streamGenerateContent` without `alt=sse`.
    Array,
    /// A `generateContent` body.
    Whole,
}

/// Decodes `body` fed in `chunk`-byte pieces through the framing parser and the decoder.
fn decode(body: &[u8], framing: Framing, chunk: usize) -> Result<Vec<StreamEvent>, BackendError> {
    let mut decoder = WireDecoder::default();
    let mut out = Vec::new();
    match framing {
        Framing::Sse => {
            let mut parser = SseParser::new();
            for piece in body.chunks(chunk) {
                parser.feed(piece, &mut |event| {
                    decoder.frame(
                        Frame {
                            event: event.event,
                            data: event.data,
                        },
                        &mut out,
                    )
                })?;
            }
            parser.finish(&mut |event| {
                decoder.frame(
                    Frame {
                        event: event.event,
                        data: event.data,
                    },
                    &mut out,
                )
            })?;
        }
        Framing::Array => {
            let mut parser = JsonArrayParser::new();
            for piece in body.chunks(chunk) {
                parser.feed(piece, &mut |element| {
                    decoder.frame(
                        Frame {
                            event: "",
                            data: element,
                        },
                        &mut out,
                    )
                })?;
            }
            parser.finish()?;
        }
        Framing::Whole => {
            let text = std::str::from_utf8(body).expect("UTF-8 body");
            decoder.body(text, &mut out)?;
        }
    }
    decoder.end(&mut out)?;
    Ok(out)
}

/// Decodes in one piece and byte by byte, asserts both give the same events, and returns them.
fn decode_both_ways(body: &[u8], framing: Framing) -> Vec<StreamEvent> {
    let whole = decode(body, framing, body.len().max(1)).expect("decodes in one piece");
    let bytewise = decode(body, framing, 1).expect("decodes byte by byte");
    assert_eq!(whole, bytewise, "1-byte chunks change the events");
    whole
}

fn assemble(events: &[StreamEvent]) -> AssistantMessage {
    let mut assembler = MessageAssembler::new(false);
    for event in events {
        assembler.push(event.clone()).expect("events in order");
    }
    assembler.finish()
}

fn thinking_text(message: &AssistantMessage) -> String {
    message
        .content
        .iter()
        .filter_map(|block| match block {
            AssistantBlock::Thinking(thinking) => Some(thinking.thinking.as_str()),
            _ => None,
        })
        .collect()
}

/// What SOURCES.md says a recording holds.
struct Expected {
    text_start: &'static str,
    text_chars: usize,
    thinking_chars: usize,
    calls: &'static [(&'static str, &'static str)],
    stop: StopReason,
    usage: Usage,
}

fn usage(
    input: u64,
    output: Option<u64>,
    cache_read: Option<u64>,
    reasoning: Option<u64>,
) -> Usage {
    Usage {
        input_tokens: Some(input),
        output_tokens: output,
        cache_read_tokens: cache_read,
        reasoning_tokens: reasoning,
        ..Usage::default()
    }
}

fn check(body: &[u8], framing: Framing, expected: &Expected) -> AssistantMessage {
    let events = decode_both_ways(body, framing);
    assert!(
        matches!(events.first(), Some(StreamEvent::MessageStart { .. })),
        "{events:?}"
    );
    let finishes = events
        .iter()
        .filter(|event| matches!(event, StreamEvent::Finish { .. }))
        .count();
    assert_eq!(finishes, 1);
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
    assert_eq!(
        thinking_text(&message).chars().count(),
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
    assert_eq!(message.usage, Some(expected.usage));
    message
}

#[test]
fn text_stop_sequence() {
    check(
        &fixture!("text-stop-sequence.json"),
        Framing::Whole,
        &Expected {
            text_start: "The most iconic city in France is ",
            text_chars: 34,
            thinking_chars: 0,
            calls: &[],
            stop: StopReason::Stop,
            usage: usage(25, Some(8), None, None),
        },
    );
}

#[test]
fn max_tokens_is_length() {
    check(
        &fixture!("max-tokens.json"),
        Framing::Whole,
        &Expected {
            text_start: "The capital of France is",
            text_chars: 24,
            thinking_chars: 0,
            calls: &[],
            stop: StopReason::Length,
            usage: usage(15, Some(5), None, None),
        },
    );
}

#[test]
fn a_safety_block_without_parts_is_a_content_filter() {
    let message = check(
        &fixture!("safety-blocked.json"),
        Framing::Whole,
        &Expected {
            text_start: "",
            text_chars: 0,
            thinking_chars: 0,
            calls: &[],
            stop: StopReason::ContentFilter,
            // candidatesTokenCount is absent: output stays unknown, not 0.
            usage: usage(14, None, None, None),
        },
    );
    assert!(message.content.is_empty());
}

#[test]
fn parallel_function_calls_with_empty_arguments() {
    let body = fixture!("parallel-function-calls-empty-args.json");
    let message = check(
        &body,
        Framing::Whole,
        &Expected {
            text_start: "",
            text_chars: 0,
            thinking_chars: 0,
            calls: &[
                ("generate_topic", "{}"),
                ("generate_topic", "{}"),
                ("generate_topic", "{}"),
            ],
            stop: StopReason::ToolCalls,
            // Output = candidates 30 + thoughts 190.
            usage: usage(83, Some(220), None, Some(190)),
        },
    );
    let calls: Vec<&ToolCall> = message.tool_calls().collect();
    // Gemini gave no ids: ours are unique within the response and name it.
    assert_eq!(calls[0].id.as_str(), "gemini_call_wOd8abGuO5rgz7IP5tLEGA_0");
    assert_eq!(calls[2].id.as_str(), "gemini_call_wOd8abGuO5rgz7IP5tLEGA_2");
    // Only the first of parallel calls carries the thought signature.
    assert!(
        calls[0]
            .signature
            .as_deref()
            .is_some_and(|s| s.starts_with("Es8FCswFAXLI2nx"))
    );
    assert_eq!(calls[1].signature, None);
    assert_eq!(calls[2].signature, None);
}

#[test]
fn thinking_parts_and_a_signed_text_part() {
    let message = check(
        &fixture!("thinking.json"),
        Framing::Whole,
        &Expected {
            text_start: "Crossing the street safely is a fundamental skill that requi",
            text_chars: 3017,
            thinking_chars: 2238,
            calls: &[],
            stop: StopReason::Stop,
            usage: usage(29, Some(736 + 1001), None, Some(1001)),
        },
    );
    // The text part's signature closes the reasoning block that precedes the text.
    match &message.content[..] {
        [
            AssistantBlock::Thinking(thinking),
            AssistantBlock::Text { .. },
        ] => {
            assert!(
                thinking
                    .signature
                    .as_deref()
                    .is_some_and(|s| s.starts_with("EqoeCqceAdHtim"))
            );
        }
        other => panic!("unexpected blocks {other:?}"),
    }
}

#[test]
fn cached_content_counts_as_a_cache_read() {
    let events = decode_both_ways(&fixture!("cached-content.json"), Framing::Whole);
    assert_eq!(
        events[0],
        StreamEvent::MessageStart {
            id: Some("_VQYaqvRGbW6qtsPg4TDoAg".into()),
            model: Some("gemini-2.5-flash".into()),
        }
    );
    check(
        &fixture!("cached-content.json"),
        Framing::Whole,
        &Expected {
            text_start: "Paris.",
            text_chars: 6,
            thinking_chars: 0,
            calls: &[],
            stop: StopReason::Stop,
            usage: usage(3520, Some(2 + 42), Some(3512), Some(42)),
        },
    );
}

#[test]
fn sse_text_with_crlf_separators() {
    let events = decode_both_ways(&fixture!("stream-text.sse"), Framing::Sse);
    let deltas: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::TextDelta { delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["The", " capital of France", " is Paris.\n"]);
    check(
        &fixture!("stream-text.sse"),
        Framing::Sse,
        &Expected {
            text_start: "The capital of France is Paris.\n",
            text_chars: 32,
            thinking_chars: 0,
            calls: &[],
            stop: StopReason::Stop,
            // The last report wins: the prompt count drops from 15 to 13 at the end.
            usage: usage(13, Some(8), None, None),
        },
    );
}

#[test]
fn sse_function_call() {
    check(
        &fixture!("stream-function-call.sse"),
        Framing::Sse,
        &Expected {
            text_start: "",
            text_chars: 0,
            thinking_chars: 0,
            calls: &[("get_capital", r#"{"country":"France"}"#)],
            stop: StopReason::ToolCalls,
            usage: usage(52, Some(5), None, None),
        },
    );
}

#[test]
fn sse_thinking_then_text() {
    check(
        &fixture!("stream-thinking.sse"),
        Framing::Sse,
        &Expected {
            text_start: "This is a great question! Safely crossing the street is all ",
            text_chars: 1938,
            thinking_chars: 1575,
            calls: &[],
            stop: StopReason::Stop,
            usage: usage(34, Some(469 + 787), None, Some(787)),
        },
    );
}

#[test]
fn sse_function_call_with_a_thought_signature() {
    let message = check(
        &fixture!("stream-function-call-thought-signature.sse"),
        Framing::Sse,
        &Expected {
            text_start: "",
            text_chars: 0,
            thinking_chars: 0,
            calls: &[("get_country", "{}")],
            stop: StopReason::ToolCalls,
            usage: usage(29, Some(10 + 202), None, Some(202)),
        },
    );
    let call = message.tool_calls().next().expect("a call");
    assert!(
        call.signature
            .as_deref()
            .is_some_and(|s| s.starts_with("EpwICpkIAXLI2nx"))
    );
    // The trailing empty text part adds no block.
    assert_eq!(message.content.len(), 1);
}

#[test]
fn json_array_stream_thinking_then_text() {
    let message = check(
        &fixture!("stream-array-thinking.json"),
        Framing::Array,
        &Expected {
            text_start: "Scoop",
            text_chars: 5,
            thinking_chars: 275,
            calls: &[],
            stop: StopReason::Stop,
            usage: usage(11, Some(2 + 291), None, Some(291)),
        },
    );
    // The signature came on a trailing empty text part: a signed, empty reasoning block.
    match &message.content[..] {
        [
            AssistantBlock::Thinking(thought),
            AssistantBlock::Text { text },
            AssistantBlock::Thinking(signed),
        ] => {
            assert_eq!(thought.signature, None);
            assert_eq!(text, "Scoop");
            assert!(signed.thinking.is_empty());
            assert!(
                signed
                    .signature
                    .as_deref()
                    .is_some_and(|s| s.starts_with("Eq0JCqoJARFN"))
            );
        }
        other => panic!("unexpected blocks {other:?}"),
    }
}

#[test]
fn json_array_stream_function_call() {
    check(
        &fixture!("stream-array-function-call.json"),
        Framing::Array,
        &Expected {
            text_start: "",
            text_chars: 0,
            thinking_chars: 236,
            calls: &[("pelican_name_generator", "{}")],
            stop: StopReason::ToolCalls,
            usage: usage(32, Some(12 + 42), None, Some(42)),
        },
    );
}

#[test]
fn a_json_array_body_read_whole_decodes_the_same() {
    let body = fixture!("stream-array-function-call.json");
    let streamed = decode(&body, Framing::Array, 7).expect("streamed");
    let whole = decode(&body, Framing::Whole, body.len()).expect("whole");
    assert_eq!(streamed, whole);
}

// ---------------------------------------------------------------------------------------------
// Errors

fn http_error(status: u16, body: &[u8]) -> BackendError {
    let mut error = Gemini::new("key").error(status, body);
    error.status = Some(status);
    error
}

#[test]
fn error_400_invalid_argument() {
    let error = http_error(400, &fixture!("error-400-invalid-argument.json"));
    assert_eq!(
        error.message,
        "400 INVALID_ARGUMENT: Cannot fetch content from the provided URL. Please ensure the URL \
         is valid and accessible by Vertex AI. Vertex AI respects robots.txt rules, so confirm \
         the URL is allowed to be crawled. Status: URL_ROBOTED-ROBOTED_DENIED"
    );
    assert_eq!(error.kind, BackendErrorKind::InvalidRequest);
    assert!(!error.is_retryable());
    assert_eq!(error.retry_after, None);
}

#[test]
fn error_404_not_found() {
    let error = http_error(404, &fixture!("error-404-not-found.json"));
    assert_eq!(
        error.message,
        "404 NOT_FOUND: models/gemini-3.6-flahs is not found for API version v1beta, or is not \
         supported for generateContent. Call ModelService.ListModels to see the list of \
         available models and their supported methods."
    );
    assert_eq!(error.kind, BackendErrorKind::InvalidRequest);
    assert!(!error.is_retryable());
}

#[test]
fn error_429_reads_the_retry_delay() {
    let error = http_error(429, &fixture!("error-429-resource-exhausted.json"));
    assert_eq!(
        error.message,
        "429 RESOURCE_EXHAUSTED: You exceeded your current quota, please check your plan and \
         billing details. For more information on this error, head to: \
         https://ai.google.dev/gemini-api/docs/rate-limits."
    );
    assert_eq!(error.kind, BackendErrorKind::RateLimited);
    assert!(error.is_retryable());
    assert_eq!(error.retry_after, Some(Duration::from_secs(22)));
}

#[test]
fn error_kinds_from_the_status_name() {
    let body = |code: u16, status: &str, extra: Value| {
        let mut error = json!({"error": {"code": code, "message": "m", "status": status}});
        if let Value::Object(extra) = extra {
            for (key, value) in extra {
                error["error"][key] = value;
            }
        }
        serde_json::to_vec(&error).expect("json")
    };
    let overloaded = http_error(503, &body(503, "UNAVAILABLE", json!({})));
    assert_eq!(overloaded.kind, BackendErrorKind::Overloaded);
    assert_eq!(overloaded.message, "503 UNAVAILABLE: m");
    let key = http_error(
        400,
        &body(
            400,
            "INVALID_ARGUMENT",
            json!({"details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                                "reason": "API_KEY_INVALID"}]}),
        ),
    );
    assert_eq!(key.kind, BackendErrorKind::Authentication);
    let denied = http_error(403, &body(403, "PERMISSION_DENIED", json!({})));
    assert_eq!(denied.kind, BackendErrorKind::Authentication);
    let internal = http_error(500, &body(500, "INTERNAL", json!({})));
    assert_eq!(internal.kind, BackendErrorKind::Server);
    // The JSON-array endpoint wraps its errors in an array.
    let wrapped = http_error(
        429,
        br#"[{"error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED",
              "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                           "retryDelay": "1.5s"}]}}]"#,
    );
    assert_eq!(wrapped.message, "429 RESOURCE_EXHAUSTED: slow down");
    assert_eq!(wrapped.retry_after, Some(Duration::from_millis(1500)));
    // Not Gemini's JSON at all: the shared description of the body.
    let html = http_error(502, b"<html><title>Bad Gateway</title></html>");
    assert_eq!(html.kind, BackendErrorKind::Server);
    assert!(html.message.contains("HTML page"), "{html}");
}

/// Found by fuzzing (`tests/fuzz.rs`): a `retryDelay` too long for a `Duration` panicked in
/// `Duration::from_secs_f64`; it is now no delay at all, like a malformed one.
#[test]
fn a_retry_delay_too_long_for_a_duration_is_ignored() {
    for delay in [
        json!("1e30s"),
        json!("18446744073709551616s"),
        json!({"seconds": 1e300}),
    ] {
        let body = format!(
            r#"{{"error": {{"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED",
                "details": [{{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                             "retryDelay": {delay}}}]}}}}"#
        );
        let error = http_error(429, body.as_bytes());
        assert_eq!(error.kind, BackendErrorKind::RateLimited, "{delay}");
        assert_eq!(error.retry_after, None, "{delay}");
    }
}

#[test]
fn an_error_inside_a_stream_is_returned_with_its_kind() {
    let body = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Par\"}]}}]}\r\n\r\n\
                data: {\"error\": {\"code\": 503, \"message\": \"The model is overloaded.\", \
                \"status\": \"UNAVAILABLE\"}}\r\n\r\n";
    let mut decoder = WireDecoder::default();
    let mut out = Vec::new();
    let mut parser = SseParser::new();
    let error = parser
        .feed(body.as_bytes(), &mut |event| {
            decoder.frame(
                Frame {
                    event: event.event,
                    data: event.data,
                },
                &mut out,
            )
        })
        .expect_err("an in-band error");
    assert_eq!(error.message, "503 UNAVAILABLE: The model is overloaded.");
    assert_eq!(error.kind, BackendErrorKind::Overloaded);
    // What came before the error was delivered.
    assert!(out.contains(&StreamEvent::TextDelta {
        delta: "Par".into()
    }));
}

#[test]
fn malformed_chunks_and_unusable_finishes_are_errors() {
    let error = decode(b"data: {\"candidates\": [\n\n", Framing::Sse, 3).expect_err("bad JSON");
    assert_eq!(error.kind, BackendErrorKind::Protocol);
    assert!(error.message.contains("GenerateContentResponse"), "{error}");

    let malformed =
        br#"{"candidates": [{"content": {"parts": []}, "finishReason": "MALFORMED_FUNCTION_CALL",
        "finishMessage": "Malformed function call: print(x"}]}"#;
    let error = decode(malformed, Framing::Whole, 0).expect_err("unusable output");
    assert_eq!(error.kind, BackendErrorKind::Server);
    assert_eq!(
        error.message,
        "Gemini ended the response with MALFORMED_FUNCTION_CALL: Malformed function call: print(x"
    );
    assert!(error.is_retryable());
}

#[test]
fn a_blocked_prompt_is_a_content_filter() {
    let body = br#"{"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
                    "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9}}"#;
    let events = decode(body, Framing::Whole, body.len()).expect("decodes");
    assert_eq!(
        events.last(),
        Some(&StreamEvent::Finish {
            stop_reason: StopReason::ContentFilter
        })
    );
}

#[test]
fn text_before_a_safety_stop_is_kept() {
    let body = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Once upon\"}]}}]}\n\n\
                data: {\"candidates\": [{\"finishReason\": \"SAFETY\"}]}\n\n";
    let events = decode(body.as_bytes(), Framing::Sse, 5).expect("decodes");
    let message = assemble(&events);
    assert_eq!(message.text_content(), "Once upon");
    assert_eq!(message.stop_reason, Some(StopReason::ContentFilter));
}

#[test]
fn a_stream_without_a_finish_reason_does_not_finish() {
    // Cut off: the driver reports the early end (with the partial message).
    let body = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Hel\"}]}}]}\n\n";
    let events = decode(body.as_bytes(), Framing::Sse, 4).expect("decodes");
    assert!(
        !events
            .iter()
            .any(|event| matches!(event, StreamEvent::Finish { .. }))
    );
}

#[test]
fn provider_call_ids_are_kept_and_named_events_skipped() {
    let body = "event: ping\ndata: {}\n\n\
                data: {\"responseId\": \"r1\", \"candidates\": [{\"content\": {\"parts\": [\
                {\"functionCall\": {\"id\": \"fc-77\", \"name\": \"a\", \"args\": {\"x\": 1}}},\
                {\"functionCall\": {\"name\": \"b\"}}]}, \"finishReason\": \"STOP\"}]}\n\n";
    let events = decode(body.as_bytes(), Framing::Sse, 9).expect("decodes");
    let message = assemble(&events);
    let ids: Vec<&str> = message.tool_calls().map(|call| call.id.as_str()).collect();
    assert_eq!(ids, ["fc-77", "gemini_call_r1_1"]);
    assert_eq!(message.stop_reason, Some(StopReason::ToolCalls));
}

#[test]
fn media_and_code_execution_parts_are_refused_by_name_never_dropped() {
    // An image-generation model answers with a picture among text parts; code execution
    // answers with the code and its output. None of it fits an assistant message.
    let cases = [
        (
            r#"{"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}"#,
            "an inlineData part (image/png)",
        ),
        (
            r#"{"fileData": {"mimeType": "application/pdf", "fileUri": "gs://b/a.pdf"}}"#,
            "a fileData part (application/pdf)",
        ),
        (
            r#"{"executableCode": {"language": "PYTHON", "code": "print(1)"}}"#,
            "an executableCode part",
        ),
        (
            r#"{"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1"}}"#,
            "a codeExecutionResult part",
        ),
        (
            r#"{"brandNewPart": {"x": 1}, "thought": false}"#,
            "a part of a kind agentry does not know (fields `brandNewPart`)",
        ),
    ];
    for (part, named) in cases {
        let whole = format!(
            r#"{{"candidates": [{{"content": {{"role": "model", "parts": [{{"text": "Here it is:"}}, {part}]}},
                "finishReason": "STOP"}}]}}"#
        );
        let sse = format!(
            "data: {{\"candidates\": [{{\"content\": {{\"parts\": [{{\"text\": \"Here\"}}]}}}}]}}\n\n\
             data: {{\"candidates\": [{{\"content\": {{\"parts\": [{part}]}}, \"finishReason\": \"STOP\"}}]}}\n\n"
        );
        let array = format!("[{whole}]");
        for (body, framing) in [
            (whole.as_str(), Framing::Whole),
            (sse.as_str(), Framing::Sse),
            (array.as_str(), Framing::Array),
            (array.as_str(), Framing::Whole),
        ] {
            let error = decode(body.as_bytes(), framing, 7).expect_err(named);
            assert_eq!(error.kind, BackendErrorKind::Unsupported, "{error}");
            assert!(
                error
                    .message
                    .starts_with(&format!("Gemini answered with {named}")),
                "{framing:?}: {error}"
            );
            assert!(!error.is_retryable());
        }
    }
}

#[test]
fn empty_and_metadata_only_parts_are_not_content() {
    // A part with nothing in it (or only metadata) loses nothing when skipped.
    let body = br#"{"candidates": [{"content": {"parts": [{}, {"text": "ok"}, {"thought": false}]},
                    "finishReason": "STOP"}]}"#;
    let events = decode(body, Framing::Whole, 0).expect("decodes");
    assert_eq!(assemble(&events).text_content(), "ok");
}

// ---------------------------------------------------------------------------------------------
// Requests

fn body_json(backend: &Gemini, request: &ModelRequest) -> Value {
    let prepared = backend.prepare(request).expect("prepares");
    serde_json::from_slice(&prepared.body).expect("JSON body")
}

fn body_of(request: &ModelRequest) -> Value {
    body_json(&Gemini::new("key"), request)
}

/// Snapshots live in `src/snapshots/`, next to the other adapters'.
fn snapshot(name: &str, value: &Value) {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("../snapshots");
    settings.set_sort_maps(true);
    settings.bind(|| insta::assert_json_snapshot!(name, value));
}

#[test]
fn urls_and_headers() {
    let backend = Gemini::new("secret");
    let mut request = ModelRequest::new("gemini-2.5-flash", vec![Message::user("Hi")]);
    let prepared = backend.prepare(&request).expect("prepares");
    assert_eq!(
        prepared.url,
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    let key = prepared.headers.get("x-goog-api-key").expect("key header");
    assert_eq!(key, "secret");
    assert!(key.is_sensitive());
    assert_eq!(
        prepared.headers.get("content-type").map(|v| v.as_bytes()),
        Some(&b"application/json"[..])
    );

    let array = backend
        .clone()
        .with_sse(false)
        .prepare(&request)
        .expect("prepares");
    assert!(
        array
            .url
            .ends_with("/models/gemini-2.5-flash:streamGenerateContent")
    );

    request.stream = false;
    request.model = "tunedModels/my-model".into();
    let once = backend
        .clone()
        .with_base_url("http://localhost:9/v1beta/")
        .prepare(&request)
        .expect("prepares");
    assert_eq!(
        once.url,
        "http://localhost:9/v1beta/tunedModels/my-model:generateContent"
    );

    let keyless = Gemini::new("").prepare(&request).expect("prepares");
    assert!(keyless.headers.get("x-goog-api-key").is_none());

    request.model = " ".into();
    let error = backend.prepare(&request).expect_err("no model");
    assert_eq!(error.kind, BackendErrorKind::InvalidRequest);
}

#[test]
fn request_system_user_text_and_images() {
    let request = ModelRequest {
        system: Some("You are a careful assistant.".into()),
        messages: vec![
            Message::system("Today is Tuesday."),
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
                            url: "https://example.com/cat.JPG?size=large".into(),
                        },
                    },
                    UserBlock::Image {
                        source: ImageSource::Url {
                            url: "data:image/webp;base64,UklGRg==".into(),
                        },
                    },
                    UserBlock::Image {
                        source: ImageSource::Url {
                            url: "gs://bucket/scan".into(),
                        },
                    },
                ],
            }),
        ],
        ..ModelRequest::new("gemini-2.5-flash", Vec::new())
    };
    snapshot("request_system_user_text_and_images", &body_of(&request));
}

/// A history with every kind of block: reasoning with signatures, parallel calls (one with a
/// Gemini id, one with an id the adapter made), results out of order, an error result.
fn multi_round_history() -> Vec<Message> {
    vec![
        Message::user("Weather in Paris and Rome? Then pick the warmer."),
        Message::Assistant(AssistantMessage {
            content: vec![
                AssistantBlock::Thinking(Thinking {
                    thinking: "Two cities: call the tool for each.".into(),
                    signature: None,
                    redacted: false,
                    id: None,
                }),
                AssistantBlock::Thinking(Thinking {
                    thinking: String::new(),
                    signature: Some("SIG-TEXT".into()),
                    redacted: false,
                    id: None,
                }),
                AssistantBlock::Text {
                    text: "Checking both.".into(),
                },
                AssistantBlock::ToolCall(ToolCall {
                    signature: Some("SIG-CALL".into()),
                    ..ToolCall::new("fc-1", "get_weather", json!({"city": "Paris"}))
                }),
                AssistantBlock::ToolCall(ToolCall::new(
                    format!("{GENERATED_ID_PREFIX}resp_1"),
                    "get_weather",
                    json!({"city": "Rome"}),
                )),
            ],
            stop_reason: Some(StopReason::ToolCalls),
            ..AssistantMessage::default()
        }),
        // Results in the other order than the calls; one failed, one has no name.
        Message::Tool(ToolResult::error(
            format!("{GENERATED_ID_PREFIX}resp_1"),
            "get_weather",
            "timeout after 10s",
        )),
        Message::Tool(ToolResult::ok(
            "fc-1",
            "",
            r#"{"temp_c": 21, "sky": "clear"}"#,
        )),
        Message::Assistant(AssistantMessage {
            content: vec![
                AssistantBlock::Text {
                    text: "Paris is 21°C; Rome did not answer.".into(),
                },
                AssistantBlock::Thinking(Thinking {
                    thinking: String::new(),
                    signature: Some("SIG-TRAILING".into()),
                    redacted: false,
                    id: None,
                }),
                // Another provider's redacted reasoning: not Gemini's to read.
                AssistantBlock::Thinking(Thinking {
                    thinking: String::new(),
                    signature: Some("opaque".into()),
                    redacted: true,
                    id: None,
                }),
            ],
            stop_reason: Some(StopReason::Stop),
            ..AssistantMessage::default()
        }),
        // A turn with only unsigned reasoning has nothing to send.
        Message::Assistant(AssistantMessage {
            content: vec![AssistantBlock::Thinking(Thinking {
                thinking: "hmm".into(),
                ..Thinking::default()
            })],
            ..AssistantMessage::default()
        }),
        Message::user("Try Rome again, please."),
        Message::Tool(ToolResult::ok(
            "orphan",
            "lookup",
            "not json, and truncated…",
        )),
    ]
}

#[test]
fn request_multi_round_history() {
    let request = ModelRequest::new("gemini-3-pro-preview", multi_round_history());
    let body = body_of(&request);
    // The shape that matters, spelled out (the snapshot has the rest).
    assert_eq!(
        body["contents"][1]["parts"],
        json!([
            {"text": "Checking both.", "thoughtSignature": "SIG-TEXT"},
            {"functionCall": {"id": "fc-1", "name": "get_weather", "args": {"city": "Paris"}},
             "thoughtSignature": "SIG-CALL"},
            {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}}
        ])
    );
    assert_eq!(
        body["contents"][2]["parts"],
        json!([
            {"functionResponse": {"id": "fc-1", "name": "get_weather",
                                  "response": {"result": {"temp_c": 21, "sky": "clear"}}}},
            {"functionResponse": {"name": "get_weather",
                                  "response": {"error": "timeout after 10s"}}}
        ])
    );
    snapshot("request_multi_round_history", &body);
}

#[test]
fn request_tools_tool_choice_and_settings() {
    let mut extras = serde_json::Map::new();
    extras.insert(
        "safetySettings".into(),
        json!([{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]),
    );
    extras.insert(
        "generationConfig".into(),
        json!({"seed": 7, "responseModalities": ["TEXT"]}),
    );
    let request = ModelRequest {
        tools: vec![
            ToolSpec::new(
                "get_weather",
                "Current weather for a city.",
                json!({
                    "$schema": "http://json-schema.org/draft-07/schema#",
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {
                        "city": {"type": "string", "description": "City name"},
                        "unit": {"anyOf": [{"type": "string", "enum": ["c", "f"]},
                                           {"type": "null"}], "default": null}
                    },
                    "required": ["city"]
                }),
            ),
            ToolSpec::new("now", "The current time.", json!({})),
        ],
        tool_choice: ToolChoice::Tool {
            name: "get_weather".into(),
        },
        settings: GenerationSettings {
            max_output_tokens: Some(1024),
            temperature: Some(0.2),
            top_p: Some(0.9),
            stop_sequences: vec!["END".into()],
            reasoning: Some(Reasoning {
                effort: None,
                budget_tokens: Some(2048),
            }),
            parallel_tool_calls: None,
        },
        extras,
        ..ModelRequest::new("gemini-2.5-pro", vec![Message::user("Weather in Oslo?")])
    };
    snapshot("request_tools_tool_choice_and_settings", &body_of(&request));
}

#[test]
fn tool_choice_modes() {
    let tools = vec![ToolSpec::new("a", "A", json!({"type": "object"}))];
    let config = |choice: ToolChoice, tools: Vec<ToolSpec>| {
        let request = ModelRequest {
            tools,
            tool_choice: choice,
            ..ModelRequest::new("gemini-2.5-flash", vec![Message::user("x")])
        };
        Gemini::new("k").prepare(&request).map(|prepared| {
            let body: Value = serde_json::from_slice(&prepared.body).expect("json");
            body.get("toolConfig").cloned()
        })
    };
    assert_eq!(config(ToolChoice::Auto, tools.clone()).expect("ok"), None);
    assert_eq!(
        config(ToolChoice::None, tools.clone()).expect("ok"),
        Some(json!({"functionCallingConfig": {"mode": "NONE"}}))
    );
    assert_eq!(
        config(ToolChoice::Required, tools.clone()).expect("ok"),
        Some(json!({"functionCallingConfig": {"mode": "ANY"}}))
    );
    assert_eq!(config(ToolChoice::None, Vec::new()).expect("ok"), None);
    let missing =
        config(ToolChoice::Tool { name: "b".into() }, tools.clone()).expect_err("unknown tool");
    assert_eq!(missing.kind, BackendErrorKind::InvalidRequest);
    let nothing = config(ToolChoice::Required, Vec::new()).expect_err("no tools");
    assert_eq!(nothing.kind, BackendErrorKind::InvalidRequest);
}

#[test]
fn reasoning_settings() {
    let thinking = |model: &str, reasoning: Reasoning| {
        let request = ModelRequest {
            settings: GenerationSettings {
                reasoning: Some(reasoning),
                ..GenerationSettings::default()
            },
            ..ModelRequest::new(model, vec![Message::user("x")])
        };
        body_of(&request)["generationConfig"]["thinkingConfig"].clone()
    };
    let effort = |effort| Reasoning {
        effort: Some(effort),
        budget_tokens: None,
    };
    assert_eq!(
        thinking("gemini-3-pro-preview", effort(ReasoningEffort::High)),
        json!({"thinkingLevel": "high", "includeThoughts": true})
    );
    assert_eq!(
        thinking("models/gemini-2.5-flash", effort(ReasoningEffort::Low)),
        json!({"thinkingBudget": 1024, "includeThoughts": true})
    );
    assert_eq!(
        thinking(
            "gemini-2.5-flash",
            Reasoning {
                effort: Some(ReasoningEffort::High),
                budget_tokens: Some(0)
            }
        ),
        json!({"thinkingBudget": 0, "includeThoughts": false})
    );
    assert_eq!(
        thinking("gemini-3-flash", Reasoning::default()),
        json!({"includeThoughts": true})
    );
}

#[test]
fn settings_gemini_cannot_express_are_refused() {
    let request = ModelRequest {
        settings: GenerationSettings {
            parallel_tool_calls: Some(false),
            ..GenerationSettings::default()
        },
        ..ModelRequest::new("gemini-2.5-flash", vec![Message::user("x")])
    };
    let error = Gemini::new("k").prepare(&request).expect_err("unsupported");
    assert_eq!(error.kind, BackendErrorKind::Unsupported);

    let colliding = |key: &str, value: Value| {
        let mut request = ModelRequest {
            settings: GenerationSettings {
                temperature: Some(0.5),
                ..GenerationSettings::default()
            },
            ..ModelRequest::new("gemini-2.5-flash", vec![Message::user("x")])
        };
        request.extras.insert(key.into(), value);
        Gemini::new("k").prepare(&request).map(|_| ())
    };
    let error = colliding("contents", json!([])).expect_err("collision");
    assert_eq!(error.kind, BackendErrorKind::InvalidRequest);
    assert!(error.message.contains("`contents`"), "{error}");
    let error = colliding("generationConfig", json!({"temperature": 1})).expect_err("collision");
    assert!(
        error.message.contains("generationConfig.temperature"),
        "{error}"
    );
    assert!(colliding("generationConfig", json!(3)).is_err());
    colliding("generationConfig", json!({"topK": 3})).expect("no collision");

    let bad_data_url = ModelRequest::new(
        "gemini-2.5-flash",
        vec![Message::User(UserMessage {
            content: vec![UserBlock::Image {
                source: ImageSource::Url {
                    url: "data:image/png,rawbytes".into(),
                },
            }],
        })],
    );
    let error = Gemini::new("k")
        .prepare(&bad_data_url)
        .expect_err("not base64");
    assert_eq!(error.kind, BackendErrorKind::InvalidRequest);
}

/// The fields we send agree with what real clients sent in the recordings (names and nesting).
#[test]
fn fields_agree_with_recorded_requests() {
    let recorded = |bytes: Vec<u8>| -> Value { serde_json::from_slice(&bytes).expect("json") };

    // stream-text: system instruction, a user turn, temperature.
    let request = ModelRequest {
        system: Some("You are a helpful chatbot.".into()),
        settings: GenerationSettings {
            temperature: Some(0.0),
            ..GenerationSettings::default()
        },
        ..ModelRequest::new(
            "gemini-2.0-flash-exp",
            vec![Message::user("What is the capital of France?")],
        )
    };
    let ours = body_of(&request);
    let theirs = recorded(fixture!("stream-text.request.json"));
    assert_eq!(ours["contents"], theirs["contents"]);
    assert_eq!(ours["generationConfig"], theirs["generationConfig"]);
    assert_eq!(
        ours["systemInstruction"]["parts"],
        theirs["systemInstruction"]["parts"]
    );

    // text-stop-sequence: stopSequences.
    let request = ModelRequest {
        settings: GenerationSettings {
            stop_sequences: vec!["Paris".into()],
            ..GenerationSettings::default()
        },
        ..ModelRequest::new(
            "gemini-1.5-flash",
            vec![Message::user(
                "What is the capital of France? Give me an answer that contains the word \"Paris\", but is not the first word.",
            )],
        )
    };
    let theirs = recorded(fixture!("text-stop-sequence.request.json"));
    assert_eq!(body_of(&request), theirs);

    // stream-function-call: functionDeclarations with OpenAPI-style parameters.
    let city = |what: &str, name: &str| {
        json!({"type": "object", "properties": {name: {"type": "string", "description": what}},
               "required": [name]})
    };
    let request = ModelRequest {
        system: Some("You are a helpful chatbot.".into()),
        tools: vec![
            ToolSpec::new(
                "get_capital",
                "Get the capital of a country.",
                city("The country name.", "country"),
            ),
            ToolSpec::new(
                "get_temperature",
                "Get the temperature in a city.",
                city("The city name.", "city"),
            ),
        ],
        ..ModelRequest::new(
            "gemini-2.0-flash-exp",
            vec![Message::user(
                "What is the temperature of the capital of France?",
            )],
        )
    };
    let theirs = recorded(fixture!("stream-function-call.request.json"));
    assert_eq!(body_of(&request)["tools"], theirs["tools"]);

    // max-tokens: maxOutputTokens, and a zero thinking budget.
    let request = ModelRequest {
        settings: GenerationSettings {
            max_output_tokens: Some(5),
            reasoning: Some(Reasoning {
                effort: None,
                budget_tokens: Some(0),
            }),
            ..GenerationSettings::default()
        },
        ..ModelRequest::new("gemini-2.5-flash", vec![Message::user("x")])
    };
    let theirs = recorded(fixture!("max-tokens.request.json"));
    let ours = body_of(&request);
    assert_eq!(
        ours["generationConfig"]["maxOutputTokens"],
        theirs["generationConfig"]["maxOutputTokens"]
    );
    // The recording spells the budget in snake case, which Gemini also accepts.
    assert_eq!(
        ours["generationConfig"]["thinkingConfig"]["thinkingBudget"],
        theirs["generationConfig"]["thinkingConfig"]["thinking_budget"]
    );
}

/// The parts of the recorded responses that a history sends back: thought parts dropped, empty
/// unsigned text dropped, consecutive text merged unless a signature starts a new part.
fn replayable_parts(body: &[u8], framing: Framing) -> Vec<Value> {
    let responses: Vec<Value> = match framing {
        Framing::Whole => vec![serde_json::from_slice(body).expect("json")],
        Framing::Array => serde_json::from_slice(body).expect("json array"),
        Framing::Sse => std::str::from_utf8(body)
            .expect("utf-8")
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(|data| serde_json::from_str(data).expect("json"))
            .collect(),
    };
    let mut parts: Vec<Value> = Vec::new();
    for response in responses {
        let Some(chunk) = response["candidates"][0]["content"]["parts"].as_array() else {
            continue;
        };
        for part in chunk {
            if part["thought"] == json!(true) {
                continue;
            }
            let signed = part.get("thoughtSignature").is_some();
            if let Some(text) = part["text"].as_str() {
                if text.is_empty() && !signed {
                    continue;
                }
                if !signed
                    && let Some(last) = parts.last_mut()
                    && let Some(previous) = last["text"].as_str()
                {
                    last["text"] = Value::String(format!("{previous}{text}"));
                    continue;
                }
            }
            let mut part = part.clone();
            // Ids the adapter made up are not sent; Gemini gave none in these recordings.
            if let Some(call) = part.get_mut("functionCall").and_then(Value::as_object_mut) {
                call.remove("id");
            }
            parts.push(part);
        }
    }
    parts
}

/// A message assembled from a recording, put back into a history, is sent with every
/// signature where Gemini put it, and nothing else changed.
#[test]
fn round_trip_keeps_every_thought_signature() {
    let recordings: [(&str, Vec<u8>, Framing); 8] = [
        ("thinking.json", fixture!("thinking.json"), Framing::Whole),
        (
            "parallel-function-calls-empty-args.json",
            fixture!("parallel-function-calls-empty-args.json"),
            Framing::Whole,
        ),
        (
            "cached-content.json",
            fixture!("cached-content.json"),
            Framing::Whole,
        ),
        (
            "stream-array-thinking.json",
            fixture!("stream-array-thinking.json"),
            Framing::Array,
        ),
        (
            "stream-array-function-call.json",
            fixture!("stream-array-function-call.json"),
            Framing::Array,
        ),
        (
            "stream-function-call-thought-signature.sse",
            fixture!("stream-function-call-thought-signature.sse"),
            Framing::Sse,
        ),
        (
            "stream-thinking.sse",
            fixture!("stream-thinking.sse"),
            Framing::Sse,
        ),
        (
            "stream-function-call.sse",
            fixture!("stream-function-call.sse"),
            Framing::Sse,
        ),
    ];
    for (name, body, framing) in recordings {
        let message = assemble(&decode(&body, framing, 11).expect(name));
        let mut history = vec![
            Message::user("question"),
            Message::Assistant(message.clone()),
        ];
        for call in message.tool_calls() {
            history.push(Message::Tool(ToolResult::ok(
                call.id.clone(),
                call.name.clone(),
                "\"done\"",
            )));
        }
        let body_sent = body_of(&ModelRequest::new("gemini-3-pro-preview", history));
        assert_eq!(
            body_sent["contents"][1]["role"], "model",
            "{name}: the model turn"
        );
        assert_eq!(
            body_sent["contents"][1]["parts"],
            Value::Array(replayable_parts(&body, framing)),
            "{name}: the model turn as sent back"
        );
        let responses = body_sent["contents"][2]["parts"]
            .as_array()
            .map_or(0, Vec::len);
        assert_eq!(
            responses,
            message.tool_calls().count(),
            "{name}: one response per call"
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
        ..ModelRequest::new("gemini-2.5-flash", vec![Message::user("Weather in Oslo?")])
    };
    let body = body_of(&request);
    snapshot("request_native_structured_output", &body);
    let config = &body["generationConfig"];
    assert_eq!(config["responseMimeType"], "application/json");
    // The schema in Gemini's dialect: `["string", "null"]` is a nullable STRING, and
    // `additionalProperties` (which Gemini rejects) is gone.
    assert_eq!(
        config["responseSchema"]["properties"]["note"],
        json!({"type": "STRING", "nullable": true})
    );
    assert!(
        config["responseSchema"]
            .get("additionalProperties")
            .is_none()
    );

    // The same key in `extras.generationConfig` is refused, naming it.
    let mut colliding = request;
    colliding.extras.insert(
        "generationConfig".into(),
        json!({"responseMimeType": "text/plain"}),
    );
    let error = super::request::body(&colliding).unwrap_err();
    assert!(
        error.message.contains("responseMimeType"),
        "{}",
        error.message
    );
    let plain = ModelRequest::new("gemini-2.5-flash", vec![Message::user("x")]);
    assert!(body_of(&plain).get("generationConfig").is_none());
}
