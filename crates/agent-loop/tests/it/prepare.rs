//! Per-round preparation: the requests the backend received, round by round (tools offered,
//! tool choice, settings), calls to a tool removed for the round refused as unknown, and a
//! recorded Anthropic tool call through the real adapter with a forced first round.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_backends::replay::{Cassette, ReplayBackend};
use agent_backends::{Provider, ScriptedBackend, ScriptedTurn};
use agent_loop::{Input, Options, RoundPlan, generate};
use agent_tools::{Registry, Tool};
use agent_types::{ErrorKind, GenerationSettings, Message, ToolCall, ToolChoice};
use serde_json::json;

fn names(request: &agent_types::ModelRequest) -> Vec<&str> {
    request
        .tools
        .iter()
        .map(|spec| spec.name.as_str())
        .collect()
}

/// Three tools that count their calls.
fn counted_tools(calls: &Arc<AtomicUsize>) -> Registry {
    let mut registry = Registry::new();
    for name in ["search", "fetch", "summarize"] {
        let calls = Arc::clone(calls);
        registry
            .register(Tool::from_json_fn(
                name,
                "A tool.",
                json!({"type": "object"}),
                move |_, _| {
                    let calls = Arc::clone(&calls);
                    async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        Ok(json!("ok"))
                    }
                },
            ))
            .unwrap();
    }
    registry
}

#[tokio::test]
async fn a_tool_is_forced_in_round_one_and_tools_are_removed_after_round_three() {
    let calls = Arc::new(AtomicUsize::new(0));
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("c1", "search", json!({})),
        ScriptedTurn::tool_call("c2", "fetch", json!({})),
        ScriptedTurn::tool_call("c3", "summarize", json!({})),
        ScriptedTurn::text("done"),
    ])
    .recording();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_in_hook = Arc::clone(&seen);
    let options = Options::auto()
        .with_tools(counted_tools(&calls))
        .with_prepare_round(move |round| {
            seen_in_hook.lock().unwrap().push((
                round.round,
                round.model_calls,
                round.history.len(),
                round.tools.len(),
            ));
            match round.round {
                1 => RoundPlan::new().with_tool_choice(ToolChoice::Tool {
                    name: "search".into(),
                }),
                2 => RoundPlan::new()
                    .with_tools(["fetch", "summarize"])
                    .with_settings(GenerationSettings {
                        temperature: Some(0.1),
                        ..GenerationSettings::default()
                    }),
                3 => RoundPlan::new(),
                _ => RoundPlan::new().with_tools(Vec::<String>::new()),
            }
        });

    let result = generate(&backend, Input::new("m").user("go"), &options)
        .await
        .unwrap();
    assert_eq!(result.text(), "done");
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    let requests = backend.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(names(&requests[0]), ["fetch", "search", "summarize"]);
    assert_eq!(
        requests[0].tool_choice,
        ToolChoice::Tool {
            name: "search".into()
        }
    );
    assert_eq!(requests[0].settings.temperature, None);
    assert_eq!(names(&requests[1]), ["fetch", "summarize"]);
    assert_eq!(requests[1].tool_choice, ToolChoice::Auto);
    assert_eq!(requests[1].settings.temperature, Some(0.1));
    // Nothing carries over: round 3 has every tool and the session's settings again.
    assert_eq!(names(&requests[2]), ["fetch", "search", "summarize"]);
    assert_eq!(requests[2].settings.temperature, None);
    assert!(requests[3].tools.is_empty());
    assert_eq!(
        *seen.lock().unwrap(),
        [(1, 0, 1, 3), (2, 1, 3, 3), (3, 2, 5, 3), (4, 3, 7, 3)]
    );
}

#[tokio::test]
async fn a_call_to_a_tool_removed_for_the_round_gets_the_unknown_tool_result() {
    let calls = Arc::new(AtomicUsize::new(0));
    let backend = ScriptedBackend::new([
        // The model ignores the round's tool list and calls `search` anyway, next to `fetch`.
        ScriptedTurn::tool_calls([
            ToolCall::new("c1", "search", json!({})),
            ToolCall::new("c2", "fetch", json!({})),
        ]),
        ScriptedTurn::text("done"),
    ]);
    let options = Options::auto()
        .with_tools(counted_tools(&calls))
        .with_tool_trace(true)
        .with_prepare_round(|_| RoundPlan::new().with_tools(["fetch"]));

    let result = generate(&backend, Input::new("m").user("go"), &options)
        .await
        .unwrap();
    // Only `fetch` ran.
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let Message::Tool(refused) = &result.messages[1] else {
        panic!("{:?}", result.messages[1]);
    };
    assert!(refused.is_error);
    assert_eq!(
        refused.content,
        "There is no tool named `search`. Available tools: fetch."
    );
    let Message::Tool(ran) = &result.messages[2] else {
        panic!("{:?}", result.messages[2]);
    };
    assert!(!ran.is_error);
}

#[tokio::test]
async fn a_plan_naming_a_tool_the_run_does_not_offer_is_a_configuration_error() {
    let calls = Arc::new(AtomicUsize::new(0));
    let backend = ScriptedBackend::new([ScriptedTurn::text("never")]);
    let options = Options::auto()
        .with_tools(counted_tools(&calls))
        .with_prepare_round(|_| RoundPlan::new().with_tools(["serach"]));
    let error = generate(&backend, Input::new("m").user("go"), &options)
        .await
        .unwrap_err();
    assert!(matches!(error.kind, ErrorKind::Config), "{error:?}");
    assert!(error.message.contains("serach"), "{}", error.message);
    assert_eq!(backend.calls(), 0);

    let options = Options::auto()
        .with_tools(counted_tools(&calls))
        .with_prepare_round(|_| {
            RoundPlan::new()
                .with_tools(["fetch"])
                .with_tool_choice(ToolChoice::Tool {
                    name: "search".into(),
                })
        });
    let error = generate(&backend, Input::new("m").user("go"), &options)
        .await
        .unwrap_err();
    assert!(
        error.message.contains("does not offer"),
        "{}",
        error.message
    );
    assert_eq!(backend.calls(), 0);
}

#[tokio::test]
async fn a_rounds_output_limit_is_still_clamped_by_the_token_budget() {
    let backend = ScriptedBackend::new([ScriptedTurn::text("short")]).recording();
    let options = Options::default()
        .with_token_budget(1_000)
        .with_prepare_round(|_| {
            RoundPlan::new().with_settings(GenerationSettings {
                max_output_tokens: Some(50_000),
                ..GenerationSettings::default()
            })
        });
    generate(&backend, Input::new("m").user("go"), &options)
        .await
        .unwrap();
    let limit = backend.requests()[0].settings.max_output_tokens.unwrap();
    assert!(limit < 1_000, "{limit}");

    let options = Options::default().with_prepare_round(|_| {
        RoundPlan::new().with_settings(GenerationSettings {
            max_output_tokens: Some(77),
            ..GenerationSettings::default()
        })
    });
    let backend = ScriptedBackend::new([ScriptedTurn::text("short")]).recording();
    generate(&backend, Input::new("m").user("go"), &options)
        .await
        .unwrap();
    assert_eq!(backend.requests()[0].settings.max_output_tokens, Some(77));
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/providers")
}

/// The recorded Anthropic `weather` tool call, then a recorded answer, through the real
/// adapter: round 1 forces the tool (Anthropic's `tool_choice: {"type": "tool"}` on the wire),
/// round 2 offers no tools at all.
#[tokio::test(flavor = "current_thread")]
async fn a_recorded_anthropic_run_gets_a_forced_tool_then_none() {
    let tool_call =
        Cassette::from_file(fixtures().join("anthropic/stream-tool-use-args.sse")).unwrap();
    let answer = Cassette::from_file(fixtures().join("anthropic/stream-text.sse")).unwrap();
    let backend = ReplayBackend::start(Provider::Anthropic, [tool_call, answer])
        .await
        .unwrap();
    let mut tools = Registry::new();
    tools
        .register(Tool::from_json_fn(
            "weather",
            "Weather for a location.",
            json!({"type": "object", "properties": {"location": {"type": "string"}}}),
            |_, _| async { Ok(json!({"sky": "fog"})) },
        ))
        .unwrap();
    tools
        .register(Tool::from_json_fn(
            "news",
            "Headlines.",
            json!({"type": "object"}),
            |_, _| async { Ok(json!([])) },
        ))
        .unwrap();
    let options = Options::auto()
        .with_tools(tools)
        .with_prepare_round(|round| match round.round {
            1 => RoundPlan::new()
                .with_tools(["weather"])
                .with_tool_choice(ToolChoice::Tool {
                    name: "weather".into(),
                }),
            _ => RoundPlan::new().with_tools(Vec::<String>::new()),
        });

    let result = generate(
        &backend,
        Input::new("claude-sonnet-4-5").user("Weather in San Francisco?"),
        &options,
    )
    .await
    .unwrap();
    assert!(!result.text().is_empty());

    let sent = backend.server().requests();
    assert_eq!(sent.len(), 2);
    let first = sent[0].json().unwrap();
    assert_eq!(
        first["tool_choice"],
        json!({"type": "tool", "name": "weather"})
    );
    let offered: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["weather"]);
    let second = sent[1].json().unwrap();
    assert!(second.get("tools").is_none(), "{second}");
    assert!(second.get("tool_choice").is_none(), "{second}");
}

#[tokio::test]
async fn the_final_answer_tool_stays_offered_when_a_round_removes_every_tool() {
    let calls = Arc::new(AtomicUsize::new(0));
    let backend = ScriptedBackend::new([ScriptedTurn::tool_call(
        "c1",
        agent_loop::output::DEFAULT_OUTPUT_NAME,
        json!({"answer": 42}),
    )])
    .recording();
    let options = Options::auto()
        .with_tools(counted_tools(&calls))
        .with_output_schema(json!({
            "type": "object",
            "properties": {"answer": {"type": "integer"}},
            "required": ["answer"]
        }))
        .with_output_strategy(agent_loop::OutputStrategy::Tool)
        .with_prepare_round(|_| RoundPlan::new().with_tools(Vec::<String>::new()));
    let result = generate(&backend, Input::new("m").user("go"), &options)
        .await
        .unwrap();
    assert_eq!(result.output, Some(json!({"answer": 42})));
    assert_eq!(
        names(&backend.requests()[0]),
        [agent_loop::output::DEFAULT_OUTPUT_NAME]
    );
}
