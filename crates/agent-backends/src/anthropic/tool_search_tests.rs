//! Anthropic's own tool search: the request body (insta), the beta header, the refusal of a
//! deferred tool without tool search, and the cache layout's prefix with and without search
//! over a 500-tool catalog (the figures docs/mcp.md quotes).

use agent_types::{BackendErrorKind, Message, ModelRequest, ToolSpec};
use serde_json::{Value, json};

use super::{Anthropic, CacheLayout, TOOL_SEARCH_BETA, ToolSearchTool};
use crate::http::driver::Protocol;

macro_rules! snapshot {
    ($name:expr, $value:expr) => {
        insta::with_settings!({snapshot_path => "../snapshots"}, {
            insta::assert_json_snapshot!($name, $value);
        })
    };
}

const SYSTEM: &str = "You operate the company's back office through its tools.";

/// 500 tools: 10 systems × 10 objects × 5 verbs, each with one parameter.
fn catalog() -> Vec<ToolSpec> {
    let objects = [
        "invoice",
        "customer",
        "ticket",
        "calendar",
        "repository",
        "payment",
        "email",
        "document",
        "shipment",
        "contract",
    ];
    let mut specs = Vec::new();
    for system in 0..10 {
        for object in objects {
            for verb in ["create", "get", "list", "update", "delete"] {
                specs.push(ToolSpec::new(
                    format!("s{system}_{verb}_{object}"),
                    format!("{verb} a {object} in system {system}."),
                    json!({"type": "object", "properties": {format!("{object}_id"): {"type": "string", "description": "The record's id."}}, "required": [format!("{object}_id")]}),
                ));
            }
        }
    }
    specs
}

fn small() -> Vec<ToolSpec> {
    let mut specs = vec![
        ToolSpec::new(
            "get_forecast",
            "Daily forecast for a city.",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        ),
        ToolSpec::new(
            "find_files",
            "Finds files in the workspace.",
            json!({"type": "object", "properties": {"pattern": {"type": "string"}}}),
        ),
        ToolSpec::new("clock", "The current time.", json!({"type": "object"})),
    ];
    specs[0].defer_loading = true;
    specs[1].defer_loading = true;
    specs
}

fn body(backend: &Anthropic, request: &ModelRequest) -> (Vec<u8>, Value) {
    let prepared = backend.prepare(request).unwrap();
    let bytes = prepared.body.to_vec();
    let value = serde_json::from_slice(&bytes).unwrap();
    (bytes, value)
}

#[test]
fn request_tool_search_bm25_defers_and_adds_the_search_tool_last() {
    let backend = Anthropic::new("sk-test").with_tool_search(ToolSearchTool::Bm25);
    assert!(backend.capabilities().tool_search);
    let request = ModelRequest {
        tools: small(),
        ..ModelRequest::new(
            "claude-sonnet-4-5",
            vec![Message::user("Forecast for Lyon?")],
        )
    };
    let prepared = backend.prepare(&request).unwrap();
    assert_eq!(
        prepared.headers["anthropic-beta"].to_str().unwrap(),
        TOOL_SEARCH_BETA
    );
    let (_, sent) = body(&backend, &request);
    let tools = sent["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 4);
    assert_eq!(
        tools[3],
        json!({"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"})
    );
    assert_eq!(tools[0]["defer_loading"], true);
    assert!(
        tools[2].get("defer_loading").is_none(),
        "clock stays loaded"
    );
    snapshot!("request_tool_search_bm25", sent);
}

#[test]
fn request_tool_search_regex_with_the_cache_layout_keeps_two_breakpoints() {
    let backend = Anthropic::new("sk-test")
        .with_beta("other-beta")
        .with_cache(CacheLayout::new())
        .with_tool_search(ToolSearchTool::Regex)
        .with_tool_search(ToolSearchTool::Regex);
    let request = ModelRequest {
        tools: small(),
        ..ModelRequest::new(
            "claude-sonnet-4-5",
            vec![Message::user("Forecast for Lyon?")],
        )
    };
    let prepared = backend.prepare(&request).unwrap();
    assert_eq!(
        prepared.headers["anthropic-beta"].to_str().unwrap(),
        format!("other-beta,{TOOL_SEARCH_BETA}"),
        "the beta once"
    );
    let (bytes, sent) = body(&backend, &request);
    let text = String::from_utf8(bytes).unwrap();
    assert_eq!(text.matches("\"cache_control\"").count(), 2);
    // No system prompt: the prefix breakpoint lands on the search tool, never deferred.
    let tools = sent["tools"].as_array().unwrap();
    assert_eq!(tools[3]["type"], "tool_search_tool_regex_20251119");
    assert_eq!(tools[3]["cache_control"]["type"], "ephemeral");
    snapshot!("request_tool_search_regex_cached", sent);
}

#[test]
fn without_tool_search_a_deferred_tool_is_refused_and_plain_tools_are_unchanged() {
    let request = ModelRequest {
        tools: small(),
        ..ModelRequest::new("claude-sonnet-4-5", vec![Message::user("hi")])
    };
    let error = Anthropic::new("sk-test").prepare(&request).unwrap_err();
    assert_eq!(error.kind, BackendErrorKind::InvalidRequest);
    assert!(error.message.contains("with_tool_search"), "{error}");

    // Tool search on, nothing deferred: no search tool, the body as without it.
    let mut plain = request.clone();
    for spec in &mut plain.tools {
        spec.defer_loading = false;
    }
    let with = body(
        &Anthropic::new("sk-test").with_tool_search(ToolSearchTool::Bm25),
        &plain,
    )
    .0;
    let without = body(&Anthropic::new("sk-test"), &plain).0;
    assert_eq!(with, without);
}

/// The bytes before the first cache breakpoint (tools and the system prompt: what a change
/// of the tool list makes Anthropic write to the cache again), for the layouts docs/mcp.md
/// compares.
#[test]
fn cache_prefix_bytes_with_and_without_tool_search() {
    fn prefix_bytes(backend: &Anthropic, tools: Vec<ToolSpec>) -> usize {
        let request = ModelRequest {
            system: Some(SYSTEM.into()),
            tools,
            ..ModelRequest::new("claude-sonnet-4-5", vec![Message::user("Bill customer 7.")])
        };
        let (bytes, _) = body(backend, &request);
        let text = String::from_utf8(bytes).unwrap();
        text.find("\"cache_control\"").unwrap()
    }
    let cached = Anthropic::new("sk-test").with_cache(CacheLayout::new());
    let all = prefix_bytes(&cached, catalog());

    // The loop's own search, round 1: `search_tools` alone.
    let search_tools = ToolSpec::new(
        "search_tools",
        "Finds tools by what they do. This catalog holds 500 tools and only a few are loaded; describe the task in a few words (e.g. \"create calendar event\") and the matching tools become callable from your next step on.",
        json!({"type": "object", "properties": {"query": {"type": "string", "description": "Words describing the tool you need: an action and its object, or a tool's name."}, "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "How many tools to load (default 5)."}}, "required": ["query"], "additionalProperties": false}),
    );
    let round_one = prefix_bytes(&cached, vec![search_tools.clone()]);
    // Round 2: five found tools join.
    let mut round_two_tools = vec![search_tools];
    round_two_tools.extend(
        catalog()
            .into_iter()
            .filter(|t| t.name.ends_with("_invoice"))
            .take(5),
    );
    let round_two = prefix_bytes(&cached, round_two_tools);

    // Anthropic's own search: every tool sent, deferred (not rendered into the prompt).
    let native = Anthropic::new("sk-test")
        .with_cache(CacheLayout::new())
        .with_tool_search(ToolSearchTool::Bm25);
    let deferred: Vec<ToolSpec> = catalog()
        .into_iter()
        .map(|mut t| {
            t.defer_loading = true;
            t
        })
        .collect();
    let native_sent = prefix_bytes(&native, deferred);

    eprintln!(
        "prefix bytes: all 500 tools {all}; search round 1 {round_one}; round 2 {round_two}; \
         native (sent, deferred) {native_sent}"
    );
    assert!(all > 90_000, "{all}");
    assert!(round_one < 1_000, "{round_one}");
    assert!(round_two < 3_000, "{round_two}");
    assert!(round_one * 100 < all);
    // Deferred tools are still sent (Anthropic keeps them out of the prompt, not the body).
    assert!(native_sent > all);
}
