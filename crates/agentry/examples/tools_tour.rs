//! A tour of `agentry::tools`: typed tools, validation in three modes, streaming handlers,
//! permissions and truncation. Runs offline in about a second:
//!
//! ```text
//! cargo run --example tools_tour
//! ```

#![allow(clippy::print_stdout)]

use agentry::tools::{
    Caller, Registry, Tool, ToolContext, ToolError, ToolEvent, TruncationPolicy, ValidationMode,
    collect_output, tool_name, truncate_result,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Arguments of the weather lookup.
#[derive(Deserialize, JsonSchema)]
struct WeatherArgs {
    /// City name, e.g. `Denver`.
    city: String,
    /// Days of forecast, 1 to 3.
    days: u8,
    /// Report in Fahrenheit instead of Celsius.
    fahrenheit: Option<bool>,
}

#[derive(Serialize)]
struct Forecast {
    city: &'static str,
    highs: Vec<f64>,
    unit: &'static str,
}

/// A small built-in table: (city, daily highs in °C).
const WEATHER: &[(&str, [f64; 3])] = &[
    ("Denver", [21.0, 24.5, 19.0]),
    ("Oslo", [12.0, 11.5, 14.0]),
    ("Tokyo", [27.0, 28.5, 26.0]),
];

async fn get_weather(args: WeatherArgs, _ctx: ToolContext) -> Result<Forecast, ToolError> {
    let Some((city, highs)) = WEATHER
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(&args.city))
    else {
        let known: Vec<&str> = WEATHER.iter().map(|(name, _)| *name).collect();
        return Err(ToolError::respond_to_model(format!(
            "no weather for `{}`; known cities: {}",
            args.city,
            known.join(", ")
        )));
    };
    let days = usize::from(args.days.clamp(1, 3));
    let fahrenheit = args.fahrenheit.unwrap_or(false);
    let highs = highs[..days]
        .iter()
        .map(|c| if fahrenheit { c * 9.0 / 5.0 + 32.0 } else { *c })
        .collect();
    Ok(Forecast {
        city,
        highs,
        unit: if fahrenheit { "°F" } else { "°C" },
    })
}

/// An arithmetic operation.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Op {
    Add,
    Subtract,
    Multiply,
    Divide,
}

/// Arguments of the calculator.
#[derive(Deserialize, JsonSchema)]
struct CalcArgs {
    /// The operation.
    op: Op,
    /// Left operand.
    a: f64,
    /// Right operand.
    b: f64,
}

async fn calculate(args: CalcArgs, _ctx: ToolContext) -> Result<f64, ToolError> {
    match args.op {
        Op::Add => Ok(args.a + args.b),
        Op::Subtract => Ok(args.a - args.b),
        Op::Multiply => Ok(args.a * args.b),
        Op::Divide if args.b == 0.0 => Err(ToolError::respond_to_model(
            "cannot divide by zero; check the right operand",
        )),
        Op::Divide => Ok(args.a / args.b),
    }
}

/// Arguments of the report generator.
#[derive(Deserialize, JsonSchema)]
struct ReportArgs {
    /// How many sections to write.
    sections: u32,
}

fn report_tool() -> Tool {
    Tool::streaming(
        "write_report",
        "Writes a long report, reporting progress per section.",
        |args: ReportArgs, _ctx: ToolContext| {
            async_stream::stream! {
                let mut body = String::new();
                for section in 1..=args.sections {
                    yield ToolEvent::delta(format!("section {section}/{} done", args.sections));
                    body.push_str(&format!("## Section {section}\n{}\n", "All systems nominal. ".repeat(400)));
                }
                yield ToolEvent::ok(body);
            }
        },
    )
}

fn heading(title: &str) {
    println!("\n=== {title} ===");
}

fn show_validation(registry: &Registry, tool: &str, args: &Value) {
    let Some(tool) = registry.get(tool) else {
        return;
    };
    println!("{} {args}", tool.name());
    for mode in [
        ValidationMode::Strict,
        ValidationMode::Lenient,
        ValidationMode::None,
    ] {
        match tool.validate(args.clone(), mode) {
            Ok(valid) => {
                println!("  {mode:?}: ok → {}", valid.arguments);
                for repair in &valid.repairs {
                    println!("      repaired {repair}");
                }
            }
            Err(invalid) => {
                println!("  {mode:?}: rejected");
                for repair in &invalid.repairs {
                    println!("      tried {repair}");
                }
                for problem in &invalid.problems {
                    println!("      - {problem}");
                }
            }
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    heading("registering tools");
    let mut registry = Registry::new();
    registry.register(Tool::from_fn(
        "get_weather",
        "Daily high temperatures for a city.",
        get_weather,
    ))?;
    registry.register(Tool::from_fn(
        "calculate",
        "Basic arithmetic on two numbers.",
        calculate,
    ))?;
    registry.register(report_tool())?;
    // A remote tool: the application runs it (here, a human approves refunds).
    let refund = tool_name("approve", "orders/refunds")?;
    registry.register(
        Tool::remote(
            refund.clone(),
            "Ask a human to approve a refund.",
            json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}),
        )
        .requires_permission("refunds:approve"),
    )?;
    match registry.register(Tool::remote("get weather", "", json!({"type": "object"}))) {
        Err(error) => println!("rejected: {error}"),
        Ok(_) => println!("unexpectedly accepted a name with a space"),
    }
    match registry.register(report_tool()) {
        Err(error) => println!("rejected: {error}"),
        Ok(_) => println!("unexpectedly accepted a duplicate"),
    }
    println!("tools, sorted by name for byte-stable prompts:");
    for spec in registry.specs() {
        println!("  {:<24} {}", spec.name, spec.description);
    }
    if let Some(weather) = registry.get("get_weather") {
        println!(
            "get_weather parameters: {}",
            serde_json::to_string_pretty(&weather.spec().parameters)?
        );
    }

    heading("validating arguments in three modes");
    show_validation(
        &registry,
        "get_weather",
        &json!({"city": "Denver", "days": 2}),
    );
    show_validation(
        &registry,
        "get_weather",
        &json!({"city": "Oslo", "days": "3", "fahrenheit": "true"}),
    );
    show_validation(
        &registry,
        "get_weather",
        &json!("{\"city\": \"Tokyo\", \"days\": 1}"),
    );
    show_validation(&registry, "get_weather", &json!({"city": 5, "days": 300}));
    show_validation(
        &registry,
        "calculate",
        &json!({"op": "modulo", "a": 1, "extra": true}),
    );

    heading("running handlers");
    let weather = registry
        .get("get_weather")
        .ok_or("get_weather is missing")?;
    for args in [
        json!({"city": "oslo", "days": 3}),
        json!({"city": "Atlantis", "days": 1}),
    ] {
        let args = weather.validate(args, ValidationMode::Lenient)?.arguments;
        let output =
            collect_output(weather.invoke(args, ToolContext::new("call_1", "get_weather"))).await;
        match output.result {
            Ok(value) => println!("get_weather → {value}"),
            Err(error) => println!("get_weather → error for the model: {error}"),
        }
    }
    let calc = registry.get("calculate").ok_or("calculate is missing")?;
    let output = collect_output(calc.invoke(
        json!({"op": "divide", "a": 1, "b": 0}),
        ToolContext::new("call_2", "calculate"),
    ))
    .await;
    match output.result {
        Ok(value) => println!("calculate 1/0 → {value}"),
        Err(error) => println!(
            "calculate 1/0 → {:?} error for the model: {error}",
            error.kind()
        ),
    }

    heading("a streaming handler, and truncating its result");
    let report = registry
        .get("write_report")
        .ok_or("write_report is missing")?;
    let output = collect_output(report.invoke(
        json!({"sections": 12}),
        ToolContext::new("call_3", "write_report"),
    ))
    .await;
    for delta in &output.deltas {
        println!("  progress: {delta}");
    }
    let result = output.result?;
    let policy = TruncationPolicy::new(16 * 1024)?;
    let sent = truncate_result(result, &policy);
    println!(
        "result: {} bytes; sent {} bytes (cap {}), truncated: {}, removed {} bytes",
        sent.original_bytes,
        sent.sent_bytes,
        policy.max_bytes(),
        sent.truncated,
        sent.removed_bytes()
    );
    let tail_start = (sent.text.len().saturating_sub(60)..sent.text.len())
        .find(|i| sent.text.is_char_boundary(*i))
        .unwrap_or(sent.text.len());
    println!("the model's copy ends with: …{}", &sent.text[tail_start..]);
    match TruncationPolicy::new(10) {
        Err(error) => println!("a 10-byte cap is refused: {error}"),
        Ok(_) => println!("a 10-byte cap was accepted"),
    }

    heading("per-caller views");
    let support = Caller::new("agent-7").with_tenant("acme");
    let manager = Caller::new("lead-2")
        .with_tenant("acme")
        .with_permission("refunds:approve");
    for caller in [&support, &manager] {
        let view = registry.permitted_for(caller);
        let names: Vec<&str> = view.names().collect();
        println!("{} sees: {}", caller.principal(), names.join(", "));
    }
    let narrowed = registry.narrow(["calculate", "get_weather"])?;
    println!(
        "allow-list [calculate, get_weather] → {}",
        narrowed.names().collect::<Vec<_>>().join(", ")
    );
    if let Err(error) = registry.narrow(["calculate", "send_email"]) {
        println!("allow-list with a typo → {error}");
    }
    let remote = registry.get(&refund).ok_or("refund tool missing")?;
    println!("{} is remote: {}", remote.name(), remote.is_remote());
    Ok(())
}
