//! OpenTelemetry export for `agentry run`, `resume`, `demo` and `serve`: on when an OTLP
//! endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT`), flushed before the process exits, also
//! after Ctrl-C (the run winds down) and SIGTERM (the command is dropped, which ends its
//! spans). docs/observability.md.

use std::future::Future;
use std::process::ExitCode;
use std::sync::OnceLock;

use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use crate::error::Error;

/// The process's export, when one was started.
static TELEMETRY: OnceLock<agent_otel::Telemetry> = OnceLock::new();

/// Starts the export if the environment asks for it. A bad setting (a protocol we do not
/// speak, an endpoint that does not parse) is a usage error: silently exporting nothing would
/// lose what the user asked to keep.
pub(crate) fn start() -> Result<bool, Error> {
    let telemetry = agent_otel::Telemetry::from_env()
        .map_err(|error| Error::Usage(format!("OpenTelemetry: {error}")))?;
    Ok(match telemetry {
        Some(telemetry) => TELEMETRY.set(telemetry).is_ok(),
        None => false,
    })
}

/// The export's layer for a subscriber, or `None` (a layer that does nothing) when off.
pub(crate) fn layer<S>() -> Option<impl Layer<S> + Send + Sync + 'static>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    TELEMETRY.get().map(agent_otel::Telemetry::layer)
}

/// For the commands without a log (`run`, `resume`, `demo`): a subscriber that only exports.
pub(crate) fn install() {
    if TELEMETRY.get().is_some() {
        let _ = tracing_subscriber::registry().with(layer()).try_init();
    }
}

/// Runs `work`; with `watch` and the export on, SIGTERM drops it (ending its spans) and exits
/// 143, so the flush after it still runs. Otherwise SIGTERM keeps its default action (or the
/// command's own handling: `serve` drains).
pub(crate) async fn until_terminated<F>(watch: bool, work: F) -> Result<ExitCode, Error>
where
    F: Future<Output = Result<ExitCode, Error>>,
{
    #[cfg(unix)]
    if watch && TELEMETRY.get().is_some() {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut terminate) = signal(SignalKind::terminate()) {
            return tokio::select! {
                outcome = work => outcome,
                _ = terminate.recv() => Ok(ExitCode::from(143)),
            };
        }
    }
    work.await
}

/// Flushes and stops the export; blocks until the collector answered or the exporter's
/// timeout passed. Call it outside the async runtime.
pub(crate) fn shutdown() {
    if let Some(telemetry) = TELEMETRY.get()
        && let Err(error) = telemetry.shutdown()
    {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("agentry: {error}");
        }
    }
}
