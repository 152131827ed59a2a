//! The conversation appender: every produced turn in order, awaited before the loop goes on
//! (a slow store slows the loop), the caller's input only with `echo_input`, failures that end
//! the run with the cause, and a real JSONL file that reads back as the run's messages.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_conversation::{
    AppendFuture, ConversationAppender, Error as StoreError, JsonlAppender, MemoryAppender, Turn,
    load_jsonl,
};
use agent_loop::{Input, Options, Session, SessionStatus, execute, generate};
use agent_types::{
    Backend, BackendStream, Capabilities, ErrorKind, Message, ModelRequest, Role, ToolResult,
};
use serde_json::json;
use tokio::time::Instant;

use crate::support::{registry, weather_tool};

const MODEL: &str = "test-model";

/// Two tool rounds, then an answer: five produced turns (call, result, call, result, answer).
fn two_rounds() -> ScriptedBackend {
    ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Denver"})),
        ScriptedTurn::tool_call("call_2", "get_weather", json!({"city": "Paris"})),
        ScriptedTurn::text("Sunny in Denver, rain in Paris."),
    ])
}

fn auto_with(appender: Arc<dyn ConversationAppender>) -> Options {
    Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_conversation(appender)
}

fn roles(messages: &[Message]) -> Vec<Role> {
    messages.iter().map(Message::role).collect()
}

/// A shared, ordered log of what happened: appends and model calls.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, entry: String) {
        self.0.lock().unwrap().push(entry);
    }

    fn entries(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// An appender that takes `delay` (on tokio's clock) to store each turn and logs the turn
/// once stored.
struct SlowAppender {
    delay: Duration,
    log: Log,
}

impl ConversationAppender for SlowAppender {
    fn append<'a>(&'a self, turn: &'a Turn) -> AppendFuture<'a> {
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            let role = match turn.message.role() {
                Role::Assistant => "assistant",
                Role::Tool => "tool",
                _ => "other",
            };
            self.log.push(format!("stored {role}"));
            Ok(())
        })
    }
}

/// A backend that logs each model call before handing it to the scripted one.
struct LoggingBackend {
    inner: ScriptedBackend,
    log: Log,
}

impl Backend for LoggingBackend {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn stream<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        self.log
            .push(format!("model call {}", self.inner.calls() + 1));
        self.inner.stream(request)
    }
}

/// An appender that stores the first `ok` turns and fails every later one.
struct FailingAppender {
    ok: usize,
    stored: MemoryAppender,
}

impl ConversationAppender for FailingAppender {
    fn append<'a>(&'a self, turn: &'a Turn) -> AppendFuture<'a> {
        Box::pin(async move {
            if self.stored.len() < self.ok {
                return self.stored.append(turn).await;
            }
            Err(StoreError::TaskFailed("the database is on fire".to_owned()))
        })
    }
}

#[tokio::test]
async fn every_produced_turn_is_appended_in_order_and_the_input_is_not_echoed() {
    let appender = MemoryAppender::new();
    let options = auto_with(Arc::new(appender.clone()));
    let mut session = Session::new(MODEL);
    let result = execute(&mut session, "Denver and Paris?", &two_rounds(), &options)
        .await
        .unwrap();

    assert_eq!(appender.messages(), result.messages);
    assert_eq!(appender.messages(), session.messages[1..]);
    assert_eq!(
        roles(&appender.messages()),
        [
            Role::Assistant,
            Role::Tool,
            Role::Assistant,
            Role::Tool,
            Role::Assistant
        ]
    );
    let seqs: Vec<u64> = appender.turns().iter().map(|turn| turn.seq).collect();
    assert_eq!(seqs, [0, 1, 2, 3, 4]);
}

#[tokio::test]
async fn with_echo_input_the_user_message_and_remote_results_are_appended_too() {
    let appender = MemoryAppender::new();
    let options = Options::default()
        .with_tools(registry([weather_tool()]))
        .with_conversation(Arc::new(appender.clone()))
        .with_echo_input(true);
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Denver"})),
        ScriptedTurn::text("Sunny."),
    ]);
    let mut session = Session::new(MODEL);

    // Return mode: the call comes back to the caller.
    let first = execute(&mut session, "Denver?", &backend, &options)
        .await
        .unwrap();
    assert_eq!(first.status, SessionStatus::AwaitingToolExecution);
    assert_eq!(first.messages[0], Message::user("Denver?"));
    assert_eq!(appender.messages(), first.messages);

    let result = ToolResult::ok("call_1", "get_weather", "sunny");
    let second = execute(&mut session, vec![result.clone()], &backend, &options)
        .await
        .unwrap();
    assert_eq!(second.messages[0], Message::Tool(result));
    assert_eq!(
        roles(&appender.messages()),
        [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
    );
    assert_eq!(appender.messages(), session.messages);
}

#[tokio::test(start_paused = true)]
async fn a_slow_appender_slows_the_loop_and_each_turn_is_stored_before_the_next_model_call() {
    let log = Log::default();
    let delay = Duration::from_millis(50);
    let options = auto_with(Arc::new(SlowAppender {
        delay,
        log: log.clone(),
    }));
    let backend = LoggingBackend {
        inner: two_rounds(),
        log: log.clone(),
    };

    let started = Instant::now();
    let result = generate(
        &backend,
        Input::new(MODEL).user("Denver and Paris?"),
        &options,
    )
    .await
    .unwrap();

    // Nothing else takes time here: the loop waited out every one of the five appends.
    assert_eq!(result.messages.len(), 5);
    assert_eq!(started.elapsed(), delay * 5);
    assert_eq!(
        log.entries(),
        [
            "model call 1",
            "stored assistant",
            "stored tool",
            "model call 2",
            "stored assistant",
            "stored tool",
            "model call 3",
            "stored assistant",
        ]
    );
}

#[tokio::test]
async fn an_appender_failure_ends_the_run_with_its_cause() {
    let stored = MemoryAppender::new();
    let options = auto_with(Arc::new(FailingAppender {
        ok: 1,
        stored: stored.clone(),
    }));
    let backend = two_rounds();
    let mut session = Session::new(MODEL);
    let error = execute(&mut session, "Denver and Paris?", &backend, &options)
        .await
        .unwrap_err();

    assert_eq!(error.kind, ErrorKind::Appender);
    assert_eq!(error.status(), 500);
    assert!(
        error.message.contains("the database is on fire"),
        "{}",
        error.message
    );
    // The loop stopped at the failed turn: no second model call.
    assert_eq!(backend.calls(), 1);
    assert_eq!(stored.len(), 1);
    assert_eq!(session.status, SessionStatus::Error);
    // The session still holds the turn the store refused: nothing is lost in memory.
    assert_eq!(
        roles(&session.messages),
        [Role::User, Role::Assistant, Role::Tool]
    );
    assert_eq!(error.partial_messages, session.messages[1..]);
}

#[tokio::test]
async fn a_full_disk_ends_the_run_with_an_appender_error_that_says_so() {
    let path = std::path::Path::new("/dev/full");
    if !path.exists() {
        eprintln!("skipped: no /dev/full on this system");
        return;
    }
    let appender = JsonlAppender::open(path).await.unwrap();
    let options = auto_with(Arc::new(appender));
    let backend = two_rounds();
    let error = generate(&backend, Input::new(MODEL).user("Denver?"), &options)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Appender);
    assert!(
        error.message.to_lowercase().contains("no space left"),
        "{}",
        error.message
    );
    assert_eq!(backend.calls(), 1);
}

#[tokio::test]
async fn a_jsonl_file_reads_back_as_the_runs_messages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("conversation.jsonl");
    let options = auto_with(Arc::new(JsonlAppender::open(&path).await.unwrap()));
    let result = generate(
        &two_rounds(),
        Input::new(MODEL).user("Denver and Paris?"),
        &options,
    )
    .await
    .unwrap();

    let loaded = load_jsonl(&path).await.unwrap();
    assert_eq!(loaded.torn_tail, None);
    let messages: Vec<Message> = loaded.turns.into_iter().map(|turn| turn.message).collect();
    assert_eq!(messages, result.messages);
    assert_eq!(messages.len(), 5);
}

#[tokio::test]
async fn a_session_resumed_in_another_process_continues_the_same_jsonl_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("conversation.jsonl");
    let approve = agent_tools::Tool::remote(
        "approve_payment",
        "Asks a human to approve a payment.",
        json!({"type": "object"}),
    );

    let json = {
        let options = Options::auto()
            .with_tools(registry([weather_tool(), approve]))
            .with_conversation(Arc::new(JsonlAppender::open(&path).await.unwrap()));
        let backend = ScriptedBackend::new([ScriptedTurn::tool_call(
            "call_p",
            "approve_payment",
            json!({}),
        )]);
        let mut session = Session::new(MODEL);
        execute(&mut session, "Pay.", &backend, &options)
            .await
            .unwrap();
        session.to_json().unwrap()
    };

    let approve = agent_tools::Tool::remote(
        "approve_payment",
        "Asks a human to approve a payment.",
        json!({"type": "object"}),
    );
    let options = Options::auto()
        .with_tools(registry([weather_tool(), approve]))
        .with_conversation(Arc::new(JsonlAppender::open(&path).await.unwrap()));
    let backend = ScriptedBackend::new([ScriptedTurn::text("Paid.")]);
    let mut session = Session::from_json(&json).unwrap();
    execute(
        &mut session,
        vec![ToolResult::ok("call_p", "approve_payment", "approved")],
        &backend,
        &options,
    )
    .await
    .unwrap();

    // The file holds what the loop produced in both processes, numbered on; the caller's
    // remote result is the caller's to store (not echoed).
    let loaded = load_jsonl(&path).await.unwrap();
    let seqs: Vec<u64> = loaded.turns.iter().map(|turn| turn.seq).collect();
    assert_eq!(seqs, [0, 1]);
    let messages: Vec<Message> = loaded.turns.into_iter().map(|turn| turn.message).collect();
    assert_eq!(
        messages,
        [session.messages[1].clone(), session.messages[3].clone()]
    );
}
