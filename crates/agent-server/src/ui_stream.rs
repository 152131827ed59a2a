//! `POST /v1/ui/chat`: the Vercel AI SDK's UI message stream, so `useChat` (and the headless
//! `Chat` class) with `DefaultChatTransport` talks to a server-held session unchanged.
//!
//! # The request
//!
//! The body `DefaultChatTransport` sends: `id` (the chat's id: the session's id in the
//! tenant's namespace, created on first use), `messages` (the chat as UIMessages),
//! `trigger` (`submit-message` or `regenerate-message`) and `messageId`; plus `session`, an
//! optional [`NewSession`] (the transport's `body` option) used only when the session is
//! created. Without one, a new session gets the server's first model and every server tool
//! the tenant may use. Any other top-level field is a 400 naming it; the UIMessages are read
//! loosely (the client adds fields of its own to them).
//!
//! The history is the server's: only the last message is read.
//! - a `user` message: its `text` parts are the next user turn, its `file` parts (a data URL
//!   or an https URL, with `mediaType`) the turn's images and files, bounded by
//!   crate::attachments;
//! - an `assistant` message (the client's `addToolOutput` or `addToolApprovalResponse`
//!   went on with it): the outputs of the session's pending remote calls (`output-available`
//!   or `output-error` tool parts), or the decisions on its pending approvals
//!   (`approval-responded` parts), resume the run;
//! - `regenerate-message`: the server's history goes back to its last user turn, and the
//!   run answers it again.
//!
//! # The stream
//!
//! `text/event-stream` with `x-vercel-ai-ui-message-stream: v1`, one chunk per `data:` line,
//! in the shapes of the `ai` package's `uiMessageChunkSchema`: `start`; per model call
//! `start-step`, `text-start/-delta/-end`, `reasoning-start/-delta/-end`,
//! `tool-input-start/-delta/-available`, then the server tools' `tool-output-available` /
//! `tool-output-error` (`tool-output-denied` for a call a person denied), `finish-step`;
//! `tool-approval-request` for calls waiting for approval (`approvalId` is the call's id);
//! `data-output` with the validated answer of a session with an output schema; `error` when
//! the run fails; `finish` with the `finishReason` and, as `messageMetadata`, the session id,
//! its status, the run's `usage` and `costUsd`; `data: [DONE]`.
//!
//! The run goes on when its client hangs up, and `GET /v1/ui/chat/{id}/stream` resumes its
//! stream (ui_resume.rs).
//!
//! Remote tools (the session's `remote_tools`) are the AI SDK's client-side tools: their
//! `tool-input-available` reaches `onToolCall`, the run ends with `finishReason:
//! "tool-calls"`, and the client's tool outputs resume it.

use agent_loop::{ApprovalDecision, SessionInput, SessionStatus};
use agent_types::{AgentEvent, Role, ToolResult, UserMessage};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use serde::Deserialize;
use serde_json::Value;

use crate::encode::{CallIds, Encoder, End, write_json, write_output, write_str, write_u64};
use crate::error::ApiError;
use crate::execute::{self, Encoded};
use crate::frontend;
use crate::http::json_body;
use crate::sessions::{NewSession, respond};
use crate::state::AppState;
use crate::store::SessionRecord;

/// The body `DefaultChatTransport` sends.
#[derive(Debug, Deserialize)]
struct ChatBody {
    id: String,
    messages: Vec<Value>,
    #[serde(default)]
    trigger: Option<String>,
    /// The message the trigger is about; the server's history decides, so it is not used.
    #[serde(default, rename = "messageId")]
    _message_id: Option<String>,
    /// The session to create on first use.
    #[serde(default)]
    session: Option<NewSession>,
}

/// `POST /v1/ui/chat`.
pub(crate) async fn chat(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (state, headers) = (&state, &headers);
    respond(state, headers, |tenant| async move {
        let body: ChatBody = json_body(state, headers, body).await?;
        frontend::check_id("id", &body.id)?;
        let regenerate = match body.trigger.as_deref() {
            None | Some("submit-message") => false,
            Some("regenerate-message") => true,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "`trigger` `{other}` is not supported: use `submit-message` or \
                     `regenerate-message`"
                )));
            }
        };
        let last = body
            .messages
            .last()
            .ok_or_else(|| ApiError::bad_request("`messages` is empty"))?;
        let mut denied = Vec::new();
        let execute = frontend::prepare(state, &tenant, &body.id, body.session, |record| {
            input(record, last, regenerate, &mut denied)
        })
        .await?;
        let encoder = state
            .inner
            .ui_runs
            .record(&tenant.name, &body.id, UiEncoder::new(denied));
        let mut response = execute::start(state, execute, Encoded(encoder));
        let headers = response.headers_mut();
        headers.insert(
            "x-vercel-ai-ui-message-stream",
            HeaderValue::from_static("v1"),
        );
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        Ok(response)
    })
    .await
    .into_response()
}

/// The run's input from the chat's last message and the session's state; `denied` gets the
/// calls the client's decisions deny.
fn input(
    record: &mut SessionRecord,
    last: &Value,
    regenerate: bool,
    denied: &mut Vec<String>,
) -> Result<SessionInput, ApiError> {
    let session = &mut record.session;
    if regenerate {
        let Some(user) = session
            .messages
            .iter()
            .rposition(|message| message.role() == Role::User)
        else {
            return Err(ApiError::bad_request(
                "nothing to regenerate: the session has no user message",
            ));
        };
        session.messages.truncate(user + 1);
        session.pending_tool_calls.clear();
        session.pending_approvals.clear();
        session.status = SessionStatus::Completed;
        return Ok(SessionInput::Continue);
    }
    match last.get("role").and_then(Value::as_str) {
        Some("user") => user_turn(last).map(SessionInput::User),
        Some("assistant") => match session.status {
            SessionStatus::AwaitingToolExecution => {
                let mut results = Vec::with_capacity(session.pending_tool_calls.len());
                for call in &session.pending_tool_calls {
                    let part = tool_part(last, call.id.as_str())?;
                    results.push(match part.get("state").and_then(Value::as_str) {
                        Some("output-available") => {
                            let output = part.get("output").unwrap_or(&Value::Null);
                            let text = match output {
                                Value::String(text) => text.clone(),
                                other => other.to_string(),
                            };
                            ToolResult::ok(call.id.clone(), call.name.clone(), text)
                        }
                        Some("output-error") => ToolResult::error(
                            call.id.clone(),
                            call.name.clone(),
                            part.get("errorText")
                                .and_then(Value::as_str)
                                .unwrap_or("the client's tool failed"),
                        ),
                        _ => return Err(no_answer(call.id.as_str(), "an output")),
                    });
                }
                Ok(SessionInput::ToolResults(results))
            }
            SessionStatus::AwaitingApproval => {
                let mut decisions = Vec::with_capacity(session.pending_approvals.len());
                for call in &session.pending_approvals {
                    let part = tool_part(last, call.id.as_str())?;
                    let approval = part.get("approval");
                    let approved = match part.get("state").and_then(Value::as_str) {
                        Some("approval-responded") => approval
                            .and_then(|approval| approval.get("approved"))
                            .and_then(Value::as_bool)
                            .ok_or_else(|| no_answer(call.id.as_str(), "a decision"))?,
                        Some("output-denied") => false,
                        _ => return Err(no_answer(call.id.as_str(), "a decision")),
                    };
                    if !approved {
                        denied.push(call.id.as_str().to_owned());
                    }
                    let reason = approval
                        .and_then(|approval| approval.get("reason"))
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    decisions.push(if approved {
                        ApprovalDecision::approve(call.id.as_str())
                    } else {
                        ApprovalDecision::deny(call.id.as_str(), reason)
                    });
                }
                Ok(SessionInput::Approvals(decisions))
            }
            _ => Err(ApiError::bad_request(
                "the session waits for no tool output or approval: send a user message",
            )),
        },
        _ => Err(ApiError::bad_request(
            "the last message must be a `user` message or the `assistant` message with tool \
             outputs or approval responses",
        )),
    }
}

/// The user turn in a UIMessage's `text` parts (joined) and `file` parts (images and
/// files: a data URL or an https URL, its `mediaType`, bounded by crate::attachments).
fn user_turn(message: &Value) -> Result<UserMessage, ApiError> {
    let parts = message
        .get("parts")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::bad_request("the user message has no `parts`"))?;
    let mut text = String::new();
    let mut files = Vec::new();
    for part in parts {
        match part.get("type").and_then(Value::as_str) {
            Some("text") => {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(part.get("text").and_then(Value::as_str).unwrap_or(""));
            }
            Some("file") => {
                let field = |name: &str| part.get(name).and_then(Value::as_str);
                let url = field("url")
                    .ok_or_else(|| ApiError::bad_request("a `file` part needs a `url`"))?;
                let media_type = field("mediaType")
                    .ok_or_else(|| ApiError::bad_request("a `file` part needs a `mediaType`"))?;
                // The text comes first: its block is index 0 of the turn.
                files.push(crate::attachments::block(
                    files.len() + 1,
                    url,
                    media_type,
                    field("filename"),
                )?);
            }
            Some(kind) if kind.starts_with("data-") || kind == "step-start" => {}
            Some(kind) => {
                return Err(ApiError::bad_request(format!(
                    "user message parts of type `{kind}` are not supported: send `text` and \
                     `file` parts"
                )));
            }
            None => return Err(ApiError::bad_request("a message part has no `type`")),
        }
    }
    if text.trim().is_empty() && files.is_empty() {
        return Err(ApiError::bad_request(
            "the user message is empty: send some text",
        ));
    }
    let mut message = UserMessage::text(text);
    if message.content.iter().all(
        |block| matches!(block, agent_types::UserBlock::Text { text } if text.trim().is_empty()),
    ) {
        message.content.clear();
    }
    message.content.extend(files);
    crate::attachments::check(&message)?;
    Ok(message)
}

/// The tool part of `message` for call `id`.
fn tool_part<'a>(message: &'a Value, id: &str) -> Result<&'a Value, ApiError> {
    message
        .get("parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|part| {
            part.get("type")
                .and_then(Value::as_str)
                .is_some_and(|kind| kind.starts_with("tool-") || kind == "dynamic-tool")
                && part.get("toolCallId").and_then(Value::as_str) == Some(id)
        })
        .ok_or_else(|| no_answer(id, "a tool part"))
}

fn no_answer(id: &str, what: &str) -> ApiError {
    ApiError::bad_request(format!(
        "the session waits for tool call `{id}`: the last message has no {what} for it"
    ))
}

/// The AI SDK's UI message stream (`x-vercel-ai-ui-message-stream: v1`): one chunk per
/// `data:` line in the shapes of the `ai` package's `uiMessageChunkSchema`, `data: [DONE]`
/// last. Re-exported as [`crate::encode::UiMessageEncoder`].
pub struct UiEncoder {
    /// Text and reasoning parts so far (their ids: `text-N`, `reasoning-N`).
    parts: u64,
    /// A step (model call and its tools) is open.
    step: bool,
    /// The open model call's tool call ids, by index (slots reused across calls).
    calls: CallIds,
    /// Calls the client's decisions denied.
    denied: Vec<String>,
    /// An `error` chunk went out.
    failed: bool,
}

impl UiEncoder {
    /// An encoder for one run; `denied` are the calls whose approval the run's input
    /// denies (their results go out as `tool-output-denied`).
    pub fn new(denied: Vec<String>) -> Self {
        Self {
            parts: 0,
            step: false,
            calls: CallIds::default(),
            denied,
            failed: false,
        }
    }

    fn call_id(&self, index: u32) -> &str {
        self.calls.get(index)
    }

    fn part(&self, kind: &str, suffix: &str, out: &mut BytesMut) {
        out.extend_from_slice(b"data: {\"type\":\"");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(suffix.as_bytes());
        out.extend_from_slice(b"\",\"id\":\"");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"-");
        write_u64(self.parts, out);
        out.extend_from_slice(b"\"");
    }

    fn finish_step(&mut self, out: &mut BytesMut) {
        if std::mem::take(&mut self.step) {
            out.extend_from_slice(b"data: {\"type\":\"finish-step\"}\n\n");
        }
    }
}

impl Encoder for UiEncoder {
    fn open(&mut self, out: &mut BytesMut) {
        out.extend_from_slice(b"data: {\"type\":\"start\"}\n\n");
    }

    fn event(&mut self, event: &AgentEvent, out: &mut BytesMut) {
        match event {
            AgentEvent::MessageStart {
                role: Role::Assistant,
            } => {
                self.finish_step(out);
                self.step = true;
                out.extend_from_slice(b"data: {\"type\":\"start-step\"}\n\n");
            }
            AgentEvent::TextStart => {
                self.part("text", "-start", out);
                out.extend_from_slice(b"}\n\n");
            }
            AgentEvent::TextDelta { delta } => {
                self.part("text", "-delta", out);
                out.extend_from_slice(b",\"delta\":");
                write_str(delta, out);
                out.extend_from_slice(b"}\n\n");
            }
            AgentEvent::TextEnd { .. } => {
                self.part("text", "-end", out);
                out.extend_from_slice(b"}\n\n");
                self.parts += 1;
            }
            AgentEvent::ThinkingStart => {
                self.part("reasoning", "-start", out);
                out.extend_from_slice(b"}\n\n");
            }
            AgentEvent::ThinkingDelta { delta } => {
                self.part("reasoning", "-delta", out);
                out.extend_from_slice(b",\"delta\":");
                write_str(delta, out);
                out.extend_from_slice(b"}\n\n");
            }
            AgentEvent::ThinkingEnd { .. } => {
                self.part("reasoning", "-end", out);
                out.extend_from_slice(b"}\n\n");
                self.parts += 1;
            }
            AgentEvent::ToolCallStart { index, id, name } => {
                self.calls.remember(*index, id.as_str());
                out.extend_from_slice(b"data: {\"type\":\"tool-input-start\",\"toolCallId\":");
                write_str(id.as_str(), out);
                out.extend_from_slice(b",\"toolName\":");
                write_str(name, out);
                out.extend_from_slice(b"}\n\n");
            }
            AgentEvent::ToolCallDelta { index, delta } => {
                out.extend_from_slice(b"data: {\"type\":\"tool-input-delta\",\"toolCallId\":");
                write_str(self.call_id(*index), out);
                out.extend_from_slice(b",\"inputTextDelta\":");
                write_str(delta, out);
                out.extend_from_slice(b"}\n\n");
            }
            AgentEvent::ToolCallEnd { tool_call, .. } => {
                out.extend_from_slice(b"data: {\"type\":\"tool-input-available\",\"toolCallId\":");
                write_str(tool_call.id.as_str(), out);
                out.extend_from_slice(b",\"toolName\":");
                write_str(&tool_call.name, out);
                out.extend_from_slice(b",\"input\":");
                write_json(&tool_call.arguments, out);
                out.extend_from_slice(b"}\n\n");
            }
            AgentEvent::ToolExecutionEnd {
                call_id,
                output,
                is_error,
                ..
            } => {
                if self.denied.iter().any(|id| id == call_id.as_str()) {
                    out.extend_from_slice(
                        b"data: {\"type\":\"tool-output-denied\",\"toolCallId\":",
                    );
                    write_str(call_id.as_str(), out);
                } else if *is_error {
                    out.extend_from_slice(b"data: {\"type\":\"tool-output-error\",\"toolCallId\":");
                    write_str(call_id.as_str(), out);
                    out.extend_from_slice(b",\"errorText\":");
                    write_str(output, out);
                } else {
                    out.extend_from_slice(
                        b"data: {\"type\":\"tool-output-available\",\"toolCallId\":",
                    );
                    write_str(call_id.as_str(), out);
                    out.extend_from_slice(b",\"output\":");
                    write_output(output, out);
                }
                out.extend_from_slice(b"}\n\n");
            }
            AgentEvent::ApprovalRequested { tool_calls, .. } => {
                for call in tool_calls {
                    out.extend_from_slice(
                        b"data: {\"type\":\"tool-approval-request\",\"approvalId\":",
                    );
                    write_str(call.id.as_str(), out);
                    out.extend_from_slice(b",\"toolCallId\":");
                    write_str(call.id.as_str(), out);
                    out.extend_from_slice(b"}\n\n");
                }
            }
            AgentEvent::Output { value } => {
                out.extend_from_slice(b"data: {\"type\":\"data-output\",\"data\":");
                write_json(value, out);
                out.extend_from_slice(b"}\n\n");
            }
            AgentEvent::Error { error } => {
                self.failed = true;
                out.extend_from_slice(b"data: {\"type\":\"error\",\"errorText\":");
                write_str(&error.message, out);
                out.extend_from_slice(b"}\n\n");
            }
            AgentEvent::SessionEnd { .. } => self.finish_step(out),
            _ => {}
        }
    }

    fn close(&mut self, end: &End<'_>, out: &mut BytesMut) {
        self.finish_step(out);
        if let Some(error) = end.error
            && !self.failed
        {
            out.extend_from_slice(b"data: {\"type\":\"error\",\"errorText\":");
            write_str(&error.message, out);
            out.extend_from_slice(b"}\n\n");
        }
        let session = end.session;
        let reason = match session.status {
            _ if end.error.is_some() => "error",
            SessionStatus::Completed => "stop",
            SessionStatus::AwaitingToolExecution | SessionStatus::AwaitingApproval => "tool-calls",
            SessionStatus::Error => "error",
            _ => "other",
        };
        let usage = &end.usage;
        let metadata = serde_json::json!({
            "sessionId": session.id,
            "status": session.status,
            "usage": {
                "inputTokens": usage.input_tokens,
                "outputTokens": usage.output_tokens,
                "totalTokens": usage.total_tokens(),
                "reasoningTokens": usage.reasoning_tokens,
                "cachedInputTokens": usage.cache_read_tokens,
            },
            "costUsd": end.cost_usd,
        });
        out.extend_from_slice(b"data: {\"type\":\"finish\",\"finishReason\":\"");
        out.extend_from_slice(reason.as_bytes());
        out.extend_from_slice(b"\",\"messageMetadata\":");
        write_json(&metadata, out);
        out.extend_from_slice(b"}\n\ndata: [DONE]\n\n");
    }
}

/// The approval and remote-tool state a chat can be in, for tests and docs.
#[cfg(test)]
mod tests {
    use super::*;
    use agent_types::{AgentError, ErrorKind, ToolCall};

    fn encode(events: &[AgentEvent]) -> Vec<Value> {
        let mut encoder = UiEncoder::new(vec!["call_2".into()]);
        let mut out = BytesMut::new();
        encoder.open(&mut out);
        for event in events {
            encoder.event(event, &mut out);
        }
        let session = agent_loop::Session::with_id("chat_1", "m");
        let error = AgentError::new(ErrorKind::Aborted, "stopped");
        encoder.close(
            &End {
                session: &session,
                usage: agent_types::Usage::default(),
                cost_usd: None,
                error: Some(&error),
            },
            &mut out,
        );
        let text = std::str::from_utf8(&out).unwrap();
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        text.split("\n\n")
            .filter_map(|frame| frame.strip_prefix("data: "))
            .filter(|data| *data != "[DONE]")
            .map(|data| serde_json::from_str(data).unwrap())
            .collect()
    }

    #[test]
    fn every_chunk_is_one_json_line_with_the_sdk_field_names() {
        let chunks = encode(&[
            AgentEvent::MessageStart {
                role: Role::Assistant,
            },
            AgentEvent::TextStart,
            AgentEvent::TextDelta {
                delta: "line\n\"two\"".into(),
            },
            AgentEvent::TextEnd {
                text: String::new(),
            },
            AgentEvent::ToolCallStart {
                index: 0,
                id: "call_1".into(),
                name: "clock".into(),
            },
            AgentEvent::ToolCallDelta {
                index: 0,
                delta: "{\"tz\":".into(),
            },
            AgentEvent::ToolCallEnd {
                index: 0,
                tool_call: ToolCall::new("call_1", "clock", serde_json::json!({"tz": "UTC"})),
            },
            AgentEvent::ToolExecutionEnd {
                call_id: "call_1".into(),
                tool_name: "clock".into(),
                output: "{\"utc\":\"12:00\"}".into(),
                is_error: false,
                truncated: false,
                blocks: Vec::new(),
            },
            AgentEvent::ToolExecutionEnd {
                call_id: "call_2".into(),
                tool_name: "clock".into(),
                output: "denied".into(),
                is_error: true,
                truncated: false,
                blocks: Vec::new(),
            },
        ]);
        let kinds: Vec<&str> = chunks.iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "start",
                "start-step",
                "text-start",
                "text-delta",
                "text-end",
                "tool-input-start",
                "tool-input-delta",
                "tool-input-available",
                "tool-output-available",
                "tool-output-denied",
                "finish-step",
                "error",
                "finish"
            ]
        );
        assert_eq!(chunks[3]["delta"], "line\n\"two\"");
        assert_eq!(chunks[3]["id"], chunks[2]["id"]);
        assert_eq!(chunks[6]["toolCallId"], "call_1");
        assert_eq!(chunks[8]["output"]["utc"], "12:00");
        assert_eq!(chunks[12]["finishReason"], "error");
        assert_eq!(chunks[12]["messageMetadata"]["sessionId"], "chat_1");
    }
}
