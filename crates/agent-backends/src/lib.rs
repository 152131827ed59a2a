//! Model backends for agentry.
//!
//! A backend turns one model call into the normalized
//! [`StreamEvent`](agent_types::StreamEvent)s of the [`Backend`](agent_types::Backend) trait,
//! which is all the agent loop ever sees of a provider. This crate holds the implementations:
//!
//! - **Provider adapters**, each behind its own cargo feature so a build compiles only the
//!   providers it talks to: [`openai_chat`] (also every OpenAI-compatible server),
//!   [`openai_responses`], [`anthropic`] (with the prompt-cache layout), [`gemini`] and
//!   [`ollama`]. They share one HTTP driver ([`http`]): one connection pool, retries that never
//!   duplicate output, timeouts, and incremental [`framing`] of SSE, NDJSON and JSON-array
//!   streams. `docs/providers.md` has the capability table and every normalization rule. With
//!   `default-features = false` the crate builds no HTTP client and no async runtime.
//! - **Replay** ([`replay`], feature `replay`): recorded provider responses served over
//!   loopback HTTP to the real adapters, for tests, demos and the `agentry replay` command.
//! - **The scripted backend** ([`ScriptedBackend`], feature `scripted`, on by default) replays
//!   canned assistant turns ([`ScriptedTurn`]) with optional delays, usage reports, mid-stream
//!   failures and hangs. It serves the loop's tests and benchmarks and your own: a test of
//!   code built on agentry needs no network, no API key and no recorded bytes.
//!
//! It is not the loop (that is `agent-loop`) and it defines no vocabulary: requests, events,
//! errors and the trait itself live in `agent-types`.
//!
//! # Features
//!
//! | Feature            | Default | What it adds                                                 |
//! |--------------------|---------|--------------------------------------------------------------|
//! | `scripted`         | yes     | [`ScriptedBackend`] and [`ScriptedTurn`]; tokio's timer, no HTTP |
//! | `fallback`         | yes     | [`Fallback`]: the next model when one fails before any output |
//! | `openai`           |         | [`openai_chat::OpenAiChat`] (Chat Completions, compatible servers) |
//! | `openai-responses` |         | [`openai_responses::OpenAiResponses`]                        |
//! | `anthropic`        |         | [`anthropic::Anthropic`]                                     |
//! | `gemini`           |         | [`gemini::Gemini`]                                           |
//! | `ollama`           |         | [`ollama::Ollama`]                                           |
//! | `vertex`           |         | [`cloud::vertex`]: Gemini and Anthropic on Google Vertex AI   |
//! | `azure`            |         | [`cloud::azure`]: the OpenAI adapters on Azure OpenAI        |
//! | `cloud-auth`       |         | [`cloud::token`]: cached, refreshed OAuth2 tokens (implied by the two above) |
//! | `bedrock`          |         | [`bedrock::Bedrock`] (Converse, SigV4 or a Bedrock API key)  |
//! | `providers`        |         | all the adapters and the clouds                              |
//! | `replay`           |         | [`replay`]: cassettes, loopback server, [`replay::ReplayBackend`] |
//! | `http`             |         | the shared driver alone (implied by every adapter)           |
//!
//! # Example
//!
//! A model that asks for a tool, then answers:
//!
//! ```
//! # #[cfg(not(feature = "scripted"))]
//! # fn main() {}
//! # #[cfg(feature = "scripted")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use agent_backends::{ScriptedBackend, ScriptedTurn};
//! use agent_types::{Backend, Message, ModelRequest, StopReason, StreamEvent};
//! use futures_util::StreamExt;
//! use serde_json::json;
//!
//! let backend = ScriptedBackend::new([
//!     ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Denver"})),
//!     ScriptedTurn::text("Sunny in Denver."),
//! ]);
//! let request = ModelRequest::new("test-model", vec![Message::user("Weather in Denver?")]);
//!
//! // The first call asks for the tool...
//! let events: Vec<StreamEvent> = backend.stream(&request).map(Result::unwrap).collect().await;
//! assert!(matches!(&events[1], StreamEvent::ToolCallStart { name, .. } if name == "get_weather"));
//! assert_eq!(
//!     events.last(),
//!     Some(&StreamEvent::Finish { stop_reason: StopReason::ToolCalls })
//! );
//!
//! // ...the second one answers.
//! let events: Vec<StreamEvent> = backend.stream(&request).map(Result::unwrap).collect().await;
//! assert_eq!(
//!     events[1],
//!     StreamEvent::TextDelta { delta: "Sunny in Denver.".into() }
//! );
//!
//! // The script has two turns: a third call is an error, not a hang.
//! let third: Vec<_> = backend.stream(&request).collect().await;
//! assert!(third[0].is_err());
//! assert_eq!(backend.calls(), 3);
//! # }
//! ```

// The docs above link to items that builds without their features lack.
#![cfg_attr(
    not(all(feature = "scripted", feature = "providers", feature = "replay")),
    allow(rustdoc::broken_intra_doc_links)
)]

#[cfg(feature = "providers")]
mod api;
#[cfg(any(feature = "openai", feature = "openai-responses"))]
mod arguments_text;
#[cfg(feature = "cloud-auth")]
pub mod cloud;
#[cfg(feature = "http")]
mod content;
#[cfg(all(test, feature = "providers"))]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod content_tests;
#[cfg(feature = "http")]
mod error;
#[cfg(feature = "fallback")]
mod fallback;
#[cfg(feature = "http")]
pub mod framing;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "http")]
mod provider;
#[cfg(feature = "scripted")]
mod scripted;
#[cfg(feature = "http")]
mod settings;
#[cfg(any(feature = "openai", feature = "openai-responses"))]
mod tools_json;

#[cfg(feature = "anthropic")]
pub mod anthropic;
#[cfg(feature = "bedrock")]
pub mod bedrock;
#[cfg(feature = "gemini")]
pub mod gemini;
#[cfg(feature = "ollama")]
pub mod ollama;
#[cfg(feature = "openai")]
pub mod openai_chat;
#[cfg(feature = "openai-responses")]
pub mod openai_responses;
#[cfg(feature = "replay")]
pub mod replay;

#[cfg(feature = "providers")]
pub use api::Api;
#[cfg(feature = "http")]
pub use error::Error;
#[cfg(feature = "fallback")]
pub use fallback::Fallback;
#[cfg(feature = "http")]
pub use provider::Provider;
#[cfg(feature = "scripted")]
pub use scripted::{ScriptedBackend, ScriptedTurn};
#[cfg(feature = "http")]
pub use settings::SettingsLimits;
