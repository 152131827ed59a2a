//! Cloud credentials: the token sources behind the Google Vertex AI and Azure OpenAI
//! configurations.
//!
//! [`token`] is the shared part: a cached OAuth2 bearer token, refreshed ahead of expiry, one
//! refresh at a time, run by the HTTP driver before every attempt
//! ([`RequestAuth`](crate::http::RequestAuth)).

#[cfg(feature = "vertex")]
pub mod google;
pub mod token;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod test_server;
