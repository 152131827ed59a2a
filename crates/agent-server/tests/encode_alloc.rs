//! The frontend encoders allocate nothing per event: a run's events (text, reasoning, tool
//! calls with their arguments, tool results) are written into one reused buffer, counted by
//! a global allocator.
//!
//! A binary of its own (not a module of `it`): the counting allocator sees the whole
//! process, so this test must be alone in it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;

use agent_server::encode::{AgUiEncoder, Encoder, UiMessageEncoder};
use agent_types::{AgentEvent, Role, ToolCall};
use bytes::BytesMut;
use serde_json::json;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// One model call as the demo makes it: text, reasoning, three tool calls, their results.
fn round() -> Vec<AgentEvent> {
    let mut events = vec![
        AgentEvent::MessageStart {
            role: Role::Assistant,
        },
        AgentEvent::ThinkingStart,
        AgentEvent::ThinkingDelta {
            delta: "The user wants both cities.".into(),
        },
        AgentEvent::ThinkingEnd {
            thinking: String::new(),
        },
        AgentEvent::TextStart,
    ];
    for word in ["I'll look ", "up both \"cities\"", " and the time.\n"] {
        events.push(AgentEvent::TextDelta { delta: word.into() });
    }
    events.push(AgentEvent::TextEnd {
        text: String::new(),
    });
    for (index, city) in ["Lisbon", "Oslo", "Paris"].iter().enumerate() {
        let id = format!("toolu_{index:024}");
        let index = u32::try_from(index).unwrap();
        events.push(AgentEvent::ToolCallStart {
            index,
            id: id.clone().into(),
            name: "get_weather".into(),
        });
        events.push(AgentEvent::ToolCallDelta {
            index,
            delta: "{\"city\": ".into(),
        });
        events.push(AgentEvent::ToolCallDelta {
            index,
            delta: format!("\"{city}\"}}"),
        });
        events.push(AgentEvent::ToolCallEnd {
            index,
            tool_call: ToolCall::new(id.clone(), "get_weather", json!({"city": city})),
        });
        events.push(AgentEvent::ToolExecutionEnd {
            call_id: id.into(),
            tool_name: "get_weather".into(),
            output: format!(r#"{{"city":"{city}","conditions":"sunny","temp_c":19}}"#),
            is_error: false,
            truncated: false,
            blocks: Vec::new(),
        });
    }
    events
}

/// Allocations while `encoder` writes `rounds` rounds (after one warm-up round, which may
/// size the buffer and the encoder's id slots), and the bytes written.
fn allocations(encoder: &mut dyn Encoder, rounds: usize) -> (usize, usize) {
    let events = round();
    let mut out = BytesMut::with_capacity(1 << 20);
    encoder.open(&mut out);
    for event in &events {
        encoder.event(event, &mut out);
    }
    out.clear();
    let region = Region::new(GLOBAL);
    let mut written = 0;
    for _ in 0..rounds {
        for event in &events {
            encoder.event(event, &mut out);
        }
        written += out.len();
        // What a stream does with each frame: hand it on (here: dropped), keep the buffer.
        drop(out.split().freeze());
        out.reserve(64 * 1024);
    }
    (region.change().allocations, written)
}

#[test]
fn the_encoders_allocate_nothing_per_event() {
    let rounds = 200;
    let events = round().len() * rounds;
    let (ui, ui_bytes) = allocations(&mut UiMessageEncoder::new(Vec::new()), rounds);
    let (ag, ag_bytes) = allocations(&mut AgUiEncoder::new("thread_1", "run_1"), rounds);
    assert!(
        ui_bytes > 50 * events && ag_bytes > 50 * events,
        "{ui_bytes} {ag_bytes}"
    );
    // `reserve` after `split` reclaims the buffer's block when the frame was dropped; a rare
    // fresh block is the buffer, not the event.
    assert!(
        ui * 100 <= events,
        "UI stream: {ui} allocations for {events} events"
    );
    assert!(
        ag * 100 <= events,
        "AG-UI: {ag} allocations for {events} events"
    );

    // The reference: serializing the same events as the native stream does allocates per
    // event (a Vec per frame), so the counter sees them.
    let region = Region::new(GLOBAL);
    for event in round() {
        let mut frame = Vec::with_capacity(256);
        frame.extend_from_slice(b"data: ");
        serde_json::to_writer(&mut frame, &event).unwrap();
        drop(frame);
    }
    assert!(region.change().allocations >= round().len());
}
