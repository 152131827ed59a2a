//! The loop's decisions as a deterministic, I/O-free state machine.
//!
//! [`State`] is what a run has decided so far (its budgets, its spend, the structured-output
//! retries, where it stands); [`State::step`] takes the run's [`Config`] and one [`Input`]
//! (the model answered, the tools of a round ended, a person decided, the run was cancelled)
//! and returns the one [`Action`] to perform next (prepare and make a model call, screen or
//! run a round of tool calls, append messages, emit an event, suspend, finish, fail). The
//! driver performs the action and feeds what came of it back as the next input, until the
//! machine says [`Action::Finish`], [`Action::Suspend`] or [`Action::Fail`].
//!
//! Budgets (tool rounds, tokens, dollars, repeated identical calls), the per-round call cap,
//! remote calls and approvals, tool-failure stops, cancellation and the structured-output
//! judgement and retries are decided here, once. Everything with I/O or a clock stays with
//! the driver: the model call (streamed, bounded by the cancellation token and the timeout),
//! the handlers, the events, the appender, checkpoints, telemetry, accounting rows, the
//! history policy and the per-round preparation (both shape the request, not the decisions).
//!
//! Determinism rules, so a durable driver (a Temporal workflow) replays a run to the same
//! state: the state, the config, every input and every action are plain serde data (no
//! closures, trait objects or `Instant`); `step` reads no clock, no randomness and no
//! environment; what a driver learns from the world (a response, a result, the time) comes in
//! only as an input. The in-process driver is `run.rs`; docs/durable.md has the rules.
//!
//! Extension points for checks (guardrails, `crate::guardrail`): a check on the run's input
//! runs in the driver before [`Input::Start`] (or beside the first model call; a trip is fed
//! as [`Input::Failed`]); a check before a tool call answers [`Action::ScreenCalls`] with
//! [`Screen::Refuse`] (the model sees the reason) or [`Screen::AwaitApproval`], may rewrite the
//! calls' arguments, and hands its decisions back in [`Input::Screened`] (they come out in
//! [`Action::RunTools`], across an approval suspension too); with [`Config::check_answer`] the
//! machine asks for a check of the final answer ([`Action::CheckAnswer`]) before it finishes
//! or emits the structured answer, and [`Input::AnswerChecked`] passes it or sends it back
//! with a reason for another try (a tool round in every budget); a trip is [`Input::Failed`].
//!
//! A driver in a few lines, for a model that answers at once (a real driver performs each
//! action before it answers it):
//!
//! ```
//! use agent_loop::Options;
//! use agent_loop::machine::{Action, Config, Input, State};
//!
//! let config = Config::new(&Options::auto(), "some-model", None, false);
//! let mut state = State::new();
//! let mut action = state.step(&config, Input::Start { approvals: None });
//! let output = loop {
//!     let input = match action {
//!         Action::PrepareCall { .. } => Input::Prepared {
//!             estimated_input_tokens: 0,
//!             own_max_output_tokens: None,
//!         },
//!         Action::CallModel { .. } => Input::ModelResponded {
//!             usage: None,
//!             cost_usd: None,
//!         },
//!         Action::AppendResponse => Input::ResponseAppended {
//!             calls: Vec::new(),
//!             text: None,
//!         },
//!         Action::Finish { output } => break output,
//!         other => panic!("not in this run: {other:?}"),
//!     };
//!     action = state.step(&config, input);
//! };
//! assert_eq!(output, None);
//! ```

mod answer;
mod budget;
mod resume;
mod round;
mod setup;
mod tools;

pub use resume::{close_dangling, order_results};
pub use setup::{Setup, gate, setup};
pub use tools::{CallFailure, ToolStop, stop_error, tool_stop};

use agent_types::{
    AgentError, AgentEvent, ErrorKind, GuardrailDecision, Message, ToolCall, ToolResult, Usage,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::approval::ApprovalDecision;
use crate::options::{Options, ToolMode};
use crate::output::{OutputSpec, OutputStrategy};
use crate::session::{BudgetsUsed, SessionStatus};

/// The settings of one run the machine decides by: plain data taken from
/// [`Options`] (and the backend's capabilities) when the run starts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    /// Who runs the calls: `Return` suspends on the first tool call, `Auto` runs them.
    pub mode: ToolMode,
    /// Tool rounds allowed (`Options::max_tool_iterations`).
    pub max_tool_iterations: u32,
    /// Tokens allowed over the run (`Options::token_budget`).
    pub token_budget: Option<u64>,
    /// Dollars allowed over the run (`Options::max_cost_usd`).
    pub max_cost_usd: Option<f64>,
    /// The requested model's input and output price, for the dollar check before each call.
    pub price: Option<CallPrice>,
    /// Identical calls in a row that end the run (`Options::max_repeated_calls`, at least 2).
    pub max_repeated_calls: Option<u32>,
    /// Calls run per round; the rest are refused (`Options::max_tool_calls_per_round`).
    pub max_tool_calls_per_round: usize,
    /// Whether calls are screened ([`Action::ScreenCalls`]) before a round runs: the run has
    /// remote tools or approvals. Without it every call within the cap runs.
    pub screen_calls: bool,
    /// The structured output asked for, with the strategy resolved for the backend.
    pub output: Option<OutputConfig>,
    /// Invalid structured answers sent back for another try (`Options::max_output_retries`).
    pub max_output_retries: u32,
    /// Whether the final answer is checked ([`Action::CheckAnswer`]) before the run ends: the
    /// run has output guardrails.
    #[serde(default)]
    pub check_answer: bool,
}

/// The prices the check before a call reads (uncached input: a cache hit only makes the
/// call cheaper), in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CallPrice {
    /// Uncached input tokens.
    pub input_per_mtok: f64,
    /// Output tokens.
    pub output_per_mtok: f64,
}

/// The structured output of a run: the schema and how the model is asked for it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OutputConfig {
    /// The schema (serialized as its name, description and JSON Schema).
    pub spec: OutputSpec,
    /// The strategy resolved for the backend (never `Auto`).
    pub strategy: OutputStrategy,
}

impl Config {
    /// The config of a run of `model` under `options`, with the output strategy resolved
    /// for the backend (`None` without an output schema) and whether calls need screening.
    pub fn new(
        options: &Options,
        model: &str,
        strategy: Option<OutputStrategy>,
        screen_calls: bool,
    ) -> Self {
        Self {
            mode: options.mode,
            max_tool_iterations: options.max_tool_iterations,
            token_budget: options.token_budget,
            max_cost_usd: options.max_cost_usd,
            price: options
                .max_cost_usd
                .and_then(|_| options.rate_card.price(model))
                .map(|price| CallPrice {
                    input_per_mtok: price.input_per_mtok,
                    output_per_mtok: price.output_per_mtok,
                }),
            max_repeated_calls: options.max_repeated_calls,
            max_tool_calls_per_round: options.max_tool_calls_per_round,
            screen_calls,
            output: match (&options.output, strategy) {
                (Some(spec), Some(strategy)) => Some(OutputConfig {
                    spec: spec.clone(),
                    strategy,
                }),
                _ => None,
            },
            max_output_retries: options.max_output_retries,
            check_answer: options.guardrails.has_output_guardrails(),
        }
    }
}

/// Where a run stands between two steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum Phase {
    /// Not started: waits for [`Input::Start`].
    #[default]
    Ready,
    /// The next model call is being prepared: waits for [`Input::Prepared`].
    Preparing,
    /// The model call is in flight: waits for [`Input::ModelResponded`] or
    /// [`Input::ModelFailed`].
    Calling,
    /// The response is being appended: waits for [`Input::ResponseAppended`].
    Appending,
    /// The round's calls are being screened: waits for [`Input::Screened`].
    Screening,
    /// A round of tool calls runs: waits for [`Input::ToolsDone`]. `remote`: the round's
    /// calls the caller runs, which the run suspends for once the local ones ran.
    RunningTools {
        /// The remote calls of the round.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        remote: Vec<ToolCall>,
    },
    /// Messages are being appended or an event emitted: waits for [`Input::Done`].
    Pushing {
        /// What comes after.
        then: After,
    },
    /// The final answer is being checked: waits for [`Input::AnswerChecked`].
    CheckingAnswer,
    /// Ended (finished, suspended or failed): no input is expected.
    Ended,
}

/// What follows a push.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum After {
    /// Another model call.
    CallAgain,
    /// The validated structured answer goes out as an event.
    EmitOutput,
    /// The run ends with its answer.
    Finish,
}

/// A run's decisions so far: the budgets used, the run's spend, the structured-output
/// retries and where it stands. Serializable, so a durable driver keeps it in its history.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    budgets: BudgetsUsed,
    /// Tokens of this run's model calls (and of sub-agents' calls reported by handlers).
    usage: Usage,
    /// Dollars of this run; `None` until something is priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cost_usd: Option<f64>,
    /// Invalid structured answers sent back so far.
    #[serde(default)]
    output_retries: u32,
    /// The validated structured answer, between its push and the end of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    answer: Option<Value>,
    /// Answers the answer check sent back so far ([`Input::AnswerChecked`]).
    #[serde(default)]
    answer_retries: u32,
    phase: Phase,
}

/// A structured-output run's response, as the judgement needs it: a refusal block's text and
/// the text content. Set only when the run has an output schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseText {
    /// The refusal, when the model refused.
    pub refusal: Option<String>,
    /// The response's text.
    pub text: String,
}

/// One call of a round as the driver screened it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "screen", rename_all = "snake_case")]
pub enum Screen {
    /// Run it (a local call, or a call the dispatch refuses: unknown tool, invalid arguments).
    Run,
    /// A remote tool's call with valid arguments (as validated): it waits for the caller.
    Remote {
        /// The validated arguments.
        arguments: Value,
    },
    /// A person must approve it first.
    AwaitApproval,
    /// Not run: the model sees this reason as the call's error result.
    Refuse {
        /// The error result's text.
        reason: String,
    },
}

/// A call of a round that is not run: the error result the model sees instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refusal {
    /// The call's position in the round's calls.
    pub index: usize,
    /// The error result's text.
    pub reason: String,
}

/// What a round of tool calls came to, once its results are in the history.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoundOutcome {
    /// The usage handlers reported (a sub-agent's model calls).
    pub reported_usage: Usage,
    /// The tokens handlers reported against the token budget.
    pub reported_tokens: u64,
    /// The dollars handlers reported.
    pub reported_cost_usd: f64,
    /// The run's cancellation fired while the round ran.
    pub cancelled: bool,
    /// A driver failure after the round (an accounting queue set to fail the run).
    pub failure: Option<Box<AgentError>>,
    /// The first call whose failure ends the run (`abort` mode, a fatal handler error).
    pub stop: Option<Box<AgentError>>,
}

/// One thing that happened, fed to [`State::step`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "input", rename_all = "snake_case")]
pub enum Input {
    /// The run starts: with the decisions for a round that waited for approval, or to call
    /// the model.
    Start {
        /// The decisions, when the run resumes a round that waited for approval.
        approvals: Option<Vec<ApprovalDecision>>,
    },
    /// The next call's request is ready: its estimated input and its own output limit.
    Prepared {
        /// Estimated input tokens of the request (0 when nothing reads it).
        estimated_input_tokens: u64,
        /// The output limit the request carries before the budgets clamp it.
        own_max_output_tokens: Option<u32>,
    },
    /// A call outside the loop's rounds (a history summary) spent this.
    Spent {
        /// Its usage, when reported.
        usage: Option<Usage>,
        /// Its price, when priced.
        cost_usd: Option<f64>,
    },
    /// The model answered; its spend.
    ModelResponded {
        /// The response's usage, when reported.
        usage: Option<Usage>,
        /// Its price, when priced.
        cost_usd: Option<f64>,
    },
    /// The model call failed (or was cancelled or timed out).
    ModelFailed {
        /// The error that ends the run.
        error: Box<AgentError>,
    },
    /// The response is in the history: its tool calls (and, for structured output, its text).
    ResponseAppended {
        /// The tool calls of the response, in order.
        calls: Vec<ToolCall>,
        /// The response's refusal and text, in a run with an output schema.
        text: Option<Box<ResponseText>>,
    },
    /// The calls of [`Action::ScreenCalls`], back with one screen each, in order.
    Screened {
        /// The calls (with the arguments a check rewrote).
        calls: Vec<ToolCall>,
        /// One screen per call.
        screens: Vec<Screen>,
        /// What tool guardrails decided while screening (each names its call), for the calls'
        /// trace entries: they come back in [`Action::RunTools`].
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        guardrails: Vec<GuardrailDecision>,
    },
    /// The round of [`Action::RunTools`] ran; its results are in the history.
    ToolsDone {
        /// What the round came to.
        outcome: RoundOutcome,
    },
    /// The pushes or the event of the last action are done.
    Done,
    /// The answer of [`Action::CheckAnswer`] was checked: it stands (`retry: None`), or it
    /// goes back to the model with this text for another try. (A check that ends the run
    /// feeds [`Input::Failed`].)
    AnswerChecked {
        /// The text sent back to the model, when the answer is refused for another try.
        retry: Option<String>,
    },
    /// The run was cancelled.
    Cancelled,
    /// A timer the driver set fired (a deadline for the run, a wait that lasted too long):
    /// the run ends as aborted, with this reason. Time reaches the machine only this way.
    TimerFired {
        /// What the timer was for, for the error's message.
        reason: String,
    },
    /// The driver failed (the appender, a gate, accounting): the run ends with this error.
    Failed {
        /// The error.
        error: Box<AgentError>,
    },
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Prepare the request for the next model call (round preparation, history policy) and
    /// estimate its input; answer [`Input::Prepared`] (or [`Input::Cancelled`]).
    PrepareCall {
        /// Tool rounds run so far.
        iteration: u32,
    },
    /// Call the model with this output limit; answer [`Input::ModelResponded`] (or
    /// [`Input::ModelFailed`]), then, once the response is in the history,
    /// [`Input::ResponseAppended`].
    CallModel {
        /// Tool rounds run so far.
        iteration: u32,
        /// The output limit to send (`None`: none).
        max_output_tokens: Option<u32>,
    },
    /// Append the model's response to the history; answer [`Input::ResponseAppended`].
    AppendResponse,
    /// Screen the round's calls (remote tool? approval?); answer [`Input::Screened`].
    ScreenCalls {
        /// The calls, within the round's cap.
        calls: Vec<ToolCall>,
    },
    /// Run a round of tool calls (in parallel per the options), append their results in call
    /// order; answer [`Input::ToolsDone`].
    RunTools {
        /// The round's number (tool rounds run, this one included).
        iteration: u32,
        /// The calls, in order.
        calls: Vec<ToolCall>,
        /// The calls not run (by position, ascending), with the result the model sees.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        refused: Vec<Refusal>,
        /// What tool guardrails decided about the calls when they were screened.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        guardrails: Vec<GuardrailDecision>,
    },
    /// Append these messages to the history; answer [`Input::Done`].
    Push {
        /// The messages, in order.
        messages: Vec<Message>,
    },
    /// Emit this event; answer [`Input::Done`].
    Emit {
        /// The event.
        event: Box<AgentEvent>,
    },
    /// The run suspends: remote calls wait for the caller, or calls wait for approval (the
    /// round is kept in the state's budgets).
    Suspend {
        /// `awaiting_tool_execution` or `awaiting_approval`.
        status: SessionStatus,
        /// The calls waited for.
        calls: Vec<ToolCall>,
    },
    /// Check the final answer (the last response, and the structured answer) before the
    /// run ends with it; answer [`Input::AnswerChecked`] (or [`Input::Failed`]). Only with
    /// [`Config::check_answer`].
    CheckAnswer {
        /// The validated structured answer, in a run with an output schema.
        output: Option<Value>,
        /// Answers the check sent back so far in this run.
        retries: u32,
    },
    /// The run ends with the model's answer (and the validated structured answer).
    Finish {
        /// The structured answer, in a run with an output schema.
        output: Option<Value>,
    },
    /// The run ends with this error.
    Fail {
        /// The error (boxed: an action is small on the run's way, the error is rare).
        error: Box<AgentError>,
    },
}

/// [`State::step`] as a function.
pub fn step(state: &mut State, config: &Config, input: Input) -> Action {
    state.step(config, input)
}

impl State {
    /// A fresh run's state.
    pub fn new() -> Self {
        Self::default()
    }

    /// The state of a run continuing `budgets` (a resumed suspension, or a run a crash cut
    /// off after a checkpoint).
    pub fn resume(budgets: BudgetsUsed) -> Self {
        Self {
            budgets,
            ..Self::default()
        }
    }

    /// The budgets used so far (what a suspended session keeps).
    pub fn budgets(&self) -> &BudgetsUsed {
        &self.budgets
    }

    /// The budgets, taken out (the state keeps fresh ones).
    pub fn take_budgets(&mut self) -> BudgetsUsed {
        std::mem::take(&mut self.budgets)
    }

    /// This run's usage.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// This run's dollars; `None` until something is priced.
    pub fn cost_usd(&self) -> Option<f64> {
        self.cost_usd
    }

    /// Where the run stands.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The calls waiting for approval, when the run is suspended for approval.
    pub fn pending_approvals(&self) -> Vec<ToolCall> {
        self.budgets
            .approval_round
            .as_ref()
            .map(crate::approval::Round::waiting)
            .unwrap_or_default()
    }

    /// What is left of the token and dollar budgets, for the handlers of a round (a
    /// sub-agent's budgets are capped by it).
    pub fn budget_left(&self, config: &Config) -> agent_tools::BudgetLeft {
        budget::left(&self.budgets, config)
    }

    /// The output limit of a call whose estimated input is `estimate` and whose own limit
    /// is `own`, clamped to what the budgets leave; an error when its input alone does not
    /// fit. Pure: the same check [`Action::CallModel`] comes from, for a call the driver
    /// makes itself (a history summary).
    ///
    /// # Errors
    ///
    /// A `request_tokens` or `request_cost_usd` budget error.
    pub fn admit(
        &self,
        config: &Config,
        estimate: u64,
        own: Option<u32>,
    ) -> Result<Option<u32>, AgentError> {
        budget::admit(&self.budgets, config, estimate, own)
    }

    /// Takes one input and returns what to do next. Deterministic: the same state, config and
    /// input give the same action and the same next state.
    pub fn step(&mut self, config: &Config, input: Input) -> Action {
        let action = self.decide(config, input);
        if matches!(
            action,
            Action::Finish { .. } | Action::Fail { .. } | Action::Suspend { .. }
        ) {
            self.phase = Phase::Ended;
        }
        action
    }

    fn decide(&mut self, config: &Config, input: Input) -> Action {
        let phase = std::mem::replace(&mut self.phase, Phase::Ended);
        match (phase, input) {
            (_, Input::Failed { error }) | (_, Input::ModelFailed { error }) => {
                Action::Fail { error }
            }
            (Phase::Preparing, Input::Cancelled) => {
                fail(aborted("the run was cancelled before the model call"))
            }
            (_, Input::Cancelled) => fail(aborted("the run was cancelled")),
            (_, Input::TimerFired { reason }) => fail(AgentError::new(
                ErrorKind::Aborted,
                format!("the run was stopped by a timer: {reason}"),
            )),
            (Phase::Ready, Input::Start { approvals }) => match approvals {
                Some(decisions) => self.resume_round(&decisions),
                None => self.prepare(),
            },
            (phase @ Phase::Preparing, Input::Spent { usage, cost_usd }) => {
                self.charge(usage, cost_usd);
                match budget::check_spend(&self.budgets, config) {
                    Err(error) => fail(error),
                    Ok(()) => {
                        self.phase = phase;
                        Action::PrepareCall {
                            iteration: self.budgets.iterations,
                        }
                    }
                }
            }
            (
                Phase::Preparing,
                Input::Prepared {
                    estimated_input_tokens,
                    own_max_output_tokens,
                },
            ) => match budget::admit(
                &self.budgets,
                config,
                estimated_input_tokens,
                own_max_output_tokens,
            ) {
                Ok(max_output_tokens) => {
                    self.phase = Phase::Calling;
                    Action::CallModel {
                        iteration: self.budgets.iterations,
                        max_output_tokens,
                    }
                }
                Err(error) => fail(error),
            },
            (Phase::Calling, Input::ModelResponded { usage, cost_usd }) => {
                self.charge(usage, cost_usd);
                self.phase = Phase::Appending;
                Action::AppendResponse
            }
            (Phase::Appending, Input::ResponseAppended { calls, text }) => {
                self.responded(config, calls, text)
            }
            (
                Phase::Screening,
                Input::Screened {
                    calls,
                    screens,
                    guardrails,
                },
            ) => self.plan_round(config, calls, Some(screens), guardrails),
            (Phase::RunningTools { remote }, Input::ToolsDone { outcome }) => {
                self.tools_done(config, outcome, remote)
            }
            (Phase::CheckingAnswer, Input::AnswerChecked { retry }) => match retry {
                None => self.emit_or_finish(),
                Some(feedback) => {
                    // Counted as a tool round, like an invalid structured answer's retry.
                    if let Err(error) = budget::next_round(&mut self.budgets, config) {
                        return fail(error);
                    }
                    self.answer_retries += 1;
                    self.answer = None;
                    self.push(vec![Message::user(feedback)], After::CallAgain)
                }
            },
            (Phase::Pushing { then }, Input::Done) => match then {
                After::CallAgain => self.prepare(),
                After::EmitOutput if config.check_answer => self.check_answer(),
                After::EmitOutput => self.emit_or_finish(),
                After::Finish => Action::Finish {
                    output: self.answer.take(),
                },
            },
            (phase, input) => fail(AgentError::new(
                ErrorKind::Config,
                format!(
                    "the loop's state machine got `{}` while {}; a driver must answer each \
                     action with the input it names",
                    input_name(&input),
                    phase_name(&phase)
                ),
            )),
        }
    }

    /// The next model call.
    fn prepare(&mut self) -> Action {
        self.phase = Phase::Preparing;
        Action::PrepareCall {
            iteration: self.budgets.iterations,
        }
    }

    /// Adds a model call's spend to the run and its budgets.
    fn charge(&mut self, usage: Option<Usage>, cost_usd: Option<f64>) {
        let Some(usage) = usage else {
            return;
        };
        self.usage += usage;
        self.budgets.tokens = self
            .budgets
            .tokens
            .saturating_add(usage.total_tokens().unwrap_or(0));
        if let Some(cost) = cost_usd {
            self.budgets.cost_usd += cost;
            *self.cost_usd.get_or_insert(0.0) += cost;
        }
    }

    /// Decides what a response in the history comes to.
    fn responded(
        &mut self,
        config: &Config,
        calls: Vec<ToolCall>,
        text: Option<Box<ResponseText>>,
    ) -> Action {
        if let Err(error) = budget::check_spend(&self.budgets, config) {
            return fail(error);
        }
        if let (Some(output), Some(text)) = (&config.output, text) {
            match answer::judge(output, &calls, &text) {
                answer::Verdict::Tools => {}
                answer::Verdict::Refused(refusal) => return fail(answer::refused(refusal)),
                answer::Verdict::Answer { value, call } => {
                    self.answer = Some(value);
                    let messages = answer::close_round(&calls, call.as_ref(), None);
                    return self.push(messages, After::EmitOutput);
                }
                answer::Verdict::Invalid { raw, errors, call } => {
                    return match answer::retry(
                        &mut self.budgets,
                        &mut self.output_retries,
                        config,
                        output,
                        &calls,
                        call,
                        raw,
                        errors,
                    ) {
                        Ok(messages) => self.push(messages, After::CallAgain),
                        Err(error) => fail(error),
                    };
                }
            }
        }
        if calls.is_empty() {
            if config.check_answer {
                return self.check_answer();
            }
            return Action::Finish {
                output: self.answer.take(),
            };
        }
        if config.mode == ToolMode::Return {
            return Action::Suspend {
                status: SessionStatus::AwaitingToolExecution,
                calls,
            };
        }
        if let Err(error) = budget::next_round(&mut self.budgets, config) {
            return fail(error);
        }
        if let Err(error) = budget::check_cycle(&mut self.budgets, config, &calls) {
            return fail(error);
        }
        if config.screen_calls {
            // Calls past the cap are refused unscreened.
            self.phase = Phase::Screening;
            return Action::ScreenCalls { calls };
        }
        self.plan_round(config, calls, None, Vec::new())
    }

    /// The round's plan: run it, or suspend it for approval.
    fn plan_round(
        &mut self,
        config: &Config,
        calls: Vec<ToolCall>,
        screens: Option<Vec<Screen>>,
        guardrails: Vec<GuardrailDecision>,
    ) -> Action {
        let iteration = self.budgets.iterations;
        match round::plan(config, iteration, calls, screens, guardrails) {
            round::Plan::Run {
                calls,
                refused,
                remote,
                guardrails,
            } => {
                self.phase = Phase::RunningTools { remote };
                Action::RunTools {
                    iteration,
                    calls,
                    refused,
                    guardrails,
                }
            }
            round::Plan::AwaitApproval(round) => {
                let calls = round.waiting();
                self.budgets.approval_round = Some(round);
                Action::Suspend {
                    status: SessionStatus::AwaitingApproval,
                    calls,
                }
            }
        }
    }

    /// A round that waited for approval runs, under the decisions.
    fn resume_round(&mut self, decisions: &[ApprovalDecision]) -> Action {
        let (iteration, calls, refused, remote, guardrails) =
            match self.budgets.approval_round.take() {
                Some(round) => round::resumed(round, decisions),
                None => (
                    self.budgets.iterations,
                    Vec::new(),
                    Vec::new(),
                    Vec::new(),
                    Vec::new(),
                ),
            };
        self.phase = Phase::RunningTools { remote };
        Action::RunTools {
            iteration,
            calls,
            refused,
            guardrails,
        }
    }

    fn tools_done(
        &mut self,
        config: &Config,
        outcome: RoundOutcome,
        remote: Vec<ToolCall>,
    ) -> Action {
        let RoundOutcome {
            reported_usage,
            reported_tokens,
            reported_cost_usd,
            cancelled,
            failure,
            stop,
        } = outcome;
        // Tool output is not counted here: it is input of the next call, whose estimate must
        // fit the budgets before it is sent. What handlers spent themselves is.
        self.usage += reported_usage;
        self.budgets.tokens = self.budgets.tokens.saturating_add(reported_tokens);
        self.budgets.tool_tokens = self.budgets.tool_tokens.saturating_add(reported_tokens);
        if reported_cost_usd > 0.0 {
            self.budgets.cost_usd += reported_cost_usd;
            *self.cost_usd.get_or_insert(0.0) += reported_cost_usd;
        }
        if cancelled {
            return fail(aborted("the run was cancelled while tools were running"));
        }
        if let Some(error) = failure.or(stop) {
            return fail(*error);
        }
        if let Err(error) = budget::check_spend(&self.budgets, config) {
            return fail(error);
        }
        if !remote.is_empty() {
            return Action::Suspend {
                status: SessionStatus::AwaitingToolExecution,
                calls: remote,
            };
        }
        self.prepare()
    }

    /// Asks for the final answer's check.
    fn check_answer(&mut self) -> Action {
        self.phase = Phase::CheckingAnswer;
        Action::CheckAnswer {
            output: self.answer.clone(),
            retries: self.answer_retries,
        }
    }

    /// The structured answer goes out as an event before the run finishes; without one the
    /// run finishes.
    fn emit_or_finish(&mut self) -> Action {
        match &self.answer {
            Some(value) => {
                self.phase = Phase::Pushing {
                    then: After::Finish,
                };
                Action::Emit {
                    event: Box::new(AgentEvent::Output {
                        value: value.clone(),
                    }),
                }
            }
            None => Action::Finish { output: None },
        }
    }

    fn push(&mut self, messages: Vec<Message>, then: After) -> Action {
        self.phase = Phase::Pushing { then };
        Action::Push { messages }
    }
}

fn fail(error: AgentError) -> Action {
    Action::Fail {
        error: Box::new(error),
    }
}

fn aborted(message: &str) -> AgentError {
    AgentError::new(ErrorKind::Aborted, message)
}

/// An error result for `call` with `text`.
fn error_result(call: &ToolCall, text: impl Into<String>) -> Message {
    Message::Tool(ToolResult::error(call.id.clone(), call.name.clone(), text))
}

fn input_name(input: &Input) -> &'static str {
    match input {
        Input::Start { .. } => "start",
        Input::Prepared { .. } => "prepared",
        Input::Spent { .. } => "spent",
        Input::ModelResponded { .. } => "model_responded",
        Input::ModelFailed { .. } => "model_failed",
        Input::ResponseAppended { .. } => "response_appended",
        Input::Screened { .. } => "screened",
        Input::ToolsDone { .. } => "tools_done",
        Input::Done => "done",
        Input::AnswerChecked { .. } => "answer_checked",
        Input::Cancelled => "cancelled",
        Input::TimerFired { .. } => "timer_fired",
        Input::Failed { .. } => "failed",
    }
}

fn phase_name(phase: &Phase) -> &'static str {
    match phase {
        Phase::Ready => "ready to start",
        Phase::Preparing => "preparing a model call",
        Phase::Calling => "calling the model",
        Phase::Appending => "appending the response",
        Phase::Screening => "screening calls",
        Phase::RunningTools { .. } => "running tools",
        Phase::Pushing { .. } => "pushing messages",
        Phase::CheckingAnswer => "checking the answer",
        Phase::Ended => "ended",
    }
}

#[cfg(test)]
mod tests;
