//! `Agent`: the front door over the free functions, and agents as tools of other agents
//! (nested events with the path of agents, usage and cost rolled into the parent, the
//! parent's remaining budgets as the child's cap, cancellation, the nested trace), with the
//! scripted backend and one replayed real-provider answer.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_backends::replay::{Cassette, ReplayBackend};
use agent_backends::{Provider, ScriptedBackend, ScriptedTurn};
use agent_loop::{
    Agent, Options, OutputStrategy, Session, SessionStatus, ToolErrorMode, ToolParallelism,
};
use agent_types::{
    AgentEvent, Backend, Budget, ErrorKind, Message, ModelPrice, RateCard, StopReason,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::{collect, registry, usage, weather_tool};

fn scripted(turns: impl IntoIterator<Item = ScriptedTurn>) -> Arc<ScriptedBackend> {
    Arc::new(ScriptedBackend::new(turns).recording())
}

fn shared(backend: &Arc<ScriptedBackend>) -> Arc<dyn Backend> {
    Arc::clone(backend) as Arc<dyn Backend>
}

/// The child: asks for the weather in Denver, then answers.
fn researcher(backend: &Arc<ScriptedBackend>) -> Agent {
    Agent::builder_shared(shared(backend), "child-model")
        .system("You research weather.")
        .tools(registry([weather_tool()]))
        .build()
}

fn child_turns() -> Vec<ScriptedTurn> {
    vec![
        ScriptedTurn::tool_call("c1", "get_weather", json!({"city": "Denver"}))
            .with_usage(usage(100, 10)),
        ScriptedTurn::text("Denver is sunny, 21 °C.").with_usage(usage(200, 20)),
    ]
}

fn ask(tool: &str, id: &str, input: &str) -> ScriptedTurn {
    ScriptedTurn::tool_call(id, tool, json!({"input": input}))
}

fn prices() -> RateCard {
    // $1 per million input tokens, $2 per million output tokens, for both models.
    let price = ModelPrice {
        input_per_mtok: 1.0,
        output_per_mtok: 2.0,
        ..ModelPrice::default()
    };
    RateCard::new()
        .with("parent-model", price)
        .with("child-model", price)
}

#[tokio::test]
async fn an_agent_runs_streams_and_resumes_a_session_sharing_its_tools() {
    let backend = scripted([
        ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Paris"})),
        ScriptedTurn::text("Rain in Paris."),
        ScriptedTurn::text("Streamed."),
        ScriptedTurn::text("First."),
        ScriptedTurn::text("Second."),
    ]);
    let agent = Agent::builder_shared(shared(&backend), "test-model")
        .system("Be brief.")
        .tools(registry([weather_tool()]))
        .options(|o| o.with_tool_trace(true))
        .build();

    let result = agent.run("Weather in Paris?").await.unwrap();
    assert_eq!(result.text(), "Rain in Paris.");
    assert_eq!(result.trace[0].tool_name, "get_weather");
    let request = &backend.requests()[0];
    assert_eq!(request.system.as_deref(), Some("Be brief."));
    assert_eq!(request.model, "test-model");

    let (events, streamed) = collect(agent.run_stream("Hi")).await;
    assert_eq!(streamed.unwrap().text(), "Streamed.");
    assert!(matches!(events[0], AgentEvent::SessionStart { .. }));

    // A session for the agent, resumed twice, through JSON in between.
    let mut session = agent.session();
    assert_eq!(session.system.as_deref(), Some("Be brief."));
    agent.resume(&mut session, "One").await.unwrap();
    let mut session = Session::from_json(&session.to_json().unwrap()).unwrap();
    let (_, second) = collect(agent.resume_stream(&mut session, "Two")).await;
    assert_eq!(second.unwrap().text(), "Second.");
    assert_eq!(session.messages.len(), 4);
    assert_eq!(session.status, SessionStatus::Completed);

    // Clones and variants share the registry: no copy per agent or per run.
    let variant = agent
        .to_builder()
        .options(|o| o.with_max_tool_iterations(1))
        .build();
    assert!(Arc::ptr_eq(
        &agent.options().tools,
        &variant.options().tools
    ));
    assert!(Arc::ptr_eq(
        &agent.clone().options().tools,
        &agent.options().tools
    ));
    assert_eq!(variant.options().max_tool_iterations, 1);
    assert_eq!(agent.options().max_tool_iterations, 10);
}

#[tokio::test]
async fn a_sub_agents_events_usage_cost_and_trace_nest_in_the_parents_run() {
    let child_backend = scripted(child_turns());
    let child = Agent::builder_shared(shared(&child_backend), "child-model")
        .tools(registry([weather_tool()]))
        .options(|o| o.with_rate_card(prices()))
        .build();
    let parent_backend = scripted([
        ask("researcher", "p1", "Weather in Denver?").with_usage(usage(50, 5)),
        ScriptedTurn::text("It is sunny.").with_usage(usage(80, 8)),
    ]);
    let parent = Agent::builder_shared(shared(&parent_backend), "parent-model")
        .tools(registry([
            child.as_tool("researcher", "Researches a question.")
        ]))
        .options(|o| o.with_rate_card(prices()).with_tool_trace(true))
        .build();

    let (events, result) = collect(parent.run_stream("Weather?")).await;
    let result = result.unwrap();
    assert_eq!(result.text(), "It is sunny.");

    // The child's prompt is the call's input, under the child's own system prompt and model.
    let child_request = &child_backend.requests()[0];
    assert_eq!(child_request.model, "child-model");
    assert_eq!(
        child_request.messages[0],
        Message::User(agent_types::UserMessage::text("Weather in Denver?"))
    );

    // Every child event sits between the parent's start and end of the call, wrapped with
    // the path and the parent's call id, from the child's session_start to its session_end.
    let start = events
        .iter()
        .position(|e| matches!(e, AgentEvent::ToolExecutionStart { tool_name, .. } if tool_name == "researcher"))
        .unwrap();
    let end = events
        .iter()
        .position(|e| matches!(e, AgentEvent::ToolExecutionEnd { tool_name, .. } if tool_name == "researcher"))
        .unwrap();
    let nested: Vec<&AgentEvent> = events[start + 1..end]
        .iter()
        .map(|event| match event {
            AgentEvent::SubAgent {
                call_id,
                path,
                event,
            } => {
                assert_eq!(call_id.as_str(), "p1");
                assert_eq!(path, &["researcher"]);
                &**event
            }
            other => panic!("a parent event inside the call: {other:?}"),
        })
        .collect();
    assert!(matches!(nested[0], AgentEvent::SessionStart { .. }));
    assert!(matches!(
        nested.last().unwrap(),
        AgentEvent::SessionEnd {
            finish_reason: StopReason::Stop,
            ..
        }
    ));
    assert!(nested.iter().any(|e| matches!(e, AgentEvent::ToolExecutionEnd { tool_name, .. } if tool_name == "get_weather")));
    assert!(
        events
            .iter()
            .filter(|e| matches!(e, AgentEvent::SubAgent { .. }))
            .count()
            == nested.len()
    );
    match &events[end] {
        AgentEvent::ToolExecutionEnd { output, .. } => {
            assert_eq!(output, "Denver is sunny, 21 °C.");
        }
        other => panic!("{other:?}"),
    }
    // The wire form: one object, the child's event inside it.
    let wire = serde_json::to_value(&events[start + 1]).unwrap();
    assert_eq!(wire["type"], "sub_agent");
    assert_eq!(wire["path"], json!(["researcher"]));
    assert_eq!(wire["event"]["type"], "session_start");
    let back: AgentEvent = serde_json::from_value(wire).unwrap();
    assert_eq!(&back, &events[start + 1]);

    // Usage and cost: the parent's two calls plus the child's two.
    assert_eq!(result.usage, usage(50 + 80 + 100 + 200, 5 + 8 + 10 + 20));
    let expected_usd = (430.0 * 1.0 + 43.0 * 2.0) / 1e6;
    assert!(
        (result.cost_usd.unwrap() - expected_usd).abs() < 1e-12,
        "{:?}",
        result.cost_usd
    );
    assert_eq!(result.model_calls.len(), 2, "the parent's own calls");

    // The child's trace hangs off the parent's entry for the call.
    assert_eq!(result.trace.len(), 1);
    assert_eq!(result.trace[0].tool_name, "researcher");
    assert_eq!(result.trace[0].sub_trace.len(), 1);
    assert_eq!(result.trace[0].sub_trace[0].tool_name, "get_weather");
    let wire = serde_json::to_value(&result.trace[0]).unwrap();
    assert_eq!(wire["sub_trace"][0]["tool_name"], "get_weather");
}

#[tokio::test]
async fn without_streaming_a_sub_agent_builds_no_events_and_still_reports_its_spend() {
    let child_backend = scripted(child_turns());
    let child = researcher(&child_backend);
    let parent_backend = scripted([
        ask("researcher", "p1", "Weather in Denver?").with_usage(usage(50, 5)),
        ScriptedTurn::text("Sunny.").with_usage(usage(80, 8)),
    ]);
    let parent = Agent::builder_shared(shared(&parent_backend), "parent-model")
        .tools(registry([child.as_tool("researcher", "Researches.")]))
        .build();

    let result = parent.run("Weather?").await.unwrap();
    assert_eq!(result.text(), "Sunny.");
    assert_eq!(result.usage, usage(430, 43));
    assert!(result.trace.is_empty(), "the parent asked for no trace");
}

#[tokio::test]
async fn grandchildren_events_carry_the_whole_path() {
    let leaf_backend = scripted([ScriptedTurn::text("leaf answer").with_usage(usage(1, 1))]);
    let leaf = Agent::builder_shared(shared(&leaf_backend), "m").build();
    let middle_backend = scripted([
        ask("leaf", "m1", "go").with_usage(usage(1, 1)),
        ScriptedTurn::text("middle answer").with_usage(usage(1, 1)),
    ]);
    let middle = Agent::builder_shared(shared(&middle_backend), "m")
        .tools(registry([leaf.as_tool("leaf", "The leaf.")]))
        .build();
    let top_backend = scripted([
        ask("middle", "t1", "go").with_usage(usage(1, 1)),
        ScriptedTurn::text("top answer").with_usage(usage(1, 1)),
    ]);
    let top = Agent::builder_shared(shared(&top_backend), "m")
        .tools(registry([middle.as_tool("middle", "The middle.")]))
        .build();

    let (events, result) = collect(top.run_stream("go")).await;
    let result = result.unwrap();
    assert_eq!(result.text(), "top answer");
    assert_eq!(result.usage, usage(5, 5));
    let leaf_text: Vec<_> = events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::SubAgent {
                call_id,
                path,
                event,
            } if path == &["middle", "leaf"] => {
                assert_eq!(call_id.as_str(), "t1");
                match &**event {
                    AgentEvent::TextEnd { text } => Some(text.clone()),
                    _ => None,
                }
            }
            _ => None,
        })
        .collect();
    assert_eq!(leaf_text, ["leaf answer"]);
}

/// The parent spends 350 of its 1,000 tokens, then calls the child, whose answer costs 700:
/// more than the 650 the parent had left.
async fn overspending_child(
    mode: ToolErrorMode,
) -> (agent_types::AgentError, Arc<ScriptedBackend>) {
    let child_backend =
        scripted([ScriptedTurn::text("A long answer.").with_usage(usage(600, 100))]);
    // The child's own budget is larger: the parent's remainder is the tighter cap.
    let child = Agent::builder_shared(shared(&child_backend), "child-model")
        .options(|o| o.with_token_budget(10_000))
        .build();
    let parent_backend = scripted([
        ask("researcher", "p1", "Explain.").with_usage(usage(300, 50)),
        ScriptedTurn::text("never reached").with_usage(usage(1, 1)),
    ]);
    let parent = Agent::builder_shared(shared(&parent_backend), "parent-model")
        .tools(registry([child.as_tool("researcher", "Researches.")]))
        .options(|o| o.with_token_budget(1_000).with_tool_error_mode(mode))
        .build();
    let error = parent.run("Explain.").await.unwrap_err();
    assert_eq!(
        parent_backend.calls(),
        1,
        "the parent made no call past its budget"
    );
    (error, child_backend)
}

fn child_output_limit(child_backend: &ScriptedBackend) -> u32 {
    child_backend.requests()[0]
        .settings
        .max_output_tokens
        .expect("the child's output was clamped to what the parent had left")
}

#[tokio::test]
async fn a_child_gets_the_parents_remaining_budget_and_its_overspend_ends_the_parent_under_recover()
{
    let (error, child_backend) = overspending_child(ToolErrorMode::Recover).await;
    // Clamped to the 650 tokens the parent had left, less the request's estimate.
    let limit = child_output_limit(&child_backend);
    assert!(limit < 650, "{limit}");
    // The child tripped its (capped) budget: the model would see a tool error, but the
    // parent's own budget, which counts the child's 700, ends the run first.
    let Some(Budget::Tokens { used, max }) = error.budget_exceeded() else {
        panic!("expected the parent's token budget, got {error:?}");
    };
    assert_eq!((*used, *max), (1_050, 1_000));
    assert_eq!(error.spent.usage, usage(900, 150));
    let Some(Message::Tool(result)) = error.partial_messages.last() else {
        panic!("{:?}", error.partial_messages);
    };
    assert!(result.is_error);
    assert!(
        result.content.contains("the agent `researcher` failed")
            && result.content.contains("token budget"),
        "{}",
        result.content
    );
}

#[tokio::test]
async fn under_abort_a_child_over_budget_is_the_parents_tool_error() {
    let (error, child_backend) = overspending_child(ToolErrorMode::Abort).await;
    assert!(child_output_limit(&child_backend) < 650);
    assert_eq!(
        error.kind,
        ErrorKind::Tool {
            tool: "researcher".into()
        }
    );
    assert!(error.message.contains("token budget"), "{}", error.message);
    // What the child spent is in the parent's totals all the same.
    assert_eq!(error.spent.usage, usage(900, 150));
}

#[tokio::test]
async fn serial_siblings_each_get_what_the_earlier_ones_left() {
    let child_backend = scripted([
        ScriptedTurn::text("first").with_usage(usage(300, 100)),
        ScriptedTurn::text("second").with_usage(usage(10, 10)),
    ]);
    let child = Agent::builder_shared(shared(&child_backend), "child-model").build();
    let parent_backend = scripted([
        ScriptedTurn::tool_calls([
            agent_types::ToolCall::new("p1", "researcher", json!({"input": "one"})),
            agent_types::ToolCall::new("p2", "researcher", json!({"input": "two"})),
        ])
        .with_usage(usage(10, 10)),
        ScriptedTurn::text("done").with_usage(usage(10, 10)),
    ]);
    let parent = Agent::builder_shared(shared(&parent_backend), "parent-model")
        .tools(registry([child.as_tool("researcher", "Researches.")]))
        .options(|o| {
            o.with_token_budget(2_000)
                .with_tool_parallelism(ToolParallelism::Serial)
        })
        .build();
    let result = parent.run("go").await.unwrap();
    assert_eq!(result.usage, usage(330, 130));
    let requests = child_backend.requests();
    let (first, second) = (
        requests[0].settings.max_output_tokens.unwrap(),
        requests[1].settings.max_output_tokens.unwrap(),
    );
    // The second child started after the first reported its 400 tokens.
    assert!(first < 1_980 && second < first - 350, "{first} {second}");
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_parent_cancels_the_child_mid_call() {
    let child_backend = scripted([ScriptedTurn::new().with_text("thinking…").hang()]);
    let child = Agent::builder_shared(shared(&child_backend), "child-model").build();
    let parent_backend = scripted([
        ask("researcher", "p1", "Explain.").with_usage(usage(1, 1)),
        ScriptedTurn::text("never reached"),
    ]);
    let token = CancellationToken::new();
    let parent = Agent::builder_shared(shared(&parent_backend), "parent-model")
        .tools(registry([child.as_tool("researcher", "Researches.")]))
        .options(|o| o.with_cancellation(token.clone()))
        .build();
    let cancel = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        cancel.cancel();
    });
    let (events, result) = tokio::time::timeout(
        Duration::from_secs(60),
        collect(parent.run_stream("Explain.")),
    )
    .await
    .expect("the run ends soon after the cancellation");
    let error = result.unwrap_err();
    assert!(error.is_aborted(), "{error:?}");
    assert_eq!(child_backend.calls(), 1);
    // The child ended its own run as aborted, inside the parent's stream.
    assert!(events.iter().any(|event| matches!(
        event,
        AgentEvent::SubAgent { event, .. }
            if matches!(**event, AgentEvent::SessionEnd { finish_reason: StopReason::Aborted, .. })
    )));
    assert_eq!(parent_backend.calls(), 1);
}

#[tokio::test]
async fn a_sub_agent_that_suspends_for_a_remote_tool_is_a_fatal_tool_error() {
    let child_backend = scripted([ScriptedTurn::tool_call("r1", "ask_human", json!({}))]);
    let mut tools = agent_tools::Registry::new();
    tools
        .register(agent_tools::Tool::remote(
            "ask_human",
            "Asks a person.",
            json!({"type": "object"}),
        ))
        .unwrap();
    let child = Agent::builder_shared(shared(&child_backend), "child-model")
        .tools(tools)
        .build();
    let parent_backend = scripted([ask("researcher", "p1", "x"), ScriptedTurn::text("no")]);
    let parent = Agent::builder_shared(shared(&parent_backend), "parent-model")
        .tools(registry([child.as_tool("researcher", "Researches.")]))
        .build();
    let error = parent.run("x").await.unwrap_err();
    assert_eq!(
        error.kind,
        ErrorKind::Tool {
            tool: "researcher".into()
        }
    );
    assert!(error.message.contains("remote tools"), "{}", error.message);
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Topic {
    /// What to research.
    topic: String,
    /// How many facts.
    facts: u32,
}

#[tokio::test]
async fn a_typed_sub_agent_gets_its_arguments_as_json_and_answers_with_its_output() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Facts {
        facts: Vec<String>,
    }
    let child_backend = scripted([ScriptedTurn::text(r#"{"facts": ["a", "b"]}"#)]);
    let child = Agent::builder_shared(shared(&child_backend), "child-model")
        .output::<Facts>()
        .options(|o| o.with_output_strategy(OutputStrategy::Prompted))
        .build();
    let tool = child.as_tool_with_input::<Topic>("facts", "Facts about a topic.");
    assert_eq!(
        tool.spec().parameters["required"],
        json!(["topic", "facts"])
    );
    let parent_backend = scripted([
        ScriptedTurn::tool_call("p1", "facts", json!({"topic": "owls", "facts": 2})),
        ScriptedTurn::text("Owls: a, b."),
    ]);
    let parent = Agent::builder_shared(shared(&parent_backend), "parent-model")
        .tools(registry([tool]))
        .build();
    let result = parent.run("Tell me about owls.").await.unwrap();
    assert_eq!(result.text(), "Owls: a, b.");
    let prompt: Value = match &child_backend.requests()[0].messages[0] {
        Message::User(user) => match &user.content[0] {
            agent_types::UserBlock::Text { text } => serde_json::from_str(text).unwrap(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    assert_eq!(prompt, json!({"topic": "owls", "facts": 2}));
    // The parent's model saw the child's validated output.
    let Message::Tool(sent) = &parent_backend.requests()[1].messages[2] else {
        panic!()
    };
    assert_eq!(
        serde_json::from_str::<Value>(&sent.content).unwrap(),
        json!({"facts": ["a", "b"]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_openai_responses_answer_serves_as_the_sub_agent() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/providers/openai-responses/stream-text.sse");
    let cassette = Cassette::from_file(fixture).unwrap();
    let provider: Provider = "openai-responses".parse().unwrap();
    let replay = ReplayBackend::start(provider, [cassette]).await.unwrap();
    let child = Agent::builder(replay, "gpt-4o").build();
    let parent_backend = scripted([
        ask("geographer", "p1", "What is the capital of France?").with_usage(usage(10, 2)),
        ScriptedTurn::text("Paris.").with_usage(usage(20, 2)),
    ]);
    let parent = Agent::builder_shared(shared(&parent_backend), "parent-model")
        .tools(registry([child.as_tool("geographer", "Knows capitals.")]))
        .options(|o| o.with_tool_trace(true))
        .build();

    let (events, result) = collect(parent.run_stream("Capital of France?")).await;
    let result = result.unwrap();
    assert_eq!(result.text(), "Paris.");
    // The recorded answer is the tool's result the parent's model saw.
    let Message::Tool(sent) = &parent_backend.requests()[1].messages[2] else {
        panic!()
    };
    assert_eq!(sent.content, "The capital of France is Paris.");
    // The recorded usage (278 in, 9 out) is in the parent's.
    assert_eq!(
        (result.usage.input_tokens, result.usage.output_tokens),
        (Some(10 + 20 + 278), Some(2 + 2 + 9))
    );
    let deltas: String = events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::SubAgent { event, .. } => match &**event {
                AgentEvent::TextDelta { delta } => Some(delta.as_str()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(deltas, "The capital of France is Paris.");
}

#[tokio::test]
async fn options_added_later_are_reachable_without_an_agent_change() {
    // Every `Options` setter goes through `options(|o| …)`; a whole `Options` too.
    let backend = scripted([ScriptedTurn::text("ok")]);
    let options = Options::auto().with_max_repeated_calls(None);
    let agent = Agent::builder_shared(shared(&backend), "m")
        .with_options(options)
        .options(|o| o.with_agent_name("helper"))
        .build();
    assert_eq!(agent.options().max_repeated_calls, None);
    assert_eq!(agent.options().agent_name.as_deref(), Some("helper"));
    assert_eq!(agent.run("hi").await.unwrap().text(), "ok");
}
