//! `--accounting FILE` (run, resume, demo) and `agentry usage FILE`: a `model_calls` and
//! `tool_calls` row per call appended to a SQLite file, and the table of what was used.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use agent_accounting::{GroupBy, SqliteSink, UsageGroup, UsageQuery};
use agent_loop::{AccountingConfig, AccountingQueue, Options, QueueFull};
use clap::ValueEnum;
use serde_json::json;

use crate::error::Error;
use crate::render::format_usd;

/// The writer of one command's rows.
pub(crate) struct Recorder {
    queue: AccountingQueue,
    path: std::path::PathBuf,
}

/// Sends `options`' rows to the SQLite file at `path` (created when missing), naming
/// `provider`. A one-shot command waits for room rather than drop a row.
///
/// # Errors
///
/// [`Error::Usage`] when the file cannot be opened or is not an accounting file.
pub(crate) async fn attach(
    options: Options,
    path: Option<&Path>,
    provider: &str,
) -> Result<(Options, Option<Recorder>), Error> {
    let Some(path) = path else {
        return Ok((options, None));
    };
    let sink = open(path, true).await?;
    let (queue, receiver) =
        AccountingQueue::new(AccountingConfig::default().with_when_full(QueueFull::Wait));
    // The writer thread ends with the last queue clone (or the process).
    sink.spawn_writer(receiver)
        .map_err(|error| Error::Usage(format!("{}: {error}", path.display())))?;
    let options = options.with_accounting(queue.clone().with_provider(provider));
    Ok((
        options,
        Some(Recorder {
            queue,
            path: path.to_path_buf(),
        }),
    ))
}

impl Recorder {
    /// Writes every queued row before the command exits; warns when rows were lost.
    pub(crate) async fn finish(self) {
        self.queue.flush().await;
        let stats = self.queue.stats();
        if stats.dropped() > 0 || stats.failed_writes() > 0 {
            eprintln!(
                "agentry: accounting {}: {} row(s) dropped, {} write(s) failed",
                self.path.display(),
                stats.dropped(),
                stats.failed_writes()
            );
        }
    }
}

async fn open(path: &Path, create: bool) -> Result<SqliteSink, Error> {
    if !create && !path.exists() {
        return Err(Error::Usage(format!(
            "{}: no such accounting file (write one with `agentry run --accounting {}`)",
            path.display(),
            path.display()
        )));
    }
    let owned = path.to_path_buf();
    tokio::task::spawn_blocking(move || SqliteSink::open(owned))
        .await
        .map_err(|error| Error::Other(error.to_string()))?
        .map_err(|error| Error::Usage(format!("{}: {error}", path.display())))
}

/// `--by` of `agentry usage`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum By {
    /// One line per model.
    #[default]
    Model,
    /// One line per session.
    Session,
    /// One line per UTC day.
    Day,
}

/// `agentry usage FILE`: the last `days` days of rows, grouped, as a table or JSON.
///
/// # Errors
///
/// [`Error::Usage`] for a missing or foreign file or a bad `--days`.
pub(crate) async fn usage(path: &Path, by: By, days: u32, json: bool) -> Result<(), Error> {
    if !(1..=366).contains(&days) {
        return Err(Error::Usage("--days must be 1 to 366".to_owned()));
    }
    let sink = open(path, false).await?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    let group_by = match by {
        By::Model => GroupBy::Model,
        By::Session => GroupBy::Session,
        By::Day => GroupBy::Day,
    };
    let to = now.saturating_add(1);
    // Rows of the CLI carry no tenant.
    let query = UsageQuery::new("", to - i64::from(days) * 86_400_000_000, to, group_by);
    let groups = tokio::task::spawn_blocking(move || sink.usage(&query))
        .await
        .map_err(|error| Error::Other(error.to_string()))?
        .map_err(|error| Error::Usage(format!("{}: {error}", path.display())))?;
    let text = if json {
        json!({"group_by": group_by, "days": days, "data": groups}).to_string()
    } else {
        table(by, &groups)
    };
    println!("{text}");
    Ok(())
}

fn table(by: By, groups: &[UsageGroup]) -> String {
    let head = match by {
        By::Model => "model",
        By::Session => "session",
        By::Day => "day (UTC)",
    };
    let mut rows: Vec<[String; 9]> = vec![[
        head.to_owned(),
        "calls".to_owned(),
        "failed".to_owned(),
        "input".to_owned(),
        "output".to_owned(),
        "cache read".to_owned(),
        "cache write".to_owned(),
        "reasoning".to_owned(),
        "cost".to_owned(),
    ]];
    let mut total = UsageGroup::default();
    for group in groups {
        rows.push(line(&group.key, group));
        total.model_calls += group.model_calls;
        total.failed_calls += group.failed_calls;
        total.input_tokens += group.input_tokens;
        total.output_tokens += group.output_tokens;
        total.cache_read_tokens += group.cache_read_tokens;
        total.cache_write_5m_tokens += group.cache_write_5m_tokens;
        total.cache_write_1h_tokens += group.cache_write_1h_tokens;
        total.reasoning_tokens += group.reasoning_tokens;
        total.cost_usd += group.cost_usd;
    }
    if groups.is_empty() {
        return "no model calls recorded in this period".to_owned();
    }
    rows.push(line("total", &total));
    let mut widths = [0; 9];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut cells = Vec::with_capacity(9);
        for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
            if i == 0 {
                cells.push(format!("{cell:<width$}"));
            } else {
                cells.push(format!("{cell:>width$}"));
            }
        }
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out.pop();
    out
}

fn line(key: &str, group: &UsageGroup) -> [String; 9] {
    [
        key.to_owned(),
        group.model_calls.to_string(),
        group.failed_calls.to_string(),
        group.input_tokens.to_string(),
        group.output_tokens.to_string(),
        group.cache_read_tokens.to_string(),
        (group.cache_write_5m_tokens + group.cache_write_1h_tokens).to_string(),
        group.reasoning_tokens.to_string(),
        format_usd(group.cost_usd),
    ]
}
