//! The Temporal side of `agentry worker`, `agentry run --temporal` and `agentry resume
//! --temporal` (built with the `temporal` feature).

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use agent_temporal::{RunHandle, RunRequest};

use super::TemporalArgs;
use crate::approval::ApprovalArgs;
use crate::args::{LoopArgs, ModelArgs};
use crate::error::Error;
use crate::exit::Exit;

fn temporal_error(error: agent_temporal::Error) -> Error {
    match error {
        agent_temporal::Error::Address { .. } => Error::Usage(error.to_string()),
        other => Error::Other(other.to_string()),
    }
}

fn address(args: &TemporalArgs) -> Result<&str, Error> {
    args.address
        .as_deref()
        .ok_or_else(|| Error::Usage("--temporal ADDR is required".to_string()))
}

/// `agentry worker`: serves the task queue until stopped.
pub(crate) async fn worker(
    args: &TemporalArgs,
    model: &ModelArgs,
    loop_args: &LoopArgs,
) -> Result<Exit, Error> {
    let (backend, options, _) = crate::run::durable_parts(model, loop_args)?;
    let mut activities = agent_temporal::AgentActivities::new(Arc::from(backend), options)
        .map_err(|error| Error::Other(error.to_string()))?
        .with_retries(retries(model)?);
    if let Some(url) = &args.events {
        activities = activities.with_events(super::live::log(url).await?);
    }
    let client = agent_temporal::connect(address(args)?, &args.namespace)
        .await
        .map_err(temporal_error)?;
    #[allow(clippy::print_stderr)]
    {
        eprintln!(
            "agentry worker · {} · namespace {} · task queue {}",
            address(args)?,
            args.namespace,
            args.task_queue
        );
    }
    agent_temporal::run_worker(client, &args.task_queue, activities)
        .await
        .map_err(temporal_error)?;
    Ok(Exit::Done)
}

/// The activities' retry settings: agentry.toml's `[retry]` over agent-backends' defaults.
fn retries(model: &ModelArgs) -> Result<agent_temporal::Retries, Error> {
    let config = crate::config::Config::load(model.config.as_deref())?;
    let set = config.merged.retry.unwrap_or_default();
    let default = agent_temporal::Retries::default();
    Ok(agent_temporal::Retries {
        max_attempts: set.attempts.unwrap_or(default.max_attempts),
        initial_interval_ms: set
            .initial_backoff_ms
            .unwrap_or(default.initial_interval_ms),
        max_interval_ms: set.max_backoff_ms.unwrap_or(default.max_interval_ms),
    })
}

/// `agentry run --temporal`: starts `agent_run` and follows it until it ends, printing each
/// tool call as the workflow's trace shows it, then the answer (or the outcome as JSON).
pub(crate) async fn run(
    args: &TemporalArgs,
    prompt: Vec<String>,
    model: &ModelArgs,
    loop_args: &LoopArgs,
    json: bool,
) -> Result<Exit, Error> {
    let text = crate::run::prompt(prompt)?;
    let (_, _, session) = crate::run::durable_parts(model, loop_args)?;
    let workflow = args
        .workflow
        .clone()
        .unwrap_or_else(|| session.id.to_string());
    let client = agent_temporal::connect(address(args)?, &args.namespace)
        .await
        .map_err(temporal_error)?;
    // With live events: what the log holds for this id before the run starts is not its own.
    let events = match &args.events {
        Some(url) => {
            let log = super::live::log(url).await?;
            let after = log.last_seq(&workflow).await.map_err(temporal_error)?;
            Some((log, after))
        }
        None => None,
    };
    let handle = agent_temporal::start_run(
        &client,
        &args.task_queue,
        &workflow,
        RunRequest::new(session, text),
    )
    .await
    .map_err(temporal_error)?;
    let mut stderr = std::io::stderr();
    let _ = writeln!(
        stderr,
        "agentry run · temporal {} · workflow {workflow}",
        address(args)?
    );
    if let Some((log, after)) = events {
        return super::live::follow(&handle, log.as_ref(), after, json).await;
    }
    follow(&handle, json).await
}

/// `agentry resume --temporal --workflow ID`: sends the decisions or the results the run
/// waits for, then follows it.
pub(crate) async fn resume(
    args: &TemporalArgs,
    results: Option<&std::path::Path>,
    approvals: &ApprovalArgs,
    json: bool,
) -> Result<Exit, Error> {
    let workflow = args
        .workflow
        .clone()
        .ok_or_else(|| Error::Usage("--workflow ID is required with --temporal".to_string()))?;
    let client = agent_temporal::connect(address(args)?, &args.namespace)
        .await
        .map_err(temporal_error)?;
    let handle = RunHandle::new(client, workflow);
    let status = handle.status().await.map_err(temporal_error)?;
    let events = match &args.events {
        Some(url) => {
            let log = super::live::log(url).await?;
            let after = log
                .last_seq(handle.workflow_id())
                .await
                .map_err(temporal_error)?;
            Some((log, after))
        }
        None => None,
    };
    if approvals.any() {
        let decisions = crate::approval::decisions(
            &approvals.approve,
            &approvals.deny,
            &status.pending_approvals,
        );
        handle.approve(decisions).await.map_err(temporal_error)?;
    } else if let Some(path) = results {
        let text = crate::run::read_results(path)?;
        let results = crate::run::parse_results(&text, &status.pending_tool_calls)
            .map_err(|message| Error::Usage(format!("{}: {message}", path.display())))?;
        handle.tool_results(results).await.map_err(temporal_error)?;
    } else {
        return Err(Error::Usage(
            "--results, --approve or --deny says what to send".to_string(),
        ));
    }
    if let Some((log, after)) = events {
        return super::live::follow(&handle, log.as_ref(), after, json).await;
    }
    follow(&handle, json).await
}

/// Waits for the run's end, printing new trace entries as they appear (the `trace` query,
/// polled), and the run's calls waiting for someone (exit 4) when it stops for them.
async fn follow(handle: &RunHandle, json: bool) -> Result<Exit, Error> {
    let outcome = handle.outcome();
    let mut outcome = std::pin::pin!(outcome);
    let mut shown = 0;
    let mut stderr = std::io::stderr();
    let mut ticker = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            ended = &mut outcome => {
                let outcome = ended.map_err(temporal_error)?;
                for entry in outcome.trace.iter().skip(shown) {
                    let _ = writeln!(stderr, "tool {} ({})", entry.tool_name, entry.call_id);
                }
                let mut stdout = std::io::stdout();
                let line = if json {
                    serde_json::to_string(&outcome).map_err(|e| Error::Other(e.to_string()))?
                } else {
                    outcome.answer.clone()
                };
                writeln!(stdout, "{line}")
                    .map_err(|error| Error::Other(format!("cannot write the output: {error}")))?;
                return Ok(match outcome.error {
                    Some(error) => {
                        let _ = writeln!(stderr, "agentry: {error}");
                        Exit::Error
                    }
                    None => Exit::Done,
                });
            }
            _ = ticker.tick() => {
                // A query needs a worker; none answering only delays the lines.
                if let Ok(status) = handle.status().await {
                    let waiting: Vec<_> = status
                        .pending_approvals
                        .iter()
                        .chain(&status.pending_tool_calls)
                        .collect();
                    if !waiting.is_empty() {
                        let line = serde_json::json!({
                            "status": status.status,
                            "workflow": handle.workflow_id(),
                            "pending": waiting,
                        });
                        let mut stdout = std::io::stdout();
                        let _ = writeln!(stdout, "{line}");
                        return Ok(Exit::Awaiting);
                    }
                }
                if let Ok(trace) = handle.trace().await {
                    for entry in trace.iter().skip(shown) {
                        let _ = writeln!(stderr, "tool {} ({})", entry.tool_name, entry.call_id);
                    }
                    shown = shown.max(trace.len());
                }
            }
        }
    }
}
