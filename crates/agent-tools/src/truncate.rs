//! Rendering a tool result as text and capping it at a byte budget.

use serde_json::Value;

use crate::error::Error;

/// Longest possible marker: 34 fixed bytes (`…` is 3 of them) plus 20 digits for `usize::MAX`.
const MAX_MARKER_LEN: usize = 34 + 20;

/// How large a result may be when it is sent to the model.
///
/// The cap counts bytes of the rendered text, marker included, so a truncated result is
/// never larger than [`max_bytes`](Self::max_bytes).
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
    /// The text to send: the original, or a prefix of it followed by the marker.
    pub text: String,
    /// Size of the full text in bytes.
    pub original_bytes: usize,
    /// Size of what is sent in bytes (`text.len()`), never over the cap.
    pub sent_bytes: usize,
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
pub fn render_result(value: Value) -> String {
    match value {
        Value::String(text) => text,
        other => other.to_string(),
    }
}

/// Caps `text` under `policy`.
///
/// When `text` fits it is returned untouched. Otherwise it is cut in place at the last UTF-8
/// character boundary that leaves room for the marker, and the marker is appended, so the
/// result is valid UTF-8, at most `max_bytes` long, and starts with a prefix of the original.
/// Finding the cut is a boundary search (at most 3 bytes of back-off), not a copy.
pub fn truncate(mut text: String, policy: &TruncationPolicy) -> Truncated {
    let original_bytes = text.len();
    if original_bytes <= policy.max_bytes {
        return Truncated {
            text,
            original_bytes,
            sent_bytes: original_bytes,
            kept_bytes: original_bytes,
            truncated: false,
        };
    }
    let marker = marker(original_bytes);
    debug_assert!(marker.len() <= MAX_MARKER_LEN);
    // The policy guarantees the marker fits; saturating keeps this total anyway.
    let mut keep = policy.max_bytes.saturating_sub(marker.len());
    while !text.is_char_boundary(keep) {
        keep -= 1;
    }
    text.truncate(keep);
    text.push_str(&marker);
    Truncated {
        sent_bytes: text.len(),
        text,
        original_bytes,
        kept_bytes: keep,
        truncated: true,
    }
}

/// [`render_result`] then [`truncate`].
pub fn truncate_result(value: Value, policy: &TruncationPolicy) -> Truncated {
    truncate(render_result(value), policy)
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

    proptest! {
        #[test]
        fn truncation_properties(text in "\\PC{0,300}", max in 64usize..400) {
            let out = truncate(text.clone(), &policy(max));
            // Never over the cap; `text` is a String so it is valid UTF-8 by construction,
            // and we check the bytes again to be explicit.
            prop_assert!(out.text.len() <= max);
            prop_assert!(std::str::from_utf8(out.text.as_bytes()).is_ok());
            prop_assert_eq!(out.sent_bytes, out.text.len());
            prop_assert_eq!(out.original_bytes, text.len());
            if text.len() <= max {
                prop_assert!(!out.truncated);
                prop_assert_eq!(&out.text, &text);
            } else {
                prop_assert!(out.truncated);
                let m = marker(text.len());
                prop_assert!(out.text.ends_with(&m));
                let kept = &out.text[..out.text.len() - m.len()];
                prop_assert_eq!(kept.len(), out.kept_bytes);
                prop_assert!(text.starts_with(kept));
                // The cut is as late as possible: at most 3 bytes of back-off.
                prop_assert!(max - out.text.len() <= 3);
            }
        }
    }
}
