//! Crash recovery: every completed turn of a run is saved to the session store as it
//! completes, and a session whose run was cut off (its instance killed) is recovered by the
//! next request, on any instance.
//!
//! The loop lends its whole history to its [`TurnCheckpoint`] after each message joins it and
//! awaits it before going on; at each turn boundary the checkpointer moves that history into
//! the session record (no copy: a run's history is never held twice) and replaces the stored
//! session with it under the run's lease (the same
//! one-statement, lease-checked write as the save at the run's end). A turn boundary is an
//! assistant message (saved before its tools run, so a crash during them leaves calls the
//! store knows were asked for) and the tool result that answers the last of its calls. The
//! checkpoint has status `running`; the save at the end of the run replaces it with the
//! run's outcome.
//!
//! After a crash the lease expires; the next request takes it and [`recover`] turns the
//! checkpoint into a consistent session: every call asked for and not answered gets an error
//! result saying the server stopped (it may or may not have run), and the status becomes
//! `aborted`. Completed tool calls have their results stored and are never run again.

use std::sync::Arc;
use std::time::Duration;

use agent_loop::{BudgetsUsed, CheckpointFuture, Options, SessionStatus, TurnCheckpoint};
use agent_types::{AgentError, ErrorKind, Message, ToolResult, Usage};

use crate::spend::Meter;
use tokio_util::sync::CancellationToken;

use crate::state::{AppState, now_ms};
use crate::store::SessionRecord;

/// The error result a call gets when its run's server stopped before its result was saved.
pub(crate) const INTERRUPTED: &str =
    "the server stopped before this call finished; it may or may not have run";

/// Above this many bytes of tool results in the history, turns are not checkpointed (the
/// run's final save still writes them). A checkpoint encodes the whole session while the run
/// still holds it and its round's events, so on a huge session it would add several times the
/// session's size to the server's peak memory (measured: a 300-call round of 64 KiB results
/// went from 111 to 161 MiB of growth). Sessions are capped at 8 MiB by default
/// (`max_session_bytes`), so with the default caps every turn is checkpointed.
pub(crate) const MAX_CHECKPOINT_RESULT_BYTES: usize = 8 * 1024 * 1024;

/// The bytes of tool result text in `history` (what dominates a large session).
fn results_bytes(history: &[Message]) -> usize {
    history
        .iter()
        .map(|message| match message {
            Message::Tool(result) => result.content.len(),
            _ => 0,
        })
        .sum()
}

/// Saves a run's progress at each turn boundary, from the history the loop lends it.
pub(crate) struct Checkpointer {
    state: AppState,
    tenant: String,
    holder: String,
    meter: Option<Meter>,
    /// The session's totals before the run.
    usage: Usage,
    cost_usd: Option<f64>,
    /// The session as stored, without its history (the loop lends it at each checkpoint).
    record: tokio::sync::Mutex<SessionRecord>,
    /// Tells the event pump what the store holds (it holds results back until then).
    stored: crate::result_gate::Signal,
}

/// Makes the run described by `options` checkpoint each completed turn of `record` (about to
/// run under `holder`'s lease); the tenant's spend is flushed to its ledger with each
/// checkpoint. Nothing of the history is copied: the loop lends it at each checkpoint.
/// Returns the gate that holds the run's result events until a checkpoint stores them.
pub(crate) fn install(
    options: &mut Options,
    state: &AppState,
    record: &mut SessionRecord,
    holder: &str,
    meter: Option<&Meter>,
) -> crate::result_gate::Gate {
    let (stored, gate) = crate::result_gate::pair(results_bytes(&record.session.messages));
    let messages = std::mem::take(&mut record.session.messages);
    let mut base = record.clone();
    record.session.messages = messages;
    let session = &mut base.session;
    session.pending_tool_calls.clear();
    session.pending_approvals.clear();
    session.status = SessionStatus::Running;
    options.checkpoint = Some(Arc::new(Checkpointer {
        state: state.clone(),
        tenant: record.tenant.clone(),
        holder: holder.to_owned(),
        meter: meter.cloned(),
        usage: session.usage,
        cost_usd: session.cost_usd,
        record: tokio::sync::Mutex::new(base),
        stored,
    }));
    gate
}

impl TurnCheckpoint for Checkpointer {
    fn checkpoint<'a>(
        &'a self,
        history: &'a mut Vec<Message>,
        usage: Usage,
        cost_usd: Option<f64>,
        budgets: &'a BudgetsUsed,
    ) -> CheckpointFuture<'a> {
        Box::pin(async move {
            if !boundary(history) {
                return Ok(());
            }
            let bytes = results_bytes(history);
            if bytes > MAX_CHECKPOINT_RESULT_BYTES {
                self.state.inner.metrics.inc(
                    "agentry_checkpoints_total",
                    &[("tenant", &self.tenant), ("outcome", "skipped")],
                );
                self.stored.committed(bytes);
                return Ok(());
            }
            // The model calls the checkpoint covers are in the tenant's ledger with it.
            if let Some(meter) = &self.meter {
                meter.flush().await;
            }
            let mut record = self.record.lock().await;
            let mut total = self.usage;
            total += usage;
            record.session.usage = total;
            record.session.cost_usd = match (self.cost_usd, cost_usd) {
                (Some(before), Some(run)) => Some(before + run),
                (before, run) => before.or(run),
            };
            // A continuation after a crash starts from these (one budget across the crash).
            record.session.set_budgets_used(Some(budgets.clone()));
            record.updated_at_ms = now_ms();
            // Moved in and back out: the history is never copied.
            std::mem::swap(&mut record.session.messages, history);
            let store = &self.state.inner.store;
            let mut saved = store.save(&record, &self.holder, false).await;
            if let Err(error) = &saved
                && crate::checkpoint_retry::worth_retrying(error)
            {
                tracing::warn!(session = record.id(), %error, "a checkpoint could not be saved; retrying once when the store answers again");
                let (tenant, id) = (&self.tenant, record.id());
                if crate::checkpoint_retry::reconnected(&self.state, tenant, id, &self.holder).await
                {
                    saved = store.save(&record, &self.holder, false).await;
                }
            }
            std::mem::swap(&mut record.session.messages, history);
            if saved.is_ok() {
                self.stored.committed(bytes);
            }
            self.state.inner.metrics.inc(
                "agentry_checkpoints_total",
                &[
                    ("tenant", &record.tenant),
                    ("outcome", if saved.is_ok() { "ok" } else { "failed" }),
                ],
            );
            saved.map_err(|error| {
                // The store's message (hosts, paths) stays in the log.
                tracing::error!(session = record.id(), %error, "a turn could not be checkpointed");
                AgentError::new(
                    ErrorKind::Appender,
                    "the session checkpoint could not be saved; the server log has the cause",
                )
            })
        })
    }
}

/// Keeps `holder`'s lease on the session alive while its run goes on: renewed every third of
/// `execute_lease_secs`, so a short lease (quick recovery after a crash) never cuts off a
/// long healthy run. When the lease turns out lost (another execute took it after this
/// instance stalled longer than the lease), `cancel` stops the run: its writes would be
/// refused anyway. Stops when the returned handle is aborted.
pub(crate) fn heartbeat(
    state: &AppState,
    tenant: &str,
    id: &str,
    holder: &str,
    cancel: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let every = Duration::from_millis(
        state
            .inner
            .config
            .execute_lease_secs
            .saturating_mul(1000)
            .checked_div(3)
            .unwrap_or(0)
            .max(100),
    );
    let (state, tenant, id, holder) = (
        state.clone(),
        tenant.to_owned(),
        id.to_owned(),
        holder.to_owned(),
    );
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let until = crate::execute::lease_until(&state);
            match state.inner.store.renew(&tenant, &id, &holder, until).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(session = %id, "the run's lease was lost; stopping the run");
                    cancel.cancel();
                    return;
                }
                // The database may come back before the lease runs out: try again.
                Err(error) => {
                    tracing::warn!(session = %id, %error, "could not renew the run's lease");
                }
            }
        }
    })
}

/// Whether the history ends a turn worth a checkpoint: a model message asking for tools
/// (before they run), the result that answers the last of its calls, or a message the loop
/// adds itself (an output check's feedback). Not the model's answer: the run's final save
/// follows it at once, and writing the whole session twice in a row would double the
/// memory a large session's last step takes.
fn boundary(messages: &[Message]) -> bool {
    match messages.last() {
        Some(Message::Tool(_)) => unanswered(messages).is_empty(),
        Some(Message::Assistant(assistant)) => assistant.tool_calls().next().is_some(),
        _ => true,
    }
}

/// The calls of the last assistant message that have no result after it, in call order.
fn unanswered(messages: &[Message]) -> Vec<(agent_types::ToolCallId, String)> {
    let mut answered = Vec::new();
    for message in messages.iter().rev() {
        match message {
            Message::Tool(result) => answered.push(result.tool_call_id.as_str()),
            Message::Assistant(assistant) => {
                return assistant
                    .tool_calls()
                    .filter(|call| !answered.contains(&call.id.as_str()))
                    .map(|call| (call.id.clone(), call.name.clone()))
                    .collect();
            }
            _ => break,
        }
    }
    Vec::new()
}

/// Gives every unanswered call of the last assistant message an error result (`text`);
/// returns how many.
fn close(messages: &mut Vec<Message>, text: &str) -> usize {
    let open = unanswered(messages);
    let closed = open.len();
    for (id, name) in open {
        messages.push(Message::Tool(ToolResult::error(id, name, text)));
    }
    closed
}

/// Turns the checkpoint of a run that never finished (stored status `running`; the caller
/// holds the lease, or reads a session whose lease expired) into a consistent session: calls
/// without a result get [`INTERRUPTED`] as an error result, and the status becomes
/// `aborted` (send `{}` to continue the run, or a new message). Returns whether it changed
/// anything.
pub(crate) fn recover(record: &mut SessionRecord) -> bool {
    let session = &mut record.session;
    if session.status != SessionStatus::Running {
        return false;
    }
    close(&mut session.messages, INTERRUPTED);
    session.pending_tool_calls.clear();
    session.pending_approvals.clear();
    // Even when the model's answer was saved, the run did not end (no output check, no final
    // save): `aborted`, what the list shows too without reading the document.
    session.status = SessionStatus::Aborted;
    true
}

/// [`recover`] for an execute about to run the session: logged and counted in `/metrics`.
pub(crate) fn recover_for_run(state: &AppState, record: &mut SessionRecord) {
    if recover(record) {
        tracing::warn!(
            session = record.id(),
            tenant = %record.tenant,
            "recovered a session whose run was cut off by a crash"
        );
        state.inner.metrics.inc(
            "agentry_recovered_runs_total",
            &[("tenant", &record.tenant)],
        );
    }
}

/// Whether `{}` (continue) can run on this history: it must end with what the model answers
/// next, a user message or a tool result.
pub(crate) fn can_continue(record: &SessionRecord) -> bool {
    matches!(
        record.session.messages.last(),
        Some(Message::User(_) | Message::Tool(_))
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use agent_types::{AssistantBlock, AssistantMessage, ToolCall};
    use serde_json::json;

    use super::*;

    fn calls(ids: &[&str]) -> Message {
        Message::Assistant(AssistantMessage {
            content: ids
                .iter()
                .map(|id| AssistantBlock::ToolCall(ToolCall::new(*id, "calculator", json!({}))))
                .collect(),
            ..AssistantMessage::default()
        })
    }

    #[test]
    fn a_round_is_a_boundary_once_every_call_is_answered() {
        let mut messages = vec![Message::user("q"), calls(&["a", "b"])];
        assert!(boundary(&messages));
        assert!(!boundary(&[Message::Assistant(AssistantMessage::text(
            "answer"
        ))]));
        messages.push(Message::Tool(ToolResult::ok("b", "calculator", "1")));
        assert!(!boundary(&messages));
        messages.push(Message::Tool(ToolResult::ok("a", "calculator", "2")));
        assert!(boundary(&messages));
    }

    #[test]
    fn recovery_closes_the_calls_left_open_and_says_why() {
        let mut record = SessionRecord {
            tenant: "t".into(),
            model: "m".into(),
            session: agent_loop::Session::with_id("s", "m"),
            tools: Vec::new(),
            options: crate::store::SessionOptions::default(),
            created_at_ms: 0,
            updated_at_ms: 0,
        };
        record.session.messages = vec![
            Message::user("q"),
            calls(&["a", "b"]),
            Message::Tool(ToolResult::ok("a", "calculator", "2")),
        ];
        record.session.status = SessionStatus::Running;
        assert!(recover(&mut record));
        assert_eq!(record.session.status, SessionStatus::Aborted);
        let Some(Message::Tool(last)) = record.session.messages.last() else {
            panic!("no result added");
        };
        assert_eq!(last.tool_call_id.as_str(), "b");
        assert!(last.is_error);
        assert!(last.content.contains("may or may not have run"));
        assert!(can_continue(&record));
        // Recovered once: a second look changes nothing.
        assert!(!recover(&mut record));

        record
            .session
            .messages
            .push(Message::Assistant(AssistantMessage::text("4")));
        record.session.status = SessionStatus::Running;
        assert!(recover(&mut record));
        assert_eq!(record.session.status, SessionStatus::Aborted);
        assert!(!can_continue(&record));
    }
}
