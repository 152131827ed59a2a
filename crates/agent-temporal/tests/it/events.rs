//! Live events: the PostgreSQL event log itself, and a run on Temporal whose viewer sees the
//! in-process loop's event sequence.

use std::time::{Duration, Instant};

use agent_loop::Session;
use agent_temporal::RunRequest;
use agent_temporal::events::{EventLimits, PgEventLog, Published};
use agent_types::{AgentEvent, SessionId};
use futures_util::StreamExt;

use crate::support::{WorkerProcess, namespace, options, temporal_addr, unique};

/// `AGENTRY_TEST_POSTGRES_URL`, or `None` (skip) outside CI.
fn postgres_url() -> Option<String> {
    match std::env::var("AGENTRY_TEST_POSTGRES_URL") {
        Ok(url) => Some(url),
        Err(_) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "AGENTRY_TEST_POSTGRES_URL is not set under CI"
            );
            eprintln!("skipped: set AGENTRY_TEST_POSTGRES_URL to run against PostgreSQL");
            None
        }
    }
}

fn delta(text: &str) -> AgentEvent {
    AgentEvent::TextDelta {
        delta: text.to_string(),
    }
}

fn published(key: &str, event: AgentEvent) -> Published {
    Published {
        key: key.to_string(),
        event,
    }
}

async fn next(
    stream: &mut (
             impl futures_util::Stream<
        Item = Result<agent_temporal::events::LoggedEvent, agent_temporal::Error>,
    > + Unpin
         ),
) -> (i64, AgentEvent) {
    let item = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("an event within 10 s")
        .expect("the stream goes on")
        .unwrap();
    (item.seq, item.event)
}

/// The log keeps events in publish order under growing seqs, keeps the first copy of a key (a
/// retried activity publishes again under the same keys), hands a late viewer everything after
/// its seq, wakes a waiting viewer through the notification (well under the 1 s fallback
/// poll), and bounds deltas per run and bytes per event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_log_orders_dedupes_and_resumes_after_a_seq() {
    let Some(url) = postgres_url() else { return };
    let limits = EventLimits {
        max_events_per_run: 4,
        max_event_bytes: 64,
        ..EventLimits::default()
    };
    let log = PgEventLog::connect(&url, limits).await.unwrap().shared();
    let id = unique("log");
    assert_eq!(log.last_seq(&id).await.unwrap(), 0);
    log.publish(
        &id,
        &[
            published("r/a1/0", delta("a")),
            published("r/a1/1", delta("b")),
        ],
    )
    .await
    .unwrap();
    // The retry of activity a1: its first two events again, then one more.
    log.publish(
        &id,
        &[
            published("r/a1/0", delta("a")),
            published("r/a1/1", delta("b")),
            published("r/a1/2", delta("c")),
        ],
    )
    .await
    .unwrap();
    assert_eq!(log.last_seq(&id).await.unwrap(), 3);

    let mut all = log.subscribe(&id, 0);
    assert_eq!(next(&mut all).await, (1, delta("a")));
    assert_eq!(next(&mut all).await, (2, delta("b")));
    assert_eq!(next(&mut all).await, (3, delta("c")));
    let mut late = log.subscribe(&id, 2);
    assert_eq!(next(&mut late).await, (3, delta("c")));

    // A waiting viewer is woken by the write's notification.
    let writer = log.clone();
    let wid = id.clone();
    let published_at = Instant::now();
    tokio::spawn(async move {
        writer
            .publish(&wid, &[published("r/a2/0", delta("d"))])
            .await
            .unwrap();
    });
    assert_eq!(next(&mut all).await, (4, delta("d")));
    let waited = published_at.elapsed();
    eprintln!("a waiting viewer got the event {waited:?} after the publish began");
    assert!(
        waited < Duration::from_millis(700),
        "woken by the notification, not the fallback poll: {waited:?}"
    );

    // Past 4 events only whole ones go in; a delta past 64 bytes never does.
    let start = AgentEvent::SessionStart {
        session_id: SessionId::from("s"),
    };
    log.publish(
        &id,
        &[
            published("r/a3/0", delta("e")),
            published("r/a3/1", AgentEvent::TextStart),
            published("r/a3/2", start.clone()),
        ],
    )
    .await
    .unwrap();
    assert_eq!(next(&mut all).await, (5, AgentEvent::TextStart));
    assert_eq!(next(&mut all).await, (6, start));
    let other = unique("log-big");
    log.publish(
        &other,
        &[
            published("k/0", delta(&"x".repeat(100))),
            published("k/1", delta("y")),
        ],
    )
    .await
    .unwrap();
    let mut big = log.subscribe(&other, 0);
    assert_eq!(next(&mut big).await, (1, delta("y")));
}

fn end(reason: agent_types::StopReason) -> AgentEvent {
    AgentEvent::SessionEnd {
        session_id: SessionId::from("s"),
        messages: Vec::new(),
        finish_reason: reason,
    }
}

/// A run's events go once it has ended and the retention has passed (the next run's end
/// sweeps them); a suspension's `session_end` is not an end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_runs_events_go_after_the_retention() {
    let Some(url) = postgres_url() else { return };
    let limits = EventLimits {
        // Long enough that the other tests' viewers (same database, at the same time) have
        // read their runs' ends before this test's sweep.
        retention: Duration::from_secs(3),
        ..EventLimits::default()
    };
    let log = PgEventLog::connect(&url, limits).await.unwrap().shared();
    let (waiting, ended, next) = (unique("kept"), unique("ended"), unique("next"));
    log.publish(
        &waiting,
        &[published("r/l1/0", end(agent_types::StopReason::ToolCalls))],
    )
    .await
    .unwrap();
    log.publish(
        &ended,
        &[
            published("r/a1/0", delta("a")),
            published("r/l2/0", end(agent_types::StopReason::Stop)),
        ],
    )
    .await
    .unwrap();
    assert_eq!(log.last_seq(&ended).await.unwrap(), 2);
    tokio::time::sleep(Duration::from_millis(3_100)).await;
    log.publish(
        &next,
        &[published("r/l1/0", end(agent_types::StopReason::Stop))],
    )
    .await
    .unwrap();
    assert_eq!(log.last_seq(&ended).await.unwrap(), 0, "swept");
    assert_eq!(
        log.last_seq(&waiting).await.unwrap(),
        1,
        "a suspended run stays"
    );
}

/// A viewer of the events, as the CLI and the server show them: the JSON of each event.
fn json(events: &[AgentEvent]) -> Vec<serde_json::Value> {
    events
        .iter()
        .map(|event| serde_json::to_value(event).unwrap())
        .collect()
}

/// Item 2 of the live-events work: a 3-round run on Temporal, viewed through the event log,
/// shows the in-process loop's event sequence (same types, order, text, calls, messages).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_of_a_temporal_run_sees_the_in_process_event_sequence() {
    let Some(addr) = temporal_addr() else { return };
    let Some(url) = postgres_url() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));
    let question = "What is (2 + 3) × 4?";

    // In process.
    let backend = crate::support::RoundModel::new(None);
    let mut session = Session::with_id("s-events", "test-model");
    let opts = options(None, Duration::ZERO);
    let mut stream = agent_loop::execute_stream(&mut session, question, &backend, &opts);
    let mut local = Vec::new();
    while let Some(event) = stream.next().await {
        local.push(event);
    }
    stream.result().await.unwrap();

    // On Temporal, the worker publishing into PostgreSQL.
    let queue = unique("events");
    let _worker = WorkerProcess::spawn_with(
        &queue,
        &tool_log,
        &model_log,
        Duration::ZERO,
        &[("AGENTRY_TEMPORAL_EVENTS", url.as_str())],
    );
    let log = PgEventLog::connect(&url, EventLimits::default())
        .await
        .unwrap()
        .shared();
    let after = log.last_seq(&queue).await.unwrap();
    let mut viewer = agent_temporal::events::until_session_end(log.subscribe(&queue, after));
    let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
    let request = RunRequest::new(Session::with_id("s-events", "test-model"), question);
    let handle = agent_temporal::start_run(&client, &queue, &queue, request)
        .await
        .unwrap();
    let mut durable = Vec::new();
    let mut seqs = Vec::new();
    while let Some(item) = tokio::time::timeout(Duration::from_secs(60), viewer.next())
        .await
        .expect("the run's events within a minute")
    {
        let item = item.unwrap();
        seqs.push(item.seq);
        durable.push(item.event);
    }
    let outcome = handle.outcome().await.unwrap();
    assert_eq!(outcome.answer, "2 + 3 = 5, and 5 × 4 = 20.");
    assert_eq!(json(&durable), json(&local));
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
}

/// The in-process events of `input` on `session`, up to and including its `session_end`.
async fn in_process(
    session: &mut Session,
    input: impl Into<agent_loop::SessionInput>,
    backend: &dyn agent_types::Backend,
    options: &agent_loop::Options,
) -> Vec<AgentEvent> {
    let mut stream = agent_loop::execute_stream(session, input, backend, options);
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event);
    }
    let _ = stream.result().await;
    events
}

/// The events a viewer of `workflow` reads after `after`, up to its next `session_end`.
async fn viewed(
    log: &std::sync::Arc<dyn agent_temporal::events::EventLog>,
    workflow: &str,
    after: i64,
) -> (Vec<AgentEvent>, i64) {
    let mut viewer = agent_temporal::events::until_session_end(log.subscribe(workflow, after));
    let mut events = Vec::new();
    let mut last = after;
    while let Some(item) = tokio::time::timeout(Duration::from_secs(60), viewer.next())
        .await
        .expect("the run's events within a minute")
    {
        let item = item.unwrap();
        assert_eq!(item.seq, last + 1, "no gap, no duplicate");
        last = item.seq;
        events.push(item.event);
    }
    (events, last)
}

/// The workflow's own events in the merged driver (the machine's suspension, its resumption
/// and the run's end) reach the log in the in-process order: a run that waits for approval
/// shows `approval_requested` and a `session_end` with the part's messages, the approval's
/// continuation starts with `session_start` and ends as in process; a run whose model call
/// fails with a 400 ends with the same `error` and `session_end`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspensions_and_failures_reach_the_viewer_as_in_process() {
    let Some(addr) = temporal_addr() else { return };
    let Some(url) = postgres_url() else { return };
    let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
    let log = PgEventLog::connect(&url, EventLimits::default())
        .await
        .unwrap()
        .shared();
    let question = "What is (2 + 3) × 4?";

    // Approval: in process, the suspension then the approved continuation.
    let dir = tempfile::tempdir().unwrap();
    let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));
    let backend = crate::support::RoundModel::new(None);
    let mut registry = crate::support::registry(None, Duration::ZERO);
    registry.require_approval(["multiply"]).unwrap();
    let opts = options(None, Duration::ZERO).with_tools(registry);
    let mut session = Session::with_id("s-approve", "test-model");
    let approve = || vec![agent_loop::ApprovalDecision::approve("call_2")];
    let local_wait = in_process(&mut session, question, &backend, &opts).await;
    let local_rest = in_process(&mut session, approve(), &backend, &opts).await;
    assert!(matches!(
        local_wait.iter().rev().nth(1),
        Some(AgentEvent::ApprovalRequested { .. })
    ));

    let queue = unique("events-approve");
    let _worker = WorkerProcess::spawn_with(
        &queue,
        &tool_log,
        &model_log,
        Duration::ZERO,
        &[
            ("AGENTRY_TEMPORAL_EVENTS", url.as_str()),
            ("AGENTRY_TEMPORAL_APPROVE", "multiply"),
        ],
    );
    let after = log.last_seq(&queue).await.unwrap();
    let request = RunRequest::new(Session::with_id("s-approve", "test-model"), question);
    let handle = agent_temporal::start_run(&client, &queue, &queue, request)
        .await
        .unwrap();
    let (durable_wait, after) = viewed(&log, &queue, after).await;
    assert_eq!(json(&durable_wait), json(&local_wait));
    handle.approve(approve()).await.unwrap();
    let (durable_rest, _) = viewed(&log, &queue, after).await;
    assert_eq!(json(&durable_rest), json(&local_rest));
    handle.outcome().await.unwrap();

    // A 400 on the second model call ends the run with the backend's error.
    let mut error = agent_types::BackendError::new(
        agent_types::BackendErrorKind::InvalidRequest,
        "scripted 400",
    );
    error.status = Some(400);
    let backend = crate::support::RoundModel::new(None).failing_round_two(error);
    let opts = options(None, Duration::ZERO);
    let mut session = Session::with_id("s-fail", "test-model");
    let local = in_process(&mut session, question, &backend, &opts).await;
    assert!(matches!(
        local.iter().rev().nth(1),
        Some(AgentEvent::Error { .. })
    ));
    let queue = unique("events-fail");
    let _worker = WorkerProcess::spawn_with(
        &queue,
        &tool_log,
        &model_log,
        Duration::ZERO,
        &[
            ("AGENTRY_TEMPORAL_EVENTS", url.as_str()),
            ("AGENTRY_TEMPORAL_FAIL_ROUND_TWO", "invalid_request"),
        ],
    );
    let after = log.last_seq(&queue).await.unwrap();
    let request = RunRequest::new(Session::with_id("s-fail", "test-model"), question);
    let handle = agent_temporal::start_run(&client, &queue, &queue, request)
        .await
        .unwrap();
    let (durable, _) = viewed(&log, &queue, after).await;
    // The partial trace's wall times differ between the two runs.
    let timeless = |events: &[AgentEvent]| {
        let mut values = json(events);
        for value in &mut values {
            if let Some(trace) = value
                .pointer_mut("/error/partial_trace")
                .and_then(|trace| trace.as_array_mut())
            {
                for entry in trace {
                    entry.as_object_mut().unwrap().remove("duration_us");
                }
            }
        }
        values
    };
    assert_eq!(timeless(&durable), timeless(&local));
    handle.outcome().await.unwrap();
}

/// The machine's pushes and emits reach the viewer in place: a structured run (an answer that
/// is not JSON sent back with the problems as a user message, then the valid answer and its
/// `output` event) shows the in-process event sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_structured_runs_retry_and_output_reach_the_viewer_as_in_process() {
    let Some(addr) = temporal_addr() else { return };
    let Some(url) = postgres_url() else { return };
    let question = "What is 2 + 3?";
    let backend = crate::support::RoundModel::with_turns(crate::support::structured_turns(), None);
    let opts = crate::support::structured(options(None, Duration::ZERO));
    let mut session = Session::with_id("s-structured", "test-model");
    let local = in_process(&mut session, question, &backend, &opts).await;
    assert!(
        local
            .iter()
            .any(|event| matches!(event, AgentEvent::Output { .. }))
    );

    let dir = tempfile::tempdir().unwrap();
    let (tool_log, model_log) = (dir.path().join("tools.log"), dir.path().join("model.log"));
    let queue = unique("events-structured");
    let _worker = WorkerProcess::spawn_with(
        &queue,
        &tool_log,
        &model_log,
        Duration::ZERO,
        &[
            ("AGENTRY_TEMPORAL_EVENTS", url.as_str()),
            ("AGENTRY_TEMPORAL_STRUCTURED", "1"),
        ],
    );
    let log = PgEventLog::connect(&url, EventLimits::default())
        .await
        .unwrap()
        .shared();
    let after = log.last_seq(&queue).await.unwrap();
    let client = agent_temporal::connect(&addr, &namespace()).await.unwrap();
    let request = RunRequest::new(Session::with_id("s-structured", "test-model"), question);
    let handle = agent_temporal::start_run(&client, &queue, &queue, request)
        .await
        .unwrap();
    let (durable, _) = viewed(&log, &queue, after).await;
    assert_eq!(json(&durable), json(&local));
    handle.outcome().await.unwrap();
}
