//! Accounting and audit rows: one row per model call and per tool call, handed to a bounded
//! queue that a writer drains in batches, off the loop's path.
//!
//! The loop only enqueues: [`AccountingQueue`] is the sending half (set it with
//! [`Options::with_accounting`](crate::Options::with_accounting)); [`AccountingReceiver::run`]
//! is the writer's future, which the caller spawns on its runtime with a [`RowWriter`] (a
//! SQLite or PostgreSQL table, a counter, anything). During the run the loop only notes when
//! each call ended; when the run ends (with its result, its error, or dropped mid-way) it
//! builds the rows and sends them in one item: a model row from each [`ModelCallRecord`] (a
//! copy of a few words), a tool row from each [`TraceEntry`] (moved when neither the result
//! nor an error keeps the trace, copied otherwise). The history is never copied.
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

use agent_types::{AgentError, ErrorKind, TraceEntry};
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
    /// Why the call failed, when it did.
    pub error: Option<String>,
}

/// One tool call: the run's [`TraceEntry`] plus when it ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolCallRow {
    /// When the call ended, in microseconds since the Unix epoch.
    pub at_us: i64,
    /// Who and which run.
    pub context: Arc<RunContext>,
    /// The call's trace entry, as the run returns it in `trace`.
    pub entry: TraceEntry,
}

impl ToolCallRow {
    /// `ok`, or `error` when the call failed (the entry's `error` says why).
    pub fn outcome(&self) -> &'static str {
        if self.entry.error.is_some() {
            "error"
        } else {
            "ok"
        }
    }
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
    /// The most sends waiting for the writer (at least 1; default 1,024). The loop sends a
    /// round's rows (its model call's and its tool calls') as one.
    pub capacity: usize,
    /// A write takes the items waiting until it holds this many rows or more (at least 1;
    /// default 256); one run's rows are never split.
    pub batch: usize,
    /// What a full queue does.
    pub when_full: QueueFull,
    /// After a failed write (or a dropped row), the run's next enqueue fails the run with an
    /// ``appender` error (HTTP 500, like a failing conversation store). Off by default: accounting trouble is warned about and counted.
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

enum Item {
    Rows(Vec<AccountingRow>),
    Flush(oneshot::Sender<()>),
}

/// The sending half: cheap to clone, set on [`Options`](crate::Options).
#[derive(Clone)]
pub struct AccountingQueue {
    sender: mpsc::Sender<Item>,
    config: AccountingConfig,
    stats: Arc<AccountingStats>,
    provider: Arc<str>,
}

/// The receiving half: [`run`](Self::run) it with a writer on your runtime.
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
    /// process exits). Returns at once when the writer is gone.
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
        self.enqueue_all(vec![row]).await
    }

    /// Enqueues `rows` (in order) as one item: the loop sends a round's rows together, so a
    /// round costs one send and at most one wake-up of the writer. `Err` only with
    /// `fail_run` set and a failure seen.
    pub async fn enqueue_all(&self, rows: Vec<AccountingRow>) -> Result<(), AgentError> {
        if rows.is_empty() {
            return self.verdict();
        }
        let count = rows.len() as u64;
        let sent = match self.config.when_full {
            QueueFull::Wait => self.sender.send(Item::Rows(rows)).await.is_ok(),
            QueueFull::Drop => self.try_enqueue(rows),
        };
        if sent {
            self.stats.enqueued.fetch_add(count, Ordering::Relaxed);
        } else if self.sender.is_closed() {
            self.lost(count, "the accounting writer is gone: rows were dropped");
        }
        self.verdict()
    }

    /// Enqueues without waiting (a full queue drops, whatever the mode): for a run dropped
    /// mid-way, whose last rows cannot be awaited. `true` when sent.
    pub(crate) fn try_enqueue(&self, rows: Vec<AccountingRow>) -> bool {
        let count = rows.len() as u64;
        match self.sender.try_send(Item::Rows(rows)) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.lost(count, "the accounting queue is full: rows were dropped");
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.lost(count, "the accounting writer is gone: rows were dropped");
                false
            }
        }
    }

    fn lost(&self, count: u64, message: &'static str) {
        let dropped = self.stats.dropped.fetch_add(count, Ordering::Relaxed) + count;
        tracing::warn!(dropped, capacity = self.config.capacity, "{message}");
        self.stats.failed.store(true, Ordering::Relaxed);
    }

    fn verdict(&self) -> Result<(), AgentError> {
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
            push(item, &mut rows, &mut flushes);
            while rows.len() < self.batch {
                match self.receiver.try_recv() {
                    Ok(item) => push(item, &mut rows, &mut flushes),
                    Err(_) => break,
                }
            }
            if !rows.is_empty() {
                match writer.write(&rows).await {
                    Ok(()) => {
                        self.stats
                            .written
                            .fetch_add(rows.len() as u64, Ordering::Relaxed);
                    }
                    Err(error) => {
                        let failed = self.stats.failed_writes.fetch_add(1, Ordering::Relaxed) + 1;
                        self.stats.failed.store(true, Ordering::Relaxed);
                        tracing::warn!(
                            %error,
                            rows = rows.len(),
                            failed_writes = failed,
                            "an accounting write failed: its rows are lost"
                        );
                    }
                }
                rows.clear();
            }
            for done in flushes.drain(..) {
                let _ = done.send(());
            }
        }
    }
}

fn push(item: Item, rows: &mut Vec<AccountingRow>, flushes: &mut Vec<oneshot::Sender<()>>) {
    match item {
        Item::Rows(mut batch) => rows.append(&mut batch),
        Item::Flush(done) => flushes.push(done),
    }
}

/// Now, in microseconds since the Unix epoch.
pub(crate) fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}
