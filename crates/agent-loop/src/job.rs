//! [`Job`]: one tool call the round will run (or refuse), the unit dispatch, approval and
//! accounting pass between them. Plain data, so the modules that build and read jobs need not
//! name `dispatch`.

use std::sync::Arc;

use agent_types::ToolCall;

/// One call to run.
pub(crate) struct Job {
    /// The tool's name, made once: the handler's context and the accounting row share it.
    pub(crate) name: Arc<str>,
    pub(crate) call: ToolCall,
    pub(crate) iteration: u32,
    /// Set when the call is not to be run: the error result the model sees instead.
    pub(crate) refused: Option<String>,
    /// What tool guardrails decided before the call (crate::guardrail), for its trace entry.
    /// Boxed: a call without decisions (the usual one) carries one pointer for them.
    #[allow(clippy::box_collection)]
    pub(crate) guardrails: Option<Box<Vec<agent_types::GuardrailDecision>>>,
}
