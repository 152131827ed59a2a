//! Structured output: every strategy (tool, prompted, native) against the scripted backend,
//! the retry with validation errors, the typed failure that keeps the raw answer, a refusal,
//! and retries counted against the budgets.

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{
    Input, Options, OutputSpec, OutputStrategy, Session, SessionInput, SessionStatus, execute,
    generate,
};
use agent_types::{
    AgentError, Budget, Capabilities, ErrorKind, Message, StopReason, StreamEvent, ToolChoice,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::{registry, usage, weather_tool};

/// The typed answer the tests ask for.
#[derive(Debug, PartialEq, Deserialize, schemars::JsonSchema)]
struct Report {
    /// The city.
    city: String,
    /// The temperature in °C.
    temp_c: i64,
    /// An optional remark.
    note: Option<String>,
}

fn oslo() -> Report {
    Report {
        city: "Oslo".into(),
        temp_c: 3,
        note: None,
    }
}

fn native_capabilities() -> Capabilities {
    Capabilities {
        tools: true,
        streaming: true,
        structured_output: true,
        usage_reporting: true,
        ..Capabilities::default()
    }
}

fn text_only_capabilities() -> Capabilities {
    Capabilities {
        streaming: true,
        usage_reporting: true,
        ..Capabilities::default()
    }
}

fn tool_errors(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|message| match message {
            Message::Tool(result) if result.is_error => Some(result.content.clone()),
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Tool strategy

#[tokio::test]
async fn auto_without_native_support_uses_a_final_answer_tool_the_model_must_call() {
    let backend = ScriptedBackend::new([ScriptedTurn::tool_call(
        "c1",
        "final_answer",
        json!({"city": "Oslo", "temp_c": 3}),
    )])
    .recording();
    let options = Options::default().with_output::<Report>();
    let result = generate(&backend, Input::new("m").user("Weather in Oslo?"), &options)
        .await
        .unwrap();

    assert_eq!(result.output::<Report>().unwrap(), oslo());
    assert_eq!(result.output, Some(json!({"city": "Oslo", "temp_c": 3})));
    assert_eq!(result.status, SessionStatus::Completed);
    assert_eq!(result.finish_reason, StopReason::Stop);
    assert!(result.pending_tool_calls.is_empty());
    let request = &backend.requests()[0];
    assert_eq!(
        request.tool_choice,
        ToolChoice::Tool {
            name: "final_answer".into()
        }
    );
    assert_eq!(request.tools.len(), 1);
    assert_eq!(request.tools[0].name, "final_answer");
    assert_eq!(
        *request.tools[0].parameters,
        agent_tools::schema_for::<Report>()
    );
    assert!(request.response_format.is_none());
    // The final-answer call is acknowledged, never run, so the history stays valid.
    match result.messages.last().unwrap() {
        Message::Tool(ack) => {
            assert_eq!(ack.tool_call_id.as_str(), "c1");
            assert!(!ack.is_error);
        }
        other => panic!("expected the answer's acknowledgement, got {other:?}"),
    }
}

#[tokio::test]
async fn the_final_answer_tool_works_alongside_other_tools_in_auto_mode() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("c1", "get_weather", json!({"city": "Denver"})),
        ScriptedTurn::tool_call(
            "c2",
            "final_answer",
            json!({"city": "Denver", "temp_c": 21, "note": "sunny"}),
        ),
    ])
    .recording();
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_output::<Report>();
    let result = generate(&backend, Input::new("m").user("Denver?"), &options)
        .await
        .unwrap();

    assert_eq!(
        result.output::<Report>().unwrap(),
        Report {
            city: "Denver".into(),
            temp_c: 21,
            note: Some("sunny".into())
        }
    );
    let requests = backend.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].tool_choice, ToolChoice::Required);
    let names: Vec<&str> = requests[0].tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["get_weather", "final_answer"]);
    // The weather tool ran: its result is in the second request.
    assert!(requests[1].messages.iter().any(|message| matches!(
        message,
        Message::Tool(result) if result.name == "get_weather" && result.content.contains("sunny")
    )));
}

#[tokio::test]
async fn a_final_answer_in_return_mode_completes_the_run_instead_of_suspending_it() {
    let backend = ScriptedBackend::new([ScriptedTurn::tool_calls([
        agent_types::ToolCall::new("c1", "get_weather", json!({"city": "Paris"})),
        agent_types::ToolCall::new("c2", "final_answer", json!({"city": "Oslo", "temp_c": 3})),
    ])]);
    let options = Options::default()
        .with_tools(registry([weather_tool()]))
        .with_output::<Report>();
    let result = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();
    assert_eq!(result.status, SessionStatus::Completed);
    assert_eq!(result.output::<Report>().unwrap(), oslo());
    // The other call of the answering turn is closed, not run.
    let errors = tool_errors(&result.messages);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("not run"), "{errors:?}");
}

#[tokio::test]
async fn an_invalid_answer_goes_back_with_the_validation_errors_and_the_retry_succeeds() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("c1", "final_answer", json!({"city": "Oslo", "temp_c": "3"})),
        ScriptedTurn::tool_call("c2", "final_answer", json!({"city": "Oslo", "temp_c": 3})),
    ])
    .recording();
    let options = Options::default().with_output::<Report>();
    let result = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();

    assert_eq!(result.output::<Report>().unwrap(), oslo());
    assert_eq!(result.model_calls.len(), 2);
    let retry = &backend.requests()[1];
    let feedback = tool_errors(&retry.messages);
    assert_eq!(feedback.len(), 1, "{feedback:?}");
    assert!(feedback[0].contains("/temp_c"), "{}", feedback[0]);
    assert!(feedback[0].contains("final_answer"), "{}", feedback[0]);
    // Once sent with a run of 22 spaces in the middle of its last sentence.
    assert!(
        feedback[0].ends_with("Call `final_answer` again with a corrected answer."),
        "{}",
        feedback[0]
    );
}

#[tokio::test]
async fn answers_still_invalid_after_the_retries_end_the_run_with_a_422_keeping_the_raw_answer() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("c1", "final_answer", json!({"city": 1, "temp_c": 3})),
        ScriptedTurn::tool_call("c2", "final_answer", json!({"temp_c": 3})),
    ]);
    let options = Options::default().with_output::<Report>();
    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();

    assert_eq!(backend.calls(), 2, "the default is one retry");
    assert_eq!(error.status(), 422);
    let ErrorKind::InvalidOutput { output } = &error.kind else {
        panic!("expected invalid_output, got {error:?}");
    };
    let (raw, errors) = (&output.raw, &output.errors);
    assert_eq!(raw, r#"{"temp_c":3}"#);
    assert!(errors.iter().any(|e| e.contains("city")), "{errors:?}");
    assert!(error.message.contains("2 tries"), "{}", error.message);
    let wire = serde_json::to_value(&error).unwrap();
    assert_eq!(wire["kind"], "invalid_output");
    assert_eq!(wire["raw"], r#"{"temp_c":3}"#);
    assert!(wire["errors"].is_array(), "{wire}");
    let back: AgentError = serde_json::from_value(wire).unwrap();
    assert_eq!(back, error);
}

#[tokio::test]
async fn no_retries_means_one_model_call() {
    let backend = ScriptedBackend::new([ScriptedTurn::tool_call(
        "c1",
        "final_answer",
        json!({"city": 1}),
    )]);
    let options = Options::default()
        .with_output::<Report>()
        .with_max_output_retries(0);
    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();
    assert_eq!(backend.calls(), 1);
    assert!(matches!(error.kind, ErrorKind::InvalidOutput { .. }));
}

#[tokio::test]
async fn a_text_answer_under_the_tool_strategy_is_accepted_when_valid_else_retried() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::text("It is cold."),
        ScriptedTurn::text(r#"{"city": "Oslo", "temp_c": 3}"#),
    ])
    .recording();
    let options = Options::default().with_output::<Report>();
    let result = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();
    assert_eq!(result.output::<Report>().unwrap(), oslo());
    let retry = &backend.requests()[1];
    let Some(Message::User(feedback)) = retry.messages.last() else {
        panic!("expected the feedback as a user turn");
    };
    let feedback = serde_json::to_string(feedback).unwrap();
    assert!(feedback.contains("not JSON"), "{feedback}");
    assert!(feedback.contains("final_answer"), "{feedback}");
}

#[tokio::test]
async fn a_registered_tool_named_like_the_final_answer_is_a_configuration_error() {
    let backend = ScriptedBackend::new([ScriptedTurn::text("never sent")]);
    let clash = agent_tools::Tool::from_json_fn(
        "final_answer",
        "clash",
        json!({"type": "object"}),
        |_: Value, _ctx| async move { Ok(json!(null)) },
    );
    let options = Options::default()
        .with_tools(registry([clash]))
        .with_output::<Report>();
    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Config);
    assert_eq!(backend.calls(), 0);

    // Renamed, it works.
    let backend = ScriptedBackend::new([ScriptedTurn::tool_call(
        "c1",
        "report",
        json!({"city": "Oslo", "temp_c": 3}),
    )]);
    let clash = agent_tools::Tool::from_json_fn(
        "final_answer",
        "clash",
        json!({"type": "object"}),
        |_: Value, _ctx| async move { Ok(json!(null)) },
    );
    let options = Options::default()
        .with_tools(registry([clash]))
        .with_output_spec(OutputSpec::of::<Report>().with_name("report"));
    let result = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();
    assert_eq!(result.output::<Report>().unwrap(), oslo());
}

// ---------------------------------------------------------------------------------------------
// Prompted strategy

#[tokio::test]
async fn prompted_puts_the_schema_in_the_system_prompt_and_parses_a_fenced_answer() {
    let backend = ScriptedBackend::new([ScriptedTurn::text(
        "Here you go:\n```json\n{\"city\": \"Oslo\", \"temp_c\": 3}\n```",
    )])
    .recording();
    let options = Options::default()
        .with_output::<Report>()
        .with_output_strategy(OutputStrategy::Prompted);
    let mut session = Session::new("m");
    session.system = Some("You are terse.".into());
    let result = execute(
        &mut session,
        SessionInput::User(agent_types::UserMessage::text("?")),
        &backend,
        &options,
    )
    .await
    .unwrap();

    assert_eq!(result.output::<Report>().unwrap(), oslo());
    let request = &backend.requests()[0];
    let system = request.system.as_deref().unwrap();
    assert!(system.starts_with("You are terse.\n\n"), "{system}");
    assert!(system.contains("JSON Schema"), "{system}");
    assert!(system.contains("\"temp_c\""), "{system}");
    assert!(request.tools.is_empty());
    assert_eq!(request.tool_choice, ToolChoice::Auto);
    // The session keeps its own prompt: the schema was the run's.
    assert_eq!(session.system.as_deref(), Some("You are terse."));
}

#[tokio::test]
async fn auto_on_a_backend_without_tools_or_native_output_is_prompted_and_retries_text() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::text(r#"{"city": "Oslo"}"#),
        ScriptedTurn::text(r#"{"city": "Oslo", "temp_c": 3}"#),
    ])
    .with_capabilities(text_only_capabilities())
    .recording();
    let options = Options::default().with_output::<Report>();
    let result = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();
    assert_eq!(result.output::<Report>().unwrap(), oslo());
    let requests = backend.requests();
    assert!(
        requests[0]
            .system
            .as_deref()
            .unwrap()
            .contains("JSON Schema")
    );
    let Some(Message::User(feedback)) = requests[1].messages.last() else {
        panic!("expected the feedback as a user turn");
    };
    let feedback = serde_json::to_string(feedback).unwrap();
    assert!(feedback.contains("temp_c"), "{feedback}");
    assert!(feedback.contains("only the corrected JSON"), "{feedback}");
}

#[tokio::test]
async fn an_explicit_strategy_the_backend_cannot_serve_is_refused_before_any_call() {
    let backend = ScriptedBackend::new([ScriptedTurn::text("{}")]);
    for strategy in [OutputStrategy::Native, OutputStrategy::Tool] {
        let backend = ScriptedBackend::new([ScriptedTurn::text("{}")])
            .with_capabilities(text_only_capabilities());
        let options = Options::default()
            .with_output::<Report>()
            .with_output_strategy(strategy);
        let error = generate(&backend, Input::new("m").user("?"), &options)
            .await
            .unwrap_err();
        assert_eq!(error.kind, ErrorKind::Config, "{strategy:?}");
        assert_eq!(backend.calls(), 0);
    }
    // Native on the default scripted backend (tools, no native output) too.
    let options = Options::default()
        .with_output::<Report>()
        .with_output_strategy(OutputStrategy::Native);
    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();
    assert!(error.message.contains("native"), "{}", error.message);
}

#[tokio::test]
async fn a_schema_that_is_not_an_object_schema_is_refused_before_any_call() {
    let backend = ScriptedBackend::new([ScriptedTurn::text("\"x\"")]);
    let options = Options::default().with_output_schema(json!({"type": "string"}));
    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Config);
    assert_eq!(error.status(), 400);
    assert_eq!(backend.calls(), 0);
}

// ---------------------------------------------------------------------------------------------
// Native strategy

#[tokio::test]
async fn auto_on_a_native_backend_sends_the_strict_schema_and_drops_nulls_for_optionals() {
    let backend = ScriptedBackend::new([ScriptedTurn::text(
        r#"{"city": "Oslo", "temp_c": 3, "note": null}"#,
    )])
    .with_capabilities(native_capabilities())
    .recording();
    let schema = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "temp_c": {"type": "integer"},
            "note": {"type": "string"}
        },
        "required": ["city", "temp_c"]
    });
    let options = Options::default().with_output_schema(schema);
    let result = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap();

    // `note` is optional and not nullable in the original schema: the null strict mode sends
    // for "absent" is dropped before validation.
    assert_eq!(result.output, Some(json!({"city": "Oslo", "temp_c": 3})));
    assert_eq!(result.output::<Report>().unwrap(), oslo());
    let request = &backend.requests()[0];
    assert!(request.tools.is_empty());
    assert_eq!(request.tool_choice, ToolChoice::Auto);
    let format = request.response_format.as_ref().unwrap();
    assert_eq!(format.name, "final_answer");
    assert!(format.strict);
    assert_eq!(
        format.schema,
        json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "temp_c": {"type": "integer"},
                "note": {"type": ["string", "null"]}
            },
            "required": ["city", "note", "temp_c"],
            "additionalProperties": false
        })
    );
}

#[tokio::test]
async fn without_an_output_schema_the_request_is_untouched() {
    let backend = ScriptedBackend::new([ScriptedTurn::text("hi")])
        .with_capabilities(native_capabilities())
        .recording();
    let result = generate(&backend, Input::new("m").user("?"), &Options::default())
        .await
        .unwrap();
    assert_eq!(result.output, None);
    let request = &backend.requests()[0];
    assert!(request.response_format.is_none());
    assert!(request.system.is_none());
    assert!(request.tools.is_empty());
    let error = result.output::<Report>().unwrap_err();
    assert_eq!(error.kind, ErrorKind::Config);
}

// ---------------------------------------------------------------------------------------------
// Refusals and budgets

#[tokio::test]
async fn a_refusal_is_its_own_error_not_a_parse_failure() {
    let backend = ScriptedBackend::new([ScriptedTurn::new()
        .with_event(StreamEvent::RefusalDelta {
            delta: "I can't help with that.".into(),
        })
        .finish(StopReason::ContentFilter)])
    .with_capabilities(native_capabilities());
    let options = Options::default().with_output::<Report>();
    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();
    assert_eq!(
        error.kind,
        ErrorKind::OutputRefused {
            refusal: "I can't help with that.".into()
        }
    );
    assert_eq!(error.status(), 422);
    assert_eq!(backend.calls(), 1, "a refusal is not retried");
}

#[tokio::test]
async fn retries_count_against_the_token_budget() {
    // The first call reports 550 tokens; the budget holds it but not the retry's request.
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("c1", "final_answer", json!({"city": 1}))
            .with_usage(usage(450, 100)),
        ScriptedTurn::tool_call("c2", "final_answer", json!({"city": "Oslo", "temp_c": 3}))
            .with_usage(usage(60, 40)),
    ]);
    let options = Options::default()
        .with_output::<Report>()
        .with_token_budget(600);
    let error: AgentError = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error.kind,
            ErrorKind::BudgetExceeded {
                budget: Budget::RequestTokens { .. } | Budget::Tokens { .. }
            }
        ),
        "{error:?}"
    );
    assert_eq!(error.spent.usage.total_tokens(), Some(550), "{error:?}");
    assert_eq!(backend.calls(), 1, "the retry was never sent");
}

#[tokio::test]
async fn retries_count_against_max_tool_iterations() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("c1", "get_weather", json!({"city": "Paris"})),
        ScriptedTurn::tool_call("c2", "final_answer", json!({"city": 1})),
        ScriptedTurn::tool_call("c3", "final_answer", json!({"city": "Oslo", "temp_c": 3})),
    ]);
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_output::<Report>()
        .with_max_tool_iterations(1);
    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();
    assert_eq!(
        error.kind,
        ErrorKind::BudgetExceeded {
            budget: Budget::Iterations { used: 1, max: 1 }
        }
    );
    assert_eq!(backend.calls(), 2);
}

// ---------------------------------------------------------------------------------------------
// Streaming

fn outputs(events: &[agent_types::AgentEvent]) -> (Vec<Value>, Vec<Value>) {
    let mut partial = Vec::new();
    let mut last = Vec::new();
    for event in events {
        match event {
            agent_types::AgentEvent::OutputPartial { value } => partial.push(value.clone()),
            agent_types::AgentEvent::Output { value } => last.push(value.clone()),
            _ => {}
        }
    }
    (partial, last)
}

#[tokio::test]
async fn streaming_emits_growing_partial_objects_then_the_validated_answer() {
    for strategy in [OutputStrategy::Tool, OutputStrategy::Prompted] {
        let turn = if strategy == OutputStrategy::Tool {
            ScriptedTurn::tool_call(
                "c1",
                "final_answer",
                json!({"city": "Oslo", "temp_c": 3, "note": "windy"}),
            )
        } else {
            ScriptedTurn::text(r#"{"city": "Oslo", "temp_c": 3, "note": "windy"}"#)
        };
        let backend = ScriptedBackend::new([turn.chunked(4)]);
        let options = Options::default()
            .with_output::<Report>()
            .with_output_strategy(strategy);
        let (events, result) = crate::support::collect(agent_loop::generate_stream(
            backend,
            Input::new("m").user("?"),
            &options,
        ))
        .await;
        let result = result.unwrap();
        let (partial, last) = outputs(&events);

        assert_eq!(
            last,
            [json!({"city": "Oslo", "temp_c": 3, "note": "windy"})]
        );
        assert_eq!(result.output.as_ref(), last.first());
        assert!(partial.len() >= 3, "{strategy:?}: {partial:?}");
        // Each partial object is a prefix of the answer: members only appear, and a string
        // only grows, and the last partial is the whole answer.
        let growing = |value: &Value| {
            value["city"]
                .as_str()
                .is_some_and(|city| city.len() < 4 && "Oslo".starts_with(city))
        };
        assert!(partial.iter().any(growing), "{partial:?}");
        assert_eq!(partial.last(), last.first(), "{strategy:?}");
        // The validated answer comes after every partial one.
        let at = |wanted: &str| {
            events
                .iter()
                .rposition(|event| crate::support::kind(event) == wanted)
                .unwrap()
        };
        assert!(at("output_partial") < at("output"));
    }
}

#[tokio::test]
async fn no_output_events_without_an_output_schema() {
    let backend = ScriptedBackend::new([ScriptedTurn::text(r#"{"city": "Oslo"}"#).chunked(3)]);
    let (events, result) = crate::support::collect(agent_loop::generate_stream(
        backend,
        Input::new("m").user("?"),
        &Options::default(),
    ))
    .await;
    result.unwrap();
    let (partial, last) = outputs(&events);
    assert!(partial.is_empty() && last.is_empty());
}

#[tokio::test]
async fn with_reasoning_on_the_final_answer_tool_is_offered_not_forced() {
    let backend = ScriptedBackend::new([ScriptedTurn::tool_call(
        "c1",
        "final_answer",
        json!({"city": "Oslo", "temp_c": 3}),
    )])
    .recording();
    let input = Input::new("m")
        .user("?")
        .settings(agent_types::GenerationSettings {
            reasoning: Some(agent_types::Reasoning {
                effort: None,
                budget_tokens: Some(2_048),
            }),
            ..agent_types::GenerationSettings::default()
        });
    let options = Options::default().with_output::<Report>();
    let result = generate(&backend, input, &options).await.unwrap();
    assert_eq!(result.output::<Report>().unwrap(), oslo());
    let request = &backend.requests()[0];
    assert_eq!(request.tool_choice, ToolChoice::Auto);
    assert_eq!(request.tools[0].name, "final_answer");
}
