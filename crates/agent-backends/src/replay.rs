//! Recorded provider traffic, replayed through the real adapters.
//!
//! A [`Cassette`] is one recorded response (status, content type, the body's bytes, and
//! optionally the request that produced it). A [`ReplayServer`] is a loopback HTTP/1.1 server
//! that answers each request with the next cassette, in order, and remembers what it was
//! sent; a [`ReplayBackend`] is a provider adapter pointed at such a server. Nothing is mocked
//! between the bytes and the events: the real reqwest client, the real framing and the real
//! adapter run, so a test (yours or ours) or a demo sees exactly what a live provider's bytes
//! would produce.
//!
//! [`decode`] is the same decoding without HTTP: a whole body through one adapter's framing
//! and decoder, for benchmarks and fuzzing. [`RecordedConversation`] turns a multi-round
//! recording into a backend many sessions can share (each request is answered by the round
//! its history has reached), and [`demo`] is the recorded demo conversation.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_backends::Provider;
//! use agent_backends::replay::{Cassette, ReplayBackend};
//! use agent_types::{Backend, Message, ModelRequest};
//! use futures_util::StreamExt;
//!
//! let cassette = Cassette::from_file("fixtures/providers/anthropic/stream-text.sse")?;
//! let backend = ReplayBackend::start(Provider::Anthropic, [cassette]).await?;
//! let request = ModelRequest::new("claude-sonnet-4-5", vec![Message::user("Hi")]);
//! let mut events = backend.stream(&request);
//! while let Some(event) = events.next().await {
//!     println!("{:?}", event?);
//! }
//! # Ok(())
//! # }
//! ```

mod cassette;
mod conversation;
mod server;

pub use cassette::{Cassette, Chunking};
pub use conversation::{RecordedConversation, demo};
pub use server::{RecordedRequest, ReplayBackend, ReplayServer};

use agent_types::{BackendError, ModelRequest, StreamEvent};

use crate::Provider;

/// Decodes a complete response body the way the adapter for `provider` decodes a live one,
/// feeding it in `chunk_size`-byte pieces (0 = one piece), and returns the normalized events.
///
/// `content_type` picks the framing as the HTTP path would (`None` sniffs the body).
///
/// # Errors
///
/// The adapter's error for a malformed body or an in-band provider error, with the partial
/// message attached; [`Unsupported`](agent_types::BackendErrorKind::Unsupported) when the
/// provider's adapter is not compiled in.
pub fn decode(
    provider: Provider,
    request: &ModelRequest,
    content_type: Option<&str>,
    body: &[u8],
    chunk_size: usize,
) -> Result<Vec<StreamEvent>, BackendError> {
    provider.decode(request, content_type, body, chunk_size)
}
