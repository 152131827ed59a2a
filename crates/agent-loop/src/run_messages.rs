//! The run's messages in its `session_end` event without a third copy of them.
//!
//! For a session the caller keeps, the outcome's messages are a copy of the tail of the
//! session's history, and `session_end` carries them too. Cloning them for the event held
//! three copies of a run's messages at once (history, outcome, event) while the consumer
//! serialized the event: a run of 300 tool results of 64 KiB held 58 MiB for 19 MiB of
//! results. Instead the event takes the outcome's copy, and the outcome gets a new one from
//! the history once the event went out (by then its consumer has handled it), so at most two
//! copies are ever held.

use agent_types::{AgentError, Message};

use crate::result::GenerateResult;
use crate::run::Scope;
use crate::session::Session;

/// The messages of `outcome` that `session_end` carries. Moved out when the session's history
/// ends with them (then `Some(count)` says how many [`restore`] copies back), else cloned.
pub(crate) fn lend(
    session: &Session,
    scope: Scope,
    outcome: &mut Result<GenerateResult, AgentError>,
) -> (Vec<Message>, Option<usize>) {
    let messages = match outcome {
        Ok(result) => &mut result.messages,
        Err(error) => &mut error.partial_messages,
    };
    // A one-off run's messages were moved out of its history: there is nothing to copy back.
    if scope == Scope::Session && !messages.is_empty() && session.messages.ends_with(messages) {
        let count = messages.len();
        (std::mem::take(messages), Some(count))
    } else {
        (messages.clone(), None)
    }
}

/// Gives `outcome` back the messages [`lend`] moved into the event, copied from the history.
pub(crate) fn restore(
    session: &Session,
    retaken: Option<usize>,
    outcome: &mut Result<GenerateResult, AgentError>,
) {
    let Some(count) = retaken else { return };
    let from = session.messages.len().saturating_sub(count);
    let tail = session.messages.get(from..).unwrap_or_default().to_vec();
    match outcome {
        Ok(result) => result.messages = tail,
        Err(error) => error.partial_messages = tail,
    }
}

#[cfg(test)]
mod tests {
    use agent_types::{AgentError, AssistantMessage, ErrorKind, UserMessage};

    use super::{lend, restore};
    use crate::run::Scope;
    use crate::session::Session;

    fn failed(
        messages: Vec<agent_types::Message>,
    ) -> Result<crate::result::GenerateResult, AgentError> {
        let mut error = AgentError::new(ErrorKind::Aborted, "stopped");
        error.partial_messages = messages;
        Err(error)
    }

    fn partial(
        outcome: &Result<crate::result::GenerateResult, AgentError>,
    ) -> &[agent_types::Message] {
        outcome
            .as_ref()
            .err()
            .map_or(&[], |error| &error.partial_messages)
    }

    #[test]
    fn the_event_takes_the_outcomes_copy_and_the_outcome_gets_it_back() {
        let session = Session::with_id("s", "m")
            .with_message(UserMessage::text("hi"))
            .with_message(AssistantMessage::text("hello"));
        let tail = session.messages[1..].to_vec();
        let mut outcome = failed(tail.clone());
        let (event, retaken) = lend(&session, Scope::Session, &mut outcome);
        assert_eq!(event, tail);
        // Moved, not copied: while the event is out, the outcome holds nothing.
        assert!(partial(&outcome).is_empty());
        assert_eq!(retaken, Some(1));
        restore(&session, retaken, &mut outcome);
        assert_eq!(partial(&outcome), &tail[..]);
    }

    #[test]
    fn messages_the_history_does_not_end_with_are_copied() {
        let session = Session::with_id("s", "m").with_message(UserMessage::text("hi"));
        let other = vec![AssistantMessage::text("not in the history").into()];
        for scope in [Scope::Session, Scope::OneOff] {
            let mut outcome = failed(other.clone());
            let (event, retaken) = lend(&session, scope, &mut outcome);
            assert_eq!((event, retaken), (other.clone(), None));
            restore(&session, retaken, &mut outcome);
            assert_eq!(partial(&outcome), &other[..]);
        }
    }
}
