//! `POST /v1/chat/completions`: OpenAI's Chat Completions API over the agent loop, so the
//! official clients (and anything else that speaks it) work unchanged.
//!
//! # The mapping
//!
//! Each request is one stateless run: the body becomes a throwaway [`Session`] that is never
//! stored, run with `SessionInput::Continue` in `auto` mode, and dropped.
//!
//! | request | session |
//! |---|---|
//! | `model` | a model of the allow-list (else 404 `model_not_found`) |
//! | `system` and `developer` messages | the system prompt, joined by blank lines, wherever they stand |
//! | `user` messages | user turns; `text`, `image_url` (`data:` URLs inline), `file` (`file_data` or `file_id`) and `input_audio` parts, other parts 400 |
//! | `assistant` messages | assistant turns: text, refusal, `tool_calls` (arguments parsed from their JSON text) |
//! | `tool` messages | tool results (text, or `text`, `image_url` and `file` parts); each must answer a call of the assistant message before it |
//! | `response_format` | `json_schema`: the run's output schema (strategy `Auto`, bounded before compiling); `json_object`: strategy `Prompted` with an object schema; `text`: nothing |
//! | `tools` (`type: function`) | the client's tools: remote tools of the session; `strict: true` is passed on (OpenAI upstreams get `strict` and the schema in strict form, other providers ignore it) |
//! | `tool_choice` | the tool choice; see below for `required` and named functions |
//! | `temperature`, `top_p`, `max_completion_tokens` (or `max_tokens`), `stop`, `parallel_tool_calls`, `reasoning_effort` | the generation settings |
//! | `n` | only 1 (400 otherwise) |
//! | `user`, `safety_identifier`, `metadata`, `service_tier`, `prompt_cache_key` | accepted: attribution and billing hints that change nothing the client gets back |
//! | `logprobs`, `top_logprobs`, `functions`, `function_call`, `audio`, `modalities` (but `["text"]`), `prediction`, penalties, `logit_bias`, `store: true`, `web_search_options`, `verbosity`, `seed`, unknown fields | 400 naming the field in `param` (their "off" values are accepted) |
//! | unknown fields inside a tool (`tools[].function`) or `stream_options` | 400 naming the field |
//! | other fields inside messages (a message's `name`, library fields such as `parsed_arguments` on an assistant message sent back as received) | accepted and not used: clients echo assistant messages with their own fields |
//!
//! Empty input is refused: an empty `messages` (or one with only system messages) and a
//! user message with no text (`""` or whitespace only) are 400s, before any model call.
//! Completion ids are `chatcmpl-` and 128 random bits.
//!
//! Every server-side tool is offered next to the client's and run by the loop, under the
//! same caps as a session's run (iterations, tokens, cost, result size, timeouts) and with
//! the tenant as the caller. A client tool with the name of a server tool hides the server
//! tool for that request: the client asked for a tool it runs, so calls to it come back.
//!
//! When the model asks for a client tool, the run suspends and the response is what OpenAI
//! would send: the assistant message with `tool_calls` (arguments as JSON text) and
//! `finish_reason: "tool_calls"`. Server tool calls, including those the model made in the
//! same turn, never appear: they are internal. The message holds only the last model turn's
//! text and the pending client calls.
//!
//! The client then sends the history back with its `tool` messages, and the loop goes on
//! from there. That history holds only what the client was shown, so the server-side rounds
//! (their calls and results) are not in it: the model sees the client's calls and results,
//! not how the server got there. That is the price of being stateless, and it keeps the
//! history valid for any provider; a client that needs the whole record uses
//! `/v1/sessions`.
//!
//! `tool_choice: "required"` or a named function forces the run's *first* model call only.
//! The loop applies a tool choice to every call, which after a round of server tools would
//! force another call, and another; so when the first round calls only server tools, the run
//! goes on with `auto` for the rest (one iteration of the budget already spent).
//!
//! # Responses
//!
//! Without `stream`: one `chat.completion` whose `usage` sums every model call of the run
//! (OpenAI's `prompt_tokens` and ours both include cached tokens, `completion_tokens`
//! includes reasoning, so the counts carry over as they are).
//!
//! With `stream: true`: `text/event-stream` of `data: {chat.completion.chunk}` lines. The
//! first chunk is `{role: "assistant", content: ""}`; then the text of *every* model call as
//! it is generated, including the words the model says before a server tool round ("Let me
//! look that up"), with a blank line between the text of two calls. (So a streamed answer
//! can be longer than the non-streaming one, which holds the last turn's text only: holding
//! text back until a turn turns out to be the last would leave nothing to stream.) Then the
//! client's tool calls, each whole in one `delta.tool_calls` entry; a chunk with
//! `finish_reason`; with `stream_options.include_usage` a chunk with `choices: []` and the
//! usage; and `data: [DONE]`. Server tool activity shows as SSE comment lines, which
//! standard clients skip:
//!
//! ```text
//! : tool_execution_start clock toolu_01… {}
//! : tool_execution_end clock toolu_01… ok "{\"utc\":…}"
//! ```
//!
//! With `response_format`, the message content is the validated JSON (streamed as one delta
//! at the end: the model's own text may be a failed try); a refusal is the message's
//! `refusal` with `content: null`; an answer still invalid after the retries is a 422.
//!
//! # Errors
//!
//! Errors are OpenAI-shaped (`{"error": {"message", "type", "param", "code", "status"}}`),
//! with the session endpoints' statuses: 401, 429 (rate, or too many runs: `Retry-After`),
//! 413, 400, 404 for an unknown model, 503 while draining; but a run budget that ran out is
//! 402 (see [`error`] for why not 429). A run that fails before the
//! first chunk answers with a JSON error and its status, as OpenAI does for a stream that
//! never started; after that, the stream ends with one `data: {"error": {...}}` chunk and no
//! `[DONE]`. Budget trips carry `x-should-retry: false`. An error that ends a run also
//! carries, inside `error`, what the request spent: `usage` (a completion's shape) and
//! `cost_usd` (when priced); OpenAI's clients ignore the fields they do not know.
//!
//! A client that hangs up, streaming or not, cancels the run (model call and tools). Once a
//! run is cancelled (the client left, or the drain deadline passed), a chunk its client makes
//! no room for within 2 s is abandoned, as on the session endpoints: a client that stopped
//! reading cannot hold a shutdown.

pub(crate) mod error;
pub(crate) mod models;
mod request;
mod response;
pub(crate) mod responses;

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use agent_loop::output::{OutputSpec, OutputStrategy};
use agent_loop::{GenerateResult, Hooks, Options, Session, SessionInput};
use agent_types::{AgentError, AgentEvent, ErrorKind, Role, ToolChoice, Usage};
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use self::error::OpenAiError;
use self::request::ChatRequest;
use self::response::Completion;
use crate::error::ApiError;
use crate::execute::{OpenStream, count, deliver, event_stream, options, settle_metrics};
use crate::http::{admit, json_body, tagged};
use crate::limits::Permit;
use crate::spend::Meter;
use crate::state::{AppState, Model, RunGuard, Tenant, now_ms};
use crate::store::{SessionOptions, SessionRecord};

/// Frames waiting for a slow client before the loop is held back.
const CHANNEL_DEPTH: usize = 64;

/// The reason our gate gives when it stops a forced run after its first round.
const FIRST_ROUND_DONE: &str = "the forced tool choice applies to the first model call only";

/// `POST /v1/chat/completions`.
pub(crate) async fn chat_completions(
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

/// What the run task hands the handler.
enum Out {
    /// A stream frame (the first one commits the response to a stream).
    Frame(Bytes),
    /// The whole non-streaming body.
    Body(serde_json::Value),
    /// An error before anything was sent.
    Fail(OpenAiError),
}

/// A checked request, ready to run.
struct Plan {
    tenant: Arc<Tenant>,
    /// A transient record (never stored): it carries the session and lets the session
    /// endpoints' option builder apply the same caps.
    record: SessionRecord,
    model: Model,
    completion: Completion,
    /// Server tools hidden by a client tool of the same name.
    shadowed: HashSet<String>,
    /// `tool_choice` forces a call: only the first model call gets it.
    forced: bool,
    /// `Some(include_usage)` when streaming.
    stream: Option<bool>,
    /// `response_format` asked for JSON: the spec and how to ask for it.
    output: Option<(
        agent_loop::output::OutputSpec,
        agent_loop::output::OutputStrategy,
    )>,
}

async fn respond(
    state: &AppState,
    tenant: &Arc<Tenant>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, OpenAiError> {
    state.inner.spend.admit(&tenant.name).await?;
    let request: ChatRequest = json_body(state, headers, body).await?;
    let plan = plan(state, tenant, request)?;
    let permit = tenant.gate.enter().ok_or_else(|| {
        ApiError::rate_limited(
            format!("tenant `{}` has too many executes running", tenant.name),
            1,
        )
    })?;
    let cancel = CancellationToken::new();
    let registered = state
        .inner
        .runs
        .register(cancel.clone())
        .ok_or_else(|| ApiError::unavailable("the server is shutting down"))?;
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

/// Checks the request and builds the session it describes.
fn plan(state: &AppState, tenant: &Arc<Tenant>, request: ChatRequest) -> Result<Plan, OpenAiError> {
    let inner = &state.inner;
    let Some(model) = inner.models.get(&request.model).cloned() else {
        let mut offered: Vec<&str> = inner.models.keys().map(String::as_str).collect();
        offered.sort_unstable();
        return Err(OpenAiError::model_not_found(&request.model, &offered));
    };
    if let Some(n) = request.n
        && n != 1
    {
        return Err(OpenAiError::invalid(
            "n",
            format!("n = {n} is not supported: this server returns one choice (n = 1)"),
        ));
    }
    request::unsupported(&request.rest)?;
    let output = request::response_format(request.response_format.as_ref())?;
    let settings = request::settings(&request)?;
    model
        .limits
        .check(&settings)
        .map_err(|error| settings_error(&request, &error))?;
    let client_tools = request::tools(request.tools)?;
    let client_names: HashSet<&str> = client_tools.iter().map(|spec| spec.name.as_str()).collect();
    let (tool_choice, forced) = request::tool_choice(request.tool_choice.as_ref(), |name| {
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
    let conversation = request::conversation(request.messages)?;

    let mut session = Session::with_id(crate::id::session_id()?, model.upstream.clone());
    session.system = conversation.system;
    session.messages = conversation.messages;
    session.remote_tools = client_tools;
    session.settings = settings;
    session.tool_choice = tool_choice;
    let completion = Completion {
        id: crate::id::completion_id()?,
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs()),
        model: request.model.clone(),
    };
    let now = now_ms();
    Ok(Plan {
        tenant: Arc::clone(tenant),
        record: SessionRecord {
            tenant: tenant.name.clone(),
            model: request.model,
            session,
            tools: server_tools,
            options: SessionOptions::default(),
            created_at_ms: now,
            updated_at_ms: now,
        },
        model,
        completion,
        shadowed,
        forced,
        output,
        stream: request.stream.unwrap_or(false).then(|| {
            request
                .stream_options
                .and_then(|options| options.include_usage)
                .unwrap_or(false)
        }),
    })
}

/// The fallback for a path no route serves: an OpenAI-shaped 404, not an empty body.
pub(crate) async fn unknown_route(request: axum::extract::Request) -> Response {
    OpenAiError::unknown_route(request.method().as_str(), request.uri().path()).into_response()
}

/// The fallback for a known path with a method it does not serve: an OpenAI-shaped 405.
pub(crate) async fn wrong_method(request: axum::extract::Request) -> Response {
    OpenAiError::wrong_method(request.method().as_str(), request.uri().path()).into_response()
}

/// A setting out of the provider's range, as a 400 naming the request's own field.
fn settings_error(request: &ChatRequest, error: &agent_backends::Error) -> OpenAiError {
    let field = match error {
        agent_backends::Error::InvalidSetting { field, .. } => *field,
        _ => "",
    };
    let param = match field {
        "max_output_tokens" if request.max_completion_tokens.is_some() => "max_completion_tokens",
        "max_output_tokens" => "max_tokens",
        "stop_sequences" => "stop",
        "reasoning.budget_tokens" => "reasoning_effort",
        other => other,
    };
    let message = error
        .to_string()
        .replacen(&format!("`{field}`"), &format!("`{param}`"), 1);
    OpenAiError::invalid(param, message)
}

/// What a running request holds until its run ends.
struct Running {
    sender: mpsc::Sender<Out>,
    cancel: CancellationToken,
    permit: Permit,
    _registered: RunGuard,
}

/// The run task: the loop, its events out as chunks (when streaming), then the answer.
async fn run(state: AppState, plan: Plan, running: Running) {
    let Plan {
        tenant,
        mut record,
        model,
        completion,
        shadowed,
        forced,
        stream,
        output,
    } = plan;
    let Running {
        sender,
        cancel,
        permit,
        _registered,
    } = running;
    // A client that hangs up drops the receiver: stop the loop (model call and tools).
    let watcher = {
        let sender = sender.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            sender.closed().await;
            cancel.cancel();
        })
    };
    let mut sink = Sink {
        completion,
        out: Outlet::new(sender, cancel.clone()),
        stream,
        started: false,
        text_sent: false,
        new_call: false,
        refusal: None,
        structured: output.is_some(),
    };
    let (mut options, meter) = run_options(&state, &tenant, &record, &cancel, output, &shadowed);
    let metrics = &state.inner.metrics;
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
        &cancel,
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
            &cancel,
        )
        .await;
    }
    watcher.abort();
    settle_metrics(metrics, &tenant.name, &record.session.status, &outcome);
    if let Some(meter) = &meter {
        meter.flush().await;
        sink.refusal = meter
            .hit_for(&outcome)
            .map(|hit| OpenAiError::from(hit.api_error(meter.tenant())));
    }
    drop(permit);
    // The session is this request's alone: its totals are what the request spent, over
    // both passes of a forced tool choice.
    sink.finish(&outcome, &record.session.usage, record.session.cost_usd)
        .await;
}

/// The options of one run of either OpenAI-compatible endpoint: the tenant's approval rule
/// and spend cap, the requested output format, and no server tool a request's own function
/// shadows. The meter is returned too, for the gate of a forced first round and the end.
fn run_options(
    state: &AppState,
    tenant: &Tenant,
    record: &SessionRecord,
    cancel: &CancellationToken,
    output: Option<(OutputSpec, OutputStrategy)>,
    shadowed: &HashSet<String>,
) -> (Options, Option<Meter>) {
    let mut options = options(state, tenant, record, cancel.clone());
    crate::approval::install(
        &mut options,
        &tenant.require_approval,
        crate::approval::Resumable::No,
    );
    options.guardrails = crate::guardrails::without_approval(&options.guardrails);
    if let Some((spec, strategy)) = output {
        options.output = Some(spec);
        options.output_strategy = strategy;
    }
    let meter = state.inner.spend.meter(&tenant.name);
    if let Some(meter) = &meter {
        meter.install(&mut options);
    }
    if !shadowed.is_empty() {
        options.tools = Arc::new(
            state
                .inner
                .tools
                .filter(|tool| !shadowed.contains(tool.name())),
        );
    }
    (options, meter)
}

/// A forced tool choice binds the first model call only: a gate (after the spend check)
/// stops the run before the second, with [`FIRST_ROUND_DONE`].
fn force_first_round(options: &mut Options, meter: &Option<Meter>) {
    let meter = meter.clone();
    options.hooks = Hooks::new().before_model_call(move |gate| {
        let meter = meter.clone();
        async move {
            if let Some(meter) = &meter {
                meter.check(&gate).await?;
            }
            if gate.iteration == 0 {
                Ok(())
            } else {
                Err(FIRST_ROUND_DONE.to_owned())
            }
        }
    });
}

/// Whether `outcome` is the [`force_first_round`] gate's stop; if so, `session` and `options`
/// are set to go on unforced for the iterations left.
fn unforce_after_first_round(
    outcome: &Result<GenerateResult, AgentError>,
    session: &mut Session,
    options: &mut Options,
    meter: &Option<Meter>,
) -> bool {
    let done = matches!(outcome, Err(error)
        if matches!(error.kind, ErrorKind::Refused) && error.message == FIRST_ROUND_DONE);
    if done {
        // The first round ran server tools only: go on unforced.
        session.tool_choice = ToolChoice::Auto;
        options.hooks = Hooks::new();
        if let Some(meter) = meter {
            meter.install(options);
        }
        options.max_tool_iterations = options.max_tool_iterations.saturating_sub(1);
    }
    done
}

/// One run of the loop over `session`, its events counted and passed to `sink`.
async fn pump(
    session: &mut Session,
    model: &Model,
    options: &Options,
    sink: &mut Sink,
    state: &AppState,
    (tenant, model_name): (&str, &str),
    cancel: &CancellationToken,
) -> Result<GenerateResult, AgentError> {
    let metrics = &state.inner.metrics;
    let agent = crate::execute::agent_for(model, options.clone());
    let mut events = agent.resume_stream(session, SessionInput::Continue);
    while let Some(event) = events.next().await {
        count(metrics, tenant, model_name, &event);
        if !sink.event(&event).await {
            cancel.cancel();
        }
    }
    events.result().await
}

/// The client's end of a chat-completions or Responses run: items go out until the client is
/// gone, which is remembered so nothing more is offered.
struct Outlet {
    sender: mpsc::Sender<Out>,
    /// The run's token: once it fired (drain deadline, client gone), a send the client
    /// makes no room for is abandoned, so a stalled reader cannot hold the shutdown.
    cancel: CancellationToken,
    /// The client hung up, or stopped reading after the run was cancelled.
    gone: bool,
}

impl Outlet {
    fn new(sender: mpsc::Sender<Out>, cancel: CancellationToken) -> Self {
        Self {
            sender,
            cancel,
            gone: false,
        }
    }

    async fn send(&mut self, out: Out) {
        if !self.gone && !deliver(&self.sender, out, &self.cancel).await {
            self.gone = true;
        }
    }
}

/// Where a run's output goes: chunks on the stream, or one body at the end.
struct Sink {
    completion: Completion,
    out: Outlet,
    /// `Some(include_usage)` when streaming.
    stream: Option<bool>,
    /// The first chunk (`role: assistant`) is out.
    started: bool,
    /// Some text has been streamed.
    text_sent: bool,
    /// A model call started and has streamed no text yet.
    new_call: bool,
    /// A spend cap ended the run: the error to answer with.
    refusal: Option<OpenAiError>,
    /// `response_format` asked for JSON: the model's text (which may be a failed try, or
    /// the words around a final-answer tool call) is held back, and the validated answer
    /// is the content.
    structured: bool,
}

impl Sink {
    /// Passes one loop event on; `false` once the client is gone.
    async fn event(&mut self, event: &AgentEvent) -> bool {
        let Some(include_usage) = self.stream else {
            return true;
        };
        match event {
            AgentEvent::MessageStart {
                role: Role::Assistant,
            } => self.new_call = true,
            AgentEvent::TextDelta { delta } if !delta.is_empty() && !self.structured => {
                let mut content = String::with_capacity(delta.len() + 2);
                if std::mem::take(&mut self.new_call) && self.text_sent {
                    content.push_str("\n\n");
                }
                content.push_str(delta);
                self.text_sent = true;
                let chunk = self
                    .completion
                    .chunk(json!({"content": content}), None, include_usage);
                self.send_started(chunk).await;
            }
            AgentEvent::Output { value } => {
                let chunk = self.completion.chunk(
                    json!({"content": value.to_string()}),
                    None,
                    include_usage,
                );
                self.send_started(chunk).await;
            }
            AgentEvent::RefusalDelta { delta } => {
                let chunk = self
                    .completion
                    .chunk(json!({"refusal": delta}), None, include_usage);
                self.send_started(chunk).await;
            }
            AgentEvent::ToolExecutionStart {
                call_id,
                tool_name,
                arguments,
            } => {
                let arguments = arguments.to_string();
                let line = response::comment(&[
                    "tool_execution_start",
                    tool_name,
                    call_id.as_str(),
                    &arguments,
                ]);
                self.send_started(line).await;
            }
            AgentEvent::ToolExecutionEnd {
                call_id,
                tool_name,
                output,
                is_error,
                ..
            } => {
                let output = serde_json::Value::from(output.as_str()).to_string();
                let line = response::comment(&[
                    "tool_execution_end",
                    tool_name,
                    call_id.as_str(),
                    if *is_error { "error" } else { "ok" },
                    &output,
                ]);
                self.send_started(line).await;
            }
            _ => {}
        }
        !self.out.gone
    }

    /// Sends `frame`, after the opening chunk if it is not out yet.
    async fn send_started(&mut self, frame: Bytes) {
        if !self.started {
            self.started = true;
            let include_usage = self.stream.unwrap_or(false);
            let first = self.completion.chunk(
                json!({"role": "assistant", "content": ""}),
                None,
                include_usage,
            );
            self.out.send(Out::Frame(first)).await;
        }
        self.out.send(Out::Frame(frame)).await;
    }

    /// The end: the body, or the stream's last chunks, or the error.
    async fn finish(
        mut self,
        outcome: &Result<GenerateResult, AgentError>,
        usage: &Usage,
        cost_usd: Option<f64>,
    ) {
        if self.out.gone {
            return;
        }
        let result = match outcome {
            Ok(result) => result,
            // OpenAI answers a refused structured request with the refusal, not an error.
            Err(error)
                if self.refusal.is_none()
                    && matches!(error.kind, ErrorKind::OutputRefused { .. }) =>
            {
                let ErrorKind::OutputRefused { refusal } = &error.kind else {
                    return;
                };
                let Some(include_usage) = self.stream else {
                    let body = self.completion.refusal_body(refusal, usage);
                    self.out.send(Out::Body(body)).await;
                    return;
                };
                if !self.started {
                    // The refusal did not stream as it was generated (a final-answer tool).
                    let chunk =
                        self.completion
                            .chunk(json!({"refusal": refusal}), None, include_usage);
                    self.send_started(chunk).await;
                }
                self.send_end("stop", include_usage, usage).await;
                return;
            }
            Err(error) => {
                // What was spent, on every error path: a budget trip most of all.
                let error = self
                    .refusal
                    .take()
                    .unwrap_or_else(|| OpenAiError::from_run(error))
                    .with_spent(*usage, cost_usd);
                if self.started {
                    self.out
                        .send(Out::Frame(response::data(&error.body())))
                        .await;
                } else {
                    self.out.send(Out::Fail(error)).await;
                }
                return;
            }
        };
        let Some(include_usage) = self.stream else {
            let body = self.completion.body(result, usage);
            self.out.send(Out::Body(body)).await;
            return;
        };
        for (index, call) in result.pending_tool_calls.iter().enumerate() {
            let chunk =
                self.completion
                    .chunk(response::tool_call_delta(index, call), None, include_usage);
            self.send_started(chunk).await;
        }
        self.send_end(response::finish_reason(result), include_usage, usage)
            .await;
    }

    /// The stream's last chunks: `finish_reason`, the usage when asked for, `[DONE]`.
    async fn send_end(&mut self, finish: &str, include_usage: bool, usage: &Usage) {
        let last = self
            .completion
            .chunk(json!({}), Some(finish), include_usage);
        self.send_started(last).await;
        if include_usage {
            let chunk = self.completion.usage_chunk(usage);
            self.out.send(Out::Frame(chunk)).await;
        }
        self.out.send(Out::Frame(response::done())).await;
    }
}

/// The streaming response: `first`, then every frame the run sends.
fn stream_response(
    state: &AppState,
    tenant: &Tenant,
    first: Bytes,
    receiver: mpsc::Receiver<Out>,
) -> Response {
    let open = OpenStream::open(state, &tenant.name);
    let rest = futures_util::stream::unfold((receiver, open), |(mut receiver, open)| async move {
        loop {
            match receiver.recv().await? {
                Out::Frame(frame) => return Some((Ok::<_, Infallible>(frame), (receiver, open))),
                // Bodies and early failures only come first; nothing else follows a frame.
                Out::Body(_) | Out::Fail(_) => {}
            }
        }
    });
    let body = futures_util::stream::once(async move { Ok::<_, Infallible>(first) }).chain(rest);
    event_stream(Body::from_stream(body))
}
