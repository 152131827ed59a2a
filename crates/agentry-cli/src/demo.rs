//! `agentry demo`: the whole library working offline.
//!
//! A recorded three-round conversation (`fixtures/demo/`, derived from real provider
//! recordings) is served over loopback HTTP and parsed by the real adapter and HTTP client; the
//! loop runs in `auto` mode and the tools run for real: a weather lookup over a small bundled
//! table, the calculator and the clock. Only the model's side is recorded.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use agent_backends::replay::{Cassette, Chunking, ReplayBackend};
use agent_loop::SessionInput;
use agent_tools::{Registry, Tool, ToolError, builtin};
use agent_types::{RateCard, UserMessage};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::agent;
use agent_backends::Api;

use crate::args::LoopArgs;
use crate::config::{FileConfig, LoopSettings};
use crate::error::Error;
use crate::exit::Exit;
use crate::render::Renderer;

/// The demo's system prompt.
pub(crate) const SYSTEM: &str =
    "You are a concise travel assistant. Use the tools for facts; never guess.";

/// The question the recorded conversation answers.
pub(crate) const PROMPT: &str =
    "What's the weather in Lisbon and in Oslo right now, and how many degrees warmer is Lisbon?";

/// Runs the demo.
pub(crate) async fn run<O: Write, E: Write>(
    provider: Api,
    loop_args: &LoopArgs,
    renderer: &mut Renderer<O, E>,
) -> Result<Exit, Error> {
    let wire = provider.wire();
    let (model, rounds) = agent_backends::replay::demo(wire);
    // On a terminal the bytes arrive in small, paced pieces so the streaming is visible;
    // piped (tests, scripts) they go as fast as the socket allows.
    let paced = std::io::stderr().is_terminal() && !renderer.is_json();
    let cassettes = rounds.into_iter().map(|body| {
        let cassette = Cassette::body(body);
        if paced {
            cassette
                .with_chunking(Chunking::Every(48))
                .with_chunk_delay(Duration::from_millis(8))
        } else {
            cassette
        }
    });
    let backend = ReplayBackend::start(wire, cassettes)
        .await
        .map_err(|error| Error::Other(format!("cannot start the replay server: {error}")))?;

    // The demo ignores agentry.toml: it must behave the same on every machine.
    let settings = LoopSettings::resolve(loop_args, &FileConfig::default())?;
    let options = settings
        .options(RateCard::list_prices())
        .with_tools(tools()?)
        .require_approval_for(settings.require_approval.iter().cloned());

    let header = format!(
        "agentry demo · {} ({}) · a recorded conversation replayed over HTTP from {} through the \
         real adapter; the tools run for real",
        wire.name(),
        model,
        backend.server().url()
    );
    renderer
        .faint(&header)
        .and_then(|()| renderer.note(""))
        .and_then(|()| renderer.note(&format!("you: {PROMPT}")))
        .and_then(|()| renderer.note(""))
        .map_err(|error| Error::Other(format!("cannot write the output: {error}")))?;

    let input = SessionInput::User(UserMessage::text(PROMPT));
    let (options, recorder) =
        crate::accounting::attach(options, loop_args.accounting.as_deref(), wire.name()).await?;
    let agent = agent_loop::Agent::builder(backend, model)
        .system(SYSTEM)
        .with_options(options)
        .build();
    let mut session = agent.session();
    let exit = agent::drive(&agent, &mut session, input, renderer).await;
    if let Some(recorder) = recorder {
        recorder.finish().await;
    }
    Ok(exit)
}

/// The demo's tools.
fn tools() -> Result<Registry, Error> {
    let mut registry = Registry::new();
    for tool in [weather(), builtin::calculator(), builtin::clock()] {
        registry
            .register(tool)
            .map_err(|error| Error::Tools(error.to_string()))?;
    }
    Ok(registry)
}

#[derive(Deserialize, JsonSchema)]
struct City {
    /// The city's English name, e.g. `Lisbon`.
    city: String,
}

/// One row of the bundled weather table.
#[derive(Debug, Clone, Copy, Serialize)]
struct Conditions {
    city: &'static str,
    conditions: &'static str,
    temp_c: i32,
    wind_kph: u32,
    humidity_pct: u32,
}

/// A fixed table standing in for a weather service, so the demo needs no network.
const WEATHER: &[Conditions] = &[
    row("Lisbon", "sunny", 19, 12, 64),
    row("Oslo", "overcast", 4, 18, 81),
    row("Tokyo", "clear", 14, 9, 55),
    row("New York", "light rain", 9, 21, 78),
    row("Nairobi", "partly cloudy", 23, 14, 58),
    row("Sydney", "sunny", 26, 17, 49),
    row("São Paulo", "thunderstorms", 24, 11, 83),
    row("Reykjavik", "snow showers", -1, 32, 86),
];

const fn row(
    city: &'static str,
    conditions: &'static str,
    temp_c: i32,
    wind_kph: u32,
    humidity_pct: u32,
) -> Conditions {
    Conditions {
        city,
        conditions,
        temp_c,
        wind_kph,
        humidity_pct,
    }
}

/// `get_weather`: a lookup in [`WEATHER`]; an unknown city is an error the model can act on.
fn weather() -> Tool {
    Tool::from_fn(
        "get_weather",
        "Current weather for a city: conditions, temperature (°C), wind (km/h), humidity (%).",
        |args: City, _ctx| async move {
            let wanted = args.city.trim();
            WEATHER
                .iter()
                .find(|row| row.city.eq_ignore_ascii_case(wanted))
                .copied()
                .ok_or_else(|| {
                    let known: Vec<&str> = WEATHER.iter().map(|row| row.city).collect();
                    ToolError::respond_to_model(format!(
                        "no weather station for `{wanted}`; known cities: {}",
                        known.join(", ")
                    ))
                })
        },
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use agent_tools::{ToolContext, collect_output};
    use serde_json::json;

    #[tokio::test]
    async fn the_weather_table_answers_known_cities_and_names_them_otherwise() {
        let tool = weather();
        let lisbon = collect_output(tool.invoke(
            json!({"city": "lisbon"}),
            ToolContext::new("c", "get_weather"),
        ))
        .await
        .result
        .unwrap();
        assert_eq!(lisbon["temp_c"], 19);
        assert_eq!(lisbon["conditions"], "sunny");
        let error = collect_output(tool.invoke(
            json!({"city": "Atlantis"}),
            ToolContext::new("c", "get_weather"),
        ))
        .await
        .result
        .unwrap_err();
        assert!(
            error.message().contains("known cities: Lisbon, Oslo"),
            "{}",
            error.message()
        );
    }
}
