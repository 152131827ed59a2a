//! A round's plan: the per-round cap, remote calls, approvals.

use agent_types::{GuardrailDecision, ToolCall};

use super::{Config, Refusal, Screen};
use crate::approval::{ApprovalDecision, Disposition, Round, RoundCall};

/// What a round comes to.
pub(super) enum Plan {
    /// Run the local calls; the remote ones wait for the caller after.
    Run {
        calls: Vec<ToolCall>,
        refused: Vec<Refusal>,
        remote: Vec<ToolCall>,
        guardrails: Vec<GuardrailDecision>,
    },
    /// Calls wait for a person: nothing of the round runs yet.
    AwaitApproval(Round),
}

/// Plans the round of `calls` (screened by the driver when `screens` is set; the calls past
/// the cap are refused whatever their screen). `guardrails`: the tool guardrails' decisions
/// while screening, kept with the calls they name.
pub(super) fn plan(
    config: &Config,
    iteration: u32,
    calls: Vec<ToolCall>,
    screens: Option<Vec<Screen>>,
    guardrails: Vec<GuardrailDecision>,
) -> Plan {
    let cap = config.max_tool_calls_per_round;
    let asked = calls.len();
    if screens.is_none() && asked <= cap {
        // Every call runs: the round is the response's calls, as they are.
        return Plan::Run {
            calls,
            refused: Vec::new(),
            remote: Vec::new(),
            guardrails,
        };
    }
    let mut local = Vec::with_capacity(asked.min(cap.saturating_add(1)));
    let mut refused = Vec::new();
    let mut remote = Vec::new();
    let mut waiting = Vec::new();
    let mut screens = screens.map(Vec::into_iter);
    for (at, mut call) in calls.into_iter().enumerate() {
        let screen = screens.as_mut().and_then(Iterator::next);
        if at >= cap {
            let reason = format!(
                "This call was not run: the model asked for {asked} tool calls in one round and \
                 at most {cap} run per round (max_tool_calls_per_round). Ask for fewer at once."
            );
            refused.push(Refusal {
                index: local.len(),
                reason,
            });
            local.push(call);
            continue;
        }
        match screen {
            None | Some(Screen::Run) => {}
            Some(Screen::Remote { arguments }) => {
                call.arguments = arguments;
                remote.push(call);
                continue;
            }
            Some(Screen::AwaitApproval) => waiting.push(local.len()),
            Some(Screen::Refuse { reason }) => refused.push(Refusal {
                index: local.len(),
                reason,
            }),
        }
        local.push(call);
    }
    if waiting.is_empty() {
        return Plan::Run {
            calls: local,
            refused,
            remote,
            guardrails,
        };
    }
    let mut refused = refused.into_iter().peekable();
    let local = local
        .into_iter()
        .enumerate()
        .map(|(at, call)| RoundCall {
            disposition: if waiting.contains(&at) {
                Disposition::Waiting
            } else {
                match refused.next_if(|refusal| refusal.index == at) {
                    Some(refusal) => Disposition::Refused {
                        reason: refusal.reason,
                    },
                    None => Disposition::Run,
                }
            },
            guardrails: guardrails
                .iter()
                .filter(|decision| decision.call_id.as_ref() == Some(&call.id))
                .cloned()
                .collect(),
            call,
        })
        .collect();
    Plan::AwaitApproval(Round {
        iteration,
        local,
        remote,
    })
}

/// The calls of a round that waited for approval, under `decisions` (checked when the run
/// started): its local calls with the refused ones, its remote calls, and the guardrail
/// decisions made when it was screened.
pub(super) fn resumed(
    round: Round,
    decisions: &[ApprovalDecision],
) -> (
    u32,
    Vec<ToolCall>,
    Vec<Refusal>,
    Vec<ToolCall>,
    Vec<GuardrailDecision>,
) {
    let mut refused = Vec::new();
    let mut guardrails = Vec::new();
    let calls = round
        .local
        .into_iter()
        .enumerate()
        .map(|(index, entry)| {
            let reason = match entry.disposition {
                Disposition::Run => None,
                Disposition::Refused { reason } => Some(reason),
                Disposition::Waiting => decisions
                    .iter()
                    .find(|decision| decision.call_id == entry.call.id.as_str())
                    .and_then(|decision| (!decision.approved).then(|| decision.denial())),
            };
            if let Some(reason) = reason {
                refused.push(Refusal { index, reason });
            }
            guardrails.extend(entry.guardrails);
            entry.call
        })
        .collect();
    (round.iteration, calls, refused, round.remote, guardrails)
}
