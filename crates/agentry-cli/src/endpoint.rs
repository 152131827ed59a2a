//! Base URLs: which ones are accepted, and how the endpoint a run talks to is shown.
//!
//! A base URL never carries a secret: userinfo (`https://user:pass@host`) and a query string
//! (`?api_key=…`) are refused wherever the URL comes from (flag, configuration, state file),
//! so a stored session or a printed banner cannot leak one. Keys come from the environment.

use agent_backends::Api;
use url::Url;

/// `Ok` when `text` is an `http`/`https` URL without userinfo, query or fragment; else what
/// is wrong, without repeating the URL (it may hold the very secret being refused).
pub(crate) fn check_base_url(text: &str) -> Result<(), String> {
    let url = Url::parse(text).map_err(|error| format!("not a URL ({error})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "the scheme must be http or https, not {}",
            url.scheme()
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "a base URL must not carry credentials (user:password@); set the API key in the \
             environment instead"
                .into(),
        );
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(
            "a base URL must not carry a query string or fragment (they often hold keys); set \
             the API key in the environment instead"
                .into(),
        );
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("the URL names no host".into());
    }
    Ok(())
}

/// `scheme://host[:port]/path` of a URL, never its userinfo, query or fragment; the text
/// itself when it does not parse (it was checked before it got here).
pub(crate) fn display(text: &str) -> String {
    let Ok(url) = Url::parse(text) else {
        return "(an invalid URL)".into();
    };
    let mut shown = format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default());
    if let Some(port) = url.port() {
        shown.push_str(&format!(":{port}"));
    }
    let path = url.path();
    if path != "/" {
        shown.push_str(path);
    }
    shown
}

/// The endpoint `api` talks to: `base_url`, else the API's default (`OLLAMA_HOST` for
/// Ollama), as [`display`] shows it.
pub(crate) fn endpoint(api: Api, base_url: Option<&str>) -> String {
    let ollama;
    let url = match (base_url, api) {
        (Some(url), _) => url,
        (None, Api::Openai) => agent_backends::openai_chat::DEFAULT_BASE_URL,
        (None, Api::OpenaiResponses) => agent_backends::openai_responses::DEFAULT_BASE_URL,
        (None, Api::Anthropic) => agent_backends::anthropic::DEFAULT_BASE_URL,
        (None, Api::Gemini) => agent_backends::gemini::DEFAULT_BASE_URL,
        (None, Api::Ollama) => {
            ollama = agent_backends::ollama::Ollama::from_env();
            ollama.base_url()
        }
        (None, Api::OpenaiCompatible) => return "(no base URL)".into(),
        (None, Api::VertexGemini | Api::VertexAnthropic) => {
            return "Vertex AI (GOOGLE_CLOUD_PROJECT, GOOGLE_CLOUD_LOCATION)".into();
        }
        (None, Api::AzureOpenai | Api::AzureOpenaiResponses) => {
            return match std::env::var("AZURE_OPENAI_ENDPOINT") {
                Ok(url) => display(&url),
                Err(_) => "(AZURE_OPENAI_ENDPOINT)".into(),
            };
        }
        (None, Api::Bedrock) => {
            return match agent_backends::bedrock::region_from_env() {
                Some(region) => display(&agent_backends::bedrock::endpoint(&region)),
                None => "(AWS_REGION not set)".into(),
            };
        }
    };
    display(url)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn secrets_in_a_base_url_are_refused_without_being_repeated() {
        for url in [
            "https://user:hunter2@proxy.example/v1",
            "https://hunter2@proxy.example/v1",
            "https://proxy.example/v1?api_key=hunter2",
            "https://proxy.example/v1#hunter2",
        ] {
            let message = check_base_url(url).unwrap_err();
            assert!(!message.contains("hunter2"), "{message}");
        }
        assert!(check_base_url("file:///etc/passwd").is_err());
        assert!(check_base_url("not a url").is_err());
        check_base_url("http://127.0.0.1:8000/v1").unwrap();
        check_base_url("https://api.anthropic.com").unwrap();
    }

    #[test]
    fn the_endpoint_shows_scheme_host_port_and_path_only() {
        assert_eq!(
            display("https://user:pw@proxy.example:8443/v1?key=x#f"),
            "https://proxy.example:8443/v1"
        );
        assert_eq!(display("http://127.0.0.1:9/"), "http://127.0.0.1:9");
        assert_eq!(
            endpoint(Api::Openai, None),
            "https://api.openai.com/v1".to_owned()
        );
        assert_eq!(
            endpoint(Api::Anthropic, Some("http://localhost:4000/anthropic")),
            "http://localhost:4000/anthropic"
        );
    }
}
