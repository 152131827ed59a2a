//! `agentry`: the command-line face of the agentry workspace.
//!
//! Its first subcommand, `agentry replay`, feeds a recorded provider response through the real
//! adapter (over a loopback HTTP server, so the real HTTP client and framing run too) and
//! prints the normalized assistant message. See `docs/cli.md` for the output format.

// Printing is this program's job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod replay;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Run LLM tool-calling agents, and inspect what providers send.
#[derive(Debug, Parser)]
#[command(name = "agentry", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("agentry: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Command::Replay {
            provider,
            status,
            file,
        } => runtime.block_on(replay::run(provider, status, &file)),
    }
}
