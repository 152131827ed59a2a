//! The client and worker ends: connecting, running a worker, starting and steering a run.

use std::str::FromStr;

use agent_loop::ApprovalDecision;
use agent_types::{ToolCall, ToolResult, TraceEntry};
use temporalio_client::{
    Client, ClientOptions, Connection, ConnectionOptions, Url, WorkflowCancelOptions,
    WorkflowGetResultOptions, WorkflowQueryOptions, WorkflowSignalOptions, WorkflowStartOptions,
};
use temporalio_sdk::{Runtime, Worker, WorkerOptions};

use crate::activities::AgentActivities;
use crate::error::Error;
use crate::wire::{RunOutcome, RunRequest, RunStatus};
use crate::workflow::AgentRun;

/// Connects to the Temporal frontend at `address` (`host:port`, or a URL) for `namespace`.
///
/// # Errors
/// [`Error::Address`] for an unusable address, [`Error::Connect`] when the server does not
/// answer.
pub async fn connect(address: &str, namespace: &str) -> Result<Client, Error> {
    let url = if address.contains("://") {
        address.to_string()
    } else {
        format!("http://{address}")
    };
    let url = Url::from_str(&url).map_err(|error| Error::Address {
        address: address.to_string(),
        reason: error.to_string(),
    })?;
    let connection = Connection::connect(ConnectionOptions::new(url).identity("agentry").build())
        .await
        .map_err(|error| Error::Connect {
            address: address.to_string(),
            reason: error.to_string(),
        })?;
    Client::new(connection, ClientOptions::new(namespace).build()).map_err(|error| Error::Connect {
        address: address.to_string(),
        reason: error.to_string(),
    })
}

/// A worker polling `task_queue` for `agent_run` workflow tasks and the `model_call` and
/// `tool_call` activities. Run it with [`run_worker`], or keep it to stop it from elsewhere
/// (`Worker::shutdown_handle`).
///
/// # Errors
/// [`Error::Worker`] when the SDK refuses the worker's setup.
pub fn worker(
    runtime: &Runtime,
    client: Client,
    task_queue: &str,
    activities: AgentActivities,
) -> Result<Worker, Error> {
    let events = crate::events::EventActivities::new(activities.events().cloned());
    let options = WorkerOptions::new(task_queue)
        .register_workflow::<AgentRun>()
        .map_err(|error| Error::Worker(error.to_string()))?
        .register_activities(activities)
        .register_activities(events)
        .build();
    Worker::new(runtime, client, options).map_err(|error| Error::Worker(error.to_string()))
}

/// Runs a worker on `task_queue` until it fails or is shut down.
///
/// # Errors
/// [`Error::Worker`] when the worker cannot start or stops with an error.
pub async fn run_worker(
    client: Client,
    task_queue: &str,
    activities: AgentActivities,
) -> Result<(), Error> {
    let runtime = Runtime::from_current_tokio(Default::default())
        .map_err(|error| Error::Worker(error.to_string()))?;
    let mut worker = worker(&runtime, client, task_queue, activities)?;
    worker
        .run()
        .await
        .map_err(|error| Error::Worker(error.to_string()))
}

/// Starts `agent_run` on `task_queue` with the id `workflow_id`.
///
/// # Errors
/// [`Error::Workflow`] when the server refuses the start (e.g. the id runs already).
pub async fn start_run(
    client: &Client,
    task_queue: &str,
    workflow_id: &str,
    request: RunRequest,
) -> Result<RunHandle, Error> {
    client
        .start_workflow(
            AgentRun::run,
            request,
            WorkflowStartOptions::new(task_queue, workflow_id).build(),
        )
        .await
        .map_err(|error| Error::Workflow(error.to_string()))?;
    Ok(RunHandle::new(client.clone(), workflow_id))
}

/// A started (or running) `agent_run`, by its workflow id.
#[derive(Clone)]
pub struct RunHandle {
    client: Client,
    workflow_id: String,
}

impl RunHandle {
    /// The run with workflow id `workflow_id`.
    pub fn new(client: Client, workflow_id: impl Into<String>) -> Self {
        Self {
            client,
            workflow_id: workflow_id.into(),
        }
    }

    /// The workflow id.
    pub fn workflow_id(&self) -> &str {
        &self.workflow_id
    }

    /// Waits for the run's outcome (following continue-as-new).
    ///
    /// # Errors
    /// [`Error::Workflow`] when the workflow failed, was cancelled or cannot be read.
    pub async fn outcome(&self) -> Result<RunOutcome, Error> {
        self.client
            .get_workflow_handle::<AgentRun>(&self.workflow_id)
            .get_result(WorkflowGetResultOptions::default())
            .await
            .map_err(|error| Error::Workflow(error.to_string()))
    }

    /// Where the run stands.
    ///
    /// # Errors
    /// [`Error::Workflow`] when the query fails.
    pub async fn status(&self) -> Result<RunStatus, Error> {
        self.client
            .get_workflow_handle::<AgentRun>(&self.workflow_id)
            .query(AgentRun::status, (), WorkflowQueryOptions::default())
            .await
            .map_err(|error| Error::Workflow(error.to_string()))
    }

    /// The calls the run waits for.
    ///
    /// # Errors
    /// [`Error::Workflow`] when the query fails.
    pub async fn pending(&self) -> Result<Vec<ToolCall>, Error> {
        self.client
            .get_workflow_handle::<AgentRun>(&self.workflow_id)
            .query(AgentRun::pending, (), WorkflowQueryOptions::default())
            .await
            .map_err(|error| Error::Workflow(error.to_string()))
    }

    /// The trace so far.
    ///
    /// # Errors
    /// [`Error::Workflow`] when the query fails.
    pub async fn trace(&self) -> Result<Vec<TraceEntry>, Error> {
        self.client
            .get_workflow_handle::<AgentRun>(&self.workflow_id)
            .query(AgentRun::trace, (), WorkflowQueryOptions::default())
            .await
            .map_err(|error| Error::Workflow(error.to_string()))
    }

    /// Sends a person's decisions on waiting calls.
    ///
    /// # Errors
    /// [`Error::Workflow`] when the signal is refused.
    pub async fn approve(&self, decisions: Vec<ApprovalDecision>) -> Result<(), Error> {
        self.client
            .get_workflow_handle::<AgentRun>(&self.workflow_id)
            .signal(
                AgentRun::approve,
                decisions,
                WorkflowSignalOptions::default(),
            )
            .await
            .map_err(|error| Error::Workflow(error.to_string()))
    }

    /// Sends remote tools' results.
    ///
    /// # Errors
    /// [`Error::Workflow`] when the signal is refused.
    pub async fn tool_results(&self, results: Vec<ToolResult>) -> Result<(), Error> {
        self.client
            .get_workflow_handle::<AgentRun>(&self.workflow_id)
            .signal(
                AgentRun::tool_results,
                results,
                WorkflowSignalOptions::default(),
            )
            .await
            .map_err(|error| Error::Workflow(error.to_string()))
    }

    /// Asks Temporal to cancel the run: the running activities see it at their next
    /// heartbeat, and a running tool's cancellation token fires.
    ///
    /// # Errors
    /// [`Error::Workflow`] when the request is refused.
    pub async fn cancel(&self) -> Result<(), Error> {
        self.client
            .get_workflow_handle::<AgentRun>(&self.workflow_id)
            .cancel(WorkflowCancelOptions::default())
            .await
            .map_err(|error| Error::Workflow(error.to_string()))
    }
}
