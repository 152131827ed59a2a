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

    /// The price of `model`: an exact name first, then the longest listed name that `model`
    /// starts with (so `claude-sonnet-4-5` prices `claude-sonnet-4-5-20250929`).
    pub fn price(&self, model: &str) -> Option<&ModelPrice> {
        if let Some(price) = self.models.get(model) {
            return Some(price);
        }
        self.models
            .iter()
            .filter(|(name, _)| model.starts_with(name.as_str()))
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

/// The cost in USD of `usage` at `price`.
///
/// Follows the [usage convention](crate::Usage): cached tokens are part of `input_tokens`, so
/// they are subtracted from it and billed at their own prices; reasoning tokens are part of
/// `output_tokens` and billed once, as output. Unknown counts cost nothing.
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
