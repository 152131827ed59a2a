//! A real token endpoint on loopback for the tests: it records every request, answers each
//! with the next scripted outcome (then keeps issuing tokens), and numbers its tokens.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;

/// How the endpoint answers one request.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// A token living this many seconds.
    Token(u64),
    /// An error status with this body.
    Fail(u16, &'static str),
}

/// One request the endpoint received.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) uri: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: String,
}

#[derive(Default)]
struct Inner {
    script: Vec<Answer>,
    seen: Vec<Seen>,
    issued: u64,
}

/// The endpoint; dropping it leaves the server running until the test's runtime ends.
#[derive(Clone)]
pub(crate) struct TokenServer {
    pub(crate) url: String,
    inner: Arc<Mutex<Inner>>,
    delay: Duration,
    lifetime: u64,
}

impl TokenServer {
    /// Starts the endpoint: tokens live `lifetime` seconds, each answer comes after `delay`,
    /// the first answers follow `script`.
    pub(crate) async fn start(lifetime: u64, delay: Duration, script: Vec<Answer>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = Self {
            url,
            inner: Arc::new(Mutex::new(Inner {
                script: script.into_iter().rev().collect(),
                ..Inner::default()
            })),
            delay,
            lifetime,
        };
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(server.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        server
    }

    /// Every request so far.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.inner.lock().unwrap().seen.clone()
    }
}

async fn answer(
    State(server): State<TokenServer>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let outcome = {
        let mut inner = server.inner.lock().unwrap();
        inner.seen.push(Seen {
            uri: uri.to_string(),
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        });
        let outcome = inner.script.pop().unwrap_or(Answer::Token(server.lifetime));
        if matches!(outcome, Answer::Token(_)) {
            inner.issued += 1;
        }
        (outcome, inner.issued)
    };
    tokio::time::sleep(server.delay).await;
    match outcome {
        (Answer::Token(lifetime), n) => axum::Json(serde_json::json!({
            "access_token": format!("token-{n}"),
            "expires_in": lifetime,
            "token_type": "Bearer",
        }))
        .into_response(),
        (Answer::Fail(status, body), _) => (
            StatusCode::from_u16(status).unwrap(),
            [("content-type", "application/json")],
            body,
        )
            .into_response(),
    }
}
