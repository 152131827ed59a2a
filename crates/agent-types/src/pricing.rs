//! Prices per model and the cost of a [`Usage`].
//!
//! Prices are in US dollars per million tokens, as providers publish them. Cache prices are
//! explicit numbers on the card rather than ratios computed here, because providers set them
//! differently (Anthropic: writes 1.25x or 2x, reads 0.1x of input; OpenAI: reads 0.5x or 0.1x,
//! writes free; Gemini: its own table).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::usage::Usage;

/// What one model charges, in USD per million tokens.
///
/// Cache prices are explicit numbers rather than ratios computed here, because providers set
/// them differently (Anthropic: writes 1.25x or 2x, reads 0.1x of input; OpenAI: reads 0.5x or
/// 0.1x, writes free; Gemini: its own table). Copy them from the provider's price list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelPrice {
    /// Uncached input tokens.
    pub input_per_mtok: f64,
    /// Output tokens (reasoning included).
    pub output_per_mtok: f64,
    /// Input tokens read from the cache. `None` bills them as plain input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_per_mtok: Option<f64>,
    /// Input tokens written to a 5-minute cache entry. `None` bills them as plain input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_5m_per_mtok: Option<f64>,
    /// Input tokens written to a 1-hour cache entry. `None` bills them as plain input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_1h_per_mtok: Option<f64>,
}

/// Prices for a set of models, looked up by the model name a request used.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RateCard {
    models: BTreeMap<String, ModelPrice>,
}

impl RateCard {
    /// An empty card.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces one model's price; returns the card for chaining.
    pub fn with(mut self, model: impl Into<String>, price: ModelPrice) -> Self {
        self.insert(model, price);
        self
    }

    /// Adds or replaces one model's price.
    pub fn insert(&mut self, model: impl Into<String>, price: ModelPrice) {
        self.models.insert(model.into(), price);
    }

    /// The price of `model`: an exact name first, otherwise the longest listed name of which
    /// `model` is a *dated snapshot* — the listed name followed by `-` or `@` and a date-like
    /// suffix that starts with at least four digits. So `claude-sonnet-4-5` prices
    /// `claude-sonnet-4-5-20250929` and `claude-sonnet-4-5@20250929`, and `gpt-4o` prices
    /// `gpt-4o-2024-08-06`.
    ///
    /// A bare prefix is not enough, because model families share prefixes across very different
    /// prices: `gpt-4o` must not price `gpt-4o-mini` (16x cheaper), `o1` must not price `o1-pro`
    /// (10x dearer), `claude-opus-4` must not price `claude-opus-4-5`. Such a model has no price
    /// until the card lists it, which a cost budget can report instead of silently miscounting.
    pub fn price(&self, model: &str) -> Option<&ModelPrice> {
        if let Some(price) = self.models.get(model) {
            return Some(price);
        }
        self.models
            .iter()
            .filter(|(name, _)| {
                model
                    .strip_prefix(name.as_str())
                    .is_some_and(is_snapshot_suffix)
            })
            .max_by_key(|(name, _)| name.len())
            .map(|(_, price)| price)
    }

    /// The cost of `usage` on `model`, or `None` when the card has no price for it.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.price(model).map(|price| cost(usage, price))
    }

    /// The models on the card, sorted by name.
    pub fn models(&self) -> impl Iterator<Item = (&str, &ModelPrice)> {
        self.models
            .iter()
            .map(|(name, price)| (name.as_str(), price))
    }
}

/// USD per million tokens: input, output, cache read, 5-minute cache write, 1-hour cache write.
type ListPrice = (
    &'static str,
    f64,
    f64,
    Option<f64>,
    Option<f64>,
    Option<f64>,
);

/// Published list prices (standard tier, prompts up to 200k tokens), as of 2026-11.
const LIST_PRICES: &[ListPrice] = &[
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
    // Gemini; explicit cache storage is billed separately and not modelled.
    ("gemini-2.5-pro", 1.25, 10.0, Some(0.31), None, None),
    ("gemini-2.5-flash", 0.30, 2.50, Some(0.075), None, None),
    ("gemini-2.5-flash-lite", 0.10, 0.40, Some(0.025), None, None),
];

/// AWS Bedrock on-demand prices by model id (us-east-1; aws.amazon.com/bedrock/pricing as of
/// 2025-11), listed under the bare id and its cross-region inference-profile ids (`us.`,
/// `eu.`, `apac.`, `global.`). Claude cache writes on Bedrock are 5-minute writes (1.25x).
const BEDROCK_PRICES: &[ListPrice] = &[
    (
        "anthropic.claude-sonnet-4-5-20250929-v1:0",
        3.0,
        15.0,
        Some(0.30),
        Some(3.75),
        None,
    ),
    (
        "anthropic.claude-sonnet-4-20250514-v1:0",
        3.0,
        15.0,
        Some(0.30),
        Some(3.75),
        None,
    ),
    (
        "anthropic.claude-3-7-sonnet-20250219-v1:0",
        3.0,
        15.0,
        Some(0.30),
        Some(3.75),
        None,
    ),
    (
        "anthropic.claude-haiku-4-5-20251001-v1:0",
        1.0,
        5.0,
        Some(0.10),
        Some(1.25),
        None,
    ),
    (
        "anthropic.claude-opus-4-1-20250805-v1:0",
        15.0,
        75.0,
        Some(1.50),
        Some(18.75),
        None,
    ),
    // Amazon Nova: cached input at a 75% discount, writes free.
    (
        "amazon.nova-micro-v1:0",
        0.035,
        0.14,
        Some(0.00875),
        None,
        None,
    ),
    ("amazon.nova-lite-v1:0", 0.06, 0.24, Some(0.015), None, None),
    ("amazon.nova-pro-v1:0", 0.80, 3.20, Some(0.20), None, None),
    // Meta Llama: no prompt caching.
    (
        "meta.llama3-3-70b-instruct-v1:0",
        0.72,
        0.72,
        None,
        None,
        None,
    ),
    (
        "meta.llama3-1-8b-instruct-v1:0",
        0.22,
        0.22,
        None,
        None,
        None,
    ),
    (
        "meta.llama4-maverick-17b-instruct-v1:0",
        0.24,
        0.97,
        None,
        None,
        None,
    ),
];

impl RateCard {
    /// A card of published list prices for common OpenAI, Anthropic and Gemini models, as
    /// of 2026-11. Providers change prices: add or override entries with
    /// [`insert`](Self::insert) for anything that bills money. Dated snapshots of a listed
    /// model are priced too (see [`price`](Self::price)).
    pub fn list_prices() -> Self {
        let mut card = Self::new();
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
        for &(model, input, output, cache_read, write_5m, write_1h) in BEDROCK_PRICES {
            let price = ModelPrice {
                input_per_mtok: input,
                output_per_mtok: output,
                cache_read_per_mtok: cache_read,
                cache_write_5m_per_mtok: write_5m,
                cache_write_1h_per_mtok: write_1h,
            };
            for prefix in ["", "us.", "eu.", "apac.", "global."] {
                card.insert(format!("{prefix}{model}"), price);
            }
        }
        card
    }
}

/// Whether `rest` (what follows a listed model name) names a dated snapshot of that model:
/// `-20250929`, `-2024-08-06`, `@20250929`.
fn is_snapshot_suffix(rest: &str) -> bool {
    let Some(date) = rest.strip_prefix('-').or_else(|| rest.strip_prefix('@')) else {
        return false;
    };
    let leading_digits = date.bytes().take_while(u8::is_ascii_digit).count();
    leading_digits >= 4 && date.bytes().all(|b| b.is_ascii_digit() || b == b'-')
}

/// The cost in USD of `usage` at `price`.
///
/// Follows the [usage convention](crate::Usage): cached tokens are part of `input_tokens`, so
/// they are subtracted from it and billed at their own prices; reasoning tokens are part of
/// `output_tokens` and billed once, as output. Unknown counts cost nothing. A cache price the
/// card leaves out bills those tokens at the plain input price.
///
/// Prices that depend on the prompt's length (Gemini 2.5 Pro above 200k tokens) are not
/// modelled: the card holds one price per model.
pub fn cost(usage: &Usage, price: &ModelPrice) -> f64 {
    let per_token = |per_mtok: f64| per_mtok / 1_000_000.0;
    let cache_price = |specific: Option<f64>| per_token(specific.unwrap_or(price.input_per_mtok));

    usage.uncached_input_tokens() as f64 * per_token(price.input_per_mtok)
        + usage.output_tokens.unwrap_or(0) as f64 * per_token(price.output_per_mtok)
        + usage.cache_read_tokens.unwrap_or(0) as f64 * cache_price(price.cache_read_per_mtok)
        + usage.cache_write_5m_tokens.unwrap_or(0) as f64
            * cache_price(price.cache_write_5m_per_mtok)
        + usage.cache_write_1h_tokens.unwrap_or(0) as f64
            * cache_price(price.cache_write_1h_per_mtok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bedrock_model_and_inference_profile_ids_are_priced() {
        let card = RateCard::list_prices();
        let sonnet = card.price("claude-sonnet-4-5").copied();
        for id in [
            "anthropic.claude-sonnet-4-5-20250929-v1:0",
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
        ] {
            let price = card.price(id).unwrap();
            assert_eq!(price.input_per_mtok, sonnet.unwrap().input_per_mtok, "{id}");
        }
        assert_eq!(
            card.price("us.amazon.nova-micro-v1:0")
                .unwrap()
                .input_per_mtok,
            0.035
        );
        assert!(card.price("meta.llama3-3-70b-instruct-v1:0").is_some());
        assert!(card.price("us.amazon.nova-micro-v2:0").is_none());
    }

    #[test]
    fn list_prices_cover_dated_snapshots_but_not_siblings() {
        let card = RateCard::list_prices();
        assert_eq!(
            card.price("gpt-4.1-mini-2025-04-14")
                .map(|price| price.input_per_mtok),
            Some(0.40)
        );
        assert_eq!(
            card.price("gpt-5-mini").map(|price| price.output_per_mtok),
            Some(2.0)
        );
        assert!(card.price("gpt-5-pro").is_none());
    }

    /// Anthropic Claude Sonnet 4.5, published per-MTok prices (anthropic.com/pricing):
    /// input $3, output $15, 5-minute cache write $3.75 (1.25x), 1-hour cache write $6 (2x),
    /// cache read $0.30 (0.1x).
    const SONNET_4_5: ModelPrice = ModelPrice {
        input_per_mtok: 3.0,
        output_per_mtok: 15.0,
        cache_read_per_mtok: Some(0.30),
        cache_write_5m_per_mtok: Some(3.75),
        cache_write_1h_per_mtok: Some(6.0),
    };

    /// OpenAI gpt-4o, published per-MTok prices (openai.com/api/pricing): input $2.50,
    /// cached input $1.25, output $10. OpenAI charges nothing extra for cache writes, so the
    /// write prices are left out (billed as plain input).
    const GPT_4O: ModelPrice = ModelPrice {
        input_per_mtok: 2.50,
        output_per_mtok: 10.0,
        cache_read_per_mtok: Some(1.25),
        cache_write_5m_per_mtok: None,
        cache_write_1h_per_mtok: None,
    };

    /// Google Gemini 2.5 Pro, published per-MTok prices for prompts up to 200k tokens
    /// (ai.google.dev/gemini-api/docs/pricing): input $1.25, output $10 (thinking tokens
    /// included), context-cache read $0.125.
    const GEMINI_2_5_PRO: ModelPrice = ModelPrice {
        input_per_mtok: 1.25,
        output_per_mtok: 10.0,
        cache_read_per_mtok: Some(0.125),
        cache_write_5m_per_mtok: None,
        cache_write_1h_per_mtok: None,
    };

    fn assert_usd(actual: f64, expected: f64) {
        assert!(
            (actual - expected).abs() < 1e-9,
            "cost {actual} differs from expected {expected}"
        );
    }

    #[test]
    fn plain_input_and_output() {
        let usage = Usage {
            input_tokens: Some(1_000_000),
            output_tokens: Some(1_000_000),
            ..Usage::default()
        };
        assert_usd(cost(&usage, &SONNET_4_5), 3.0 + 15.0);
        assert_usd(cost(&usage, &GPT_4O), 2.50 + 10.0);
        assert_usd(cost(&usage, &GEMINI_2_5_PRO), 1.25 + 10.0);
    }

    #[test]
    fn anthropic_cache_reads_and_both_write_ttls() {
        // Normalized: 10k input tokens in total, of which 6k read from the cache, 2k written to
        // a 5-minute entry, 1k written to a 1-hour entry, so 1k uncached.
        let usage = Usage {
            input_tokens: Some(10_000),
            output_tokens: Some(500),
            cache_read_tokens: Some(6_000),
            cache_write_5m_tokens: Some(2_000),
            cache_write_1h_tokens: Some(1_000),
            reasoning_tokens: None,
        };
        let expected = 1_000.0 * 3.0 / 1e6 // uncached input
            + 6_000.0 * 0.30 / 1e6 // cache read
            + 2_000.0 * 3.75 / 1e6 // 5m write
            + 1_000.0 * 6.0 / 1e6 // 1h write
            + 500.0 * 15.0 / 1e6; // output
        assert_usd(cost(&usage, &SONNET_4_5), expected);
        assert_usd(expected, 0.0258); // $0.003 + $0.0018 + $0.0075 + $0.006 + $0.0075
    }

    #[test]
    fn write_ttls_are_priced_apart() {
        let five = Usage {
            input_tokens: Some(1_000_000),
            cache_write_5m_tokens: Some(1_000_000),
            ..Usage::default()
        };
        let hour = Usage {
            input_tokens: Some(1_000_000),
            cache_write_1h_tokens: Some(1_000_000),
            ..Usage::default()
        };
        assert_usd(cost(&five, &SONNET_4_5), 3.75);
        assert_usd(cost(&hour, &SONNET_4_5), 6.0);
    }

    #[test]
    fn openai_cached_input() {
        let usage = Usage {
            input_tokens: Some(2_000_000),
            cache_read_tokens: Some(1_000_000),
            output_tokens: Some(100_000),
            ..Usage::default()
        };
        assert_usd(cost(&usage, &GPT_4O), 2.50 + 1.25 + 1.0);
    }

    #[test]
    fn reasoning_tokens_are_billed_once_as_output() {
        // Gemini: 1k visible output + 3k thoughts, normalized to output 4k, reasoning 3k.
        let usage = Usage {
            input_tokens: Some(0),
            output_tokens: Some(4_000),
            reasoning_tokens: Some(3_000),
            ..Usage::default()
        };
        assert_usd(cost(&usage, &GEMINI_2_5_PRO), 4_000.0 * 10.0 / 1e6);
        let without_breakdown = Usage {
            reasoning_tokens: None,
            ..usage
        };
        assert_usd(
            cost(&usage, &GEMINI_2_5_PRO),
            cost(&without_breakdown, &GEMINI_2_5_PRO),
        );
    }

    #[test]
    fn unknown_counts_cost_nothing() {
        assert_usd(cost(&Usage::default(), &SONNET_4_5), 0.0);
        let output_only = Usage {
            output_tokens: Some(1_000_000),
            ..Usage::default()
        };
        assert_usd(cost(&output_only, &SONNET_4_5), 15.0);
    }

    #[test]
    fn missing_cache_prices_fall_back_to_input() {
        let plain = ModelPrice {
            input_per_mtok: 2.0,
            output_per_mtok: 8.0,
            ..ModelPrice::default()
        };
        let usage = Usage {
            input_tokens: Some(3_000_000),
            cache_read_tokens: Some(1_000_000),
            cache_write_5m_tokens: Some(1_000_000),
            cache_write_1h_tokens: Some(1_000_000),
            ..Usage::default()
        };
        // Every input token at $2, however it was cached.
        assert_usd(cost(&usage, &plain), 6.0);
        // gpt-4o lists only a read price: the 5-minute write falls back to input.
        let openai = Usage {
            input_tokens: Some(2_000_000),
            cache_read_tokens: Some(1_000_000),
            cache_write_5m_tokens: Some(1_000_000),
            ..Usage::default()
        };
        assert_usd(cost(&openai, &GPT_4O), 1.25 + 2.50);
    }

    fn card() -> RateCard {
        RateCard::new()
            .with("claude-sonnet-4-5", SONNET_4_5)
            .with("gpt-4o", GPT_4O)
            .with(
                "gpt-4o-2024-05-13",
                ModelPrice {
                    input_per_mtok: 5.0,
                    output_per_mtok: 15.0,
                    ..ModelPrice::default()
                },
            )
            .with("gemini-2.5-pro", GEMINI_2_5_PRO)
    }

    #[test]
    fn price_exact_match() {
        let card = card();
        assert_eq!(card.price("gpt-4o"), Some(&GPT_4O));
        assert_eq!(
            card.price("gpt-4o-2024-05-13").map(|p| p.input_per_mtok),
            Some(5.0)
        );
        assert_eq!(card.price("gemini-2.5-pro"), Some(&GEMINI_2_5_PRO));
    }

    #[test]
    fn price_of_a_dated_snapshot_uses_the_longest_listed_name() {
        let card = card();
        assert_eq!(card.price("claude-sonnet-4-5-20250929"), Some(&SONNET_4_5));
        assert_eq!(card.price("claude-sonnet-4-5@20250929"), Some(&SONNET_4_5));
        assert_eq!(card.price("gpt-4o-2024-08-06"), Some(&GPT_4O));
        // Longest listed name wins over a shorter one that also fits.
        let longer = RateCard::new().with("model", GPT_4O).with(
            "model-2025",
            ModelPrice {
                input_per_mtok: 9.0,
                ..ModelPrice::default()
            },
        );
        assert_eq!(
            longer.price("model-2025-0101").map(|p| p.input_per_mtok),
            Some(9.0)
        );
        assert_eq!(longer.price("model-20250101"), Some(&GPT_4O));
    }

    #[test]
    fn price_does_not_match_a_different_model_that_shares_a_prefix() {
        let card = card();
        assert_eq!(card.price("gpt-4o-mini"), None);
        assert_eq!(card.price("gpt-4o-mini-2024-07-18"), None);
        assert_eq!(card.price("gpt-4"), None);
        assert_eq!(card.price("claude-sonnet-4-5-1"), None);
        assert_eq!(card.price("gemini-2.5-pro-preview-06-05"), None);
        let opus = RateCard::new().with("claude-opus-4", SONNET_4_5);
        assert_eq!(opus.price("claude-opus-4-5-20251101"), None);
        assert_eq!(opus.price("claude-opus-4-20250514"), Some(&SONNET_4_5));
        assert_eq!(card.price(""), None);
        assert_eq!(RateCard::new().price("gpt-4o"), None);
    }

    #[test]
    fn card_cost_and_listing() {
        let card = card();
        let usage = Usage {
            input_tokens: Some(1_000_000),
            ..Usage::default()
        };
        assert_eq!(card.cost("unknown-model", &usage), None);
        assert_usd(
            card.cost("claude-sonnet-4-5-20250929", &usage)
                .unwrap_or(-1.0),
            3.0,
        );
        let names: Vec<&str> = card.models().map(|(name, _)| name).collect();
        assert_eq!(
            names,
            [
                "claude-sonnet-4-5",
                "gemini-2.5-pro",
                "gpt-4o",
                "gpt-4o-2024-05-13"
            ]
        );
        let mut replaced = card.clone();
        replaced.insert("gpt-4o", SONNET_4_5);
        assert_eq!(replaced.price("gpt-4o"), Some(&SONNET_4_5));
    }
}
