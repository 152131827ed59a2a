//! One JSON array delivered piece by piece, each element a frame (Gemini's
//! `streamGenerateContent` without `alt=sse`: `[{…}\n,\r\n{…}]`).

use agent_types::BackendError;

use super::{FrameLimit, OnText, malformed};

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the opening `[`.
    #[default]
    Start,
    /// Inside the array, expecting an element or `]`.
    Element,
    /// After an element, expecting `,` or `]`.
    Separator,
    /// Inside an element.
    Value {
        depth: u32,
        in_string: bool,
        escaped: bool,
    },
    /// After the closing `]`; only whitespace may follow.
    Done,
}

/// An incremental splitter of a JSON array into its elements.
///
/// It tracks nesting and strings (with escapes) byte by byte, so it finds element boundaries
/// without parsing the elements; the adapter parses each element. Elements must be objects or
/// arrays (every streaming API that uses this framing sends objects).
#[derive(Debug, Default)]
pub struct JsonArrayParser {
    state: State,
    /// The unfinished element carried over from the previous chunk.
    element: Vec<u8>,
    /// The most one element may hold.
    limit: FrameLimit,
}

impl JsonArrayParser {
    /// An empty parser.
    pub fn new() -> Self {
        Self::default()
    }

    /// The most bytes one element may hold before [`feed`](Self::feed) refuses the stream;
    /// [`MAX_FRAME_BYTES`](super::MAX_FRAME_BYTES) unless set.
    #[must_use]
    pub fn with_max_frame_bytes(mut self, max: usize) -> Self {
        self.limit = FrameLimit(max);
        self
    }

    /// Parses the next chunk, calling `on_element` with the text of every complete element.
    ///
    /// # Errors
    ///
    /// A protocol error for text outside the elements that is not `[`, `,`, `]` or
    /// whitespace, an element that is not UTF-8 or larger than the frame limit, or whatever
    /// `on_element` returns.
    pub fn feed(&mut self, chunk: &[u8], on_element: &mut OnText<'_>) -> Result<(), BackendError> {
        // Start of the element within this chunk, when it began here.
        let mut begin: Option<usize> = None;
        for (at, &byte) in chunk.iter().enumerate() {
            self.state = match self.state {
                State::Start => match byte {
                    b'[' => State::Element,
                    b'\xEF' | b'\xBB' | b'\xBF' => State::Start,
                    b if b.is_ascii_whitespace() => State::Start,
                    _ => return Err(unexpected(byte, "the opening `[`")),
                },
                State::Element | State::Separator if byte.is_ascii_whitespace() => self.state,
                State::Element | State::Separator if byte == b']' => State::Done,
                State::Separator if byte == b',' => State::Element,
                State::Separator => return Err(unexpected(byte, "`,` or `]`")),
                State::Element => match byte {
                    b'{' | b'[' => {
                        begin = Some(at);
                        State::Value {
                            depth: 1,
                            in_string: false,
                            escaped: false,
                        }
                    }
                    _ => return Err(unexpected(byte, "an object or array element")),
                },
                State::Value {
                    depth,
                    in_string: true,
                    escaped,
                } => State::Value {
                    depth,
                    in_string: escaped || byte != b'"',
                    escaped: !escaped && byte == b'\\',
                },
                State::Value { depth, .. } => match byte {
                    b'"' => State::Value {
                        depth,
                        in_string: true,
                        escaped: false,
                    },
                    b'{' | b'[' => State::Value {
                        depth: depth + 1,
                        in_string: false,
                        escaped: false,
                    },
                    b'}' | b']' if depth == 1 => {
                        let text = match begin.take() {
                            Some(start) => &chunk[start..=at],
                            None => {
                                self.limit.append(
                                    &mut self.element,
                                    &chunk[..=at],
                                    "a JSON array element",
                                )?;
                                &self.element[..]
                            }
                        };
                        let text = std::str::from_utf8(text)
                            .map_err(|_| malformed("a JSON array element is not valid UTF-8"));
                        let result = text.and_then(&mut *on_element);
                        self.element.clear();
                        result?;
                        State::Separator
                    }
                    b'}' | b']' => State::Value {
                        depth: depth - 1,
                        in_string: false,
                        escaped: false,
                    },
                    _ => self.state,
                },
                State::Done if byte.is_ascii_whitespace() => State::Done,
                State::Done => return Err(unexpected(byte, "nothing after the closing `]`")),
            };
        }
        if let State::Value { .. } = self.state {
            let start = begin.unwrap_or(0);
            self.limit
                .append(&mut self.element, &chunk[start..], "a JSON array element")?;
        }
        Ok(())
    }

    /// The body ended.
    ///
    /// # Errors
    ///
    /// A protocol error when the array was not closed (the stream was cut off).
    pub fn finish(&mut self) -> Result<(), BackendError> {
        match self.state {
            State::Done => Ok(()),
            State::Start => Err(malformed("the body ended before the JSON array began")),
            _ => Err(malformed("the body ended inside the JSON array (cut off)")),
        }
    }
}

fn unexpected(byte: u8, expected: &str) -> BackendError {
    let shown = if byte.is_ascii_graphic() {
        format!("`{}`", char::from(byte))
    } else {
        format!("byte 0x{byte:02x}")
    };
    malformed(format!(
        "expected {expected} in the JSON array stream, found {shown}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunks: &[&[u8]]) -> Result<Vec<String>, BackendError> {
        parse_with(JsonArrayParser::new(), chunks)
    }

    fn parse_with(
        mut parser: JsonArrayParser,
        chunks: &[&[u8]],
    ) -> Result<Vec<String>, BackendError> {
        let mut seen = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, &mut |element| {
                seen.push(element.to_owned());
                Ok(())
            })?;
        }
        parser.finish()?;
        Ok(seen)
    }

    #[test]
    fn elements_survive_any_split() {
        let body = "[{\"a\":\"]}\\\"{\",\"b\":[1,{}]}\r\n,\n{\"c\":\"é\"}\n]\n".as_bytes();
        let expected = ["{\"a\":\"]}\\\"{\",\"b\":[1,{}]}", "{\"c\":\"é\"}"];
        for split in 0..=body.len() {
            let (head, tail) = body.split_at(split);
            assert_eq!(parse(&[head, tail]).unwrap(), expected, "split at {split}");
        }
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(parse(&bytes).unwrap(), expected);
    }

    #[test]
    fn an_empty_array_has_no_elements() {
        assert!(parse(&[b" [ ] "]).unwrap().is_empty());
    }

    #[test]
    fn garbage_and_truncation_are_typed_errors() {
        let html = parse(&[b"<html>bad gateway</html>"]).unwrap_err();
        assert!(html.message.contains("found `<`"), "{html}");
        let cut = parse(&[b"[{\"a\":1}, {\"b\":"]).unwrap_err();
        assert!(cut.message.contains("cut off"), "{cut}");
        let scalar = parse(&[b"[1]"]).unwrap_err();
        assert!(scalar.message.contains("object or array"), "{scalar}");
    }

    #[test]
    fn an_element_larger_than_the_frame_limit_is_refused() {
        let feed = |chunks: &[&[u8]]| {
            parse_with(JsonArrayParser::new().with_max_frame_bytes(8), chunks)
                .map(|elements| elements.len())
        };
        assert_eq!(feed(&[b"[{\"a\":1", b"}, {\"b\":1}]"]).unwrap(), 2);
        let error = feed(&[b"[{\"a\":\"12", b"345678\"}]"]).unwrap_err();
        assert_eq!(error.kind, agent_types::BackendErrorKind::Protocol);
        assert!(
            error.message.contains("element is larger than 8"),
            "{}",
            error.message
        );
        assert!(feed(&[b"[{\"a\":\"123456789"]).is_err());
    }
}
