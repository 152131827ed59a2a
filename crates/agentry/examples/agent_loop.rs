//! An `auto`-mode agent loop, offline: a scripted model asks for two weather lookups at once,
//! then a unit conversion, then answers. The tools are real code; the events stream as they
//! happen; the run ends with the per-call accounting, the trace and the cost.
//!
//! ```text
//! cargo run --example agent_loop
//! ```
//!
//! The model is the scripted backend, so this needs no network and no API key; swap in a
//! provider backend and the loop, tools and output stay the same.

#![allow(clippy::print_stdout)]

use std::io::Write;
use std::time::Duration;

use agentry::backends::{ScriptedBackend, ScriptedTurn};
use agentry::tools::{Registry, Tool, ToolError, ToolEvent};
use agentry::types::{AgentEvent, Message, ModelPrice, RateCard, Role, ToolCall, Usage};
use agentry::{Input, Options, generate_stream};
use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

const MODEL: &str = "claude-sonnet-4-5";

#[derive(Deserialize, JsonSchema)]
struct City {
    /// City name, e.g. `Denver`.
    city: String,
}

#[derive(Deserialize, JsonSchema)]
struct Celsius {
    /// Temperature in degrees Celsius.
    celsius: f64,
}

/// The tools: a (slow, streaming) weather lookup over a small table and a converter.
fn tools() -> Result<Registry, Box<dyn std::error::Error>> {
    let mut tools = Registry::new();
    tools.register(Tool::streaming(
        "get_weather",
        "Current weather for a city.",
        |args: City, _ctx| {
            async_stream::stream! {
                yield ToolEvent::delta(format!("asking the {} station", args.city));
                // A real lookup takes a while; both cities are asked at the same time.
                tokio::time::sleep(Duration::from_millis(150)).await;
                yield match args.city.as_str() {
                    "Denver" => ToolEvent::ok(json!({"city": "Denver", "sky": "sunny", "temp_c": 21})),
                    "Paris" => ToolEvent::ok(json!({"city": "Paris", "sky": "light rain", "temp_c": 12})),
                    other => ToolEvent::err(ToolError::respond_to_model(format!("no station for `{other}`"))),
                };
            }
        },
    ))?;
    tools.register(Tool::from_fn(
        "convert_temperature",
        "Converts degrees Celsius to Fahrenheit.",
        |args: Celsius, _ctx| async move {
            Ok(json!({"fahrenheit": (args.celsius * 9.0 / 5.0 + 32.0)}))
        },
    ))?;
    Ok(tools)
}

/// What the model will say, round by round (with the usage a provider would report).
fn model() -> ScriptedBackend {
    let usage = |input, cached, output| Usage {
        input_tokens: Some(input),
        cache_read_tokens: Some(cached),
        output_tokens: Some(output),
        ..Usage::default()
    };
    ScriptedBackend::new([
        ScriptedTurn::new()
            .with_thinking(
                "Two cities: I can look both up at once.",
                Some("sig-1".into()),
            )
            .with_text("Let me check both cities.")
            .with_tool_call(ToolCall::new(
                "call_1",
                "get_weather",
                json!({"city": "Denver"}),
            ))
            .with_tool_call(ToolCall::new(
                "call_2",
                "get_weather",
                json!({"city": "Paris"}),
            ))
            .with_usage(usage(1_250, 1_024, 86))
            .chunked(9),
        ScriptedTurn::new()
            .with_text("Converting Denver to Fahrenheit.")
            .with_tool_call(ToolCall::new(
                "call_3",
                "convert_temperature",
                json!({"celsius": 21}),
            ))
            .with_usage(usage(1_420, 1_024, 41))
            .chunked(9),
        ScriptedTurn::text("Denver is sunny at 21 °C (69.8 °F). Paris has light rain at 12 °C.")
            .with_usage(usage(1_510, 1_024, 28))
            .chunked(7),
    ])
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prices = RateCard::new().with(
        MODEL,
        ModelPrice {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            cache_read_per_mtok: Some(0.30),
            cache_write_5m_per_mtok: Some(3.75),
            cache_write_1h_per_mtok: Some(6.0),
        },
    );
    let options = Options::auto()
        .with_tools(tools()?)
        .with_rate_card(prices)
        .with_tool_trace(true)
        .with_token_budget(20_000)
        .with_max_cost_usd(0.05);
    let input = Input::new(MODEL)
        .system("You are a concise weather assistant.")
        .user("What's the weather in Denver and Paris? Give Denver in Fahrenheit too.");
    let model = model();

    println!("== streamed events");
    let mut stream = generate_stream(&model, input, &options);
    let mut out = std::io::stdout();
    while let Some(event) = stream.next().await {
        match event {
            AgentEvent::MessageStart {
                role: Role::Assistant,
            } => print!("\nmodel  │ "),
            AgentEvent::ThinkingStart => print!("(thinking: "),
            AgentEvent::ThinkingDelta { delta } | AgentEvent::TextDelta { delta } => {
                print!("{delta}")
            }
            AgentEvent::ThinkingEnd { .. } => print!(") "),
            AgentEvent::ToolCallEnd { tool_call, .. } => {
                print!("\n       │ → {}({})", tool_call.name, tool_call.arguments);
            }
            AgentEvent::MessageEnd {
                message: Message::Assistant(message),
                cost_usd,
            } => {
                let usage = message.usage.unwrap_or_default();
                println!(
                    "\n       │ [{} in ({} cached), {} out, ${:.6}]",
                    usage.input_tokens.unwrap_or(0),
                    usage.cache_read_tokens.unwrap_or(0),
                    usage.output_tokens.unwrap_or(0),
                    cost_usd.unwrap_or(0.0)
                );
            }
            AgentEvent::ToolExecutionStart {
                call_id, tool_name, ..
            } => {
                println!("tools  │ {tool_name} [{call_id}] started");
            }
            AgentEvent::ToolExecutionDelta { call_id, delta } => {
                println!("tools  │   [{call_id}] {delta}")
            }
            AgentEvent::ToolExecutionEnd {
                call_id,
                tool_name,
                output,
                is_error,
                ..
            } => {
                let mark = if is_error { "failed" } else { "done" };
                println!("tools  │ {tool_name} [{call_id}] {mark}: {output}");
            }
            AgentEvent::SessionEnd { finish_reason, .. } => {
                println!("\nfinish │ {}", serde_json::to_value(finish_reason)?);
            }
            _ => {}
        }
        out.flush()?;
    }
    let result = stream.result().await?;

    println!("\n== model calls");
    println!(
        "{:>4} {:>8} {:>8} {:>8} {:>6} {:>11}",
        "#", "input", "cached", "output", "tools", "cost"
    );
    for (n, call) in result.model_calls.iter().enumerate() {
        let usage = call.usage.unwrap_or_default();
        println!(
            "{:>4} {:>8} {:>8} {:>8} {:>6} {:>11}",
            n + 1,
            usage.input_tokens.unwrap_or(0),
            usage.cache_read_tokens.unwrap_or(0),
            usage.output_tokens.unwrap_or(0),
            call.tool_calls,
            format!("${:.6}", call.cost_usd.unwrap_or(0.0))
        );
    }

    println!("\n== trace");
    println!(
        "{:>5} {:<8} {:<20} {:>9} {:>9}  arguments",
        "round", "call", "tool", "bytes", "ms"
    );
    for entry in &result.trace {
        println!(
            "{:>5} {:<8} {:<20} {:>9} {:>9.1}  {}",
            entry.iteration,
            entry.call_id.as_str(),
            entry.tool_name,
            entry.sent_bytes,
            entry.duration.as_secs_f64() * 1e3,
            entry.arguments
        );
    }

    println!("\n== totals");
    println!(
        "{} model calls, {} tool calls, {} tokens, ${:.6}",
        result.model_calls.len(),
        result.trace.len(),
        result.usage.total_tokens().unwrap_or(0),
        result.cost_usd.unwrap_or(0.0)
    );
    println!("answer: {}", result.text());
    Ok(())
}
