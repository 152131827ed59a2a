use std::sync::Arc;
use std::time::Duration;

use agent_types::BackendErrorKind;

use super::*;
use crate::cloud::test_server::{Answer, TokenServer};

/// A client-credentials fetcher against the test endpoint, with a secret that must never leak.
#[derive(Debug)]
struct Form {
    url: String,
}

impl TokenFetcher for Form {
    fn fetch<'a>(&'a self, client: &'a reqwest::Client) -> FetchFuture<'a> {
        Box::pin(request_token(
            form_post(
                client,
                &self.url,
                &[
                    ("grant_type", "client_credentials"),
                    ("client_secret", "s3cret value"),
                ],
            ),
            "the test client",
            "set TEST_CLIENT_SECRET",
        ))
    }
}

fn source(server: &TokenServer) -> TokenSource {
    TokenSource::new(Form {
        url: format!("{}/token", server.url),
    })
}

fn value(header: &HeaderValue) -> &str {
    header.to_str().unwrap()
}

#[tokio::test]
async fn a_token_is_cached_until_it_is_due_and_refreshed_ahead_of_expiry() {
    // Tokens live 2 s: due after 1 s (half the lifetime, under five minutes).
    let server = TokenServer::start(2, Duration::ZERO, vec![]).await;
    let source = source(&server);
    let first = source.authorization().await.unwrap();
    assert_eq!(value(&first), "Bearer token-1");
    assert!(first.is_sensitive());
    for _ in 0..10 {
        assert_eq!(
            value(&source.authorization().await.unwrap()),
            "Bearer token-1"
        );
    }
    assert_eq!(server.seen().len(), 1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        value(&source.authorization().await.unwrap()),
        "Bearer token-2"
    );
    assert_eq!(server.seen().len(), 2);
    assert_eq!(source.refreshes(), 2);
    // The form is what a token endpoint expects.
    assert_eq!(
        server.seen()[0].body,
        "grant_type=client_credentials&client_secret=s3cret+value"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_calls_wait_for_one_refresh() {
    let server = TokenServer::start(3600, Duration::from_millis(200), vec![]).await;
    let source = Arc::new(source(&server));
    let calls = (0..50).map(|_| {
        let source = source.clone();
        tokio::spawn(async move { source.authorization().await })
    });
    let headers = futures_util::future::join_all(calls).await;
    for header in headers {
        assert_eq!(value(&header.unwrap().unwrap()), "Bearer token-1");
    }
    assert_eq!(server.seen().len(), 1, "one request to the token endpoint");
    assert_eq!(source.refreshes(), 1);
}

#[tokio::test]
async fn a_failed_refresh_is_an_authentication_error_and_the_next_call_tries_again() {
    let server = TokenServer::start(
        3600,
        Duration::ZERO,
        vec![Answer::Fail(
            401,
            r#"{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided."}"#,
        )],
    )
    .await;
    let source = source(&server);
    let error = source.authorization().await.unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::Authentication);
    assert_eq!(error.status, Some(401));
    assert!(
        error.message.contains("invalid_client"),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("set TEST_CLIENT_SECRET"),
        "{}",
        error.message
    );
    assert!(!error.message.contains("s3cret"), "{}", error.message);
    // Not cached: the next call refreshes again and succeeds.
    assert_eq!(
        value(&source.authorization().await.unwrap()),
        "Bearer token-1"
    );
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn a_server_error_or_an_unreachable_endpoint_is_retryable() {
    let server = TokenServer::start(3600, Duration::ZERO, vec![Answer::Fail(503, "busy")]).await;
    let error = source(&server).authorization().await.unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::Server);
    assert!(error.is_retryable());

    // A port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/token", listener.local_addr().unwrap());
    drop(listener);
    let error = TokenSource::new(Form { url })
        .authorization()
        .await
        .unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::Connection);
    assert!(!error.message.contains("127.0.0.1"), "{}", error.message);
}

#[tokio::test]
async fn a_refresh_that_fails_before_expiry_keeps_the_current_token() {
    // Due after 1 s, expired after 2 s; the refresh at 1.1 s fails.
    let server = TokenServer::start(
        2,
        Duration::ZERO,
        vec![
            Answer::Token(2),
            Answer::Fail(500, "{}"),
            Answer::Fail(500, "{}"),
        ],
    )
    .await;
    let source = source(&server);
    assert_eq!(
        value(&source.authorization().await.unwrap()),
        "Bearer token-1"
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        value(&source.authorization().await.unwrap()),
        "Bearer token-1"
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // Expired now: the second failure is the caller's.
    assert_eq!(
        source.authorization().await.unwrap_err().kind,
        BackendErrorKind::Server
    );
    assert_eq!(
        value(&source.authorization().await.unwrap()),
        "Bearer token-2"
    );
}

#[tokio::test]
async fn tokens_never_reach_debug_output() {
    let server = TokenServer::start(3600, Duration::ZERO, vec![]).await;
    let source = source(&server);
    source.authorization().await.unwrap();
    let shown = format!(
        "{source:?} {:?}",
        AccessToken::new("token-1", Duration::ZERO)
    );
    assert!(!shown.contains("token-1"), "{shown}");
    assert!(!shown.contains("s3cret"), "{shown}");
}

#[test]
fn forms_are_percent_encoded() {
    assert_eq!(
        form(&[("a b", "x&y=z/é"), ("scope", "https://x/.default")]),
        "a+b=x%26y%3Dz%2F%C3%A9&scope=https%3A%2F%2Fx%2F.default"
    );
}
