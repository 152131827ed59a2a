//! `POST /v1/responses` and `GET /v1/responses/{id}`: OpenAI's Responses API over the agent
//! loop, so the clients that speak it (the AI SDK's default `openai(model)` provider, the
//! OpenAI Agents SDK, `client.responses` of the official clients) work unchanged.
//!
//! # The mapping
//!
//! | request | session |
//! |---|---|
//! | `model` | a model of the allow-list (else 404 `model_not_found`) |
//! | `instructions`, `system` and `developer` messages | the system prompt, joined by blank lines |
//! | `input` | a string (one user message) or items: `message` (`input_text`, `input_image`, `input_file` parts; assistant `output_text`), `function_call`, `function_call_output`, `reasoning` (dropped: providers take only their own signed reasoning), `item_reference` (an item of a stored response of the same tenant) |
//! | `tools` (`type: function`) | the client's tools, as on chat completions: calls to them come back as `function_call` items; every server tool runs in the loop |
//! | `tool_choice`, `parallel_tool_calls`, `temperature`, `top_p`, `max_output_tokens`, `reasoning.effort` | the generation settings (a forced choice forces the first call only, as on chat completions) |
//! | `text.format` | `json_schema` / `json_object`: the run's output schema, as `response_format` on chat completions |
//! | `store` (default `true`) | the response is kept as a session of its own (`sess_<hex>` for `resp_<hex>`), which `previous_response_id` and `GET` read |
//! | `previous_response_id` | the new response starts from that response's whole history (server tool rounds included) — in a new session, so any earlier response can be continued (branches) |
//! | `metadata`, `user`, `safety_identifier`, `service_tier`, `prompt_cache_key`, `truncation: "disabled"`, `include` | accepted and echoed or ignored: they change nothing the client gets back |
//! | anything else | 400 naming the field in `param` |
//!
//! # The response
//!
//! The output is a `reasoning` item when the model reasoned in words, one `message` item with
//! the text of every model call of the run (blank-line separated; with `text.format`, the
//! validated JSON only), and one `function_call` item per client call the run stopped for.
//! Server tool calls are internal and never appear; while streaming, they show as SSE comment
//! lines, as on chat completions. `status` is `completed`, `incomplete` (the length limit or a
//! content filter) or `failed`; `usage` is over every model call of the run.
//!
//! Streaming sends the typed events with a `sequence_number` each: `response.created`,
//! `response.in_progress`, then per item `response.output_item.added`, its content
//! (`response.content_part.added`, `response.output_text.delta`…`.done`,
//! `response.content_part.done`; `response.reasoning_summary_text.delta`;
//! `response.function_call_arguments.delta`/`.done`), `response.output_item.done`, and last
//! `response.completed`, `response.incomplete` or `response.failed`. A run that fails before
//! its first event answers with the OpenAI-shaped error and its status instead, as chat
//! completions does.
//!
//! Ids: `resp_<hex>`; items `msg_<hex>_<n>`, `rs_<hex>_<n>`, `fc_<hex>_<n>_<k>`, `<n>` being
//! where the response's output begins in its session's history. A stored response's session
//! belongs to the tenant that made it: another tenant's `previous_response_id`, `GET` or
//! `item_reference` is 404, exactly as for an id that never existed.

mod input;
mod output;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use agent_loop::output::{OutputSpec, OutputStrategy};
use agent_loop::{GenerateResult, Options, Session, SessionInput, SessionStatus};
use agent_types::{
    AgentError, AgentEvent, AssistantBlock, ErrorKind, GenerationSettings, Message, Role,
    StopReason, Usage,
};
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use self::output::{Produced, Sequence, Shape};
use super::error::OpenAiError;
use super::{
    CHANNEL_DEPTH, Out, Outlet, Running, force_first_round, run_options, stream_response,
    unforce_after_first_round,
};
use crate::error::ApiError;
use crate::execute::{count, settle_metrics};
use crate::http::{admit, json_body, tagged};
use crate::path_id::PathId;
use crate::state::{AppState, Model, Tenant, now_ms};
use crate::store::{SessionOptions, SessionRecord};

/// The body of `POST /v1/responses`. The fields we implement, and the rest into
/// [`ResponsesRequest::rest`], checked by [`unsupported`].
#[derive(Debug, Deserialize)]
struct ResponsesRequest {
    model: String,
    #[serde(default)]
    input: Value,
    instructions: Option<String>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    max_output_tokens: Option<u32>,
    text: Option<Value>,
    reasoning: Option<Value>,
    store: Option<bool>,
    previous_response_id: Option<String>,
    metadata: Option<Value>,
    stream: Option<bool>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// Fields that change nothing the client gets back: attribution and billing hints.
const IGNORED: &[&str] = &[
    "user",
    "safety_identifier",
    "service_tier",
    "prompt_cache_key",
    "prompt_cache_retention",
];

/// Refuses every other field that asks for something this server does not do, naming it;
/// "off" values (`null`, `truncation: "disabled"`, `background: false`, `include: []` or
/// only `reasoning.encrypted_content`, which we have none of) are accepted.
fn unsupported(rest: &Map<String, Value>) -> Result<(), OpenAiError> {
    let mut fields: Vec<(&String, &Value)> = rest.iter().collect();
    fields.sort_unstable_by(|a, b| a.0.cmp(b.0));
    for (field, value) in fields {
        if value.is_null() || IGNORED.contains(&field.as_str()) {
            continue;
        }
        let why = match field.as_str() {
            "truncation" if value == "disabled" => continue,
            "truncation" => "only `disabled` truncation is supported",
            "background" if value == &json!(false) => continue,
            "background" => "background responses are not supported",
            "include"
                if value.as_array().is_some_and(|items| {
                    items
                        .iter()
                        .all(|item| item == "reasoning.encrypted_content")
                }) =>
            {
                continue;
            }
            "include" => "only `reasoning.encrypted_content` may be included",
            "top_logprobs" if value == &json!(0) => continue,
            "top_logprobs" => "log probabilities are not available from this server",
            "conversation" => "conversations are not supported; use `previous_response_id`",
            "prompt" => "prompt templates are not supported",
            "max_tool_calls" => "`max_tool_calls` is not supported",
            "stream_options" => "`stream_options` is not supported",
            _ => return Err(super::request::unrecognized(field)),
        };
        return Err(OpenAiError::invalid(
            field.as_str(),
            format!("{field}: {why}"),
        ));
    }
    Ok(())
}

/// `POST /v1/responses`.
pub(crate) async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let tenant = match admit(&state, &headers) {
        Ok(tenant) => tenant,
        Err(error) => return OpenAiError::from(error).into_response(),
    };
    let response = respond(&state, &tenant, &headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    tagged(response, &tenant)
}

/// A checked request, ready to run.
struct Plan {
    tenant: Arc<Tenant>,
    record: SessionRecord,
    model: Model,
    shape: Shape,
    shadowed: HashSet<String>,
    forced: bool,
    stream: bool,
    output: Option<(OutputSpec, OutputStrategy)>,
    /// When stored: the lease holder of the inserted record, saved after the run.
    holder: Option<String>,
}

async fn respond(
    state: &AppState,
    tenant: &Arc<Tenant>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, OpenAiError> {
    state.inner.spend.admit(&tenant.name).await?;
    let request: ResponsesRequest = json_body(state, headers, body).await?;
    let permit = tenant.gate.enter().ok_or_else(|| {
        ApiError::rate_limited(
            format!("tenant `{}` has too many executes running", tenant.name),
            1,
        )
    })?;
    let plan = plan(state, tenant, request).await?;
    let cancel = CancellationToken::new();
    let Some(registered) = state.inner.runs.register(cancel.clone()) else {
        if let Some(holder) = &plan.holder {
            let _ = state
                .inner
                .store
                .release(&tenant.name, plan.record.id(), holder)
                .await;
        }
        return Err(ApiError::unavailable("the server is shutting down").into());
    };
    let (sender, mut receiver) = mpsc::channel::<Out>(CHANNEL_DEPTH);
    tokio::spawn(run(
        state.clone(),
        plan,
        Running {
            sender,
            cancel,
            permit,
            _registered: registered,
        },
    ));
    match receiver.recv().await {
        Some(Out::Frame(first)) => Ok(stream_response(state, tenant, first, receiver)),
        Some(Out::Body(body)) => Ok(Json(body).into_response()),
        Some(Out::Fail(error)) => Err(error),
        None => Err(ApiError::internal("the run ended without an answer").into()),
    }
}

/// The session id a response id names: `resp_<hex>` is `sess_<hex>`.
fn session_of(response_id: &str) -> Option<String> {
    let hex = response_id.strip_prefix("resp_")?;
    (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| format!("sess_{hex}"))
}

/// 404 for a response id that this tenant has not stored.
fn no_response(id: &str, param: &str) -> OpenAiError {
    let mut error = OpenAiError::from(ApiError::not_found(format!(
        "Response with id '{id}' not found."
    )));
    error.set_param(param);
    error
}

/// A stored response's record, for its tenant only; 409 while its run goes on.
async fn stored(
    state: &AppState,
    tenant: &Tenant,
    id: &str,
    param: &str,
) -> Result<SessionRecord, OpenAiError> {
    let session = session_of(id).ok_or_else(|| no_response(id, param))?;
    let stored = state
        .inner
        .store
        .read(&tenant.name, &session)
        .await
        .map_err(ApiError::from)?
        .ok_or_else(|| no_response(id, param))?;
    if stored.lease_until_ms.is_some_and(|until| until > now_ms()) {
        return Err(ApiError::conflict(format!(
            "response {id} is still in progress; wait for it to complete"
        ))
        .into());
    }
    Ok(stored.record)
}

/// Checks the request and builds the session it describes (stored and leased when `store`).
async fn plan(
    state: &AppState,
    tenant: &Arc<Tenant>,
    request: ResponsesRequest,
) -> Result<Plan, OpenAiError> {
    let inner = &state.inner;
    let Some(model) = inner.models.get(&request.model).cloned() else {
        let mut offered: Vec<&str> = inner.models.keys().map(String::as_str).collect();
        offered.sort_unstable();
        return Err(OpenAiError::model_not_found(&request.model, &offered));
    };
    unsupported(&request.rest)?;
    let output = input::text_format(request.text.as_ref())?;
    let settings = GenerationSettings {
        max_output_tokens: request.max_output_tokens,
        temperature: request.temperature,
        top_p: request.top_p,
        stop_sequences: Vec::new(),
        reasoning: input::reasoning(request.reasoning.as_ref())?,
        parallel_tool_calls: request.parallel_tool_calls,
    };
    model.limits.check(&settings).map_err(|error| {
        let field = match &error {
            agent_backends::Error::InvalidSetting { field, .. } => *field,
            _ => "",
        };
        let param = match field {
            "reasoning.budget_tokens" => "reasoning.effort",
            other => other,
        };
        OpenAiError::invalid(param, error.to_string())
    })?;
    let client_tools = input::tools(request.tools.as_ref())?;
    let client_names: HashSet<&str> = client_tools.iter().map(|spec| spec.name.as_str()).collect();
    let (tool_choice, forced) = input::tool_choice(request.tool_choice.as_ref(), |name| {
        client_names.contains(name) || inner.tools.contains(name)
    })?;
    let shadowed: HashSet<String> = inner
        .tools
        .names()
        .filter(|name| client_names.contains(name))
        .map(str::to_owned)
        .collect();
    let server_tools: Vec<String> = inner
        .tools
        .names()
        .filter(|name| !shadowed.contains(*name))
        .map(str::to_owned)
        .collect();

    // The history continued: the previous response's whole session.
    let (history, open) = match &request.previous_response_id {
        None => (Vec::new(), Vec::new()),
        Some(id) => {
            let record = stored(state, tenant, id, "previous_response_id").await?;
            // The calls the run stopped for (their server-side neighbours already answered
            // after them), else those of a last assistant turn left unanswered.
            let open = if record.session.pending_tool_calls.is_empty() {
                match record.session.messages.last() {
                    Some(Message::Assistant(message)) => message
                        .tool_calls()
                        .map(|call| (call.id.to_string(), call.name.clone()))
                        .collect(),
                    _ => Vec::new(),
                }
            } else {
                record
                    .session
                    .pending_tool_calls
                    .iter()
                    .map(|call| (call.id.to_string(), call.name.clone()))
                    .collect()
            };
            (record.session.messages, open)
        }
    };
    let input = resolve_references(state, tenant, &request.input).await?;
    let items = input::items(&input, open)?;
    let mut system: Vec<String> = request.instructions.iter().cloned().collect();
    system.extend(items.system);

    let session_id = crate::id::session_id()?;
    let hex = session_id.trim_start_matches("sess_").to_owned();
    let mut session = Session::with_id(session_id.clone(), model.upstream.clone());
    session.system = (!system.is_empty()).then(|| system.join("\n\n"));
    session.messages = history;
    session.messages.extend(items.messages);
    session.remote_tools = client_tools;
    session.settings = settings;
    session.tool_choice = tool_choice;
    let store = request.store.unwrap_or(true);
    let shape = Shape {
        id: format!("resp_{hex}"),
        hex,
        start: session.messages.len(),
        created_at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs()),
        model: request.model.clone(),
        echo: echo(&request, store),
    };
    let now = now_ms();
    let record = SessionRecord {
        tenant: tenant.name.clone(),
        model: request.model,
        session,
        tools: server_tools,
        options: SessionOptions::default(),
        created_at_ms: now,
        updated_at_ms: now,
    };
    let holder = if store {
        crate::quota::check_session_size(state, tenant, &record)?;
        let holder = crate::execute::holder(state);
        inner
            .store
            .insert(
                &record,
                Some((&holder, crate::execute::lease_until(state))),
                crate::quota::store_quota(&tenant.quotas),
            )
            .await
            .map_err(|error| crate::quota::refused(state, error))?;
        Some(holder)
    } else {
        None
    };
    Ok(Plan {
        tenant: Arc::clone(tenant),
        record,
        model,
        shape,
        shadowed,
        forced,
        stream: request.stream.unwrap_or(false),
        output,
        holder,
    })
}

/// The request's settings as the Response object echoes them.
fn echo(request: &ResponsesRequest, store: bool) -> Map<String, Value> {
    let mut echo = Map::new();
    echo.insert("instructions".into(), json!(request.instructions));
    echo.insert("max_output_tokens".into(), json!(request.max_output_tokens));
    echo.insert(
        "metadata".into(),
        request.metadata.clone().unwrap_or_else(|| json!({})),
    );
    echo.insert(
        "parallel_tool_calls".into(),
        json!(request.parallel_tool_calls.unwrap_or(true)),
    );
    echo.insert(
        "previous_response_id".into(),
        json!(request.previous_response_id),
    );
    echo.insert(
        "reasoning".into(),
        json!({
            "effort": request.reasoning.as_ref().and_then(|reasoning| reasoning.get("effort")),
            "summary": request.reasoning.as_ref().and_then(|reasoning| reasoning.get("summary")),
        }),
    );
    echo.insert("store".into(), json!(store));
    echo.insert("temperature".into(), json!(request.temperature));
    echo.insert("top_p".into(), json!(request.top_p));
    echo.insert(
        "text".into(),
        request
            .text
            .clone()
            .filter(|text| text.get("format").is_some_and(|format| !format.is_null()))
            .unwrap_or_else(|| json!({"format": {"type": "text"}})),
    );
    echo.insert(
        "tool_choice".into(),
        request.tool_choice.clone().unwrap_or_else(|| json!("auto")),
    );
    echo.insert(
        "tools".into(),
        json!(request.tools.clone().unwrap_or_default()),
    );
    echo.insert("truncation".into(), json!("disabled"));
    echo
}

/// The most stored responses one request's `item_reference` items may name.
const MAX_REFERENCED: usize = 64;

/// Replaces each `item_reference` of `input` by the item it names: the text of a stored
/// response's message, one of its function calls, or nothing for its reasoning (which is
/// not sent back to the model anyway). 404 for an item this tenant has not stored.
async fn resolve_references(
    state: &AppState,
    tenant: &Tenant,
    input: &Value,
) -> Result<Value, OpenAiError> {
    let Value::Array(items) = input else {
        return Ok(input.clone());
    };
    if !items
        .iter()
        .any(|item| item.get("type") == Some(&json!("item_reference")))
    {
        return Ok(input.clone());
    }
    // Each stored response referenced is one read of a whole session: bounded before any.
    let named: HashSet<&str> = items
        .iter()
        .filter(|item| item.get("type") == Some(&json!("item_reference")))
        .filter_map(|item| item.get("id")?.as_str()?.split('_').nth(1))
        .collect();
    if named.len() > MAX_REFERENCED {
        return Err(OpenAiError::invalid(
            "input",
            format!(
                "input references items of {} stored responses, more than {MAX_REFERENCED}; \
                 send the items themselves or continue with previous_response_id",
                named.len()
            ),
        ));
    }
    let mut sessions: HashMap<String, SessionRecord> = HashMap::new();
    let mut resolved = Vec::with_capacity(items.len());
    for (at, item) in items.iter().enumerate() {
        if item.get("type") != Some(&json!("item_reference")) {
            resolved.push(item.clone());
            continue;
        }
        let param = format!("input[{at}].id");
        let id = item.get("id").and_then(Value::as_str).unwrap_or_default();
        let missing = || {
            let mut error = OpenAiError::from(ApiError::not_found(format!(
                "Item with id '{id}' not found."
            )));
            error.set_param(&param);
            error
        };
        let Some((kind, rest)) = id.split_once('_') else {
            return Err(missing());
        };
        let mut parts = rest.split('_');
        let (Some(hex), Some(start)) = (parts.next(), parts.next()) else {
            return Err(missing());
        };
        let index = parts.next();
        let Some(session_id) = session_of(&format!("resp_{hex}")) else {
            return Err(missing());
        };
        let Ok(start) = start.parse::<usize>() else {
            return Err(missing());
        };
        if !sessions.contains_key(&session_id) {
            let record = state
                .inner
                .store
                .get(&tenant.name, &session_id)
                .await
                .map_err(ApiError::from)?
                .ok_or_else(missing)?;
            sessions.insert(session_id.clone(), record);
        }
        let Some(record) = sessions.get(&session_id) else {
            return Err(missing());
        };
        let session = &record.session;
        let produced = produced_from(session, start).ok_or_else(missing)?;
        resolved.push(match (kind, index) {
            ("msg", None) => json!({"type": "message", "role": "assistant",
                                    "content": [{"type": "output_text", "text": produced.text}]}),
            ("rs", None) => json!({"type": "reasoning"}),
            ("fc", Some(index)) => {
                let call = index
                    .parse::<usize>()
                    .ok()
                    .and_then(|index| produced.calls.get(index))
                    .ok_or_else(missing)?;
                json!({"type": "function_call", "call_id": call.id, "name": call.name,
                       "arguments": output::arguments(call)})
            }
            _ => return Err(missing()),
        });
    }
    Ok(Value::Array(resolved))
}

/// What a stored response produced: its session's messages from `start` on (each stored
/// response has a session of its own, so its output runs to the end of the history).
fn produced_from(session: &Session, start: usize) -> Option<Produced> {
    let output = session.messages.get(start..)?;
    let mut produced = Produced::default();
    let mut texts = Vec::new();
    for message in output {
        let Message::Assistant(message) = message else {
            continue;
        };
        for block in &message.content {
            match block {
                AssistantBlock::Text { text } if !text.is_empty() => texts.push(text.as_str()),
                AssistantBlock::Refusal { text } => produced.refusal.push_str(text),
                AssistantBlock::Thinking(thinking) => {
                    produced.reasoning.push_str(&thinking.thinking)
                }
                _ => {}
            }
        }
    }
    produced.text = texts.join("\n\n");
    produced.calls = session.pending_tool_calls.clone();
    Some(produced)
}

/// `GET /v1/responses/{id}`: a stored response, rebuilt from its session.
pub(crate) async fn retrieve(
    State(state): State<AppState>,
    id: Result<PathId, ApiError>,
    headers: HeaderMap,
) -> Response {
    let tenant = match admit(&state, &headers) {
        Ok(tenant) => tenant,
        Err(error) => return OpenAiError::from(error).into_response(),
    };
    let response = match id {
        Err(error) => OpenAiError::from(error).into_response(),
        Ok(PathId(id)) => match stored(&state, &tenant, &id, "response_id").await {
            Err(error) => error.into_response(),
            Ok(record) => Json(rebuilt(&id, &record)).into_response(),
        },
    };
    tagged(response, &tenant)
}

/// A stored response's object: the output from where its input ended.
fn rebuilt(id: &str, record: &SessionRecord) -> Value {
    let session = &record.session;
    // The output is the trailing run of assistant turns and results of the server tools the
    // response could call; a user message or any other result was input.
    let start = session
        .messages
        .iter()
        .rposition(|message| match message {
            Message::User(_) => true,
            Message::Tool(result) => !record.tools.contains(&result.name),
            _ => false,
        })
        .map_or(0, |at| at + 1);
    let produced = produced_from(session, start).unwrap_or_default();
    let usage: Usage = session.messages[start..]
        .iter()
        .filter_map(|message| match message {
            Message::Assistant(message) => message.usage,
            _ => None,
        })
        .sum();
    let (status, detail) = match session.status {
        SessionStatus::Error => (
            "failed",
            Some(json!({"code": "server_error",
                                                       "message": "the run failed"})),
        ),
        // `running` without a lease: the instance running it stopped (a crash).
        SessionStatus::Aborted | SessionStatus::Running => {
            ("incomplete", Some(json!("interrupted")))
        }
        _ => ("completed", None),
    };
    let mut echo = Map::new();
    echo.insert("instructions".into(), json!(session.system));
    echo.insert("store".into(), json!(true));
    let shape = Shape {
        id: id.to_owned(),
        hex: id.trim_start_matches("resp_").to_owned(),
        start,
        created_at: record.created_at_ms / 1000,
        model: record.model.clone(),
        echo,
    };
    shape.response(status, &produced, Some(&usage), detail)
}

/// The run task: the loop, its events out as typed events (when streaming), the session
/// saved (when stored), then the answer.
async fn run(state: AppState, plan: Plan, running: Running) {
    let Plan {
        tenant,
        mut record,
        model,
        shape,
        shadowed,
        forced,
        stream,
        output,
        holder,
    } = plan;
    let Running {
        sender,
        cancel,
        permit,
        _registered,
    } = running;
    let watcher = {
        let sender = sender.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            sender.closed().await;
            cancel.cancel();
        })
    };
    let heartbeat = holder.as_ref().map(|holder| {
        crate::checkpoint::heartbeat(&state, &tenant.name, record.id(), holder, cancel.clone())
    });
    let mut sink = Sink {
        shape,
        out: Outlet::new(sender, cancel.clone()),
        stream,
        sequence: Sequence::default(),
        started: false,
        message_open: false,
        reasoning_open: false,
        new_call: false,
        structured: output.is_some(),
        produced: Produced::default(),
        refusal: None,
    };
    let (mut options, meter) = run_options(&state, &tenant, &record, &cancel, output, &shadowed);
    let labels = (tenant.name.as_str(), record.model.as_str());
    if forced {
        force_first_round(&mut options, &meter);
    }
    let mut outcome = pump(
        &mut record.session,
        &model,
        &options,
        &mut sink,
        &state,
        labels,
    )
    .await;
    if forced && unforce_after_first_round(&outcome, &mut record.session, &mut options, &meter) {
        outcome = pump(
            &mut record.session,
            &model,
            &options,
            &mut sink,
            &state,
            labels,
        )
        .await;
    }
    watcher.abort();
    if let Some(heartbeat) = heartbeat {
        heartbeat.abort();
    }
    let metrics = &state.inner.metrics;
    settle_metrics(metrics, &tenant.name, &record.session.status, &outcome);
    if let Some(meter) = &meter {
        meter.flush().await;
        sink.refusal = meter
            .hit_for(&outcome)
            .map(|hit| OpenAiError::from(hit.api_error(meter.tenant())));
    }
    // Stored before the client hears the end, so a follow-up naming this response finds it.
    if let Some(holder) = &holder {
        record.updated_at_ms = now_ms();
        if let Err(error) = state.inner.store.save(&record, holder, true).await {
            tracing::error!(session = record.id(), %error, "the response could not be stored");
            if outcome.is_ok() {
                outcome = Err(AgentError::new(
                    ErrorKind::Appender,
                    "the response could not be stored; the server log has the cause",
                ));
            }
        }
    }
    // A response whose id the client never sees (it gets an error status instead) cannot be
    // continued: keeping it would only fill the tenant's store.
    if let Some(holder) = &holder
        && sink.fails_unseen(&outcome)
    {
        let _ = state
            .inner
            .store
            .release(&tenant.name, record.id(), holder)
            .await;
        if let Err(error) = state
            .inner
            .store
            .delete(&tenant.name, record.id(), now_ms())
            .await
        {
            tracing::warn!(session = record.id(), %error, "a failed response could not be removed");
        }
    }
    drop(permit);
    let usage: Usage = record.session.messages
        [sink.shape.start.min(record.session.messages.len())..]
        .iter()
        .filter_map(|message| match message {
            Message::Assistant(message) => message.usage,
            _ => None,
        })
        .sum();
    sink.finish(&outcome, &usage, record.session.cost_usd).await;
}

/// One run of the loop over `session`, its events counted and passed to `sink`.
async fn pump(
    session: &mut Session,
    model: &Model,
    options: &Options,
    sink: &mut Sink,
    state: &AppState,
    (tenant, model_name): (&str, &str),
) -> Result<GenerateResult, AgentError> {
    let metrics = &state.inner.metrics;
    let agent = crate::execute::agent_for(model, options.clone());
    let mut events = agent.resume_stream(session, SessionInput::Continue);
    while let Some(event) = events.next().await {
        count(metrics, tenant, model_name, &event);
        if !sink.event(&event).await {
            sink.out.cancel.cancel();
        }
    }
    events.result().await
}

/// Where a run's output goes: typed events on the stream, or one body at the end. Both
/// gather the same [`Produced`], so the streamed deltas and the final object agree.
struct Sink {
    shape: Shape,
    out: Outlet,
    stream: bool,
    sequence: Sequence,
    /// `response.created` and `response.in_progress` are out.
    started: bool,
    /// The message item (with its text part) has been added.
    message_open: bool,
    /// The reasoning item has been added and not closed.
    reasoning_open: bool,
    /// A model call started and has produced no text yet.
    new_call: bool,
    /// `text.format` asked for JSON: only the validated answer is the text.
    structured: bool,
    produced: Produced,
    /// A spend cap ended the run: the error to answer with.
    refusal: Option<OpenAiError>,
}

impl Sink {
    /// Passes one loop event on; `false` once the client is gone.
    async fn event(&mut self, event: &AgentEvent) -> bool {
        match event {
            AgentEvent::MessageStart {
                role: Role::Assistant,
            } => self.new_call = true,
            AgentEvent::TextDelta { delta } if !delta.is_empty() && !self.structured => {
                let mut text = String::with_capacity(delta.len() + 2);
                if std::mem::take(&mut self.new_call) && !self.produced.text.is_empty() {
                    text.push_str("\n\n");
                }
                text.push_str(delta);
                self.text(text).await;
            }
            AgentEvent::Output { value } => self.text(value.to_string()).await,
            AgentEvent::ThinkingDelta { delta } if !delta.is_empty() && !self.message_open => {
                self.produced.reasoning.push_str(delta);
                if self.stream {
                    if !self.reasoning_open {
                        self.reasoning_open = true;
                        let item = self.shape.reasoning_item("");
                        self.emit(
                            "response.output_item.added",
                            json!({"output_index": 0, "item": item}),
                        )
                        .await;
                        let part = json!({"type": "summary_text", "text": ""});
                        let body = json!({"item_id": self.shape.reasoning_id(), "output_index": 0,
                                          "summary_index": 0, "part": part});
                        self.emit("response.reasoning_summary_part.added", body)
                            .await;
                    }
                    let body = json!({"item_id": self.shape.reasoning_id(), "output_index": 0,
                                      "summary_index": 0, "delta": delta});
                    self.emit("response.reasoning_summary_text.delta", body)
                        .await;
                }
            }
            AgentEvent::RefusalDelta { delta } => self.produced.refusal.push_str(delta),
            AgentEvent::ToolExecutionStart {
                call_id,
                tool_name,
                arguments,
            } if self.stream => {
                let arguments = arguments.to_string();
                let line = super::response::comment(&[
                    "tool_execution_start",
                    tool_name,
                    call_id.as_str(),
                    &arguments,
                ]);
                self.start().await;
                self.out.send(Out::Frame(line)).await;
            }
            AgentEvent::ToolExecutionEnd {
                call_id,
                tool_name,
                output,
                is_error,
                ..
            } if self.stream => {
                let output = Value::from(output.as_str()).to_string();
                let line = super::response::comment(&[
                    "tool_execution_end",
                    tool_name,
                    call_id.as_str(),
                    if *is_error { "error" } else { "ok" },
                    &output,
                ]);
                self.start().await;
                self.out.send(Out::Frame(line)).await;
            }
            _ => {}
        }
        !self.out.gone
    }

    /// Whether `outcome` reaches the client as an error status, before any event: then the
    /// response's id is never seen.
    fn fails_unseen(&self, outcome: &Result<GenerateResult, AgentError>) -> bool {
        let refused_output = |error: &AgentError| {
            self.refusal.is_none() && matches!(error.kind, ErrorKind::OutputRefused { .. })
        };
        !self.started && outcome.as_ref().is_err_and(|error| !refused_output(error))
    }

    /// The output index of the message item: after the reasoning item, if any.
    fn message_index(&self) -> usize {
        usize::from(!self.produced.reasoning.is_empty())
    }

    /// More answer text: added to the message item (opened first if needed).
    async fn text(&mut self, delta: String) {
        self.produced.text.push_str(&delta);
        if !self.stream {
            return;
        }
        self.open_message().await;
        let body = json!({"item_id": self.shape.message_id(), "output_index": self.message_index(),
                          "content_index": 0, "delta": delta, "logprobs": []});
        self.emit("response.output_text.delta", body).await;
    }

    /// Adds the message item and its text part, closing the reasoning item first.
    async fn open_message(&mut self) {
        if self.message_open {
            return;
        }
        self.close_reasoning().await;
        self.message_open = true;
        let index = self.message_index();
        let item = self.shape.message_item("in_progress", "", "");
        let mut item = item;
        item["content"] = json!([]);
        self.emit(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        )
        .await;
        let body = json!({"item_id": self.shape.message_id(), "output_index": index,
                          "content_index": 0, "part": output::text_part("")});
        self.emit("response.content_part.added", body).await;
    }

    async fn close_reasoning(&mut self) {
        if !std::mem::take(&mut self.reasoning_open) {
            return;
        }
        let id = self.shape.reasoning_id();
        let text = self.produced.reasoning.clone();
        let body = json!({"item_id": id, "output_index": 0, "summary_index": 0, "text": text});
        self.emit("response.reasoning_summary_text.done", body)
            .await;
        let part = json!({"type": "summary_text", "text": text});
        let body = json!({"item_id": id, "output_index": 0, "summary_index": 0, "part": part});
        self.emit("response.reasoning_summary_part.done", body)
            .await;
        let item = self.shape.reasoning_item(&text);
        self.emit(
            "response.output_item.done",
            json!({"output_index": 0, "item": item}),
        )
        .await;
    }

    /// `response.created` and `response.in_progress`, once.
    async fn start(&mut self) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        let response = self
            .shape
            .response("in_progress", &Produced::default(), None, None);
        let created = self
            .sequence
            .event("response.created", json!({"response": response}));
        self.out.send(Out::Frame(created)).await;
        let progress = self
            .sequence
            .event("response.in_progress", json!({"response": response}));
        self.out.send(Out::Frame(progress)).await;
    }

    /// One typed event, after the opening ones.
    async fn emit(&mut self, kind: &str, body: Value) {
        self.start().await;
        let frame = self.sequence.event(kind, body);
        self.out.send(Out::Frame(frame)).await;
    }

    /// The end: the object, or the stream's last events, or the error.
    async fn finish(
        mut self,
        outcome: &Result<GenerateResult, AgentError>,
        usage: &Usage,
        cost_usd: Option<f64>,
    ) {
        if self.out.gone {
            return;
        }
        let (status, detail) = match outcome {
            Ok(result) => {
                self.produced.calls.clone_from(&result.pending_tool_calls);
                match result.finish_reason {
                    _ if !result.pending_tool_calls.is_empty() => ("completed", None),
                    StopReason::Length => ("incomplete", Some(json!("max_output_tokens"))),
                    StopReason::ContentFilter => ("incomplete", Some(json!("content_filter"))),
                    _ => ("completed", None),
                }
            }
            // A refused structured answer is the refusal, as OpenAI answers it.
            Err(error)
                if self.refusal.is_none()
                    && matches!(error.kind, ErrorKind::OutputRefused { .. }) =>
            {
                if let ErrorKind::OutputRefused { refusal } = &error.kind
                    && self.produced.refusal.is_empty()
                {
                    self.produced.refusal.clone_from(refusal);
                }
                self.produced.text.clear();
                ("completed", None)
            }
            Err(error) => {
                let error = self
                    .refusal
                    .take()
                    .unwrap_or_else(|| OpenAiError::from_run(error))
                    .with_spent(*usage, cost_usd);
                if self.started {
                    let body = error.body();
                    let detail = json!({
                        "code": body["error"]["code"].as_str().unwrap_or(body["error"]["type"].as_str().unwrap_or("server_error")),
                        "message": body["error"]["message"],
                    });
                    let response =
                        self.shape
                            .response("failed", &self.produced, Some(usage), Some(detail));
                    self.emit("response.failed", json!({"response": response}))
                        .await;
                } else {
                    self.out.send(Out::Fail(error)).await;
                }
                return;
            }
        };
        if self.stream {
            self.close_reasoning().await;
            if !self.produced.refusal.is_empty() && !self.message_open {
                self.open_message().await;
            }
            if self.message_open {
                let id = self.shape.message_id();
                let index = self.message_index();
                let text = self.produced.text.clone();
                let body = json!({"item_id": id, "output_index": index, "content_index": 0,
                                  "text": text, "logprobs": []});
                self.emit("response.output_text.done", body).await;
                let body = json!({"item_id": id, "output_index": index, "content_index": 0,
                                  "part": output::text_part(&text)});
                self.emit("response.content_part.done", body).await;
                if !self.produced.refusal.is_empty() {
                    let refusal = self.produced.refusal.clone();
                    let part = json!({"type": "refusal", "refusal": refusal});
                    let body = json!({"item_id": id, "output_index": index, "content_index": 1,
                                      "part": {"type": "refusal", "refusal": ""}});
                    self.emit("response.content_part.added", body).await;
                    let body = json!({"item_id": id, "output_index": index, "content_index": 1,
                                      "refusal": refusal});
                    self.emit("response.refusal.done", body).await;
                    let body = json!({"item_id": id, "output_index": index, "content_index": 1,
                                      "part": part});
                    self.emit("response.content_part.done", body).await;
                }
                let item = self
                    .shape
                    .message_item("completed", &text, &self.produced.refusal);
                self.emit(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                )
                .await;
            }
            let first = self.message_index() + usize::from(self.message_open);
            let calls = std::mem::take(&mut self.produced.calls);
            for (index, call) in calls.iter().enumerate() {
                let output_index = first + index;
                let id = self.shape.call_id(index);
                let mut item = self.shape.call_item(index, call, "in_progress");
                item["arguments"] = json!("");
                self.emit(
                    "response.output_item.added",
                    json!({"output_index": output_index, "item": item}),
                )
                .await;
                let arguments = output::arguments(call);
                let body = json!({"item_id": id, "output_index": output_index, "delta": arguments});
                self.emit("response.function_call_arguments.delta", body)
                    .await;
                let body = json!({"item_id": id, "output_index": output_index,
                                  "name": call.name, "arguments": arguments});
                self.emit("response.function_call_arguments.done", body)
                    .await;
                let item = self.shape.call_item(index, call, "completed");
                self.emit(
                    "response.output_item.done",
                    json!({"output_index": output_index, "item": item}),
                )
                .await;
            }
            self.produced.calls = calls;
            let response = self
                .shape
                .response(status, &self.produced, Some(usage), detail);
            let kind = if status == "incomplete" {
                "response.incomplete"
            } else {
                "response.completed"
            };
            self.emit(kind, json!({"response": response})).await;
        } else {
            let response = self
                .shape
                .response(status, &self.produced, Some(usage), detail);
            self.out.send(Out::Body(response)).await;
        }
    }
}
