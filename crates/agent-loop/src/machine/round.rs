//! A round's plan: the per-round cap, remote calls, approvals.

use agent_types::ToolCall;

use super::{Config, PlannedCall, Screen};
use crate::approval::{ApprovalDecision, Disposition, Round, RoundCall};

/// What a round comes to.
pub(super) enum Plan {
    /// Run the local calls; the remote ones wait for the caller after.
    Run {
        calls: Vec<PlannedCall>,
        remote: Vec<ToolCall>,
    },
    /// Calls wait for a person: nothing of the round runs yet.
    AwaitApproval(Round),
}

/// Plans the round of `calls` (screened by the driver when `screens` is set; the calls past
/// the cap are refused whatever their screen).
pub(super) fn plan(
    config: &Config,
    iteration: u32,
    calls: Vec<ToolCall>,
    screens: Option<Vec<Screen>>,
) -> Plan {
    let cap = config.max_tool_calls_per_round;
    let asked = calls.len();
    let mut planned = Vec::with_capacity(asked.min(cap.saturating_add(1)));
    let mut remote = Vec::new();
    let mut waiting = Vec::new();
    let mut screens = screens.map(Vec::into_iter);
    for (at, mut call) in calls.into_iter().enumerate() {
        let screen = screens.as_mut().and_then(Iterator::next);
        if at >= cap {
            let refused = format!(
                "This call was not run: the model asked for {asked} tool calls in one round and \
                 at most {cap} run per round (max_tool_calls_per_round). Ask for fewer at once."
            );
            planned.push(PlannedCall {
                call,
                refused: Some(refused),
            });
            continue;
        }
        let refused = match screen {
            None | Some(Screen::Run) => None,
            Some(Screen::Remote { arguments }) => {
                call.arguments = arguments;
                remote.push(call);
                continue;
            }
            Some(Screen::AwaitApproval) => {
                waiting.push(planned.len());
                None
            }
            Some(Screen::Refuse { reason }) => Some(reason),
        };
        planned.push(PlannedCall { call, refused });
    }
    if waiting.is_empty() {
        return Plan::Run {
            calls: planned,
            remote,
        };
    }
    let local = planned
        .into_iter()
        .enumerate()
        .map(|(at, planned)| RoundCall {
            disposition: if waiting.contains(&at) {
                Disposition::Waiting
            } else {
                match planned.refused {
                    Some(reason) => Disposition::Refused { reason },
                    None => Disposition::Run,
                }
            },
            call: planned.call,
        })
        .collect();
    Plan::AwaitApproval(Round {
        iteration,
        local,
        remote,
    })
}

/// The calls of a round that waited for approval, under `decisions` (checked when the run
/// started), and its remote calls.
pub(super) fn resumed(
    round: Round,
    decisions: &[ApprovalDecision],
) -> (u32, Vec<PlannedCall>, Vec<ToolCall>) {
    let calls = round
        .local
        .into_iter()
        .map(|entry| {
            let refused = match entry.disposition {
                Disposition::Run => None,
                Disposition::Refused { reason } => Some(reason),
                Disposition::Waiting => decisions
                    .iter()
                    .find(|decision| decision.call_id == entry.call.id.as_str())
                    .and_then(|decision| (!decision.approved).then(|| decision.denial())),
            };
            PlannedCall {
                call: entry.call,
                refused,
            }
        })
        .collect();
    (round.iteration, calls, round.remote)
}
