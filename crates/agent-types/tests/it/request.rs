//! The model request and its parts.

use agent_types::{
    GenerationSettings, Message, ModelRequest, Reasoning, ReasoningEffort, ToolChoice, ToolSpec,
};
use serde_json::json;

use crate::{check, full_assistant};

fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: "Current weather for a city.".into(),
        parameters: json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": false
        })
        .into(),
        strict: false,
        defer_loading: false,
    }
}

#[test]
fn tool_spec() {
    check!("tool_spec", weather_tool());
}

#[test]
fn tool_choices() {
    check!("tool_choice_auto", ToolChoice::Auto);
    check!("tool_choice_none", ToolChoice::None);
    check!("tool_choice_required", ToolChoice::Required);
    check!(
        "tool_choice_tool",
        ToolChoice::Tool {
            name: "get_weather".into()
        }
    );
    assert_eq!(ToolChoice::default(), ToolChoice::Auto);
}

#[test]
fn reasoning() {
    check!(
        "reasoning_effort",
        Reasoning {
            effort: Some(ReasoningEffort::High),
            budget_tokens: None,
        }
    );
    check!(
        "reasoning_budget",
        Reasoning {
            effort: None,
            budget_tokens: Some(8_192),
        }
    );
    check!("reasoning_empty", Reasoning::default());
    check!(
        "reasoning_efforts",
        vec![
            ReasoningEffort::Minimal,
            ReasoningEffort::Low,
            ReasoningEffort::Medium,
            ReasoningEffort::High,
        ]
    );
}

#[test]
fn generation_settings() {
    check!("generation_settings_empty", GenerationSettings::default());
    check!(
        "generation_settings_full",
        GenerationSettings {
            max_output_tokens: Some(4_096),
            temperature: Some(0.7),
            top_p: Some(0.95),
            stop_sequences: vec!["\n\nHuman:".into(), "END".into()],
            reasoning: Some(Reasoning {
                effort: Some(ReasoningEffort::Low),
                budget_tokens: Some(2_048),
            }),
            parallel_tool_calls: Some(false),
        }
    );
}

#[test]
fn model_request_minimal() {
    check!(
        "model_request_minimal",
        ModelRequest::new("gpt-4o", vec![Message::user("Hi")])
    );
}

#[test]
fn model_request_full() {
    let mut extras = serde_json::Map::new();
    extras.insert("metadata".into(), json!({"user_id": "u-1"}));
    extras.insert("service_tier".into(), json!("flex"));
    check!(
        "model_request_full",
        ModelRequest {
            model: "claude-sonnet-4-5".into(),
            system: Some("You are a weather bot.".into()),
            messages: vec![
                Message::user("Weather in Denver?"),
                Message::from(full_assistant()),
                Message::from(agent_types::ToolResult::ok(
                    "call_1",
                    "get_weather",
                    r#"{"temp_c":21}"#
                )),
            ],
            tools: vec![weather_tool()],
            tool_choice: ToolChoice::Tool {
                name: "get_weather".into()
            },
            settings: GenerationSettings {
                max_output_tokens: Some(1_024),
                temperature: Some(0.0),
                parallel_tool_calls: Some(true),
                ..GenerationSettings::default()
            },
            extras,
            response_format: Some(agent_types::ResponseFormat {
                name: "weather_report".into(),
                schema: json!({
                    "type": "object",
                    "properties": {"temp_c": {"type": "number"}},
                    "required": ["temp_c"],
                    "additionalProperties": false
                }),
                strict: true,
            }),
            stream: false,
        }
    );
}

#[test]
fn stream_defaults_to_true_in_rust_and_in_json() {
    assert!(ModelRequest::default().stream);
    assert!(ModelRequest::new("m", Vec::new()).stream);
    assert_eq!(ModelRequest::default().tool_choice, ToolChoice::Auto);

    let absent: ModelRequest = serde_json::from_str(r#"{"model":"m","messages":[]}"#).unwrap();
    assert!(absent.stream);
    assert_eq!(absent, ModelRequest::new("m", Vec::new()));

    let off: ModelRequest =
        serde_json::from_str(r#"{"model":"m","messages":[],"stream":false}"#).unwrap();
    assert!(!off.stream);
    // `false` is the only value that is written out.
    assert!(
        serde_json::to_string(&off)
            .unwrap()
            .contains(r#""stream":false"#)
    );
    assert!(!serde_json::to_string(&absent).unwrap().contains("stream"));
}
