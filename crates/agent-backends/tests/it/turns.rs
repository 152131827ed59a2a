//! The events each kind of turn yields.

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_types::{
    Backend, BackendError, BackendErrorKind, StopReason, StreamEvent, ToolCall, ToolCallId, Usage,
};
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::{play, request, start, text};

fn finish(stop_reason: StopReason) -> StreamEvent {
    StreamEvent::Finish { stop_reason }
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        ..Usage::default()
    }
}

/// The argument text of the call at `index`, concatenated from its deltas.
fn arguments(events: &[StreamEvent], index: u32) -> String {
    events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::ToolCallDelta { index: i, delta } if *i == index => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

/// The deltas of text (`TextDelta`) in order.
fn text_deltas(events: &[StreamEvent]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::TextDelta { delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_text_turn_is_start_one_delta_and_stop() {
    let events = play(ScriptedTurn::text("Sunny, 24 °C.")).await;
    assert_eq!(
        events,
        [start(1), text("Sunny, 24 °C."), finish(StopReason::Stop)]
    );
}

#[tokio::test]
async fn an_empty_turn_starts_and_stops() {
    let events = play(ScriptedTurn::new()).await;
    assert_eq!(events, [start(1), finish(StopReason::Stop)]);
}

#[tokio::test]
async fn two_tool_calls_are_indexed_from_zero_and_finish_with_tool_calls() {
    let oslo = json!({"city": "Oslo", "days": 3, "units": {"temp": "c"}});
    let lima = json!({"city": "Lima", "tags": ["ñ", "€"], "exact": 0.5});
    let mut signed = ToolCall::new("call_b", "get_forecast", lima.clone());
    signed.signature = Some("gemini-thought-sig".into());
    let events = play(ScriptedTurn::tool_calls([
        ToolCall::new("call_a", "get_weather", oslo.clone()),
        signed,
    ]))
    .await;

    assert_eq!(events.len(), 8, "{events:#?}");
    assert_eq!(events[0], start(1));
    assert_eq!(
        events[1],
        StreamEvent::ToolCallStart {
            index: 0,
            id: ToolCallId::new("call_a"),
            name: "get_weather".into(),
            signature: None,
        }
    );
    assert!(matches!(
        &events[2],
        StreamEvent::ToolCallDelta { index: 0, .. }
    ));
    assert_eq!(events[3], StreamEvent::ToolCallEnd { index: 0 });
    assert_eq!(
        events[4],
        StreamEvent::ToolCallStart {
            index: 1,
            id: ToolCallId::new("call_b"),
            name: "get_forecast".into(),
            signature: Some("gemini-thought-sig".into()),
        }
    );
    assert!(matches!(
        &events[5],
        StreamEvent::ToolCallDelta { index: 1, .. }
    ));
    assert_eq!(events[6], StreamEvent::ToolCallEnd { index: 1 });
    assert_eq!(events[7], finish(StopReason::ToolCalls));

    // The argument text is the compact JSON of the value and reads back as that value.
    assert_eq!(arguments(&events, 0), serde_json::to_string(&oslo).unwrap());
    let back: Value = serde_json::from_str(&arguments(&events, 1)).unwrap();
    assert_eq!(back, lima);
}

#[tokio::test]
async fn tool_call_indexes_count_across_builder_calls_within_a_turn_only() {
    let turn = ScriptedTurn::tool_call("call_1", "a", json!({}))
        .with_text("and")
        .with_tool_call(ToolCall::new("call_2", "b", json!({})));
    let events = play(turn).await;
    let starts: Vec<u32> = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::ToolCallStart { index, .. } => Some(*index),
            _ => None,
        })
        .collect();
    assert_eq!(starts, [0, 1]);
    assert_eq!(arguments(&events, 0), "{}");
    assert_eq!(events.last(), Some(&finish(StopReason::ToolCalls)));
}

#[tokio::test]
async fn thinking_is_deltas_closed_by_its_signature() {
    let turn = ScriptedTurn::new()
        .with_thinking("The user wants weather.", Some("EqQBCgIYAhIM".into()))
        .with_thinking("Unsigned.", None)
        .with_text("Let me check.");
    let events = play(turn).await;
    assert_eq!(
        events,
        [
            start(1),
            StreamEvent::ThinkingDelta {
                delta: "The user wants weather.".into()
            },
            StreamEvent::ThinkingSignature {
                signature: "EqQBCgIYAhIM".into(),
                id: None
            },
            StreamEvent::ThinkingDelta {
                delta: "Unsigned.".into()
            },
            text("Let me check."),
            finish(StopReason::Stop),
        ]
    );
}

#[tokio::test]
async fn usage_comes_where_it_was_added_and_before_finish() {
    // The usual place: after the content, right before finish.
    let events = play(ScriptedTurn::text("Hi").with_usage(usage(10, 2))).await;
    assert_eq!(
        events,
        [
            start(1),
            text("Hi"),
            StreamEvent::Usage(usage(10, 2)),
            finish(StopReason::Stop)
        ]
    );

    // Anthropic-style: input at the start, the running total at the end.
    let input_only = Usage {
        input_tokens: Some(10),
        ..Usage::default()
    };
    let turn = ScriptedTurn::new()
        .with_usage(input_only)
        .with_text("Hi")
        .with_usage(usage(10, 2));
    let events = play(turn).await;
    assert_eq!(events[1], StreamEvent::Usage(input_only));
    assert_eq!(events[3], StreamEvent::Usage(usage(10, 2)));
    assert_eq!(events[4], finish(StopReason::Stop));
}

#[tokio::test]
async fn finish_overrides_the_automatic_reason() {
    let events = play(ScriptedTurn::text("The answer is cut").finish(StopReason::Length)).await;
    assert_eq!(events.last(), Some(&finish(StopReason::Length)));

    // Even a turn with tool calls (a provider that reports `stop` with calls, as some do).
    let turn = ScriptedTurn::tool_call("call_1", "a", json!({})).finish(StopReason::Stop);
    let events = play(turn).await;
    assert_eq!(events.last(), Some(&finish(StopReason::Stop)));
}

#[tokio::test]
async fn end_without_finish_just_ends() {
    let events = play(ScriptedTurn::text("Half an ans").end_without_finish()).await;
    assert_eq!(events, [start(1), text("Half an ans")]);
}

#[tokio::test]
async fn raw_events_pass_through_unchanged() {
    let redacted = StreamEvent::RedactedThinking {
        data: "opaque".into(),
    };
    let fragment = StreamEvent::ToolCallDelta {
        index: 7,
        delta: "{\"a\"".into(),
    };
    let turn = ScriptedTurn::new()
        .with_event(redacted.clone())
        .with_event(fragment.clone());
    let events = play(turn).await;
    // Raw tool-call events do not make the turn a tool-call turn.
    assert_eq!(
        events,
        [start(1), redacted, fragment, finish(StopReason::Stop)]
    );
}

#[tokio::test]
async fn chunking_splits_at_char_boundaries_and_concatenates_back() {
    let original = "Grüße aus Köln — 北京 🌍!";
    let arguments_value = json!({"q": "café ☕", "n": 12345});
    for bytes in 0..=9 {
        let turn = ScriptedTurn::text(original)
            .with_thinking("ça pense…", None)
            .with_tool_call(ToolCall::new("call_1", "search", arguments_value.clone()))
            .chunked(bytes);
        let events = play(turn).await;

        let deltas = text_deltas(&events);
        assert_eq!(deltas.concat(), original, "chunked({bytes})");
        let thinking: String = events
            .iter()
            .filter_map(|event| match event {
                StreamEvent::ThinkingDelta { delta } => Some(delta.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(thinking, "ça pense…", "chunked({bytes})");
        let back: Value = serde_json::from_str(&arguments(&events, 0)).unwrap();
        assert_eq!(back, arguments_value, "chunked({bytes})");

        for event in &events {
            let delta = match event {
                StreamEvent::TextDelta { delta }
                | StreamEvent::ThinkingDelta { delta }
                | StreamEvent::ToolCallDelta { delta, .. } => delta,
                _ => continue,
            };
            // Never empty; over the limit only when a single character is.
            assert!(!delta.is_empty(), "chunked({bytes}): empty delta");
            assert!(
                delta.len() <= bytes.max(1) || delta.chars().count() == 1,
                "chunked({bytes}): {delta:?} is too long"
            );
        }
    }

    // The split itself, pinned: "ü" and "ß" are 2 bytes, "—" 3, "🌍" 4.
    let events = play(ScriptedTurn::text("Grüße — 🌍").chunked(3)).await;
    assert_eq!(text_deltas(&events), ["Gr", "ü", "ße", " ", "—", " ", "🌍"]);
}

#[tokio::test]
async fn without_chunking_each_block_is_one_delta() {
    let long = "word ".repeat(1_000);
    let events = play(ScriptedTurn::text(long.clone())).await;
    assert_eq!(text_deltas(&events), [long.as_str()]);
}

#[tokio::test]
async fn fail_with_ends_the_stream_mid_answer() {
    let error = BackendError {
        status: Some(529),
        ..BackendError::new(BackendErrorKind::Overloaded, "overloaded")
    };
    let turn = ScriptedTurn::text("abcdef")
        .chunked(2)
        .fail_with(error.clone())
        // Never reached: the failure ends the call.
        .with_text("unreachable");
    let backend = ScriptedBackend::new([turn]);
    let request = request();
    let mut stream = backend.stream(&request);
    let mut seen = Vec::new();
    while let Some(item) = stream.next().await {
        seen.push(item);
    }
    assert_eq!(
        seen,
        [
            Ok(start(1)),
            Ok(text("ab")),
            Ok(text("cd")),
            Ok(text("ef")),
            Err(error),
        ]
    );
    // Ended means ended: polling again still says so.
    assert!(stream.next().await.is_none());
}

#[tokio::test]
async fn a_representative_turn_pinned() {
    let turn = ScriptedTurn::new()
        .with_thinking("Two cities, so two calls.", Some("sig_abc".into()))
        .with_text("Checking Oslo and Lima.")
        .with_tool_call(ToolCall::new(
            "call_1",
            "get_weather",
            json!({"city": "Oslo", "units": "metric"}),
        ))
        .with_tool_call(ToolCall::new(
            "call_2",
            "get_weather",
            json!({"city": "Lima"}),
        ))
        .with_usage(Usage {
            input_tokens: Some(1_200),
            output_tokens: Some(85),
            cache_read_tokens: Some(1_000),
            reasoning_tokens: Some(20),
            ..Usage::default()
        });
    insta::assert_json_snapshot!("representative_turn", play(turn).await);
}
