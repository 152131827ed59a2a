//! Showing a run: one JSON event per line (`--json`), or text for people.
//!
//! For people, the model's answer goes to stdout as it streams, so `agentry run … > answer.txt`
//! keeps only the answer; everything else (reasoning, one line per tool call, the tables, the
//! final status) goes to stderr. On a terminal each running tool call gets a spinner and the
//! lines are coloured (unless `NO_COLOR` is set); otherwise nothing is redrawn or coloured, so
//! logs and pipes get plain lines.

use std::collections::HashMap;
use std::io::{self, IsTerminal, Write};
use std::time::{Duration, Instant};

use agent_loop::ModelCallRecord;
use agent_types::{
    AgentEvent, ErrorKind, FileSource, ImageSource, Message, ToolCallId, ToolResultBlock,
    TraceEntry, Usage,
};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The longest argument text shown on a tool line.
const MAX_ARGUMENTS_SHOWN: usize = 80;

/// Writes a run's events and summary.
pub(crate) struct Renderer<O: Write, E: Write> {
    json: bool,
    out: O,
    err: E,
    paint: Paint,
    spinners: Option<MultiProgress>,
    running: HashMap<ToolCallId, Running>,
    /// Whether the last thing written to `out` ended a line.
    out_at_line_start: bool,
    /// Whether the last thing written to `err` ended a line.
    err_at_line_start: bool,
    refusal_open: bool,
    /// The run asks for a structured answer: stdout gets only the validated value, not the
    /// text the model streamed on the way.
    structured: bool,
}

/// A tool call between its start and end events.
struct Running {
    started: Instant,
    label: String,
    spinner: Option<ProgressBar>,
}

impl Renderer<io::BufWriter<io::Stdout>, io::Stderr> {
    /// A renderer on the process's stdout and stderr; decorations only on a terminal.
    ///
    /// stdout is buffered and flushed once per event (an event's JSON takes many small
    /// writes); stderr is not, so its lines keep their order with the spinners' drawing.
    pub(crate) fn stdio(json: bool) -> Self {
        let terminal = io::stderr().is_terminal();
        let colour = terminal && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
        let out = io::BufWriter::new(io::stdout());
        let mut renderer = Self::new(json, out, io::stderr(), colour);
        if terminal && !json {
            renderer.spinners = Some(MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        }
        renderer
    }
}

impl<O: Write, E: Write> Renderer<O, E> {
    /// A renderer on any writers, without spinners.
    pub(crate) fn new(json: bool, out: O, err: E, colour: bool) -> Self {
        Self {
            json,
            out,
            err,
            paint: Paint(colour),
            spinners: None,
            running: HashMap::new(),
            out_at_line_start: true,
            err_at_line_start: true,
            refusal_open: false,
            structured: false,
        }
    }

    /// Keeps stdout for the validated structured answer alone (`--output-schema`).
    pub(crate) fn structured(&mut self) {
        self.structured = true;
    }

    /// Whether events go out as JSON lines.
    pub(crate) fn is_json(&self) -> bool {
        self.json
    }

    /// A line for people on stderr (nothing in JSON mode, where stdout is only events).
    pub(crate) fn note(&mut self, line: &str) -> io::Result<()> {
        if self.json {
            return Ok(());
        }
        self.end_out_line()?;
        writeln!(self.err, "{line}")?;
        self.err_at_line_start = true;
        Ok(())
    }

    /// A dimmed line for people on stderr.
    pub(crate) fn faint(&mut self, line: &str) -> io::Result<()> {
        let line = self.paint.dim(line);
        self.note(&line)
    }

    /// Something the caller must act on (pending calls), as one JSON line on stdout in
    /// human mode; JSON mode already carried it in an event.
    pub(crate) fn data(&mut self, value: &serde_json::Value) -> io::Result<()> {
        if self.json {
            return Ok(());
        }
        self.end_out_line()?;
        writeln!(self.out, "{value}")?;
        self.out.flush()
    }

    /// Shows one event.
    pub(crate) fn event(&mut self, event: &AgentEvent) -> io::Result<()> {
        if self.json {
            serde_json::to_writer(&mut self.out, event)?;
            self.out.write_all(b"\n")?;
            return self.out.flush();
        }
        match event {
            // stdout is for the validated value alone; a refusal is told on stderr by the
            // error that ends the run, which quotes it.
            AgentEvent::TextDelta { .. }
            | AgentEvent::TextEnd { .. }
            | AgentEvent::RefusalDelta { .. }
                if self.structured =>
            {
                Ok(())
            }
            AgentEvent::TextDelta { delta } => self.answer(delta, false),
            AgentEvent::TextEnd { .. } => self.end_out_line(),
            AgentEvent::Output { value } => {
                self.end_out_line()?;
                serde_json::to_writer(&mut self.out, value)?;
                self.out.write_all(b"\n")?;
                self.out.flush()
            }
            AgentEvent::RefusalDelta { delta } => {
                if !self.refusal_open {
                    self.refusal_open = true;
                    let label = self.paint.red("refused: ");
                    self.answer(&label, true)?;
                }
                self.answer(delta, false)
            }
            AgentEvent::MessageEnd { .. } if self.refusal_open => {
                self.refusal_open = false;
                self.end_out_line()
            }
            AgentEvent::ThinkingStart => {
                self.end_out_line()?;
                let label = self.paint.dim("thinking: ");
                write!(self.err, "{label}")?;
                self.err_at_line_start = false;
                Ok(())
            }
            AgentEvent::ThinkingDelta { delta } => {
                let delta = self.paint.dim(delta);
                write!(self.err, "{delta}")?;
                self.err_at_line_start = false;
                self.err.flush()
            }
            AgentEvent::ThinkingEnd { thinking } => {
                if thinking.is_empty() {
                    let redacted = self.paint.dim("(redacted by the provider)");
                    write!(self.err, "{redacted}")?;
                }
                self.end_err_line()
            }
            AgentEvent::ToolExecutionStart {
                call_id,
                tool_name,
                arguments,
            } => self.tool_started(call_id, tool_name, arguments),
            AgentEvent::ToolExecutionDelta { call_id, delta } => {
                if let Some(Running {
                    label,
                    spinner: Some(spinner),
                    ..
                }) = self.running.get(call_id)
                {
                    spinner.set_message(format!("{label} · {}", one_line(delta, 60)));
                }
                Ok(())
            }
            AgentEvent::ToolExecutionEnd {
                call_id,
                output,
                is_error,
                truncated,
                blocks,
                ..
            } => self.tool_ended(call_id, output, blocks, *is_error, *truncated),
            AgentEvent::AwaitingToolExecution { tool_calls, .. } => {
                let names: Vec<&str> = tool_calls.iter().map(|call| call.name.as_str()).collect();
                let line = format!(
                    "waiting for {} remote tool call(s): {}",
                    tool_calls.len(),
                    names.join(", ")
                );
                let line = self.paint.yellow(&line);
                self.note(&line)
            }
            AgentEvent::ApprovalRequested { tool_calls, .. } => {
                let names: Vec<&str> = tool_calls.iter().map(|call| call.name.as_str()).collect();
                let line = format!(
                    "waiting for approval of {} tool call(s): {}",
                    tool_calls.len(),
                    names.join(", ")
                );
                let line = self.paint.yellow(&line);
                self.note(&line)
            }
            AgentEvent::Error { error } => {
                let line = self.paint.red(&format!("error: {error}"));
                self.note(&line)?;
                if let ErrorKind::InvalidOutput { output } = &error.kind {
                    // What was wrong, each problem on its line, then what the model sent.
                    for problem in &output.errors {
                        self.note(&format!("  {problem}"))?;
                    }
                    let raw = self
                        .paint
                        .dim(&format!("  answer: {}", one_line(&output.raw, 400)));
                    self.note(&raw)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Answer text to stdout, flushed so it appears as it streams.
    fn answer(&mut self, text: &str, styled: bool) -> io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        if !self.err_at_line_start {
            self.end_err_line()?;
        }
        self.out.write_all(text.as_bytes())?;
        if !styled {
            self.out_at_line_start = text.ends_with('\n');
        }
        self.out.flush()
    }

    fn end_out_line(&mut self) -> io::Result<()> {
        if !self.out_at_line_start {
            self.out.write_all(b"\n")?;
            self.out.flush()?;
            self.out_at_line_start = true;
        }
        Ok(())
    }

    fn end_err_line(&mut self) -> io::Result<()> {
        if !self.err_at_line_start {
            self.err.write_all(b"\n")?;
            self.err_at_line_start = true;
        }
        Ok(())
    }

    fn tool_started(
        &mut self,
        call_id: &ToolCallId,
        tool_name: &str,
        arguments: &serde_json::Value,
    ) -> io::Result<()> {
        self.end_out_line()?;
        self.end_err_line()?;
        let label = format!(
            "{} {}",
            self.paint.bold(tool_name),
            one_line(&arguments.to_string(), MAX_ARGUMENTS_SHOWN)
        );
        let spinner = self.spinners.as_ref().map(|spinners| {
            let spinner = spinners.add(ProgressBar::new_spinner());
            spinner.set_style(
                ProgressStyle::with_template("  {spinner} {msg} {elapsed:.dim}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            spinner.set_message(label.clone());
            spinner.enable_steady_tick(Duration::from_millis(80));
            spinner
        });
        self.running.insert(
            call_id.clone(),
            Running {
                started: Instant::now(),
                label,
                spinner,
            },
        );
        Ok(())
    }

    fn tool_ended(
        &mut self,
        call_id: &ToolCallId,
        output: &str,
        blocks: &[ToolResultBlock],
        is_error: bool,
        truncated: bool,
    ) -> io::Result<()> {
        let Some(running) = self.running.remove(call_id) else {
            return Ok(());
        };
        let took = format_duration(running.started.elapsed());
        let line = if is_error {
            format!(
                "  {} {} · {took} · {}",
                self.paint.red("✗"),
                running.label,
                self.paint.red(&one_line(output, 120))
            )
        } else {
            let cut = if truncated { " (truncated)" } else { "" };
            let mut shown = if output.is_empty() && !blocks.is_empty() {
                String::new()
            } else {
                format_bytes(output.len() as u64)
            };
            for block in blocks {
                if !shown.is_empty() {
                    shown.push(' ');
                }
                shown.push_str(&block_label(block));
            }
            format!(
                "  {} {} · {took} · {shown}{cut}",
                self.paint.green("✓"),
                running.label,
            )
        };
        match (running.spinner, &self.spinners) {
            (Some(spinner), Some(spinners)) => {
                spinner.finish_and_clear();
                spinners.remove(&spinner);
                spinners.println(line)
            }
            _ => {
                writeln!(self.err, "{line}")?;
                self.err_at_line_start = true;
                Ok(())
            }
        }
    }

    /// The per-call accounting table and the trace, after the run.
    pub(crate) fn summary(
        &mut self,
        records: &[ModelCallRecord],
        trace: &[TraceEntry],
    ) -> io::Result<()> {
        if self.json {
            return Ok(());
        }
        self.end_out_line()?;
        self.end_err_line()?;
        if !records.is_empty() {
            writeln!(self.err)?;
            let table = calls_table(records);
            write!(self.err, "{table}")?;
        }
        if !trace.is_empty() {
            writeln!(self.err)?;
            let table = trace_table(trace);
            write!(self.err, "{table}")?;
        }
        self.err.flush()
    }
}

/// The model-call table: one row per call and a total.
fn calls_table(records: &[ModelCallRecord]) -> String {
    let mut table = Table::new(&[
        ("call", Left),
        ("model", Left),
        ("input", Right),
        ("output", Right),
        ("cache read", Right),
        ("cache write", Right),
        ("first event", Right),
        ("total", Right),
        ("cost", Right),
    ]);
    let mut total = Usage::default();
    let mut cost = None::<f64>;
    for (number, record) in records.iter().enumerate() {
        let usage = record.usage.unwrap_or_default();
        total += usage;
        if let Some(usd) = record.cost_usd {
            cost = Some(cost.unwrap_or(0.0) + usd);
        }
        table.row(vec![
            (number + 1).to_string(),
            record.model.clone(),
            count(usage.input_tokens),
            count(usage.output_tokens),
            count(usage.cache_read_tokens),
            count(cache_writes(&usage)),
            format_duration(record.time_to_first_event),
            format_duration(record.latency),
            record.cost_usd.map_or_else(|| "–".into(), format_usd),
        ]);
    }
    table.row(vec![
        "total".into(),
        String::new(),
        count(total.input_tokens),
        count(total.output_tokens),
        count(total.cache_read_tokens),
        count(cache_writes(&total)),
        String::new(),
        String::new(),
        cost.map_or_else(|| "–".into(), format_usd),
    ]);
    table.render()
}

/// The trace table: one row per tool call.
fn trace_table(trace: &[TraceEntry]) -> String {
    let mut table = Table::new(&[
        ("round", Right),
        ("tool", Left),
        ("call id", Left),
        ("duration", Right),
        ("result", Right),
        ("sent", Right),
        ("outcome", Left),
    ]);
    for entry in trace {
        let outcome = match &entry.error {
            Some(error) => format!("error: {}", one_line(error, 60)),
            None if entry.truncated => "ok, truncated".into(),
            None if !entry.repairs.is_empty() => format!("ok, {} repair(s)", entry.repairs.len()),
            None => "ok".into(),
        };
        table.row(vec![
            entry.iteration.to_string(),
            entry.tool_name.clone(),
            entry.call_id.to_string(),
            format_duration(entry.duration),
            format_bytes(entry.result_bytes),
            format_bytes(entry.sent_bytes),
            outcome,
        ]);
    }
    table.render()
}

fn cache_writes(usage: &Usage) -> Option<u64> {
    match (usage.cache_write_5m_tokens, usage.cache_write_1h_tokens) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

fn count(value: Option<u64>) -> String {
    value.map_or_else(|| "–".into(), |value| value.to_string())
}

/// How a column's cells line up.
#[derive(Debug, Clone, Copy)]
enum Align {
    Left,
    Right,
}

use Align::{Left, Right};

/// A plain-text table with a header row.
struct Table {
    columns: Vec<Align>,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(columns: &[(&str, Align)]) -> Self {
        Self {
            columns: columns.iter().map(|&(_, align)| align).collect(),
            header: columns.iter().map(|&(name, _)| name.to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn render(&self) -> String {
        let mut widths: Vec<usize> = self
            .header
            .iter()
            .map(|cell| cell.chars().count())
            .collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut text = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::from(" ");
            for ((cell, width), align) in row.iter().zip(&widths).zip(&self.columns) {
                let pad = width - cell.chars().count();
                line.push(' ');
                match align {
                    Left => {
                        line.push_str(cell);
                        line.extend(std::iter::repeat_n(' ', pad));
                    }
                    Right => {
                        line.extend(std::iter::repeat_n(' ', pad));
                        line.push_str(cell);
                    }
                }
                line.push(' ');
            }
            text.push_str(line.trim_end());
            text.push('\n');
        }
        text
    }
}

/// Text on one line, cut to `max` characters with an ellipsis.
fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// `0.42 ms`, `12.3 ms`, `1.25 s`.
pub(crate) fn format_duration(duration: Duration) -> String {
    let ms = duration.as_secs_f64() * 1000.0;
    if ms < 1.0 {
        format!("{ms:.2} ms")
    } else if ms < 1000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{:.2} s", ms / 1000.0)
    }
}

/// A tool result block as one short bracket: `[image/png 12.3 KiB]`, `[application/pdf
/// report.pdf 1.2 MiB]`, `[image https://…]`, `[json 52 B]`, `[text 80 B]`.
pub(crate) fn block_label(block: &ToolResultBlock) -> String {
    match block {
        ToolResultBlock::Text { text } => format!("[text {}]", format_bytes(text.len() as u64)),
        ToolResultBlock::Json { value } => {
            format!("[json {}]", format_bytes(value.to_string().len() as u64))
        }
        ToolResultBlock::Image { source } => match source {
            ImageSource::Base64 { media_type, data } => {
                format!("[{media_type} {}]", format_bytes(decoded_len(data)))
            }
            ImageSource::Url { url } => format!("[image {}]", one_line(url, 60)),
        },
        ToolResultBlock::File(file) => {
            let name = file
                .filename
                .as_deref()
                .map(|name| format!(" {}", one_line(name, 40)))
                .unwrap_or_default();
            let place = match &file.source {
                FileSource::Base64 { data } => format_bytes(decoded_len(data)),
                FileSource::Url { url } => one_line(url, 60),
                FileSource::FileId { file_id } => format!("file {}", one_line(file_id, 40)),
            };
            format!("[{}{name} {place}]", file.media_type)
        }
    }
}

/// How many bytes base64 text stands for, without decoding it.
fn decoded_len(data: &str) -> u64 {
    let padding = data.bytes().rev().take_while(|byte| *byte == b'=').count();
    ((data.len() / 4 * 3).saturating_sub(padding)) as u64
}

/// `92 B`, `1.4 KiB`, `2.0 MiB`.
pub(crate) fn format_bytes(bytes: u64) -> String {
    // Display only: the precision f64 loses above 2^53 bytes does not matter here.
    #[allow(clippy::cast_precision_loss)]
    let value = bytes as f64;
    if bytes < 1024 {
        format!("{bytes} B")
    } else if bytes < 1024 * 1024 {
        format!("{:.1} KiB", value / 1024.0)
    } else {
        format!("{:.1} MiB", value / (1024.0 * 1024.0))
    }
}

/// `$0.000853` below a cent, `$0.1234` above.
pub(crate) fn format_usd(usd: f64) -> String {
    if usd < 0.01 {
        format!("${usd:.6}")
    } else {
        format!("${usd:.4}")
    }
}

/// The history's count of tool calls, for the status line.
pub(crate) fn tool_calls_in(messages: &[Message]) -> usize {
    messages
        .iter()
        .filter(|message| matches!(message, Message::Tool(_)))
        .count()
}

/// ANSI styling, or none.
#[derive(Debug, Clone, Copy)]
struct Paint(bool);

impl Paint {
    fn wrap(self, code: &str, text: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    fn dim(self, text: &str) -> String {
        self.wrap("2", text)
    }

    fn bold(self, text: &str) -> String {
        self.wrap("1", text)
    }

    fn red(self, text: &str) -> String {
        self.wrap("31", text)
    }

    fn green(self, text: &str) -> String {
        self.wrap("32", text)
    }

    fn yellow(self, text: &str) -> String {
        self.wrap("33", text)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use agent_types::{Role, StopReason};
    use serde_json::json;

    fn render(json_mode: bool, events: &[AgentEvent]) -> (String, String) {
        let mut renderer = Renderer::new(json_mode, Vec::new(), Vec::new(), false);
        for event in events {
            renderer.event(event).unwrap();
        }
        (
            String::from_utf8(renderer.out).unwrap(),
            String::from_utf8(renderer.err).unwrap(),
        )
    }

    fn tool_round() -> Vec<AgentEvent> {
        vec![
            AgentEvent::MessageStart {
                role: Role::Assistant,
            },
            AgentEvent::TextStart,
            AgentEvent::TextDelta {
                delta: "Let me ".into(),
            },
            AgentEvent::TextDelta {
                delta: "check.".into(),
            },
            AgentEvent::TextEnd {
                text: "Let me check.".into(),
            },
            AgentEvent::ToolExecutionStart {
                call_id: "c1".into(),
                tool_name: "calculator".into(),
                arguments: json!({"expression": "1 + 1"}),
            },
            AgentEvent::ToolExecutionEnd {
                call_id: "c1".into(),
                tool_name: "calculator".into(),
                output: r#"{"result":2}"#.into(),
                is_error: false,
                truncated: false,
                blocks: Vec::new(),
            },
            AgentEvent::ToolExecutionStart {
                call_id: "c2".into(),
                tool_name: "read_file".into(),
                arguments: json!({"path": "../etc/passwd"}),
            },
            AgentEvent::ToolExecutionEnd {
                call_id: "c2".into(),
                tool_name: "read_file".into(),
                output: "path is outside the allowed directory".into(),
                is_error: true,
                truncated: false,
                blocks: Vec::new(),
            },
        ]
    }

    #[test]
    fn tool_results_with_blocks_show_each_block_instead_of_dropping_it() {
        use agent_types::FileBlock;
        // 12.3 KiB of image: 12_600 bytes is 16_800 base64 characters.
        let image = "A".repeat(16_800);
        let events = vec![
            AgentEvent::ToolExecutionStart {
                call_id: "c1".into(),
                tool_name: "screenshot".into(),
                arguments: json!({}),
            },
            AgentEvent::ToolExecutionEnd {
                call_id: "c1".into(),
                tool_name: "screenshot".into(),
                output: "the page".into(),
                is_error: false,
                truncated: false,
                blocks: vec![
                    ToolResultBlock::Image {
                        source: ImageSource::Base64 {
                            media_type: "image/png".into(),
                            data: image,
                        },
                    },
                    ToolResultBlock::File(
                        FileBlock::base64("application/pdf", "JVBERi0xLjcKJSVFT0YK")
                            .with_filename("report.pdf"),
                    ),
                    ToolResultBlock::Json {
                        value: json!({"ok": true}),
                    },
                    ToolResultBlock::Image {
                        source: ImageSource::Url {
                            url: "https://example.com/a.png".into(),
                        },
                    },
                ],
            },
            AgentEvent::ToolExecutionStart {
                call_id: "c2".into(),
                tool_name: "chart".into(),
                arguments: json!({}),
            },
            AgentEvent::ToolExecutionEnd {
                call_id: "c2".into(),
                tool_name: "chart".into(),
                output: String::new(),
                is_error: false,
                truncated: true,
                blocks: vec![ToolResultBlock::Image {
                    source: ImageSource::Base64 {
                        media_type: "image/jpeg".into(),
                        data: "/9j/4A==".into(),
                    },
                }],
            },
        ];
        let (_, err) = render(false, &events);
        let lines: Vec<&str> = err.lines().collect();
        assert!(
            lines[0].ends_with(
                " · 8 B [image/png 12.3 KiB] [application/pdf report.pdf 15 B] [json 11 B] \
                 [image https://example.com/a.png]"
            ),
            "{err}"
        );
        assert!(
            lines[1].ends_with(" · [image/jpeg 4 B] (truncated)"),
            "{err}"
        );
    }

    #[test]
    fn a_structured_run_prints_only_the_validated_value_and_the_problems_on_failure() {
        let mut renderer = Renderer::new(false, Vec::new(), Vec::new(), false);
        renderer.structured();
        let error = agent_types::AgentError::new(
            ErrorKind::InvalidOutput {
                output: Box::new(agent_types::InvalidOutput {
                    raw: "{\"n\": \"x\"}".into(),
                    errors: vec!["/n: \"x\" is not of type \"integer\"".into()],
                }),
            },
            "the answer does not match the output schema",
        );
        for event in [
            AgentEvent::TextDelta {
                delta: "{\"n\": 1}".into(),
            },
            AgentEvent::TextEnd {
                text: "{\"n\": 1}".into(),
            },
            AgentEvent::Output {
                value: json!({"n": 1}),
            },
            AgentEvent::Error { error },
        ] {
            renderer.event(&event).unwrap();
        }
        let out = String::from_utf8(renderer.out).unwrap();
        let err = String::from_utf8(renderer.err).unwrap();
        assert_eq!(out, "{\"n\":1}\n");
        assert!(
            err.contains("\n  /n: \"x\" is not of type \"integer\"\n"),
            "{err}"
        );
        assert!(err.contains("  answer: {\"n\": \"x\"}"), "{err}");
    }

    #[test]
    fn people_get_the_answer_on_stdout_and_one_line_per_tool_on_stderr() {
        let (out, err) = render(false, &tool_round());
        assert_eq!(out, "Let me check.\n");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 2, "{err}");
        assert!(lines[0].starts_with("  ✓ calculator {\"expression\":\"1 + 1\"} · "));
        assert!(lines[0].ends_with(" · 12 B"), "{}", lines[0]);
        assert!(lines[1].starts_with("  ✗ read_file {\"path\":\"../etc/passwd\"} · "));
        assert!(lines[1].ends_with("path is outside the allowed directory"));
    }

    #[test]
    fn json_mode_writes_one_parsable_event_per_line_and_nothing_else() {
        let events = tool_round();
        let (out, err) = render(true, &events);
        assert!(err.is_empty());
        let parsed: Vec<AgentEvent> = out
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(parsed, events);
    }

    #[test]
    fn a_refusal_is_labelled_and_ends_its_line() {
        let (out, _) = render(
            false,
            &[
                AgentEvent::RefusalDelta {
                    delta: "I can't help with that.".into(),
                },
                AgentEvent::MessageEnd {
                    message: Message::Assistant(agent_types::AssistantMessage {
                        stop_reason: Some(StopReason::ContentFilter),
                        ..Default::default()
                    }),
                    cost_usd: None,
                },
            ],
        );
        assert_eq!(out, "refused: I can't help with that.\n");
    }

    #[test]
    fn tables_align_and_total() {
        let record = |input, output, cost| ModelCallRecord {
            iteration: 0,
            model: "m".into(),
            usage: Some(Usage {
                input_tokens: Some(input),
                output_tokens: Some(output),
                ..Usage::default()
            }),
            cost_usd: cost,
            latency: Duration::from_millis(3),
            time_to_first_event: Duration::from_micros(500),
            tool_calls: 0,
            stop_reason: StopReason::Stop,
            response_id: None,
        };
        let table = calls_table(&[record(386, 74, Some(0.0002)), record(545, 23, Some(0.0003))]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[3].contains("931"), "{table}");
        assert!(lines[3].contains("97"), "{table}");
        assert!(lines[3].ends_with("$0.000500"), "{table}");
        let widths: Vec<usize> = lines.iter().map(|line| line.chars().count()).collect();
        assert!(widths.windows(2).all(|pair| pair[0] == pair[1]), "{table}");
    }

    #[test]
    fn sizes_durations_and_dollars_read_well() {
        assert_eq!(format_bytes(92), "92 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_duration(Duration::from_micros(420)), "0.42 ms");
        assert_eq!(format_duration(Duration::from_millis(1250)), "1.25 s");
        assert_eq!(format_usd(0.000_853), "$0.000853");
        assert_eq!(format_usd(0.5), "$0.5000");
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("abcdef", 4), "abc…");
    }

    #[test]
    fn a_sub_agents_events_are_one_json_line_each_and_stay_out_of_the_answer() {
        let nested = |event| AgentEvent::SubAgent {
            call_id: "c1".into(),
            path: vec!["researcher".into()],
            event: Box::new(event),
        };
        let events = vec![
            nested(AgentEvent::TextDelta {
                delta: "child text".into(),
            }),
            AgentEvent::TextDelta {
                delta: "The answer.".into(),
            },
        ];
        let (out, _) = render(true, &events);
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(
            lines[0],
            json!({"type": "sub_agent", "call_id": "c1", "path": ["researcher"],
                   "event": {"type": "text_delta", "delta": "child text"}})
        );
        // People see the run's own answer; the sub-agent's text is not part of it.
        let (out, _) = render(false, &events);
        assert_eq!(out, "The answer.");
    }
}
