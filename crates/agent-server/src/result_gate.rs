//! Holding back the events that show a tool's result until the session store holds it, so a
//! client never reads a result that a crash could then turn into the recovery's error result.
//!
//! A tool's result reaches the client in `tool_execution_end` (as its call ends) and in its
//! `message_end` (when it joins the history), and the round's checkpoint commits only once
//! the round's last result is in (one write per round, see [`crate::checkpoint`]). So the
//! [`Gate`] holds such an event, and every event after it (order is kept), until the
//! checkpointer reports a commit made after the event. The loop runs inside the event
//! stream's poll on the same task, so a commit reported after an event was received always
//! covers that event's result: the next checkpoint is the one at the end of its round. A
//! held `tool_execution_end` keeps no output: it goes out filled back from its call's
//! `message_end` (the same result), just before that message, so the round's results are
//! not held twice while its other calls run; the round's `tool_execution_end` events thus
//! go out in call order.
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
//! held either, nor the run's end after it (holding `session_end`, which carries every
//! message of the run, through the final save would add the run's size to the peak): past
//! that bound the window is open, as the run's turns are not checkpointed at all.

use std::collections::VecDeque;
use std::time::Instant;

use agent_types::{AgentEvent, Message, Role};
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
            deferred: Vec::new(),
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
    /// Events waiting, in order.
    held: VecDeque<Held>,
    /// `tool_execution_end` events with their output (and blocks) taken out, waiting for
    /// their call's `message_end`, which carries the same result: each goes out, filled back,
    /// just before it. Holding the output while the round's other calls run would add the
    /// round's results to the server's peak memory.
    deferred: Vec<Held>,
    /// The commit count when holding began; `None` while nothing is held.
    since: Option<u64>,
    /// Bytes of results shown since the commit numbered `round_of`.
    round_bytes: usize,
    round_of: u64,
    /// Results held so far and the seconds they waited in all (for `/metrics`).
    held_results: u64,
    held_secs: f64,
}

/// An event waiting.
#[derive(Debug)]
struct Held {
    event: AgentEvent,
    /// When a result's event arrived.
    at: Option<Instant>,
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
    pub(crate) fn pass(&mut self, mut event: AgentEvent) -> Option<AgentEvent> {
        if self.since.is_none() && self.deferred.is_empty() && !shows_result(&event) {
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
        // A round that will not be checkpointed (too large) waits for nothing but the order.
        let unguarded = stored.result_bytes.saturating_add(self.round_bytes)
            > crate::checkpoint::MAX_CHECKPOINT_RESULT_BYTES;
        let at = shows_result(&event).then(Instant::now);
        match &mut event {
            AgentEvent::ToolExecutionEnd { output, blocks, .. }
                if !(unguarded && self.held.is_empty()) =>
            {
                drop(std::mem::take(output));
                drop(std::mem::take(blocks));
                self.deferred.push(Held { event, at });
                self.since.get_or_insert(stored.commits);
                return None;
            }
            AgentEvent::MessageEnd {
                message: Message::Tool(result),
                ..
            } => {
                if let Some(filled) = self.fill(result) {
                    // Before the result's `message_start` when that waits here too.
                    let before = match self.held.back() {
                        Some(Held {
                            event: AgentEvent::MessageStart { role: Role::Tool },
                            ..
                        }) => self.held.len() - 1,
                        _ => self.held.len(),
                    };
                    self.held.insert(before, filled);
                }
            }
            _ => {}
        }
        if unguarded {
            if self.held.is_empty() {
                return Some(event);
            }
            self.since = Some(u64::MAX);
        }
        self.since.get_or_insert(stored.commits);
        self.held.push_back(Held { event, at });
        None
    }

    /// The deferred `tool_execution_end` of `result`'s call, its output put back.
    fn fill(&mut self, result: &agent_types::ToolResult) -> Option<Held> {
        let at = self.deferred.iter().position(|held| {
            matches!(&held.event, AgentEvent::ToolExecutionEnd { call_id, .. }
                if *call_id == result.tool_call_id)
        })?;
        let mut held = self.deferred.swap_remove(at);
        if let AgentEvent::ToolExecutionEnd { output, blocks, .. } = &mut held.event {
            output.clone_from(&result.content);
            blocks.clone_from(&result.blocks);
        }
        Some(held)
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

    /// Takes the held events, in order; the caller sends them when [`ready`](Self::ready).
    pub(crate) fn release(&mut self) -> impl Iterator<Item = AgentEvent> + '_ {
        self.since = None;
        self.take()
    }

    /// Takes every held event after the run's final save. A `tool_execution_end` whose result
    /// never joined the history (the run failed first) is dropped: the store does not hold
    /// that result.
    pub(crate) fn release_all(&mut self) -> impl Iterator<Item = AgentEvent> + '_ {
        self.since = None;
        self.deferred.clear();
        self.take()
    }

    fn take(&mut self) -> impl Iterator<Item = AgentEvent> + '_ {
        let Self {
            held,
            held_results,
            held_secs,
            ..
        } = self;
        let now = Instant::now();
        held.drain(..).map(move |held| {
            if let Some(at) = held.at {
                *held_results += 1;
                *held_secs += now.duration_since(at).as_secs_f64();
            }
            held.event
        })
    }

    /// Drops the held events (the run's final save failed: the store does not hold them).
    pub(crate) fn discard(&mut self) {
        self.since = None;
        self.held.clear();
        self.deferred.clear();
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
        let tool_start = AgentEvent::MessageStart { role: Role::Tool };
        assert!(gate.pass(tool_start).is_none());
        let message = |id: &str| AgentEvent::MessageEnd {
            message: Message::Tool(ToolResult::ok(id, "calculator", "42")),
            cost_usd: None,
        };
        assert!(gate.pass(message("a")).is_none());
        assert!(!gate.ready());
        signal.committed(2);
        assert!(gate.ready());
        let released: Vec<AgentEvent> = gate.release().collect();
        // The output taken out while held is back, from the call's `message_end`, and the
        // event goes out just before that result's message.
        assert!(matches!(released[0], AgentEvent::MessageStart { .. }));
        assert!(
            matches!(&released[1], AgentEvent::ToolExecutionEnd { output, .. } if output == "42"),
            "{released:?}"
        );
        assert!(matches!(
            released[2],
            AgentEvent::MessageStart { role: Role::Tool }
        ));
        assert!(matches!(released[3], AgentEvent::MessageEnd { .. }));
        assert_eq!(gate.held().0, 2);
        // Nothing held: events pass again.
        assert!(gate.pass(start()).is_some());
        assert!(gate.pass(message("b")).is_none());
    }

    #[test]
    fn a_result_that_never_joined_the_history_is_not_shown() {
        let (_signal, mut gate) = pair(0);
        assert!(gate.pass(result_end("a")).is_none());
        assert!(gate.pass(session_end()).is_none());
        // The run failed before `a`'s result was stored: only its end goes out.
        let released: Vec<AgentEvent> = gate.release_all().collect();
        assert_eq!(released.len(), 1);
        assert!(matches!(released[0], AgentEvent::SessionEnd { .. }));
    }

    fn session_end() -> AgentEvent {
        AgentEvent::SessionEnd {
            session_id: "s".into(),
            messages: Vec::new(),
            finish_reason: agent_types::StopReason::Stop,
        }
    }

    #[test]
    fn a_round_past_the_checkpoint_bound_is_not_held() {
        let (_signal, mut gate) = pair(crate::checkpoint::MAX_CHECKPOINT_RESULT_BYTES);
        assert!(gate.pass(result_end("a")).is_some());
        // Nor the run's end: a session this large is not checkpointed, and holding its
        // `session_end` (all the run's messages) through the final save would add its size
        // to the peak memory.
        assert!(gate.pass(session_end()).is_some());
    }

    #[test]
    fn the_runs_end_waits_for_the_final_save() {
        let (_signal, mut gate) = pair(0);
        assert!(gate.pass(session_end()).is_none());
        assert!(!gate.ready());
        assert_eq!(gate.release_all().count(), 1);
    }
}
