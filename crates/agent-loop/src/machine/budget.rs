//! The budgets: the check before each model call (its input must fit what is left, its
//! output limit is clamped to it), the checks after each call and round, the tool-round
//! count and the repeated-call (cycle) detection.

use agent_types::{AgentError, Budget, ErrorKind, ToolCall};

use super::Config;
use crate::session::{BudgetsUsed, RepeatedCall};

/// An output limit every current model accepts (the smallest maximum output among them, and
/// Anthropic's adapter default): a budget's clamp below it is always sent; above it, only to
/// lower a limit the session set itself.
const SAFE_OUTPUT_LIMIT: u64 = 4_096;

/// Refuses a call whose estimated input leaves no room for output within the budgets,
/// before anything is sent; otherwise returns the call's output limit: `own` clamped to what
/// the budgets leave.
///
/// Without a limit of the call's own, a room of [`SAFE_OUTPUT_LIMIT`] tokens or more is not
/// sent: a limit above the model's maximum output is a 400 from the provider, and the loop
/// does not know each model's maximum.
pub(super) fn admit(
    used: &BudgetsUsed,
    config: &Config,
    estimate: u64,
    own: Option<u32>,
) -> Result<Option<u32>, AgentError> {
    let mut limit = own.map(u64::from);
    let mut clamp = |room: u64| match limit {
        Some(current) => limit = Some(current.min(room)),
        None if room < SAFE_OUTPUT_LIMIT => limit = Some(room),
        None => {}
    };
    if let Some(max) = config.token_budget {
        let left = max.saturating_sub(used.tokens);
        if estimate >= left {
            return Err(AgentError::budget(Budget::RequestTokens {
                used: used.tokens,
                estimated_input: estimate,
                max,
            }));
        }
        clamp(left - estimate);
    }
    if let (Some(max), Some(price)) = (config.max_cost_usd, &config.price) {
        let left = max - used.cost_usd;
        // Priced as uncached input: a cache hit only makes the call cheaper.
        let input_usd = estimate as f64 * price.input_per_mtok / 1e6;
        let room_usd = left - input_usd;
        let room = if price.output_per_mtok > 0.0 {
            (room_usd.max(0.0) / price.output_per_mtok * 1e6).floor()
        } else {
            f64::INFINITY
        };
        if room_usd <= 0.0 || room < 1.0 {
            return Err(AgentError::budget(Budget::RequestCostUsd {
                used: used.cost_usd,
                estimated_input: estimate,
                estimated_usd: input_usd,
                max,
            }));
        }
        if room.is_finite() {
            // `as` saturates: a room beyond u64 is no limit worth sending anyway.
            clamp(room as u64);
        }
    }
    Ok(limit.map(|limit| u32::try_from(limit).unwrap_or(u32::MAX)))
}

/// What is left of the token and cost budgets.
pub(super) fn left(used: &BudgetsUsed, config: &Config) -> agent_tools::BudgetLeft {
    agent_tools::BudgetLeft {
        tokens: config
            .token_budget
            .map(|max| max.saturating_sub(used.tokens)),
        cost_usd: config
            .max_cost_usd
            .map(|max| (max - used.cost_usd).max(0.0)),
    }
}

/// The token and cost budgets, checked after every model call and every tool round.
pub(super) fn check_spend(used: &BudgetsUsed, config: &Config) -> Result<(), AgentError> {
    if let Some(max) = config.token_budget
        && used.tokens > max
    {
        let budget = Budget::Tokens {
            used: used.tokens,
            max,
        };
        // The budget also counts what handlers reported, which the run's usage does not:
        // say so, so the two numbers are not mistaken for one.
        return Err(match used.tool_tokens {
            0 => AgentError::budget(budget),
            reported => {
                let message = format!(
                    "{budget} ({} by model calls, {reported} reported by tools); raise the \
                     limit or narrow the task",
                    used.tokens - reported
                );
                AgentError::new(ErrorKind::BudgetExceeded { budget }, message)
            }
        });
    }
    if let Some(max) = config.max_cost_usd
        && used.cost_usd > max
    {
        return Err(AgentError::budget(Budget::CostUsd {
            used: used.cost_usd,
            max,
        }));
    }
    Ok(())
}

/// Counts one more tool round (or structured-output retry), or refuses it past the limit.
pub(super) fn next_round(used: &mut BudgetsUsed, config: &Config) -> Result<(), AgentError> {
    if used.iterations >= config.max_tool_iterations {
        return Err(AgentError::budget(Budget::Iterations {
            used: used.iterations,
            max: config.max_tool_iterations,
        }));
    }
    used.iterations += 1;
    Ok(())
}

/// Cycle detection: the same tool with the same arguments too many times in a row, across
/// rounds. Identical calls within one round count once (asking for the same thing twice at
/// once is redundancy, not a loop). Compares in place; only the round's last call is copied
/// into the budgets.
pub(super) fn check_cycle(
    used: &mut BudgetsUsed,
    config: &Config,
    calls: &[ToolCall],
) -> Result<(), AgentError> {
    let Some(max) = config.max_repeated_calls else {
        return Ok(());
    };
    let max = max.max(2);
    let stored = used.last_call.as_ref();
    let mut times = stored.map_or(0, |last| last.times);
    let mut previous: Option<&ToolCall> = None;
    for call in calls {
        let same_as =
            |other: &ToolCall| other.name == call.name && other.arguments == call.arguments;
        if previous.is_some_and(same_as) {
            continue;
        }
        let same = match previous {
            Some(_) => false,
            None => stored
                .is_some_and(|last| last.tool == call.name && last.arguments == call.arguments),
        };
        times = if same { times + 1 } else { 1 };
        previous = Some(call);
        if times >= max {
            let budget = Budget::RepeatedCall {
                tool: call.name.clone(),
                times,
            };
            let message = format!(
                "{budget}, so the model looks stuck in a loop. Check that the tool's result \
                 answers what the model asked (an error it cannot act on invites a retry), or \
                 raise `max_repeated_calls`"
            );
            return Err(AgentError::new(
                ErrorKind::BudgetExceeded { budget },
                message,
            ));
        }
    }
    if let Some(call) = previous {
        match &mut used.last_call {
            Some(last) if last.tool == call.name && last.arguments == call.arguments => {
                last.times = times;
            }
            slot => {
                *slot = Some(RepeatedCall {
                    tool: call.name.clone(),
                    arguments: call.arguments.clone(),
                    times,
                });
            }
        }
    }
    Ok(())
}
