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
        // Saturating on the way up too: absurd provider numbers must not panic (debug) or wrap
        // around to a tiny count (release).
        let cached = self
            .cache_read_tokens
            .unwrap_or(0)
            .saturating_add(self.cache_write_5m_tokens.unwrap_or(0))
            .saturating_add(self.cache_write_1h_tokens.unwrap_or(0));
        self.input_tokens.unwrap_or(0).saturating_sub(cached)
    }

    /// Overlays a later report of the *same* model call: every count `later` knows replaces
    /// this one's, every count it leaves unknown keeps its value.
    ///
    /// This is how the [`StreamEvent::Usage`](crate::StreamEvent::Usage) events of one call
    /// combine ("the last one wins per field"): providers send running totals, e.g. Anthropic
    /// reports input tokens when the message starts and the final output count at the end.
    /// To sum *different* calls, use `+` instead.
    pub fn merge(&mut self, later: Usage) {
        let keep = |current: &mut Option<u64>, newer: Option<u64>| {
            if newer.is_some() {
                *current = newer;
            }
        };
        keep(&mut self.input_tokens, later.input_tokens);
        keep(&mut self.output_tokens, later.output_tokens);
        keep(&mut self.cache_read_tokens, later.cache_read_tokens);
        keep(&mut self.cache_write_5m_tokens, later.cache_write_5m_tokens);
        keep(&mut self.cache_write_1h_tokens, later.cache_write_1h_tokens);
        keep(&mut self.reasoning_tokens, later.reasoning_tokens);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: Option<u64>, output: Option<u64>) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        }
    }

    #[test]
    fn unknown_plus_unknown_stays_unknown() {
        let sum = Usage::default() + Usage::default();
        assert_eq!(sum, Usage::default());
        assert!(sum.is_unknown());
        assert_eq!(sum.input_tokens, None);
    }

    #[test]
    fn known_plus_unknown_keeps_the_known_count() {
        let a = Usage {
            input_tokens: Some(10),
            cache_read_tokens: Some(4),
            ..Usage::default()
        };
        let b = Usage {
            output_tokens: Some(7),
            reasoning_tokens: Some(3),
            ..Usage::default()
        };
        let sum = a + b;
        assert_eq!(sum.input_tokens, Some(10));
        assert_eq!(sum.output_tokens, Some(7));
        assert_eq!(sum.cache_read_tokens, Some(4));
        assert_eq!(sum.reasoning_tokens, Some(3));
        // Neither side knew these: still unknown, not zero.
        assert_eq!(sum.cache_write_5m_tokens, None);
        assert_eq!(sum.cache_write_1h_tokens, None);
        // Addition is symmetric.
        assert_eq!(b + a, sum);
    }

    #[test]
    fn addition_adds_every_field() {
        let one = Usage {
            input_tokens: Some(1),
            output_tokens: Some(2),
            cache_read_tokens: Some(3),
            cache_write_5m_tokens: Some(4),
            cache_write_1h_tokens: Some(5),
            reasoning_tokens: Some(6),
        };
        let two = one + one;
        assert_eq!(
            two,
            Usage {
                input_tokens: Some(2),
                output_tokens: Some(4),
                cache_read_tokens: Some(6),
                cache_write_5m_tokens: Some(8),
                cache_write_1h_tokens: Some(10),
                reasoning_tokens: Some(12),
            }
        );
    }

    #[test]
    fn addition_saturates() {
        let sum = usage(Some(u64::MAX), Some(1)) + usage(Some(5), Some(u64::MAX));
        assert_eq!(sum.input_tokens, Some(u64::MAX));
        assert_eq!(sum.output_tokens, Some(u64::MAX));
    }

    #[test]
    fn add_assign_matches_add() {
        let mut total = usage(Some(1), None);
        total += usage(None, Some(2));
        total += usage(Some(3), Some(4));
        assert_eq!(total, usage(Some(4), Some(6)));
    }

    #[test]
    fn sum_of_calls() {
        let calls = [
            usage(Some(1), Some(10)),
            usage(None, None),
            usage(Some(2), None),
        ];
        let total: Usage = calls.into_iter().sum();
        assert_eq!(total, usage(Some(3), Some(10)));

        let none: Usage = std::iter::empty().sum();
        assert!(none.is_unknown());
    }

    #[test]
    fn total_tokens_is_input_plus_output() {
        assert_eq!(usage(None, None).total_tokens(), None);
        assert_eq!(usage(Some(5), None).total_tokens(), Some(5));
        assert_eq!(usage(None, Some(7)).total_tokens(), Some(7));
        assert_eq!(usage(Some(5), Some(7)).total_tokens(), Some(12));
        // Cache and reasoning counts are breakdowns of input and output: never added on top.
        let broken_down = Usage {
            cache_read_tokens: Some(100),
            reasoning_tokens: Some(100),
            ..usage(Some(500), Some(200))
        };
        assert_eq!(broken_down.total_tokens(), Some(700));
        assert_eq!(
            usage(Some(u64::MAX), Some(1)).total_tokens(),
            Some(u64::MAX)
        );
    }

    #[test]
    fn uncached_input_subtracts_every_cache_count() {
        let u = Usage {
            input_tokens: Some(1_000),
            cache_read_tokens: Some(600),
            cache_write_5m_tokens: Some(100),
            cache_write_1h_tokens: Some(50),
            ..Usage::default()
        };
        assert_eq!(u.uncached_input_tokens(), 250);
        assert_eq!(usage(Some(42), None).uncached_input_tokens(), 42);
        assert_eq!(Usage::default().uncached_input_tokens(), 0);
    }

    #[test]
    fn uncached_input_saturates_when_numbers_disagree() {
        // An adapter that forgot to normalize (Anthropic's input excludes the cache).
        let u = Usage {
            input_tokens: Some(10),
            cache_read_tokens: Some(900),
            ..Usage::default()
        };
        assert_eq!(u.uncached_input_tokens(), 0);

        // Absurd counts: must neither panic nor wrap around.
        let u = Usage {
            input_tokens: Some(u64::MAX),
            cache_read_tokens: Some(u64::MAX),
            cache_write_5m_tokens: Some(u64::MAX),
            cache_write_1h_tokens: Some(1),
            ..Usage::default()
        };
        assert_eq!(u.uncached_input_tokens(), 0);
    }

    #[test]
    fn merge_lets_the_later_report_win_per_field() {
        // Anthropic-style: input at message start, final output at the end.
        let mut current = Usage {
            input_tokens: Some(1_200),
            output_tokens: Some(1),
            cache_read_tokens: Some(1_000),
            ..Usage::default()
        };
        current.merge(Usage {
            output_tokens: Some(85),
            ..Usage::default()
        });
        assert_eq!(
            current,
            Usage {
                input_tokens: Some(1_200),
                output_tokens: Some(85),
                cache_read_tokens: Some(1_000),
                ..Usage::default()
            }
        );
        // Merging an unknown report changes nothing.
        let before = current;
        current.merge(Usage::default());
        assert_eq!(current, before);
    }

    #[test]
    fn is_unknown_only_when_every_count_is_none() {
        assert!(Usage::default().is_unknown());
        assert!(!usage(Some(0), None).is_unknown());
        assert!(
            !Usage {
                reasoning_tokens: Some(0),
                ..Usage::default()
            }
            .is_unknown()
        );
    }
}
