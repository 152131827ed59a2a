//! Per-round preparation: a hook before each model call that may narrow the tools offered,
//! set the tool choice and replace the generation settings for that call alone.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_backends::{ScriptedBackend, ScriptedTurn};
//! use agent_loop::{Input, Options, RoundPlan, generate};
//! use agent_tools::{Registry, Tool};
//! use agent_types::ToolChoice;
//! use serde_json::json;
//!
//! let mut tools = Registry::new();
//! tools.register(Tool::from_json_fn("search", "Search the docs.", json!({"type": "object"}), |_, _| async { Ok(json!("found")) }))?;
//! tools.register(Tool::from_json_fn("fetch", "Fetch a page.", json!({"type": "object"}), |_, _| async { Ok(json!("page")) }))?;
//! let backend = ScriptedBackend::new([
//!     ScriptedTurn::tool_call("c1", "search", json!({})),
//!     ScriptedTurn::text("done"),
//! ])
//! .recording();
//! let options = Options::auto().with_tools(tools).with_prepare_round(|round| match round.round {
//!     // Round 1 must search; later rounds get no tools at all.
//!     1 => RoundPlan::new().with_tools(["search"]).with_tool_choice(ToolChoice::Tool { name: "search".into() }),
//!     _ => RoundPlan::new().with_tools(Vec::<String>::new()),
//! });
//! generate(&backend, Input::new("m").user("Find it"), &options).await?;
//! let requests = backend.requests();
//! assert_eq!(requests[0].tools.len(), 1);
//! assert!(requests[1].tools.is_empty());
//! # Ok(())
//! # }
//! ```

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use agent_tools::Registry;
use agent_types::{AgentError, GenerationSettings, Message, ModelRequest, ToolChoice, ToolSpec};

use crate::options::Options;

/// What the hook sees before a model call.
#[derive(Debug)]
#[non_exhaustive]
pub struct RoundContext<'a> {
    /// The round this call opens, from 1: the tool rounds finished so far plus one (a
    /// structured-output retry repeats its round's number; a resumed session keeps counting).
    pub round: u32,
    /// The model calls this run made before this one.
    pub model_calls: usize,
    /// The history the call is about to be sent with.
    pub history: &'a [Message],
    /// Every tool the run offers (what a round without a plan gets), by spec.
    pub tools: &'a [ToolSpec],
    /// The session's model.
    pub model: &'a str,
    /// The run's tool-search results by query, so each query runs once per run.
    pub(crate) search_cache: &'a crate::tool_search::SearchCache,
}

/// What one round changes; every part left `None` keeps the run's own (the session's tool
/// choice and settings, every tool the run offers). Nothing carries over to the next round.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct RoundPlan {
    /// Only these tools (by name) this round; a name the run does not offer is a configuration
    /// error. Calls to other tools get the unknown-tool error result, as for any unknown tool.
    pub tools: Option<Vec<String>>,
    /// The tool choice for this round.
    pub tool_choice: Option<ToolChoice>,
    /// The generation settings for this round (the budgets still clamp `max_output_tokens`).
    pub settings: Option<GenerationSettings>,
}

impl RoundPlan {
    /// A plan that changes nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Offers only these tools this round.
    #[must_use]
    pub fn with_tools<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tools = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Sets this round's tool choice.
    #[must_use]
    pub fn with_tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
        self
    }

    /// Sets this round's generation settings.
    #[must_use]
    pub fn with_settings(mut self, settings: GenerationSettings) -> Self {
        self.settings = Some(settings);
        self
    }
}

/// The hook: called before each model call with the round's context.
pub type PrepareRound = Arc<dyn Fn(&RoundContext<'_>) -> RoundPlan + Send + Sync>;

impl Options {
    /// Calls `prepare` before each model call; its [`RoundPlan`] sets the tools offered, the
    /// tool choice and the settings of that call alone (module [`prepare`](crate::prepare)).
    #[must_use]
    pub fn with_prepare_round(
        mut self,
        prepare: impl Fn(&RoundContext<'_>) -> RoundPlan + Send + Sync + 'static,
    ) -> Self {
        self.prepare_round = Some(Arc::new(prepare));
        self
    }
}

/// A run's state for the hook: what the run offers without a plan, and this round's
/// narrowed registry (the one tool calls are dispatched against).
pub(crate) struct Prepared {
    /// Every spec the run offers, the final-answer tool included.
    all: Vec<ToolSpec>,
    /// The specs that are not tools of the registry (the final-answer tool): always offered.
    kept: Vec<ToolSpec>,
    base_choice: ToolChoice,
    base_settings: GenerationSettings,
    /// This round's tools, when the plan narrowed them.
    round_tools: Option<Registry>,
    /// Whether `request.tools` is not `all` now.
    narrowed: bool,
    /// What this run's tool searches found (empty without tool search).
    search_cache: crate::tool_search::SearchCache,
}

impl fmt::Debug for Prepared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prepared")
            .field("narrowed", &self.narrowed)
            .finish_non_exhaustive()
    }
}

impl Prepared {
    /// Takes what the run offers from its first request (after the output strategy added its
    /// tool or prompt).
    pub(crate) fn new(request: &ModelRequest, tools: &Registry) -> Self {
        Self {
            all: request.tools.clone(),
            kept: request
                .tools
                .iter()
                .filter(|spec| !tools.contains(&spec.name))
                .cloned()
                .collect(),
            base_choice: request.tool_choice.clone(),
            base_settings: request.settings.clone(),
            round_tools: None,
            narrowed: false,
            search_cache: crate::tool_search::SearchCache::default(),
        }
    }

    /// The registry this round's calls run against, when the plan narrowed it.
    pub(crate) fn round_tools(&self) -> Option<&Registry> {
        self.round_tools.as_ref()
    }

    /// Calls the hook and applies its plan to `request`. Returns whether the tools offered
    /// changed (so the caller recounts the preamble's tokens).
    pub(crate) fn apply(
        &mut self,
        hook: &PrepareRound,
        round: u32,
        model_calls: usize,
        tools: &Registry,
        request: &mut ModelRequest,
    ) -> Result<bool, AgentError> {
        let plan = hook(&RoundContext {
            round,
            model_calls,
            history: &request.messages,
            tools: &self.all,
            model: &request.model,
            search_cache: &self.search_cache,
        });
        let mut changed = false;
        match plan.tools {
            Some(names) => {
                let narrowed = tools.narrow(&names).map_err(|error| {
                    AgentError::config(format!(
                        "prepare_round for round {round}: {error}: a round can only narrow the \
                         tools the run offers"
                    ))
                })?;
                let mut specs = narrowed.specs();
                specs.extend(self.kept.iter().cloned());
                changed = specs != request.tools;
                request.tools = specs;
                self.round_tools = Some(narrowed);
                self.narrowed = true;
            }
            None => {
                if self.narrowed {
                    request.tools.clone_from(&self.all);
                    changed = true;
                }
                self.round_tools = None;
                self.narrowed = false;
            }
        }
        request.tool_choice = plan.tool_choice.unwrap_or_else(|| self.base_choice.clone());
        if let ToolChoice::Tool { name } = &request.tool_choice {
            let offered: HashSet<&str> = request.tools.iter().map(|s| s.name.as_str()).collect();
            if !offered.contains(name.as_str()) {
                return Err(AgentError::config(format!(
                    "prepare_round for round {round}: the tool choice names `{name}`, which this \
                     round does not offer"
                )));
            }
        }
        request.settings = plan.settings.unwrap_or_else(|| self.base_settings.clone());
        Ok(changed)
    }
}
