//! The one place the activities hand a run's live events out (the model's stream while
//! `model_call` runs, each tool result as `tool_call` ends): [`AgentActivities::publish`].
//! Live delivery plugs in here: an [`EventSink`] set with
//! [`AgentActivities::with_event_sink`], and the event log the CLI and the server read
//! (crate::events, set with [`AgentActivities::with_events`]); without either no event is even
//! built.

use std::sync::Arc;

use agent_types::{AgentEvent, Message, Role, ToolResult};
use temporalio_sdk::activities::ActivityContext;

use crate::activities::AgentActivities;
use crate::events::Publisher;

/// Receives a run's events as its activities produce them: the workflow id (the run's key)
/// and the events, in order.
pub type EventSink = Arc<dyn Fn(&str, &[AgentEvent]) + Send + Sync>;

impl AgentActivities {
    /// With `sink` receiving the live events of every run this worker's activities serve.
    #[must_use]
    pub fn with_event_sink(mut self, sink: EventSink) -> Self {
        self.events = Some(sink);
        self
    }

    /// Hands `events` of the run `ctx` belongs to to the sink, and to the event log through
    /// the activity's publisher `out` (crate::events; off without a log).
    pub(crate) fn publish(&self, ctx: &ActivityContext, out: &Publisher, events: &[AgentEvent]) {
        if events.is_empty() {
            return;
        }
        if let Some(sink) = &self.events {
            let workflow_id = ctx.info().workflow_id.as_deref().unwrap_or_default();
            sink(workflow_id, events);
        }
        for event in events {
            out.send(event.clone());
        }
    }

    /// A tool result's events, as the in-process loop emits them when it joins the history,
    /// to the sink only: the event log gets a round's results from the workflow, in the
    /// round's order after its last call, as the in-process loop emits them.
    pub(crate) fn publish_result(&self, ctx: &ActivityContext, result: &ToolResult) {
        self.publish(
            ctx,
            &Publisher::off(),
            &[
                AgentEvent::MessageStart { role: Role::Tool },
                AgentEvent::MessageEnd {
                    message: Message::Tool(result.clone()),
                    cost_usd: None,
                },
            ],
        );
    }
}
