//! Integration tests for agent-server, in one binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod ag_ui;
mod ag_ui_state;
mod approval;
pub(crate) mod attachments;
mod bedrock;
mod checkpoint;
mod connections;
mod console;
mod fields;
mod hardening;
mod idempotency;
mod lifecycle;
mod mcp;
mod openai;
mod responses;
mod sessions;
mod settings;
mod spend;
mod store;
pub(crate) mod structured;
mod sub_agents;
mod support;
mod tenancy;
mod tenant_spend;
mod tool_search;
mod ui_resume;
mod ui_stream;
mod usage;
