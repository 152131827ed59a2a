//! `POST /v1/sessions/{id}/execute`, in one place and in order:
//!
//! 1. **admit** ([`handler`]): the tenant's spend cap, the body, the input, a run permit;
//! 2. **lease** ([`take`]): the session created already leased to this execute (a `context`),
//!    or the lease of the existing one taken;
//! 3. **prepare** ([`prepare`]): a crashed run's checkpoint recovered, the run's input
//!    taken, then every refusal (nothing to continue, expired calls, size and quota, input,
//!    model), each giving the lease back;
//! 4. **run** ([`start`], [`run`]): the loop on its own task, its events out as SSE through
//!    a [`Sink`], each completed turn checkpointed under the lease (kept alive by a
//!    heartbeat), a tool's result shown only once the store holds it;
//! 5. **save and release**: the final save writes the outcome and releases the lease, before
//!    the last frames (`execute_complete`) are sent.
//!
//! This is the one pipeline that runs a session for a client: the web-frontend endpoints
//! (frontend.rs: `POST /v1/ui/chat`, `POST /v1/ag-ui`) lease their client-named session,
//! then go through [`prepare`] with their own input mapping and [`start`] with their
//! protocol's encoder ([`Encoded`]); execute writes its native events ([`Native`]).
//!
//! The loop runs on a spawned task, not inside the response body: a client that hangs up
//! drops the body, which closes the event channel, which cancels the loop's token, and the
//! task still ends the run properly (dangling calls closed, status `aborted`) and saves the
//! session. The session is written before `execute_complete` is sent, so a client that
//! reads that event and sends its next request to another instance finds the session there.

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use agent_loop::{Agent, GenerateResult, Options, SessionInput, SessionStatus, ToolParallelism};
use agent_types::{AgentError, AgentEvent, Message, ToolCall, ToolResult, Usage, UserMessage};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::encode::{Encoder, End};
use crate::error::{ApiError, redact_agent_error};
use crate::http::json_body;
use crate::limits::Permit;
use crate::path_id::PathId;
use crate::quota;
use crate::sessions::{NewSession, respond};
use crate::state::{AppState, Model, Tenant, now_ms};
use crate::store::{Lease, SessionRecord, StoreError};

/// Events waiting for a slow client before the loop is held back.
const CHANNEL_DEPTH: usize = 64;

/// The last event of every execute stream.
#[derive(Debug, Serialize)]
pub struct ExecuteComplete<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    session_id: &'a str,
    status: SessionStatus,
    #[serde(skip_serializing_if = "<[ToolCall]>::is_empty")]
    pending_tool_calls: &'a [ToolCall],
    /// The calls waiting for approval (status `awaiting_approval`).
    #[serde(skip_serializing_if = "<[ToolCall]>::is_empty")]
    pending_approvals: &'a [ToolCall],
    usage: Usage,
    #[serde(skip_serializing_if = "Option::is_none")]
    cost_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a AgentError>,
    /// The tenant's spend cap that refused a model call, and when it resets.
    #[serde(skip_serializing_if = "Option::is_none")]
    spend_cap: Option<crate::spend::CapHit>,
    /// The validated answer when the session has an output schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<&'a serde_json::Value>,
}

/// What [`start`] needs; the lease is already held.
pub(crate) struct Execute {
    pub(crate) tenant: Arc<Tenant>,
    pub(crate) record: SessionRecord,
    pub(crate) input: SessionInput,
    pub(crate) model: Model,
    pub(crate) holder: String,
    pub(crate) permit: Permit,
}

/// The body of `POST /v1/sessions/{id}/execute`: a user message or results, and optionally
/// the context to create the session with.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecuteBody {
    #[serde(default)]
    message: Option<UserInput>,
    #[serde(default)]
    tool_results: Option<Vec<ToolResult>>,
    /// Decisions for the calls waiting for approval (docs/approval.md).
    #[serde(default)]
    approvals: Option<Vec<agent_loop::ApprovalDecision>>,
    #[serde(default)]
    context: Option<NewSession>,
}

/// A user message as text or as a message object.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum UserInput {
    Text(String),
    Message(UserMessage),
}

impl ExecuteBody {
    /// What the run is given: a user turn, results, decisions, or nothing (`{}`: continue).
    fn input(&mut self) -> Result<SessionInput, ApiError> {
        let input = match (
            self.message.take(),
            self.tool_results.take(),
            self.approvals.take(),
        ) {
            (Some(UserInput::Text(text)), None, None) => {
                SessionInput::User(UserMessage::text(text))
            }
            (Some(UserInput::Message(message)), None, None) => SessionInput::User(message),
            (None, Some(results), None) => SessionInput::ToolResults(results),
            (None, None, Some(decisions)) => SessionInput::Approvals(decisions),
            // `{}`: go on from the history (a run cut off by a crash).
            (None, None, None) => SessionInput::Continue,
            _ => {
                return Err(ApiError::bad_request(
                    "send exactly one of `message` (a user turn), `tool_results` and `approvals` \
                     (or none, to continue an interrupted run)",
                ));
            }
        };
        // An empty turn would cost a model call to answer nothing.
        if let SessionInput::User(message) = &input
            && message.content.iter().all(|block| {
                matches!(block, agent_types::UserBlock::Text { text } if text.trim().is_empty())
            })
        {
            return Err(ApiError::bad_request(
                "`message` is empty: send some text (or an image)",
            ));
        }
        Ok(input)
    }
}

/// `POST /v1/sessions/{id}/execute`: the pipeline of the module's doc, step by step.
pub(crate) async fn handler(
    State(state): State<AppState>,
    headers: HeaderMap,
    PathId(id): PathId,
    body: Body,
) -> Response {
    let (state, headers) = (&state, &headers);
    respond(state, headers, |tenant| async move {
        // 1. Admit.
        state.inner.spend.admit(&tenant.name).await?;
        let mut body: ExecuteBody = json_body(state, headers, body).await?;
        let input = body.input()?;
        let permit = permit(&tenant)?;
        // 2. Lease.
        let holder = holder(state);
        let leased = Leased {
            state,
            tenant: &tenant,
            id: &id,
            holder: &holder,
        };
        let mut record = take(&leased, body.context).await?;
        // 3. Prepare.
        #[cfg(feature = "temporal")]
        if let Some(durable) = &state.inner.durable {
            return crate::durability::execute(
                &leased,
                durable,
                Arc::clone(&tenant),
                record,
                input,
                permit,
            )
            .await;
        }
        let (input, model) = prepare(&leased, &mut record, true, |_| Ok(input)).await?;
        // 4 and 5: run, save, release.
        Ok(start(
            state,
            Execute {
                tenant: Arc::clone(&tenant),
                record,
                input,
                model,
                holder,
                permit,
            },
            Native,
        ))
    })
    .await
}

/// The session leased to this execute: created from `context` already leased (one write,
/// and the record is in hand), or the existing one's lease taken. An existing session
/// ignores the context.
async fn take(leased: &Leased<'_>, context: Option<NewSession>) -> Result<SessionRecord, ApiError> {
    let Leased {
        state,
        tenant,
        id,
        holder,
    } = *leased;
    if let Some(context) = context {
        let record = crate::sessions::record(state, tenant, context, Some(id))?;
        quota::check_session_size(state, tenant, &record)?;
        match state
            .inner
            .store
            .insert(
                &record,
                Some((holder, lease_until(state))),
                quota::store_quota(&tenant.quotas),
            )
            .await
        {
            Ok(()) => return Ok(record),
            Err(StoreError::Exists(_)) => {}
            Err(error) => return Err(quota::refused(state, error)),
        }
    }
    match lease(state, tenant, id, holder).await {
        Err(error) if error.status == StatusCode::NOT_FOUND => {
            return Err(ApiError::bad_request(format!(
                "no session {id}: create it first, or send its `context` with this execute"
            )));
        }
        other => other?,
    }
    match state.inner.store.get(&tenant.name, id).await? {
        Some(record) => Ok(record),
        None => Err(leased
            .give_back(ApiError::not_found(format!("no session {id}")))
            .await),
    }
}

/// Makes the leased session ready to run: a run cut off by a crash recovered from its
/// checkpoint first, then the run's input taken from `input` (given the session as it is:
/// a frontend maps its client's messages against it), then every reason not to run
/// checked; the lease is given back with any refusal. `stored`: the session is in the store
/// (leased); a frontend's session created on first use is not yet, and its insert checks
/// the byte quota. Returns the run's input and the session's model.
pub(crate) async fn prepare<F>(
    leased: &Leased<'_>,
    record: &mut SessionRecord,
    stored: bool,
    input: F,
) -> Result<(SessionInput, Model), ApiError>
where
    F: FnOnce(&mut SessionRecord) -> Result<SessionInput, ApiError>,
{
    let Leased {
        state,
        tenant,
        id,
        holder,
    } = *leased;
    // A session not in the store yet holds no lease to give back.
    let refuse = move |error: ApiError| async move {
        match stored {
            true => leased.give_back(error).await,
            false => error,
        }
    };
    crate::checkpoint::recover_for_run(state, record);
    let input = match input(record) {
        Ok(input) => input,
        Err(error) => return Err(refuse(error).await),
    };
    if matches!(input, SessionInput::Continue) && !crate::checkpoint::can_continue(record) {
        return Err(refuse(ApiError::bad_request(format!(
            "session {id} has nothing to continue: its history ends with the model's \
             message; send a `message` (or the `tool_results` it waits for)"
        )))
        .await);
    }
    // An expired session goes on from a user message (its calls now have error results);
    // late results are refused.
    if crate::sessions::expire(state, record) && matches!(input, SessionInput::ToolResults(_)) {
        record.updated_at_ms = now_ms();
        state.inner.store.save(record, holder, true).await?;
        return Err(ApiError::conflict(format!(
            "the pending calls of session {id} expired after {} s without results; send a new \
             message instead",
            state.inner.config.remote_tool_timeout_secs
        )));
    }
    // The history cap and the tenant's byte quota, before anything is spent.
    let over = match quota::check_session_size(state, tenant, record) {
        Ok(()) if stored => quota::check_stored_bytes(state, tenant).await.err(),
        Ok(()) => None,
        Err(error) => Some(error),
    };
    if let Some(error) = over {
        return Err(refuse(error).await);
    }
    if let Err(error) = record.session.check_input(&input) {
        return Err(refuse(ApiError::bad_request(error.message)).await);
    }
    match state.inner.models.get(&record.model).cloned() {
        Some(model) => Ok((input, model)),
        None => Err(refuse(ApiError::bad_request(format!(
            "the session's model `{}` is no longer offered by this server",
            record.model
        )))
        .await),
    }
}

/// A lease held by a request that has not started its run yet.
#[derive(Clone, Copy)]
pub(crate) struct Leased<'a> {
    pub(crate) state: &'a AppState,
    pub(crate) tenant: &'a Tenant,
    pub(crate) id: &'a str,
    pub(crate) holder: &'a str,
}

impl Leased<'_> {
    /// Releases the lease and returns `error`.
    pub(crate) async fn give_back(self, error: ApiError) -> ApiError {
        if let Err(release) = self
            .state
            .inner
            .store
            .release(&self.tenant.name, self.id, self.holder)
            .await
        {
            tracing::warn!(session = self.id, error = %release, "could not release a lease");
        }
        error
    }
}

/// Step 1's run permit: 429 when the tenant has too many runs going.
pub(crate) fn permit(tenant: &Tenant) -> Result<Permit, ApiError> {
    tenant.gate.enter().ok_or_else(|| {
        ApiError::rate_limited(
            format!("tenant `{}` has too many executes running", tenant.name),
            1,
        )
    })
}

/// A lease holder id unique to this request.
pub(crate) fn holder(state: &AppState) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}_{n:x}", state.inner.instance)
}

/// When a lease taken now expires.
pub(crate) fn lease_until(state: &AppState) -> u64 {
    now_ms().saturating_add(state.inner.config.execute_lease_secs.saturating_mul(1000))
}

/// Takes the session's lease for this request.
///
/// # Errors
///
/// 409 when another execute holds it; 404 when the session is gone.
pub(crate) async fn lease(
    state: &AppState,
    tenant: &Tenant,
    id: &str,
    holder: &str,
) -> Result<(), ApiError> {
    let now = now_ms();
    let until = lease_until(state);
    match state
        .inner
        .store
        .acquire(&tenant.name, id, holder, now, until)
        .await?
    {
        Lease::Acquired => Ok(()),
        Lease::Busy => Err(ApiError::conflict(format!(
            "session {id} is already executing; wait for its execute_complete event"
        ))),
        Lease::NotFound => Err(ApiError::not_found(format!("no session {id}"))),
    }
}

/// Starts the run and returns the SSE response that streams it, each event written by
/// `sink` (the native events, or a frontend protocol's encoder).
pub(crate) fn start<S: Sink>(state: &AppState, execute: Execute, sink: S) -> Response {
    let (sender, receiver) = mpsc::channel::<Bytes>(CHANNEL_DEPTH);
    let id = execute.record.id().to_owned();
    let tenant = execute.tenant.name.clone();
    let task_state = state.clone();
    tokio::spawn(async move { run(task_state, execute, sink, sender).await });

    let open = OpenStream::open(state, &tenant);
    let body = futures_util::stream::unfold(
        (receiver, open, None),
        |(mut receiver, open, mut large)| async move {
            let frame = match large.take() {
                Some(frame) => frame,
                None => receiver.recv().await?,
            };
            let frame = crate::sse_batch::batch(frame, &mut receiver, &mut large);
            Some((Ok::<_, Infallible>(frame), (receiver, open, large)))
        },
    );
    let mut response = event_stream(Body::from_stream(body));
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-session-id", value);
    }
    response
}

/// How the pipeline's events become the response's bytes: [`Native`] (execute's own SSE
/// events) or a frontend protocol's [`Encoder`] ([`Encoded`]). The pipeline hands it only
/// what the client may see: errors redacted, a tool's result once the store holds it.
pub(crate) trait Sink: Send + 'static {
    /// The frames before the first event.
    fn open(&mut self, out: &mut BytesMut);
    /// One loop event, already redacted and let through by the result gate.
    fn event(&mut self, event: &AgentEvent, out: &mut BytesMut);
    /// The last frames, once the session is saved and released.
    fn close(&mut self, end: &Ended<'_>, out: &mut BytesMut);
    /// The only frames of a run refused as it was about to start (the server is draining).
    fn refused(&mut self, record: &SessionRecord, error: &ApiError, out: &mut BytesMut);
    /// The run goes on when the client hangs up (its stream can be resumed: ui_resume.rs).
    fn outlives_client(&self) -> bool {
        false
    }
}

/// How a run ended, for [`Sink::close`].
pub(crate) struct Ended<'a> {
    /// The session as saved.
    pub(crate) record: &'a SessionRecord,
    /// The run's result (its messages dropped: they are in the session).
    pub(crate) outcome: &'a Result<GenerateResult, AgentError>,
    /// Why the run failed, redacted (the save's failure included).
    pub(crate) error: Option<&'a AgentError>,
    /// The tenant's spend cap that refused a model call.
    pub(crate) spend_cap: Option<crate::spend::CapHit>,
}

impl Ended<'_> {
    /// What the run spent, on every path: a failed run's error carries it too.
    pub(crate) fn spent(&self) -> (Usage, Option<f64>) {
        match self.outcome {
            Ok(result) => (result.usage, result.cost_usd),
            Err(error) => (error.spent.usage, error.spent.cost_usd),
        }
    }
}

/// `POST /v1/sessions/{id}/execute`'s events: each one as `data: <json>\n\n`, then
/// `execute_complete`.
pub(crate) struct Native;

impl Sink for Native {
    fn open(&mut self, _out: &mut BytesMut) {}

    fn event(&mut self, event: &AgentEvent, out: &mut BytesMut) {
        if matches!(event, AgentEvent::SessionEnd { .. }) {
            // It carries every message of the run: room for exactly its frame, so the buffer
            // does not double its way up to (and past) the size of the history.
            out.reserve(crate::exact_json::len(event).saturating_add(8));
        }
        write_frame(event, out);
    }

    fn close(&mut self, end: &Ended<'_>, out: &mut BytesMut) {
        let mut complete = complete_event(end.record, end.outcome, end.error);
        complete.spend_cap = end.spend_cap.clone();
        write_frame(&complete, out);
    }

    fn refused(&mut self, _record: &SessionRecord, error: &ApiError, out: &mut BytesMut) {
        write_frame(
            &serde_json::json!({"type": "error", "error": error.body()["error"]}),
            out,
        );
    }
}

/// A frontend protocol's [`Encoder`] as the pipeline's [`Sink`].
pub(crate) struct Encoded<E>(pub(crate) E);

impl<E: Encoder> Sink for Encoded<E> {
    fn open(&mut self, out: &mut BytesMut) {
        self.0.open(out);
    }

    fn event(&mut self, event: &AgentEvent, out: &mut BytesMut) {
        self.0.event(event, out);
    }

    fn close(&mut self, end: &Ended<'_>, out: &mut BytesMut) {
        let (usage, cost_usd) = end.spent();
        self.0.close(
            &End {
                session: &end.record.session,
                usage,
                cost_usd,
                error: end.error,
            },
            out,
        );
    }

    fn refused(&mut self, record: &SessionRecord, error: &ApiError, out: &mut BytesMut) {
        let error = AgentError::new(agent_types::ErrorKind::Aborted, error.message.clone());
        self.0.open(out);
        self.0.close(
            &End {
                session: &record.session,
                usage: Usage::default(),
                cost_usd: None,
                error: Some(&error),
            },
            out,
        );
    }

    fn outlives_client(&self) -> bool {
        self.0.outlives_client()
    }
}

/// `value` as one SSE frame into `out`.
fn write_frame<T: Serialize + ?Sized>(value: &T, out: &mut BytesMut) {
    use bytes::BufMut;
    let start = out.len();
    out.extend_from_slice(b"data: ");
    // Our events always serialize; a failure would be a bug, sent as an error frame.
    if serde_json::to_writer(out.writer(), value).is_err() {
        out.truncate(start + 6);
        out.extend_from_slice(br#"{"type":"error","error":{"message":"unserializable event"}}"#);
    }
    out.extend_from_slice(b"\n\n");
}

/// The run's way out to the client: the sink, its buffer, the channel to the response.
struct Out<S> {
    sink: S,
    buf: BytesMut,
    sender: mpsc::Sender<Bytes>,
    cancel: CancellationToken,
    tenant: String,
    session_id: String,
    /// The client hung up from a run that outlives it: frames are no longer sent.
    detached: bool,
}

impl<S: Sink> Out<S> {
    /// Writes `event` (redacted) and sends it; `false` when the client is gone.
    async fn send(&mut self, event: &AgentEvent) -> bool {
        let event = redacted(event, &self.tenant, &self.session_id);
        self.sink.event(&event, &mut self.buf);
        self.flush().await
    }

    /// Sends what the sink wrote; `false` when the client is gone.
    async fn flush(&mut self) -> bool {
        if self.buf.is_empty() {
            return true;
        }
        if self.detached {
            self.buf.clear();
            return true;
        }
        let sent = deliver(&self.sender, self.buf.split().freeze(), &self.cancel).await;
        // A resumable run goes on for the clients that resume its stream.
        if !sent && self.sink.outlives_client() && !self.cancel.is_cancelled() {
            self.detached = true;
            return true;
        }
        sent
    }
}

/// A `text/event-stream` response (not cached) with `body`.
pub(crate) fn event_stream(body: Body) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Counts an open stream until the response body is dropped (sent, or the client left).
pub(crate) struct OpenStream {
    state: AppState,
    tenant: String,
}

impl OpenStream {
    /// Counts one more open stream for `tenant`.
    pub(crate) fn open(state: &AppState, tenant: &str) -> Self {
        state
            .inner
            .metrics
            .add("agentry_active_streams", &[("tenant", tenant)], 1.0);
        Self {
            state: state.clone(),
            tenant: tenant.to_owned(),
        }
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.state
            .inner
            .metrics
            .add("agentry_active_streams", &[("tenant", &self.tenant)], -1.0);
    }
}

/// The loop options for this session: the server's tools narrowed to the session's, its
/// budgets under the server's caps, the tenant as the tools' caller.
pub(crate) fn options(
    state: &AppState,
    tenant: &Tenant,
    record: &SessionRecord,
    cancel: CancellationToken,
) -> Options {
    let caps = &state.inner.config.caps;
    let chosen = &record.options;
    let mut options = Options::auto()
        .with_guardrails(tenant.guardrails.clone())
        .with_shared_tools(Arc::clone(&state.inner.tools))
        // The session's own remote tools are offered too: the allow-list narrows after they
        // join the registry.
        .with_allowed_tools(
            record
                .tools
                .iter()
                .chain(record.session.remote_tools.iter().map(|spec| &spec.name))
                .cloned(),
        )
        .with_max_tool_iterations(lower(chosen.max_iterations, caps.max_iterations))
        .with_tool_result_max_bytes(lower(
            chosen.tool_result_max_bytes,
            caps.tool_result_max_bytes,
        ))
        .with_max_tool_calls_per_round(lower(
            chosen.max_tool_calls_per_round,
            caps.max_tool_calls_per_round,
        ))
        .with_max_round_result_bytes(lower(
            chosen.max_round_result_bytes,
            caps.max_round_result_bytes,
        ))
        .with_tool_timeout(Duration::from_secs(caps.tool_timeout_secs))
        .with_cancellation(cancel)
        .with_tool_trace(true);
    if let Some(search) = &state.inner.search {
        options = options.with_searchable_tools(search);
    }
    options.rate_card = Arc::clone(&state.inner.rate_card);
    options.caller = Arc::clone(&tenant.caller);
    if let Some(accounting) = &state.inner.accounting {
        let provider = state
            .inner
            .config
            .models
            .iter()
            .find(|model| model.name == record.model)
            .map_or("", |model| model.provider.as_str());
        options.accounting = Some(accounting.queue.clone().with_provider(provider));
    }
    options.token_budget = min_some(chosen.token_budget, caps.token_budget);
    options.max_cost_usd = match (chosen.max_cost_usd, caps.max_cost_usd) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if chosen.parallel_tools == Some(false) {
        options.tool_parallelism = ToolParallelism::Serial;
    }
    if let Some(schema) = &chosen.output_schema {
        // Bounded when the session was created; compiled per execute (a small schema).
        options.output = Some(agent_loop::output::OutputSpec::from_schema(schema.clone()));
    }
    options
}

/// The model's agent (built once, its backend shared) with this run's options.
pub(crate) fn agent_for(model: &Model, options: Options) -> Agent {
    model.agent.to_builder().with_options(options).build()
}

fn min_some(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The run task: the loop's events out through `sink`, each completed turn checkpointed, a
/// tool's result shown only once the store holds it, the final save and release before the
/// last frames.
async fn run<S: Sink>(state: AppState, execute: Execute, sink: S, sender: mpsc::Sender<Bytes>) {
    let Execute {
        tenant,
        mut record,
        input,
        model,
        holder,
        permit,
    } = execute;
    let cancel = CancellationToken::new();
    let mut out = Out {
        sink,
        buf: BytesMut::with_capacity(4096),
        sender,
        cancel: cancel.clone(),
        tenant: tenant.name.clone(),
        session_id: record.id().to_owned(),
        detached: false,
    };
    let Some(_registered) = state.inner.runs.register(cancel.clone()) else {
        // Draining began between admission and now: give the session back untouched.
        let _ = state
            .inner
            .store
            .release(&tenant.name, record.id(), &holder)
            .await;
        let error = ApiError::unavailable("the server is shutting down");
        out.sink.refused(&record, &error, &mut out.buf);
        out.flush().await;
        return;
    };
    // A client that hangs up closes the channel: stop the loop (model call and tools),
    // unless the stream can be resumed.
    let watcher = {
        let sender = out.sender.clone();
        let cancel = cancel.clone();
        let outlives = out.sink.outlives_client();
        tokio::spawn(async move {
            sender.closed().await;
            if !outlives {
                cancel.cancel();
            }
        })
    };
    let mut options = options(&state, &tenant, &record, cancel.clone());
    crate::approval::install(
        &mut options,
        &tenant.require_approval,
        crate::approval::Resumable::Yes,
    );
    let meter = state.inner.spend.meter(&tenant.name);
    if let Some(meter) = &meter {
        meter.install(&mut options);
    }
    // Each completed turn is in the store as it completes (crash recovery); a tool's result
    // reaches the client only once the store holds it.
    let mut gate =
        crate::checkpoint::install(&mut options, &state, &mut record, &holder, meter.as_ref());
    let heartbeat =
        crate::checkpoint::heartbeat(&state, &tenant.name, record.id(), &holder, cancel.clone());
    let metrics = &state.inner.metrics;
    out.sink.open(&mut out.buf);
    let mut client = out.flush().await;
    let outcome = {
        let agent = agent_for(&model, options);
        let mut stream = agent.resume_stream(&mut record.session, input);
        loop {
            let event = tokio::select! {
                biased;
                event = stream.next() => Pumped::Event(event),
                () = gate.committed() => Pumped::Committed,
            };
            let event = match event {
                Pumped::Event(Some(event)) => event,
                Pumped::Event(None) => break,
                Pumped::Committed => {
                    if client && gate.ready() && !send_held(&mut gate, false, &mut out).await {
                        client = false;
                        cancel.cancel();
                    }
                    continue;
                }
            };
            count(metrics, &tenant.name, &record.model, &event);
            if !client {
                continue;
            }
            // Results the store now holds go out before what came after them.
            if gate.ready() && !send_held(&mut gate, false, &mut out).await {
                client = false;
                cancel.cancel();
                continue;
            }
            let Some(event) = gate.pass(event) else {
                continue;
            };
            if !out.send(&event).await {
                client = false;
                cancel.cancel();
            }
        }
        stream.result().await
    };
    // The run's messages are in the session (and went out in `session_end`): this copy is not
    // needed, and keeping it through the save would hold the run's results twice.
    let outcome = outcome.map(|mut result| {
        result.messages = Vec::new();
        result
    });
    watcher.abort();
    heartbeat.abort();
    settle_metrics(metrics, &tenant.name, &record.session.status, &outcome);
    // The run's spend is in the ledger before the client hears the run ended.
    if let Some(meter) = &meter {
        meter.flush().await;
    }

    record.updated_at_ms = now_ms();
    // The last use of the history: the store drops it once encoded, before it writes.
    let saved = state
        .inner
        .store
        .save_last(&mut record, &holder, true)
        .await;
    if let Err(error) = &saved {
        tracing::error!(session = record.id(), %error, "the session could not be saved after its run");
        // The run's outcome is lost: the stream must not call it `completed`.
        record.session.status = SessionStatus::Error;
    }
    drop(permit);
    if client {
        // What the run showed last (results it closed, its end) is in the store now; if the
        // save failed, the store does not hold it and the client hears only the error.
        if saved.is_ok() {
            client = send_held(&mut gate, true, &mut out).await;
        } else {
            gate.discard();
        }
    }
    let (held, held_secs) = gate.held();
    if held > 0 {
        #[allow(clippy::cast_precision_loss)]
        metrics.add(
            "agentry_results_held_total",
            &[("tenant", &tenant.name)],
            held as f64,
        );
        metrics.add(
            "agentry_result_hold_seconds_total",
            &[("tenant", &tenant.name)],
            held_secs,
        );
    }
    if client {
        let error = match (&saved, &outcome) {
            (_, Err(error)) => Some(error.clone()),
            // The store's own message (hosts, paths, users) is in the log line above.
            (Err(_), Ok(_)) => Some(AgentError::new(
                agent_types::ErrorKind::Appender,
                "the session could not be saved; the server log has the cause",
            )),
            _ => None,
        };
        let error = error.as_ref().map(redact_agent_error);
        let ended = Ended {
            record: &record,
            outcome: &outcome,
            error: error.as_ref(),
            spend_cap: meter.as_ref().and_then(|meter| meter.hit_for(&outcome)),
        };
        out.sink.close(&ended, &mut out.buf);
        out.flush().await;
    }
}

/// What the event pump woke up for.
enum Pumped {
    /// The loop's next event (`None`: the run ended).
    Event(Option<AgentEvent>),
    /// A checkpoint committed: held results may go out.
    Committed,
}

/// One of the loop's events as the tenant may see it: an error without upstream URLs or
/// credentials (the log has all of it).
pub(crate) fn redacted<'a>(
    event: &'a AgentEvent,
    tenant: &str,
    session_id: &str,
) -> Cow<'a, AgentEvent> {
    match event {
        AgentEvent::Error { error } => {
            tracing::warn!(
                session = %session_id,
                tenant = %tenant,
                error = %error.message,
                "the run failed"
            );
            Cow::Owned(AgentEvent::Error {
                error: redact_agent_error(error),
            })
        }
        // A sub-agent's error, redacted the same way (rare: the copy is fine).
        AgentEvent::SubAgent { event: inner, .. }
            if matches!(**inner, AgentEvent::Error { .. }) =>
        {
            Cow::Owned(crate::error::redact_nested(event.clone()))
        }
        _ => Cow::Borrowed(event),
    }
}

/// Sends the events `gate` held that may go out (`all`: after the final save, every one),
/// in order; `false` when the client is gone.
async fn send_held<S: Sink>(
    gate: &mut crate::result_gate::Gate,
    all: bool,
    out: &mut Out<S>,
) -> bool {
    let mut events: Box<dyn Iterator<Item = AgentEvent> + Send + '_> = match all {
        true => Box::new(gate.release_all()),
        false => Box::new(gate.release()),
    };
    for event in events.by_ref() {
        if !out.send(&event).await {
            return false;
        }
    }
    true
}

/// How long a send may wait for a slow client once the run is cancelled (the drain
/// deadline passed, or the client left): a client that stopped reading cannot hold the run,
/// and with it the shutdown, any longer than this.
const ABANDON_AFTER: Duration = Duration::from_secs(2);

/// Sends `item` (a frame, or what stands for one) to the client; `false` when the client is
/// gone or, once `cancel` fired, has not made room within [`ABANDON_AFTER`].
pub(crate) async fn deliver<T>(
    sender: &mpsc::Sender<T>,
    item: T,
    cancel: &CancellationToken,
) -> bool {
    let permit = tokio::select! {
        biased;
        permit = sender.reserve() => permit,
        () = cancel.cancelled() => {
            tokio::time::timeout(ABANDON_AFTER, sender.reserve())
                .await
                .unwrap_or(Err(mpsc::error::SendError(())))
        }
    };
    match permit {
        Ok(permit) => {
            permit.send(item);
            true
        }
        Err(_) => false,
    }
}

fn complete_event<'a>(
    record: &'a SessionRecord,
    outcome: &'a Result<GenerateResult, AgentError>,
    error: Option<&'a AgentError>,
) -> ExecuteComplete<'a> {
    // What the run spent, on every path: a failed run's error carries it too.
    let (usage, cost_usd) = match outcome {
        Ok(result) => (result.usage, result.cost_usd),
        Err(error) => (error.spent.usage, error.spent.cost_usd),
    };
    ExecuteComplete {
        kind: "execute_complete",
        session_id: record.id(),
        status: record.session.status,
        pending_tool_calls: &record.session.pending_tool_calls,
        pending_approvals: &record.session.pending_approvals,
        usage,
        cost_usd,
        error,
        spend_cap: None,
        output: outcome
            .as_ref()
            .ok()
            .and_then(|result| result.output.as_ref()),
    }
}

/// Model calls, tokens, cost and tool calls, as the events go by.
pub(crate) fn count(
    metrics: &crate::metrics::Metrics,
    tenant: &str,
    model: &str,
    event: &AgentEvent,
) {
    match event {
        AgentEvent::MessageEnd {
            message: Message::Assistant(message),
            cost_usd,
        } => {
            metrics.inc(
                "agentry_model_calls_total",
                &[("tenant", tenant), ("model", model)],
            );
            if let Some(usage) = &message.usage {
                for (kind, value) in [
                    ("input", usage.input_tokens),
                    ("output", usage.output_tokens),
                    ("cache_read", usage.cache_read_tokens),
                    (
                        "cache_write",
                        match (usage.cache_write_5m_tokens, usage.cache_write_1h_tokens) {
                            (None, None) => None,
                            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
                        },
                    ),
                ] {
                    if let Some(value) = value {
                        #[allow(clippy::cast_precision_loss)]
                        metrics.add(
                            "agentry_tokens_total",
                            &[("tenant", tenant), ("kind", kind)],
                            value as f64,
                        );
                    }
                }
            }
            if let Some(cost) = cost_usd {
                metrics.add("agentry_cost_usd_total", &[("tenant", tenant)], *cost);
            }
        }
        AgentEvent::ToolExecutionEnd {
            tool_name,
            is_error,
            ..
        } => {
            let outcome = if *is_error { "error" } else { "ok" };
            metrics.inc(
                "agentry_tool_calls_total",
                &[
                    ("tenant", tenant),
                    ("tool", metrics.tool_label(tool_name)),
                    ("outcome", outcome),
                ],
            );
        }
        _ => {}
    }
}

/// The run's end: its status, and the budget when one tripped.
pub(crate) fn settle_metrics(
    metrics: &crate::metrics::Metrics,
    tenant: &str,
    status: &SessionStatus,
    outcome: &Result<GenerateResult, AgentError>,
) {
    let status = serde_json::to_value(status)
        .ok()
        .and_then(|value| value.as_str().map(str::to_owned))
        .unwrap_or_default();
    metrics.inc(
        "agentry_runs_total",
        &[("tenant", tenant), ("status", &status)],
    );
    if let Err(error) = outcome
        && let Some(budget) = error.budget_exceeded()
    {
        let name = serde_json::to_value(budget)
            .ok()
            .and_then(|value| {
                value
                    .get("limit")
                    .and_then(|limit| limit.as_str())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "unknown".into());
        metrics.inc(
            "agentry_budget_trips_total",
            &[("tenant", tenant), ("budget", &name)],
        );
    }
}

/// What a session asked for, never above the server's cap.
fn lower<T: Ord + Copy>(asked: Option<T>, cap: T) -> T {
    asked.map_or(cap, |asked| asked.min(cap))
}
