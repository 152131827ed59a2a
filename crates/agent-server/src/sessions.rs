//! `/v1/sessions`: create, read, list and delete server-held sessions (executing one is
//! `execute.rs`).

use std::sync::Arc;

use agent_loop::{Session, SessionStatus};
use agent_types::{GenerationSettings, Message, ToolResult, ToolSpec};
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use crate::error::ApiError;
use crate::http::{admit, json_body, tagged};
use crate::path_id::PathId;
use crate::quota;
use crate::state::{AppState, Tenant, now_ms};
use crate::store::{Removal, SessionOptions, SessionRecord};

/// The body of `POST /v1/sessions` (and the `context` of an execute that creates its session).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSession {
    /// A model from the server's allow-list.
    pub model: String,
    /// The system prompt.
    #[serde(default)]
    pub system: Option<String>,
    /// Server-side tools the session may call, by name.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Tools the client runs itself (spec only): calls to them end the execute with
    /// `awaiting_tool_execution`.
    #[serde(default)]
    pub remote_tools: Vec<ToolSpec>,
    /// Budgets and settings, each at most the server's cap.
    #[serde(default)]
    pub options: SessionOptions,
    /// History to start from.
    #[serde(default)]
    pub messages: Vec<Message>,
    /// Sampling settings for every call.
    #[serde(default)]
    pub settings: Option<GenerationSettings>,
    /// The JSON Schema the final answer of every execute must match (the same as
    /// `options.output_schema`).
    #[serde(default)]
    pub output_schema: Option<serde_json::Value>,
}

/// Runs `handler` for an admitted tenant and tags the response for the request metric.
pub(crate) async fn respond<F, Fut>(state: &AppState, headers: &HeaderMap, handler: F) -> Response
where
    F: FnOnce(Arc<Tenant>) -> Fut,
    Fut: Future<Output = Result<Response, ApiError>>,
{
    match admit(state, headers) {
        Err(error) => error.into_response(),
        Ok(tenant) => {
            let response = handler(Arc::clone(&tenant))
                .await
                .unwrap_or_else(IntoResponse::into_response);
            tagged(response, &tenant)
        }
    }
}

/// `POST /v1/sessions`.
pub(crate) async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (state, headers) = (&state, &headers);
    respond(state, headers, |tenant| async move {
        let new: NewSession = json_body(state, headers, body).await?;
        let record = record(state, &tenant, new, None)?;
        quota::check_session_size(state, &tenant, &record)?;
        state
            .inner
            .store
            .insert(&record, None, quota::store_quota(&tenant.quotas))
            .await
            .map_err(|error| quota::refused(state, error))?;
        let mut response = (
            StatusCode::CREATED,
            Json(
                json!({"id": record.id(), "model": record.model, "status": record.session.status}),
            ),
        )
            .into_response();
        if let Ok(location) = HeaderValue::from_str(&format!("/v1/sessions/{}", record.id())) {
            response.headers_mut().insert(header::LOCATION, location);
        }
        Ok(response)
    })
    .await
}

/// `GET /v1/sessions/{id}`.
pub(crate) async fn get(
    State(state): State<AppState>,
    headers: HeaderMap,
    PathId(id): PathId,
) -> Response {
    let (state, headers) = (&state, &headers);
    respond(state, headers, |tenant| async move {
        let stored = state
            .inner
            .store
            .read(&tenant.name, &id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("no session {id}")))?;
        // While an execute holds the lease, the stored status is the one before it.
        let running = stored.lease_until_ms.is_some_and(|until| until > now_ms());
        let mut record = stored.record;
        // A crashed run's checkpoint reads as the next execute will recover it.
        if !running {
            crate::checkpoint::recover(&mut record);
        }
        let expired = !running && expire(state, &mut record);
        let session = &record.session;
        let status = if running {
            SessionStatus::Running
        } else {
            session.status
        };
        Ok(Json(json!({
            "id": session.id,
            "model": record.model,
            "status": status,
            "expired": expired,
            "system": session.system,
            "tools": record.tools,
            "remote_tools": session.remote_tools,
            "messages": session.messages,
            "pending_tool_calls": session.pending_tool_calls,
            "pending_approvals": session.pending_approvals,
            "usage": session.usage,
            "cost_usd": session.cost_usd,
            "created_at_ms": record.created_at_ms,
            "updated_at_ms": record.updated_at_ms,
        }))
        .into_response())
    })
    .await
}

/// `DELETE /v1/sessions/{id}`.
pub(crate) async fn delete(
    State(state): State<AppState>,
    headers: HeaderMap,
    PathId(id): PathId,
) -> Response {
    let (state, headers) = (&state, &headers);
    respond(state, headers, |tenant| async move {
        // The lease is in the store, so an execute on any instance counts.
        match state
            .inner
            .store
            .delete(&tenant.name, &id, now_ms())
            .await?
        {
            Removal::Deleted => Ok(StatusCode::NO_CONTENT.into_response()),
            Removal::Busy => Err(ApiError::conflict(format!(
                "session {id} is executing; wait for its execute_complete event, then delete it"
            ))),
            Removal::NotFound => Err(ApiError::not_found(format!("no session {id}"))),
        }
    })
    .await
}

/// `GET /v1/sessions?limit=&after=&status=&model=&q=`: the caller's sessions in id order, a
/// page at a time, with each one's model, tokens and cost; the filters apply in the store
/// before the page is cut, and `next_after` is the `after` of the next page (`null` on the
/// last).
pub(crate) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Response {
    let (state, headers) = (&state, &headers);
    respond(state, headers, |tenant| async move {
        let now = now_ms();
        let (limit, after, filter) = crate::session_list::query(uri.query().unwrap_or(""), now)?;
        // One more than asked tells whether another page follows.
        let mut rows = state
            .inner
            .store
            .list(&tenant.name, after.as_deref(), limit + 1, &filter)
            .await?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let data: Vec<serde_json::Value> = rows
            .iter()
            .map(|row| {
                let running = row.lease_until_ms.is_some_and(|until| until > now);
                // A stored `running` without a live lease is a run cut off by a crash: the
                // next request recovers it as `aborted` (checkpoint.rs).
                let status = match row.status.as_str() {
                    _ if running => "running",
                    "running" => "aborted",
                    stored => stored,
                };
                json!({
                    "id": row.id,
                    "status": status,
                    "created_at_ms": row.created_at_ms,
                    "updated_at_ms": row.updated_at_ms,
                    "size_bytes": row.size_bytes,
                    "model": row.model,
                    "input_tokens": row.input_tokens,
                    "output_tokens": row.output_tokens,
                    "cost_usd": row.cost_usd,
                })
            })
            .collect();
        let next = more
            .then(|| rows.last().map(|row| row.id.clone()))
            .flatten();
        Ok(
            Json(json!({"object": "list", "data": data, "has_more": more, "next_after": next}))
                .into_response(),
        )
    })
    .await
}

/// `%XX` and `+` decoded; `None` when it is not UTF-8 or an escape is broken.
pub(crate) fn percent_decode(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.bytes();
    while let Some(byte) = rest.next() {
        match byte {
            b'%' => {
                let high = char::from(rest.next()?).to_digit(16)?;
                let low = char::from(rest.next()?).to_digit(16)?;
                bytes.push(u8::try_from(high * 16 + low).ok()?);
            }
            b'+' => bytes.push(b' '),
            other => bytes.push(other),
        }
    }
    String::from_utf8(bytes).ok()
}

/// A new record from a request, checked against the allow-list and the caps.
pub(crate) fn record(
    state: &AppState,
    tenant: &Tenant,
    mut new: NewSession,
    id: Option<&str>,
) -> Result<SessionRecord, ApiError> {
    let inner = &state.inner;
    let Some(model) = inner.models.get(&new.model) else {
        let mut offered: Vec<&str> = inner.models.keys().map(String::as_str).collect();
        offered.sort_unstable();
        return Err(ApiError::bad_request(format!(
            "model `{}` is not offered; this server offers: {}",
            new.model,
            offered.join(", ")
        )));
    };
    // A tool the tenant lacks a permission for is as absent as an unknown one.
    let permitted = |tool: &agent_tools::RegisteredTool| {
        tool.tool()
            .required_permissions()
            .iter()
            .all(|permission| tenant.caller.has_permission(permission))
    };
    for tool in &new.tools {
        if !inner.tools.get(tool).is_some_and(|tool| permitted(tool)) {
            let offered: Vec<&str> = inner
                .tools
                .iter()
                .filter(|tool| permitted(tool))
                .map(|tool| tool.name())
                .collect();
            return Err(ApiError::bad_request(format!(
                "tool `{tool}` is not offered; this server's tools: {}",
                if offered.is_empty() {
                    "none".into()
                } else {
                    offered.join(", ")
                }
            )));
        }
    }
    for spec in &new.remote_tools {
        agent_tools::validate_name(&spec.name)
            .map_err(|error| ApiError::bad_request(format!("remote tool: {error}")))?;
        if inner.tools.get(&spec.name).is_some() {
            return Err(ApiError::bad_request(format!(
                "remote tool `{}` has the name of a server tool",
                spec.name
            )));
        }
    }
    if let Some(schema) = new.output_schema {
        if new.options.output_schema.is_some() {
            return Err(ApiError::bad_request(
                "give the output schema once: `output_schema` or `options.output_schema`",
            ));
        }
        new.options.output_schema = Some(schema);
    }
    if let Some(problem) = new
        .options
        .output_schema
        .as_ref()
        .and_then(crate::limits::schema_problem)
    {
        return Err(ApiError::bad_request(format!("output_schema {problem}")));
    }
    check_caps(state, &new.options)?;
    // Server-made ids are 128 random bits: nothing to guess from one's neighbours.
    let mut session = match id {
        Some(id) => Session::with_id(id, model.upstream.clone()),
        None => Session::with_id(crate::id::session_id()?, model.upstream.clone()),
    };
    session.system = new.system;
    session.messages = new.messages;
    session.remote_tools = new.remote_tools;
    if let Some(settings) = new.settings {
        // Out of the provider's range is a 400 naming the setting, never a silent clamp.
        model
            .limits
            .check(&settings)
            .map_err(|error| ApiError::bad_request(format!("settings: {error}")))?;
        session.settings = settings;
    }
    let now = now_ms();
    Ok(SessionRecord {
        tenant: tenant.name.clone(),
        model: new.model,
        session,
        tools: new.tools,
        options: new.options,
        created_at_ms: now,
        updated_at_ms: now,
    })
}

/// A client may lower the server's caps, never raise them.
fn check_caps(state: &AppState, options: &SessionOptions) -> Result<(), ApiError> {
    let caps = &state.inner.config.caps;
    let over = |what: &str, asked: String, cap: String| {
        Err(ApiError::bad_request(format!(
            "options.{what} = {asked} is above this server's cap of {cap}"
        )))
    };
    if let Some(asked) = options.max_iterations
        && asked > caps.max_iterations
    {
        return over(
            "max_iterations",
            asked.to_string(),
            caps.max_iterations.to_string(),
        );
    }
    if let (Some(asked), Some(cap)) = (options.token_budget, caps.token_budget)
        && asked > cap
    {
        return over("token_budget", asked.to_string(), cap.to_string());
    }
    if let (Some(asked), Some(cap)) = (options.max_cost_usd, caps.max_cost_usd)
        && asked > cap
    {
        return over("max_cost_usd", asked.to_string(), cap.to_string());
    }
    if let Some(asked) = options.tool_result_max_bytes
        && agent_tools::TruncationPolicy::new(asked).is_err()
    {
        return Err(ApiError::bad_request(format!(
            "options.tool_result_max_bytes = {asked} is invalid: it must be at least {} bytes",
            agent_tools::TruncationPolicy::MIN_MAX_BYTES
        )));
    }
    if let Some(asked) = options.tool_result_max_bytes
        && asked > caps.tool_result_max_bytes
    {
        return over(
            "tool_result_max_bytes",
            asked.to_string(),
            caps.tool_result_max_bytes.to_string(),
        );
    }
    for (what, asked, cap) in [
        (
            "max_tool_calls_per_round",
            options.max_tool_calls_per_round,
            caps.max_tool_calls_per_round,
        ),
        (
            "max_round_result_bytes",
            options.max_round_result_bytes,
            caps.max_round_result_bytes,
        ),
    ] {
        if let Some(asked) = asked
            && asked > cap
        {
            return over(what, asked.to_string(), cap.to_string());
        }
    }
    // Zero or negative budgets are refused here, before any model call.
    let zero = [
        ("max_tool_calls_per_round", options.max_tool_calls_per_round),
        ("max_round_result_bytes", options.max_round_result_bytes),
    ];
    let zero: Vec<(&str, usize)> = zero
        .into_iter()
        .filter_map(|(what, asked)| asked.map(|asked| (what, asked)))
        .collect();
    if let Some(problem) =
        agent_loop::budget_problem(options.token_budget, options.max_cost_usd, &zero)
    {
        return Err(ApiError::bad_request(format!("options.{problem}")));
    }
    Ok(())
}

/// Expires the pending calls of a session that waited longer than the server allows: each
/// gets an error result (so the history stays valid) and the status becomes `error`.
/// Returns whether it did.
pub(crate) fn expire(state: &AppState, record: &mut SessionRecord) -> bool {
    let timeout = state.inner.config.remote_tool_timeout_secs;
    let session = &mut record.session;
    if session.status != SessionStatus::AwaitingToolExecution
        || now_ms().saturating_sub(record.updated_at_ms) < timeout.saturating_mul(1000)
    {
        return false;
    }
    for call in std::mem::take(&mut session.pending_tool_calls) {
        session.messages.push(Message::Tool(ToolResult::error(
            call.id,
            call.name,
            format!("no result arrived within {timeout} s; the call expired"),
        )));
    }
    session.status = SessionStatus::Error;
    true
}
