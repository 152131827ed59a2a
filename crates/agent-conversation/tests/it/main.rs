//! Integration tests for agent-conversation: real files in temp dirs, a real SQLite database.

// clippy.toml allows unwrap in `#[test]` functions; the helpers here are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(all(feature = "jsonl", feature = "sqlite"))]
mod all_stores;
#[cfg(any(feature = "jsonl", feature = "sqlite"))]
mod fixtures;
#[cfg(feature = "jsonl")]
mod jsonl;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(any(feature = "jsonl", feature = "sqlite"))]
mod v1_logs;
