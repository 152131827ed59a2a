//! AWS's binary event-stream framing (`application/vnd.amazon.eventstream`), which Bedrock's
//! `ConverseStream` (and every other AWS streaming API) answers with.
//!
//! A message is, all integers big-endian:
//!
//! ```text
//! total length u32 | headers length u32 | prelude CRC32 u32 | headers | payload | message CRC32 u32
//! ```
//!
//! The prelude CRC covers the first eight bytes, the message CRC everything before it. A
//! header is a name (u8 length, UTF-8), a type byte and a value whose encoding the type picks
//! (booleans carry no value, integers 1/2/4/8 bytes, byte arrays and strings a u16 length,
//! timestamps 8 bytes, UUIDs 16). Both CRCs are checked and both lengths are bounded before a
//! byte of the message is buffered, so a corrupted or hostile length cannot make the parser
//! wait for (or allocate) gigabytes.

use std::fmt;

use agent_types::BackendError;

use super::malformed;

/// Bytes of the prelude (two lengths and their CRC).
const PRELUDE: usize = 12;
/// Bytes around the headers and payload: the prelude and the message CRC.
const OVERHEAD: usize = PRELUDE + 4;
/// The largest message accepted. AWS caps a message at 16 MiB of payload and 128 KiB of headers.
pub const MAX_MESSAGE: usize = 16 * 1024 * 1024 + 128 * 1024 + OVERHEAD;
/// The largest headers section accepted.
pub const MAX_HEADERS: usize = 128 * 1024;

/// Why bytes are not an event-stream message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventStreamError {
    /// The prelude's CRC32 does not match its eight bytes.
    PreludeCrc {
        /// The CRC the prelude carries.
        expected: u32,
        /// The CRC of the bytes.
        actual: u32,
    },
    /// The message's CRC32 does not match its bytes.
    MessageCrc {
        /// The CRC the message carries.
        expected: u32,
        /// The CRC of the bytes.
        actual: u32,
    },
    /// A total length below the 16-byte minimum, or headers longer than the message.
    BadLength {
        /// The total length the prelude gives.
        total: u32,
        /// The headers length the prelude gives.
        headers: u32,
    },
    /// A total or headers length over [`MAX_MESSAGE`] / [`MAX_HEADERS`].
    TooLong {
        /// The total length the prelude gives.
        total: u32,
        /// The headers length the prelude gives.
        headers: u32,
    },
    /// The body ended inside a message.
    Truncated {
        /// The bytes of the unfinished message received.
        have: usize,
    },
    /// A header that does not decode: cut short, an unknown value type, a name or string that
    /// is not UTF-8.
    BadHeader(&'static str),
}

impl fmt::Display for EventStreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PreludeCrc { expected, actual } => write!(
                f,
                "an event-stream prelude failed its CRC check (carried {expected:#010x}, computed {actual:#010x})"
            ),
            Self::MessageCrc { expected, actual } => write!(
                f,
                "an event-stream message failed its CRC check (carried {expected:#010x}, computed {actual:#010x})"
            ),
            Self::BadLength { total, headers } => write!(
                f,
                "an event-stream prelude gives impossible lengths (total {total}, headers {headers})"
            ),
            Self::TooLong { total, headers } => write!(
                f,
                "an event-stream message is over the size limit (total {total}, headers {headers}; at most {MAX_MESSAGE} and {MAX_HEADERS})"
            ),
            Self::Truncated { have } => write!(
                f,
                "the event stream ended inside a message ({have} bytes of it received)"
            ),
            Self::BadHeader(why) => write!(f, "an event-stream header is malformed: {why}"),
        }
    }
}

impl std::error::Error for EventStreamError {}

impl From<EventStreamError> for BackendError {
    fn from(error: EventStreamError) -> Self {
        malformed(error.to_string())
    }
}

/// A header's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderValue<'a> {
    /// Types 0 (true) and 1 (false).
    Bool(bool),
    /// Type 2.
    Byte(i8),
    /// Type 3.
    Short(i16),
    /// Type 4.
    Int(i32),
    /// Type 5.
    Long(i64),
    /// Type 6.
    Bytes(&'a [u8]),
    /// Type 7.
    String(&'a str),
    /// Type 8: milliseconds since the Unix epoch.
    Timestamp(i64),
    /// Type 9.
    Uuid([u8; 16]),
}

/// One decoded message, borrowing the parser's bytes.
#[derive(Debug, Clone, Copy)]
pub struct EventStreamMessage<'a> {
    headers: &'a [u8],
    /// The payload (for Bedrock, one JSON document).
    pub payload: &'a [u8],
}

impl<'a> EventStreamMessage<'a> {
    /// The headers in order, as (name, value). They were all checked when the message was
    /// decoded, so iteration cannot fail.
    pub fn headers(&self) -> Headers<'a> {
        Headers { rest: self.headers }
    }

    /// The first string header called `name`.
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.headers().find_map(|(key, value)| match value {
            HeaderValue::String(text) if key == name => Some(text),
            _ => None,
        })
    }

    /// `:message-type`: `event`, `exception` or `error`.
    pub fn message_type(&self) -> &'a str {
        self.header(":message-type").unwrap_or("")
    }

    /// The message as a text frame: `(name, payload)`, where the name is `:event-type` for an
    /// event and `:exception-type` for an exception (say `throttlingException`), so the
    /// adapter tells them apart by name.
    ///
    /// # Errors
    ///
    /// A protocol error for a payload that is not UTF-8, and for an `error` message (the
    /// service's `:error-code` and `:error-message` in the text).
    pub fn text_frame(&self) -> Result<(&'a str, &'a str), BackendError> {
        let name = match self.message_type() {
            "exception" => self.header(":exception-type").unwrap_or("exception"),
            "error" => {
                return Err(malformed(format!(
                    "the event stream reported an error: {}: {}",
                    crate::http::status::clip(self.header(":error-code").unwrap_or("unknown"), 100),
                    crate::http::status::clip(self.header(":error-message").unwrap_or(""), 300),
                )));
            }
            _ => self.header(":event-type").unwrap_or(""),
        };
        let data = std::str::from_utf8(self.payload)
            .map_err(|_| malformed("an event-stream payload is not valid UTF-8"))?;
        Ok((name, data))
    }
}

/// The headers of a message, in order.
#[derive(Debug, Clone)]
pub struct Headers<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Headers<'a> {
    type Item = (&'a str, HeaderValue<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        // Checked at decode time: an error here cannot happen, and ends the iteration.
        let (name, value, rest) = next_header(self.rest).ok()??;
        self.rest = rest;
        Some((name, value))
    }
}

fn take<'a>(
    bytes: &'a [u8],
    n: usize,
    what: &'static str,
) -> Result<(&'a [u8], &'a [u8]), EventStreamError> {
    if bytes.len() < n {
        return Err(EventStreamError::BadHeader(what));
    }
    Ok(bytes.split_at(n))
}

fn array<'a, const N: usize>(
    bytes: &'a [u8],
    what: &'static str,
) -> Result<([u8; N], &'a [u8]), EventStreamError> {
    let (head, rest) = take(bytes, N, what)?;
    let mut out = [0u8; N];
    out.copy_from_slice(head);
    Ok((out, rest))
}

/// The next header of `bytes`, or `None` at the end.
#[allow(clippy::type_complexity)]
fn next_header(bytes: &[u8]) -> Result<Option<(&str, HeaderValue<'_>, &[u8])>, EventStreamError> {
    let Some((&name_len, rest)) = bytes.split_first() else {
        return Ok(None);
    };
    let (name, rest) = take(rest, usize::from(name_len), "the name is cut short")?;
    let name = std::str::from_utf8(name)
        .map_err(|_| EventStreamError::BadHeader("a name is not UTF-8"))?;
    let Some((&kind, rest)) = rest.split_first() else {
        return Err(EventStreamError::BadHeader("the value type is missing"));
    };
    let (value, rest) = match kind {
        0 => (HeaderValue::Bool(true), rest),
        1 => (HeaderValue::Bool(false), rest),
        2 => {
            let (b, rest) = array::<1>(rest, "a byte value is cut short")?;
            (HeaderValue::Byte(i8::from_be_bytes(b)), rest)
        }
        3 => {
            let (b, rest) = array::<2>(rest, "a short value is cut short")?;
            (HeaderValue::Short(i16::from_be_bytes(b)), rest)
        }
        4 => {
            let (b, rest) = array::<4>(rest, "an int value is cut short")?;
            (HeaderValue::Int(i32::from_be_bytes(b)), rest)
        }
        5 | 8 => {
            let (b, rest) = array::<8>(rest, "a long or timestamp value is cut short")?;
            let n = i64::from_be_bytes(b);
            (
                if kind == 5 {
                    HeaderValue::Long(n)
                } else {
                    HeaderValue::Timestamp(n)
                },
                rest,
            )
        }
        6 | 7 => {
            let (len, rest) = array::<2>(rest, "a length is cut short")?;
            let (value, rest) = take(
                rest,
                usize::from(u16::from_be_bytes(len)),
                "a value is cut short",
            )?;
            if kind == 6 {
                (HeaderValue::Bytes(value), rest)
            } else {
                let text = std::str::from_utf8(value)
                    .map_err(|_| EventStreamError::BadHeader("a string value is not UTF-8"))?;
                (HeaderValue::String(text), rest)
            }
        }
        9 => {
            let (b, rest) = array::<16>(rest, "a UUID value is cut short")?;
            (HeaderValue::Uuid(b), rest)
        }
        _ => return Err(EventStreamError::BadHeader("an unknown value type")),
    };
    Ok(Some((name, value, rest)))
}

fn be32(bytes: &[u8]) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[..4]);
    u32::from_be_bytes(word)
}

/// Checks a prelude (at least [`PRELUDE`] bytes) and returns the message's total length.
fn prelude(bytes: &[u8]) -> Result<usize, EventStreamError> {
    let total = be32(&bytes[0..4]);
    let headers = be32(&bytes[4..8]);
    let expected = be32(&bytes[8..12]);
    let actual = crc32fast::hash(&bytes[..8]);
    if expected != actual {
        return Err(EventStreamError::PreludeCrc { expected, actual });
    }
    let (total_len, headers_len) = (total as usize, headers as usize);
    if total_len > MAX_MESSAGE || headers_len > MAX_HEADERS {
        return Err(EventStreamError::TooLong { total, headers });
    }
    if total_len < OVERHEAD || headers_len > total_len - OVERHEAD {
        return Err(EventStreamError::BadLength { total, headers });
    }
    Ok(total_len)
}

/// Decodes one whole message (`bytes` is exactly its total length, prelude already checked).
fn message(bytes: &[u8]) -> Result<EventStreamMessage<'_>, EventStreamError> {
    let end = bytes.len() - 4;
    let expected = be32(&bytes[end..]);
    let actual = crc32fast::hash(&bytes[..end]);
    if expected != actual {
        return Err(EventStreamError::MessageCrc { expected, actual });
    }
    let headers_len = be32(&bytes[4..8]) as usize;
    let headers = &bytes[PRELUDE..PRELUDE + headers_len];
    let mut rest = headers;
    while let Some((_, _, next)) = next_header(rest)? {
        rest = next;
    }
    Ok(EventStreamMessage {
        headers,
        payload: &bytes[PRELUDE + headers_len..end],
    })
}

/// Decodes the message at the start of `bytes`, returning it and its length, or `Ok(None)`
/// when `bytes` holds only part of it.
///
/// # Errors
///
/// An [`EventStreamError`] for a failed CRC, an impossible or oversized length, or a
/// malformed header.
pub fn decode_message(
    bytes: &[u8],
) -> Result<Option<(EventStreamMessage<'_>, usize)>, EventStreamError> {
    if bytes.len() < PRELUDE {
        return Ok(None);
    }
    let total = prelude(bytes)?;
    if bytes.len() < total {
        return Ok(None);
    }
    Ok(Some((message(&bytes[..total])?, total)))
}

/// Encodes a message with string headers (for tests, fixtures and fuzzing).
pub fn encode_message(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut head = Vec::new();
    for (name, value) in headers {
        head.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
        head.extend_from_slice(&name.as_bytes()[..name.len().min(255)]);
        head.push(7);
        let len = u16::try_from(value.len()).unwrap_or(u16::MAX);
        head.extend_from_slice(&len.to_be_bytes());
        head.extend_from_slice(&value.as_bytes()[..usize::from(len)]);
    }
    let total = u32::try_from(OVERHEAD + head.len() + payload.len()).unwrap_or(u32::MAX);
    let headers = u32::try_from(head.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(total as usize);
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&headers.to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(&out).to_be_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(payload);
    out.extend_from_slice(&crc32fast::hash(&out).to_be_bytes());
    out
}

/// The callback that receives each complete message; an error stops parsing.
pub type OnMessage<'f> = dyn for<'x> FnMut(EventStreamMessage<'x>) -> Result<(), BackendError> + 'f;

/// An incremental event-stream parser.
///
/// Messages wholly inside a chunk are decoded in place; only a message split across chunks
/// is copied, into a buffer that keeps its capacity.
#[derive(Debug, Default)]
pub struct EventStreamParser {
    partial: Vec<u8>,
    /// The total length of the message in `partial`, once its prelude is checked.
    expected: Option<usize>,
}

impl EventStreamParser {
    /// An empty parser.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses the next chunk, calling `on_message` for every complete message.
    ///
    /// # Errors
    ///
    /// A protocol error carrying the [`EventStreamError`], or whatever `on_message` returns.
    pub fn feed(
        &mut self,
        mut chunk: &[u8],
        on_message: &mut OnMessage<'_>,
    ) -> Result<(), BackendError> {
        if !self.partial.is_empty() {
            if self.expected.is_none() {
                let want = PRELUDE - self.partial.len();
                let (head, rest) = chunk.split_at(want.min(chunk.len()));
                self.partial.extend_from_slice(head);
                chunk = rest;
                if self.partial.len() < PRELUDE {
                    return Ok(());
                }
                self.expected = Some(prelude(&self.partial)?);
            }
            let total = self.expected.unwrap_or(PRELUDE);
            let want = total - self.partial.len();
            let (head, rest) = chunk.split_at(want.min(chunk.len()));
            self.partial.extend_from_slice(head);
            chunk = rest;
            if self.partial.len() < total {
                return Ok(());
            }
            let result = message(&self.partial)
                .map_err(BackendError::from)
                .and_then(&mut *on_message);
            self.partial.clear();
            self.expected = None;
            result?;
        }
        while !chunk.is_empty() {
            match decode_message(chunk)? {
                Some((message, used)) => {
                    on_message(message)?;
                    chunk = &chunk[used..];
                }
                None => {
                    if chunk.len() >= PRELUDE {
                        self.expected = Some(prelude(chunk)?);
                    }
                    self.partial.extend_from_slice(chunk);
                    break;
                }
            }
        }
        Ok(())
    }

    /// The body ended: bytes of an unfinished message are an error.
    ///
    /// # Errors
    ///
    /// [`EventStreamError::Truncated`] as a protocol error.
    pub fn finish(&mut self) -> Result<(), BackendError> {
        if self.partial.is_empty() {
            return Ok(());
        }
        let have = self.partial.len();
        self.partial.clear();
        self.expected = None;
        Err(EventStreamError::Truncated { have }.into())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn event(kind: &str, payload: &str) -> Vec<u8> {
        encode_message(
            &[
                (":event-type", kind),
                (":content-type", "application/json"),
                (":message-type", "event"),
            ],
            payload.as_bytes(),
        )
    }

    fn frames(pieces: &[&[u8]]) -> Result<Vec<(String, String)>, BackendError> {
        let mut parser = EventStreamParser::new();
        let mut seen = Vec::new();
        for piece in pieces {
            parser.feed(piece, &mut |message| {
                let (name, data) = message.text_frame()?;
                seen.push((name.to_owned(), data.to_owned()));
                Ok(())
            })?;
        }
        parser.finish()?;
        Ok(seen)
    }

    /// The first message of pydantic-ai's `test_bedrock_model_stream` recording, verbatim.
    const RECORDED: &str = "AAAAjwAAAFLT8cjyCzpldmVudC10eXBlBwAMbWVzc2FnZVN0YXJ0DTpjb250ZW50LXR5cGUHABBhcHBsaWNhdGlvbi9qc29uDTptZXNzYWdlLXR5cGUHAAVldmVudHsicCI6ImFiY2RlZmdoaWprbG1ub3BxciIsInJvbGUiOiJhc3Npc3RhbnQifcFrcQs=";

    fn recorded() -> Vec<u8> {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(RECORDED)
            .unwrap()
    }

    #[test]
    fn a_recorded_message_decodes_and_our_encoder_reproduces_it() {
        let bytes = recorded();
        let (message, used) = decode_message(&bytes).unwrap().unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(message.message_type(), "event");
        assert_eq!(message.header(":event-type"), Some("messageStart"));
        assert_eq!(
            message.text_frame().unwrap(),
            (
                "messageStart",
                r#"{"p":"abcdefghijklmnopqr","role":"assistant"}"#
            )
        );
        let again = encode_message(
            &[
                (":event-type", "messageStart"),
                (":content-type", "application/json"),
                (":message-type", "event"),
            ],
            message.payload,
        );
        assert_eq!(again, bytes);
    }

    #[test]
    fn every_split_gives_the_same_messages() {
        let mut body = event("messageStart", r#"{"role":"assistant"}"#);
        body.extend(event("contentBlockDelta", r#"{"delta":{"text":"hé"}}"#));
        body.extend(encode_message(
            &[
                (":message-type", "exception"),
                (":exception-type", "throttlingException"),
            ],
            br#"{"message":"slow down"}"#,
        ));
        let whole = frames(&[&body]).unwrap();
        assert_eq!(whole.len(), 3);
        assert_eq!(whole[2].0, "throttlingException");
        for a in 0..=body.len() {
            for b in (a..=body.len()).step_by(7) {
                assert_eq!(
                    frames(&[&body[..a], &body[a..b], &body[b..]]).unwrap(),
                    whole
                );
            }
        }
    }

    #[test]
    fn a_flipped_bit_is_a_crc_error() {
        let bytes = recorded();
        let mut prelude_hit = bytes.clone();
        prelude_hit[3] ^= 1;
        let error = decode_message(&prelude_hit).unwrap_err();
        assert!(
            matches!(error, EventStreamError::PreludeCrc { .. }),
            "{error:?}"
        );
        let mut payload_hit = bytes.clone();
        payload_hit[100] ^= 0x20;
        let error = decode_message(&payload_hit).unwrap_err();
        assert!(
            matches!(error, EventStreamError::MessageCrc { .. }),
            "{error:?}"
        );
        let error = frames(&[&payload_hit]).unwrap_err();
        assert!(error.message.contains("CRC"), "{}", error.message);
    }

    #[test]
    fn a_cut_message_is_truncated_and_a_huge_length_is_refused_without_waiting() {
        let bytes = recorded();
        let error = frames(&[&bytes[..50]]).unwrap_err();
        assert!(
            error.message.contains("ended inside a message (50 bytes"),
            "{}",
            error.message
        );

        let mut huge = Vec::new();
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        huge.extend_from_slice(&0u32.to_be_bytes());
        huge.extend_from_slice(&crc32fast::hash(&huge).to_be_bytes());
        let error = decode_message(&huge).unwrap_err();
        assert!(matches!(error, EventStreamError::TooLong { .. }));
        // Fed byte by byte, the error comes as soon as the prelude is complete.
        let mut parser = EventStreamParser::new();
        let mut failed_at = None;
        for (at, byte) in huge.iter().enumerate() {
            if parser
                .feed(std::slice::from_ref(byte), &mut |_| Ok(()))
                .is_err()
            {
                failed_at = Some(at);
                break;
            }
        }
        assert_eq!(failed_at, Some(PRELUDE - 1));
    }

    #[test]
    fn an_error_message_is_a_protocol_error_naming_its_code() {
        let body = encode_message(
            &[
                (":message-type", "error"),
                (":error-code", "InternalFailure"),
                (":error-message", "boom"),
            ],
            b"",
        );
        let error = frames(&[&body]).unwrap_err();
        assert!(
            error.message.contains("InternalFailure: boom"),
            "{}",
            error.message
        );
    }

    #[test]
    fn header_types_decode() {
        // bool true, short, bytes, timestamp, uuid.
        let mut head = Vec::new();
        head.extend_from_slice(b"\x01a\x00");
        head.extend_from_slice(b"\x01b\x03\x01\x02");
        head.extend_from_slice(b"\x01c\x06\x00\x02xy");
        head.extend_from_slice(b"\x01d\x08\x00\x00\x00\x00\x00\x00\x00\x05");
        head.extend_from_slice(b"\x01e\x09");
        head.extend_from_slice(&[7u8; 16]);
        let total = u32::try_from(OVERHEAD + head.len()).unwrap();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&total.to_be_bytes());
        bytes.extend_from_slice(&u32::try_from(head.len()).unwrap().to_be_bytes());
        bytes.extend_from_slice(&crc32fast::hash(&bytes).to_be_bytes());
        bytes.extend_from_slice(&head);
        bytes.extend_from_slice(&crc32fast::hash(&bytes).to_be_bytes());
        let (message, _) = decode_message(&bytes).unwrap().unwrap();
        let headers: Vec<_> = message.headers().collect();
        assert_eq!(
            headers,
            [
                ("a", HeaderValue::Bool(true)),
                ("b", HeaderValue::Short(0x0102)),
                ("c", HeaderValue::Bytes(b"xy")),
                ("d", HeaderValue::Timestamp(5)),
                ("e", HeaderValue::Uuid([7; 16])),
            ]
        );
        // An unknown type is refused at decode time.
        let mut bad = bytes.clone();
        bad[PRELUDE + 2] = 42;
        let end = bad.len() - 4;
        let crc = crc32fast::hash(&bad[..end]).to_be_bytes();
        bad[end..].copy_from_slice(&crc);
        assert_eq!(
            decode_message(&bad).unwrap_err(),
            EventStreamError::BadHeader("an unknown value type")
        );
    }
}
