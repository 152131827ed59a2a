//! The agentry server: agent sessions over HTTP and SSE, an OpenAI-compatible endpoint,
//! tenants with API keys and limits, and session storage several instances can share.
//!
//! | endpoint | what it does |
//! |---|---|
//! | `POST /v1/sessions` | create a session (model from the allow-list, tools, remote tools, budgets) |
//! | `POST /v1/sessions/{id}/execute` | run it from a user message or remote tool results; SSE of agent events ending with `execute_complete` |
//! | `GET /v1/sessions/{id}`, `DELETE /v1/sessions/{id}` | read or remove it |
//! | `POST /v1/chat/completions` | OpenAI-compatible; server tools run in the loop, client tools come back as `tool_calls` |
//! | `GET /healthz`, `GET /metrics` | liveness; Prometheus text |
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

mod config;
mod error;
mod execute;
mod http;
mod limits;
mod metrics;
mod openai;
mod sessions;
pub mod spend;
mod state;
pub mod store;

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;

pub use config::{Caps, Limits, ModelConfig, ModelSource, ServerConfig, StoreConfig, TenantConfig};
pub use error::{ApiError, Error};
pub use execute::ExecuteComplete;
pub use metrics::Metrics;
pub use sessions::NewSession;
pub use state::{AppState, ServerBuilder};

/// The server's routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/sessions", post(sessions::create))
        .route(
            "/v1/sessions/{id}",
            get(sessions::get).delete(sessions::delete),
        )
        .route("/v1/sessions/{id}/execute", post(sessions::execute))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
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

async fn metrics(State(state): State<AppState>) -> Response {
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

/// Serves `state` on `listener` until `shutdown` completes, then drains: new requests get
/// 503, running executes have `drain_secs` to finish, then are cancelled (each still ends
/// properly and saves its session), and the call returns once every run has saved.
///
/// # Errors
///
/// [`Error::Io`] when serving fails.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let runs = std::sync::Arc::clone(&state.inner.runs);
    let drain = Duration::from_secs(state.inner.config.drain_secs);
    let app = router(state);
    let (stopped_tx, stopped_rx) = tokio::sync::oneshot::channel::<()>();
    let drain_runs = std::sync::Arc::clone(&runs);
    let signal = async move {
        shutdown.await;
        drain_runs.start_draining();
        tracing::info!(running = drain_runs.count(), "draining");
        let deadline = drain_runs.clone();
        tokio::spawn(async move {
            if tokio::time::timeout(drain, deadline.idle()).await.is_err() {
                tracing::warn!(
                    running = deadline.count(),
                    "drain deadline reached; cancelling"
                );
                deadline.cancel_all();
            }
        });
        let _ = stopped_tx.send(());
    };
    // One service for every connection, not a router rebuilt per connection.
    axum::serve(listener, app.into_make_service())
        .with_graceful_shutdown(signal)
        .await?;
    // The runs' tasks outlive their connections: wait for every session to be saved.
    let _ = stopped_rx.await;
    runs.idle().await;
    Ok(())
}
