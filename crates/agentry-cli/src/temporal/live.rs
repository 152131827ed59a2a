//! `--events URL`: a run on Temporal shown from the live event log (agent_temporal::events),
//! event by event through the renderer of the in-process `agentry run`, instead of polling the
//! workflow's queries.

use std::sync::Arc;
use std::time::Duration;

use agent_temporal::RunHandle;
use agent_temporal::events::{EventLimits, EventLog, PgEventLog};
use agent_types::{AgentEvent, StopReason};
use futures_util::StreamExt;
use serde_json::json;

use crate::error::Error;
use crate::exit::Exit;
use crate::render::Renderer;

/// How long the events of a workflow that ended may still be on their way to the viewer.
const DRAIN: Duration = Duration::from_secs(3);

/// The event log at `url`.
pub(crate) async fn log(url: &str) -> Result<Arc<dyn EventLog>, Error> {
    let log = PgEventLog::connect(url, EventLimits::default())
        .await
        .map_err(|error| Error::Usage(format!("--events: {error}")))?;
    Ok(log.shared())
}

/// Shows the run's events after `after` until its `session_end` (the end, or a suspension),
/// then what the in-process run shows after its events: the trace table, the calls a
/// suspended run waits for (exit 4), the exit status.
pub(crate) async fn follow(
    handle: &RunHandle,
    log: &dyn EventLog,
    after: i64,
    json: bool,
) -> Result<Exit, Error> {
    let mut renderer = Renderer::stdio(json);
    let mut events =
        agent_temporal::events::until_session_end(log.subscribe(handle.workflow_id(), after));
    let outcome = handle.outcome();
    let mut outcome = std::pin::pin!(outcome);
    let mut ended = None;
    let mut finish = None;
    loop {
        let drain = tokio::time::sleep(DRAIN);
        tokio::select! {
            item = events.next() => match item {
                Some(Ok(logged)) => {
                    if let AgentEvent::SessionEnd { finish_reason, .. } = &logged.event {
                        finish = Some(*finish_reason);
                    }
                    renderer.event(&logged.event).map_err(|error| {
                        Error::Other(format!("cannot write the output: {error}"))
                    })?;
                }
                // The log is a view: a read that failed is tried again.
                Some(Err(error)) => tracing::debug!(%error, "reading the run's events"),
                None => break,
            },
            done = &mut outcome, if ended.is_none() => ended = Some(done),
            () = drain, if ended.is_some() => break,
        }
    }
    if finish == Some(StopReason::ToolCalls) {
        // Suspended: what it waits for, as the in-process run prints it.
        let status = handle
            .status()
            .await
            .map_err(|error| Error::Other(error.to_string()))?;
        let value = if status.pending_approvals.is_empty() {
            json!({"workflow": handle.workflow_id(), "pending_tool_calls": status.pending_tool_calls})
        } else {
            json!({"workflow": handle.workflow_id(), "pending_approvals": status.pending_approvals})
        };
        let _ = renderer.data(&value);
        return Ok(Exit::Awaiting);
    }
    let outcome = match ended {
        Some(outcome) => outcome,
        None => outcome.await,
    };
    match outcome {
        Ok(outcome) => {
            let _ = renderer.summary(&[], &outcome.trace);
            Ok(match outcome.error {
                Some(_) => Exit::Error,
                None => Exit::Done,
            })
        }
        Err(error) => {
            // The workflow failed without its own last events (a non-retryable activity
            // failure): say so as the in-process run's error line would.
            let _ = renderer.note(&format!("error: {error}"));
            Ok(Exit::Error)
        }
    }
}
