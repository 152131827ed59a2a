//! `agentry run --report run.html`: one self-contained HTML page of the run (conversation,
//! timeline, usage), drawn by the server console's own renderer
//! ([`agent_server::console::report_page`]) from the run's data embedded as JSON.
//!
//! The timeline comes from the loop's accounting rows (one per model call and per tool call,
//! with their timings), collected in memory for this one command.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use agent_loop::{
    AccountingConfig, AccountingQueue, AccountingRow, Options, QueueFull, RowWriter, Session,
    WriteFuture,
};
use serde_json::json;

use crate::error::Error;

/// The rows of one command's run, kept for its report.
pub(crate) struct Report {
    queue: AccountingQueue,
    rows: Arc<Mutex<Vec<AccountingRow>>>,
    path: PathBuf,
}

/// Keeps the rows in memory.
struct Memory(Arc<Mutex<Vec<AccountingRow>>>);

impl RowWriter for Memory {
    fn write<'a>(&'a mut self, rows: &'a [AccountingRow]) -> WriteFuture<'a> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(rows);
        Box::pin(async { Ok(()) })
    }
}

/// With `--report`, sends `options`' accounting rows to memory for the page (`--report` and
/// `--accounting` are exclusive: a run has one accounting queue).
pub(crate) fn attach(
    options: Options,
    path: Option<&Path>,
    provider: &str,
) -> (Options, Option<Report>) {
    let Some(path) = path else {
        return (options, None);
    };
    // A one-shot command waits for room rather than lose a row of its report.
    let (queue, receiver) =
        AccountingQueue::new(AccountingConfig::default().with_when_full(QueueFull::Wait));
    let rows = Arc::new(Mutex::new(Vec::new()));
    tokio::spawn(receiver.run(Memory(Arc::clone(&rows))));
    let options = options.with_accounting(queue.clone().with_provider(provider));
    (
        options,
        Some(Report {
            queue,
            rows,
            path: path.to_path_buf(),
        }),
    )
}

impl Report {
    /// Writes the page of `session` as the run left it.
    ///
    /// # Errors
    ///
    /// [`Error::Usage`] when the file cannot be written.
    pub(crate) async fn write(self, session: &Session, provider: &str) -> Result<(), Error> {
        self.queue.flush().await;
        let rows = std::mem::take(&mut *self.rows.lock().unwrap_or_else(PoisonError::into_inner));
        let mut models = Vec::new();
        let mut tools = Vec::new();
        for row in &rows {
            match row {
                AccountingRow::ModelCall(row) => {
                    models.push(agent_server::console::timeline_row_model(row));
                }
                AccountingRow::ToolCall(row) => {
                    tools.push(agent_server::console::timeline_row_tool(row));
                }
            }
        }
        let written_at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_millis());
        let data = json!({
            "session": {
                "id": session.id,
                "model": session.model,
                "status": session.status,
                "system": session.system,
                "messages": session.messages,
                "usage": session.usage,
                "cost_usd": session.cost_usd,
            },
            "timeline": {"model_calls": models, "tool_calls": tools},
            "provider": provider,
            "written_at_ms": u64::try_from(written_at_ms).unwrap_or(u64::MAX),
        });
        let page = agent_server::console::report_page(&data);
        tokio::fs::write(&self.path, page).await.map_err(|error| {
            Error::Usage(format!(
                "cannot write the report {}: {error}",
                self.path.display()
            ))
        })
    }
}
