//! Errors, budgets and the trace.

use std::time::Duration;

use agent_types::{
    AgentError, AssistantBlock, AssistantMessage, BackendError, BackendErrorKind, Budget,
    ErrorKind, Message, TraceEntry,
};
use serde_json::json;

use crate::{check, full_assistant, trace_entry};

#[test]
fn error_kinds() {
    check!(
        "error_config",
        AgentError::config("tool `get_weather` has no handler and remote tools are off")
    );
    check!(
        "error_validation",
        AgentError::new(ErrorKind::Validation, "/city: expected a string, got 5")
    );
    check!(
        "error_aborted",
        AgentError::new(ErrorKind::Aborted, "cancelled by the caller")
    );
    check!(
        "error_tool",
        AgentError::new(
            ErrorKind::Tool {
                tool: "get_weather".into()
            },
            "handler panicked: index out of bounds"
        )
    );
    check!(
        "error_not_implemented",
        AgentError::new(ErrorKind::NotImplemented, "thinking on this backend")
    );
    check!(
        "error_appender",
        AgentError::new(ErrorKind::Appender, "No space left on device (os error 28)")
    );
    check!(
        "error_invalid_output",
        AgentError::new(
            ErrorKind::InvalidOutput {
                output: Box::new(agent_types::InvalidOutput {
                    raw: r#"{"city": 3}"#.into(),
                    errors: vec!["/city: 3 is not of type \"string\"".into()],
                }),
            },
            "the model's answer does not match the output schema after 2 tries: /city: 3 is \
             not of type \"string\""
        )
    );
    check!(
        "error_output_refused",
        AgentError::new(
            ErrorKind::OutputRefused {
                refusal: "I can't help with that.".into()
            },
            "the model refused to give a structured answer: I can't help with that."
        )
    );
    check!(
        "error_refused",
        AgentError::new(
            ErrorKind::Refused,
            "tenant `acme` may not use model `gpt-5`"
        )
    );
}

#[test]
fn error_budget_every_limit() {
    check!(
        "error_budget_iterations",
        AgentError::budget(Budget::Iterations { used: 10, max: 10 })
    );
    check!(
        "error_budget_tokens",
        AgentError::budget(Budget::Tokens {
            used: 120_500,
            max: 100_000
        })
    );
    check!(
        "error_budget_cost_usd",
        AgentError::budget(Budget::CostUsd {
            used: 1.25,
            max: 1.0
        })
    );
    check!(
        "error_budget_repeated_call",
        AgentError::budget(Budget::RepeatedCall {
            tool: "search_docs".into(),
            times: 3
        })
    );
}

#[test]
fn error_with_partial_trace_and_messages() {
    check!(
        "error_with_partial",
        AgentError::new(ErrorKind::Aborted, "cancelled by the caller").with_partial(
            vec![trace_entry()],
            vec![Message::user("Weather?"), Message::from(full_assistant())]
        )
    );
}

#[test]
fn error_backend_full() {
    let backend = BackendError {
        kind: BackendErrorKind::RateLimited,
        message: "rate limit exceeded: 50 requests per minute".into(),
        status: Some(429),
        retry_after: Some(Duration::from_millis(20_500)),
        partial: Some(Box::new(AssistantMessage {
            content: vec![AssistantBlock::Text {
                text: "The weather in".into(),
            }],
            ..AssistantMessage::default()
        })),
    };
    check!("backend_error_full", backend.clone());
    let error = AgentError::from(backend);
    assert_eq!(error.status(), 429);
    check!("error_backend", error);
}

#[test]
fn error_backend_minimal_and_every_kind() {
    check!(
        "backend_error_minimal",
        BackendError::new(BackendErrorKind::Connection, "connection reset by peer")
    );
    check!(
        "backend_error_kinds",
        vec![
            BackendErrorKind::Connection,
            BackendErrorKind::Timeout,
            BackendErrorKind::RateLimited,
            BackendErrorKind::Overloaded,
            BackendErrorKind::Server,
            BackendErrorKind::Authentication,
            BackendErrorKind::InvalidRequest,
            BackendErrorKind::Protocol,
            BackendErrorKind::Unsupported,
        ]
    );
}

#[test]
fn budgets() {
    check!(
        "budgets",
        vec![
            Budget::Iterations { used: 10, max: 10 },
            Budget::Tokens {
                used: 120_500,
                max: 100_000,
            },
            Budget::CostUsd {
                used: 0.5,
                max: 0.25,
            },
            Budget::RequestTokens {
                used: 1_200,
                estimated_input: 5_800_000,
                max: 100_000,
            },
            Budget::RequestCostUsd {
                used: 0.5,
                estimated_input: 5_800_000,
                estimated_usd: 17.4,
                max: 1.0,
            },
            Budget::RepeatedCall {
                tool: "search_docs".into(),
                times: 3,
            },
        ]
    );
}

#[test]
fn error_budget_with_spend() {
    // A budget trip reports what the run spent, like a successful run's `usage` and `cost_usd`.
    check!(
        "error_budget_request_tokens_with_spend",
        AgentError::budget(Budget::RequestTokens {
            used: 1_028,
            estimated_input: 5_800_000,
            max: 100_000,
        })
        .with_spend(
            agent_types::Usage {
                input_tokens: Some(1_000),
                output_tokens: Some(28),
                ..agent_types::Usage::default()
            },
            Some(0.000_306)
        )
    );
}

#[test]
fn trace_entries() {
    check!("trace_entry", trace_entry());
    check!(
        "trace_entry_error",
        TraceEntry {
            iteration: 2,
            call_id: "call_7".into(),
            tool_name: "delete_file".into(),
            arguments: json!({"path": 5}),
            result_bytes: 0,
            sent_bytes: 48,
            truncated: false,
            duration: Duration::ZERO,
            error: Some("/path: expected a string, got 5".into()),
            repairs: Vec::new(),
            sub_trace: Vec::new(),
            guardrail_decisions: None,
        }
    );
}

#[test]
fn durations_travel_in_whole_units() {
    // Sub-unit precision is dropped on the wire: microseconds for the trace, milliseconds for
    // retry-after. Documented in docs/wire-format.md.
    let entry = TraceEntry {
        duration: Duration::from_nanos(1_500_900),
        ..trace_entry()
    };
    let back: TraceEntry = serde_json::from_str(&serde_json::to_string(&entry).unwrap()).unwrap();
    assert_eq!(back.duration, Duration::from_micros(1_500));

    let error = BackendError {
        retry_after: Some(Duration::from_micros(2_999_999)),
        ..BackendError::new(BackendErrorKind::RateLimited, "slow down")
    };
    let json = serde_json::to_value(&error).unwrap();
    assert_eq!(json["retry_after_ms"], 2_999);
}
