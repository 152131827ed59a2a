//! `--session FILE`: a session kept on disk between commands.
//!
//! Two files, so that every turn is durable the moment it completes:
//!
//! - `FILE` is the conversation log, written by the conversation appender after every turn
//!   (the user's message, each assistant turn, each tool result): JSONL, or SQLite when the name
//!   ends in `.db`, `.sqlite` or `.sqlite3`. It is the history; a run killed mid-way leaves
//!   every completed turn in it.
//! - `FILE.state.json` is the rest of the session: provider, model, system prompt, tools,
//!   status, pending remote calls and the budgets a suspended run has used. It is replaced
//!   atomically (write, sync, rename) before and after each run.
//!
//! Both are created readable by the user alone (0600). Each state file written is recorded in
//! the user's trust store ([`crate::trust`]) with its hash, so that a state file agentry did not
//! write (planted beside a log, or edited since) cannot route a key or widen tool access.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_conversation::{
    ConversationAppender, ConversationId, JsonlAppender, SqliteStore, load_jsonl,
};
use agent_loop::Session;
use agent_types::Message;
use serde::{Deserialize, Serialize};

use agent_backends::Api;

use crate::args::BuiltinTool;
use crate::error::Error;
use crate::trust::{self, Kind, Store, Verdict};

/// The state file's format version.
const STATE_FORMAT: u32 = 1;

/// A session file and its state file.
#[derive(Debug, Clone)]
pub(crate) struct SessionFile {
    path: PathBuf,
    store: Backing,
    /// Where the state files written are recorded (the user's trust store).
    trust: Option<Store>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backing {
    Jsonl,
    Sqlite,
}

/// What the state file holds: the session without its messages, and how to reach its model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SessionState {
    /// The state file's format; anything but [`STATE_FORMAT`] is refused.
    agentry_session_state: u32,
    /// The provider API the session talks to.
    pub(crate) provider: Api,
    /// The provider's base URL, when not the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) base_url: Option<String>,
    /// The built-in tools the session offers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) tools: Vec<BuiltinTool>,
    /// The directory `read_file` may read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) root: Option<PathBuf>,
    /// Tools whose calls wait for approval (`--require-approval`, kept for later runs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) require_approval: Vec<String>,
    /// The session; its messages live in the log, not here.
    pub(crate) session: Session,
    /// Whether the state file read was the one agentry last wrote there (never stored).
    #[serde(skip)]
    pub(crate) verdict: Verdict,
}

impl SessionState {
    /// A state for a new session.
    pub(crate) fn new(provider: Api, session: Session) -> Self {
        Self {
            agentry_session_state: STATE_FORMAT,
            provider,
            base_url: None,
            tools: Vec::new(),
            root: None,
            require_approval: Vec::new(),
            session,
            // A state made now is the user's own.
            verdict: Verdict::Trusted,
        }
    }
}

impl SessionFile {
    /// The session at `path`; the store follows the file name.
    pub(crate) fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let sqlite = path
            .extension()
            .and_then(|extension| extension.to_str())
            .is_some_and(|extension| matches!(extension, "db" | "sqlite" | "sqlite3"));
        Self {
            path,
            store: if sqlite {
                Backing::Sqlite
            } else {
                Backing::Jsonl
            },
            trust: Store::user(),
        }
    }

    /// The same session, its state files recorded in (and checked against) `trust` instead
    /// of the user's store.
    #[cfg(test)]
    pub(crate) fn with_trust(mut self, trust: Option<Store>) -> Self {
        self.trust = trust;
        self
    }

    /// The conversation log.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The state file next to the log.
    pub(crate) fn state_path(&self) -> PathBuf {
        let mut name = self.path.clone().into_os_string();
        name.push(".state.json");
        PathBuf::from(name)
    }

    /// The stored session with its history read back from the log, or `None` when neither
    /// file exists yet.
    pub(crate) async fn load(&self) -> Result<Option<SessionState>, Error> {
        let state_path = self.state_path();
        let bytes = match tokio::fs::read(&state_path).await {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                if self.has_log().await {
                    return Err(Error::session(
                        &self.path,
                        format!(
                            "the file exists but its state file {} does not; it was not written \
                             by `agentry run --session`, or the state was deleted",
                            state_path.display()
                        ),
                    ));
                }
                return Ok(None);
            }
            Err(error) => {
                return Err(Error::session(
                    &state_path,
                    format!("cannot read it: {error}"),
                ));
            }
        };
        let mut state: SessionState = serde_json::from_slice(&bytes).map_err(|error| {
            Error::session(&state_path, format!("not a session state file: {error}"))
        })?;
        // The verdict is for exactly the bytes just parsed.
        state.verdict = trust::check(self.trust.as_ref(), &state_path, &bytes, Kind::State)?;
        if let Some(url) = &state.base_url {
            crate::endpoint::check_base_url(url)
                .map_err(|message| Error::session(&state_path, format!("base_url: {message}")))?;
        }
        if state.agentry_session_state != STATE_FORMAT {
            return Err(Error::session(
                &state_path,
                format!(
                    "state format {} is not supported (this agentry reads format {STATE_FORMAT})",
                    state.agentry_session_state
                ),
            ));
        }
        state.session.messages = self.history(&state.session).await?;
        Ok(Some(state))
    }

    /// Whether the log file exists and holds anything.
    async fn has_log(&self) -> bool {
        tokio::fs::metadata(&self.path)
            .await
            .is_ok_and(|metadata| metadata.len() > 0)
    }

    /// The messages in the log, in order.
    async fn history(&self, session: &Session) -> Result<Vec<Message>, Error> {
        let turns = match self.store {
            Backing::Jsonl => {
                if !self.has_log().await {
                    return Ok(Vec::new());
                }
                load_jsonl(&self.path)
                    .await
                    .map_err(|error| Error::session(&self.path, describe(&error)))?
                    .turns
            }
            Backing::Sqlite => self
                .sqlite()
                .await?
                .load(&ConversationId::from(&session.id))
                .await
                .map_err(|error| Error::session(&self.path, describe(&error)))?,
        };
        Ok(turns.into_iter().map(|turn| turn.message).collect())
    }

    async fn sqlite(&self) -> Result<SqliteStore, Error> {
        SqliteStore::open(&self.path)
            .await
            .map_err(|error| Error::session(&self.path, describe(&error)))
    }

    /// The appender that writes `session`'s turns to the log.
    pub(crate) async fn appender(
        &self,
        session: &Session,
    ) -> Result<Arc<dyn ConversationAppender>, Error> {
        // Created private before the store opens it; SQLite gives its journal and WAL files
        // the database file's permissions.
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || match trust::create_private(&path) {
            Err(error) if error.kind() != std::io::ErrorKind::AlreadyExists => Err(error),
            _ => Ok(()),
        })
        .await
        .map_err(|error| Error::session(&self.path, error))?
        .map_err(|error| Error::session(&self.path, format!("cannot create it: {error}")))?;
        Ok(match self.store {
            Backing::Jsonl => Arc::new(
                JsonlAppender::open(&self.path)
                    .await
                    .map_err(|error| Error::session(&self.path, describe(&error)))?,
            ),
            Backing::Sqlite => Arc::new(
                self.sqlite()
                    .await?
                    .appender(ConversationId::from(&session.id)),
            ),
        })
    }

    /// Replaces the state file with `state` (its messages are not written: the log has them).
    pub(crate) async fn save(&self, state: &mut SessionState) -> Result<(), Error> {
        // The history is moved out for the write and back in after, never copied.
        let messages = std::mem::take(&mut state.session.messages);
        let json = serde_json::to_vec_pretty(&*state);
        state.session.messages = messages;
        let mut json = json.map_err(|error| Error::session(&self.path, error))?;
        json.push(b'\n');
        let path = self.state_path();
        let store = self.trust.clone();
        tokio::task::spawn_blocking(move || {
            trust::write_private_atomically(&path, &json)
                .map_err(|error| format!("cannot write it: {error}"))?;
            // Recorded as ours, so the next command may honour its base URL and tools.
            trust::record(store.as_ref(), &path, &json, Kind::State)
                .map_err(|error| error.to_string())
        })
        .await
        .map_err(|error| Error::session(&self.path, error))?
        .map(|_| ())
        .map_err(|message| Error::session(self.state_path(), message))
    }
}

/// An error with its causes, on one line.
fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use agent_conversation::Turn;
    use agent_types::AssistantMessage;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn the_store_follows_the_extension() {
        assert_eq!(SessionFile::new("a.jsonl").store, Backing::Jsonl);
        assert_eq!(SessionFile::new("chat").store, Backing::Jsonl);
        assert_eq!(SessionFile::new("a.db").store, Backing::Sqlite);
        assert_eq!(SessionFile::new("x/a.sqlite3").store, Backing::Sqlite);
        assert_eq!(
            SessionFile::new("x/a.jsonl").state_path(),
            PathBuf::from("x/a.jsonl.state.json")
        );
    }

    #[test]
    fn state_and_log_round_trip_in_both_stores() {
        runtime().block_on(async {
            let dir = tempfile::tempdir().unwrap();
            for name in ["s.jsonl", "s.db"] {
                let store = Store::in_dir(&dir.path().join("config"));
                let file = SessionFile::new(dir.path().join(name)).with_trust(Some(store));
                assert!(file.load().await.unwrap().is_none());
                let session = Session::new("m").with_system("be brief");
                let mut state = SessionState::new(Api::Anthropic, session);
                state.tools = vec![BuiltinTool::Clock];
                file.save(&mut state).await.unwrap();
                let appender = file.appender(&state.session).await.unwrap();
                appender
                    .append(&Turn::new(Message::user("hi")))
                    .await
                    .unwrap();
                appender
                    .append(&Turn::new(AssistantMessage::text("hello")))
                    .await
                    .unwrap();

                let loaded = file.load().await.unwrap().unwrap();
                assert_eq!(loaded.session.messages.len(), 2, "{name}");
                assert_eq!(loaded.session.system.as_deref(), Some("be brief"));
                assert_eq!(loaded.tools, vec![BuiltinTool::Clock]);
                // The state just written is the one recorded; another store never saw it.
                assert_eq!(loaded.verdict, Verdict::Trusted, "{name}");
                let elsewhere = file.clone().with_trust(None).load().await.unwrap().unwrap();
                assert_eq!(elsewhere.verdict, Verdict::Unknown, "{name}");
                let text = std::fs::read_to_string(file.state_path()).unwrap();
                assert!(
                    !text.contains("hello"),
                    "messages stay out of the state file"
                );
            }
        });
    }

    #[test]
    fn a_log_without_state_and_a_foreign_state_are_refused() {
        runtime().block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let file = SessionFile::new(dir.path().join("s.jsonl")).with_trust(None);
            std::fs::write(file.path(), "{}\n").unwrap();
            let error = file.load().await.unwrap_err().to_string();
            assert!(error.contains("state file"), "{error}");

            std::fs::write(file.state_path(), "{\"agentry_session_state\": 9}").unwrap();
            let error = file.load().await.unwrap_err().to_string();
            assert!(error.contains("not a session state file"), "{error}");
        });
    }
}
