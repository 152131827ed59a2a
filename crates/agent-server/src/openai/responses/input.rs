//! The request side of `POST /v1/responses`: `input` (a string or a list of items), `tools`,
//! `tool_choice`, `text.format` and `reasoning`, read into the session's messages, tool specs
//! and settings. Content parts are rewritten into their Chat Completions forms and read by the
//! same functions as there, so both endpoints accept and refuse the same content.

use std::collections::HashSet;

use agent_loop::output::{OutputSpec, OutputStrategy};
use agent_types::{
    AssistantBlock, AssistantMessage, Message, Reasoning, ReasoningEffort, StopReason, ToolSpec,
};
use serde_json::{Map, Value, json};

use crate::openai::error::OpenAiError;
use crate::openai::request;

/// What `input` (and `instructions`) add to the history.
#[derive(Debug, Default)]
pub(crate) struct Items {
    /// `system` and `developer` messages, in order.
    pub(crate) system: Vec<String>,
    /// The new messages, after the history the request continues (if any).
    pub(crate) messages: Vec<Message>,
}

/// Reads `input`. `open` are the calls the continued history left unanswered (`(id, name)`):
/// the first items may answer them with `function_call_output`. Every call must be answered
/// before the next message, and the input must end with a user message or a call's output,
/// because the model continues from it.
pub(crate) fn items(input: &Value, mut open: Vec<(String, String)>) -> Result<Items, OpenAiError> {
    let mut out = Items::default();
    let list = match input {
        Value::String(text) if text.trim().is_empty() => {
            return Err(OpenAiError::invalid("input", "input is empty"));
        }
        Value::String(text) => {
            answered(&open, "input")?;
            out.messages.push(Message::user(text.clone()));
            return Ok(out);
        }
        Value::Array(list) => list,
        _ => {
            return Err(OpenAiError::invalid(
                "input",
                "input must be a string or a list of items",
            ));
        }
    };
    // The assistant turn being put together from consecutive assistant items.
    let mut turn: Option<AssistantMessage> = None;
    for (at, item) in list.iter().enumerate() {
        let param = format!("input[{at}]");
        let kind = item.get("type").and_then(Value::as_str);
        let role = item.get("role").and_then(Value::as_str);
        match (kind, role) {
            (Some("message") | None, Some(role)) => {
                let content = item.get("content").unwrap_or(&Value::Null);
                let content_param = format!("{param}.content");
                match role {
                    "system" | "developer" => {
                        out.system
                            .push(request::text(&chat_parts(content)?, &content_param)?);
                    }
                    "user" => {
                        close(&mut turn, &mut out, &mut open);
                        answered(&open, &param)?;
                        out.messages.push(Message::User(request::user(
                            &chat_parts(content)?,
                            &content_param,
                        )?));
                    }
                    "assistant" => {
                        if turn.is_none() {
                            answered(&open, &param)?;
                        }
                        let blocks =
                            &mut turn.get_or_insert_with(AssistantMessage::default).content;
                        assistant_content(content, &content_param, blocks)?;
                    }
                    other => {
                        return Err(OpenAiError::invalid(
                            format!("{param}.role"),
                            format!(
                                "role `{other}` is not one of user, assistant, system, developer"
                            ),
                        ));
                    }
                }
            }
            (Some("function_call"), _) => {
                if turn.is_none() {
                    answered(&open, &param)?;
                }
                let field = |name: &str| {
                    item.get(name).and_then(Value::as_str).ok_or_else(|| {
                        OpenAiError::invalid(
                            format!("{param}.{name}"),
                            format!("the function_call {param} needs a string `{name}`"),
                        )
                    })
                };
                let call = request::tool_call(
                    field("call_id")?.to_owned(),
                    field("name")?.to_owned(),
                    item.get("arguments")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                );
                turn.get_or_insert_with(AssistantMessage::default)
                    .content
                    .push(AssistantBlock::ToolCall(call));
            }
            (Some("function_call_output"), _) => {
                close(&mut turn, &mut out, &mut open);
                let call_id = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let Some(position) = open.iter().position(|(id, _)| id == call_id) else {
                    return Err(OpenAiError::invalid(
                        format!("{param}.call_id"),
                        format!(
                            "{param} answers `{call_id}`, which is not an unanswered function \
                             call before it"
                        ),
                    ));
                };
                let (id, name) = open.remove(position);
                let output = item.get("output").unwrap_or(&Value::Null);
                out.messages.push(Message::Tool(request::tool_result(
                    id,
                    name,
                    &chat_parts(output)?,
                    &format!("{param}.output"),
                )?));
            }
            // Reasoning the client was shown is not sent back to the model: providers take
            // only their own signed reasoning, which the client does not have.
            (Some("reasoning"), _) => {}
            (Some(other), _) => {
                return Err(OpenAiError::invalid(
                    format!("{param}.type"),
                    format!(
                        "input items of type `{other}` are not supported; use message, \
                         function_call, function_call_output, reasoning or item_reference"
                    ),
                ));
            }
            (None, None) => {
                return Err(OpenAiError::invalid(
                    format!("{param}.type"),
                    format!("{param} has neither `type` nor `role`"),
                ));
            }
        }
    }
    close(&mut turn, &mut out, &mut open);
    answered(&open, &format!("input[{}]", list.len()))?;
    match out.messages.last() {
        Some(Message::User(_) | Message::Tool(_)) => Ok(out),
        Some(_) => Err(OpenAiError::invalid(
            "input",
            "the last input item must be a user message or a function_call_output: the model \
             continues from it",
        )),
        None => Err(OpenAiError::invalid(
            "input",
            "input must contain a user message or a function_call_output",
        )),
    }
}

/// Ends the assistant turn being put together: its calls are now open.
fn close(turn: &mut Option<AssistantMessage>, out: &mut Items, open: &mut Vec<(String, String)>) {
    let Some(mut message) = turn.take() else {
        return;
    };
    *open = message
        .tool_calls()
        .map(|call| (call.id.to_string(), call.name.clone()))
        .collect();
    message.stop_reason = Some(if open.is_empty() {
        StopReason::Stop
    } else {
        StopReason::ToolCalls
    });
    out.messages.push(Message::Assistant(message));
}

/// Fails when calls are still unanswered at `param`.
fn answered(open: &[(String, String)], param: &str) -> Result<(), OpenAiError> {
    if open.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = open.iter().map(|(id, _)| id.as_str()).collect();
    Err(OpenAiError::invalid(
        "input",
        format!(
            "every function_call must be answered by a function_call_output before the next \
             message; before {param} there is none for: {}",
            ids.join(", ")
        ),
    ))
}

/// Responses content in the Chat Completions form `request` reads: `input_text` is `text`,
/// `input_image` is `image_url`, `input_file` is `file`. A string stays a string.
fn chat_parts(content: &Value) -> Result<Value, OpenAiError> {
    let Value::Array(parts) = content else {
        return Ok(content.clone());
    };
    let mut converted = Vec::with_capacity(parts.len());
    for part in parts {
        let kind = part.get("type").and_then(Value::as_str);
        converted.push(match kind {
            Some("input_text" | "output_text") => {
                json!({"type": "text", "text": part.get("text").cloned().unwrap_or(Value::Null)})
            }
            Some("input_image") => match part.get("image_url") {
                Some(url) => json!({"type": "image_url", "image_url": {"url": url}}),
                // An image by `file_id` is the provider's file: no such files here.
                None => json!({"type": "input_image_without_url"}),
            },
            Some("input_file") => {
                let mut file = Map::new();
                for field in ["file_data", "file_id", "filename"] {
                    if let Some(value) = part.get(field) {
                        file.insert(field.to_owned(), value.clone());
                    }
                }
                json!({"type": "file", "file": file})
            }
            // Anything else is refused by `request`, naming the part.
            _ => part.clone(),
        });
    }
    Ok(Value::Array(converted))
}

/// An assistant item's content: a string, or `output_text` and `refusal` parts.
fn assistant_content(
    content: &Value,
    param: &str,
    blocks: &mut Vec<AssistantBlock>,
) -> Result<(), OpenAiError> {
    match content {
        Value::Null => Ok(()),
        Value::String(text) => {
            if !text.is_empty() {
                blocks.push(AssistantBlock::Text { text: text.clone() });
            }
            Ok(())
        }
        Value::Array(parts) => {
            for (at, part) in parts.iter().enumerate() {
                let text = |field: &str| {
                    part.get(field)
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .ok_or_else(|| {
                            OpenAiError::invalid(
                                format!("{param}[{at}].{field}"),
                                format!("the content part {param}[{at}] needs a string `{field}`"),
                            )
                        })
                };
                match part.get("type").and_then(Value::as_str) {
                    Some("output_text" | "input_text" | "text") => {
                        blocks.push(AssistantBlock::Text {
                            text: text("text")?,
                        })
                    }
                    Some("refusal") => blocks.push(AssistantBlock::Refusal {
                        text: text("refusal")?,
                    }),
                    other => {
                        return Err(OpenAiError::invalid(
                            format!("{param}[{at}].type"),
                            format!(
                                "assistant content parts of type `{}` are not supported",
                                other.unwrap_or("(none)")
                            ),
                        ));
                    }
                }
            }
            Ok(())
        }
        _ => Err(OpenAiError::invalid(
            param,
            format!("{param} must be a string or a list of content parts"),
        )),
    }
}

/// The client's function tools, checked: `type: function` only, valid unique names, no
/// unknown fields.
pub(crate) fn tools(tools: Option<&Vec<Value>>) -> Result<Vec<ToolSpec>, OpenAiError> {
    let mut specs = Vec::new();
    let mut names = HashSet::new();
    for (at, tool) in tools.into_iter().flatten().enumerate() {
        let param = format!("tools[{at}]");
        let Some(object) = tool.as_object() else {
            return Err(OpenAiError::invalid(param, "a tool must be an object"));
        };
        match object.get("type").and_then(Value::as_str) {
            Some("function") => {}
            other => {
                return Err(OpenAiError::invalid(
                    format!("{param}.type"),
                    format!(
                        "tools of type `{}` are not supported; use `function`",
                        other.unwrap_or("(none)")
                    ),
                ));
            }
        }
        if let Some(field) = object.keys().find(|key| {
            !matches!(
                key.as_str(),
                "type" | "name" | "description" | "parameters" | "strict"
            )
        }) {
            return Err(OpenAiError::invalid(
                format!("{param}.{field}"),
                format!("unknown field `{field}` in {param}"),
            ));
        }
        let name = object.get("name").and_then(Value::as_str).ok_or_else(|| {
            OpenAiError::invalid(format!("{param}.name"), format!("{param} needs `name`"))
        })?;
        agent_tools::validate_name(name)
            .map_err(|error| OpenAiError::invalid(format!("{param}.name"), error.to_string()))?;
        if !names.insert(name.to_owned()) {
            return Err(OpenAiError::invalid(
                format!("{param}.name"),
                format!("the tool `{name}` is declared twice"),
            ));
        }
        let parameters = object
            .get("parameters")
            .filter(|parameters| !parameters.is_null())
            .cloned()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
        specs.push(
            ToolSpec::new(
                name,
                object
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                parameters,
            )
            .with_strict(object.get("strict") == Some(&Value::Bool(true))),
        );
    }
    Ok(specs)
}

/// `tool_choice` in the Responses form (`{"type": "function", "name"}` for a named one),
/// read as Chat Completions' is.
pub(crate) fn tool_choice(
    choice: Option<&Value>,
    offered: impl Fn(&str) -> bool,
) -> Result<(agent_types::ToolChoice, bool), OpenAiError> {
    let chat = match choice {
        Some(Value::Object(object)) if object.get("type") == Some(&json!("function")) => {
            Some(json!({"type": "function", "function": {"name": object.get("name")}}))
        }
        other => other.cloned(),
    };
    request::tool_choice(chat.as_ref(), offered)
}

/// `reasoning.effort` as our reasoning setting (`summary` asks for the reasoning text, which
/// comes when the model gives it).
pub(crate) fn reasoning(reasoning: Option<&Value>) -> Result<Option<Reasoning>, OpenAiError> {
    let Some(reasoning) = reasoning.filter(|value| !value.is_null()) else {
        return Ok(None);
    };
    let Some(object) = reasoning.as_object() else {
        return Err(OpenAiError::invalid(
            "reasoning",
            "reasoning must be an object",
        ));
    };
    if let Some(field) = object
        .keys()
        .find(|key| !matches!(key.as_str(), "effort" | "summary" | "generate_summary"))
    {
        return Err(OpenAiError::invalid(
            format!("reasoning.{field}"),
            format!("unknown field `reasoning.{field}`"),
        ));
    }
    let effort = match object.get("effort").and_then(Value::as_str) {
        None | Some("none") => return Ok(None),
        Some("minimal") => ReasoningEffort::Minimal,
        Some("low") => ReasoningEffort::Low,
        Some("medium") => ReasoningEffort::Medium,
        Some("high" | "xhigh") => ReasoningEffort::High,
        Some(other) => {
            return Err(OpenAiError::invalid(
                "reasoning.effort",
                format!(
                    "reasoning.effort `{other}` is not one of none, minimal, low, medium, high, xhigh"
                ),
            ));
        }
    };
    Ok(Some(Reasoning {
        effort: Some(effort),
        budget_tokens: None,
    }))
}

/// `text`: `format` `text` asks for nothing, `json_object` for any JSON object,
/// `json_schema` for an answer matching the schema (as `response_format` on chat
/// completions). `verbosity` is accepted only as `medium`, the default.
pub(crate) fn text_format(
    text: Option<&Value>,
) -> Result<Option<(OutputSpec, OutputStrategy)>, OpenAiError> {
    let Some(text) = text.filter(|value| !value.is_null()) else {
        return Ok(None);
    };
    let Some(object) = text.as_object() else {
        return Err(OpenAiError::invalid("text", "text must be an object"));
    };
    for (field, value) in object {
        match field.as_str() {
            "format" => {}
            "verbosity" if value.is_null() || value == "medium" => {}
            other => {
                return Err(OpenAiError::invalid(
                    format!("text.{other}"),
                    format!("`text.{other}` is not supported"),
                ));
            }
        }
    }
    let Some(format) = object.get("format").filter(|value| !value.is_null()) else {
        return Ok(None);
    };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some((
            OutputSpec::from_schema(json!({"type": "object"})).with_name("json_object"),
            OutputStrategy::Prompted,
        ))),
        Some("json_schema") => request::json_schema_output(format, "text.format").map(Some),
        _ => Err(OpenAiError::invalid(
            "text.format.type",
            "`text.format.type` must be `text`, `json_object` or `json_schema`",
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn items_make_turns_calls_and_results() {
        let read = items(
            &json!([
                {"role": "developer", "content": "Be brief."},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking.", "annotations": []}]},
                {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "function_call_output", "call_id": "c1", "output": "4 °C"}
            ]),
            Vec::new(),
        )
        .unwrap();
        assert_eq!(read.system, ["Be brief."]);
        assert_eq!(read.messages.len(), 3);
        let Message::Assistant(turn) = &read.messages[1] else {
            panic!("{:?}", read.messages[1]);
        };
        assert_eq!(turn.text_content(), "Looking.");
        assert_eq!(turn.tool_calls().count(), 1);
        let Message::Tool(result) = &read.messages[2] else {
            panic!();
        };
        assert_eq!(result.name, "get_weather");
    }

    #[test]
    fn outputs_answer_the_continued_history_and_nothing_else() {
        let open = vec![("c1".to_owned(), "get_weather".to_owned())];
        let read = items(
            &json!([{"type": "function_call_output", "call_id": "c1", "output": "4 °C"}]),
            open.clone(),
        )
        .unwrap();
        assert_eq!(read.messages.len(), 1);
        let error = items(&json!("hello"), open.clone()).unwrap_err();
        assert_eq!(error.body()["error"]["param"], "input");
        let error = items(
            &json!([{"type": "function_call_output", "call_id": "c9", "output": "x"}]),
            open,
        )
        .unwrap_err();
        assert_eq!(error.body()["error"]["param"], "input[0].call_id");
        let error =
            items(&json!([{"type": "web_search_call", "id": "x"}]), Vec::new()).unwrap_err();
        assert_eq!(error.body()["error"]["param"], "input[0].type");
        let error = items(
            &json!([{"role": "user", "content": [{"type": "input_video", "x": 1}]}]),
            Vec::new(),
        )
        .unwrap_err();
        assert_eq!(error.body()["error"]["param"], "input[0].content[0].type");
    }

    #[test]
    fn tools_and_formats_name_the_field_at_fault() {
        let specs = tools(Some(&vec![
            json!({"type": "function", "name": "f", "strict": true,
            "parameters": {"type": "object", "properties": {}}}),
        ]))
        .unwrap();
        assert!(specs[0].strict);
        let error = tools(Some(&vec![json!({"type": "web_search"})])).unwrap_err();
        assert_eq!(error.body()["error"]["param"], "tools[0].type");
        let error = tools(Some(&vec![
            json!({"type": "function", "name": "f", "cache": 1}),
        ]))
        .unwrap_err();
        assert_eq!(error.body()["error"]["param"], "tools[0].cache");
        let (spec, strategy) = text_format(Some(&json!({"format": {"type": "json_schema",
            "name": "city", "schema": {"type": "object"}, "strict": true}})))
        .unwrap()
        .unwrap();
        assert_eq!((spec.name(), strategy), ("city", OutputStrategy::Auto));
        let error = text_format(Some(&json!({"format": {"type": "json_schema"}}))).unwrap_err();
        assert_eq!(error.body()["error"]["param"], "text.format.name");
        let (choice, forced) =
            tool_choice(Some(&json!({"type": "function", "name": "f"})), |name| {
                name == "f"
            })
            .unwrap();
        assert!(forced);
        assert_eq!(choice, agent_types::ToolChoice::Tool { name: "f".into() });
    }
}
