//! [`ToolContent`]: a handler's result as content blocks (text, images, files, JSON), and
//! the per-result cap on their binary bytes.

use agent_types::{FileBlock, FileSource, ImageSource, ToolResultBlock};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Serialize, Serializer};
use serde_json::Value;

/// A tool result made of content blocks, in order.
///
/// Return it from a handler (any `T: Serialize` handler may return `ToolContent` instead) and
/// the loop sends the blocks to the model as they are, instead of the result's JSON text:
///
/// ```
/// use agent_tools::{Tool, ToolContent, ToolError};
/// use serde_json::json;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Args { region: String }
///
/// let chart = Tool::from_fn("chart", "Charts a region's sales.", |args: Args, _ctx| async move {
///     let png: Vec<u8> = vec![0x89, b'P', b'N', b'G'];
///     Ok::<_, ToolError>(
///         ToolContent::text(format!("Sales in {}:", args.region))
///             .and(ToolContent::image(png, "image/png"))
///             .and(ToolContent::json(json!({"total": 12.5}))),
///     )
/// });
/// # let _ = chart;
/// ```
///
/// Its JSON form (what [`collect_output`](crate::collect_output) shows) is the block list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolContent {
    blocks: Vec<ToolResultBlock>,
}

impl ToolContent {
    /// One text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::block(ToolResultBlock::Text { text: text.into() })
    }

    /// One image block from its bytes (base64-encoded here) and MIME type (`image/png`).
    pub fn image(bytes: impl AsRef<[u8]>, media_type: impl Into<String>) -> Self {
        Self::block(ToolResultBlock::Image {
            source: ImageSource::Base64 {
                media_type: media_type.into(),
                data: STANDARD.encode(bytes),
            },
        })
    }

    /// One image block the provider fetches from `url`.
    pub fn image_url(url: impl Into<String>) -> Self {
        Self::block(ToolResultBlock::Image {
            source: ImageSource::Url { url: url.into() },
        })
    }

    /// One structured value (MCP's `structuredContent`); providers without a structured form
    /// get its compact JSON text.
    pub fn json(value: Value) -> Self {
        Self::block(ToolResultBlock::Json { value })
    }

    /// One file block from its bytes (base64-encoded here), MIME type
    /// (`application/pdf`, `text/plain`) and optional name.
    pub fn file(
        bytes: impl AsRef<[u8]>,
        media_type: impl Into<String>,
        filename: Option<String>,
    ) -> Self {
        Self::block(ToolResultBlock::File(FileBlock {
            media_type: media_type.into(),
            source: FileSource::Base64 {
                data: STANDARD.encode(bytes),
            },
            filename,
        }))
    }

    /// One block of any kind (a file by URL or provider file id, for one).
    pub fn block(block: ToolResultBlock) -> Self {
        Self {
            blocks: vec![block],
        }
    }

    /// These blocks followed by `more`'s.
    #[must_use]
    pub fn and(mut self, more: Self) -> Self {
        self.blocks.extend(more.blocks);
        self
    }

    /// The blocks, in order.
    pub fn blocks(&self) -> &[ToolResultBlock] {
        &self.blocks
    }

    /// The blocks, taken out.
    pub fn into_blocks(self) -> Vec<ToolResultBlock> {
        self.blocks
    }
}

impl From<Vec<ToolResultBlock>> for ToolContent {
    fn from(blocks: Vec<ToolResultBlock>) -> Self {
        Self { blocks }
    }
}

impl Serialize for ToolContent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.blocks.serialize(serializer)
    }
}

/// The default cap on a result's binary bytes (images and files, decoded): 5 MB.
pub const DEFAULT_MAX_BINARY_BYTES: usize = 5_000_000;

/// The bytes an image or file block carries inline (decoded size, from its base64 length);
/// 0 for text, JSON and blocks the provider fetches.
pub fn binary_len(block: &ToolResultBlock) -> usize {
    let data = match block {
        ToolResultBlock::Image {
            source: ImageSource::Base64 { data, .. },
        }
        | ToolResultBlock::File(FileBlock {
            source: FileSource::Base64 { data },
            ..
        }) => data,
        _ => return 0,
    };
    let padding = data.bytes().rev().take_while(|&b| b == b'=').count();
    (data.len() / 4 * 3).saturating_sub(padding)
}

/// What [`cap_binary`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BinaryCap {
    /// Inline binary bytes before the cap.
    pub original_bytes: usize,
    /// Inline binary bytes kept.
    pub sent_bytes: usize,
    /// Blocks replaced by a text block saying what was dropped.
    pub dropped: usize,
}

/// Keeps a result's inline binary blocks, in order, while their decoded bytes fit in
/// `max_bytes`; each block past the cap is replaced (and freed) by a text block saying what
/// was dropped and why, so the model knows it is missing.
pub fn cap_binary(blocks: &mut [ToolResultBlock], max_bytes: usize) -> BinaryCap {
    let mut cap = BinaryCap::default();
    for block in blocks.iter_mut() {
        let len = binary_len(block);
        if len == 0 {
            continue;
        }
        cap.original_bytes += len;
        if cap.sent_bytes + len <= max_bytes {
            cap.sent_bytes += len;
            continue;
        }
        let what = match &*block {
            ToolResultBlock::Image {
                source: ImageSource::Base64 { media_type, .. },
            } => format!("an image ({media_type})"),
            ToolResultBlock::File(file) => match &file.filename {
                Some(name) => format!("a file `{name}` ({})", file.media_type),
                None => format!("a file ({})", file.media_type),
            },
            _ => "a block".to_owned(),
        };
        *block = ToolResultBlock::Text {
            text: format!(
                "[{what} of {len} bytes was dropped: this result's images and files are capped \
                 at {max_bytes} bytes (tool_result_max_binary_bytes)]"
            ),
        };
        cap.dropped += 1;
    }
    cap
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_encode_and_chain() {
        let content = ToolContent::text("a")
            .and(ToolContent::image([1u8, 2, 3, 4], "image/png"))
            .and(ToolContent::file(b"hi", "text/plain", Some("a.txt".into())))
            .and(ToolContent::json(serde_json::json!({"n": 1})));
        assert_eq!(content.blocks().len(), 4);
        assert_eq!(binary_len(&content.blocks()[1]), 4);
        assert_eq!(binary_len(&content.blocks()[2]), 2);
        assert_eq!(binary_len(&content.blocks()[0]), 0);
        let json = serde_json::to_value(&content).unwrap();
        assert_eq!(json[1]["source"]["data"], "AQIDBA==");
        assert_eq!(json[2]["filename"], "a.txt");
    }

    #[test]
    fn blocks_past_the_binary_cap_become_a_note() {
        let mut blocks = ToolContent::image([0u8; 6], "image/png")
            .and(ToolContent::text("between"))
            .and(ToolContent::file(
                [0u8; 6],
                "application/pdf",
                Some("r.pdf".into()),
            ))
            .and(ToolContent::image([0u8; 3], "image/jpeg"))
            .into_blocks();
        let cap = cap_binary(&mut blocks, 10);
        assert_eq!(
            cap,
            BinaryCap {
                original_bytes: 15,
                sent_bytes: 9,
                dropped: 1
            }
        );
        assert!(matches!(blocks[0], ToolResultBlock::Image { .. }));
        let ToolResultBlock::Text { text } = &blocks[2] else {
            panic!("{:?}", blocks[2]);
        };
        assert!(
            text.contains("a file `r.pdf` (application/pdf) of 6 bytes was dropped"),
            "{text}"
        );
        assert!(text.contains("capped at 10 bytes"), "{text}");
        assert!(matches!(blocks[3], ToolResultBlock::Image { .. }));
    }

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Args {
        n: u32,
    }

    #[tokio::test]
    async fn a_handler_returning_content_hands_its_blocks_to_the_caller() {
        let tool = crate::Tool::from_fn("shot", "A screenshot.", |args: Args, _ctx| async move {
            Ok::<_, crate::ToolError>(
                ToolContent::text(format!("shot {}", args.n))
                    .and(ToolContent::image([7u8; 3], "image/png")),
            )
        });
        let context = crate::ToolContext::new("c1", "shot");
        let output =
            crate::collect_output(tool.invoke(serde_json::json!({"n": 2}), context.clone())).await;
        // The stream shows the block list as JSON ...
        let value = output.result.unwrap();
        assert_eq!(value[0]["text"], "shot 2");
        assert_eq!(value[1]["type"], "image");
        // ... and the caller takes the blocks themselves, once.
        let content = context.take_content().unwrap();
        assert_eq!(content.blocks().len(), 2);
        assert_eq!(binary_len(&content.blocks()[1]), 3);
        assert!(context.take_content().is_none());

        // A handler returning a plain serializable value sets no content.
        let plain = crate::Tool::from_fn("n", "n.", |args: Args, _ctx| async move {
            Ok::<_, crate::ToolError>(args.n)
        });
        let context = crate::ToolContext::new("c2", "n");
        let output =
            crate::collect_output(plain.invoke(serde_json::json!({"n": 2}), context.clone())).await;
        assert_eq!(output.result.unwrap(), serde_json::json!(2));
        assert!(context.take_content().is_none());
    }
}
