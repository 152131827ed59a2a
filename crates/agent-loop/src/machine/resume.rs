//! The history around a suspension, as data: the caller's results for the pending remote
//! calls put in call order and capped like local results, and a round a dropped run left
//! open closed, so the history is valid to send. Pure functions, for any driver resuming a
//! run.

use std::collections::HashSet;

use agent_tools::TruncationPolicy;
use agent_types::{Message, ToolCall, ToolResult};

/// The results in the pending calls' order, each capped like a local result.
pub fn order_results(
    results: Vec<ToolResult>,
    pending: &[ToolCall],
    policy: &TruncationPolicy,
    max_binary_bytes: usize,
) -> Vec<Message> {
    let mut slots: Vec<Option<ToolResult>> = pending.iter().map(|_| None).collect();
    for mut result in results {
        if let Some(at) = pending
            .iter()
            .position(|call| call.id == result.tool_call_id)
        {
            if result.name.is_empty() {
                result.name.clone_from(&pending[at].name);
            }
            result.content =
                agent_tools::truncate(std::mem::take(&mut result.content), policy).text;
            // The caller's images and files fall under the same cap as a local handler's.
            agent_tools::cap_binary(&mut result.blocks, max_binary_bytes);
            slots[at] = Some(result);
        }
    }
    slots.into_iter().flatten().map(Message::Tool).collect()
}

/// Adds an error result for every call of the last assistant turn that has none, so the
/// history is valid to send again. Returns how many were added.
pub fn close_dangling(messages: &mut Vec<Message>, reason: &str) -> usize {
    let mut answered = HashSet::new();
    let mut calls = Vec::new();
    for message in messages.iter().rev() {
        match message {
            Message::Tool(result) => {
                answered.insert(result.tool_call_id.clone());
            }
            Message::Assistant(assistant) => {
                calls.extend(
                    assistant
                        .tool_calls()
                        .filter(|call| !answered.contains(&call.id))
                        .map(|call| (call.id.clone(), call.name.clone())),
                );
                break;
            }
            _ => break,
        }
    }
    let added = calls.len();
    for (id, name) in calls {
        messages.push(Message::Tool(ToolResult::error(
            id,
            name,
            format!("This call was not run: {reason}."),
        )));
    }
    added
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use agent_types::AssistantMessage;
    use serde_json::json;

    use super::*;

    #[test]
    fn results_come_back_in_call_order_named_and_capped() {
        let pending = vec![
            ToolCall::new("a", "first", json!({})),
            ToolCall::new("b", "second", json!({})),
        ];
        let results = vec![
            ToolResult::ok("b", "", "x".repeat(500)),
            ToolResult::ok("a", "first", "short"),
            ToolResult::ok("stranger", "other", "dropped"),
        ];
        let policy = TruncationPolicy::new(TruncationPolicy::MIN_MAX_BYTES).unwrap();
        let messages = order_results(results, &pending, &policy, 1024);
        let ids: Vec<&str> = messages
            .iter()
            .map(|message| match message {
                Message::Tool(result) => result.tool_call_id.as_str(),
                _ => "",
            })
            .collect();
        assert_eq!(ids, ["a", "b"]);
        let Message::Tool(second) = &messages[1] else {
            unreachable!()
        };
        assert_eq!(second.name, "second");
        assert!(second.content.len() < 500, "{}", second.content);
    }

    #[test]
    fn an_open_round_is_closed_with_error_results() {
        let mut turn = AssistantMessage::default();
        turn.content
            .push(agent_types::AssistantBlock::ToolCall(ToolCall::new(
                "a",
                "t",
                json!({}),
            )));
        turn.content
            .push(agent_types::AssistantBlock::ToolCall(ToolCall::new(
                "b",
                "t",
                json!({}),
            )));
        let mut messages = vec![
            Message::user("go"),
            Message::Assistant(turn),
            Message::Tool(ToolResult::ok("a", "t", "done")),
        ];
        assert_eq!(close_dangling(&mut messages, "the worker died"), 1);
        let Some(Message::Tool(closed)) = messages.last() else {
            unreachable!()
        };
        assert_eq!(closed.tool_call_id.as_str(), "b");
        assert!(closed.is_error);
        assert!(closed.content.contains("the worker died"));
        assert_eq!(close_dangling(&mut messages, "again"), 0);
    }
}
