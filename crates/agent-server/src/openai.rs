//! `POST /v1/chat/completions` (being written).

use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// `POST /v1/chat/completions`.
pub(crate) async fn chat_completions() -> Response {
    ApiError::new(
        axum::http::StatusCode::NOT_IMPLEMENTED,
        "not_implemented",
        "not yet",
    )
    .into_response()
}
