//! Guardrails: input trips (before and beside the first model call), tool guardrails before
//! (deny, rewrite, require approval) and after a call (redact), output retries and trips.

use std::time::Duration;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{
    CallCheck, CallVerdict, Guardrails, Input, Options, ResultCheck, ResultVerdict, Session,
    SessionStatus, ToolGuardrail, Verdict, execute, generate, generate_stream,
};
use agent_types::{AgentEvent, ErrorKind, GuardrailAction, GuardrailStage, Message, ToolResult};
use serde_json::json;

use crate::support::{collect, kind, registry, weather_tool};

fn tool_result(message: &Message) -> &ToolResult {
    match message {
        Message::Tool(result) => result,
        other => panic!("expected a tool result, got {other:?}"),
    }
}

fn no_passwords() -> Guardrails {
    Guardrails::new().input_fn("no-passwords", |input| async move {
        if input.text.contains("password") {
            Verdict::Trip("the input asks about a password".into())
        } else {
            Verdict::Pass
        }
    })
}

#[tokio::test]
async fn an_input_trip_aborts_with_the_typed_error_and_no_model_call() {
    let backend = ScriptedBackend::new([ScriptedTurn::text("hunter2")]).recording();
    let options = Options::auto().with_guardrails(no_passwords());

    let (events, result) = collect(generate_stream(
        &backend,
        Input::new("m").user("What is the admin password?"),
        &options,
    ))
    .await;
    let error = result.unwrap_err();

    assert_eq!(
        error.kind,
        ErrorKind::GuardrailTripped {
            guardrail: "no-passwords".into(),
            stage: GuardrailStage::Input,
        }
    );
    assert_eq!(error.status(), 403);
    assert!(error.message.contains("the input asks about a password"));
    assert_eq!(backend.calls(), 0, "no model call was made");
    let kinds: Vec<String> = events.iter().map(kind).collect();
    assert_eq!(
        kinds,
        ["session_start", "guardrail_tripped", "error", "session_end"]
    );
    let AgentEvent::GuardrailTripped { decision } = &events[1] else {
        panic!("{:?}", events[1]);
    };
    assert_eq!(decision.guardrail, "no-passwords");
    assert_eq!(decision.action, GuardrailAction::Trip);
    assert_eq!(decision.reason, "the input asks about a password");

    // A passing input runs as usual.
    let result = generate(&backend, Input::new("m").user("Hello"), &options)
        .await
        .unwrap();
    assert_eq!(result.text(), "hunter2");
}

#[tokio::test(start_paused = true)]
async fn a_concurrent_input_trip_cancels_the_model_call_in_flight() {
    // The model's answer takes 10 s; the guardrail trips after 1 s.
    let backend =
        ScriptedBackend::new([ScriptedTurn::text("too late").with_delay(Duration::from_secs(10))])
            .recording();
    let guardrails = Guardrails::new()
        .input_fn("slow-moderation", |_input| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Verdict::Trip("flagged".into())
        })
        .concurrent_input(true);
    let options = Options::auto().with_guardrails(guardrails);

    let started = tokio::time::Instant::now();
    let error = generate(&backend, Input::new("m").user("hi"), &options)
        .await
        .unwrap_err();

    assert!(matches!(error.kind, ErrorKind::GuardrailTripped { .. }));
    assert_eq!(backend.calls(), 1, "the call had started beside the check");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the call in flight was dropped, not awaited: {:?}",
        started.elapsed()
    );
    assert!(
        error.partial_messages.is_empty(),
        "no answer joined the history"
    );

    // A passing concurrent check waits for both, and the answer stands.
    let backend = ScriptedBackend::new([ScriptedTurn::text("fine")]);
    let guardrails = Guardrails::new()
        .input_fn("slow-moderation", |_input| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Verdict::Pass
        })
        .concurrent_input(true);
    let options = Options::auto().with_guardrails(guardrails);
    let result = generate(&backend, Input::new("m").user("hi"), &options)
        .await
        .unwrap();
    assert_eq!(result.text(), "fine");
}

/// Denies `get_weather` for Paris, rewrites any other city to upper case, asks a person for
/// Oslo, and redacts the word "sunny" from results.
struct WeatherRules;

impl ToolGuardrail for WeatherRules {
    fn name(&self) -> &str {
        "weather-rules"
    }

    fn before_call(&self, call: &CallCheck<'_>) -> CallVerdict {
        match call.arguments["city"].as_str() {
            Some("Paris") => CallVerdict::Deny("Paris is out of bounds".into()),
            Some("Oslo") => CallVerdict::RequireApproval("Oslo needs a person".into()),
            Some("denver") => CallVerdict::Rewrite {
                arguments: json!({"city": "Denver"}),
                reason: "city names are capitalized".into(),
            },
            _ => CallVerdict::Allow,
        }
    }

    fn after_call(&self, _call: &ResultCheck<'_>, result: &mut ToolResult) -> ResultVerdict {
        if result.content.contains("sunny") {
            result.content = result.content.replace("sunny", "[REDACTED]");
            ResultVerdict::Redacted("a weather word".into())
        } else {
            ResultVerdict::Keep
        }
    }
}

#[tokio::test]
async fn a_tool_guardrail_denies_rewrites_and_redacts_before_the_model_sees_it() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_calls([
            agent_types::ToolCall::new("call_1", "get_weather", json!({"city": "Paris"})),
            agent_types::ToolCall::new("call_2", "get_weather", json!({"city": "denver"})),
        ]),
        ScriptedTurn::text("done"),
    ])
    .recording();
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_tool_trace(true)
        .with_guardrails(Guardrails::new().tool(WeatherRules));

    let (events, result) = collect(generate_stream(
        &backend,
        Input::new("m").user("weather?"),
        &options,
    ))
    .await;
    let result = result.unwrap();

    // The model's second request carries the denial's reason and the redacted result.
    let second = &backend.requests()[1];
    let denied = tool_result(&second.messages[2]);
    assert!(denied.is_error);
    assert_eq!(
        denied.content,
        "This call was not run: guardrail `weather-rules` denied it: Paris is out of bounds"
    );
    let redacted = tool_result(&second.messages[3]);
    assert!(!redacted.content.contains("sunny"), "{}", redacted.content);
    assert!(redacted.content.contains("[REDACTED]"));
    // The stream never showed the unredacted result either.
    for event in &events {
        if let AgentEvent::ToolExecutionEnd { output, .. } = event {
            assert!(!output.contains("sunny"), "{output}");
        }
    }
    // The trace holds each decision; the rewritten call ran with the new arguments.
    assert_eq!(result.trace.len(), 2);
    let paris = &result.trace[0];
    assert_eq!(paris.guardrails().len(), 1);
    assert_eq!(paris.guardrails()[0].action, GuardrailAction::Deny);
    assert_eq!(paris.guardrails()[0].stage, GuardrailStage::ToolCall);
    let denver = &result.trace[1];
    assert_eq!(denver.arguments, json!({"city": "Denver"}));
    let actions: Vec<GuardrailAction> = denver.guardrails().iter().map(|d| d.action).collect();
    assert_eq!(actions, [GuardrailAction::Rewrite, GuardrailAction::Redact]);
    assert_eq!(denver.guardrails()[1].reason, "a weather word");
    assert_eq!(
        denver.guardrails()[1]
            .call_id
            .as_ref()
            .map(|id| id.as_str()),
        Some("call_2")
    );
}

#[tokio::test]
async fn require_approval_from_a_guardrail_goes_through_the_approval_flow() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Oslo"})),
        ScriptedTurn::text("Oslo has no station."),
    ]);
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_tool_trace(true)
        .with_guardrails(Guardrails::new().tool(WeatherRules));
    let mut session = Session::new("m");

    let result = execute(&mut session, "Oslo?", &backend, &options)
        .await
        .unwrap();
    assert_eq!(result.status, SessionStatus::AwaitingApproval);
    assert_eq!(
        result.pending_approvals[0].arguments,
        json!({"city": "Oslo"})
    );

    // Through JSON, as a server stores it; the decision still lands in the trace.
    let mut session = Session::from_json(&session.to_json().unwrap()).unwrap();
    let decisions = vec![agent_loop::ApprovalDecision::approve("call_1")];
    let result = execute(&mut session, decisions, &backend, &options)
        .await
        .unwrap();
    assert_eq!(result.text(), "Oslo has no station.");
    assert_eq!(
        result.trace[0].guardrails()[0].action,
        GuardrailAction::RequireApproval
    );
}

#[tokio::test]
async fn an_approver_sees_the_rewritten_arguments() {
    struct Both;
    impl ToolGuardrail for Both {
        fn name(&self) -> &str {
            "both"
        }
        fn before_call(&self, call: &CallCheck<'_>) -> CallVerdict {
            if call.arguments["city"] == "denver" {
                CallVerdict::Rewrite {
                    arguments: json!({"city": "Denver"}),
                    reason: "capitalized".into(),
                }
            } else {
                CallVerdict::RequireApproval("ask".into())
            }
        }
    }
    let backend = ScriptedBackend::new([ScriptedTurn::tool_call(
        "call_1",
        "get_weather",
        json!({"city": "denver"}),
    )]);
    // The rewrite runs first, then the second guardrail sees (and asks about) its output.
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_guardrails(Guardrails::new().tool(Both).tool(Both));
    let mut session = Session::new("m");
    let result = execute(&mut session, "?", &backend, &options)
        .await
        .unwrap();
    assert_eq!(result.status, SessionStatus::AwaitingApproval);
    assert_eq!(
        result.pending_approvals[0].arguments,
        json!({"city": "Denver"})
    );
}

#[tokio::test]
async fn an_output_guardrail_sends_the_answer_back_counted_as_an_iteration_then_trips() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::text("no citation"),
        ScriptedTurn::text("with [source]"),
    ])
    .recording();
    let cite = || {
        Guardrails::new().output_fn("cite", |output| async move {
            if output.text.contains("[source]") {
                Verdict::Pass
            } else {
                Verdict::Retry("cite a source as [source]".into())
            }
        })
    };
    let options = Options::auto().with_guardrails(cite());
    let mut session = Session::new("m");
    let result = execute(&mut session, "?", &backend, &options)
        .await
        .unwrap();
    assert_eq!(result.text(), "with [source]");
    assert_eq!(backend.calls(), 2);
    let feedback = &backend.requests()[1].messages[2];
    let Message::User(user) = feedback else {
        panic!("{feedback:?}");
    };
    assert!(
        format!("{user:?}").contains("cite a source as [source]"),
        "{user:?}"
    );
    assert_eq!(session.messages.len(), 4);

    // With no iterations left the retry is the iteration budget's error.
    let backend = ScriptedBackend::new([ScriptedTurn::text("no citation")]);
    let options = Options::auto()
        .with_guardrails(cite())
        .with_max_tool_iterations(0);
    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();
    assert!(error.budget_exceeded().is_some(), "{error:?}");

    // Past its retries, the guardrail trips with the answers in the partial messages.
    let backend = ScriptedBackend::cycle([ScriptedTurn::text("no citation")]);
    let options = Options::auto().with_guardrails(cite().max_output_retries(2));
    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();
    assert_eq!(
        error.kind,
        ErrorKind::GuardrailTripped {
            guardrail: "cite".into(),
            stage: GuardrailStage::Output,
        }
    );
    assert_eq!(backend.calls(), 3);
    assert_eq!(
        error.partial_messages.len(),
        5,
        "{:?}",
        error.partial_messages
    );
}

#[tokio::test]
async fn an_output_guardrail_sees_the_structured_answer() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Answer {
        city: String,
    }
    let backend = ScriptedBackend::new([ScriptedTurn::text(r#"{"city": "Paris"}"#)]);
    let options =
        Options::auto()
            .with_output::<Answer>()
            .with_guardrails(
                Guardrails::new().output_fn("no-paris", |output| async move {
                    match output.structured {
                        Some(value) if value["city"] == "Paris" => Verdict::Trip("Paris".into()),
                        _ => Verdict::Pass,
                    }
                }),
            );
    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();
    assert!(matches!(
        error.kind,
        ErrorKind::GuardrailTripped {
            stage: GuardrailStage::Output,
            ..
        }
    ));
}

/// The one-call path a durable driver's activities use (`screen_tool_call`, then
/// `run_tool_call`) applies the tool guardrails as a round does: a denial is a refusal, a
/// rewrite changes the arguments before anyone approves or runs them, a require-approval
/// waits for a person, and the result is redacted, with the decisions in the trace entry.
#[tokio::test]
async fn the_one_call_path_screens_rewrites_and_redacts_like_a_round() {
    use agent_loop::{CallScreen, run_tool_call, screen_tool_call};
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_tool_trace(true)
        .with_guardrails(Guardrails::new().tool(WeatherRules));

    let mut paris = agent_types::ToolCall::new("c1", "get_weather", json!({"city": "Paris"}));
    assert_eq!(
        screen_tool_call(&options, &mut paris),
        CallScreen::Refuse(
            "This call was not run: guardrail `weather-rules` denied it: Paris is out of bounds"
                .into()
        )
    );
    let mut oslo = agent_types::ToolCall::new("c2", "get_weather", json!({"city": "Oslo"}));
    assert_eq!(
        screen_tool_call(&options, &mut oslo),
        CallScreen::AwaitApproval
    );
    let mut denver = agent_types::ToolCall::new("c3", "get_weather", json!({"city": "denver"}));
    assert_eq!(screen_tool_call(&options, &mut denver), CallScreen::Run);
    assert_eq!(denver.arguments, json!({"city": "Denver"}));

    // Run as an activity would, with the call as the model sent it: the guardrails apply
    // again at run time (a worker's policy may be newer than the screening's).
    let raw = agent_types::ToolCall::new("c3", "get_weather", json!({"city": "denver"}));
    let outcome = run_tool_call(&options, raw, 1, None).await.unwrap();
    assert!(!outcome.result.is_error, "{}", outcome.result.content);
    assert!(!outcome.result.content.contains("sunny"));
    assert!(outcome.result.content.contains("[REDACTED]"));
    assert_eq!(outcome.trace.arguments, json!({"city": "Denver"}));
    let actions: Vec<GuardrailAction> = outcome
        .trace
        .guardrails()
        .iter()
        .map(|d| d.action)
        .collect();
    assert_eq!(actions, [GuardrailAction::Rewrite, GuardrailAction::Redact]);

    let paris = agent_types::ToolCall::new("c1", "get_weather", json!({"city": "Paris"}));
    let outcome = run_tool_call(&options, paris, 1, None).await.unwrap();
    assert!(outcome.result.is_error);
    assert!(outcome.result.content.contains("Paris is out of bounds"));
    assert!(outcome.stop.is_none());
}

/// A call screened by `screen_tool_call_decided` runs with `run_screened_tool_call` as a
/// screened round's call does: the arguments screening rewrote, the decisions screening made
/// in the trace entry (with the result's redaction), and no second before-call check, whose
/// verdict on the already rewritten arguments would lose the rewrite from the trace.
#[tokio::test]
async fn a_screened_call_keeps_the_screenings_decisions_in_its_trace() {
    use agent_loop::{CallScreen, run_screened_tool_call, run_tool_call, screen_tool_call_decided};
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_tool_trace(true)
        .with_guardrails(Guardrails::new().tool(WeatherRules));
    let mut denver = agent_types::ToolCall::new("c3", "get_weather", json!({"city": "denver"}));
    let (screen, decisions) = screen_tool_call_decided(&options, &mut denver);
    assert_eq!(screen, CallScreen::Run);
    assert_eq!(denver.arguments, json!({"city": "Denver"}));
    let actions = |trace: &agent_types::TraceEntry| -> Vec<GuardrailAction> {
        trace.guardrails().iter().map(|d| d.action).collect()
    };

    let outcome = run_screened_tool_call(&options, denver.clone(), 1, None, decisions)
        .await
        .unwrap();
    assert_eq!(outcome.trace.arguments, json!({"city": "Denver"}));
    assert!(outcome.result.content.contains("[REDACTED]"));
    assert_eq!(
        actions(&outcome.trace),
        [GuardrailAction::Rewrite, GuardrailAction::Redact]
    );
    // Checked again instead, the rewritten call passes unchanged: the rewrite is lost.
    let again = run_tool_call(&options, denver, 1, None).await.unwrap();
    assert_eq!(actions(&again.trace), [GuardrailAction::Redact]);
}
