//! Request building, response decoding and error mapping of the Bedrock adapter.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agent_types::{Message, ModelRequest, Reasoning, ToolSpec};
use serde_json::json;

use super::*;

fn body(backend: &Bedrock, request: &ModelRequest) -> serde_json::Value {
    let prepared = backend.prepare(request).unwrap();
    serde_json::from_slice(&prepared.body).unwrap()
}

#[test]
fn the_model_id_is_percent_encoded_into_the_url() {
    let backend = Bedrock::new("us-east-1");
    let mut request = ModelRequest::new("us.amazon.nova-micro-v1:0", vec![Message::user("Hi")]);
    request.stream = false;
    assert_eq!(
        backend.prepare(&request).unwrap().url,
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/us.amazon.nova-micro-v1%3A0/converse"
    );
    request.model = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.x".into();
    request.stream = true;
    assert_eq!(
        backend.prepare(&request).unwrap().url,
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.x/converse-stream"
    );
    assert_eq!(
        region_of("https://bedrock-runtime.eu-west-3.amazonaws.com"),
        Some("eu-west-3")
    );
    assert_eq!(region_of("http://127.0.0.1:9"), None);
}

#[test]
fn cache_points_follow_the_two_breakpoint_layout() {
    let backend = Bedrock::new("us-east-1").with_cache(CacheTtl::FiveMinutes);
    let mut request = ModelRequest::new(
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        vec![
            Message::user("first"),
            Message::system("it is noon"),
            Message::user("second"),
        ],
    );
    request.tools = vec![
        ToolSpec::new("zeta", "z", json!({"type": "object"})),
        ToolSpec::new("alpha", "a", json!({"type": "object"})),
    ];
    // Without a system prompt the prefix point closes the (sorted) tools.
    let sent = body(&backend, &request);
    let tools = &sent["toolConfig"]["tools"];
    assert_eq!(tools[0]["toolSpec"]["name"], "alpha");
    assert_eq!(tools[2], json!({"cachePoint": {"type": "default"}}));
    let last = sent["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    assert_eq!(
        last.as_array().unwrap().last().unwrap(),
        &json!({"cachePoint": {"type": "default"}})
    );
    assert!(last.to_string().contains("<system-reminder>\\nit is noon"));
    // With one, the prefix point follows the system prompt; exactly two points in all.
    request.system = Some("static".into());
    let sent = body(&backend.with_cache(CacheTtl::OneHour), &request);
    assert_eq!(
        sent["system"][1],
        json!({"cachePoint": {"type": "default", "ttl": "1h"}})
    );
    assert_eq!(sent.to_string().matches("cachePoint").count(), 2);
}

#[test]
fn thinking_goes_to_claude_only_and_needs_room() {
    let backend = Bedrock::new("us-east-1");
    let mut request = ModelRequest::new(
        "anthropic.claude-3-7-sonnet-20250219-v1:0",
        vec![Message::user("Hi")],
    );
    request.settings.reasoning = Some(Reasoning {
        effort: None,
        budget_tokens: Some(2048),
    });
    let sent = body(&backend, &request);
    assert_eq!(
        sent["additionalModelRequestFields"]["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert_eq!(sent["inferenceConfig"]["maxTokens"], 2048 + 4096);
    request.settings.max_output_tokens = Some(1024);
    assert_eq!(
        backend.prepare(&request).unwrap_err().kind,
        BackendErrorKind::InvalidRequest
    );
    request.settings.max_output_tokens = None;
    request.model = "us.amazon.nova-micro-v1:0".into();
    assert_eq!(
        backend.prepare(&request).unwrap_err().kind,
        BackendErrorKind::Unsupported
    );
}

#[test]
fn http_errors_map_by_status_and_type() {
    let backend = Bedrock::new("us-east-1");
    let throttled = backend.error(
        429,
        br#"{"message":"Too many requests, please wait before trying again."}"#,
    );
    assert_eq!(throttled.kind, BackendErrorKind::RateLimited);
    assert!(throttled.is_retryable());
    let invalid = backend.error(
        400,
        br#"{"message":"The provided model identifier is invalid."}"#,
    );
    assert_eq!(invalid.kind, BackendErrorKind::InvalidRequest);
    assert_eq!(invalid.message, "The provided model identifier is invalid.");
    let typed = backend.error(
        400,
        br#"{"__type":"com.amazonaws#ThrottlingException","message":"slow"}"#,
    );
    assert_eq!(typed.kind, BackendErrorKind::RateLimited);
    assert_eq!(typed.message, "ThrottlingException: slow");
    let unavailable = backend.error(503, br#"{"message":"busy"}"#);
    assert!(unavailable.is_retryable());
}

fn event(kind: &str, payload: serde_json::Value) -> Vec<u8> {
    crate::framing::encode_message(
        &[
            (":event-type", kind),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.to_string().as_bytes(),
    )
}

fn exception(kind: &str, message: &str) -> Vec<u8> {
    crate::framing::encode_message(
        &[(":exception-type", kind), (":message-type", "exception")],
        json!({ "message": message }).to_string().as_bytes(),
    )
}

fn decode_stream(body: &[u8]) -> Result<Vec<agent_types::StreamEvent>, BackendError> {
    let request = ModelRequest::new("m", vec![Message::user("Hi")]);
    crate::Provider::Bedrock.decode(
        &request,
        Some("application/vnd.amazon.eventstream"),
        body,
        7,
    )
}

#[test]
fn redacted_reasoning_and_signatures_stream_through() {
    use agent_types::{StopReason, StreamEvent};
    let mut body = event("messageStart", json!({"role": "assistant"}));
    body.extend(event(
        "contentBlockDelta",
        json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"redactedContent": "b3BhcXVl"}}}),
    ));
    body.extend(event("contentBlockStop", json!({"contentBlockIndex": 0})));
    body.extend(event(
        "contentBlockDelta",
        json!({"contentBlockIndex": 1, "delta": {"reasoningContent": {"text": "hm"}}}),
    ));
    body.extend(event(
        "contentBlockDelta",
        json!({"contentBlockIndex": 1, "delta": {"reasoningContent": {"signature": "c2ln"}}}),
    ));
    body.extend(event("contentBlockStop", json!({"contentBlockIndex": 1})));
    body.extend(event(
        "messageStop",
        json!({"stopReason": "guardrail_intervened"}),
    ));
    body.extend(event(
        "metadata",
        json!({"usage": {"inputTokens": 3, "outputTokens": 4, "cacheReadInputTokens": 10, "cacheWriteInputTokens": 20}}),
    ));
    let events = decode_stream(&body).unwrap();
    assert!(events.contains(&StreamEvent::RedactedThinking {
        data: "b3BhcXVl".into()
    }));
    assert!(events.contains(&StreamEvent::ThinkingSignature {
        signature: "c2ln".into(),
        id: None
    }));
    let usage = events
        .iter()
        .find_map(|event| match event {
            StreamEvent::Usage(usage) => Some(*usage),
            _ => None,
        })
        .unwrap();
    assert_eq!(usage.input_tokens, Some(33));
    assert_eq!(usage.cache_read_tokens, Some(10));
    assert_eq!(usage.cache_write_5m_tokens, Some(20));
    assert_eq!(
        events.last(),
        Some(&StreamEvent::Finish {
            stop_reason: StopReason::ContentFilter
        })
    );
}

#[test]
fn in_stream_exceptions_keep_their_kind_and_the_partial_answer() {
    for (kind, expected) in [
        ("throttlingException", BackendErrorKind::RateLimited),
        ("validationException", BackendErrorKind::InvalidRequest),
        ("modelStreamErrorException", BackendErrorKind::Server),
        ("serviceUnavailableException", BackendErrorKind::Overloaded),
        ("somethingNewException", BackendErrorKind::Server),
    ] {
        let mut body = event("messageStart", json!({"role": "assistant"}));
        body.extend(event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": "Par"}}),
        ));
        body.extend(exception(kind, "it broke"));
        let error = decode_stream(&body).unwrap_err();
        assert_eq!(error.kind, expected, "{kind}");
        assert_eq!(error.message, format!("{kind}: it broke"));
        assert_eq!(error.partial.unwrap().text_content(), "Par");
    }
}

#[test]
fn a_block_the_message_cannot_carry_is_refused_and_stop_reasons_map() {
    let request = ModelRequest::new("m", vec![Message::user("Hi")]);
    let decode = |body: serde_json::Value| {
        crate::Provider::Bedrock.decode(
            &request,
            Some("application/json"),
            body.to_string().as_bytes(),
            0,
        )
    };
    let error = decode(json!({
        "output": {"message": {"role": "assistant", "content": [{"citationsContent": {}}]}},
        "stopReason": "end_turn",
    }))
    .unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::Unsupported);
    assert!(
        error.message.contains("citationsContent"),
        "{}",
        error.message
    );
    for (raw, expected) in [
        ("max_tokens", agent_types::StopReason::Length),
        (
            "model_context_window_exceeded",
            agent_types::StopReason::Length,
        ),
        ("tool_use", agent_types::StopReason::ToolCalls),
        ("stop_sequence", agent_types::StopReason::Stop),
        ("content_filtered", agent_types::StopReason::ContentFilter),
    ] {
        let events = decode(json!({
            "output": {"message": {"role": "assistant", "content": [{"text": "x"}]}},
            "stopReason": raw,
        }))
        .unwrap();
        assert_eq!(
            events.last(),
            Some(&agent_types::StreamEvent::Finish {
                stop_reason: expected
            }),
            "{raw}"
        );
    }
}

#[test]
fn new_http_settings_keep_the_signing_step_unless_they_bring_their_own() {
    let backend = Bedrock::new("us-east-1").with_http(HttpOptions::default());
    let kept = format!("{:?}", backend.http().auth);
    assert!(kept.contains("SigV4"), "{kept}");
    let bearer = Arc::new(auth::BearerToken::new("k").unwrap());
    let backend = backend.with_http(HttpOptions::default().with_auth(bearer));
    let replaced = format!("{:?}", backend.http().auth);
    assert!(replaced.contains("BearerToken"), "{replaced}");
    // ...and that step is the one kept from then on.
    let again = backend.with_http(HttpOptions::default());
    assert!(format!("{:?}", again.http().auth).contains("BearerToken"));
}
