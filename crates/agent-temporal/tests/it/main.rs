//! agent-temporal against the real Temporal dev server (`.ci/temporal.sh`), with workers as
//! child processes: this test binary run again with `AGENTRY_TEMPORAL_WORKER` set, which makes
//! `worker_process` serve a task queue until it is killed.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    missing_docs
)]

mod support;

mod durable;
#[cfg(feature = "postgres")]
mod events;
mod machine;

/// The worker child: serves `AGENTRY_TEMPORAL_WORKER`'s task queue forever when that variable
/// is set; an ordinary test run passes straight through.
#[test]
fn worker_process() {
    support::worker_main();
}
