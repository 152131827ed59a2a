//! [`McpServer`]: the rmcp handler over a registry, and the stdio entry points.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use agent_tools::{Caller, RegisteredTool, Registry, ToolContext, ToolEvent};
use futures_util::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation,
    InitializeRequestParams, InitializeResult, JsonObject, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::convert::{self, Caps};
use super::options::ServerOptions;
use crate::Error;

/// Who an HTTP request is from, put in the request's extensions by whatever authenticated it
/// (the [`HttpService`](super::HttpService)'s [`Authenticator`](super::Authenticator), or a
/// server's own middleware in front of it).
#[derive(Clone)]
pub struct Authenticated {
    caller: Arc<Caller>,
    gate: Option<Arc<dyn CallGate>>,
}

impl fmt::Debug for Authenticated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authenticated")
            .field("caller", &self.caller)
            .field("gate", &self.gate.is_some())
            .finish()
    }
}

impl Authenticated {
    /// The request is from `caller`.
    pub fn new(caller: impl Into<Arc<Caller>>) -> Self {
        Self {
            caller: caller.into(),
            gate: None,
        }
    }

    /// Every call this caller makes first enters `gate` (a tenant's limit on work running at
    /// once, shared with its other entry points).
    #[must_use]
    pub fn with_gate(mut self, gate: Arc<dyn CallGate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// The caller.
    pub fn caller(&self) -> &Arc<Caller> {
        &self.caller
    }
}

/// A limit a call must get past before it runs (a tenant's concurrency gate).
pub trait CallGate: Send + Sync + 'static {
    /// A place for one call, held until the call ends; `Err` with the reason the call is
    /// refused (for the client's model: "… at most 4 at once; try again shortly").
    ///
    /// # Errors
    ///
    /// The refusal's message.
    fn enter(&self) -> Result<CallPermit, String>;

    /// Told when a call that entered has ended: the tool and whether its result is an error
    /// (for metrics). Does nothing by default.
    fn finished(&self, tool: &str, is_error: bool) {
        let _ = (tool, is_error);
    }
}

/// One call's place in a [`CallGate`]; dropping it frees the place.
pub struct CallPermit(#[allow(dead_code)] Box<dyn Send + Sync>);

impl CallPermit {
    /// A permit that frees its place when `guard` is dropped.
    pub fn new(guard: impl Send + Sync + 'static) -> Self {
        Self(Box::new(guard))
    }
}

impl fmt::Debug for CallPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CallPermit")
    }
}

/// A request's caller and the gate its calls enter.
type Resolved = (Arc<Caller>, Option<Arc<dyn CallGate>>);

/// A tool as served: the registered tool and its MCP listing, built once.
struct Entry {
    tool: Arc<RegisteredTool>,
    listed: rmcp::model::Tool,
}

/// What every connection of one server shares.
pub(crate) struct Shared {
    tools: BTreeMap<String, Entry>,
    options: ServerOptions,
    caps: Caps,
    /// Live sessions per principal (HTTP only), for `max_sessions_per_caller`.
    sessions_by_caller: Mutex<HashMap<String, usize>>,
    max_sessions_per_caller: usize,
}

impl Shared {
    pub(crate) fn new(
        registry: &Registry,
        options: ServerOptions,
        max_sessions_per_caller: usize,
    ) -> Arc<Self> {
        let tools = registry
            .iter()
            // A remote tool has no handler here: nothing an MCP client could run.
            .filter(|tool| !tool.is_remote())
            .map(|tool| {
                (
                    tool.name().to_owned(),
                    Entry {
                        tool: Arc::clone(tool),
                        listed: listing(tool),
                    },
                )
            })
            .collect();
        let caps = Caps {
            text: options.truncation,
            binary: options.max_binary_bytes,
        };
        Arc::new(Self {
            tools,
            options,
            caps,
            sessions_by_caller: Mutex::new(HashMap::new()),
            max_sessions_per_caller: max_sessions_per_caller.max(1),
        })
    }
}

fn object(value: &Value) -> JsonObject {
    match value {
        Value::Object(map) => map.clone(),
        _ => JsonObject::new(),
    }
}

fn listing(tool: &RegisteredTool) -> rmcp::model::Tool {
    let spec = tool.spec();
    let mut listed = rmcp::model::Tool::new(
        spec.name.clone(),
        spec.description.clone(),
        Arc::new(object(&spec.parameters)),
    );
    if let Some(schema) = tool.tool().output_schema() {
        listed.output_schema = Some(Arc::new(object(schema)));
    }
    listed
}

/// The rule of [`Registry::permitted_for`], for one tool.
fn permits(caller: &Caller, tool: &RegisteredTool) -> bool {
    tool.tool()
        .required_permissions()
        .iter()
        .all(|permission| caller.has_permission(permission))
}

/// One HTTP session's claim on its caller's session count; given back on drop.
struct SessionSlot {
    shared: Arc<Shared>,
    principal: String,
    /// Alive as long as the session: the HTTP front's record of the session's owner holds a
    /// weak reference to it.
    _tag: Option<Arc<SessionTag>>,
}

/// Put by the HTTP front into a request that may open a session; the session's handler keeps
/// it, so the front knows which sessions are alive and whose they are.
#[derive(Debug)]
pub(crate) struct SessionTag;

impl Drop for SessionSlot {
    fn drop(&mut self) {
        let mut counts = self
            .shared
            .sessions_by_caller
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&self.principal) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.principal);
            }
        }
    }
}

/// A registry served as an MCP server: one per connection (a stdio peer, an HTTP session).
///
/// Build one with [`McpServer::new`] for a fixed caller (stdio, embedding), or let an
/// [`HttpService`](super::HttpService) make one per session, where each request names its
/// caller.
pub struct McpServer {
    shared: Arc<Shared>,
    /// The connection's caller, when fixed; `None` over HTTP, where each request carries one.
    caller: Option<Arc<Caller>>,
    calls: Arc<Semaphore>,
    /// The HTTP session's owner (set at `initialize`) and its per-caller slot.
    owner: Mutex<Option<SessionSlot>>,
    /// The HTTP session's place under `max_sessions`, held for the session's life.
    _session: Option<OwnedSemaphorePermit>,
}

impl fmt::Debug for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServer")
            .field("tools", &self.shared.tools.keys().collect::<Vec<_>>())
            .field("caller", &self.caller)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// Serves `registry`'s tools to `caller` (only those it may use).
    pub fn new(
        registry: &Registry,
        caller: impl Into<Arc<Caller>>,
        options: ServerOptions,
    ) -> Self {
        let calls = options.max_concurrent_calls.max(1);
        Self {
            shared: Shared::new(registry, options, 1),
            caller: Some(caller.into()),
            calls: Arc::new(Semaphore::new(calls)),
            owner: Mutex::new(None),
            _session: None,
        }
    }

    /// One HTTP session's handler: callers come with each request.
    pub(crate) fn for_session(shared: Arc<Shared>, session: OwnedSemaphorePermit) -> Self {
        let calls = shared.options.max_concurrent_calls.max(1);
        Self {
            shared,
            caller: None,
            calls: Arc::new(Semaphore::new(calls)),
            owner: Mutex::new(None),
            _session: Some(session),
        }
    }

    /// The request's caller (and its gate): the connection's, or the authenticated one the
    /// HTTP front put in the request. A request in a session opened by another principal is
    /// refused.
    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Resolved, McpError> {
        if let Some(caller) = &self.caller {
            return Ok((Arc::clone(caller), None));
        }
        let authenticated = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Authenticated>())
            .ok_or_else(|| McpError::invalid_request("the request is not authenticated", None))?;
        let owner = self.owner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = owner.as_ref()
            && slot.principal != authenticated.caller.principal()
        {
            return Err(McpError::invalid_request(
                "this session was opened with another key",
                None,
            ));
        }
        Ok((
            Arc::clone(&authenticated.caller),
            authenticated.gate.clone(),
        ))
    }

    /// Binds an HTTP session to the principal that opened it, under its session cap.
    fn bind_owner(&self, context: &RequestContext<RoleServer>) -> Result<(), McpError> {
        if self.caller.is_some() {
            return Ok(());
        }
        let (caller, _) = self.caller(context)?;
        let mut owner = self.owner.lock().unwrap_or_else(PoisonError::into_inner);
        if owner.is_some() {
            return Ok(());
        }
        let principal = caller.principal().to_owned();
        {
            let mut counts = self
                .shared
                .sessions_by_caller
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let count = counts.entry(principal.clone()).or_insert(0);
            if *count >= self.shared.max_sessions_per_caller {
                return Err(McpError::invalid_request(
                    format!(
                        "this key has {} sessions open, the most allowed; close one (HTTP \
                         DELETE) or let one expire",
                        self.shared.max_sessions_per_caller
                    ),
                    None,
                ));
            }
            *count += 1;
        }
        let tag = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Arc<SessionTag>>())
            .cloned();
        *owner = Some(SessionSlot {
            shared: Arc::clone(&self.shared),
            principal,
            _tag: tag,
        });
        Ok(())
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let (caller, gate) = self.caller(&context)?;
        let caps = self.shared.caps;
        let options = &self.shared.options;
        // Not there and not permitted are one answer: the caller learns nothing of tools it
        // may not use.
        let entry = self
            .shared
            .tools
            .get(request.name.as_ref())
            .filter(|entry| permits(&caller, &entry.tool))
            .ok_or_else(|| {
                McpError::invalid_params(format!("unknown tool `{}`", request.name), None)
            })?;
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let validated = match entry.tool.validate(arguments, options.validation) {
            Ok(validated) => validated,
            // The spec's advice: argument errors are tool errors, so a model can fix them.
            Err(invalid) => return Ok(convert::error_result(&invalid.to_string(), caps)),
        };
        let Ok(_call) = Arc::clone(&self.calls).try_acquire_owned() else {
            return Ok(convert::error_result(
                &format!(
                    "this connection already has {} calls running, the most allowed; wait for \
                     one to finish",
                    options.max_concurrent_calls
                ),
                caps,
            ));
        };
        let _gate = match gate.as_ref().map(|gate| gate.enter()).transpose() {
            Ok(permit) => permit,
            Err(refusal) => return Ok(convert::error_result(&refusal, caps)),
        };
        let context_id = match &context.id {
            rmcp::model::NumberOrString::Number(n) => format!("mcp-{n}"),
            rmcp::model::NumberOrString::String(s) => format!("mcp-{s}"),
        };
        // `notifications/cancelled` (and an HTTP client going away) fires the request's token;
        // the time limit fires the child too, so a handler learns why it is being dropped.
        let cancellation = context.ct.child_token();
        let tool_context = ToolContext::new(context_id, entry.tool.name())
            .with_caller(caller)
            .with_cancellation(cancellation.clone())
            .with_max_result_bytes(options.truncation.max_bytes())
            .with_max_binary_bytes(options.max_binary_bytes);
        let slot = tool_context.content_slot();
        let progress = context.meta.get_progress_token();
        let mut stream = entry.tool.invoke(validated.arguments, tool_context);
        let run = async {
            let mut step = 0u32;
            while let Some(event) = stream.next().await {
                match event {
                    ToolEvent::Delta(text) => {
                        if let Some(token) = &progress {
                            step = step.saturating_add(1);
                            let message = cut_at(text, options.max_progress_bytes);
                            // A peer that went away only loses its progress; the call goes on
                            // until its token says otherwise.
                            let _ = context
                                .peer
                                .notify_progress(
                                    ProgressNotificationParam::new(token.clone(), f64::from(step))
                                        .with_message(message),
                                )
                                .await;
                        }
                    }
                    ToolEvent::Done(result) => return Some(result),
                }
            }
            None
        };
        let finished = match options.call_timeout {
            Some(limit) => tokio::time::timeout(limit, run).await.map_err(|_| limit),
            None => Ok(run.await),
        };
        let result = match finished {
            Ok(Some(Ok(value))) => match slot.take() {
                Some(content) => convert::content_result(content, caps),
                None => {
                    convert::value_result(value, entry.tool.tool().output_schema().is_some(), caps)
                }
            },
            Ok(Some(Err(error))) => convert::tool_error(&error, caps),
            Ok(None) => convert::error_result("the tool ended without a result", caps),
            Err(limit) => {
                cancellation.cancel();
                convert::error_result(
                    &format!(
                        "`{}` did not finish within {limit:?} and was stopped. Try a smaller \
                         request or another approach.",
                        entry.tool.name()
                    ),
                    caps,
                )
            }
        };
        if let Some(gate) = &gate {
            gate.finished(entry.tool.name(), result.is_error == Some(true));
        }
        Ok(result)
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn cut_at(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let options = &self.shared.options;
        let mut info = InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                options.name.clone(),
                options.version.clone(),
            ));
        if let Some(instructions) = &options.instructions {
            info = info.with_instructions(instructions.clone());
        }
        info
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        self.bind_owner(&context)?;
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let (caller, _) = self.caller(&context)?;
        let tools = self
            .shared
            .tools
            .values()
            .filter(|entry| permits(&caller, &entry.tool))
            .map(|entry| entry.listed.clone())
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, context)
            .await
            .map(CallToolResponse::from)
    }
}

/// Serves `registry` to `caller` over any byte stream (a pipe, a socket, an in-memory duplex)
/// until the peer closes it. Messages longer than
/// [`max_message_bytes`](ServerOptions::max_message_bytes) are dropped.
///
/// # Errors
///
/// [`Error::Serve`] when the MCP handshake fails or the connection breaks.
pub async fn serve_io<R, W>(
    registry: &Registry,
    caller: impl Into<Arc<Caller>>,
    options: ServerOptions,
    read: R,
    write: W,
) -> Result<(), Error>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let max_line = options.max_message_bytes;
    let server = McpServer::new(registry, caller, options);
    let transport =
        AsyncRwTransport::<RoleServer, _, _>::new(read, write).with_max_line_length(max_line);
    let running = server
        .serve(transport)
        .await
        .map_err(|error| Error::Serve(error.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|error| Error::Serve(error.to_string()))?;
    Ok(())
}

/// Serves `registry` to `caller` over this process's stdin and stdout until stdin closes.
/// Nothing else may write to stdout meanwhile (log to stderr).
///
/// # Errors
///
/// [`Error::Serve`] when the MCP handshake fails or the streams break.
pub async fn serve_stdio(
    registry: &Registry,
    caller: impl Into<Arc<Caller>>,
    options: ServerOptions,
) -> Result<(), Error> {
    serve_io(
        registry,
        caller,
        options,
        tokio::io::stdin(),
        tokio::io::stdout(),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::cut_at;

    #[test]
    fn progress_messages_are_cut_at_a_character_boundary() {
        assert_eq!(cut_at("héllo".to_owned(), 2), "h");
        assert_eq!(cut_at("héllo".to_owned(), 3), "hé");
        assert_eq!(cut_at("abc".to_owned(), 10), "abc");
    }
}
