//! [`Provider`]: the adapters by name, for configuration files, command lines and replay.

use std::fmt;
use std::str::FromStr;

use agent_types::{Backend, BackendError, BackendErrorKind, ModelRequest, StreamEvent};

use crate::error::Error;
use crate::http::HttpOptions;

/// A provider's wire format, by the name used on command lines and in configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// OpenAI Chat Completions, and every OpenAI-compatible server (`openai-chat`).
    OpenAiChat,
    /// The OpenAI Responses API (`openai-responses`).
    OpenAiResponses,
    /// Anthropic Messages (`anthropic`).
    Anthropic,
    /// Google Gemini `generateContent` (`gemini`).
    Gemini,
    /// Ollama's native `/api/chat` (`ollama`).
    Ollama,
    /// AWS Bedrock Converse / ConverseStream (`bedrock`).
    Bedrock,
}

impl Provider {
    /// Every provider, in documentation order.
    pub const ALL: [Provider; 6] = [
        Self::OpenAiChat,
        Self::OpenAiResponses,
        Self::Anthropic,
        Self::Gemini,
        Self::Ollama,
        Self::Bedrock,
    ];

    /// The provider's name (`openai-chat`, `openai-responses`, `anthropic`, `gemini`, `ollama`).
    pub fn name(self) -> &'static str {
        match self {
            Self::OpenAiChat => "openai-chat",
            Self::OpenAiResponses => "openai-responses",
            Self::Anthropic => "anthropic",
            Self::Gemini => "gemini",
            Self::Ollama => "ollama",
            Self::Bedrock => "bedrock",
        }
    }

    /// The cargo feature of agent-backends that compiles the adapter.
    pub fn feature(self) -> &'static str {
        match self {
            Self::OpenAiChat => "openai",
            Self::OpenAiResponses => "openai-responses",
            Self::Anthropic => "anthropic",
            Self::Gemini => "gemini",
            Self::Ollama => "ollama",
            Self::Bedrock => "bedrock",
        }
    }

    /// The adapter for this provider at `base_url`, with an optional API key and HTTP settings.
    ///
    /// # Errors
    ///
    /// [`Error::NotCompiled`] when the adapter's feature is off in this build.
    #[allow(unused_variables)]
    pub fn backend(
        self,
        base_url: &str,
        api_key: Option<String>,
        http: HttpOptions,
    ) -> Result<Box<dyn Backend>, Error> {
        let key = api_key.unwrap_or_default();
        match self {
            #[cfg(feature = "openai")]
            Self::OpenAiChat => Ok(Box::new(
                crate::openai_chat::OpenAiChat::new(key)
                    .with_base_url(base_url)
                    .with_http(http),
            )),
            #[cfg(feature = "openai-responses")]
            Self::OpenAiResponses => Ok(Box::new(
                crate::openai_responses::OpenAiResponses::new(key)
                    .with_base_url(base_url)
                    .with_http(http),
            )),
            #[cfg(feature = "anthropic")]
            Self::Anthropic => Ok(Box::new(
                crate::anthropic::Anthropic::new(key)
                    .with_base_url(base_url)
                    .with_http(http),
            )),
            #[cfg(feature = "gemini")]
            Self::Gemini => Ok(Box::new(
                crate::gemini::Gemini::new(key)
                    .with_base_url(base_url)
                    .with_http(http),
            )),
            #[cfg(feature = "ollama")]
            Self::Ollama => Ok(Box::new(
                crate::ollama::Ollama::new()
                    .with_base_url(base_url)
                    .with_http(http),
            )),
            // The region comes from the URL (`bedrock-runtime.<region>.amazonaws.com`), else
            // AWS_REGION; a key is a Bedrock API key, else SigV4 from the credential chain.
            #[cfg(feature = "bedrock")]
            Self::Bedrock => {
                let region = crate::bedrock::region_of(base_url)
                    .map(str::to_owned)
                    .or_else(crate::bedrock::region_from_env)
                    .unwrap_or_else(|| "us-east-1".to_owned());
                let backend = crate::bedrock::Bedrock::new(region)
                    .with_base_url(base_url)
                    .with_http(http);
                Ok(Box::new(if key.is_empty() {
                    backend
                } else {
                    backend
                        .with_api_key(&key)
                        .map_err(|error| Error::InvalidHeader(error.message))?
                }))
            }
            #[allow(unreachable_patterns)]
            other => Err(Error::NotCompiled {
                provider: other.name(),
                feature: other.feature(),
            }),
        }
    }
}

impl Provider {
    /// See [`crate::replay::decode`].
    #[cfg_attr(not(feature = "replay"), allow(dead_code))]
    #[allow(unused_variables)]
    pub(crate) fn decode(
        self,
        request: &ModelRequest,
        content_type: Option<&str>,
        body: &[u8],
        chunk_size: usize,
    ) -> Result<Vec<StreamEvent>, BackendError> {
        use crate::http::driver::decode_all;
        match self {
            #[cfg(feature = "openai")]
            Self::OpenAiChat => decode_all(
                &crate::openai_chat::OpenAiChat::new(""),
                request,
                content_type,
                body,
                chunk_size,
            ),
            #[cfg(feature = "openai-responses")]
            Self::OpenAiResponses => decode_all(
                &crate::openai_responses::OpenAiResponses::new(""),
                request,
                content_type,
                body,
                chunk_size,
            ),
            #[cfg(feature = "anthropic")]
            Self::Anthropic => decode_all(
                &crate::anthropic::Anthropic::new(""),
                request,
                content_type,
                body,
                chunk_size,
            ),
            #[cfg(feature = "gemini")]
            Self::Gemini => decode_all(
                &crate::gemini::Gemini::new(""),
                request,
                content_type,
                body,
                chunk_size,
            ),
            #[cfg(feature = "ollama")]
            Self::Ollama => decode_all(
                &crate::ollama::Ollama::new(),
                request,
                content_type,
                body,
                chunk_size,
            ),
            #[cfg(feature = "bedrock")]
            Self::Bedrock => decode_all(
                &crate::bedrock::Bedrock::new("us-east-1").with_auth(std::sync::Arc::new(
                    crate::bedrock::auth::BearerToken::new("decode")?,
                )),
                request,
                content_type,
                body,
                chunk_size,
            ),
            #[allow(unreachable_patterns)]
            other => Err(BackendError::new(
                BackendErrorKind::Unsupported,
                Error::NotCompiled {
                    provider: other.name(),
                    feature: other.feature(),
                }
                .to_string(),
            )),
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Provider {
    type Err = Error;

    fn from_str(name: &str) -> Result<Self, Error> {
        Self::ALL
            .into_iter()
            .find(|provider| provider.name() == name)
            .ok_or_else(|| Error::UnknownProvider(name.to_owned()))
    }
}
