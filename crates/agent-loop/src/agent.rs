//! [`Agent`]: a backend, a model, its instructions, tools and [`Options`] as one reusable,
//! cheaply clonable value; and [`Agent::as_tool`], an agent other agents call as a tool.
//!
//! An agent is a thin front over the free functions ([`generate`], [`execute`] and their
//! streaming forms): it holds what they take, shared behind one `Arc`, and every knob of a
//! run stays in [`Options`], reached through [`AgentBuilder::options`]. A feature added to
//! `Options` is an agent feature with no change here.

use std::fmt;
use std::sync::Arc;

use agent_tools::{BudgetLeft, Registry, Tool, ToolContext, ToolError, schema_for};
use agent_types::{
    AgentError, AgentEvent, Backend, ErrorKind, GenerationSettings, ToolCallId, ToolChoice,
    UserMessage,
};
use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::{
    EventStream, GenerateResult, Input, Options, Session, SessionInput, SessionStatus, execute,
    execute_stream, generate, generate_stream,
};

/// A model with its instructions, tools and options, ready to run any number of times.
///
/// Build one with [`Agent::builder`]; clone it freely (one `Arc`): the backend, the tool
/// registry and the compiled output schema are shared, never copied per run. Its options
/// start as [`Options::auto`] (the loop runs the tools), unlike the free functions'
/// `Options::default()`.
///
/// - [`run`](Self::run) / [`run_stream`](Self::run_stream): one self-contained run from a
///   prompt ([`generate`] / [`generate_stream`]).
/// - [`session`](Self::session) / [`resume`](Self::resume) /
///   [`resume_stream`](Self::resume_stream): a conversation that outlives the run, suspends
///   for remote tools and resumes, in this process or another ([`execute`] /
///   [`execute_stream`]).
/// - [`as_tool`](Self::as_tool): the agent as a tool of another agent.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use agent_backends::{ScriptedBackend, ScriptedTurn};
/// use agent_loop::Agent;
/// use agent_tools::{Registry, Tool};
/// use serde_json::json;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct City {
///     city: String,
/// }
///
/// let mut tools = Registry::new();
/// tools.register(Tool::from_fn("get_weather", "Current weather for a city.", |args: City, _ctx| async move {
///     Ok(json!({"city": args.city, "sky": "sunny", "temp_c": 21}))
/// }))?;
/// let backend = ScriptedBackend::new([
///     ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Denver"})),
///     ScriptedTurn::text("Sunny and 21 °C in Denver."),
/// ]);
/// let agent = Agent::builder(backend, "test-model")
///     .system("Answer in one sentence.")
///     .tools(tools)
///     .options(|o| o.with_max_tool_iterations(5))
///     .build();
///
/// let result = agent.run("Weather in Denver?").await?;
/// assert_eq!(result.text(), "Sunny and 21 °C in Denver.");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    backend: Arc<dyn Backend>,
    model: String,
    system: Option<String>,
    settings: GenerationSettings,
    tool_choice: ToolChoice,
    options: Options,
}

/// Builds an [`Agent`]; see [`Agent::builder`].
#[must_use = "a builder does nothing until `build`"]
pub struct AgentBuilder {
    inner: Inner,
}

impl Agent {
    /// Starts an agent calling `model` on `backend`, in `auto` mode with no tools.
    pub fn builder(backend: impl Backend + 'static, model: impl Into<String>) -> AgentBuilder {
        Self::builder_shared(Arc::new(backend), model)
    }

    /// [`builder`](Self::builder) for a backend already shared (one backend serving several
    /// agents, or the tenants of a server).
    pub fn builder_shared(backend: Arc<dyn Backend>, model: impl Into<String>) -> AgentBuilder {
        AgentBuilder {
            inner: Inner {
                backend,
                model: model.into(),
                system: None,
                settings: GenerationSettings::default(),
                tool_choice: ToolChoice::default(),
                options: Options::auto(),
            },
        }
    }

    /// A builder holding this agent's parts, to make a variant of it (other options for one
    /// request, say); the backend and tools stay shared.
    pub fn to_builder(&self) -> AgentBuilder {
        AgentBuilder {
            inner: Inner::clone(&self.inner),
        }
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// The model every call goes to.
    pub fn model(&self) -> &str {
        &self.inner.model
    }

    /// The system prompt.
    pub fn system(&self) -> Option<&str> {
        self.inner.system.as_deref()
    }

    /// The generation settings of every call.
    pub fn settings(&self) -> &GenerationSettings {
        &self.inner.settings
    }

    /// The options every run uses.
    pub fn options(&self) -> &Options {
        &self.inner.options
    }

    /// An [`Input`] with this agent's model, system prompt and settings and no messages, for
    /// a one-off run from a whole history ([`run_input`](Self::run_input)).
    pub fn input(&self) -> Input {
        let inner = &*self.inner;
        let mut input = Input::new(inner.model.clone())
            .settings(inner.settings.clone())
            .tool_choice(inner.tool_choice.clone());
        input.system.clone_from(&inner.system);
        input
    }

    /// A new session for this agent: its model, system prompt, settings and tool choice.
    /// Run it with [`resume`](Self::resume).
    pub fn session(&self) -> Session {
        let inner = &*self.inner;
        let mut session = Session::new(inner.model.clone())
            .with_settings(inner.settings.clone())
            .with_tool_choice(inner.tool_choice.clone());
        session.system.clone_from(&inner.system);
        session
    }

    /// Runs the agent on `prompt`, one self-contained run ([`generate`]).
    ///
    /// # Errors
    ///
    /// As [`generate`]: configuration, budgets, backend failures, cancellation…, with the
    /// partial trace and messages.
    pub async fn run(&self, prompt: impl Into<UserMessage>) -> Result<GenerateResult, AgentError> {
        self.run_input(self.input().message(prompt.into())).await
    }

    /// Runs the agent on a whole `input` (start from [`input`](Self::input)).
    ///
    /// # Errors
    ///
    /// As [`generate`].
    pub async fn run_input(&self, input: Input) -> Result<GenerateResult, AgentError> {
        generate(&*self.inner.backend, input, &self.inner.options).await
    }

    /// [`run`](Self::run), streaming its events ([`generate_stream`]); the stream owns what
    /// it needs, so it can outlive the agent.
    pub fn run_stream(&self, prompt: impl Into<UserMessage>) -> EventStream<'static> {
        let input = self.input().message(prompt.into());
        generate_stream(Arc::clone(&self.inner.backend), input, &self.inner.options)
    }

    /// Runs `session` from `input` (a user message, or the results of its pending calls)
    /// with this agent's backend and options ([`execute`]).
    ///
    /// # Errors
    ///
    /// As [`execute`]; input that does not fit the session changes nothing (400).
    pub async fn resume(
        &self,
        session: &mut Session,
        input: impl Into<SessionInput>,
    ) -> Result<GenerateResult, AgentError> {
        execute(session, input, &*self.inner.backend, &self.inner.options).await
    }

    /// [`resume`](Self::resume), streaming ([`execute_stream`]).
    pub fn resume_stream<'s>(
        &self,
        session: &'s mut Session,
        input: impl Into<SessionInput>,
    ) -> EventStream<'s> {
        execute_stream(
            session,
            input,
            Arc::clone(&self.inner.backend),
            &self.inner.options,
        )
    }

    /// This agent as a tool named `name`: the model calling it sends `{"input": "..."}`, and
    /// a call is a run of this agent on that text, whose answer is the call's result (its
    /// structured output when it has an output schema, else its text).
    ///
    /// The run is nested in the calling run:
    /// - its events reach the caller's stream as [`AgentEvent::SubAgent`], with the path of
    ///   agents (tool names) and the caller's call id;
    /// - its usage and cost count in the caller's result and budgets, and its own token and
    ///   cost budgets are capped by what the caller had left when the call started, so it can
    ///   never spend more than that (a budget it trips is an error result for the caller's
    ///   model, or ends the caller's run under [`ToolErrorMode::Abort`](crate::ToolErrorMode));
    /// - the caller's cancellation cancels it;
    /// - it runs as the caller's [`Caller`](agent_tools::Caller), so it never has permissions
    ///   the caller lacks;
    /// - its trace is the caller's trace entry's [`sub_trace`](agent_types::TraceEntry::sub_trace).
    ///
    /// A sub-agent must end with an answer: one that suspends (a remote tool, an approval,
    /// `return` mode) fails the caller's run with a fatal tool error.
    pub fn as_tool(&self, name: impl Into<String>, description: impl Into<String>) -> Tool {
        let parameters = json!({
            "type": "object",
            "properties": {
                "input": {"type": "string", "description": "The task or question for the agent."}
            },
            "required": ["input"],
            "additionalProperties": false
        });
        self.tool(name.into(), description.into(), parameters, Prompt::Text)
    }

    /// [`as_tool`](Self::as_tool) with arguments of type `I` (its derived schema): the
    /// sub-agent's prompt is the arguments as JSON.
    pub fn as_tool_with_input<I: JsonSchema + DeserializeOwned>(
        &self,
        name: impl Into<String>,
        description: impl Into<String>,
    ) -> Tool {
        self.tool(
            name.into(),
            description.into(),
            schema_for::<I>(),
            Prompt::Json,
        )
    }

    fn tool(&self, name: String, description: String, parameters: Value, prompt: Prompt) -> Tool {
        let agent = self.clone();
        let path: Arc<str> = Arc::from(name.as_str());
        Tool::from_json_fn(name, description, parameters, move |arguments, context| {
            let agent = agent.clone();
            let path = Arc::clone(&path);
            async move {
                let prompt = match prompt {
                    Prompt::Text => match arguments.get("input").and_then(Value::as_str) {
                        Some(text) => text.to_owned(),
                        None => {
                            return Err(ToolError::respond_to_model(
                                "the arguments need an `input` string",
                            ));
                        }
                    },
                    Prompt::Json => arguments.to_string(),
                };
                agent.serve(&path, prompt, context).await
            }
        })
    }

    /// One call of the agent as a tool: the sub-run under the caller's budgets, cancellation
    /// and caller, its events nested, its spend and trace reported back.
    async fn serve(
        &self,
        name: &str,
        prompt: String,
        context: ToolContext,
    ) -> Result<Value, ToolError> {
        let left: BudgetLeft = context.budget_left();
        if left.is_exhausted() {
            return Err(ToolError::respond_to_model(format!(
                "`{name}` was not run: the budget is used up"
            )));
        }
        let inner = &*self.inner;
        let mut options = inner.options.clone();
        options.cancellation = context.cancellation().clone();
        options.token_budget = left.cap_tokens(options.token_budget);
        options.max_cost_usd = left.cap_cost_usd(options.max_cost_usd);
        options.caller = Arc::new(context.caller().clone());
        // Kept for the caller's trace entry whether or not the caller shows its own.
        options.include_tool_trace = true;
        let input = self.input().message(UserMessage::text(prompt));
        let outcome = match context.events() {
            None => generate(&*inner.backend, input, &options).await,
            Some(sink) => {
                let mut stream = generate_stream(&*inner.backend, input, &options);
                while let Some(event) = stream.next().await {
                    sink.send(nest(context.call_id(), name, event));
                    // The caller's consumer takes the event before the sub-run goes on.
                    crate::events::yield_once().await;
                }
                stream.result().await
            }
        };
        let accounting = context.accounting();
        match outcome {
            Ok(result) => {
                accounting.add_usage(&result.usage);
                accounting.add_cost_usd(result.cost_usd.unwrap_or(0.0));
                context.attach_trace(result.trace);
                // Any suspension (remote tools, `return` mode, calls waiting for a person's
                // approval) leaves no answer, and a tool call cannot be resumed later.
                if result.status != SessionStatus::Completed {
                    return Err(ToolError::fatal(format!(
                        "the agent `{name}` stopped for tool calls it cannot run as a tool \
                         (remote tools, approvals or `return` mode); give it local tools in \
                         `auto` mode"
                    )));
                }
                Ok(match result.output {
                    Some(output) => output,
                    None => Value::String(result.message.text_content()),
                })
            }
            Err(error) => {
                accounting.add_usage(&error.spent.usage);
                accounting.add_cost_usd(error.spent.cost_usd.unwrap_or(0.0));
                context.attach_trace(error.partial_trace.clone());
                Err(match &error.kind {
                    ErrorKind::Aborted => ToolError::cancelled(),
                    // A mistake in the program, not something the model can fix.
                    ErrorKind::Config | ErrorKind::NotImplemented => ToolError::fatal(format!(
                        "the agent `{name}` cannot run: {}",
                        error.message
                    )),
                    // Its kind only: a provider's message can carry an upstream URL or an
                    // account detail, and this text reaches the model and the caller's stream.
                    ErrorKind::Backend { error: backend } => ToolError::respond_to_model(format!(
                        "the agent `{name}` failed: its model call failed ({})",
                        crate::approval::wire_name(&backend.kind)
                    )),
                    _ => ToolError::respond_to_model(format!(
                        "the agent `{name}` failed: {}",
                        error.message
                    )),
                })
            }
        }
    }
}

/// How a call's arguments become the sub-agent's prompt.
#[derive(Clone, Copy)]
enum Prompt {
    /// The `input` string.
    Text,
    /// The arguments as JSON.
    Json,
}

/// `event` of the sub-agent `name` as the caller's event: one level of nesting, whatever
/// the depth (a grandchild's event gets `name` in front of its path).
fn nest(call_id: &ToolCallId, name: &str, event: AgentEvent) -> AgentEvent {
    match event {
        AgentEvent::SubAgent {
            mut path, event, ..
        } => {
            path.insert(0, name.to_owned());
            AgentEvent::SubAgent {
                call_id: call_id.clone(),
                path,
                event,
            }
        }
        event => AgentEvent::SubAgent {
            call_id: call_id.clone(),
            path: vec![name.to_owned()],
            event: Box::new(event),
        },
    }
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("model", &self.inner.model)
            .field("provider", &self.inner.backend.provider_name())
            .field("system", &self.inner.system.is_some())
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl AgentBuilder {
    /// Names the agent (the run's span: `invoke_agent {name}`).
    pub fn name(mut self, name: &str) -> Self {
        self.inner.options = self.inner.options.with_agent_name(name);
        self
    }

    /// Sets the system prompt.
    pub fn system(mut self, system: impl Into<String>) -> Self {
        self.inner.system = Some(system.into());
        self
    }

    /// Sets the generation settings (temperature, output limit…).
    pub fn settings(mut self, settings: GenerationSettings) -> Self {
        self.inner.settings = settings;
        self
    }

    /// Sets whether and which tool the model must call.
    pub fn tool_choice(mut self, tool_choice: ToolChoice) -> Self {
        self.inner.tool_choice = tool_choice;
        self
    }

    /// Sets the tools.
    pub fn tools(mut self, tools: Registry) -> Self {
        self.inner.options.tools = Arc::new(tools);
        self
    }

    /// Shares an already shared registry.
    pub fn shared_tools(mut self, tools: Arc<Registry>) -> Self {
        self.inner.options.tools = tools;
        self
    }

    /// Asks for a final answer of type `T` ([`Options::with_output`]), read with
    /// [`GenerateResult::output`].
    pub fn output<T: JsonSchema + DeserializeOwned>(mut self) -> Self {
        self.inner.options = self.inner.options.with_output::<T>();
        self
    }

    /// Changes the options: `.options(|o| o.with_token_budget(50_000))`. Every [`Options`]
    /// setter is reachable here.
    pub fn options(mut self, change: impl FnOnce(Options) -> Options) -> Self {
        self.inner.options = change(self.inner.options);
        self
    }

    /// Replaces the options (they start as [`Options::auto`]).
    pub fn with_options(mut self, options: Options) -> Self {
        self.inner.options = options;
        self
    }

    /// The agent.
    pub fn build(self) -> Agent {
        Agent {
            inner: Arc::new(self.inner),
        }
    }
}

impl fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("model", &self.inner.model)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_keeps_one_level_whatever_the_depth() {
        let call: ToolCallId = "call_p".into();
        let child = nest(&call, "a", AgentEvent::TextStart);
        let grandchild = nest(
            &"call_q".into(),
            "b",
            nest(&"call_r".into(), "c", AgentEvent::TextStart),
        );
        let through = nest(&call, "a", grandchild);
        assert_eq!(
            serde_json::to_value(&child).unwrap(),
            json!({"type": "sub_agent", "call_id": "call_p", "path": ["a"], "event": {"type": "text_start"}})
        );
        assert_eq!(
            serde_json::to_value(&through).unwrap(),
            json!({"type": "sub_agent", "call_id": "call_p", "path": ["a", "b", "c"], "event": {"type": "text_start"}})
        );
    }
}
