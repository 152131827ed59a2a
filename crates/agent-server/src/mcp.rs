//! `/mcp`: the server's tools as an MCP server (streamable HTTP), for its tenants.
//!
//! The same API keys as every other route, checked by the same [`admit`](crate::http::admit)
//! (401 without a known key and counted as a failed authentication, 429 over the tenant's
//! request rate, 503 while draining); the tenant's [`Caller`](agent_tools::Caller) decides
//! which tools it sees and may call, exactly as for its sessions; each call holds a place in
//! the tenant's `concurrent_executes` gate while it runs; bodies are capped at
//! `max_body_bytes` and results at the server's caps.

use std::sync::Arc;
use std::time::Duration;

use agent_mcp::server::{
    Authenticated, CallGate, CallPermit, HttpOptions, HttpService, ServerOptions,
};
use agent_tools::{Registry, TruncationPolicy};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::config::ServerConfig;
use crate::error::Error;
use crate::state::{AppState, Tenant};

/// The MCP service over the server's tools, bounded by the configuration.
pub(crate) fn service(config: &ServerConfig, tools: &Registry) -> Result<HttpService, Error> {
    let truncation = TruncationPolicy::new(config.caps.tool_result_max_bytes)
        .map_err(|error| Error::Config(format!("caps.tool_result_max_bytes: {error}")))?;
    let options = ServerOptions::default()
        .with_name("agentry-server", env!("CARGO_PKG_VERSION"))
        .with_truncation(truncation)
        .with_call_timeout(Some(Duration::from_secs(config.caps.tool_timeout_secs)));
    let http = HttpOptions::default()
        .with_max_sessions(config.mcp.max_sessions)
        .with_max_sessions_per_caller(config.mcp.max_sessions_per_tenant)
        .with_session_idle(Duration::from_secs(config.mcp.session_idle_secs))
        .with_max_body_bytes(config.max_body_bytes)
        // Any Host: every request carries a tenant's key, so DNS rebinding gains nothing.
        .with_allowed_hosts(Vec::<String>::new());
    Ok(HttpService::new(tools, options, http))
}

/// A tenant's `concurrent_executes`, shared by its executes and its MCP calls; each call
/// counted in `agentry_tool_calls_total` like the loop's.
struct TenantGate {
    tenant: Arc<Tenant>,
    state: AppState,
}

impl CallGate for TenantGate {
    fn enter(&self) -> Result<CallPermit, String> {
        self.tenant
            .gate
            .enter()
            .map(CallPermit::new)
            .ok_or_else(|| {
                format!(
                    "tenant `{}` has as many executes and tool calls running as it may; try again \
                 when one ends",
                    self.tenant.name
                )
            })
    }

    fn finished(&self, tool: &str, is_error: bool) {
        let metrics = &self.state.inner.metrics;
        metrics.inc(
            "agentry_tool_calls_total",
            &[
                ("tenant", self.tenant.name.as_str()),
                ("tool", metrics.tool_label(tool)),
                ("outcome", if is_error { "error" } else { "ok" }),
            ],
        );
    }
}

/// In front of `/mcp`: the tenant of the bearer key, after its rate limit, as the request's
/// caller.
pub(crate) async fn admit(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let tenant = match crate::http::admit(&state, request.headers()) {
        Ok(tenant) => tenant,
        Err(error) => return error.into_response(),
    };
    request
        .extensions_mut()
        .insert(
            Authenticated::new(Arc::clone(&tenant.caller)).with_gate(Arc::new(TenantGate {
                tenant: Arc::clone(&tenant),
                state: state.clone(),
            })),
        );
    let response = next.run(request).await;
    crate::http::tagged(response, &tenant)
}
