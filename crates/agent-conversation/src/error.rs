//! The crate's one error type.

use std::io;
use std::path::PathBuf;

#[cfg(feature = "sqlite")]
use crate::id::ConversationId;

/// Everything that can go wrong while storing or loading a conversation.
///
/// The loop treats any of these as the end of the run (an appender failure is terminal); the
/// variants and predicates are for callers who want to say more, e.g. "the disk is full" rather
/// than "storage failed".
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The device holding the store has no space left (`ENOSPC`). Nothing was acknowledged: the
    /// turn being written is not stored.
    #[error("storage is full: no space left on the device while trying to {action} {}", path.display())]
    StorageFull {
        /// What was being done, e.g. `"append a turn to"`.
        action: &'static str,
        /// The file being written.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// Any other I/O failure on a store's file.
    #[error("could not {action} {}", path.display())]
    Io {
        /// What was being done, e.g. `"open"`.
        action: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// A JSONL line that is not the last one does not hold a turn. (A bad *last* line is a torn
    /// tail from a crash, reported as a `TornTail` instead.)
    #[error("{} line {line} is corrupt: {reason}", path.display())]
    CorruptLine {
        /// The JSONL file.
        path: PathBuf,
        /// The line number, counting from 1.
        line: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A turn could not be turned into JSON (a message holding a non-string map key, say).
    #[error("could not serialize the turn as JSON")]
    Serialize(#[source] serde_json::Error),
    /// SQLite reported an error.
    #[cfg(feature = "sqlite")]
    #[error("SQLite error")]
    Sqlite(#[from] rusqlite::Error),
    /// A row of the SQLite store does not hold a turn.
    #[cfg(feature = "sqlite")]
    #[error("stored turn {seq} of conversation `{conversation}` is corrupt: {reason}")]
    CorruptRow {
        /// The conversation.
        conversation: ConversationId,
        /// The turn's sequence number.
        seq: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The SQLite file was written by a newer version of this crate (its `user_version` is
    /// higher than the schema this version knows).
    #[error("unsupported store schema version {found}; this version reads up to {supported}")]
    UnsupportedSchema {
        /// The file's `user_version`.
        found: i64,
        /// The newest schema version this crate knows.
        supported: i64,
    },
    /// The blocking task that did the storage work panicked or was cancelled because the runtime
    /// is shutting down.
    #[error("the storage task did not finish: {0}")]
    TaskFailed(String),
}

impl Error {
    /// `true` when the device is out of space. Covers [`Error::StorageFull`] and SQLite's
    /// `SQLITE_FULL`.
    pub fn is_storage_full(&self) -> bool {
        match self {
            Self::StorageFull { .. } => true,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(error) => error.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull),
            _ => false,
        }
    }

    /// `true` when stored data could not be read back as turns.
    pub fn is_corrupt(&self) -> bool {
        match self {
            Self::CorruptLine { .. } => true,
            #[cfg(feature = "sqlite")]
            Self::CorruptRow { .. } => true,
            _ => false,
        }
    }

    /// Classifies an I/O error on `path`: out-of-space errors become [`Error::StorageFull`].
    #[cfg_attr(not(feature = "jsonl"), allow(dead_code))]
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        let path = path.into();
        if is_out_of_space(&source) {
            Self::StorageFull {
                action,
                path,
                source,
            }
        } else {
            Self::Io {
                action,
                path,
                source,
            }
        }
    }
}

/// `ENOSPC` on Unix, `ERROR_DISK_FULL` / `ERROR_HANDLE_DISK_FULL` on Windows: std maps all of
/// them to `StorageFull`. The raw check covers errors built by hand from the OS code.
fn is_out_of_space(error: &io::Error) -> bool {
    const ENOSPC: i32 = 28;
    error.kind() == io::ErrorKind::StorageFull
        || (cfg!(unix) && error.raw_os_error() == Some(ENOSPC))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_space_io_errors_become_storage_full() {
        let error = Error::io(
            "append a turn to",
            "/tmp/x.jsonl",
            io::Error::from(io::ErrorKind::StorageFull),
        );
        assert!(error.is_storage_full());
        assert!(error.to_string().starts_with("storage is full"), "{error}");
        assert!(error.to_string().contains("/tmp/x.jsonl"), "{error}");

        let other = Error::io(
            "open",
            "/tmp/x.jsonl",
            io::Error::from(io::ErrorKind::NotFound),
        );
        assert!(!other.is_storage_full());
        assert!(matches!(other, Error::Io { action: "open", .. }));
    }

    #[cfg(unix)]
    #[test]
    fn raw_enospc_is_storage_full() {
        let error = Error::io("write", "/x", io::Error::from_raw_os_error(28));
        assert!(error.is_storage_full());
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn sqlite_full_is_storage_full() {
        let full = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            None,
        );
        assert!(Error::from(full).is_storage_full());
        let busy = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        );
        assert!(!Error::from(busy).is_storage_full());
    }
}
