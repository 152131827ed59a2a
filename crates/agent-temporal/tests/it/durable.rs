//! The engine tests.

use std::time::{Duration, Instant};

use agent_loop::Session;
use agent_temporal::{RunHandle, RunRequest};

use crate::support::{
    RoundModel, WorkerProcess, lines, namespace, options, outcome_within, temporal_addr, timeless,
    unique, wait_until,
};

/// Test 1: a 3-round run on Temporal gives the same answer, trace and usage as the in-process
/// loop on the same recorded model; and the driver's overhead per round next to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_round_run_matches_the_in_process_loop() {
    let Some(addr) = temporal_addr() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));

    // In process.
    let backend = RoundModel::new(None);
    let mut session = Session::with_id("s-local", "test-model");
    let started = Instant::now();
    let local = agent_loop::execute(
        &mut session,
        "What is (2 + 3) × 4?",
        &backend,
        &options(None, Duration::ZERO),
    )
    .await
    .unwrap();
    let in_process = started.elapsed();
    assert_eq!(
        local.trace.len(),
        2,
        "{:?} {:?}",
        local.status,
        local.messages
    );

    // On Temporal, the worker a child process.
    let queue = unique("three-rounds");
    let _worker = WorkerProcess::spawn(&queue, &tool_log, &model_log, Duration::ZERO);
    let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
    let started = Instant::now();
    let handle = start(&client, &queue, "s-durable").await;
    let outcome = handle.outcome().await.unwrap();
    let durable = started.elapsed();

    assert_eq!(outcome.answer, local.message.text_content());
    assert_eq!(outcome.answer, "2 + 3 = 5, and 5 × 4 = 20.");
    assert_eq!(outcome.usage, local.usage);
    assert_eq!(timeless(&outcome.trace), timeless(&local.trace));
    assert_eq!(outcome.model_calls, 3);
    assert_eq!(outcome.session.messages, session.messages);
    assert_eq!(lines(&model_log), ["round 1", "round 2", "round 3"]);
    assert_eq!(
        lines(&tool_log),
        ["done call_1", "started call_2", "done call_2"]
    );
    // The queries answer after the end too.
    assert_eq!(handle.trace().await.unwrap(), outcome.trace);

    eprintln!(
        "driver overhead: in-process {:.2} ms for 3 rounds ({:.2} ms/round); on Temporal {:.1} ms \
         ({:.1} ms/round, worker already polling)",
        in_process.as_secs_f64() * 1e3,
        in_process.as_secs_f64() * 1e3 / 3.0,
        durable.as_secs_f64() * 1e3,
        durable.as_secs_f64() * 1e3 / 3.0,
    );
    // A handle made from the id alone reads the same run.
    let again = RunHandle::new(client, queue);
    assert_eq!(again.outcome().await.unwrap(), outcome);
}

fn count(lines: &[String], line: &str) -> usize {
    lines.iter().filter(|l| l.as_str() == line).count()
}

/// The arithmetic question every test asks, in session `id`.
pub(crate) fn request(id: &str) -> RunRequest {
    RunRequest::new(Session::with_id(id, "test-model"), "What is (2 + 3) × 4?")
}

/// Starts [`request`] on `queue`, which is also the workflow id.
pub(crate) async fn start(client: &temporalio_client::Client, queue: &str, id: &str) -> RunHandle {
    agent_temporal::start_run(client, queue, queue, request(id))
        .await
        .unwrap()
}

/// The calls the run waits on, once it waits on some.
async fn pending(handle: &RunHandle) -> Vec<agent_types::ToolCall> {
    loop {
        let pending = handle.pending().await.unwrap();
        if !pending.is_empty() {
            break pending;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Test 2: kill -9 of the worker during a tool call; another worker finishes the run. Every
/// completed tool call ran exactly once, and no completed round went to the model again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_is_replaced_and_completed_work_is_not_redone() {
    let Some(addr) = temporal_addr() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));
    let slow = Duration::from_secs(3);
    let queue = unique("kill");
    let mut first = WorkerProcess::spawn(&queue, &tool_log, &model_log, slow);
    let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
    let handle = start(&client, &queue, "s-kill").await;
    wait_until(60, "the slow tool to start", || {
        lines(&tool_log).contains(&"started call_2".to_string())
    })
    .await;
    first.kill();
    let _second = WorkerProcess::spawn(&queue, &tool_log, &model_log, slow);
    let outcome = outcome_within(120, &handle).await;

    assert_eq!(outcome.answer, "2 + 3 = 5, and 5 × 4 = 20.");
    let tools = lines(&tool_log);
    // The interrupted call ran again (at least once); each completed call once.
    assert_eq!(count(&tools, "done call_1"), 1, "{tools:?}");
    assert_eq!(count(&tools, "done call_2"), 1, "{tools:?}");
    assert_eq!(count(&tools, "started call_2"), 2, "{tools:?}");
    // Every round went to the model once: the new worker replayed the history, not the model.
    assert_eq!(lines(&model_log), ["round 1", "round 2", "round 3"]);
    assert_eq!(outcome.trace.len(), 2);
}

/// Test 3: a call waiting for approval waits across a worker restart, and the signal resumes
/// it; a remote tool's result likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_and_remote_results_wait_across_a_worker_restart() {
    let Some(addr) = temporal_addr() else { return };
    let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
    for (setting, signal_approval) in [
        ("AGENTRY_TEMPORAL_APPROVE", true),
        ("AGENTRY_TEMPORAL_REMOTE", false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));
        let queue = unique(if signal_approval { "approve" } else { "remote" });
        let env = [(setting, "multiply")];
        let mut first =
            WorkerProcess::spawn_with(&queue, &tool_log, &model_log, Duration::ZERO, &env);
        let handle = start(&client, &queue, "s-wait").await;
        let pending = pending(&handle).await;
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].id.as_str(), "call_2");
        let status = handle.status().await.unwrap();
        let expected = if signal_approval {
            agent_loop::SessionStatus::AwaitingApproval
        } else {
            agent_loop::SessionStatus::AwaitingToolExecution
        };
        assert_eq!(status.status, expected);
        assert_eq!(status.model_calls, 2);

        // No worker while it waits; a new one takes the signal.
        first.kill();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _second =
            WorkerProcess::spawn_with(&queue, &tool_log, &model_log, Duration::ZERO, &env);
        if signal_approval {
            let decision: agent_loop::ApprovalDecision =
                serde_json::from_value(serde_json::json!({"call_id": "call_2", "approved": true}))
                    .unwrap();
            handle.approve(vec![decision]).await.unwrap();
        } else {
            handle
                .tool_results(vec![agent_types::ToolResult::ok(
                    "call_2", "multiply", "20",
                )])
                .await
                .unwrap();
        }
        let outcome = outcome_within(120, &handle).await;
        assert_eq!(outcome.answer, "2 + 3 = 5, and 5 × 4 = 20.");
        assert_eq!(lines(&model_log), ["round 1", "round 2", "round 3"]);
        let tools = lines(&tool_log);
        if signal_approval {
            assert_eq!(tools, ["done call_1", "started call_2", "done call_2"]);
        } else {
            // The remote call ran nowhere on the worker.
            assert_eq!(tools, ["done call_1"]);
        }
    }
}

/// Test 4: cancelling the workflow cancels the running tool: its cancellation token fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_workflow_cancels_the_running_tool() {
    let Some(addr) = temporal_addr() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));
    let queue = unique("cancel");
    let _worker = WorkerProcess::spawn(&queue, &tool_log, &model_log, Duration::from_secs(120));
    let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
    let handle = start(&client, &queue, "s-cancel").await;
    wait_until(60, "the slow tool to start", || {
        lines(&tool_log).contains(&"started call_2".to_string())
    })
    .await;
    let asked = Instant::now();
    handle.cancel().await.unwrap();
    wait_until(30, "the tool's cancellation", || {
        lines(&tool_log).contains(&"cancelled call_2".to_string())
    })
    .await;
    eprintln!(
        "the tool saw the cancellation {:?} after the request",
        asked.elapsed()
    );
    let ended = tokio::time::timeout(Duration::from_secs(60), handle.outcome())
        .await
        .unwrap();
    assert!(ended.is_err(), "a cancelled run has no outcome: {ended:?}");
    assert!(!lines(&tool_log).contains(&"done call_2".to_string()));
}

/// Test 5: a Python client (PyPI `temporalio`) starts `agent_run` by name and reads its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_client_starts_the_workflow_by_name() {
    let Some(addr) = temporal_addr() else { return };
    let python = match std::env::var("AGENTRY_TEST_TEMPORAL_PYTHON") {
        Ok(python) => python,
        Err(_) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "AGENTRY_TEST_TEMPORAL_PYTHON is not set: CI must run `eval \"$(bash .ci/temporal.sh start)\"` first"
            );
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));
    let queue = unique("python");
    let _worker = WorkerProcess::spawn(&queue, &tool_log, &model_log, Duration::ZERO);
    let request = serde_json::to_string(&request("s-python")).unwrap();
    let script = format!("{}/tests/python_client.py", env!("CARGO_MANIFEST_DIR"));
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(python)
            .args([&script, &addr, &namespace(), &queue, &queue, &request])
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python client failed ({}): stderr {stderr:?}, stdout {:?}",
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["answer"], "2 + 3 = 5, and 5 × 4 = 20.");
    assert_eq!(result["status"], "completed");
    assert_eq!(result["model_calls"], 3);
    assert_eq!(result["trace"].as_array().unwrap().len(), 2);
    assert_eq!(result["queried_status"]["status"], "completed");
}

/// A person's denial refuses the call as the in-process loop does: the tool never runs, the
/// model sees the loop's denial text, and the trace records it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_is_refused_as_the_loop_refuses_it() {
    let Some(addr) = temporal_addr() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));
    let queue = unique("deny");
    let env = [("AGENTRY_TEMPORAL_APPROVE", "multiply")];
    let _worker = WorkerProcess::spawn_with(&queue, &tool_log, &model_log, Duration::ZERO, &env);
    let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
    let handle = start(&client, &queue, "s-deny").await;
    let pending = pending(&handle).await;
    // A decision bound to other arguments does not fit the waiting call: it keeps waiting.
    let stale = agent_loop::ApprovalDecision::approve("call_2").bound_to(
        &agent_types::ToolCall::new("call_2", "multiply", serde_json::json!({"a": 1, "b": 1})),
    );
    handle.approve(vec![stale]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(handle.pending().await.unwrap(), pending);
    handle
        .approve(vec![agent_loop::ApprovalDecision::deny(
            "call_2", "not now",
        )])
        .await
        .unwrap();
    let outcome = outcome_within(60, &handle).await;
    let denial = "This call was not run: the user denied it: not now";
    assert_eq!(outcome.trace[1].error.as_deref(), Some(denial));
    let agent_types::Message::Tool(result) = &outcome.session.messages[4] else {
        panic!("{:?}", outcome.session.messages);
    };
    assert!(result.is_error);
    assert_eq!(result.content, denial);
    assert_eq!(lines(&tool_log), ["done call_1"]);
}

/// Past the history size, the workflow continues as new and the run still ends as in process:
/// same answer, trace and usage, each round sent to the model once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_continues_as_new_past_the_history_size() {
    let Some(addr) = temporal_addr() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));
    let backend = RoundModel::new(None);
    let mut session = Session::with_id("s-local", "test-model");
    let local = agent_loop::execute(
        &mut session,
        "What is (2 + 3) × 4?",
        &backend,
        &options(None, Duration::ZERO),
    )
    .await
    .unwrap();

    let queue = unique("continue");
    let _worker = WorkerProcess::spawn(&queue, &tool_log, &model_log, Duration::ZERO);
    let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
    let mut request = request("s-can");
    // A round takes more than 10 events: every model call after the first starts a new run.
    request.continue_as_new_after = Some(10);
    let handle = agent_temporal::start_run(&client, &queue, &queue, request)
        .await
        .unwrap();
    let outcome = outcome_within(60, &handle).await;
    assert_eq!(outcome.continued, 2);
    assert_eq!(outcome.answer, local.message.text_content());
    assert_eq!(outcome.usage, local.usage);
    assert_eq!(timeless(&outcome.trace), timeless(&local.trace));
    assert_eq!(outcome.model_calls, 3);
    assert_eq!(lines(&model_log), ["round 1", "round 2", "round 3"]);
}
