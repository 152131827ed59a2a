//! Streamable HTTP: rmcp's tower service behind a front that authenticates each request and
//! caps the sessions a client can open.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};

use agent_tools::{Caller, Registry};
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::handler::{Authenticated, McpServer, SessionTag, Shared};
use super::options::{HttpOptions, ServerOptions};

/// Maps a presented bearer key to its caller.
pub trait Authenticator: Send + Sync + 'static {
    /// The caller whose key `key` is, or `None` (the request gets 401).
    fn authenticate(&self, key: &str) -> Option<Authenticated>;
}

/// A fixed set of bearer keys, each naming a caller. Keys are compared in constant time
/// (for keys of equal length), every key every time.
#[derive(Default)]
pub struct BearerKeys {
    entries: Vec<(Vec<u8>, Authenticated)>,
}

impl fmt::Debug for BearerKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the keys themselves.
        f.debug_struct("BearerKeys")
            .field("keys", &self.entries.len())
            .finish()
    }
}

impl BearerKeys {
    /// No keys: every request is refused.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `key` for `caller`.
    #[must_use]
    pub fn with_key(mut self, key: impl Into<String>, caller: impl Into<Arc<Caller>>) -> Self {
        self.entries
            .push((key.into().into_bytes(), Authenticated::new(caller)));
        self
    }
}

fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Authenticator for BearerKeys {
    fn authenticate(&self, key: &str) -> Option<Authenticated> {
        let mut found = None;
        for (known, who) in &self.entries {
            if same(known, key.as_bytes()) {
                found = Some(who);
            }
        }
        found.cloned()
    }
}

/// The key of an `Authorization: Bearer …` header (scheme in any case).
fn bearer(request: &Request<impl Sized>) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, key) = value.split_once(' ')?;
    let key = key.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty()).then_some(key)
}

type Body = BoxBody<Bytes, Infallible>;

/// A registry served over streamable HTTP: a tower service to mount in axum
/// (`Router::new().nest_service("/mcp", service)`).
///
/// Every request must be authenticated: either the service's [`Authenticator`] maps its
/// bearer key to a caller ([`with_authenticator`](Self::with_authenticator)), or a
/// middleware in front of it put an [`Authenticated`] in the request's extensions (as
/// `agent-server` does, with its tenants' keys and limits). Otherwise the answer is 401.
///
/// Each session's tools are those its caller may use, per request; a session answers only
/// the principal that opened it. Sessions are capped ([`HttpOptions::max_sessions`]: 503
/// past it; [`HttpOptions::max_sessions_per_caller`]), closed after
/// [`HttpOptions::session_idle`], and bodies over [`HttpOptions::max_body_bytes`] get 413.
#[derive(Clone)]
pub struct HttpService {
    inner: StreamableHttpService<McpServer, LocalSessionManager>,
    authenticator: Option<Arc<dyn Authenticator>>,
    anonymous: Option<Authenticated>,
    sessions: Arc<Semaphore>,
    max_sessions: usize,
    owners: Arc<Owners>,
}

/// Whose each live session is, by session id: a request naming another principal's session
/// (a GET stream, a DELETE, a POST) is answered as if the session did not exist. Entries of
/// ended sessions (their tag dropped) are pruned as new ones come; at most about
/// `max_sessions` live ones.
#[derive(Default)]
struct Owners(Mutex<HashMap<String, (String, Weak<SessionTag>)>>);

impl Owners {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Weak<SessionTag>)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `principal` may use session `id` (a session it did not see opened is rmcp's to
    /// answer).
    fn allows(&self, id: &str, principal: &str) -> bool {
        match self.lock().get(id) {
            Some((owner, tag)) if tag.strong_count() > 0 => owner == principal,
            _ => true,
        }
    }

    fn record(&self, id: String, principal: String, tag: &Arc<SessionTag>) {
        let mut owners = self.lock();
        owners.retain(|_, (_, tag)| tag.strong_count() > 0);
        owners.insert(id, (principal, Arc::downgrade(tag)));
    }
}

impl fmt::Debug for HttpService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpService")
            .field("authenticator", &self.authenticator.is_some())
            .field("max_sessions", &self.max_sessions)
            .finish_non_exhaustive()
    }
}

impl HttpService {
    /// Serves `registry`'s tools under `options`, bounded by `http`.
    pub fn new(registry: &Registry, options: ServerOptions, http: HttpOptions) -> Self {
        let shared = Shared::new(registry, options, http.max_sessions_per_caller);
        let sessions = Arc::new(Semaphore::new(http.max_sessions.max(1)));
        let factory_sessions = Arc::clone(&sessions);
        let factory = move || {
            // The permit lives in the session's handler: it is given back when the session
            // ends (closed, idle, or the server shutting down).
            let permit = Arc::clone(&factory_sessions)
                .try_acquire_owned()
                .map_err(|_| std::io::Error::other("too many MCP sessions are open"))?;
            Ok(McpServer::for_session(Arc::clone(&shared), permit))
        };
        let mut manager = LocalSessionManager::default();
        manager.session_config.keep_alive = Some(http.session_idle);
        let mut config = StreamableHttpServerConfig::default()
            .with_max_request_body_bytes(http.max_body_bytes)
            .with_sse_keep_alive(http.keep_alive);
        config = match http.allowed_hosts {
            None => config,
            Some(hosts) if hosts.is_empty() => config.disable_allowed_hosts(),
            Some(hosts) => config.with_allowed_hosts(hosts),
        };
        Self {
            inner: StreamableHttpService::new(factory, Arc::new(manager), config),
            authenticator: None,
            anonymous: None,
            owners: Arc::default(),
            sessions,
            max_sessions: http.max_sessions.max(1),
        }
    }

    /// Authenticates each request's bearer key with `authenticator`.
    #[must_use]
    pub fn with_authenticator(mut self, authenticator: impl Authenticator) -> Self {
        self.authenticator = Some(Arc::new(authenticator));
        self
    }

    /// Serves requests that carry no key as `caller`: for a listener only this machine can
    /// reach (loopback, with the `Host` check on). Ignored when an authenticator is set.
    #[must_use]
    pub fn with_anonymous(mut self, caller: impl Into<Arc<Caller>>) -> Self {
        self.anonymous = Some(Authenticated::new(caller));
        self
    }

    /// Sessions open now.
    pub fn live_sessions(&self) -> usize {
        self.max_sessions - self.sessions.available_permits()
    }

    /// The token that closes every session and stops serving when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.inner.config.cancellation_token.clone()
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

impl<B> tower_service::Service<Request<B>> for HttpService
where
    B: http_body::Body + Send + 'static,
    B::Error: fmt::Display,
    B::Data: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        if let Some(authenticator) = &self.authenticator {
            match bearer(&request).and_then(|key| authenticator.authenticate(key)) {
                Some(who) => {
                    request.extensions_mut().insert(who);
                }
                None => {
                    // Whatever a middleware put there, this service's keys decide.
                    request.extensions_mut().remove::<Authenticated>();
                }
            }
        } else if let Some(anonymous) = &self.anonymous
            && request.extensions().get::<Authenticated>().is_none()
        {
            request.extensions_mut().insert(anonymous.clone());
        }
        if request.extensions().get::<Authenticated>().is_none() {
            let mut response = plain(
                StatusCode::UNAUTHORIZED,
                "a valid bearer key is required (Authorization: Bearer <key>)",
            );
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return Box::pin(std::future::ready(Ok(response)));
        }
        let principal = request
            .extensions()
            .get::<Authenticated>()
            .map(|who| who.caller().principal().to_owned())
            .unwrap_or_default();
        let session = request
            .headers()
            .get("mcp-session-id")
            .and_then(|value| value.to_str().ok());
        if let Some(id) = session
            && !self.owners.allows(id, &principal)
        {
            // Not yours and not there are one answer (rmcp's for an unknown session).
            return Box::pin(std::future::ready(Ok(plain(
                StatusCode::NOT_FOUND,
                "Not Found: Session not found",
            ))));
        }
        let opens = request.method() == Method::POST && session.is_none();
        // A request without a session opens one: refused up front when none is free, so the
        // client gets a status it can act on instead of rmcp's generic 500.
        if opens && self.sessions.available_permits() == 0 {
            let mut response = plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many MCP sessions are open; try again later",
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            return Box::pin(std::future::ready(Ok(response)));
        }
        let mut inner = self.inner.clone();
        if !opens {
            return Box::pin(
                async move { tower_service::Service::call(&mut inner, request).await },
            );
        }
        let tag = Arc::new(SessionTag);
        request.extensions_mut().insert(Arc::clone(&tag));
        let owners = Arc::clone(&self.owners);
        Box::pin(async move {
            let response = tower_service::Service::call(&mut inner, request).await?;
            // The session's handler holds the tag while the session lives.
            if let Some(id) = response
                .headers()
                .get("mcp-session-id")
                .and_then(|value| value.to_str().ok())
            {
                owners.record(id.to_owned(), principal, &tag);
            }
            Ok(response)
        })
    }
}
