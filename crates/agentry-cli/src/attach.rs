//! `agentry run --file PATH`: a file attached to the prompt as an image or document block.
//!
//! The media type comes from the file's first bytes (PNG, JPEG, GIF, WEBP, PDF), then from
//! its extension for text (which has no signature); anything else is refused by name rather
//! than sent as something the provider would reject or misread.

use std::path::Path;

use agent_types::{FileBlock, ImageSource, UserBlock};
use base64::Engine as _;

use crate::error::Error;

/// The largest file `--file` attaches (20 MiB): above what every provider takes inline
/// (Anthropic 32 MB requests, OpenAI 50 MB per file, Gemini 20 MB inline), so a bigger
/// file is refused here instead of by the provider after the upload.
pub(crate) const MAX_FILE_BYTES: u64 = 20 * 1024 * 1024;

/// The block for the file at `path`.
pub(crate) fn block(path: &Path) -> Result<UserBlock, Error> {
    let refuse = |message: String| Error::Usage(format!("--file {}: {message}", path.display()));
    let size = std::fs::metadata(path)
        .map_err(|error| refuse(format!("cannot read it: {error}")))?
        .len();
    if size > MAX_FILE_BYTES {
        return Err(refuse(format!(
            "{} is over the {} MiB limit",
            crate::render::format_bytes(size),
            MAX_FILE_BYTES / (1024 * 1024)
        )));
    }
    let bytes = std::fs::read(path).map_err(|error| refuse(format!("cannot read it: {error}")))?;
    let media_type = media_type(path, &bytes).map_err(refuse)?;
    let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
    Ok(if media_type.starts_with("image/") {
        UserBlock::Image {
            source: ImageSource::Base64 {
                media_type: media_type.to_owned(),
                data,
            },
        }
    } else {
        let mut file = FileBlock::base64(media_type, data);
        if let Some(name) = path.file_name().and_then(|name| name.to_str()) {
            file = file.with_filename(name);
        }
        UserBlock::File(file)
    })
}

/// The media type of `bytes` read from `path`, or why it is not one we attach.
fn media_type(path: &Path, bytes: &[u8]) -> Result<&'static str, String> {
    if let Some(sniffed) = sniff(bytes) {
        return Ok(sniffed);
    }
    let extension = path
        .extension()
        .and_then(|extension| extension.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    match extension.as_str() {
        "txt" | "text" | "md" | "markdown" | "log" => {
            if std::str::from_utf8(bytes).is_err() {
                return Err(format!(
                    "a .{extension} file that is not UTF-8 text; attach text, PNG, JPEG, GIF, \
                     WEBP or PDF"
                ));
            }
            Ok("text/plain")
        }
        "png" | "jpg" | "jpeg" | "gif" | "webp" | "pdf" => Err(format!(
            "named .{extension} but its contents are not {extension} (checked by their first \
             bytes)"
        )),
        _ => Err(
            "unknown file type; attach PNG, JPEG, GIF, WEBP, PDF or text (.txt, .md)".to_owned(),
        ),
    }
}

/// The media type a file's signature says, for the kinds we attach.
fn sniff(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else if bytes.starts_with(b"%PDF-") {
        Some("application/pdf")
    } else {
        None
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn contents_decide_then_the_extension_for_text() {
        let at = |name: &str, bytes: &[u8]| media_type(Path::new(name), bytes);
        assert_eq!(at("a.bin", b"\x89PNG\r\n\x1a\nrest"), Ok("image/png"));
        assert_eq!(at("a", &[0xFF, 0xD8, 0xFF, 0xE0]), Ok("image/jpeg"));
        assert_eq!(at("a.gif", b"GIF89a..."), Ok("image/gif"));
        assert_eq!(at("a", b"RIFF\0\0\0\0WEBPVP8 "), Ok("image/webp"));
        // A PNG named .txt is still a PNG.
        assert_eq!(at("a.txt", b"\x89PNG\r\n\x1a\n"), Ok("image/png"));
        assert_eq!(at("notes.MD", b"# hi"), Ok("text/plain"));
        assert_eq!(at("r.pdf", b"%PDF-1.7\n"), Ok("application/pdf"));
        assert!(at("r.pdf", b"not a pdf").unwrap_err().contains("not pdf"));
        assert!(
            at("a.txt", &[0xFF, 0xFE, 0x00])
                .unwrap_err()
                .contains("UTF-8")
        );
        assert!(at("a.docx", b"PK\x03\x04").unwrap_err().contains("unknown"));
        assert!(at("RIFF", b"RIFF\0\0\0\0WAVE").is_err());
    }
}
