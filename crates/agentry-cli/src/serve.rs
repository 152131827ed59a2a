//! `agentry serve`: the agent server (`agent-server`) from the `[server]` section of
//! `agentry.toml`, until SIGTERM or Ctrl-C, then a drain.

use std::io::IsTerminal;
use std::path::Path;

use agent_server::{ServerBuilder, ServerConfig, serve};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::error::Error;

/// The log's format on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines, coloured on a terminal.
    Text,
    /// One JSON object a line, for log collectors.
    Json,
}

/// Installs the log: `RUST_LOG` (default `info`) filters, `format` shapes, stderr receives.
/// Nothing logged by the server carries a key or a header (see `docs/server.md`).
fn install_log(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // The filter is the log's own: RUST_LOG quiets the log, never the OpenTelemetry export.
    let registry = tracing_subscriber::registry().with(crate::telemetry::layer());
    // Already installed (a second `run` in one process) is not an error worth stopping for.
    let _ = match format {
        LogFormat::Text => registry.with(log.with_filter(filter)).try_init(),
        LogFormat::Json => registry.with(log.json().with_filter(filter)).try_init(),
    };
}

/// Loads the configuration, binds, serves; returns when the drain is over.
pub(crate) async fn run(path: &Path, listen: Option<&str>, log: LogFormat) -> Result<(), Error> {
    install_log(log);
    let mut config = ServerConfig::from_file(path).map_err(|error| Error::Config {
        path: path.to_path_buf(),
        message: error.to_string(),
    })?;
    if let Some(listen) = listen {
        config.listen = listen.to_owned();
    }
    let listener = agent_server::bind(&config.listen)
        .await
        .map_err(|error| Error::Other(format!("cannot listen on {}: {error}", config.listen)))?;
    let address = listener
        .local_addr()
        .map_err(|error| Error::Other(error.to_string()))?;
    let state = ServerBuilder::new(config)
        .build()
        .await
        .map_err(|error| match error {
            // What the file says is wrong (a model's key missing, a tenant without a key):
            // a usage error like a file that does not parse.
            agent_server::Error::Config(_) | agent_server::Error::Model { .. } => Error::Config {
                path: path.to_path_buf(),
                message: error.to_string(),
            },
            other => Error::Other(other.to_string()),
        })?;
    // One line a supervisor (or a test) can wait for; the port is the real one when the
    // configuration asked for port 0.
    eprintln!("agentry serve: listening on http://{address}");
    serve(listener, state, shutdown_signal())
        .await
        .map_err(|error| Error::Other(error.to_string()))?;
    eprintln!("agentry serve: drained and stopped");
    Ok(())
}

/// SIGTERM (what supervisors send) or Ctrl-C.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate()).ok();
        let term = async {
            match terminate.as_mut() {
                Some(terminate) => {
                    terminate.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = term => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
