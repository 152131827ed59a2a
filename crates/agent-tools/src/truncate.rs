//! Rendering a tool result as text and capping it at a byte budget, counted as the text will
//! travel: escaped inside a JSON string.

use std::io;

use serde_json::Value;

use crate::error::Error;

/// Longest possible marker: 34 fixed bytes (`…` is 3 of them) plus 20 digits for `usize::MAX`.
const MAX_MARKER_LEN: usize = 34 + 20;

/// Bytes each byte of text takes once escaped inside a JSON string, as serde_json (and so every
/// provider request this workspace builds) writes it: `"` and `\` and the five control
/// characters with a short escape take 2, the other control characters 6 (`\u0000`), anything
/// else (UTF-8 continuation bytes included) 1.
const ESCAPED: [u8; 256] = {
    let mut table = [1u8; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = 6;
        byte += 1;
    }
    table[b'"' as usize] = 2;
    table[b'\\' as usize] = 2;
    table[b'\n' as usize] = 2;
    table[b'\r' as usize] = 2;
    table[b'\t' as usize] = 2;
    table[0x08] = 2;
    table[0x0c] = 2;
    table
};

/// The size of `text` once escaped as the contents of a JSON string (quotes not counted):
/// what a tool result costs in a provider request, and what [`TruncationPolicy`] caps.
///
/// ```
/// assert_eq!(agent_tools::escaped_len("abc"), 3);
/// assert_eq!(agent_tools::escaped_len("a\"b\n"), 6);
/// assert_eq!(agent_tools::escaped_len("\0"), 6);
/// assert_eq!(agent_tools::escaped_len("é"), 2);
/// ```
pub fn escaped_len(text: &str) -> usize {
    text.bytes()
        .map(|byte| usize::from(ESCAPED[usize::from(byte)]))
        .sum()
}

/// How large a result may be when it is sent to the model.
///
/// The cap counts bytes of the rendered text, marker included, **once escaped as a JSON
/// string** ([`escaped_len`]): the size the result takes in the request to the provider. A
/// truncated result is never larger than [`max_bytes`](Self::max_bytes) on the wire, however
/// many quotes or control characters it holds (a NUL is 1 byte of text but 6 escaped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TruncationPolicy {
    max_bytes: usize,
}

impl TruncationPolicy {
    /// The default cap: 65,536 bytes.
    pub const DEFAULT_MAX_BYTES: usize = 65_536;

    /// The smallest cap accepted: room for the longest marker (54 bytes) with some to spare.
    pub const MIN_MAX_BYTES: usize = 64;

    /// A policy capping results at `max_bytes`.
    ///
    /// # Errors
    ///
    /// [`Error::CapTooSmall`] when `max_bytes` is under [`MIN_MAX_BYTES`](Self::MIN_MAX_BYTES):
    /// such a cap could not hold the marker, and a silently empty result would hide the cut.
    pub fn new(max_bytes: usize) -> Result<Self, Error> {
        if max_bytes < Self::MIN_MAX_BYTES {
            return Err(Error::CapTooSmall {
                max_bytes,
                min_bytes: Self::MIN_MAX_BYTES,
            });
        }
        Ok(Self { max_bytes })
    }

    /// The cap in bytes.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }
}

impl Default for TruncationPolicy {
    fn default() -> Self {
        Self {
            max_bytes: Self::DEFAULT_MAX_BYTES,
        }
    }
}

/// A result after [`truncate`]: the text to send and what was cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncated {
    /// The text to send: the original, or a prefix of it followed by the marker. Its capacity
    /// is its length: nothing that was cut stays allocated.
    pub text: String,
    /// Size of the full text in bytes.
    pub original_bytes: usize,
    /// Size of what is sent in bytes (`text.len()`).
    pub sent_bytes: usize,
    /// Size of what is sent once escaped as a JSON string ([`escaped_len`] of `text`): never
    /// over the cap.
    pub escaped_bytes: usize,
    /// Bytes of the original kept in `text` (all of them when not truncated).
    pub kept_bytes: usize,
    /// Whether anything was cut.
    pub truncated: bool,
}

impl Truncated {
    /// Bytes of the original that the model does not see.
    pub fn removed_bytes(&self) -> usize {
        self.original_bytes - self.kept_bytes
    }
}

/// The marker appended to a cut result; `full_bytes` is the size of the whole text.
pub fn marker(full_bytes: usize) -> String {
    format!("[…truncated; full result {full_bytes} bytes]")
}

/// Renders a tool result as the text the model sees: a JSON string is sent as its raw text
/// (no quotes, no escapes), anything else as compact JSON.
///
/// Takes the value by value so a string result (often the largest kind) is moved, not copied.
/// This renders all of it; [`truncate_result`] renders only what the cap can keep.
pub fn render_result(value: Value) -> String {
    match value {
        Value::String(text) => text,
        other => other.to_string(),
    }
}

/// The longest prefix of `text` whose escaped size is at most `budget`, cut at a character
/// boundary: its length in bytes and its escaped size. Stops at the first byte that does not
/// fit, so it reads at most `budget` bytes of `text`.
fn fitting_prefix(text: &str, budget: usize) -> (usize, usize) {
    let mut escaped = 0usize;
    let mut end = text.len();
    for (at, byte) in text.bytes().enumerate() {
        let cost = usize::from(ESCAPED[usize::from(byte)]);
        if escaped + cost > budget {
            end = at;
            break;
        }
        escaped += cost;
    }
    // Backing off drops the leading bytes of a multi-byte character (1 escaped byte each).
    while !text.is_char_boundary(end) {
        end -= 1;
        escaped -= 1;
    }
    (end, escaped)
}

/// Caps `text` under `policy`.
///
/// When `text` fits (its [escaped size](escaped_len) is at most the cap) it is returned
/// unchanged, its spare capacity released. Otherwise the longest prefix that leaves room for the
/// marker, cut at a UTF-8 character boundary, is copied into a new string of exactly the
/// right size, the marker is appended, and `text` is dropped: the result is valid UTF-8, at
/// most `max_bytes` once escaped, starts with a prefix of the original, and holds no memory
/// for what was cut (cutting a `String` in place would keep its whole allocation alive for as
/// long as the result lives: in the conversation, for the rest of the session).
pub fn truncate(text: String, policy: &TruncationPolicy) -> Truncated {
    let original_bytes = text.len();
    cut(text, original_bytes, policy)
}

/// [`truncate`] for a `text` that may already be a prefix of a result of `original_bytes`.
fn cut(mut text: String, original_bytes: usize, policy: &TruncationPolicy) -> Truncated {
    if text.len() == original_bytes {
        let (fits, escaped_bytes) = fitting_prefix(&text, policy.max_bytes);
        if fits == text.len() {
            text.shrink_to_fit();
            return Truncated {
                text,
                original_bytes,
                sent_bytes: original_bytes,
                escaped_bytes,
                kept_bytes: original_bytes,
                truncated: false,
            };
        }
    }
    let marker = marker(original_bytes);
    debug_assert!(marker.len() <= MAX_MARKER_LEN);
    debug_assert_eq!(escaped_len(&marker), marker.len());
    // The policy guarantees the marker fits; saturating keeps this total anyway.
    let budget = policy.max_bytes.saturating_sub(marker.len());
    let (keep, escaped) = fitting_prefix(&text, budget);
    let mut kept = String::with_capacity(keep + marker.len());
    kept.push_str(&text[..keep]);
    kept.push_str(&marker);
    drop(text);
    Truncated {
        sent_bytes: kept.len(),
        escaped_bytes: escaped + marker.len(),
        text: kept,
        original_bytes,
        kept_bytes: keep,
        truncated: true,
    }
}

/// An [`io::Write`] that keeps the first `limit` bytes written and counts all of them.
/// What [`truncate_result`]'s buffer starts with: most tool results are short objects.
const FIRST_CAPACITY: usize = 128;

struct Prefix {
    kept: Vec<u8>,
    limit: usize,
    total: usize,
}

impl io::Write for Prefix {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = self.limit - self.kept.len();
        self.kept.extend_from_slice(&buf[..room.min(buf.len())]);
        self.total += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// [`render_result`] then [`truncate`], without ever holding more of the rendered text than
/// the cap can keep: a string is moved, anything else is rendered into a buffer of at most
/// `max_bytes` that only counts the rest (every byte takes at least one escaped byte, so
/// nothing past `max_bytes` could be kept).
pub fn truncate_result(value: Value, policy: &TruncationPolicy) -> Truncated {
    let other = match value {
        Value::String(text) => return truncate(text, policy),
        other => other,
    };
    let mut prefix = Prefix {
        // serde_json writes a value in many small pieces: from empty, a 100-byte result
        // grew through five allocations (8, 16, 32, 64, 128 bytes), one per tool call.
        kept: Vec::with_capacity(policy.max_bytes.min(FIRST_CAPACITY)),
        limit: policy.max_bytes,
        total: 0,
    };
    // Serializing a `Value` cannot fail (its keys are strings) and `Prefix` never fails.
    if serde_json::to_writer(&mut prefix, &other).is_err() {
        return truncate(other.to_string(), policy);
    }
    drop(other);
    let text = match String::from_utf8(prefix.kept) {
        Ok(text) => text,
        // The limit fell inside a character: drop its first bytes (serde_json writes UTF-8).
        Err(error) => {
            let valid = error.utf8_error().valid_up_to();
            let mut bytes = error.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).unwrap_or_default()
        }
    };
    cut(text, prefix.total, policy)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn policy(max: usize) -> TruncationPolicy {
        TruncationPolicy::new(max).unwrap()
    }

    #[test]
    fn marker_is_as_specified() {
        assert_eq!(marker(123), "[…truncated; full result 123 bytes]");
        assert_eq!(marker(0).len(), 34 + 1);
        assert_eq!(marker(usize::MAX).len(), MAX_MARKER_LEN);
        const { assert!(MAX_MARKER_LEN <= TruncationPolicy::MIN_MAX_BYTES) };
    }

    #[test]
    fn small_caps_are_rejected() {
        assert_eq!(
            TruncationPolicy::new(63),
            Err(Error::CapTooSmall {
                max_bytes: 63,
                min_bytes: 64
            })
        );
        assert!(TruncationPolicy::new(64).is_ok());
        assert_eq!(TruncationPolicy::default().max_bytes(), 65_536);
    }

    #[test]
    fn fits_exactly_at_the_cap() {
        let text = "a".repeat(1000);
        let out = truncate(text, &policy(100));
        assert!(out.truncated);
        assert_eq!(out.sent_bytes, 100);
        assert_eq!(out.text.len(), 100);
        assert!(out.text.ends_with("[…truncated; full result 1000 bytes]"));
        assert_eq!(out.kept_bytes, 100 - marker(1000).len());
        assert_eq!(out.removed_bytes(), 1000 - out.kept_bytes);
    }

    #[test]
    fn backs_off_to_a_char_boundary() {
        // 'é' is 2 bytes, '😀' is 4: cuts land inside them for some caps.
        let text = "😀".repeat(100);
        for max in 64..120 {
            let out = truncate(text.clone(), &policy(max));
            assert!(out.sent_bytes <= max);
            assert!(max - out.sent_bytes <= 3, "backed off more than 3 bytes");
            assert_eq!(out.kept_bytes % 4, 0);
        }
    }

    #[test]
    fn at_the_cap_is_untouched() {
        let out = truncate("x".repeat(64), &policy(64));
        assert!(!out.truncated);
        assert_eq!(out.text, "x".repeat(64));
    }

    #[test]
    fn strings_are_sent_raw_and_the_rest_as_compact_json() {
        assert_eq!(render_result(json!("line\n\"quoted\"")), "line\n\"quoted\"");
        assert_eq!(render_result(json!({"a": [1, 2]})), r#"{"a":[1,2]}"#);
        assert_eq!(render_result(json!(null)), "null");
        let out = truncate_result(json!({"k": "v".repeat(200)}), &policy(64));
        assert!(out.truncated);
        assert!(out.text.starts_with(r#"{"k":"vvv"#));
    }

    /// What serde_json makes of `text` as a JSON string, quotes not counted.
    fn wire_len(text: &str) -> usize {
        serde_json::to_string(text).unwrap().len() - 2
    }

    #[test]
    fn escaping_is_counted_in_the_cap() {
        // A NUL is 1 byte of text and 6 on the wire (`\u0000`): 1 MiB of them would be 6 MiB.
        let out = truncate("\0".repeat(1 << 20), &policy(65_536));
        assert!(out.truncated);
        assert_eq!(out.escaped_bytes, wire_len(&out.text));
        assert!(wire_len(&out.text) <= 65_536, "{}", wire_len(&out.text));
        assert!(65_536 - wire_len(&out.text) < 6);
        assert_eq!(out.kept_bytes, (65_536 - marker(1 << 20).len()) / 6);
        assert_eq!(out.original_bytes, 1 << 20);

        // Under the cap in bytes but over it once escaped: still cut.
        let quotes = "\"".repeat(100);
        let out = truncate(quotes.clone(), &policy(150));
        assert!(out.truncated);
        assert!(wire_len(&out.text) <= 150);
        // At the cap once escaped: untouched.
        let out = truncate(quotes, &policy(200));
        assert!(!out.truncated);
        assert_eq!(out.escaped_bytes, 200);
        assert_eq!(out.sent_bytes, 100);
    }

    #[test]
    fn truncation_frees_what_it_cuts() {
        let mut text = String::with_capacity(1 << 20);
        text.push_str(&"x".repeat(1 << 20));
        let out = truncate(text, &policy(65_536));
        assert!(out.truncated);
        assert_eq!(out.text.capacity(), out.text.len());
        assert!(out.text.capacity() <= 65_536);

        // A short result in a large allocation gives the spare room back too.
        let mut text = String::with_capacity(1 << 20);
        text.push_str("short");
        let out = truncate(text, &policy(65_536));
        assert!(!out.truncated);
        assert_eq!(out.text, "short");
        assert_eq!(out.text.capacity(), 5);
    }

    #[test]
    fn structured_results_are_rendered_only_as_far_as_the_cap() {
        let value = json!({"path": "big.txt", "content": "\0".repeat(1 << 20), "note": "é"});
        let full = render_result(value.clone());
        let out = truncate_result(value, &policy(65_536));
        // The marker states the size of the whole rendering, which was counted, not kept.
        assert_eq!(out.original_bytes, full.len());
        assert_eq!(out, truncate(full, &policy(65_536)));
        assert_eq!(out.text.capacity(), out.text.len());
        assert!(wire_len(&out.text) <= 65_536);
    }

    #[test]
    fn escaped_len_matches_serde_json_on_every_byte() {
        for code in 0..=0x7f_u8 {
            let text = char::from(code).to_string();
            assert_eq!(escaped_len(&text), wire_len(&text), "byte {code:#04x}");
        }
        assert_eq!(escaped_len("😀é\u{7f}"), wire_len("😀é\u{7f}"));
    }

    /// Text rich in what escaping grows: quotes, backslashes, control characters, multi-byte
    /// characters.
    fn hostile_text() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop_oneof![
                Just('\0'),
                Just('"'),
                Just('\\'),
                Just('\n'),
                Just('\u{1f}'),
                Just('é'),
                Just('😀'),
                any::<char>(),
                "[a-z]".prop_map(|s| s.chars().next().unwrap()),
            ],
            0..400,
        )
        .prop_map(|chars| chars.into_iter().collect())
    }

    proptest! {
        #[test]
        fn escaped_len_is_serde_jsons(text in any::<String>()) {
            prop_assert_eq!(escaped_len(&text), wire_len(&text));
        }

        #[test]
        fn truncation_is_bounded_once_escaped(
            text in hostile_text(),
            max in 64usize..600,
            spare in 0usize..4096,
        ) {
            let mut input = String::with_capacity(text.len() + spare);
            input.push_str(&text);
            let out = truncate(input, &policy(max));
            // The cap holds on the wire; the bytes are valid UTF-8.
            prop_assert!(wire_len(&out.text) <= max);
            prop_assert_eq!(out.escaped_bytes, wire_len(&out.text));
            prop_assert!(std::str::from_utf8(out.text.as_bytes()).is_ok());
            prop_assert_eq!(out.sent_bytes, out.text.len());
            prop_assert_eq!(out.original_bytes, text.len());
            // Nothing cut stays allocated.
            prop_assert_eq!(out.text.capacity(), out.text.len());
            if wire_len(&text) <= max {
                prop_assert!(!out.truncated);
                prop_assert_eq!(&out.text, &text);
            } else {
                prop_assert!(out.truncated);
                let m = marker(text.len());
                prop_assert!(out.text.ends_with(&m));
                let kept = &out.text[..out.text.len() - m.len()];
                prop_assert_eq!(kept.len(), out.kept_bytes);
                prop_assert!(text.starts_with(kept));
                // The cut is as late as possible: the next character did not fit (it takes
                // at most 6 escaped bytes).
                prop_assert!(max - wire_len(&out.text) < 6);
                let next = text[kept.len()..].chars().next().unwrap();
                prop_assert!(wire_len(&out.text) + wire_len(&next.to_string()) > max);
            }
        }

        #[test]
        fn rendering_under_the_cap_equals_rendering_then_cutting(
            content in hostile_text(),
            key in "[a-z\"\\\\\u{0}é]{0,8}",
            n in any::<i64>(),
            max in 64usize..600,
        ) {
            let value = json!({"content": content, key: [n, null, true], "tail": "ok"});
            let whole = truncate(render_result(value.clone()), &policy(max));
            prop_assert_eq!(truncate_result(value, &policy(max)), whole);
        }
    }
}
