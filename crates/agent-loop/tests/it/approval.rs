//! Human approval of tool calls: the run suspends with `awaiting_approval` before a round
//! runs anything, the session (also through JSON, as another process would load it) keeps the
//! waiting calls, decisions resume it in call order under the usual budgets, and decisions
//! that do not fit change nothing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_backends::replay::{Cassette, ReplayBackend};
use agent_backends::{Provider, ScriptedBackend, ScriptedTurn};
use agent_loop::{
    Approval, ApprovalDecision, Options, Session, SessionInput, SessionStatus, execute,
    execute_stream,
};
use agent_tools::{Caller, Registry, Tool, ToolError};
use agent_types::{AgentEvent, ErrorKind, Message, ToolCall, ToolResult};
use serde_json::{Value, json};

use crate::support::{collect, kind, registry};

const MODEL: &str = "test-model";

/// A tool that counts its runs and echoes its arguments; `approval` marks it.
fn counted(name: &str, runs: &Arc<AtomicUsize>, approval: bool) -> Tool {
    let runs = Arc::clone(runs);
    let tool = Tool::from_json_fn(
        name,
        "Does something with a path.",
        json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"]
        }),
        move |args: Value, _ctx| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(json!({"done": args["path"]}))
            }
        },
    );
    if approval { tool.with_approval() } else { tool }
}

fn call(id: &str, name: &str, path: &str) -> ToolCall {
    ToolCall::new(id, name, json!({"path": path}))
}

fn results(messages: &[Message]) -> Vec<&ToolResult> {
    messages
        .iter()
        .filter_map(|message| match message {
            Message::Tool(result) => Some(result),
            _ => None,
        })
        .collect()
}

fn ids(calls: &[ToolCall]) -> Vec<&str> {
    calls.iter().map(|call| call.id.as_str()).collect()
}

#[tokio::test]
async fn a_call_needing_approval_suspends_the_run_and_approving_it_runs_it() {
    let runs = Arc::new(AtomicUsize::new(0));
    let options = Options::auto().with_tools(registry([counted("delete_file", &runs, true)]));
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "delete_file", json!({"path": ".env"})),
        ScriptedTurn::text("Deleted."),
    ])
    .recording();
    let mut session = Session::with_id("sess-approve", MODEL);
    let (events, result) = collect(execute_stream(
        &mut session,
        "Delete .env",
        &backend,
        &options,
    ))
    .await;
    let result = result.unwrap();

    assert_eq!(result.status, SessionStatus::AwaitingApproval);
    assert_eq!(ids(&result.pending_approvals), ["call_1"]);
    assert!(result.pending_tool_calls.is_empty());
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "nothing runs before approval"
    );
    assert_eq!(session.status, SessionStatus::AwaitingApproval);
    assert_eq!(ids(&session.pending_approvals), ["call_1"]);
    // The round's assistant turn is in the history, its result is not.
    assert!(results(&session.messages).is_empty());
    let kinds: Vec<String> = events.iter().map(kind).collect();
    let at = kinds
        .iter()
        .position(|k| k == "approval_requested")
        .unwrap();
    assert_eq!(kinds[at + 1], "session_end");
    assert!(!kinds.contains(&"tool_execution_start".to_owned()));
    let AgentEvent::ApprovalRequested {
        session_id,
        tool_calls,
    } = &events[at]
    else {
        panic!("{:?}", events[at]);
    };
    assert_eq!(session_id.as_str(), "sess-approve");
    assert_eq!(tool_calls[0].name, "delete_file");
    assert_eq!(tool_calls[0].arguments, json!({"path": ".env"}));
    // The wire form names the call by id, tool and arguments.
    let wire = serde_json::to_value(&events[at]).unwrap();
    assert_eq!(
        wire,
        json!({"type": "approval_requested", "session_id": "sess-approve",
               "tool_calls": [{"id": "call_1", "name": "delete_file", "arguments": {"path": ".env"}}]})
    );

    let result = execute(
        &mut session,
        vec![ApprovalDecision::approve("call_1")],
        &backend,
        &options,
    )
    .await
    .unwrap();
    assert_eq!(result.status, SessionStatus::Completed);
    assert_eq!(result.text(), "Deleted.");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(session.pending_approvals.is_empty());
    let tool_results = results(&session.messages);
    assert_eq!(tool_results.len(), 1);
    assert!(!tool_results[0].is_error);
    assert_eq!(tool_results[0].content, r#"{"done":".env"}"#);
    assert_eq!(backend.calls(), 2);
}

#[tokio::test]
async fn a_denied_call_does_not_run_and_the_model_sees_the_reason() {
    let runs = Arc::new(AtomicUsize::new(0));
    let options = Options::auto().with_tools(registry([counted("delete_file", &runs, true)]));
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "delete_file", json!({"path": ".env"})),
        ScriptedTurn::text("I did not delete it."),
    ])
    .recording();
    let mut session = Session::new(MODEL);
    execute(&mut session, "Delete .env", &backend, &options)
        .await
        .unwrap();
    let result = execute(
        &mut session,
        vec![ApprovalDecision::deny("call_1", "keep the secrets")],
        &backend,
        &options,
    )
    .await
    .unwrap();
    assert_eq!(result.text(), "I did not delete it.");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let sent = &backend.requests()[1];
    let Some(Message::Tool(denied)) = sent.messages.last() else {
        panic!("{:?}", sent.messages.last());
    };
    assert!(denied.is_error);
    assert_eq!(denied.tool_call_id.as_str(), "call_1");
    assert_eq!(
        denied.content,
        "This call was not run: the user denied it: keep the secrets"
    );
}

#[tokio::test]
async fn pending_approvals_survive_a_json_round_trip_into_another_process() {
    // Each "process" builds its options, registry and backend from scratch.
    let runs = Arc::new(AtomicUsize::new(0));
    let options = || Options::auto().with_tools(registry([counted("delete_file", &runs, true)]));
    let first = ScriptedBackend::new([ScriptedTurn::tool_call(
        "call_1",
        "delete_file",
        json!({"path": "a.txt"}),
    )]);
    let mut session = Session::with_id("sess-json", MODEL);
    execute(&mut session, "Delete a.txt", &first, &options())
        .await
        .unwrap();
    let json = session.to_json().unwrap();
    let stored: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(stored["status"], "awaiting_approval");
    assert_eq!(stored["pending_approvals"][0]["id"], "call_1");
    let mut loaded = Session::from_json(&json).unwrap();
    assert_eq!(loaded, session);

    let second = ScriptedBackend::new([ScriptedTurn::text("Done.")]);
    let result = execute(
        &mut loaded,
        vec![ApprovalDecision::approve("call_1")],
        &second,
        &options(),
    )
    .await
    .unwrap();
    assert_eq!(result.text(), "Done.");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // The resumed run continued the first one's iteration count: one tool round in all.
    let reloaded = Session::from_json(&loaded.to_json().unwrap()).unwrap();
    assert_eq!(reloaded.status, SessionStatus::Completed);
}

#[tokio::test]
async fn a_mixed_round_keeps_call_order_for_approved_denied_automatic_and_remote_calls() {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut tools = Registry::new();
    tools.register(counted("read", &runs, false)).unwrap();
    tools.register(counted("write", &runs, true)).unwrap();
    tools.register(counted("erase", &runs, false)).unwrap();
    tools
        .register(Tool::remote(
            "ask_user",
            "Asks the user.",
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        ))
        .unwrap();
    // The policy: `erase` is never allowed, everything else as the tools say.
    let options = Options::auto()
        .with_tools(tools)
        .with_approval_policy(|request| match request.tool.name() {
            "erase" => Approval::Deny("erasing is off".into()),
            _ => request.default_decision(),
        });
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_calls([
            call("c1", "write", "a"),
            call("c2", "read", "b"),
            call("c3", "ask_user", "c"),
            call("c4", "write", "d"),
            call("c5", "erase", "e"),
        ]),
        ScriptedTurn::text("All done."),
    ]);
    let mut session = Session::new(MODEL);
    let result = execute(&mut session, "Go", &backend, &options)
        .await
        .unwrap();
    assert_eq!(result.status, SessionStatus::AwaitingApproval);
    assert_eq!(ids(&result.pending_approvals), ["c1", "c4"]);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "the automatic call waits too"
    );
    let history_before = session.messages.len();

    let result = execute(
        &mut session,
        vec![
            ApprovalDecision::deny("c4", "not d"),
            ApprovalDecision::approve("c1"),
        ],
        &backend,
        &options,
    )
    .await
    .unwrap();
    // The local calls ran (write a, read b), in call order; the remote one waits.
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(result.status, SessionStatus::AwaitingToolExecution);
    assert_eq!(ids(&result.pending_tool_calls), ["c3"]);
    let round: Vec<(&str, bool)> = results(&session.messages[history_before..])
        .iter()
        .map(|result| (result.tool_call_id.as_str(), result.is_error))
        .collect();
    assert_eq!(
        round,
        [("c1", false), ("c2", false), ("c4", true), ("c5", true)]
    );
    let erase = results(&session.messages)[3];
    assert_eq!(
        erase.content,
        "This call was not run: the approval policy denied it: erasing is off"
    );

    let result = execute(
        &mut session,
        vec![ToolResult::ok("c3", "ask_user", "yes")],
        &backend,
        &options,
    )
    .await
    .unwrap();
    assert_eq!(result.text(), "All done.");
    let order: Vec<&str> = results(&session.messages)
        .iter()
        .map(|result| result.tool_call_id.as_str())
        .collect();
    assert_eq!(order, ["c1", "c2", "c4", "c5", "c3"]);
}

#[tokio::test]
async fn wrong_missing_or_duplicate_decisions_are_a_400_and_change_nothing() {
    let runs = Arc::new(AtomicUsize::new(0));
    let options = Options::auto().with_tools(registry([counted("write", &runs, true)]));
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_calls([call("c1", "write", "a"), call("c2", "write", "b")]),
        ScriptedTurn::text("ok"),
    ]);
    let mut session = Session::new(MODEL);
    execute(&mut session, "Go", &backend, &options)
        .await
        .unwrap();
    let before = session.to_json().unwrap();

    let bad: Vec<(SessionInput, &str)> = vec![
        (
            vec![ApprovalDecision::approve("c1")].into(),
            "no decision for c2",
        ),
        (
            vec![
                ApprovalDecision::approve("c1"),
                ApprovalDecision::approve("c2"),
                ApprovalDecision::approve("c9"),
            ]
            .into(),
            "decisions for calls that are not waiting: c9",
        ),
        (
            vec![
                ApprovalDecision::approve("c1"),
                ApprovalDecision::deny("c1", "twice"),
                ApprovalDecision::approve("c2"),
            ]
            .into(),
            "more than one decision for c1",
        ),
        (
            // Bound to arguments the waiting call does not have: refused, not replayed.
            vec![
                ApprovalDecision::approve("c1").bound_to(&call("c1", "write", "elsewhere")),
                ApprovalDecision::approve("c2"),
            ]
            .into(),
            "decisions bound to another tool or other arguments than the waiting call: c1",
        ),
        ("a new question".into(), "waiting for approval of c1, c2"),
        (
            vec![ToolResult::ok("c1", "write", "x")].into(),
            "waiting for approval of c1, c2",
        ),
        (SessionInput::Continue, "waiting for approval of c1, c2"),
    ];
    for (input, expected) in bad {
        let error = execute(&mut session, input, &backend, &options)
            .await
            .unwrap_err();
        assert_eq!(error.kind, ErrorKind::Config, "{error}");
        assert_eq!(error.status(), 400);
        assert!(error.message.contains(expected), "{error}");
        assert_eq!(session.to_json().unwrap(), before, "the session changed");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(backend.calls(), 1);
    // Decisions for a session that waits for none are refused the same way.
    let mut idle = Session::new(MODEL);
    let error = execute(
        &mut idle,
        vec![ApprovalDecision::approve("c1")],
        &backend,
        &options,
    )
    .await
    .unwrap_err();
    assert!(error.message.contains("is not waiting for any"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn approved_calls_run_under_the_same_timeouts_truncation_and_hooks() {
    let slow = Tool::from_json_fn(
        "slow",
        "Sleeps.",
        json!({"type": "object", "properties": {"millis": {"type": "integer"}}}),
        |args: Value, _ctx| async move {
            tokio::time::sleep(Duration::from_millis(args["millis"].as_u64().unwrap_or(0))).await;
            Ok::<_, ToolError>(json!("x".repeat(500)))
        },
    )
    .with_approval();
    let hooked = Arc::new(AtomicUsize::new(0));
    let hooks = agent_loop::Hooks::new().transform_tool_result({
        let hooked = Arc::clone(&hooked);
        move |result| {
            hooked.fetch_add(1, Ordering::SeqCst);
            async move { result }
        }
    });
    let options = Options::auto()
        .with_tools(registry([slow]))
        .with_tool_timeout(Duration::from_millis(100))
        .with_tool_result_max_bytes(120)
        .with_hooks(hooks)
        .with_tool_trace(true);
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_calls([
            ToolCall::new("fast", "slow", json!({"millis": 1})),
            ToolCall::new("late", "slow", json!({"millis": 1000})),
        ]),
        ScriptedTurn::text("ok"),
    ]);
    let mut session = Session::new(MODEL);
    execute(&mut session, "Go", &backend, &options)
        .await
        .unwrap();
    let result = execute(
        &mut session,
        vec![
            ApprovalDecision::approve("fast"),
            ApprovalDecision::approve("late"),
        ],
        &backend,
        &options,
    )
    .await
    .unwrap();
    assert_eq!(result.trace.len(), 2);
    assert!(result.trace[0].truncated, "{:?}", result.trace[0]);
    assert!(results(&session.messages)[0].content.len() <= 120);
    let late = results(&session.messages)[1];
    assert!(late.is_error);
    assert!(
        late.content.contains("did not finish within 100ms"),
        "{}",
        late.content
    );
    assert_eq!(hooked.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_token_budget_spans_the_approval_suspension() {
    let runs = Arc::new(AtomicUsize::new(0));
    let options = Options::auto()
        .with_tools(registry([counted("write", &runs, true)]))
        .with_token_budget(150);
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("c1", "write", json!({"path": "a"}))
            .with_usage(crate::support::usage(60, 40)),
        ScriptedTurn::text("ok").with_usage(crate::support::usage(60, 40)),
    ]);
    let mut session = Session::new(MODEL);
    execute(&mut session, "Go", &backend, &options)
        .await
        .unwrap();
    let loaded = Session::from_json(&session.to_json().unwrap()).unwrap();
    let mut session = loaded;
    let error = execute(
        &mut session,
        vec![ApprovalDecision::approve("c1")],
        &backend,
        &options,
    )
    .await
    .unwrap_err();
    // 100 tokens before the suspension + 100 after: over 150.
    assert!(
        matches!(error.kind, ErrorKind::BudgetExceeded { .. }),
        "{error}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_policy_decides_from_caller_tool_and_arguments() {
    let runs = Arc::new(AtomicUsize::new(0));
    let policy = |request: &agent_loop::ApprovalRequest<'_>| {
        if !request.caller.has_permission("files:write") {
            Approval::Deny(format!("{} may not write", request.caller.principal()))
        } else if request.arguments["path"]
            .as_str()
            .is_some_and(|path| path.starts_with('/'))
        {
            Approval::Require
        } else {
            Approval::Approve
        }
    };
    let turns = || {
        ScriptedBackend::new([
            ScriptedTurn::tool_calls([
                call("c1", "write", "notes.txt"),
                call("c2", "write", "/etc/x"),
            ]),
            ScriptedTurn::text("ok"),
        ])
    };
    let tools = || registry([counted("write", &runs, false)]);

    let writer = Options::auto()
        .with_tools(tools())
        .with_caller(Caller::new("ana").with_permission("files:write"))
        .with_approval_policy(policy);
    let mut session = Session::new(MODEL);
    let result = execute(&mut session, "Go", &turns(), &writer)
        .await
        .unwrap();
    assert_eq!(ids(&result.pending_approvals), ["c2"]);

    let reader = Options::auto()
        .with_tools(tools())
        .with_caller(Caller::new("bob"))
        .with_approval_policy(policy);
    let mut session = Session::new(MODEL);
    let result = execute(&mut session, "Go", &turns(), &reader)
        .await
        .unwrap();
    assert_eq!(result.status, SessionStatus::Completed);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(
        results(&session.messages)[0].content,
        "This call was not run: the approval policy denied it: bob may not write"
    );
}

#[tokio::test]
async fn approval_by_name_marks_imported_tools_and_refuses_unknown_names() {
    let runs = Arc::new(AtomicUsize::new(0));
    // As for an MCP-imported or resource tool: registered by someone else, marked by name.
    let mut tools = registry([counted("write", &runs, false)]);
    assert!(!tools.get("write").unwrap().tool().requires_approval());
    tools.require_approval(["write"]).unwrap();
    assert!(tools.get("write").unwrap().tool().requires_approval());
    let error = tools.require_approval(["nope"]).unwrap_err();
    assert!(error.to_string().contains("nope"), "{error}");

    let backend =
        ScriptedBackend::new([ScriptedTurn::tool_call("c1", "write", json!({"path": "a"}))]);
    let mut session = Session::new(MODEL);
    let result = execute(
        &mut session,
        "Go",
        &backend,
        &Options::auto().with_tools(tools),
    )
    .await
    .unwrap();
    assert_eq!(result.status, SessionStatus::AwaitingApproval);

    // The configuration form: names checked when the run starts.
    let options = Options::auto()
        .with_tools(registry([counted("write", &runs, false)]))
        .require_approval_for(["write", "wrtie"]);
    let mut session = Session::new(MODEL);
    let error = execute(&mut session, "Go", &backend, &options)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Config);
    assert!(error.message.contains("wrtie"), "{error}");
    assert_eq!(session.status, SessionStatus::Idle);
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/providers")
}

/// A recorded OpenAI turn (pydantic-ai's human-in-the-loop test) asks for `delete_file` and
/// `create_file` at once; `delete_file` needs approval. Approved, both run in call order and
/// the next recorded turn answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_openai_tool_call_turn_waits_for_approval_then_runs() {
    let cassettes = [
        Cassette::from_file(fixtures().join("openai-chat/parallel-tool-calls.json")).unwrap(),
        Cassette::from_file(fixtures().join("openai-chat/text.json")).unwrap(),
    ];
    let backend = ReplayBackend::start(Provider::OpenAiChat, cassettes)
        .await
        .unwrap();
    let deleted = Arc::new(AtomicUsize::new(0));
    let created = Arc::new(AtomicUsize::new(0));
    let options = Options::auto().with_tools(registry([
        counted("delete_file", &deleted, true),
        counted("create_file", &created, false),
    ]));
    let mut session = Session::new("gpt-4o");
    let (events, result) = collect(execute_stream(
        &mut session,
        "Delete .env and create test.txt",
        &backend,
        &options,
    ))
    .await;
    let result = result.unwrap();
    assert_eq!(result.status, SessionStatus::AwaitingApproval);
    assert_eq!(result.pending_approvals.len(), 1);
    let waiting = &result.pending_approvals[0];
    assert_eq!(waiting.name, "delete_file");
    assert_eq!(waiting.arguments, json!({"path": ".env"}));
    assert!(
        events
            .iter()
            .any(|event| kind(event) == "approval_requested")
    );
    assert_eq!(created.load(Ordering::SeqCst), 0);

    let mut loaded = Session::from_json(&session.to_json().unwrap()).unwrap();
    let result = execute(
        &mut loaded,
        vec![ApprovalDecision::approve(waiting.id.as_str())],
        &backend,
        &options,
    )
    .await
    .unwrap();
    assert_eq!(result.status, SessionStatus::Completed);
    assert!(
        result
            .text()
            .starts_with("Hello! I'm just a computer program")
    );
    assert_eq!(deleted.load(Ordering::SeqCst), 1);
    assert_eq!(created.load(Ordering::SeqCst), 1);
    let names: Vec<&str> = results(&loaded.messages)
        .iter()
        .map(|result| result.name.as_str())
        .collect();
    assert_eq!(names, ["delete_file", "create_file"]);
    // The second request carried both results, in call order, to the provider.
    let sent: Value = serde_json::from_slice(&backend.server().requests()[1].body).unwrap();
    let roles: Vec<&str> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "tool"]);
}

#[tokio::test]
async fn a_waiting_session_without_its_stored_round_is_refused_not_half_resumed() {
    let runs = Arc::new(AtomicUsize::new(0));
    let options = Options::auto().with_tools(registry([counted("write", &runs, true)]));
    let backend =
        ScriptedBackend::new([ScriptedTurn::tool_call("c1", "write", json!({"path": "a"}))]);
    let mut session = Session::new(MODEL);
    execute(&mut session, "Go", &backend, &options)
        .await
        .unwrap();
    let mut json: Value = serde_json::from_str(&session.to_json().unwrap()).unwrap();
    assert!(json["suspended"]["approval_round"].is_object(), "{json}");
    json["suspended"]
        .as_object_mut()
        .unwrap()
        .remove("approval_round");
    let mut edited = Session::from_json(&json.to_string()).unwrap();
    let before = edited.to_json().unwrap();
    let error = execute(
        &mut edited,
        vec![ApprovalDecision::approve("c1")],
        &backend,
        &options,
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Config);
    assert!(error.message.contains("no suspended tool round"), "{error}");
    assert_eq!(edited.to_json().unwrap(), before);

    // Waiting calls listed with other arguments than the stored round would run: refused.
    let mut json: Value = serde_json::from_str(&session.to_json().unwrap()).unwrap();
    json["pending_approvals"][0]["arguments"] = json!({"path": "harmless"});
    let mut edited = Session::from_json(&json.to_string()).unwrap();
    let error = execute(
        &mut edited,
        vec![ApprovalDecision::approve("c1")],
        &backend,
        &options,
    )
    .await
    .unwrap_err();
    assert!(
        error.message.contains("differ from its stored tool round"),
        "{error}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // A decision bound to the call as shown goes through.
    let waiting = session.pending_approvals[0].clone();
    let result = execute(
        &mut session,
        vec![ApprovalDecision::approve("c1").bound_to(&waiting)],
        &ScriptedBackend::new([ScriptedTurn::text("ok")]),
        &options,
    )
    .await
    .unwrap();
    assert_eq!(result.text(), "ok");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
