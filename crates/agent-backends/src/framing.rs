//! Incremental framing of streamed response bodies.
//!
//! Providers stream in four framings: server-sent events (OpenAI, Anthropic, Gemini with
//! `alt=sse`), newline-delimited JSON (Ollama), one JSON array written element by element
//! (Gemini's `streamGenerateContent` without `alt=sse`), and AWS's binary event stream
//! (Bedrock's `ConverseStream`, [`EventStreamParser`], CRC-checked). Each parser here takes the body's byte
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

mod eventstream;
mod json_array;
mod lines;
mod sse;

use agent_types::{BackendError, BackendErrorKind};

/// The most bytes one frame may hold (an SSE event's data, an NDJSON line, a JSON array's
/// element) before the parser refuses the stream: 64 MiB, the most the driver reads of a
/// whole (non-streamed) body. A frame is buffered only while it is unfinished, so without a
/// bound an upstream that never ends its line would grow the buffer without end.
pub const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;

/// A parser's bound on one frame (see [`MAX_FRAME_BYTES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FrameLimit(usize);

impl Default for FrameLimit {
    fn default() -> Self {
        Self(MAX_FRAME_BYTES)
    }
}

impl FrameLimit {
    /// Appends `more` to the unfinished frame in `buffer`, or refuses the frame when that
    /// would take it past the limit: the one way the parsers grow a carried-over frame.
    fn append(self, buffer: &mut Vec<u8>, more: &[u8], what: &str) -> Result<(), BackendError> {
        self.check(buffer.len(), more.len(), what)?;
        buffer.extend_from_slice(more);
        Ok(())
    }

    /// Refuses a frame that would hold more than the limit once `more` bytes join the
    /// `held` ones.
    fn check(self, held: usize, more: usize, what: &str) -> Result<(), BackendError> {
        if held.saturating_add(more) > self.0 {
            return Err(malformed(format!(
                "{what} is larger than {} bytes: the stream is refused rather than buffered",
                self.0
            )));
        }
        Ok(())
    }
}

pub use eventstream::{
    EventStreamError, EventStreamMessage, EventStreamParser, HeaderValue, Headers, MAX_HEADERS,
    MAX_MESSAGE, OnMessage, decode_message, encode_message,
};
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

/// `data.trim()`, without the Unicode tables for the common case: an SSE event's data is
/// trimmed once per event of every stream (issue 16). ASCII whitespace goes first; only when a
/// byte that `trim` might still remove is left at either end (a vertical tab, or any
/// non-ASCII character) does `str::trim` decide, so the result is always `trim`'s.
pub(crate) fn trim_data(data: &str) -> &str {
    let ascii = data.trim_ascii();
    let unsure = |byte: Option<&u8>| byte.is_some_and(|&byte| byte >= 0x80 || byte == 0x0B);
    if unsure(ascii.as_bytes().first()) || unsure(ascii.as_bytes().last()) {
        return data.trim();
    }
    ascii
}

/// Finds the next line terminator (`\n` or `\r`) in `bytes`.
fn find_eol(bytes: &[u8]) -> Option<usize> {
    memchr::memchr2(b'\n', b'\r', bytes)
}

#[cfg(test)]
mod props {
    //! Random bytes, split at random places: the parsers never panic, and where they succeed
    //! the frames do not depend on the split.

    use proptest::prelude::*;

    use super::*;

    fn splits(body: &[u8], cuts: &[prop::sample::Index]) -> Vec<Vec<u8>> {
        let mut offsets: Vec<usize> = cuts.iter().map(|cut| cut.index(body.len() + 1)).collect();
        offsets.sort_unstable();
        let mut pieces = Vec::new();
        let mut start = 0;
        for offset in offsets {
            pieces.push(body[start..offset].to_vec());
            start = offset;
        }
        pieces.push(body[start..].to_vec());
        pieces
    }

    fn sse(pieces: &[Vec<u8>]) -> Result<Vec<(String, String)>, String> {
        let mut parser = SseParser::new();
        let mut seen = Vec::new();
        let mut on = |event: SseEvent<'_>| {
            seen.push((event.event.to_owned(), event.data.to_owned()));
            Ok(())
        };
        for piece in pieces {
            parser.feed(piece, &mut on).map_err(|e| e.message)?;
        }
        parser.finish(&mut on).map_err(|e| e.message)?;
        Ok(seen)
    }

    fn ndjson(pieces: &[Vec<u8>]) -> Result<Vec<String>, String> {
        let mut parser = NdjsonParser::new();
        let mut seen = Vec::new();
        let mut on = |line: &str| {
            seen.push(line.to_owned());
            Ok(())
        };
        for piece in pieces {
            parser.feed(piece, &mut on).map_err(|e| e.message)?;
        }
        parser.finish(&mut on).map_err(|e| e.message)?;
        Ok(seen)
    }

    fn array(pieces: &[Vec<u8>]) -> Result<Vec<String>, String> {
        let mut parser = JsonArrayParser::new();
        let mut seen = Vec::new();
        for piece in pieces {
            parser
                .feed(piece, &mut |element| {
                    seen.push(element.to_owned());
                    Ok(())
                })
                .map_err(|e| e.message)?;
        }
        parser.finish().map_err(|e| e.message)?;
        Ok(seen)
    }

    fn eventstream(pieces: &[Vec<u8>]) -> Result<Vec<(String, Vec<u8>)>, String> {
        let mut parser = EventStreamParser::new();
        let mut seen = Vec::new();
        for piece in pieces {
            parser
                .feed(piece, &mut |message| {
                    seen.push((message.message_type().to_owned(), message.payload.to_vec()));
                    Ok(())
                })
                .map_err(|e| e.message)?;
        }
        parser.finish().map_err(|e| e.message)?;
        Ok(seen)
    }

    /// A valid event stream of a few messages.
    fn event_stream() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            ("[a-zA-Z]{0,12}", prop::collection::vec(any::<u8>(), 0..40)),
            0..5,
        )
        .prop_map(|messages| {
            let mut body = Vec::new();
            for (kind, payload) in messages {
                body.extend(encode_message(
                    &[(":message-type", "event"), (":event-type", &kind)],
                    &payload,
                ));
            }
            body
        })
    }

    /// Bytes biased towards the characters that matter to the three framings.
    fn body() -> impl Strategy<Value = Vec<u8>> {
        let interesting = prop::sample::select(vec![
            b'\n', b'\r', b':', b' ', b'd', b'a', b't', b'e', b'{', b'}', b'[', b']', b',', b'"',
            b'\\', 0xC3, 0xA9, 0xFF, b'x',
        ]);
        prop::collection::vec(prop_oneof![interesting, any::<u8>()], 0..256)
    }

    proptest! {
        // Whitespace of every kind `trim` knows (and some it does not) around and inside.
        #[test]
        fn trim_data_is_str_trim(text in "[ \t\n\r\u{b}\u{c}\u{85}\u{a0}\u{2028}\u{3000}\u{200b}a{}é\\[\\]]{0,12}") {
            prop_assert_eq!(trim_data(&text), text.trim());
        }

        #[test]
        fn sse_frames_do_not_depend_on_the_split(body in body(), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8)) {
            let whole = sse(std::slice::from_ref(&body));
            prop_assert_eq!(sse(&splits(&body, &cuts)), whole);
        }

        #[test]
        fn ndjson_lines_do_not_depend_on_the_split(body in body(), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8)) {
            let whole = ndjson(std::slice::from_ref(&body));
            // An error may surface at a different line, but success and the lines agree.
            let split = ndjson(&splits(&body, &cuts));
            prop_assert_eq!(whole.is_ok(), split.is_ok());
            if let (Ok(whole), Ok(split)) = (whole, split) {
                prop_assert_eq!(whole, split);
            }
        }

        #[test]
        fn array_elements_do_not_depend_on_the_split(body in body(), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8)) {
            let whole = array(std::slice::from_ref(&body));
            let split = array(&splits(&body, &cuts));
            prop_assert_eq!(whole.is_ok(), split.is_ok());
            if let (Ok(whole), Ok(split)) = (whole, split) {
                prop_assert_eq!(whole, split);
            }
        }

        #[test]
        fn event_stream_messages_do_not_depend_on_the_split(body in event_stream(), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8)) {
            let whole = eventstream(std::slice::from_ref(&body));
            prop_assert!(whole.is_ok());
            prop_assert_eq!(eventstream(&splits(&body, &cuts)), whole);
        }

        #[test]
        fn mutated_event_streams_are_errors_never_panics(
            body in event_stream(),
            at in any::<prop::sample::Index>(),
            flip in 1u8..=255,
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            prop_assume!(!body.is_empty());
            let mut mutated = body.clone();
            mutated[at.index(body.len())] ^= flip;
            // CRC32 catches every single-byte change: the stream is refused, whatever the split.
            prop_assert!(eventstream(std::slice::from_ref(&mutated)).is_err());
            prop_assert!(eventstream(&splits(&mutated, &cuts)).is_err());
        }

        #[test]
        fn random_bytes_never_panic_the_event_stream_parser(body in body(), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8)) {
            let whole = eventstream(std::slice::from_ref(&body));
            let split = eventstream(&splits(&body, &cuts));
            prop_assert_eq!(whole.is_ok(), split.is_ok());
        }

        #[test]
        fn arrays_of_real_json_split_anywhere_give_their_elements(
            values in prop::collection::vec(prop::collection::btree_map("[a-zé\"\\\\\\]\\[{}]{0,6}", any::<i32>(), 0..4), 0..5),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let elements: Vec<String> = values.iter().map(|v| serde_json::to_string(v).unwrap()).collect();
            let body = format!("[{}]", elements.join("\r\n,\n"));
            prop_assert_eq!(array(&splits(body.as_bytes(), &cuts)).unwrap(), elements);
        }
    }
}
