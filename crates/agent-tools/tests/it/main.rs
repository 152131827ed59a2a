//! Integration tests for agent-tools, in one binary to keep link times down.

// Helpers outside `#[test]` fns are test code too: a panic there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "builtin")]
mod builtin;
mod handlers;
mod registry;
mod repair_props;
mod schema;
mod validation;
