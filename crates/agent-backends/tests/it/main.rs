//! Integration tests for agent-backends: the scripted backend driven the way the loop drives
//! a backend, through the `Backend` trait, and every recorded provider response replayed
//! through its real adapter over loopback HTTP.
//!
//! One binary for the whole crate (see STYLE.md) keeps link times down.

// clippy.toml allows unwrap inside #[test] fns only; the shared helpers here are test code too.
#![allow(clippy::unwrap_used)]

mod backend;
#[cfg(all(feature = "bedrock", feature = "replay"))]
mod bedrock;
#[cfg(all(feature = "providers", feature = "replay"))]
mod cloud;
#[cfg(all(feature = "providers", feature = "replay"))]
mod recordings;
mod turns;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_types::{Backend, BackendError, Message, ModelRequest, StreamEvent};
use futures_util::StreamExt;

/// The request every test sends; the scripted backend only reads its model name.
fn request() -> ModelRequest {
    ModelRequest::new("test-model", vec![Message::user("What is the weather?")])
}

/// Everything one call yields, errors included, until the stream ends.
async fn call(
    backend: &ScriptedBackend,
    request: &ModelRequest,
) -> Vec<Result<StreamEvent, BackendError>> {
    backend.stream(request).collect().await
}

/// The events of one call that must succeed.
async fn events(backend: &ScriptedBackend) -> Vec<StreamEvent> {
    call(backend, &request())
        .await
        .into_iter()
        .map(|item| item.unwrap_or_else(|error| panic!("unexpected error: {error}")))
        .collect()
}

/// The events of a single turn, played as the first call of a fresh backend.
async fn play(turn: ScriptedTurn) -> Vec<StreamEvent> {
    events(&ScriptedBackend::new([turn])).await
}

/// The `message_start` of the `n`th call (from 1) of a request for `test-model`.
fn start(n: usize) -> StreamEvent {
    StreamEvent::MessageStart {
        id: Some(format!("scripted_{n}")),
        model: Some("test-model".into()),
    }
}

fn text(delta: &str) -> StreamEvent {
    StreamEvent::TextDelta {
        delta: delta.into(),
    }
}
