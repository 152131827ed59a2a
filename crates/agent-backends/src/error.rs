//! [`Error`]: what can go wrong while setting a backend up (a failed model call is an
//! [`agent_types::BackendError`] instead).

/// A backend could not be configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A header name or value is not valid HTTP.
    #[error("invalid HTTP header `{0}`")]
    InvalidHeader(String),
    /// The HTTP client could not be built.
    #[error("the HTTP client could not be built: {0}")]
    Client(String),
    /// A provider name that is not one of the known providers.
    #[error(
        "unknown provider `{0}`; expected one of openai-chat, openai-responses, anthropic, gemini, ollama"
    )]
    UnknownProvider(String),
    /// The provider's adapter was not compiled in.
    #[error(
        "the `{provider}` adapter is not in this build; enable the `{feature}` feature of agent-backends"
    )]
    NotCompiled {
        /// The provider.
        provider: &'static str,
        /// The cargo feature that adds it.
        feature: &'static str,
    },
    /// A recording could not be read or served.
    #[error("replay: {0}")]
    Replay(String),
}
