//! What a handler that runs an agent of its own (a sub-agent called as a tool) gets from the
//! run that called it: where its events go ([`EventSink`]) and what is left of that run's
//! budgets ([`BudgetLeft`]). Both travel in the [`ToolContext`](crate::ToolContext); the
//! sub-agent's trace goes back through
//! [`ToolContext::attach_trace`](crate::ToolContext::attach_trace).

use std::fmt;
use std::sync::Arc;

use agent_types::AgentEvent;

use crate::context::AccountingTotals;

/// Where a handler sends events to be nested in its caller's stream (the loop sets one only
/// when its caller streams, so a handler that finds none builds no event at all).
///
/// Cheap to clone: one shared function.
#[derive(Clone)]
pub struct EventSink(Arc<dyn Fn(AgentEvent) + Send + Sync>);

impl EventSink {
    /// A sink that hands every event to `send`.
    pub fn new(send: impl Fn(AgentEvent) + Send + Sync + 'static) -> Self {
        Self(Arc::new(send))
    }

    /// Sends one event.
    pub fn send(&self, event: AgentEvent) {
        (self.0)(event);
    }
}

impl fmt::Debug for EventSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EventSink")
    }
}

/// What is left of the calling run's token and dollar budgets; `None` is no budget.
///
/// A sub-agent's own budgets are capped by it ([`cap_tokens`](Self::cap_tokens),
/// [`cap_cost_usd`](Self::cap_cost_usd)), so a child never spends more than its parent has
/// left.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BudgetLeft {
    /// Tokens left, when the run has a token budget.
    pub tokens: Option<u64>,
    /// US dollars left, when the run has a cost budget.
    pub cost_usd: Option<f64>,
}

impl BudgetLeft {
    /// What is left once `spent` more is spent.
    #[must_use]
    pub fn after(self, spent: AccountingTotals) -> Self {
        Self {
            tokens: self.tokens.map(|left| left.saturating_sub(spent.tokens)),
            cost_usd: self.cost_usd.map(|left| (left - spent.cost_usd).max(0.0)),
        }
    }

    /// The smaller of `own` (a sub-agent's own token budget) and what is left.
    pub fn cap_tokens(self, own: Option<u64>) -> Option<u64> {
        match (own, self.tokens) {
            (Some(own), Some(left)) => Some(own.min(left)),
            (own, left) => own.or(left),
        }
    }

    /// The smaller of `own` (a sub-agent's own cost budget) and what is left.
    pub fn cap_cost_usd(self, own: Option<f64>) -> Option<f64> {
        match (own, self.cost_usd) {
            (Some(own), Some(left)) => Some(own.min(left)),
            (own, left) => own.or(left),
        }
    }

    /// Whether a budget is used up: nothing can be spent.
    pub fn is_exhausted(self) -> bool {
        self.tokens == Some(0) || self.cost_usd.is_some_and(|left| left <= 0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_left_cap_and_shrink() {
        let left = BudgetLeft {
            tokens: Some(100),
            cost_usd: Some(0.5),
        };
        assert_eq!(left.cap_tokens(Some(1_000)), Some(100));
        assert_eq!(left.cap_tokens(Some(10)), Some(10));
        assert_eq!(left.cap_tokens(None), Some(100));
        assert_eq!(BudgetLeft::default().cap_tokens(Some(7)), Some(7));
        assert_eq!(left.cap_cost_usd(None), Some(0.5));
        assert_eq!(left.cap_cost_usd(Some(0.1)), Some(0.1));
        let after = left.after(AccountingTotals {
            tokens: 150,
            cost_usd: 0.25,
            ..AccountingTotals::default()
        });
        assert_eq!(after.tokens, Some(0));
        assert_eq!(after.cost_usd, Some(0.25));
        assert!(after.is_exhausted());
        assert!(!left.is_exhausted());
        assert!(!BudgetLeft::default().is_exhausted());
    }

    #[test]
    fn a_sink_hands_events_on() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = Arc::clone(&seen);
        let sink = EventSink::new(move |event| into.lock().unwrap().push(event));
        sink.clone().send(AgentEvent::TextStart);
        assert_eq!(*seen.lock().unwrap(), [AgentEvent::TextStart]);
        assert_eq!(format!("{sink:?}"), "EventSink");
    }
}
