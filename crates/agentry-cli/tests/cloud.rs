//! The cloud providers through the real binary: Vertex AI (a service-account key exchanged at a
//! loopback token endpoint) and Azure OpenAI (api-key, deployment URLs), and the exit status 2
//! naming what to set when credentials are missing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use agent_backends::replay::{Cassette, ReplayServer};
use serde_json::{Value, json};

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(path)
}

/// The binary with no cloud credentials or configuration from the machine running the tests.
fn agentry() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentry"));
    for key in [
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_CLOUD_PROJECT",
        "GOOGLE_CLOUD_LOCATION",
        "CLOUD_ML_REGION",
        "CLOUDSDK_CONFIG",
        "GCE_METADATA_HOST",
        "AZURE_OPENAI_ENDPOINT",
        "AZURE_OPENAI_API_KEY",
        "AZURE_OPENAI_API_VERSION",
        "OPENAI_API_VERSION",
        "AZURE_TENANT_ID",
        "AZURE_CLIENT_ID",
        "AZURE_CLIENT_SECRET",
        "AZURE_FEDERATED_TOKEN_FILE",
        "AGENTRY_CONFIG",
    ] {
        command.env_remove(key);
    }
    command
        .env("HOME", home())
        .env("XDG_CONFIG_HOME", home().join(".config"))
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    command
}

fn home() -> &'static Path {
    static HOME: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        let home = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cloud-home-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).unwrap();
        home
    })
}

fn run(command: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = command.output().unwrap();
    (
        status.code().unwrap_or(-1),
        String::from_utf8(stdout).unwrap(),
        String::from_utf8(stderr).unwrap(),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn missing_cloud_credentials_exit_2_naming_what_to_set() {
    let key_file = home().join("user.json");
    std::fs::write(
        &key_file,
        json!({"type": "authorized_user", "client_id": "c", "client_secret": "s",
               "refresh_token": "r"})
        .to_string(),
    )
    .unwrap();
    /// The provider, the variables set, and what the message must name.
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case<'_>; 5] = [
        ("vertex-gemini", &[], "GOOGLE_APPLICATION_CREDENTIALS"),
        ("vertex-anthropic", &[], "GOOGLE_APPLICATION_CREDENTIALS"),
        (
            "vertex-gemini",
            &[("GOOGLE_APPLICATION_CREDENTIALS", "user.json")],
            "GOOGLE_CLOUD_PROJECT",
        ),
        ("azure-openai", &[], "AZURE_OPENAI_ENDPOINT"),
        (
            "azure-openai-responses",
            &[("AZURE_OPENAI_ENDPOINT", "https://res.openai.azure.com")],
            "AZURE_OPENAI_API_KEY",
        ),
    ];
    for (provider, env, expected) in cases {
        let mut command = agentry();
        command.args(["run", "--provider", provider, "--model", "m", "hi"]);
        for (name, value) in env {
            let value = if value.ends_with(".json") {
                home().join(value).display().to_string()
            } else {
                (*value).to_owned()
            };
            command.env(name, value);
        }
        let (code, stdout, stderr) = run(&mut command);
        assert_eq!(code, 2, "{provider}: {stderr}");
        assert!(stdout.is_empty(), "{provider}");
        assert!(stderr.contains(expected), "{provider}: {stderr}");
    }
}

#[test]
fn vertex_gemini_runs_with_a_service_account_token() {
    let runtime = runtime();
    let tokens = runtime
        .block_on(ReplayServer::start([Cassette::new(
            200,
            "application/json",
            r#"{"access_token":"ya29.test-token","expires_in":3599,"token_type":"Bearer"}"#,
        )]))
        .unwrap();
    let model = runtime
        .block_on(ReplayServer::start([Cassette::from_file(fixture(
            "providers/gemini/stream-text.sse",
        ))
        .unwrap()]))
        .unwrap();
    let mut key: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("cloud/test-service-account.json")).unwrap(),
    )
    .unwrap();
    key["token_uri"] = json!(format!("{}/token", tokens.url()));
    let key_file = home().join("service-account.json");
    std::fs::write(&key_file, key.to_string()).unwrap();

    let (code, stdout, stderr) = run(agentry()
        .args([
            "run",
            "--provider",
            "vertex-gemini",
            "--base-url",
            &model.url(),
            "Say hi",
        ])
        .env("GOOGLE_APPLICATION_CREDENTIALS", &key_file)
        .env("GOOGLE_CLOUD_LOCATION", "us-central1"));
    assert_eq!(code, 0, "{stderr}");
    assert!(!stdout.trim().is_empty());
    let token_request = &tokens.requests()[0];
    assert_eq!(token_request.path, "/token");
    assert!(
        String::from_utf8_lossy(&token_request.body).contains("grant_type=urn%3Aietf"),
        "the JWT grant"
    );
    let request = &model.requests()[0];
    assert_eq!(
        request.path,
        "/v1/projects/agentry-test-project/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    assert_eq!(
        request.header("authorization"),
        Some("Bearer ya29.test-token")
    );
    assert_eq!(request.header("x-goog-api-key"), None);
}

#[test]
fn azure_openai_runs_against_a_deployment_with_its_api_version() {
    let runtime = runtime();
    let model = runtime
        .block_on(ReplayServer::start([Cassette::from_file(fixture(
            "providers/openai-chat/stream-text-usage.sse",
        ))
        .unwrap()]))
        .unwrap();
    let (code, stdout, stderr) = run(agentry()
        .args([
            "run",
            "--provider",
            "azure-openai",
            "--model",
            "my-gpt-deployment",
            "Say hi",
        ])
        .env("AZURE_OPENAI_ENDPOINT", model.url())
        .env("AZURE_OPENAI_API_KEY", "azure-test-key")
        .env("AZURE_OPENAI_API_VERSION", "2024-10-21"));
    assert_eq!(code, 0, "{stderr}");
    assert!(!stdout.trim().is_empty());
    let request = &model.requests()[0];
    assert_eq!(
        request.path,
        "/openai/deployments/my-gpt-deployment/chat/completions?api-version=2024-10-21"
    );
    assert_eq!(request.header("api-key"), Some("azure-test-key"));
    assert_eq!(request.header("authorization"), None);
    // The key is never echoed.
    assert!(!stderr.contains("azure-test-key") && !stdout.contains("azure-test-key"));
}

#[test]
fn azure_openai_responses_runs_with_an_entra_id_token_on_the_v1_api() {
    let runtime = runtime();
    let tokens = runtime
        .block_on(ReplayServer::start([Cassette::new(
            200,
            "application/json",
            r#"{"token_type":"Bearer","expires_in":3599,"ext_expires_in":3599,"access_token":"eyJ0eXAi.entra-test"}"#,
        )]))
        .unwrap();
    let model = runtime
        .block_on(ReplayServer::start([Cassette::from_file(fixture(
            "providers/openai-responses/stream-text.sse",
        ))
        .unwrap()]))
        .unwrap();
    let (code, stdout, stderr) = run(agentry()
        .args([
            "run",
            "--provider",
            "azure-openai-responses",
            "--base-url",
            &model.url(),
            "--model",
            "my-deployment",
            "Say hi",
        ])
        .env("AZURE_TENANT_ID", "my-tenant")
        .env("AZURE_CLIENT_ID", "my-app")
        .env("AZURE_CLIENT_SECRET", "entra-client-secret")
        .env("AZURE_AUTHORITY_HOST", tokens.url()));
    assert_eq!(code, 0, "{stderr}");
    assert!(!stdout.trim().is_empty());
    let token_request = &tokens.requests()[0];
    assert_eq!(token_request.path, "/my-tenant/oauth2/v2.0/token");
    let form = String::from_utf8_lossy(&token_request.body).into_owned();
    assert!(
        form.contains("grant_type=client_credentials")
            && form.contains("client_id=my-app")
            && form.contains("scope=https%3A%2F%2Fcognitiveservices.azure.com%2F.default"),
        "{form}"
    );
    let request = &model.requests()[0];
    assert_eq!(request.path, "/openai/v1/responses");
    assert_eq!(
        request.header("authorization"),
        Some("Bearer eyJ0eXAi.entra-test")
    );
    assert_eq!(request.json().unwrap()["model"], "my-deployment");
    assert!(!stderr.contains("entra-client-secret"));
}

#[test]
fn gclouds_adc_file_and_the_metadata_server_are_found_without_a_key_file() {
    let runtime = runtime();
    let token = || {
        Cassette::new(
            200,
            "application/json",
            r#"{"access_token":"ya29.adc","expires_in":3599,"token_type":"Bearer"}"#,
        )
    };

    // gcloud auth application-default login: an authorized_user file in CLOUDSDK_CONFIG.
    let tokens = runtime.block_on(ReplayServer::start([token()])).unwrap();
    let model = runtime
        .block_on(ReplayServer::start([Cassette::from_file(fixture(
            "providers/anthropic/stream-text.sse",
        ))
        .unwrap()]))
        .unwrap();
    let gcloud = home().join("gcloud");
    std::fs::create_dir_all(&gcloud).unwrap();
    std::fs::write(
        gcloud.join("application_default_credentials.json"),
        json!({"type": "authorized_user", "client_id": "cid", "client_secret": "csecret",
               "refresh_token": "1//refresh", "quota_project_id": "quota-project",
               "token_uri": format!("{}/token", tokens.url())})
        .to_string(),
    )
    .unwrap();
    let (code, _, stderr) = run(agentry()
        .args([
            "run",
            "--provider",
            "vertex-anthropic",
            "--base-url",
            &model.url(),
            "Say hi",
        ])
        .env("CLOUDSDK_CONFIG", &gcloud)
        .env("CLOUD_ML_REGION", "us-east5"));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        String::from_utf8_lossy(&tokens.requests()[0].body).contains("grant_type=refresh_token")
    );
    let request = &model.requests()[0];
    assert_eq!(
        request.path,
        "/v1/projects/quota-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict"
    );
    assert_eq!(request.header("authorization"), Some("Bearer ya29.adc"));
    let body = request.json().unwrap();
    assert_eq!(body["anthropic_version"], "vertex-2023-10-16");
    assert!(body.get("model").is_none(), "{body}");

    // The metadata server named by GCE_METADATA_HOST; the project must be set.
    let metadata = runtime.block_on(ReplayServer::start([token()])).unwrap();
    let model = runtime
        .block_on(ReplayServer::start([Cassette::from_file(fixture(
            "providers/gemini/stream-text.sse",
        ))
        .unwrap()]))
        .unwrap();
    let host = metadata.url().trim_start_matches("http://").to_owned();
    let (code, _, stderr) = run(agentry()
        .args([
            "run",
            "--provider",
            "vertex-gemini",
            "--base-url",
            &model.url(),
            "Say hi",
        ])
        .env("GCE_METADATA_HOST", &host)
        .env("GOOGLE_CLOUD_PROJECT", "meta-project"));
    assert_eq!(code, 0, "{stderr}");
    let asked = &metadata.requests()[0];
    assert!(
        asked
            .path
            .starts_with("/computeMetadata/v1/instance/service-accounts/default/token"),
        "{}",
        asked.path
    );
    assert_eq!(asked.header("metadata-flavor"), Some("Google"));
    assert!(
        model.requests()[0]
            .path
            .starts_with("/v1/projects/meta-project/locations/global/")
    );
}
