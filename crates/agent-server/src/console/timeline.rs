//! `GET /v1/sessions/{id}/timeline`: the session's model and tool calls with their timings,
//! tokens and cost, from the accounting rows the server already writes (`usage.rs`).
//!
//! Only the caller's tenant's rows are read, and only for a session the tenant holds: an id
//! of another tenant's session gets the same 404 as an id nobody uses.

use agent_loop::{ModelCallRecord, ModelCallRow, ToolCallRow};
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::path_id::PathId;
use crate::state::AppState;

/// The most rows of each kind one answer holds (the latest).
const MAX_ROWS: usize = 2000;

/// `GET /v1/sessions/{id}/timeline`.
pub(crate) async fn timeline(
    State(state): State<AppState>,
    headers: HeaderMap,
    PathId(id): PathId,
) -> Response {
    let (state, headers) = (&state, &headers);
    crate::sessions::respond(state, headers, |tenant| async move {
        // The session must be the caller's: the same 404 for another tenant's and for none.
        if state.inner.store.read(&tenant.name, &id).await?.is_none() {
            return Err(ApiError::not_found(format!("no session {id}")));
        }
        let Some(accounting) = &state.inner.accounting else {
            return Err(ApiError::not_found(
                "usage accounting is off on this server (set `accounting = true`)",
            ));
        };
        let (models, tools) =
            accounting
                .session_calls(&tenant.name, &id)
                .await
                .map_err(|error| {
                    tracing::error!(tenant = tenant.name, %error, "timeline query failed");
                    ApiError::internal("the timeline could not be read")
                })?;
        let truncated = models.len() > MAX_ROWS || tools.len() > MAX_ROWS;
        let models: Vec<Value> = models
            .iter()
            .skip(models.len().saturating_sub(MAX_ROWS))
            .map(|row| model_json(&row.run_id, row.at_us, &row.record, row.error.as_deref()))
            .collect();
        let tools: Vec<Value> = tools
            .iter()
            .skip(tools.len().saturating_sub(MAX_ROWS))
            .map(|row| {
                json!({
                    "run_id": row.run_id,
                    "round": row.round,
                    "tool": row.tool,
                    "call_id": row.call_id,
                    "started_us": row.at_us.saturating_sub(row.duration_us),
                    "duration_ms": row.duration_us as f64 / 1000.0,
                    "result_bytes": row.result_bytes,
                    "sent_bytes": row.sent_bytes,
                    "truncated": row.truncated,
                    "outcome": row.outcome,
                    "error": row.error,
                    "guardrails": row.guardrails,
                })
            })
            .collect();
        Ok(Json(json!({
            "object": "timeline",
            "session_id": id,
            "model_calls": models,
            "tool_calls": tools,
            "has_more": truncated,
        }))
        .into_response())
    })
    .await
}

fn model_json(run_id: &str, at_us: i64, record: &ModelCallRecord, error: Option<&str>) -> Value {
    let latency_us = i64::try_from(record.latency.as_micros()).unwrap_or(i64::MAX);
    let usage = record.usage.as_ref();
    json!({
        "run_id": run_id,
        // The loop counts model calls from 0 and tool rounds from 1: a call's round is the
        // one whose tool calls it asked for.
        "round": record.iteration.saturating_add(1),
        "model": record.model,
        "started_us": at_us.saturating_sub(latency_us),
        "latency_ms": record.latency.as_secs_f64() * 1000.0,
        "first_event_ms": record.time_to_first_event.as_secs_f64() * 1000.0,
        "input_tokens": usage.map(|usage| usage.input_tokens),
        "output_tokens": usage.map(|usage| usage.output_tokens),
        "cost_usd": record.cost_usd,
        "tool_calls": record.tool_calls,
        "stop_reason": record.stop_reason,
        "error": error,
    })
}

/// A model call as one entry of a timeline's `model_calls` (the shape
/// `GET /v1/sessions/{id}/timeline` answers and [`report_page`](super::report_page) reads).
pub fn timeline_row_model(row: &ModelCallRow) -> Value {
    model_json(
        &row.context.run_id,
        row.at_us,
        &row.record,
        row.error.as_deref(),
    )
}

/// A tool call as one entry of a timeline's `tool_calls`.
pub fn timeline_row_tool(row: &ToolCallRow) -> Value {
    let duration_us = i64::try_from(row.duration.as_micros()).unwrap_or(i64::MAX);
    json!({
        "run_id": row.context.run_id,
        "round": row.round,
        "tool": &*row.tool,
        "call_id": row.call_id,
        "started_us": row.at_us.saturating_sub(duration_us),
        "duration_ms": row.duration.as_secs_f64() * 1000.0,
        "result_bytes": row.result_bytes,
        "sent_bytes": row.sent_bytes,
        "truncated": row.truncated,
        "outcome": row.outcome(),
        "error": row.error,
        "guardrails": row.guardrails,
    })
}
