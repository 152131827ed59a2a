//! Integration tests for agent-loop: the loop run against the scripted backend with real
//! tools, real appenders (in memory and JSONL files) and tokio's paused clock for anything
//! timed.
//!
//! One binary for the whole crate (see STYLE.md) keeps link times down. Each module owns one
//! area; shared helpers live in `support`.

// clippy.toml allows unwrap inside #[test] fns only; the shared helpers here are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agents;
mod approval;
mod budgets;
mod cancellation;
mod checkpoint;
mod conversation;
mod fallback;
mod guardrail;
mod history;
mod hooks;
mod modes;
mod output;
mod prepare;
mod recorded_output;
mod sessions;
mod streaming;
mod support;
mod telemetry;
mod tool_search;
mod tools;
