//! Durable agentry runs on [Temporal](https://temporal.io), through Temporal's official Rust
//! SDK (`temporalio-sdk`).
//!
//! - [`AgentRun`] is the workflow `agent_run`: it drives the loop's state machine
//!   (`agent_loop::machine`) for a [`Session`](agent_loop::Session): each model call the
//!   activity `model_call`, each tool call of the worker's registry the activity
//!   `tool_call`, the run's config from the worker's options the activity `run_config`; it waits for approvals (signal `approve`) and for
//!   remote tools' results (signal `tool_results`) with no worker held, answers the queries
//!   `status`, `pending`, `usage` and `trace`, and continues as new past
//!   [`CONTINUE_AS_NEW_AFTER_EVENTS`] history events.
//! - [`AgentActivities`] holds the worker's backend and tools.
//! - [`connect`], [`run_worker`] and [`start_run`] are the client and worker ends.
//!
//! The loop's decisions (budgets, the per-round cap, cycle detection, approvals, remote tools,
//! error modes, the output schema) are the machine's, made in the workflow; `model_call` is one
//! backend call and `tool_call` runs one call through [`agent_loop::run_tool_call`], the loop's
//! own dispatch (validation, handler, timeout, truncation). See docs/durable.md.

// The SDK's `#[activities]` and `#[workflow_methods]` add an undocumented public constant per
// method; everything written here is documented.
#[allow(missing_docs)]
mod activities;
mod client;
mod error;
pub mod events;
mod publish;
mod wire;
#[allow(missing_docs)]
mod workflow;

pub use activities::AgentActivities;
pub use client::{RunHandle, connect, run_worker, start_run, worker};
pub use error::Error;
pub use publish::EventSink;
/// The Temporal client [`connect`] returns.
pub use temporalio_client::Client;
pub use wire::{
    Carried, ModelCallInput, ModelCallOutput, Resume, Retries, RunConfig, RunConfigInput,
    RunOutcome, RunRequest, RunStatus, Screened, ToolCallInput, ToolCallOutput,
};
pub use workflow::{AgentRun, CONTINUE_AS_NEW_AFTER_EVENTS};

/// The workflow type's name, for clients in other languages.
pub const WORKFLOW_NAME: &str = "agent_run";
