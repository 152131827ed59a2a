//! `agent_backends::Fallback` under the loop: the next model only before any output, the
//! answering model in the record, the span and the price, and the list when all fail; plus
//! a recorded Anthropic 529 followed by a recorded OpenAI answer through the real adapters.

use std::path::{Path, PathBuf};

use agent_backends::replay::{Cassette, ReplayBackend};
use agent_backends::{Fallback, Provider, ScriptedBackend, ScriptedTurn};
use agent_loop::{Input, Options, generate};
use agent_types::{BackendError, BackendErrorKind, ErrorKind, ModelPrice, RateCard, StreamEvent};

use crate::support::usage;
use crate::telemetry::{capture, named};

fn price(input: f64, output: f64) -> ModelPrice {
    ModelPrice {
        input_per_mtok: input,
        output_per_mtok: output,
        ..ModelPrice::default()
    }
}

fn error(kind: BackendErrorKind, message: &str) -> BackendError {
    BackendError::new(kind, message)
}

fn backend_error(error: &agent_types::AgentError) -> &BackendError {
    match &error.kind {
        ErrorKind::Backend { error } => error,
        other => panic!("not a backend error: {other:?}"),
    }
}

#[tokio::test]
async fn an_overloaded_model_hands_the_call_to_the_next_which_is_recorded_and_priced() {
    let primary = std::sync::Arc::new(ScriptedBackend::new([
        ScriptedTurn::new().fail_with(error(BackendErrorKind::Overloaded, "Overloaded"))
    ]));
    let secondary = std::sync::Arc::new(
        ScriptedBackend::new([ScriptedTurn::text("from b").with_usage(usage(1_000_000, 0))])
            .recording(),
    );
    let backend = Fallback::new(primary.clone(), "model-a").or(secondary.clone(), "model-b");
    // Different prices: a call priced as model-a would cost 1.0, as model-b 3.0.
    let options = Options::default().with_rate_card(
        RateCard::new()
            .with("model-a", price(1.0, 1.0))
            .with("model-b", price(3.0, 3.0)),
    );

    let (result, spans) = capture(generate(
        &backend,
        Input::new("model-a").user("hi"),
        &options,
    ))
    .await;
    let result = result.unwrap();

    assert_eq!(result.text(), "from b");
    assert_eq!(primary.calls(), 1);
    assert_eq!(secondary.calls(), 1);
    // The second backend was asked under its own model id.
    assert_eq!(secondary.requests()[0].model, "model-b");
    assert_eq!(result.model_calls.len(), 1);
    assert_eq!(result.model_calls[0].model, "model-b");
    assert_eq!(result.model_calls[0].cost_usd, Some(3.0));
    assert_eq!(result.cost_usd, Some(3.0));
    assert_eq!(result.message.model.as_deref(), Some("model-b"));
    let chats = named(&spans, "chat");
    assert_eq!(chats.len(), 1);
    assert_eq!(chats[0].1.field("gen_ai.response.model"), Some("model-b"));
    assert_eq!(chats[0].1.field("gen_ai.request.model"), Some("model-a"));
}

#[tokio::test]
async fn quota_and_timeouts_switch_but_a_bad_request_does_not_unless_configured() {
    for kind in [
        BackendErrorKind::QuotaExceeded,
        BackendErrorKind::Timeout,
        BackendErrorKind::RateLimited,
        BackendErrorKind::Server,
        BackendErrorKind::Connection,
    ] {
        let backend = Fallback::new(
            ScriptedBackend::new([ScriptedTurn::new().fail_with(error(kind, "no"))]),
            "a",
        )
        .or(ScriptedBackend::new([ScriptedTurn::text("ok")]), "b");
        let result = generate(&backend, Input::new("a").user("hi"), &Options::default())
            .await
            .unwrap_or_else(|error| panic!("{kind:?} did not switch: {error}"));
        assert_eq!(result.model_calls[0].model, "b", "{kind:?}");
    }

    for kind in [
        BackendErrorKind::InvalidRequest,
        BackendErrorKind::Authentication,
    ] {
        let second = std::sync::Arc::new(ScriptedBackend::new([ScriptedTurn::text("ok")]));
        let backend = Fallback::new(
            ScriptedBackend::new([ScriptedTurn::new().fail_with(error(kind, "rejected"))]),
            "a",
        )
        .or(second.clone(), "b");
        let failed = generate(&backend, Input::new("a").user("hi"), &Options::default())
            .await
            .unwrap_err();
        assert_eq!(backend_error(&failed).kind, kind);
        assert_eq!(backend_error(&failed).message, "rejected");
        assert_eq!(second.calls(), 0, "{kind:?} must not switch by default");

        let backend = Fallback::new(
            ScriptedBackend::new([ScriptedTurn::new().fail_with(error(kind, "rejected"))]),
            "a",
        )
        .or(ScriptedBackend::new([ScriptedTurn::text("ok")]), "b")
        .switch_on_client_errors(true);
        let result = generate(&backend, Input::new("a").user("hi"), &Options::default())
            .await
            .unwrap();
        assert_eq!(result.text(), "ok");
    }
}

#[tokio::test]
async fn a_stream_that_yielded_an_event_is_never_switched() {
    let second = std::sync::Arc::new(ScriptedBackend::new([ScriptedTurn::text("second")]));
    let backend = Fallback::new(
        ScriptedBackend::new([ScriptedTurn::text("half an ans")
            .fail_with(error(BackendErrorKind::Overloaded, "Overloaded"))]),
        "a",
    )
    .or(second.clone(), "b");
    let failed = generate(&backend, Input::new("a").user("hi"), &Options::default())
        .await
        .unwrap_err();
    let backend_error = backend_error(&failed);
    assert_eq!(backend_error.kind, BackendErrorKind::Overloaded);
    // The error is the first backend's own, with what it had streamed.
    assert_eq!(backend_error.message, "Overloaded");
    assert_eq!(
        backend_error.partial.as_ref().unwrap().text_content(),
        "half an ans"
    );
    assert_eq!(second.calls(), 0);
}

#[tokio::test]
async fn when_every_model_fails_the_last_error_comes_back_with_the_list() {
    let backend = Fallback::new(
        ScriptedBackend::new([
            ScriptedTurn::new().fail_with(error(BackendErrorKind::Overloaded, "Overloaded"))
        ]),
        "a",
    )
    .or(
        ScriptedBackend::new([
            ScriptedTurn::new().fail_with(error(BackendErrorKind::QuotaExceeded, "quota used up"))
        ]),
        "b",
    )
    .or(
        ScriptedBackend::new([
            ScriptedTurn::new().fail_with(error(BackendErrorKind::RateLimited, "slow down"))
        ]),
        "c",
    );
    let failed = generate(&backend, Input::new("a").user("hi"), &Options::default())
        .await
        .unwrap_err();
    let last = backend_error(&failed);
    assert_eq!(last.kind, BackendErrorKind::RateLimited);
    assert_eq!(
        last.message,
        "all 3 fallback models failed: a: Overloaded; b: quota used up; c: slow down"
    );
}

#[tokio::test]
async fn held_back_start_and_usage_go_out_once_with_the_answering_model_named() {
    use futures_util::StreamExt;
    // The first backend starts (message_start, usage) and then fails: the caller must see
    // only the second backend's events.
    let backend = Fallback::new(
        ScriptedBackend::new([ScriptedTurn::new()
            .with_usage(usage(10, 0))
            .fail_with(error(BackendErrorKind::Overloaded, "Overloaded"))]),
        "a",
    )
    .or(ScriptedBackend::new([ScriptedTurn::text("b answers")]), "b");
    let request = agent_types::ModelRequest::new("a", vec![agent_types::Message::user("hi")]);
    let events: Vec<StreamEvent> = agent_types::Backend::stream(&backend, &request)
        .map(Result::unwrap)
        .collect()
        .await;
    let starts = events
        .iter()
        .filter(|event| matches!(event, StreamEvent::MessageStart { .. }))
        .count();
    assert_eq!(starts, 1, "{events:?}");
    assert!(
        matches!(&events[0], StreamEvent::MessageStart { model: Some(model), .. } if model == "b")
    );
    assert!(!events.contains(&StreamEvent::Usage(usage(10, 0))));
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/providers")
}

/// A recorded Anthropic 529 `overloaded_error`, then a recorded OpenAI Chat answer, each
/// through its real adapter over loopback HTTP (retries off, so the 529 reaches the fallback).
#[tokio::test(flavor = "current_thread")]
async fn a_recorded_anthropic_overload_falls_back_to_a_recorded_openai_answer() {
    let overloaded =
        Cassette::from_file(fixtures().join("anthropic/error-529-overloaded.json")).unwrap();
    let answer = Cassette::from_file(fixtures().join("openai-chat/stream-text-usage.sse")).unwrap();
    let anthropic = ReplayBackend::start(Provider::Anthropic, [overloaded])
        .await
        .unwrap();
    let openai = ReplayBackend::start(Provider::OpenAiChat, [answer])
        .await
        .unwrap();
    let backend = Fallback::new(anthropic, "claude-sonnet-4-5").or(openai, "gpt-3.5-turbo");
    let options = Options::default().with_rate_card(
        RateCard::new()
            .with("claude-sonnet-4-5", price(3.0, 15.0))
            .with("gpt-3.5-turbo", price(0.5, 1.5)),
    );

    let (result, spans) = capture(generate(
        &backend,
        Input::new("claude-sonnet-4-5").user("Count to 3"),
        &options,
    ))
    .await;
    let result = result.unwrap();

    assert!(!result.text().is_empty());
    let record = &result.model_calls[0];
    // The provider's own name for the answering model; priced by the snapshot's base.
    assert_eq!(record.model, "gpt-3.5-turbo-0125");
    let usage = record.usage.unwrap();
    let expected = usage.input_tokens.unwrap() as f64 * 0.5 / 1e6
        + usage.output_tokens.unwrap() as f64 * 1.5 / 1e6;
    assert!((record.cost_usd.unwrap() - expected).abs() < 1e-12);
    let chat = named(&spans, "chat")[0].1;
    assert_eq!(chat.field("gen_ai.provider.name"), Some("openai"));
    assert_eq!(
        chat.field("gen_ai.response.model"),
        Some("gpt-3.5-turbo-0125")
    );
}

#[tokio::test]
async fn an_unpriced_answering_model_is_not_priced_as_the_requested_one() {
    let backend = Fallback::new(
        ScriptedBackend::new([
            ScriptedTurn::new().fail_with(error(BackendErrorKind::Overloaded, "Overloaded"))
        ]),
        "model-a",
    )
    .or(
        ScriptedBackend::new([ScriptedTurn::text("ok").with_usage(usage(1_000_000, 0))]),
        "unpriced",
    );
    let options =
        Options::default().with_rate_card(RateCard::new().with("model-a", price(1.0, 1.0)));
    let result = generate(&backend, Input::new("model-a").user("hi"), &options)
        .await
        .unwrap();
    assert_eq!(result.model_calls[0].model, "unpriced");
    assert_eq!(result.model_calls[0].cost_usd, None);
    assert_eq!(result.cost_usd, None);
}

#[tokio::test]
async fn the_requested_price_stands_in_only_for_the_same_model_under_a_path() {
    let card = RateCard::new().with("gpt-4o", price(2.0, 2.0));
    // `gpt-4o-mini` answering for `gpt-4o` (a fallback) is another model: unpriced here.
    let backend = Fallback::new(
        ScriptedBackend::new([
            ScriptedTurn::new().fail_with(error(BackendErrorKind::Overloaded, "Overloaded"))
        ]),
        "gpt-4o",
    )
    .or(
        ScriptedBackend::new([ScriptedTurn::text("ok").with_usage(usage(1_000_000, 0))]),
        "gpt-4o-mini",
    );
    let options = Options::default().with_rate_card(card);
    let result = generate(&backend, Input::new("gpt-4o").user("hi"), &options)
        .await
        .unwrap();
    assert_eq!(result.model_calls[0].model, "gpt-4o-mini");
    assert_eq!(result.model_calls[0].cost_usd, None);

    // `openai/gpt-4o` (a router's name for the requested model) is priced as `gpt-4o`.
    let backend = ScriptedBackend::new([ScriptedTurn::text("ok").with_usage(usage(1_000_000, 0))])
        .with_model("openai/gpt-4o");
    let result = generate(&backend, Input::new("gpt-4o").user("hi"), &options)
        .await
        .unwrap();
    assert_eq!(result.model_calls[0].model, "openai/gpt-4o");
    assert_eq!(result.model_calls[0].cost_usd, Some(2.0));
}

/// A recorded OpenRouter 429 (OpenAI-compatible Chat Completions) through the real adapter,
/// then a recorded Anthropic answer: the rate limit switches, the span names Anthropic.
#[tokio::test(flavor = "current_thread")]
async fn a_recorded_openai_rate_limit_falls_back_to_a_recorded_anthropic_answer() {
    let limited =
        Cassette::from_file(fixtures().join("openai-chat/error-429-rate-limit-openrouter.json"))
            .unwrap();
    let answer = Cassette::from_file(fixtures().join("anthropic/stream-text.sse")).unwrap();
    let openai = ReplayBackend::start(Provider::OpenAiChat, [limited])
        .await
        .unwrap();
    let anthropic = ReplayBackend::start(Provider::Anthropic, [answer])
        .await
        .unwrap();
    let backend = Fallback::new(openai, "meta-llama/llama-3.2-3b-instruct:free")
        .or(anthropic, "claude-sonnet-4-5");
    let (result, spans) = capture(generate(
        &backend,
        Input::new("meta-llama/llama-3.2-3b-instruct:free").user("Hi"),
        &Options::default(),
    ))
    .await;
    let result = result.unwrap();
    assert!(!result.text().is_empty());
    assert!(
        result.model_calls[0].model.starts_with("claude"),
        "{}",
        result.model_calls[0].model
    );
    let chat = named(&spans, "chat")[0].1;
    assert_eq!(chat.field("gen_ai.provider.name"), Some("anthropic"));
}
