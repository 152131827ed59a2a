//! `agentry.toml`: provider, model, prices and defaults for the flags.
//!
//! Precedence is flags, then the file, then the user's own file, then the built-in defaults.
//! The user's file is `config.toml` in the user's configuration directory
//! ([`trust::config_dir`]); the file over it is optional: `--config FILE` names it (and it must
//! exist), else `$AGENTRY_CONFIG`, else `./agentry.toml` when there is one. Unknown keys are
//! refused so a typo cannot silently fall back to a default.
//!
//! A `./agentry.toml` found in the directory the command runs in is somebody else's until the
//! user trusts it (`agentry trust`): its settings that route a key or widen tool access are
//! kept apart ([`Config::trusted`] has none of them) and refused if they would take effect.
//!
//! ```toml
//! provider = "anthropic"
//! model = "claude-sonnet-4-5"
//! system = "Answer briefly."
//! tools = ["calculator", "clock"]
//! max_iterations = 8
//! max_cost_usd = 0.50
//!
//! [prices."claude-sonnet-4-5"]
//! input_per_mtok = 3.0
//! output_per_mtok = 15.0
//! cache_read_per_mtok = 0.30
//! cache_write_5m_per_mtok = 3.75
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_loop::{Options, ToolErrorMode, ToolParallelism, ValidationMode};
use agent_types::{ModelPrice, RateCard};
use serde::Deserialize;

use agent_backends::Api;

use crate::args::{BuiltinTool, LoopArgs, OnToolError, Validation};
use crate::error::Error;
use crate::trust::{self, Kind, Store, Verdict};

/// The file's contents; every key is optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileConfig {
    /// The provider API.
    pub(crate) provider: Option<Api>,
    /// The model.
    pub(crate) model: Option<String>,
    /// The API's base URL.
    pub(crate) base_url: Option<String>,
    /// The system prompt.
    pub(crate) system: Option<String>,
    /// Cap on each model call's output tokens.
    pub(crate) max_output_tokens: Option<u32>,
    /// Built-in tools to offer.
    pub(crate) tools: Option<Vec<BuiltinTool>>,
    /// The directory `read_file` may read; relative to the file's own directory.
    pub(crate) root: Option<PathBuf>,
    /// See `--max-iterations`.
    pub(crate) max_iterations: Option<u32>,
    /// See `--token-budget`.
    pub(crate) token_budget: Option<u64>,
    /// See `--max-cost-usd`.
    pub(crate) max_cost_usd: Option<f64>,
    /// `true` for `--parallel`, `false` for `--serial`.
    pub(crate) parallel: Option<bool>,
    /// See `--tool-result-max-bytes`.
    pub(crate) tool_result_max_bytes: Option<usize>,
    /// See `--validation`.
    pub(crate) validation: Option<Validation>,
    /// See `--on-tool-error`.
    pub(crate) on_tool_error: Option<OnToolError>,
    /// See `--max-repeated-calls`.
    pub(crate) max_repeated_calls: Option<u32>,
    /// Seconds one tool call may take.
    pub(crate) tool_timeout_secs: Option<f64>,
    /// See `--tool-search-threshold`.
    pub(crate) tool_search_threshold: Option<usize>,
    /// Tools whose calls wait for a person's approval (docs/approval.md).
    pub(crate) require_approval: Option<Vec<String>>,
    /// Prices per model, in USD per million tokens; added to (and overriding) the built-in card.
    #[serde(default)]
    pub(crate) prices: BTreeMap<String, ModelPrice>,
    /// MCP servers whose tools every run gets (`[[mcp]]`, see docs/mcp.md); honoured only
    /// from files the user vouches for.
    pub(crate) mcp: Option<Vec<crate::mcp::McpEntry>>,
    /// `[retry]`: how `agentry worker`'s activities are retried on Temporal (docs/durable.md).
    pub(crate) retry: Option<RetryConfig>,
    /// `agentry serve`'s section, read by the server (`agent_server::ServerConfig`).
    #[serde(default)]
    #[allow(dead_code)]
    pub(crate) server: Option<toml::Table>,
}

/// `[retry]`: a failed model call (5xx, timeout, rate limit) or a tool call whose worker
/// died is tried again this many times in all, waiting from the first backoff doubling up to
/// the longest; other failures never are.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
// Read by the `temporal` feature's worker only.
#[cfg_attr(not(feature = "temporal"), allow(dead_code))]
pub(crate) struct RetryConfig {
    /// Attempts in all, the first included.
    pub(crate) attempts: Option<u32>,
    /// The first wait, in milliseconds.
    pub(crate) initial_backoff_ms: Option<u64>,
    /// The longest wait, in milliseconds.
    pub(crate) max_backoff_ms: Option<u64>,
}

/// The configuration of one command: every layer merged, and the layers the user vouches
/// for merged on their own.
#[derive(Debug, Clone, Default)]
pub(crate) struct Config {
    /// Every file, the nearer over the further: what the run uses for harmless settings.
    pub(crate) merged: FileConfig,
    /// The files the user vouches for: the only source of settings that send a key somewhere
    /// or widen tool access.
    pub(crate) trusted: FileConfig,
    /// The project file when it is not trusted (its settings are in `merged` only).
    pub(crate) untrusted: Option<(PathBuf, Verdict)>,
}

impl Config {
    /// The user's file (`config.toml` in the user's configuration directory) when present,
    /// under `explicit` (which must exist), else `$AGENTRY_CONFIG`, else `./agentry.toml` when
    /// present. The first three are the user's own; `./agentry.toml` is trusted only when
    /// `agentry trust` recorded its current bytes.
    pub(crate) fn load(explicit: Option<&Path>) -> Result<Self, Error> {
        let mut config = Self::default();
        if let Some(path) = trust::config_dir().map(|dir| dir.join(trust::USER_CONFIG_FILE))
            && path.is_file()
        {
            let (file, _) = FileConfig::read(&path)?;
            config.trusted = file.clone();
            config.merged = file;
        }
        let from_env = std::env::var_os("AGENTRY_CONFIG").map(PathBuf::from);
        if let Some(path) = explicit.map(Path::to_path_buf).or(from_env) {
            let (file, _) = FileConfig::read(&path)?;
            config.trusted = file.clone().over(std::mem::take(&mut config.trusted));
            config.merged = file.over(std::mem::take(&mut config.merged));
            return Ok(config);
        }
        let path = PathBuf::from("agentry.toml");
        if path.is_file() {
            let (file, bytes) = FileConfig::read(&path)?;
            let verdict = trust::check(Store::user().as_ref(), &path, &bytes, Kind::Config)?;
            if verdict == Verdict::Trusted {
                config.trusted = file.clone().over(std::mem::take(&mut config.trusted));
                config.merged = file.over(std::mem::take(&mut config.merged));
            } else {
                config.untrusted = Some((path.clone(), verdict));
                config.merged = file
                    .over(std::mem::take(&mut config.merged))
                    .within(&config.trusted);
            }
        }
        Ok(config)
    }
}

impl FileConfig {
    /// Reads and parses one file; the bytes are returned so that the trust check hashes
    /// exactly what was parsed.
    pub(crate) fn read(path: &Path) -> Result<(Self, Vec<u8>), Error> {
        let bytes = std::fs::read(path).map_err(|error| Error::Config {
            path: path.to_path_buf(),
            message: format!("cannot read it: {error}"),
        })?;
        let text = std::str::from_utf8(&bytes).map_err(|error| Error::Config {
            path: path.to_path_buf(),
            message: format!("not UTF-8: {error}"),
        })?;
        let mut config = Self::parse(text).map_err(|message| Error::Config {
            path: path.to_path_buf(),
            message,
        })?;
        // A relative root means "next to the config file", wherever the command runs from.
        if let Some(root) = config.root.take() {
            let base = path.parent().unwrap_or(Path::new("."));
            config.root = Some(if root.is_relative() {
                base.join(root)
            } else {
                root
            });
        }
        for entry in config.mcp.iter_mut().flatten() {
            entry.anchor(path);
        }
        if let Some(url) = &config.base_url {
            crate::endpoint::check_base_url(url).map_err(|message| Error::Config {
                path: path.to_path_buf(),
                message: format!("base_url: {message}"),
            })?;
        }
        Ok((config, bytes))
    }

    /// These settings with every cap `user` sets kept: an untrusted file may tighten the
    /// user's budgets, never loosen them (flags still can).
    fn within(mut self, user: &Self) -> Self {
        fn stricter<T: Ord + Copy>(theirs: Option<T>, ours: Option<T>) -> Option<T> {
            match (theirs, ours) {
                (Some(theirs), Some(ours)) => Some(theirs.min(ours)),
                (theirs, ours) => ours.or(theirs),
            }
        }
        self.max_iterations = stricter(self.max_iterations, user.max_iterations);
        self.token_budget = stricter(self.token_budget, user.token_budget);
        self.max_output_tokens = stricter(self.max_output_tokens, user.max_output_tokens);
        self.tool_result_max_bytes =
            stricter(self.tool_result_max_bytes, user.tool_result_max_bytes);
        self.max_cost_usd = match (self.max_cost_usd, user.max_cost_usd) {
            (Some(theirs), Some(ours)) => Some(theirs.min(ours)),
            (theirs, ours) => ours.or(theirs),
        };
        // 0 turns cycle detection off: the loosest setting.
        self.max_repeated_calls = match (self.max_repeated_calls, user.max_repeated_calls) {
            (Some(0), Some(ours)) | (Some(ours), Some(0)) => Some(ours),
            (theirs, ours) => stricter(theirs, ours),
        };
        self
    }

    /// This file's settings over `lower`'s: a key set here wins, prices are added.
    pub(crate) fn over(self, lower: Self) -> Self {
        let mut prices = lower.prices;
        prices.extend(self.prices);
        Self {
            provider: self.provider.or(lower.provider),
            model: self.model.or(lower.model),
            base_url: self.base_url.or(lower.base_url),
            system: self.system.or(lower.system),
            max_output_tokens: self.max_output_tokens.or(lower.max_output_tokens),
            tools: self.tools.or(lower.tools),
            root: self.root.or(lower.root),
            max_iterations: self.max_iterations.or(lower.max_iterations),
            token_budget: self.token_budget.or(lower.token_budget),
            max_cost_usd: self.max_cost_usd.or(lower.max_cost_usd),
            parallel: self.parallel.or(lower.parallel),
            tool_result_max_bytes: self.tool_result_max_bytes.or(lower.tool_result_max_bytes),
            validation: self.validation.or(lower.validation),
            on_tool_error: self.on_tool_error.or(lower.on_tool_error),
            max_repeated_calls: self.max_repeated_calls.or(lower.max_repeated_calls),
            tool_timeout_secs: self.tool_timeout_secs.or(lower.tool_timeout_secs),
            tool_search_threshold: self.tool_search_threshold.or(lower.tool_search_threshold),
            // Every layer's list counts: approval only ever narrows what runs unasked.
            require_approval: match (&self.require_approval, &lower.require_approval) {
                (Some(a), Some(b)) => Some(a.iter().chain(b).cloned().collect()),
                (a, b) => a.clone().or_else(|| b.clone()),
            },
            prices,
            mcp: self.mcp.or(lower.mcp),
            server: self.server.or(lower.server),
            retry: self.retry.or(lower.retry),
        }
    }

    /// Parses the file's text.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let config: Self = toml::from_str(text).map_err(|error| error.to_string())?;
        for (model, price) in &config.prices {
            let fields = [
                Some(price.input_per_mtok),
                Some(price.output_per_mtok),
                price.cache_read_per_mtok,
                price.cache_write_5m_per_mtok,
                price.cache_write_1h_per_mtok,
            ];
            if fields
                .into_iter()
                .flatten()
                .any(|usd| !usd.is_finite() || usd < 0.0)
            {
                return Err(format!(
                    "prices.\"{model}\": prices must be finite and not negative"
                ));
            }
        }
        // Values every run would refuse are refused here, naming the file and the key, not
        // when a run starts (after MCP servers are started and a session opened).
        if let Some(bytes) = config.tool_result_max_bytes {
            check_result_cap(bytes)
                .map_err(|problem| format!("tool_result_max_bytes {problem}"))?;
        }
        if let Some(problem) =
            agent_loop::budget_problem(config.token_budget, config.max_cost_usd, &[])
        {
            return Err(problem);
        }
        Ok(config)
    }
}

/// The loop's settings after flags, file and defaults are merged.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LoopSettings {
    pub(crate) max_iterations: u32,
    pub(crate) token_budget: Option<u64>,
    pub(crate) max_cost_usd: Option<f64>,
    pub(crate) parallel: bool,
    pub(crate) tool_result_max_bytes: usize,
    pub(crate) validation: ValidationMode,
    pub(crate) on_tool_error: ToolErrorMode,
    pub(crate) max_repeated_calls: Option<u32>,
    pub(crate) tool_timeout: Option<Duration>,
    /// Flags and files together.
    pub(crate) require_approval: Vec<String>,
}

impl LoopSettings {
    /// Flags first, then the file, then the loop's own defaults.
    pub(crate) fn resolve(flags: &LoopArgs, file: &FileConfig) -> Result<Self, Error> {
        let defaults = Options::auto();
        let max_cost_usd = flags.max_cost_usd.or(file.max_cost_usd);
        // The file's values were checked when it was read: a bad value here is a flag's.
        if let Some(usd) = max_cost_usd
            && !(usd.is_finite() && usd > 0.0)
        {
            return Err(Error::Usage(format!(
                "--max-cost-usd must be a dollar amount above zero, not {usd}"
            )));
        }
        if flags.token_budget == Some(0) {
            return Err(Error::Usage(
                "--token-budget must be at least 1 (leave it out for no token budget)".into(),
            ));
        }
        if let Some(bytes) = flags.tool_result_max_bytes {
            check_result_cap(bytes)
                .map_err(|problem| Error::Usage(format!("--tool-result-max-bytes {problem}")))?;
        }
        // `try_`: a finite number of seconds can still be too large for a `Duration`, where
        // `from_secs_f64` panics (found by fuzzing: `tool_timeout_secs = 1e30`).
        let tool_timeout = match file.tool_timeout_secs {
            Some(secs) => Some(
                Duration::try_from_secs_f64(secs)
                    .ok()
                    .filter(|_| secs > 0.0)
                    .ok_or_else(|| {
                        Error::Usage(format!(
                            "tool_timeout_secs must be a positive number of seconds, not {secs}"
                        ))
                    })?,
            ),
            None => None,
        };
        let repeated = flags.max_repeated_calls.or(file.max_repeated_calls);
        Ok(Self {
            max_iterations: flags
                .max_iterations
                .or(file.max_iterations)
                .unwrap_or(defaults.max_tool_iterations),
            token_budget: flags.token_budget.or(file.token_budget),
            max_cost_usd,
            parallel: flags.parallel().or(file.parallel).unwrap_or(true),
            tool_result_max_bytes: flags
                .tool_result_max_bytes
                .or(file.tool_result_max_bytes)
                .unwrap_or(defaults.tool_result_max_bytes),
            validation: match flags.validation.or(file.validation) {
                None | Some(Validation::Strict) => ValidationMode::Strict,
                Some(Validation::Lenient) => ValidationMode::Lenient,
                Some(Validation::None) => ValidationMode::None,
            },
            on_tool_error: match flags.on_tool_error.or(file.on_tool_error) {
                None | Some(OnToolError::Recover) => ToolErrorMode::Recover,
                Some(OnToolError::Abort) => ToolErrorMode::Abort,
            },
            max_repeated_calls: match repeated {
                Some(0) => None,
                Some(times) => Some(times),
                None => defaults.max_repeated_calls,
            },
            tool_timeout,
            require_approval: flags
                .require_approval
                .iter()
                .chain(file.require_approval.iter().flatten())
                .cloned()
                .collect(),
        })
    }

    /// The loop options these settings describe, in `auto` mode.
    pub(crate) fn options(&self, rate_card: RateCard) -> Options {
        let parallelism = if self.parallel {
            ToolParallelism::default()
        } else {
            ToolParallelism::Serial
        };
        let mut options = Options::auto()
            .with_max_tool_iterations(self.max_iterations)
            .with_tool_parallelism(parallelism)
            .with_tool_result_max_bytes(self.tool_result_max_bytes)
            .with_tool_arg_validation(self.validation)
            .with_tool_error_mode(self.on_tool_error)
            .with_max_repeated_calls(self.max_repeated_calls)
            .with_rate_card(rate_card)
            .with_tool_trace(true);
        options.token_budget = self.token_budget;
        options.max_cost_usd = self.max_cost_usd;
        options.tool_timeout = self.tool_timeout;
        options
    }
}

/// Whether `bytes` can cap a tool result (room for the truncation marker); the problem,
/// worded to follow the setting's name.
fn check_result_cap(bytes: usize) -> Result<(), String> {
    agent_tools::TruncationPolicy::new(bytes)
        .map(|_| ())
        .map_err(|_| {
            format!(
                "= {bytes} is invalid: it must be at least {} bytes (room for the truncation \
                 marker)",
                agent_tools::TruncationPolicy::MIN_MAX_BYTES
            )
        })
}

/// The built-in prices, then the file's (which win).
pub(crate) fn rate_card(file: &FileConfig) -> RateCard {
    let mut card = RateCard::list_prices();
    for (model, price) in &file.prices {
        card.insert(model.clone(), *price);
    }
    card
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let file = FileConfig::parse(
            "max_iterations = 4\ntoken_budget = 900\nparallel = false\nvalidation = \"lenient\"\n",
        )
        .unwrap();
        let flags = LoopArgs {
            max_iterations: Some(2),
            ..LoopArgs::default()
        };
        let settings = LoopSettings::resolve(&flags, &file).unwrap();
        assert_eq!(settings.max_iterations, 2);
        assert_eq!(settings.token_budget, Some(900));
        assert!(!settings.parallel);
        assert_eq!(settings.validation, ValidationMode::Lenient);
        assert_eq!(settings.tool_result_max_bytes, 65_536);
        assert_eq!(settings.max_repeated_calls, Some(3));

        let parallel = LoopArgs {
            parallel: true,
            ..LoopArgs::default()
        };
        assert!(LoopSettings::resolve(&parallel, &file).unwrap().parallel);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused_with_their_place() {
        let typo = FileConfig::parse("max_iteration = 3\n").unwrap_err();
        assert!(typo.contains("max_iteration"), "{typo}");
        let provider = FileConfig::parse("provider = \"openia\"\n").unwrap_err();
        assert!(provider.contains("openia"), "{provider}");
        let price = FileConfig::parse("[prices.m]\ninput_per_mtok = -1.0\noutput_per_mtok = 1.0\n")
            .unwrap_err();
        assert!(price.contains("prices.\"m\""), "{price}");
    }

    #[test]
    fn sizes_and_budgets_every_run_would_refuse_are_refused_when_read() {
        for (text, key) in [
            ("tool_result_max_bytes = 10\n", "tool_result_max_bytes = 10"),
            ("tool_result_max_bytes = 0\n", "tool_result_max_bytes = 0"),
            ("token_budget = 0\n", "token_budget = 0"),
            ("max_cost_usd = 0.0\n", "max_cost_usd = 0"),
        ] {
            let problem = FileConfig::parse(text).unwrap_err();
            assert!(problem.contains(key), "{text}: {problem}");
        }
        assert!(FileConfig::parse("tool_result_max_bytes = 64\n").is_ok());
        for (flags, flag) in [
            (
                LoopArgs {
                    tool_result_max_bytes: Some(63),
                    ..LoopArgs::default()
                },
                "--tool-result-max-bytes = 63",
            ),
            (
                LoopArgs {
                    token_budget: Some(0),
                    ..LoopArgs::default()
                },
                "--token-budget",
            ),
            (
                LoopArgs {
                    max_cost_usd: Some(0.0),
                    ..LoopArgs::default()
                },
                "--max-cost-usd",
            ),
        ] {
            let error = LoopSettings::resolve(&flags, &FileConfig::default()).unwrap_err();
            assert!(matches!(error, Error::Usage(_)), "{error}");
            assert!(error.to_string().contains(flag), "{error}");
        }
    }

    #[test]
    fn an_untrusted_file_tightens_the_users_budgets_but_never_loosens_them() {
        let user = FileConfig::parse(
            "max_iterations = 5\nmax_cost_usd = 0.5\nmax_repeated_calls = 3\ntoken_budget = 1000\n",
        )
        .unwrap();
        let project = FileConfig::parse(
            "max_iterations = 50\nmax_cost_usd = 0.1\nmax_repeated_calls = 0\nmax_output_tokens = 64\n",
        )
        .unwrap();
        let merged = project.over(user.clone()).within(&user);
        assert_eq!(merged.max_iterations, Some(5));
        assert_eq!(merged.max_cost_usd, Some(0.1));
        assert_eq!(merged.max_repeated_calls, Some(3));
        assert_eq!(merged.token_budget, Some(1000));
        assert_eq!(merged.max_output_tokens, Some(64));
    }

    #[test]
    fn zero_repeated_calls_turns_cycle_detection_off() {
        let flags = LoopArgs {
            max_repeated_calls: Some(0),
            ..LoopArgs::default()
        };
        let settings = LoopSettings::resolve(&flags, &FileConfig::default()).unwrap();
        assert_eq!(settings.max_repeated_calls, None);
    }

    #[test]
    fn file_prices_override_the_builtin_card() {
        let file = FileConfig::parse(
            "[prices.\"gpt-4.1-mini\"]\ninput_per_mtok = 9.0\noutput_per_mtok = 9.0\n",
        )
        .unwrap();
        let card = rate_card(&file);
        assert_eq!(card.price("gpt-4.1-mini").unwrap().input_per_mtok, 9.0);
        assert!(card.price("claude-sonnet-4-5").is_some());
    }

    /// `[retry]` parses, a nearer file's section wins whole, and a typo in it is refused.
    #[test]
    fn the_retry_section_parses_and_layers() {
        let user = FileConfig::parse("[retry]\nattempts = 5\nmax_backoff_ms = 30000\n").unwrap();
        let project = FileConfig::parse("[retry]\ninitial_backoff_ms = 200\n").unwrap();
        let retry = project.over(user).retry.unwrap();
        assert_eq!(retry.initial_backoff_ms, Some(200));
        assert_eq!(retry.attempts, None);
        let typo = FileConfig::parse("[retry]\nattempt = 5\n").unwrap_err();
        assert!(typo.contains("attempt"), "{typo}");
    }
}
