//! Integration tests for agent-types: JSON round trips and pinned wire forms (insta), and the
//! backend trait used the way the loop will use it.
//!
//! One binary for the whole crate (see STYLE.md) keeps link times down.

// clippy.toml allows unwrap inside #[test] fns only; the shared helpers here are test code too.
#![allow(clippy::unwrap_used)]

mod backend;
mod compat;
mod errors;
mod events;
mod messages;
mod request;
mod usage;

use std::fmt::Debug;
use std::time::Duration;

use agent_types::{
    AssistantBlock, AssistantMessage, StopReason, Thinking, ToolCall, TraceEntry, Usage,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// Serializes `value`, reads it back, checks it is equal, and checks that writing it again
/// gives the very same bytes. Returns the compact JSON.
#[track_caller]
fn round_trip<T>(value: &T) -> String
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let json = serde_json::to_string(value).unwrap();
    let back: T =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{json} does not read back: {e}"));
    assert_eq!(&back, value, "{json} reads back as a different value");
    let again = serde_json::to_string(&back).unwrap();
    assert_eq!(again, json, "writing the value read back changes the bytes");
    json
}

/// Round-trips `$value` and pins its JSON form in `snapshots/<module>__<name>.snap`.
macro_rules! check {
    ($name:literal, $value:expr) => {{
        let value = $value;
        crate::round_trip(&value);
        insta::assert_json_snapshot!($name, value);
    }};
}
pub(crate) use check;

/// A usage report with every count known.
fn full_usage() -> Usage {
    Usage {
        input_tokens: Some(12_000),
        output_tokens: Some(850),
        cache_read_tokens: Some(10_000),
        cache_write_5m_tokens: Some(1_500),
        cache_write_1h_tokens: Some(300),
        reasoning_tokens: Some(400),
    }
}

/// A tool call as the loop sees it.
fn weather_call() -> ToolCall {
    ToolCall::new(
        "call_1",
        "get_weather",
        json!({"city": "Denver", "unit": "celsius"}),
    )
}

/// An assistant message with every kind of block and every optional field.
fn full_assistant() -> AssistantMessage {
    AssistantMessage {
        content: vec![
            AssistantBlock::Thinking(Thinking {
                thinking: "The user wants the weather; call the tool.".into(),
                signature: Some("EqQBCgIYAhIM1gbcDa9GJwZA2b3h".into()),
                redacted: false,
                id: None,
            }),
            AssistantBlock::Text {
                text: "Let me check.".into(),
            },
            AssistantBlock::ToolCall(weather_call()),
        ],
        stop_reason: Some(StopReason::ToolCalls),
        usage: Some(full_usage()),
        model: Some("claude-sonnet-4-5-20250929".into()),
    }
}

/// A trace entry for a call that ran and was truncated.
fn trace_entry() -> TraceEntry {
    TraceEntry {
        iteration: 1,
        call_id: "call_1".into(),
        tool_name: "get_weather".into(),
        arguments: json!({"city": "Denver", "days": 3}),
        result_bytes: 70_000,
        sent_bytes: 65_536,
        truncated: true,
        duration: Duration::from_micros(12_345),
        error: None,
        repairs: vec!["/days: parsed the string \"3\" as a number".into()],
        sub_trace: Vec::new(),
        guardrail_decisions: None,
    }
}
