//! Server-sent events, as the WHATWG HTML standard defines the `text/event-stream` format.

use std::borrow::Cow;

use agent_types::BackendError;

use super::{FrameLimit, find_eol};

/// One dispatched event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event:` field; empty when the event had none (the standard calls that `message`).
    pub event: &'a str,
    /// The `data:` lines, joined with `\n`.
    pub data: &'a str,
}

/// An incremental `text/event-stream` parser.
///
/// Lines may end in `\r\n`, `\n` or `\r` (Gemini separates events with `\r\n\r\n`), a leading
/// byte-order mark is skipped, comment lines (`:` …) and the `id` and `retry` fields are
/// ignored, and one space after a field's colon is dropped. An event is dispatched at the blank
/// line that ends it; events with no `data` line are not dispatched. Bytes that are not UTF-8
/// are replaced with U+FFFD as the standard says, so the JSON parser downstream reports them.
#[derive(Debug, Default)]
pub struct SseParser {
    /// The unfinished line carried over from the previous chunk.
    line: Vec<u8>,
    data: String,
    event: String,
    has_data: bool,
    /// The previous chunk ended with `\r`; a `\n` starting this one belongs to it.
    skip_lf: bool,
    /// Bytes seen so far, to skip a BOM only at the very start.
    started: bool,
    /// The most one event's lines and data may hold.
    limit: FrameLimit,
}

impl SseParser {
    /// An empty parser.
    pub fn new() -> Self {
        Self::default()
    }

    /// The most bytes one event may hold (its unfinished line, or its data lines together)
    /// before [`feed`](Self::feed) refuses the stream; [`MAX_FRAME_BYTES`](super::MAX_FRAME_BYTES)
    /// unless set.
    #[must_use]
    pub fn with_max_frame_bytes(mut self, max: usize) -> Self {
        self.limit = FrameLimit(max);
        self
    }

    /// Parses the next chunk of the body, calling `on_event` for every event it completes.
    ///
    /// `on_event` is generic (an [`OnEvent`](super::OnEvent) trait object still fits) so that a decoder's
    /// callback is inlined into the loop: it runs for every event of every stream (issue 16).
    ///
    /// # Errors
    ///
    /// A protocol error for an event larger than the frame limit, or whatever `on_event`
    /// returns; parsing stops there.
    pub fn feed<F>(&mut self, mut chunk: &[u8], on_event: &mut F) -> Result<(), BackendError>
    where
        F: for<'x> FnMut(SseEvent<'x>) -> Result<(), BackendError> + ?Sized,
    {
        if !self.started && !chunk.is_empty() {
            self.started = true;
            chunk = chunk.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(chunk);
        }
        if self.skip_lf {
            self.skip_lf = false;
            chunk = chunk.strip_prefix(b"\n").unwrap_or(chunk);
        }
        while let Some(eol) = find_eol(chunk) {
            if self.line.is_empty() && !self.has_data {
                // The common event, `data: …` and its blank line whole in this chunk, goes
                // out borrowed from the chunk instead of copied into `data` first.
                if let Some((data, end)) = whole_data_event(chunk, eol) {
                    let result = on_event(SseEvent {
                        event: &self.event,
                        data,
                    });
                    self.event.clear();
                    result?;
                    chunk = &chunk[end..];
                    continue;
                }
                self.line_complete(&chunk[..eol], on_event)?;
            } else if self.line.is_empty() {
                self.line_complete(&chunk[..eol], on_event)?;
            } else {
                self.limit
                    .append(&mut self.line, &chunk[..eol], "a server-sent event's line")?;
                let line = std::mem::take(&mut self.line);
                let result = self.line_complete(&line, on_event);
                self.line = line;
                self.line.clear();
                result?;
            }
            let mut next = eol + 1;
            if chunk[eol] == b'\r' {
                match chunk.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.skip_lf = true,
                }
            }
            chunk = &chunk[next..];
        }
        self.limit
            .append(&mut self.line, chunk, "a server-sent event's line")?;
        Ok(())
    }

    /// The body ended. An event still missing its closing blank line is dispatched rather than
    /// dropped (the standard drops it; servers that omit the final blank line exist, and
    /// dropping their last event would lose the usage report or the finish).
    ///
    /// # Errors
    ///
    /// Whatever `on_event` returns.
    pub fn finish<F>(&mut self, on_event: &mut F) -> Result<(), BackendError>
    where
        F: for<'x> FnMut(SseEvent<'x>) -> Result<(), BackendError> + ?Sized,
    {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_complete(&line, on_event)?;
        }
        self.dispatch(on_event)
    }

    fn line_complete<F>(&mut self, line: &[u8], on_event: &mut F) -> Result<(), BackendError>
    where
        F: for<'x> FnMut(SseEvent<'x>) -> Result<(), BackendError> + ?Sized,
    {
        if line.is_empty() {
            return self.dispatch(on_event);
        }
        if line[0] == b':' {
            return Ok(());
        }
        let line = match std::str::from_utf8(line) {
            Ok(text) => Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(line),
        };
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (&*line, ""),
        };
        match field {
            "data" => {
                // The `\n` joining it to the lines before counts too.
                self.limit.check(
                    self.data.len() + usize::from(self.has_data),
                    value.len(),
                    "a server-sent event's data",
                )?;
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            _ => {}
        }
        Ok(())
    }

    fn dispatch<F>(&mut self, on_event: &mut F) -> Result<(), BackendError>
    where
        F: for<'x> FnMut(SseEvent<'x>) -> Result<(), BackendError> + ?Sized,
    {
        let result = if self.has_data {
            on_event(SseEvent {
                event: &self.event,
                data: &self.data,
            })
        } else {
            Ok(())
        };
        self.data.clear();
        self.event.clear();
        self.has_data = false;
        result
    }
}

/// A `data` line ending at `eol` and followed at once by the blank line ending the event
/// (`\n\n` or `\r\n\r\n`, both in `chunk`): its UTF-8 value and where the event ends.
/// Anything else (more lines, a split terminator, bytes that are not UTF-8) is `None`, for
/// the general path.
fn whole_data_event(chunk: &[u8], eol: usize) -> Option<(&str, usize)> {
    let value = chunk[..eol].strip_prefix(b"data:")?;
    let value = value.strip_prefix(b" ").unwrap_or(value);
    let end = match &chunk[eol..] {
        [b'\n', b'\n', ..] => eol + 2,
        [b'\r', b'\n', b'\r', b'\n', ..] => eol + 4,
        _ => return None,
    };
    Some((std::str::from_utf8(value).ok()?, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunks: &[&[u8]]) -> Vec<(String, String)> {
        parse_with(SseParser::new(), chunks).unwrap()
    }

    fn parse_with(
        mut parser: SseParser,
        chunks: &[&[u8]],
    ) -> Result<Vec<(String, String)>, BackendError> {
        let mut seen = Vec::new();
        let mut on = |event: SseEvent<'_>| {
            seen.push((event.event.to_owned(), event.data.to_owned()));
            Ok(())
        };
        for chunk in chunks {
            parser.feed(chunk, &mut on)?;
        }
        parser.finish(&mut on)?;
        Ok(seen)
    }

    fn pair(event: &str, data: &str) -> (String, String) {
        (event.to_owned(), data.to_owned())
    }

    #[test]
    fn every_line_ending_and_split_gives_the_same_events() {
        let expected = vec![pair("a", "1\n2"), pair("", "3")];
        for body in [
            &b"event: a\ndata: 1\ndata: 2\n\ndata: 3\n\n"[..],
            b"event: a\r\ndata: 1\r\ndata: 2\r\n\r\ndata: 3\r\n\r\n",
            b"event: a\rdata: 1\rdata: 2\r\rdata: 3\r\r",
        ] {
            for split in 0..=body.len() {
                let (head, tail) = body.split_at(split);
                assert_eq!(parse(&[head, tail]), expected, "split at {split}");
            }
            let bytes: Vec<&[u8]> = body.chunks(1).collect();
            assert_eq!(parse(&bytes), expected);
        }
    }

    // Events whole in one chunk go out borrowed (issue 16); every shape must give what the
    // copying path gives, which one byte per chunk always takes.
    #[test]
    fn events_whole_in_a_chunk_match_the_byte_by_byte_parse() {
        let body: &[u8] = b"event: a\ndata: 1\n\ndata:2\n\ndata: 3\r\n\r\ndata: 4\ndata: 5\n\n\
            data:\n\ndatax: 6\n\ndata: \xC3\xA9\n\ndata: \xFF\n\nevent: b\r\ndata: 7\r\n\r\n";
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        let whole = parse(&[body]);
        assert_eq!(whole, parse(&bytes));
        assert_eq!(
            whole,
            vec![
                pair("a", "1"),
                pair("", "2"),
                pair("", "3"),
                pair("", "4\n5"),
                pair("", ""),
                pair("", "é"),
                pair("", "\u{FFFD}"),
                pair("b", "7"),
            ]
        );
    }

    #[test]
    fn comments_ids_bom_and_spacing() {
        let body = b"\xEF\xBB\xBF: keep-alive\nid: 7\nretry: 10\ndata:no-space\n\ndata:  two\n\n";
        assert_eq!(parse(&[body]), vec![pair("", "no-space"), pair("", " two")]);
    }

    #[test]
    fn events_without_data_are_not_dispatched_and_a_missing_final_blank_line_is_tolerated() {
        assert_eq!(
            parse(&[b"event: ping\n\ndata: last"]),
            vec![pair("", "last")]
        );
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        assert_eq!(parse(&[b"data: \xFF\n\n"]), vec![pair("", "\u{FFFD}")]);
    }

    #[test]
    fn a_callback_error_stops_the_parse() {
        let mut parser = SseParser::new();
        let error = parser
            .feed(b"data: 1\n\ndata: 2\n\n", &mut |_| {
                Err(crate::framing::malformed("stop"))
            })
            .unwrap_err();
        assert_eq!(error.message, "stop");
    }

    // An event is buffered only while unfinished; one that outgrows the frame limit (a line
    // that never ends, data lines piling up) stops the stream instead of growing the buffer.
    #[test]
    fn an_event_larger_than_the_frame_limit_is_refused() {
        let feed = |chunks: &[&[u8]]| {
            parse_with(SseParser::new().with_max_frame_bytes(24), chunks).map(|events| events.len())
        };
        // Within the limit, split or whole: fine.
        assert_eq!(feed(&[b"data: 0123456789abcdef\n\n"]).unwrap(), 1);
        assert_eq!(feed(&[b"data: 01234567", b"89abcdef\n\n"]).unwrap(), 1);
        // A line that goes on past it, across chunks.
        for chunks in [
            &[&b"data: 0123456789"[..], b"abcdefghij"][..],
            &[&b"data: 0123456789abcdefghij"[..]][..],
        ] {
            let error = feed(chunks).unwrap_err();
            assert_eq!(error.kind, agent_types::BackendErrorKind::Protocol);
            assert!(
                error.message.contains("line is larger than 24 bytes"),
                "{}",
                error.message
            );
        }
        // Data of exactly the limit, its blank line in the next chunk: fine.
        assert_eq!(
            feed(&[b"data: 0123456789abcdefghijklmn\n", b"\n"]).unwrap(),
            1
        );
        // Data lines that together pass it.
        let error = feed(&[b"data: 0123456789\ndata: abcdefghijklmn\n\n"]).unwrap_err();
        assert!(error.message.contains("event's data"), "{}", error.message);
        // The limit is per event: many events at the limit pass.
        let many = b"data: 0123456789abcdef\n\n".repeat(100);
        assert_eq!(feed(&[&many[..7], &many[7..]]).unwrap(), 100);
    }
}
