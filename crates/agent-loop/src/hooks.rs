//! [`Hooks`]: deterministic gates and transforms the loop calls at fixed points.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use agent_tools::Caller;
use agent_types::ToolResult;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type GateFn = dyn Fn(ModelCallGate) -> BoxFuture<Result<(), String>> + Send + Sync;
type TransformFn = dyn Fn(ToolResult) -> BoxFuture<ToolResult> + Send + Sync;

/// What a gate learns about the model call it may refuse.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ModelCallGate {
    /// The model the call goes to.
    pub model: String,
    /// The tool round the call starts (0 for the first call of a run).
    pub iteration: u32,
    /// How many messages the request carries.
    pub messages: usize,
    /// The tools offered, by name.
    pub tools: Vec<String>,
    /// Who is calling.
    pub caller: Arc<Caller>,
    /// The request's input tokens: the backend's own count, else the run's
    /// [`TokenCounter`](crate::TokenCounter) estimate (the same number the run's budgets were
    /// checked with).
    pub estimated_input_tokens: u64,
    /// The call's output-token limit as it will be sent: the session's `max_output_tokens`
    /// clamped to what the run's budgets leave (without a session limit, only a clamp below
    /// 4,096 tokens is sent). `None` when neither sets one.
    pub max_output_tokens: Option<u32>,
}

/// Plain async closures the loop calls at fixed points; not a middleware framework.
///
/// - [`before_model_call`](Self::before_model_call) runs before every model call and may
///   refuse it (a tenancy gate, a kill switch, a policy check). A refusal ends the run with a
///   `refused` error (HTTP 403) before anything is sent.
/// - [`transform_tool_result`](Self::transform_tool_result) sees every local tool result
///   (errors included) after truncation and before the model does (annotate freshness,
///   redact). What it returns is sent as is: the trace's `sent_bytes` is its length, and it is
///   not truncated again.
///
/// ```
/// use agent_loop::Hooks;
///
/// let hooks = Hooks::new()
///     .before_model_call(|gate| async move {
///         match gate.caller.tenant() {
///             Some("suspended-tenant") => Err("this tenant is suspended".to_owned()),
///             _ => Ok(()),
///         }
///     })
///     .transform_tool_result(|mut result| async move {
///         result.content.push_str("\n(as of 2026-11-22)");
///         result
///     });
/// # let _ = hooks;
/// ```
#[derive(Clone, Default)]
pub struct Hooks {
    gate: Option<Arc<GateFn>>,
    transform: Option<Arc<TransformFn>>,
}

impl Hooks {
    /// No hooks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `gate` before every model call; an `Err` refuses the call with that reason.
    #[must_use]
    pub fn before_model_call<F, Fut>(mut self, gate: F) -> Self
    where
        F: Fn(ModelCallGate) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.gate = Some(Arc::new(move |input| Box::pin(gate(input))));
        self
    }

    /// Runs `transform` on every tool result before the model sees it.
    #[must_use]
    pub fn transform_tool_result<F, Fut>(mut self, transform: F) -> Self
    where
        F: Fn(ToolResult) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ToolResult> + Send + 'static,
    {
        self.transform = Some(Arc::new(move |result| Box::pin(transform(result))));
        self
    }

    pub(crate) fn has_gate(&self) -> bool {
        self.gate.is_some()
    }

    pub(crate) async fn gate(&self, input: ModelCallGate) -> Result<(), String> {
        match &self.gate {
            Some(gate) => gate(input).await,
            None => Ok(()),
        }
    }

    /// The result hook, when one is set. The loop awaits it only then, so a run without one
    /// keeps no hook future (and no second copy of the result) in each call's future.
    pub(crate) fn transformer(&self) -> Option<&TransformFn> {
        self.transform.as_deref()
    }
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("before_model_call", &self.gate.is_some())
            .field("transform_tool_result", &self.transform.is_some())
            .finish()
    }
}
