//! Tools for agentry: define them, register them, check their arguments, run them, and cap
//! their results.
//!
//! A [`Tool`] is a [`ToolSpec`](agent_types::ToolSpec) (name, description, JSON Schema of the
//! arguments) plus an optional [`Handler`]; a tool without one is *remote* and run by the
//! loop's caller. This crate gives you:
//!
//! - **Constructors**: [`Tool::from_fn`] (typed async fn, schema derived from the argument
//!   type), [`Tool::from_json_fn`] (raw schema, raw JSON), [`Tool::streaming`] (progress deltas
//!   before the result) and [`Tool::remote`] (spec only).
//! - **A [`Registry`]**: unique, valid names; schemas compiled once at registration; per-call
//!   narrowing by allow-list and by the [`Caller`]'s permissions; listings sorted by name.
//! - **Validation** in three [modes](ValidationMode): strict, lenient ([`repair`] the usual
//!   model mistakes, report each repair, then validate) and none. Failures are
//!   [`InvalidArguments`] whose message names each failing argument in words a model can act on.
//! - **Safe invocation**: [`Tool::invoke`] catches handler panics, honors the cancellation token
//!   in the [`ToolContext`] and always ends with exactly one result. Handlers fail with a
//!   [`ToolError`] that says whether the model should see it or the loop must stop.
//! - **Truncation**: [`truncate_result`] renders a result (a JSON string as its raw text,
//!   anything else as compact JSON) and caps it under a [`TruncationPolicy`] (65,536 bytes by
//!   default, counted once JSON-escaped as in the request: see [`escaped_len`]) at a UTF-8
//!   boundary, with a marker stating the full size, keeping no memory for what it cut.
//!   Handlers learn the cap from [`ToolContext::max_result_bytes`] and should read no more.
//! - **Resources as tools**: [`resource`] turns an application's collection of records into
//!   `get_`/`search_`/`create_`/`update_`/`delete_<resource>` tools, for exactly the verbs it
//!   implements, with schemas from its types, a read or write permission per verb, bounded
//!   arguments, and each call its own unit of work.
//! - **Names**: [`validate_name`], [`sanitize_name`] and [`tool_name`] for the providers'
//!   common rule `^[a-zA-Z0-9_-]{1,64}$`.
//!
//! It is not the agent loop: it does not call models, schedule handlers, enforce budgets or
//! record traces. It does not talk to providers, so it pulls no HTTP client.
//!
//! # Schema dialect
//!
//! Schemas derived by [`schema_for`] are a subset of JSON Schema draft 2020-12 that providers
//! accept: every subschema is inlined (no `$ref`/`$defs`, except for the recursive part of a
//! recursive type), and the root `$schema` and `title` are dropped, as are schemars' Rust
//! number formats (`uint32`, `double`…). Doc comments on fields become `description`s. An
//! `Option<T>` field is optional and accepts `null`. Schemas are compiled as draft 2020-12.
//! The root of a parameters schema must be `"type": "object"`.
//!
//! # Example
//!
//! ```
//! use agent_tools::{Registry, Tool, ToolContext, ToolError, TruncationPolicy, ValidationMode};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use serde_json::json;
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Add {
//!     /// The first addend.
//!     a: i64,
//!     /// The second addend.
//!     b: i64,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut tools = Registry::new();
//! tools.register(Tool::from_fn("add", "Adds two integers.", |args: Add, _ctx| async move {
//!     args.a.checked_add(args.b).ok_or_else(|| ToolError::respond_to_model("overflow"))
//! }))?;
//!
//! let add = tools.get("add").ok_or("not registered")?;
//! // The model sent a number as a string: strict mode says what is wrong…
//! let err = add.validate(json!({"a": "2", "b": 3}), ValidationMode::Strict).unwrap_err();
//! assert_eq!(err.problems[0].message, "argument `/a`: expected an integer, got the string \"2\"");
//! // …lenient mode repairs it and says what it did.
//! let ok = add.validate(json!({"a": "2", "b": 3}), ValidationMode::Lenient)?;
//! assert_eq!(ok.repairs.len(), 1);
//!
//! let output = agent_tools::collect_output(add.invoke(ok.arguments, ToolContext::new("call_1", "add"))).await;
//! assert_eq!(output.result?, json!(5));
//!
//! let sent = agent_tools::truncate_result(json!("x".repeat(100_000)), &TruncationPolicy::default());
//! assert!(sent.truncated && sent.sent_bytes <= 65_536);
//! assert!(sent.text.ends_with("[…truncated; full result 100000 bytes]"));
//! # Ok(())
//! # }
//! ```

#[cfg(feature = "builtin")]
pub mod builtin;
mod content;
mod context;
mod error;
mod handler;
mod name;
mod nesting;
mod registry;
mod repair;
pub mod resource;
mod schema;
mod tool;
pub mod tool_search;
mod truncate;
mod validate;

pub use content::{BinaryCap, DEFAULT_MAX_BINARY_BYTES, ToolContent, binary_len, cap_binary};
pub use context::{Accounting, AccountingTotals, Caller, ContentSlot, ToolContext};
pub use error::{Error, ToolError, ToolErrorKind};
pub use handler::{Handler, ToolEvent, ToolOutput, ToolStream, collect_output};
pub use name::{MAX_NAME_LEN, sanitize_name, tool_name, validate_name};
pub use nesting::{BudgetLeft, EventSink};
pub use registry::{RegisteredTool, Registry};
pub use repair::{Repair, RepairKind, repair};
pub use schema::{json_depth, schema_for};
pub use tool::Tool;
pub use tool_search::{
    Hit, MAX_SEARCH_RESULTS, SEARCH_TOOLS_NAME, SearchQuery, ToolIndex, run_search,
    search_tools_tool,
};
pub use truncate::{
    Truncated, TruncationPolicy, escaped_len, marker, render_result, truncate, truncate_result,
};
pub use validate::{ArgumentValidator, InvalidArguments, Problem, Validated, ValidationMode};
