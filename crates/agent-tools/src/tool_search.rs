//! Tool search over a large catalog: a BM25 index over each tool's name, description and
//! parameter names ([`ToolIndex`], built once per catalog and shared through an `Arc`), and the
//! `search_tools` tool a model calls to find the tools it needs ([`search_tools_tool`]).
//!
//! The index is a small BM25 of its own (Okapi BM25, `k1` = 1.2, `b` = 0.75) rather than a
//! crate: a catalog is at most a few thousand short documents, and what matters is how a tool
//! is cut into words (snake_case, kebab-case and camelCase names split into their parts), which
//! the index decides here.
//!
//! ```
//! use std::sync::Arc;
//! use agent_tools::{Registry, Tool, ToolIndex};
//! use serde_json::json;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut tools = Registry::new();
//! for (name, description) in [
//!     ("get_weather", "Current weather for a city."),
//!     ("send_email", "Sends an email to a recipient."),
//!     ("createInvoice", "Creates an invoice for a customer."),
//! ] {
//!     tools.register(Tool::remote(name, description, json!({"type": "object"})))?;
//! }
//! let index = Arc::new(ToolIndex::build(&tools));
//! let hits = index.search("weather in Paris", 5);
//! assert_eq!(hits[0].name, "get_weather");
//! assert_eq!(index.search("invoice", 5)[0].name, "createInvoice");
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_types::ToolSpec;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::ToolError;
use crate::registry::Registry;
use crate::tool::Tool;

/// The name of the search tool the model is offered.
pub const SEARCH_TOOLS_NAME: &str = "search_tools";

/// The most matches one search returns, whatever the model asks for.
pub const MAX_SEARCH_RESULTS: usize = 20;

/// Okapi BM25's term-frequency saturation.
const K1: f32 = 1.2;
/// Okapi BM25's length normalization.
const B: f32 = 0.75;
/// A name's words count this many times: a query naming a tool's own words should find it
/// ahead of tools that only mention them.
const NAME_WEIGHT: u32 = 3;
/// A parameter name's words count this many times (a description counts once).
const PARAMETER_WEIGHT: u32 = 2;
/// The longest query read, in bytes; a longer one is cut (at a character boundary).
const MAX_QUERY_BYTES: usize = 1024;

/// One match of a search: the tool's name and its BM25 score (higher is better).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    /// The tool's name.
    pub name: String,
    /// The BM25 score.
    pub score: f32,
}

/// One indexed tool.
#[derive(Debug)]
struct Doc {
    name: String,
    description: String,
    /// The document's length in weighted terms.
    len: u32,
}

/// A BM25 index over a catalog's tools. Build it once per catalog and share it (`Arc`): a
/// search reads it without locking and allocates only its scores.
#[derive(Debug, Default)]
pub struct ToolIndex {
    docs: Vec<Doc>,
    /// Term → (document, weighted term frequency), documents ascending.
    postings: HashMap<String, Vec<(u32, u32)>>,
    avg_len: f32,
    /// Searches run so far (see [`ToolIndex::searches`]).
    searches: AtomicU64,
}

impl ToolIndex {
    /// Indexes every tool of `tools`.
    pub fn build(tools: &Registry) -> Self {
        Self::from_specs(tools.iter().map(|tool| tool.spec()))
    }

    /// Indexes these specs (in the order given; ties in a search go to the earlier one).
    pub fn from_specs<'a>(specs: impl IntoIterator<Item = &'a ToolSpec>) -> Self {
        let mut index = Self::default();
        let mut total = 0u64;
        let mut terms: HashMap<String, u32> = HashMap::new();
        for spec in specs {
            terms.clear();
            let mut add = |text: &str, weight: u32| {
                for_each_term(text, |term| {
                    *terms.entry(term.to_owned()).or_default() += weight;
                });
            };
            add(&spec.name, NAME_WEIGHT);
            add(&spec.description, 1);
            for parameter in parameter_names(&spec.parameters) {
                add(parameter, PARAMETER_WEIGHT);
            }
            let id = u32::try_from(index.docs.len()).unwrap_or(u32::MAX);
            let len: u32 = terms.values().sum();
            total += u64::from(len);
            for (term, tf) in terms.drain() {
                index.postings.entry(term).or_default().push((id, tf));
            }
            index.docs.push(Doc {
                name: spec.name.clone(),
                description: spec.description.clone(),
                len,
            });
        }
        if !index.docs.is_empty() {
            index.avg_len = total as f32 / index.docs.len() as f32;
        }
        index
    }

    /// How many tools are indexed.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// `true` when no tool is indexed.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// The description of the indexed tool called `name`.
    pub fn description(&self, name: &str) -> Option<&str> {
        self.docs
            .iter()
            .find(|doc| doc.name == name)
            .map(|doc| doc.description.as_str())
    }

    /// How many searches this index has run ([`search`](Self::search) and
    /// [`search_query`](Self::search_query) calls), over every run sharing it: what a caller
    /// caching results (the loop's per-run cache) saves shows here.
    pub fn searches(&self) -> u64 {
        self.searches.load(Ordering::Relaxed)
    }

    /// The best `limit` matches for `query` (at most [`MAX_SEARCH_RESULTS`]), best first;
    /// tools matching no word of the query are not returned. A query equal to a tool's name
    /// puts that tool first.
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        self.search_normalized(cut(query.trim(), MAX_QUERY_BYTES), limit)
    }

    /// The matches for a query read by [`SearchQuery::parse`]: the same as
    /// [`search`](Self::search) with its query and limit.
    pub fn search_query(&self, query: &SearchQuery) -> Vec<Hit> {
        self.search_normalized(&query.query, query.limit)
    }

    /// [`search`](Self::search) for a query already trimmed and cut.
    fn search_normalized(&self, query: &str, limit: usize) -> Vec<Hit> {
        self.searches.fetch_add(1, Ordering::Relaxed);
        let limit = limit.min(MAX_SEARCH_RESULTS);
        if limit == 0 || self.docs.is_empty() {
            return Vec::new();
        }
        let n = self.docs.len() as f32;
        let mut scores = vec![0f32; self.docs.len()];
        let mut seen: Vec<String> = Vec::new();
        for_each_term(query, |term| {
            // A word repeated in the query counts once.
            if seen.iter().any(|s| s == term) {
                return;
            }
            seen.push(term.to_owned());
            let Some(postings) = self.postings.get(term) else {
                return;
            };
            let df = postings.len() as f32;
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            for &(doc, tf) in postings {
                let Some(score) = scores.get_mut(doc as usize) else {
                    continue;
                };
                let len = self.docs.get(doc as usize).map_or(0.0, |d| d.len as f32);
                let tf = tf as f32;
                let norm = K1 * (1.0 - B + B * len / self.avg_len.max(1.0));
                *score += idf * tf * (K1 + 1.0) / (tf + norm);
            }
        });
        if let Some(exact) = self.docs.iter().position(|doc| doc.name == query)
            && let Some(score) = scores.get_mut(exact)
        {
            *score += 1_000.0;
        }
        let mut ranked: Vec<(usize, f32)> = scores
            .into_iter()
            .enumerate()
            .filter(|(_, score)| *score > 0.0)
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked.truncate(limit);
        ranked
            .into_iter()
            .filter_map(|(doc, score)| {
                self.docs.get(doc).map(|doc| Hit {
                    name: doc.name.clone(),
                    score,
                })
            })
            .collect()
    }
}

/// The arguments of `search_tools`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
    #[serde(default)]
    limit: Option<usize>,
}

/// A `search_tools` call's arguments, read and normalized: two calls with equal
/// `SearchQuery`s find the same tools, so a caller can key a cache by it. Bounded: the query
/// is at most 1 KiB (a longer one is cut, as [`ToolIndex::search`] cuts it) and the limit at
/// most [`MAX_SEARCH_RESULTS`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SearchQuery {
    /// The query, trimmed and cut at a character boundary.
    pub query: String,
    /// How many matches, at most [`MAX_SEARCH_RESULTS`].
    pub limit: usize,
}

impl SearchQuery {
    /// Reads a `search_tools` call's arguments; `default_limit` applies when they name none.
    ///
    /// # Errors
    ///
    /// A [`ToolError`] for the model when the arguments are not `{query, limit?}`.
    pub fn parse(arguments: &Value, default_limit: usize) -> Result<Self, ToolError> {
        let args = SearchArgs::deserialize(arguments).map_err(|error| {
            ToolError::respond_to_model(format!(
                "search_tools takes {{\"query\": string, \"limit\"?: integer}}: {error}"
            ))
        })?;
        Ok(Self {
            query: cut(args.query.trim(), MAX_QUERY_BYTES).to_owned(),
            limit: args.limit.unwrap_or(default_limit).min(MAX_SEARCH_RESULTS),
        })
    }
}

/// Reads a `search_tools` call's arguments and runs the search: what the tool returned to the
/// model, so a preparation hook can load exactly those tools without keeping state of its own.
///
/// # Errors
///
/// A [`ToolError`] for the model when the arguments are not `{query, limit?}`.
pub fn run_search(
    index: &ToolIndex,
    arguments: &Value,
    default_limit: usize,
) -> Result<Vec<Hit>, ToolError> {
    Ok(index.search_query(&SearchQuery::parse(arguments, default_limit)?))
}

/// The `search_tools` tool over `index`: the model sends words describing what it needs and
/// gets back the names and descriptions of the best `default_limit` matches (at most
/// [`MAX_SEARCH_RESULTS`]), which the run then offers from its next model call on.
pub fn search_tools_tool(index: Arc<ToolIndex>, default_limit: usize) -> Tool {
    let default_limit = default_limit.clamp(1, MAX_SEARCH_RESULTS);
    let description = format!(
        "Finds tools by what they do. This catalog holds {} tools and only a few are loaded; \
         describe the task in a few words (e.g. \"create calendar event\") and the matching \
         tools become callable from your next step on.",
        index.len()
    );
    let parameters = json!({
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "Words describing the tool you need: an action and its object, or a tool's name."
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_SEARCH_RESULTS,
                "description": format!("How many tools to load (default {default_limit}).")
            }
        },
        "required": ["query"],
        "additionalProperties": false
    });
    Tool::from_json_fn(
        SEARCH_TOOLS_NAME,
        description,
        parameters,
        move |arguments, _context| {
            let index = Arc::clone(&index);
            async move {
                let hits = run_search(&index, &arguments, default_limit)?;
                let tools: Vec<Value> = hits
                    .iter()
                    .map(|hit| {
                        json!({
                            "name": hit.name,
                            "description": index.description(&hit.name).unwrap_or_default(),
                        })
                    })
                    .collect();
                Ok(if tools.is_empty() {
                    json!({"tools": [], "note": "No tool matched; try other words."})
                } else {
                    json!({"tools": tools, "note": "These tools are callable from your next step on."})
                })
            }
        },
    )
}

/// The property names of a parameters schema (top level, then one level of nested objects).
fn parameter_names(schema: &Value) -> impl Iterator<Item = &str> {
    let top = schema.get("properties").and_then(Value::as_object);
    top.into_iter().flat_map(|properties| {
        properties.iter().flat_map(|(name, property)| {
            let nested = property
                .get("properties")
                .and_then(Value::as_object)
                .into_iter()
                .flat_map(|inner| inner.keys().map(String::as_str));
            std::iter::once(name.as_str()).chain(nested)
        })
    })
}

/// Calls `f` with each lower-case word of `text`: split at anything not a letter or digit and
/// at camelCase humps (`createInvoice` → `create`, `invoice`; `HTTPServer` → `http`, `server`).
fn for_each_term(text: &str, mut f: impl FnMut(&str)) {
    let mut word = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            flush(&mut word, &mut f);
            continue;
        }
        if c.is_uppercase() && !word.is_empty() {
            let prev = chars.get(i.wrapping_sub(1)).copied();
            let next = chars.get(i + 1).copied();
            let hump = prev.is_some_and(|p| p.is_lowercase() || p.is_numeric())
                || (prev.is_some_and(char::is_uppercase) && next.is_some_and(char::is_lowercase));
            if hump {
                flush(&mut word, &mut f);
            }
        }
        word.extend(c.to_lowercase());
    }
    flush(&mut word, &mut f);
}

/// Hands on a finished word, a plural's `s` dropped (`files` → `file`, not `address`): the
/// only stemming, applied alike to the catalog and the query.
fn flush(word: &mut String, f: &mut impl FnMut(&str)) {
    if !word.is_empty() {
        let plural = word.len() > 3 && word.ends_with('s') && !word.ends_with("ss");
        f(if plural {
            &word[..word.len() - 1]
        } else {
            word
        });
        word.clear();
    }
}

/// `text` cut to at most `max` bytes at a character boundary.
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn terms(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for_each_term(text, |t| out.push(t.to_owned()));
        out
    }

    fn spec(name: &str, description: &str, parameters: Value) -> ToolSpec {
        ToolSpec::new(name, description, parameters)
    }

    #[test]
    fn words_split_at_snake_kebab_and_camel_case() {
        assert_eq!(terms("get_weather"), ["get", "weather"]);
        assert_eq!(terms("send-email"), ["send", "email"]);
        assert_eq!(terms("createInvoice"), ["create", "invoice"]);
        assert_eq!(terms("HTTPServer v2Api"), ["http", "server", "v2", "api"]);
        assert_eq!(terms("Crème brûlée!"), ["crème", "brûlée"]);
        assert_eq!(terms("lists files address"), ["list", "file", "address"]);
        assert!(terms("  ,;- ").is_empty());
    }

    #[test]
    fn bm25_ranks_the_tool_whose_name_matches_first() {
        let specs = [
            spec("list_files", "Lists the files of a directory.", json!({})),
            spec("read_file", "Reads a file.", json!({})),
            spec(
                "weather_forecast",
                "Forecast for a city; mentions files nowhere.",
                json!({}),
            ),
        ];
        let index = ToolIndex::from_specs(&specs);
        let hits = index.search("read file", 5);
        assert_eq!(hits[0].name, "read_file");
        assert_eq!(hits[1].name, "list_files");
        assert!(
            hits.iter()
                .all(|h| h.name != "weather_forecast" || h.score > 0.0)
        );
        assert_eq!(index.search("forecast", 5)[0].name, "weather_forecast");
    }

    #[test]
    fn parameter_names_are_searchable() {
        let specs = [
            spec(
                "op_17",
                "Does a thing.",
                json!({"type": "object", "properties": {"iban": {"type": "string"}, "payment": {"type": "object", "properties": {"currency": {}}}}}),
            ),
            spec("op_18", "Does another thing.", json!({"type": "object"})),
        ];
        let index = ToolIndex::from_specs(&specs);
        assert_eq!(index.search("iban", 5)[0].name, "op_17");
        assert_eq!(index.search("currency", 5)[0].name, "op_17");
        assert_eq!(index.search("currency", 5).len(), 1);
    }

    #[test]
    fn rare_words_weigh_more_than_common_ones() {
        // "create" is in every tool; "ticket" in one: the query's rare word decides.
        let specs: Vec<ToolSpec> = ["user", "project", "ticket", "label"]
            .iter()
            .map(|o| {
                spec(
                    &format!("create_{o}"),
                    &format!("Creates a {o}."),
                    json!({}),
                )
            })
            .collect();
        let index = ToolIndex::from_specs(&specs);
        let hits = index.search("create ticket", 5);
        assert_eq!(hits[0].name, "create_ticket");
        assert!(hits[0].score > 2.0 * hits[1].score, "{hits:?}");
    }

    #[test]
    fn exact_names_limits_and_empty_queries() {
        let specs: Vec<ToolSpec> = (0..50)
            .map(|i| spec(&format!("tool_{i}"), "A tool.", json!({})))
            .collect();
        let index = ToolIndex::from_specs(&specs);
        assert_eq!(index.search("tool_42", 3)[0].name, "tool_42");
        assert_eq!(index.search("tool", 3).len(), 3);
        assert_eq!(index.search("tool", 1000).len(), MAX_SEARCH_RESULTS);
        assert!(index.search("", 5).is_empty());
        assert!(index.search("nothing matches", 5).is_empty());
        assert!(index.search("tool", 0).is_empty());
        assert!(ToolIndex::default().search("tool", 5).is_empty());
        // A huge query is cut, not refused.
        let long = "é".repeat(5000);
        assert!(index.search(&long, 5).is_empty());
    }

    #[test]
    fn a_parsed_query_finds_what_the_raw_one_finds_and_searches_are_counted() {
        let specs: Vec<ToolSpec> = (0..50)
            .map(|i| spec(&format!("tool_{i}"), "A tool.", json!({})))
            .collect();
        let index = ToolIndex::from_specs(&specs);
        let before = index.searches();
        for arguments in [
            json!({"query": "  tool_42 "}),
            json!({"query": "tool", "limit": 3}),
            json!({"query": "tool", "limit": 1000}),
            json!({"query": format!("tool {}", "é".repeat(5000))}),
        ] {
            let query = SearchQuery::parse(&arguments, 5).unwrap();
            assert!(query.query.len() <= MAX_QUERY_BYTES && query.limit <= MAX_SEARCH_RESULTS);
            let raw = index.search(
                arguments["query"].as_str().unwrap(),
                arguments["limit"].as_u64().map_or(5, |l| l as usize),
            );
            assert_eq!(index.search_query(&query), raw, "{arguments}");
        }
        assert_eq!(index.searches() - before, 8);
        assert!(SearchQuery::parse(&json!({"q": "x"}), 5).is_err());
    }

    #[test]
    fn ties_keep_catalog_order() {
        let specs = [
            spec("b_tool", "Same words.", json!({})),
            spec("a_tool", "Same words.", json!({})),
        ];
        let index = ToolIndex::from_specs(&specs);
        let hits = index.search("same words", 5);
        assert_eq!(hits[0].name, "b_tool");
        assert_eq!(hits[1].name, "a_tool");
    }

    #[tokio::test]
    async fn the_search_tool_answers_names_and_descriptions() {
        let specs = [
            spec("get_weather", "Current weather for a city.", json!({})),
            spec("send_email", "Sends an email.", json!({})),
        ];
        let tool = search_tools_tool(Arc::new(ToolIndex::from_specs(&specs)), 5);
        assert_eq!(tool.name(), SEARCH_TOOLS_NAME);
        assert!(tool.spec().description.contains("2 tools"));
        let output = crate::collect_output(tool.invoke(
            json!({"query": "weather"}),
            crate::ToolContext::new("c1", SEARCH_TOOLS_NAME),
        ))
        .await;
        let value = output.result.unwrap();
        assert_eq!(value["tools"][0]["name"], "get_weather");
        assert_eq!(
            value["tools"][0]["description"],
            "Current weather for a city."
        );
        assert_eq!(value["tools"].as_array().unwrap().len(), 1);

        let output = crate::collect_output(tool.invoke(
            json!({"q": "weather"}),
            crate::ToolContext::new("c2", SEARCH_TOOLS_NAME),
        ))
        .await;
        let error = output.result.unwrap_err();
        assert!(error.to_string().contains("search_tools takes"), "{error}");
    }
}
