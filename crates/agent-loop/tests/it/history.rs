//! History policies through the loop: what the backend was sent, round by round, while the
//! session, the appender and the result keep every message; the summary call (budgets,
//! record, cache in the serialized session); a run dropped mid-call; and a recorded Anthropic
//! answer to a request cut by a policy, through the real adapter.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_backends::replay::{Cassette, ReplayBackend};
use agent_backends::{Provider, ScriptedBackend, ScriptedTurn};
use agent_conversation::MemoryAppender;
use agent_loop::{HistoryPolicy, Options, Session, SessionStatus, TokenCounter, execute};
use agent_types::{AssistantMessage, ErrorKind, Message, ModelRequest, Role, ToolCall, ToolSpec};
use serde_json::json;

use crate::support::{registry, usage, weather_tool};
use crate::telemetry::{capture, named};

fn roles(messages: &[Message]) -> Vec<Role> {
    messages.iter().map(Message::role).collect()
}

fn texts(request: &ModelRequest) -> Vec<String> {
    request
        .messages
        .iter()
        .map(|message| match message {
            Message::User(user) => match &user.content[0] {
                agent_types::UserBlock::Text { text } => format!("user:{text}"),
                _ => "user:?".into(),
            },
            Message::Assistant(assistant) => format!("assistant:{}", assistant.text_content()),
            Message::Tool(result) => format!("tool:{}", result.tool_call_id),
            Message::System { content } => format!("system:{content}"),
        })
        .collect()
}

/// A session of `turns` question/answer pairs run one after another under `options`.
async fn chat(backend: &ScriptedBackend, options: &Options, questions: &[&str]) -> Session {
    let mut session = Session::new("m");
    for question in questions {
        execute(&mut session, *question, backend, options)
            .await
            .unwrap();
    }
    session
}

#[tokio::test]
async fn last_turns_cuts_the_request_and_nothing_else() {
    let appender = MemoryAppender::new();
    let backend = ScriptedBackend::cycle([ScriptedTurn::text("ok")]).recording();
    let options = Options::default()
        .with_conversation(Arc::new(appender.clone()))
        .with_echo_input(true)
        .with_history(HistoryPolicy::last_turns(2).with_chunk(1));
    let session = chat(&backend, &options, &["q1", "q2", "q3", "q4"]).await;

    let requests = backend.requests();
    assert_eq!(texts(&requests[0]), ["user:q1"]);
    assert_eq!(texts(&requests[1]), ["user:q1", "assistant:ok", "user:q2"]);
    // The task, then the newest two turns.
    assert_eq!(texts(&requests[2]), ["user:q1", "assistant:ok", "user:q3"]);
    assert_eq!(texts(&requests[3]), ["user:q1", "assistant:ok", "user:q4"]);
    // The session and the appender keep all eight messages.
    assert_eq!(session.messages.len(), 8);
    assert_eq!(appender.messages(), session.messages);
    assert_eq!(session.status, SessionStatus::Completed);
}

#[tokio::test]
async fn within_one_run_each_round_is_cut_and_the_result_keeps_every_message() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("c1", "get_weather", json!({"city": "Denver"})),
        ScriptedTurn::tool_call("c2", "get_weather", json!({"city": "Paris"})),
        ScriptedTurn::tool_call("c3", "get_weather", json!({"city": "Denver"})),
        ScriptedTurn::text("done"),
    ])
    .recording();
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_max_repeated_calls(None)
        .with_history(HistoryPolicy::last_turns(1).with_chunk(1));
    let mut session = Session::new("m");
    let result = execute(&mut session, "weather?", &backend, &options)
        .await
        .unwrap();

    let requests = backend.requests();
    assert_eq!(texts(&requests[0]), ["user:weather?"]);
    // Each later round: the task, then the newest call with its result.
    for (request, id) in requests[1..].iter().zip(["c1", "c2", "c3"]) {
        assert_eq!(
            texts(request),
            [
                "user:weather?".to_owned(),
                "assistant:".into(),
                format!("tool:{id}")
            ]
        );
    }
    assert_eq!(result.messages.len(), 7);
    assert_eq!(session.messages.len(), 8);
    assert_eq!(
        roles(&session.messages),
        [
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant,
            Role::Tool,
            Role::Assistant,
            Role::Tool,
            Role::Assistant
        ]
    );
}

/// Ten tokens a message, nothing for the preamble.
struct Ten;

impl TokenCounter for Ten {
    fn message_tokens(&self, _: &Message) -> u64 {
        10
    }
    fn preamble_tokens(&self, _: Option<&str>, _: &[ToolSpec]) -> u64 {
        0
    }
}

#[tokio::test]
async fn a_token_window_counts_with_the_counter_it_is_given() {
    let backend = ScriptedBackend::cycle([ScriptedTurn::text("ok")]).recording();
    let options = Options::default().with_history(
        HistoryPolicy::token_window(50)
            .with_low_water(30)
            .with_counter(Ten),
    );
    let session = chat(&backend, &options, &["q1", "q2", "q3", "q4", "q5"]).await;
    let sent: Vec<usize> = backend
        .requests()
        .iter()
        .map(|request| request.messages.len())
        .collect();
    // 1, 3, 5 messages fit 50 tokens. The cut is replayed turn by turn: a3 takes the window
    // over, the oldest three turns go (down to 30 tokens), q4 joins (4 sent); then q5 takes
    // it over again.
    assert_eq!(sent, [1, 3, 5, 4, 3]);
    assert_eq!(session.messages.len(), 10);

    // The run's own counter is the default one.
    let backend = ScriptedBackend::cycle([ScriptedTurn::text("ok")]).recording();
    let options = Options::default()
        .with_token_counter(Ten)
        .with_history(HistoryPolicy::token_window(50).with_low_water(30));
    chat(&backend, &options, &["q1", "q2", "q3", "q4"]).await;
    assert_eq!(backend.requests()[3].messages.len(), 4);
}

#[tokio::test]
async fn the_budget_check_sees_the_cut_request() {
    // A history far larger than the budget: without the policy the call is refused before it
    // is sent; with it, the request fits.
    let long = "word ".repeat(4_000);
    let mut session = Session::new("m")
        .with_message(Message::user("task"))
        .with_message(Message::Assistant(AssistantMessage::text(long.clone())))
        .with_message(Message::user(long))
        .with_message(Message::Assistant(AssistantMessage::text("ok")));
    let backend = ScriptedBackend::new([ScriptedTurn::text("fine").with_usage(usage(20, 5))]);
    let refused = execute(
        &mut session.clone(),
        "next",
        &backend,
        &Options::default().with_token_budget(2_000),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(refused.kind, ErrorKind::BudgetExceeded { .. }),
        "{refused:?}"
    );
    let options = Options::default()
        .with_token_budget(2_000)
        .with_history(HistoryPolicy::last_turns(2).with_chunk(1));
    let result = execute(&mut session, "next", &backend, &options)
        .await
        .unwrap();
    assert_eq!(result.text(), "fine");
}

#[tokio::test]
async fn old_tool_results_go_out_as_stubs_and_stay_whole_in_the_session() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("c1", "read", json!({"page": 1})),
        ScriptedTurn::tool_call("c2", "read", json!({"page": 2})),
        ScriptedTurn::tool_call("c3", "read", json!({"page": 3})),
        ScriptedTurn::text("done"),
    ])
    .recording();
    let options = Options::auto()
        .with_tools(registry([read_tool()]))
        .with_max_repeated_calls(None)
        .with_history(HistoryPolicy::stub_tool_results(1).with_chunk(1));
    let mut session = Session::new("m");
    execute(&mut session, "weather?", &backend, &options)
        .await
        .unwrap();

    let last = &backend.requests()[3];
    assert_eq!(last.messages.len(), 7);
    let results: Vec<&str> = last
        .messages
        .iter()
        .filter_map(|message| match message {
            Message::Tool(result) => Some(result.content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(results[0], "[earlier result of `read` left out: 508 bytes]");
    assert_eq!(results[1], "[earlier result of `read` left out: 508 bytes]");
    assert!(results[2].starts_with("page 3: text"), "{results:?}");
    for message in &session.messages {
        if let Message::Tool(result) = message {
            assert!(!result.content.contains("left out"), "{result:?}");
        }
    }
}

/// A tool whose results (508 bytes) are worth stubbing.
fn read_tool() -> agent_tools::Tool {
    agent_tools::Tool::from_json_fn(
        "read",
        "Reads a page.",
        json!({"type": "object"}),
        |args, _| async move {
            Ok(json!(format!(
                "page {}: {}",
                args["page"],
                "text ".repeat(100)
            )))
        },
    )
}

fn summary_backend() -> ScriptedBackend {
    // Answers, with summary calls where the policy needs them (calls 3 and 5).
    ScriptedBackend::new([
        ScriptedTurn::text("a1").with_usage(usage(10, 1)),
        ScriptedTurn::text("a2").with_usage(usage(10, 1)),
        ScriptedTurn::text("S1: the user asked q2").with_usage(usage(100, 7)),
        ScriptedTurn::text("a3").with_usage(usage(10, 1)),
        ScriptedTurn::text("S2: q2 then q3").with_usage(usage(100, 7)),
        ScriptedTurn::text("a4").with_usage(usage(10, 1)),
        ScriptedTurn::text("a5").with_usage(usage(10, 1)),
    ])
    .recording()
}

#[tokio::test]
async fn a_summary_is_made_once_cached_in_the_session_and_extended_when_the_window_moves() {
    let backend = summary_backend();
    let options = Options::default().with_history(
        HistoryPolicy::summarize(1)
            .with_chunk(2)
            .with_summary_model("small-model"),
    );
    let mut session = Session::new("m");
    let mut records = Vec::new();
    for question in ["q1", "q2", "q3"] {
        let result = execute(&mut session, question, &backend, &options)
            .await
            .unwrap();
        records.push(result.model_calls);
    }
    // q3's run: turns after the task are a1, q2, a2, q3; keep 1, drop 2 at a time: a1 and q2
    // are summarized (one summary call, then the answer).
    assert_eq!(records[2].len(), 2);
    assert_eq!(records[2][0].model, "small-model");
    assert_eq!(records[2][0].usage, Some(usage(100, 7)));
    let requests = backend.requests();
    let summary_call = &requests[2];
    assert_eq!(summary_call.model, "small-model");
    assert_eq!(
        summary_call.system.as_deref(),
        Some(agent_loop::history::DEFAULT_SUMMARY_INSTRUCTIONS)
    );
    assert!(summary_call.tools.is_empty());
    let transcript = &texts(summary_call)[0];
    assert!(
        transcript.contains("[assistant] a1\n[user] q2\n"),
        "{transcript}"
    );
    let answer_call = &requests[3];
    assert_eq!(
        texts(answer_call),
        [
            "user:q1".to_owned(),
            format!(
                "user:{}S1: the user asked q2",
                agent_loop::history::SUMMARY_PREFIX
            ),
            "assistant:a2".into(),
            "user:q3".into()
        ]
    );
    let cached = session.history_summary.clone().unwrap();
    assert_eq!((cached.from, cached.to), (1, 3));
    assert_eq!(session.messages.len(), 6);

    // The cache is part of the serialized session: a resumed process does not recompute it.
    let json = serde_json::to_string(&session).unwrap();
    let mut session: Session = serde_json::from_str(&json).unwrap();
    assert_eq!(session.history_summary, Some(cached));

    // q4: turns a1 q2 a2 q3 a3 q4 → drop 4: the summary grows by a2 and q3, from S1.
    let result = execute(&mut session, "q4", &backend, &options)
        .await
        .unwrap();
    assert_eq!(result.model_calls.len(), 2);
    let extend = &backend.requests()[4];
    let transcript = &texts(extend)[0];
    assert!(
        transcript.contains("The summary so far:\n\nS1: the user asked q2"),
        "{transcript}"
    );
    assert!(
        transcript.contains("[assistant] a2\n[user] q3\n"),
        "{transcript}"
    );
    assert!(!transcript.contains("[assistant] a1"), "{transcript}");
    assert_eq!(session.history_summary.as_ref().unwrap().to, 5);

    // q5 with chunks of 4: turns a1 … q5 → drop 4 again, the range the cache covers: the
    // cached summary is reused, no summary call.
    let options = Options::default().with_history(
        HistoryPolicy::summarize(1)
            .with_chunk(4)
            .with_summary_model("small-model"),
    );
    let calls = backend.calls();
    let result = execute(&mut session, "q5", &backend, &options)
        .await
        .unwrap();
    assert_eq!(result.model_calls.len(), 1);
    assert_eq!(backend.calls(), calls + 1);
    assert_eq!(
        texts(&backend.requests()[6])[1],
        format!("user:{}S2: q2 then q3", agent_loop::history::SUMMARY_PREFIX)
    );
    assert_eq!(session.messages.len(), 10);
}

#[tokio::test]
async fn the_summary_call_counts_in_the_budgets_and_has_its_own_span() {
    let backend = summary_backend();
    let options = Options::default().with_history(
        HistoryPolicy::summarize(1)
            .with_chunk(2)
            .with_summary_instructions("Summarize."),
    );
    let mut session = Session::new("m");
    for question in ["q1", "q2"] {
        execute(&mut session, question, &backend, &options)
            .await
            .unwrap();
    }
    // The summary call (107 tokens) leaves 3 of a 110-token budget: the answer's call is
    // refused before it is sent.
    let budgeted = options.clone().with_token_budget(110);
    let (failed, spans) = capture(execute(&mut session, "q3", &backend, &budgeted)).await;
    let failed = failed.unwrap_err();
    assert!(
        matches!(failed.kind, ErrorKind::BudgetExceeded { .. }),
        "{failed:?}"
    );
    let chats = named(&spans, "chat");
    assert_eq!(chats.len(), 1);
    assert_eq!(chats[0].1.field("agentry.purpose"), Some("history_summary"));
    assert_eq!(chats[0].1.field("gen_ai.usage.input_tokens"), Some("100"));
    assert_eq!(failed.spent.usage.output_tokens, Some(7));
}

#[tokio::test(start_paused = true)]
async fn a_run_dropped_mid_call_gives_the_full_history_back() {
    let backend = ScriptedBackend::new([
        ScriptedTurn::text("a1"),
        ScriptedTurn::text("a2"),
        ScriptedTurn::text("never").hang(),
    ]);
    let options = Options::default().with_history(HistoryPolicy::last_turns(1).with_chunk(1));
    let mut session = Session::new("m");
    for question in ["q1", "q2"] {
        execute(&mut session, question, &backend, &options)
            .await
            .unwrap();
    }
    let before = session.messages.clone();
    let dropped = tokio::time::timeout(
        Duration::from_secs(5),
        execute(&mut session, "q3", &backend, &options),
    )
    .await;
    assert!(dropped.is_err(), "the call hangs until the run is dropped");
    assert_eq!(session.messages.len(), before.len() + 1);
    assert_eq!(session.messages[..before.len()], before[..]);
    assert_eq!(session.status, SessionStatus::Aborted);
}

#[tokio::test]
async fn a_policy_that_keeps_nothing_is_refused_before_the_session_changes() {
    let backend = ScriptedBackend::new([ScriptedTurn::text("never")]);
    let mut session = Session::new("m");
    let error = execute(
        &mut session,
        "q",
        &backend,
        &Options::default().with_history(HistoryPolicy::last_turns(0)),
    )
    .await
    .unwrap_err();
    assert!(matches!(error.kind, ErrorKind::Config), "{error:?}");
    assert!(session.messages.is_empty());
    assert_eq!(backend.calls(), 0);
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/providers")
}

/// A long session cut to the task and the newest turn, sent through the real Anthropic
/// adapter to a recorded answer: the wire request holds only those messages, in an order
/// Anthropic accepts (user first, roles alternating), the tool call with its result.
#[tokio::test(flavor = "current_thread")]
async fn a_recorded_anthropic_answer_to_a_cut_request() {
    let answer = Cassette::from_file(fixtures().join("anthropic/stream-text.sse")).unwrap();
    let backend = ReplayBackend::start(Provider::Anthropic, [answer])
        .await
        .unwrap();
    let call = ToolCall::new("toolu_1", "get_weather", json!({"city": "Denver"}));
    let mut session = Session::new("claude-sonnet-4-5")
        .with_message(Message::user("Plan my week."))
        .with_message(Message::Assistant(AssistantMessage::text("Monday: gym.")))
        .with_message(Message::user("And the weather?"))
        .with_message(Message::Assistant(AssistantMessage {
            content: vec![agent_types::AssistantBlock::ToolCall(call)],
            ..AssistantMessage::default()
        }))
        .with_message(Message::Tool(agent_types::ToolResult::ok(
            "toolu_1",
            "get_weather",
            r#"{"sky":"sunny"}"#,
        )))
        .with_message(Message::Assistant(AssistantMessage::text("Sunny.")));
    let options = Options::default()
        .with_tools(registry([weather_tool()]))
        .with_history(HistoryPolicy::last_turns(3).with_chunk(1));
    let result = execute(&mut session, "Thanks! Anything else?", &backend, &options)
        .await
        .unwrap();
    assert!(!result.text().is_empty());
    assert_eq!(session.messages.len(), 8);

    let sent = backend.server().requests()[0].json().unwrap();
    let roles: Vec<&str> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["role"].as_str().unwrap())
        .collect();
    // The task; then the call's turn (its result rides in a user turn), the answer, the question.
    assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"]);
    let body = sent.to_string();
    assert!(!body.contains("Monday: gym."), "{body}");
    assert!(body.contains("Plan my week."), "{body}");
    assert!(body.contains("toolu_1"), "{body}");
}

#[tokio::test]
async fn the_model_call_gate_sees_the_summary_call_and_can_refuse_it() {
    let backend = summary_backend();
    let options = Options::default().with_history(HistoryPolicy::summarize(1).with_chunk(2));
    let mut session = Session::new("m");
    for question in ["q1", "q2"] {
        execute(&mut session, question, &backend, &options)
            .await
            .unwrap();
    }
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let in_gate = Arc::clone(&seen);
    let gated = options
        .clone()
        .with_hooks(agent_loop::Hooks::new().before_model_call(
            move |gate: agent_loop::ModelCallGate| {
                let tools = gate.tools.len();
                in_gate.lock().unwrap().push((gate.messages, tools));
                async move { Err("the tenant's spend cap is reached".to_owned()) }
            },
        ));
    let calls = backend.calls();
    let refused = execute(&mut session, "q3", &backend, &gated)
        .await
        .unwrap_err();
    assert!(matches!(refused.kind, ErrorKind::Refused), "{refused:?}");
    // The summary call (one transcript message, no tools) was gated, and nothing was sent.
    assert_eq!(*seen.lock().unwrap(), [(1, 0)]);
    assert_eq!(backend.calls(), calls);
    assert_eq!(session.history_summary, None);
}

#[test]
fn options_validate_refuses_a_policy_that_keeps_nothing() {
    let options = Options::default().with_history(HistoryPolicy::summarize(4).with_chunk(0));
    let error = options.validate().unwrap_err();
    assert!(matches!(error.kind, ErrorKind::Config), "{error:?}");
    assert!(error.message.contains("with_chunk(0)"), "{}", error.message);
    assert!(
        Options::default()
            .with_history(HistoryPolicy::token_window(8_000))
            .validate()
            .is_ok()
    );
}

#[tokio::test]
async fn a_jsonl_log_keeps_every_turn_of_runs_with_every_policy() {
    for policy in [
        HistoryPolicy::last_turns(1).with_chunk(1),
        HistoryPolicy::token_window(30).with_counter(Ten),
        HistoryPolicy::stub_tool_results(0).with_chunk(1),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conversation.jsonl");
        let backend = ScriptedBackend::new([
            ScriptedTurn::tool_call("c1", "read", json!({"page": 1})),
            ScriptedTurn::tool_call("c2", "read", json!({"page": 2})),
            ScriptedTurn::text("done"),
        ])
        .recording();
        let options = Options::auto()
            .with_tools(registry([read_tool()]))
            .with_echo_input(true)
            .with_conversation(Arc::new(
                agent_conversation::JsonlAppender::open(&path)
                    .await
                    .unwrap(),
            ))
            .with_history(policy.clone());
        let mut session = Session::new("m");
        let result = execute(&mut session, "weather?", &backend, &options)
            .await
            .unwrap();
        let stored: Vec<Message> = agent_conversation::load_jsonl(&path)
            .await
            .unwrap()
            .turns
            .into_iter()
            .map(|turn| turn.message)
            .collect();
        assert_eq!(stored, session.messages, "{policy:?}");
        assert_eq!(stored, result.messages, "{policy:?}");
        assert_eq!(stored.len(), 6, "{policy:?}");
        // The requests were shaped (the last one is shorter or carries a stub)...
        let last = backend.requests().pop().unwrap();
        assert_ne!(last.messages, stored[..5], "{policy:?}");
        // ...and the file never saw a stub.
        assert!(!std::fs::read_to_string(&path).unwrap().contains("left out"));
    }
}

/// How many calls did not start with the previous call's whole request (a prompt-cache miss
/// past the system prompt and tools, with a prefix cache such as Anthropic's).
fn prefix_breaks(requests: &[ModelRequest]) -> usize {
    requests
        .windows(2)
        .filter(|pair| !pair[1].messages.starts_with(&pair[0].messages))
        .count()
}

#[tokio::test]
async fn chunks_keep_the_prefix_stable_for_a_prompt_cache() {
    let questions: Vec<String> = (1..=24).map(|n| format!("q{n}")).collect();
    let questions: Vec<&str> = questions.iter().map(String::as_str).collect();
    let mut breaks = Vec::new();
    for policy in [
        HistoryPolicy::last_turns(8).with_chunk(1),
        HistoryPolicy::last_turns(8).with_chunk(8),
        HistoryPolicy::token_window(300).with_counter(Ten),
        HistoryPolicy::token_window(300)
            .with_low_water(280)
            .with_counter(Ten),
    ] {
        let backend = ScriptedBackend::cycle([ScriptedTurn::text("ok")]).recording();
        let options = Options::default().with_history(policy);
        chat(&backend, &options, &questions).await;
        breaks.push(prefix_breaks(&backend.requests()));
    }
    // 24 calls: a cut moved one turn at a time breaks the prefix on every call once the
    // window is full (19 of 23); in chunks of 8 turns (4 questions), once every 4 calls. A
    // token window of 30 messages that drops to ¾ of itself breaks it twice; one that drops
    // only to 28 messages, on most calls once it is full.
    assert_eq!(breaks, [19, 4, 2, 6]);
}
