//! `POST /v1/ag-ui`: the AG-UI protocol (`@ag-ui/client`'s `HttpAgent`, CopilotKit), over a
//! server-held session.
//!
//! # The request
//!
//! `RunAgentInput`: `threadId` names the session in the tenant's namespace (created on first
//! use, from `forwardedProps.session`, a [`NewSession`], or else the server's first model and
//! every server tool the tenant may use); `runId` names the run in the events; `tools` (the
//! frontend's tools) are the session's remote tools for this run; `context` entries and the
//! `state` (ag_ui_state.rs) are added to the user turn; `parentRunId` and `protocolVersion`
//! are accepted and not used;
//! `messages` is the client's copy of the thread, of which only the new input is read:
//! - the session waits for remote calls: the `tool` messages answering them (`content`, or
//!   `error` for a failed call);
//! - the session waits for approvals: `resume`, one entry per interrupt (`status: resolved`
//!   approves unless `payload.approved` is `false`; `cancelled` denies; `payload.reason` is
//!   what the model is told);
//! - otherwise the last message, a `user` message (its text, and its `image`, `document` and
//!   `audio` parts: crate::attachments bounds them).
//!
//! Other top-level fields are a 400 naming them.
//!
//! # The stream
//!
//! `text/event-stream`, one `data: {json}` per event, camelCase: `RUN_STARTED`;
//! `STATE_SNAPSHOT` with the request's state (when not empty); per model
//! call `STEP_STARTED`/`STEP_FINISHED` (`stepName` `round-N`), `TEXT_MESSAGE_START/CONTENT/END`,
//! `REASONING_START`, `REASONING_MESSAGE_START/CONTENT/END`, `REASONING_END`,
//! `TOOL_CALL_START/ARGS/END`, and `TOOL_CALL_RESULT` for each server tool; then
//! `RUN_FINISHED` with `result` (session id, status, usage, cost), `usage`, and `outcome`:
//! `success` (with `pendingToolCallIds` when frontend tools are to run), `interrupt` (one per
//! call waiting for approval, its id the call's), or `cancelled`; or `RUN_ERROR` when the run
//! failed.

use agent_loop::{ApprovalDecision, SessionInput, SessionStatus};
use agent_types::{AgentEvent, Role, ToolResult, ToolSpec, UserMessage};
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::encode::{CallIds, Encoder, End, write_json, write_str, write_u64};
use crate::error::ApiError;
use crate::execute::{self, Encoded};
use crate::frontend;
use crate::http::json_body;
use crate::sessions::{NewSession, respond};
use crate::state::AppState;
use crate::store::SessionRecord;

/// AG-UI's `RunAgentInput`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunAgentInput {
    thread_id: String,
    run_id: String,
    #[serde(default, rename = "protocolVersion")]
    _protocol_version: Option<String>,
    #[serde(default, rename = "parentRunId")]
    _parent_run_id: Option<String>,
    /// The frontend's shared state: given to the model with the user turn, and echoed as
    /// `STATE_SNAPSHOT` at the run's start (ag_ui_state.rs).
    #[serde(default)]
    state: Option<Value>,
    messages: Vec<Value>,
    #[serde(default)]
    tools: Vec<FrontendTool>,
    #[serde(default)]
    context: Vec<Context>,
    #[serde(default)]
    forwarded_props: Option<Value>,
    #[serde(default)]
    resume: Vec<Resume>,
}

/// A frontend tool.
#[derive(Debug, Deserialize)]
struct FrontendTool {
    name: String,
    description: String,
    #[serde(default)]
    parameters: Option<Value>,
    #[serde(default, rename = "metadata")]
    _metadata: Option<Value>,
}

/// A context entry for the run.
#[derive(Debug, Deserialize)]
struct Context {
    description: String,
    value: String,
}

/// An answer to an interrupt (here: a call waiting for approval).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Resume {
    interrupt_id: String,
    status: String,
    #[serde(default)]
    payload: Option<Value>,
}

/// `POST /v1/ag-ui`.
pub(crate) async fn run(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let (state, headers) = (&state, &headers);
    respond(state, headers, |tenant| async move {
        let input: RunAgentInput = json_body(state, headers, body).await?;
        frontend::check_id("threadId", &input.thread_id)?;
        if input.run_id.is_empty() || input.run_id.len() > frontend::MAX_ID_CHARS {
            return Err(ApiError::bad_request(format!(
                "`runId` must be 1 to {} characters",
                frontend::MAX_ID_CHARS
            )));
        }
        let context = match input
            .forwarded_props
            .as_ref()
            .and_then(|props| props.get("session"))
        {
            Some(session) => Some(
                serde_json::from_value::<NewSession>(session.clone()).map_err(|error| {
                    ApiError::bad_request(format!("`forwardedProps.session`: {error}"))
                })?,
            ),
            None => None,
        };
        let tools = frontend_tools(state, &input.tools)?;
        let shared = crate::ag_ui_state::shared(input.state.as_ref())?;
        let execute = frontend::prepare(state, &tenant, &input.thread_id, context, |record| {
            run_input(record, &input, tools, shared.as_deref())
        })
        .await?;
        let mut encoder = AgUiEncoder::new(&input.thread_id, &input.run_id);
        if let Some(snapshot) = shared {
            encoder = encoder.with_state_snapshot(snapshot);
        }
        Ok(execute::start(state, execute, Encoded(encoder)))
    })
    .await
    .into_response()
}

/// The frontend's tools as remote tool specs, checked.
fn frontend_tools(state: &AppState, tools: &[FrontendTool]) -> Result<Vec<ToolSpec>, ApiError> {
    tools
        .iter()
        .map(|tool| {
            agent_tools::validate_name(&tool.name)
                .map_err(|error| ApiError::bad_request(format!("tools: {error}")))?;
            if state.inner.tools.contains(&tool.name) {
                return Err(ApiError::bad_request(format!(
                    "tools: `{}` has the name of a server tool",
                    tool.name
                )));
            }
            Ok(ToolSpec::new(
                tool.name.clone(),
                tool.description.clone(),
                tool.parameters
                    .clone()
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
            ))
        })
        .collect()
}

/// The run's input from the request and the session's state.
fn run_input(
    record: &mut SessionRecord,
    input: &RunAgentInput,
    tools: Vec<ToolSpec>,
    shared: Option<&str>,
) -> Result<SessionInput, ApiError> {
    let session = &mut record.session;
    session.remote_tools = tools;
    match session.status {
        SessionStatus::AwaitingToolExecution => {
            let mut results = Vec::with_capacity(session.pending_tool_calls.len());
            for call in &session.pending_tool_calls {
                let message = input
                    .messages
                    .iter()
                    .rev()
                    .find(|message| {
                        message.get("role").and_then(Value::as_str) == Some("tool")
                            && message.get("toolCallId").and_then(Value::as_str)
                                == Some(call.id.as_str())
                    })
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "the thread waits for frontend tool call `{}`: send a `tool` \
                             message with its result",
                            call.id.as_str()
                        ))
                    })?;
                let content = text_of(message.get("content"));
                results.push(match message.get("error").and_then(Value::as_str) {
                    Some(error) => ToolResult::error(call.id.clone(), call.name.clone(), error),
                    None => ToolResult::ok(call.id.clone(), call.name.clone(), content),
                });
            }
            Ok(SessionInput::ToolResults(results))
        }
        SessionStatus::AwaitingApproval => {
            let mut decisions = Vec::with_capacity(session.pending_approvals.len());
            for call in &session.pending_approvals {
                let entry = input
                    .resume
                    .iter()
                    .find(|entry| entry.interrupt_id == call.id.as_str())
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "the thread waits for approval of call `{}`: send a `resume` entry \
                             for it",
                            call.id.as_str()
                        ))
                    })?;
                let payload = entry.payload.as_ref();
                let reason = payload
                    .and_then(|payload| payload.get("reason"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let approved = match entry.status.as_str() {
                    "resolved" => payload
                        .and_then(|payload| payload.get("approved"))
                        .and_then(Value::as_bool)
                        .unwrap_or(true),
                    "cancelled" => false,
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "`resume[].status` `{other}`: use `resolved` or `cancelled`"
                        )));
                    }
                };
                decisions.push(if approved {
                    ApprovalDecision::approve(call.id.as_str())
                } else {
                    ApprovalDecision::deny(call.id.as_str(), reason)
                });
            }
            Ok(SessionInput::Approvals(decisions))
        }
        _ => {
            let last = input
                .messages
                .last()
                .filter(|message| message.get("role").and_then(Value::as_str) == Some("user"))
                .ok_or_else(|| {
                    ApiError::bad_request("the last message must be the user's next message")
                })?;
            let mut text = text_of(last.get("content"));
            let media = media_of(last.get("content"))?;
            if text.trim().is_empty() && media.is_empty() {
                return Err(ApiError::bad_request(
                    "the user message is empty: send some text",
                ));
            }
            if !input.context.is_empty() {
                text.push_str("\n\nContext:");
                for entry in &input.context {
                    text.push_str("\n- ");
                    text.push_str(&entry.description);
                    text.push_str(": ");
                    text.push_str(&entry.value);
                }
            }
            if let Some(shared) = shared {
                crate::ag_ui_state::describe(shared, &mut text);
            }
            let mut message = UserMessage::text(text);
            if text_is_blank(&message) {
                message.content.clear();
            }
            message.content.extend(media);
            crate::attachments::check(&message)?;
            Ok(SessionInput::User(message))
        }
    }
}

fn text_is_blank(message: &UserMessage) -> bool {
    message.content.iter().all(
        |block| matches!(block, agent_types::UserBlock::Text { text } if text.trim().is_empty()),
    )
}

/// The `image`, `document` and `audio` parts of AG-UI user content (`source`: `data` inline
/// base64 with its `mimeType`, `url` an https URL, `file` a provider's file id) as blocks;
/// `video` is refused (no provider adapter takes it).
fn media_of(content: Option<&Value>) -> Result<Vec<agent_types::UserBlock>, ApiError> {
    use agent_types::{AudioBlock, FileBlock, FileSource, UserBlock};
    let Some(Value::Array(parts)) = content else {
        return Ok(Vec::new());
    };
    let mut blocks = Vec::new();
    for (at, part) in parts.iter().enumerate() {
        let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
        if kind == "text" {
            continue;
        }
        if !matches!(kind, "image" | "document" | "audio") {
            return Err(ApiError::bad_request(format!(
                "content[{at}]: parts of type `{kind}` are not supported: send `text`, `image`, \
                 `document` or `audio`"
            )));
        }
        let source = part.get("source");
        let field = |name: &str| {
            source
                .and_then(|source| source.get(name))
                .and_then(Value::as_str)
        };
        let value = field("value")
            .ok_or_else(|| ApiError::bad_request(format!("content[{at}] needs `source.value`")))?;
        let mime = field("mimeType").unwrap_or("");
        let filename = part
            .get("metadata")
            .and_then(|metadata| metadata.get("filename"))
            .and_then(Value::as_str);
        let block = match (kind, field("type")) {
            ("audio", Some("data")) => UserBlock::Audio(AudioBlock {
                media_type: mime.to_owned(),
                data: value.to_owned(),
            }),
            ("audio", _) => {
                return Err(ApiError::bad_request(format!(
                    "content[{at}]: audio must be inline (`source.type` `data`)"
                )));
            }
            (_, Some("data")) => crate::attachments::inline_block(at, mime, value, filename)?,
            (_, Some("url")) => {
                // An image URL's type may go unsaid.
                let mime = match (kind, mime) {
                    ("image", "") => "image/*",
                    _ => mime,
                };
                crate::attachments::url_block(at, value, mime, filename)?
            }
            ("document", Some("file")) => UserBlock::File(FileBlock {
                media_type: mime.to_owned(),
                source: FileSource::FileId {
                    file_id: value.to_owned(),
                },
                filename: filename.map(str::to_owned),
            }),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "content[{at}]: `source.type` must be `data` or `url`{}",
                    if kind == "document" {
                        " (or `file`)"
                    } else {
                        ""
                    }
                )));
            }
        };
        blocks.push(block);
    }
    Ok(blocks)
}

/// The text of AG-UI message content: a string, or the `text` parts of a part list.
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter(|part| part.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// AG-UI events (`data: {json}` per event, camelCase), from `RUN_STARTED` to `RUN_FINISHED`
/// or `RUN_ERROR`, as `@ag-ui/core` 1.0 declares them.
pub struct AgUiEncoder {
    /// `"threadId":"…","runId":"…"`, escaped once.
    ids: String,
    /// The run id as JSON text without its closing quote: message ids are `<runId>:<n>`.
    prefix: String,
    /// Model calls so far (the step number).
    round: u64,
    /// A step is open.
    step: bool,
    /// Messages so far (text, reasoning, tool results): the `n` of their ids.
    messages: u64,
    /// The open model call's text message, for its tool calls' `parentMessageId`.
    parent: Option<u64>,
    /// The open model call's tool call ids, by index (slots reused across calls).
    calls: CallIds,
    /// The frontend's state as JSON text, sent as `STATE_SNAPSHOT` after `RUN_STARTED`.
    snapshot: Option<String>,
}

impl AgUiEncoder {
    /// Sends `snapshot` (JSON text: the frontend's state as the run sees it) as
    /// `STATE_SNAPSHOT` right after `RUN_STARTED`.
    #[must_use]
    pub fn with_state_snapshot(mut self, snapshot: String) -> Self {
        self.snapshot = Some(snapshot);
        self
    }

    /// An encoder for run `run_id` of thread `thread_id`.
    pub fn new(thread_id: &str, run_id: &str) -> Self {
        let thread = Value::from(thread_id).to_string();
        let run = Value::from(run_id).to_string();
        let prefix = run[..run.len() - 1].to_owned();
        Self {
            ids: format!("\"threadId\":{thread},\"runId\":{run}"),
            prefix,
            round: 0,
            step: false,
            messages: 0,
            parent: None,
            calls: CallIds::default(),
            snapshot: None,
        }
    }

    fn message_id(&self, n: u64, out: &mut BytesMut) {
        out.extend_from_slice(self.prefix.as_bytes());
        out.extend_from_slice(b":");
        write_u64(n, out);
        out.extend_from_slice(b"\"");
    }

    /// `data: {"type":"<kind>","messageId":"<runId>:<n>"` (the object left open).
    fn with_message(&self, kind: &str, n: u64, out: &mut BytesMut) {
        out.extend_from_slice(b"data: {\"type\":\"");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\",\"messageId\":");
        self.message_id(n, out);
    }

    fn step_name(&self, kind: &str, out: &mut BytesMut) {
        out.extend_from_slice(b"data: {\"type\":\"");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\",\"stepName\":\"round-");
        write_u64(self.round, out);
        out.extend_from_slice(b"\"}\n\n");
    }

    fn finish_step(&mut self, out: &mut BytesMut) {
        if std::mem::take(&mut self.step) {
            self.step_name("STEP_FINISHED", out);
        }
    }

    fn call_id(&self, index: u32) -> &str {
        self.calls.get(index)
    }
}

impl Encoder for AgUiEncoder {
    fn open(&mut self, out: &mut BytesMut) {
        out.extend_from_slice(b"data: {\"type\":\"RUN_STARTED\",");
        out.extend_from_slice(self.ids.as_bytes());
        out.extend_from_slice(b"}\n\n");
        if let Some(snapshot) = &self.snapshot {
            out.extend_from_slice(b"data: {\"type\":\"STATE_SNAPSHOT\",\"snapshot\":");
            out.extend_from_slice(snapshot.as_bytes());
            out.extend_from_slice(b"}\n\n");
        }
    }

    fn event(&mut self, event: &AgentEvent, out: &mut BytesMut) {
        match event {
            AgentEvent::MessageStart {
                role: Role::Assistant,
            } => {
                self.finish_step(out);
                self.round += 1;
                self.step = true;
                self.parent = None;
                self.step_name("STEP_STARTED", out);
            }
            AgentEvent::TextStart => {
                self.messages += 1;
                self.parent = Some(self.messages);
                self.with_message("TEXT_MESSAGE_START", self.messages, out);
                out.extend_from_slice(b",\"role\":\"assistant\"}\n\n");
            }
            // AG-UI refuses an empty delta.
            AgentEvent::TextDelta { delta } if !delta.is_empty() => {
                self.with_message("TEXT_MESSAGE_CONTENT", self.messages, out);
                out.extend_from_slice(b",\"delta\":");
                write_str(delta, out);
                out.extend_from_slice(b"}\n\n");
            }
            AgentEvent::TextEnd { .. } => {
                self.with_message("TEXT_MESSAGE_END", self.messages, out);
                out.extend_from_slice(b"}\n\n");
            }
            AgentEvent::ThinkingStart => {
                self.messages += 1;
                self.with_message("REASONING_START", self.messages, out);
                out.extend_from_slice(b"}\n\n");
                self.with_message("REASONING_MESSAGE_START", self.messages, out);
                out.extend_from_slice(b",\"role\":\"reasoning\"}\n\n");
            }
            AgentEvent::ThinkingDelta { delta } if !delta.is_empty() => {
                self.with_message("REASONING_MESSAGE_CONTENT", self.messages, out);
                out.extend_from_slice(b",\"delta\":");
                write_str(delta, out);
                out.extend_from_slice(b"}\n\n");
            }
            AgentEvent::ThinkingEnd { .. } => {
                self.with_message("REASONING_MESSAGE_END", self.messages, out);
                out.extend_from_slice(b"}\n\n");
                self.with_message("REASONING_END", self.messages, out);
                out.extend_from_slice(b"}\n\n");
            }
            AgentEvent::ToolCallStart { index, id, name } => {
                self.calls.remember(*index, id.as_str());
                out.extend_from_slice(b"data: {\"type\":\"TOOL_CALL_START\",\"toolCallId\":");
                write_str(id.as_str(), out);
                out.extend_from_slice(b",\"toolCallName\":");
                write_str(name, out);
                if let Some(parent) = self.parent {
                    out.extend_from_slice(b",\"parentMessageId\":");
                    self.message_id(parent, out);
                }
                out.extend_from_slice(b"}\n\n");
            }
            AgentEvent::ToolCallDelta { index, delta } if !delta.is_empty() => {
                out.extend_from_slice(b"data: {\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":");
                write_str(self.call_id(*index), out);
                out.extend_from_slice(b",\"delta\":");
                write_str(delta, out);
                out.extend_from_slice(b"}\n\n");
            }
            AgentEvent::ToolCallEnd { tool_call, .. } => {
                out.extend_from_slice(b"data: {\"type\":\"TOOL_CALL_END\",\"toolCallId\":");
                write_str(tool_call.id.as_str(), out);
                out.extend_from_slice(b"}\n\n");
            }
            AgentEvent::ToolExecutionEnd {
                call_id, output, ..
            } => {
                self.messages += 1;
                self.with_message("TOOL_CALL_RESULT", self.messages, out);
                out.extend_from_slice(b",\"toolCallId\":");
                write_str(call_id.as_str(), out);
                out.extend_from_slice(b",\"content\":");
                write_str(output, out);
                out.extend_from_slice(b",\"role\":\"tool\"}\n\n");
            }
            AgentEvent::SessionEnd { .. } => self.finish_step(out),
            _ => {}
        }
    }

    fn close(&mut self, end: &End<'_>, out: &mut BytesMut) {
        self.finish_step(out);
        let usage = &end.usage;
        let token_usage = json!([{
            "model": end.session.model,
            "inputTokens": usage.input_tokens,
            "outputTokens": usage.output_tokens,
            "totalTokens": usage.total_tokens(),
            "reasoningTokens": usage.reasoning_tokens,
            "cachedInputTokens": usage.cache_read_tokens,
        }]);
        let token_usage = drop_nulls(token_usage);
        if let Some(error) = end.error {
            out.extend_from_slice(b"data: {\"type\":\"RUN_ERROR\",\"message\":");
            write_str(&error.message, out);
            // AG-UI's `code` is a string: the kind's tag (`budget_exceeded`, `backend`…).
            let kind = serde_json::to_value(&error.kind).ok();
            let code = kind
                .as_ref()
                .and_then(|kind| kind.get("kind").or(Some(kind)))
                .and_then(Value::as_str)
                .unwrap_or("error");
            out.extend_from_slice(b",\"code\":");
            write_str(code, out);
            out.extend_from_slice(b",\"usage\":");
            write_json(&token_usage, out);
            out.extend_from_slice(b"}\n\n");
            return;
        }
        let session = end.session;
        let outcome = match session.status {
            SessionStatus::AwaitingApproval => json!({
                "type": "interrupt",
                "interrupts": session.pending_approvals.iter().map(|call| json!({
                    "id": call.id,
                    "reason": "tool_approval",
                    "message": format!("`{}` needs approval to run", call.name),
                    "toolCallId": call.id,
                })).collect::<Vec<_>>(),
            }),
            SessionStatus::AwaitingToolExecution => json!({
                "type": "success",
                "pendingToolCallIds": session.pending_tool_calls.iter().map(|call| &call.id)
                    .collect::<Vec<_>>(),
            }),
            SessionStatus::Aborted => json!({"type": "cancelled"}),
            _ => json!({"type": "success"}),
        };
        let result = json!({
            "sessionId": session.id,
            "status": session.status,
            "usage": usage,
            "costUsd": end.cost_usd,
        });
        out.extend_from_slice(b"data: {\"type\":\"RUN_FINISHED\",");
        out.extend_from_slice(self.ids.as_bytes());
        out.extend_from_slice(b",\"result\":");
        write_json(&result, out);
        out.extend_from_slice(b",\"outcome\":");
        write_json(&outcome, out);
        out.extend_from_slice(b",\"usage\":");
        write_json(&token_usage, out);
        out.extend_from_slice(b"}\n\n");
    }
}

/// AG-UI's token counts are optional integers, never `null`.
fn drop_nulls(mut value: Value) -> Value {
    if let Some(entries) = value.as_array_mut() {
        for entry in entries {
            if let Some(object) = entry.as_object_mut() {
                object.retain(|_, value| !value.is_null());
            }
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_are_the_run_id_and_a_number_escaped_once() {
        let encoder = AgUiEncoder::new("t\"1", "run\"1");
        let mut out = BytesMut::new();
        encoder.message_id(12, &mut out);
        assert_eq!(std::str::from_utf8(&out).unwrap(), r#""run\"1:12""#);
        assert_eq!(encoder.ids, r#""threadId":"t\"1","runId":"run\"1""#);
    }
}
