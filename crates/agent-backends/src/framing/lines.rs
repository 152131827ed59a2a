//! Newline-delimited JSON (`application/x-ndjson`): one JSON value per line.

use agent_types::BackendError;

use super::{FrameLimit, OnText, malformed};

/// An incremental NDJSON line splitter.
///
/// Lines end in `\n` (a `\r` before it is dropped); blank lines are skipped. Each line is
/// handed over as text, for the adapter to parse; a line that is not UTF-8 is an error.
#[derive(Debug, Default)]
pub struct NdjsonParser {
    line: Vec<u8>,
    /// The most one line may hold.
    limit: FrameLimit,
}

impl NdjsonParser {
    /// An empty parser.
    pub fn new() -> Self {
        Self::default()
    }

    /// The most bytes one line may hold before [`feed`](Self::feed) refuses the stream;
    /// [`MAX_FRAME_BYTES`](super::MAX_FRAME_BYTES) unless set.
    #[must_use]
    pub fn with_max_frame_bytes(mut self, max: usize) -> Self {
        self.limit = FrameLimit(max);
        self
    }

    /// Parses the next chunk, calling `on_line` for every complete, non-blank line.
    ///
    /// # Errors
    ///
    /// A protocol error for a line that is not UTF-8 or larger than the frame limit, or
    /// whatever `on_line` returns.
    pub fn feed(&mut self, mut chunk: &[u8], on_line: &mut OnText<'_>) -> Result<(), BackendError> {
        while let Some(eol) = memchr::memchr(b'\n', chunk) {
            if self.line.is_empty() {
                emit(&chunk[..eol], on_line)?;
            } else {
                self.limit
                    .append(&mut self.line, &chunk[..eol], "an NDJSON line")?;
                let result = emit(&self.line, on_line);
                self.line.clear();
                result?;
            }
            chunk = &chunk[eol + 1..];
        }
        self.limit.append(&mut self.line, chunk, "an NDJSON line")?;
        Ok(())
    }

    /// The body ended: a last line without its newline still counts.
    ///
    /// # Errors
    ///
    /// As for [`feed`](Self::feed).
    pub fn finish(&mut self, on_line: &mut OnText<'_>) -> Result<(), BackendError> {
        let line = std::mem::take(&mut self.line);
        emit(&line, on_line)
    }
}

fn emit(line: &[u8], on_line: &mut OnText<'_>) -> Result<(), BackendError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let text =
        std::str::from_utf8(line).map_err(|_| malformed("an NDJSON line is not valid UTF-8"))?;
    on_line(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunks: &[&[u8]]) -> Result<Vec<String>, BackendError> {
        parse_with(NdjsonParser::new(), chunks)
    }

    fn parse_with(mut parser: NdjsonParser, chunks: &[&[u8]]) -> Result<Vec<String>, BackendError> {
        let mut seen = Vec::new();
        let mut on = |line: &str| {
            seen.push(line.to_owned());
            Ok(())
        };
        for chunk in chunks {
            parser.feed(chunk, &mut on)?;
        }
        parser.finish(&mut on)?;
        Ok(seen)
    }

    #[test]
    fn lines_survive_any_split_including_inside_a_character() {
        let body = "{\"a\":\"é\"}\r\n\n{\"b\":2}\n{\"c\":3}".as_bytes();
        for split in 0..=body.len() {
            let (head, tail) = body.split_at(split);
            assert_eq!(
                parse(&[head, tail]).unwrap(),
                ["{\"a\":\"é\"}", "{\"b\":2}", "{\"c\":3}"],
                "split at {split}"
            );
        }
    }

    #[test]
    fn a_line_that_is_not_utf8_is_an_error() {
        let error = parse(&[b"{\"a\":\"\xFF\"}\n"]).unwrap_err();
        assert!(error.message.contains("UTF-8"), "{error}");
    }

    #[test]
    fn a_line_larger_than_the_frame_limit_is_refused() {
        let feed = |chunks: &[&[u8]]| {
            parse_with(NdjsonParser::new().with_max_frame_bytes(8), chunks).map(|lines| lines.len())
        };
        assert_eq!(feed(&[b"{\"a\":12}\n{\"b\"", b":1}\n"]).unwrap(), 2);
        let error = feed(&[b"{\"a\":", b"123456789"]).unwrap_err();
        assert_eq!(error.kind, agent_types::BackendErrorKind::Protocol);
        assert!(
            error.message.contains("NDJSON line is larger than 8"),
            "{}",
            error.message
        );
        assert!(feed(&[b"{\"a\":", b"1234}\n"]).is_err());
    }
}
