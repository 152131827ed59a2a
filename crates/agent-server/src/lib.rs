//! The agentry server: agent sessions over HTTP and SSE, an OpenAI-compatible endpoint,
//! tenants with API keys and limits, and session storage several instances can share.
//!
//! | endpoint | what it does |
//! |---|---|
//! | `POST /v1/sessions` | create a session (model from the allow-list, tools, remote tools, budgets) |
//! | `POST /v1/sessions/{id}/execute` | run it from a user message or remote tool results; SSE of agent events ending with `execute_complete` |
//! | `GET /v1/sessions` | the caller's sessions, paginated |
//! | `GET /v1/sessions/{id}`, `DELETE /v1/sessions/{id}` | read or remove it (409 while it executes) |
//! | `POST /v1/chat/completions` | OpenAI-compatible; server tools run in the loop, client tools come back as `tool_calls` |
//! | `POST /v1/ui/chat` | the AI SDK's UI message stream (`useChat`) over a session named by the chat's id |
//! | `GET /v1/ui/chat/{id}/stream` | resumes the chat's running stream (replayed, then live; 204 when none) |
//! | `POST /v1/ag-ui` | AG-UI (`HttpAgent`, CopilotKit) over a session named by the thread id |
//! | `POST /v1/responses`, `GET /v1/responses/{id}` | OpenAI Responses-compatible; `previous_response_id` continues a stored response |
//! | `GET /v1/models`, `GET /v1/models/{id}` | the allow-list, as OpenAI lists models |
//! | `GET /healthz`, `GET /metrics` | liveness; Prometheus text |
//! | `GET /console`, `GET /v1/sessions/{id}/timeline` | the web console (docs/console.md); a session's calls with timings |
//!
//! Configuration is the `[server]` section of `agentry.toml` ([`ServerConfig`]); `docs/server.md`
//! has the reference, every endpoint with a curl example, the event format and the error
//! bodies.
//!
//! # Example
//!
//! ```no_run
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_server::{ServerBuilder, ServerConfig, serve};
//!
//! let config = ServerConfig::from_file("agentry.toml")?;
//! let listener = tokio::net::TcpListener::bind(&config.listen).await?;
//! let state = ServerBuilder::new(config).build().await?;
//! serve(listener, state, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(())
//! # }
//! ```

mod ag_ui;
mod ag_ui_state;
mod approval;
mod attachments;
mod auth;
mod checkpoint;
mod checkpoint_retry;
mod config;
mod connections;
pub mod console;
mod durability;
pub mod encode;
mod error;
mod exact_json;
mod execute;
mod frontend;
mod guardrails;
mod http;
mod id;
mod idempotency;
mod limits;
mod mcp;
mod metrics;
mod openai;
mod path_id;
mod quota;
mod result_gate;
mod session_list;
mod sessions;
pub mod spend;
mod sse_batch;
mod state;
pub mod store;
mod sweeper;
mod ui_resume;
mod ui_stream;
mod usage;

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;

pub use auth::{MIN_KEY_CHARS, key_problem};
pub use config::{
    AuthConfig, Caps, Limits, McpConfig, ModelConfig, ModelSource, QuotaOverrides, Quotas,
    ServerConfig, StoreConfig, TenantConfig,
};
pub use durability::{DurabilityConfig, DurabilityError, Engine as DurabilityEngine};
pub use error::{ApiError, Error};
pub use execute::ExecuteComplete;
pub use guardrails::TenantGuardrails;
pub use idempotency::IdempotencyConfig;
pub use metrics::Metrics;
pub use sessions::NewSession;
pub use state::{AppState, ServerBuilder};

/// The server's routes (`/metrics` among them unless `metrics_listen` moves it).
///
/// Failed authentications are limited per client address only when the router is served
/// with `into_make_service_with_connect_info::<SocketAddr>()`, as [`serve`] does.
pub fn router(state: AppState) -> Router {
    openai::models::start();
    let routes = Router::new()
        .route("/v1/sessions", post(sessions::create).get(sessions::list))
        .route(
            "/v1/sessions/{id}",
            get(sessions::get).delete(sessions::delete),
        )
        .route(
            "/v1/sessions/{id}/execute",
            post(execute::handler).layer(axum::middleware::from_fn_with_state(
                state.clone(),
                idempotency::guard,
            )),
        )
        .route(
            "/v1/chat/completions",
            post(openai::chat_completions).layer(axum::middleware::from_fn_with_state(
                state.clone(),
                idempotency::guard,
            )),
        )
        .route("/v1/ui/chat", post(ui_stream::chat))
        .route("/v1/ui/chat/{id}/stream", get(ui_resume::resume))
        .route("/v1/ag-ui", post(ag_ui::run))
        .route(
            "/v1/responses",
            post(openai::responses::create).layer(axum::middleware::from_fn_with_state(
                state.clone(),
                idempotency::guard,
            )),
        )
        .route("/v1/responses/{id}", get(openai::responses::retrieve))
        .route("/v1/usage", get(usage::usage))
        .route("/v1/models", get(openai::models::list))
        .route("/v1/models/{*id}", get(openai::models::retrieve))
        .route("/healthz", get(healthz))
        .merge(console::routes())
        .merge(
            Router::new()
                .route_service("/mcp", state.inner.mcp.clone())
                .route_layer(axum::middleware::from_fn_with_state(
                    state.clone(),
                    mcp::admit,
                )),
        );
    let routes = if state.inner.config.metrics_listen.is_some() {
        routes
    } else {
        routes.route("/metrics", get(metrics))
    };
    finish(routes, state)
}

/// `/metrics` alone, for `metrics_listen`.
pub fn metrics_router(state: AppState) -> Router {
    finish(Router::new().route("/metrics", get(metrics)), state)
}

/// What every listener's routes share: JSON 404/405 fallbacks and the request metric.
fn finish(routes: Router<AppState>, state: AppState) -> Router {
    routes
        .fallback(openai::unknown_route)
        .method_not_allowed_fallback(openai::wrong_method)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            http::track,
        ))
        .with_state(state)
}

async fn healthz(State(state): State<AppState>) -> Response {
    if state.inner.runs.is_draining() {
        return ApiError::unavailable("draining").into_response();
    }
    axum::Json(serde_json::json!({"status": "ok", "running": state.running()})).into_response()
}

async fn metrics(State(state): State<AppState>, headers: axum::http::HeaderMap) -> Response {
    if let Some(token) = &state.inner.metrics_token
        && !http::presented_key(&headers).is_some_and(|presented| token.matches(presented))
    {
        return ApiError::unauthorized().into_response();
    }
    let mut response = state.inner.metrics.render().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}

/// A listener on `address` with a backlog of 1024 pending connections (tokio's `bind` allows
/// 128, which drops connects when many clients arrive at once).
///
/// # Errors
///
/// [`Error::Io`] when the address cannot be parsed or bound.
pub async fn bind(address: &str) -> Result<TcpListener, Error> {
    let address: std::net::SocketAddr =
        tokio::net::lookup_host(address)
            .await?
            .next()
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("no address for {address}"),
                )
            })?;
    let socket = if address.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    Ok(socket.listen(1024)?)
}

/// After the drain deadline, how long cancelled runs get to save their sessions and
/// connections get to close before the server stops waiting for them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// After the drain deadline and the last run, how long connections get to take their last
/// events before the server stops waiting for them.
const LINGER: Duration = Duration::from_secs(1);

/// Serves `state` on `listener` until `shutdown` completes, then drains: new requests get
/// 503, running executes have `drain_secs` to finish, then are cancelled (each still ends
/// properly and saves its session; a client that stopped reading loses its stream), and the
/// call returns once every run has saved — at the latest a few seconds after the drain
/// deadline, whatever the clients do. With `metrics_listen`, `/metrics` is served there.
///
/// # Errors
///
/// [`Error::Io`] when serving fails or `metrics_listen` cannot be bound.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let runs = std::sync::Arc::clone(&state.inner.runs);
    let drain = Duration::from_secs(state.inner.config.drain_secs);
    summary(&listener, &state);
    let metrics_server = match &state.inner.config.metrics_listen {
        None => None,
        Some(address) => {
            let metrics_listener = bind(address).await?;
            if let Ok(address) = metrics_listener.local_addr() {
                tracing::info!(address = %address, "metrics listening");
            }
            let app = metrics_router(state.clone());
            let bounds = connections::Bounds::of(&state.inner.config);
            let served = state.clone();
            Some(tokio::spawn(connections::serve(
                metrics_listener,
                app,
                bounds,
                served,
                std::future::pending(),
            )))
        }
    };
    // Expires idle sessions while the server runs; dropped (stopped) when serving ends.
    let _sweeper = sweeper::spawn(&state);
    let mcp_shutdown = state.inner.mcp.shutdown_token();
    let flushed = state.clone();
    let app = router(state);
    let (stopped_tx, stopped_rx) = tokio::sync::oneshot::channel::<()>();
    let (signalled_tx, signalled_rx) = tokio::sync::oneshot::channel::<()>();
    // When the shutdown must be over: the signal + drain_secs + the grace.
    let stop_by = std::sync::Arc::new(std::sync::OnceLock::<tokio::time::Instant>::new());
    let signal_stop_by = std::sync::Arc::clone(&stop_by);
    let drain_runs = std::sync::Arc::clone(&runs);
    let signal = async move {
        shutdown.await;
        let _ = signal_stop_by.set(tokio::time::Instant::now() + drain + SHUTDOWN_GRACE);
        let _ = signalled_tx.send(());
        drain_runs.start_draining();
        tracing::info!(
            running = drain_runs.count(),
            drain_secs = drain.as_secs(),
            "shutdown: draining"
        );
        let deadline = drain_runs.clone();
        tokio::spawn(async move {
            if tokio::time::timeout(drain, deadline.idle()).await.is_err() {
                tracing::warn!(
                    running = deadline.count(),
                    "shutdown: drain deadline reached; cancelling the runs still going"
                );
                deadline.cancel_all();
            }
            // MCP sessions hold SSE streams open: close them once the executes are done
            // (or cut), so the connections can finish.
            mcp_shutdown.cancel();
        });
        let _ = stopped_tx.send(());
    };
    // Our accept loop, not axum::serve: header-read and idle timeouts and a connection cap
    // (see connections.rs); the peer address is what failed authentications are counted by.
    let bounds = connections::Bounds::of(&flushed.inner.config);
    let served = connections::serve(listener, app, bounds, flushed.clone(), signal);
    // A connection whose client stopped reading never finishes its response: after the
    // drain deadline, stop waiting for it once every run has saved and its last events had
    // a moment to go out, and at the latest after the grace.
    let idle_runs = std::sync::Arc::clone(&runs);
    let hard_stop = async move {
        // From the signal, not from the runs' end: a slow reader keeps the whole drain.
        if signalled_rx.await.is_err() {
            return std::future::pending().await;
        }
        tokio::time::sleep(drain).await;
        let settled = async {
            idle_runs.idle().await;
            tokio::time::sleep(LINGER).await;
        };
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, settled).await;
    };
    tokio::select! {
        () = served => {}
        () = hard_stop => {
            tracing::warn!("shutdown: connections still open after the grace; closing them");
        }
    }
    // The runs' tasks outlive their connections: wait for every session to be saved (a
    // cancelled run abandons its stream, so this is quick; bounded all the same).
    let _ = stopped_rx.await;
    // A run stuck sending to a stalled client of another endpoint gets no more time than
    // the deadline.
    let deadline = stop_by
        .get()
        .copied()
        .unwrap_or_else(tokio::time::Instant::now);
    if tokio::time::timeout_at(deadline, runs.idle())
        .await
        .is_err()
    {
        tracing::error!(
            running = runs.count(),
            "shutdown: runs did not end after cancellation; stopping without them"
        );
    }
    // The runs' last accounting rows are written before the process goes (bounded).
    if let Some(accounting) = &flushed.inner.accounting {
        accounting.flush().await;
    }
    if let Some(task) = metrics_server {
        task.abort();
    }
    tracing::info!("shutdown: stopped");
    Ok(())
}

/// The start-up summary: what is served, never a key.
fn summary(listener: &TcpListener, state: &AppState) {
    let config = &state.inner.config;
    let listen = listener
        .local_addr()
        .map_or_else(|_| config.listen.clone(), |address| address.to_string());
    let store = match &config.store {
        StoreConfig::Sqlite { path } => format!("sqlite ({})", path.display()),
        StoreConfig::Postgres { .. } => "postgres".to_owned(),
    };
    let models: Vec<String> = config
        .models
        .iter()
        .map(|model| format!("{}={}", model.name, model.provider))
        .collect();
    let tenants: Vec<&str> = config.tenants.iter().map(|t| t.name.as_str()).collect();
    let tools: Vec<&str> = state.inner.tools.iter().map(|tool| tool.name()).collect();
    tracing::info!(
        listen = %listen,
        store = %store,
        models = %models.join(","),
        tenants = %tenants.join(","),
        tools = %tools.join(","),
        drain_secs = config.drain_secs,
        metrics = match (&config.metrics_listen, &config.metrics_token_env) {
            (Some(_), _) => "separate listener",
            (None, Some(_)) => "token required",
            (None, None) => "open",
        },
        "serving"
    );
}
