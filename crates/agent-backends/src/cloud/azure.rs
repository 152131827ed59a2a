//! Azure OpenAI: OpenAI models deployed in an Azure resource, through the [`OpenAiChat`] and
//! [`OpenAiResponses`] adapters, with an `api-key` or a Microsoft Entra ID token.
//!
//! Two URL shapes:
//!
//! - **The v1 API** (no `api-version`, the default): `{endpoint}/openai/v1/chat/completions`
//!   and `{endpoint}/openai/v1/responses`, the model field naming the deployment.
//! - **Deployment URLs** (with an `api-version`, e.g. `2024-10-21`):
//!   `{endpoint}/openai/deployments/{deployment}/chat/completions?api-version=…` and
//!   `{endpoint}/openai/responses?api-version=…`.
//!
//! The model name of a request is the **deployment name**.
//!
//! Credentials: `AZURE_OPENAI_API_KEY` (sent as `api-key`), else Microsoft Entra ID with the
//! scope `https://cognitiveservices.azure.com/.default`: a client secret
//! (`AZURE_TENANT_ID`, `AZURE_CLIENT_ID`, `AZURE_CLIENT_SECRET`) or workload identity
//! (`AZURE_TENANT_ID`, `AZURE_CLIENT_ID`, `AZURE_FEDERATED_TOKEN_FILE`, as AKS sets them),
//! tokens cached and refreshed by a [`TokenSource`].
//!
//! ```no_run
//! use agent_backends::cloud::azure::AzureOpenAi;
//!
//! // AZURE_OPENAI_ENDPOINT, AZURE_OPENAI_API_KEY (or the Entra variables) and, for
//! // deployment URLs, AZURE_OPENAI_API_VERSION from the environment.
//! let azure = AzureOpenAi::from_env(None)?;
//! let chat = azure.chat();
//! let responses = azure.responses();
//! # let _ = (chat, responses);
//! # Ok::<(), agent_backends::Error>(())
//! ```

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use agent_types::{BackendError, BackendErrorKind};

use super::env;
use super::token::{FetchFuture, TokenFetcher, TokenSource, form_post, request_token};
use crate::error::Error;
use crate::http::HttpOptions;
use crate::openai_chat::OpenAiChat;
use crate::openai_responses::OpenAiResponses;

/// The scope of an Entra ID token for Azure OpenAI.
pub const COGNITIVE_SERVICES_SCOPE: &str = "https://cognitiveservices.azure.com/.default";
/// Microsoft Entra ID's public-cloud authority (`AZURE_AUTHORITY_HOST` overrides it).
pub const DEFAULT_AUTHORITY: &str = "https://login.microsoftonline.com";

const HINT: &str = "set AZURE_OPENAI_API_KEY, or AZURE_TENANT_ID, AZURE_CLIENT_ID and \
                    AZURE_CLIENT_SECRET (or AZURE_FEDERATED_TOKEN_FILE) for Microsoft Entra ID";

/// How requests to Azure OpenAI are authenticated.
#[derive(Clone)]
pub enum AzureAuth {
    /// A resource key, sent as the `api-key` header.
    ApiKey(String),
    /// A Microsoft Entra ID bearer token, cached and refreshed.
    Entra(Arc<TokenSource>),
}

impl fmt::Debug for AzureAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ApiKey(_) => f.write_str("ApiKey(<redacted>)"),
            Self::Entra(source) => f.debug_tuple("Entra").field(source).finish(),
        }
    }
}

/// An Azure OpenAI resource: its endpoint, the API shape and the credentials.
#[derive(Debug, Clone)]
pub struct AzureOpenAi {
    endpoint: String,
    api_version: Option<String>,
    auth: AzureAuth,
}

impl AzureOpenAi {
    /// The resource at `endpoint` (`https://{resource}.openai.azure.com`), on the v1 API.
    pub fn new(endpoint: impl AsRef<str>, auth: AzureAuth) -> Self {
        Self {
            endpoint: endpoint.as_ref().trim_end_matches('/').to_owned(),
            api_version: None,
            auth,
        }
    }

    /// Deployment URLs with this `api-version` instead of the v1 API.
    #[must_use]
    pub fn with_api_version(mut self, api_version: impl Into<String>) -> Self {
        self.api_version = Some(api_version.into());
        self
    }

    /// From the environment: the endpoint (`endpoint`, else `AZURE_OPENAI_ENDPOINT`), the
    /// `api-version` (`AZURE_OPENAI_API_VERSION`, else `OPENAI_API_VERSION`; none means the v1
    /// API), and the credentials (see the [module documentation](self)).
    ///
    /// # Errors
    ///
    /// [`Error::MissingCredentials`] naming what to set when the endpoint or the credentials
    /// are missing.
    pub fn from_env(endpoint: Option<&str>) -> Result<Self, Error> {
        Self::from_env_with(endpoint, None)
    }

    /// As [`from_env`](Self::from_env), with `key` (when given) as the `api-key` instead of
    /// the credentials from the environment.
    ///
    /// # Errors
    ///
    /// As [`from_env`](Self::from_env).
    pub fn from_env_with(endpoint: Option<&str>, key: Option<String>) -> Result<Self, Error> {
        let endpoint = endpoint
            .map(str::to_owned)
            .or_else(|| env("AZURE_OPENAI_ENDPOINT"))
            .ok_or_else(|| Error::MissingCredentials {
                api: "Azure OpenAI",
                message: "no endpoint: set AZURE_OPENAI_ENDPOINT \
                          (https://<resource>.openai.azure.com)"
                    .into(),
            })?;
        let auth = match key.or_else(|| env("AZURE_OPENAI_API_KEY")) {
            Some(key) => AzureAuth::ApiKey(key),
            None => AzureAuth::Entra(Arc::new(EntraCredentials::from_env()?.into_source())),
        };
        let mut azure = Self::new(endpoint, auth);
        if let Some(version) = env("AZURE_OPENAI_API_VERSION").or_else(|| env("OPENAI_API_VERSION"))
        {
            azure = azure.with_api_version(version);
        }
        Ok(azure)
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The `api-version`, when deployment URLs are used.
    pub fn api_version(&self) -> Option<&str> {
        self.api_version.as_deref()
    }

    /// `http` with the credentials: the `api-key` header or the token step.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidHeader`] for a key that is not a valid header value.
    pub fn http(&self, http: HttpOptions) -> Result<HttpOptions, Error> {
        match &self.auth {
            AzureAuth::ApiKey(key) => http
                .with_header("api-key", key)
                .map_err(|_| Error::InvalidHeader("api-key".into())),
            AzureAuth::Entra(source) => Ok(http.with_auth(source.clone())),
        }
    }

    /// Chat Completions on this resource.
    ///
    /// # Errors
    ///
    /// See [`http`](Self::http).
    pub fn chat(&self) -> Result<OpenAiChat, Error> {
        self.chat_with(HttpOptions::default())
    }

    /// Chat Completions with these HTTP settings (the credentials are added).
    ///
    /// # Errors
    ///
    /// See [`http`](Self::http).
    pub fn chat_with(&self, http: HttpOptions) -> Result<OpenAiChat, Error> {
        let chat = OpenAiChat::compatible(format!("{}/openai", self.endpoint));
        let chat = match &self.api_version {
            Some(version) => chat.for_azure_deployment(version),
            None => chat.with_base_url(format!("{}/openai/v1", self.endpoint)),
        };
        Ok(chat.with_http(self.http(http)?))
    }

    /// The Responses API on this resource.
    ///
    /// # Errors
    ///
    /// See [`http`](Self::http).
    pub fn responses(&self) -> Result<OpenAiResponses, Error> {
        self.responses_with(HttpOptions::default())
    }

    /// The Responses API with these HTTP settings (the credentials are added).
    ///
    /// # Errors
    ///
    /// See [`http`](Self::http).
    pub fn responses_with(&self, http: HttpOptions) -> Result<OpenAiResponses, Error> {
        let responses = OpenAiResponses::new("");
        let responses = match &self.api_version {
            Some(version) => responses
                .with_base_url(format!("{}/openai", self.endpoint))
                .with_api_version(version),
            None => responses.with_base_url(format!("{}/openai/v1", self.endpoint)),
        };
        Ok(responses.with_http(self.http(http)?))
    }
}

/// What proves the application's identity to Entra ID.
enum ClientProof {
    /// `AZURE_CLIENT_SECRET`.
    Secret(String),
    /// A federated token in a file (workload identity), read again for every request since
    /// the platform rotates it.
    FederatedTokenFile(PathBuf),
}

/// A Microsoft Entra ID application (client credentials flow).
pub struct EntraCredentials {
    token_url: String,
    client_id: String,
    proof: ClientProof,
}

impl fmt::Debug for EntraCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntraCredentials")
            .field("token_url", &self.token_url)
            .field("client_id", &self.client_id)
            .field(
                "proof",
                &match &self.proof {
                    ClientProof::Secret(_) => "client secret <redacted>".to_owned(),
                    ClientProof::FederatedTokenFile(path) => {
                        format!("federated token file {}", path.display())
                    }
                },
            )
            .finish()
    }
}

impl EntraCredentials {
    /// An application with a client secret, in `tenant`, at `authority` (e.g.
    /// [`DEFAULT_AUTHORITY`]).
    pub fn client_secret(
        authority: &str,
        tenant: &str,
        client_id: impl Into<String>,
        secret: impl Into<String>,
    ) -> Self {
        Self {
            token_url: token_url(authority, tenant),
            client_id: client_id.into(),
            proof: ClientProof::Secret(secret.into()),
        }
    }

    /// An application proving itself with a federated token read from `file` (workload
    /// identity).
    pub fn federated_token_file(
        authority: &str,
        tenant: &str,
        client_id: impl Into<String>,
        file: impl Into<PathBuf>,
    ) -> Self {
        Self {
            token_url: token_url(authority, tenant),
            client_id: client_id.into(),
            proof: ClientProof::FederatedTokenFile(file.into()),
        }
    }

    /// From `AZURE_TENANT_ID`, `AZURE_CLIENT_ID` and `AZURE_CLIENT_SECRET` or
    /// `AZURE_FEDERATED_TOKEN_FILE`; `AZURE_AUTHORITY_HOST` moves the authority.
    ///
    /// # Errors
    ///
    /// [`Error::MissingCredentials`] naming what to set.
    pub fn from_env() -> Result<Self, Error> {
        let missing = || Error::MissingCredentials {
            api: "Azure OpenAI",
            message: format!("no credentials found; {HINT}"),
        };
        let tenant = env("AZURE_TENANT_ID").ok_or_else(missing)?;
        let client_id = env("AZURE_CLIENT_ID").ok_or_else(missing)?;
        let authority = env("AZURE_AUTHORITY_HOST").unwrap_or_else(|| DEFAULT_AUTHORITY.to_owned());
        if let Some(secret) = env("AZURE_CLIENT_SECRET") {
            return Ok(Self::client_secret(&authority, &tenant, client_id, secret));
        }
        if let Some(file) = env("AZURE_FEDERATED_TOKEN_FILE") {
            return Ok(Self::federated_token_file(
                &authority, &tenant, client_id, file,
            ));
        }
        Err(missing())
    }

    /// A cached, refreshed token source over these credentials.
    pub fn into_source(self) -> TokenSource {
        TokenSource::new(self)
    }
}

fn token_url(authority: &str, tenant: &str) -> String {
    format!(
        "{}/{tenant}/oauth2/v2.0/token",
        authority.trim_end_matches('/')
    )
}

impl TokenFetcher for EntraCredentials {
    fn fetch<'a>(&'a self, client: &'a reqwest::Client) -> FetchFuture<'a> {
        Box::pin(async move {
            let what = format!("the Microsoft Entra ID application {}", self.client_id);
            match &self.proof {
                ClientProof::Secret(secret) => {
                    request_token(
                        form_post(
                            client,
                            &self.token_url,
                            &[
                                ("grant_type", "client_credentials"),
                                ("client_id", &self.client_id),
                                ("client_secret", secret),
                                ("scope", COGNITIVE_SERVICES_SCOPE),
                            ],
                        ),
                        &what,
                        HINT,
                    )
                    .await
                }
                ClientProof::FederatedTokenFile(path) => {
                    let assertion = tokio::fs::read_to_string(path).await.map_err(|error| {
                        BackendError::new(
                            BackendErrorKind::Authentication,
                            format!(
                                "cannot read AZURE_FEDERATED_TOKEN_FILE {} ({error})",
                                path.display()
                            ),
                        )
                    })?;
                    request_token(
                        form_post(
                            client,
                            &self.token_url,
                            &[
                                ("grant_type", "client_credentials"),
                                ("client_id", &self.client_id),
                                (
                                    "client_assertion_type",
                                    "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                                ),
                                ("client_assertion", assertion.trim()),
                                ("scope", COGNITIVE_SERVICES_SCOPE),
                            ],
                        ),
                        &what,
                        HINT,
                    )
                    .await
                }
            }
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "azure_tests.rs"]
mod tests;
