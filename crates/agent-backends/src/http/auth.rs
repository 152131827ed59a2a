//! The per-attempt authentication step: a hook every provider request passes through just
//! before it is sent, on every attempt, so that a retry is signed again (SigV4 signatures
//! carry a timestamp) and a refreshed token is used as soon as it exists.
//!
//! Static keys need no hook (they are headers set once); cloud credentials do: AWS SigV4
//! signs the method, URL, headers and body; Google and Microsoft Entra ID hand out OAuth2
//! access tokens that expire within the hour.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use agent_types::BackendError;

/// What [`RequestAuth::authorize`] returns: a boxed future, so the trait stays object-safe.
pub type AuthFuture<'a> = Pin<Box<dyn Future<Output = Result<(), BackendError>> + Send + 'a>>;

/// Signs or authorizes one outgoing request.
///
/// Called for every attempt after the request is complete (URL, headers, body), right before
/// it is sent. An implementation adds headers (`Authorization`, `x-amz-date`, …) and must not
/// change the body. Credentials it fetches should be cached and refreshed ahead of expiry;
/// they must never appear in its `Debug` output or in an error message.
///
/// An error fails the call with that error (use [`agent_types::BackendErrorKind::Authentication`]
/// for missing or unusable credentials: it is not retried).
pub trait RequestAuth: Send + Sync + fmt::Debug {
    /// Adds the request's credentials.
    fn authorize<'a>(&'a self, request: &'a mut reqwest::Request) -> AuthFuture<'a>;
}
