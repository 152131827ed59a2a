//! A finished call, as MCP sees it: the loop's caps applied, JSON as `structuredContent`
//! (with its text in `content`, as the spec recommends), images and files as MCP image and
//! embedded-resource content, failures as `isError` results.

use agent_tools::{
    ToolContent, ToolError, ToolErrorKind, TruncationPolicy, cap_binary, escaped_len, truncate,
};
use agent_types::{FileBlock, FileSource, ImageSource, ToolResultBlock};
use rmcp::model::{CallToolResult, ContentBlock, Resource, ResourceContents};
use serde_json::Value;

/// The caps a result goes through, the loop's own.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    pub(crate) text: TruncationPolicy,
    pub(crate) binary: usize,
}

/// A successful JSON result. An object becomes `structuredContent` plus its compact text,
/// when the text fits the cap; anything else (or an object over the cap) is sent as text,
/// cut with the loop's marker. A tool that declares an output schema promises structured
/// content, so its oversized result is an error saying so rather than a silent cut.
pub(crate) fn value_result(value: Value, declares_output: bool, caps: Caps) -> CallToolResult {
    if let Value::Object(_) = &value {
        let text = value.to_string();
        if escaped_len(&text) <= caps.text.max_bytes() {
            let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
            result.structured_content = Some(value);
            return result;
        }
        if declares_output {
            return error_result(
                &format!(
                    "the tool's structured result is {} bytes, over this server's cap of {} \
                     bytes; ask for less at once",
                    escaped_len(&text),
                    caps.text.max_bytes()
                ),
                caps,
            );
        }
        return CallToolResult::success(vec![ContentBlock::text(truncate(text, &caps.text).text)]);
    }
    let cut = agent_tools::truncate_result(value, &caps.text);
    CallToolResult::success(vec![ContentBlock::text(cut.text)])
}

/// A result of content blocks: images and files under the binary cap (blocks past it become a
/// note, as in the loop), text and JSON together under the text cap (over it, they are joined
/// into one leading text block and cut). The first JSON object is the `structuredContent`.
pub(crate) fn content_result(content: ToolContent, caps: Caps) -> CallToolResult {
    let mut blocks = content.into_blocks();
    cap_binary(&mut blocks, caps.binary);
    let text_bytes: usize = blocks
        .iter()
        .map(|block| match block {
            ToolResultBlock::Text { text } => escaped_len(text),
            ToolResultBlock::Json { value } => escaped_len(&value.to_string()),
            ToolResultBlock::Image { .. } | ToolResultBlock::File(_) => 0,
        })
        .sum();
    let mut structured = None;
    let mut out = Vec::with_capacity(blocks.len());
    if text_bytes > caps.text.max_bytes() {
        let mut joined = String::new();
        for block in &blocks {
            let piece = match block {
                ToolResultBlock::Text { text } => text.clone(),
                ToolResultBlock::Json { value } => value.to_string(),
                ToolResultBlock::Image { .. } | ToolResultBlock::File(_) => continue,
            };
            if !joined.is_empty() {
                joined.push('\n');
            }
            joined.push_str(&piece);
        }
        out.push(ContentBlock::text(truncate(joined, &caps.text).text));
        blocks.retain(|block| {
            matches!(
                block,
                ToolResultBlock::Image { .. } | ToolResultBlock::File(_)
            )
        });
    }
    for (index, block) in blocks.into_iter().enumerate() {
        out.push(match block {
            ToolResultBlock::Text { text } => ContentBlock::text(text),
            ToolResultBlock::Json { value } => {
                let text = value.to_string();
                if structured.is_none() && value.is_object() {
                    structured = Some(value);
                }
                ContentBlock::text(text)
            }
            ToolResultBlock::Image {
                source: ImageSource::Base64 { media_type, data },
            } => ContentBlock::image(data, media_type),
            ToolResultBlock::Image {
                source: ImageSource::Url { url },
            } => ContentBlock::resource_link(Resource::new(url, "image")),
            ToolResultBlock::File(file) => file_block(file, index),
        });
    }
    let mut result = CallToolResult::success(out);
    result.structured_content = structured;
    result
}

/// A file: inline bytes as an embedded blob resource, a URL as a resource link, a provider's
/// file id as a note (an MCP client cannot fetch it).
fn file_block(file: FileBlock, index: usize) -> ContentBlock {
    let FileBlock {
        media_type,
        source,
        filename,
    } = file;
    let name = filename.unwrap_or_else(|| format!("file-{index}"));
    match source {
        FileSource::Base64 { data } => ContentBlock::resource(
            ResourceContents::blob(data, format!("agentry:result/{name}"))
                .with_mime_type(media_type),
        ),
        FileSource::Url { url } => {
            ContentBlock::resource_link(Resource::new(url, name).with_mime_type(media_type))
        }
        FileSource::FileId { file_id } => ContentBlock::text(format!(
            "[file `{name}` ({media_type}) is the provider file `{file_id}`]"
        )),
    }
}

/// A failed call: `isError` with the message, cut like any result.
pub(crate) fn tool_error(error: &ToolError, caps: Caps) -> CallToolResult {
    match error.kind() {
        ToolErrorKind::Cancelled => {
            error_result("The call was cancelled before it finished.", caps)
        }
        _ => error_result(error.message(), caps),
    }
}

/// An `isError` result with `message`, under the text cap.
pub(crate) fn error_result(message: &str, caps: Caps) -> CallToolResult {
    let text = if escaped_len(message) <= caps.text.max_bytes() {
        message.to_owned()
    } else {
        truncate(message.to_owned(), &caps.text).text
    };
    CallToolResult::error(vec![ContentBlock::text(text)])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn caps(text: usize, binary: usize) -> Caps {
        Caps {
            text: TruncationPolicy::new(text).unwrap(),
            binary,
        }
    }

    fn texts(result: &CallToolResult) -> Vec<String> {
        result
            .content
            .iter()
            .filter_map(|block| block.as_text().map(|text| text.text.clone()))
            .collect()
    }

    #[test]
    fn an_object_is_structured_with_its_text() {
        let result = value_result(json!({"n": 1}), false, caps(1024, 10));
        assert_eq!(result.structured_content, Some(json!({"n": 1})));
        assert_eq!(texts(&result), vec![r#"{"n":1}"#]);
        assert_eq!(result.is_error, Some(false));
    }

    #[test]
    fn a_string_is_its_raw_text_and_not_structured() {
        let result = value_result(json!("hello"), false, caps(1024, 10));
        assert_eq!(result.structured_content, None);
        assert_eq!(texts(&result), vec!["hello"]);
    }

    #[test]
    fn an_object_over_the_cap_is_cut_text_or_an_error_when_declared() {
        let big = json!({"text": "x".repeat(500)});
        let cut = value_result(big.clone(), false, caps(100, 10));
        assert_eq!(cut.structured_content, None);
        let text = &texts(&cut)[0];
        assert!(escaped_len(text) <= 100, "{text}");
        assert!(text.contains("truncated"), "{text}");
        let declared = value_result(big, true, caps(100, 10));
        assert_eq!(declared.is_error, Some(true));
        assert!(texts(&declared)[0].contains("over this server's cap"));
    }

    #[test]
    fn content_blocks_map_to_mcp_content_under_the_caps() {
        let content = ToolContent::text("chart:")
            .and(ToolContent::image([1u8, 2, 3], "image/png"))
            .and(ToolContent::json(json!({"total": 2})))
            .and(ToolContent::file(
                [0u8; 20],
                "application/pdf",
                Some("r.pdf".into()),
            ));
        let result = content_result(content, caps(1024, 10));
        assert_eq!(result.structured_content, Some(json!({"total": 2})));
        let json = serde_json::to_value(&result.content).unwrap();
        assert_eq!(json[0]["text"], "chart:");
        assert_eq!(json[1]["type"], "image");
        assert_eq!(json[1]["mimeType"], "image/png");
        assert_eq!(json[1]["data"], "AQID");
        assert_eq!(json[2]["text"], r#"{"total":2}"#);
        // 20 bytes of PDF are over the 10-byte binary cap: a note in its place.
        assert!(
            json[3]["text"].as_str().unwrap().contains("was dropped"),
            "{json}"
        );

        let file = content_result(
            ToolContent::file(b"hi", "text/plain", Some("a.txt".into())),
            caps(1024, 10),
        );
        let json = serde_json::to_value(&file.content).unwrap();
        assert_eq!(json[0]["type"], "resource");
        assert_eq!(json[0]["resource"]["blob"], "aGk=");
        assert_eq!(json[0]["resource"]["mimeType"], "text/plain");
    }

    #[test]
    fn content_text_over_the_cap_is_joined_and_cut_keeping_images() {
        let content = ToolContent::text("a".repeat(80))
            .and(ToolContent::image([1u8], "image/png"))
            .and(ToolContent::json(json!({"b": "b".repeat(80)})));
        let result = content_result(content, caps(100, 10));
        assert_eq!(result.structured_content, None);
        assert_eq!(result.content.len(), 2);
        let text = &texts(&result)[0];
        assert!(
            escaped_len(text) <= 100 && text.contains("truncated"),
            "{text}"
        );
        assert!(result.content[1].as_image().is_some());
    }

    #[test]
    fn errors_are_is_error_results() {
        let result = tool_error(&ToolError::respond_to_model("no such city"), caps(100, 10));
        assert_eq!(result.is_error, Some(true));
        assert_eq!(texts(&result), vec!["no such city"]);
        let cancelled = tool_error(&ToolError::cancelled(), caps(100, 10));
        assert_eq!(
            texts(&cancelled),
            vec!["The call was cancelled before it finished."]
        );
    }
}
