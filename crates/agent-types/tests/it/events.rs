//! Backend stream events and agent events: every variant.

use agent_types::{
    AgentError, AgentEvent, ErrorKind, Message, Role, StopReason, StreamEvent, ToolResult, Usage,
};
use serde_json::json;

use crate::{check, full_assistant, full_usage, weather_call};

#[test]
fn stream_event_message_start() {
    check!(
        "stream_message_start",
        StreamEvent::MessageStart {
            id: Some("msg_01XFDUDYJgAACzvnptvVoYEL".into()),
            model: Some("claude-sonnet-4-5-20250929".into()),
        }
    );
    check!(
        "stream_message_start_bare",
        StreamEvent::MessageStart {
            id: None,
            model: None
        }
    );
}

#[test]
fn stream_event_content() {
    check!(
        "stream_text_delta",
        StreamEvent::TextDelta {
            delta: "Hel".into()
        }
    );
    check!(
        "stream_thinking_delta",
        StreamEvent::ThinkingDelta {
            delta: "Let me think".into()
        }
    );
    check!(
        "stream_thinking_signature",
        StreamEvent::ThinkingSignature {
            signature: "EqQBCgIYAhIM".into(),
            id: None,
        }
    );
    check!(
        "stream_thinking_signature_with_id",
        StreamEvent::ThinkingSignature {
            signature: "gAAAAABo_encrypted".into(),
            id: Some("rs_68c1".into()),
        }
    );
    check!(
        "stream_redacted_thinking",
        StreamEvent::RedactedThinking {
            data: "EmwKAhgBEgy3va3pzix".into()
        }
    );
}

#[test]
fn stream_event_tool_calls() {
    check!(
        "stream_tool_call_start",
        StreamEvent::ToolCallStart {
            index: 0,
            id: "call_1".into(),
            name: "get_weather".into(),
            signature: None,
        }
    );
    check!(
        "stream_tool_call_start_signed",
        StreamEvent::ToolCallStart {
            index: 1,
            id: "call_2".into(),
            name: "list_files".into(),
            signature: Some("CiQB0e2Kb".into()),
        }
    );
    check!(
        "stream_tool_call_delta",
        StreamEvent::ToolCallDelta {
            index: 0,
            delta: r#"{"city":"Den"#.into(),
        }
    );
    check!(
        "stream_tool_call_end",
        StreamEvent::ToolCallEnd { index: 0 }
    );
}

#[test]
fn stream_event_usage_and_finish() {
    check!("stream_usage", StreamEvent::Usage(full_usage()));
    check!("stream_usage_unknown", StreamEvent::Usage(Usage::default()));
    check!(
        "stream_finish",
        StreamEvent::Finish {
            stop_reason: StopReason::ToolCalls
        }
    );
}

#[test]
fn agent_event_session_boundaries() {
    check!(
        "agent_session_start",
        AgentEvent::SessionStart {
            session_id: "sess-42".into()
        }
    );
    check!(
        "agent_session_end",
        AgentEvent::SessionEnd {
            session_id: "sess-42".into(),
            messages: vec![
                Message::from(full_assistant()),
                Message::from(ToolResult::ok("call_1", "get_weather", r#"{"temp_c":21}"#)),
            ],
            finish_reason: StopReason::Stop,
        }
    );
    check!(
        "agent_awaiting_tool_execution",
        AgentEvent::AwaitingToolExecution {
            session_id: "sess-42".into(),
            tool_calls: vec![weather_call()],
        }
    );
    check!(
        "agent_approval_requested",
        AgentEvent::ApprovalRequested {
            session_id: "sess-42".into(),
            tool_calls: vec![weather_call()],
        }
    );
}

#[test]
fn agent_event_messages() {
    check!(
        "agent_message_start_assistant",
        AgentEvent::MessageStart {
            role: Role::Assistant
        }
    );
    check!(
        "agent_message_start_tool",
        AgentEvent::MessageStart { role: Role::Tool }
    );
    check!(
        "agent_message_end_assistant",
        AgentEvent::MessageEnd {
            message: Message::from(full_assistant()),
            cost_usd: Some(0.0523),
        }
    );
    check!(
        "agent_message_end_tool",
        AgentEvent::MessageEnd {
            message: Message::from(ToolResult::ok("call_1", "get_weather", "21")),
            cost_usd: None,
        }
    );
}

#[test]
fn agent_event_structured_output() {
    check!(
        "agent_output_partial",
        AgentEvent::OutputPartial {
            value: serde_json::json!({"city": "Os"}),
        }
    );
    check!(
        "agent_output",
        AgentEvent::Output {
            value: serde_json::json!({"city": "Oslo", "temp_c": 3}),
        }
    );
}

#[test]
fn agent_event_blocks() {
    check!("agent_text_start", AgentEvent::TextStart);
    check!(
        "agent_text_delta",
        AgentEvent::TextDelta {
            delta: "Sun".into()
        }
    );
    check!(
        "agent_text_end",
        AgentEvent::TextEnd {
            text: "Sunny.".into()
        }
    );
    check!("agent_thinking_start", AgentEvent::ThinkingStart);
    check!(
        "agent_thinking_delta",
        AgentEvent::ThinkingDelta {
            delta: "Hmm".into()
        }
    );
    check!(
        "agent_thinking_end",
        AgentEvent::ThinkingEnd {
            thinking: "Hmm, Denver.".into()
        }
    );
    check!(
        "agent_tool_call_start",
        AgentEvent::ToolCallStart {
            index: 0,
            id: "call_1".into(),
            name: "get_weather".into(),
        }
    );
    check!(
        "agent_tool_call_delta",
        AgentEvent::ToolCallDelta {
            index: 0,
            delta: r#"{"city":"#.into(),
        }
    );
    check!(
        "agent_tool_call_end",
        AgentEvent::ToolCallEnd {
            index: 0,
            tool_call: weather_call(),
        }
    );
}

#[test]
fn agent_event_tool_execution() {
    check!(
        "agent_tool_execution_start",
        AgentEvent::ToolExecutionStart {
            call_id: "call_1".into(),
            tool_name: "get_weather".into(),
            arguments: json!({"city": "Denver"}),
        }
    );
    check!(
        "agent_tool_execution_delta",
        AgentEvent::ToolExecutionDelta {
            call_id: "call_1".into(),
            delta: "fetching forecast…".into(),
        }
    );
    check!(
        "agent_tool_execution_end",
        AgentEvent::ToolExecutionEnd {
            call_id: "call_1".into(),
            tool_name: "get_weather".into(),
            output: r#"{"temp_c":21}"#.into(),
            is_error: false,
            truncated: false,
            blocks: Vec::new(),
        }
    );
    check!(
        "agent_tool_execution_end_blocks",
        AgentEvent::ToolExecutionEnd {
            call_id: "call_2".into(),
            tool_name: "screenshot".into(),
            output: "The screen:".into(),
            is_error: false,
            truncated: false,
            blocks: vec![
                agent_types::ToolResultBlock::Image {
                    source: agent_types::ImageSource::Base64 {
                        media_type: "image/png".into(),
                        data: "iVBORw0KGgo=".into(),
                    },
                },
                agent_types::ToolResultBlock::Json {
                    value: serde_json::json!({"width": 1280}),
                },
            ],
        }
    );
    check!(
        "agent_tool_execution_end_error_truncated",
        AgentEvent::ToolExecutionEnd {
            call_id: "call_1".into(),
            tool_name: "get_weather".into(),
            output: "upstream said 503".into(),
            is_error: true,
            truncated: true,
            blocks: Vec::new(),
        }
    );
}

#[test]
fn agent_event_error() {
    check!(
        "agent_error",
        AgentEvent::Error {
            error: AgentError::new(ErrorKind::Aborted, "cancelled by the caller"),
        }
    );
    check!(
        "agent_error_budget_with_partial",
        AgentEvent::Error {
            error: AgentError::budget(agent_types::Budget::Iterations { used: 10, max: 10 })
                .with_partial(
                    vec![crate::trace_entry()],
                    vec![Message::from(full_assistant())]
                ),
        }
    );
}
