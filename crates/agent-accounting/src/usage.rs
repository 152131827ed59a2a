//! Usage queries: one tenant's model calls in a time range, grouped.

use serde::Serialize;

use crate::Error;

/// How usage is grouped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// By model (the default).
    #[default]
    Model,
    /// By session.
    Session,
    /// By UTC day, `YYYY-MM-DD`.
    Day,
}

impl std::str::FromStr for GroupBy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "model" => Ok(Self::Model),
            "session" => Ok(Self::Session),
            "day" => Ok(Self::Day),
            other => Err(Error::Query(format!(
                "group_by must be model, session or day, not `{other}`"
            ))),
        }
    }
}

/// One tenant's usage between two instants, grouped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UsageQuery {
    /// The tenant whose rows are read (empty: rows stored without a tenant). Always one
    /// tenant: there is no query across tenants.
    pub tenant: String,
    /// From this instant (inclusive), microseconds since the Unix epoch.
    pub from_us: i64,
    /// To this instant (exclusive).
    pub to_us: i64,
    /// The grouping.
    pub group_by: GroupBy,
    /// The most groups returned (the largest by cost, then calls, first).
    pub max_groups: u32,
}

impl UsageQuery {
    /// The longest range a query may span: 366 days.
    pub const MAX_RANGE_US: i64 = 366 * 24 * 3600 * 1_000_000;
    /// The most groups a query may ask for.
    pub const MAX_GROUPS: u32 = 1000;

    /// `tenant`'s usage in `[from_us, to_us)`, grouped by `group_by`, at most 1,000 groups.
    pub fn new(tenant: impl Into<String>, from_us: i64, to_us: i64, group_by: GroupBy) -> Self {
        Self {
            tenant: tenant.into(),
            from_us,
            to_us,
            group_by,
            max_groups: Self::MAX_GROUPS,
        }
    }

    /// Checks the bounds: a non-empty range of at most [`Self::MAX_RANGE_US`], 1 to
    /// [`Self::MAX_GROUPS`] groups.
    ///
    /// # Errors
    ///
    /// [`Error::Query`] saying which bound.
    pub fn check(&self) -> Result<(), Error> {
        if self.to_us <= self.from_us {
            return Err(Error::Query("`to` must be after `from`".to_owned()));
        }
        if self.to_us.saturating_sub(self.from_us) > Self::MAX_RANGE_US {
            return Err(Error::Query(
                "the range may span at most 366 days".to_owned(),
            ));
        }
        if self.max_groups == 0 || self.max_groups > Self::MAX_GROUPS {
            return Err(Error::Query(format!(
                "the group limit must be 1 to {}",
                Self::MAX_GROUPS
            )));
        }
        Ok(())
    }
}

/// One group's totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct UsageGroup {
    /// The model, session or day.
    pub key: String,
    /// Model calls (failed ones included).
    pub model_calls: u64,
    /// Model calls that failed.
    pub failed_calls: u64,
    /// Tool calls the models asked for.
    pub tool_calls: u64,
    /// Input tokens (cached included).
    pub input_tokens: u64,
    /// Output tokens (reasoning included).
    pub output_tokens: u64,
    /// Input tokens read from the cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to a 5-minute cache entry.
    pub cache_write_5m_tokens: u64,
    /// Input tokens written to a 1-hour cache entry.
    pub cache_write_1h_tokens: u64,
    /// Reasoning tokens.
    pub reasoning_tokens: u64,
    /// Dollars, over the calls that were priced.
    pub cost_usd: f64,
}

/// The `SELECT … GROUP BY` both stores run; `key` is the grouping expression, `p` the
/// dialect's placeholders, `int`/`float` the casts its sums need (PostgreSQL sums BIGINT into
/// NUMERIC).
pub(crate) fn usage_sql(key: &str, p: [&str; 4], int: &str, float: &str) -> String {
    let sum = |column: &str| format!("COALESCE(SUM({column}), 0){int}");
    format!(
        "SELECT {key} AS k, COUNT(*){int}, \
         COALESCE(SUM(CASE WHEN error IS NULL THEN 0 ELSE 1 END), 0){int}, \
         {}, {}, {}, {}, {}, {}, {}, COALESCE(SUM(cost_usd), 0){float} \
         FROM model_calls WHERE tenant = {} AND at_us >= {} AND at_us < {} \
         GROUP BY k ORDER BY 11 DESC, 2 DESC, k LIMIT {}",
        sum("tool_calls"),
        sum("input_tokens"),
        sum("output_tokens"),
        sum("cache_read_tokens"),
        sum("cache_write_5m_tokens"),
        sum("cache_write_1h_tokens"),
        sum("reasoning_tokens"),
        p[0],
        p[1],
        p[2],
        p[3]
    )
}

pub(crate) fn to_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}
