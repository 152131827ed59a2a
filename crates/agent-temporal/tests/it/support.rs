//! The test model, tools and worker processes.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::Options;
use agent_tools::{Registry, Tool, ToolError};
use agent_types::{Backend, BackendStream, Capabilities, Message, ModelRequest, ToolCall, Usage};
use serde_json::{Value, json};

/// The dev server's address, or `None` (skip) outside CI when it is not running.
pub(crate) fn temporal_addr() -> Option<String> {
    if let Ok(addr) = std::env::var("AGENTRY_TEST_TEMPORAL_ADDR") {
        return Some(addr);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "AGENTRY_TEST_TEMPORAL_ADDR is not set: CI must run `eval \"$(bash .ci/temporal.sh start)\"` first"
    );
    eprintln!(
        "skipped: AGENTRY_TEST_TEMPORAL_ADDR is not set (run `eval \"$(bash .ci/temporal.sh start)\"`)"
    );
    None
}

pub(crate) fn namespace() -> String {
    std::env::var("AGENTRY_TEST_TEMPORAL_NAMESPACE").unwrap_or_else(|_| "default".to_string())
}

/// A task queue (and workflow id prefix) no other test shares.
pub(crate) fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{name}-{}-{nanos}", std::process::id())
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        ..Usage::default()
    }
}

/// The recorded three-round conversation: add, then multiply (slowly), then the answer.
pub(crate) fn turns() -> Vec<ScriptedTurn> {
    vec![
        ScriptedTurn::tool_call("call_1", "add", json!({"a": 2, "b": 3}))
            .with_usage(usage(100, 20)),
        ScriptedTurn::tool_call("call_2", "multiply", json!({"a": 5, "b": 4}))
            .with_usage(usage(140, 22)),
        ScriptedTurn::text("2 + 3 = 5, and 5 × 4 = 20.").with_usage(usage(180, 15)),
    ]
}

/// A model that answers by the round it is in (how many assistant turns the history holds),
/// the same in every process, and logs each call to `AGENTRY_TEMPORAL_MODEL_LOG`: a restarted
/// worker picks up where the run is, and the log shows which rounds were sent again.
pub(crate) struct RoundModel {
    rounds: Vec<ScriptedBackend>,
    log: Option<PathBuf>,
}

impl RoundModel {
    pub(crate) fn new(log: Option<PathBuf>) -> Self {
        Self::with_turns(turns(), log)
    }

    pub(crate) fn with_turns(turns: Vec<ScriptedTurn>, log: Option<PathBuf>) -> Self {
        Self {
            rounds: turns
                .into_iter()
                .map(|turn| ScriptedBackend::cycle([turn]))
                .collect(),
            log,
        }
    }
}

/// A tool guardrail: `add` with `a = 2` is rewritten to `a = 3` (a check on the rewritten call
/// passes it, so a second check would lose the rewrite), `multiply` with `a = 5` is denied.
pub(crate) struct ArithmeticRules;

impl agent_loop::ToolGuardrail for ArithmeticRules {
    fn name(&self) -> &str {
        "arithmetic-rules"
    }

    fn before_call(&self, call: &agent_loop::CallCheck<'_>) -> agent_loop::CallVerdict {
        match (call.arguments["a"].as_i64(), call.arguments["b"].as_i64()) {
            (Some(2), Some(b)) => agent_loop::CallVerdict::Rewrite {
                arguments: json!({"a": 3, "b": b}),
                reason: "a starts at 3".into(),
            },
            (Some(5), _) => agent_loop::CallVerdict::Deny("no fives".into()),
            _ => agent_loop::CallVerdict::Allow,
        }
    }
}

/// The structured answer the structured runs ask for.
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Total {
    #[allow(dead_code)]
    total: i64,
}

/// A structured run: a tool round, an answer that is not JSON (sent back with the problems),
/// then the valid answer.
pub(crate) fn structured_turns() -> Vec<ScriptedTurn> {
    vec![
        ScriptedTurn::tool_call("call_1", "add", json!({"a": 2, "b": 3}))
            .with_usage(usage(100, 20)),
        ScriptedTurn::text("The total is 5.").with_usage(usage(140, 8)),
        ScriptedTurn::text(r#"{"total": 5}"#).with_usage(usage(190, 6)),
    ]
}

/// Options asking for [`Total`] in the prompt (the `prompted` strategy).
pub(crate) fn structured(options: Options) -> Options {
    let mut options = options.with_output::<Total>();
    options.output_strategy = agent_loop::OutputStrategy::Prompted;
    options
}

impl RoundModel {
    /// With the second round's call failing with `error` (every attempt).
    pub(crate) fn failing_round_two(mut self, error: agent_types::BackendError) -> Self {
        self.rounds[1] = ScriptedBackend::cycle([ScriptedTurn::new().fail_with(error)]);
        self
    }
}

impl Backend for RoundModel {
    fn capabilities(&self) -> Capabilities {
        self.rounds[0].capabilities()
    }

    fn stream<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        let round = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Assistant(_)))
            .count()
            .min(self.rounds.len() - 1);
        if let Some(log) = &self.log {
            append(log, &format!("round {}", round + 1));
        }
        self.rounds[round].stream(request)
    }
}

fn append(path: &Path, line: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    writeln!(file, "{line}").unwrap();
    file.sync_data().unwrap();
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Pair {
    a: i64,
    b: i64,
}

/// `add` and `multiply`; each completed call appends `done <call id>` to
/// `AGENTRY_TEMPORAL_TOOL_LOG` (when set), and `multiply` first writes `started <call id>` and
/// takes `AGENTRY_TEMPORAL_SLOW_MS` (so a test can kill its worker mid-call). `multiply`
/// watches its cancellation token and logs `cancelled <call id>` when it fires.
pub(crate) fn registry(log: Option<PathBuf>, slow: Duration) -> Registry {
    let mut registry = Registry::new();
    let add_log = log.clone();
    registry
        .register(Tool::from_fn(
            "add",
            "Adds two integers.",
            move |p: Pair, ctx| {
                let log = add_log.clone();
                async move {
                    if let Some(log) = &log {
                        append(log, &format!("done {}", ctx.call_id()));
                    }
                    Ok::<_, ToolError>(json!(p.a + p.b))
                }
            },
        ))
        .unwrap();
    registry
        .register(Tool::from_fn(
            "multiply",
            "Multiplies two integers.",
            move |p: Pair, ctx| {
                let log = log.clone();
                async move {
                    if let Some(log) = &log {
                        append(log, &format!("started {}", ctx.call_id()));
                    }
                    tokio::select! {
                        () = tokio::time::sleep(slow) => {}
                        () = ctx.cancellation().cancelled() => {
                            if let Some(log) = &log {
                                append(log, &format!("cancelled {}", ctx.call_id()));
                            }
                            return Err(ToolError::cancelled());
                        }
                    }
                    if let Some(log) = &log {
                        append(log, &format!("done {}", ctx.call_id()));
                    }
                    Ok::<_, ToolError>(json!(p.a * p.b))
                }
            },
        ))
        .unwrap();
    registry
}

pub(crate) fn options(log: Option<PathBuf>, slow: Duration) -> Options {
    Options::auto()
        .with_tools(registry(log, slow))
        .with_tool_trace(true)
}

/// The lines of a log file (none when it does not exist yet).
/// The run's outcome, waited for at most `secs` seconds.
pub(crate) async fn outcome_within(
    secs: u64,
    handle: &agent_temporal::RunHandle,
) -> agent_temporal::RunOutcome {
    tokio::time::timeout(Duration::from_secs(secs), handle.outcome())
        .await
        .unwrap_or_else(|_| panic!("the run did not end within {secs} s"))
        .unwrap()
}

pub(crate) fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|text| text.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Polls `check` every 50 ms until it holds, for at most `secs` seconds.
pub(crate) async fn wait_until(secs: u64, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while !check() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A worker as a child process (this binary, `worker_process`), serving `task_queue`.
pub(crate) struct WorkerProcess(std::process::Child);

impl WorkerProcess {
    pub(crate) fn spawn(
        task_queue: &str,
        tool_log: &Path,
        model_log: &Path,
        slow: Duration,
    ) -> Self {
        Self::spawn_with(task_queue, tool_log, model_log, slow, &[])
    }

    /// With extra settings: `AGENTRY_TEMPORAL_APPROVE=<tool>` makes the tool wait for
    /// approval, `AGENTRY_TEMPORAL_REMOTE=<tool>` makes it a remote tool,
    /// `AGENTRY_TEMPORAL_MAX_ITERATIONS=<n>` sets the tool-round limit,
    /// `AGENTRY_TEMPORAL_ATTEMPTS=<n>` the activities' retries (250 ms doubling to 4 s),
    /// `AGENTRY_TEMPORAL_EVENT_LOG=<file>` logs the activities' published events,
    /// `AGENTRY_TEMPORAL_FAIL_ROUND_TWO=invalid_request|server` fails the second model call
    /// with a 400 or a 503, `AGENTRY_TEMPORAL_STRUCTURED=1` runs [`structured_turns`] asking
    /// for [`Total`], `AGENTRY_TEMPORAL_GUARDRAIL=1` adds [`ArithmeticRules`].
    pub(crate) fn spawn_with(
        task_queue: &str,
        tool_log: &Path,
        model_log: &Path,
        slow: Duration,
        env: &[(&str, &str)],
    ) -> Self {
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .envs(env.iter().copied())
            .args([
                "worker_process",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("AGENTRY_TEMPORAL_WORKER", task_queue)
            .env("AGENTRY_TEMPORAL_TOOL_LOG", tool_log)
            .env("AGENTRY_TEMPORAL_MODEL_LOG", model_log)
            .env("AGENTRY_TEMPORAL_SLOW_MS", slow.as_millis().to_string())
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        Self(child)
    }

    /// kill -9.
    pub(crate) fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The child's side: serve the task queue until killed.
pub(crate) fn worker_main() {
    let Ok(task_queue) = std::env::var("AGENTRY_TEMPORAL_WORKER") else {
        return;
    };
    let addr = std::env::var("AGENTRY_TEST_TEMPORAL_ADDR").unwrap();
    let tool_log = std::env::var_os("AGENTRY_TEMPORAL_TOOL_LOG").map(PathBuf::from);
    let model_log = std::env::var_os("AGENTRY_TEMPORAL_MODEL_LOG").map(PathBuf::from);
    let slow = Duration::from_millis(
        std::env::var("AGENTRY_TEMPORAL_SLOW_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(0),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
        let structured_run = std::env::var_os("AGENTRY_TEMPORAL_STRUCTURED").is_some();
        let mut model = if structured_run {
            RoundModel::with_turns(structured_turns(), model_log)
        } else {
            RoundModel::new(model_log)
        };
        if let Ok(kind) = std::env::var("AGENTRY_TEMPORAL_FAIL_ROUND_TWO") {
            use agent_types::{BackendError, BackendErrorKind};
            let (kind, status) = match kind.as_str() {
                "invalid_request" => (BackendErrorKind::InvalidRequest, 400),
                _ => (BackendErrorKind::Server, 503),
            };
            let mut error = BackendError::new(kind, format!("scripted {status}"));
            error.status = Some(status);
            model = model.failing_round_two(error);
        }
        let backend: Arc<dyn Backend> = Arc::new(model);
        let mut registry = registry(tool_log, slow);
        if let Ok(name) = std::env::var("AGENTRY_TEMPORAL_APPROVE") {
            registry.require_approval([name]).unwrap();
        }
        if let Ok(name) = std::env::var("AGENTRY_TEMPORAL_REMOTE") {
            let spec = registry.get(&name).unwrap().spec().clone();
            registry = registry.filter(|tool| tool.name() != name);
            registry.register(Tool::new(spec, None)).unwrap();
        }
        let mut options = Options::auto().with_tools(registry).with_tool_trace(true);
        if structured_run {
            options = structured(options);
        }
        if std::env::var_os("AGENTRY_TEMPORAL_GUARDRAIL").is_some() {
            options = options.with_guardrails(agent_loop::Guardrails::new().tool(ArithmeticRules));
        }
        if let Ok(word) = std::env::var("AGENTRY_TEMPORAL_INPUT_TRIP") {
            // An input guardrail refusing any message with `word` in it.
            let rules = agent_loop::Guardrails::new().input_fn("no-word", move |check| {
                let tripped = check.text.contains(&word);
                async move {
                    if tripped {
                        agent_loop::Verdict::Trip("the message names a forbidden word".into())
                    } else {
                        agent_loop::Verdict::Pass
                    }
                }
            });
            options = options.with_guardrails(rules);
        }
        if let Ok(max) = std::env::var("AGENTRY_TEMPORAL_MAX_ITERATIONS") {
            options.max_tool_iterations = max.parse().unwrap();
        }
        let mut activities = agent_temporal::AgentActivities::new(backend, options).unwrap();
        if let Ok(log) = std::env::var("AGENTRY_TEMPORAL_EVENT_LOG") {
            // Each event as `<workflow id> <event type>`, one line each.
            let log = PathBuf::from(log);
            activities = activities.with_event_sink(Arc::new(move |workflow, events| {
                for event in events {
                    let value = serde_json::to_value(event).unwrap();
                    append(
                        &log,
                        &format!("{workflow} {}", value["type"].as_str().unwrap()),
                    );
                }
            }));
        }
        if let Ok(attempts) = std::env::var("AGENTRY_TEMPORAL_ATTEMPTS") {
            activities = activities.with_retries(agent_temporal::Retries {
                max_attempts: attempts.parse().unwrap(),
                initial_interval_ms: 250,
                max_interval_ms: 4_000,
            });
        }
        // Live events into PostgreSQL (tests/it/events.rs).
        #[cfg(feature = "postgres")]
        if let Ok(url) = std::env::var("AGENTRY_TEMPORAL_EVENTS") {
            let log = agent_temporal::events::PgEventLog::connect(&url, Default::default())
                .await
                .unwrap();
            activities = activities.with_events(log.shared());
        }
        agent_temporal::run_worker(client, &task_queue, activities)
            .await
            .unwrap();
    });
}

/// A trace entry without its wall time, for comparing runs.
pub(crate) fn timeless(trace: &[agent_types::TraceEntry]) -> Vec<Value> {
    trace
        .iter()
        .map(|entry| {
            let mut value = serde_json::to_value(entry).unwrap();
            value.as_object_mut().unwrap().remove("duration_us");
            value
        })
        .collect()
}

#[allow(dead_code)]
pub(crate) fn calls_of(trace: &[agent_types::TraceEntry]) -> Vec<ToolCall> {
    trace
        .iter()
        .map(|e| ToolCall::new(e.call_id.clone(), e.tool_name.clone(), e.arguments.clone()))
        .collect()
}
