//! Images and files in a user turn on `/v1/ui/chat` (`file` parts), `/v1/ag-ui` (`image`,
//! `document` parts) and `/v1/responses` (`input_image`, `input_file`): what reaches the
//! model (a scripted, recording backend), the limits and their typed 400s, and the real
//! clients (`tests/node_client/attachments.mjs`).

use std::sync::Arc;
use std::time::Duration;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use serde_json::{Value, json};

use crate::openai::client_program;

const KEY: &str = "key-acme-test-0001";
const PIXEL: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const PDF: &str = "JVBERi0xLjQK";

pub(crate) struct Server {
    url: String,
    backend: Arc<ScriptedBackend>,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Server {
    /// The demo configuration with a body limit above the attachments' (so theirs is the one
    /// that refuses) and a model `vision` that answers "A red pixel." to anything.
    pub(crate) async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let toml =
            crate::support::CONFIG.replace("[server]\n", "[server]\nmax_body_bytes = 33554432\n");
        let mut config = agent_server::ServerConfig::from_toml(&toml).unwrap();
        config.store = agent_server::StoreConfig::Sqlite {
            path: dir.path().join("sessions.db"),
        };
        let backend =
            Arc::new(ScriptedBackend::cycle([ScriptedTurn::text("A red pixel.")]).recording());
        let state = agent_server::ServerBuilder::new(config)
            .with_model("vision", "scripted-vision", backend.clone())
            .build()
            .await
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(agent_server::serve(listener, state, std::future::pending()));
        Self {
            url,
            backend,
            client: reqwest::Client::new(),
            _dir: dir,
        }
    }

    pub(crate) async fn post(&self, path: &str, body: &Value) -> (u16, String) {
        let response = self
            .client
            .post(format!("{}{path}", self.url))
            .bearer_auth(KEY)
            .json(body)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    /// The user turns of every model request so far, as JSON.
    pub(crate) fn user_turns(&self) -> Vec<Value> {
        self.backend
            .requests()
            .iter()
            .map(|request| {
                let last = request.messages.last().unwrap();
                serde_json::to_value(last).unwrap()
            })
            .collect()
    }
}

pub(crate) fn session() -> Value {
    json!({"model": "vision", "tools": []})
}

fn ui_turn(parts: Value) -> Value {
    json!({"id": "u1", "role": "user", "parts": parts})
}

#[tokio::test]
async fn images_and_files_reach_the_model_from_each_protocol() {
    let server = Server::start().await;
    let (status, body) = server
        .post(
            "/v1/ui/chat",
            &json!({"id": "ui_files", "session": session(), "messages": [ui_turn(json!([
                {"type": "text", "text": "What is in this image?"},
                {"type": "file", "mediaType": "image/png", "filename": "pixel.png",
                 "url": format!("data:image/png;base64,{PIXEL}")},
                {"type": "file", "mediaType": "application/pdf", "filename": "report.pdf",
                 "url": "https://example.com/report.pdf"},
            ]))]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("A red pixel."), "{body}");

    let (status, body) = server
        .post(
            "/v1/ag-ui",
            &json!({"threadId": "agui_files", "runId": "r1", "tools": [], "context": [],
                    "forwardedProps": {"session": session()},
                    "messages": [{"id": "u1", "role": "user", "content": [
                {"type": "text", "text": "What is in this image?"},
                {"type": "image", "source": {"type": "data", "value": PIXEL, "mimeType": "image/png"}},
                {"type": "image", "source": {"type": "url", "value": "https://example.com/b.jpg"}},
                {"type": "document", "source": {"type": "data", "value": PDF, "mimeType": "application/pdf"},
                 "metadata": {"filename": "report.pdf"}},
            ]}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("RUN_FINISHED"), "{body}");

    let (status, body) = server
        .post(
            "/v1/responses",
            &json!({"model": "vision", "input": [{"role": "user", "content": [
                {"type": "input_text", "text": "What is in this image?"},
                {"type": "input_image", "image_url": format!("data:image/png;base64,{PIXEL}"), "detail": "auto"},
                {"type": "input_file", "file_data": format!("data:application/pdf;base64,{PDF}"), "filename": "report.pdf"},
            ]}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");

    insta::assert_json_snapshot!("attachments_reaching_the_model", server.user_turns());
}

#[tokio::test]
async fn attachments_over_the_limits_are_typed_400s_before_any_model_call() {
    let server = Server::start().await;
    let image = |url: String| json!({"type": "file", "mediaType": "image/png", "url": url});
    // 5 MiB decoded is the most one attachment may be: a little more is refused from the
    // base64's length.
    let big = "A".repeat((5 << 20) / 3 * 4 + 8);
    let cases = [
        (
            json!([image(format!("data:image/png;base64,{big}"))]),
            "attachment_too_large",
        ),
        (
            json!(vec![image(format!("data:image/png;base64,{PIXEL}")); 9]),
            "attachment_limit",
        ),
        (
            json!([image("http://example.com/a.png".into())]),
            "attachment_url",
        ),
        (
            json!([image("file:///etc/passwd".into())]),
            "attachment_url",
        ),
        (
            json!([image("data:image/png;base64,not base64!".into())]),
            "attachment_invalid",
        ),
        (
            json!([image("data:image/png,raw".into())]),
            "attachment_invalid",
        ),
        (
            json!([{"type": "file", "mediaType": "image/svg+xml", "url": "data:image/svg+xml;base64,PHN2Zz4="}]),
            "attachment_type",
        ),
    ];
    for (n, (parts, kind)) in cases.into_iter().enumerate() {
        let (status, body) = server
            .post(
                "/v1/ui/chat",
                &json!({"id": format!("refused_{n}"), "session": session(),
                        "messages": [ui_turn(parts)]}),
            )
            .await;
        assert_eq!(status, 400, "{kind}: {body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["type"], kind, "{body}");
    }
    let (status, body) = server
        .post(
            "/v1/ag-ui",
            &json!({"threadId": "agui_refused", "runId": "r1", "tools": [], "context": [],
                    "forwardedProps": {"session": session()},
                    "messages": [{"id": "u1", "role": "user", "content": [
                {"type": "image", "source": {"type": "url", "value": "http://example.com/a.png"}},
            ]}]}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("attachment_url"), "{body}");
    let (status, body) = server
        .post(
            "/v1/responses",
            &json!({"model": "vision", "input": [{"role": "user", "content": [
                {"type": "input_image", "image_url": format!("data:image/png;base64,{big}")},
            ]}]}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("at most 5242880 bytes"), "{body}");
    assert!(
        server.backend.requests().is_empty(),
        "no model call was made"
    );
}

/// `attachments.mjs`: the AI SDK's Chat, @ag-ui/client's HttpAgent and the openai package's
/// Responses API each send an image (and a file); the scripted model got them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_clients_send_images_and_files() {
    let Some(node) = client_program("AGENTRY_TEST_NODE", "node.sh") else {
        return;
    };
    let server = Server::start().await;
    let script = format!(
        "{}/tests/node_client/attachments.mjs",
        env!("CARGO_MANIFEST_DIR")
    );
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(&node)
            .arg(&script)
            .arg(&server.url)
            .arg(KEY)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the client finishes")
    .expect("node starts");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("all checks passed"), "{stderr}");
    let turns = server.user_turns();
    assert_eq!(turns.len(), 3, "{turns:#?}");
    let kinds = |turn: &Value| -> Vec<String> {
        turn["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|block| block["type"].as_str().unwrap().to_owned())
            .collect()
    };
    for turn in &turns {
        assert_eq!(kinds(turn), ["text", "image", "file"], "{turn}");
        assert_eq!(turn["content"][1]["source"]["data"], PIXEL, "{turn}");
    }
}
