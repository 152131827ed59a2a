//! [`Options`]: how a run behaves (mode, tools, budgets, timeouts, hooks).

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use agent_conversation::ConversationAppender;
use agent_tools::{Caller, Registry, ValidationMode};
use agent_types::RateCard;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::audit::AccountingQueue;
use crate::estimate::{ByteEstimate, TokenCounter};
use crate::hooks::Hooks;
use crate::output::{OutputSpec, OutputStrategy};
use crate::result::ModelCallRecord;

/// Who resolves the tool calls the model asks for.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ToolMode {
    /// One model call. Requested tool calls come back to the caller (finish reason
    /// `tool_calls`), who runs them and calls again. The default.
    #[default]
    Return,
    /// The loop validates and runs the calls, feeds the results back and calls the model
    /// again, until a final answer, a remote tool, or a budget.
    Auto,
}

/// How the calls of one round run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolParallelism {
    /// Concurrently on the loop's task, at most `max_concurrent` at once. Results still join
    /// the history in call order. Handlers overlap while they wait (I/O, timers); they do not
    /// run on several cores at once, so a CPU-heavy handler should move its work to
    /// `tokio::task::spawn_blocking`.
    Parallel {
        /// The most calls running at the same time (at least 1).
        max_concurrent: usize,
    },
    /// One after another, in call order.
    Serial,
}

impl ToolParallelism {
    /// The default bound on concurrent calls.
    pub const DEFAULT_MAX_CONCURRENT: usize = 16;

    pub(crate) fn limit(self) -> usize {
        match self {
            Self::Parallel { max_concurrent } => max_concurrent.max(1),
            Self::Serial => 1,
        }
    }
}

impl Default for ToolParallelism {
    fn default() -> Self {
        Self::Parallel {
            max_concurrent: Self::DEFAULT_MAX_CONCURRENT,
        }
    }
}

/// What a failed tool call does to the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ToolErrorMode {
    /// The error becomes the call's result (marked as an error) and the model reacts to it.
    /// The default. A handler's [fatal](agent_tools::ToolError::fatal) error still ends the run.
    #[default]
    Recover,
    /// The first failure ends the run with the trace attached. Calls already running finish;
    /// calls not yet started are not run.
    Abort,
}

/// A sink for per-model-call accounting records.
pub type ModelCallSink = Arc<dyn Fn(&ModelCallRecord) + Send + Sync>;

/// How a run behaves. Cheap to clone (shared parts are behind `Arc`s).
///
/// Every budget is independent and off unless stated: the defaults are `return` mode, 10 tool
/// iterations, no token or cost budget, parallel tools (16 at once), at most 32 calls a round,
/// 65,536-byte results and 262,144 bytes of results a round, `recover`, `strict` validation,
/// no trace, three identical calls in a row count as a cycle, no timeouts, a one-second
/// cancellation grace period, the [`ByteEstimate`] token counter.
///
/// # Budgets are checked before the money is spent
///
/// Before every model call the loop estimates the request's input tokens (the backend's own
/// count when it has one, else [`token_counter`](Self::token_counter)) and
/// - refuses the call, sending nothing, when the estimate leaves no room for output within
///   what is left of `token_budget`, or when the estimate priced at the model's input rate
///   leaves nothing of `max_cost_usd` (a `budget_exceeded` error with the `request_tokens` or
///   `request_cost_usd` budget, naming the estimate and what was left);
/// - otherwise clamps the call's `max_output_tokens` to what is left: tokens left minus the
///   estimate, and dollars left after the input, at the model's output price. The session's
///   own `max_output_tokens` stays the upper bound. Without one, a clamp is sent only below
///   4,096 tokens (an output limit every current model accepts): a larger limit than the
///   model's maximum would be a 400 from the provider. Set the session's
///   `max_output_tokens` to bound every call's output.
///
/// After every call, the usage the provider reported is added and the budgets are checked
/// again (an estimate can be low), so `token_budget` is also a hard cap on what was reported.
///
/// A budget of zero, a negative or non-finite `max_cost_usd`, and a zero per-round cap are
/// configuration errors (400), never "one free call".
///
/// ```
/// use std::time::Duration;
/// use agent_loop::{Options, ToolErrorMode, ToolMode};
///
/// let options = Options::auto()
///     .with_max_tool_iterations(5)
///     .with_token_budget(50_000)
///     .with_max_cost_usd(0.25)
///     .with_tool_timeout(Duration::from_secs(10))
///     .with_tool_error_mode(ToolErrorMode::Abort);
/// assert_eq!(options.mode, ToolMode::Auto);
/// assert_eq!(options.tool_result_max_bytes, 65_536);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct Options {
    /// Who resolves tool calls.
    pub mode: ToolMode,
    /// The tools the model may call: local ones with handlers and remote ones (spec only).
    pub tools: Arc<Registry>,
    /// Only these tools (by name) for this run; a name that is not registered is a
    /// configuration error. `None` offers every tool the caller may use.
    pub allowed_tools: Option<Vec<String>>,
    /// Who is calling: tools requiring permissions the caller lacks are not offered, and
    /// handlers see the caller in their context.
    pub caller: Arc<Caller>,
    /// A tighter permission set for this run than the caller's (reference 000's per-call
    /// scoping): the run uses only the caller's permissions that are also in the scope, both
    /// for which tools are offered and for the caller handlers and gates see. It never grants
    /// a permission the caller lacks. `None` (the default) runs with the caller's own.
    pub permission_scope: Option<Arc<BTreeSet<String>>>,
    /// The most model → tools → model rounds.
    pub max_tool_iterations: u32,
    /// The most tokens for the whole run: every model call's input and output tokens as the
    /// provider reported them (the run's `usage`, input + output), plus tokens handlers
    /// report. Tool output is not counted on its own: it is input of the next call, whose
    /// estimate must fit what is left before it is sent. Not a model call's
    /// `max_output_tokens`, which it clamps. Checked before and after every model call and
    /// after every tool round; a budget is a hard cap, so even a complete answer that
    /// crosses it ends the run with a budget error (the answer is in the error's partial
    /// messages). At least 1.
    pub token_budget: Option<u64>,
    /// The most US dollars for the whole run, priced by `rate_card` (cache reads and writes
    /// at their own prices) plus dollars handlers report. The rate card must price the
    /// session's model, or the run is refused as a configuration error. Positive and finite.
    pub max_cost_usd: Option<f64>,
    /// Prices per model.
    pub rate_card: Arc<RateCard>,
    /// How the calls of one round run.
    pub tool_parallelism: ToolParallelism,
    /// The cap on each serialized tool result the model sees; longer results are cut with a
    /// marker stating the full size.
    pub tool_result_max_bytes: usize,
    /// The cap on the images and files (decoded bytes, together) of each tool result that
    /// returned content blocks (default 5,000,000 = 5 MB). Blocks past it, in order, are
    /// replaced by a text block saying what was dropped, and the result counts as truncated.
    /// Text and JSON blocks fall under `tool_result_max_bytes` instead.
    pub tool_result_max_binary_bytes: usize,
    /// The most tool calls one round runs (default 32, at least 1). Calls beyond it, in call
    /// order, are not run: each gets an error result the model sees, saying so.
    pub max_tool_calls_per_round: usize,
    /// The most bytes of tool results one round sends back, together (default 262,144 =
    /// 256 KiB, at least 1). Results are counted as they finish (in call order when calls
    /// run serially); once the round's results would pass the cap, each later result is
    /// replaced by a short error result saying so (those stand-ins are not counted). Each
    /// result is first capped by `tool_result_max_bytes`.
    pub max_round_result_bytes: usize,
    /// Estimates each request's input tokens for the budget check before each model call,
    /// when the backend has no count of its own. [`ByteEstimate`] by default.
    pub token_counter: Arc<dyn TokenCounter>,
    /// What a failed tool call does.
    pub tool_error_mode: ToolErrorMode,
    /// How tool arguments are checked against the tool's schema.
    pub tool_arg_validation: ValidationMode,
    /// Put the trace in the result (it is always attached to errors).
    pub include_tool_trace: bool,
    /// The agent's name on the run's span (`invoke_agent {name}`, `gen_ai.agent.name`); see
    /// docs/observability.md.
    pub agent_name: Option<Arc<str>>,
    /// Puts the messages sent and received on each model call's span
    /// (`gen_ai.input.messages`, `gen_ai.output.messages`). Off by default: prompts and answers
    /// often hold personal data, and serializing them costs every call.
    pub trace_content: bool,
    /// Receives each message the run produces, in order, awaited before the run goes on.
    pub conversation: Option<Arc<dyn ConversationAppender>>,
    /// Also append the caller's input (the user message or remote tool results) and count it
    /// among the run's new messages.
    pub echo_input: bool,
    /// Lent the run's whole history after each message joins it, awaited
    /// ([`TurnCheckpoint`](crate::TurnCheckpoint)).
    pub checkpoint: Option<Arc<dyn crate::TurnCheckpoint>>,
    /// Cancels the run: the model call in flight and every running handler.
    pub cancellation: CancellationToken,
    /// How long a cancelled handler may take to wind down before it is dropped.
    pub cancel_grace: Duration,
    /// The longest one model call may take, first byte to last.
    pub model_call_timeout: Option<Duration>,
    /// The longest one tool call may take.
    pub tool_timeout: Option<Duration>,
    /// End the run when the same tool is called with the same arguments this many times in a
    /// row across rounds (identical calls within one round count once; values below 2 mean
    /// 2). `None` turns cycle detection off.
    pub max_repeated_calls: Option<u32>,
    /// Gates and transforms.
    pub hooks: Hooks,
    /// Receives one record per model call as it completes.
    pub on_model_call: Option<ModelCallSink>,
    /// Receives an accounting row per model call and per tool call, through a bounded queue
    /// (see [`crate::audit`]); `None` (the default) builds no row.
    pub accounting: Option<AccountingQueue>,
    /// The schema the final answer must match (see [`crate::output`]); `None` (the default)
    /// leaves the answer free text and costs the run nothing.
    pub output: Option<OutputSpec>,
    /// How the model is asked for the structured answer.
    pub output_strategy: OutputStrategy,
    /// How many times an answer that fails the output schema goes back to the model with
    /// the problems (default 1); each try is a model call counted against every budget.
    pub max_output_retries: u32,
    /// Called before each model call to set that call's tools, tool choice and settings
    /// (see [`crate::prepare`]); `None` (the default) sends every call alike.
    pub prepare_round: Option<crate::prepare::PrepareRound>,
    /// What of the history each model call is sent (see [`crate::history`]); `None` (the
    /// default) sends all of it, copying nothing.
    pub history: Option<crate::history::HistoryPolicy>,
    /// Decides per call whether a person must approve it (docs/approval.md); `None` asks only
    /// for tools marked [`with_approval`](agent_tools::Tool::with_approval).
    pub approval_policy: Option<crate::approval::ApprovalPolicy>,
    /// The tools [`require_approval_for`](Self::require_approval_for) named, checked against
    /// the run's tools when it starts.
    pub approval_tools: Option<Arc<BTreeSet<String>>>,
    /// Input, tool and output guardrails (see [`crate::guardrail`]); none by default.
    pub guardrails: crate::guardrail::Guardrails,
    /// The catalog's tool search, set by [`with_tool_search`](Self::with_tool_search).
    pub(crate) tool_search: Option<Arc<crate::tool_search::Catalog>>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            mode: ToolMode::Return,
            tools: Arc::new(Registry::new()),
            allowed_tools: None,
            caller: Arc::new(Caller::default()),
            permission_scope: None,
            max_tool_iterations: 10,
            token_budget: None,
            max_cost_usd: None,
            rate_card: Arc::new(RateCard::new()),
            tool_parallelism: ToolParallelism::default(),
            tool_result_max_bytes: 65_536,
            tool_result_max_binary_bytes: agent_tools::DEFAULT_MAX_BINARY_BYTES,
            max_tool_calls_per_round: Self::DEFAULT_MAX_TOOL_CALLS_PER_ROUND,
            max_round_result_bytes: Self::DEFAULT_MAX_ROUND_RESULT_BYTES,
            token_counter: Arc::new(ByteEstimate),
            tool_error_mode: ToolErrorMode::Recover,
            tool_arg_validation: ValidationMode::Strict,
            include_tool_trace: false,
            agent_name: None,
            trace_content: false,
            conversation: None,
            echo_input: false,
            checkpoint: None,
            cancellation: CancellationToken::new(),
            cancel_grace: Duration::from_secs(1),
            model_call_timeout: None,
            tool_timeout: None,
            max_repeated_calls: Some(3),
            hooks: Hooks::default(),
            on_model_call: None,
            accounting: None,
            output: None,
            output_strategy: OutputStrategy::Auto,
            max_output_retries: 1,
            prepare_round: None,
            history: None,
            approval_policy: None,
            approval_tools: None,
            guardrails: crate::guardrail::Guardrails::new(),
            tool_search: None,
        }
    }
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident($field:ident: $ty:ty) $(=> $wrap:expr)?;)*) => {
        $(
            $(#[$doc])*
            #[must_use]
            pub fn $name(mut self, $field: $ty) -> Self {
                self.$field = setters!(@wrap $field $(, $wrap)?);
                self
            }
        )*
    };
    (@wrap $field:ident) => { $field };
    (@wrap $field:ident, $wrap:expr) => { $wrap($field) };
}

impl Options {
    /// The default [`max_tool_calls_per_round`](Self::max_tool_calls_per_round).
    pub const DEFAULT_MAX_TOOL_CALLS_PER_ROUND: usize = 32;
    /// The default [`max_round_result_bytes`](Self::max_round_result_bytes): 256 KiB.
    pub const DEFAULT_MAX_ROUND_RESULT_BYTES: usize = 262_144;

    /// The defaults in `auto` mode.
    pub fn auto() -> Self {
        Self {
            mode: ToolMode::Auto,
            ..Self::default()
        }
    }

    setters! {
        /// Sets the tool mode.
        with_mode(mode: ToolMode);
        /// Sets the tool registry.
        with_tools(tools: Registry) => Arc::new;
        /// Sets the caller.
        with_caller(caller: Caller) => Arc::new;
        /// Sets the most tool rounds.
        with_max_tool_iterations(max_tool_iterations: u32);
        /// Sets the token budget for the whole run.
        with_token_budget(token_budget: u64) => Some;
        /// Sets the cost budget for the whole run, in US dollars.
        with_max_cost_usd(max_cost_usd: f64) => Some;
        /// Sets the rate card.
        with_rate_card(rate_card: RateCard) => Arc::new;
        /// Sets how a round's calls run.
        with_tool_parallelism(tool_parallelism: ToolParallelism);
        /// Sets the cap on each tool result.
        with_tool_result_max_bytes(tool_result_max_bytes: usize);
        /// Sets the cap on each tool result's images and files.
        with_tool_result_max_binary_bytes(tool_result_max_binary_bytes: usize);
        /// Sets the most tool calls one round runs.
        with_max_tool_calls_per_round(max_tool_calls_per_round: usize);
        /// Sets the most bytes of results one round sends back.
        with_max_round_result_bytes(max_round_result_bytes: usize);
        /// Sets what a failed tool call does.
        with_tool_error_mode(tool_error_mode: ToolErrorMode);
        /// Sets how arguments are validated.
        with_tool_arg_validation(tool_arg_validation: ValidationMode);
        /// Puts the trace in the result.
        with_tool_trace(include_tool_trace: bool);
        /// Records message content on the model-call spans (off by default).
        with_trace_content(trace_content: bool);
        /// Also appends the caller's input.
        with_echo_input(echo_input: bool);
        /// Sets the cancellation token.
        with_cancellation(cancellation: CancellationToken);
        /// Sets the grace period for cancelled handlers.
        with_cancel_grace(cancel_grace: Duration);
        /// Sets the timeout of each model call.
        with_model_call_timeout(model_call_timeout: Duration) => Some;
        /// Sets the timeout of each tool call.
        with_tool_timeout(tool_timeout: Duration) => Some;
        /// Sets how many identical calls in a row end the run (`None`: never).
        with_max_repeated_calls(max_repeated_calls: Option<u32>);
        /// Sets the hooks.
        with_hooks(hooks: Hooks);
        /// Sets the output schema from a spec built (and compiled) once.
        with_output_spec(output: OutputSpec) => Some;
        /// Sets how the structured answer is asked for.
        with_output_strategy(output_strategy: OutputStrategy);
        /// Sets how many times an invalid answer is sent back for another try.
        with_max_output_retries(max_output_retries: u32);
    }

    /// Names the agent on the run's span (`invoke_agent {name}`).
    #[must_use]
    pub fn with_agent_name(mut self, name: &str) -> Self {
        self.agent_name = Some(Arc::from(name));
        self
    }

    /// Asks for a final answer matching `T`'s schema, derived and compiled here (once per
    /// `Options`: build them once and clone, or share an [`OutputSpec`]). Read the answer
    /// with [`GenerateResult::output`](crate::GenerateResult::output).
    #[must_use]
    pub fn with_output<T: JsonSchema + DeserializeOwned>(mut self) -> Self {
        self.output = Some(OutputSpec::of::<T>());
        self
    }

    /// Asks for a final answer matching a raw JSON Schema (an object schema), compiled here.
    #[must_use]
    pub fn with_output_schema(mut self, schema: serde_json::Value) -> Self {
        self.output = Some(OutputSpec::from_schema(schema));
        self
    }

    /// Shares an already shared registry.
    #[must_use]
    pub fn with_shared_tools(mut self, tools: Arc<Registry>) -> Self {
        self.tools = tools;
        self
    }

    /// Offers only the named tools for this run.
    #[must_use]
    pub fn with_allowed_tools<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allowed_tools = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Runs with at most `permissions` of the caller's: a run for an untrusted prompt, say,
    /// limited to reading (`["orders:read"]`) while its caller may also write. See
    /// [`permission_scope`](Self::permission_scope).
    #[must_use]
    pub fn with_permission_scope<I, S>(mut self, permissions: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.permission_scope = Some(Arc::new(permissions.into_iter().map(Into::into).collect()));
        self
    }

    /// The caller this run acts as: [`caller`](Self::caller) narrowed to the
    /// [`permission_scope`](Self::permission_scope), when one is set.
    pub fn effective_caller(&self) -> Arc<Caller> {
        match &self.permission_scope {
            Some(scope) => Arc::new(self.caller.scoped_to(scope)),
            None => Arc::clone(&self.caller),
        }
    }

    /// Appends every produced message to `appender`.
    #[must_use]
    pub fn with_conversation(mut self, appender: Arc<dyn ConversationAppender>) -> Self {
        self.conversation = Some(appender);
        self
    }

    /// Counts each request's input tokens with `counter` for the budget check before each
    /// model call (a backend's own count still comes first).
    #[must_use]
    pub fn with_token_counter(mut self, counter: impl TokenCounter + 'static) -> Self {
        self.token_counter = Arc::new(counter);
        self
    }

    /// Checks the budgets and caps: a zero token budget, a cost budget that is not a positive
    /// finite number, and a zero per-round cap are refused, so no setting means "one free
    /// call". The loop calls it before every run; a server can call it to answer 400 early.
    ///
    /// # Errors
    ///
    /// A configuration error (400) naming the option and the value.
    pub fn validate(&self) -> Result<(), agent_types::AgentError> {
        if let Some(problem) = budget_problem(
            self.token_budget,
            self.max_cost_usd,
            &[
                ("max_tool_calls_per_round", self.max_tool_calls_per_round),
                ("max_round_result_bytes", self.max_round_result_bytes),
            ],
        ) {
            return Err(agent_types::AgentError::config(problem));
        }
        if let Some(output) = &self.output {
            output.check()?;
        }
        if let Some(history) = &self.history {
            history.check()?;
        }
        Ok(())
    }

    /// Sends one record per model call to `sink`.
    #[must_use]
    pub fn on_model_call(
        mut self,
        sink: impl Fn(&ModelCallRecord) + Send + Sync + 'static,
    ) -> Self {
        self.on_model_call = Some(Arc::new(sink));
        self
    }

    /// Sends an accounting row per model call and per tool call to `queue`.
    #[must_use]
    pub fn with_accounting(mut self, queue: AccountingQueue) -> Self {
        self.accounting = Some(queue);
        self
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("mode", &self.mode)
            .field("tools", &self.tools.names().collect::<Vec<_>>())
            .field("allowed_tools", &self.allowed_tools)
            .field("caller", &self.caller)
            .field("permission_scope", &self.permission_scope)
            .field("max_tool_iterations", &self.max_tool_iterations)
            .field("token_budget", &self.token_budget)
            .field("max_cost_usd", &self.max_cost_usd)
            .field("tool_parallelism", &self.tool_parallelism)
            .field("tool_result_max_bytes", &self.tool_result_max_bytes)
            .field(
                "tool_result_max_binary_bytes",
                &self.tool_result_max_binary_bytes,
            )
            .field("max_tool_calls_per_round", &self.max_tool_calls_per_round)
            .field("max_round_result_bytes", &self.max_round_result_bytes)
            .field("token_counter", &self.token_counter)
            .field("tool_error_mode", &self.tool_error_mode)
            .field("tool_arg_validation", &self.tool_arg_validation)
            .field("include_tool_trace", &self.include_tool_trace)
            .field("conversation", &self.conversation.is_some())
            .field("echo_input", &self.echo_input)
            .field("checkpoint", &self.checkpoint.is_some())
            .field("cancelled", &self.cancellation.is_cancelled())
            .field("cancel_grace", &self.cancel_grace)
            .field("model_call_timeout", &self.model_call_timeout)
            .field("tool_timeout", &self.tool_timeout)
            .field("max_repeated_calls", &self.max_repeated_calls)
            .field("hooks", &self.hooks)
            .field("on_model_call", &self.on_model_call.is_some())
            .field("accounting", &self.accounting)
            .field("output", &self.output)
            .field("output_strategy", &self.output_strategy)
            .field("max_output_retries", &self.max_output_retries)
            .field("prepare_round", &self.prepare_round.is_some())
            .field("history", &self.history)
            .field("approval_policy", &self.approval_policy.is_some())
            .field("approval_tools", &self.approval_tools)
            .field("guardrails", &self.guardrails)
            .field("tool_search", &self.tool_search)
            .finish()
    }
}

/// What is wrong with a set of budgets, if anything: a token budget of 0, a cost budget that
/// is not a positive finite number of dollars, or a cap (`(name, value)`) of 0. Budgets like
/// these are mistakes, never "one free call"; [`Options::validate`] and the server's
/// configuration and session checks share this one rule.
pub fn budget_problem(
    token_budget: Option<u64>,
    max_cost_usd: Option<f64>,
    caps: &[(&str, usize)],
) -> Option<String> {
    if token_budget == Some(0) {
        return Some(
            "token_budget = 0 is invalid: it must be at least 1 (leave it unset for no token \
             budget)"
                .into(),
        );
    }
    if let Some(max) = max_cost_usd
        && !(max.is_finite() && max > 0.0)
    {
        return Some(format!(
            "max_cost_usd = {max} is invalid: it must be a positive number of dollars (leave it \
             unset for no cost budget)"
        ));
    }
    caps.iter()
        .find(|(_, value)| *value == 0)
        .map(|(name, _)| format!("{name} = 0 is invalid: it must be at least 1"))
}
