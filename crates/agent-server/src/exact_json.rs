//! JSON in a buffer of exactly its size, for the few documents that can be large (a stored
//! session, the `session_end` event that carries a run's messages).
//!
//! A growing buffer ends up to twice the document's size and copies it at each doubling: a
//! 19 MiB session's JSON sat in a 32 MiB buffer, the largest single thing the server held
//! while saving it. Measuring first (serializing into a counter that keeps nothing) and then
//! writing once costs a second serialization, which is cheaper than that memory.

use serde::Serialize;

/// Counts the bytes written to it, keeping none.
struct Count(usize);

impl std::io::Write for Count {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 = self.0.saturating_add(bytes.len());
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The size of `value` as JSON (0 if it cannot be serialized), measured without keeping it.
pub(crate) fn len<T: Serialize + ?Sized>(value: &T) -> usize {
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => 0,
    }
}

/// `prefix`, `value` as JSON, then `suffix`, in a buffer of exactly that size.
// The stores are its only users outside `len`; a build without one keeps it for the tests.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn to_vec<T: Serialize + ?Sized>(
    value: &T,
    prefix: &[u8],
    suffix: &[u8],
) -> Result<Vec<u8>, serde_json::Error> {
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value)?;
    let mut bytes = Vec::with_capacity(prefix.len() + count.0 + suffix.len());
    bytes.extend_from_slice(prefix);
    serde_json::to_writer(&mut bytes, value)?;
    bytes.extend_from_slice(suffix);
    Ok(bytes)
}

/// `value` as a JSON string of exactly its size.
// The stores are its only users outside `len`; a build without one keeps it for the tests.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, serde_json::Error> {
    let bytes = to_vec(value, b"", b"")?;
    // serde_json writes UTF-8 only, so this never fails.
    String::from_utf8(bytes).map_err(|err| serde::ser::Error::custom(err.to_string()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    #[test]
    fn the_buffer_is_exactly_the_document() {
        let value = json!({"text": "a\u{0}b\"c".repeat(1000), "n": [1, 2.5, null]});
        let framed = super::to_vec(&value, b"data: ", b"\n\n").unwrap();
        let expected = format!("data: {}\n\n", serde_json::to_string(&value).unwrap());
        assert_eq!(framed, expected.as_bytes());
        assert_eq!(framed.capacity(), framed.len());
        let text = super::to_string(&value).unwrap();
        assert_eq!(text, serde_json::to_string(&value).unwrap());
        assert_eq!(text.capacity(), text.len());
    }
}
