//! `[server.durability]`: where a session's runs execute. `engine = "in_process"` (the
//! default) runs them in this process (execute.rs); `engine = "temporal"` (feature
//! `temporal`) makes `POST /v1/sessions/{id}/execute` start the session's `agent_run`
//! workflow on Temporal, or signal it when it waits for approvals or remote results, and
//! stream its events from the live event log (agent_temporal::events) in the store's
//! PostgreSQL database as the usual SSE (docs/durable.md, "The server on Temporal").

use serde::Deserialize;

/// `[server.durability]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DurabilityConfig {
    /// Where runs execute [default: `in_process`].
    #[serde(default)]
    pub engine: Engine,
    /// The Temporal frontend (host:port, or https://… for Temporal Cloud).
    #[serde(default)]
    pub address: Option<String>,
    /// The Temporal namespace [default: `default`].
    #[serde(default)]
    pub namespace: Option<String>,
    /// The task queue the workers (`agentry worker --events <the store's URL>`) poll.
    #[serde(default)]
    pub task_queue: Option<String>,
}

/// Where runs execute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// In this process.
    #[default]
    InProcess,
    /// As Temporal workflows, on workers.
    Temporal,
}

/// Why `[server.durability]` is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurabilityError {
    /// `engine = "temporal"` in a server built without the `temporal` feature.
    #[error(
        "[server.durability] engine = \"temporal\" needs a server built with the `temporal` \
         feature (`cargo install agentry-cli --features temporal`; needs protoc)"
    )]
    NotBuilt,
    /// A key the engine needs is missing or empty.
    #[error("[server.durability] engine = \"temporal\" needs `{0}`")]
    Missing(&'static str),
    /// The live events go through the store's PostgreSQL database.
    #[error(
        "[server.durability] engine = \"temporal\" needs [server.store] kind = \"postgres\" \
         (its database carries the runs' live events)"
    )]
    NeedsPostgres,
    /// Temporal or the event log cannot be reached.
    #[error("[server.durability]: {0}")]
    Unreachable(String),
}

impl DurabilityConfig {
    /// Checks the keys the engine needs.
    ///
    /// # Errors
    /// The first [`DurabilityError`].
    pub fn validate(&self, store: &crate::config::StoreConfig) -> Result<(), DurabilityError> {
        if self.engine == Engine::InProcess {
            return Ok(());
        }
        if !cfg!(feature = "temporal") {
            return Err(DurabilityError::NotBuilt);
        }
        if self.address.as_deref().is_none_or(|a| a.trim().is_empty()) {
            return Err(DurabilityError::Missing("address"));
        }
        if self
            .task_queue
            .as_deref()
            .is_none_or(|q| q.trim().is_empty())
        {
            return Err(DurabilityError::Missing("task_queue"));
        }
        if !matches!(store, crate::config::StoreConfig::Postgres { .. }) {
            return Err(DurabilityError::NeedsPostgres);
        }
        Ok(())
    }
}

/// The workflow id of `tenant`'s session `session`: the tenant's name length-prefixed, so no
/// session id one tenant chooses names another tenant's workflow (ids are never shown to
/// clients; they only ever reach Temporal from the server).
#[cfg_attr(not(feature = "temporal"), allow(dead_code))]
pub(crate) fn workflow_id(tenant: &str, session: &str) -> String {
    format!("agentry:{}:{tenant}:{session}", tenant.len())
}

#[cfg(feature = "temporal")]
pub(crate) use temporal::{Durable, execute, open};

#[cfg(feature = "temporal")]
mod temporal {
    use std::sync::Arc;

    use agent_loop::{SessionInput, SessionStatus};
    use agent_temporal::RunHandle;
    use agent_temporal::events::{EventLimits, EventLog, PgEventLog};
    use agent_types::{AgentError, AgentEvent, Message, StopReason, UserBlock};
    use axum::body::Body;
    use axum::response::Response;
    use bytes::{Bytes, BytesMut};
    use futures_util::StreamExt;
    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;

    use super::{DurabilityError, Engine, workflow_id};
    use crate::config::ServerConfig;
    use crate::error::ApiError;
    use crate::execute::{Leased, Native, Sink};
    use crate::limits::Permit;
    use crate::state::now_ms;
    use crate::store::SessionRecord;

    /// The Temporal client, the task queue and the event log the server's runs use.
    pub(crate) struct Durable {
        client: agent_temporal::Client,
        task_queue: String,
        log: Arc<dyn EventLog>,
    }

    /// Connects to Temporal and the event log when `[server.durability]` says Temporal.
    ///
    /// # Errors
    /// [`DurabilityError`] for an unusable configuration or an unreachable engine.
    pub(crate) async fn open(
        config: &ServerConfig,
    ) -> Result<Option<Arc<Durable>>, DurabilityError> {
        let durability = &config.durability;
        durability.validate(&config.store)?;
        if durability.engine != Engine::Temporal {
            return Ok(None);
        }
        let crate::config::StoreConfig::Postgres { url, url_env } = &config.store else {
            return Err(DurabilityError::NeedsPostgres);
        };
        let url = crate::config::postgres_url(url.as_ref(), url_env.as_ref())
            .map_err(|error| DurabilityError::Unreachable(error.to_string()))?;
        let log = PgEventLog::connect(&url, EventLimits::default())
            .await
            .map_err(|error| DurabilityError::Unreachable(error.to_string()))?
            .shared();
        let address = durability.address.clone().unwrap_or_default();
        let namespace = durability.namespace.as_deref().unwrap_or("default");
        let client = agent_temporal::connect(&address, namespace)
            .await
            .map_err(|error| DurabilityError::Unreachable(error.to_string()))?;
        Ok(Some(Arc::new(Durable {
            client,
            task_queue: durability.task_queue.clone().unwrap_or_default(),
            log,
        })))
    }

    /// Whether `input` fits where the session's workflow stands (the stored session mirrors
    /// it: its status and waiting calls as the run's last events said).
    fn fits(record: &SessionRecord, input: &SessionInput) -> Result<(), ApiError> {
        let session = &record.session;
        let waiting = |what: &str| {
            Err(ApiError::bad_request(format!(
                "session {} is {what}",
                record.id()
            )))
        };
        match (input, session.status) {
            (SessionInput::User(_), SessionStatus::AwaitingApproval) => {
                waiting("waiting for approval: send `approvals`")
            }
            (SessionInput::User(_), SessionStatus::AwaitingToolExecution) => {
                waiting("waiting for tool results: send `tool_results`")
            }
            (SessionInput::User(_), _) => Ok(()),
            (SessionInput::Approvals(decisions), SessionStatus::AwaitingApproval) => {
                let named = |call: &agent_types::ToolCall| {
                    decisions.iter().any(|d| d.call_id == call.id.as_str())
                };
                if session.pending_approvals.iter().all(named) {
                    Ok(())
                } else {
                    Err(ApiError::bad_request(
                        "`approvals` must decide every call waiting for approval",
                    ))
                }
            }
            (SessionInput::ToolResults(_), SessionStatus::AwaitingToolExecution) => Ok(()),
            (SessionInput::Approvals(_), _) => waiting("not waiting for approval"),
            (SessionInput::ToolResults(_), _) => waiting("not waiting for tool results"),
            _ => Err(ApiError::bad_request(
                "a run on Temporal continues with `message`, `approvals` or `tool_results`",
            )),
        }
    }

    /// How long the events of a workflow that ended may still be on their way.
    const DRAIN: std::time::Duration = std::time::Duration::from_secs(3);

    fn unavailable(error: impl std::fmt::Display) -> ApiError {
        tracing::error!(%error, "temporal");
        ApiError::unavailable("the durable-execution engine is unavailable")
    }

    /// Steps 4 and 5 of execute on Temporal: the session's workflow started (a user message)
    /// or signalled (decisions, results), its events streamed from the log as execute's SSE,
    /// the session saved (the workflow's at its end, the waiting calls at a suspension) and
    /// released before `execute_complete`.
    pub(crate) async fn execute(
        leased: &Leased<'_>,
        durable: &Arc<Durable>,
        tenant: Arc<crate::state::Tenant>,
        mut record: SessionRecord,
        input: SessionInput,
        permit: Permit,
    ) -> Result<Response, ApiError> {
        let state = leased.state;
        let holder = leased.holder.to_owned();
        let workflow = workflow_id(&tenant.name, record.id());
        let id = record.id().to_owned();
        let give_back = |error: ApiError| leased.give_back(error);
        if let Err(error) = fits(&record, &input) {
            return Err(give_back(error).await);
        }
        // The history cap, the tenant's byte quota and the model, as in process.
        let refused = match crate::quota::check_session_size(state, &tenant, &record) {
            Ok(()) => crate::quota::check_stored_bytes(state, &tenant).await.err(),
            Err(error) => Some(error),
        };
        if let Some(error) = refused {
            return Err(give_back(error).await);
        }
        if !state.inner.models.contains_key(&record.model) {
            return Err(give_back(ApiError::bad_request(format!(
                "the session's model `{}` is no longer offered by this server",
                record.model
            )))
            .await);
        }
        let after = match durable.log.last_seq(&workflow).await {
            Ok(after) => after,
            Err(error) => return Err(give_back(unavailable(error)).await),
        };
        let handle = RunHandle::new(durable.client.clone(), workflow.clone());
        let sent = match input {
            SessionInput::User(message) => {
                let mut text = String::new();
                for block in &message.content {
                    match block {
                        UserBlock::Text { text: more } => text.push_str(more),
                        _ => {
                            return Err(give_back(ApiError::bad_request(
                                "a run on Temporal takes text messages only",
                            ))
                            .await);
                        }
                    }
                }
                let request = agent_temporal::RunRequest::new(record.session.clone(), text);
                let started = agent_temporal::start_run(
                    &durable.client,
                    &durable.task_queue,
                    &workflow,
                    request,
                )
                .await;
                record.session.messages.push(Message::User(message));
                started.map(|_| ())
            }
            SessionInput::Approvals(decisions) => handle.approve(decisions).await,
            SessionInput::ToolResults(results) => handle.tool_results(results).await,
            _ => {
                return Err(give_back(ApiError::bad_request(
                    "a run on Temporal continues with `message`, `approvals` or `tool_results`",
                ))
                .await);
            }
        };
        if let Err(error) = sent {
            return Err(give_back(unavailable(error)).await);
        }
        record.session.status = SessionStatus::Running;
        record.session.pending_approvals.clear();
        record.session.pending_tool_calls.clear();

        let (sender, receiver) = mpsc::channel::<Bytes>(64);
        let task_state = state.clone();
        let durable = Arc::clone(durable);
        tokio::spawn(async move {
            let cancel = CancellationToken::new();
            let heartbeat = crate::checkpoint::heartbeat(
                &task_state,
                &tenant.name,
                record.id(),
                &holder,
                cancel.clone(),
            );
            let mut events =
                agent_temporal::events::until_session_end(durable.log.subscribe(&workflow, after));
            let mut native = Native;
            let mut buf = BytesMut::new();
            let mut client = true;
            let mut finish = None;
            // The workflow's end, watched beside the events: a run that failed without its
            // last events (a non-retryable activity failure) still ends the stream.
            let outcome = handle.outcome();
            let mut outcome = std::pin::pin!(outcome);
            let mut ended = None;
            loop {
                let drain = tokio::time::sleep(DRAIN);
                let item = tokio::select! {
                    item = events.next() => item,
                    done = &mut outcome, if ended.is_none() => {
                        ended = Some(done);
                        continue;
                    }
                    () = drain, if ended.is_some() => None,
                };
                let Some(item) = item else { break };
                let event = match item {
                    Ok(logged) => logged.event,
                    Err(error) => {
                        tracing::debug!(%error, "reading a run's events");
                        continue;
                    }
                };
                match &event {
                    AgentEvent::ApprovalRequested { tool_calls, .. } => {
                        record.session.status = SessionStatus::AwaitingApproval;
                        record.session.pending_approvals.clone_from(tool_calls);
                    }
                    AgentEvent::AwaitingToolExecution { tool_calls, .. } => {
                        record.session.status = SessionStatus::AwaitingToolExecution;
                        record.session.pending_tool_calls.clone_from(tool_calls);
                    }
                    AgentEvent::SessionEnd {
                        messages,
                        finish_reason,
                        ..
                    } => {
                        finish = Some(*finish_reason);
                        if *finish_reason == StopReason::ToolCalls {
                            record.session.messages.extend(messages.iter().cloned());
                        }
                    }
                    _ => {}
                }
                if client {
                    // What a tenant sees of an error is redacted as in process.
                    let event = crate::execute::redacted(&event, &tenant.name, &id);
                    native.event(&event, &mut buf);
                    client = sender.send(buf.split().freeze()).await.is_ok();
                }
            }
            let mut error = None;
            if finish != Some(StopReason::ToolCalls) {
                let outcome = match ended {
                    Some(outcome) => outcome,
                    None => outcome.await,
                };
                match outcome {
                    Ok(outcome) => {
                        error = outcome.error.clone();
                        record.session = outcome.session;
                    }
                    Err(failed) => {
                        tracing::error!(session = %id, error = %failed, "a Temporal run failed");
                        record.session.status = SessionStatus::Error;
                        error = Some("the run failed on the durable-execution engine".to_string());
                    }
                }
            }
            heartbeat.abort();
            record.updated_at_ms = now_ms();
            if let Err(failed) = task_state.inner.store.save(&record, &holder, true).await {
                tracing::error!(session = %id, error = %failed, "the session could not be saved after its run");
                record.session.status = SessionStatus::Error;
            }
            drop(permit);
            if client {
                let error = error.map(|message| {
                    AgentError::new(
                        agent_types::ErrorKind::Tool {
                            tool: String::new(),
                        },
                        message,
                    )
                });
                let complete = serde_json::json!({
                    "type": "execute_complete",
                    "session_id": id,
                    "status": record.session.status,
                    "pending_tool_calls": record.session.pending_tool_calls,
                    "pending_approvals": record.session.pending_approvals,
                    "error": error,
                });
                let mut frame = BytesMut::new();
                frame.extend_from_slice(b"data: ");
                frame.extend_from_slice(complete.to_string().as_bytes());
                frame.extend_from_slice(b"\n\n");
                let _ = sender.send(frame.freeze()).await;
            }
        });
        let body = futures_util::stream::unfold(receiver, |mut receiver| async move {
            let frame = receiver.recv().await?;
            Some((Ok::<_, std::convert::Infallible>(frame), receiver))
        });
        Ok(crate::execute::event_stream(Body::from_stream(body)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StoreConfig;

    fn temporal() -> DurabilityConfig {
        DurabilityConfig {
            engine: Engine::Temporal,
            address: Some("127.0.0.1:7233".into()),
            namespace: None,
            task_queue: Some("agentry".into()),
        }
    }

    fn postgres() -> StoreConfig {
        StoreConfig::Postgres {
            url: Some("postgres://db/agentry".into()),
            url_env: None,
        }
    }

    #[test]
    fn a_temporal_engine_needs_its_keys_and_a_postgres_store() {
        assert_eq!(
            DurabilityConfig::default().validate(&StoreConfig::default()),
            Ok(())
        );
        if !cfg!(feature = "temporal") {
            assert_eq!(
                temporal().validate(&postgres()),
                Err(DurabilityError::NotBuilt)
            );
            return;
        }
        assert_eq!(temporal().validate(&postgres()), Ok(()));
        let mut missing = temporal();
        missing.address = Some(" ".into());
        assert_eq!(
            missing.validate(&postgres()),
            Err(DurabilityError::Missing("address"))
        );
        let mut missing = temporal();
        missing.task_queue = None;
        assert_eq!(
            missing.validate(&postgres()),
            Err(DurabilityError::Missing("task_queue"))
        );
        assert_eq!(
            temporal().validate(&StoreConfig::default()),
            Err(DurabilityError::NeedsPostgres)
        );
    }

    #[test]
    fn the_config_reads_the_section_and_refuses_unknown_keys() {
        let config: DurabilityConfig = toml::from_str(
            "engine = \"temporal\"\naddress = \"t:7233\"\nnamespace = \"agents\"\ntask_queue = \"q\"",
        )
        .unwrap_or_default();
        assert_eq!(config.engine, Engine::Temporal);
        assert_eq!(config.namespace.as_deref(), Some("agents"));
        assert!(
            toml::from_str::<DurabilityConfig>("engine = \"temporal\"\nadress = \"x\"").is_err()
        );
        assert!(toml::from_str::<DurabilityConfig>("engine = \"restate\"").is_err());
    }

    #[test]
    fn workflow_ids_of_two_tenants_never_meet() {
        // Tenant "a" naming its session "b:c" must not reach tenant "a:b"'s session "c".
        assert_ne!(workflow_id("a", "b:c"), workflow_id("a:b", "c"));
        assert_eq!(workflow_id("acme", "s1"), "agentry:4:acme:s1");
    }
}
