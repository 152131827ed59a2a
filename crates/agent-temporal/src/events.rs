//! Live events of runs on Temporal: what a viewer of a run (the CLI's `agentry run --temporal
//! --events`, the server's SSE stream) reads while the workflow runs, in the order and form the
//! in-process loop emits them (docs/durable.md, "Live events").
//!
//! An [`EventLog`] keeps each workflow's events in order under a sequence number (`seq`, from
//! 1): the activities publish what they produce as it happens (text deltas while `model_call`
//! streams, `tool_execution_*` in `tool_call`), the workflow publishes its own events
//! (`session_start`, the suspensions, `session_end`) through the `publish_events` local
//! activity. A viewer [`subscribes`](EventLog::subscribe) after the last `seq` it has seen, so a
//! reconnecting viewer loses nothing.
//!
//! Every published event has a key fixed by where it comes from (the workflow run, the
//! activity's id, the event's index in that activity): a retried activity publishes under the
//! same keys, and the log keeps the first copy of each key, so a retry does not duplicate what
//! a viewer saw.
//!
//! [`PgEventLog`] (feature `postgres`) is the implementation on PostgreSQL: one table, a
//! `pg_notify` on every insert and one `LISTEN` connection per process.

use std::sync::Arc;

use agent_types::{AgentError, AgentEvent, StopReason};
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use temporalio_sdk::activities::ActivityContext;
use temporalio_sdk::{LocalActivityOptions, WorkflowContext};
use tokio::sync::mpsc;

use crate::error::Error;

// The SDK's `#[activities]` adds an undocumented public constant per method.
#[allow(missing_docs)]
mod local;
#[cfg(feature = "postgres")]
mod postgres;
pub use local::EventActivities;
#[cfg(feature = "postgres")]
pub use postgres::PgEventLog;

/// The most events an activity queues for the log before it drops deltas (the log is a view;
/// the run's result is the truth).
const QUEUED: usize = 4_096;
/// The most events one write to the log carries.
const BATCH: usize = 256;

/// One event as the log holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedEvent {
    /// Its position in the workflow's log, from 1.
    pub seq: i64,
    /// The event.
    pub event: AgentEvent,
}

/// One event to publish, under the key that makes a retried publisher's copy a no-op.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// Where the event comes from: the workflow run, the activity, the event's index in it.
    pub key: String,
    /// The event.
    pub event: AgentEvent,
}

/// What the log keeps per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventLimits {
    /// Past this many events in a workflow's log, only whole-message and run-level events are
    /// kept (deltas are dropped: `message_end` carries the whole message).
    pub max_events_per_run: i64,
    /// An event whose JSON is larger is dropped, except `session_end`, kept with its messages
    /// left out (the run's result has them).
    pub max_event_bytes: usize,
    /// How long a workflow's events stay after its run ended (its final `session_end`), for
    /// viewers that reconnect late.
    pub retention: std::time::Duration,
}

impl Default for EventLimits {
    fn default() -> Self {
        Self {
            max_events_per_run: 20_000,
            max_event_bytes: 256 * 1024,
            retention: std::time::Duration::from_secs(3_600),
        }
    }
}

/// Where live events of runs go and where viewers read them.
pub trait EventLog: Send + Sync + 'static {
    /// Appends `events` to `workflow_id`'s log, in order, skipping keys it already holds.
    fn publish<'a>(
        &'a self,
        workflow_id: &'a str,
        events: &'a [Published],
    ) -> BoxFuture<'a, Result<(), Error>>;

    /// The last `seq` in `workflow_id`'s log (0 when empty): subscribe after it to see only
    /// what comes next.
    fn last_seq<'a>(&'a self, workflow_id: &'a str) -> BoxFuture<'a, Result<i64, Error>>;

    /// The events of `workflow_id` after `after_seq`, in order, as they arrive; the stream
    /// never ends by itself (a viewer stops at the `session_end` it waits for).
    fn subscribe(
        &self,
        workflow_id: &str,
        after_seq: i64,
    ) -> BoxStream<'static, Result<LoggedEvent, Error>>;
}

/// Whether a run-level event: published by the workflow, never by an activity (an activity's
/// own loop run starts, suspends and ends where the workflow's run does not).
fn run_level(event: &AgentEvent) -> bool {
    matches!(
        event,
        AgentEvent::SessionStart { .. }
            | AgentEvent::SessionEnd { .. }
            | AgentEvent::AwaitingToolExecution { .. }
            | AgentEvent::ApprovalRequested { .. }
            | AgentEvent::Error { .. }
    )
}

/// Whether an event only a live viewer needs: the whole message follows in `message_end`.
pub(crate) fn is_delta(event: &AgentEvent) -> bool {
    matches!(
        event,
        AgentEvent::TextDelta { .. }
            | AgentEvent::ThinkingDelta { .. }
            | AgentEvent::RefusalDelta { .. }
            | AgentEvent::ToolCallDelta { .. }
            | AgentEvent::ToolExecutionDelta { .. }
            | AgentEvent::OutputPartial { .. }
    )
}

/// Whether `event` ends the run for good (not a suspension's `session_end`).
pub(crate) fn ends_run(event: &AgentEvent) -> bool {
    matches!(event, AgentEvent::SessionEnd { finish_reason, .. } if *finish_reason != StopReason::ToolCalls)
}

/// An activity's publisher: it takes the events the activity's loop produces, keys them, and
/// writes them to the log in batches from a task of its own, so the model's stream never waits
/// for the database. Off (every call a no-op) when the worker has no log.
pub struct Publisher {
    queue: Option<mpsc::Sender<AgentEvent>>,
    writer: Option<tokio::task::JoinHandle<()>>,
}

impl Publisher {
    /// A publisher that publishes nothing.
    pub fn off() -> Self {
        Self {
            queue: None,
            writer: None,
        }
    }

    /// The publisher of the activity `ctx` runs, into `log` (off without one, or outside a
    /// workflow).
    pub fn for_activity(log: Option<&Arc<dyn EventLog>>, ctx: &ActivityContext) -> Self {
        let info = ctx.info();
        let (Some(log), Some(workflow_id)) = (log, info.workflow_id.clone()) else {
            return Self::off();
        };
        // The same for every attempt of this activity, unique within the workflow's history
        // (a run of the workflow after continue-as-new has another run id).
        let prefix = format!(
            "{}/{}{}",
            info.workflow_run_id.as_deref().unwrap_or(""),
            if info.is_local { 'l' } else { 'a' },
            info.activity_id
        );
        Self::start(Arc::clone(log), workflow_id, prefix)
    }

    fn start(log: Arc<dyn EventLog>, workflow_id: String, prefix: String) -> Self {
        let (queue, mut rx) = mpsc::channel::<AgentEvent>(QUEUED);
        let writer = tokio::spawn(async move {
            let mut index = 0_u64;
            let mut batch: Vec<Published> = Vec::with_capacity(BATCH);
            while let Some(first) = rx.recv().await {
                let mut next = Some(first);
                while let Some(event) = next {
                    batch.push(Published {
                        key: format!("{prefix}/{index}"),
                        event,
                    });
                    index += 1;
                    next = if batch.len() < BATCH {
                        rx.try_recv().ok()
                    } else {
                        None
                    };
                }
                if let Err(error) = log.publish(&workflow_id, &batch).await {
                    // A viewer misses these; the run itself goes on.
                    tracing::warn!(workflow_id, %error, "cannot publish the run's events");
                }
                batch.clear();
            }
        });
        Self {
            queue: Some(queue),
            writer: Some(writer),
        }
    }

    /// Publishes `event` unless it is run-level (the workflow publishes those).
    pub fn send(&self, event: AgentEvent) {
        if let Some(queue) = &self.queue
            && !run_level(&event)
            && queue.try_send(event).is_err()
        {
            tracing::warn!("the event log is behind: an event of the run is dropped");
        }
    }

    /// Waits until every event sent is in the log (or failed to get there), so that what the
    /// workflow does next is published after it.
    pub async fn finish(mut self) {
        self.queue = None;
        if let Some(writer) = self.writer.take() {
            let _ = writer.await;
        }
    }
}

/// Publishes the workflow's own `events` (in the workflow: a local activity). A failure is
/// only a viewer's loss: it never fails the run.
pub(crate) async fn publish<W>(ctx: &WorkflowContext<W>, events: Vec<AgentEvent>) {
    let options = LocalActivityOptions::builder()
        .start_to_close_timeout(std::time::Duration::from_secs(10))
        .build();
    let _ = ctx
        .execute_local_activity(EventActivities::publish_events, events, options)
        .await;
}

/// The `session_end` of a run or of a suspension, with the messages this part of the run added.
pub(crate) fn session_end(
    session: &agent_loop::Session,
    from: usize,
    finish_reason: StopReason,
) -> AgentEvent {
    AgentEvent::SessionEnd {
        session_id: session.id.clone(),
        messages: session.messages.get(from..).unwrap_or_default().to_vec(),
        finish_reason,
    }
}

/// The last events of a run that ended, as the in-process loop emits them: a guardrail's trip
/// and `error` when it failed, then `session_end` with the messages it added since `from`
/// (after the caller's input) and its finish reason.
pub(crate) fn run_ended(
    outcome: &crate::wire::RunOutcome,
    from: usize,
    error: Option<AgentError>,
) -> Vec<AgentEvent> {
    let session = &outcome.session;
    match error {
        Some(error) => {
            let reason = if error.is_aborted() {
                StopReason::Aborted
            } else {
                StopReason::Error
            };
            let mut events = Vec::with_capacity(3);
            events.extend(trip_event(&error));
            events.push(AgentEvent::Error { error });
            events.push(session_end(session, from, reason));
            events
        }
        None => {
            let reason = match session.messages.last() {
                // A structured answer's final-answer call is the answer, not a request for
                // tools.
                _ if outcome.output.is_some() => StopReason::Stop,
                Some(agent_types::Message::Assistant(message)) => {
                    message.stop_reason.unwrap_or(StopReason::Stop)
                }
                _ => StopReason::Stop,
            };
            vec![session_end(session, from, reason)]
        }
    }
}

/// The `guardrail_tripped` event the in-process loop emits before a guardrail's error.
fn trip_event(error: &AgentError) -> Option<AgentEvent> {
    let agent_types::ErrorKind::GuardrailTripped { guardrail, stage } = &error.kind else {
        return None;
    };
    let reason = error
        .message
        .split_once(": ")
        .map_or(error.message.as_str(), |(_, reason)| reason);
    Some(AgentEvent::GuardrailTripped {
        decision: agent_types::GuardrailDecision::new(
            guardrail.as_str(),
            *stage,
            agent_types::GuardrailAction::Trip,
            reason,
        ),
    })
}

/// The events of a run that suspends: the calls it waits for (for a person with `approval`,
/// else remote), then `session_end`.
pub(crate) fn suspended(
    session: &agent_loop::Session,
    from: usize,
    approval: bool,
    tool_calls: Vec<agent_types::ToolCall>,
) -> Vec<AgentEvent> {
    let session_id = session.id.clone();
    let waiting = if approval {
        AgentEvent::ApprovalRequested {
            session_id,
            tool_calls,
        }
    } else {
        AgentEvent::AwaitingToolExecution {
            session_id,
            tool_calls,
        }
    };
    vec![waiting, session_end(session, from, StopReason::ToolCalls)]
}

/// A stream of a workflow's events up to and including the first `session_end` (the end of the
/// run, or of the part of it before a suspension).
pub fn until_session_end(
    events: impl Stream<Item = Result<LoggedEvent, Error>> + Send + 'static,
) -> BoxStream<'static, Result<LoggedEvent, Error>> {
    futures_util::stream::unfold((events.boxed(), false), |(mut events, done)| async move {
        if done {
            return None;
        }
        let item = events.next().await?;
        let end = matches!(
            &item,
            Ok(LoggedEvent {
                event: AgentEvent::SessionEnd { .. },
                ..
            })
        );
        Some((item, (events, end)))
    })
    .boxed()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use agent_types::SessionId;

    #[test]
    fn activities_leave_run_level_events_to_the_workflow() {
        let start = AgentEvent::SessionStart {
            session_id: SessionId::from("s"),
        };
        assert!(run_level(&start));
        assert!(!run_level(&AgentEvent::TextDelta { delta: "a".into() }));
        assert!(is_delta(&AgentEvent::TextDelta { delta: "a".into() }));
        assert!(!is_delta(&AgentEvent::TextStart));
        let end = |finish_reason| AgentEvent::SessionEnd {
            session_id: SessionId::from("s"),
            messages: Vec::new(),
            finish_reason,
        };
        assert!(ends_run(&end(StopReason::Stop)));
        assert!(!ends_run(&end(StopReason::ToolCalls)));
    }
}
