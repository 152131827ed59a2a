//! Counters and gauges, rendered in the Prometheus text format at `GET /metrics`.
//!
//! A small registry of our own: a handful of series keyed by name and labels, updated a few
//! times per request, so one mutex over a map is plenty and needs no metrics framework.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::sync::{Mutex, OnceLock, PoisonError};

/// A series: metric name plus label pairs (in a fixed order).
type Key = (&'static str, Vec<(&'static str, String)>);

/// What each metric means and its type, for `# HELP` / `# TYPE`.
const FAMILIES: &[(&str, &str, &str)] = &[
    (
        "agentry_http_requests_total",
        "counter",
        "HTTP requests by tenant, route and status.",
    ),
    (
        "agentry_active_streams",
        "gauge",
        "SSE streams open now, by tenant.",
    ),
    (
        "agentry_runs_total",
        "counter",
        "Loop runs finished, by tenant and final status.",
    ),
    (
        "agentry_model_calls_total",
        "counter",
        "Model calls, by tenant and model.",
    ),
    (
        "agentry_tool_calls_total",
        "counter",
        "Tool calls, by tenant, tool and outcome.",
    ),
    (
        "agentry_tokens_total",
        "counter",
        "Tokens, by tenant and kind (input, output, cache_read, cache_write).",
    ),
    (
        "agentry_cost_usd_total",
        "counter",
        "US dollars spent, by tenant.",
    ),
    (
        "agentry_budget_trips_total",
        "counter",
        "Runs ended by a budget, by tenant and budget.",
    ),
    (
        "agentry_quota_refusals_total",
        "counter",
        "Requests refused by a storage quota, by tenant and quota.",
    ),
    (
        "agentry_open_connections",
        "gauge",
        "HTTP connections open now.",
    ),
    (
        "agentry_connections_refused_total",
        "counter",
        "Connections refused with 503, by limit (server: max_connections, address: max_connections_per_address).",
    ),
    (
        "agentry_auth_failures_total",
        "counter",
        "Requests refused for a missing or unknown key.",
    ),
    (
        "agentry_checkpoints_total",
        "counter",
        "Completed turns saved mid-run, by tenant and outcome (ok, failed).",
    ),
    (
        "agentry_recovered_runs_total",
        "counter",
        "Runs cut off by a crash and recovered from their last checkpoint, by tenant.",
    ),
    (
        "agentry_results_held_total",
        "counter",
        "Events showing a tool result held until the store held the result, by tenant.",
    ),
    (
        "agentry_result_hold_seconds_total",
        "counter",
        "Seconds those events waited for their checkpoint, summed, by tenant.",
    ),
];

/// The `tool` label of a name the registry does not know.
pub(crate) const UNKNOWN_TOOL: &str = "unknown";

/// The server's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    series: Mutex<BTreeMap<Key, f64>>,
    /// The tools the registry knows: the only values the `tool` label takes besides
    /// `unknown`, so invented names cannot create series without bound.
    tools: OnceLock<BTreeSet<String>>,
}

impl Metrics {
    /// Fixes the tool names that get a series of their own.
    pub(crate) fn with_tools(tools: impl IntoIterator<Item = String>) -> Self {
        let metrics = Self::default();
        let _ = metrics.tools.set(tools.into_iter().collect());
        metrics
    }

    /// `name` when the registry knows it, else `unknown`.
    pub(crate) fn tool_label<'a>(&self, name: &'a str) -> &'a str {
        if self.tools.get().is_some_and(|tools| tools.contains(name)) {
            name
        } else {
            UNKNOWN_TOOL
        }
    }

    /// Adds `value` to a counter (or moves a gauge by it).
    pub(crate) fn add(&self, name: &'static str, labels: &[(&'static str, &str)], value: f64) {
        let key = (
            name,
            labels
                .iter()
                .map(|&(label, value)| (label, value.to_owned()))
                .collect(),
        );
        *self
            .series
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key)
            .or_insert(0.0) += value;
    }

    /// Adds one.
    pub(crate) fn inc(&self, name: &'static str, labels: &[(&'static str, &str)]) {
        self.add(name, labels, 1.0);
    }

    /// The current value of a series (0 when never touched).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        series
            .iter()
            .find(|((series_name, series_labels), _)| {
                *series_name == name
                    && series_labels.len() == labels.len()
                    && series_labels
                        .iter()
                        .zip(labels)
                        .all(|((a, b), (c, d))| a == c && b == d)
            })
            .map_or(0.0, |(_, value)| *value)
    }

    /// Every series in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        let mut text = String::new();
        for (family, kind, help) in FAMILIES {
            let _ = writeln!(text, "# HELP {family} {help}");
            let _ = writeln!(text, "# TYPE {family} {kind}");
            for ((name, labels), value) in series.iter() {
                if name != family {
                    continue;
                }
                text.push_str(name);
                if !labels.is_empty() {
                    text.push('{');
                    for (index, (label, value)) in labels.iter().enumerate() {
                        if index > 0 {
                            text.push(',');
                        }
                        let _ = write!(text, "{label}=\"{}\"", escape(value));
                    }
                    text.push('}');
                }
                let _ = writeln!(text, " {value}");
            }
        }
        text
    }
}

/// A label value with `\`, `"` and newlines escaped, as the format requires.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_render_with_help_type_and_escaped_labels() {
        let metrics = Metrics::default();
        metrics.inc(
            "agentry_model_calls_total",
            &[("tenant", "acme"), ("model", "demo")],
        );
        metrics.inc(
            "agentry_model_calls_total",
            &[("tenant", "acme"), ("model", "demo")],
        );
        metrics.add("agentry_cost_usd_total", &[("tenant", "a\"b")], 0.25);
        let text = metrics.render();
        assert!(text.contains("# TYPE agentry_model_calls_total counter\n"));
        assert!(text.contains("agentry_model_calls_total{tenant=\"acme\",model=\"demo\"} 2\n"));
        assert!(text.contains("agentry_cost_usd_total{tenant=\"a\\\"b\"} 0.25\n"));
        assert_eq!(
            metrics.value(
                "agentry_model_calls_total",
                &[("tenant", "acme"), ("model", "demo")]
            ),
            2.0
        );
    }

    #[test]
    fn tool_names_outside_the_registry_share_one_label() {
        let metrics = Metrics::with_tools(["calculator".to_owned()]);
        assert_eq!(metrics.tool_label("calculator"), "calculator");
        assert_eq!(metrics.tool_label("made_up_1"), UNKNOWN_TOOL);
        assert_eq!(Metrics::default().tool_label("calculator"), UNKNOWN_TOOL);
    }
}
