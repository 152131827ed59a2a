//! A server in this test process on a loopback port, with a SQLite store in a temp dir.

use std::sync::Arc;
use std::time::Duration;

use agent_server::{AppState, ServerBuilder, ServerConfig, serve};
use agent_tools::Tool;
use serde_json::Value;
use tokio::sync::{Notify, oneshot};

/// The minimal configuration tests build on: the recorded demo model, one tenant `acme`
/// (key `key-acme-test-0001`) and one tenant `globex` (key `key-globex-test-01`), the calculator and clock.
pub(crate) const CONFIG: &str = r#"
[server]
tools = ["calculator", "clock"]

[[server.models]]
name = "demo"
provider = "replay"
recording = "anthropic"

[[server.tenants]]
name = "acme"
api_keys = ["key-acme-test-0001"]

[[server.tenants]]
name = "globex"
api_keys = ["key-globex-test-01"]
"#;

/// A running server.
pub(crate) struct TestServer {
    pub(crate) url: String,
    pub(crate) state: AppState,
    pub(crate) client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl TestServer {
    /// The demo configuration.
    pub(crate) async fn start() -> Self {
        Self::with(CONFIG, Vec::new()).await
    }

    /// `config` (TOML with a `[server]` section; the store is put in a temp dir unless the
    /// text names one) plus extra server-side tools.
    pub(crate) async fn with(config: &str, tools: Vec<Tool>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = ServerConfig::from_toml(config).unwrap();
        if let agent_server::StoreConfig::Sqlite { path } = &mut config.store {
            *path = dir.path().join("sessions.db");
        }
        let mut builder = ServerBuilder::new(config);
        for tool in tools {
            builder = builder.with_tool(tool);
        }
        let state = builder.build().await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let served = state.clone();
        let done = tokio::spawn(async move {
            serve(listener, served, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        Self {
            url,
            state,
            client: reqwest::Client::new(),
            stop: Some(stop),
            done: Some(done),
            _dir: dir,
        }
    }

    /// Starts the shutdown and waits for the drain to finish.
    pub(crate) async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(done) = self.done.take() {
            tokio::time::timeout(Duration::from_secs(30), done)
                .await
                .unwrap()
                .unwrap();
        }
    }

    pub(crate) fn post(&self, path: &str, key: &str) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}{path}", self.url))
            .bearer_auth(key)
    }

    pub(crate) fn get(&self, path: &str, key: &str) -> reqwest::RequestBuilder {
        self.client
            .get(format!("{}{path}", self.url))
            .bearer_auth(key)
    }

    /// DELETEs `path` as `key`'s tenant and returns the response, whatever its status.
    pub(crate) async fn delete(&self, path: &str, key: &str) -> reqwest::Response {
        let request = self.client.delete(format!("{}{path}", self.url));
        request.bearer_auth(key).send().await.unwrap()
    }

    /// POSTs `body` to `path` as `key`'s tenant and returns the response, whatever its status.
    pub(crate) async fn post_json(&self, path: &str, key: &str, body: &Value) -> reqwest::Response {
        self.post(path, key).json(body).send().await.unwrap()
    }

    /// GETs `path` as `key`'s tenant and parses the body, whatever the status.
    pub(crate) async fn get_json(&self, path: &str, key: &str) -> Value {
        let response = self.get(path, key).send().await.unwrap();
        response.json().await.unwrap()
    }

    /// `acme`'s session `id`, as GET returns it.
    pub(crate) async fn session(&self, id: &str) -> Value {
        self.get_json(&format!("/v1/sessions/{id}"), "key-acme-test-0001")
            .await
    }

    /// Starts an execute of "Weather?" on `acme`'s session `id` in a task and returns once
    /// `started` says the (slow) weather tool runs; [`finished_events`] reads its stream.
    pub(crate) async fn execute_until_started(&self, id: &str, started: &Notify) -> Running {
        let running = tokio::spawn(
            self.post(&format!("/v1/sessions/{id}/execute"), "key-acme-test-0001")
                .json(&serde_json::json!({"message": "Weather?"}))
                .send(),
        );
        tokio::time::timeout(Duration::from_secs(10), started.notified())
            .await
            .unwrap();
        running
    }

    /// A GET with no key: a public asset, or a route that must refuse an anonymous caller.
    pub(crate) fn get_anonymous(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.get(format!("{}{path}", self.url))
    }

    /// Creates a demo session for `acme` and returns its id.
    pub(crate) async fn create(&self, body: Value) -> String {
        let response = self
            .post("/v1/sessions", "key-acme-test-0001")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
        let created: Value = response.json().await.unwrap();
        created["id"].as_str().unwrap().to_owned()
    }

    /// Executes `body` on session `id` and returns every SSE event, parsed.
    pub(crate) async fn execute(&self, id: &str, body: Value) -> Vec<Value> {
        let response = self
            .post(&format!("/v1/sessions/{id}/execute"), "key-acme-test-0001")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
        parse_sse(&response.text().await.unwrap())
    }
}

/// An execute started by [`TestServer::execute_until_started`].
pub(crate) type Running = tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>;

/// The events of an execute started in the background, once its stream has ended.
pub(crate) async fn finished_events(running: Running) -> Vec<Value> {
    parse_sse(&running.await.unwrap().unwrap().text().await.unwrap())
}

/// The `data:` payloads of an SSE body, parsed as JSON.
pub(crate) fn parse_sse(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|frame| frame.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

/// A server tool `name` that takes `millis` to answer whatever its arguments, and says
/// when it starts.
pub(crate) fn slow_tool(name: &str, millis: u64, started: Arc<Notify>) -> Tool {
    Tool::from_json_fn(
        name,
        "Answers after a while.",
        serde_json::json!({"type": "object"}),
        move |_args, _ctx| {
            let started = Arc::clone(&started);
            async move {
                started.notify_one();
                tokio::time::sleep(Duration::from_millis(millis)).await;
                Ok(serde_json::json!({"waited_ms": millis}))
            }
        },
    )
}
