//! Project automation for agentry, run as `cargo xtask <command>`.
//!
//! `ci` runs everything CI runs, in the order that fails fastest; `layering` checks only the
//! dependency rules; `bench` runs the benchmarks; `fuzz` runs a long fuzzing campaign. Plain std and `cargo` subprocesses, so the
//! xtask builds in seconds on a cold machine.

// xtask is a command-line program: printing is its job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod bench;
mod chaos;
mod ci;
mod fuzz;
mod layering;
mod snapshots;
mod step;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  ci         fmt, layering, clippy, tests (nextest when present), doc tests,
             snapshot check, docs, and single-layer builds: everything CI runs
  layering   check the crate dependency rules with `cargo tree`
  chaos      the fault suite: [--runs N] seeded runs (default 2 per fault class) from
             [--seed S] against a real `agentry serve`; [--all] adds the classes that
             wait for unmerged features (docs/reliability.md)
  bench      run the benchmarks of agent-tools, agent-loop, agent-backends (parse
             throughput), agentry (loopback agent runs, sequential and 256 at once:
             CPU per run and peak RSS against a hand-written reqwest floor) and agent-mcp (a tool call in
             process, over MCP stdio and HTTP: to server-everything and to our own
             server) and agent-otel (the loop with the OpenTelemetry layer against
             without) and agent-guardrails (PII redaction of a 64 KB result per
             round against none); each reports ratios to a baseline measured in the same run;
             at the end, every issue-16 target with its ratio and MET / NOT MET
  fuzz       a long fuzzing campaign: [--cases N] per property (default 100000),
             [--target backends|conversation|loop|server|cli] (docs/reliability.md)
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci::run(),
        Some("layering") => layering::run(),
        Some("chaos") => chaos::run(&args[1..]),
        // One cargo invocation builds both benches with one feature resolution, instead
        // of rebuilding the shared dependencies for each.
        Some("bench") => bench::run(&[
            "bench",
            "-p",
            "agent-tools",
            "--bench",
            "tools",
            "-p",
            "agent-loop",
            "--bench",
            "loop",
            "--bench",
            "tool_search",
            "-p",
            "agent-backends",
            "--bench",
            "parse",
            "-p",
            "agentry",
            "--bench",
            "loopback",
            "-p",
            "agent-server",
            "--bench",
            "load",
            "-p",
            "agent-mcp",
            "--bench",
            "client",
            "--bench",
            "transport",
            "-p",
            "agent-otel",
            "--bench",
            "otel",
            "-p",
            "agent-guardrails",
            "--bench",
            "guardrails",
            "--features",
            "agent-backends/providers,agent-backends/replay,agentry/openai,agentry/replay",
        ]),
        Some("fuzz") => fuzz::run(&args[1..]),
        Some("help" | "--help" | "-h") => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprint!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}
