//! Turning a server's tool list into registered tools: names, filters and bounds.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use agent_tools::{Registry, Tool};
use agent_types::ToolSpec;
use serde_json::Value;

use super::config::{Limits, ServerConfig};
use super::session::{Inner, McpHandler};
use crate::Error;

/// One tool imported from a server, as the model sees it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ImportedTool {
    /// The name in the registry: `<server>_<tool>`, sanitized to `^[a-zA-Z0-9_-]{1,64}$`.
    pub name: String,
    /// The name on the server, used to call it.
    pub server_name: String,
    /// The description (cut to [`Limits::max_description_bytes`]).
    pub description: String,
    /// The JSON Schema of the arguments.
    pub input_schema: Value,
}

/// A tool the server listed that was not imported, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkippedTool {
    /// The name on the server (cut to [`Limits::max_name_bytes`]).
    pub server_name: String,
    /// Why it was skipped.
    pub reason: String,
}

/// The registry name of the server's tool `tool`: `<server>_<tool>`, each part sanitized
/// (separators become `_`, other disallowed characters are dropped) and cut to 64 characters.
///
/// # Errors
///
/// [`agent_tools::Error::InvalidName`] when the server or tool name has no allowed character.
pub fn prefixed_name(server: &str, tool: &str) -> Result<String, agent_tools::Error> {
    agent_tools::tool_name(server, tool)
}

/// Cuts `text` to at most `max` bytes at a UTF-8 boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// What one listing produced: the compiled tools and what was left out.
#[derive(Debug, Clone, Default)]
pub(crate) struct Imported {
    pub(crate) registry: Registry,
    pub(crate) tools: Arc<[ImportedTool]>,
    pub(crate) skipped: Arc<[SkippedTool]>,
}

/// Filters, names, bounds and compiles the listed tools. Each schema is compiled here, once
/// per listing, never per call.
pub(crate) fn import(
    config: &ServerConfig,
    listed: Vec<rmcp::model::Tool>,
    inner: &Weak<Inner>,
) -> Result<Imported, Error> {
    let limits: &Limits = &config.limits;
    let mut registry = Registry::new();
    let mut tools = Vec::new();
    let mut skipped = Vec::new();
    let mut origin: BTreeMap<String, String> = BTreeMap::new();
    for tool in listed {
        let server_name = tool.name.as_ref();
        let mut skip = |reason: String| {
            skipped.push(SkippedTool {
                server_name: cut(server_name, limits.max_name_bytes).to_owned(),
                reason,
            });
        };
        if server_name.len() > limits.max_name_bytes {
            skip(format!(
                "its name is longer than {} bytes",
                limits.max_name_bytes
            ));
            continue;
        }
        if !config.admits(server_name) {
            continue;
        }
        let name = match prefixed_name(&config.name, server_name) {
            Ok(name) => name,
            Err(error) => {
                skip(error.to_string());
                continue;
            }
        };
        if let Some(first) = origin.get(&name) {
            return Err(Error::NameCollision {
                name,
                first: format!("`{first}` of MCP server `{}`", config.name),
                second: format!("`{server_name}` of MCP server `{}`", config.name),
            });
        }
        let schema = Value::Object((*tool.input_schema).clone());
        let schema_bytes = serde_json::to_vec(&schema).map_or(usize::MAX, |b| b.len());
        if schema_bytes > limits.max_schema_bytes {
            skip(format!(
                "its input schema is {schema_bytes} bytes; the limit is {}",
                limits.max_schema_bytes
            ));
            continue;
        }
        if agent_tools::json_depth(&schema) > limits.max_schema_depth {
            skip(format!(
                "its input schema nests deeper than {} levels",
                limits.max_schema_depth
            ));
            continue;
        }
        if tools.len() >= limits.max_tools {
            return Err(Error::TooManyTools {
                server: config.name.clone(),
                max: limits.max_tools,
            });
        }
        let description = cut(
            tool.description.as_deref().unwrap_or_default(),
            limits.max_description_bytes,
        )
        .to_owned();
        let spec = ToolSpec::new(name.clone(), description.clone(), schema.clone());
        let handler = McpHandler::new(inner.clone(), server_name);
        match registry.register(Tool::new(spec, Some(Arc::new(handler)))) {
            Ok(_) => {}
            Err(agent_tools::Error::InvalidSchema { reason, .. }) => {
                skip(format!("its input schema does not compile: {reason}"));
                continue;
            }
            Err(error) => return Err(error.into()),
        }
        origin.insert(name.clone(), server_name.to_owned());
        tools.push(ImportedTool {
            name,
            server_name: server_name.to_owned(),
            description,
            input_schema: schema,
        });
    }
    // An allow-list entry the server does not list is a typo or a server that changed.
    for name in config.allow.iter().flatten() {
        if !tools
            .iter()
            .any(|tool: &ImportedTool| &tool.server_name == name)
            && !skipped.iter().any(|s: &SkippedTool| &s.server_name == name)
        {
            tracing::warn!(server = %config.name, tool = %name, "the allow-list names a tool the MCP server does not list");
        }
    }
    for skipped in &skipped {
        tracing::warn!(
            server = %config.name,
            tool = %skipped.server_name,
            reason = %skipped.reason,
            "MCP tool not imported"
        );
    }
    Ok(Imported {
        registry,
        tools: tools.into(),
        skipped: skipped.into(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn listed(name: &str, schema: Value) -> rmcp::model::Tool {
        serde_json::from_value(json!({
            "name": name,
            "description": "d",
            "inputSchema": schema,
        }))
        .unwrap()
    }

    fn config() -> ServerConfig {
        ServerConfig::stdio("my server", "true", Vec::<String>::new())
    }

    #[test]
    fn names_are_prefixed_and_sanitized_for_every_provider() {
        assert_eq!(
            prefixed_name("everything", "get-sum").unwrap(),
            "everything_get-sum"
        );
        assert_eq!(
            prefixed_name("my server", "files/read.all").unwrap(),
            "my_server_files_read_all"
        );
        assert_eq!(
            prefixed_name("srv", "héllo wörld!").unwrap(),
            "srv_hllo_wrld"
        );
        let long = prefixed_name("srv", &"x".repeat(200)).unwrap();
        assert_eq!(long.len(), 64);
        assert!(agent_tools::validate_name(&long).is_ok());
        assert!(prefixed_name("srv", "!!!").is_err());
    }

    #[test]
    fn a_collision_is_an_error_naming_both_tools() {
        let object = json!({"type": "object"});
        let error = import(
            &config(),
            vec![listed("a.b", object.clone()), listed("a/b", object)],
            &Weak::new(),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "two tools get the name `my_server_a_b`: `a.b` of MCP server `my server` and `a/b` of MCP server `my server`; \
             rename one (`--mcp-name`/`name`) or leave one out (`deny`)"
        );
    }

    #[test]
    fn allow_and_deny_lists_choose_tools_and_bounds_skip_hostile_ones() {
        let object = json!({"type": "object"});
        let mut deep = json!({"type": "object"});
        for _ in 0..40 {
            deep = json!({"type": "object", "properties": {"x": deep}});
        }
        let big = json!({"type": "object", "description": "x".repeat(70_000)});
        let config = config()
            .allow(["a", "b", "deep", "big", "bad", "x".repeat(300).as_str()])
            .deny(["b"]);
        let imported = import(
            &config,
            vec![
                listed("a", object.clone()),
                listed("b", object.clone()),
                listed("c", object.clone()),
                listed("deep", deep),
                listed("big", big),
                listed(
                    "bad",
                    json!({"type": "object", "properties": {"x": {"type": 12}}}),
                ),
                listed(&"x".repeat(300), object),
            ],
            &Weak::new(),
        )
        .unwrap();
        assert_eq!(
            imported.registry.names().collect::<Vec<_>>(),
            ["my_server_a"]
        );
        let reasons: Vec<_> = imported.skipped.iter().map(|s| s.reason.as_str()).collect();
        assert_eq!(reasons.len(), 4, "{reasons:?}");
        assert!(reasons[0].contains("nests deeper than 32"), "{reasons:?}");
        assert!(reasons[1].contains("the limit is 65536"), "{reasons:?}");
        assert!(reasons[2].contains("does not compile"), "{reasons:?}");
        assert!(reasons[3].contains("longer than 256 bytes"), "{reasons:?}");
        assert_eq!(imported.skipped[3].server_name.len(), 256);
    }

    #[test]
    fn the_number_of_tools_is_bounded() {
        let limits = Limits {
            max_tools: 2,
            ..Limits::default()
        };
        let object = json!({"type": "object"});
        let error = import(
            &config().limits(limits),
            (0..3)
                .map(|i| listed(&format!("t{i}"), object.clone()))
                .collect(),
            &Weak::new(),
        )
        .unwrap_err();
        assert!(
            matches!(error, Error::TooManyTools { max: 2, .. }),
            "{error}"
        );
    }
}
