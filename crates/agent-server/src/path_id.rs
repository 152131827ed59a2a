//! The `{id}` of a path as an extractor whose rejection is the server's JSON error.
//!
//! axum's `Path` answers a percent-encoded id that is not UTF-8 (`/v1/sessions/%FF/execute`)
//! with a plain-text 400; every error of this server is a JSON body, so a client's parser
//! never meets a different shape (found by the HTTP fuzzer, `tests/fuzz.rs`).

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;

use crate::error::ApiError;

/// The path's single parameter, decoded.
pub(crate) struct PathId(pub(crate) String);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(id)| Self(id))
            .map_err(|rejection| {
                ApiError::bad_request(format!(
                    "the id in the path is not valid: {}",
                    rejection.body_text()
                ))
            })
    }
}
