//! The model backend for `agentry run`: the provider's adapter, its key from the usual
//! environment variable, its base URL from the flag or the file.

use agent_backends::anthropic::Anthropic;
use agent_backends::gemini::Gemini;
use agent_backends::ollama::Ollama;
use agent_backends::openai_chat::OpenAiChat;
use agent_backends::openai_responses::OpenAiResponses;
use agent_types::Backend;

use crate::args::ProviderChoice;
use crate::error::Error;

/// The model used when neither `--model` nor the file names one.
pub(crate) fn default_model(provider: ProviderChoice) -> Option<&'static str> {
    match provider {
        ProviderChoice::Openai | ProviderChoice::OpenaiResponses => Some("gpt-5-mini"),
        ProviderChoice::Anthropic => Some("claude-sonnet-4-5"),
        ProviderChoice::Gemini => Some("gemini-2.5-flash"),
        ProviderChoice::Ollama => Some("qwen3"),
        // A compatible server serves whatever it loaded; there is no sensible guess.
        ProviderChoice::OpenaiCompatible => None,
    }
}

/// The environment variables holding the provider's key, first match wins.
pub(crate) fn key_variables(provider: ProviderChoice) -> &'static [&'static str] {
    match provider {
        ProviderChoice::Openai
        | ProviderChoice::OpenaiResponses
        | ProviderChoice::OpenaiCompatible => &["OPENAI_API_KEY"],
        ProviderChoice::Anthropic => &["ANTHROPIC_API_KEY"],
        ProviderChoice::Gemini => &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
        ProviderChoice::Ollama => &[],
    }
}

fn key_for(provider: ProviderChoice) -> Option<String> {
    key_variables(provider)
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .find(|value| !value.trim().is_empty())
}

/// The adapter for `provider`. A hosted provider without a key is refused with the
/// variable to set, unless a base URL points elsewhere (a proxy may hold the key).
pub(crate) fn connect(
    provider: ProviderChoice,
    base_url: Option<&str>,
) -> Result<Box<dyn Backend>, Error> {
    let key = key_for(provider);
    let required_key = || -> Result<String, Error> {
        match (&key, base_url) {
            (Some(key), _) => Ok(key.clone()),
            (None, Some(_)) => Ok(String::new()),
            (None, None) => Err(Error::MissingKey {
                provider: provider.name(),
                variable: key_variables(provider)[0],
            }),
        }
    };
    let backend: Box<dyn Backend> = match provider {
        ProviderChoice::Openai => with_base(OpenAiChat::new(required_key()?), base_url),
        ProviderChoice::OpenaiResponses => {
            with_base(OpenAiResponses::new(required_key()?), base_url)
        }
        ProviderChoice::Anthropic => with_base(Anthropic::new(required_key()?), base_url),
        ProviderChoice::Gemini => with_base(Gemini::new(required_key()?), base_url),
        ProviderChoice::Ollama => with_base(Ollama::from_env(), base_url),
        ProviderChoice::OpenaiCompatible => {
            let Some(base_url) = base_url else {
                return Err(Error::Usage(
                    "--provider openai-compatible needs --base-url (e.g. \
                     http://localhost:8000/v1); to see agentry work without a server, run \
                     `agentry demo`"
                        .into(),
                ));
            };
            let backend = OpenAiChat::compatible(base_url);
            Box::new(match key {
                Some(key) => backend.with_api_key(key),
                None => backend,
            })
        }
    };
    Ok(backend)
}

/// Applies `--base-url` to any adapter (they share the builder methods).
fn with_base<B: Backend + WithBaseUrl + 'static>(
    backend: B,
    base_url: Option<&str>,
) -> Box<dyn Backend> {
    Box::new(match base_url {
        Some(url) => backend.base(url),
        None => backend,
    })
}

/// The one builder method [`with_base`] needs, over the five adapter types.
trait WithBaseUrl: Sized {
    fn base(self, url: &str) -> Self;
}

macro_rules! with_base_url {
    ($($adapter:ty),*) => {
        $(impl WithBaseUrl for $adapter {
            fn base(self, url: &str) -> Self {
                self.with_base_url(url)
            }
        })*
    };
}

with_base_url!(OpenAiChat, OpenAiResponses, Anthropic, Gemini, Ollama);
