//! Importing tools from MCP servers.
//!
//! [`McpClient::connect`] reaches one server (a spawned command over stdio, or streamable
//! HTTP), lists its tools (every page, within [`Limits`]) and compiles their schemas once.
//! [`McpClient::register_into`] adds them to a [`Registry`] as `<server>_<tool>`; the loop
//! then calls them like any other tool:
//!
//! - arguments are validated by the registry against the server's input schema;
//! - the context's cancellation sends `notifications/cancelled` to the server, and the
//!   per-call timeout ([`ServerConfig::call_timeout`]) does too;
//! - `notifications/progress` become [`ToolEvent::Delta`](agent_tools::ToolEvent)s;
//! - the result's content becomes content blocks ([`ToolContent`](agent_tools::ToolContent))
//!   and `isError: true` a [`ToolError::respond_to_model`](agent_tools::ToolError);
//! - a connection that fails mid-call gives that call a tool error, and the next call
//!   reconnects (after a failed reconnect, later calls wait out a backoff that doubles from
//!   250 ms to 30 s, failing at once meanwhile).
//!
//! The tools hold only a weak reference to the client: keep the [`McpClient`] alive while
//! they may run. Dropping it (or [`McpClient::close`]) ends the connection and kills a stdio
//! server.
//!
//! # Refreshing the tool list
//!
//! On `notifications/tools/list_changed` the client lists the tools again in the background
//! and bumps [`McpClient::tools_changed`]. A [`Registry`] already built is a value and does not
//! change: build the next run's registry with [`McpClient::register_into`] again (it reads the
//! new list). Tools a server removed keep calling the server, which answers with an error the
//! model sees.

mod config;
mod content;
mod http;
mod import;
mod session;

use std::sync::Arc;

use agent_tools::Registry;
use rmcp::model::{GetPromptRequestParams, ReadResourceRequestParams};
use tokio::sync::watch;

pub use config::{DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, Limits, ServerConfig, Transport};
pub use import::{ImportedTool, SkippedTool, prefixed_name};
/// rmcp's types for what resources and prompts return.
pub use rmcp::model::{GetPromptResult, Prompt, Resource, ResourceContents};

use crate::Error;
use session::Inner;

/// A connection to one MCP server and the tools imported from it.
///
/// Cheap to share by reference; the connection (and a stdio server's process) ends when it is
/// dropped.
pub struct McpClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for McpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpClient")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl McpClient {
    /// Connects to the server and imports its tools, with a client of the default settings.
    ///
    /// # Errors
    ///
    /// [`Error::Connect`] when the server cannot be started or reached or fails the MCP
    /// handshake, [`Error::Request`] when listing fails, [`Error::NameCollision`] when two of
    /// its tools get the same name, [`Error::TooManyTools`] past [`Limits::max_tools`],
    /// [`Error::InvalidConfig`] for an unusable name.
    pub async fn connect(config: ServerConfig) -> Result<Self, Error> {
        Self::connect_with(config, reqwest::Client::new()).await
    }

    /// Like [`connect`](Self::connect), with your reqwest client for HTTP (proxies, timeouts,
    /// TLS settings); stdio servers ignore it.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_with(config: ServerConfig, http: reqwest::Client) -> Result<Self, Error> {
        if agent_tools::sanitize_name(&config.name).is_err() {
            return Err(Error::InvalidConfig {
                server: config.name.clone(),
                reason: "the server name needs at least one ASCII letter, digit, `_` or `-` (it prefixes every tool name)".to_owned(),
            });
        }
        let inner = Inner::new(config, http);
        inner.peer().await?;
        Inner::refresh(&inner).await?;
        Ok(Self { inner })
    }

    /// The server's name, the prefix of its tools.
    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// The configuration it was connected with.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// The imported tools, in listing order.
    pub fn tools(&self) -> Arc<[ImportedTool]> {
        self.inner
            .imported
            .read()
            .map(|imported| imported.tools.clone())
            .unwrap_or_else(|_| Arc::from([]))
    }

    /// The tools the server listed that were not imported (a bound passed, a schema that does
    /// not compile), with the reason; each was also logged at `warn`.
    pub fn skipped(&self) -> Arc<[SkippedTool]> {
        self.inner
            .imported
            .read()
            .map(|imported| imported.skipped.clone())
            .unwrap_or_else(|_| Arc::from([]))
    }

    /// The imported tools as a registry of their own (schemas already compiled; cloning it is
    /// cheap).
    pub fn registry(&self) -> Registry {
        self.inner
            .imported
            .read()
            .map(|imported| imported.registry.clone())
            .unwrap_or_default()
    }

    /// Adds the imported tools to `registry`, sharing their compiled schemas.
    ///
    /// # Errors
    ///
    /// [`Error::NameCollision`] when `registry` already holds one of the names (another
    /// server's tool or a built-in); nothing is added then.
    pub fn register_into(&self, registry: &mut Registry) -> Result<(), Error> {
        let tools = self.registry();
        registry.merge(&tools).map_err(|error| match error {
            agent_tools::Error::DuplicateTool { name } => {
                let server_name = self
                    .tools()
                    .iter()
                    .find(|tool| tool.name == name)
                    .map(|tool| tool.server_name.clone())
                    .unwrap_or_default();
                Error::NameCollision {
                    first: "a tool already in the registry".to_owned(),
                    second: format!("`{server_name}` of MCP server `{}`", self.name()),
                    name,
                }
            }
            other => Error::Tools(other),
        })
    }

    /// Lists the tools again and re-imports them (done on `notifications/tools/list_changed`
    /// by itself).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect)'s listing.
    pub async fn refresh_tools(&self) -> Result<(), Error> {
        Inner::refresh(&self.inner).await
    }

    /// A counter bumped each time the tool list is re-imported; wait on it with
    /// [`watch::Receiver::changed`].
    pub fn tools_changed(&self) -> watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    /// Every resource the server lists (all pages, up to [`Limits::max_pages`]).
    ///
    /// # Errors
    ///
    /// [`Error::Connect`] or [`Error::Request`].
    pub async fn list_resources(&self) -> Result<Vec<Resource>, Error> {
        let pages = self.inner.config.limits.max_pages;
        self.inner
            .request("resources/list", |peer| async move {
                let mut items = Vec::new();
                let mut cursor = None;
                for _ in 0..pages {
                    let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
                    let page = peer.list_resources(Some(params)).await?;
                    items.extend(page.resources);
                    cursor = page.next_cursor;
                    if cursor.is_none() {
                        break;
                    }
                }
                Ok(items)
            })
            .await
    }

    /// Reads the resource at `uri`.
    ///
    /// # Errors
    ///
    /// [`Error::Connect`] or [`Error::Request`] (an unknown URI is the server's error).
    pub async fn read_resource(&self, uri: &str) -> Result<Vec<ResourceContents>, Error> {
        let params = ReadResourceRequestParams::new(uri);
        self.inner
            .request("resources/read", |peer| async move {
                Ok(peer.read_resource(params).await?.contents)
            })
            .await
    }

    /// Every prompt the server lists (all pages, up to [`Limits::max_pages`]).
    ///
    /// # Errors
    ///
    /// [`Error::Connect`] or [`Error::Request`].
    pub async fn list_prompts(&self) -> Result<Vec<Prompt>, Error> {
        let pages = self.inner.config.limits.max_pages;
        self.inner
            .request("prompts/list", |peer| async move {
                let mut items = Vec::new();
                let mut cursor = None;
                for _ in 0..pages {
                    let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
                    let page = peer.list_prompts(Some(params)).await?;
                    items.extend(page.prompts);
                    cursor = page.next_cursor;
                    if cursor.is_none() {
                        break;
                    }
                }
                Ok(items)
            })
            .await
    }

    /// Gets prompt `name` filled with `arguments`.
    ///
    /// # Errors
    ///
    /// [`Error::Connect`] or [`Error::Request`].
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<GetPromptResult, Error> {
        let mut params = GetPromptRequestParams::new(name);
        if !arguments.is_empty() {
            params.arguments = Some(arguments);
        }
        self.inner
            .request("prompts/get", |peer| async move {
                peer.get_prompt(params).await
            })
            .await
    }

    /// An opt-in tool, `<server>_read_resource`, that reads one of the server's resources by
    /// URI for the model (text as text, blobs as images or files). Not imported by itself:
    /// register it where the model should read resources.
    ///
    /// # Errors
    ///
    /// [`Error::Tools`] when the server's name leaves no valid tool name.
    pub fn read_resource_tool(&self) -> Result<agent_tools::Tool, Error> {
        let name = agent_tools::tool_name(&self.inner.config.name, "read_resource")?;
        let inner = Arc::downgrade(&self.inner);
        let description = format!(
            "Reads a resource of MCP server `{}` by its URI (as listed by the server or linked \
             from a tool result).",
            self.inner.config.name
        );
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"uri": {"type": "string", "description": "The resource's URI."}},
            "required": ["uri"],
            "additionalProperties": false
        });
        Ok(agent_tools::Tool::from_json_fn(
            name,
            description,
            schema,
            move |arguments: serde_json::Value, context: agent_tools::ToolContext| {
                let inner = inner.clone();
                async move {
                    let inner = inner.upgrade().ok_or_else(|| {
                        agent_tools::ToolError::respond_to_model(
                            "this MCP tool's client was dropped; the tool cannot be called",
                        )
                    })?;
                    let uri = arguments["uri"].as_str().unwrap_or_default().to_owned();
                    let params = ReadResourceRequestParams::new(uri);
                    let contents = inner
                        .request("resources/read", |peer| async move {
                            Ok(peer.read_resource(params).await?.contents)
                        })
                        .await
                        .map_err(|e| agent_tools::ToolError::respond_to_model(e.to_string()))?;
                    let blocks: Vec<_> = contents.into_iter().map(content::map_resource).collect();
                    // The blocks go to the model as blocks (an image stays an image); the
                    // JSON value shows them to callers that only read the stream.
                    let content = agent_tools::ToolContent::from(blocks);
                    let json = serde_json::to_value(&content).unwrap_or_default();
                    context.set_content(content);
                    Ok(json)
                }
            },
        ))
    }

    /// Ends the connection (a stdio server is asked to exit, then killed) and stops
    /// reconnecting: the tools' calls fail from now on.
    pub async fn close(self) {
        self.inner.close().await;
    }
}
