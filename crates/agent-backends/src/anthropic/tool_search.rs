//! Anthropic's own tool search (`tool_search_tool_regex_20251119` /
//! `tool_search_tool_bm25_20251119`, beta `advanced-tool-use-2025-11-20`): tools whose spec
//! has [`defer_loading`](agent_types::ToolSpec::defer_loading) are sent with
//! `"defer_loading": true`, which keeps their definitions out of the prompt, and the
//! tool-search tool joins the list, last, so that with caching on and no system prompt the
//! prefix breakpoint lands on a tool that is never deferred. Anthropic runs the search and
//! loads what it finds inside the same response; the `server_tool_use` and
//! `tool_search_tool_result` blocks of that search are skipped by the decoder, like web
//! search's (docs/mcp.md, "Large tool catalogs").

use agent_types::{BackendError, BackendErrorKind};

use super::Anthropic;
use super::request::{Body, Tool};

/// The beta flag the tool-search tool needs.
pub const TOOL_SEARCH_BETA: &str = "advanced-tool-use-2025-11-20";

/// Which of Anthropic's tool-search tools to offer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ToolSearchTool {
    /// `tool_search_tool_bm25_20251119`: the model searches in natural language.
    #[default]
    Bm25,
    /// `tool_search_tool_regex_20251119`: the model searches with regular expressions.
    Regex,
}

impl ToolSearchTool {
    /// The tool's `type` on the wire.
    pub fn wire_type(self) -> &'static str {
        match self {
            Self::Bm25 => "tool_search_tool_bm25_20251119",
            Self::Regex => "tool_search_tool_regex_20251119",
        }
    }

    /// The tool's `name` on the wire.
    pub fn wire_name(self) -> &'static str {
        match self {
            Self::Bm25 => "tool_search_tool_bm25",
            Self::Regex => "tool_search_tool_regex",
        }
    }
}

impl Anthropic {
    /// With Anthropic's own tool search: declares the
    /// [`tool_search`](agent_types::Capabilities::tool_search) capability (so a loop with tool
    /// search on defers its catalog instead of offering `search_tools`), sends the beta flag,
    /// and adds `tool` to every request that defers a tool. For the models that have it
    /// (Claude Sonnet 4.5, Opus 4.5 and later).
    #[must_use]
    pub fn with_tool_search(mut self, tool: ToolSearchTool) -> Self {
        self.capabilities.tool_search = true;
        self.tool_search = Some(tool);
        if !self.betas.iter().any(|beta| beta == TOOL_SEARCH_BETA) {
            self.betas.push(TOOL_SEARCH_BETA.to_owned());
        }
        self
    }
}

/// Adds the tool-search tool, last, when some tool of `body` is deferred.
///
/// # Errors
///
/// A deferred tool without tool search turned on: Anthropic would refuse the request, and
/// the model could never load the tool.
pub(super) fn add(tool: Option<ToolSearchTool>, body: &mut Body<'_>) -> Result<(), BackendError> {
    if !body.tools.iter().any(|t| t.defer_loading) {
        return Ok(());
    }
    let Some(tool) = tool else {
        return Err(BackendError::new(
            BackendErrorKind::InvalidRequest,
            "the request defers tools (defer_loading) but this Anthropic backend has no tool \
             search; turn it on with `with_tool_search`",
        ));
    };
    body.tools
        .push(Tool::server(tool.wire_type(), tool.wire_name()));
    Ok(())
}
