//! Usage, prices and capabilities.

use agent_types::{Capabilities, ModelPrice, RateCard, Usage};

use crate::{check, full_usage};

/// Anthropic Claude Sonnet 4.5 per-MTok prices: input $3, output $15, cache write 5m $3.75,
/// cache write 1h $6, cache read $0.30.
fn sonnet() -> ModelPrice {
    ModelPrice {
        input_per_mtok: 3.0,
        output_per_mtok: 15.0,
        cache_read_per_mtok: Some(0.3),
        cache_write_5m_per_mtok: Some(3.75),
        cache_write_1h_per_mtok: Some(6.0),
    }
}

/// OpenAI gpt-4o per-MTok prices: input $2.50, cached input $1.25, output $10.
fn gpt_4o() -> ModelPrice {
    ModelPrice {
        input_per_mtok: 2.5,
        output_per_mtok: 10.0,
        cache_read_per_mtok: Some(1.25),
        ..ModelPrice::default()
    }
}

#[test]
fn usage_forms() {
    check!("usage_full", full_usage());
    check!("usage_unknown", Usage::default());
    check!(
        "usage_partial",
        Usage {
            input_tokens: Some(25),
            output_tokens: Some(0),
            ..Usage::default()
        }
    );
}

#[test]
fn model_price() {
    check!("model_price_full", sonnet());
    check!("model_price_read_only", gpt_4o());
}

#[test]
fn rate_card() {
    let card = RateCard::new()
        .with("gpt-4o", gpt_4o())
        .with("claude-sonnet-4-5", sonnet());
    check!("rate_card", card.clone());
    // Written sorted by model name whatever the insertion order.
    let json = crate::round_trip(&card);
    assert!(json.starts_with(r#"{"claude-sonnet-4-5":"#), "{json}");
    check!("rate_card_empty", RateCard::new());
}

#[test]
fn capabilities() {
    check!(
        "capabilities",
        Capabilities {
            tools: true,
            streaming: true,
            parallel_tool_calls: true,
            thinking: false,
            prompt_caching: true,
            usage_reporting: true,
            structured_output: true,
            tool_search: false,
        }
    );
    check!("capabilities_none", Capabilities::default());
}
