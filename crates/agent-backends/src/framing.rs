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

    /// Bytes biased towards the characters that matter to the three framings.
    fn body() -> impl Strategy<Value = Vec<u8>> {
        let interesting = prop::sample::select(vec![
            b'\n', b'\r', b':', b' ', b'd', b'a', b't', b'e', b'{', b'}', b'[', b']', b',', b'"',
            b'\\', 0xC3, 0xA9, 0xFF, b'x',
        ]);
        prop::collection::vec(prop_oneof![interesting, any::<u8>()], 0..256)
    }

    proptest! {
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
