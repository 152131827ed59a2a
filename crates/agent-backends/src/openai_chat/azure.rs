//! Azure OpenAI deployment URLs for Chat Completions:
//! `{base}/deployments/{deployment}/chat/completions?api-version=…`, the deployment being the
//! request's model name (see [`crate::cloud::azure`]).

use super::OpenAiChat;
use crate::http::Connection;

impl OpenAiChat {
    /// Sends each request to the Azure OpenAI deployment named by its model, with this
    /// `api-version`; the base URL is `{endpoint}/openai`. [`crate::cloud::azure`] sets this up
    /// with the credentials.
    #[must_use]
    pub fn for_azure_deployment(mut self, api_version: impl Into<String>) -> Self {
        self.azure_api_version = Some(api_version.into());
        self
    }
}

pub(super) fn deployment_url(connection: &Connection, deployment: &str, version: &str) -> String {
    connection.url(&format!(
        "/deployments/{}/chat/completions?api-version={}",
        path_segment(deployment),
        query_value(version)
    ))
}

/// A deployment name as one path segment (names are letters, digits, `-`, `_` and `.`; anything
/// else is escaped so it cannot change the path).
fn path_segment(text: &str) -> String {
    escape(text, |byte| {
        byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.')
    })
}

/// An `api-version` value as a query value.
pub(crate) fn query_value(text: &str) -> String {
    escape(text, |byte| {
        byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.')
    })
}

fn escape(text: &str, keep: impl Fn(u8) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if keep(byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
