//! Tool search for large catalogs: over a threshold, the model is offered a small always-loaded
//! set plus a `search_tools` tool, and the tools its searches found join the tool list from
//! the next model call on, through the per-round preparation hook ([`crate::prepare`]).
//!
//! Where the backend's [`Capabilities::tool_search`] says the provider searches on its own
//! (Anthropic's tool-search tool, OpenAI Responses' `tool_search`), the run instead offers
//! every tool with [`ToolSpec::defer_loading`] set on all but the always-loaded ones and no
//! `search_tools`: the provider loads what the model finds. Chosen per run, like structured
//! output's strategy.
//!
//! The index ([`ToolIndex`], BM25 over names, descriptions and parameter names) is built once
//! when [`Options::with_tool_search`] is called, over the tools set by then, and shared by
//! `Arc` with every run of those options. Which tools a round offers is read from the history
//! (each `search_tools` call there), so a resumed session, a checkpoint and a retried round
//! offer what the model was told, with no state of their own. Within a run each distinct query
//! is searched once: a per-run cache ([`SearchCache`], at most [`MAX_CACHED_QUERIES`] queries of
//! at most [`agent_tools::MAX_SEARCH_RESULTS`] names) answers the later rounds; the index is
//! fixed, so a cached answer is the search's own.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_backends::{ScriptedBackend, ScriptedTurn};
//! use agent_loop::{Input, Options, ToolSearch, generate};
//! use agent_tools::{Registry, Tool};
//! use serde_json::json;
//!
//! let mut catalog = Registry::new();
//! for i in 0..100 {
//!     catalog.register(Tool::from_json_fn(format!("tool_{i}"), format!("Does thing {i}."), json!({"type": "object"}), |_, _| async { Ok(json!("ok")) }))?;
//! }
//! catalog.register(Tool::from_json_fn("get_weather", "Current weather for a city.", json!({"type": "object"}), |_, _| async { Ok(json!("sunny")) }))?;
//! let backend = ScriptedBackend::new([
//!     ScriptedTurn::tool_call("c1", "search_tools", json!({"query": "weather"})),
//!     ScriptedTurn::tool_call("c2", "get_weather", json!({})),
//!     ScriptedTurn::text("Sunny."),
//! ])
//! .recording();
//! let options = Options::auto()
//!     .with_tools(catalog)
//!     .with_tool_search(ToolSearch::new().with_always_loaded(["tool_0"]))?;
//! generate(&backend, Input::new("m").user("Weather in Paris?"), &options).await?;
//! let names = |i: usize| backend.requests()[i].tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
//! assert_eq!(names(0), ["search_tools", "tool_0"]);
//! assert!(names(1).contains(&"get_weather".to_owned()));
//! # Ok(())
//! # }
//! ```

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use agent_tools::{Registry, SEARCH_TOOLS_NAME, SearchQuery, ToolIndex, search_tools_tool};
use agent_types::{AgentError, AssistantBlock, Capabilities, Message, ModelRequest, ToolSpec};

use crate::options::Options;
use crate::prepare::{PrepareRound, RoundContext, RoundPlan};

/// How a run offers a large catalog (module [`tool_search`](crate::tool_search)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolSearch {
    /// Search is on only when the run's registry holds more tools than this (default 40);
    /// below it every tool is offered as before.
    pub threshold: usize,
    /// Tools offered every round, searched or not.
    pub always_loaded: Vec<String>,
    /// How many tools one search loads unless the model asks for fewer or more (default 5, at
    /// most [`agent_tools::MAX_SEARCH_RESULTS`]).
    pub max_results: usize,
    /// Use the provider's own tool search where the backend's capabilities say it has one
    /// (default `true`); `false` always uses `search_tools`.
    pub native: bool,
}

impl Default for ToolSearch {
    fn default() -> Self {
        Self {
            threshold: 40,
            always_loaded: Vec::new(),
            max_results: 5,
            native: true,
        }
    }
}

impl ToolSearch {
    /// The defaults: over 40 tools, 5 per search, the provider's own search where it has one.
    pub fn new() -> Self {
        Self::default()
    }

    /// Turns search on only above `threshold` tools.
    #[must_use]
    pub fn with_threshold(mut self, threshold: usize) -> Self {
        self.threshold = threshold;
        self
    }

    /// Offers these tools every round.
    #[must_use]
    pub fn with_always_loaded<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.always_loaded = names.into_iter().map(Into::into).collect();
        self
    }

    /// Loads up to `max_results` tools per search by default.
    #[must_use]
    pub fn with_max_results(mut self, max_results: usize) -> Self {
        self.max_results = max_results;
        self
    }

    /// Whether to use the provider's own tool search where it has one.
    #[must_use]
    pub fn with_native(mut self, native: bool) -> Self {
        self.native = native;
        self
    }
}

/// The most distinct queries one run's [`SearchCache`] keeps; later ones are searched each
/// round as before (the answer is the same, only not remembered).
pub(crate) const MAX_CACHED_QUERIES: usize = 64;

/// One run's tool searches: query → the names found, so each query runs once per run instead
/// of once per round. Per run (it lives in the run's preparation state), so nothing is shared
/// or locked across runs; the lock is uncontended. Bounded: [`MAX_CACHED_QUERIES`] queries,
/// each at most 1 KiB and [`agent_tools::MAX_SEARCH_RESULTS`] names.
#[derive(Debug, Default)]
pub(crate) struct SearchCache {
    entries: Mutex<Vec<(SearchQuery, Vec<String>)>>,
}

/// What a search found, from the cache or just run.
fn cached<'c>(
    entries: &'c mut Vec<(SearchQuery, Vec<String>)>,
    index: &ToolIndex,
    query: SearchQuery,
) -> Cow<'c, [String]> {
    if let Some(at) = entries.iter().position(|(known, _)| *known == query) {
        return entries
            .get(at)
            .map_or(Cow::Borrowed(&[][..]), |(_, names)| {
                Cow::Borrowed(names.as_slice())
            });
    }
    let names: Vec<String> = index
        .search_query(&query)
        .into_iter()
        .map(|hit| hit.name)
        .collect();
    if entries.len() >= MAX_CACHED_QUERIES {
        return Cow::Owned(names);
    }
    entries.push((query, names));
    entries.last().map_or(Cow::Borrowed(&[][..]), |(_, names)| {
        Cow::Borrowed(names.as_slice())
    })
}

/// A catalog's search, built once: the shared index and the always-loaded names.
pub(crate) struct Catalog {
    index: Arc<ToolIndex>,
    /// The always-loaded names and `search_tools`.
    always: BTreeSet<String>,
    max_results: usize,
    native: bool,
}

impl fmt::Debug for Catalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Catalog")
            .field("tools", &self.index.len())
            .field("always", &self.always)
            .field("max_results", &self.max_results)
            .field("native", &self.native)
            .finish()
    }
}

impl Catalog {
    /// Sets the request up for the provider's own search when the backend has one: every
    /// tool but the always-loaded ones deferred, `search_tools` not offered. Otherwise the
    /// preparation hook narrows each round.
    pub(crate) fn resolve(&self, capabilities: Capabilities, request: &mut ModelRequest) {
        if !(self.native && capabilities.tool_search) {
            return;
        }
        request.tools.retain(|spec| spec.name != SEARCH_TOOLS_NAME);
        for spec in &mut request.tools {
            spec.defer_loading = !self.always.contains(&spec.name);
        }
    }

    /// The names a round offers: the always-loaded set, what each `search_tools` call in the
    /// history found, and the tools the run offers that are not the catalog's (a final-answer
    /// tool); only names the run offers.
    fn plan(&self, context: &RoundContext<'_>) -> RoundPlan {
        let offered = |name: &str| context.tools.iter().any(|spec| spec.name == name);
        let mut names: BTreeSet<&str> = self
            .always
            .iter()
            .map(String::as_str)
            .filter(|name| offered(name))
            .collect();
        let mut entries = context
            .search_cache
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut found: Vec<String> = Vec::new();
        let calls = context
            .history
            .iter()
            .filter_map(|message| match message {
                Message::Assistant(assistant) => Some(&assistant.content),
                _ => None,
            })
            .flatten()
            .filter_map(|block| match block {
                AssistantBlock::ToolCall(call)
                    if call.name == SEARCH_TOOLS_NAME && !call.invalid_arguments =>
                {
                    Some(call)
                }
                _ => None,
            });
        for call in calls {
            // Arguments the tool refused found nothing, as they did for the model.
            if let Ok(query) = SearchQuery::parse(&call.arguments, self.max_results) {
                found.extend_from_slice(&cached(&mut entries, &self.index, query));
            }
        }
        drop(entries);
        names.extend(
            found
                .iter()
                .map(String::as_str)
                .filter(|name| offered(name)),
        );
        // The tools of the run that are not the catalog's (the final-answer tool) are kept by
        // the preparation itself; a name it does not know would be an error there.
        RoundPlan::new().with_tools(names)
    }
}

/// A catalog prepared for tool search once (the index built, `search_tools` registered), for
/// options built per request: a server builds it at startup and attaches it to each run with
/// [`Options::with_searchable_tools`], so no request rebuilds the index.
#[derive(Debug, Clone)]
pub struct SearchableTools {
    tools: Arc<Registry>,
    /// `None` below the threshold: the tools are offered as they are.
    catalog: Option<Arc<Catalog>>,
}

impl SearchableTools {
    /// Prepares `tools` for `search`.
    ///
    /// # Errors
    ///
    /// A configuration error when an always-loaded name is not among the tools, or the tools
    /// already hold a tool called `search_tools`.
    pub fn new(tools: Arc<Registry>, search: ToolSearch) -> Result<Self, AgentError> {
        let unknown: Vec<&str> = search
            .always_loaded
            .iter()
            .map(String::as_str)
            .filter(|name| !tools.contains(name))
            .collect();
        if !unknown.is_empty() {
            return Err(AgentError::config(format!(
                "tool search: the always-loaded tools {unknown:?} are not among the run's tools"
            )));
        }
        if tools.contains(SEARCH_TOOLS_NAME) {
            return Err(AgentError::config(format!(
                "tool search: the tools already hold one called `{SEARCH_TOOLS_NAME}`; rename it"
            )));
        }
        if tools.len() <= search.threshold {
            return Ok(Self {
                tools,
                catalog: None,
            });
        }
        let index = Arc::new(ToolIndex::build(&tools));
        let mut registry = tools.as_ref().clone();
        registry
            .register(search_tools_tool(Arc::clone(&index), search.max_results))
            .map_err(|error| AgentError::config(format!("tool search: {error}")))?;
        let mut always: BTreeSet<String> = search.always_loaded.into_iter().collect();
        always.insert(SEARCH_TOOLS_NAME.to_owned());
        Ok(Self {
            tools: Arc::new(registry),
            catalog: Some(Arc::new(Catalog {
                index,
                always,
                // As `search_tools` clamps it, so a round loads what the tool answered.
                max_results: search.max_results.clamp(1, agent_tools::MAX_SEARCH_RESULTS),
                native: search.native,
            })),
        })
    }

    /// The tools, `search_tools` among them when search is on.
    pub fn tools(&self) -> &Arc<Registry> {
        &self.tools
    }

    /// Whether the catalog was over the threshold (search is on).
    pub fn is_searched(&self) -> bool {
        self.catalog.is_some()
    }
}

impl Options {
    /// Offers the tools set so far ([`with_tools`](Self::with_tools)) through tool search when
    /// they are more than `search.threshold` (module [`tool_search`](crate::tool_search)):
    /// builds the index once, registers `search_tools`, and installs a preparation hook that
    /// runs after any set before (a hook's own tool list wins); an allow-list set before gets
    /// `search_tools` added. Call it after setting the tools, any allow-list and any
    /// `prepare_round`; below the threshold it changes nothing. Options built per request
    /// should share one [`SearchableTools`] instead.
    ///
    /// # Errors
    ///
    /// As [`SearchableTools::new`].
    pub fn with_tool_search(self, search: ToolSearch) -> Result<Self, AgentError> {
        let searchable = SearchableTools::new(Arc::clone(&self.tools), search)?;
        Ok(self.with_searchable_tools(&searchable))
    }

    /// Offers `searchable`'s tools (sharing them and their index) as
    /// [`with_tool_search`](Self::with_tool_search) does: replaces the tools set so far, and
    /// keeps the order rule (after any allow-list and `prepare_round`).
    #[must_use]
    pub fn with_searchable_tools(mut self, searchable: &SearchableTools) -> Self {
        self.tools = Arc::clone(&searchable.tools);
        let Some(catalog) = searchable.catalog.clone() else {
            return self;
        };
        // An allow-list set before still lets the model search.
        if let Some(allowed) = &mut self.allowed_tools {
            allowed.push(SEARCH_TOOLS_NAME.to_owned());
        }
        self.tool_search = Some(Arc::clone(&catalog));
        let before: Option<PrepareRound> = self.prepare_round.take();
        self.prepare_round = Some(Arc::new(move |context: &RoundContext<'_>| {
            let mut plan = match &before {
                Some(hook) => hook(context),
                None => RoundPlan::new(),
            };
            // The provider searches on its own (the run deferred the tools): nothing to narrow.
            let native = context
                .tools
                .iter()
                .any(|spec: &ToolSpec| spec.defer_loading);
            if plan.tools.is_none() && !native {
                plan.tools = catalog.plan(context).tools;
            }
            plan
        }));
        self
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use agent_tools::Tool;
    use serde_json::json;

    use super::*;

    fn catalog(n: usize) -> Registry {
        let mut tools = Registry::new();
        for i in 0..n {
            tools
                .register(Tool::remote(
                    format!("tool_{i}"),
                    format!("Does thing {i}."),
                    json!({"type": "object"}),
                ))
                .unwrap();
        }
        tools
    }

    #[test]
    fn below_the_threshold_nothing_changes() {
        let options = Options::auto()
            .with_tools(catalog(10))
            .with_tool_search(ToolSearch::new())
            .unwrap();
        assert_eq!(options.tools.len(), 10);
        assert!(options.prepare_round.is_none() && options.tool_search.is_none());
    }

    #[test]
    fn an_allow_list_set_before_keeps_search_tools() {
        let options = Options::auto()
            .with_tools(catalog(50))
            .with_allowed_tools(["tool_1", "tool_2"])
            .with_tool_search(ToolSearch::new())
            .unwrap();
        assert_eq!(
            options.allowed_tools.as_deref(),
            Some(
                &[
                    "tool_1".to_owned(),
                    "tool_2".to_owned(),
                    SEARCH_TOOLS_NAME.to_owned()
                ][..]
            )
        );
    }

    #[test]
    fn one_prepared_catalog_serves_many_options_with_one_index() {
        let searchable = SearchableTools::new(Arc::new(catalog(50)), ToolSearch::new()).unwrap();
        assert!(searchable.is_searched());
        assert_eq!(searchable.tools().len(), 51);
        let a = Options::auto().with_searchable_tools(&searchable);
        let b = Options::auto().with_searchable_tools(&searchable);
        let (a, b) = (a.tool_search.unwrap(), b.tool_search.unwrap());
        assert!(Arc::ptr_eq(&a, &b));
        assert!(Arc::ptr_eq(&a.index, &b.index));
        let small = SearchableTools::new(Arc::new(catalog(5)), ToolSearch::new()).unwrap();
        assert!(!small.is_searched());
        assert!(
            Options::auto()
                .with_searchable_tools(&small)
                .prepare_round
                .is_none()
        );
    }

    #[test]
    fn bad_configurations_are_config_errors() {
        let error = Options::auto()
            .with_tools(catalog(50))
            .with_tool_search(ToolSearch::new().with_always_loaded(["nope"]))
            .unwrap_err();
        assert_eq!(error.kind, agent_types::ErrorKind::Config);
        assert!(error.message.contains("nope"), "{error}");

        let mut tools = catalog(50);
        tools
            .register(Tool::remote(
                SEARCH_TOOLS_NAME,
                "mine",
                json!({"type": "object"}),
            ))
            .unwrap();
        let error = Options::auto()
            .with_tools(tools)
            .with_tool_search(ToolSearch::new())
            .unwrap_err();
        assert!(error.message.contains("rename"), "{error}");
    }

    #[test]
    fn native_resolution_defers_all_but_the_always_loaded() {
        let options = Options::auto()
            .with_tools(catalog(50))
            .with_tool_search(ToolSearch::new().with_always_loaded(["tool_3"]))
            .unwrap();
        let search = options.tool_search.as_ref().unwrap();
        let mut request = ModelRequest {
            tools: options.tools.specs(),
            ..ModelRequest::default()
        };
        search.resolve(Capabilities::default(), &mut request);
        assert_eq!(request.tools.len(), 51);
        assert!(request.tools.iter().all(|t| !t.defer_loading));

        let native = Capabilities {
            tool_search: true,
            ..Capabilities::default()
        };
        search.resolve(native, &mut request);
        assert_eq!(request.tools.len(), 50, "no search_tools");
        let loaded: Vec<&str> = request
            .tools
            .iter()
            .filter(|t| !t.defer_loading)
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(loaded, ["tool_3"]);
    }

    #[tokio::test]
    async fn each_query_is_searched_once_per_run_not_once_per_round() {
        use agent_backends::{ScriptedBackend, ScriptedTurn};

        let options = Options::auto()
            .with_tools(catalog(50))
            .with_tool_search(ToolSearch::new())
            .unwrap();
        let index = Arc::clone(&options.tool_search.as_ref().unwrap().index);
        let names = |request: &ModelRequest| {
            request
                .tools
                .iter()
                .map(|spec| spec.name.clone())
                .collect::<Vec<_>>()
        };
        for run in 0..2 {
            let backend = ScriptedBackend::new([
                ScriptedTurn::tool_call(
                    "c1",
                    SEARCH_TOOLS_NAME,
                    json!({"query": "tool_3", "limit": 1}),
                ),
                ScriptedTurn::tool_call(
                    "c2",
                    SEARCH_TOOLS_NAME,
                    json!({"query": "tool_7", "limit": 1}),
                ),
                ScriptedTurn::tool_call(
                    "c3",
                    SEARCH_TOOLS_NAME,
                    json!({"query": "tool_3", "limit": 1}),
                ),
                ScriptedTurn::text("done"),
            ])
            .recording();
            let before = index.searches();
            crate::generate(&backend, crate::Input::new("m").user("Find"), &options)
                .await
                .unwrap();
            let requests = backend.requests();
            assert_eq!(names(&requests[0]), [SEARCH_TOOLS_NAME]);
            assert_eq!(names(&requests[1]), [SEARCH_TOOLS_NAME, "tool_3"]);
            assert_eq!(names(&requests[2]), [SEARCH_TOOLS_NAME, "tool_3", "tool_7"]);
            assert_eq!(names(&requests[3]), [SEARCH_TOOLS_NAME, "tool_3", "tool_7"]);
            // The tool answered 3 searches; the rounds searched `tool_3` and `tool_7` once
            // each (re-running the history every round searched 0 + 1 + 2 + 3 = 6 times).
            assert_eq!(index.searches() - before, 3 + 2, "run {run}");
        }
    }

    #[test]
    fn the_cache_is_bounded_and_answers_as_the_search_does() {
        let index = ToolIndex::build(&catalog(50));
        let mut entries = Vec::new();
        for i in 0..MAX_CACHED_QUERIES + 10 {
            let query =
                SearchQuery::parse(&json!({"query": format!("tool_{}", i % 50), "limit": 1}), 5)
                    .unwrap();
            let expected: Vec<String> = index
                .search_query(&query)
                .into_iter()
                .map(|h| h.name)
                .collect();
            assert_eq!(
                cached(&mut entries, &index, query).as_ref(),
                expected.as_slice()
            );
        }
        assert_eq!(entries.len(), 50, "distinct queries only");
        for i in 50..MAX_CACHED_QUERIES + 10 {
            let query = SearchQuery::parse(&json!({"query": format!("thing {i}")}), 5).unwrap();
            let _ = cached(&mut entries, &index, query);
        }
        assert_eq!(entries.len(), MAX_CACHED_QUERIES);
        assert!(
            entries
                .iter()
                .all(|(_, names)| names.len() <= agent_tools::MAX_SEARCH_RESULTS)
        );
    }

    #[tokio::test]
    async fn a_zero_max_results_loads_what_the_tool_answered() {
        use agent_backends::{ScriptedBackend, ScriptedTurn};

        // `search_tools` answers at least one match; the round must load that one.
        let options = Options::auto()
            .with_tools(catalog(50))
            .with_tool_search(ToolSearch::new().with_max_results(0))
            .unwrap();
        let backend = ScriptedBackend::new([
            ScriptedTurn::tool_call("c1", SEARCH_TOOLS_NAME, json!({"query": "tool_3"})),
            ScriptedTurn::text("done"),
        ])
        .recording();
        let result = crate::generate(&backend, crate::Input::new("m").user("Find"), &options)
            .await
            .unwrap();
        let Message::Tool(answer) = &result.messages[1] else {
            panic!("{:?}", result.messages[1]);
        };
        assert!(answer.content.contains("tool_3"), "{}", answer.content);
        let offered: Vec<String> = backend.requests()[1]
            .tools
            .iter()
            .map(|spec| spec.name.clone())
            .collect();
        assert_eq!(offered, [SEARCH_TOOLS_NAME, "tool_3"]);
    }
}
