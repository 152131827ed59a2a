//! Images and files in a client's user turn (`/v1/ui/chat` `file` parts, AG-UI `image` and
//! `document` parts, `/v1/responses` `input_image` / `input_file`, chat completions'
//! `image_url` / `file`), bounded before the run: how many, how large, from where.
//!
//! Inline bytes stay base64 all the way to the provider (no adapter decodes them), so their
//! size is bounded from the base64 text's length, before anything could decode it; the text
//! is checked to be base64. A URL must be `https:` (the provider fetches it; nothing else is
//! fetched on the client's behalf). An image's media type must be one the providers take.
//! Every refusal is a 400 with its own error type (`attachment_*`).

use agent_types::{FileSource, ImageSource, UserBlock, UserMessage};

use crate::error::ApiError;

/// Images and files one user turn may carry.
pub(crate) const MAX_ATTACHMENTS: usize = 8;
/// The decoded size of one inline image or file: 5 MiB (the smallest provider limit on an
/// image, Anthropic's).
pub(crate) const MAX_ATTACHMENT_BYTES: usize = 5 << 20;
/// The decoded size of all of one user turn's inline images and files.
pub(crate) const MAX_ATTACHMENT_TOTAL_BYTES: usize = 20 << 20;
/// The image media types the providers take.
pub(crate) const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// Why an attachment was refused: which block of the turn, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The block's index in the user turn.
    pub(crate) index: usize,
    /// The error type (`attachment_too_large`, …).
    pub(crate) kind: &'static str,
    pub(crate) message: String,
}

impl Refusal {
    fn new(index: usize, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            index,
            kind,
            message: message.into(),
        }
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            refusal.kind,
            refusal.message,
        )
    }
}

/// `data:<media type>;base64,<data>` as its media type and data.
pub(crate) fn data_url(url: &str) -> Option<(&str, &str)> {
    let (head, data) = url.strip_prefix("data:")?.split_once(',')?;
    let media_type = head.strip_suffix(";base64")?;
    (!media_type.is_empty()).then_some((media_type, data))
}

/// A client's `url` for an attachment of `media_type` (`filename` for a file) as a block: a
/// data URL inline, an https URL by reference; images are image blocks, anything else a
/// file block. `media_type` may be empty for a data URL (the URL's own is used).
///
/// # Errors
///
/// A data URL that is not `data:<type>;base64,<data>`, a media type missing or not
/// `type/subtype`; the block's other checks are [`check`]'s.
pub(crate) fn block(
    index: usize,
    url: &str,
    media_type: &str,
    filename: Option<&str>,
) -> Result<UserBlock, Refusal> {
    let (media_type, inline) = if url.starts_with("data:") {
        let (own, data) = data_url(url).ok_or_else(|| {
            Refusal::new(
                index,
                "attachment_invalid",
                "a data URL must be `data:<media type>;base64,<data>`",
            )
        })?;
        (
            if media_type.is_empty() {
                own
            } else {
                media_type
            },
            Some(data),
        )
    } else {
        (media_type, None)
    };
    match inline {
        Some(data) => inline_block(index, media_type, data, filename),
        None => url_block(index, url, media_type, filename),
    }
}

/// Inline base64 `data` of `media_type` as an image or file block.
///
/// # Errors
///
/// A media type that is not `type/subtype`.
pub(crate) fn inline_block(
    index: usize,
    media_type: &str,
    data: &str,
    filename: Option<&str>,
) -> Result<UserBlock, Refusal> {
    made(index, "", media_type, Some(data), filename)
}

/// An https `url` of `media_type` as an image or file block (the scheme is [`check`]ed).
///
/// # Errors
///
/// A media type that is not `type/subtype`.
pub(crate) fn url_block(
    index: usize,
    url: &str,
    media_type: &str,
    filename: Option<&str>,
) -> Result<UserBlock, Refusal> {
    made(index, url, media_type, None, filename)
}

fn made(
    index: usize,
    url: &str,
    media_type: &str,
    inline: Option<&str>,
    filename: Option<&str>,
) -> Result<UserBlock, Refusal> {
    if !valid_media_type(media_type) {
        return Err(Refusal::new(
            index,
            "attachment_invalid",
            format!("attachment {index} needs a media type `type/subtype`, not `{media_type}`"),
        ));
    }
    Ok(match (media_type.starts_with("image/"), inline) {
        (true, Some(data)) => UserBlock::Image {
            source: ImageSource::Base64 {
                media_type: media_type.to_owned(),
                data: data.to_owned(),
            },
        },
        (true, None) => UserBlock::Image {
            source: ImageSource::Url {
                url: url.to_owned(),
            },
        },
        (false, inline) => UserBlock::File(agent_types::FileBlock {
            media_type: media_type.to_owned(),
            source: match inline {
                Some(data) => FileSource::Base64 {
                    data: data.to_owned(),
                },
                None => FileSource::Url {
                    url: url.to_owned(),
                },
            },
            filename: filename.map(str::to_owned),
        }),
    })
}

/// Checks a user turn's images and files: at most [`MAX_ATTACHMENTS`], each inline one at
/// most [`MAX_ATTACHMENT_BYTES`] decoded (all together [`MAX_ATTACHMENT_TOTAL_BYTES`]) and
/// valid base64, each URL `https:`, each image of an [`IMAGE_TYPES`] type.
///
/// # Errors
///
/// The first refused block's [`Refusal`].
pub(crate) fn check(message: &UserMessage) -> Result<(), Refusal> {
    let mut count = 0_usize;
    let mut total = 0_usize;
    for (index, block) in message.content.iter().enumerate() {
        let (media_type, inline, url) = match block {
            UserBlock::Text { .. } => continue,
            UserBlock::Image { source } => match source {
                ImageSource::Base64 { media_type, data } => (Some(media_type), Some(data), None),
                ImageSource::Url { url } => (None, None, Some(url)),
            },
            UserBlock::File(file) => match &file.source {
                FileSource::Base64 { data } => (None, Some(data), None),
                FileSource::Url { url } => (None, None, Some(url)),
                FileSource::FileId { .. } => (None, None, None),
            },
            UserBlock::Audio(audio) => (None, Some(&audio.data), None),
        };
        count += 1;
        if count > MAX_ATTACHMENTS {
            return Err(Refusal::new(
                index,
                "attachment_limit",
                format!("a user turn carries at most {MAX_ATTACHMENTS} images and files"),
            ));
        }
        if let Some(media_type) = media_type
            && !IMAGE_TYPES.contains(&media_type.as_str())
        {
            return Err(Refusal::new(
                index,
                "attachment_type",
                format!(
                    "attachment {index}: images must be one of {}, not `{media_type}`",
                    IMAGE_TYPES.join(", ")
                ),
            ));
        }
        if let Some(data) = inline {
            // Bounded on the base64 text, before anything decodes it.
            let decoded = data.len() / 4 * 3 + (data.len() % 4).saturating_sub(1);
            if decoded > MAX_ATTACHMENT_BYTES {
                return Err(Refusal::new(
                    index,
                    "attachment_too_large",
                    format!(
                        "attachment {index} is about {decoded} bytes; at most \
                         {MAX_ATTACHMENT_BYTES} bytes each"
                    ),
                ));
            }
            total += decoded;
            if total > MAX_ATTACHMENT_TOTAL_BYTES {
                return Err(Refusal::new(
                    index,
                    "attachment_too_large",
                    format!(
                        "a user turn's images and files are at most \
                         {MAX_ATTACHMENT_TOTAL_BYTES} bytes together"
                    ),
                ));
            }
            if !is_base64(data) {
                return Err(Refusal::new(
                    index,
                    "attachment_invalid",
                    format!("attachment {index}: the inline data is not base64"),
                ));
            }
        }
        if let Some(url) = url
            && !url
                .get(..8)
                .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"))
        {
            return Err(Refusal::new(
                index,
                "attachment_url",
                format!(
                    "attachment {index}: a URL must be `https:` (or send the bytes as a data URL)"
                ),
            ));
        }
    }
    Ok(())
}

/// `type/subtype`, each a token.
fn valid_media_type(media_type: &str) -> bool {
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    media_type.len() <= 127
        && media_type
            .split_once('/')
            .is_some_and(|(kind, sub)| token(kind) && (sub == "*" || token(sub)))
}

/// Standard or URL-safe base64, padded or not.
fn is_base64(data: &str) -> bool {
    let body = data.trim_end_matches('=');
    data.len() - body.len() <= 2
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(blocks: Vec<UserBlock>) -> UserMessage {
        UserMessage { content: blocks }
    }

    #[test]
    fn blocks_come_from_data_and_https_urls() {
        assert_eq!(
            block(0, "data:image/png;base64,iVBORw0K", "", None).unwrap(),
            UserBlock::Image {
                source: ImageSource::Base64 {
                    media_type: "image/png".into(),
                    data: "iVBORw0K".into()
                }
            }
        );
        let UserBlock::File(file) = block(
            1,
            "https://example.com/a.pdf",
            "application/pdf",
            Some("a.pdf"),
        )
        .unwrap() else {
            panic!("a file block");
        };
        assert_eq!(file.filename.as_deref(), Some("a.pdf"));
        assert!(block(0, "data:image/png,raw", "", None).is_err());
        assert!(block(0, "https://example.com/x", "", None).is_err());
    }

    #[test]
    fn size_is_bounded_before_decoding_and_count_url_and_type_are_checked() {
        let image = |data: String| UserBlock::Image {
            source: ImageSource::Base64 {
                media_type: "image/png".into(),
                data,
            },
        };
        let max = MAX_ATTACHMENT_BYTES / 3 * 4;
        assert!(check(&turn(vec![image("A".repeat(max))])).is_ok());
        let refused = check(&turn(vec![image("A".repeat(max + 8))])).unwrap_err();
        assert_eq!(refused.kind, "attachment_too_large");
        // Not base64, even though it is small.
        assert_eq!(
            check(&turn(vec![image("ab c".into())])).unwrap_err().kind,
            "attachment_invalid"
        );
        let many = vec![image("AAAA".into()); MAX_ATTACHMENTS + 1];
        let refused = check(&turn(many)).unwrap_err();
        assert_eq!(
            (refused.kind, refused.index),
            ("attachment_limit", MAX_ATTACHMENTS)
        );
        let url = |url: &str| UserBlock::Image {
            source: ImageSource::Url { url: url.into() },
        };
        assert!(check(&turn(vec![url("https://example.com/a.png")])).is_ok());
        for bad in ["http://example.com/a.png", "file:///etc/passwd", "ftp://x"] {
            assert_eq!(
                check(&turn(vec![url(bad)])).unwrap_err().kind,
                "attachment_url"
            );
        }
        let svg = UserBlock::Image {
            source: ImageSource::Base64 {
                media_type: "image/svg+xml".into(),
                data: "AAAA".into(),
            },
        };
        assert_eq!(check(&turn(vec![svg])).unwrap_err().kind, "attachment_type");
    }
}
