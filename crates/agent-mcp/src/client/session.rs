//! The live connection: connecting, reconnecting with backoff, notifications, and calls.

use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use agent_tools::{Handler, ToolContext, ToolError, ToolEvent, ToolStream};
use futures_util::{FutureExt, StreamExt};
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientCapabilities,
    ClientConfig, ClientRequest, Implementation, ProgressNotificationParam, RequestId,
    ServerResult,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RoleClient, RunningService, ServiceError,
};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::Value;
use tokio::sync::{Mutex, watch};

use super::config::{ServerConfig, Transport};
use super::content::map_result;
use super::http::{BoundedRetry, ReqwestClient};
use super::import::{Imported, import};
use crate::Error;

/// The first wait after a failed reconnect; it doubles per failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait between reconnect attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Bytes of one stderr line of a stdio server kept for the log; the rest is dropped.
const MAX_STDERR_LINE: usize = 4096;

/// Receives the server's notifications for one connection.
pub(crate) struct Notifications {
    progress: ProgressDispatcher,
    inner: Weak<Inner>,
}

impl ClientHandler for Notifications {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.handle_notification(params).await;
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // Listing needs this connection's service loop, which is running this callback: list
        // from a task so the loop can deliver the answer.
        spawn_refresh(self.inner.clone());
    }

    fn get_info(&self) -> ClientConfig {
        let mut implementation = Implementation::default();
        implementation.name = "agentry".to_owned();
        implementation.version = env!("CARGO_PKG_VERSION").to_owned();
        ClientConfig::new(ClientCapabilities::default(), implementation)
    }
}

/// Lists and imports the tools again on a task of its own. A plain function returning a boxed
/// `Send` future, so that `Inner::peer` (which calls it) and the refresh (which calls
/// `Inner::peer`) do not make one recursive future type.
fn spawn_refresh(inner: Weak<Inner>) {
    let refresh: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
        if let Some(inner) = inner.upgrade()
            && let Err(error) = Inner::refresh(&inner).await
        {
            tracing::warn!(server = %inner.config.name, %error, "refreshing MCP tools failed");
        }
    });
    tokio::spawn(refresh);
}

type Running = RunningService<RoleClient, Notifications>;

/// The connection's state: up (with its generation, so a late failure of an old connection
/// does not tear down a new one) or down since a failed attempt.
#[derive(Default)]
struct Link {
    running: Option<(u64, Running)>,
    generation: u64,
    failures: u32,
    retry_at: Option<Instant>,
    closed: bool,
}

/// Shared by the client and every tool it registered.
pub(crate) struct Inner {
    pub(crate) config: ServerConfig,
    http: ReqwestClient,
    link: Mutex<Link>,
    progress: ProgressDispatcher,
    pub(crate) imported: RwLock<Imported>,
    pub(crate) changed: watch::Sender<u64>,
}

fn backoff(failures: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
        .min(MAX_BACKOFF)
}

fn connect_error(config: &ServerConfig, reason: impl std::fmt::Display) -> Error {
    Error::Connect {
        server: config.name.clone(),
        reason: reason.to_string(),
    }
}

/// Copies a stdio server's stderr to `tracing`, a line at a time, each cut to
/// [`MAX_STDERR_LINE`] bytes so a server writing without newlines cannot grow a buffer.
fn forward_stderr(server: String, stderr: tokio::process::ChildStderr) {
    use tokio::io::AsyncReadExt;
    tokio::spawn(async move {
        let mut stderr = stderr;
        let mut chunk = [0u8; 4096];
        let mut line: Vec<u8> = Vec::new();
        let mut dropped = false;
        loop {
            let read = match stderr.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            for &byte in &chunk[..read] {
                if byte == b'\n' {
                    let text = String::from_utf8_lossy(&line);
                    tracing::info!(server = %server, truncated = dropped, "{}", text.trim_end());
                    line.clear();
                    dropped = false;
                } else if line.len() < MAX_STDERR_LINE {
                    line.push(byte);
                } else {
                    dropped = true;
                }
            }
        }
        if !line.is_empty() {
            tracing::info!(server = %server, truncated = dropped, "{}", String::from_utf8_lossy(&line));
        }
    });
}

impl Inner {
    pub(crate) fn new(config: ServerConfig, http: reqwest::Client) -> Arc<Self> {
        Arc::new(Self {
            config,
            http: ReqwestClient::new(http),
            link: Mutex::new(Link::default()),
            progress: ProgressDispatcher::new(),
            imported: RwLock::new(Imported::default()),
            changed: watch::channel(0).0,
        })
    }

    async fn open(self: &Arc<Self>) -> Result<Running, Error> {
        let config = &self.config;
        let handler = Notifications {
            progress: self.progress.clone(),
            inner: Arc::downgrade(self),
        };
        match &config.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).envs(env.iter().map(|(k, v)| (k, v)));
                if let Some(cwd) = cwd {
                    cmd.current_dir(cwd);
                }
                // rmcp kills the child when the connection ends; this also covers a runtime
                // shutting down before its kill task runs.
                cmd.kill_on_drop(true);
                let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|e| connect_error(config, format!("cannot start `{command}`: {e}")))?;
                if let Some(stderr) = stderr {
                    forward_stderr(config.name.clone(), stderr);
                }
                handler
                    .serve(transport)
                    .await
                    .map_err(|e| connect_error(config, e))
            }
            Transport::Http {
                url,
                headers,
                bearer,
            } => {
                use rmcp::transport::StreamableHttpClientTransport;
                use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                let mut custom = std::collections::HashMap::new();
                for (name, value) in headers {
                    let header = http::HeaderName::try_from(name.as_str())
                        .map_err(|e| connect_error(config, format!("header `{name}`: {e}")))?;
                    let mut value = http::HeaderValue::try_from(value.as_str()).map_err(|_| {
                        connect_error(config, format!("header `{name}` has an invalid value"))
                    })?;
                    value.set_sensitive(true);
                    custom.insert(header, value);
                }
                let limits = &config.limits;
                let mut transport_config =
                    StreamableHttpClientTransportConfig::with_uri(url.as_str())
                        .custom_headers(custom)
                        .max_json_response_size(limits.max_response_bytes)
                        .max_sse_event_size(limits.max_sse_event_bytes)
                        .max_error_response_size(limits.max_error_body_bytes)
                        .reinit_on_expired_session(true);
                transport_config.retry_config = Arc::new(BoundedRetry { attempts: 4 });
                if let Some(token) = bearer {
                    transport_config = transport_config.auth_header(token.clone());
                }
                let transport =
                    StreamableHttpClientTransport::with_client(self.http.clone(), transport_config);
                handler
                    .serve(transport)
                    .await
                    .map_err(|e| connect_error(config, e))
            }
        }
    }

    /// The live connection, reconnecting if it is down and its backoff has passed.
    pub(crate) async fn peer(self: &Arc<Self>) -> Result<(u64, Peer<RoleClient>), Error> {
        let mut link = self.link.lock().await;
        if link.closed {
            return Err(connect_error(&self.config, "the client was closed"));
        }
        if let Some((generation, running)) = &link.running {
            if !running.is_closed() {
                return Ok((*generation, running.peer().clone()));
            }
            link.running = None;
        }
        if let Some(retry_at) = link.retry_at {
            let now = Instant::now();
            if now < retry_at {
                return Err(connect_error(
                    &self.config,
                    format!(
                        "the server is down ({} failed reconnects in a row); the next attempt is in {} ms",
                        link.failures,
                        (retry_at - now).as_millis()
                    ),
                ));
            }
        }
        let timeout = self.config.connect_timeout;
        let opened = tokio::time::timeout(timeout, self.open())
            .await
            .unwrap_or_else(|_| {
                Err(connect_error(
                    &self.config,
                    format!(
                        "the server did not finish the MCP handshake within {} s",
                        timeout.as_secs_f64()
                    ),
                ))
            });
        match opened {
            Ok(running) => {
                link.generation += 1;
                link.failures = 0;
                link.retry_at = None;
                let generation = link.generation;
                let peer = running.peer().clone();
                link.running = Some((generation, running));
                if generation > 1 {
                    // A restarted server may list other tools: import them again, off this
                    // call's path (the refresh waits for this lock).
                    spawn_refresh(Arc::downgrade(self));
                }
                Ok((generation, peer))
            }
            Err(error) => {
                link.failures = link.failures.saturating_add(1);
                link.retry_at = Some(Instant::now() + backoff(link.failures));
                Err(error)
            }
        }
    }

    /// Drops connection `generation` (killing a stdio child) after a transport failure, so
    /// the next call reconnects.
    pub(crate) async fn broken(&self, generation: u64) {
        let mut link = self.link.lock().await;
        if link.running.as_ref().is_some_and(|(g, _)| *g == generation) {
            tracing::warn!(server = %self.config.name, "MCP connection lost; the next call reconnects");
            link.running = None;
        }
    }

    pub(crate) async fn close(&self) {
        let running = {
            let mut link = self.link.lock().await;
            link.closed = true;
            link.running.take()
        };
        if let Some((_, mut running)) = running {
            let _ = running.close_with_timeout(Duration::from_secs(5)).await;
        }
    }

    /// Runs `op` on the connection; a transport failure marks it broken.
    pub(crate) async fn request<T, F, Fut>(
        self: &Arc<Self>,
        op: &'static str,
        f: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(Peer<RoleClient>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        let (generation, peer) = self.peer().await?;
        let timeout = self.config.call_timeout;
        // Dropping a request on timeout sends `notifications/cancelled` (rmcp's request guard).
        let Ok(outcome) = tokio::time::timeout(timeout, f(peer)).await else {
            return Err(Error::Request {
                server: self.config.name.clone(),
                operation: op,
                reason: format!("no answer within {} s", timeout.as_secs_f64()),
            });
        };
        match outcome {
            Ok(value) => Ok(value),
            Err(error) => {
                if is_transport_failure(&error) {
                    self.broken(generation).await;
                }
                Err(Error::Request {
                    server: self.config.name.clone(),
                    operation: op,
                    reason: error.to_string(),
                })
            }
        }
    }

    /// Lists every page of tools (up to the page and tool bounds) and imports them.
    pub(crate) async fn refresh(self: &Arc<Self>) -> Result<(), Error> {
        let limits = self.config.limits;
        let listed = self
            .request("tools/list", |peer| async move {
                let mut tools = Vec::new();
                let mut cursor = None;
                for _ in 0..limits.max_pages {
                    let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
                    let page = peer.list_tools(Some(params)).await?;
                    tools.extend(page.tools);
                    // Past the bound by more than a page: stop reading, import reports it.
                    if tools.len() > limits.max_tools {
                        break;
                    }
                    cursor = page.next_cursor;
                    if cursor.is_none() {
                        break;
                    }
                }
                Ok(tools)
            })
            .await?;
        let imported = import(&self.config, listed, &Arc::downgrade(self))?;
        if let Ok(mut slot) = self.imported.write() {
            *slot = imported;
        }
        self.changed.send_modify(|generation| *generation += 1);
        Ok(())
    }
}

fn is_transport_failure(error: &ServiceError) -> bool {
    matches!(
        error,
        ServiceError::TransportClosed | ServiceError::TransportSend(_)
    )
}

/// Sends `notifications/cancelled` for a request still in flight when the call is dropped
/// (the loop cancelled it, or its timeout passed).
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
    reason: &'static str,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let peer = self.peer.clone();
        let reason = self.reason.to_owned();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(Some(id), Some(reason)))
                    .await;
            });
        }
    }
}

/// One progress notification as a delta: `3/5` or `3`, then the message if any.
fn progress_text(progress: &ProgressNotificationParam) -> String {
    let mut text = match progress.total {
        Some(total) => format!("{}/{}", progress.progress, total),
        None => progress.progress.to_string(),
    };
    if let Some(message) = &progress.message {
        text.push(' ');
        text.push_str(message);
    }
    text
}

/// The handler behind every imported tool: calls the server's tool over the client's
/// connection.
pub(crate) struct McpHandler {
    inner: Weak<Inner>,
    tool: Arc<str>,
}

impl McpHandler {
    pub(crate) fn new(inner: Weak<Inner>, tool: &str) -> Self {
        Self {
            inner,
            tool: tool.into(),
        }
    }
}

impl Handler for McpHandler {
    fn call(&self, arguments: Value, context: ToolContext) -> ToolStream {
        let inner = self.inner.clone();
        let tool = self.tool.clone();
        Box::pin(async_stream::stream! {
            let Some(inner) = inner.upgrade() else {
                yield ToolEvent::Done(Err(ToolError::respond_to_model(
                    "this MCP tool's client was dropped; the tool cannot be called",
                )));
                return;
            };
            let arguments = match arguments {
                Value::Object(map) => Some(map),
                Value::Null => None,
                other => {
                    yield ToolEvent::Done(Err(ToolError::respond_to_model(format!(
                        "the arguments must be a JSON object, not {other}"
                    ))));
                    return;
                }
            };
            let server = inner.config.name.clone();
            let (generation, peer) = match inner.peer().await {
                Ok(up) => up,
                Err(error) => {
                    yield ToolEvent::Done(Err(ToolError::respond_to_model(error.to_string())));
                    return;
                }
            };
            let mut params = CallToolRequestParams::new(tool.to_string());
            params.arguments = arguments;
            let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
            let handle = match peer
                .send_request_with_option(request, PeerRequestOptions::no_options())
                .await
            {
                Ok(handle) => handle,
                Err(error) => {
                    inner.broken(generation).await;
                    yield ToolEvent::Done(Err(ToolError::respond_to_model(format!(
                        "MCP server `{server}` is unreachable ({error}); the next call reconnects"
                    ))));
                    return;
                }
            };
            let mut progress = inner.progress.subscribe(handle.progress_token.clone()).await;
            let mut guard = CancelOnDrop { peer, id: Some(handle.id.clone()), reason: "cancelled by the client" };
            let mut response = handle.rx;
            let timeout = inner.config.call_timeout;
            let deadline = tokio::time::sleep(timeout);
            tokio::pin!(deadline);
            let cancelled = context.cancellation().clone();
            loop {
                tokio::select! {
                    biased;
                    reply = &mut response => {
                        guard.id = None;
                        // rmcp hands each notification to a task of its own, so the last
                        // progress update can race the result: let those tasks run, then pass
                        // on what already arrived. (One still in flight after that is dropped.)
                        for _ in 0..3 {
                            tokio::task::yield_now().await;
                        }
                        while let Some(Some(update)) = progress.next().now_or_never() {
                            yield ToolEvent::Delta(progress_text(&update));
                        }
                        let result = match reply {
                            Ok(Ok(ServerResult::CallToolResult(result))) => map_result(result).map(|content| {
                                let json = serde_json::to_value(&content).unwrap_or_default();
                                context.set_content(content);
                                json
                            }),
                            Ok(Ok(_)) => Err(ToolError::respond_to_model(format!(
                                "MCP server `{server}` answered tools/call with something other than a tool result"
                            ))),
                            Ok(Err(ServiceError::McpError(error))) => Err(ToolError::respond_to_model(format!(
                                "MCP server `{server}` refused the call: {}", error.message
                            ))),
                            Ok(Err(error)) => {
                                if is_transport_failure(&error) {
                                    inner.broken(generation).await;
                                }
                                Err(ToolError::respond_to_model(format!(
                                    "MCP server `{server}` failed during the call ({error}); the next call reconnects"
                                )))
                            }
                            Err(_) => {
                                // The connection dropped the request: the server died mid-call.
                                inner.broken(generation).await;
                                Err(ToolError::respond_to_model(format!(
                                    "MCP server `{server}` closed the connection during the call; the next call reconnects"
                                )))
                            }
                        };
                        yield ToolEvent::Done(result);
                        return;
                    }
                    Some(update) = progress.next() => {
                        yield ToolEvent::Delta(progress_text(&update));
                    }
                    () = &mut deadline => {
                        guard.reason = "timed out";
                        drop(guard);
                        yield ToolEvent::Done(Err(ToolError::respond_to_model(format!(
                            "the MCP tool did not answer within {} s and was cancelled", timeout.as_secs_f64()
                        ))));
                        return;
                    }
                    () = cancelled.cancelled() => {
                        drop(guard);
                        yield ToolEvent::Done(Err(ToolError::cancelled()));
                        return;
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        assert_eq!(backoff(1), Duration::from_millis(250));
        assert_eq!(backoff(3), Duration::from_millis(1000));
        assert_eq!(backoff(40), MAX_BACKOFF);
    }

    #[test]
    fn progress_reads_as_a_fraction_with_its_message() {
        let mut update: ProgressNotificationParam = serde_json::from_value(
            serde_json::json!({"progressToken": 1, "progress": 3, "total": 5}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(progress_text(&update), "3/5");
        update.total = None;
        update.message = Some("step".into());
        assert_eq!(progress_text(&update), "3 step");
    }
}
