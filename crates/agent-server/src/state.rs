//! What every request handler shares: tenants, models, tools, the store, metrics and the
//! running executes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent_backends::replay::{RecordedConversation, demo};
use agent_tools::{Caller, Registry, Tool, builtin};
use agent_types::{Backend, RateCard};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::auth::{Failures, Keys, Token, key_problem};
use crate::config::{ModelSource, Quotas, ServerConfig, StoreConfig};
use crate::error::Error;
use crate::limits::{Gate, RateLimiter};
use crate::metrics::Metrics;
use crate::store::SessionStore;

/// The server's shared state; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: ServerConfig,
    /// Tenants by API key (digests).
    pub(crate) tenants: Keys,
    /// Failed authentications by client address.
    pub(crate) auth_failures: Failures,
    /// The token `/metrics` requires, when configured.
    pub(crate) metrics_token: Option<Token>,
    /// Models by the name clients use.
    pub(crate) models: HashMap<String, Model>,
    /// Server-side tools.
    pub(crate) tools: Arc<Registry>,
    /// The tools prepared for tool search once, with `tool_search_threshold`.
    pub(crate) search: Option<agent_loop::SearchableTools>,
    /// `/mcp`: the tools as an MCP server for the tenants.
    pub(crate) mcp: agent_mcp::server::HttpService,
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) metrics: Metrics,
    pub(crate) rate_card: Arc<RateCard>,
    pub(crate) runs: Arc<Runs>,
    /// This instance's id, the prefix of its lease holders.
    pub(crate) instance: String,
    /// Per-tenant spend caps and their ledger.
    pub(crate) spend: Arc<crate::spend::Spend>,
    /// The accounting rows' queue and tables (`None` with `accounting = false`).
    pub(crate) accounting: Option<crate::usage::Accounting>,
    /// The `/v1/ui/chat` runs going on, recorded for resuming clients.
    pub(crate) ui_runs: Arc<crate::ui_resume::ActiveRuns>,
    /// `[server.durability] engine = "temporal"`: execute runs on Temporal.
    #[cfg(feature = "temporal")]
    pub(crate) durable: Option<Arc<crate::durability::Durable>>,
}

/// A tenant: its identity for tools and its limits.
pub(crate) struct Tenant {
    pub(crate) name: String,
    pub(crate) caller: Arc<Caller>,
    pub(crate) rate: RateLimiter,
    pub(crate) gate: Gate,
    /// Its storage quotas and session expiry (the server's, with its overrides).
    pub(crate) quotas: Quotas,
    /// The tools whose calls wait for approval.
    pub(crate) require_approval: Arc<std::collections::BTreeSet<String>>,
    /// Its guardrails (crate::guardrails), built once.
    pub(crate) guardrails: agent_loop::Guardrails,
}

/// A model on the allow-list.
#[derive(Clone)]
pub(crate) struct Model {
    /// The provider's name for it (what the request carries).
    pub(crate) upstream: String,
    /// Its backend with the upstream model, built once and shared by every run; a run
    /// brings its own options (`execute::agent_for`).
    pub(crate) agent: agent_loop::Agent,
    /// The ranges its provider accepts for the generation settings.
    pub(crate) limits: agent_backends::SettingsLimits,
}

impl AppState {
    /// The server's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The server's configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// Executes running now.
    pub fn running(&self) -> usize {
        self.inner.runs.count()
    }
}

/// Builds an [`AppState`] from a configuration, with optional extra tools, models and a
/// store of your own.
pub struct ServerBuilder {
    config: ServerConfig,
    tools: Vec<Tool>,
    models: Vec<(String, Model)>,
    store: Option<Arc<dyn SessionStore>>,
    spend_ledger: Option<Arc<dyn crate::spend::SpendLedger>>,
    clock: Option<crate::spend::Clock>,
}

impl ServerBuilder {
    /// A builder for `config`.
    pub fn new(config: ServerConfig) -> Self {
        Self {
            config,
            tools: Vec::new(),
            models: Vec::new(),
            store: None,
            spend_ledger: None,
            clock: None,
        }
    }

    /// Keeps the tenants' spend in `ledger` instead of the store's database.
    #[must_use]
    pub fn with_spend_ledger(mut self, ledger: Arc<dyn crate::spend::SpendLedger>) -> Self {
        self.spend_ledger = Some(ledger);
        self
    }

    /// Reads the time for the spend caps' UTC days and months from `clock` (tests move it).
    #[must_use]
    pub fn with_clock(mut self, clock: crate::spend::Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Adds a server-side tool of your own (sessions pick tools by name).
    #[must_use]
    pub fn with_tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds a model backed by `backend` under `name` (calls carry `upstream` as the model).
    #[must_use]
    pub fn with_model(
        mut self,
        name: impl Into<String>,
        upstream: impl Into<String>,
        backend: Arc<dyn Backend>,
    ) -> Self {
        let upstream = upstream.into();
        self.models.push((
            name.into(),
            Model {
                agent: agent_loop::Agent::builder_shared(backend, upstream.clone()).build(),
                upstream,
                limits: agent_backends::SettingsLimits::universal(),
            },
        ));
        self
    }

    /// Uses `store` instead of the one the configuration names.
    #[must_use]
    pub fn with_store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Opens the store, builds the backends, tools and tenants.
    ///
    /// # Errors
    ///
    /// An invalid configuration, a store that cannot be opened, a model whose backend
    /// cannot be built (an unknown provider, a missing key).
    pub async fn build(self) -> Result<AppState, Error> {
        let Self {
            config,
            tools: extra_tools,
            models: extra_models,
            store,
            spend_ledger,
            clock,
        } = self;
        let mut tools = Registry::new();
        for name in &config.tools {
            let tool = match name.as_str() {
                "calculator" => builtin::calculator(),
                "clock" => builtin::clock(),
                "read_file" => {
                    let root = config
                        .root
                        .as_deref()
                        .ok_or_else(|| Error::Config("the read_file tool needs `root`".into()))?;
                    builtin::read_file(root).map_err(|error| Error::Config(error.to_string()))?
                }
                other => return Err(Error::Config(format!("unknown tool `{other}`"))),
            };
            tools
                .register(tool)
                .map_err(|error| Error::Config(error.to_string()))?;
        }
        for tool in extra_tools {
            tools
                .register(tool)
                .map_err(|error| Error::Config(error.to_string()))?;
        }

        let mut models = HashMap::new();
        for model in &config.models {
            models.insert(model.name.clone(), build_model(model)?);
        }
        models.extend(extra_models);

        let mut tenants = Keys::default();
        for tenant in &config.tenants {
            let limits = config.limits;
            let shared = Arc::new(Tenant {
                name: tenant.name.clone(),
                caller: Arc::new(
                    Caller::new(tenant.name.clone())
                        .with_tenant(tenant.name.clone())
                        .with_permissions(tenant.permissions.iter().cloned()),
                ),
                rate: RateLimiter::new(
                    tenant
                        .requests_per_minute
                        .unwrap_or(limits.requests_per_minute),
                ),
                gate: Gate::new(
                    tenant
                        .concurrent_executes
                        .unwrap_or(limits.concurrent_executes),
                ),
                quotas: config.quotas.with(&tenant.quotas),
                require_approval: crate::approval::tenant_tools(tenant, &tools)?,
                guardrails: crate::guardrails::build(tenant)?,
            });
            let keys = tenant.keys();
            if keys.is_empty() {
                return Err(Error::Config(format!(
                    "tenant `{}` has no API key (is {} set?)",
                    tenant.name,
                    tenant.api_key_env.as_deref().unwrap_or("its api_key_env")
                )));
            }
            for key in keys {
                if let Some(problem) = key_problem(&key) {
                    return Err(Error::Config(format!(
                        "an API key of tenant `{}` {problem}",
                        tenant.name
                    )));
                }
                if !tenants.insert(&key, Arc::clone(&shared)) {
                    return Err(Error::Config(format!(
                        "an API key of tenant `{}` is also another tenant's",
                        tenant.name
                    )));
                }
            }
        }

        let metrics_token = match &config.metrics_token_env {
            None => None,
            Some(variable) => {
                let token = std::env::var(variable).map_err(|_| {
                    Error::Config(format!("metrics_token_env: {variable} is not set"))
                })?;
                if let Some(problem) = key_problem(&token) {
                    return Err(Error::Config(format!(
                        "the metrics token in {variable} {problem}"
                    )));
                }
                Some(Token::new(&token))
            }
        };
        let auth_failures = Failures::new(&config.auth);

        let store = match store {
            Some(store) => store,
            None => open_store(&config.store).await?,
        };
        let spend = crate::spend::Spend::open(&config, spend_ledger, clock).await?;
        let accounting = if config.accounting {
            Some(crate::usage::Accounting::open(&config.store).await?)
        } else {
            None
        };
        let mut rate_card = RateCard::list_prices();
        for (model, price) in &config.prices {
            rate_card.insert(model.clone(), *price);
        }
        #[cfg(feature = "temporal")]
        let durable = crate::durability::open(&config).await?;
        let metrics = Metrics::with_tools(tools.iter().map(|tool| tool.name().to_owned()));
        let mcp = crate::mcp::service(&config, &tools)?;
        let tools = Arc::new(tools);
        let search = config
            .tool_search_threshold
            .map(|threshold| {
                let search = agent_loop::ToolSearch::new().with_threshold(threshold);
                agent_loop::SearchableTools::new(Arc::clone(&tools), search)
            })
            .transpose()
            .map_err(|error| Error::Config(error.message))?;
        Ok(AppState {
            inner: Arc::new(Inner {
                config,
                tenants,
                auth_failures,
                metrics_token,
                models,
                tools,
                search,
                mcp,
                store,
                metrics,
                rate_card: Arc::new(rate_card),
                runs: Arc::default(),
                instance: instance_id(),
                spend: Arc::new(spend),
                accounting,
                ui_runs: Arc::default(),
                #[cfg(feature = "temporal")]
                durable,
            }),
        })
    }
}

fn build_model(model: &crate::config::ModelConfig) -> Result<Model, Error> {
    let fail = |reason: String| Error::Model {
        model: model.name.clone(),
        reason,
    };
    match model.source()? {
        ModelSource::Replay(provider) => {
            let (recorded_model, rounds) = demo(provider);
            let mut backend = RecordedConversation::new(provider, rounds)
                .map_err(|error| fail(error.to_string()))?;
            if model.event_delay_ms > 0 {
                backend = backend.with_event_delay(Duration::from_millis(model.event_delay_ms));
            }
            let upstream = model
                .model
                .clone()
                .unwrap_or_else(|| recorded_model.to_owned());
            Ok(Model {
                limits: provider.settings_limits(&upstream),
                agent: agent_loop::Agent::builder(backend, upstream.clone()).build(),
                upstream,
            })
        }
        ModelSource::Api(api) => {
            let key = match &model.api_key_env {
                Some(variable) => Some(
                    std::env::var(variable)
                        .map_err(|_| fail(format!("its key variable {variable} is not set")))?,
                ),
                None => None,
            };
            let backend = api
                .connect(model.base_url.as_deref(), key)
                .map_err(|error| fail(error.to_string()))?;
            let upstream = model.model.clone().unwrap_or_else(|| model.name.clone());
            Ok(Model {
                limits: api.settings_limits(&upstream),
                agent: agent_loop::Agent::builder_shared(Arc::from(backend), upstream.clone())
                    .build(),
                upstream,
            })
        }
    }
}

async fn open_store(config: &StoreConfig) -> Result<Arc<dyn SessionStore>, Error> {
    match config {
        #[cfg(feature = "sqlite")]
        // The store creates the file's directory itself, private (0700).
        StoreConfig::Sqlite { path } => Ok(Arc::new(
            crate::store::SqliteStore::open(path.clone()).await?,
        )),
        #[cfg(feature = "postgres")]
        StoreConfig::Postgres { url, url_env } => {
            let url = crate::config::postgres_url(url.as_ref(), url_env.as_ref())?;
            Ok(Arc::new(crate::store::PostgresStore::connect(&url).await?))
        }
        #[allow(unreachable_patterns)]
        other => Err(Error::Config(format!(
            "this build has no `{}` store; enable its feature",
            other.kind()
        ))),
    }
}

/// A process-unique id: host-independent, time-ordered, good enough to tell two instances'
/// leases apart.
fn instance_id() -> String {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis());
    format!("inst_{millis:x}_{:x}", std::process::id())
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

/// The executes running on this instance, so a shutdown can wait for them or cancel them.
#[derive(Default)]
pub(crate) struct Runs {
    active: Mutex<HashMap<u64, CancellationToken>>,
    next: AtomicU64,
    idle: Notify,
    draining: AtomicBool,
}

/// One registered run; dropping it unregisters the run.
pub(crate) struct RunGuard {
    runs: Arc<Runs>,
    id: u64,
}

impl Runs {
    /// Registers a run cancelled by `token`; `None` once the server is draining.
    pub(crate) fn register(self: &Arc<Self>, token: CancellationToken) -> Option<RunGuard> {
        if self.draining.load(Ordering::SeqCst) {
            return None;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, token);
        Some(RunGuard {
            runs: Arc::clone(self),
            id,
        })
    }

    /// Refuses new runs from now on.
    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Whether new runs are refused.
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Cancels every running execute.
    pub(crate) fn cancel_all(&self) {
        for token in self.lock().values() {
            token.cancel();
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.lock().len()
    }

    /// Waits until no run is registered.
    pub(crate) async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, CancellationToken>> {
        self.active.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        let mut active = self.runs.lock();
        active.remove(&self.id);
        if active.is_empty() {
            self.runs.idle.notify_waiters();
        }
    }
}
