//! What a reader accepts beyond what a writer produces: the compatibility rules of
//! docs/wire-format.md (unknown fields ignored, `null` = absent = unknown, bare-string user
//! content, missing flags read as false).

use agent_types::{
    AgentError, AgentEvent, AssistantMessage, Capabilities, ErrorKind, Message, ModelRequest,
    StopReason, StreamEvent, Usage, UserMessage,
};
use serde_json::json;

#[test]
fn usage_null_and_absent_are_unknown() {
    let usage: Usage = serde_json::from_value(json!({
        "input_tokens": 10,
        "output_tokens": null,
        "cache_read_tokens": null
    }))
    .unwrap();
    assert_eq!(
        usage,
        Usage {
            input_tokens: Some(10),
            ..Usage::default()
        }
    );
    // And null is never written back: the field is left out.
    assert_eq!(
        serde_json::to_string(&usage).unwrap(),
        r#"{"input_tokens":10}"#
    );
    assert_eq!(
        serde_json::from_str::<Usage>("{}").unwrap(),
        Usage::default()
    );
}

#[test]
fn unknown_fields_are_ignored() {
    let message: Message = serde_json::from_value(json!({
        "role": "assistant",
        "content": [{"type": "text", "text": "hi", "citations": []}],
        "stop_reason": "stop",
        "future_field": {"x": 1}
    }))
    .unwrap();
    assert_eq!(message, Message::from(AssistantMessage::text("hi")));

    let event: AgentEvent = serde_json::from_value(json!({
        "type": "text_delta",
        "delta": "a",
        "sequence": 7
    }))
    .unwrap();
    assert_eq!(event, AgentEvent::TextDelta { delta: "a".into() });

    let error: AgentError = serde_json::from_value(json!({
        "kind": "config",
        "message": "bad",
        "request_id": "req_1"
    }))
    .unwrap();
    assert_eq!(error, AgentError::config("bad"));

    let request: ModelRequest = serde_json::from_value(json!({
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "n": 2
    }))
    .unwrap();
    assert_eq!(request, ModelRequest::new("m", vec![Message::user("hi")]));
}

#[test]
fn user_content_as_a_bare_string() {
    let message: Message =
        serde_json::from_str(r#"{"role":"user","content":"Weather in Denver?"}"#).unwrap();
    assert_eq!(
        message,
        Message::User(UserMessage::text("Weather in Denver?"))
    );
    let in_event: AgentEvent = serde_json::from_value(json!({
        "type": "session_end",
        "session_id": "s",
        "messages": [{"role": "user", "content": "hi"}],
        "finish_reason": "stop"
    }))
    .unwrap();
    assert_eq!(
        in_event,
        AgentEvent::SessionEnd {
            session_id: "s".into(),
            messages: vec![Message::user("hi")],
            finish_reason: StopReason::Stop,
        }
    );
}

#[test]
fn capabilities_missing_flags_are_false() {
    let caps: Capabilities = serde_json::from_value(json!({"tools": true})).unwrap();
    assert_eq!(
        caps,
        Capabilities {
            tools: true,
            ..Capabilities::default()
        }
    );
}

#[test]
fn unknown_tags_are_errors_in_rust() {
    // A Rust reader rejects a variant it does not know; clients in other languages are told to
    // skip unknown `type`s instead. Pinned so that a change here is a conscious one.
    assert!(serde_json::from_value::<StreamEvent>(json!({"type": "ping"})).is_err());
    assert!(serde_json::from_value::<AgentEvent>(json!({"type": "ping"})).is_err());
    assert!(
        serde_json::from_value::<AgentError>(json!({"kind": "teapot", "message": "x"})).is_err()
    );
}

#[test]
fn error_kind_fields_sit_beside_the_message() {
    // `kind` is flattened into the error object, with its own fields next to it.
    let error: AgentError = serde_json::from_value(json!({
        "kind": "tool",
        "tool": "get_weather",
        "message": "handler failed"
    }))
    .unwrap();
    assert_eq!(
        error.kind,
        ErrorKind::Tool {
            tool: "get_weather".into()
        }
    );
    assert_eq!(error.status(), 500);
}

#[test]
fn dollar_amounts_read_back_exactly() {
    // Sums of per-token prices rarely have short decimal forms; these three came out 1 ULP
    // off with serde_json's default float parser.
    for cost in [
        0.028855296199999998,
        0.030755380710000002,
        0.10245292920000001,
    ] {
        let event = AgentEvent::MessageEnd {
            message: Message::from(AssistantMessage::text("x")),
            cost_usd: Some(cost),
        };
        let back: AgentEvent =
            serde_json::from_str(&serde_json::to_string(&event).unwrap()).unwrap();
        assert_eq!(back, event);
        let budget = agent_types::Budget::CostUsd {
            used: cost,
            max: cost,
        };
        crate::round_trip(&budget);
    }
}
