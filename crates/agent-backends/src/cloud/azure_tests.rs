use std::time::Duration;

use agent_types::{Message, ModelRequest};

use super::*;
use crate::cloud::test_server::TokenServer;
use crate::http::driver::Protocol;

fn field<'a>(body: &'a str, name: &str) -> &'a str {
    body.split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
        .unwrap()
}

#[tokio::test]
async fn a_client_secret_gets_a_cognitive_services_token_from_the_tenant() {
    let server = TokenServer::start(3600, Duration::ZERO, vec![]).await;
    let credentials =
        EntraCredentials::client_secret(&server.url, "my-tenant", "app-id", "very-secret");
    let shown = format!("{credentials:?}");
    assert!(!shown.contains("very-secret"), "{shown}");
    let source = credentials.into_source();
    assert_eq!(
        source.authorization().await.unwrap().to_str().unwrap(),
        "Bearer token-1"
    );
    let seen = &server.seen()[0];
    assert_eq!(seen.uri, "/my-tenant/oauth2/v2.0/token");
    assert_eq!(field(&seen.body, "grant_type"), "client_credentials");
    assert_eq!(field(&seen.body, "client_id"), "app-id");
    assert_eq!(field(&seen.body, "client_secret"), "very-secret");
    assert_eq!(
        field(&seen.body, "scope"),
        "https%3A%2F%2Fcognitiveservices.azure.com%2F.default"
    );
}

#[tokio::test]
async fn workload_identity_reads_the_rotated_token_file_on_every_refresh() {
    let server = TokenServer::start(2, Duration::ZERO, vec![]).await;
    let file = std::env::temp_dir().join(format!("agentry-azure-federated-{}", std::process::id()));
    std::fs::write(&file, "federated-one\n").unwrap();
    let source =
        EntraCredentials::federated_token_file(&server.url, "t", "app-id", &file).into_source();
    source.authorization().await.unwrap();
    std::fs::write(&file, "federated-two").unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        source.authorization().await.unwrap().to_str().unwrap(),
        "Bearer token-2"
    );
    let seen = server.seen();
    assert_eq!(field(&seen[0].body, "client_assertion"), "federated-one");
    assert_eq!(field(&seen[1].body, "client_assertion"), "federated-two");
    assert_eq!(
        field(&seen[1].body, "client_assertion_type"),
        "urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer"
    );
    std::fs::remove_file(&file).unwrap();
    let error = source_after_expiry(&server, &file).await;
    assert_eq!(error.kind, BackendErrorKind::Authentication);
    assert!(
        error.message.contains("AZURE_FEDERATED_TOKEN_FILE"),
        "{}",
        error.message
    );
}

async fn source_after_expiry(server: &TokenServer, file: &std::path::Path) -> BackendError {
    EntraCredentials::federated_token_file(&server.url, "t", "app-id", file)
        .into_source()
        .authorization()
        .await
        .unwrap_err()
}

fn request(model: &str, stream: bool) -> ModelRequest {
    let mut request = ModelRequest::new(model, vec![Message::user("hi")]);
    request.stream = stream;
    request
}

#[test]
fn urls_follow_the_v1_api_or_the_deployment_with_its_api_version() {
    let key = AzureAuth::ApiKey("k3y".into());
    let v1 = AzureOpenAi::new("https://res.openai.azure.com/", key.clone());
    let chat = v1.chat().unwrap();
    let prepared = chat.prepare(&request("my-gpt", true)).unwrap();
    assert_eq!(
        prepared.url,
        "https://res.openai.azure.com/openai/v1/chat/completions"
    );
    assert!(prepared.headers.get("authorization").is_none());
    let api_key = &chat.http().headers["api-key"];
    assert_eq!(api_key, "k3y");
    assert!(api_key.is_sensitive());
    assert_eq!(
        v1.responses()
            .unwrap()
            .prepare(&request("my-gpt", true))
            .unwrap()
            .url,
        "https://res.openai.azure.com/openai/v1/responses"
    );

    let dated = v1.with_api_version("2024-10-21");
    assert_eq!(
        dated
            .chat()
            .unwrap()
            .prepare(&request("my gpt/../x", false))
            .unwrap()
            .url,
        "https://res.openai.azure.com/openai/deployments/my%20gpt%2F..%2Fx/chat/completions?api-version=2024-10-21"
    );
    assert_eq!(
        dated
            .responses()
            .unwrap()
            .prepare(&request("my-gpt", false))
            .unwrap()
            .url,
        "https://res.openai.azure.com/openai/responses?api-version=2024-10-21"
    );
    assert!(!format!("{dated:?}").contains("k3y"));
}
