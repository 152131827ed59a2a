//! The response side of `POST /v1/responses`: the Response object, its output items and the
//! typed SSE events, each with its `sequence_number`.

use agent_types::{ToolCall, Usage};
use bytes::Bytes;
use serde_json::{Map, Value, json};

/// What every event and the final object of one response share.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    /// `resp_…`: the stored session's random part (`sess_…`), or a fresh one when not stored.
    pub(crate) id: String,
    /// The random part the item ids share.
    pub(crate) hex: String,
    /// Where this response's output begins in its session's history (the item ids name it).
    pub(crate) start: usize,
    /// Unix seconds.
    pub(crate) created_at: u64,
    /// The model as the client named it.
    pub(crate) model: String,
    /// The request's settings, echoed as OpenAI echoes them (`instructions`, `tools`, …).
    pub(crate) echo: Map<String, Value>,
}

/// What a response holds when it ends (or so far).
#[derive(Debug, Default)]
pub(crate) struct Produced {
    /// The model's reasoning text, when it gave one.
    pub(crate) reasoning: String,
    /// The answer's text (every model call's, blank-line separated), or the validated JSON.
    pub(crate) text: String,
    /// A refusal, when the model declined.
    pub(crate) refusal: String,
    /// The client's calls, when the run stopped for them.
    pub(crate) calls: Vec<ToolCall>,
}

impl Shape {
    /// `msg_…`: the message item.
    pub(crate) fn message_id(&self) -> String {
        format!("msg_{}_{}", self.hex, self.start)
    }

    /// `rs_…`: the reasoning item.
    pub(crate) fn reasoning_id(&self) -> String {
        format!("rs_{}_{}", self.hex, self.start)
    }

    /// `fc_…`: the `index`th function call item.
    pub(crate) fn call_id(&self, index: usize) -> String {
        format!("fc_{}_{}_{index}", self.hex, self.start)
    }

    /// The Response object. `status` is `in_progress`, `completed`, `incomplete` or
    /// `failed`; `usage` is left `null` while in progress.
    pub(crate) fn response(
        &self,
        status: &str,
        produced: &Produced,
        usage: Option<&Usage>,
        detail: Option<Value>,
    ) -> Value {
        let mut output = Vec::new();
        if !produced.reasoning.is_empty() {
            output.push(self.reasoning_item(&produced.reasoning));
        }
        if !produced.text.is_empty() || !produced.refusal.is_empty() {
            output.push(self.message_item("completed", &produced.text, &produced.refusal));
        }
        for (index, call) in produced.calls.iter().enumerate() {
            output.push(self.call_item(index, call, "completed"));
        }
        let mut response = json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": null,
            "incomplete_details": null,
            "model": self.model,
            "output": output,
            "usage": usage.map(usage_json),
        });
        match (status, detail) {
            ("failed", Some(error)) => response["error"] = error,
            ("incomplete", Some(reason)) => {
                response["incomplete_details"] = json!({"reason": reason})
            }
            _ => {}
        }
        if let Value::Object(object) = &mut response {
            for (key, value) in &self.echo {
                object.insert(key.clone(), value.clone());
            }
        }
        response
    }

    /// The message item: the answer as one `output_text` part (and the refusal, if any).
    pub(crate) fn message_item(&self, status: &str, text: &str, refusal: &str) -> Value {
        let mut content = Vec::new();
        if !text.is_empty() || refusal.is_empty() {
            content.push(text_part(text));
        }
        if !refusal.is_empty() {
            content.push(json!({"type": "refusal", "refusal": refusal}));
        }
        json!({"id": self.message_id(), "type": "message", "status": status,
               "role": "assistant", "content": content})
    }

    /// The reasoning item, its text as one summary part.
    pub(crate) fn reasoning_item(&self, text: &str) -> Value {
        let summary = if text.is_empty() {
            Vec::new()
        } else {
            vec![json!({"type": "summary_text", "text": text})]
        };
        json!({"id": self.reasoning_id(), "type": "reasoning", "summary": summary})
    }

    /// A function call item, its arguments as JSON text.
    pub(crate) fn call_item(&self, index: usize, call: &ToolCall, status: &str) -> Value {
        json!({
            "id": self.call_id(index),
            "type": "function_call",
            "status": status,
            "call_id": call.id,
            "name": call.name,
            "arguments": arguments(call),
        })
    }
}

/// An `output_text` content part.
pub(crate) fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// The argument text: what the model wrote when it was not valid JSON, else the parsed
/// arguments written back compactly.
pub(crate) fn arguments(call: &ToolCall) -> String {
    match &call.arguments {
        Value::String(raw) if call.invalid_arguments => raw.clone(),
        arguments => arguments.to_string(),
    }
}

/// Our usage in the Responses form; cached input is inside `input_tokens` and reasoning
/// inside `output_tokens` there as here.
pub(crate) fn usage_json(usage: &Usage) -> Value {
    let input = usage.input_tokens.unwrap_or(0);
    let output = usage.output_tokens.unwrap_or(0);
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": usage.cache_read_tokens.unwrap_or(0)},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens.unwrap_or(0)},
        "total_tokens": input.saturating_add(output),
    })
}

/// Numbers the events of one stream.
#[derive(Debug, Default)]
pub(crate) struct Sequence(u64);

impl Sequence {
    /// `event: <type>\ndata: <json with type and sequence_number>\n\n`.
    pub(crate) fn event(&mut self, kind: &str, mut body: Value) -> Bytes {
        if let Value::Object(object) = &mut body {
            object.insert("type".to_owned(), kind.into());
            object.insert("sequence_number".to_owned(), self.0.into());
        }
        self.0 += 1;
        let mut frame = Vec::with_capacity(256);
        frame.extend_from_slice(b"event: ");
        frame.extend_from_slice(kind.as_bytes());
        frame.extend_from_slice(b"\ndata: ");
        // A `Value` always serializes.
        frame.extend_from_slice(body.to_string().as_bytes());
        frame.extend_from_slice(b"\n\n");
        Bytes::from(frame)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            id: "resp_ab".into(),
            hex: "ab".into(),
            start: 2,
            created_at: 7,
            model: "demo".into(),
            echo: Map::new(),
        }
    }

    #[test]
    fn events_are_typed_and_numbered() {
        let mut sequence = Sequence::default();
        let first = sequence.event("response.created", json!({"response": {}}));
        let second = sequence.event("response.in_progress", json!({"response": {}}));
        assert_eq!(
            first,
            Bytes::from_static(
                b"event: response.created\ndata: {\"response\":{},\"sequence_number\":0,\"type\":\"response.created\"}\n\n"
            )
        );
        assert!(
            std::str::from_utf8(&second)
                .unwrap()
                .contains("\"sequence_number\":1")
        );
    }

    #[test]
    fn a_response_lists_reasoning_text_and_calls_with_usage() {
        let produced = Produced {
            reasoning: "think".into(),
            text: "Hi".into(),
            refusal: String::new(),
            calls: vec![ToolCall::new("c1", "f", json!({"a": 1}))],
        };
        let usage = Usage {
            input_tokens: Some(10),
            output_tokens: Some(5),
            ..Usage::default()
        };
        let response = shape().response("completed", &produced, Some(&usage), None);
        assert_eq!(response["output"][0]["id"], "rs_ab_2");
        assert_eq!(response["output"][1]["content"][0]["text"], "Hi");
        assert_eq!(response["output"][2]["arguments"], "{\"a\":1}");
        assert_eq!(response["output"][2]["id"], "fc_ab_2_0");
        assert_eq!(response["usage"]["total_tokens"], 15);
        let incomplete = shape().response(
            "incomplete",
            &Produced::default(),
            None,
            Some(json!("max_output_tokens")),
        );
        assert_eq!(
            incomplete["incomplete_details"]["reason"],
            "max_output_tokens"
        );
    }
}
