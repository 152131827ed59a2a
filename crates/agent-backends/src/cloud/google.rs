//! Google Application Default Credentials: where a Vertex AI token comes from.
//!
//! [`GoogleCredentials::from_env`] looks, in order, at
//!
//! 1. `GOOGLE_APPLICATION_CREDENTIALS`: a JSON key file of type `service_account` (a JWT
//!    signed with the key, RS256, exchanged at the file's `token_uri`) or `authorized_user`
//!    (a refresh token, from `gcloud auth application-default login`);
//! 2. gcloud's ADC file (`$CLOUDSDK_CONFIG/application_default_credentials.json`, by default
//!    `~/.config/gcloud/…`, `%APPDATA%\gcloud\…` on Windows), the same two types;
//! 3. the metadata server of the machine the process runs on (Compute Engine, GKE, Cloud
//!    Run…): when `GCE_METADATA_HOST` names it, or the machine says it is a Google Compute
//!    Engine one (`/sys/class/dmi/id/product_name`).
//!
//! Nothing found is [`Error::MissingCredentials`], naming
//! what to set. The tokens are scoped to `https://www.googleapis.com/auth/cloud-platform` and
//! cached by a [`TokenSource`].
//!
//! The JWT is signed with `ring` (already in the tree as rustls's crypto provider), so no
//! Google SDK or separate JWT crate is added.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent_types::{BackendError, BackendErrorKind};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde::Deserialize;

use super::env;
use super::token::{FetchFuture, TokenFetcher, TokenSource, form_post, request_token};
use crate::error::Error;

/// The scope Vertex AI needs.
pub const CLOUD_PLATFORM_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// Google's OAuth2 token endpoint (used when a key file names none).
pub const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// The metadata server's address when `GCE_METADATA_HOST` is not set.
pub const DEFAULT_METADATA_HOST: &str = "metadata.google.internal";

/// What to set when no credentials are found or they are refused.
const HINT: &str = "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or run \
                    `gcloud auth application-default login`";

/// Where Google credentials come from; see the [module documentation](self).
pub enum GoogleCredentials {
    /// A service account's key (`"type": "service_account"`).
    ServiceAccount(Box<ServiceAccount>),
    /// A user's refresh token (`"type": "authorized_user"`).
    AuthorizedUser(AuthorizedUser),
    /// The metadata server at this host (`host[:port]`).
    Metadata {
        /// The metadata server's host.
        host: String,
    },
}

impl fmt::Debug for GoogleCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ServiceAccount(account) => account.fmt(f),
            Self::AuthorizedUser(user) => user.fmt(f),
            Self::Metadata { host } => f.debug_struct("Metadata").field("host", host).finish(),
        }
    }
}

/// A service account: its email, key and token endpoint.
pub struct ServiceAccount {
    client_email: String,
    project_id: Option<String>,
    token_uri: String,
    key_id: Option<String>,
    key: ring::rsa::KeyPair,
}

impl fmt::Debug for ServiceAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccount")
            .field("client_email", &self.client_email)
            .field("project_id", &self.project_id)
            .field("token_uri", &self.token_uri)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// A user's OAuth2 client and refresh token.
pub struct AuthorizedUser {
    client_id: String,
    client_secret: String,
    refresh_token: String,
    quota_project_id: Option<String>,
    token_uri: String,
}

impl fmt::Debug for AuthorizedUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthorizedUser")
            .field("client_id", &self.client_id)
            .field("quota_project_id", &self.quota_project_id)
            .field("token_uri", &self.token_uri)
            .field("client_secret", &"<redacted>")
            .field("refresh_token", &"<redacted>")
            .finish()
    }
}

/// The fields of a credentials file this module reads.
#[derive(Deserialize)]
struct KeyFile {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    client_email: Option<String>,
    #[serde(default)]
    private_key: Option<String>,
    #[serde(default)]
    private_key_id: Option<String>,
    #[serde(default)]
    project_id: Option<String>,
    #[serde(default)]
    token_uri: Option<String>,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    client_secret: Option<String>,
    #[serde(default)]
    refresh_token: Option<String>,
    #[serde(default)]
    quota_project_id: Option<String>,
}

fn missing(message: impl Into<String>) -> Error {
    Error::MissingCredentials {
        api: "Google Cloud",
        message: message.into(),
    }
}

impl GoogleCredentials {
    /// Application Default Credentials from the environment; see the
    /// [module documentation](self).
    ///
    /// # Errors
    ///
    /// [`Error::MissingCredentials`] when none are found, or a file cannot be read or is not
    /// a key this module understands.
    pub fn from_env() -> Result<Self, Error> {
        if let Some(path) = env("GOOGLE_APPLICATION_CREDENTIALS") {
            return Self::from_file(Path::new(&path));
        }
        if let Some(path) = gcloud_adc_path().filter(|path| path.is_file()) {
            return Self::from_file(&path);
        }
        if let Some(host) = env("GCE_METADATA_HOST") {
            return Ok(Self::Metadata { host });
        }
        if on_gce() {
            return Ok(Self::Metadata {
                host: DEFAULT_METADATA_HOST.to_owned(),
            });
        }
        Err(missing(format!("no credentials found; {HINT}")))
    }

    /// The credentials in a key file (`service_account` or `authorized_user`).
    ///
    /// # Errors
    ///
    /// [`Error::MissingCredentials`] naming the file when it cannot be read or used.
    pub fn from_file(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|error| {
            missing(format!(
                "cannot read the credentials file {} ({error}); {HINT}",
                path.display()
            ))
        })?;
        Self::from_json(&text).map_err(|message| {
            missing(format!(
                "the credentials file {}: {message}",
                path.display()
            ))
        })
    }

    /// The credentials in a key file's text.
    ///
    /// # Errors
    ///
    /// What is wrong with it, never quoting a secret.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let file: KeyFile = serde_json::from_str(text).map_err(|error| {
            format!("not a Google credentials file ({})", error.classify_name())
        })?;
        let field = |value: Option<String>, name: &str| {
            value
                .filter(|value| !value.is_empty())
                .ok_or_else(|| format!("a `{}` file without `{name}`", file.kind))
        };
        let token_uri = file
            .token_uri
            .clone()
            .unwrap_or_else(|| DEFAULT_TOKEN_URI.to_owned());
        match file.kind.as_str() {
            "service_account" => {
                let pem = field(file.private_key.clone(), "private_key")?;
                Ok(Self::ServiceAccount(Box::new(ServiceAccount {
                    client_email: field(file.client_email.clone(), "client_email")?,
                    project_id: file.project_id.clone(),
                    token_uri,
                    key_id: file.private_key_id.clone(),
                    key: rsa_key(&pem)?,
                })))
            }
            "authorized_user" => Ok(Self::AuthorizedUser(AuthorizedUser {
                client_id: field(file.client_id.clone(), "client_id")?,
                client_secret: field(file.client_secret.clone(), "client_secret")?,
                refresh_token: field(file.refresh_token.clone(), "refresh_token")?,
                quota_project_id: file.quota_project_id.clone(),
                token_uri,
            })),
            other => Err(format!(
                "credentials of type `{other}` are not supported (service_account and \
                 authorized_user are; for workload identity federation or impersonation, \
                 run on a machine with a metadata server or mint a key file)"
            )),
        }
    }

    /// The project the credentials belong to, if they name one (a service account's
    /// `project_id`, a user's `quota_project_id`).
    pub fn project(&self) -> Option<&str> {
        match self {
            Self::ServiceAccount(account) => account.project_id.as_deref(),
            Self::AuthorizedUser(user) => user.quota_project_id.as_deref(),
            Self::Metadata { .. } => None,
        }
    }

    /// A cached, refreshed token source over these credentials.
    pub fn into_source(self) -> TokenSource {
        TokenSource::new(self)
    }
}

trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}

impl ClassifyName for serde_json::Error {
    // serde_json's message may quote the offending text, which can be a key: say only what
    // kind of error it is.
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "I/O error",
            serde_json::error::Category::Syntax => "invalid JSON",
            serde_json::error::Category::Data => "missing or mistyped `type`",
            serde_json::error::Category::Eof => "truncated JSON",
        }
    }
}

impl TokenFetcher for GoogleCredentials {
    fn fetch<'a>(&'a self, client: &'a reqwest::Client) -> FetchFuture<'a> {
        Box::pin(async move {
            match self {
                Self::ServiceAccount(account) => {
                    let assertion = account.assertion(SystemTime::now())?;
                    request_token(
                        form_post(
                            client,
                            &account.token_uri,
                            &[
                                ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
                                ("assertion", &assertion),
                            ],
                        ),
                        &format!("the Google service account {}", account.client_email),
                        HINT,
                    )
                    .await
                }
                Self::AuthorizedUser(user) => {
                    request_token(
                        form_post(
                            client,
                            &user.token_uri,
                            &[
                                ("grant_type", "refresh_token"),
                                ("client_id", &user.client_id),
                                ("client_secret", &user.client_secret),
                                ("refresh_token", &user.refresh_token),
                            ],
                        ),
                        "the Google user credentials (authorized_user)",
                        "run `gcloud auth application-default login` again, or set \
                         GOOGLE_APPLICATION_CREDENTIALS to a service-account key file",
                    )
                    .await
                }
                Self::Metadata { host } => {
                    let url = format!(
                        "http://{host}/computeMetadata/v1/instance/service-accounts/default/token?scopes={}",
                        super::token::form(&[("", CLOUD_PLATFORM_SCOPE)]).trim_start_matches('=')
                    );
                    request_token(
                        client.get(url).header("Metadata-Flavor", "Google"),
                        "the metadata server's default service account",
                        "attach a service account to the instance, or set \
                         GOOGLE_APPLICATION_CREDENTIALS to a service-account key file",
                    )
                    .await
                }
            }
        })
    }
}

impl ServiceAccount {
    /// The signed JWT (RS256) a token endpoint exchanges for an access token: issued now,
    /// valid one hour, for the cloud-platform scope, addressed to the token endpoint.
    fn assertion(&self, now: SystemTime) -> Result<String, BackendError> {
        let iat = now
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs();
        let mut header = serde_json::json!({"alg": "RS256", "typ": "JWT"});
        if let Some(kid) = &self.key_id {
            header["kid"] = serde_json::Value::String(kid.clone());
        }
        let claims = serde_json::json!({
            "iss": self.client_email,
            "scope": CLOUD_PLATFORM_SCOPE,
            "aud": self.token_uri,
            "iat": iat,
            "exp": iat + 3600,
        });
        let mut jwt = URL_SAFE_NO_PAD.encode(header.to_string());
        jwt.push('.');
        jwt.push_str(&URL_SAFE_NO_PAD.encode(claims.to_string()));
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &ring::signature::RSA_PKCS1_SHA256,
                &ring::rand::SystemRandom::new(),
                jwt.as_bytes(),
                &mut signature,
            )
            .map_err(|_| {
                BackendError::new(
                    BackendErrorKind::Authentication,
                    format!("could not sign the token request for {}", self.client_email),
                )
            })?;
        jwt.push('.');
        jwt.push_str(&URL_SAFE_NO_PAD.encode(signature));
        Ok(jwt)
    }
}

/// An RSA key from a PKCS#8 PEM block (`-----BEGIN PRIVATE KEY-----`), the form Google's key
/// files use.
fn rsa_key(pem: &str) -> Result<ring::rsa::KeyPair, String> {
    let body: String = pem
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("-----"))
        .collect();
    if !pem.contains("BEGIN PRIVATE KEY") {
        return Err("`private_key` is not a PKCS#8 PEM key (BEGIN PRIVATE KEY)".into());
    }
    let der = STANDARD
        .decode(body.as_bytes())
        .map_err(|_| "`private_key` is not valid PEM (base64)".to_owned())?;
    ring::rsa::KeyPair::from_pkcs8(&der)
        .map_err(|error| format!("`private_key` is not a usable RSA key ({error})"))
}

/// Where `gcloud auth application-default login` writes its file.
fn gcloud_adc_path() -> Option<PathBuf> {
    let dir = match env("CLOUDSDK_CONFIG") {
        Some(dir) => PathBuf::from(dir),
        None if cfg!(windows) => PathBuf::from(env("APPDATA")?).join("gcloud"),
        None => PathBuf::from(env("HOME")?).join(".config").join("gcloud"),
    };
    Some(dir.join("application_default_credentials.json"))
}

/// Whether this is a Google Compute Engine machine (the check Google's own libraries make on
/// Linux, without a network probe).
fn on_gce() -> bool {
    std::fs::read_to_string("/sys/class/dmi/id/product_name")
        .is_ok_and(|name| name.trim().starts_with("Google"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "google_tests.rs"]
mod tests;
