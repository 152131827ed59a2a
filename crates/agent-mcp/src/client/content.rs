//! An MCP `tools/call` result as content blocks, or as a tool error.

use agent_tools::{ToolContent, ToolError};
use agent_types::{FileBlock, FileSource, ImageSource, ToolResultBlock};
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::Value;

/// Maps a result's content (and `structuredContent`) to blocks, in order.
///
/// Text stays text, images stay images (their base64 is kept as it is), audio becomes a file
/// block with its media type (tool results have no audio block), an embedded resource becomes
/// text (`[resource URI]` then its text) or an image or file (its blob), a resource link
/// becomes a line of text naming it (its URI is the server's, which a provider cannot fetch),
/// and `structuredContent` becomes a JSON block. A text block that only repeats the
/// structured content (servers send both for older clients) is dropped, so the model does not
/// read it twice. `isError: true` gives a [`ToolError::respond_to_model`] with the text.
pub(crate) fn map_result(result: CallToolResult) -> Result<ToolContent, ToolError> {
    let mut blocks: Vec<ToolResultBlock> = result.content.into_iter().map(map_block).collect();
    if let Some(structured) = result.structured_content {
        blocks.retain(|block| match block {
            ToolResultBlock::Text { text } => {
                serde_json::from_str::<Value>(text).ok().as_ref() != Some(&structured)
            }
            _ => true,
        });
        blocks.push(ToolResultBlock::Json { value: structured });
    }
    if result.is_error == Some(true) {
        return Err(ToolError::respond_to_model(error_text(&blocks)));
    }
    Ok(ToolContent::from(blocks))
}

fn error_text(blocks: &[ToolResultBlock]) -> String {
    let parts: Vec<String> = blocks
        .iter()
        .map(|block| match block {
            ToolResultBlock::Text { text } => text.clone(),
            ToolResultBlock::Json { value } => value.to_string(),
            other => format!("[{:?} block]", other.kind()),
        })
        .collect();
    if parts.is_empty() {
        "the MCP server reported an error without a message".to_owned()
    } else {
        parts.join("\n")
    }
}

fn file(data: String, media_type: String, filename: Option<String>) -> ToolResultBlock {
    ToolResultBlock::File(FileBlock {
        media_type,
        source: FileSource::Base64 { data },
        filename,
    })
}

/// The last path segment of a URI, as a file name.
fn file_name(uri: &str) -> Option<String> {
    uri.rsplit('/')
        .next()
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
}

/// A resource's contents as a block: text as `[resource URI]` then the text, a blob as an image
/// (`image/*`) or a file named after the URI's last segment.
pub(crate) fn map_resource(contents: ResourceContents) -> ToolResultBlock {
    match contents {
        ResourceContents::TextResourceContents { uri, text, .. } => ToolResultBlock::Text {
            text: format!("[resource {uri}]\n{text}"),
        },
        ResourceContents::BlobResourceContents {
            uri,
            mime_type,
            blob,
            ..
        } => {
            let media_type = mime_type.unwrap_or_else(|| "application/octet-stream".to_owned());
            if media_type.starts_with("image/") {
                ToolResultBlock::Image {
                    source: ImageSource::Base64 {
                        media_type,
                        data: blob,
                    },
                }
            } else {
                file(blob, media_type, file_name(&uri))
            }
        }
        other => ToolResultBlock::Json {
            value: serde_json::to_value(other).unwrap_or_default(),
        },
    }
}

fn map_block(block: ContentBlock) -> ToolResultBlock {
    match block {
        ContentBlock::Text(text) => ToolResultBlock::Text { text: text.text },
        ContentBlock::Image(image) => ToolResultBlock::Image {
            source: ImageSource::Base64 {
                media_type: image.mime_type,
                data: image.data,
            },
        },
        ContentBlock::Audio(audio) => file(audio.data, audio.mime_type, None),
        ContentBlock::Resource(embedded) => map_resource(embedded.resource),
        ContentBlock::ResourceLink(link) => {
            let mut text = format!("[resource link] {}: {}", link.name, link.uri);
            if let Some(mime) = &link.mime_type {
                text.push_str(&format!(" ({mime})"));
            }
            if let Some(description) = &link.description {
                text.push_str(&format!(" — {description}"));
            }
            ToolResultBlock::Text { text }
        }
        // A kind newer than this mapping: pass it on as its JSON rather than lose it.
        other => ToolResultBlock::Json {
            value: serde_json::to_value(other).unwrap_or_default(),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn result(value: Value) -> CallToolResult {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn every_content_kind_maps_to_a_block() {
        let mapped = map_result(result(json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "iVBORw==", "mimeType": "image/png"},
                {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
                {"type": "resource", "resource": {"uri": "test://static/1", "mimeType": "text/plain", "text": "one"}},
                {"type": "resource", "resource": {"uri": "test://blob/r.pdf", "mimeType": "application/pdf", "blob": "JVBERg=="}},
                {"type": "resource_link", "uri": "test://static/2", "name": "two", "mimeType": "text/plain", "description": "the second"}
            ]
        })))
        .unwrap();
        let blocks = mapped.into_blocks();
        assert_eq!(blocks.len(), 6);
        assert_eq!(
            blocks[0],
            ToolResultBlock::Text {
                text: "hello".into()
            }
        );
        assert_eq!(
            blocks[1],
            ToolResultBlock::Image {
                source: ImageSource::Base64 {
                    media_type: "image/png".into(),
                    data: "iVBORw==".into()
                }
            }
        );
        let ToolResultBlock::File(audio) = &blocks[2] else {
            panic!("{:?}", blocks[2])
        };
        assert_eq!(audio.media_type, "audio/wav");
        assert_eq!(
            blocks[3],
            ToolResultBlock::Text {
                text: "[resource test://static/1]\none".into()
            }
        );
        let ToolResultBlock::File(pdf) = &blocks[4] else {
            panic!("{:?}", blocks[4])
        };
        assert_eq!(pdf.filename.as_deref(), Some("r.pdf"));
        assert_eq!(
            blocks[5],
            ToolResultBlock::Text {
                text: "[resource link] two: test://static/2 (text/plain) — the second".into()
            }
        );
    }

    #[test]
    fn structured_content_is_a_json_block_and_its_text_twin_is_dropped() {
        let mapped = map_result(result(json!({
            "content": [{"type": "text", "text": "{\"t\": 22.5}"}, {"type": "text", "text": "note"}],
            "structuredContent": {"t": 22.5}
        })))
        .unwrap();
        assert_eq!(
            mapped.into_blocks(),
            vec![
                ToolResultBlock::Text {
                    text: "note".into()
                },
                ToolResultBlock::Json {
                    value: json!({"t": 22.5})
                }
            ]
        );
    }

    #[test]
    fn is_error_is_a_tool_error_for_the_model() {
        let error = map_result(result(json!({
            "content": [{"type": "text", "text": "no such city"}],
            "isError": true
        })))
        .unwrap_err();
        assert_eq!(error.kind(), agent_tools::ToolErrorKind::RespondToModel);
        assert_eq!(error.message(), "no such city");
        let empty = map_result(result(json!({"content": [], "isError": true}))).unwrap_err();
        assert!(empty.message().contains("without a message"));
    }
}
