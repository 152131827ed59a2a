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
