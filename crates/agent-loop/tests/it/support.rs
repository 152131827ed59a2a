//! Helpers shared by the test modules: a small tool registry, usage values, event collection.

use std::time::Duration;

use agent_loop::EventStream;
use agent_tools::{Registry, Tool, ToolError};
use agent_types::{AgentEvent, Usage};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};

/// Arguments of the `get_weather` test tool.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(crate) struct City {
    /// The city.
    pub(crate) city: String,
}

/// `get_weather(city)`: answers from a fixed table; unknown cities are a respond-to-model
/// error.
pub(crate) fn weather_tool() -> Tool {
    Tool::from_fn(
        "get_weather",
        "Current weather for a city.",
        |args: City, _ctx| async move {
            match args.city.as_str() {
                "Denver" => Ok(json!({"city": "Denver", "sky": "sunny", "temp_c": 21})),
                "Paris" => Ok(json!({"city": "Paris", "sky": "rain", "temp_c": 12})),
                other => Err(ToolError::respond_to_model(format!(
                    "no weather station for `{other}`"
                ))),
            }
        },
    )
}

/// A tool that sleeps (on tokio's clock) for `millis` from its arguments, then echoes them.
pub(crate) fn sleep_tool() -> Tool {
    Tool::from_json_fn(
        "sleep",
        "Sleeps for `millis` milliseconds.",
        json!({
            "type": "object",
            "properties": {"millis": {"type": "integer", "minimum": 0}},
            "required": ["millis"]
        }),
        |args: Value, _ctx| async move {
            let millis = args["millis"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(millis)).await;
            Ok(json!({"slept_ms": millis}))
        },
    )
}

/// A registry holding `tools`.
pub(crate) fn registry(tools: impl IntoIterator<Item = Tool>) -> Registry {
    let mut registry = Registry::new();
    for tool in tools {
        registry.register(tool).unwrap();
    }
    registry
}

/// Usage with input and output tokens.
pub(crate) fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        ..Usage::default()
    }
}

/// Every event of `stream`, then the result.
pub(crate) async fn collect(
    mut stream: EventStream<'_>,
) -> (
    Vec<AgentEvent>,
    Result<agent_loop::GenerateResult, agent_types::AgentError>,
) {
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event);
    }
    (events, stream.result().await)
}

/// The `type` tag of an event, for compact assertions on sequences.
pub(crate) fn kind(event: &AgentEvent) -> String {
    serde_json::to_value(event).unwrap()["type"]
        .as_str()
        .unwrap()
        .to_owned()
}
