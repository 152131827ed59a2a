//! The command line's shared pieces: provider and tool names, loop flags, output flags.
//!
//! Every loop flag is optional here so that a missing flag can fall back to `agentry.toml`
//! and then to the built-in default (see [`crate::config`]).

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};

/// Parses `--provider` (the names of [`agent_backends::Api`]).
pub(crate) fn parse_api(name: &str) -> Result<agent_backends::Api, String> {
    name.parse()
        .map_err(|error: agent_backends::Error| error.to_string())
}

/// A ready-made tool the run may offer the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum BuiltinTool {
    /// Evaluates arithmetic expressions.
    Calculator,
    /// The current date and time.
    Clock,
    /// Reads a text file under `--root` (never outside it, symlinks included).
    #[value(name = "read_file")]
    ReadFile,
}

impl BuiltinTool {
    /// The tool's name as the model sees it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Calculator => "calculator",
            Self::Clock => "clock",
            Self::ReadFile => "read_file",
        }
    }
}

/// How tool arguments are checked (`--validation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Validation {
    /// Arguments must match the schema.
    Strict,
    /// Repair common model mistakes (numbers as strings, stray wrappers), then validate.
    Lenient,
    /// No check.
    None,
}

/// What a failed tool call does (`--on-tool-error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum OnToolError {
    /// The error goes back to the model, which may try again.
    Recover,
    /// The run ends.
    Abort,
}

/// Budget and tool-execution flags, one per loop option.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct LoopArgs {
    /// The most model → tools → model rounds [default: 10]
    #[arg(long, value_name = "N")]
    pub(crate) max_iterations: Option<u32>,
    /// The most tokens for the whole run, every call's input and output; each request must
    /// fit what is left before it is sent [default: none]
    #[arg(long, value_name = "TOKENS")]
    pub(crate) token_budget: Option<u64>,
    /// The most US dollars for the whole run, priced by the rate card [default: none]
    #[arg(long, value_name = "USD")]
    pub(crate) max_cost_usd: Option<f64>,
    /// Run the tool calls of one round concurrently (the default)
    #[arg(long, overrides_with = "serial")]
    pub(crate) parallel: bool,
    /// Run the tool calls of one round one after another
    #[arg(long, overrides_with = "parallel")]
    pub(crate) serial: bool,
    /// Cut each tool result the model sees to this many bytes [default: 65536]
    #[arg(long, value_name = "BYTES")]
    pub(crate) tool_result_max_bytes: Option<usize>,
    /// How tool arguments are checked against the tool's schema [default: strict]
    #[arg(long, value_enum)]
    pub(crate) validation: Option<Validation>,
    /// What a failed tool call does [default: recover]
    #[arg(long, value_enum, value_name = "MODE")]
    pub(crate) on_tool_error: Option<OnToolError>,
    /// End the run when the same call is made N times in a row; 0 never [default: 3]
    #[arg(long, value_name = "N")]
    pub(crate) max_repeated_calls: Option<u32>,
    /// With more than N tools (built-ins and MCP), offer a `search_tools` tool and load what
    /// it finds instead of every definition (docs/mcp.md, "Large tool catalogs") [default: off]
    #[arg(long, value_name = "N")]
    pub(crate) tool_search_threshold: Option<usize>,
    /// Append a row per model call and per tool call to this SQLite file (created when
    /// missing); read it with `agentry usage FILE`
    #[arg(long, value_name = "FILE")]
    pub(crate) accounting: Option<PathBuf>,
    /// Ask before every call of TOOL (repeatable): on a terminal y/n per call, otherwise
    /// exit 4 with the waiting calls (continue with `agentry resume --approve/--deny`)
    #[arg(long = "require-approval", value_name = "TOOL")]
    pub(crate) require_approval: Vec<String>,
    /// A ready-made guardrail (repeatable): `pii` redacts emails, phones, cards, IBANs and API
    /// keys from tool results and stops on a key or card in the input (docs/guardrails.md)
    #[arg(long = "guardrail", value_name = "NAME")]
    pub(crate) guardrails: Vec<String>,
    /// A Rego tool-call policy (package `agentry`, `deny` and `require_approval` sets)
    #[arg(long, value_name = "FILE.rego")]
    pub(crate) policy: Option<PathBuf>,
}

impl LoopArgs {
    /// `--parallel` / `--serial`, whichever came last; `None` when neither was given.
    pub(crate) fn parallel(&self) -> Option<bool> {
        if self.serial {
            Some(false)
        } else if self.parallel {
            Some(true)
        } else {
            None
        }
    }
}

/// Which model to call, where, and with which tools.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct ModelArgs {
    /// The provider API: openai, openai-responses, anthropic, gemini, ollama,
    /// openai-compatible, vertex-gemini, vertex-anthropic, azure-openai,
    /// azure-openai-responses or bedrock [default: from agentry.toml, else openai]
    #[arg(long, value_parser = parse_api, value_name = "API")]
    pub(crate) provider: Option<agent_backends::Api>,
    /// The model [default: the provider's default, see `agentry run --help`]
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// The API's base URL (e.g. http://localhost:8000/v1 for a local server)
    #[arg(long, value_name = "URL")]
    pub(crate) base_url: Option<String>,
    /// The system prompt
    #[arg(long)]
    pub(crate) system: Option<String>,
    /// Cap on each model call's output tokens
    #[arg(long, value_name = "TOKENS")]
    pub(crate) max_output_tokens: Option<u32>,
    /// Offer a built-in tool (repeatable)
    #[arg(long = "tool", value_enum, value_name = "TOOL")]
    pub(crate) tools: Vec<BuiltinTool>,
    /// The directory read_file may read (required with --tool read_file)
    #[arg(long, value_name = "DIR")]
    pub(crate) root: Option<PathBuf>,
    /// Settings file [default: $AGENTRY_CONFIG, else ./agentry.toml when present]
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
}

/// How the run is shown.
#[derive(Debug, Clone, Copy, Default, Args)]
pub(crate) struct OutputArgs {
    /// Print one agent event per line as JSON (the documented event format) instead of text
    #[arg(long)]
    pub(crate) json: bool,
}

/// How the final answer is asked for (`--output-strategy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputStrategyArg {
    /// The provider's own structured output when it has one, else a final-answer tool
    #[default]
    Auto,
    /// The provider's own structured output (refused where there is none)
    Native,
    /// A final-answer tool the model must call
    Tool,
    /// The schema in the system prompt, the JSON parsed from the answer
    Prompted,
}

impl From<OutputStrategyArg> for agent_loop::OutputStrategy {
    fn from(strategy: OutputStrategyArg) -> Self {
        match strategy {
            OutputStrategyArg::Auto => Self::Auto,
            OutputStrategyArg::Native => Self::Native,
            OutputStrategyArg::Tool => Self::Tool,
            OutputStrategyArg::Prompted => Self::Prompted,
        }
    }
}

/// What goes with the prompt and what shape the answer takes (`agentry run` only).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct PromptArgs {
    /// Attach an image (PNG, JPEG, GIF, WEBP) or document (PDF, .txt/.md text) to the prompt,
    /// at most 20 MiB each (repeatable)
    #[arg(long = "file", value_name = "PATH")]
    pub(crate) files: Vec<PathBuf>,
    /// Write one self-contained HTML page of the run (conversation, timeline, usage) to
    /// this file when it ends
    #[arg(long, value_name = "run.html", conflicts_with = "accounting")]
    pub(crate) report: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) schema: SchemaArgs,
}

/// A structured answer (`agentry run` and `agentry resume`).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct SchemaArgs {
    /// Ask for an answer matching this JSON Schema (a file holding an object schema); stdout
    /// gets only the validated JSON object, on one line
    #[arg(long, value_name = "SCHEMA.json")]
    pub(crate) output_schema: Option<PathBuf>,
    /// How the structured answer is asked for [default: auto]
    #[arg(long, value_enum, value_name = "STRATEGY", requires = "output_schema")]
    pub(crate) output_strategy: Option<OutputStrategyArg>,
    /// How many times an answer that fails the schema goes back to the model with the
    /// problems [default: 1]
    #[arg(long, value_name = "N", requires = "output_schema")]
    pub(crate) max_output_retries: Option<u32>,
}
