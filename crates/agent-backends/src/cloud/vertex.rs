//! Google Vertex AI: Gemini and Anthropic models in a Google Cloud project, through the
//! [`Gemini`] and [`Anthropic`] adapters, with OAuth2 tokens from Application Default
//! Credentials ([`super::google`]).
//!
//! The base URL is `https://{location}-aiplatform.googleapis.com/v1/projects/{project}/locations/{location}`
//! (`https://aiplatform.googleapis.com/…` for the `global` location); Gemini models are under
//! `/publishers/google/models/{model}:streamGenerateContent?alt=sse` (`:generateContent`),
//! Anthropic models under `/publishers/anthropic/models/{model}:streamRawPredict`
//! (`:rawPredict`), see [`Anthropic::for_vertex`].
//!
//! ```no_run
//! use agent_backends::cloud::vertex::Vertex;
//!
//! // GOOGLE_APPLICATION_CREDENTIALS (or gcloud's ADC file, or the metadata server),
//! // GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION from the environment.
//! let vertex = Vertex::from_env()?;
//! let gemini = vertex.gemini();
//! let claude = vertex.anthropic();
//! # let _ = (gemini, claude);
//! # Ok::<(), agent_backends::Error>(())
//! ```

use std::sync::Arc;

use super::env;
use super::google::GoogleCredentials;
use crate::anthropic::Anthropic;
use crate::error::Error;
use crate::gemini::Gemini;
use crate::http::{HttpOptions, RequestAuth};

/// The location used when neither `GOOGLE_CLOUD_LOCATION` nor `CLOUD_ML_REGION` is set.
pub const DEFAULT_LOCATION: &str = "global";

/// A Vertex AI project and location, and the credentials for it.
#[derive(Debug, Clone)]
pub struct Vertex {
    project: String,
    location: String,
    root: Option<String>,
    auth: Arc<dyn RequestAuth>,
}

impl Vertex {
    /// Vertex AI in `project` at `location`, authenticating each request with `auth` (usually
    /// a [`TokenSource`](super::token::TokenSource) over [`GoogleCredentials`]).
    pub fn new(
        project: impl Into<String>,
        location: impl Into<String>,
        auth: Arc<dyn RequestAuth>,
    ) -> Self {
        Self {
            project: project.into(),
            location: location.into(),
            root: None,
            auth,
        }
    }

    /// Application Default Credentials, the project from `GOOGLE_CLOUD_PROJECT` (else the
    /// credentials' own), the location from `GOOGLE_CLOUD_LOCATION`, else `CLOUD_ML_REGION`,
    /// else [`DEFAULT_LOCATION`].
    ///
    /// # Errors
    ///
    /// [`Error::MissingCredentials`] naming what to set when no credentials or no project are
    /// found.
    pub fn from_env() -> Result<Self, Error> {
        let credentials = GoogleCredentials::from_env()?;
        let project = env("GOOGLE_CLOUD_PROJECT")
            .or_else(|| credentials.project().map(str::to_owned))
            .ok_or_else(|| Error::MissingCredentials {
                api: "Vertex AI",
                message: "no Google Cloud project: set GOOGLE_CLOUD_PROJECT".into(),
            })?;
        let location = env("GOOGLE_CLOUD_LOCATION")
            .or_else(|| env("CLOUD_ML_REGION"))
            .unwrap_or_else(|| DEFAULT_LOCATION.to_owned());
        Ok(Self::new(
            project,
            location,
            Arc::new(credentials.into_source()),
        ))
    }

    /// With requests sent to `root` (`scheme://host[:port]`, for a proxy, a private endpoint
    /// or a test server) instead of Google's regional host; the `/v1/projects/…` path follows.
    #[must_use]
    pub fn with_root(mut self, root: impl Into<String>) -> Self {
        self.root = Some(root.into().trim_end_matches('/').to_owned());
        self
    }

    /// The project.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The location (`us-central1`, `europe-west4`, `global`…).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// `{root}/v1/projects/{project}/locations/{location}`.
    pub fn base_url(&self) -> String {
        let root = match &self.root {
            Some(root) => root.clone(),
            None if self.location == "global" => "https://aiplatform.googleapis.com".to_owned(),
            None => format!("https://{}-aiplatform.googleapis.com", self.location),
        };
        format!(
            "{root}/v1/projects/{}/locations/{}",
            self.project, self.location
        )
    }

    /// The HTTP settings with this project's credentials; `http`'s own settings are kept.
    pub fn http(&self, http: HttpOptions) -> HttpOptions {
        http.with_auth(self.auth.clone())
    }

    /// Gemini models on Vertex AI (model ids like `gemini-2.5-flash`).
    pub fn gemini(&self) -> Gemini {
        self.gemini_with(HttpOptions::default())
    }

    /// Gemini models on Vertex AI with these HTTP settings (the credentials are added).
    pub fn gemini_with(&self, http: HttpOptions) -> Gemini {
        Gemini::new("")
            .with_base_url(format!("{}/publishers/google", self.base_url()))
            .with_http(self.http(http))
    }

    /// Anthropic models on Vertex AI (model ids like `claude-sonnet-4-5@20250929`).
    pub fn anthropic(&self) -> Anthropic {
        self.anthropic_with(HttpOptions::default())
    }

    /// Anthropic models on Vertex AI with these HTTP settings (the credentials are added).
    pub fn anthropic_with(&self, http: HttpOptions) -> Anthropic {
        Anthropic::new("")
            .with_base_url(self.base_url())
            .with_http(self.http(http))
            .for_vertex()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use agent_types::{BackendErrorKind, Message, ModelRequest};

    use super::*;
    use crate::http::driver::Protocol;

    #[derive(Debug)]
    struct NoAuth;

    impl RequestAuth for NoAuth {
        fn authorize<'a>(
            &'a self,
            _request: &'a mut reqwest::Request,
        ) -> crate::http::AuthFuture<'a> {
            Box::pin(async { Ok(()) })
        }
    }

    #[test]
    fn the_host_is_regional_except_for_the_global_location() {
        let regional = Vertex::new("p", "europe-west4", Arc::new(NoAuth));
        assert_eq!(
            regional.base_url(),
            "https://europe-west4-aiplatform.googleapis.com/v1/projects/p/locations/europe-west4"
        );
        let global = Vertex::new("p", "global", Arc::new(NoAuth));
        assert_eq!(
            global.base_url(),
            "https://aiplatform.googleapis.com/v1/projects/p/locations/global"
        );
        let mut request = ModelRequest::new("gemini-2.5-pro", vec![Message::user("hi")]);
        request.stream = true;
        let prepared = global.gemini().prepare(&request).unwrap();
        assert_eq!(
            prepared.url,
            "https://aiplatform.googleapis.com/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
        );
        assert!(prepared.headers.get("x-goog-api-key").is_none());
        assert!(global.gemini().http().auth.is_some());
    }

    #[test]
    fn anthropic_on_vertex_refuses_a_model_id_that_would_change_the_path_and_its_own_body_fields() {
        let vertex = Vertex::new("p", "us-east5", Arc::new(NoAuth));
        let anthropic = vertex.anthropic();
        let request = ModelRequest::new("../../other:rawPredict", vec![Message::user("hi")]);
        let error = anthropic.prepare(&request).unwrap_err();
        assert_eq!(error.kind, BackendErrorKind::InvalidRequest);
        let mut request = ModelRequest::new("claude-opus-4-1@20250805", vec![Message::user("hi")]);
        request
            .extras
            .insert("anthropic_version".into(), "2023-06-01".into());
        let error = anthropic.prepare(&request).unwrap_err();
        assert!(
            error.message.contains("anthropic_version"),
            "{}",
            error.message
        );
        assert!(anthropic.http().auth.is_some());
    }
}
