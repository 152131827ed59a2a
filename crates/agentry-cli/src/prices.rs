//! The built-in rate card: public list prices for common models, so costs show up without
//! configuration. Providers change prices; `[prices."<model>"]` in `agentry.toml` overrides
//! any entry here and adds models that are missing. A model the card does not price shows
//! its tokens with no cost.

use agent_types::{ModelPrice, RateCard};

/// USD per million tokens: input, output, cache read, 5-minute cache write, 1-hour cache write.
type Row = (
    &'static str,
    f64,
    f64,
    Option<f64>,
    Option<f64>,
    Option<f64>,
);

/// List prices as published by each provider (standard tier, short prompts). The card also
/// prices dated snapshots, so `gpt-4.1-mini` covers `gpt-4.1-mini-2025-04-14`.
const LIST_PRICES: &[Row] = &[
    // OpenAI: cached input is discounted, cache writes are free.
    ("gpt-5", 1.25, 10.0, Some(0.125), None, None),
    ("gpt-5-mini", 0.25, 2.0, Some(0.025), None, None),
    ("gpt-5-nano", 0.05, 0.40, Some(0.005), None, None),
    ("gpt-4.1", 2.0, 8.0, Some(0.50), None, None),
    ("gpt-4.1-mini", 0.40, 1.60, Some(0.10), None, None),
    ("gpt-4.1-nano", 0.10, 0.40, Some(0.025), None, None),
    ("gpt-4o", 2.50, 10.0, Some(1.25), None, None),
    ("gpt-4o-mini", 0.15, 0.60, Some(0.075), None, None),
    // Anthropic: reads 0.1x input, writes 1.25x (5 minutes) or 2x (1 hour).
    (
        "claude-opus-4-1",
        15.0,
        75.0,
        Some(1.50),
        Some(18.75),
        Some(30.0),
    ),
    (
        "claude-sonnet-4-5",
        3.0,
        15.0,
        Some(0.30),
        Some(3.75),
        Some(6.0),
    ),
    (
        "claude-sonnet-4",
        3.0,
        15.0,
        Some(0.30),
        Some(3.75),
        Some(6.0),
    ),
    (
        "claude-haiku-4-5",
        1.0,
        5.0,
        Some(0.10),
        Some(1.25),
        Some(2.0),
    ),
    // Gemini (prompts up to 200k tokens); explicit cache storage is billed separately.
    ("gemini-2.5-pro", 1.25, 10.0, Some(0.31), None, None),
    ("gemini-2.5-flash", 0.30, 2.50, Some(0.075), None, None),
    ("gemini-2.5-flash-lite", 0.10, 0.40, Some(0.025), None, None),
];

/// The built-in card.
pub(crate) fn builtin() -> RateCard {
    let mut card = RateCard::new();
    for &(model, input, output, cache_read, write_5m, write_1h) in LIST_PRICES {
        card.insert(
            model,
            ModelPrice {
                input_per_mtok: input,
                output_per_mtok: output,
                cache_read_per_mtok: cache_read,
                cache_write_5m_per_mtok: write_5m,
                cache_write_1h_per_mtok: write_1h,
            },
        );
    }
    card
}

/// A model that runs on the user's own machine (Ollama) costs nothing per token.
pub(crate) fn free() -> ModelPrice {
    ModelPrice::default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn dated_model_names_find_their_family_price() {
        let card = builtin();
        assert_eq!(
            card.price("gpt-4.1-mini-2025-04-14")
                .unwrap()
                .input_per_mtok,
            0.40
        );
        assert_eq!(card.price("gpt-5-mini").unwrap().output_per_mtok, 2.0);
        assert!(card.price("gpt-5-pro").is_none());
        assert!(card.price("an-unknown-model").is_none());
    }
}
