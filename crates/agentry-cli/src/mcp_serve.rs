//! `agentry mcp serve`: the configured tools as an MCP server, over stdio (the default) or
//! streamable HTTP (`--listen`).
//!
//! The tools are the ones `agentry run` would offer (`--tool` flags, else `tools` in
//! agentry.toml, built by the same [`run::registry`]; the imported tools of `--mcp` and
//! `[[mcp]]` servers, so it also works as a proxy), plus the example products catalog with
//! `--products-db`, under the same caps (`tool_result_max_bytes`, `validation`,
//! `tool_timeout_secs`). As for `run`, a project `agentry.toml` you have not trusted may not
//! turn on `read_file`, set its root or name MCP servers to start.
//!
//! Over HTTP the endpoint is `http://ADDR/mcp` (a bare port means `127.0.0.1:PORT`). On a
//! loopback address it needs no key unless
//! `AGENTRY_MCP_KEY` is set (and rmcp's `Host` check keeps web pages from reaching it by DNS
//! rebinding); any other address requires `AGENTRY_MCP_KEY` (at least 16 characters), sent
//! as `Authorization: Bearer <key>`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use agent_mcp::server::{BearerKeys, HttpOptions, HttpService, ServerOptions, serve_stdio};
use agent_tools::{Caller, Registry, TruncationPolicy};

use crate::args::{BuiltinTool, LoopArgs};
use crate::config::{Config, LoopSettings};
use crate::error::Error;
use crate::mcp::McpArgs;
use crate::run;
use agentry_cli::products;

/// The environment variable holding the bearer key of `--listen`.
pub(crate) const KEY_ENV: &str = "AGENTRY_MCP_KEY";

/// What `agentry mcp serve` was asked for.
pub(crate) struct ServeRequest<'a> {
    pub(crate) config: Option<&'a Path>,
    pub(crate) listen: Option<&'a str>,
    pub(crate) tools: &'a [BuiltinTool],
    pub(crate) root: Option<&'a Path>,
    pub(crate) products_db: Option<&'a Path>,
    pub(crate) mcp: &'a McpArgs,
}

/// Serves until stdin closes (stdio) or Ctrl-C (HTTP).
pub(crate) async fn run(request: &ServeRequest<'_>) -> Result<(), Error> {
    let config = Config::load(request.config)?;
    let mut registry = tools(&config, request.tools, request.root)?;
    // Whoever may reach this server is the one user it serves: with the catalog they may
    // read and write it (the permissions its tools require).
    let mut permissions = Vec::new();
    if let Some(path) = request.products_db {
        products::register(&mut registry, path)
            .map_err(|error| Error::Usage(format!("--products-db {}: {error}", path.display())))?;
        permissions.extend(["product:read", "product:write"]);
    }
    // Before anything is served: an MCP server to import that cannot be reached is an error
    // now, not a tool missing later. The clients live as long as the serving does.
    let servers = crate::mcp::servers(request.mcp, &config)?;
    let _clients = crate::mcp::connect_into(servers, &mut registry).await?;
    let options = options(&config)?;
    match request.listen {
        None => serve_stdio(
            &registry,
            Caller::new("stdio").with_permissions(permissions),
            options,
        )
        .await
        .map_err(|error| Error::Other(error.to_string())),
        Some(listen) => {
            let caller = Caller::new("mcp").with_permissions(permissions);
            http(&registry, options, listen, caller).await
        }
    }
}

/// The tools to serve: the flags', else the configuration's; `read_file` and its root only
/// from the flags or a file the user vouches for.
fn tools(config: &Config, flags: &[BuiltinTool], root: Option<&Path>) -> Result<Registry, Error> {
    let chosen = if flags.is_empty() {
        config.merged.tools.clone().unwrap_or_default()
    } else {
        flags.to_vec()
    };
    let chosen_root = root
        .map(Path::to_path_buf)
        .or_else(|| config.merged.root.clone());
    if let Some((path, _)) = &config.untrusted
        && chosen.contains(&BuiltinTool::ReadFile)
    {
        let vouched = flags.contains(&BuiltinTool::ReadFile)
            || (flags.is_empty()
                && config
                    .trusted
                    .tools
                    .as_ref()
                    .is_some_and(|tools| tools.contains(&BuiltinTool::ReadFile)));
        let vouched_root = root.is_some() || config.trusted.root == chosen_root;
        if !vouched || !vouched_root {
            return Err(Error::Untrusted(format!(
                "{} is not trusted, and it would serve read_file (the MCP client could read \
                 files on this machine); pass --tool read_file --root DIR yourself, or run \
                 `agentry trust` if the file is yours",
                path.display()
            )));
        }
    }
    run::registry(&chosen, chosen_root.as_deref())
}

/// The caps `agentry run` applies to results, from the same settings.
fn options(config: &Config) -> Result<ServerOptions, Error> {
    let settings = LoopSettings::resolve(&LoopArgs::default(), &config.merged)?;
    let truncation = TruncationPolicy::new(settings.tool_result_max_bytes)
        .map_err(|error| Error::Usage(format!("tool_result_max_bytes: {error}")))?;
    Ok(ServerOptions::default()
        .with_name("agentry", env!("CARGO_PKG_VERSION"))
        .with_truncation(truncation)
        .with_validation(settings.validation)
        .with_call_timeout(settings.tool_timeout))
}

/// The bearer key from [`KEY_ENV`], checked; `None` when unset.
fn key() -> Result<Option<String>, Error> {
    match std::env::var(KEY_ENV) {
        Err(_) => Ok(None),
        // The rule `agentry serve` applies to its tenants' keys.
        Ok(key) => match agent_server::key_problem(&key) {
            Some(problem) => Err(Error::Usage(format!("{KEY_ENV} {problem}"))),
            None => Ok(Some(key)),
        },
    }
}

async fn http(
    registry: &Registry,
    options: ServerOptions,
    listen: &str,
    caller: Caller,
) -> Result<(), Error> {
    // A bare port binds loopback: reaching other machines has to be asked for by address.
    let listen = match listen.parse::<u16>() {
        Ok(port) => format!("127.0.0.1:{port}"),
        Err(_) => listen.to_owned(),
    };
    let listen = listen.as_str();
    let address: SocketAddr = tokio::net::lookup_host(listen)
        .await
        .ok()
        .and_then(|mut addresses| addresses.next())
        .ok_or_else(|| Error::Usage(format!("--listen {listen}: not an address to listen on")))?;
    let key = key()?;
    let loopback = address.ip().is_loopback();
    if !loopback && key.is_none() {
        return Err(Error::Usage(format!(
            "--listen {listen} is reachable from other machines: set {KEY_ENV} to a bearer key \
             (at least {} characters) that clients must send",
            agent_server::MIN_KEY_CHARS
        )));
    }
    let mut http = HttpOptions::default();
    if !loopback {
        // Reached by whatever name the operator gives it; the key is what keeps strangers out.
        http = http.with_allowed_hosts(Vec::<String>::new());
    }
    let caller = Arc::new(caller);
    let service = HttpService::new(registry, options, http);
    let service = match key {
        Some(key) => service.with_authenticator(BearerKeys::new().with_key(key, caller)),
        None => service.with_anonymous(caller),
    };
    let shutdown = service.shutdown_token();
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|error| Error::Other(format!("cannot listen on {listen}: {error}")))?;
    let bound = listener
        .local_addr()
        .map_err(|error| Error::Other(error.to_string()))?;
    let names: Vec<&str> = registry.names().collect();
    eprintln!(
        "agentry mcp: serving {} on http://{bound}/mcp",
        if names.is_empty() {
            "no tools".to_owned()
        } else {
            names.join(", ")
        }
    );
    // Each answer is an SSE stream written in small pieces: without TCP_NODELAY every call
    // waits for the client's delayed ACK.
    let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
        let _ = stream.set_nodelay(true);
    });
    let router = axum::Router::new().nest_service("/mcp", service);
    let stop = shutdown.clone();
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            let _ = tokio::signal::ctrl_c().await;
            // Sessions hold SSE streams open: close them so the connections can end.
            stop.cancel();
        })
        .await
        .map_err(|error| Error::Other(error.to_string()))
}
