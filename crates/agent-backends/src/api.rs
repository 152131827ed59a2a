//! [`Api`]: a provider API as a person configures it — a name, a key from the usual
//! environment variable, a default model and base URL — turned into a ready backend.
//!
//! [`Provider`](crate::Provider) is the wire format; `Api` adds what a command line or a
//! configuration file needs on top: `openai-compatible` (the Chat Completions format at a base
//! URL you give), where the key comes from, and which model to use when none is named.

use std::fmt;
use std::str::FromStr;

use agent_types::Backend;

use crate::Provider;
use crate::anthropic::Anthropic;
use crate::error::Error;
use crate::gemini::Gemini;
use crate::ollama::Ollama;
use crate::openai_chat::OpenAiChat;
use crate::openai_responses::OpenAiResponses;

/// A provider API, by the name used in configuration (`openai`, `openai-responses`,
/// `anthropic`, `gemini`, `ollama`, `openai-compatible`, `vertex-gemini`, `vertex-anthropic`,
/// `azure-openai`, `azure-openai-responses`; `openai-chat` is accepted for `openai`).
///
/// ```
/// use agent_backends::Api;
///
/// let api: Api = "anthropic".parse()?;
/// assert_eq!(api.key_variables(), ["ANTHROPIC_API_KEY"]);
/// assert_eq!(api.default_model(), Some("claude-sonnet-4-5"));
/// // With a key given explicitly, no environment is read.
/// let backend = api.connect(None, Some("sk-ant-test".into()))?;
/// assert!(backend.capabilities().tools);
/// # Ok::<(), agent_backends::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// OpenAI Chat Completions (`OPENAI_API_KEY`).
    Openai,
    /// The OpenAI Responses API (`OPENAI_API_KEY`).
    OpenaiResponses,
    /// Anthropic Messages (`ANTHROPIC_API_KEY`).
    Anthropic,
    /// Google Gemini (`GEMINI_API_KEY`, else `GOOGLE_API_KEY`).
    Gemini,
    /// Ollama's native API; no key, `OLLAMA_HOST` sets the server.
    Ollama,
    /// Any server speaking Chat Completions at a base URL you give (vLLM, llama.cpp,
    /// LM Studio, OpenRouter, Groq…); `OPENAI_API_KEY` is sent when set.
    OpenaiCompatible,
    /// Gemini on Google Vertex AI (Application Default Credentials, `GOOGLE_CLOUD_PROJECT`,
    /// `GOOGLE_CLOUD_LOCATION`; see [`crate::cloud::vertex`]).
    VertexGemini,
    /// Anthropic models on Google Vertex AI (as `vertex-gemini`).
    VertexAnthropic,
    /// Chat Completions on Azure OpenAI (`AZURE_OPENAI_ENDPOINT`, `AZURE_OPENAI_API_KEY` or
    /// Microsoft Entra ID; the model is the deployment; see [`crate::cloud::azure`]).
    AzureOpenai,
    /// The Responses API on Azure OpenAI (as `azure-openai`).
    AzureOpenaiResponses,
    /// AWS Bedrock Converse: `AWS_REGION`, and SigV4 credentials from the environment, a
    /// profile or web identity, or a Bedrock API key (`AWS_BEARER_TOKEN_BEDROCK`).
    Bedrock,
}

impl Api {
    /// Every API, in documentation order.
    pub const ALL: [Api; 11] = [
        Self::Openai,
        Self::OpenaiResponses,
        Self::Anthropic,
        Self::Gemini,
        Self::Ollama,
        Self::OpenaiCompatible,
        Self::VertexGemini,
        Self::VertexAnthropic,
        Self::AzureOpenai,
        Self::AzureOpenaiResponses,
        Self::Bedrock,
    ];

    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::OpenaiResponses => "openai-responses",
            Self::Anthropic => "anthropic",
            Self::Gemini => "gemini",
            Self::Ollama => "ollama",
            Self::OpenaiCompatible => "openai-compatible",
            Self::VertexGemini => "vertex-gemini",
            Self::VertexAnthropic => "vertex-anthropic",
            Self::AzureOpenai => "azure-openai",
            Self::AzureOpenaiResponses => "azure-openai-responses",
            Self::Bedrock => "bedrock",
        }
    }

    /// The wire format this API speaks.
    pub fn wire(self) -> Provider {
        match self {
            Self::Openai | Self::OpenaiCompatible => Provider::OpenAiChat,
            Self::OpenaiResponses => Provider::OpenAiResponses,
            Self::Anthropic => Provider::Anthropic,
            Self::Gemini => Provider::Gemini,
            Self::Ollama => Provider::Ollama,
            Self::VertexGemini => Provider::Gemini,
            Self::VertexAnthropic => Provider::Anthropic,
            Self::AzureOpenai => Provider::OpenAiChat,
            Self::AzureOpenaiResponses => Provider::OpenAiResponses,
            Self::Bedrock => Provider::Bedrock,
        }
    }

    /// The model used when none is named; `openai-compatible` has none (a compatible server
    /// serves whatever it loaded).
    pub fn default_model(self) -> Option<&'static str> {
        match self {
            Self::Openai | Self::OpenaiResponses => Some("gpt-5-mini"),
            Self::Anthropic => Some("claude-sonnet-4-5"),
            Self::Gemini => Some("gemini-2.5-flash"),
            Self::Ollama => Some("qwen3"),
            Self::OpenaiCompatible => None,
            Self::VertexGemini => Some("gemini-2.5-flash"),
            Self::VertexAnthropic => Some("claude-sonnet-4-5@20250929"),
            // The model is the deployment, whose name the resource's owner chose.
            Self::AzureOpenai | Self::AzureOpenaiResponses => None,
            Self::Bedrock => Some("us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
        }
    }

    /// The environment variables that hold the key, first match wins (empty for Ollama).
    pub fn key_variables(self) -> &'static [&'static str] {
        match self {
            Self::Openai | Self::OpenaiResponses | Self::OpenaiCompatible => &["OPENAI_API_KEY"],
            Self::Anthropic => &["ANTHROPIC_API_KEY"],
            Self::Gemini => &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
            Self::Ollama => &[],
            // OAuth2 tokens from Application Default Credentials, not a key.
            Self::VertexGemini | Self::VertexAnthropic => &[],
            Self::AzureOpenai | Self::AzureOpenaiResponses => &["AZURE_OPENAI_API_KEY"],
            Self::Bedrock => &[crate::bedrock::API_KEY_VARIABLE],
        }
    }

    /// The key from the environment, if one of [`key_variables`](Self::key_variables) is set
    /// and not blank.
    pub fn key_from_env(self) -> Option<String> {
        self.key_variables()
            .iter()
            .filter_map(|name| std::env::var(name).ok())
            .find(|value| !value.trim().is_empty())
    }

    /// The backend: at `base_url` (else the API's default; `OLLAMA_HOST` for Ollama), with
    /// `key` (else the key from the environment).
    ///
    /// # Errors
    ///
    /// [`Error::MissingKey`] for a hosted API with no key and no base URL (with a base URL
    /// the key may live in a proxy, so none is required); [`Error::MissingBaseUrl`] for
    /// `openai-compatible` without a base URL.
    pub fn connect(
        self,
        base_url: Option<&str>,
        key: Option<String>,
    ) -> Result<Box<dyn Backend>, Error> {
        let key = key.or_else(|| self.key_from_env());
        let required_key = || match (&key, base_url) {
            (Some(key), _) => Ok(key.clone()),
            (None, Some(_)) => Ok(String::new()),
            (None, None) => Err(Error::MissingKey {
                api: self.name(),
                variable: self.key_variables().first().copied().unwrap_or_default(),
            }),
        };
        Ok(match self {
            Self::Openai => boxed(
                OpenAiChat::new(required_key()?),
                base_url,
                |b: OpenAiChat, url: &str| b.with_base_url(url),
            ),
            Self::OpenaiResponses => boxed(
                OpenAiResponses::new(required_key()?),
                base_url,
                |b: OpenAiResponses, url: &str| b.with_base_url(url),
            ),
            Self::Anthropic => boxed(
                Anthropic::new(required_key()?),
                base_url,
                |b: Anthropic, url: &str| b.with_base_url(url),
            ),
            Self::Gemini => boxed(
                Gemini::new(required_key()?),
                base_url,
                |b: Gemini, url: &str| b.with_base_url(url),
            ),
            Self::Ollama => boxed(Ollama::from_env(), base_url, |b: Ollama, url: &str| {
                b.with_base_url(url)
            }),
            Self::VertexGemini | Self::VertexAnthropic => {
                if key.is_some() {
                    return Err(Error::MissingCredentials {
                        api: self.name(),
                        message: "Vertex AI takes no API key; it uses Application Default \
                                  Credentials (GOOGLE_APPLICATION_CREDENTIALS)"
                            .into(),
                    });
                }
                let mut vertex = crate::cloud::vertex::Vertex::from_env()?;
                if let Some(root) = base_url {
                    vertex = vertex.with_root(root);
                }
                if self == Self::VertexGemini {
                    Box::new(vertex.gemini())
                } else {
                    Box::new(vertex.anthropic())
                }
            }
            Self::AzureOpenai | Self::AzureOpenaiResponses => {
                let azure = crate::cloud::azure::AzureOpenAi::from_env_with(base_url, key)?;
                if self == Self::AzureOpenai {
                    Box::new(azure.chat()?)
                } else {
                    Box::new(azure.responses()?)
                }
            }
            Self::OpenaiCompatible => {
                let base_url = base_url.ok_or(Error::MissingBaseUrl { api: self.name() })?;
                let backend = OpenAiChat::compatible(base_url);
                Box::new(match key {
                    Some(key) => backend.with_api_key(key),
                    None => backend,
                })
            }
            Self::Bedrock => Box::new(crate::bedrock::connect(base_url, key)?),
        })
    }
}

/// The adapter, moved to `base_url` when one is given.
fn boxed<B: Backend + 'static>(
    backend: B,
    base_url: Option<&str>,
    with_base_url: impl FnOnce(B, &str) -> B,
) -> Box<dyn Backend> {
    Box::new(match base_url {
        Some(url) => with_base_url(backend, url),
        None => backend,
    })
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Api {
    type Err = Error;

    fn from_str(name: &str) -> Result<Self, Error> {
        if name == "openai-chat" {
            return Ok(Self::Openai);
        }
        Self::ALL
            .into_iter()
            .find(|api| api.name() == name)
            .ok_or_else(|| Error::UnknownApi(name.to_owned()))
    }
}

impl serde::Serialize for Api {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Api {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_openai_chat_is_an_alias() {
        for api in Api::ALL {
            assert_eq!(api.name().parse::<Api>().unwrap(), api);
        }
        assert_eq!("openai-chat".parse::<Api>().unwrap(), Api::Openai);
        let error = "openia".parse::<Api>().unwrap_err().to_string();
        assert!(
            error.contains("openia") && error.contains("openai-compatible"),
            "{error}"
        );
    }

    #[test]
    fn keys_and_base_urls_are_required_where_they_must_be() {
        let missing = Api::OpenaiCompatible.connect(None, None).err().unwrap();
        assert_eq!(
            missing,
            Error::MissingBaseUrl {
                api: "openai-compatible"
            }
        );
        assert!(
            Api::Anthropic
                .connect(Some("http://127.0.0.1:9"), None)
                .is_ok()
        );
        assert!(Api::Ollama.connect(None, None).is_ok());
    }
}
