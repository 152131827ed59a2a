//! The web-frontend protocols' encoders: a run's [`AgentEvent`]s as the bytes of the AI
//! SDK's UI message stream ([`UiMessageEncoder`], `POST /v1/ui/chat`) or of AG-UI
//! ([`AgUiEncoder`], `POST /v1/ag-ui`), usable on any event stream (docs/frontends.md).
//!
//! An encoder writes each event's frames (`data: <json>\n\n`) into the caller's buffer and
//! allocates nothing per event: strings are escaped straight into the buffer, numbers
//! written without formatting, and what it keeps between events (the open model call's tool
//! call ids) reuses its capacity. Only [`Encoder::close`], once per run, builds JSON values.
//!
//! ```
//! use agent_server::encode::{Encoder, UiMessageEncoder};
//! use agent_types::AgentEvent;
//! use bytes::BytesMut;
//!
//! let mut encoder = UiMessageEncoder::new(Vec::new());
//! let mut out = BytesMut::with_capacity(4096);
//! encoder.open(&mut out);
//! encoder.event(&AgentEvent::TextStart, &mut out);
//! encoder.event(&AgentEvent::TextDelta { delta: "Hi".into() }, &mut out);
//! assert!(out.ends_with(b"data: {\"type\":\"text-delta\",\"id\":\"text-0\",\"delta\":\"Hi\"}\n\n"));
//! ```

use agent_loop::Session;
use agent_types::{AgentError, AgentEvent, Usage};
use bytes::BytesMut;

pub use crate::ag_ui::AgUiEncoder;
pub use crate::ui_stream::UiEncoder as UiMessageEncoder;

/// How a run's events become a protocol's bytes.
pub trait Encoder: Send + 'static {
    /// The frames before the first event.
    fn open(&mut self, out: &mut BytesMut);
    /// One loop event (errors already redacted).
    fn event(&mut self, event: &AgentEvent, out: &mut BytesMut);
    /// The last frames, once the session is saved.
    fn close(&mut self, end: &End<'_>, out: &mut BytesMut);
    /// The run goes on when its client hangs up, for clients that resume its stream
    /// [default: no: a client that hangs up stops the run].
    fn outlives_client(&self) -> bool {
        false
    }
}

/// How a run ended, for [`Encoder::close`].
pub struct End<'a> {
    /// The session as saved (status, pending calls and approvals).
    pub session: &'a Session,
    /// What this run spent.
    pub usage: Usage,
    /// What this run cost, when priced.
    pub cost_usd: Option<f64>,
    /// Why the run failed (redacted).
    pub error: Option<&'a AgentError>,
}

/// JSON text for a tool's output as a protocol carries it: the text itself when it is one
/// line of valid JSON (the usual case: a handler's serialized result), else a JSON string
/// of it. Writes into `out` without allocating in the usual case.
pub(crate) fn write_output(output: &str, out: &mut BytesMut) {
    use bytes::BufMut;
    let one_line = !output.bytes().any(|byte| byte == b'\n' || byte == b'\r');
    if one_line && serde_json::from_str::<serde::de::IgnoredAny>(output).is_ok() {
        out.extend_from_slice(output.trim().as_bytes());
        return;
    }
    if !one_line && let Ok(value) = serde_json::from_str::<serde_json::Value>(output) {
        // Pretty JSON would break the SSE line: compacted (rare; allocates).
        let _ = serde_json::to_writer(out.writer(), &value);
        return;
    }
    let _ = serde_json::to_writer(out.writer(), output);
}

/// `s` as a JSON string into `out`.
pub(crate) fn write_str(s: &str, out: &mut BytesMut) {
    use bytes::BufMut;
    let _ = serde_json::to_writer(out.writer(), s);
}

/// `value` as JSON into `out`.
pub(crate) fn write_json<T: serde::Serialize + ?Sized>(value: &T, out: &mut BytesMut) {
    use bytes::BufMut;
    let _ = serde_json::to_writer(out.writer(), value);
}

/// A decimal number into `out` without allocating.
pub(crate) fn write_u64(mut n: u64, out: &mut BytesMut) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        #[allow(clippy::cast_possible_truncation)]
        {
            digits[at] = b'0' + (n % 10) as u8;
        }
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_json_as_they_are_or_strings() {
        let cases = [
            (r#"{"temp_c":19}"#, r#"{"temp_c":19}"#),
            ("{\n  \"a\": 1\n}", r#"{"a":1}"#),
            ("not json", r#""not json""#),
            ("line\nbreak", r#""line\nbreak""#),
        ];
        for (output, written) in cases {
            let mut out = BytesMut::new();
            write_output(output, &mut out);
            assert_eq!(std::str::from_utf8(&out).unwrap(), written);
        }
    }

    #[test]
    fn numbers_are_written_in_decimal() {
        for n in [0, 7, 10, 12345, u64::MAX] {
            let mut out = BytesMut::new();
            write_u64(n, &mut out);
            assert_eq!(std::str::from_utf8(&out).unwrap(), n.to_string());
        }
    }
}

/// The open model call's tool call ids, by index: slots (and their capacity) are reused
/// across calls, so remembering an id allocates nothing once warm.
#[derive(Debug, Default)]
pub(crate) struct CallIds(Vec<String>);

impl CallIds {
    /// Remembers `id` as the call at `index`.
    pub(crate) fn remember(&mut self, index: u32, id: &str) {
        let index = index as usize;
        if self.0.len() <= index {
            self.0.resize_with(index + 1, String::new);
        }
        self.0[index].clear();
        self.0[index].push_str(id);
    }

    /// The id of the call at `index`, empty when none was remembered.
    pub(crate) fn get(&self, index: u32) -> &str {
        self.0.get(index as usize).map_or("", String::as_str)
    }
}
