//! Cloud credentials: the token sources behind the Google Vertex AI and Azure OpenAI
//! configurations.
//!
//! [`token`] is the shared part: a cached OAuth2 bearer token, refreshed ahead of expiry, one
//! refresh at a time, run by the HTTP driver before every attempt
//! ([`RequestAuth`](crate::http::RequestAuth)).

#[cfg(feature = "azure")]
pub mod azure;
#[cfg(feature = "vertex")]
pub mod google;
// With `cloud-auth` alone no credential uses the token requests yet.
#[cfg_attr(not(any(feature = "vertex", feature = "azure")), allow(dead_code))]
pub mod token;
#[cfg(feature = "vertex")]
pub mod vertex;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod test_server;

/// A variable's value, when set and not blank.
#[cfg_attr(not(any(feature = "vertex", feature = "azure")), allow(dead_code))]
pub(crate) fn env(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|value| value.trim().to_owned())
        .filter(|value| !value.is_empty())
}
