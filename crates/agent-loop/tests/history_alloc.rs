//! The heap a history policy costs per model call, counted by a global allocator: the policy
//! moves the left-out turns aside and back, it never copies the history.
//!
//! A binary of its own (like `alloc.rs`): the counting allocator sees the whole process, so
//! this test must be alone in it.
//!
//! Each message of the history holds 1,000 bytes of text. Copying the history (or the kept
//! part of it, or the part left out) would cost at least that much per message; moving it
//! costs a `Message` slot in the vector that holds the left-out turns, and two small integers
//! (the message's token count and, for a turn start, its index).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::alloc::System;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{HistoryPolicy, Options, Session, execute};
use agent_types::{AssistantMessage, Message};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const RUNS: usize = 10;

fn session(messages: usize) -> Session {
    let text = "x".repeat(1_000);
    let mut session = Session::new("m");
    for at in 0..messages {
        session.messages.push(if at % 2 == 0 {
            Message::user(text.clone())
        } else {
            Message::Assistant(AssistantMessage::text(text.clone()))
        });
    }
    session
}

/// Bytes allocated by one run (one model call) on a session of `messages` messages.
fn bytes_per_run(rt: &tokio::runtime::Runtime, messages: usize, options: &Options) -> f64 {
    let backend = ScriptedBackend::cycle([ScriptedTurn::text("ok")]);
    let base = session(messages);
    rt.block_on(async {
        for _ in 0..2 {
            execute(&mut base.clone(), "next", &backend, options)
                .await
                .unwrap();
        }
    });
    let mut sessions: Vec<Session> = (0..RUNS).map(|_| base.clone()).collect();
    let region = Region::new(GLOBAL);
    rt.block_on(async {
        for session in &mut sessions {
            execute(session, "next", &backend, options).await.unwrap();
        }
    });
    let stats = region.change();
    drop(sessions);
    stats.bytes_allocated as f64 / RUNS as f64
}

#[test]
fn a_history_policy_moves_the_history_and_never_copies_it() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let none = Options::default();
    let policy = Options::default().with_history(HistoryPolicy::last_turns(4));
    let (small, large) = (400, 1_600);
    let cost =
        |messages| bytes_per_run(&rt, messages, &policy) - bytes_per_run(&rt, messages, &none);
    let (at_small, at_large) = (cost(small), cost(large));
    let per_message = (at_large - at_small) / (large - small) as f64;
    let slot = std::mem::size_of::<Message>() as f64;
    println!(
        "a last_turns policy's own heap per call: {at_small:.0} B at {small} messages, \
         {at_large:.0} B at {large}: {per_message:.1} B per message of 1,000 bytes \
         (a Message slot is {slot} B)"
    );
    assert!(
        per_message <= slot + 32.0,
        "the policy costs {per_message:.1} B per history message: something copies messages \
         (a slot is {slot} B, a message's text 1,000 B)"
    );
}
