use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use super::*;
use crate::cloud::test_server::{Answer, TokenServer};

const KEY_FILE: &str = include_str!("../../../../fixtures/cloud/test-service-account.json");

/// The test key file with its token endpoint moved to `url`.
fn service_account(url: &str) -> GoogleCredentials {
    let mut file: Value = serde_json::from_str(KEY_FILE).unwrap();
    file["token_uri"] = json!(url);
    GoogleCredentials::from_json(&file.to_string()).unwrap()
}

fn field<'a>(body: &'a str, name: &str) -> &'a str {
    body.split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
        .unwrap()
}

fn decode(part: &str) -> Value {
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
}

#[tokio::test]
async fn a_service_account_signs_an_rs256_assertion_its_token_endpoint_accepts() {
    let server = TokenServer::start(3600, Duration::ZERO, vec![]).await;
    let token_uri = format!("{}/token", server.url);
    let credentials = service_account(&token_uri);
    assert_eq!(credentials.project(), Some("agentry-test-project"));
    let GoogleCredentials::ServiceAccount(account) = &credentials else {
        panic!("not a service account");
    };
    let public = account.key.public().as_ref().to_vec();
    let source = credentials.into_source();
    let header = source.authorization().await.unwrap();
    assert_eq!(header.to_str().unwrap(), "Bearer token-1");

    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].uri, "/token");
    assert_eq!(
        seen[0].headers["content-type"],
        "application/x-www-form-urlencoded"
    );
    let body = &seen[0].body;
    assert_eq!(
        field(body, "grant_type"),
        "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"
    );
    // What Google's endpoint checks: the signature over header.claims with the key's public
    // half, and the claims.
    let jwt = field(body, "assertion");
    let parts: Vec<&str> = jwt.split('.').collect();
    assert_eq!(parts.len(), 3);
    let signed = format!("{}.{}", parts[0], parts[1]);
    ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, &public)
        .verify(
            signed.as_bytes(),
            &URL_SAFE_NO_PAD.decode(parts[2]).unwrap(),
        )
        .expect("the signature verifies");
    assert_eq!(
        decode(parts[0]),
        json!({"alg": "RS256", "typ": "JWT", "kid": "0123456789abcdef"})
    );
    let claims = decode(parts[1]);
    assert_eq!(
        claims["iss"],
        "agentry-test@agentry-test-project.iam.gserviceaccount.com"
    );
    assert_eq!(claims["aud"], token_uri.as_str());
    assert_eq!(claims["scope"], CLOUD_PLATFORM_SCOPE);
    let iat = claims["iat"].as_u64().unwrap();
    assert_eq!(claims["exp"].as_u64().unwrap(), iat + 3600);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(now.abs_diff(iat) < 60);
}

#[tokio::test]
async fn an_authorized_user_exchanges_its_refresh_token() {
    let server = TokenServer::start(3600, Duration::ZERO, vec![]).await;
    let file = json!({
        "type": "authorized_user",
        "client_id": "764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps.googleusercontent.com",
        "client_secret": "d-FL95Q19q7MQmFpd7hHD0Ty",
        "refresh_token": "1//refresh-secret",
        "quota_project_id": "my-quota-project",
        "token_uri": format!("{}/token", server.url),
    });
    let credentials = GoogleCredentials::from_json(&file.to_string()).unwrap();
    assert_eq!(credentials.project(), Some("my-quota-project"));
    let shown = format!("{credentials:?}");
    assert!(
        !shown.contains("refresh-secret") && !shown.contains("d-FL95"),
        "{shown}"
    );
    let source = credentials.into_source();
    source.authorization().await.unwrap();
    let body = &server.seen()[0].body;
    assert_eq!(field(body, "grant_type"), "refresh_token");
    assert_eq!(field(body, "refresh_token"), "1%2F%2Frefresh-secret");
    assert_eq!(field(body, "client_secret"), "d-FL95Q19q7MQmFpd7hHD0Ty");
}

#[tokio::test]
async fn the_metadata_server_is_asked_with_its_flavor_header() {
    let server = TokenServer::start(3600, Duration::ZERO, vec![]).await;
    let host = server.url.trim_start_matches("http://").to_owned();
    let source = GoogleCredentials::Metadata { host }.into_source();
    assert_eq!(
        source.authorization().await.unwrap().to_str().unwrap(),
        "Bearer token-1"
    );
    let seen = &server.seen()[0];
    assert_eq!(
        seen.uri,
        "/computeMetadata/v1/instance/service-accounts/default/token?scopes=https%3A%2F%2Fwww.googleapis.com%2Fauth%2Fcloud-platform"
    );
    assert_eq!(seen.headers["metadata-flavor"], "Google");
}

#[tokio::test]
async fn a_refused_key_names_the_account_and_what_to_set() {
    let server = TokenServer::start(
        3600,
        Duration::ZERO,
        vec![Answer::Fail(
            400,
            r#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#,
        )],
    )
    .await;
    let source = service_account(&format!("{}/token", server.url)).into_source();
    let error = source.authorization().await.unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::Authentication);
    assert!(
        error.message.contains("agentry-test@agentry-test-project")
            && error.message.contains("Invalid JWT Signature")
            && error.message.contains("GOOGLE_APPLICATION_CREDENTIALS"),
        "{}",
        error.message
    );
}

#[test]
fn unusable_key_files_are_named_without_their_secrets() {
    let unsupported = GoogleCredentials::from_json(r#"{"type": "external_account"}"#).unwrap_err();
    assert!(unsupported.contains("external_account"), "{unsupported}");
    let no_key = GoogleCredentials::from_json(
        r#"{"type": "service_account", "client_email": "a@b", "private_key": ""}"#,
    )
    .unwrap_err();
    assert!(no_key.contains("private_key"), "{no_key}");
    let bad_key = GoogleCredentials::from_json(
        r#"{"type": "service_account", "client_email": "a@b",
            "private_key": "-----BEGIN PRIVATE KEY-----\nTOPSECRETAAAA\n-----END PRIVATE KEY-----\n"}"#,
    )
    .unwrap_err();
    assert!(!bad_key.contains("TOPSECRET"), "{bad_key}");
    let not_json =
        GoogleCredentials::from_json("{\"type\": \"service_account\", SECRET").unwrap_err();
    assert!(!not_json.contains("SECRET"), "{not_json}");
    let shown = format!("{:?}", service_account("http://127.0.0.1:9/token"));
    assert!(!shown.contains("PRIVATE"), "{shown}");
    let missing_file = GoogleCredentials::from_file(Path::new("/nonexistent/key.json"))
        .unwrap_err()
        .to_string();
    assert!(
        missing_file.contains("/nonexistent/key.json")
            && missing_file.contains("GOOGLE_APPLICATION_CREDENTIALS"),
        "{missing_file}"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

    /// Any text, or a key file with any value in any field, is a typed error or credentials,
    /// never a panic, and an error never repeats a private key's text.
    #[test]
    fn any_key_file_is_read_without_panicking_or_echoing_secrets(
        text in ".{0,200}",
        field in proptest::sample::select(vec!["type", "client_email", "private_key", "token_uri", "refresh_token"]),
        value in "[A-Za-z0-9+/=_-]{0,60}",
    ) {
        let _ = GoogleCredentials::from_json(&text);
        let mut file: Value = serde_json::from_str(KEY_FILE).unwrap();
        let secret = format!("-----BEGIN PRIVATE KEY-----\nSECRET{value}\n-----END PRIVATE KEY-----\n");
        file["private_key"] = json!(secret);
        file[field] = json!(if field == "private_key" { secret.clone() } else { value.clone() });
        if let Err(message) = GoogleCredentials::from_json(&file.to_string()) {
            proptest::prop_assert!(!message.contains("SECRET"), "{}", message);
        }
    }
}
