//! The response side: a `chat.completion` body, `chat.completion.chunk` frames and the
//! comment lines that show server tool activity in a stream.

use agent_loop::GenerateResult;
use agent_types::{AssistantBlock, StopReason, ToolCall, Usage};
use bytes::Bytes;
use serde_json::{Value, json};

/// What every body and chunk of one completion shares.
#[derive(Debug, Clone)]
pub(crate) struct Completion {
    /// `chatcmpl-…`.
    pub(crate) id: String,
    /// Unix seconds.
    pub(crate) created: u64,
    /// The model as the client named it.
    pub(crate) model: String,
}

impl Completion {
    /// The non-streaming body for a run that ended with `result`; `usage` is over every model
    /// call of the request.
    pub(crate) fn body(&self, result: &GenerateResult, usage: &Usage) -> Value {
        // A structured answer is the validated JSON, whatever the model said around it.
        let text = match &result.output {
            Some(output) => output.to_string(),
            None => result.message.text_content(),
        };
        let refusal = refusal(&result.message.content);
        let calls = &result.pending_tool_calls;
        // OpenAI sends `content: null` for a turn that is only tool calls or a refusal.
        let content = if text.is_empty() && (!calls.is_empty() || refusal.is_some()) {
            Value::Null
        } else {
            Value::String(text)
        };
        let mut message = json!({"role": "assistant", "content": content, "refusal": refusal});
        if !calls.is_empty() {
            message["tool_calls"] = calls.iter().map(tool_call).collect();
        }
        self.envelope(message, finish_reason(result), usage)
    }

    /// The body for a structured request the model refused: `content: null` and the
    /// refusal, as OpenAI answers it.
    pub(crate) fn refusal_body(&self, refusal: &str, usage: &Usage) -> Value {
        let message = json!({"role": "assistant", "content": null, "refusal": refusal});
        self.envelope(message, "stop", usage)
    }

    /// A `chat.completion` body with one choice.
    fn envelope(&self, message: Value, finish_reason: &str, usage: &Usage) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": message,
                "finish_reason": finish_reason,
                "logprobs": null,
            }],
            "usage": usage_json(usage),
        })
    }

    /// A chunk with one choice: `delta`, and `finish_reason` on the last one. With
    /// `include_usage`, every chunk carries `usage: null` as OpenAI's do.
    pub(crate) fn chunk(&self, delta: Value, finish: Option<&str>, include_usage: bool) -> Bytes {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if include_usage {
            chunk["usage"] = Value::Null;
        }
        data(&chunk)
    }

    /// The chunk after the last choice when `stream_options.include_usage` is set: no choices,
    /// the usage of the whole request.
    pub(crate) fn usage_chunk(&self, usage: &Usage) -> Bytes {
        data(&json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage_json(usage),
        }))
    }
}

/// The delta that hands the client its tool calls, one per call, each complete.
pub(crate) fn tool_call_delta(index: usize, call: &ToolCall) -> Value {
    let mut call = tool_call(call);
    call["index"] = index.into();
    json!({"tool_calls": [call]})
}

/// A call in OpenAI's form: the arguments as JSON text.
fn tool_call(call: &ToolCall) -> Value {
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments(call)},
    })
}

/// The argument text: what the model wrote when it was not valid JSON (kept as a string),
/// else the parsed arguments written back compactly.
fn arguments(call: &ToolCall) -> String {
    match &call.arguments {
        Value::String(raw) if call.invalid_arguments => raw.clone(),
        arguments => arguments.to_string(),
    }
}

fn refusal(blocks: &[AssistantBlock]) -> Option<String> {
    let texts: Vec<&str> = blocks
        .iter()
        .filter_map(|block| match block {
            AssistantBlock::Refusal { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    (!texts.is_empty()).then(|| texts.concat())
}

/// OpenAI's `finish_reason` for a run that ended with `result`.
pub(crate) fn finish_reason(result: &GenerateResult) -> &'static str {
    if !result.pending_tool_calls.is_empty() {
        return "tool_calls";
    }
    match result.finish_reason {
        StopReason::Length => "length",
        StopReason::ContentFilter => "content_filter",
        StopReason::ToolCalls => "tool_calls",
        // A completed run otherwise stopped on its own; errors never reach a result.
        StopReason::Stop | StopReason::Error | StopReason::Aborted => "stop",
    }
}

/// Our usage in OpenAI's form. Both count cached input inside the prompt tokens and
/// reasoning inside the completion tokens, so the numbers carry over as they are.
pub(crate) fn usage_json(usage: &Usage) -> Value {
    let prompt = usage.input_tokens.unwrap_or(0);
    let completion = usage.output_tokens.unwrap_or(0);
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt.saturating_add(completion),
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens.unwrap_or(0)},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens.unwrap_or(0)},
    })
}

/// `data: <json>\n\n`.
pub(crate) fn data(value: &Value) -> Bytes {
    let mut frame = Vec::with_capacity(256);
    frame.extend_from_slice(b"data: ");
    // A `Value` always serializes.
    frame.extend_from_slice(value.to_string().as_bytes());
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

/// The stream's terminator.
pub(crate) fn done() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}

/// An SSE comment line (clients skip it), followed by a blank line so that it never shares
/// an event with the data after it. `words` are joined by spaces; each is one line already
/// (JSON text escapes its newlines).
pub(crate) fn comment(words: &[&str]) -> Bytes {
    let mut frame = String::with_capacity(128);
    frame.push(':');
    for word in words {
        frame.push(' ');
        // Names and ids cannot hold line breaks, but a stray one must not end the comment.
        frame.extend(word.chars().map(|c| match c {
            '\r' | '\n' => ' ',
            c => c,
        }));
    }
    frame.push_str("\n\n");
    Bytes::from(frame)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn usage_carries_over_with_details() {
        let usage = Usage {
            input_tokens: Some(900),
            output_tokens: Some(40),
            cache_read_tokens: Some(800),
            reasoning_tokens: Some(10),
            ..Usage::default()
        };
        assert_eq!(
            usage_json(&usage),
            json!({"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940,
                   "prompt_tokens_details": {"cached_tokens": 800},
                   "completion_tokens_details": {"reasoning_tokens": 10}})
        );
    }

    #[test]
    fn arguments_are_json_text_and_garbled_ones_stay_as_written() {
        let call = ToolCall::new("c1", "get_weather", json!({"city": "Oslo"}));
        assert_eq!(
            tool_call_delta(1, &call),
            json!({"tool_calls": [{"index": 1, "id": "c1", "type": "function",
                   "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]})
        );
        let garbled = ToolCall {
            invalid_arguments: true,
            ..ToolCall::new("c2", "f", json!("{\"a\":"))
        };
        assert_eq!(arguments(&garbled), "{\"a\":");
    }

    #[test]
    fn comments_stay_on_one_line() {
        assert_eq!(
            comment(&["tool_execution_start", "clock", "a\nb"]),
            Bytes::from_static(b": tool_execution_start clock a b\n\n")
        );
    }
}
