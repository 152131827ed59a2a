//! [`ReplayServer`]: a loopback HTTP/1.1 server that answers with recorded responses, and
//! [`ReplayBackend`]: an adapter pointed at one.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use agent_types::{Backend, BackendStream, Capabilities, ModelRequest};
use bytes::Bytes;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::cassette::Cassette;
use crate::Provider;
use crate::error::Error;
use crate::http::{HttpOptions, RetryPolicy};

/// A request the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordedRequest {
    /// The method (`POST`).
    pub method: String,
    /// The path and query (`/v1/messages`).
    pub path: String,
    /// The headers, names lower-cased, in the order sent.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Bytes,
}

impl RecordedRequest {
    /// The body parsed as JSON, if it is JSON.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The first header with this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

#[derive(Debug, Default)]
struct Shared {
    queue: VecDeque<Cassette>,
    requests: Vec<RecordedRequest>,
}

/// A loopback HTTP/1.1 server answering each request with the next [`Cassette`] in line.
///
/// It binds `127.0.0.1` on a free port and runs on the current tokio runtime until dropped.
/// When the cassettes run out it answers `501` with a JSON error that says so, so a test that
/// makes one call too many fails with a clear message instead of hanging.
#[derive(Debug)]
pub struct ReplayServer {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    task: JoinHandle<()>,
}

impl ReplayServer {
    /// Starts a server with these cassettes queued.
    ///
    /// # Errors
    ///
    /// [`Error::Replay`] when no loopback port can be bound.
    pub async fn start(cassettes: impl IntoIterator<Item = Cassette>) -> Result<Self, Error> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|error| Error::Replay(format!("cannot bind a loopback port: {error}")))?;
        let addr = listener
            .local_addr()
            .map_err(|error| Error::Replay(error.to_string()))?;
        let shared = Arc::new(Mutex::new(Shared {
            queue: cassettes.into_iter().collect(),
            requests: Vec::new(),
        }));
        let state = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = Arc::clone(&state);
                tokio::spawn(async move {
                    if let Err(error) = serve(stream, &state).await {
                        tracing::debug!(%error, "replay connection ended");
                    }
                });
            }
        });
        Ok(Self { addr, shared, task })
    }

    /// The server's base URL (`http://127.0.0.1:<port>`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues one more response.
    pub fn push(&self, cassette: Cassette) {
        self.lock().queue.push_back(cassette);
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.lock().requests.clone()
    }

    /// How many cassettes are still queued.
    pub fn remaining(&self) -> usize {
        self.lock().queue.len()
    }

    /// The adapter for `provider`, pointed at this server, with these HTTP settings.
    ///
    /// # Errors
    ///
    /// [`Error::NotCompiled`] when the provider's feature is off.
    pub fn backend(
        &self,
        provider: Provider,
        http: HttpOptions,
    ) -> Result<Box<dyn Backend>, Error> {
        provider.backend(&self.url(), Some("replay-key".to_owned()), http)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for ReplayServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A provider adapter talking to a [`ReplayServer`]: the real adapter, the real HTTP client,
/// recorded bytes. Retries are off, so each call consumes exactly one cassette.
pub struct ReplayBackend {
    server: ReplayServer,
    adapter: Box<dyn Backend>,
    provider: Provider,
}

impl ReplayBackend {
    /// Starts a server with these cassettes and points `provider`'s adapter at it.
    ///
    /// # Errors
    ///
    /// As for [`ReplayServer::start`] and [`ReplayServer::backend`].
    pub async fn start(
        provider: Provider,
        cassettes: impl IntoIterator<Item = Cassette>,
    ) -> Result<Self, Error> {
        let server = ReplayServer::start(cassettes).await?;
        let http = HttpOptions::default().with_retry(RetryPolicy::none());
        let adapter = server.backend(provider, http)?;
        Ok(Self {
            server,
            adapter,
            provider,
        })
    }

    /// The server (to queue more responses or read the requests the adapter sent).
    pub fn server(&self) -> &ReplayServer {
        &self.server
    }

    /// The provider being replayed.
    pub fn provider(&self) -> Provider {
        self.provider
    }
}

impl Backend for ReplayBackend {
    fn capabilities(&self) -> Capabilities {
        self.adapter.capabilities()
    }

    fn stream<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        self.adapter.stream(request)
    }

    fn stream_unassembled<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        self.adapter.stream_unassembled(request)
    }

    fn provider_name(&self) -> &str {
        self.adapter.provider_name()
    }
}

impl std::fmt::Debug for ReplayBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayBackend")
            .field("provider", &self.provider)
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

async fn serve(stream: TcpStream, shared: &Mutex<Shared>) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let (reader, mut writer) = stream.into_split();
    let mut reader = BufReader::new(reader);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_owned();
        let path = parts.next().unwrap_or_default().to_owned();
        let mut headers = Vec::new();
        let mut length = 0usize;
        loop {
            line.clear();
            if reader.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let name = name.trim().to_ascii_lowercase();
                let value = value.trim().to_owned();
                if name == "content-length" {
                    length = value.parse().unwrap_or(0);
                }
                headers.push((name, value));
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).await?;
        let cassette = {
            let mut shared = shared.lock().unwrap_or_else(PoisonError::into_inner);
            shared.requests.push(RecordedRequest {
                method,
                path: path.clone(),
                headers,
                body: Bytes::from(body),
            });
            shared.queue.pop_front()
        };
        let cassette = cassette.unwrap_or_else(|| {
            let message = format!("replay: no recorded response left for {path}");
            Cassette::new(
                501,
                "application/json",
                serde_json::json!({"error": {"message": message, "type": "replay_exhausted"}})
                    .to_string(),
            )
        });
        let cut = write_response(&mut writer, &cassette).await?;
        if cut {
            return Ok(());
        }
    }
}

/// Writes one response with chunked transfer encoding; returns whether the connection was cut.
async fn write_response(
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
    cassette: &Cassette,
) -> std::io::Result<bool> {
    let mut head = format!(
        "HTTP/1.1 {} Replay\r\ncontent-type: {}\r\ntransfer-encoding: chunked\r\n",
        cassette.status, cassette.content_type
    );
    for (name, value) in &cassette.headers {
        head.push_str(name);
        head.push_str(": ");
        head.push_str(value);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    writer.write_all(head.as_bytes()).await?;
    writer.flush().await?;
    let body = match cassette.cut_after {
        Some(limit) => &cassette.body[..limit.min(cassette.body.len())],
        None => &cassette.body[..],
    };
    for (at, piece) in cassette.chunking.pieces(body).into_iter().enumerate() {
        if piece.is_empty() {
            continue;
        }
        if let Some(delay) = cassette.chunk_delay.filter(|_| at > 0) {
            tokio::time::sleep(delay).await;
        }
        let mut frame = Vec::with_capacity(piece.len() + 16);
        frame.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        frame.extend_from_slice(piece);
        frame.extend_from_slice(b"\r\n");
        writer.write_all(&frame).await?;
        writer.flush().await?;
    }
    if cassette.cut_after.is_some() {
        writer.shutdown().await?;
        return Ok(true);
    }
    writer.write_all(b"0\r\n\r\n").await?;
    writer.flush().await?;
    Ok(false)
}
