//! `GET /v1/models` and `GET /v1/models/{id}`: the allow-list in OpenAI's shape, for the
//! clients that look a model up before using it (and for people asking what is offered).
//!
//! Each model is `{"id", "object": "model", "created", "owned_by": "agentry"}`, `id` being
//! the name clients send as `model`; `created` is when this server started (the allow-list
//! is fixed for its life). An unknown id is 404 `model_not_found`, as for a completion.

use std::sync::LazyLock;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::error::OpenAiError;
use crate::error::ApiError;
use crate::http::{admit, tagged};
use crate::path_id::PathId;
use crate::state::AppState;

/// Unix seconds when the routes were built: the `created` of every model.
static STARTED: LazyLock<u64> = LazyLock::new(|| {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
});

/// Fixes `created` to now; called when the routes are built.
pub(crate) fn start() {
    LazyLock::force(&STARTED);
}

fn model(id: &str) -> Value {
    json!({"id": id, "object": "model", "created": *STARTED, "owned_by": "agentry"})
}

fn sorted_names(state: &AppState) -> Vec<&str> {
    let mut names: Vec<&str> = state.inner.models.keys().map(String::as_str).collect();
    names.sort_unstable();
    names
}

/// `GET /v1/models`.
pub(crate) async fn list(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let tenant = match admit(&state, &headers) {
        Ok(tenant) => tenant,
        Err(error) => return OpenAiError::from(error).into_response(),
    };
    let data: Vec<Value> = sorted_names(&state).into_iter().map(model).collect();
    tagged(
        Json(json!({"object": "list", "data": data})).into_response(),
        &tenant,
    )
}

/// `GET /v1/models/{id}`.
pub(crate) async fn retrieve(
    State(state): State<AppState>,
    id: Result<PathId, ApiError>,
    headers: HeaderMap,
) -> Response {
    let tenant = match admit(&state, &headers) {
        Ok(tenant) => tenant,
        Err(error) => return OpenAiError::from(error).into_response(),
    };
    let id = match id {
        Ok(PathId(id)) => id,
        Err(error) => return tagged(OpenAiError::from(error).into_response(), &tenant),
    };
    let response = if state.inner.models.contains_key(&id) {
        Json(model(&id)).into_response()
    } else {
        OpenAiError::model_not_found(&id, &sorted_names(&state)).into_response()
    };
    tagged(response, &tenant)
}
