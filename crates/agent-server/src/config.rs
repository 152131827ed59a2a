//! The `[server]` section of `agentry.toml`: where to listen, where sessions live, which
//! models and tools are offered, who may call, and the limits.
//!
//! ```toml
//! [server]
//! listen = "127.0.0.1:8080"
//! tools = ["calculator", "clock"]
//!
//! [server.store]
//! kind = "sqlite"                 # or kind = "postgres", url_env = "DATABASE_URL"
//! path = "agentry-data/sessions.db"
//!
//! [[server.models]]
//! name = "demo"                   # what clients ask for
//! provider = "replay"             # the recorded demo conversation, offline
//! recording = "anthropic"
//!
//! [[server.models]]
//! name = "claude"
//! provider = "anthropic"          # key from ANTHROPIC_API_KEY unless api_key_env says otherwise
//! model = "claude-sonnet-4-5"
//!
//! [[server.tenants]]
//! name = "acme"
//! api_key_env = "ACME_API_KEY"
//! ```
//!
//! Every other key has a default (see [`ServerConfig`]); unknown keys are refused.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use agent_backends::{Api, Provider};
use agent_types::ModelPrice;
use serde::Deserialize;

use crate::error::Error;

/// The server's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// The address to listen on [default: `127.0.0.1:8080`].
    #[serde(default = "defaults::listen")]
    pub listen: String,
    /// Where sessions are stored [default: SQLite at `agentry-data/sessions.db`].
    #[serde(default)]
    pub store: StoreConfig,
    /// The largest request body accepted, in bytes; larger ones get 413 [default: 1 MiB].
    #[serde(default = "defaults::max_body_bytes")]
    pub max_body_bytes: usize,
    /// How long a session waits for remote tool results before its pending calls expire
    /// [default: 3600 s].
    #[serde(default = "defaults::remote_tool_timeout_secs")]
    pub remote_tool_timeout_secs: u64,
    /// How long a client has to send a whole request head, from the connection's start or
    /// the first byte of a later request; a slower one is disconnected [default: 10 s].
    #[serde(default = "defaults::header_read_timeout_secs")]
    pub header_read_timeout_secs: u64,
    /// How long a client has to send a request's JSON body once its head has arrived; a
    /// slower one gets 408 [default: 30 s].
    #[serde(default = "defaults::body_read_timeout_secs")]
    pub body_read_timeout_secs: u64,
    /// How long a keep-alive connection may wait between requests before it is closed
    /// [default: 60 s].
    #[serde(default = "defaults::idle_timeout_secs")]
    pub idle_timeout_secs: u64,
    /// Connections open at once (the MCP endpoint's and `/metrics`' included); the next get
    /// 503 with `Connection: close` [default: 1024].
    #[serde(default = "defaults::max_connections")]
    pub max_connections: usize,
    /// Connections one client address (the TCP peer) may have open at once; the next get
    /// 503. Behind a proxy every client shares its address: set it to `max_connections`
    /// [default: 256].
    #[serde(default = "defaults::max_connections_per_address")]
    pub max_connections_per_address: usize,
    /// On SIGTERM, how long running executes may finish before they are cancelled
    /// [default: 30 s].
    #[serde(default = "defaults::drain_secs")]
    pub drain_secs: u64,
    /// How long one execute may hold its session; a crashed instance's lease expires after
    /// this [default: 900 s].
    #[serde(default = "defaults::execute_lease_secs")]
    pub execute_lease_secs: u64,
    /// Built-in tools the server runs for sessions that ask for them: `calculator`, `clock`,
    /// `read_file` (which needs `root`).
    #[serde(default)]
    pub tools: Vec<String>,
    /// The directory `read_file` may read.
    #[serde(default)]
    pub root: Option<PathBuf>,
    /// With more server tools than this, runs offer them through tool search (`search_tools`
    /// and what it finds; docs/mcp.md, "Large tool catalogs") [default: off].
    #[serde(default)]
    pub tool_search_threshold: Option<usize>,
    /// The most a session may ask for; clients can lower these, never raise them.
    #[serde(default)]
    pub caps: Caps,
    /// Default per-tenant limits.
    #[serde(default)]
    pub limits: Limits,
    /// The models clients may use (the allow-list).
    #[serde(default)]
    pub models: Vec<ModelConfig>,
    /// Who may call, by API key.
    #[serde(default)]
    pub tenants: Vec<TenantConfig>,
    /// Prices per upstream model (USD per million tokens), over the built-in list prices.
    #[serde(default)]
    pub prices: BTreeMap<String, ModelPrice>,
    /// Storage quotas and session expiry, for every tenant unless it overrides them.
    #[serde(default)]
    pub quotas: Quotas,
    /// Limits on failed authentication.
    #[serde(default)]
    pub auth: AuthConfig,
    /// The environment variable holding a token `GET /metrics` then requires as
    /// `Authorization: Bearer <token>` [default: none, /metrics is open].
    #[serde(default)]
    pub metrics_token_env: Option<String>,
    /// Serve `/metrics` on this address only, not on `listen` [default: on `listen`].
    #[serde(default)]
    pub metrics_listen: Option<String>,
    /// The MCP endpoint at `/mcp`: its session bounds.
    #[serde(default)]
    pub mcp: McpConfig,
    /// Write a `model_calls` row per model call and a `tool_calls` row per tool call, per
    /// tenant, in the store's database, and serve `GET /v1/usage` [default: true]. (With
    /// `ServerBuilder::with_store` the rows still go to the configured store's database.)
    #[serde(default = "defaults::accounting")]
    pub accounting: bool,
    /// `Idempotency-Key` on execute and chat completions: how long outcomes are kept and
    /// the bounds (`[server.idempotency]`).
    #[serde(default)]
    pub idempotency: crate::idempotency::IdempotencyConfig,
    /// Where runs execute: in this process, or on Temporal (`[server.durability]`).
    #[serde(default)]
    pub durability: crate::durability::DurabilityConfig,
}

/// The bounds of the MCP endpoint (`/mcp`). Its requests also go through the tenant's
/// request rate, `max_body_bytes`, and its calls through `concurrent_executes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// MCP sessions open at once, over all tenants; one more gets 503 [default: 256].
    #[serde(default = "defaults::mcp_max_sessions")]
    pub max_sessions: usize,
    /// MCP sessions one tenant may have open at once [default: 16].
    #[serde(default = "defaults::mcp_max_sessions_per_tenant")]
    pub max_sessions_per_tenant: usize,
    /// A session with no request for this long is closed, in seconds [default: 600].
    #[serde(default = "defaults::mcp_session_idle_secs")]
    pub session_idle_secs: u64,
}

impl Default for McpConfig {
    fn default() -> Self {
        Self {
            max_sessions: defaults::mcp_max_sessions(),
            max_sessions_per_tenant: defaults::mcp_max_sessions_per_tenant(),
            session_idle_secs: defaults::mcp_session_idle_secs(),
        }
    }
}

/// Limits on failed authentication, per client address (the TCP peer: behind a proxy every
/// client shares the proxy's address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Failed attempts an address may make in one window; the next ones get 429 until the
    /// window ends [default: 10].
    #[serde(default = "defaults::max_failures")]
    pub max_failures: u32,
    /// The window, in seconds [default: 60].
    #[serde(default = "defaults::failure_window_secs")]
    pub failure_window_secs: u64,
    /// Addresses remembered at once (the memory bound; the oldest windows go first)
    /// [default: 10000].
    #[serde(default = "defaults::tracked_addresses")]
    pub tracked_addresses: usize,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            max_failures: defaults::max_failures(),
            failure_window_secs: defaults::failure_window_secs(),
            tracked_addresses: defaults::tracked_addresses(),
        }
    }
}

/// Where sessions live.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum StoreConfig {
    /// A SQLite file (WAL): one server instance.
    Sqlite {
        /// The database file; relative paths are relative to the configuration file.
        #[serde(default = "defaults::sqlite_path")]
        path: PathBuf,
    },
    /// PostgreSQL: several instances can share it.
    Postgres {
        /// The connection URL, e.g. `postgres://agentry@db/agentry`.
        #[serde(default)]
        url: Option<String>,
        /// The environment variable holding the URL (when `url` is not given).
        #[serde(default)]
        url_env: Option<String>,
    },
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self::Sqlite {
            path: defaults::sqlite_path(),
        }
    }
}

impl StoreConfig {
    /// The store's `kind` as the configuration spells it, for error texts (its Debug form
    /// would print a PostgreSQL URL, password and all).
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Sqlite { .. } => "sqlite",
            Self::Postgres { .. } => "postgres",
        }
    }
}

/// A PostgreSQL store's URL: `url`, else the variable `url_env` names.
#[cfg(feature = "postgres")]
pub(crate) fn postgres_url(
    url: Option<&String>,
    url_env: Option<&String>,
) -> Result<String, Error> {
    match (url, url_env) {
        (Some(url), _) => Ok(url.clone()),
        (None, Some(variable)) => std::env::var(variable)
            .map_err(|_| Error::Config(format!("the postgres store's {variable} is not set"))),
        (None, None) => Err(Error::Config("a postgres store needs a url".into())),
    }
}

/// The most any session may use per execute.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Caps {
    /// Tool rounds [default: 10].
    #[serde(default = "defaults::max_iterations")]
    pub max_iterations: u32,
    /// Tokens [default: none].
    #[serde(default)]
    pub token_budget: Option<u64>,
    /// US dollars [default: none].
    #[serde(default)]
    pub max_cost_usd: Option<f64>,
    /// Bytes of each tool result the model sees [default: 65536].
    #[serde(default = "defaults::tool_result_max_bytes")]
    pub tool_result_max_bytes: usize,
    /// Tool calls one round runs; the rest get an error result [default: 32].
    #[serde(default = "defaults::max_tool_calls_per_round")]
    pub max_tool_calls_per_round: usize,
    /// Bytes of one round's results together; later results are replaced by an error
    /// [default: 262144].
    #[serde(default = "defaults::max_round_result_bytes")]
    pub max_round_result_bytes: usize,
    /// Seconds one tool call may take [default: 60].
    #[serde(default = "defaults::tool_timeout_secs")]
    pub tool_timeout_secs: u64,
}

impl Default for Caps {
    fn default() -> Self {
        Self {
            max_iterations: defaults::max_iterations(),
            token_budget: None,
            max_cost_usd: None,
            tool_result_max_bytes: defaults::tool_result_max_bytes(),
            max_tool_calls_per_round: defaults::max_tool_calls_per_round(),
            max_round_result_bytes: defaults::max_round_result_bytes(),
            tool_timeout_secs: defaults::tool_timeout_secs(),
        }
    }
}

/// Per-tenant limits.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Requests per minute, with bursts up to the same number [default: 600].
    #[serde(default = "defaults::requests_per_minute")]
    pub requests_per_minute: u32,
    /// Executes running at once (session executes and chat completions) [default: 16].
    #[serde(default = "defaults::concurrent_executes")]
    pub concurrent_executes: u32,
    /// Spend caps for every tenant without its own (see [`TenantConfig::max_usd_per_day`])
    /// [default: none].
    #[serde(default)]
    pub max_usd_per_day: Option<f64>,
    /// See [`TenantConfig::max_tokens_per_day`] [default: none].
    #[serde(default)]
    pub max_tokens_per_day: Option<u64>,
    /// See [`TenantConfig::max_usd_per_month`] [default: none].
    #[serde(default)]
    pub max_usd_per_month: Option<f64>,
    /// See [`TenantConfig::max_tokens_per_month`] [default: none].
    #[serde(default)]
    pub max_tokens_per_month: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            requests_per_minute: defaults::requests_per_minute(),
            concurrent_executes: defaults::concurrent_executes(),
            max_usd_per_day: None,
            max_tokens_per_day: None,
            max_usd_per_month: None,
            max_tokens_per_month: None,
        }
    }
}

/// One model clients may ask for.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The name clients use.
    pub name: String,
    /// `replay` (a recorded conversation, offline) or a provider API (`openai`,
    /// `openai-responses`, `anthropic`, `gemini`, `ollama`, `openai-compatible`, `bedrock`).
    pub provider: String,
    /// The provider's model name [default: `name`; for `replay`, the recording's model].
    #[serde(default)]
    pub model: Option<String>,
    /// The provider's base URL.
    #[serde(default)]
    pub base_url: Option<String>,
    /// The environment variable with the key [default: the provider's usual one].
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// For `replay`: whose recorded demo conversation (`anthropic`, `openai`, …).
    #[serde(default)]
    pub recording: Option<String>,
    /// For `replay`: a pause before each streamed event, in milliseconds (to hold streams
    /// open like a real provider) [default: 0].
    #[serde(default)]
    pub event_delay_ms: u64,
}

/// Where a model's answers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelSource {
    /// A recorded conversation in this provider's format.
    Replay(Provider),
    /// A provider API.
    Api(Api),
}

impl ModelConfig {
    /// The parsed `provider` (and `recording`).
    ///
    /// # Errors
    ///
    /// An unknown provider or recording name.
    pub fn source(&self) -> Result<ModelSource, Error> {
        if self.provider == "replay" {
            let recording = self.recording.as_deref().unwrap_or("anthropic");
            let api: Api = recording.parse().map_err(|error| {
                Error::Config(format!("model `{}`: recording: {error}", self.name))
            })?;
            return Ok(ModelSource::Replay(api.wire()));
        }
        self.provider
            .parse()
            .map(ModelSource::Api)
            .map_err(|error| Error::Config(format!("model `{}`: {error}", self.name)))
    }
}

/// One tenant.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// The tenant's name (in metrics, logs and the tools' caller identity).
    pub name: String,
    /// API keys, literally (convenient for tests; prefer `api_key_env`).
    #[serde(default)]
    pub api_keys: Vec<String>,
    /// An environment variable holding one more key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Overrides `[server.limits].requests_per_minute`.
    #[serde(default)]
    pub requests_per_minute: Option<u32>,
    /// Overrides `[server.limits].concurrent_executes`.
    #[serde(default)]
    pub concurrent_executes: Option<u32>,
    /// Permissions the tenant's calls carry (tools may require them).
    #[serde(default)]
    pub permissions: Vec<String>,
    /// Overrides `[server.quotas]` for this tenant.
    #[serde(default)]
    pub quotas: QuotaOverrides,
    /// The most US dollars the tenant's model calls may cost per UTC day, over every session,
    /// chat completion and instance sharing the store; overrides `[server.limits]`.
    #[serde(default)]
    pub max_usd_per_day: Option<f64>,
    /// The most tokens (input + output) per UTC day; overrides `[server.limits]`.
    #[serde(default)]
    pub max_tokens_per_day: Option<u64>,
    /// The most US dollars per UTC calendar month; overrides `[server.limits]`.
    #[serde(default)]
    pub max_usd_per_month: Option<f64>,
    /// The most tokens per UTC calendar month; overrides `[server.limits]`.
    #[serde(default)]
    pub max_tokens_per_month: Option<u64>,
    /// Server tools whose calls wait for a person's approval in this tenant's sessions
    /// (docs/approval.md); in chat completions they are denied instead.
    #[serde(default)]
    pub require_approval: Vec<String>,
    /// The tenant's guardrails (docs/guardrails.md).
    #[serde(default)]
    pub guardrails: crate::guardrails::TenantGuardrails,
}

impl TenantConfig {
    /// Every key of this tenant: the literal ones and the one from `api_key_env` when set.
    pub fn keys(&self) -> Vec<String> {
        let mut keys = self.api_keys.clone();
        if let Some(variable) = &self.api_key_env
            && let Ok(key) = std::env::var(variable)
            && !key.is_empty()
        {
            keys.push(key);
        }
        keys
    }
}

/// The built-in tools a server may offer.
pub(crate) const BUILTIN_TOOLS: [&str; 3] = ["calculator", "clock", "read_file"];

impl ServerConfig {
    /// The `[server]` table of an `agentry.toml` (other sections are ignored).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for TOML errors, unknown keys and invalid values.
    pub fn from_toml(text: &str) -> Result<Self, Error> {
        let mut file: toml::Table =
            toml::from_str(text).map_err(|error| Error::Config(error.to_string()))?;
        let server = file
            .remove("server")
            .ok_or_else(|| Error::Config("there is no [server] section".into()))?;
        let config: Self = server
            .try_into()
            .map_err(|error: toml::de::Error| Error::Config(format!("[server]: {error}")))?;
        config.validate()?;
        Ok(config)
    }

    /// Reads `path`; relative paths in it (the SQLite file, `root`, a tenant's guardrail
    /// policy) become relative to the
    /// file's directory.
    ///
    /// # Errors
    ///
    /// As [`from_toml`](Self::from_toml), and [`Error::Io`] when the file cannot be read.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|error| Error::Config(format!("cannot read {}: {error}", path.display())))?;
        let mut config = Self::from_toml(&text)
            .map_err(|error| Error::Config(format!("{}: {error}", path.display())))?;
        let base = path.parent().unwrap_or(Path::new("."));
        if let StoreConfig::Sqlite { path } = &mut config.store
            && path.is_relative()
        {
            *path = base.join(&*path);
        }
        if let Some(root) = &mut config.root
            && root.is_relative()
        {
            *root = base.join(&*root);
        }
        // A tenant's guardrail policy too (crate::guardrails).
        for tenant in &mut config.tenants {
            if let Some(policy) = &mut tenant.guardrails.policy
                && policy.is_relative()
            {
                *policy = base.join(&*policy);
            }
        }
        Ok(config)
    }

    /// Checks what serde cannot: names known and unique, keys present, limits positive.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the first problem.
    pub fn validate(&self) -> Result<(), Error> {
        let fail = |message: String| Err(Error::Config(message));
        self.durability.validate(&self.store)?;
        if self.models.is_empty() {
            return fail("no models: add at least one [[server.models]]".into());
        }
        let mut names = HashSet::new();
        for model in &self.models {
            if !names.insert(&model.name) {
                return fail(format!("model `{}` is listed twice", model.name));
            }
            model.source()?;
            if let Some(url) = &model.base_url {
                check_base_url(&model.name, url)?;
            }
        }
        if self.tenants.is_empty() {
            return fail("no tenants: add at least one [[server.tenants]] with an API key".into());
        }
        if self.header_read_timeout_secs == 0
            || self.body_read_timeout_secs == 0
            || self.idle_timeout_secs == 0
            || self.max_connections == 0
            || self.max_connections_per_address == 0
        {
            return fail(
                "header_read_timeout_secs, body_read_timeout_secs, idle_timeout_secs, \
                 max_connections and max_connections_per_address must be at least 1"
                    .into(),
            );
        }
        if self.mcp.max_sessions == 0
            || self.mcp.max_sessions_per_tenant == 0
            || self.mcp.session_idle_secs == 0
        {
            return fail(
                "[server.mcp]: max_sessions, max_sessions_per_tenant and session_idle_secs must \
                 be at least 1"
                    .into(),
            );
        }
        let mut tenants = HashSet::new();
        for tenant in &self.tenants {
            if !tenants.insert(&tenant.name) {
                return fail(format!("tenant `{}` is listed twice", tenant.name));
            }
            for key in &tenant.api_keys {
                if let Some(problem) = crate::auth::key_problem(key) {
                    return fail(format!("an API key of tenant `{}` {problem}", tenant.name));
                }
            }
            if tenant.api_keys.is_empty() && tenant.api_key_env.is_none() {
                return fail(format!(
                    "tenant `{}` has no API key: set api_keys or api_key_env",
                    tenant.name
                ));
            }
        }
        for tool in &self.tools {
            if !BUILTIN_TOOLS.contains(&tool.as_str()) {
                return fail(format!(
                    "unknown tool `{tool}`; the built-in tools are {}",
                    BUILTIN_TOOLS.join(", ")
                ));
            }
        }
        if self.tools.iter().any(|tool| tool == "read_file") && self.root.is_none() {
            return fail("the read_file tool needs `root`, the directory it may read".into());
        }
        if self.limits.requests_per_minute == 0 || self.limits.concurrent_executes == 0 {
            return fail("limits must be at least 1".into());
        }
        if self.quotas.sweep_interval_secs == 0 {
            return fail("quotas.sweep_interval_secs must be at least 1".into());
        }
        // A zero or negative budget is a mistake, never "one free call".
        if let Some(problem) = agent_loop::budget_problem(
            self.caps.token_budget,
            self.caps.max_cost_usd,
            &[
                (
                    "max_tool_calls_per_round",
                    self.caps.max_tool_calls_per_round,
                ),
                ("max_round_result_bytes", self.caps.max_round_result_bytes),
            ],
        ) {
            return fail(format!("[server.caps] {problem}"));
        }
        // Every run would refuse it (no room for the truncation marker): refused at start-up.
        if agent_tools::TruncationPolicy::new(self.caps.tool_result_max_bytes).is_err() {
            return fail(format!(
                "[server.caps] tool_result_max_bytes = {} is invalid: it must be at least {} \
                 bytes (room for the truncation marker)",
                self.caps.tool_result_max_bytes,
                agent_tools::TruncationPolicy::MIN_MAX_BYTES
            ));
        }
        if self.auth.max_failures == 0
            || self.auth.failure_window_secs == 0
            || self.auth.tracked_addresses == 0
        {
            return fail("[server.auth] values must be at least 1".into());
        }
        check_spend_caps("[server.limits]", &self.limits.spend_caps())?;
        for tenant in &self.tenants {
            check_spend_caps(&format!("tenant `{}`", tenant.name), &tenant.spend_caps())?;
        }
        if let StoreConfig::Postgres {
            url: None,
            url_env: None,
        } = self.store
        {
            return fail("a postgres store needs `url` or `url_env`".into());
        }
        Ok(())
    }
}

/// Storage quotas and session expiry (`[server.quotas]`); `0` is "no limit" (for
/// `session_ttl_secs`, "never expire").
///
/// ```toml
/// [server.quotas]
/// max_sessions = 1000
/// max_stored_bytes = 268435456
/// max_session_bytes = 8388608
/// session_ttl_secs = 2592000
///
/// [[server.tenants]]
/// name = "big"
/// api_key_env = "BIG_KEY"
/// quotas = { max_sessions = 100000 }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quotas {
    /// Sessions one tenant may hold; a create beyond it gets 429 [default: 1000].
    #[serde(default = "defaults::max_sessions")]
    pub max_sessions: u64,
    /// Bytes of stored sessions one tenant may hold; a create that would go over it, or an
    /// execute once over it, gets 413 [default: 256 MiB].
    #[serde(default = "defaults::max_stored_bytes")]
    pub max_stored_bytes: u64,
    /// Bytes of one session's stored history: a create larger than this, or an execute on a
    /// session that has grown to it, gets 413 [default: 8 MiB].
    #[serde(default = "defaults::max_session_bytes")]
    pub max_session_bytes: u64,
    /// Seconds a session may sit unwritten before it is deleted [default: 30 days].
    #[serde(default = "defaults::session_ttl_secs")]
    pub session_ttl_secs: u64,
    /// How often expired sessions are deleted, in seconds [default: 60].
    #[serde(default = "defaults::sweep_interval_secs")]
    pub sweep_interval_secs: u64,
}

impl Default for Quotas {
    fn default() -> Self {
        Self {
            max_sessions: defaults::max_sessions(),
            max_stored_bytes: defaults::max_stored_bytes(),
            max_session_bytes: defaults::max_session_bytes(),
            session_ttl_secs: defaults::session_ttl_secs(),
            sweep_interval_secs: defaults::sweep_interval_secs(),
        }
    }
}

/// One tenant's overrides of [`Quotas`] (`quotas = { ... }` in its `[[server.tenants]]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaOverrides {
    /// Overrides [`Quotas::max_sessions`].
    #[serde(default)]
    pub max_sessions: Option<u64>,
    /// Overrides [`Quotas::max_stored_bytes`].
    #[serde(default)]
    pub max_stored_bytes: Option<u64>,
    /// Overrides [`Quotas::max_session_bytes`].
    #[serde(default)]
    pub max_session_bytes: Option<u64>,
    /// Overrides [`Quotas::session_ttl_secs`].
    #[serde(default)]
    pub session_ttl_secs: Option<u64>,
}

impl Quotas {
    /// These quotas with a tenant's overrides applied.
    #[must_use]
    pub fn with(self, overrides: &QuotaOverrides) -> Self {
        Self {
            max_sessions: overrides.max_sessions.unwrap_or(self.max_sessions),
            max_stored_bytes: overrides.max_stored_bytes.unwrap_or(self.max_stored_bytes),
            max_session_bytes: overrides
                .max_session_bytes
                .unwrap_or(self.max_session_bytes),
            session_ttl_secs: overrides.session_ttl_secs.unwrap_or(self.session_ttl_secs),
            sweep_interval_secs: self.sweep_interval_secs,
        }
    }
}

/// A model's `base_url` may not carry credentials: userinfo (`user:pass@`) or a query
/// string would be sent with every request and echoed by errors. Keys go in `api_key_env`.
fn check_base_url(model: &str, url: &str) -> Result<(), Error> {
    let fail = |what: &str| {
        Err(Error::Config(format!(
            "model `{model}`: base_url must not contain {what}; put the key in api_key_env"
        )))
    };
    let Some((_, rest)) = url.split_once("://") else {
        return Err(Error::Config(format!(
            "model `{model}`: base_url must start with http:// or https://"
        )));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return fail("a user name or password (user:pass@)");
    }
    if url.contains('?') {
        return fail("a query string");
    }
    if url.contains('#') {
        return fail("a fragment");
    }
    Ok(())
}

impl Limits {
    fn spend_caps(&self) -> [(&'static str, Option<f64>); 4] {
        spend_caps(
            self.max_usd_per_day,
            self.max_tokens_per_day,
            self.max_usd_per_month,
            self.max_tokens_per_month,
        )
    }
}

impl TenantConfig {
    fn spend_caps(&self) -> [(&'static str, Option<f64>); 4] {
        spend_caps(
            self.max_usd_per_day,
            self.max_tokens_per_day,
            self.max_usd_per_month,
            self.max_tokens_per_month,
        )
    }
}

#[allow(clippy::cast_precision_loss)]
fn spend_caps(
    usd_day: Option<f64>,
    tokens_day: Option<u64>,
    usd_month: Option<f64>,
    tokens_month: Option<u64>,
) -> [(&'static str, Option<f64>); 4] {
    [
        ("max_usd_per_day", usd_day),
        ("max_tokens_per_day", tokens_day.map(|cap| cap as f64)),
        ("max_usd_per_month", usd_month),
        ("max_tokens_per_month", tokens_month.map(|cap| cap as f64)),
    ]
}

/// A spend cap of 0, below 0 or not a number would be one free call or none: refused.
fn check_spend_caps(whose: &str, caps: &[(&'static str, Option<f64>)]) -> Result<(), Error> {
    for (key, cap) in caps {
        if let Some(cap) = cap
            && !(cap.is_finite() && *cap > 0.0)
        {
            return Err(Error::Config(format!(
                "{whose}: {key} = {cap} must be a positive number (leave it out for no cap)"
            )));
        }
    }
    Ok(())
}

mod defaults {
    use std::path::PathBuf;

    pub(super) fn accounting() -> bool {
        true
    }

    pub(super) fn mcp_max_sessions() -> usize {
        256
    }

    pub(super) fn mcp_max_sessions_per_tenant() -> usize {
        16
    }

    pub(super) fn mcp_session_idle_secs() -> u64 {
        600
    }

    pub(super) fn listen() -> String {
        "127.0.0.1:8080".into()
    }
    pub(super) fn sqlite_path() -> PathBuf {
        PathBuf::from("agentry-data/sessions.db")
    }
    pub(super) fn max_body_bytes() -> usize {
        1024 * 1024
    }
    pub(super) fn remote_tool_timeout_secs() -> u64 {
        3600
    }
    pub(super) fn header_read_timeout_secs() -> u64 {
        10
    }
    pub(super) fn body_read_timeout_secs() -> u64 {
        30
    }
    pub(super) fn idle_timeout_secs() -> u64 {
        60
    }
    pub(super) fn max_connections() -> usize {
        1024
    }
    pub(super) fn max_connections_per_address() -> usize {
        256
    }
    pub(super) fn drain_secs() -> u64 {
        30
    }
    pub(super) fn execute_lease_secs() -> u64 {
        900
    }
    pub(super) fn max_iterations() -> u32 {
        10
    }
    pub(super) fn tool_result_max_bytes() -> usize {
        65_536
    }
    pub(super) fn max_tool_calls_per_round() -> usize {
        agent_loop::Options::DEFAULT_MAX_TOOL_CALLS_PER_ROUND
    }
    pub(super) fn max_round_result_bytes() -> usize {
        agent_loop::Options::DEFAULT_MAX_ROUND_RESULT_BYTES
    }
    pub(super) fn tool_timeout_secs() -> u64 {
        60
    }
    pub(super) fn requests_per_minute() -> u32 {
        600
    }
    pub(super) fn concurrent_executes() -> u32 {
        16
    }
    pub(super) fn max_sessions() -> u64 {
        1000
    }
    pub(super) fn max_stored_bytes() -> u64 {
        256 * 1024 * 1024
    }
    pub(super) fn max_session_bytes() -> u64 {
        8 * 1024 * 1024
    }
    pub(super) fn session_ttl_secs() -> u64 {
        30 * 24 * 3600
    }
    pub(super) fn sweep_interval_secs() -> u64 {
        60
    }
    pub(super) fn max_failures() -> u32 {
        10
    }
    pub(super) fn failure_window_secs() -> u64 {
        60
    }
    pub(super) fn tracked_addresses() -> usize {
        10_000
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        [server]
        [[server.models]]
        name = "demo"
        provider = "replay"
        [[server.tenants]]
        name = "acme"
        api_keys = ["key-acme-test-0001-test-0001"]
    "#;

    #[test]
    fn a_minimal_config_gets_the_documented_defaults() {
        let config = ServerConfig::from_toml(MINIMAL).unwrap();
        assert_eq!(config.listen, "127.0.0.1:8080");
        assert_eq!(config.max_body_bytes, 1024 * 1024);
        assert_eq!(config.remote_tool_timeout_secs, 3600);
        assert_eq!(config.limits.concurrent_executes, 16);
        assert_eq!(config.quotas.max_sessions, 1000);
        assert_eq!(config.quotas.session_ttl_secs, 30 * 24 * 3600);
        assert_eq!(config.caps.max_tool_calls_per_round, 32);
        assert_eq!(config.caps.max_round_result_bytes, 262_144);
        assert_eq!(
            config.models[0].source().unwrap(),
            ModelSource::Replay(Provider::Anthropic)
        );
    }

    #[test]
    fn the_cloud_providers_are_model_sources() {
        for (name, api) in [
            ("vertex-gemini", Api::VertexGemini),
            ("vertex-anthropic", Api::VertexAnthropic),
            ("azure-openai", Api::AzureOpenai),
            ("azure-openai-responses", Api::AzureOpenaiResponses),
        ] {
            let toml = MINIMAL.replace("provider = \"replay\"", &format!("provider = \"{name}\""));
            let config = ServerConfig::from_toml(&toml).unwrap();
            assert_eq!(config.models[0].source().unwrap(), ModelSource::Api(api));
        }
    }

    #[test]
    fn the_connection_bounds_have_safe_defaults_and_a_store_is_named_by_its_kind() {
        let config = ServerConfig::from_toml(MINIMAL).unwrap();
        assert_eq!(config.header_read_timeout_secs, 10);
        assert_eq!(config.body_read_timeout_secs, 30);
        assert_eq!(config.idle_timeout_secs, 60);
        assert_eq!(config.max_connections, 1024);
        assert_eq!(config.max_connections_per_address, 256);
        let store = StoreConfig::Postgres {
            url: Some("postgres://agentry:SECRET@db/agentry".into()),
            url_env: None,
        };
        assert_eq!(store.kind(), "postgres");
        assert_eq!(StoreConfig::default().kind(), "sqlite");
    }

    #[test]
    fn a_result_cap_every_run_would_refuse_is_refused_at_load() {
        let error = ServerConfig::from_toml(&format!(
            "{MINIMAL}\n[server.caps]\ntool_result_max_bytes = 10"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("[server.caps] tool_result_max_bytes = 10 is invalid")
                && error.contains("at least 64"),
            "{error}"
        );
        let config = ServerConfig::from_toml(&format!(
            "{MINIMAL}\n[server.caps]\ntool_result_max_bytes = 64"
        ))
        .unwrap();
        assert_eq!(config.caps.tool_result_max_bytes, 64);
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            ("[server]\nlisten_on = 1", "listen_on"),
            (&MINIMAL.replace("replay", "openia"), "openia"),
            (
                &format!("{MINIMAL}\n[server.store]\nkind = \"postgres\""),
                "url_env",
            ),
            (
                &MINIMAL.replace("[server]", "[server]\ntools = [\"shell\"]"),
                "shell",
            ),
            (
                &MINIMAL.replace("[server]", "[server]\ntools = [\"read_file\"]"),
                "root",
            ),
            (
                &format!("{MINIMAL}\n[server.caps]\ntoken_budget = 0"),
                "[server.caps] token_budget = 0 is invalid",
            ),
            (
                &format!("{MINIMAL}\n[server.caps]\nmax_cost_usd = -1.0"),
                "[server.caps] max_cost_usd = -1 is invalid",
            ),
            (
                &format!("{MINIMAL}\n[server.caps]\nmax_round_result_bytes = 0"),
                "[server.caps] max_round_result_bytes = 0 is invalid",
            ),
            (
                &MINIMAL.replace("api_keys = [\"key-acme-test-0001-test-0001\"]", ""),
                "no API key",
            ),
            (
                &MINIMAL.replace("key-acme-test-0001-test-0001", "short-key"),
                "shorter than 16",
            ),
            (
                &MINIMAL.replace("key-acme-test-0001-test-0001", " padded-key-0123456789 "),
                "whitespace",
            ),
            (
                &MINIMAL.replace(
                    "provider = \"replay\"",
                    "provider = \"openai\"\nbase_url = \"http://h/v1?api_key=SECRET\"",
                ),
                "query string",
            ),
            (
                &MINIMAL.replace(
                    "provider = \"replay\"",
                    "provider = \"openai\"\nbase_url = \"https://user:pw@h/v1\"",
                ),
                "user name or password",
            ),
            ("provider = \"x\"", "no [server] section"),
            (
                &MINIMAL.replace("[server]", "[server]\nquotas = { max_session = 1 }"),
                "max_session",
            ),
            (
                &MINIMAL.replace("[server]", "[server]\nquotas = { sweep_interval_secs = 0 }"),
                "sweep_interval_secs",
            ),
        ];
        for (text, expected) in cases {
            let error = ServerConfig::from_toml(text).unwrap_err().to_string();
            assert!(error.contains(expected), "{expected}: {error}");
        }
    }
}
