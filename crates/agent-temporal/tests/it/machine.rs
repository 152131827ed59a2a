//! The workflow drives the loop's state machine: one `model_call` activity per round, the
//! budgets decided in the workflow, and a history that replays to the same commands.

use std::time::Duration;

use agent_temporal::AgentRun;
use temporalio_client::{WorkflowFetchHistoryOptions, WorkflowHistory};
use temporalio_common::protos::temporal::api::enums::v1::EventType;
use temporalio_common::protos::temporal::api::history::v1::{History, HistoryEvent, history_event};
use temporalio_sdk::workflow_replayer::{WorkflowReplayer, WorkflowReplayerOptions};

use crate::durable::start;
use crate::support::{
    ArithmeticRules, RoundModel, WorkerProcess, lines, namespace, options, outcome_within,
    structured, structured_turns, temporal_addr, timeless, unique,
};

/// The activity types the history schedules, in order.
fn scheduled(events: &[HistoryEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match &event.attributes {
            Some(history_event::Attributes::ActivityTaskScheduledEventAttributes(a)) => {
                a.activity_type.as_ref().map(|t| t.name.clone())
            }
            _ => None,
        })
        .collect()
}

fn has(events: &[HistoryEvent], kind: EventType) -> bool {
    events.iter().any(|event| event.event_type() == kind)
}

async fn history(client: &temporalio_client::Client, id: &str) -> Vec<HistoryEvent> {
    client
        .get_workflow_handle::<AgentRun>(id)
        .fetch_history(WorkflowFetchHistoryOptions::default())
        .into_events()
        .await
        .unwrap()
}

/// With a limit of one tool round, the second round's tool call trips the budget: the machine
/// decides it in the workflow, after the second `model_call` came back. No activity fails (the
/// model call is one backend call, not a loop that could trip), the workflow completes, and
/// its outcome names the budget; the history holds one `model_call` per round, scheduled with
/// the worker's retry settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_round_is_one_model_call_and_a_budget_trip_is_decided_in_the_workflow() {
    let Some(addr) = temporal_addr() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));
    let queue = unique("budget");
    let env = [
        ("AGENTRY_TEMPORAL_MAX_ITERATIONS", "1"),
        ("AGENTRY_TEMPORAL_ATTEMPTS", "7"),
    ];
    let _worker = WorkerProcess::spawn_with(&queue, &tool_log, &model_log, Duration::ZERO, &env);
    let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
    let handle = start(&client, &queue, "s-budget").await;
    let outcome = outcome_within(60, &handle).await;

    assert_eq!(outcome.status, agent_loop::SessionStatus::Error);
    let error = outcome.error.clone().unwrap();
    assert!(
        error.starts_with("budget exceeded (tool iterations: 1 of 1)"),
        "{error}"
    );
    assert_eq!(outcome.model_calls, 2);
    assert_eq!(outcome.trace.len(), 1);
    assert_eq!(lines(&model_log), ["round 1", "round 2"]);
    assert_eq!(lines(&tool_log), ["done call_1"]);
    // The tripped round's call was never run, and the history stays valid: the call has the
    // loop's closing result.
    let last = outcome.session.messages.last().unwrap();
    assert!(
        matches!(last, agent_types::Message::Tool(result) if result.is_error),
        "{last:?}"
    );

    let events = history(&client, &queue).await;
    assert_eq!(
        scheduled(&events),
        ["run_config", "model_call", "tool_call", "model_call"]
    );
    assert!(!has(&events, EventType::ActivityTaskFailed));
    // The worker's retry settings, not constants, are the activities' retry policy.
    for event in &events {
        if let Some(history_event::Attributes::ActivityTaskScheduledEventAttributes(a)) =
            &event.attributes
            && a.activity_type.as_ref().unwrap().name != "run_config"
        {
            let policy = a.retry_policy.as_ref().unwrap();
            assert_eq!(policy.maximum_attempts, 7);
            let initial = policy.initial_interval.as_ref().unwrap();
            assert_eq!((initial.seconds, initial.nanos), (0, 250_000_000));
            assert_eq!(policy.maximum_interval.as_ref().unwrap().seconds, 4);
        }
    }
    assert!(!has(&events, EventType::ActivityTaskTimedOut));
    assert!(has(&events, EventType::WorkflowExecutionCompleted));
}

/// The SDK's history replayer runs the workflow code again over a finished run's history (a
/// 3-round run with tool calls): the same commands come out, so the machine, the estimate and
/// everything the workflow decides are deterministic. A history whose second model call was
/// recorded as another activity is reported as nondeterministic, so the check can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workflow_replays_its_history_deterministically() {
    let Some(addr) = temporal_addr() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));
    let queue = unique("replay");
    let _worker = WorkerProcess::spawn(&queue, &tool_log, &model_log, Duration::ZERO);
    let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
    let handle = start(&client, &queue, "s-replay").await;
    let outcome = outcome_within(60, &handle).await;
    assert_eq!(outcome.model_calls, 3);
    let events = history(&client, &queue).await;
    assert_eq!(
        scheduled(&events),
        [
            "run_config",
            "model_call",
            "tool_call",
            "model_call",
            "tool_call",
            "model_call"
        ]
    );

    // The driver's own time: each workflow task from its start to its completion as the
    // server recorded them (the worker's replay of the machine plus one round trip).
    let at = |event: &HistoryEvent| {
        let time = event.event_time.as_ref().unwrap();
        time.seconds as f64 + f64::from(time.nanos) / 1e9
    };
    let mut started = None;
    let mut tasks = Vec::new();
    for event in &events {
        match event.event_type() {
            EventType::WorkflowTaskStarted => started = Some(at(event)),
            EventType::WorkflowTaskCompleted => tasks.push(at(event) - started.take().unwrap()),
            _ => {}
        }
    }
    let total: f64 = tasks.iter().sum();
    eprintln!(
        "workflow tasks: {} taking {:.1} ms in all ({:.2} ms each, {:.1} ms a round); the run \
         from start to end {:.0} ms",
        tasks.len(),
        total * 1e3,
        total * 1e3 / tasks.len() as f64,
        total * 1e3 / 3.0,
        (at(events.last().unwrap()) - at(&events[0])) * 1e3,
    );

    let replayer = WorkflowReplayer::new(
        WorkflowReplayerOptions::new()
            .register_workflow::<AgentRun>()
            .unwrap()
            .build(),
    )
    .unwrap();
    replayer
        .replay_workflow(WorkflowHistory::from(History {
            events: events.clone(),
        }))
        .await
        .unwrap();

    // The same history with the second model call recorded as a tool call.
    let mut tampered = events;
    let second = tampered
        .iter_mut()
        .filter_map(|event| match &mut event.attributes {
            Some(history_event::Attributes::ActivityTaskScheduledEventAttributes(a)) => {
                a.activity_type.as_mut()
            }
            _ => None,
        })
        .filter(|t| t.name == "model_call")
        .nth(1)
        .unwrap();
    second.name = "tool_call".to_string();
    let replayed = replayer
        .replay_workflow(WorkflowHistory::from(History { events: tampered }))
        .await;
    assert!(
        replayed.is_err(),
        "a changed history replayed: {replayed:?}"
    );
}

/// The activities hand their live events to the worker's sink (`AgentActivities::publish`),
/// keyed by the workflow id: each model call's stream as the in-process loop emits it
/// (`message_start`, the deltas, `message_end`) and each tool result as it joins the history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_activities_publish_the_runs_events_to_the_sink() {
    let Some(addr) = temporal_addr() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));
    let event_log = dir.path().join("events.log");
    let queue = unique("events");
    let env = [("AGENTRY_TEMPORAL_EVENT_LOG", event_log.to_str().unwrap())];
    let _worker = WorkerProcess::spawn_with(&queue, &tool_log, &model_log, Duration::ZERO, &env);
    let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
    let handle = start(&client, &queue, "s-events").await;
    outcome_within(60, &handle).await;
    let events = lines(&event_log);
    assert!(!events.is_empty());
    let prefix = format!("{queue} ");
    assert!(
        events.iter().all(|line| line.starts_with(&prefix)),
        "{events:?}"
    );
    let kinds: Vec<&str> = events.iter().map(|line| &line[prefix.len()..]).collect();
    let count = |kind: &str| kinds.iter().filter(|k| **k == kind).count();
    // Three model calls and two tool results, each opened and closed once.
    assert_eq!(count("message_start"), 5, "{kinds:?}");
    assert_eq!(count("message_end"), 5, "{kinds:?}");
    assert!(count("text_delta") >= 1, "{kinds:?}");
    assert_eq!(kinds.first(), Some(&"message_start"));
    assert_eq!(kinds.last(), Some(&"message_end"));
}

/// A model call's failure is typed: a 400 comes back from `model_call` as data, is not
/// retried and ends the run through the machine (the workflow completes with the error); a 503
/// is an activity failure Temporal retries with the worker's settings, and once they are spent
/// the machine ends the run with a backend error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4xx_ends_the_run_at_once_and_a_5xx_is_retried_by_the_workers_settings() {
    let Some(addr) = temporal_addr() else { return };
    let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
    for (kind, model_calls) in [("invalid_request", 1), ("server", 3)] {
        let dir = tempfile::tempdir().unwrap();
        let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));
        let queue = unique(kind);
        let env = [
            ("AGENTRY_TEMPORAL_FAIL_ROUND_TWO", kind),
            ("AGENTRY_TEMPORAL_ATTEMPTS", "3"),
        ];
        let _worker =
            WorkerProcess::spawn_with(&queue, &tool_log, &model_log, Duration::ZERO, &env);
        let handle = start(&client, &queue, "s-fail").await;
        let outcome = outcome_within(60, &handle).await;
        assert_eq!(outcome.status, agent_loop::SessionStatus::Error, "{kind}");
        let error = outcome.error.clone().unwrap();
        let status = if kind == "server" { "503" } else { "400" };
        assert!(
            error.contains(&format!("scripted {status}")),
            "{kind}: {error}"
        );
        // Round 2 went to the model once for the 400, three times (the attempts) for the 503.
        let mut expected = vec!["round 1".to_string()];
        expected.extend(std::iter::repeat_n("round 2".to_string(), model_calls));
        assert_eq!(lines(&model_log), expected, "{kind}");
        assert_eq!(outcome.model_calls, 1);
        assert_eq!(lines(&tool_log), ["done call_1"]);
        let events = history(&client, &queue).await;
        assert_eq!(
            scheduled(&events),
            ["run_config", "model_call", "tool_call", "model_call"],
            "{kind}"
        );
        // Only the spent retries of the 503 leave a failed activity in the history.
        assert_eq!(
            has(&events, EventType::ActivityTaskFailed),
            kind == "server",
            "{kind}"
        );
        assert!(has(&events, EventType::WorkflowExecutionCompleted));
    }
}

/// A run with nothing to send (no user message, an empty session) ends with the in-process
/// loop's configuration error, decided before any model call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_nothing_to_send_ends_before_any_model_call() {
    let Some(addr) = temporal_addr() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));
    let queue = unique("empty");
    let _worker = WorkerProcess::spawn(&queue, &tool_log, &model_log, Duration::ZERO);
    let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
    let mut request = crate::durable::request("s-empty");
    request.user = None;
    let handle = agent_temporal::start_run(&client, &queue, &queue, request)
        .await
        .unwrap();
    let outcome = outcome_within(60, &handle).await;
    assert_eq!(outcome.status, agent_loop::SessionStatus::Error);
    assert!(
        outcome
            .error
            .as_deref()
            .unwrap()
            .contains("there is nothing to send"),
        "{:?}",
        outcome.error
    );
    assert_eq!(outcome.model_calls, 0);
    assert!(lines(&model_log).is_empty());
    assert_eq!(scheduled(&history(&client, &queue).await), ["run_config"]);
}

/// A structured-output run on Temporal ends as in process: the machine judges each answer in
/// the workflow, sends the invalid one back (a push, another model call), emits the valid one
/// and finishes with it; same answer, structured output, usage, trace and history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_structured_run_is_judged_and_retried_in_the_workflow_as_in_process() {
    let Some(addr) = temporal_addr() else { return };
    let backend = RoundModel::with_turns(structured_turns(), None);
    let mut session = agent_loop::Session::with_id("s-structured", "test-model");
    let local = agent_loop::execute(
        &mut session,
        "What is 2 + 3?",
        &backend,
        &structured(options(None, Duration::ZERO)),
    )
    .await
    .unwrap();
    assert_eq!(local.output, Some(serde_json::json!({"total": 5})));

    let dir = tempfile::tempdir().unwrap();
    let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));
    let queue = unique("structured");
    let env = [("AGENTRY_TEMPORAL_STRUCTURED", "1")];
    let _worker = WorkerProcess::spawn_with(&queue, &tool_log, &model_log, Duration::ZERO, &env);
    let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
    let request = agent_temporal::RunRequest::new(
        agent_loop::Session::with_id("s-structured", "test-model"),
        "What is 2 + 3?",
    );
    let handle = agent_temporal::start_run(&client, &queue, &queue, request)
        .await
        .unwrap();
    let outcome = outcome_within(60, &handle).await;
    assert_eq!(outcome.error, None);
    assert_eq!(outcome.output, local.output);
    assert_eq!(outcome.answer, local.message.text_content());
    assert_eq!(outcome.usage, local.usage);
    assert_eq!(timeless(&outcome.trace), timeless(&local.trace));
    assert_eq!(outcome.session.messages, session.messages);
    assert_eq!(outcome.model_calls, 3);
    assert_eq!(lines(&model_log), ["round 1", "round 2", "round 3"]);
}

/// The worker's input guardrails check the caller's new message before any model call, as
/// the in-process loop does: a trip ends the run with `guardrail_tripped` and the model is
/// never asked; a message that passes runs as usual. (Seen: once the workflow drove the
/// machine, nothing ran the input checks on Temporal, and the message went to the model.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_input_guardrails_refuse_a_message_before_any_model_call() {
    let Some(addr) = temporal_addr() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));
    let queue = unique("input-guard");
    let env = [("AGENTRY_TEMPORAL_INPUT_TRIP", "aubergine")];
    let _worker = WorkerProcess::spawn_with(&queue, &tool_log, &model_log, Duration::ZERO, &env);
    let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
    let run = |id: &str, text: &str| {
        agent_temporal::RunRequest::new(agent_loop::Session::with_id(id, "test-model"), text)
    };
    let handle = agent_temporal::start_run(
        &client,
        &queue,
        &format!("{queue}-tripped"),
        run("s-input-tripped", "What is (2 + 3) × 4, aubergine?"),
    )
    .await
    .unwrap();
    let outcome = outcome_within(60, &handle).await;
    let error = outcome.error.expect("the input guardrail trips the run");
    assert!(error.contains("no-word"), "{error}");
    assert_eq!(outcome.status, agent_loop::SessionStatus::Error);
    assert_eq!(outcome.model_calls, 0);
    assert!(lines(&model_log).is_empty(), "the model was asked");

    let handle = agent_temporal::start_run(
        &client,
        &queue,
        &format!("{queue}-passed"),
        run("s-input-passed", "What is (2 + 3) × 4?"),
    )
    .await
    .unwrap();
    let outcome = outcome_within(60, &handle).await;
    assert!(outcome.error.is_none(), "{:?}", outcome.error);
    assert_eq!(outcome.model_calls, 3);
}

/// A tool guardrail on Temporal decides as in a round of the in-process loop: the call it
/// rewrote runs with the new arguments and its trace entry keeps the rewrite (the screening's
/// decision, carried by the machine to `tool_call`), the call it denied never runs; same
/// trace, history and answer as in process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_guardrails_decisions_reach_the_trace_as_in_process() {
    let Some(addr) = temporal_addr() else { return };
    let backend = RoundModel::new(None);
    let mut session = agent_loop::Session::with_id("s-guard", "test-model");
    let guarded = options(None, Duration::ZERO)
        .with_guardrails(agent_loop::Guardrails::new().tool(ArithmeticRules));
    let local = agent_loop::execute(&mut session, "What is (2 + 3) × 4?", &backend, &guarded)
        .await
        .unwrap();
    let actions = |trace: &[agent_types::TraceEntry]| -> Vec<Vec<String>> {
        trace
            .iter()
            .map(|entry| {
                entry
                    .guardrails()
                    .iter()
                    .map(|d| format!("{:?}", d.action))
                    .collect()
            })
            .collect()
    };
    assert_eq!(actions(&local.trace), [vec!["Rewrite"], vec!["Deny"]]);

    let dir = tempfile::tempdir().unwrap();
    let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));
    let queue = unique("guard");
    let env = [("AGENTRY_TEMPORAL_GUARDRAIL", "1")];
    let _worker = WorkerProcess::spawn_with(&queue, &tool_log, &model_log, Duration::ZERO, &env);
    let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
    let request = agent_temporal::RunRequest::new(
        agent_loop::Session::with_id("s-guard", "test-model"),
        "What is (2 + 3) × 4?",
    );
    let handle = agent_temporal::start_run(&client, &queue, &queue, request)
        .await
        .unwrap();
    let outcome = outcome_within(60, &handle).await;
    assert_eq!(actions(&outcome.trace), actions(&local.trace));
    assert_eq!(timeless(&outcome.trace), timeless(&local.trace));
    assert_eq!(outcome.session.messages, session.messages);
    assert_eq!(outcome.answer, local.message.text_content());
    // The rewritten `add` ran; the denied `multiply` did not.
    assert_eq!(lines(&tool_log), ["done call_1"]);
}

/// Continue-as-new carries the machine's state: with a limit of one tool round and a new
/// workflow run before every model call but the first, the second round's call still trips
/// the budget counted in the first run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_as_new_carries_the_machines_budgets() {
    let Some(addr) = temporal_addr() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));
    let queue = unique("can-budget");
    let env = [("AGENTRY_TEMPORAL_MAX_ITERATIONS", "1")];
    let _worker = WorkerProcess::spawn_with(&queue, &tool_log, &model_log, Duration::ZERO, &env);
    let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
    let mut request = crate::durable::request("s-can-budget");
    request.continue_as_new_after = Some(10);
    let handle = agent_temporal::start_run(&client, &queue, &queue, request)
        .await
        .unwrap();
    let outcome = outcome_within(60, &handle).await;
    assert_eq!(outcome.continued, 1);
    assert_eq!(outcome.model_calls, 2);
    let error = outcome.error.clone().unwrap();
    assert!(
        error.starts_with("budget exceeded (tool iterations: 1 of 1)"),
        "{error}"
    );
    assert_eq!(lines(&model_log), ["round 1", "round 2"]);
    assert_eq!(outcome.usage.input_tokens, Some(240));
}
