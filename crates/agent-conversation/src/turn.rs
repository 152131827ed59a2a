//! [`Turn`], what the loop hands an appender, and [`StoredTurn`], what a store gives back.

use std::time::{SystemTime, UNIX_EPOCH};

use agent_types::Message;
use serde::{Deserialize, Serialize};

/// One message the loop produced: an assistant message (with its tool calls) or a tool result.
///
/// The caller's own input (system prompt, user messages) is never passed as a turn; see
/// [`ConversationAppender`](crate::ConversationAppender).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Turn {
    /// When the loop produced the message, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// The message itself.
    pub message: Message,
}

impl Turn {
    /// A turn stamped with the current wall-clock time.
    pub fn new(message: impl Into<Message>) -> Self {
        Self::at(message, now_unix_ms())
    }

    /// A turn stamped with the given time (milliseconds since the Unix epoch). Useful for
    /// replays and deterministic tests.
    pub fn at(message: impl Into<Message>, at_unix_ms: u64) -> Self {
        Self {
            at_unix_ms,
            message: message.into(),
        }
    }
}

/// A turn as a store holds it: the [`Turn`] plus the sequence number the store gave it.
///
/// Sequence numbers count from 0 within one conversation, without gaps, in the order the turns
/// were appended. The JSON form (one JSONL line) is
/// `{"seq":0,"at_unix_ms":1700000000000,"message":{"role":"assistant",...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StoredTurn {
    /// The position of the turn in its conversation, from 0.
    pub seq: u64,
    /// When the loop produced the message, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// The message itself.
    pub message: Message,
}

impl StoredTurn {
    /// Gives `turn` the sequence number `seq`.
    pub fn new(seq: u64, turn: Turn) -> Self {
        Self {
            seq,
            at_unix_ms: turn.at_unix_ms,
            message: turn.message,
        }
    }

    /// The turn without its sequence number.
    pub fn into_turn(self) -> Turn {
        Turn {
            at_unix_ms: self.at_unix_ms,
            message: self.message,
        }
    }
}

/// Milliseconds since the Unix epoch; 0 if the clock is set before 1970 (a timestamp is metadata,
/// not worth failing an append over).
fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

#[cfg(test)]
mod tests {
    use agent_types::AssistantMessage;

    use super::*;

    #[test]
    fn new_stamps_the_current_time() {
        let before = now_unix_ms();
        let turn = Turn::new(AssistantMessage::text("hi"));
        let after = now_unix_ms();
        // 2020-01-01 in unix millis: the stamp is a real clock reading, not 0.
        assert!(turn.at_unix_ms >= 1_577_836_800_000);
        assert!((before..=after).contains(&turn.at_unix_ms));
    }

    #[test]
    fn stored_turn_round_trips_through_turn() {
        let turn = Turn::at(AssistantMessage::text("hi"), 42);
        let stored = StoredTurn::new(7, turn.clone());
        assert_eq!(stored.seq, 7);
        assert_eq!(stored.at_unix_ms, 42);
        assert_eq!(stored.into_turn(), turn);
    }

    #[test]
    fn json_uses_snake_case_field_names() {
        let stored = StoredTurn::new(3, Turn::at(AssistantMessage::text("hi"), 5));
        let value = serde_json::to_value(&stored).unwrap();
        assert_eq!(value["seq"], 3);
        assert_eq!(value["at_unix_ms"], 5);
        assert_eq!(value["message"]["role"], "assistant");
        let back: StoredTurn = serde_json::from_value(value).unwrap();
        assert_eq!(back, stored);
    }
}
