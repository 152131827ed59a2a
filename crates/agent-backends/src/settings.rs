//! [`SettingsLimits`]: the ranges each provider accepts for the common generation settings,
//! so a request can be refused at the edge, naming the setting, instead of being sent (and
//! billed, or silently clamped) or failing deep inside a run.
//!
//! The ranges, from each provider's API reference (as of 2025-11):
//!
//! | setting | OpenAI (Chat, Responses) | Anthropic Messages | Gemini | Ollama |
//! |---|---|---|---|---|
//! | `temperature` | 0–2 | 0–1 | 0–2 | ≥ 0 |
//! | `top_p` | 0–1 | 0–1 | 0–1 | 0–1 |
//! | `max_output_tokens` | 1 – the model's output limit | 1 – the model's output limit | 1 – the model's output limit | ≥ 1 |
//! | `stop_sequences` | at most 4 (Chat); none (Responses) | each with a non-whitespace character | at most 5 | any |
//! | `reasoning.budget_tokens` | — | 0 (off) or ≥ 1024, below `max_output_tokens` | per model (2.5 Pro 128–32768, 2.5 Flash 0–24576, 2.5 Flash-Lite 0 or 512–24576) | — |
//!
//! Sources: OpenAI, `platform.openai.com/docs/api-reference/chat/create` and
//! `/responses/create` (`temperature` "between 0 and 2", `top_p`, `stop` "up to 4
//! sequences"), the models pages for output limits; the recorded 400 in
//! `fixtures/providers/openai-responses/error-400-invalid-request.json` ("Invalid
//! 'temperature' … Expected a value >= 0"). Anthropic, `docs.anthropic.com/en/api/messages`
//! (`temperature` "ranges from 0.0 to 1.0", `max_tokens` ≥ 1, extended thinking's
//! `budget_tokens` ≥ 1024 and less than `max_tokens`) and the models overview for output
//! limits. Gemini, `ai.google.dev/api/generate-content#generationconfig` (`stopSequences` "up
//! to 5", `temperature` 0.0–2.0 for the 2.x models, `topP`, `maxOutputTokens`) and
//! `ai.google.dev/gemini-api/docs/thinking` for the budgets. Ollama documents no bounds beyond
//! the sampler's own (a negative temperature or a `top_p` outside 0–1 is meaningless).
//!
//! An output limit is only enforced for models this table knows (by name, with or without a
//! date or version suffix); an unknown model gets the provider's other ranges, and an
//! OpenAI-compatible server (whose models and ranges vary) only the checks that hold for every
//! provider: a finite, non-negative temperature, `top_p` in 0–1, at least one output token.

use agent_types::GenerationSettings;

use crate::error::Error;

/// The ranges a provider (and, where known, the model) accepts for
/// [`GenerationSettings`]. Build one with [`Api::settings_limits`](crate::Api::settings_limits),
/// [`Provider::settings_limits`](crate::Provider::settings_limits) or
/// [`SettingsLimits::universal`], then [`check`](Self::check) settings against it.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct SettingsLimits {
    /// Whose limits these are, for messages (`anthropic`, `openai (gpt-4o)`…).
    pub scope: &'static str,
    /// The highest temperature, when the provider has one (the lowest is always 0).
    pub max_temperature: Option<f32>,
    /// The most output tokens the model can produce, when known.
    pub max_output_tokens: Option<u32>,
    /// The most stop sequences, when limited (0: the API has none).
    pub max_stop_sequences: Option<usize>,
    /// Stop sequences must contain a non-whitespace character.
    pub stop_needs_text: bool,
    /// The thinking budget's range, `(min, max)`, where `0` always means "off" unless
    /// `thinking_off` is false; `max` is `None` when bounded only by the output limit.
    pub thinking_budget: Option<(u32, Option<u32>)>,
    /// A thinking budget of 0 (thinking off) is accepted.
    pub thinking_off: bool,
    /// The thinking budget must be below `max_output_tokens` (Anthropic counts thinking in
    /// `max_tokens`).
    pub thinking_below_max_output: bool,
}

impl SettingsLimits {
    /// The checks that hold for every provider: a finite temperature ≥ 0, `top_p` in 0–1, at
    /// least one output token.
    pub const fn universal() -> Self {
        Self {
            scope: "every provider",
            max_temperature: None,
            max_output_tokens: None,
            max_stop_sequences: None,
            stop_needs_text: false,
            thinking_budget: None,
            thinking_off: true,
            thinking_below_max_output: false,
        }
    }

    /// Checks `settings`; the error names the first setting out of range, its value and the
    /// accepted range.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSetting`].
    pub fn check(&self, settings: &GenerationSettings) -> Result<(), Error> {
        let fail = |field: &'static str, value: String, expected: String| {
            Err(Error::InvalidSetting {
                field,
                value,
                scope: self.scope,
                expected,
            })
        };
        if let Some(temperature) = settings.temperature {
            let max = self.max_temperature;
            if !temperature.is_finite()
                || temperature < 0.0
                || max.is_some_and(|max| temperature > max)
            {
                return fail(
                    "temperature",
                    temperature.to_string(),
                    match max {
                        Some(max) => format!("a value from 0 to {max}"),
                        None => "a value of at least 0".into(),
                    },
                );
            }
        }
        if let Some(top_p) = settings.top_p
            && !(top_p.is_finite() && (0.0..=1.0).contains(&top_p))
        {
            return fail("top_p", top_p.to_string(), "a value from 0 to 1".into());
        }
        if let Some(tokens) = settings.max_output_tokens
            && (tokens == 0 || self.max_output_tokens.is_some_and(|max| tokens > max))
        {
            return fail(
                "max_output_tokens",
                tokens.to_string(),
                match self.max_output_tokens {
                    Some(max) => format!("from 1 to {max}, the model's output limit"),
                    None => "at least 1".into(),
                },
            );
        }
        let stops = &settings.stop_sequences;
        if let Some(max) = self.max_stop_sequences
            && stops.len() > max
        {
            return fail(
                "stop_sequences",
                format!("{} sequences", stops.len()),
                if max == 0 {
                    "none: this API has no stop sequences".into()
                } else {
                    format!("at most {max} sequences")
                },
            );
        }
        if self.stop_needs_text
            && let Some(blank) = stops.iter().find(|stop| stop.trim().is_empty())
        {
            return fail(
                "stop_sequences",
                format!("{blank:?}"),
                "sequences with at least one non-whitespace character".into(),
            );
        }
        if let Some(budget) = settings
            .reasoning
            .and_then(|reasoning| reasoning.budget_tokens)
        {
            self.check_budget(budget, settings.max_output_tokens)?;
        }
        Ok(())
    }

    fn check_budget(&self, budget: u32, max_output: Option<u32>) -> Result<(), Error> {
        let fail = |expected: String| {
            Err(Error::InvalidSetting {
                field: "reasoning.budget_tokens",
                value: budget.to_string(),
                scope: self.scope,
                expected,
            })
        };
        if budget == 0 && self.thinking_off {
            return Ok(());
        }
        if let Some((min, max)) = self.thinking_budget {
            let off = if self.thinking_off { "0 (off) or " } else { "" };
            if budget < min || max.is_some_and(|max| budget > max) {
                return fail(match max {
                    Some(max) => format!("{off}a budget from {min} to {max}"),
                    None => format!("{off}a budget of at least {min}"),
                });
            }
        }
        if self.thinking_below_max_output
            && let Some(max_output) = max_output
            && budget >= max_output
        {
            return fail(format!(
                "a budget below max_output_tokens ({max_output}): the thinking counts toward it"
            ));
        }
        Ok(())
    }
}

/// Whether `model` is the model `family` names: the same name, or it with a date, version or
/// channel suffix (`gpt-4o-2024-08-06`, `claude-sonnet-4-5-20250929`, `gemini-1.5-pro-002`,
/// `gemini-2.5-flash-preview-05-20`, `gpt-5-chat-latest`), not a longer family
/// (`gpt-4o-mini` is not `gpt-4o`, `claude-opus-4-5` is not `claude-opus-4`).
fn is_family(model: &str, family: &str) -> bool {
    // `models/gemini-2.5-flash`, `anthropic/claude-…` through a router.
    let model = model.rsplit('/').next().unwrap_or(model);
    let Some(rest) = model.strip_prefix(family) else {
        return false;
    };
    rest.is_empty()
        || rest.starts_with('@')
        || ["-20", "-latest", "-preview", "-exp", "-00"]
            .iter()
            .any(|suffix| rest.starts_with(suffix))
}

/// Output limits (tokens) of models by family, most specific first.
const OPENAI_OUTPUT: &[(&str, u32)] = &[
    ("gpt-5-mini", 128_000),
    ("gpt-5-nano", 128_000),
    ("gpt-5-chat", 16_384),
    ("gpt-5", 128_000),
    ("gpt-4.1-mini", 32_768),
    ("gpt-4.1-nano", 32_768),
    ("gpt-4.1", 32_768),
    ("gpt-4o-mini", 16_384),
    ("gpt-4o", 16_384),
    ("o4-mini", 100_000),
    ("o3-mini", 100_000),
    ("o3", 100_000),
    ("o1", 100_000),
    ("gpt-4-turbo", 4_096),
    ("gpt-3.5-turbo", 4_096),
];

const ANTHROPIC_OUTPUT: &[(&str, u32)] = &[
    ("claude-opus-4-5", 64_000),
    ("claude-opus-4-1", 32_000),
    ("claude-opus-4", 32_000),
    ("claude-sonnet-4-5", 64_000),
    ("claude-sonnet-4", 64_000),
    ("claude-haiku-4-5", 64_000),
    ("claude-3-7-sonnet", 64_000),
    ("claude-3-5-sonnet", 8_192),
    ("claude-3-5-haiku", 8_192),
    ("claude-3-opus", 4_096),
    ("claude-3-haiku", 4_096),
];

const GEMINI_OUTPUT: &[(&str, u32)] = &[
    ("gemini-2.5-pro", 65_536),
    ("gemini-2.5-flash-lite", 65_536),
    ("gemini-2.5-flash", 65_536),
    ("gemini-2.0-flash-lite", 8_192),
    ("gemini-2.0-flash", 8_192),
    ("gemini-1.5-pro", 8_192),
    ("gemini-1.5-flash", 8_192),
];

fn output_limit(table: &[(&str, u32)], model: &str) -> Option<u32> {
    table
        .iter()
        .find(|(family, _)| is_family(model, family))
        .map(|(_, limit)| *limit)
}

/// Gemini's thinking budgets: `(min, max, 0 turns it off)`.
fn gemini_thinking(model: &str) -> Option<(u32, u32, bool)> {
    if is_family(model, "gemini-2.5-pro") {
        Some((128, 32_768, false))
    } else if is_family(model, "gemini-2.5-flash-lite") {
        Some((512, 24_576, true))
    } else if is_family(model, "gemini-2.5-flash") {
        Some((1, 24_576, true))
    } else {
        None
    }
}

impl crate::Provider {
    /// The ranges this wire format's provider accepts for `model`'s settings (OpenAI Chat
    /// Completions as OpenAI itself; use [`Api::settings_limits`](crate::Api::settings_limits)
    /// for an OpenAI-compatible server).
    pub fn settings_limits(self, model: &str) -> SettingsLimits {
        let base = SettingsLimits::universal();
        match self {
            Self::OpenAiChat | Self::OpenAiResponses => SettingsLimits {
                scope: if self == Self::OpenAiChat {
                    "openai"
                } else {
                    "openai-responses"
                },
                max_temperature: Some(2.0),
                max_output_tokens: output_limit(OPENAI_OUTPUT, model),
                max_stop_sequences: Some(if self == Self::OpenAiChat { 4 } else { 0 }),
                ..base
            },
            Self::Anthropic => SettingsLimits {
                scope: "anthropic",
                max_temperature: Some(1.0),
                max_output_tokens: output_limit(ANTHROPIC_OUTPUT, model),
                stop_needs_text: true,
                thinking_budget: Some((1024, None)),
                thinking_below_max_output: true,
                ..base
            },
            Self::Gemini => {
                let thinking = gemini_thinking(model);
                SettingsLimits {
                    scope: "gemini",
                    max_temperature: Some(2.0),
                    max_output_tokens: output_limit(GEMINI_OUTPUT, model),
                    max_stop_sequences: Some(5),
                    thinking_budget: thinking.map(|(min, max, _)| (min, Some(max))),
                    thinking_off: thinking.is_none_or(|(_, _, off)| off),
                    ..base
                }
            }
            Self::Ollama => SettingsLimits {
                scope: "ollama",
                ..base
            },
            // Bedrock hosts many families; Converse checks the rest per model.
            Self::Bedrock => SettingsLimits {
                scope: "bedrock",
                max_temperature: Some(1.0),
                ..base
            },
        }
    }
}

/// What an adapter does with settings out of its provider's range: refuses the request before
/// it is sent (a 400 for the loop), rather than let the provider bill or clamp it.
pub(crate) fn refuse_out_of_range(
    limits: SettingsLimits,
    settings: &GenerationSettings,
) -> Result<(), agent_types::BackendError> {
    limits.check(settings).map_err(|error| {
        agent_types::BackendError::new(
            agent_types::BackendErrorKind::Unsupported,
            error.to_string(),
        )
    })
}

#[cfg(feature = "providers")]
impl crate::Api {
    /// The ranges this API accepts for `model`'s settings: the provider's (see
    /// [`Provider::settings_limits`](crate::Provider::settings_limits)), and for
    /// `openai-compatible` only the checks that hold everywhere.
    pub fn settings_limits(self, model: &str) -> SettingsLimits {
        match self {
            Self::OpenaiCompatible => SettingsLimits {
                scope: "openai-compatible",
                ..SettingsLimits::universal()
            },
            api => api.wire().settings_limits(model),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use agent_types::{Reasoning, ReasoningEffort};

    use super::*;
    use crate::Provider;

    fn settings() -> GenerationSettings {
        GenerationSettings::default()
    }

    /// The field the check refuses, or `None` when it passes.
    fn refused(limits: SettingsLimits, settings: &GenerationSettings) -> Option<&'static str> {
        match limits.check(settings) {
            Ok(()) => None,
            Err(Error::InvalidSetting { field, .. }) => Some(field),
            Err(other) => panic!("{other}"),
        }
    }

    fn temperature(t: f32) -> GenerationSettings {
        GenerationSettings {
            temperature: Some(t),
            ..settings()
        }
    }

    fn max_tokens(n: u32) -> GenerationSettings {
        GenerationSettings {
            max_output_tokens: Some(n),
            ..settings()
        }
    }

    fn stops(n: usize) -> GenerationSettings {
        GenerationSettings {
            stop_sequences: (0..n).map(|i| format!("END{i}")).collect(),
            ..settings()
        }
    }

    fn budget(tokens: u32, max_output: Option<u32>) -> GenerationSettings {
        GenerationSettings {
            max_output_tokens: max_output,
            reasoning: Some(Reasoning {
                effort: None,
                budget_tokens: Some(tokens),
            }),
            ..settings()
        }
    }

    #[test]
    fn the_defaults_pass_everywhere() {
        for provider in Provider::ALL {
            assert_eq!(refused(provider.settings_limits("any"), &settings()), None);
        }
    }

    #[test]
    fn openai_temperature_is_0_to_2_and_its_output_limits_are_per_model() {
        let gpt4o = Provider::OpenAiChat.settings_limits("gpt-4o-2024-08-06");
        assert_eq!(refused(gpt4o, &temperature(2.0)), None);
        assert_eq!(refused(gpt4o, &temperature(0.0)), None);
        assert_eq!(refused(gpt4o, &temperature(2.01)), Some("temperature"));
        // The recorded 400: "Expected a value >= 0, but got -1".
        assert_eq!(refused(gpt4o, &temperature(-1.0)), Some("temperature"));
        assert_eq!(refused(gpt4o, &max_tokens(16_384)), None);
        assert_eq!(
            refused(gpt4o, &max_tokens(16_385)),
            Some("max_output_tokens")
        );
        // The seen request: u32::MAX was forwarded.
        let gpt5 = Provider::OpenAiChat.settings_limits("gpt-5-mini");
        assert_eq!(refused(gpt5, &max_tokens(128_000)), None);
        assert_eq!(
            refused(gpt5, &max_tokens(u32::MAX)),
            Some("max_output_tokens")
        );
        // gpt-4o-mini is its own family, not gpt-4o with a suffix.
        assert_eq!(
            Provider::OpenAiChat
                .settings_limits("gpt-4o-mini")
                .max_output_tokens,
            Some(16_384)
        );
        assert_eq!(refused(gpt4o, &stops(4)), None);
        assert_eq!(refused(gpt4o, &stops(5)), Some("stop_sequences"));
        let responses = Provider::OpenAiResponses.settings_limits("gpt-4o");
        assert_eq!(refused(responses, &temperature(1.5)), None);
        assert_eq!(refused(responses, &stops(1)), Some("stop_sequences"));
    }

    #[test]
    fn anthropic_temperature_is_0_to_1_with_model_output_limits_and_thinking_budgets() {
        let sonnet = Provider::Anthropic.settings_limits("claude-sonnet-4-5-20250929");
        assert_eq!(refused(sonnet, &temperature(1.0)), None);
        assert_eq!(refused(sonnet, &temperature(1.5)), Some("temperature"));
        assert_eq!(refused(sonnet, &max_tokens(64_000)), None);
        assert_eq!(
            refused(sonnet, &max_tokens(64_001)),
            Some("max_output_tokens")
        );
        let opus = Provider::Anthropic.settings_limits("claude-opus-4-1");
        assert_eq!(
            refused(opus, &max_tokens(32_001)),
            Some("max_output_tokens")
        );
        // A newer model than the table: its limit is unknown, the other ranges hold.
        let newer = Provider::Anthropic.settings_limits("claude-opus-4-6");
        assert_eq!(newer.max_output_tokens, None);
        assert_eq!(refused(newer, &max_tokens(100_000)), None);
        assert_eq!(refused(newer, &temperature(1.2)), Some("temperature"));
        let blank = GenerationSettings {
            stop_sequences: vec!["END".into(), " \n".into()],
            ..settings()
        };
        assert_eq!(refused(sonnet, &blank), Some("stop_sequences"));
        assert_eq!(refused(sonnet, &stops(20)), None);
        assert_eq!(refused(sonnet, &budget(1024, Some(4096))), None);
        assert_eq!(refused(sonnet, &budget(0, None)), None);
        assert_eq!(
            refused(sonnet, &budget(1023, None)),
            Some("reasoning.budget_tokens")
        );
        assert_eq!(
            refused(sonnet, &budget(4096, Some(4096))),
            Some("reasoning.budget_tokens")
        );
    }

    #[test]
    fn gemini_allows_five_stop_sequences_and_per_model_thinking_budgets() {
        let flash = Provider::Gemini.settings_limits("models/gemini-2.5-flash");
        assert_eq!(refused(flash, &temperature(2.0)), None);
        assert_eq!(refused(flash, &temperature(2.5)), Some("temperature"));
        assert_eq!(refused(flash, &max_tokens(65_536)), None);
        assert_eq!(
            refused(flash, &max_tokens(65_537)),
            Some("max_output_tokens")
        );
        assert_eq!(refused(flash, &stops(5)), None);
        assert_eq!(refused(flash, &stops(6)), Some("stop_sequences"));
        assert_eq!(refused(flash, &budget(0, None)), None);
        assert_eq!(refused(flash, &budget(24_576, None)), None);
        assert_eq!(
            refused(flash, &budget(24_577, None)),
            Some("reasoning.budget_tokens")
        );
        let pro = Provider::Gemini.settings_limits("gemini-2.5-pro");
        assert_eq!(
            refused(pro, &budget(0, None)),
            Some("reasoning.budget_tokens")
        );
        assert_eq!(refused(pro, &budget(128, None)), None);
        let old = Provider::Gemini.settings_limits("gemini-2.0-flash-001");
        assert_eq!(refused(old, &max_tokens(8_193)), Some("max_output_tokens"));
    }

    #[test]
    fn every_provider_refuses_a_negative_temperature_a_top_p_over_1_and_zero_tokens() {
        let top_p = |p: f32| GenerationSettings {
            top_p: Some(p),
            ..settings()
        };
        let mut all: Vec<SettingsLimits> = Provider::ALL
            .iter()
            .map(|provider| provider.settings_limits("whatever"))
            .collect();
        all.push(crate::Api::OpenaiCompatible.settings_limits("local-model"));
        for limits in all {
            assert_eq!(refused(limits, &temperature(-0.1)), Some("temperature"));
            assert_eq!(refused(limits, &temperature(f32::NAN)), Some("temperature"));
            assert_eq!(refused(limits, &top_p(1.01)), Some("top_p"));
            assert_eq!(refused(limits, &top_p(-0.5)), Some("top_p"));
            assert_eq!(refused(limits, &top_p(1.0)), None);
            assert_eq!(refused(limits, &max_tokens(0)), Some("max_output_tokens"));
        }
        // Ollama and compatible servers have no upper temperature or output bound here.
        let ollama = Provider::Ollama.settings_limits("qwen3");
        assert_eq!(refused(ollama, &temperature(5.0)), None);
        assert_eq!(refused(ollama, &max_tokens(u32::MAX)), None);
    }

    /// The adapters refuse out-of-range settings before sending (the address is one nothing
    /// listens on: a request that was sent would fail to connect instead).
    #[cfg(all(feature = "anthropic", feature = "gemini", feature = "openai"))]
    #[tokio::test]
    async fn the_adapters_refuse_before_sending() {
        use agent_types::{Backend, BackendErrorKind, Message, ModelRequest};
        use futures_util::StreamExt;

        let unsent = "http://127.0.0.1:9";
        let backends: Vec<(Box<dyn Backend>, &str, GenerationSettings)> = vec![
            (
                Box::new(crate::anthropic::Anthropic::new("k").with_base_url(unsent)),
                "claude-sonnet-4-5",
                temperature(1.5),
            ),
            (
                Box::new(crate::gemini::Gemini::new("k").with_base_url(unsent)),
                "gemini-2.5-flash",
                stops(6),
            ),
            (
                Box::new(crate::openai_chat::OpenAiChat::compatible(unsent)),
                "local",
                max_tokens(0),
            ),
        ];
        for (backend, model, settings) in backends {
            let mut request = ModelRequest::new(model, vec![Message::user("hi")]);
            request.settings = settings;
            let first = backend.stream(&request).next().await.unwrap();
            let error = first.unwrap_err();
            assert_eq!(
                error.kind,
                BackendErrorKind::Unsupported,
                "{model}: {error}"
            );
            assert!(error.message.contains("accepts"), "{model}: {error}");
        }
    }

    #[test]
    fn the_error_names_the_setting_its_value_and_the_range() {
        let error = Provider::Anthropic
            .settings_limits("claude-haiku-4-5")
            .check(&temperature(1.5))
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "`temperature` = 1.5 is outside what anthropic accepts: a value from 0 to 1"
        );
        let effort_only = GenerationSettings {
            reasoning: Some(Reasoning {
                effort: Some(ReasoningEffort::High),
                budget_tokens: None,
            }),
            ..settings()
        };
        assert_eq!(
            refused(Provider::Anthropic.settings_limits("x"), &effort_only),
            None
        );
    }
}
