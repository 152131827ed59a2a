//! Accounting and audit rows: one row per model call and per tool call, handed to a bounded
//! queue that a writer drains in batches, off the loop's path.
//!
//! The loop only enqueues: [`AccountingQueue`] is the sending half (set it with
//! [`Options::with_accounting`](crate::Options::with_accounting)); [`AccountingReceiver::run`]
//! is the writer's future, which the caller spawns on its runtime with a [`RowWriter`] (a
//! SQLite or PostgreSQL table, a counter, anything), or [`AccountingReceiver::run_blocking`]
//! on a thread of the caller's. Each row goes out when its call ends: a model row from the
//! call's [`ModelCallRecord`] (a copy of a few words), a tool row from the call's
//! [`TraceEntry`] with the arguments' size and SHA-256 instead of the arguments. So a long
//! run's rows are in the store while it runs, and a run dropped mid-way keeps the rows of the
//! calls it completed. Each row costs the loop one channel send; nothing is locked and the
//! history, arguments and results are never copied.
//!
//! A full queue either waits for room ([`QueueFull::Wait`], back-pressure on the run) or drops
//! the row, counts it and warns ([`QueueFull::Drop`], the default). A writer that fails is
//! counted and warned about; it fails the run only with [`AccountingConfig::fail_run`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use std::time::Duration;

use agent_types::{AgentError, ErrorKind, ToolCallId, TraceEntry};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot};

use crate::result::ModelCallRecord;

/// Who, where and which run a row belongs to; shared by every row of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunContext {
    /// The caller's tenant, when it has one.
    pub tenant: Option<String>,
    /// The caller's principal.
    pub caller: String,
    /// The session the run belongs to.
    pub session: String,
    /// This run's id: unique per process run, `{unix micros:x}-{counter:x}`.
    pub run_id: String,
    /// The provider the queue was set up for (`anthropic`, `openai`, `replay`…), or empty.
    pub provider: String,
}

/// One model call: the loop's [`ModelCallRecord`] plus when it ended and how it failed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ModelCallRow {
    /// When the call ended, in microseconds since the Unix epoch.
    pub at_us: i64,
    /// Who and which run.
    pub context: Arc<RunContext>,
    /// The call's record, as the run returns it in `model_calls`. For a failed call (no
    /// record in the run's result) the model is the one requested, usage and cost are empty
    /// and the stop reason is `error` or `aborted`.
    pub record: ModelCallRecord,
    /// Why the call failed, when it did (at most [`MAX_ERROR_BYTES`]).
    pub error: Option<String>,
}

impl ModelCallRow {
    /// The row of `record`, ended now; `error` says why the call failed.
    pub fn new(context: Arc<RunContext>, record: ModelCallRecord, error: Option<&str>) -> Self {
        Self {
            at_us: now_us(),
            context,
            record,
            error: error.map(short),
        }
    }
}

/// The most bytes of an error message a row keeps (cut at a character boundary): a tool's
/// error can be as long as a result, and a row is an audit record, not a copy of it.
pub const MAX_ERROR_BYTES: usize = 1024;

/// One tool call: the run's [`TraceEntry`] without the arguments (their size and SHA-256
/// instead), plus when it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolCallRow {
    /// When the call ended, in microseconds since the Unix epoch.
    pub at_us: i64,
    /// Who and which run.
    pub context: Arc<RunContext>,
    /// The tool round, from 1 (the entry's `iteration`).
    pub round: u32,
    /// The call's id.
    pub call_id: ToolCallId,
    /// The tool's name as the model wrote it (shared with the call's handler context).
    pub tool: Arc<str>,
    /// Bytes of the arguments (after any lenient repair) as compact JSON.
    pub arguments_bytes: u64,
    /// SHA-256 of that JSON.
    pub arguments_sha256: [u8; 32],
    /// Bytes of the full serialized result.
    pub result_bytes: u64,
    /// Bytes sent to the model.
    pub sent_bytes: u64,
    /// Whether the result was cut to fit the cap.
    pub truncated: bool,
    /// Wall time the handler ran.
    pub duration: Duration,
    /// What went wrong, if the call failed (at most [`MAX_ERROR_BYTES`]).
    pub error: Option<String>,
    /// What guardrails decided about the call, as `name:action` pairs joined by commas
    /// (`pii:redact,policy:deny`); `None` when none decided anything.
    pub guardrails: Option<String>,
}

impl ToolCallRow {
    /// The row of `entry`, ended now: the arguments are hashed, not copied.
    pub fn new(context: Arc<RunContext>, entry: &TraceEntry) -> Self {
        Self::named(context, Arc::from(entry.tool_name.as_str()), entry)
    }

    /// [`new`](Self::new) with the tool's name already shared (nothing is allocated).
    fn named(context: Arc<RunContext>, tool: Arc<str>, entry: &TraceEntry) -> Self {
        let (arguments_bytes, arguments_sha256) = arguments_digest(&entry.arguments);
        Self {
            at_us: now_us(),
            context,
            round: entry.iteration,
            call_id: entry.call_id.clone(),
            tool,
            arguments_bytes,
            arguments_sha256,
            result_bytes: entry.result_bytes,
            sent_bytes: entry.sent_bytes,
            truncated: entry.truncated,
            duration: entry.duration,
            error: entry.error.as_deref().map(short),
            guardrails: entry
                .guardrail_decisions
                .as_deref()
                .map(|decisions| crate::guardrail::span_value(decisions)),
        }
    }

    /// `ok`, or `error` when the call failed (`error` says why).
    pub fn outcome(&self) -> &'static str {
        if self.error.is_some() { "error" } else { "ok" }
    }
}

/// The size and SHA-256 of `arguments` serialized as compact JSON, streamed through the hash
/// (nothing is allocated).
pub fn arguments_digest(arguments: &Value) -> (u64, [u8; 32]) {
    struct Hashing(Sha256, u64);
    impl std::io::Write for Hashing {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            self.1 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut hashing = Hashing(Sha256::new(), 0);
    // Writing a `Value` into a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut hashing, arguments);
    (hashing.1, hashing.0.finalize().into())
}

/// `message`, cut to [`MAX_ERROR_BYTES`] at a character boundary.
fn short(message: &str) -> String {
    let mut end = message.len().min(MAX_ERROR_BYTES);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message[..end].to_owned()
}

/// A row for the accounting writer.
#[derive(Debug, Clone, PartialEq)]
pub enum AccountingRow {
    /// A model call.
    ModelCall(ModelCallRow),
    /// A tool call.
    ToolCall(ToolCallRow),
}

/// What a full queue does to the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum QueueFull {
    /// Drop the row, count it ([`AccountingStats::dropped`]) and warn. The default: accounting
    /// never slows a run.
    #[default]
    Drop,
    /// Wait for room: the run slows to the writer's pace and no row is lost.
    Wait,
}

/// How the queue behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AccountingConfig {
    /// The most rows waiting for the writer (at least 1; default 1,024).
    pub capacity: usize,
    /// The most rows one write takes (at least 1; default 256): a write takes the rows
    /// waiting, up to this many.
    pub batch: usize,
    /// What a full queue does.
    pub when_full: QueueFull,
    /// After a failed write (or a dropped row), a run fails with an `appender` error (HTTP
    /// 500, like a failing conversation store) at its next model call, tool round or end.
    /// Off by default: accounting trouble is warned about and counted, never fails a run.
    pub fail_run: bool,
}

impl Default for AccountingConfig {
    fn default() -> Self {
        Self {
            capacity: 1024,
            batch: 256,
            when_full: QueueFull::Drop,
            fail_run: false,
        }
    }
}

impl AccountingConfig {
    /// Sets the capacity.
    #[must_use]
    pub fn with_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// Sets the batch size.
    #[must_use]
    pub fn with_batch(mut self, batch: usize) -> Self {
        self.batch = batch;
        self
    }

    /// Sets what a full queue does.
    #[must_use]
    pub fn with_when_full(mut self, when_full: QueueFull) -> Self {
        self.when_full = when_full;
        self
    }

    /// Makes accounting failures fail the run.
    #[must_use]
    pub fn with_fail_run(mut self, fail_run: bool) -> Self {
        self.fail_run = fail_run;
        self
    }
}

/// Counters shared by the queue and its writer.
#[derive(Debug, Default)]
pub struct AccountingStats {
    enqueued: AtomicU64,
    dropped: AtomicU64,
    written: AtomicU64,
    failed_writes: AtomicU64,
    failed: AtomicBool,
}

impl AccountingStats {
    /// Rows accepted into the queue.
    pub fn enqueued(&self) -> u64 {
        self.enqueued.load(Ordering::Relaxed)
    }

    /// Rows dropped because the queue was full or the writer was gone.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Rows the writer stored.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Writes that failed (their rows are lost).
    pub fn failed_writes(&self) -> u64 {
        self.failed_writes.load(Ordering::Relaxed)
    }
}

/// The error a [`RowWriter`] reports; the writer task warns with it and counts it.
pub type WriteError = Box<dyn std::error::Error + Send + Sync>;

/// The boxed future a [`RowWriter`] returns.
pub type WriteFuture<'a> = Pin<Box<dyn Future<Output = Result<(), WriteError>> + Send + 'a>>;

/// Stores batches of rows: a database table, a file, a counter.
pub trait RowWriter: Send {
    /// Stores `rows` (in enqueue order), all or nothing where the store allows.
    fn write<'a>(&'a mut self, rows: &'a [AccountingRow]) -> WriteFuture<'a>;
}

// Rows are nearly every item: boxing them would allocate once per row.
#[allow(clippy::large_enum_variant)]
enum Item {
    Row(AccountingRow),
    Flush(oneshot::Sender<()>),
}

/// The wait for room in a full queue ([`QueueFull::Wait`]): boxed, so the loop's per-call
/// futures hold one pointer for it and allocate only when the queue is full.
pub(crate) type Waiting = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The sending half: cheap to clone, set on [`Options`](crate::Options).
#[derive(Clone)]
pub struct AccountingQueue {
    sender: mpsc::Sender<Item>,
    config: AccountingConfig,
    stats: Arc<AccountingStats>,
    provider: Arc<str>,
}

/// The receiving half: [`run`](Self::run) it with a writer on your runtime, or
/// [`run_blocking`](Self::run_blocking) on a thread of your own.
pub struct AccountingReceiver {
    receiver: mpsc::Receiver<Item>,
    batch: usize,
    stats: Arc<AccountingStats>,
}

impl AccountingQueue {
    /// A queue configured by `config`, and its receiving half.
    pub fn new(config: AccountingConfig) -> (Self, AccountingReceiver) {
        let config = AccountingConfig {
            capacity: config.capacity.max(1),
            batch: config.batch.max(1),
            ..config
        };
        let (sender, receiver) = mpsc::channel(config.capacity);
        let stats = Arc::new(AccountingStats::default());
        (
            Self {
                sender,
                config,
                stats: Arc::clone(&stats),
                provider: Arc::from(""),
            },
            AccountingReceiver {
                receiver,
                batch: config.batch,
                stats,
            },
        )
    }

    /// The same queue, naming `provider` in every row's context.
    #[must_use]
    pub fn with_provider(mut self, provider: impl Into<String>) -> Self {
        self.provider = Arc::from(provider.into());
        self
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<AccountingStats> {
        &self.stats
    }

    /// The configuration (capacity and batch at least 1).
    pub fn config(&self) -> AccountingConfig {
        self.config
    }

    /// Waits until the writer has handled every row enqueued before this call (before a
    /// process exits, before reading the store). Returns at once when the writer is gone.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.sender.send(Item::Flush(done)).await.is_ok() {
            let _ = wait.await;
        }
    }

    pub(crate) fn context(&self, caller: &agent_tools::Caller, session: &str) -> Arc<RunContext> {
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let run = RUNS.fetch_add(1, Ordering::Relaxed);
        Arc::new(RunContext {
            tenant: caller.tenant().map(str::to_owned),
            caller: caller.principal().to_owned(),
            session: session.to_owned(),
            run_id: format!("{:x}-{run:x}", now_us()),
            provider: self.provider.to_string(),
        })
    }

    /// Enqueues `row` as configured. `Err` only with `fail_run` set and a failure seen.
    pub async fn enqueue(&self, row: AccountingRow) -> Result<(), AgentError> {
        if let Some(waiting) = self.send(row) {
            waiting.await;
        }
        self.verdict()
    }

    /// Sends `row` without waiting: one `try_send`. A full queue drops it (counted) unless
    /// the queue waits ([`QueueFull::Wait`]): then the returned future sends it when there is
    /// room, and the caller awaits it.
    pub(crate) fn send(&self, row: AccountingRow) -> Option<Waiting> {
        match self.sender.try_send(Item::Row(row)) {
            Ok(()) => {
                self.stats.enqueued.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(mpsc::error::TrySendError::Full(item))
                if self.config.when_full == QueueFull::Wait =>
            {
                let sender = self.sender.clone();
                // Counted as dropped unless the send completes (a run dropped while it waits).
                let mut pending = Pending {
                    stats: Arc::clone(&self.stats),
                    capacity: self.config.capacity,
                    sent: false,
                };
                Some(Box::pin(async move {
                    let sent = sender.send(item).await;
                    pending.settle(sent.is_ok());
                }))
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                lost(
                    &self.stats,
                    self.config.capacity,
                    "the accounting queue is full: a row was dropped",
                );
                None
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                lost(&self.stats, self.config.capacity, GONE);
                None
            }
        }
    }

    /// `Err` when `fail_run` is set and a write failed or a row was dropped.
    pub(crate) fn verdict(&self) -> Result<(), AgentError> {
        if self.config.fail_run && self.stats.failed.load(Ordering::Relaxed) {
            return Err(AgentError::new(
                ErrorKind::Appender,
                "accounting failed (a write failed or a row was dropped) and the run is \
                 configured to fail with it",
            ));
        }
        Ok(())
    }
}

/// Sends the row of a tool call that ended: a plain call, so the row is never kept in the
/// caller's future (one per call, allocated every round), only the rare wait.
pub(crate) fn send_tool_row(
    queue: Option<&AccountingQueue>,
    context: Option<&Arc<RunContext>>,
    job: &crate::job::Job,
    entry: &TraceEntry,
) -> Option<Waiting> {
    let (queue, context) = (queue?, context?);
    queue.send(AccountingRow::ToolCall(ToolCallRow::named(
        Arc::clone(context),
        Arc::clone(&job.name),
        entry,
    )))
}

/// Sends the row of a model call that ended (see [`send_tool_row`]).
pub(crate) fn send_model_row(
    queue: Option<&AccountingQueue>,
    context: Option<&Arc<RunContext>>,
    record: impl FnOnce() -> ModelCallRecord,
    error: Option<&dyn fmt::Display>,
) -> Option<Waiting> {
    let (queue, context) = (queue?, context?);
    let error = error.map(ToString::to_string);
    queue.send(AccountingRow::ModelCall(ModelCallRow::new(
        Arc::clone(context),
        record(),
        error.as_deref(),
    )))
}

/// A row waiting for room; dropped before it is sent, it counts as dropped.
struct Pending {
    stats: Arc<AccountingStats>,
    capacity: usize,
    sent: bool,
}

impl Pending {
    /// The send ended: counted as enqueued, or as dropped when the writer is gone.
    fn settle(&mut self, sent: bool) {
        self.sent = true;
        if sent {
            self.stats.enqueued.fetch_add(1, Ordering::Relaxed);
        } else {
            lost(&self.stats, self.capacity, GONE);
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.sent {
            lost(
                &self.stats,
                self.capacity,
                "a run was dropped while its accounting row waited for room: the row was dropped",
            );
        }
    }
}

const GONE: &str = "the accounting writer is gone: a row was dropped";

fn lost(stats: &AccountingStats, capacity: usize, message: &'static str) {
    let dropped = stats.dropped.fetch_add(1, Ordering::Relaxed) + 1;
    // Warned once per power of two, so a stuck writer does not flood the log.
    if dropped.is_power_of_two() {
        tracing::warn!(dropped, capacity, "{message}");
    }
    stats.failed.store(true, Ordering::Relaxed);
}

impl fmt::Debug for AccountingQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccountingQueue")
            .field("config", &self.config)
            .field("provider", &self.provider)
            .field("stats", &self.stats)
            .finish()
    }
}

impl AccountingReceiver {
    /// Drains the queue into `writer` in batches until every [`AccountingQueue`] clone is
    /// dropped. Spawn it; a failing write is warned about and counted, and draining goes on.
    pub async fn run<W: RowWriter>(mut self, mut writer: W) {
        let mut rows = Vec::with_capacity(self.batch);
        let mut flushes = Vec::new();
        while let Some(item) = self.receiver.recv().await {
            self.gather(item, &mut rows, &mut flushes);
            if !rows.is_empty() {
                let written = writer.write(&rows).await;
                self.count(written, rows.len());
                rows.clear();
            }
            for done in flushes.drain(..) {
                let _ = done.send(());
            }
        }
    }

    /// [`run`](Self::run) on the calling thread, writing with `write`: for a store whose
    /// writes block (a SQLite file), on a thread of its own, so its writes never take a
    /// runtime worker or a thread of the blocking pool, and every batch is built, written and
    /// freed on that one thread. Returns when every [`AccountingQueue`] clone is dropped.
    /// Must not be called from async code (it blocks).
    pub fn run_blocking(
        mut self,
        mut write: impl FnMut(&[AccountingRow]) -> Result<(), WriteError>,
    ) {
        let mut rows = Vec::with_capacity(self.batch);
        let mut flushes = Vec::new();
        while let Some(item) = self.receiver.blocking_recv() {
            self.gather(item, &mut rows, &mut flushes);
            if !rows.is_empty() {
                let written = write(&rows);
                self.count(written, rows.len());
                rows.clear();
            }
            for done in flushes.drain(..) {
                let _ = done.send(());
            }
        }
    }

    /// Takes `item` and what else waits, up to a batch of rows.
    fn gather(
        &mut self,
        item: Item,
        rows: &mut Vec<AccountingRow>,
        flushes: &mut Vec<oneshot::Sender<()>>,
    ) {
        push(item, rows, flushes);
        while rows.len() < self.batch {
            match self.receiver.try_recv() {
                Ok(item) => push(item, rows, flushes),
                Err(_) => break,
            }
        }
    }

    fn count(&self, written: Result<(), WriteError>, rows: usize) {
        match written {
            Ok(()) => {
                self.stats.written.fetch_add(rows as u64, Ordering::Relaxed);
            }
            Err(error) => {
                let failed = self.stats.failed_writes.fetch_add(1, Ordering::Relaxed) + 1;
                self.stats.failed.store(true, Ordering::Relaxed);
                tracing::warn!(
                    %error,
                    rows,
                    failed_writes = failed,
                    "an accounting write failed: its rows are lost"
                );
            }
        }
    }
}

fn push(item: Item, rows: &mut Vec<AccountingRow>, flushes: &mut Vec<oneshot::Sender<()>>) {
    match item {
        Item::Row(row) => rows.push(row),
        Item::Flush(done) => flushes.push(done),
    }
}

/// Now, in microseconds since the Unix epoch.
pub(crate) fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn row(queue: &AccountingQueue) -> AccountingRow {
        let context = queue.context(&agent_tools::Caller::new("p"), "s");
        AccountingRow::ModelCall(ModelCallRow::new(
            context,
            ModelCallRecord {
                iteration: 0,
                model: "m".to_owned(),
                usage: None,
                cost_usd: None,
                latency: Duration::ZERO,
                time_to_first_event: Duration::ZERO,
                tool_calls: 0,
                stop_reason: agent_types::StopReason::Stop,
                response_id: None,
            },
            None,
        ))
    }

    #[test]
    fn a_row_waiting_for_room_counts_as_dropped_when_its_wait_is_dropped() {
        let (queue, _receiver) = AccountingQueue::new(
            AccountingConfig::default()
                .with_capacity(1)
                .with_when_full(QueueFull::Wait),
        );
        assert!(queue.send(row(&queue)).is_none());
        let waiting = queue.send(row(&queue)).expect("the queue is full");
        assert_eq!(queue.stats().dropped(), 0);
        drop(waiting);
        assert_eq!(queue.stats().dropped(), 1);
        assert_eq!(queue.stats().enqueued(), 1);
    }

    #[test]
    fn a_full_queue_in_drop_mode_counts_each_dropped_row() {
        let (queue, _receiver) = AccountingQueue::new(AccountingConfig::default().with_capacity(1));
        for _ in 0..3 {
            assert!(queue.send(row(&queue)).is_none());
        }
        assert_eq!(queue.stats().enqueued(), 1);
        assert_eq!(queue.stats().dropped(), 2);
    }

    #[test]
    fn the_digest_is_the_sha256_of_the_compact_json() {
        let (bytes, digest) = arguments_digest(&serde_json::json!({"city": "Denver"}));
        assert_eq!(bytes, br#"{"city":"Denver"}"#.len() as u64);
        let expected: [u8; 32] = Sha256::digest(br#"{"city":"Denver"}"#).into();
        assert_eq!(digest, expected);
    }

    #[test]
    fn a_long_error_is_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_ERROR_BYTES);
        let cut = short(&long);
        assert!(cut.len() <= MAX_ERROR_BYTES && cut.len() >= MAX_ERROR_BYTES - 1);
        assert!(long.starts_with(&cut));
        assert_eq!(short("no such city"), "no such city");
    }
}
