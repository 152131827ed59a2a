//! The backend trait: what the loop needs from a model provider, and nothing about HTTP.

use std::pin::Pin;

use futures_core::Stream;
use serde::{Deserialize, Serialize};

use crate::error::BackendError;
use crate::request::ModelRequest;
use crate::stream::StreamEvent;

/// The stream a backend returns: normalized events, or an error that ends it.
pub type BackendStream<'a> =
    Pin<Box<dyn Stream<Item = Result<StreamEvent, BackendError>> + Send + 'a>>;

/// What a backend can do. The loop checks these before any request is sent: declaring tools
/// against a backend without tool support is a configuration error, not a silent drop.
///
/// In JSON a missing flag reads as `false`, so a capability added later does not break older
/// documents.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct Capabilities {
    /// The model can be given tools and asked to call them.
    pub tools: bool,
    /// Output arrives incrementally.
    pub streaming: bool,
    /// One turn may request several tool calls.
    pub parallel_tool_calls: bool,
    /// The model can expose reasoning.
    pub thinking: bool,
    /// The provider caches prompt prefixes.
    pub prompt_caching: bool,
    /// The provider reports token usage.
    pub usage_reporting: bool,
    /// The adapter sends [`ModelRequest::response_format`] as the provider's own
    /// schema-constrained output (the `Native` structured-output strategy); without it the
    /// field is ignored and the loop uses a final-answer tool or the prompt instead.
    pub structured_output: bool,
    /// The adapter sends tools marked [`ToolSpec::defer_loading`](crate::ToolSpec::defer_loading)
    /// behind the provider's own tool-search tool, which loads them when the model searches;
    /// without it the loop's tool search offers a `search_tools` tool of its own instead.
    pub tool_search: bool,
}

/// A model provider.
///
/// `stream` starts one model call and returns its events. The call is cancelled by dropping the
/// stream, which is why the trait needs no runtime and no cancellation token: whoever polls the
/// stream (the loop, under its own cancellation) decides how long it lives. Backends that do
/// not stream natively still return a stream, built from their one response.
pub trait Backend: Send + Sync {
    /// What this backend supports.
    fn capabilities(&self) -> Capabilities;

    /// Starts one model call. The request is borrowed for the life of the stream.
    fn stream<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a>;

    /// As [`stream`](Self::stream), for a caller that folds every event into a
    /// [`MessageAssembler`](crate::MessageAssembler) of its own (the loop does): the backend
    /// may skip assembling the message itself, and then an error after output carries no
    /// [`partial`](crate::BackendError::partial) message (the caller has it). The HTTP
    /// adapters do so; the default is `stream`.
    fn stream_unassembled<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        self.stream(request)
    }

    /// The request's input tokens as this provider counts them, when the backend can tell
    /// locally and cheaply (a tokenizer it ships, a count it cached). The loop calls it before
    /// every model call to check the request against the run's budgets, so it must not make
    /// a network call. `None` (the default) lets the loop use its own estimate.
    fn count_input_tokens(&self, request: &ModelRequest) -> Option<u64> {
        let _ = request;
        None
    }

    /// The provider's name as OpenTelemetry's GenAI conventions spell it
    /// (`gen_ai.provider.name`: `openai`, `anthropic`, `gcp.gemini`, `ollama`, …). The loop
    /// puts it on its spans; a backend that does not say is `unknown`.
    fn provider_name(&self) -> &str {
        "unknown"
    }
}

impl<B: Backend + ?Sized> Backend for &B {
    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }

    fn stream<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        (**self).stream(request)
    }
    fn stream_unassembled<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        (**self).stream_unassembled(request)
    }
    fn count_input_tokens(&self, request: &ModelRequest) -> Option<u64> {
        (**self).count_input_tokens(request)
    }

    fn provider_name(&self) -> &str {
        (**self).provider_name()
    }
}

impl<B: Backend + ?Sized> Backend for std::sync::Arc<B> {
    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }

    fn stream<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        (**self).stream(request)
    }
    fn stream_unassembled<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        (**self).stream_unassembled(request)
    }
    fn count_input_tokens(&self, request: &ModelRequest) -> Option<u64> {
        (**self).count_input_tokens(request)
    }

    fn provider_name(&self) -> &str {
        (**self).provider_name()
    }
}

impl<B: Backend + ?Sized> Backend for Box<B> {
    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }

    fn stream<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        (**self).stream(request)
    }
    fn stream_unassembled<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        (**self).stream_unassembled(request)
    }
    fn count_input_tokens(&self, request: &ModelRequest) -> Option<u64> {
        (**self).count_input_tokens(request)
    }

    fn provider_name(&self) -> &str {
        (**self).provider_name()
    }
}
