//! Holding back the events that show a tool's result until the session store holds it, so a
//! client never reads a result that a crash could then turn into the recovery's error result.
//!
//! A tool's result reaches the client in `tool_execution_end` (as its call ends) and in its
//! `message_end` (when it joins the history), and the round's checkpoint commits only once
//! the round's last result is in (one write per round, see [`crate::checkpoint`]). So the
//! [`Gate`] holds such an event, and every event after it (order is kept), until the
//! checkpointer reports a commit made after the event. The loop runs inside the event
//! stream's poll on the same task, so a commit reported after an event was received always
//! covers that event's result: the next checkpoint is the one at the end of its round.
//!
//! Why hold rather than checkpoint each result as it ends: a checkpoint rewrites the whole
//! session (milliseconds on SQLite, growing with the history), so one per result would
//! multiply the writes of a round by its calls, and the loop pushes a round's results in
//! call order only once every call ended. Holding costs nothing per event but a comparison,
//! adds no write, and delays a result by the rest of its round plus one commit.
//!
//! `error` and `session_end` can carry results the store does not hold yet (the calls a
//! failed run closed), so they are held too; they are the run's last events and go out
//! right after the final save. A round that takes the session's tool results past the
//! checkpoint bound is not checkpointed (its memory would double), so its events are not
//! held either: past that bound the window is open, as the run's turns are not
//! checkpointed at all.

use std::collections::VecDeque;
use std::time::Instant;

use agent_types::{AgentEvent, Message};
use tokio::sync::watch;

/// What the store holds of the run, as the checkpointer last reported it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Stored {
    /// Checkpoints committed (or skipped for size) so far.
    commits: u64,
    /// The bytes of tool results in the history at the last one.
    result_bytes: usize,
}

/// The checkpointer's side: reports each commit.
#[derive(Debug)]
pub(crate) struct Signal(watch::Sender<Stored>);

impl Signal {
    /// A checkpoint of a history holding `result_bytes` of tool results was committed, or
    /// skipped because they are over the bound (nothing more of the run will be held).
    pub(crate) fn committed(&self, result_bytes: usize) {
        self.0.send_modify(|stored| {
            stored.commits += 1;
            stored.result_bytes = result_bytes;
        });
    }
}

/// A signal and the gate it opens, for a session whose history holds `result_bytes` of
/// tool results before the run.
pub(crate) fn pair(result_bytes: usize) -> (Signal, Gate) {
    let (sender, receiver) = watch::channel(Stored {
        commits: 0,
        result_bytes,
    });
    (
        Signal(sender),
        Gate {
            stored: receiver,
            held: VecDeque::new(),
            since: None,
            round_bytes: 0,
            round_of: 0,
            held_results: 0,
            held_secs: 0.0,
        },
    )
}

/// The event pump's side: decides which events go out now and which wait.
#[derive(Debug)]
pub(crate) struct Gate {
    stored: watch::Receiver<Stored>,
    /// Events waiting, in order; a result's event carries when it arrived.
    held: VecDeque<(AgentEvent, Option<Instant>)>,
    /// The commit count when holding began; `None` while nothing is held.
    since: Option<u64>,
    /// Bytes of results shown since the commit numbered `round_of`.
    round_bytes: usize,
    round_of: u64,
    /// Results held so far and the seconds they waited in all (for `/metrics`).
    held_results: u64,
    held_secs: f64,
}

/// Whether `event` shows a tool's result (or may carry one the store does not hold).
fn shows_result(event: &AgentEvent) -> bool {
    matches!(
        event,
        AgentEvent::ToolExecutionEnd { .. }
            | AgentEvent::MessageEnd {
                message: Message::Tool(_),
                ..
            }
            | AgentEvent::Error { .. }
            | AgentEvent::SessionEnd { .. }
    )
}

impl Gate {
    /// `Some(event)` when `event` may go out now (call [`release`](Self::release) first:
    /// held events go before it); `None` when it is held.
    pub(crate) fn pass(&mut self, event: AgentEvent) -> Option<AgentEvent> {
        if self.since.is_none() && !shows_result(&event) {
            return Some(event);
        }
        let stored = *self.stored.borrow();
        if stored.commits != self.round_of {
            self.round_of = stored.commits;
            self.round_bytes = 0;
        }
        if let AgentEvent::ToolExecutionEnd { output, .. } = &event {
            self.round_bytes = self.round_bytes.saturating_add(output.len());
        }
        // This round will not be checkpointed (too large): nothing to wait for.
        if stored.result_bytes.saturating_add(self.round_bytes)
            > crate::checkpoint::MAX_CHECKPOINT_RESULT_BYTES
            && !matches!(
                event,
                AgentEvent::Error { .. } | AgentEvent::SessionEnd { .. }
            )
        {
            if self.held.is_empty() {
                return Some(event);
            }
            // Held events first: hold this one behind them until the caller releases.
            self.since = Some(u64::MAX);
        }
        let at = shows_result(&event).then(Instant::now);
        self.since.get_or_insert(stored.commits);
        self.held.push_back((event, at));
        None
    }

    /// Whether held events may go out: a commit came after the first of them (or the round
    /// turned out too large to be checkpointed).
    pub(crate) fn ready(&self) -> bool {
        match self.since {
            None => false,
            Some(u64::MAX) => true,
            Some(since) => self.stored.borrow().commits > since,
        }
    }

    /// Takes the held events, in order; the caller sends them (when [`ready`](Self::ready),
    /// or after the run's final save).
    pub(crate) fn release(&mut self) -> impl Iterator<Item = AgentEvent> + '_ {
        let Self {
            held,
            since,
            held_results,
            held_secs,
            ..
        } = self;
        *since = None;
        let now = Instant::now();
        held.drain(..).map(move |(event, at)| {
            if let Some(at) = at {
                *held_results += 1;
                *held_secs += now.duration_since(at).as_secs_f64();
            }
            event
        })
    }

    /// Drops the held events (the run's final save failed: the store does not hold them).
    pub(crate) fn discard(&mut self) {
        self.since = None;
        self.held.clear();
    }

    /// Waits for the next commit while something is held; never ends otherwise.
    pub(crate) async fn committed(&mut self) {
        if self.since.is_none() || self.stored.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Results held so far and the seconds they waited in all.
    pub(crate) fn held(&self) -> (u64, f64) {
        (self.held_results, self.held_secs)
    }
}

#[cfg(test)]
mod tests {
    use agent_types::{Role, ToolResult};

    use super::*;

    fn result_end(id: &str) -> AgentEvent {
        AgentEvent::ToolExecutionEnd {
            call_id: id.into(),
            tool_name: "calculator".into(),
            output: "42".into(),
            is_error: false,
            truncated: false,
            blocks: Vec::new(),
        }
    }

    fn start() -> AgentEvent {
        AgentEvent::MessageStart {
            role: Role::Assistant,
        }
    }

    #[test]
    fn a_result_waits_for_the_commit_after_it_and_keeps_its_place() {
        let (signal, mut gate) = pair(0);
        assert!(gate.pass(start()).is_some());
        assert!(gate.pass(result_end("a")).is_none());
        // Everything after a held result waits behind it.
        assert!(gate.pass(start()).is_none());
        assert!(!gate.ready());
        signal.committed(2);
        assert!(gate.ready());
        let released: Vec<AgentEvent> = gate.release().collect();
        assert!(matches!(released[0], AgentEvent::ToolExecutionEnd { .. }));
        assert!(matches!(released[1], AgentEvent::MessageStart { .. }));
        assert_eq!(gate.held().0, 1);
        // Nothing held: events pass again.
        assert!(gate.pass(start()).is_some());
        let message = AgentEvent::MessageEnd {
            message: Message::Tool(ToolResult::ok("b", "calculator", "1")),
            cost_usd: None,
        };
        assert!(gate.pass(message).is_none());
    }

    #[test]
    fn a_round_past_the_checkpoint_bound_is_not_held() {
        let (_signal, mut gate) = pair(crate::checkpoint::MAX_CHECKPOINT_RESULT_BYTES);
        assert!(gate.pass(result_end("a")).is_some());
        // The run's last events wait for the final save whatever the size.
        let end = AgentEvent::SessionEnd {
            session_id: "s".into(),
            messages: Vec::new(),
            finish_reason: agent_types::StopReason::Stop,
        };
        assert!(gate.pass(end).is_none());
    }
}
