//! The crate's one error type.

/// What can go wrong talking to Temporal or running a worker.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The address is not a usable URL.
    #[error("invalid Temporal address `{address}`: {reason}")]
    Address {
        /// The address given.
        address: String,
        /// Why it is not usable.
        reason: String,
    },
    /// Connecting to the Temporal frontend failed.
    #[error("cannot connect to Temporal at {address}: {reason}")]
    Connect {
        /// The address.
        address: String,
        /// The client's error.
        reason: String,
    },
    /// The worker could not be set up or stopped with an error.
    #[error("Temporal worker: {0}")]
    Worker(String),
    /// Starting, signalling, querying or waiting for a workflow failed.
    #[error("Temporal workflow: {0}")]
    Workflow(String),
    /// The live event log (crate::events) cannot be read or written.
    #[error("event log: {0}")]
    Events(String),
    /// The agent configuration is unusable.
    #[error(transparent)]
    Agent(#[from] agent_types::AgentError),
}
