//! Crash recovery: every completed turn of a run is saved to the session store as it
//! completes, and a session whose run was cut off (its instance killed) is recovered by the
//! next request, on any instance.
//!
//! The loop hands each message it produces to its conversation appender and awaits it before
//! going on ([`agent_conversation::ConversationAppender`]'s contract), so the appender here is
//! the per-turn hook: it keeps a copy of the session as the run has made it so far and, at
//! each turn boundary, replaces the stored session with it under the run's lease (the same
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

use agent_conversation::{AppendFuture, ConversationAppender, Turn};
use agent_loop::{Options, SessionInput, SessionStatus};
use agent_types::{Message, RateCard, ToolResult};

use crate::spend::Meter;
use tokio_util::sync::CancellationToken;

use crate::state::{AppState, now_ms};
use crate::store::SessionRecord;

/// The error result a call gets when its run's server stopped before its result was saved.
pub(crate) const INTERRUPTED: &str =
    "the server stopped before this call finished; it may or may not have run";

/// What the loop writes for calls a new input leaves unanswered (kept identical, so the
/// checkpoint and the final save agree).
const RAN_FIRST: &str = "This call was not run: the run that made it ended first.";

/// The appender that checkpoints a run's turns.
pub(crate) struct Checkpointer {
    state: AppState,
    holder: String,
    rate_card: Arc<RateCard>,
    meter: Option<Meter>,
    /// The session as the run has made it so far.
    record: tokio::sync::Mutex<SessionRecord>,
}

/// Makes the run described by `options` checkpoint each completed turn of `record` (about to
/// run from `input` under `holder`'s lease) to `store`; the tenant's spend is flushed to its
/// ledger with each checkpoint.
pub(crate) fn install(
    options: &mut Options,
    state: &AppState,
    record: &SessionRecord,
    input: &SessionInput,
    holder: &str,
    meter: Option<&Meter>,
) {
    let base = started(record, input, options);
    options.conversation = Some(Arc::new(Checkpointer {
        state: state.clone(),
        holder: holder.to_owned(),
        rate_card: Arc::clone(&options.rate_card),
        meter: meter.cloned(),
        record: tokio::sync::Mutex::new(base),
    }));
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

/// `record` as the loop has it once it took `input`: the input in the history, the pending
/// calls consumed, status `running`. Mirrors the start of `agent_loop`'s run, which does not
/// echo its input to the appender.
fn started(record: &SessionRecord, input: &SessionInput, options: &Options) -> SessionRecord {
    let mut base = record.clone();
    let session = &mut base.session;
    let pending = std::mem::take(&mut session.pending_tool_calls);
    session.pending_approvals.clear();
    match input {
        SessionInput::User(message) => {
            close(&mut session.messages, RAN_FIRST);
            session.messages.push(Message::User(message.clone()));
        }
        SessionInput::Continue => {
            close(&mut session.messages, RAN_FIRST);
        }
        SessionInput::ToolResults(results) => {
            // In the pending calls' order, capped as the loop caps them.
            let policy = agent_tools::TruncationPolicy::new(options.tool_result_max_bytes).ok();
            for call in &pending {
                let Some(result) = results.iter().find(|result| result.tool_call_id == call.id)
                else {
                    continue;
                };
                let mut result = result.clone();
                if result.name.is_empty() {
                    result.name.clone_from(&call.name);
                }
                if let Some(policy) = &policy {
                    result.content =
                        agent_tools::truncate(std::mem::take(&mut result.content), policy).text;
                }
                agent_tools::cap_binary(&mut result.blocks, options.tool_result_max_binary_bytes);
                session.messages.push(Message::Tool(result));
            }
        }
        // The approved round runs first; its results come through the appender.
        SessionInput::Approvals(_) => {}
    }
    session.status = SessionStatus::Running;
    base
}

impl ConversationAppender for Checkpointer {
    fn append<'a>(&'a self, turn: &'a Turn) -> AppendFuture<'a> {
        Box::pin(async move {
            let mut record = self.record.lock().await;
            let session = &mut record.session;
            if let Message::Assistant(assistant) = &turn.message
                && let Some(usage) = assistant.usage
            {
                session.usage += usage;
                if let Some(cost) = self.rate_card.cost(&session.model, &usage) {
                    *session.cost_usd.get_or_insert(0.0) += cost;
                }
            }
            session.messages.push(turn.message.clone());
            if !boundary(&session.messages) {
                return Ok(());
            }
            // The model calls the checkpoint covers are in the tenant's ledger with it.
            if let Some(meter) = &self.meter {
                meter.flush().await;
            }
            record.updated_at_ms = now_ms();
            let saved = self
                .state
                .inner
                .store
                .save(&record, &self.holder, false)
                .await;
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
                agent_conversation::Error::TaskFailed(
                    "the session checkpoint could not be saved; the server log has the cause"
                        .into(),
                )
            })
        })
    }
}

/// Whether the history ends a turn: anything but a tool result that leaves calls of the last
/// assistant message unanswered.
fn boundary(messages: &[Message]) -> bool {
    match messages.last() {
        Some(Message::Tool(_)) => unanswered(messages).is_empty(),
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
