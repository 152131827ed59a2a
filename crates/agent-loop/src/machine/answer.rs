//! The structured-output judgement: what a response is in a run with an output schema (tool
//! calls, a valid answer, an invalid one, a refusal), and the retry of an invalid answer.

use agent_types::{AgentError, ErrorKind, Message, ToolCall, ToolResult};
use serde_json::Value;

use super::{Config, OutputConfig, ResponseText, error_result};
use crate::output::OutputStrategy;
use crate::session::BudgetsUsed;

/// What a model turn is, for a run with an output schema.
pub(super) enum Verdict {
    /// Tool calls that are not the final answer: the usual round.
    Tools,
    /// A valid answer (`call`: the final-answer call that carried it).
    Answer {
        value: Value,
        call: Option<ToolCall>,
    },
    /// An answer that fails the schema (or is not JSON).
    Invalid {
        raw: String,
        errors: Vec<String>,
        call: Option<ToolCall>,
    },
    /// The model refused.
    Refused(String),
}

/// Judges a response of `calls` and `text`.
pub(super) fn judge(output: &OutputConfig, calls: &[ToolCall], text: &ResponseText) -> Verdict {
    if let Some(refusal) = &text.refusal {
        return Verdict::Refused(refusal.clone());
    }
    if output.strategy == OutputStrategy::Tool
        && let Some(call) = calls.iter().find(|call| call.name == output.spec.name())
    {
        return match output.spec.validate(call.arguments.clone()) {
            Ok(value) => Verdict::Answer {
                value,
                call: Some(call.clone()),
            },
            Err(errors) => Verdict::Invalid {
                raw: call.arguments.to_string(),
                errors,
                call: Some(call.clone()),
            },
        };
    }
    if !calls.is_empty() {
        return Verdict::Tools;
    }
    // A text answer: what `Native` and `Prompted` expect, and under `Tool` a model that
    // answered in text anyway (accepted when the text is a valid answer).
    let parsed = crate::output::parse_text(&text.text).map_err(|error| vec![error]);
    match parsed.and_then(|value| output.spec.validate(value)) {
        Ok(value) => Verdict::Answer { value, call: None },
        Err(errors) => Verdict::Invalid {
            raw: text.text.clone(),
            errors,
            call: None,
        },
    }
}

/// The error of a refused structured answer.
pub(super) fn refused(refusal: String) -> AgentError {
    let message = format!("the model refused to give a structured answer: {refusal}");
    AgentError::new(ErrorKind::OutputRefused { refusal }, message)
}

/// Results for every call of the answering turn, so the history stays valid: the
/// final-answer call its acknowledgement (or `feedback`, an error result, when the answer was
/// invalid), any other call a result saying it was not run.
pub(super) fn close_round(
    calls: &[ToolCall],
    answer: Option<&ToolCall>,
    feedback: Option<String>,
) -> Vec<Message> {
    let mut feedback = feedback;
    calls
        .iter()
        .map(|call| {
            if answer.is_some_and(|answer| answer.id == call.id) {
                match feedback.take() {
                    Some(text) => error_result(call, text),
                    None => Message::Tool(ToolResult::ok(
                        call.id.clone(),
                        call.name.clone(),
                        "The final answer was received.",
                    )),
                }
            } else {
                error_result(
                    call,
                    "This call was not run: it came in the same turn as the final answer.",
                )
            }
        })
        .collect()
}

/// The messages sending an invalid answer back with its problems for another try, or the
/// error ending the run when the retries (or the iterations) are used up.
#[allow(clippy::too_many_arguments)]
pub(super) fn retry(
    budgets: &mut BudgetsUsed,
    retries: &mut u32,
    config: &Config,
    output: &OutputConfig,
    calls: &[ToolCall],
    call: Option<ToolCall>,
    raw: String,
    errors: Vec<String>,
) -> Result<Vec<Message>, AgentError> {
    if *retries >= config.max_output_retries {
        return Err(crate::output::invalid_output(raw, errors, *retries + 1));
    }
    super::budget::next_round(budgets, config)?;
    *retries += 1;
    let name = output.spec.name();
    let mut problems = String::new();
    for error in &errors {
        problems.push_str("\n- ");
        problems.push_str(error);
    }
    Ok(match call {
        Some(call) => {
            let feedback = format!(
                "The answer does not match the schema:{problems}\nCall `{name}` again with a corrected answer."
            );
            close_round(calls, Some(&call), Some(feedback))
        }
        None => {
            let ask = if output.strategy == OutputStrategy::Tool {
                format!("Give your final answer by calling `{name}`.")
            } else {
                "Reply with only the corrected JSON.".to_owned()
            };
            let feedback =
                format!("Your answer does not match the required JSON Schema:{problems}\n{ask}");
            vec![Message::user(feedback)]
        }
    })
}
