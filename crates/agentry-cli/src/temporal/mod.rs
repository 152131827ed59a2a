//! Durable runs on Temporal (docs/durable.md): `agentry worker` serves the `agent_run`
//! workflow and its activities with the model and tools of agentry.toml; `agentry run
//! --temporal` starts a run as a workflow and follows it; `agentry resume --temporal` signals
//! a waiting one.
//!
//! The Temporal SDK needs `protoc` to build, so it is behind the `temporal` feature: without
//! it the flags still parse and say how to get a binary that has it.

use clap::Args;

#[cfg(feature = "temporal")]
mod engine;
#[cfg(feature = "temporal")]
mod live;
#[cfg(feature = "temporal")]
pub(crate) use engine::{resume, run, worker};

/// Where the Temporal service is.
#[derive(Debug, Args)]
pub(crate) struct TemporalArgs {
    /// Run on Temporal: the frontend's address (host:port, or https://… for Temporal Cloud)
    #[arg(long = "temporal", value_name = "ADDR")]
    pub(crate) address: Option<String>,
    /// The Temporal namespace
    #[arg(long, value_name = "NAME", default_value = "default")]
    pub(crate) namespace: String,
    /// The task queue the workers poll
    #[arg(long, value_name = "QUEUE", default_value = "agentry")]
    pub(crate) task_queue: String,
    /// The workflow id (a run's handle for `agentry resume --temporal`) [default: the
    /// session's id]
    #[arg(long, value_name = "ID")]
    pub(crate) workflow: Option<String>,
    /// Live events through PostgreSQL (postgres://…): a worker publishes its runs' events
    /// there, `run`/`resume --temporal` shows them as the in-process run does; without it
    /// they follow the run by polling its queries
    #[arg(long, value_name = "URL")]
    pub(crate) events: Option<String>,
}

#[cfg(not(feature = "temporal"))]
mod missing {
    use super::TemporalArgs;
    use crate::approval::ApprovalArgs;
    use crate::args::{LoopArgs, ModelArgs};
    use crate::error::Error;
    use crate::exit::Exit;

    fn not_built() -> Error {
        Error::Usage(
            "this agentry was built without Temporal support: install it with \
             `cargo install agentry-cli --features temporal` (needs protoc; docs/durable.md)"
                .to_string(),
        )
    }

    /// `agentry worker` without the `temporal` feature.
    pub(crate) async fn worker(
        _: &TemporalArgs,
        _: &ModelArgs,
        _: &LoopArgs,
    ) -> Result<Exit, Error> {
        Err(not_built())
    }

    /// `agentry run --temporal` without the `temporal` feature.
    pub(crate) async fn run(
        _: &TemporalArgs,
        _: Vec<String>,
        _: &ModelArgs,
        _: &LoopArgs,
        _: bool,
    ) -> Result<Exit, Error> {
        Err(not_built())
    }

    /// `agentry resume --temporal` without the `temporal` feature.
    pub(crate) async fn resume(
        _: &TemporalArgs,
        _: Option<&std::path::Path>,
        _: &ApprovalArgs,
        _: bool,
    ) -> Result<Exit, Error> {
        Err(not_built())
    }
}
#[cfg(not(feature = "temporal"))]
pub(crate) use missing::{resume, run, worker};
