#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use agent_types::{AgentEvent, Budget, ErrorKind, Message, ToolCall, Usage};
use serde_json::json;

use super::*;

fn config() -> Config {
    Config {
        mode: ToolMode::Auto,
        max_tool_iterations: 10,
        token_budget: None,
        max_cost_usd: None,
        price: None,
        max_repeated_calls: None,
        max_tool_calls_per_round: 64,
        screen_calls: false,
        output: None,
        max_output_retries: 2,
        check_answer: false,
    }
}

fn usage(input: u64, output: u64) -> Option<Usage> {
    Some(Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        ..Usage::default()
    })
}

fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall::new(id, name, arguments)
}

/// Drives a state from `Start` through one model call that answers with `calls` (and `text`
/// for a structured run), returning the action after the response is appended.
fn respond(
    state: &mut State,
    config: &Config,
    calls: Vec<ToolCall>,
    text: Option<ResponseText>,
) -> Action {
    let prepare = state.step(
        config,
        Input::Prepared {
            estimated_input_tokens: 10,
            own_max_output_tokens: None,
        },
    );
    assert!(matches!(prepare, Action::CallModel { .. }), "{prepare:?}");
    let append = state.step(
        config,
        Input::ModelResponded {
            usage: usage(10, 5),
            cost_usd: None,
        },
    );
    assert_eq!(append, Action::AppendResponse);
    state.step(
        config,
        Input::ResponseAppended {
            calls,
            text: text.map(Box::new),
        },
    )
}

fn start(state: &mut State, config: &Config) {
    let action = state.step(config, Input::Start { approvals: None });
    assert_eq!(action, Action::PrepareCall { iteration: 0 });
}

fn done(outcome: RoundOutcome) -> Input {
    Input::ToolsDone { outcome }
}

fn budget_of(action: &Action) -> Budget {
    match action {
        Action::Fail { error } => match &error.kind {
            ErrorKind::BudgetExceeded { budget } => budget.clone(),
            other => panic!("not a budget error: {other:?}"),
        },
        other => panic!("not a failure: {other:?}"),
    }
}

#[test]
fn a_text_answer_finishes_and_counts_the_call() {
    let config = config();
    let mut state = State::new();
    start(&mut state, &config);
    let action = respond(&mut state, &config, Vec::new(), None);
    assert_eq!(action, Action::Finish { output: None });
    assert_eq!(state.usage().total_tokens(), Some(15));
    assert_eq!(state.budgets().tokens(), 15);
    assert_eq!(state.phase(), &Phase::Ended);
}

#[test]
fn a_tool_round_runs_and_the_model_is_called_again() {
    let config = config();
    let mut state = State::new();
    start(&mut state, &config);
    let calls = vec![call("a", "lookup", json!({"k": 1}))];
    let action = respond(&mut state, &config, calls.clone(), None);
    assert_eq!(
        action,
        Action::RunTools {
            iteration: 1,
            calls,
            refused: Vec::new(),
            guardrails: Vec::new(),
        }
    );
    let next = state.step(&config, done(RoundOutcome::default()));
    assert_eq!(next, Action::PrepareCall { iteration: 1 });
}

#[test]
fn return_mode_suspends_on_the_first_tool_call() {
    let config = Config {
        mode: ToolMode::Return,
        ..config()
    };
    let mut state = State::new();
    start(&mut state, &config);
    let calls = vec![call("a", "lookup", json!({}))];
    let action = respond(&mut state, &config, calls.clone(), None);
    assert_eq!(
        action,
        Action::Suspend {
            status: SessionStatus::AwaitingToolExecution,
            calls,
        }
    );
    assert_eq!(state.budgets().iterations(), 0);
}

#[test]
fn the_iteration_budget_refuses_the_round_past_it() {
    let config = Config {
        max_tool_iterations: 1,
        ..config()
    };
    let mut state = State::new();
    start(&mut state, &config);
    let action = respond(&mut state, &config, vec![call("a", "t", json!(1))], None);
    assert!(matches!(action, Action::RunTools { .. }));
    state.step(&config, done(RoundOutcome::default()));
    let action = respond(&mut state, &config, vec![call("b", "t", json!(2))], None);
    assert_eq!(budget_of(&action), Budget::Iterations { used: 1, max: 1 });
}

#[test]
fn a_call_whose_input_cannot_fit_the_token_budget_is_not_sent_and_one_that_fits_is_clamped() {
    let config = Config {
        token_budget: Some(1_000),
        ..config()
    };
    let mut state = State::new();
    start(&mut state, &config);
    let action = state.step(
        &config,
        Input::Prepared {
            estimated_input_tokens: 900,
            own_max_output_tokens: None,
        },
    );
    // 100 tokens left for output: below the safe limit, so sent.
    assert_eq!(
        action,
        Action::CallModel {
            iteration: 0,
            max_output_tokens: Some(100),
        }
    );
    let mut state = State::new();
    start(&mut state, &config);
    let action = state.step(
        &config,
        Input::Prepared {
            estimated_input_tokens: 1_000,
            own_max_output_tokens: None,
        },
    );
    assert_eq!(
        budget_of(&action),
        Budget::RequestTokens {
            used: 0,
            estimated_input: 1_000,
            max: 1_000,
        }
    );
}

#[test]
fn the_cost_budget_trips_after_a_priced_call() {
    let config = Config {
        max_cost_usd: Some(0.01),
        price: Some(CallPrice {
            input_per_mtok: 1.0,
            output_per_mtok: 1.0,
        }),
        ..config()
    };
    let mut state = State::new();
    start(&mut state, &config);
    state.step(
        &config,
        Input::Prepared {
            estimated_input_tokens: 10,
            own_max_output_tokens: Some(100),
        },
    );
    state.step(
        &config,
        Input::ModelResponded {
            usage: usage(10, 5),
            cost_usd: Some(0.02),
        },
    );
    let action = state.step(
        &config,
        Input::ResponseAppended {
            calls: Vec::new(),
            text: None,
        },
    );
    assert_eq!(
        budget_of(&action),
        Budget::CostUsd {
            used: 0.02,
            max: 0.01,
        }
    );
    assert_eq!(state.cost_usd(), Some(0.02));
}

#[test]
fn the_same_call_repeated_across_rounds_ends_the_run() {
    let config = Config {
        max_repeated_calls: Some(3),
        ..config()
    };
    let mut state = State::new();
    start(&mut state, &config);
    let same = || vec![call("x", "search", json!({"q": "same"}))];
    for _ in 0..2 {
        let action = respond(&mut state, &config, same(), None);
        assert!(matches!(action, Action::RunTools { .. }), "{action:?}");
        state.step(&config, done(RoundOutcome::default()));
    }
    let action = respond(&mut state, &config, same(), None);
    assert_eq!(
        budget_of(&action),
        Budget::RepeatedCall {
            tool: "search".to_owned(),
            times: 3,
        }
    );
}

#[test]
fn calls_past_the_round_cap_are_refused_with_a_reason() {
    let config = Config {
        max_tool_calls_per_round: 2,
        ..config()
    };
    let mut state = State::new();
    start(&mut state, &config);
    let calls: Vec<ToolCall> = (0..3)
        .map(|n| call(&format!("c{n}"), "t", json!(n)))
        .collect();
    let Action::RunTools {
        calls: planned,
        refused,
        ..
    } = respond(&mut state, &config, calls, None)
    else {
        panic!("not a round");
    };
    assert_eq!(planned.len(), 3);
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].index, 2);
    assert!(refused[0].reason.contains("at most 2 run per round"));
}

#[test]
fn an_approval_round_suspends_survives_serde_and_resumes_then_waits_for_the_remote_call() {
    // A tool guardrail's decision made while screening: it comes back with the round.
    let asked = agent_types::GuardrailDecision::new(
        "policy",
        agent_types::GuardrailStage::ToolCall,
        agent_types::GuardrailAction::RequireApproval,
        "deletes need a person",
    )
    .for_call("local".into());
    let config = Config {
        screen_calls: true,
        ..config()
    };
    let mut state = State::new();
    start(&mut state, &config);
    let calls = vec![
        call("local", "delete", json!({"path": "/tmp/x"})),
        call("remote", "browser", json!({"url": "x"})),
        call("safe", "lookup", json!({})),
    ];
    let action = respond(&mut state, &config, calls.clone(), None);
    assert_eq!(
        action,
        Action::ScreenCalls {
            calls: calls.clone()
        }
    );
    let action = state.step(
        &config,
        Input::Screened {
            calls: calls.clone(),
            screens: vec![
                Screen::AwaitApproval,
                Screen::Remote {
                    arguments: json!({"url": "x"}),
                },
                Screen::Run,
            ],
            guardrails: vec![asked.clone()],
        },
    );
    assert_eq!(
        action,
        Action::Suspend {
            status: SessionStatus::AwaitingApproval,
            calls: vec![calls[0].clone()],
        }
    );
    assert_eq!(state.pending_approvals(), vec![calls[0].clone()]);

    // Another process (or a workflow replay) picks the state up from its JSON.
    let json = serde_json::to_string(&state.take_budgets()).unwrap();
    let mut state = State::resume(serde_json::from_str(&json).unwrap());
    let decisions = vec![ApprovalDecision::deny("local", "not today")];
    let action = state.step(
        &config,
        Input::Start {
            approvals: Some(decisions),
        },
    );
    assert_eq!(
        action,
        Action::RunTools {
            iteration: 1,
            calls: vec![calls[0].clone(), calls[2].clone()],
            refused: vec![Refusal {
                index: 0,
                reason: "This call was not run: the user denied it: not today".to_owned(),
            }],
            guardrails: vec![asked],
        }
    );
    let action = state.step(&config, done(RoundOutcome::default()));
    assert_eq!(
        action,
        Action::Suspend {
            status: SessionStatus::AwaitingToolExecution,
            calls: vec![calls[1].clone()],
        }
    );
}

#[test]
fn a_tool_stop_cancellation_or_reported_spend_ends_the_round_in_that_order() {
    let config = Config {
        token_budget: Some(100),
        ..config()
    };
    let round = |outcome: RoundOutcome| {
        let mut state = State::new();
        start(&mut state, &config);
        respond(&mut state, &config, vec![call("a", "t", json!(1))], None);
        let action = state.step(&config, done(outcome));
        (state, action)
    };
    let (_, action) = round(RoundOutcome {
        cancelled: true,
        stop: Some(Box::new(AgentError::config("stop"))),
        ..RoundOutcome::default()
    });
    let Action::Fail { error } = action else {
        panic!("{action:?}")
    };
    assert!(error.is_aborted());
    let (_, action) = round(RoundOutcome {
        stop: Some(Box::new(AgentError::new(
            ErrorKind::Validation,
            "bad arguments",
        ))),
        ..RoundOutcome::default()
    });
    let Action::Fail { error } = action else {
        panic!("{action:?}")
    };
    assert_eq!(error.kind, ErrorKind::Validation);
    let (state, action) = round(RoundOutcome {
        reported_tokens: 200,
        reported_cost_usd: 0.5,
        ..RoundOutcome::default()
    });
    assert_eq!(
        budget_of(&action),
        Budget::Tokens {
            used: 215,
            max: 100,
        }
    );
    assert_eq!(state.cost_usd(), Some(0.5));
}

fn structured(strategy: OutputStrategy) -> Config {
    Config {
        output: Some(OutputConfig {
            spec: OutputSpec::from_schema(json!({
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": false
            })),
            strategy,
        }),
        max_output_retries: 1,
        ..config()
    }
}

fn text(text: &str) -> Option<ResponseText> {
    Some(ResponseText {
        refusal: None,
        text: text.to_owned(),
    })
}

#[test]
fn a_valid_final_answer_call_closes_its_round_emits_the_output_and_finishes() {
    let config = structured(OutputStrategy::Tool);
    let mut state = State::new();
    start(&mut state, &config);
    let calls = vec![
        call("f", "final_answer", json!({"city": "Oslo"})),
        call("o", "lookup", json!({})),
    ];
    let Action::Push { messages } = respond(&mut state, &config, calls, text("")) else {
        panic!("no push");
    };
    assert_eq!(messages.len(), 2);
    let Message::Tool(first) = &messages[0] else {
        panic!()
    };
    assert!(!first.is_error);
    let action = state.step(&config, Input::Done);
    assert_eq!(
        action,
        Action::Emit {
            event: Box::new(AgentEvent::Output {
                value: json!({"city": "Oslo"})
            })
        }
    );
    let action = state.step(&config, Input::Done);
    assert_eq!(
        action,
        Action::Finish {
            output: Some(json!({"city": "Oslo"}))
        }
    );
}

#[test]
fn an_invalid_text_answer_is_retried_once_then_fails() {
    let config = structured(OutputStrategy::Native);
    let mut state = State::new();
    start(&mut state, &config);
    let Action::Push { messages } = respond(&mut state, &config, Vec::new(), text("{\"town\": 1}"))
    else {
        panic!("no retry");
    };
    assert!(matches!(&messages[..], [Message::User(_)]));
    assert_eq!(state.budgets().iterations(), 1);
    assert_eq!(
        state.step(&config, Input::Done),
        Action::PrepareCall { iteration: 1 }
    );
    let action = respond(&mut state, &config, Vec::new(), text("still not"));
    let Action::Fail { error } = action else {
        panic!("{action:?}")
    };
    assert!(matches!(error.kind, ErrorKind::InvalidOutput { .. }));
}

#[test]
fn a_refusal_ends_a_structured_run() {
    let config = structured(OutputStrategy::Native);
    let mut state = State::new();
    start(&mut state, &config);
    let action = respond(
        &mut state,
        &config,
        Vec::new(),
        Some(ResponseText {
            refusal: Some("no".to_owned()),
            text: String::new(),
        }),
    );
    let Action::Fail { error } = action else {
        panic!("{action:?}")
    };
    assert!(matches!(error.kind, ErrorKind::OutputRefused { .. }));
}

#[test]
fn cancellation_before_the_model_call_aborts() {
    let config = config();
    let mut state = State::new();
    start(&mut state, &config);
    let Action::Fail { error } = state.step(&config, Input::Cancelled) else {
        panic!()
    };
    assert!(error.is_aborted());
    assert!(error.message.contains("before the model call"));
}

#[test]
fn a_timer_ends_a_run_waiting_for_its_tools_as_aborted() {
    let config = config();
    let mut state = State::new();
    start(&mut state, &config);
    respond(
        &mut state,
        &config,
        vec![call("a", "slow", json!({}))],
        None,
    );
    let action = state.step(
        &config,
        Input::TimerFired {
            reason: "the run's 10 minute deadline".to_owned(),
        },
    );
    let Action::Fail { error } = action else {
        panic!("{action:?}")
    };
    assert!(error.is_aborted());
    assert!(error.message.contains("10 minute deadline"));
    assert_eq!(state.phase(), &Phase::Ended);
}

#[test]
fn an_input_the_phase_does_not_expect_is_a_clear_error() {
    let config = config();
    let mut state = State::new();
    let Action::Fail { error } = state.step(&config, Input::Done) else {
        panic!()
    };
    assert_eq!(error.kind, ErrorKind::Config);
    assert!(error.message.contains("`done` while ready to start"));
}

/// Replays the same inputs from a state, a config and inputs that went through JSON: the
/// actions and the final state are the same (what a durable driver's replay relies on).
#[test]
fn the_machine_is_deterministic_across_serde() {
    let config = Config {
        token_budget: Some(10_000),
        max_repeated_calls: Some(4),
        check_answer: true,
        ..structured(OutputStrategy::Tool)
    };
    let inputs = vec![
        Input::Start { approvals: None },
        Input::Prepared {
            estimated_input_tokens: 40,
            own_max_output_tokens: Some(500),
        },
        Input::ModelResponded {
            usage: usage(40, 8),
            cost_usd: None,
        },
        Input::ResponseAppended {
            calls: vec![call("a", "lookup", json!({"k": "v"}))],
            text: text("").map(Box::new),
        },
        done(RoundOutcome {
            reported_tokens: 7,
            ..RoundOutcome::default()
        }),
        Input::Prepared {
            estimated_input_tokens: 90,
            own_max_output_tokens: None,
        },
        Input::ModelResponded {
            usage: usage(90, 12),
            cost_usd: None,
        },
        Input::ResponseAppended {
            calls: vec![call("b", "final_answer", json!({"city": "Lima"}))],
            text: text("").map(Box::new),
        },
        Input::Done,
        // The answer's check sends it back once (a round), then passes the next one.
        Input::AnswerChecked {
            retry: Some("Your answer was not accepted: name a capital.".to_owned()),
        },
        Input::Done,
        Input::Prepared {
            estimated_input_tokens: 120,
            own_max_output_tokens: None,
        },
        Input::ModelResponded {
            usage: usage(120, 9),
            cost_usd: None,
        },
        Input::ResponseAppended {
            calls: vec![call("c", "final_answer", json!({"city": "Lima"}))],
            text: text("").map(Box::new),
        },
        Input::Done,
        Input::AnswerChecked { retry: None },
        Input::Done,
    ];
    let run = |state: &mut State, config: &Config, inputs: Vec<Input>| -> Vec<Action> {
        inputs
            .into_iter()
            .map(|input| state.step(config, input))
            .collect()
    };
    let mut first = State::new();
    let actions = run(&mut first, &config, inputs.clone());
    assert_eq!(
        actions.last(),
        Some(&Action::Finish {
            output: Some(json!({"city": "Lima"}))
        })
    );

    let config: Config = serde_json::from_value(serde_json::to_value(&config).unwrap()).unwrap();
    let inputs: Vec<Input> =
        serde_json::from_value(serde_json::to_value(&inputs).unwrap()).unwrap();
    let mut second = State::new();
    let mut replayed = Vec::new();
    for input in inputs {
        // The state goes through JSON between every two steps, as a workflow's would.
        second = serde_json::from_value(serde_json::to_value(&second).unwrap()).unwrap();
        replayed.push(second.step(&config, input));
    }
    let actions_json = serde_json::to_value(&actions).unwrap();
    assert_eq!(serde_json::to_value(&replayed).unwrap(), actions_json);
    assert_eq!(second, first);
    assert_eq!(first.budgets().tokens(), 40 + 8 + 7 + 90 + 12 + 120 + 9);
    assert_eq!(first.budgets().iterations(), 2);
}

/// With an answer check, a text answer is checked before the run finishes; a check that sends
/// it back pushes the reason and calls again, counted as a tool round, and the round budget
/// ends the run when it is used up.
#[test]
fn an_answer_check_sends_the_answer_back_as_a_counted_round_or_lets_it_finish() {
    let config = Config {
        check_answer: true,
        max_tool_iterations: 1,
        ..config()
    };
    let mut state = State::new();
    start(&mut state, &config);
    let action = respond(&mut state, &config, Vec::new(), None);
    assert_eq!(
        action,
        Action::CheckAnswer {
            output: None,
            retries: 0
        }
    );
    let action = state.step(
        &config,
        Input::AnswerChecked {
            retry: Some("not like that".to_owned()),
        },
    );
    assert_eq!(
        action,
        Action::Push {
            messages: vec![Message::user("not like that")]
        }
    );
    assert_eq!(state.budgets().iterations(), 1);
    assert_eq!(
        state.step(&config, Input::Done),
        Action::PrepareCall { iteration: 1 }
    );
    let action = respond(&mut state, &config, Vec::new(), None);
    assert_eq!(
        action,
        Action::CheckAnswer {
            output: None,
            retries: 1
        }
    );
    // A second retry would be a second round: the budget ends the run.
    let mut over = state.clone();
    let action = over.step(
        &config,
        Input::AnswerChecked {
            retry: Some("again".to_owned()),
        },
    );
    assert!(
        matches!(budget_of(&action), Budget::Iterations { .. }),
        "{action:?}"
    );
    // Passed: the run finishes.
    let action = state.step(&config, Input::AnswerChecked { retry: None });
    assert_eq!(action, Action::Finish { output: None });
}
