//! `agentry`: the command-line face of the agentry workspace.
//!
//! - `agentry demo` runs an `auto`-mode agent offline: a recorded provider conversation is
//!   replayed over loopback HTTP through the real adapter while real tools run.
//! - `agentry run` runs the same loop against a real provider, with built-in tools, budgets,
//!   remote tools and an optional session file; `agentry resume` continues a session that
//!   stopped for remote tool results.
//! - `agentry replay` decodes one recorded provider response through the real adapter.
//! - `agentry trust` records a project's `agentry.toml` as the user's, so that it may set
//!   where the key goes and what tools reach (see `trust`).
//!
//! Output formats, exit codes and `agentry.toml` are documented in `docs/cli.md`.

// Printing is this program's job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod accounting;
mod agent;
mod approval;
mod args;
mod attach;
mod config;
#[cfg(test)]
mod config_fuzz;
mod demo;
mod endpoint;
mod error;
mod exit;
mod guardrails;
mod mcp;
mod mcp_serve;
mod render;
mod replay;
mod report;
mod run;
mod serve;
mod session_checkpoint;
mod session_file;
mod telemetry;
mod temporal;
mod trust;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use agent_backends::Api;

use crate::args::{LoopArgs, ModelArgs, OutputArgs, PromptArgs, SchemaArgs, parse_api};
use crate::mcp::McpArgs;
use crate::render::Renderer;

const EXIT_CODES: &str = "\
Exit status: 0 done, 1 error, 2 usage (bad flags, configuration, missing key, or settings \
refused from an untrusted file), 3 budget exceeded, 4 awaiting remote tool results or approval, 130 aborted \
(Ctrl-C).";

const RUN_HELP: &str = "\
Keys come from OPENAI_API_KEY (openai, openai-responses, openai-compatible), ANTHROPIC_API_KEY, \
GEMINI_API_KEY (or GOOGLE_API_KEY); Ollama needs none and honours OLLAMA_HOST.
Default models: openai and openai-responses gpt-5-mini, anthropic claude-sonnet-4-5, gemini \
gemini-2.5-flash, ollama qwen3; openai-compatible needs --model.
Flags win over agentry.toml, which wins over your own config.toml (in $XDG_CONFIG_HOME/agentry \
or ~/.config/agentry), which wins over the defaults. A ./agentry.toml you have not trusted \
(`agentry trust`) may not set base_url, a provider paired with a base URL, read_file, root \
or [[mcp]] servers.

Exit status: 0 done, 1 error, 2 usage (bad flags, configuration, missing key, or settings \
refused from an untrusted file), 3 budget exceeded, 4 awaiting remote tool results or approval, 130 aborted \
(Ctrl-C).";

/// Run LLM tool-calling agents, offline or against real providers.
#[derive(Debug, Parser)]
#[command(name = "agentry", version, about, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an agent offline: a recorded conversation replayed through the real adapter over
    /// loopback HTTP, with real tools (weather table, calculator, clock) in auto mode.
    #[command(after_help = EXIT_CODES)]
    Demo {
        /// Whose recorded conversation to replay: anthropic, openai, openai-responses,
        /// gemini, ollama or bedrock
        #[arg(long, value_parser = parse_api, default_value = "anthropic", value_name = "API")]
        provider: Api,
        #[command(flatten)]
        loop_args: LoopArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Run an agent against a real provider.
    #[command(after_help = RUN_HELP)]
    Run {
        /// The prompt (several words are joined with spaces); read from stdin when omitted
        prompt: Vec<String>,
        #[command(flatten)]
        model: ModelArgs,
        /// Declare a tool you run yourself (repeatable): the run stops with its pending calls
        /// printed as JSON; continue with `agentry resume`
        #[arg(long = "remote-tool", value_name = "NAME")]
        remote_tools: Vec<String>,
        /// Keep the session in FILE (JSONL; SQLite for .db/.sqlite/.sqlite3), continuing it
        /// if it exists; every turn is stored as it completes
        #[arg(long, value_name = "FILE")]
        session: Option<PathBuf>,
        #[command(flatten)]
        attach: PromptArgs,
        #[command(flatten)]
        mcp: McpArgs,
        #[command(flatten)]
        loop_args: LoopArgs,
        #[command(flatten)]
        output: OutputArgs,
        /// Run it as a Temporal workflow (docs/durable.md)
        #[command(flatten)]
        temporal: temporal::TemporalArgs,
    },
    /// Serve durable runs: a Temporal worker for the `agent_run` workflow and its activities,
    /// with the model and tools of the flags and agentry.toml (docs/durable.md).
    #[command(after_help = EXIT_CODES)]
    Worker {
        #[command(flatten)]
        temporal: temporal::TemporalArgs,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        loop_args: LoopArgs,
    },
    /// Continue a session that stopped for remote tool calls, with their results, or for
    /// approval, with decisions.
    #[command(after_help = RUN_HELP)]
    Resume {
        /// The session file given to `agentry run --session`
        #[arg(long, value_name = "FILE", required_unless_present = "address")]
        session: Option<PathBuf>,
        /// The results: {"CALL_ID": OUTPUT, …} or [{"tool_call_id", "content", "is_error"}];
        /// `-` reads stdin
        #[arg(long, value_name = "RESULTS.json", required_unless_present_any = ["approve", "deny"])]
        results: Option<PathBuf>,
        #[command(flatten)]
        approvals: approval::ApprovalArgs,
        #[command(flatten)]
        model: ModelArgs,
        // The answer schema is not stored in the session: a resumed run is given it again.
        #[command(flatten)]
        schema: SchemaArgs,
        #[command(flatten)]
        mcp: McpArgs,
        #[command(flatten)]
        loop_args: LoopArgs,
        #[command(flatten)]
        output: OutputArgs,
        /// Signal a run on Temporal instead (with --workflow)
        #[command(flatten)]
        temporal: temporal::TemporalArgs,
    },
    /// Serve agent sessions over HTTP + SSE and an OpenAI-compatible endpoint, from the
    /// [server] section of agentry.toml (docs/server.md); SIGTERM or Ctrl-C drains and stops.
    Serve {
        /// The configuration file [default: ./agentry.toml, only when you have trusted it
        /// with `agentry trust`]
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Listen here instead of [server].listen (e.g. 127.0.0.1:0 for any free port)
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// The log's format on stderr: text (coloured on a terminal) or json, one object a
        /// line; RUST_LOG filters it [default filter: info]
        #[arg(long, value_name = "FORMAT", value_enum, default_value = "text")]
        log_format: serve::LogFormat,
    },
    /// MCP (Model Context Protocol): list the tools of MCP servers, or serve agentry's tools
    /// to MCP clients (docs/mcp.md).
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
    /// Trust a project's agentry.toml (or a session state file) to set where your key goes
    /// and what tools may read: records its path and SHA-256 in your configuration directory.
    /// A file that changes afterwards is untrusted again.
    #[command(after_help = EXIT_CODES)]
    Trust {
        /// The file to trust [default: ./agentry.toml]
        #[arg(value_name = "FILE")]
        file: Option<PathBuf>,
        /// List the trusted files and whether each is unchanged
        #[arg(long, conflicts_with_all = ["file", "remove"])]
        list: bool,
        /// Forget a trusted file
        #[arg(long, value_name = "FILE", conflicts_with = "file")]
        remove: Option<PathBuf>,
    },
    /// Print what the runs recorded with `--accounting FILE` used and cost: model calls,
    /// tokens by kind and dollars, grouped by model, session or UTC day.
    #[command(after_help = EXIT_CODES)]
    Usage {
        /// The accounting file given to `--accounting`
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// One line per model, session or day
        #[arg(long, value_enum, default_value = "model")]
        by: accounting::By,
        /// The last N days (1 to 366)
        #[arg(long, value_name = "N", default_value_t = 30)]
        days: u32,
        /// One JSON object instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Decode a recorded provider response body through the real adapter and print the
    /// normalized assistant message as one JSON object.
    ///
    /// Exit status: 0 when the response decodes to a complete message, 1 when it is a
    /// provider error or malformed (the partial message still goes to stdout, the error to
    /// stderr), 2 for bad arguments.
    Replay {
        /// The provider whose wire format FILE is in.
        #[arg(long, value_parser = replay::parse_provider)]
        provider: agent_backends::Provider,
        /// The HTTP status to serve the body with (default: from a file name like
        /// `error-429-….json`, else 200).
        #[arg(long)]
        status: Option<u16>,
        /// A raw response body: SSE, NDJSON, a JSON array stream, or one JSON document
        /// (detected from the bytes).
        file: PathBuf,
    },
}

/// `agentry mcp …`.
#[derive(Debug, Subcommand)]
enum McpCommand {
    /// Connect to MCP servers and print each tool they give a run as one JSON line
    /// (`name`, `description`, `input_schema`), for scripts and for debugging a server.
    #[command(after_help = EXIT_CODES)]
    Tools {
        #[command(flatten)]
        mcp: McpArgs,
        /// Settings file whose [[mcp]] entries are used too [default: $AGENTRY_CONFIG, else
        /// ./agentry.toml when present and trusted]
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Serve the configured tools (--tool flags, else `tools` in agentry.toml), the tools of
    /// the MCP servers it imports (--mcp, [[mcp]]: a proxy) and the products catalog
    /// (--products-db) as an MCP server: over stdin/stdout by default, over streamable HTTP at
    /// http://ADDR/mcp with --listen. A non-loopback ADDR requires AGENTRY_MCP_KEY (clients
    /// send it as a bearer key); on loopback it is optional.
    #[command(after_help = EXIT_CODES)]
    Serve {
        /// The configuration file [default: as for `agentry run`]
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Serve streamable HTTP here instead of stdio (a bare port binds 127.0.0.1; 0 picks a
        /// free one)
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// A built-in tool to serve (repeatable) [default: `tools` in agentry.toml]
        #[arg(long = "tool", value_enum, value_name = "TOOL")]
        tools: Vec<args::BuiltinTool>,
        /// The one directory read_file may read
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
        /// Serve the example products catalog kept in this SQLite file (created when missing):
        /// get_product, search_product, create_product, update_product, delete_product
        #[arg(long, value_name = "FILE")]
        products_db: Option<PathBuf>,
        #[command(flatten)]
        mcp: McpArgs,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The server uses every core; a single run needs only one thread.
    let runtime = match cli.command {
        Command::Serve { .. } | Command::Mcp { .. } => tokio::runtime::Builder::new_multi_thread(),
        _ => tokio::runtime::Builder::new_current_thread(),
    }
    .enable_all()
    .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("agentry: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    // OpenTelemetry for the commands that run agents (docs/observability.md).
    let exports = matches!(
        cli.command,
        Command::Run { .. } | Command::Resume { .. } | Command::Demo { .. } | Command::Serve { .. }
    );
    // `serve` drains on SIGTERM itself; the others are dropped by it (and then flushed).
    let serves = matches!(cli.command, Command::Serve { .. });
    if exports {
        match telemetry::start() {
            Ok(true) if !serves => telemetry::install(),
            Ok(_) => {}
            Err(error) => {
                eprintln!("agentry: {error}");
                return ExitCode::from(error.exit());
            }
        }
    }
    let outcome = runtime.block_on(telemetry::until_terminated(!serves, async {
        match cli.command {
            Command::Replay {
                provider,
                status,
                file,
            } => Ok(replay::run(provider, status, &file).await),
            Command::Worker {
                temporal,
                model,
                loop_args,
            } => temporal::worker(&temporal, &model, &loop_args)
                .await
                .map(ExitCode::from),
            Command::Trust { file, list, remove } => {
                trust::command(file, list, remove).map(|()| ExitCode::SUCCESS)
            }
            Command::Serve {
                config,
                listen,
                log_format,
            } => {
                // The [server] section names the endpoints the operator's keys go to: a file
                // found in the working directory is used only when the user trusted it.
                let config = match config {
                    Some(path) => path,
                    None => trust::require_trusted(std::path::Path::new("agentry.toml"))?,
                };
                serve::run(&config, listen.as_deref(), log_format)
                    .await
                    .map(|()| ExitCode::SUCCESS)
            }
            Command::Mcp { command } => match command {
                McpCommand::Tools { mcp, config } => mcp::tools(&mcp, config.as_deref())
                    .await
                    .map(|()| ExitCode::SUCCESS),
                McpCommand::Serve {
                    config,
                    listen,
                    tools,
                    root,
                    products_db,
                    mcp,
                } => mcp_serve::run(&mcp_serve::ServeRequest {
                    config: config.as_deref(),
                    listen: listen.as_deref(),
                    tools: &tools,
                    root: root.as_deref(),
                    products_db: products_db.as_deref(),
                    mcp: &mcp,
                })
                .await
                .map(|()| ExitCode::SUCCESS),
            },
            Command::Usage {
                file,
                by,
                days,
                json,
            } => accounting::usage(&file, by, days, json)
                .await
                .map(|()| ExitCode::SUCCESS),
            Command::Demo {
                provider,
                loop_args,
                output,
            } => {
                let mut renderer = Renderer::stdio(output.json);
                demo::run(provider, &loop_args, &mut renderer)
                    .await
                    .map(ExitCode::from)
            }
            Command::Run {
                prompt,
                model,
                remote_tools,
                session,
                attach,
                mcp,
                loop_args,
                output,
                temporal,
            } => {
                if temporal.address.is_some() {
                    return temporal::run(&temporal, prompt, &model, &loop_args, output.json)
                        .await
                        .map(ExitCode::from);
                }
                let mut renderer = Renderer::stdio(output.json);
                let request = run::RunRequest {
                    prompt,
                    model: &model,
                    remote_tools: &remote_tools,
                    session: session.as_deref(),
                    attach: &attach,
                    mcp: &mcp,
                    loop_args: &loop_args,
                };
                run::run(request, &mut renderer).await.map(ExitCode::from)
            }
            Command::Resume {
                session,
                results,
                approvals,
                model,
                schema,
                mcp,
                loop_args,
                output,
                temporal,
            } => {
                let Some(session) = session.filter(|_| temporal.address.is_none()) else {
                    return temporal::resume(
                        &temporal,
                        results.as_deref(),
                        &approvals,
                        output.json,
                    )
                    .await
                    .map(ExitCode::from);
                };
                let mut renderer = Renderer::stdio(output.json);
                run::resume(
                    &session,
                    results.as_deref(),
                    &approvals,
                    &model,
                    &schema,
                    &mcp,
                    &loop_args,
                    &mut renderer,
                )
                .await
                .map(ExitCode::from)
            }
        }
    }));
    // Every span and metric out before the process ends (outside the runtime: it blocks).
    telemetry::shutdown();
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("agentry: {error}");
            ExitCode::from(error.exit())
        }
    }
}
