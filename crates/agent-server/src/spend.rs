//! Per-tenant spend caps over time: dollars and tokens per UTC day and per UTC month, kept in a
//! ledger every instance sharing the store reads and writes.
//!
//! A tenant with a cap (`max_usd_per_day`, `max_tokens_per_day`, `max_usd_per_month`,
//! `max_tokens_per_month`, per tenant or in `[server.limits]` for all) is checked twice:
//!
//! - at admission of an execute or a chat completion: a tenant already at or over a cap gets
//!   429 with `Retry-After` (seconds until the period over its cap rolls over) before any work;
//! - before every model call, through the loop's `before_model_call` gate: a run that reaches
//!   a cap mid-way ends there (a `refused` error naming the cap and when it resets), before the
//!   call is sent.
//!
//! Every model call's usage (input + output tokens, as the run budgets count them) and cost is
//! added to the tenant's row for the current day and the current month, through the loop's
//! model-call sink, in one atomic upsert per call. Calls that run at the same moment (other
//! sessions, other instances) can each pass the check before any of them is recorded, so a cap
//! can be overshot by the calls in flight when it is reached; never by a call started after.
//!
//! The ledger is a table of its own, `tenant_spend(tenant, period, tokens, usd)`, in the same
//! database as the sessions ([`SqliteLedger`] on a second connection to the SQLite file,
//! [`PostgresLedger`] on its own PostgreSQL connection); it is only opened when some tenant has
//! a cap. When the ledger cannot be read the call is refused: a cap that cannot be checked is
//! not waved through.

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use agent_loop::{Hooks, ModelCallGate, ModelCallRecord, Options};
use agent_types::{AgentError, ErrorKind};
use serde::Serialize;
use tokio::task::JoinHandle;

use crate::config::{ServerConfig, StoreConfig};
use crate::error::{ApiError, Error};
use crate::store::{StoreError, StoreFuture};

#[cfg(feature = "postgres")]
pub use postgres::PostgresLedger;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteLedger;

/// What the server reads the time from: UTC wall-clock time (tests pass their own).
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// What a tenant spent in one period.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spent {
    /// Input + output tokens of every recorded model call.
    pub tokens: u64,
    /// US dollars of every recorded model call the rate card could price.
    pub usd: f64,
}

/// The spend ledger: per tenant and period, the tokens and dollars spent.
pub trait SpendLedger: Send + Sync + 'static {
    /// Adds `spent` to the tenant's row of every period in `periods`, creating the rows, in
    /// one atomic write (two instances adding at once both count).
    fn add<'a>(
        &'a self,
        tenant: &'a str,
        periods: &'a [String],
        spent: Spent,
    ) -> StoreFuture<'a, ()>;

    /// The tenant's totals for each of `periods`, in the same order (zero for a period with
    /// no row).
    fn totals<'a>(&'a self, tenant: &'a str, periods: &'a [String]) -> StoreFuture<'a, Vec<Spent>>;
}

/// One tenant's caps.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Caps {
    pub(crate) usd_per_day: Option<f64>,
    pub(crate) tokens_per_day: Option<u64>,
    pub(crate) usd_per_month: Option<f64>,
    pub(crate) tokens_per_month: Option<u64>,
}

impl Caps {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The UTC day and month an instant falls in, and when each ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Periods {
    /// `2026-11-24`.
    pub(crate) day: String,
    /// `2026-11`.
    pub(crate) month: String,
    /// Unix seconds of the next UTC midnight.
    pub(crate) day_ends: u64,
    /// Unix seconds of the first midnight of the next UTC month.
    pub(crate) month_ends: u64,
}

impl Periods {
    /// The periods `unix_secs` falls in.
    pub(crate) fn at(unix_secs: u64) -> Self {
        let days = i64::try_from(unix_secs / 86_400).unwrap_or(i64::MAX / 2);
        let (year, month, day) = civil_from_days(days);
        let (next_year, next_month) = if month == 12 {
            (year + 1, 1)
        } else {
            (year, month + 1)
        };
        let month_ends_days = days_from_civil(next_year, next_month, 1);
        Self {
            day: format!("{year:04}-{month:02}-{day:02}"),
            month: format!("{year:04}-{month:02}"),
            day_ends: (unix_secs / 86_400 + 1) * 86_400,
            month_ends: u64::try_from(month_ends_days)
                .unwrap_or(0)
                .saturating_mul(86_400),
        }
    }

    /// The ledger keys: `day:2026-11-24` and `month:2026-11`.
    fn keys(&self) -> [String; 2] {
        [format!("day:{}", self.day), format!("month:{}", self.month)]
    }
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    (year, month as u32, day as u32)
}

/// (year, month, day) → days since 1970-01-01.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let month = i64::from(month);
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Whether a model call may go ahead: `spent` so far plus the call's `estimate` (its estimated
/// input tokens for the token caps, 0 for the dollar caps and at admission), against `cap`. A
/// call is refused once the total would reach the cap.
fn check(spent: f64, estimate: f64, cap: f64) -> bool {
    spent + estimate < cap
}

/// Which cap a tenant reached, and when it resets.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapHit {
    /// The cap's configuration key: `max_usd_per_day`, `max_tokens_per_month`, …
    pub cap: &'static str,
    /// The cap.
    pub limit: f64,
    /// What the tenant spent in the period.
    pub spent: f64,
    /// The period: `2026-11-24` or `2026-11` (UTC).
    pub period: String,
    /// When the period ends, in Unix seconds.
    pub resets_at: u64,
    /// Seconds from now until then (what `Retry-After` says).
    pub retry_after_secs: u64,
}

impl CapHit {
    fn message(&self, tenant: &str) -> String {
        let (spent, limit) = if self.cap.contains("usd") {
            (format!("${:.6}", self.spent), format!("${:.6}", self.limit))
        } else {
            (
                format!("{} tokens", self.spent),
                format!("{} tokens", self.limit),
            )
        };
        format!(
            "tenant `{tenant}` reached its spend cap {} ({spent} of {limit} in {} UTC); it \
             resets in {} s",
            self.cap, self.period, self.retry_after_secs
        )
    }
}

/// The spend caps of every tenant and the ledger they are kept in.
pub(crate) struct Spend {
    caps: HashMap<String, Caps>,
    ledger: Option<Arc<dyn SpendLedger>>,
    clock: Clock,
}

impl Spend {
    /// The caps of `config`'s tenants; the ledger is opened (in the store's database) only
    /// when one of them has a cap, unless `ledger` is given.
    pub(crate) async fn open(
        config: &ServerConfig,
        ledger: Option<Arc<dyn SpendLedger>>,
        clock: Option<Clock>,
    ) -> Result<Self, Error> {
        let limits = &config.limits;
        let caps: HashMap<String, Caps> = config
            .tenants
            .iter()
            .map(|tenant| {
                let caps = Caps {
                    usd_per_day: tenant.max_usd_per_day.or(limits.max_usd_per_day),
                    tokens_per_day: tenant.max_tokens_per_day.or(limits.max_tokens_per_day),
                    usd_per_month: tenant.max_usd_per_month.or(limits.max_usd_per_month),
                    tokens_per_month: tenant.max_tokens_per_month.or(limits.max_tokens_per_month),
                };
                (tenant.name.clone(), caps)
            })
            .filter(|(_, caps)| !caps.is_empty())
            .collect();
        let ledger = match ledger {
            Some(ledger) => Some(ledger),
            None if caps.is_empty() => None,
            None => Some(open_ledger(&config.store).await?),
        };
        Ok(Self {
            caps,
            ledger,
            clock: clock.unwrap_or_else(|| Arc::new(SystemTime::now)),
        })
    }

    fn now_secs(&self) -> u64 {
        (self.clock)()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs())
    }

    /// The first cap `tenant` has reached (or would cross with a call of `estimate_tokens`),
    /// if any.
    async fn over(
        &self,
        tenant: &str,
        caps: &Caps,
        estimate_tokens: u64,
    ) -> Result<Option<CapHit>, StoreError> {
        let Some(ledger) = &self.ledger else {
            return Ok(None);
        };
        let now = self.now_secs();
        let periods = Periods::at(now);
        let keys = periods.keys();
        let totals = ledger.totals(tenant, &keys).await?;
        let day = totals.first().copied().unwrap_or_default();
        let month = totals.get(1).copied().unwrap_or_default();
        #[allow(clippy::cast_precision_loss)]
        let (tokens, estimate) = (|spent: u64| spent as f64, estimate_tokens as f64);
        #[allow(clippy::cast_precision_loss)]
        let candidates = [
            (
                "max_usd_per_month",
                caps.usd_per_month,
                month.usd,
                0.0,
                &periods.month,
                periods.month_ends,
            ),
            (
                "max_tokens_per_month",
                caps.tokens_per_month.map(|cap| cap as f64),
                tokens(month.tokens),
                estimate,
                &periods.month,
                periods.month_ends,
            ),
            (
                "max_usd_per_day",
                caps.usd_per_day,
                day.usd,
                0.0,
                &periods.day,
                periods.day_ends,
            ),
            (
                "max_tokens_per_day",
                caps.tokens_per_day.map(|cap| cap as f64),
                tokens(day.tokens),
                estimate,
                &periods.day,
                periods.day_ends,
            ),
        ];
        // The month caps first: a request can only succeed once every cap it is over has
        // rolled over, and the month's ends last.
        Ok(candidates
            .into_iter()
            .find_map(|(cap, limit, spent, estimate, period, ends)| {
                let limit = limit?;
                (!check(spent, estimate, limit)).then(|| CapHit {
                    cap,
                    limit,
                    spent,
                    period: period.clone(),
                    resets_at: ends,
                    retry_after_secs: ends.saturating_sub(now).max(1),
                })
            }))
    }

    /// Admission: 429 with `Retry-After` for a tenant at or over one of its caps.
    ///
    /// # Errors
    ///
    /// 429 naming the cap; 500 when the ledger cannot be read.
    pub(crate) async fn admit(&self, tenant: &str) -> Result<(), ApiError> {
        let Some(caps) = self.caps.get(tenant) else {
            return Ok(());
        };
        match self.over(tenant, caps, 0).await {
            Ok(None) => Ok(()),
            Ok(Some(hit)) => Err(hit.api_error(tenant)),
            Err(error) => {
                tracing::error!(tenant, %error, "the spend ledger could not be read");
                Err(ApiError::internal(
                    "the spend ledger could not be read; the request was not run",
                ))
            }
        }
    }

    /// The meter of one run of `tenant`, or `None` when the tenant has no cap.
    pub(crate) fn meter(self: &Arc<Self>, tenant: &str) -> Option<Meter> {
        let caps = *self.caps.get(tenant)?;
        Some(Meter(Arc::new(MeterInner {
            spend: Arc::clone(self),
            tenant: tenant.to_owned(),
            caps,
            writes: Mutex::new(Vec::new()),
            hit: Mutex::new(None),
        })))
    }
}

impl CapHit {
    /// The 429 for a tenant over this cap.
    pub(crate) fn api_error(&self, tenant: &str) -> ApiError {
        ApiError {
            retry_after: Some(self.retry_after_secs),
            ..ApiError::new(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                "spend_cap_error",
                self.message(tenant),
            )
        }
    }
}

async fn open_ledger(store: &StoreConfig) -> Result<Arc<dyn SpendLedger>, Error> {
    match store {
        #[cfg(feature = "sqlite")]
        StoreConfig::Sqlite { path } => {
            if let Some(parent) = path.parent()
                && !parent.as_os_str().is_empty()
            {
                std::fs::create_dir_all(parent)?;
            }
            Ok(Arc::new(SqliteLedger::open(path.clone()).await?))
        }
        #[cfg(feature = "postgres")]
        StoreConfig::Postgres { url, url_env } => {
            let url = crate::config::postgres_url(url.as_ref(), url_env.as_ref())?;
            Ok(Arc::new(PostgresLedger::connect(&url).await?))
        }
        #[allow(unreachable_patterns)]
        other => Err(Error::Config(format!(
            "this build has no `{}` store for the spend ledger; enable its feature",
            other.kind()
        ))),
    }
}

/// One run's view of its tenant's caps: the gate before each model call, the sink after it.
#[derive(Clone)]
pub(crate) struct Meter(Arc<MeterInner>);

struct MeterInner {
    spend: Arc<Spend>,
    tenant: String,
    caps: Caps,
    /// Ledger writes started by the sink and not awaited yet.
    writes: Mutex<Vec<JoinHandle<()>>>,
    /// The cap that refused a model call of this run.
    hit: Mutex<Option<CapHit>>,
}

impl Meter {
    /// Records every model call of the run and checks the caps before each one.
    pub(crate) fn install(&self, options: &mut Options) {
        let sink = self.clone();
        options.on_model_call = Some(Arc::new(move |record: &ModelCallRecord| {
            sink.record(record)
        }));
        let gate = self.clone();
        options.hooks = Hooks::new().before_model_call(move |call| {
            let gate = gate.clone();
            async move { gate.check(&call).await }
        });
    }

    /// The gate: waits for this run's earlier calls to be recorded, then refuses the call when
    /// the tenant is at or over a cap.
    ///
    /// # Errors
    ///
    /// The refusal's reason (the cap, what was spent, when it resets).
    pub(crate) async fn check(&self, call: &ModelCallGate) -> Result<(), String> {
        self.flush().await;
        let inner = &self.0;
        // The call's own input (the loop's pre-flight estimate) counts against the token caps,
        // so a call that would cross one is refused before it is sent.
        let estimate = call.estimated_input_tokens;
        match inner.spend.over(&inner.tenant, &inner.caps, estimate).await {
            Ok(None) => Ok(()),
            Ok(Some(hit)) => {
                let message = hit.message(&inner.tenant);
                *inner.hit.lock().unwrap_or_else(PoisonError::into_inner) = Some(hit);
                Err(message)
            }
            Err(error) => {
                tracing::error!(tenant = inner.tenant, %error, "the spend ledger could not be read");
                Err(
                    "the spend ledger could not be read, so the tenant's spend caps cannot be \
                     checked; the model call was not made"
                        .to_owned(),
                )
            }
        }
    }

    /// The sink: adds the call's tokens and cost to today's and this month's rows.
    fn record(&self, record: &ModelCallRecord) {
        let inner = &self.0;
        let spent = Spent {
            tokens: record
                .usage
                .and_then(|usage| usage.total_tokens())
                .unwrap_or(0),
            usd: record.cost_usd.unwrap_or(0.0),
        };
        if spent == Spent::default() {
            return;
        }
        let Some(ledger) = inner.spend.ledger.clone() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!(
                tenant = inner.tenant,
                "a model call's spend was not recorded: no runtime"
            );
            return;
        };
        let tenant = inner.tenant.clone();
        let keys = Periods::at(inner.spend.now_secs()).keys();
        let write = runtime.spawn(async move {
            if let Err(error) = ledger.add(&tenant, &keys, spent).await {
                tracing::error!(tenant, %error, tokens = spent.tokens, usd = spent.usd,
                    "a model call's spend could not be recorded");
            }
        });
        inner
            .writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(write);
    }

    /// Waits until every call recorded so far is in the ledger.
    pub(crate) async fn flush(&self) {
        let writes =
            std::mem::take(&mut *self.0.writes.lock().unwrap_or_else(PoisonError::into_inner));
        for write in writes {
            let _ = write.await;
        }
    }

    /// The cap that ended the run, when `outcome` is the refusal this meter made.
    pub(crate) fn hit_for<T>(&self, outcome: &Result<T, AgentError>) -> Option<CapHit> {
        match outcome {
            Err(error) if matches!(error.kind, ErrorKind::Refused) => self
                .0
                .hit
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            _ => None,
        }
    }

    /// The tenant's name.
    pub(crate) fn tenant(&self) -> &str {
        &self.0.tenant
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_utc_days_and_months_with_their_ends() {
        // 2026-11-24T07:00:00Z
        let at = Periods::at(1_795_503_600);
        assert_eq!(at.day, "2026-11-24");
        assert_eq!(at.month, "2026-11");
        assert_eq!(at.day_ends, 1_795_564_800); // 2026-11-25T00:00:00Z
        assert_eq!(at.month_ends, 1_796_083_200); // 2026-12-01T00:00:00Z
        // The last second of a year rolls into the next year's January.
        let eve = Periods::at(1_798_761_599); // 2026-12-31T23:59:59Z
        assert_eq!(
            (eve.day.as_str(), eve.month.as_str()),
            ("2026-12-31", "2026-12")
        );
        assert_eq!(eve.day_ends, 1_798_761_600);
        assert_eq!(eve.month_ends, 1_798_761_600);
        // A leap day.
        let leap = Periods::at(1_709_164_800); // 2024-02-29T00:00:00Z
        assert_eq!(leap.day, "2024-02-29");
        assert_eq!(leap.month_ends, 1_709_251_200); // 2024-03-01
    }

    #[test]
    fn every_day_from_1970_to_2200_round_trips() {
        for days in 0..84_000 {
            let (year, month, day) = civil_from_days(days);
            assert_eq!(days_from_civil(year, month, day), days);
            assert!((1..=12).contains(&month) && (1..=31).contains(&day));
        }
    }

    #[test]
    fn a_call_is_refused_once_the_spend_reaches_the_cap() {
        assert!(check(0.0, 0.0, 1.0));
        assert!(check(0.99, 0.0, 1.0));
        assert!(!check(1.0, 0.0, 1.0));
        assert!(!check(4_916_300.0, 0.0, 100_000.0));
        // With an estimate, a call that would cross the cap is refused too.
        assert!(!check(0.5, 0.6, 1.0));
    }
}
