//! The session state file kept durable per turn, like the log.
//!
//! [`CheckpointAppender`] wraps the log's appender: once a turn is in the log, the state file
//! is replaced (temporary file, `fsync`, rename, `fsync` of the directory) with the session's
//! status `running` and the usage and cost of the model calls completed so far. A process
//! killed mid-run therefore leaves a state file that says a run was under way and what it
//! spent, next to a log holding every completed turn.
//!
//! [`recover`] is the other half, run before the next run: a round the killed process left
//! unanswered (an assistant turn whose tool calls have no results in the log) is closed in the
//! log with an error result per call saying why, so the log alone stays a valid history and
//! the calls that did complete are never run again.

use std::collections::HashSet;
use std::sync::Arc;

use agent_conversation::{AppendFuture, ConversationAppender, Turn};
use agent_loop::{Session, SessionStatus};
use agent_types::{Message, RateCard, ToolResult};
use tokio::sync::Mutex;

use crate::error::Error;
use crate::session_file::{SessionFile, SessionState};

/// What a closing result says about a call the killed run never answered.
pub(crate) const KILLED: &str = "This call was not run to completion: the agentry process \
     running it ended (killed or crashed) before its result was stored";

/// The log's appender, with the state file rewritten after each stored turn.
pub(crate) struct CheckpointAppender {
    log: Arc<dyn ConversationAppender>,
    file: SessionFile,
    /// The state as the last checkpoint wrote it, its messages left out (the log has them).
    state: Mutex<SessionState>,
    prices: RateCard,
}

impl CheckpointAppender {
    /// Checkpoints of `state` (its messages are not copied) after each turn `log` stores.
    pub(crate) fn new(
        log: Arc<dyn ConversationAppender>,
        file: SessionFile,
        state: &mut SessionState,
        prices: RateCard,
    ) -> Self {
        // The history is moved out for the copy and back in after, never copied.
        let messages = std::mem::take(&mut state.session.messages);
        let mut snapshot = state.clone();
        state.session.messages = messages;
        snapshot.session.status = SessionStatus::Running;
        Self {
            log,
            file,
            state: Mutex::new(snapshot),
            prices,
        }
    }

    /// Stores `turn` in the log, then the state it leaves.
    async fn checkpoint(&self, turn: &Turn) -> Result<(), agent_conversation::Error> {
        self.log.append(turn).await?;
        let mut state = self.state.lock().await;
        if let Message::Assistant(assistant) = &turn.message
            && let Some(usage) = &assistant.usage
        {
            let session = &mut state.session;
            session.usage += *usage;
            if let Some(cost) = self.prices.cost(&session.model, usage) {
                session.cost_usd = Some(session.cost_usd.unwrap_or(0.0) + cost);
            }
        }
        self.file
            .save(&mut state)
            .await
            .map_err(|error| agent_conversation::Error::Io {
                action: "checkpoint the session state after a turn in",
                path: self.file.state_path(),
                source: std::io::Error::other(error.to_string()),
            })
    }
}

impl ConversationAppender for CheckpointAppender {
    fn append<'a>(&'a self, turn: &'a Turn) -> AppendFuture<'a> {
        Box::pin(self.checkpoint(turn))
    }
}

/// Closes, in the log and in `session`'s history, the round a killed run left unanswered;
/// the number of calls closed. A session waiting for the caller's results or approvals is
/// left alone: its unanswered calls are pending, not dangling.
pub(crate) async fn recover(
    log: &dyn ConversationAppender,
    session: &mut Session,
) -> Result<usize, Error> {
    if matches!(
        session.status,
        SessionStatus::AwaitingToolExecution | SessionStatus::AwaitingApproval
    ) {
        return Ok(0);
    }
    let closing = dangling(&session.messages);
    let closed = closing.len();
    for result in closing {
        let message = Message::Tool(result);
        log.append(&Turn::new(message.clone()))
            .await
            .map_err(|error| {
                Error::Other(format!("cannot close the interrupted round: {error}"))
            })?;
        session.messages.push(message);
    }
    Ok(closed)
}

/// An error result for each call of the last assistant turn that has none after it.
fn dangling(messages: &[Message]) -> Vec<ToolResult> {
    let mut answered = HashSet::new();
    for message in messages.iter().rev() {
        match message {
            Message::Tool(result) => {
                answered.insert(result.tool_call_id.as_str());
            }
            Message::Assistant(assistant) => {
                return assistant
                    .tool_calls()
                    .filter(|call| !answered.contains(call.id.as_str()))
                    .map(|call| ToolResult::error(call.id.clone(), call.name.clone(), KILLED))
                    .collect();
            }
            _ => break,
        }
    }
    Vec::new()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use agent_backends::Api;
    use agent_conversation::JsonlAppender;
    use agent_types::{AssistantBlock, AssistantMessage, ToolCall, Usage};
    use serde_json::json;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    fn calls(ids: &[&str]) -> Message {
        Message::Assistant(AssistantMessage {
            content: ids
                .iter()
                .map(|id| AssistantBlock::ToolCall(ToolCall::new(*id, "clock", json!({}))))
                .collect(),
            usage: Some(Usage {
                input_tokens: Some(100),
                output_tokens: Some(10),
                ..Usage::default()
            }),
            ..AssistantMessage::default()
        })
    }

    #[test]
    fn only_the_last_rounds_unanswered_calls_are_closed() {
        let answered = Message::Tool(ToolResult::ok("a", "clock", "noon"));
        let history = vec![Message::user("hi"), calls(&["a", "b"]), answered];
        let closing = dangling(&history);
        assert_eq!(closing.len(), 1);
        assert_eq!(closing[0].tool_call_id.as_str(), "b");
        assert!(closing[0].is_error);
        let done = vec![Message::user("hi"), calls(&["a"]), Message::user("again")];
        assert!(
            dangling(&done).is_empty(),
            "a round followed by input is not the tail"
        );
    }

    #[test]
    fn each_turn_rewrites_the_state_and_recovery_closes_the_log() {
        runtime().block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let file = SessionFile::new(dir.path().join("s.jsonl")).with_trust(None);
            let mut state = SessionState::new(Api::Openai, Session::new("gpt-4.1-mini"));
            file.save(&mut state).await.unwrap();
            let log: Arc<dyn ConversationAppender> =
                Arc::new(JsonlAppender::open(file.path()).await.unwrap());
            let appender = CheckpointAppender::new(
                Arc::clone(&log),
                file.clone(),
                &mut state,
                RateCard::list_prices(),
            );
            appender
                .append(&Turn::new(Message::user("hi")))
                .await
                .unwrap();
            appender.append(&Turn::new(calls(&["a"]))).await.unwrap();

            // As a killed process leaves it: the round's call never answered.
            let mut loaded = file.load().await.unwrap().unwrap();
            assert_eq!(loaded.session.status, SessionStatus::Running);
            assert_eq!(loaded.session.usage.input_tokens, Some(100));
            assert!(loaded.session.cost_usd.unwrap() > 0.0);
            assert_eq!(loaded.session.messages.len(), 2);
            assert_eq!(recover(&*log, &mut loaded.session).await.unwrap(), 1);
            let reloaded = file.load().await.unwrap().unwrap();
            let Some(Message::Tool(result)) = reloaded.session.messages.last() else {
                panic!("{:?}", reloaded.session.messages);
            };
            assert!(result.is_error);
            assert_eq!(result.tool_call_id.as_str(), "a");
            assert_eq!(reloaded.session.messages.len(), 3);
            // Recovering again finds nothing to close.
            let mut again = reloaded;
            assert_eq!(recover(&*log, &mut again.session).await.unwrap(), 0);
        });
    }

    /// The price of durability: one log append alone against one append plus the state
    /// checkpoint (printed; timings depend on the disk, so nothing is asserted about them).
    #[test]
    fn per_turn_checkpoint_cost_is_measured() {
        runtime().block_on(async {
            const TURNS: u32 = 50;
            let dir = tempfile::tempdir().unwrap();
            let plain = SessionFile::new(dir.path().join("plain.jsonl")).with_trust(None);
            let log: Arc<dyn ConversationAppender> =
                Arc::new(JsonlAppender::open(plain.path()).await.unwrap());
            let started = std::time::Instant::now();
            for _ in 0..TURNS {
                log.append(&Turn::new(Message::user("x"))).await.unwrap();
            }
            let log_only = started.elapsed() / TURNS;

            // As a run writes it: each state file recorded in the trust store.
            let trust = crate::trust::Store::in_dir(&dir.path().join("config"));
            let file = SessionFile::new(dir.path().join("s.jsonl")).with_trust(Some(trust));
            let mut state = SessionState::new(Api::Openai, Session::new("gpt-4.1-mini"));
            let log: Arc<dyn ConversationAppender> =
                Arc::new(JsonlAppender::open(file.path()).await.unwrap());
            let appender =
                CheckpointAppender::new(log, file.clone(), &mut state, RateCard::list_prices());
            let started = std::time::Instant::now();
            for _ in 0..TURNS {
                appender
                    .append(&Turn::new(Message::user("x")))
                    .await
                    .unwrap();
            }
            let with_state = started.elapsed() / TURNS;
            println!(
                "per turn: log append {} µs; log append + state checkpoint {} µs \
                 (checkpoint alone {} µs)",
                log_only.as_micros(),
                with_state.as_micros(),
                with_state.saturating_sub(log_only).as_micros()
            );
            assert_eq!(
                file.load().await.unwrap().unwrap().session.messages.len(),
                50
            );
        });
    }
}
