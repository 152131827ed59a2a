//! Incremental framing of streamed response bodies.
//!
//! Providers stream in three framings: server-sent events (OpenAI, Anthropic, Gemini with
//! `alt=sse`), newline-delimited JSON (Ollama), and one JSON array written element by element
//! (Gemini's `streamGenerateContent` without `alt=sse`). Each parser here takes the body's byte
//! chunks as they arrive, split anywhere (inside a line, a CRLF pair or a multi-byte
//! character), and hands every complete frame to a callback as a `&str`.
//!
//! Every byte is looked at once: a chunk is scanned from where the previous one stopped, and
//! only the unfinished tail of a frame is copied (into a buffer that keeps its capacity), so a
//! long stream costs no allocation per frame once the buffers have grown.
//!
//! Malformed input (bytes that are not UTF-8 where the format requires it, text outside the
//! JSON array) is a [`Protocol`](agent_types::BackendErrorKind::Protocol) error, never a panic.
//!
//! ```
//! use agent_backends::framing::SseParser;
//!
//! let mut parser = SseParser::new();
//! let mut seen = Vec::new();
//! for chunk in [&b"event: ping\r\ndata: {\"a\""[..], b":1}\r\n\r\ndata: done\n\n"] {
//!     parser
//!         .feed(chunk, &mut |event| {
//!             seen.push((event.event.to_owned(), event.data.to_owned()));
//!             Ok(())
//!         })
//!         .unwrap();
//! }
//! assert_eq!(seen[0], ("ping".to_owned(), "{\"a\":1}".to_owned()));
//! assert_eq!(seen[1], ("".to_owned(), "done".to_owned()));
//! ```

mod json_array;
mod lines;
mod sse;

use agent_types::{BackendError, BackendErrorKind};

pub use json_array::JsonArrayParser;
pub use lines::NdjsonParser;
pub use sse::{SseEvent, SseParser};

/// The callback that receives each complete line or element; an error stops parsing (the
/// parser passes it through).
pub type OnText<'f> = dyn for<'x> FnMut(&'x str) -> Result<(), BackendError> + 'f;

/// The callback that receives each complete server-sent event; an error stops parsing.
pub type OnEvent<'f> = dyn for<'x> FnMut(SseEvent<'x>) -> Result<(), BackendError> + 'f;

fn malformed(message: impl Into<String>) -> BackendError {
    BackendError::new(BackendErrorKind::Protocol, message)
}

/// Finds the next line terminator (`\n` or `\r`) in `bytes`.
fn find_eol(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n' || b == b'\r')
}
