//! Anthropic models on Google Vertex AI: the same Messages body and stream, at
//! `{base}/publishers/anthropic/models/{model}:streamRawPredict` (`:rawPredict` when not
//! streaming), with the model in the URL instead of the body, `anthropic_version:
//! "vertex-2023-10-16"` in the body, and beta flags as the body's `anthropic_beta` list.
//! Authentication is the caller's OAuth2 token ([`crate::cloud::vertex`]), not `x-api-key`.

use agent_types::{BackendError, BackendErrorKind, ModelRequest};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::Serialize;

use super::Anthropic;
use super::request::Body;
use crate::http::driver::Prepared;
use crate::http::{Connection, json_body};

/// The `anthropic_version` Vertex AI requires in the body.
pub const VERTEX_API_VERSION: &str = "vertex-2023-10-16";

#[derive(Serialize)]
struct VertexBody<'a> {
    anthropic_version: &'static str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    anthropic_beta: &'a [String],
    #[serde(flatten)]
    body: Body<'a>,
}

impl Anthropic {
    /// Speaks Vertex AI's form of the Messages API (see [`crate::cloud::vertex`], which sets
    /// this up with the base URL and credentials): the model goes into the URL, the version and
    /// beta flags into the body. The base URL is `…/v1/projects/{project}/locations/{location}`.
    #[must_use]
    pub fn for_vertex(mut self) -> Self {
        self.vertex = true;
        // No `x-api-key`: the OAuth2 token is the credential.
        self.connection.api_key = None;
        self
    }
}

pub(super) fn prepare(
    connection: &Connection,
    betas: &[String],
    request: &ModelRequest,
    mut body: Body<'_>,
) -> Result<Prepared, BackendError> {
    let model = request.model.trim();
    if model.is_empty() || model.contains(['/', '?', '#', ':']) {
        return Err(BackendError::new(
            BackendErrorKind::InvalidRequest,
            format!("`{model}` is not a Vertex AI model id (e.g. `claude-sonnet-4-5@20250929`)"),
        ));
    }
    if let Some(field) = ["anthropic_version", "anthropic_beta"]
        .into_iter()
        .find(|field| request.extras.contains_key(*field))
    {
        return Err(BackendError::new(
            BackendErrorKind::InvalidRequest,
            format!(
                "the request extras set `{field}`, which the Vertex AI form of the Anthropic \
                 adapter sends itself; use Anthropic::with_beta for beta flags"
            ),
        ));
    }
    let method = if request.stream {
        ":streamRawPredict"
    } else {
        ":rawPredict"
    };
    let url = connection.url(&format!("/publishers/anthropic/models/{model}{method}"));
    body.model = "";
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(Prepared {
        url,
        headers,
        body: json_body(&VertexBody {
            anthropic_version: VERTEX_API_VERSION,
            anthropic_beta: betas,
            body,
        })?,
    })
}
