//! Driving one run for a command: events to the renderer, Ctrl-C to the loop's cancellation,
//! the summary at the end, and the exit status.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use agent_loop::{Agent, ModelCallRecord, Session, SessionInput, SessionStatus};
use agent_types::{AgentError, ErrorKind};
use futures_util::StreamExt;
use serde_json::json;

use crate::exit::Exit;
use crate::render::{Renderer, format_usd, tool_calls_in};

/// Runs `session` from `input` with `agent` (its backend and options; the session holds the
/// model and the system prompt), showing it with `renderer`.
///
/// The first Ctrl-C cancels the run through the loop's token (the model call and running
/// tools stop; the loop records what completed); a second one exits at once.
pub(crate) async fn drive<O, E>(
    agent: &Agent,
    session: &mut Session,
    input: SessionInput,
    renderer: &mut Renderer<O, E>,
) -> Exit
where
    O: Write,
    E: Write,
{
    let records = Arc::new(Mutex::new(Vec::<ModelCallRecord>::new()));
    let sink = Arc::clone(&records);
    let agent = agent
        .to_builder()
        .options(|options| {
            options.on_model_call(move |record| {
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(record.clone());
            })
        })
        .build();
    let cancel = agent.options().cancellation.clone();
    let interrupted = Arc::new(AtomicBool::new(false));
    let watcher = {
        let cancel = cancel.clone();
        let interrupted = Arc::clone(&interrupted);
        let mut interrupts = Interrupts::listen();
        tokio::spawn(async move {
            if interrupts.next().await {
                interrupted.store(true, Ordering::SeqCst);
                cancel.cancel();
                if interrupts.next().await {
                    std::process::exit(i32::from(Exit::Aborted.code()));
                }
            }
        })
    };

    let mut output_error = None;
    let mut stream = agent.resume_stream(&mut *session, input);
    while let Some(event) = stream.next().await {
        if output_error.is_none()
            && let Err(error) = renderer.event(&event)
        {
            // Nobody is reading (a closed pipe): stop the run rather than work for nothing.
            output_error = Some(error);
            cancel.cancel();
        }
    }
    let outcome = stream.result().await;
    watcher.abort();

    let records = std::mem::take(&mut *records.lock().unwrap_or_else(PoisonError::into_inner));
    if let Some(error) = output_error {
        let _ = writeln!(
            std::io::stderr(),
            "agentry: cannot write the output: {error}"
        );
        return Exit::Error;
    }
    let trace = match &outcome {
        Ok(result) => result.trace.as_slice(),
        Err(error) => error.partial_trace.as_slice(),
    };
    let shown = renderer
        .summary(&records, trace)
        .and_then(|()| match &outcome {
            Ok(result) if result.status == SessionStatus::AwaitingToolExecution => {
                renderer.data(&json!({
                    "session_id": result.session_id,
                    "pending_tool_calls": result.pending_tool_calls,
                }))
            }
            Ok(result) if result.status == SessionStatus::AwaitingApproval => {
                renderer.data(&json!({
                    "session_id": result.session_id,
                    "pending_approvals": result.pending_approvals,
                }))
            }
            _ => Ok(()),
        });
    let exit = match &outcome {
        Ok(result) if result.status == SessionStatus::AwaitingToolExecution => Exit::Awaiting,
        Ok(result) if result.status == SessionStatus::AwaitingApproval => Exit::Awaiting,
        Ok(_) => Exit::Done,
        Err(error) => Exit::of(error),
    };
    let status = status_line(exit, &outcome, &records, interrupted.load(Ordering::SeqCst));
    if let Err(error) = shown.and_then(|()| renderer.note(&status)) {
        let _ = writeln!(
            std::io::stderr(),
            "agentry: cannot write the output: {error}"
        );
        return Exit::Error;
    }
    exit
}

/// Ctrl-C, listened for from the moment [`Interrupts::listen`] returns: on Unix the handler
/// is installed right away, so an interrupt that arrives before the watcher task first runs
/// still cancels the run instead of killing the process.
struct Interrupts {
    #[cfg(unix)]
    signal: Option<tokio::signal::unix::Signal>,
}

impl Interrupts {
    fn listen() -> Self {
        Self {
            #[cfg(unix)]
            signal: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok(),
        }
    }

    /// Waits for the next Ctrl-C; `false` when none can ever come.
    async fn next(&mut self) -> bool {
        #[cfg(unix)]
        if let Some(signal) = &mut self.signal {
            return signal.recv().await.is_some();
        }
        tokio::signal::ctrl_c().await.is_ok()
    }
}

/// The last line people see: how the run ended and what it used.
fn status_line(
    exit: Exit,
    outcome: &Result<agent_loop::GenerateResult, AgentError>,
    records: &[ModelCallRecord],
    interrupted: bool,
) -> String {
    let (messages, cost) = match outcome {
        Ok(result) => (result.messages.as_slice(), result.cost_usd),
        Err(error) => (
            error.partial_messages.as_slice(),
            records
                .iter()
                .filter_map(|record| record.cost_usd)
                .reduce(|a, b| a + b),
        ),
    };
    let mut usage = agent_types::Usage::default();
    for record in records {
        usage += record.usage.unwrap_or_default();
    }
    let mut facts = vec![
        format!("{} model call(s)", records.len()),
        format!("{} tool call(s)", tool_calls_in(messages)),
    ];
    if let (Some(input), Some(output)) = (usage.input_tokens, usage.output_tokens) {
        facts.push(format!("{input} tokens in, {output} out"));
    }
    if let Some(cost) = cost {
        facts.push(format_usd(cost));
    }
    let facts = facts.join(" · ");
    match (exit, outcome) {
        (Exit::Done, _) => format!("done · {facts}"),
        (Exit::Awaiting, Ok(result)) if result.status == SessionStatus::AwaitingApproval => {
            format!("awaiting approval · {facts}")
        }
        (Exit::Awaiting, _) => format!("awaiting tool results · {facts}"),
        (Exit::Aborted, _) if interrupted => {
            format!("aborted by Ctrl-C; completed turns are kept · {facts}")
        }
        (_, Err(error)) => match &error.kind {
            ErrorKind::BudgetExceeded { budget } => {
                format!("stopped: budget exceeded ({budget}) · {facts}")
            }
            _ => format!("stopped: {error} · {facts}"),
        },
        (_, Ok(_)) => format!("stopped · {facts}"),
    }
}
