//! The engine tests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_loop::Session;
use agent_temporal::{RunHandle, RunRequest};

use crate::support::{
    RoundModel, WorkerProcess, lines, namespace, options, temporal_addr, timeless, unique,
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
    let handle = agent_temporal::start_run(
        &client,
        &queue,
        &queue,
        RunRequest::new(
            Session::with_id("s-durable", "test-model"),
            "What is (2 + 3) × 4?",
        ),
    )
    .await
    .unwrap();
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
    let _ = Arc::new(());
    let _ = RunHandle::new(client, queue);
}
