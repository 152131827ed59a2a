//! Bedrock's authentication: AWS SigV4 signing ([`SigV4`], with `aws-sigv4`) over a light
//! credential chain of our own ([`CredentialChain`]), or a Bedrock API key ([`BearerToken`]).
//!
//! The chain, in the AWS SDKs' order: the environment (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), web identity (`AWS_WEB_IDENTITY_TOKEN_FILE` and
//! `AWS_ROLE_ARN`, exchanged at STS `AssumeRoleWithWebIdentity` over our own reqwest client),
//! then the profile files (`AWS_PROFILE`, else `default`, in `~/.aws/credentials` and
//! `~/.aws/config`, or `AWS_SHARED_CREDENTIALS_FILE` / `AWS_CONFIG_FILE`). `aws-config` would
//! do the same with the whole AWS SDK runtime (about 80 more crates); this is ~300 lines.
//! Credentials are cached; temporary ones are fetched again five minutes before they expire.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent_types::{BackendError, BackendErrorKind};
use reqwest::header::{AUTHORIZATION, HeaderName, HeaderValue};

use crate::http::{AuthFuture, HttpClient, RequestAuth};

/// How long before expiry temporary credentials are fetched again.
const REFRESH_AHEAD: Duration = Duration::from_secs(300);

/// A set of AWS credentials. `Debug` shows the key id only.
#[derive(Clone, PartialEq, Eq)]
pub struct AwsCredentials {
    /// The access key id (not secret: it names the key).
    pub access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
    /// When temporary credentials stop working.
    pub expires: Option<SystemTime>,
}

impl AwsCredentials {
    /// Long-lived or temporary credentials.
    pub fn new(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
        expires: Option<SystemTime>,
    ) -> Self {
        Self {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token,
            expires,
        }
    }

    fn fresh(&self, now: SystemTime) -> bool {
        self.expires
            .is_none_or(|expires| now + REFRESH_AHEAD < expires)
    }
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .field("expires", &self.expires)
            .finish()
    }
}

fn auth_error(message: impl Into<String>) -> BackendError {
    BackendError::new(BackendErrorKind::Authentication, message)
}

/// Where the chain found (or would look for) credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    Static(AwsCredentials),
    WebIdentity {
        token_file: PathBuf,
        role_arn: String,
        session_name: String,
        sts_endpoint: String,
    },
    Profile(String),
}

/// The credential chain, read from a snapshot of the environment taken when it was built.
pub struct CredentialChain {
    vars: HashMap<String, String>,
    client: HttpClient,
    cache: Mutex<Option<AwsCredentials>>,
}

impl fmt::Debug for CredentialChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CredentialChain")
            .field("source", &self.describe().unwrap_or("none"))
            .finish_non_exhaustive()
    }
}

/// The variables the chain reads.
const VARIABLES: [&str; 13] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL_STS",
    "HOME",
];

impl CredentialChain {
    /// The chain over this process's environment.
    pub fn from_env() -> Self {
        Self::from_vars(
            VARIABLES
                .iter()
                .filter_map(|name| Some(((*name).to_owned(), std::env::var(name).ok()?))),
        )
    }

    /// The chain over these variables only (tests, or a server configuring several accounts).
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Self {
        Self {
            vars: vars
                .into_iter()
                .filter(|(_, value)| !value.trim().is_empty())
                .collect(),
            client: HttpClient::shared(),
            cache: Mutex::new(None),
        }
    }

    /// With this HTTP client for STS.
    #[must_use]
    pub fn with_client(mut self, client: HttpClient) -> Self {
        self.client = client;
        self
    }

    fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    fn source(&self) -> Result<Source, BackendError> {
        if let Some(key) = self.var("AWS_ACCESS_KEY_ID") {
            let secret = self.var("AWS_SECRET_ACCESS_KEY").ok_or_else(|| {
                auth_error("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not")
            })?;
            return Ok(Source::Static(AwsCredentials::new(
                key,
                secret,
                self.var("AWS_SESSION_TOKEN").map(str::to_owned),
                None,
            )));
        }
        if let (Some(file), Some(role)) = (
            self.var("AWS_WEB_IDENTITY_TOKEN_FILE"),
            self.var("AWS_ROLE_ARN"),
        ) {
            let region = self
                .var("AWS_REGION")
                .or_else(|| self.var("AWS_DEFAULT_REGION"));
            let sts_endpoint = match (self.var("AWS_ENDPOINT_URL_STS"), region) {
                (Some(url), _) => url.trim_end_matches('/').to_owned(),
                (None, Some(region)) => format!("https://sts.{region}.amazonaws.com"),
                (None, None) => "https://sts.amazonaws.com".to_owned(),
            };
            return Ok(Source::WebIdentity {
                token_file: PathBuf::from(file),
                role_arn: role.to_owned(),
                session_name: self
                    .var("AWS_ROLE_SESSION_NAME")
                    .unwrap_or("agentry")
                    .to_owned(),
                sts_endpoint,
            });
        }
        let profile = self.var("AWS_PROFILE").unwrap_or("default");
        if self.credentials_file().is_some_and(|path| path.exists())
            || self.config_file().is_some_and(|path| path.exists())
        {
            return Ok(Source::Profile(profile.to_owned()));
        }
        Err(auth_error(
            "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and \
             AWS_SESSION_TOKEN for temporary ones), AWS_PROFILE with ~/.aws/credentials, \
             AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, or AWS_BEARER_TOKEN_BEDROCK for a \
             Bedrock API key",
        ))
    }

    /// Which source the chain will use (`environment`, `web identity`, `profile`), without
    /// reading any secret or calling STS; for start-up checks.
    ///
    /// # Errors
    ///
    /// An [`Authentication`](BackendErrorKind::Authentication) error naming the variables to set
    /// when no source is configured.
    pub fn describe(&self) -> Result<&'static str, BackendError> {
        Ok(match self.source()? {
            Source::Static(_) => "environment",
            Source::WebIdentity { .. } => "web identity",
            Source::Profile(_) => "profile",
        })
    }

    fn home(&self) -> Option<PathBuf> {
        self.var("HOME").map(PathBuf::from)
    }

    fn credentials_file(&self) -> Option<PathBuf> {
        self.var("AWS_SHARED_CREDENTIALS_FILE")
            .map(PathBuf::from)
            .or_else(|| Some(self.home()?.join(".aws/credentials")))
    }

    fn config_file(&self) -> Option<PathBuf> {
        self.var("AWS_CONFIG_FILE")
            .map(PathBuf::from)
            .or_else(|| Some(self.home()?.join(".aws/config")))
    }

    /// Current credentials: cached, or fetched (again, when temporary ones near expiry).
    ///
    /// # Errors
    ///
    /// An [`Authentication`](BackendErrorKind::Authentication) error when no source is
    /// configured or the source fails; the message never holds a secret.
    pub async fn credentials(&self) -> Result<AwsCredentials, BackendError> {
        let now = SystemTime::now();
        if let Ok(cache) = self.cache.lock()
            && let Some(credentials) = cache.as_ref().filter(|c| c.fresh(now))
        {
            return Ok(credentials.clone());
        }
        let credentials = match self.source()? {
            Source::Static(credentials) => credentials,
            Source::Profile(profile) => self.profile(&profile)?,
            Source::WebIdentity {
                token_file,
                role_arn,
                session_name,
                sts_endpoint,
            } => {
                let token = std::fs::read_to_string(&token_file).map_err(|error| {
                    auth_error(format!(
                        "cannot read AWS_WEB_IDENTITY_TOKEN_FILE {}: {error}",
                        token_file.display()
                    ))
                })?;
                assume_role_with_web_identity(
                    &self.client,
                    &sts_endpoint,
                    &role_arn,
                    &session_name,
                    token.trim(),
                )
                .await?
            }
        };
        if let Ok(mut cache) = self.cache.lock() {
            *cache = Some(credentials.clone());
        }
        Ok(credentials)
    }

    /// Static keys of `profile` from the credentials file, else the config file.
    fn profile(&self, profile: &str) -> Result<AwsCredentials, BackendError> {
        let sections = [
            (self.credentials_file(), profile.to_owned()),
            (
                self.config_file(),
                if profile == "default" {
                    "default".to_owned()
                } else {
                    format!("profile {profile}")
                },
            ),
        ];
        for (file, section) in sections {
            let Some(text) = file.and_then(|path| std::fs::read_to_string(path).ok()) else {
                continue;
            };
            let keys = ini_section(&text, &section);
            if let (Some(id), Some(secret)) = (
                keys.get("aws_access_key_id"),
                keys.get("aws_secret_access_key"),
            ) {
                return Ok(AwsCredentials::new(
                    *id,
                    *secret,
                    keys.get("aws_session_token")
                        .map(|token| (*token).to_owned()),
                    None,
                ));
            }
            if keys.contains_key("sso_session")
                || keys.contains_key("role_arn")
                || keys.contains_key("credential_process")
            {
                return Err(auth_error(format!(
                    "the AWS profile `{profile}` uses SSO, role assumption or a credential process, \
                     which agentry does not run; export temporary keys (`aws configure \
                     export-credentials --profile {profile} --format env`) or use a Bedrock API key"
                )));
            }
        }
        Err(auth_error(format!(
            "the AWS profile `{profile}` has no aws_access_key_id / aws_secret_access_key in \
             ~/.aws/credentials or ~/.aws/config"
        )))
    }
}

/// The `key = value` pairs of `[section]` in an INI file.
fn ini_section<'t>(text: &'t str, section: &str) -> HashMap<&'t str, &'t str> {
    let mut keys = HashMap::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(name) = line
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
        {
            inside = name.trim() == section;
            continue;
        }
        if inside && let Some((key, value)) = line.split_once('=') {
            keys.insert(key.trim(), value.trim());
        }
    }
    keys
}

/// Calls STS `AssumeRoleWithWebIdentity` (unsigned: the token is the proof).
async fn assume_role_with_web_identity(
    client: &HttpClient,
    endpoint: &str,
    role_arn: &str,
    session_name: &str,
    token: &str,
) -> Result<AwsCredentials, BackendError> {
    let form = [
        ("Action", "AssumeRoleWithWebIdentity"),
        ("Version", "2011-06-15"),
        ("RoleArn", role_arn),
        ("RoleSessionName", session_name),
        ("WebIdentityToken", token),
    ];
    let body: String = form
        .iter()
        .map(|(key, value)| format!("{key}={}", form_encode(value)))
        .collect::<Vec<_>>()
        .join("&");
    let response = client
        .reqwest()
        .post(format!("{endpoint}/"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .map_err(|error| {
            auth_error(format!(
                "STS AssumeRoleWithWebIdentity could not be reached: {}",
                error.without_url()
            ))
        })?;
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    if status != 200 {
        let message = xml_value(&text, "Message").unwrap_or("no message");
        return Err(auth_error(format!(
            "STS AssumeRoleWithWebIdentity failed with HTTP {status}: {}",
            crate::http::status::clip(message, 300)
        )));
    }
    let field = |name: &str| {
        xml_value(&text, name).ok_or_else(|| {
            auth_error(format!(
                "STS AssumeRoleWithWebIdentity answered without <{name}>"
            ))
        })
    };
    Ok(AwsCredentials::new(
        field("AccessKeyId")?,
        field("SecretAccessKey")?,
        Some(field("SessionToken")?.to_owned()),
        parse_timestamp(field("Expiration")?),
    ))
}

fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The text of the first `<name>…</name>` element.
fn xml_value<'t>(xml: &'t str, name: &str) -> Option<&'t str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{name}>"))? + start;
    Some(xml[start..end].trim())
}

/// An RFC 3339 UTC timestamp (`2026-11-24T19:00:00Z`, fractions allowed) as a `SystemTime`.
fn parse_timestamp(text: &str) -> Option<SystemTime> {
    let text = text.trim().trim_end_matches('Z');
    let (date, time) = text.split_once('T')?;
    let mut date = date.split('-').map(str::parse::<i64>);
    let (year, month, day) = (date.next()?.ok()?, date.next()?.ok()?, date.next()?.ok()?);
    let time = time.split(['+', '.']).next()?;
    let mut time = time.split(':').map(str::parse::<u64>);
    let (hour, minute, second) = (time.next()?.ok()?, time.next()?.ok()?, time.next()?.ok()?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(days * 86_400 + hour * 3600 + minute * 60 + second))
}

/// Signs every attempt with SigV4 for one region and service (`bedrock`).
pub struct SigV4 {
    region: String,
    service: String,
    credentials: Arc<CredentialChain>,
    fixed: Option<(AwsCredentials, SystemTime)>,
}

impl fmt::Debug for SigV4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigV4")
            .field("region", &self.region)
            .field("service", &self.service)
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

impl SigV4 {
    /// A signer for `service` in `region` over `credentials`.
    pub fn new(
        region: impl Into<String>,
        service: impl Into<String>,
        credentials: Arc<CredentialChain>,
    ) -> Self {
        Self {
            region: region.into(),
            service: service.into(),
            credentials,
            fixed: None,
        }
    }

    /// A signer with fixed credentials and a fixed clock, whose signatures are reproducible
    /// (tests and snapshots).
    pub fn fixed(
        region: impl Into<String>,
        service: impl Into<String>,
        credentials: AwsCredentials,
        time: SystemTime,
    ) -> Self {
        Self {
            region: region.into(),
            service: service.into(),
            credentials: Arc::new(CredentialChain::from_vars([])),
            fixed: Some((credentials, time)),
        }
    }

    /// Signs `request` with `credentials` at `time`: adds `x-amz-date`, `authorization` and,
    /// for temporary credentials, `x-amz-security-token`.
    ///
    /// # Errors
    ///
    /// An [`Authentication`](BackendErrorKind::Authentication) error when the request cannot be
    /// signed (a header value that is not text, say).
    pub fn sign(
        &self,
        request: &mut reqwest::Request,
        credentials: &AwsCredentials,
        time: SystemTime,
    ) -> Result<(), BackendError> {
        use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
        use aws_sigv4::sign::v4;

        let headers: Vec<(&str, &str)> = request
            .headers()
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
            .collect();
        let body = request
            .body()
            .and_then(reqwest::Body::as_bytes)
            .unwrap_or_default();
        let signable = SignableRequest::new(
            request.method().as_str(),
            request.url().as_str(),
            headers.into_iter(),
            SignableBody::Bytes(body),
        )
        .map_err(|error| auth_error(format!("the request cannot be signed: {error}")))?;
        let identity = aws_credential_types::Credentials::new(
            &credentials.access_key_id,
            &credentials.secret_access_key,
            credentials.session_token.clone(),
            credentials.expires,
            "agentry",
        )
        .into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(&self.service)
            .time(time)
            .settings(SigningSettings::default())
            .build()
            .map_err(|error| auth_error(format!("the SigV4 parameters are incomplete: {error}")))?
            .into();
        let (instructions, _signature) = sign(signable, &params)
            .map_err(|error| auth_error(format!("the request cannot be signed: {error}")))?
            .into_parts();
        let (headers, _params) = instructions.into_parts();
        for header in headers {
            let name = HeaderName::from_static(header.name());
            let mut value = HeaderValue::from_str(header.value())
                .map_err(|_| auth_error("a SigV4 header is not a valid HTTP header value"))?;
            value.set_sensitive(header.sensitive() || name == AUTHORIZATION);
            request.headers_mut().insert(name, value);
        }
        Ok(())
    }
}

impl RequestAuth for SigV4 {
    fn authorize<'a>(&'a self, request: &'a mut reqwest::Request) -> AuthFuture<'a> {
        Box::pin(async move {
            let (credentials, time) = match &self.fixed {
                Some((credentials, time)) => (credentials.clone(), *time),
                None => (self.credentials.credentials().await?, SystemTime::now()),
            };
            self.sign(request, &credentials, time)
        })
    }
}

/// A Bedrock API key (`AWS_BEARER_TOKEN_BEDROCK`), sent as `Authorization: Bearer`.
pub struct BearerToken(HeaderValue);

impl BearerToken {
    /// The key.
    ///
    /// # Errors
    ///
    /// An [`Authentication`](BackendErrorKind::Authentication) error for a key that cannot be
    /// an HTTP header.
    pub fn new(token: &str) -> Result<Self, BackendError> {
        Ok(Self(crate::http::secret_header(&format!(
            "Bearer {}",
            token.trim()
        ))?))
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

impl RequestAuth for BearerToken {
    fn authorize<'a>(&'a self, request: &'a mut reqwest::Request) -> AuthFuture<'a> {
        request.headers_mut().insert(AUTHORIZATION, self.0.clone());
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_parse() {
        assert_eq!(
            parse_timestamp("2015-08-30T12:36:00Z"),
            Some(UNIX_EPOCH + Duration::from_secs(1_440_938_160))
        );
        assert_eq!(
            parse_timestamp("2026-11-24T19:00:00.123Z"),
            Some(UNIX_EPOCH + Duration::from_secs(1_795_546_800))
        );
        assert_eq!(parse_timestamp("yesterday"), None);
    }

    #[test]
    fn secrets_never_reach_debug_or_errors() {
        let credentials = AwsCredentials::new(
            "AKIDEXAMPLE",
            "s3cr3t-value",
            Some("t0ken-value".into()),
            None,
        );
        let text = format!("{credentials:?}");
        assert!(text.contains("AKIDEXAMPLE"));
        assert!(
            !text.contains("s3cr3t") && !text.contains("t0ken"),
            "{text}"
        );
        let bearer = BearerToken::new("bedrock-api-key-value").unwrap();
        assert!(!format!("{bearer:?}").contains("bedrock-api-key"));
        let chain = CredentialChain::from_vars([(
            "AWS_ACCESS_KEY_ID".to_owned(),
            "AKIDEXAMPLE".to_owned(),
        )]);
        let error = chain.describe().unwrap_err();
        assert_eq!(error.kind, BackendErrorKind::Authentication);
        assert!(error.message.contains("AWS_SECRET_ACCESS_KEY"));
        let signer = SigV4::fixed("us-east-1", "bedrock", credentials, UNIX_EPOCH);
        assert!(!format!("{signer:?}").contains("s3cr3t"));
    }

    #[test]
    fn the_chain_reads_the_environment_then_the_profile_files() {
        let dir = std::env::temp_dir().join(format!("agentry-aws-{}", std::process::id()));
        std::fs::create_dir_all(dir.join(".aws")).unwrap();
        std::fs::write(
            dir.join(".aws/credentials"),
            "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = d\n\n[work]\n# a comment\naws_access_key_id=AKIDWORK\naws_secret_access_key=w\naws_session_token=tok\n",
        )
        .unwrap();
        std::fs::write(
            dir.join(".aws/config"),
            "[profile cfg]\naws_access_key_id = AKIDCONFIG\naws_secret_access_key = c\n[profile sso]\nsso_session = corp\n",
        )
        .unwrap();
        let home = ("HOME".to_owned(), dir.display().to_string());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let get = |vars: Vec<(&str, &str)>| {
            let chain = CredentialChain::from_vars(
                vars.into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .chain([home.clone()]),
            );
            runtime.block_on(chain.credentials())
        };
        assert_eq!(get(vec![]).unwrap().access_key_id, "AKIDDEFAULT");
        let work = get(vec![("AWS_PROFILE", "work")]).unwrap();
        assert_eq!(
            (work.access_key_id.as_str(), work.session_token.as_deref()),
            ("AKIDWORK", Some("tok"))
        );
        assert_eq!(
            get(vec![("AWS_PROFILE", "cfg")]).unwrap().access_key_id,
            "AKIDCONFIG"
        );
        let sso = get(vec![("AWS_PROFILE", "sso")]).unwrap_err();
        assert!(sso.message.contains("SSO"), "{}", sso.message);
        let missing = get(vec![("AWS_PROFILE", "nope")]).unwrap_err();
        assert!(missing.message.contains("`nope`"));
        let env = get(vec![
            ("AWS_ACCESS_KEY_ID", "AKIDENV"),
            ("AWS_SECRET_ACCESS_KEY", "e"),
        ])
        .unwrap();
        assert_eq!(env.access_key_id, "AKIDENV");
        let none = runtime
            .block_on(CredentialChain::from_vars([]).credentials())
            .unwrap_err();
        assert!(
            none.message.contains("AWS_ACCESS_KEY_ID")
                && none.message.contains("AWS_BEARER_TOKEN_BEDROCK")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ini_sections_are_told_apart() {
        let text = "[a]\nk = 1\n[b]\nk = 2\n";
        assert_eq!(ini_section(text, "b").get("k"), Some(&"2"));
        assert!(ini_section(text, "c").is_empty());
    }
}
