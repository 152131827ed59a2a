//! [`Cassette`]: one recorded response and how to serve it.

use std::path::Path;

use bytes::Bytes;

use crate::error::Error;

/// How the server splits a body into HTTP chunks (each written and flushed on its own), to
/// reproduce the splits a parser meets on a real connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Chunking {
    /// The whole body in one write.
    #[default]
    Whole,
    /// Pieces of this many bytes (the last may be shorter); `Every(1)` is the harshest.
    Every(usize),
    /// Cut at these byte offsets (ascending; out-of-range offsets are ignored).
    At(Vec<usize>),
}

impl Chunking {
    /// The body split as planned.
    pub(crate) fn pieces<'b>(&self, body: &'b [u8]) -> Vec<&'b [u8]> {
        match self {
            Self::Whole => vec![body],
            Self::Every(size) => body.chunks((*size).max(1)).collect(),
            Self::At(offsets) => {
                let mut pieces = Vec::with_capacity(offsets.len() + 1);
                let mut start = 0;
                for &offset in offsets {
                    if offset > start && offset < body.len() {
                        pieces.push(&body[start..offset]);
                        start = offset;
                    }
                }
                pieces.push(&body[start..]);
                pieces
            }
        }
    }
}

/// One recorded response: what the server sends back for one request.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Cassette {
    /// The HTTP status.
    pub status: u16,
    /// The `Content-Type` header.
    pub content_type: String,
    /// More response headers (e.g. `retry-after`).
    pub headers: Vec<(String, String)>,
    /// The body, byte for byte as recorded.
    pub body: Bytes,
    /// The request body that was recorded with the response, when it was kept.
    pub request: Option<serde_json::Value>,
    /// How the body is split on the wire.
    pub chunking: Chunking,
    /// Close the connection after this many body bytes, without ending the response: a
    /// connection that dies mid-stream.
    pub cut_after: Option<usize>,
    /// A pause before each chunk after the first (a slow or stalled provider).
    pub chunk_delay: Option<std::time::Duration>,
}

impl Cassette {
    /// A response with this status, content type and body.
    pub fn new(status: u16, content_type: impl Into<String>, body: impl Into<Bytes>) -> Self {
        Self {
            status,
            content_type: content_type.into(),
            headers: Vec::new(),
            body: body.into(),
            request: None,
            chunking: Chunking::Whole,
            cut_after: None,
            chunk_delay: None,
        }
    }

    /// A 200 response whose content type is sniffed from the body (see [`Cassette::sniff`]).
    pub fn body(body: impl Into<Bytes>) -> Self {
        let body = body.into();
        let content_type = Self::sniff(&body);
        Self::new(200, content_type, body)
    }

    /// A recording read from a file, with its content type sniffed and its status taken from
    /// a name of the form `error-NNN-…` (otherwise 200). A sibling `<name>.request.json` is
    /// loaded as the recorded request.
    ///
    /// # Errors
    ///
    /// [`Error::Replay`] when the file cannot be read.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let body = std::fs::read(path)
            .map_err(|error| Error::Replay(format!("cannot read {}: {error}", path.display())))?;
        let mut cassette = Self::body(body);
        let stem = path
            .file_stem()
            .and_then(|stem| stem.to_str())
            .unwrap_or_default();
        if let Some(status) = status_in_name(stem) {
            cassette.status = status;
        }
        let request = path.with_file_name(format!("{stem}.request.json"));
        if let Ok(text) = std::fs::read(&request) {
            cassette.request = serde_json::from_slice(&text).ok();
        }
        Ok(cassette)
    }

    /// The content type a body looks like: `application/vnd.amazon.eventstream` for AWS's
    /// binary event stream (a first message whose prelude passes its CRC), `text/event-stream`
    /// for SSE, `application/x-ndjson` for one JSON object per line, `application/json` for
    /// one document (or a streamed JSON array), `application/octet-stream` for anything else.
    pub fn sniff(body: &[u8]) -> &'static str {
        // AWS's binary event stream: a message whose prelude passes its CRC.
        if body.len() >= 12 && crate::framing::decode_message(&body[..12]).is_ok() {
            return "application/vnd.amazon.eventstream";
        }
        let text = String::from_utf8_lossy(body);
        let text = text.trim_start_matches('\u{feff}').trim_start();
        match text.as_bytes().first() {
            Some(b'd' | b'e' | b':' | b'i' | b'r') => "text/event-stream",
            Some(b'[') => "application/json",
            Some(b'{') => {
                let mut lines = text.lines().filter(|line| !line.trim().is_empty());
                let first_is_whole = lines
                    .next()
                    .is_some_and(|line| serde_json::from_str::<serde_json::Value>(line).is_ok());
                if first_is_whole && lines.next().is_some() {
                    "application/x-ndjson"
                } else {
                    "application/json"
                }
            }
            _ => "application/octet-stream",
        }
    }

    /// With this status.
    #[must_use]
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }

    /// With one more response header.
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Split on the wire this way.
    #[must_use]
    pub fn with_chunking(mut self, chunking: Chunking) -> Self {
        self.chunking = chunking;
        self
    }

    /// Drop the connection after `bytes` bytes of the body.
    #[must_use]
    pub fn cut_after(mut self, bytes: usize) -> Self {
        self.cut_after = Some(bytes);
        self
    }

    /// Pause this long before each chunk after the first.
    #[must_use]
    pub fn with_chunk_delay(mut self, delay: std::time::Duration) -> Self {
        self.chunk_delay = Some(delay);
        self
    }

    /// Whether the body is streamed (SSE, NDJSON, an AWS event stream, or a JSON array).
    pub fn is_stream(&self) -> bool {
        let lead = self.body.iter().find(|b| !b.is_ascii_whitespace());
        self.content_type.starts_with("text/event-stream")
            || self.content_type.starts_with("application/x-ndjson")
            || self
                .content_type
                .starts_with("application/vnd.amazon.eventstream")
            || lead == Some(&b'[')
    }
}

fn status_in_name(stem: &str) -> Option<u16> {
    let rest = stem.strip_prefix("error-")?;
    let digits = rest.get(..3)?;
    let status: u16 = digits.parse().ok()?;
    (100..600).contains(&status).then_some(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffing() {
        assert_eq!(
            Cassette::sniff(b"event: a\ndata: {}\n\n"),
            "text/event-stream"
        );
        assert_eq!(Cassette::sniff(b"data: {}\r\n\r\n"), "text/event-stream");
        assert_eq!(
            Cassette::sniff(b"{\"a\":1}\n{\"b\":2}\n"),
            "application/x-ndjson"
        );
        assert_eq!(Cassette::sniff(b"{\"a\":1}\n"), "application/json");
        assert_eq!(Cassette::sniff(b"{\n  \"a\": 1\n}\n"), "application/json");
        assert_eq!(
            Cassette::sniff(b"[{\"a\":1}\n,\n{\"b\":2}]"),
            "application/json"
        );
        assert_eq!(Cassette::sniff(b"<html>"), "application/octet-stream");
        let message = crate::framing::encode_message(&[(":message-type", "event")], b"{}");
        assert_eq!(
            Cassette::sniff(&message),
            "application/vnd.amazon.eventstream"
        );
        assert_eq!(
            Cassette::sniff(&message[..12]),
            "application/vnd.amazon.eventstream"
        );
        assert_eq!(Cassette::sniff(&[0; 16]), "application/octet-stream");
    }

    #[test]
    fn status_from_the_file_name() {
        assert_eq!(status_in_name("error-429-rate-limit"), Some(429));
        assert_eq!(status_in_name("error-insufficient-quota"), None);
        assert_eq!(status_in_name("stream-text"), None);
    }

    #[test]
    fn chunk_plans() {
        let body = b"abcdef";
        assert_eq!(Chunking::Every(4).pieces(body), [&b"abcd"[..], b"ef"]);
        assert_eq!(
            Chunking::At(vec![0, 2, 2, 5, 9]).pieces(body),
            [&b"ab"[..], b"cde", b"f"]
        );
        assert_eq!(Chunking::Whole.pieces(body), [&body[..]]);
    }
}
