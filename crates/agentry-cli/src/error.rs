//! The CLI's one error type: everything that stops a command before or around a run.

use std::path::PathBuf;

use crate::exit::Exit;

/// Why a command could not do its job (a run's own failure is an `AgentError`, rendered as
/// part of the run).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// A wrong flag combination or value the argument parser cannot catch.
    #[error("{0}")]
    Usage(String),
    /// `agentry.toml` cannot be read or does not parse.
    #[error("{}: {message}", path.display())]
    Config {
        /// The configuration file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The provider needs an API key and none is set.
    #[error(
        "no API key for {provider}: set {variable} (or pass --base-url for a server that needs \
         none). To see agentry work without a key, run `agentry demo`."
    )]
    MissingKey {
        /// The provider as named on the command line.
        provider: &'static str,
        /// The environment variable to set.
        variable: &'static str,
    },
    /// The session file or its state cannot be read or written.
    #[error("session {}: {message}", path.display())]
    Session {
        /// The session file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A file the user has not trusted (a project's `agentry.toml`, a state file agentry did
    /// not write) would send a key elsewhere or widen tool access; the message lists what was
    /// refused and how to trust the file.
    #[error("{0}")]
    Untrusted(String),
    /// A tool could not be set up (e.g. `--root` is not a directory).
    #[error("{0}")]
    Tools(String),
    /// Anything else that stops the command: the runtime, the replay server, stdout.
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// The exit status this error ends the process with.
    pub(crate) fn exit(&self) -> Exit {
        match self {
            Self::Usage(_)
            | Self::Config { .. }
            | Self::MissingKey { .. }
            | Self::Untrusted(_)
            | Self::Tools(_) => Exit::Usage,
            Self::Session { .. } | Self::Other(_) => Exit::Error,
        }
    }

    /// A session-file error at `path`.
    pub(crate) fn session(path: impl Into<PathBuf>, message: impl ToString) -> Self {
        Self::Session {
            path: path.into(),
            message: message.to_string(),
        }
    }
}
