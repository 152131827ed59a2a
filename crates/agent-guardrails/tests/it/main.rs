//! Integration tests for agent-guardrails: property tests of the redactor, and both
//! guardrails in a real loop run against the scripted backend.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod pii;
mod policy;
