//! Token usage, normalized across providers.

use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

/// Tokens one model call (or a sum of calls) consumed.
///
/// # Convention
///
/// agentry follows the OpenTelemetry GenAI convention, because providers disagree:
///
/// - `input_tokens` **includes** cached tokens, both reads and writes. (Anthropic reports
///   `input_tokens` without the cache; its adapter adds the cache counts back.)
/// - `output_tokens` **includes** reasoning tokens. (Gemini reports thoughts separately; its
///   adapter adds them in.)
/// - `cache_read_tokens`, `cache_write_5m_tokens`, `cache_write_1h_tokens` and
///   `reasoning_tokens` break those totals down; they are never added on top.
///
/// Every count is an `Option`: `None` means the provider did not say, which is not the same as
/// zero. Adding two usages keeps a field `None` only when both sides are `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, cached ones included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Generated tokens, reasoning included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Input tokens served from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Input tokens written to a cache entry that lives 5 minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_5m_tokens: Option<u64>,
    /// Input tokens written to a cache entry that lives 1 hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_1h_tokens: Option<u64>,
    /// Output tokens spent on reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

impl Usage {
    /// `true` when the provider reported no count at all.
    pub fn is_unknown(&self) -> bool {
        *self == Self::default()
    }

    /// Input plus output tokens, or `None` when neither is known.
    pub fn total_tokens(&self) -> Option<u64> {
        add_opt(self.input_tokens, self.output_tokens)
    }

    /// Input tokens that were neither read from nor written to a cache, i.e. billed at the
    /// plain input price. Saturates at zero if a provider's numbers disagree.
    pub fn uncached_input_tokens(&self) -> u64 {
        let cached = self.cache_read_tokens.unwrap_or(0)
            + self.cache_write_5m_tokens.unwrap_or(0)
            + self.cache_write_1h_tokens.unwrap_or(0);
        self.input_tokens.unwrap_or(0).saturating_sub(cached)
    }
}

fn add_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}

impl Add for Usage {
    type Output = Usage;

    fn add(self, other: Usage) -> Usage {
        Usage {
            input_tokens: add_opt(self.input_tokens, other.input_tokens),
            output_tokens: add_opt(self.output_tokens, other.output_tokens),
            cache_read_tokens: add_opt(self.cache_read_tokens, other.cache_read_tokens),
            cache_write_5m_tokens: add_opt(self.cache_write_5m_tokens, other.cache_write_5m_tokens),
            cache_write_1h_tokens: add_opt(self.cache_write_1h_tokens, other.cache_write_1h_tokens),
            reasoning_tokens: add_opt(self.reasoning_tokens, other.reasoning_tokens),
        }
    }
}

impl AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        *self = *self + other;
    }
}

impl std::iter::Sum for Usage {
    fn sum<I: Iterator<Item = Usage>>(iter: I) -> Usage {
        iter.fold(Usage::default(), Add::add)
    }
}
