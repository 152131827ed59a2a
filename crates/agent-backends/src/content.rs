//! Content helpers the adapters share: tool results for providers that take only text there,
//! the error for answer content an assistant message cannot carry, and strict tool schemas.

use std::borrow::Cow;

use agent_types::{
    BackendError, BackendErrorKind, ContentKind, ToolResult, ToolResultBlock, ToolSpec,
};
use serde_json::Value;

/// A tool's schema as sent to a provider with strict function calling (OpenAI Chat and
/// Responses): a [strict](ToolSpec::strict) tool's in strict form (every property required,
/// optional ones nullable, `additionalProperties: false`, see [`agent_types::strict_schema`]),
/// which strict mode requires; any other tool's as written.
#[cfg_attr(
    not(any(feature = "openai", feature = "openai-responses")),
    allow(dead_code)
)]
pub(crate) fn tool_parameters(tool: &ToolSpec) -> Cow<'_, Value> {
    if tool.strict {
        Cow::Owned(agent_types::strict_schema(&tool.parameters))
    } else {
        Cow::Borrowed(&tool.parameters)
    }
}

/// The error a response decoder returns for content the model produced that an assistant
/// message cannot carry (an image or file part, executed code, an output item or block type
/// agentry does not know): [`Unsupported`](BackendErrorKind::Unsupported), naming `provider`
/// and `what`. Passing the answer on without it would let the caller act on an answer with a
/// piece silently missing.
#[cfg_attr(not(feature = "providers"), allow(dead_code))]
pub(crate) fn unrepresentable_output(provider: &str, what: &str) -> BackendError {
    BackendError::new(
        BackendErrorKind::Unsupported,
        format!(
            "{provider} answered with {what}, which an agentry assistant message cannot carry; \
             the answer was refused rather than passed on without it"
        ),
    )
}

/// The text of a tool result for a provider that takes only text there: `content`, then each
/// text block and each JSON block's compact JSON, joined by newlines. An image or file block
/// is refused before anything is sent, naming `provider` and the block kind: dropping it
/// would let the model answer about content it never saw.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn tool_result_text<'a>(
    result: &'a ToolResult,
    provider: &str,
) -> Result<Cow<'a, str>, BackendError> {
    split_tool_result(result, provider, &[]).map(|(text, _)| text)
}

/// A tool result as its text (`content`, then text blocks and JSON blocks' compact JSON,
/// joined by newlines) and its media blocks of the kinds in `media` (images, files), in
/// order, for the adapter to map. A media block of another kind is refused before anything
/// is sent, naming `provider` and the kind.
pub(crate) fn split_tool_result<'a>(
    result: &'a ToolResult,
    provider: &str,
    media: &[ContentKind],
) -> Result<(Cow<'a, str>, Vec<&'a ToolResultBlock>), BackendError> {
    if result.blocks.is_empty() {
        return Ok((Cow::Borrowed(&result.content), Vec::new()));
    }
    let mut text = result.content.clone();
    let mut found = Vec::new();
    for block in &result.blocks {
        let part: Cow<'_, str> = match block {
            ToolResultBlock::Text { text } => Cow::Borrowed(text),
            ToolResultBlock::Json { value } => Cow::Owned(value.to_string()),
            ToolResultBlock::Image { .. } | ToolResultBlock::File(_) => {
                if !media.contains(&block.kind()) {
                    return Err(BackendError::unsupported_content(
                        provider,
                        block.kind(),
                        "a tool result",
                    ));
                }
                found.push(block);
                continue;
            }
        };
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&part);
    }
    Ok((Cow::Owned(text), found))
}

#[cfg(test)]
mod tests {
    use agent_types::{FileBlock, ImageSource};
    use serde_json::json;

    use super::*;

    #[test]
    fn text_and_json_blocks_join_as_text_and_binary_blocks_are_refused() {
        let plain = ToolResult::ok("c", "t", "hi");
        assert!(matches!(
            tool_result_text(&plain, "X"),
            Ok(Cow::Borrowed("hi"))
        ));
        let rich = ToolResult::with_blocks(
            "c",
            "t",
            vec![
                ToolResultBlock::Text {
                    text: "rows:".into(),
                },
                ToolResultBlock::Json {
                    value: json!({"n": 3}),
                },
            ],
        );
        assert_eq!(tool_result_text(&rich, "X").unwrap(), "rows:\n{\"n\":3}");
        for block in [
            ToolResultBlock::Image {
                source: ImageSource::Url {
                    url: "https://example.com/a.png".into(),
                },
            },
            ToolResultBlock::File(FileBlock::base64("application/pdf", "JVBERi0x")),
        ] {
            let kind = block.kind();
            let error = tool_result_text(&ToolResult::with_blocks("c", "t", vec![block]), "Gemini")
                .unwrap_err();
            assert_eq!(error.kind, BackendErrorKind::Unsupported);
            assert!(error.message.contains("Gemini"), "{}", error.message);
            assert!(
                error
                    .message
                    .contains(&format!("{kind} block in a tool result")),
                "{}",
                error.message
            );
        }
    }
}
