//! [`MemoryAppender`], an appender that keeps turns in memory.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use agent_types::Message;

use crate::appender::{AppendFuture, ConversationAppender};
use crate::turn::{StoredTurn, Turn};

/// Keeps one conversation's turns in memory, for tests and for callers that only want the
/// turns back after the run.
///
/// Cloning is cheap and every clone shares the same turns: hand one clone to the loop (as an
/// `Arc<dyn ConversationAppender>`) and read the turns back through another. Nothing survives
/// the process.
#[derive(Debug, Clone, Default)]
pub struct MemoryAppender {
    turns: Arc<Mutex<Vec<StoredTurn>>>,
}

impl MemoryAppender {
    /// An empty conversation.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every turn appended so far, in order, with sequence numbers from 0.
    pub fn turns(&self) -> Vec<StoredTurn> {
        self.lock().clone()
    }

    /// The messages of every turn appended so far, in order.
    pub fn messages(&self) -> Vec<Message> {
        self.lock()
            .iter()
            .map(|turn| turn.message.clone())
            .collect()
    }

    /// How many turns were appended.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// `true` when nothing was appended yet.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<StoredTurn>> {
        // A push cannot leave the vector half-updated, so a poisoned lock still holds
        // consistent data.
        self.turns.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ConversationAppender for MemoryAppender {
    fn append<'a>(&'a self, turn: &'a Turn) -> AppendFuture<'a> {
        Box::pin(async move {
            let mut turns = self.lock();
            let seq = turns.len() as u64;
            turns.push(StoredTurn::new(seq, turn.clone()));
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use agent_types::{AssistantMessage, ToolResult};

    use super::*;

    /// The memory appender never awaits anything, so one poll finishes it; no runtime needed.
    fn ready<T>(future: impl Future<Output = T>) -> T {
        let mut future = pin!(future);
        match future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(value) => value,
            Poll::Pending => panic!("the memory appender should never be pending"),
        }
    }

    #[test]
    fn clones_share_turns_and_number_them_in_order() {
        let memory = MemoryAppender::new();
        assert!(memory.is_empty());
        let shared: Arc<dyn ConversationAppender> = Arc::new(memory.clone());

        let first = Turn::at(AssistantMessage::text("calling"), 1);
        let second = Turn::at(ToolResult::ok("call_1", "get_weather", "{}"), 2);
        ready(shared.append(&first)).unwrap();
        ready(shared.append(&second)).unwrap();

        assert_eq!(memory.len(), 2);
        let turns = memory.turns();
        assert_eq!(turns[0], StoredTurn::new(0, first.clone()));
        assert_eq!(turns[1], StoredTurn::new(1, second.clone()));
        assert_eq!(memory.messages(), vec![first.message, second.message]);
    }
}
