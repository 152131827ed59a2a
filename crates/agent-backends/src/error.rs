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
        "unknown provider `{0}`; expected one of openai-chat, openai-responses, anthropic, gemini, ollama, bedrock"
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
    /// An API name that is not one of the known APIs.
    #[error(
        "unknown provider API `{0}`; expected one of openai, openai-responses, anthropic, gemini, ollama, openai-compatible, vertex-gemini, vertex-anthropic, azure-openai, azure-openai-responses, bedrock"
    )]
    UnknownApi(String),
    /// A hosted API needs a key and none was given or found in the environment.
    #[error("no API key for {api}: set {variable}")]
    MissingKey {
        /// The API.
        api: &'static str,
        /// The environment variable to set.
        variable: &'static str,
    },
    /// A cloud API's credentials (or its project, region, endpoint) were not found or cannot
    /// be used; the message names what to set.
    #[error("no usable credentials for {api}: {message}")]
    MissingCredentials {
        /// The API or cloud (`vertex-gemini`, `azure-openai`, `Google Cloud`…).
        api: &'static str,
        /// What is missing and what to set; never a secret.
        message: String,
    },
    /// The API has no default address and none was given.
    #[error("{api} needs a base URL (e.g. http://localhost:8000/v1)")]
    MissingBaseUrl {
        /// The API.
        api: &'static str,
    },
    /// A recording could not be read or served.
    #[error("replay: {0}")]
    Replay(String),
    /// A generation setting is outside the range the provider accepts (see
    /// [`SettingsLimits`](crate::SettingsLimits)).
    #[error("`{field}` = {value} is outside what {scope} accepts: {expected}")]
    InvalidSetting {
        /// The setting, as [`GenerationSettings`](agent_types::GenerationSettings) names it
        /// (`temperature`, `max_output_tokens`, `reasoning.budget_tokens`…).
        field: &'static str,
        /// The value given.
        value: String,
        /// Whose range (`anthropic`, `openai`…).
        scope: &'static str,
        /// The accepted range.
        expected: String,
    },
}
