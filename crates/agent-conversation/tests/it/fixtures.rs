//! Turns shared by the tests: one tool round as the loop would produce it.

use agent_conversation::Turn;
use agent_types::{
    AssistantBlock, AssistantMessage, StopReason, Thinking, ToolCall, ToolResult, Usage,
};
use serde_json::json;

/// An assistant turn that thinks and calls a tool, the tool's result, and the final answer,
/// with fixed timestamps.
pub(crate) fn tool_round() -> Vec<Turn> {
    let call = AssistantMessage {
        content: vec![
            AssistantBlock::Thinking(Thinking {
                thinking: "The user wants the weather.".into(),
                signature: Some("sig-abc".into()),
                ..Thinking::default()
            }),
            AssistantBlock::Text {
                text: "Let me check.".into(),
            },
            AssistantBlock::ToolCall(ToolCall::new(
                "call_1",
                "get_weather",
                json!({"city": "Denver"}),
            )),
        ],
        stop_reason: Some(StopReason::ToolCalls),
        usage: Some(Usage {
            input_tokens: Some(120),
            output_tokens: Some(30),
            ..Usage::default()
        }),
        model: Some("test-model".into()),
    };
    vec![
        Turn::at(call, 1_700_000_000_000),
        Turn::at(
            ToolResult::ok("call_1", "get_weather", r#"{"temp_c":21}"#),
            1_700_000_000_250,
        ),
        Turn::at(
            AssistantMessage::text("It is 21 °C in Denver."),
            1_700_000_001_000,
        ),
    ]
}

/// `count` short assistant turns labelled `{label}-{i}`.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) fn numbered(label: &str, count: usize) -> Vec<Turn> {
    (0..count)
        .map(|i| Turn::at(AssistantMessage::text(format!("{label}-{i}")), i as u64))
        .collect()
}
