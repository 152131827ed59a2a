//! The Vertex AI and Azure OpenAI recordings of `fixtures/providers/SOURCES.md` (the rows
//! whose file names hold `vertex-` or `azure-`), replayed through the cloud configurations:
//! `cloud::vertex` with a service-account token and `cloud::azure` with an `api-key` or an
//! Entra ID token, each token from a loopback token endpoint. The request each sends (path
//! and query, headers with secrets redacted, body) and the message it assembles are pinned as
//! snapshots; the expectations of SOURCES.md are checked by `recordings`.

use std::sync::Arc;

use agent_backends::cloud::azure::{AzureAuth, AzureOpenAi, EntraCredentials};
use agent_backends::cloud::google::GoogleCredentials;
use agent_backends::cloud::vertex::Vertex;
use agent_backends::http::{HttpOptions, RetryPolicy};
use agent_backends::replay::{Cassette, RecordedRequest, ReplayServer};
use agent_types::{Backend, BackendError, Message, ModelRequest, StreamEvent, ToolSpec};
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::recordings::{Expected, cassette, table};

const TOKEN: &str =
    r#"{"access_token":"ya29.cloud-test-token","expires_in":3599,"token_type":"Bearer"}"#;

/// How the recording is reached.
#[derive(Debug, Clone, Copy)]
enum Route {
    VertexGemini,
    VertexAnthropic,
    /// Azure Chat Completions: deployment URLs with an api-key.
    AzureChat,
    /// Azure Responses: the v1 API with an Entra ID token.
    AzureResponses,
}

fn route(file: &str) -> Option<Route> {
    let (dir, name) = file.split_once('/')?;
    Some(match (dir, name) {
        ("gemini", name) if name.contains("vertex-") => Route::VertexGemini,
        ("anthropic", name) if name.contains("vertex-") => Route::VertexAnthropic,
        ("openai-chat", name) if name.contains("azure-") => Route::AzureChat,
        ("openai-responses", name) if name.contains("azure-") => Route::AzureResponses,
        _ => return None,
    })
}

fn request(model: &str, stream: bool) -> ModelRequest {
    let mut request =
        ModelRequest::new(model, vec![Message::user("What is the weather in Lisbon?")]);
    request.system = Some("Answer briefly.".into());
    request.tools = vec![ToolSpec::new(
        "get_weather",
        "The weather in a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )];
    request.stream = stream;
    request
}

fn no_retries() -> HttpOptions {
    HttpOptions::default().with_retry(RetryPolicy::none())
}

async fn backend(route: Route, model_url: &str, token_url: &str) -> Box<dyn Backend> {
    match route {
        Route::VertexGemini | Route::VertexAnthropic => {
            let mut key: Value = serde_json::from_str(include_str!(
                "../../../../fixtures/cloud/test-service-account.json"
            ))
            .unwrap();
            key["token_uri"] = json!(format!("{token_url}/token"));
            let source = GoogleCredentials::from_json(&key.to_string())
                .unwrap()
                .into_source();
            let vertex = Vertex::new("agentry-test-project", "us-east5", Arc::new(source))
                .with_root(model_url);
            match route {
                Route::VertexGemini => Box::new(vertex.gemini_with(no_retries())),
                _ => Box::new(
                    vertex
                        .anthropic_with(no_retries())
                        .with_beta("context-1m-2025-08-07"),
                ),
            }
        }
        Route::AzureChat => Box::new(
            AzureOpenAi::new(model_url, AzureAuth::ApiKey("azure-secret-key".into()))
                .with_api_version("2024-10-21")
                .chat_with(no_retries())
                .unwrap(),
        ),
        Route::AzureResponses => {
            let source = EntraCredentials::client_secret(
                token_url,
                "tenant-id",
                "client-id",
                "entra-secret",
            )
            .into_source();
            Box::new(
                AzureOpenAi::new(model_url, AzureAuth::Entra(Arc::new(source)))
                    .responses_with(no_retries())
                    .unwrap(),
            )
        }
    }
}

/// The request as sent, with every credential redacted.
fn shown(request: &RecordedRequest) -> Value {
    let headers: serde_json::Map<String, Value> = request
        .headers
        .iter()
        .filter(|(name, _)| {
            !matches!(
                name.as_str(),
                "host" | "content-length" | "accept" | "accept-encoding" | "user-agent"
            )
        })
        .map(|(name, value)| {
            let value = match name.as_str() {
                "authorization" => value
                    .split_once(' ')
                    .map_or("<redacted>".to_owned(), |(scheme, _)| {
                        format!("{scheme} <redacted>")
                    }),
                "api-key" => "<redacted>".to_owned(),
                _ => value.clone(),
            };
            (name.clone(), Value::String(value))
        })
        .collect();
    json!({
        "method": request.method,
        "path": request.path,
        "headers": headers,
        "body": request.json(),
    })
}

async fn replay(
    expected: &Expected,
    route: Route,
) -> (Vec<RecordedRequest>, Value, Vec<RecordedRequest>) {
    let recorded: Cassette = cassette(expected);
    let stream = recorded.is_stream();
    let tokens = ReplayServer::start([Cassette::new(200, "application/json", TOKEN)])
        .await
        .unwrap();
    let server = ReplayServer::start([recorded]).await.unwrap();
    let model = match route {
        Route::VertexGemini => "gemini-2.5-flash",
        Route::VertexAnthropic => "claude-sonnet-4-5@20250929",
        Route::AzureChat | Route::AzureResponses => "my-gpt-deployment",
    };
    let backend = backend(route, &server.url(), &tokens.url()).await;
    let request = request(model, stream);
    let mut events: Vec<StreamEvent> = Vec::new();
    let mut error: Option<BackendError> = None;
    let mut stream = backend.stream(&request);
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(failed) => {
                error = Some(failed);
                break;
            }
        }
    }
    drop(stream);
    let outcome = match error {
        Some(error) => json!({"error": {"kind": error.kind, "message": error.message}}),
        None => {
            let mut assembler = agent_types::MessageAssembler::new(false);
            for event in &events {
                assembler.observe(event).unwrap();
            }
            let message = assembler.finish();
            json!({
                "stop_reason": message.stop_reason,
                "text": message.text_content(),
                "tool_calls": message.tool_calls().map(|call| json!({"name": call.name, "arguments": call.arguments})).collect::<Vec<_>>(),
            })
        }
    };
    (server.requests(), outcome, tokens.requests())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_recordings_replay_through_the_cloud_configurations_with_their_requests_pinned() {
    let rows: Vec<(Expected, Route)> = table()
        .into_iter()
        .filter_map(|row| route(&row.file).map(|route| (row, route)))
        .collect();
    assert!(rows.len() >= 8, "{} cloud recordings", rows.len());
    let mut streamed_calls = [false; 4];
    let mut whole_calls = [false; 4];
    for (expected, route) in &rows {
        let (requests, outcome, token_requests) = replay(expected, *route).await;
        assert_eq!(requests.len(), 1, "{}", expected.file);
        let sent = &requests[0];
        // The credential went out and never in the clear of a snapshot.
        match route {
            Route::AzureChat => {
                assert_eq!(sent.header("api-key"), Some("azure-secret-key"));
                assert!(token_requests.is_empty());
            }
            _ => {
                assert_eq!(
                    sent.header("authorization"),
                    Some("Bearer ya29.cloud-test-token")
                );
                assert_eq!(token_requests.len(), 1, "{}", expected.file);
            }
        }
        let snapshot = json!({"request": shown(sent), "outcome": outcome});
        let text = snapshot.to_string();
        assert!(
            !text.contains("azure-secret-key") && !text.contains("ya29."),
            "{text}"
        );
        if outcome["tool_calls"]
            .as_array()
            .is_some_and(|calls| !calls.is_empty())
        {
            let index = *route as usize;
            if cassette(expected).is_stream() {
                streamed_calls[index] = true;
            } else {
                whole_calls[index] = true;
            }
        }
        insta::with_settings!({
            snapshot_path => "snapshots/cloud",
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_json_snapshot!(expected.file.replace('/', "__"), snapshot);
        });
    }
    // Every route has replayed tool calls, streaming and not.
    assert_eq!(streamed_calls, [true; 4], "streamed tool calls per route");
    assert_eq!(whole_calls, [true; 4], "non-streamed tool calls per route");
}

/// The driver asks the token source before every attempt: a token that is due between two
/// calls is refreshed, and the second call carries the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_due_between_two_calls_is_refreshed_before_the_second() {
    let token = |value: &str, lifetime: u64| {
        Cassette::new(
            200,
            "application/json",
            format!(r#"{{"access_token":"{value}","expires_in":{lifetime}}}"#),
        )
    };
    let tokens = ReplayServer::start([token("token-a", 2), token("token-b", 3600)])
        .await
        .unwrap();
    let recorded = table()
        .into_iter()
        .find(|row| row.file == "gemini/vertex-tool-call.json")
        .unwrap();
    let server = ReplayServer::start([cassette(&recorded), cassette(&recorded)])
        .await
        .unwrap();
    let backend = backend(Route::VertexGemini, &server.url(), &tokens.url()).await;
    let request = request("gemini-2.5-flash", false);
    for pause in [0, 1100] {
        tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
        let events: Vec<_> = backend.stream(&request).collect().await;
        assert!(events.iter().all(Result::is_ok), "{events:?}");
    }
    let sent: Vec<_> = server
        .requests()
        .iter()
        .map(|request| request.header("authorization").unwrap().to_owned())
        .collect();
    assert_eq!(sent, ["Bearer token-a", "Bearer token-b"]);
    assert_eq!(tokens.requests().len(), 2);
}
