//! What the web-frontend endpoints share (`POST /v1/ui/chat`, the AI SDK's UI message
//! stream, and `POST /v1/ag-ui`, AG-UI): a session named by the client in the tenant's
//! namespace, created on first use and leased like an execute, run on its own task, its
//! events turned into the protocol's frames by an [`Encoder`].
//!
//! The run is the session execute's (execute.rs): the same options, approvals, spend meter,
//! checkpoints, lease heartbeat and save before the last frame; only the encoding differs.
//! An encoder writes each event into one reused buffer ([`BytesMut`]), whose filled part
//! goes out without a copy, so a frame costs no allocation beyond its bytes.

use std::convert::Infallible;
use std::sync::Arc;

use agent_loop::{SessionInput, SessionStatus};
use agent_types::{AgentError, AgentEvent, Usage};
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::encode::{Encoder, End};
use crate::error::{ApiError, redact_agent_error};
use crate::execute::{self, Execute, OpenStream, deliver};
use crate::quota;
use crate::sessions::NewSession;
use crate::state::{AppState, Tenant, now_ms};
use crate::store::{SessionRecord, StoreError};

/// Frames waiting for a slow client before the loop is held back.
const CHANNEL_DEPTH: usize = 64;

/// The longest session id a frontend may name.
pub(crate) const MAX_ID_CHARS: usize = 128;

/// Checks a client-chosen session id: 1 to [`MAX_ID_CHARS`] of `A-Z a-z 0-9 _ - . :`.
///
/// # Errors
///
/// 400 naming `field` otherwise.
pub(crate) fn check_id(field: &str, id: &str) -> Result<(), ApiError> {
    let fits = !id.is_empty()
        && id.len() <= MAX_ID_CHARS
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'.' | b':'));
    if fits {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "`{field}` must be 1 to {MAX_ID_CHARS} characters of A-Z, a-z, 0-9, `_`, `-`, `.` \
             and `:`"
        )))
    }
}

/// The session a frontend names when it does not exist yet: `context` when the client sent
/// one, else the server's first model with every server tool the tenant may use.
fn new_session(state: &AppState, tenant: &Tenant, context: Option<NewSession>) -> NewSession {
    context.unwrap_or_else(|| NewSession {
        model: state
            .inner
            .config
            .models
            .first()
            .map(|model| model.name.clone())
            .unwrap_or_default(),
        system: None,
        tools: state
            .inner
            .tools
            .iter()
            .filter(|tool| {
                tool.tool()
                    .required_permissions()
                    .iter()
                    .all(|permission| tenant.caller.has_permission(permission))
            })
            .map(|tool| tool.name().to_owned())
            .collect(),
        remote_tools: Vec::new(),
        options: crate::store::SessionOptions::default(),
        messages: Vec::new(),
        settings: None,
        output_schema: None,
    })
}

/// Leases session `id` of `tenant` for one run (creating it from `context` on first use),
/// makes it consistent (crash recovery, expiry), and asks `input` for the run's input given
/// the session as it is; the checks of an execute follow.
///
/// # Errors
///
/// The execute's: 429 at the tenant's run limit, 409 while another run holds the session,
/// 400 for an input that does not fit the session, 402 over a spend cap, and `input`'s own.
pub(crate) async fn prepare<F>(
    state: &AppState,
    tenant: &Arc<Tenant>,
    id: &str,
    context: Option<NewSession>,
    input: F,
) -> Result<Execute, ApiError>
where
    F: FnOnce(&mut SessionRecord) -> Result<SessionInput, ApiError>,
{
    state.inner.spend.admit(&tenant.name).await?;
    let permit = tenant.gate.enter().ok_or_else(|| {
        ApiError::rate_limited(
            format!("tenant `{}` has too many executes running", tenant.name),
            1,
        )
    })?;
    let holder = execute::holder(state);
    let (mut record, created) = match execute::lease(state, tenant, id, &holder).await {
        Ok(()) => match state.inner.store.get(&tenant.name, id).await? {
            Some(record) => (record, false),
            None => {
                release(state, tenant, id, &holder).await;
                return Err(ApiError::not_found(format!("no session {id}")));
            }
        },
        // Created on first use, once its input is known to be good: a refused request
        // leaves nothing behind.
        Err(error) if error.status == StatusCode::NOT_FOUND => {
            let new = new_session(state, tenant, context);
            (crate::sessions::record(state, tenant, new, Some(id))?, true)
        }
        Err(error) => return Err(error),
    };
    let waiting = record.session.status == SessionStatus::AwaitingToolExecution;
    let (input, model) = match checked(state, tenant, &mut record, input) {
        Ok(checked) => checked,
        Err(error) if created => return Err(error),
        Err(error) => {
            // A session whose calls expired is saved as such (its calls closed) before
            // refusing; anything else is given back as it was.
            if waiting && record.session.status == SessionStatus::Error {
                record.updated_at_ms = now_ms();
                let _ = state.inner.store.save(&record, &holder, true).await;
            } else {
                release(state, tenant, id, &holder).await;
            }
            return Err(error);
        }
    };
    if !created && let Err(error) = quota::check_stored_bytes(state, tenant).await {
        // Over the tenant's byte quota: nothing more is spent on it.
        release(state, tenant, id, &holder).await;
        return Err(error);
    }
    if created {
        match state
            .inner
            .store
            .insert(
                &record,
                Some((&holder, execute::lease_until(state))),
                quota::store_quota(&tenant.quotas),
            )
            .await
        {
            Ok(()) => {}
            // Created by a concurrent first request, which holds it.
            Err(StoreError::Exists(_)) => {
                return Err(ApiError::conflict(format!(
                    "session {id} is already executing"
                )));
            }
            Err(error) => return Err(quota::refused(state, error)),
        }
    }
    Ok(Execute {
        tenant: Arc::clone(tenant),
        record,
        input,
        model,
        holder,
        permit,
    })
}

/// The session made consistent and the run's input and model, checked.
fn checked<F>(
    state: &AppState,
    tenant: &Tenant,
    record: &mut SessionRecord,
    input: F,
) -> Result<(SessionInput, crate::state::Model), ApiError>
where
    F: FnOnce(&mut SessionRecord) -> Result<SessionInput, ApiError>,
{
    crate::checkpoint::recover_for_run(state, record);
    let expired = crate::sessions::expire(state, record);
    let input = input(record)?;
    if expired && matches!(input, SessionInput::ToolResults(_)) {
        return Err(ApiError::conflict(format!(
            "the pending calls of session {} expired after {} s without results; send a new \
             message instead",
            record.id(),
            state.inner.config.remote_tool_timeout_secs
        )));
    }
    quota::check_session_size(state, tenant, record)?;
    record
        .session
        .check_input(&input)
        .map_err(|error| ApiError::bad_request(error.message))?;
    let model = state
        .inner
        .models
        .get(&record.model)
        .cloned()
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "the session's model `{}` is no longer offered by this server",
                record.model
            ))
        })?;
    Ok((input, model))
}

async fn release(state: &AppState, tenant: &Tenant, id: &str, holder: &str) {
    if let Err(error) = state.inner.store.release(&tenant.name, id, holder).await {
        tracing::warn!(session = id, %error, "could not release a lease");
    }
}

/// Starts the run and returns the SSE response that streams it through `encoder`.
pub(crate) fn start<E: Encoder>(state: &AppState, execute: Execute, encoder: E) -> Response {
    let (sender, receiver) = mpsc::channel::<Bytes>(CHANNEL_DEPTH);
    let id = execute.record.id().to_owned();
    let tenant = execute.tenant.name.clone();
    let task_state = state.clone();
    tokio::spawn(async move { run(task_state, execute, encoder, sender).await });
    let open = OpenStream::open(state, &tenant);
    let body = futures_util::stream::unfold((receiver, open), |(mut receiver, open)| async move {
        let frame = receiver.recv().await?;
        Some((Ok::<_, Infallible>(frame), (receiver, open)))
    });
    let mut response = execute::event_stream(Body::from_stream(body));
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-session-id", value);
    }
    response
}

/// The run task: execute.rs's, with `encoder` writing the frames.
async fn run<E: Encoder>(
    state: AppState,
    execute: Execute,
    mut encoder: E,
    sender: mpsc::Sender<Bytes>,
) {
    let Execute {
        tenant,
        mut record,
        input,
        model,
        holder,
        permit,
    } = execute;
    let mut out = BytesMut::with_capacity(4096);
    let cancel = CancellationToken::new();
    let Some(_registered) = state.inner.runs.register(cancel.clone()) else {
        release(&state, &tenant, record.id(), &holder).await;
        let error = AgentError::new(
            agent_types::ErrorKind::Aborted,
            "the server is shutting down",
        );
        encoder.open(&mut out);
        encoder.close(
            &End {
                session: &record.session,
                usage: Usage::default(),
                cost_usd: None,
                error: Some(&error),
            },
            &mut out,
        );
        let _ = sender.send(out.split().freeze()).await;
        return;
    };
    let watcher = {
        let sender = sender.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            sender.closed().await;
            cancel.cancel();
        })
    };
    let mut options = execute::options(&state, &tenant, &record, cancel.clone());
    crate::approval::install(
        &mut options,
        &tenant.require_approval,
        crate::approval::Resumable::Yes,
    );
    let meter = state.inner.spend.meter(&tenant.name);
    if let Some(meter) = &meter {
        meter.install(&mut options);
    }
    crate::checkpoint::install(&mut options, &state, &mut record, &holder, meter.as_ref());
    let heartbeat =
        crate::checkpoint::heartbeat(&state, &tenant.name, record.id(), &holder, cancel.clone());
    let metrics = &state.inner.metrics;
    let mut client = true;
    let session_id = record.id().to_owned();
    encoder.open(&mut out);
    let outcome = {
        let agent = execute::agent_for(&model, options);
        let mut stream = agent.resume_stream(&mut record.session, input);
        while let Some(event) = stream.next().await {
            execute::count(metrics, &tenant.name, &record.model, &event);
            if !client {
                continue;
            }
            match &event {
                AgentEvent::Error { error } => {
                    tracing::warn!(
                        session = %session_id,
                        tenant = %tenant.name,
                        error = %error.message,
                        "the run failed"
                    );
                    let redacted = AgentEvent::Error {
                        error: redact_agent_error(error),
                    };
                    encoder.event(&redacted, &mut out);
                }
                _ => encoder.event(&event, &mut out),
            }
            if out.is_empty() {
                continue;
            }
            if !deliver(&sender, out.split().freeze(), &cancel).await {
                client = false;
                cancel.cancel();
            }
        }
        stream.result().await
    };
    let outcome = outcome.map(|mut result| {
        result.messages = Vec::new();
        result
    });
    watcher.abort();
    heartbeat.abort();
    execute::settle_metrics(metrics, &tenant.name, &record.session.status, &outcome);
    if let Some(meter) = &meter {
        meter.flush().await;
    }
    record.updated_at_ms = now_ms();
    let saved = state.inner.store.save(&record, &holder, true).await;
    if let Err(error) = &saved {
        tracing::error!(session = record.id(), %error, "the session could not be saved after its run");
        record.session.status = SessionStatus::Error;
    }
    drop(permit);
    if client {
        let (usage, cost_usd) = match &outcome {
            Ok(result) => (result.usage, result.cost_usd),
            Err(error) => (error.spent.usage, error.spent.cost_usd),
        };
        let error = match (&saved, &outcome) {
            (_, Err(error)) => Some(redact_agent_error(error)),
            (Err(_), Ok(_)) => Some(AgentError::new(
                agent_types::ErrorKind::Appender,
                "the session could not be saved; the server log has the cause",
            )),
            _ => None,
        };
        encoder.close(
            &End {
                session: &record.session,
                usage,
                cost_usd,
                error: error.as_ref(),
            },
            &mut out,
        );
        deliver(&sender, out.split().freeze(), &cancel).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_checked() {
        assert!(check_id("id", "chat_01-a.b:c").is_ok());
        for bad in ["", "a/b", "a b", "é", &"x".repeat(MAX_ID_CHARS + 1)] {
            assert!(check_id("id", bad).is_err(), "{bad:?}");
        }
    }
}
