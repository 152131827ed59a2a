//! The conversation id newtype.

use std::fmt;
use std::sync::Arc;

use agent_types::SessionId;
use serde::{Deserialize, Serialize};

/// Names one conversation inside a store that holds many (the SQLite store).
///
/// Any string works; agentry never interprets it. Cheap to clone (`Arc<str>`), serializes as a
/// plain string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ConversationId(Arc<str>);

impl ConversationId {
    /// Wraps an id.
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        Self(id.into())
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ConversationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for ConversationId {
    fn from(id: &str) -> Self {
        Self::new(id)
    }
}

impl From<String> for ConversationId {
    fn from(id: String) -> Self {
        Self::new(id)
    }
}

/// A suspended-and-resumed session is one conversation: storing it under its session id keeps
/// every part of it together.
impl From<&SessionId> for ConversationId {
    fn from(session: &SessionId) -> Self {
        Self::new(session.as_str())
    }
}

impl AsRef<str> for ConversationId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_as_a_plain_string_and_displays_verbatim() {
        let id = ConversationId::from("conv-1");
        assert_eq!(serde_json::to_string(&id).unwrap(), r#""conv-1""#);
        let back: ConversationId = serde_json::from_str(r#""conv-1""#).unwrap();
        assert_eq!(back, id);
        assert_eq!(id.to_string(), "conv-1");
        assert_eq!(
            ConversationId::from(String::from("conv-1")).as_str(),
            "conv-1"
        );
    }

    #[test]
    fn a_session_id_names_the_same_conversation() {
        let session = SessionId::from("sess-9");
        assert_eq!(ConversationId::from(&session).as_str(), "sess-9");
    }
}
