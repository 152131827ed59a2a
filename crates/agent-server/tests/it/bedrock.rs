//! A model configured with `provider = "bedrock"`: the server builds the Bedrock adapter from
//! its configuration and answers through it (issue 18).

use std::path::Path;

use agent_backends::replay::{Cassette, ReplayServer};
use serde_json::{Value, json};

use crate::support::TestServer;

#[tokio::test]
async fn a_bedrock_model_answers_through_the_converse_api() {
    let upstream = ReplayServer::start([Cassette::from_file(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/providers/bedrock/stream-text.eventstream"),
    )
    .unwrap()])
    .await
    .unwrap();
    // The key variable must exist in this process, which cannot set one (no unsafe): cargo
    // sets CARGO_PKG_NAME for every test binary, so it stands in for AWS_BEARER_TOKEN_BEDROCK.
    let config = format!(
        r#"
[server]

[[server.models]]
name = "nova"
provider = "bedrock"
model = "us.amazon.nova-micro-v1:0"
base_url = "{}"
api_key_env = "CARGO_PKG_NAME"

[[server.tenants]]
name = "acme"
api_keys = ["key-acme-test-0001"]
"#,
        upstream.url()
    );
    let server = TestServer::with(&config, Vec::new()).await;
    let response = server
        .post("/v1/chat/completions", "key-acme-test-0001")
        .json(&json!({
            "model": "nova",
            "messages": [{"role": "user", "content": "What is the capital of Portugal?"}],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let answer = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        answer.starts_with("The capital of Portugal is Lisbon."),
        "{body}"
    );
    assert_eq!(body["usage"]["prompt_tokens"], 12, "{body}");

    let sent = upstream.requests();
    assert_eq!(sent.len(), 1);
    assert!(
        sent[0]
            .path
            .starts_with("/model/us.amazon.nova-micro-v1%3A0/converse"),
        "{}",
        sent[0].path
    );
    let authorization = sent[0]
        .headers
        .iter()
        .find(|(name, _)| name == "authorization")
        .map(|(_, value)| value.as_str());
    assert_eq!(authorization, Some("Bearer agent-server"));
    server.shutdown().await;
}
