//! API keys and failed authentication.
//!
//! Keys are held only as SHA-256 digests and a presented key is compared with every one of
//! them in constant time: neither a memory dump nor the response time tells anything about
//! a key. Failed attempts are counted per client address in a bounded map; an address over
//! its limit gets 429 with `Retry-After` until its window ends, and the failures are logged
//! (at most a few lines a second, however many addresses fail).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::AuthConfig;
use crate::state::Tenant;

/// The shortest API key the server accepts.
pub const MIN_KEY_CHARS: usize = 16;

/// Why a configured key is refused, or `None` when it is acceptable: the one rule for every
/// key agentry accepts (tenants' API keys, the metrics token, `agentry mcp serve`'s key).
pub fn key_problem(key: &str) -> Option<&'static str> {
    if key.trim() != key {
        Some("has leading or trailing whitespace (clients cannot send it in a header)")
    } else if key.chars().count() < MIN_KEY_CHARS {
        Some("is shorter than 16 characters")
    } else {
        None
    }
}

/// The tenants' keys, as digests.
#[derive(Default)]
pub(crate) struct Keys {
    entries: Vec<([u8; 32], Arc<Tenant>)>,
}

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

impl Keys {
    /// Adds `key` for `tenant`; `false` when the key is already someone's.
    pub(crate) fn insert(&mut self, key: &str, tenant: Arc<Tenant>) -> bool {
        let digest = digest(key);
        if self.entries.iter().any(|(known, _)| *known == digest) {
            return false;
        }
        self.entries.push((digest, tenant));
        true
    }

    /// The tenant whose key `key` is. Every digest is compared, in constant time, whatever
    /// matches: the time taken says nothing about which key (or how much of one) matched.
    pub(crate) fn find(&self, key: &str) -> Option<&Arc<Tenant>> {
        let presented = digest(key);
        let mut found = None;
        for (known, tenant) in &self.entries {
            if bool::from(known.ct_eq(&presented)) {
                found = Some(tenant);
            }
        }
        found
    }

    /// Every tenant that has a key (a tenant with several keys comes once per key).
    pub(crate) fn tenants(&self) -> impl Iterator<Item = &Arc<Tenant>> {
        self.entries.iter().map(|(_, tenant)| tenant)
    }
}

/// One secret token (the metrics token), as a digest.
pub(crate) struct Token([u8; 32]);

impl Token {
    pub(crate) fn new(token: &str) -> Self {
        Self(digest(token))
    }

    /// Whether `presented` is the token, compared in constant time.
    pub(crate) fn matches(&self, presented: &str) -> bool {
        bool::from(self.0.ct_eq(&digest(presented)))
    }
}

/// The key of an `Authorization` header value: the `Bearer` scheme in any case (RFC 7235
/// auth schemes are case-insensitive), one or more spaces, the key.
pub(crate) fn bearer(value: &str) -> Option<&str> {
    let (scheme, rest) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let key = rest.trim();
    (!key.is_empty()).then_some(key)
}

/// Failed authentications per client address.
pub(crate) struct Failures {
    max: u32,
    window: Duration,
    capacity: usize,
    by_address: Mutex<HashMap<IpAddr, Window>>,
    log: Mutex<LogGate>,
}

#[derive(Clone, Copy)]
struct Window {
    since: Instant,
    failures: u32,
}

/// What one more failure did.
pub(crate) struct Failure {
    /// Failures of this address in its window so far.
    pub(crate) count: u32,
    /// Whether the address is blocked from now on.
    pub(crate) blocked: bool,
    /// Whether this failure may be logged (see [`LogGate`]).
    pub(crate) log: bool,
    /// Failures that were not logged since the last logged one.
    pub(crate) unlogged: u64,
}

impl Failures {
    pub(crate) fn new(config: &AuthConfig) -> Self {
        Self {
            max: config.max_failures.max(1),
            window: Duration::from_secs(config.failure_window_secs.max(1)),
            capacity: config.tracked_addresses.max(1),
            by_address: Mutex::new(HashMap::new()),
            log: Mutex::new(LogGate::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Window>> {
        self.by_address
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// `Some(seconds)` until the address may try again, when it is over its limit.
    pub(crate) fn blocked(&self, address: IpAddr) -> Option<u64> {
        self.blocked_at(address, Instant::now())
    }

    fn blocked_at(&self, address: IpAddr, now: Instant) -> Option<u64> {
        let window = *self.lock().get(&address)?;
        let ends = window.since + self.window;
        (window.failures >= self.max && now < ends)
            .then(|| ends.saturating_duration_since(now).as_secs().max(1))
    }

    /// Counts a failure of `address`.
    pub(crate) fn fail(&self, address: IpAddr) -> Failure {
        self.fail_at(address, Instant::now())
    }

    fn fail_at(&self, address: IpAddr, now: Instant) -> Failure {
        let count = {
            let mut map = self.lock();
            if !map.contains_key(&address) && map.len() >= self.capacity {
                // Bounded under address churn: drop the windows that are over, and if every
                // slot is still live, the oldest one.
                let window = self.window;
                map.retain(|_, entry| now.saturating_duration_since(entry.since) < window);
                if map.len() >= self.capacity
                    && let Some(oldest) = map
                        .iter()
                        .min_by_key(|(_, entry)| entry.since)
                        .map(|(address, _)| *address)
                {
                    map.remove(&oldest);
                }
            }
            let entry = map.entry(address).or_insert(Window {
                since: now,
                failures: 0,
            });
            if now.saturating_duration_since(entry.since) >= self.window {
                *entry = Window {
                    since: now,
                    failures: 0,
                };
            }
            entry.failures = entry.failures.saturating_add(1);
            entry.failures
        };
        let (log, unlogged) = self
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit(now);
        Failure {
            count,
            blocked: count == self.max,
            log,
            unlogged,
        }
    }

    /// Addresses tracked now.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.lock().len()
    }
}

/// At most [`LogGate::PER_SECOND`] log lines a second; the rest are counted and the count
/// goes out with the next line that is logged.
#[derive(Default)]
struct LogGate {
    second: Option<Instant>,
    lines: u32,
    suppressed: u64,
}

impl LogGate {
    const PER_SECOND: u32 = 5;

    fn admit(&mut self, now: Instant) -> (bool, u64) {
        if self
            .second
            .is_none_or(|start| now.saturating_duration_since(start) >= Duration::from_secs(1))
        {
            self.second = Some(now);
            self.lines = 0;
        }
        if self.lines < Self::PER_SECOND {
            self.lines += 1;
            (true, std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            (false, 0)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn failures(max: u32, capacity: usize) -> Failures {
        Failures::new(&AuthConfig {
            max_failures: max,
            failure_window_secs: 60,
            tracked_addresses: capacity,
        })
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive_and_needs_a_key() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer abc"), Some("abc"));
        assert_eq!(bearer("BEARER   abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
        assert_eq!(bearer("Bearerabc"), None);
    }

    #[test]
    fn short_and_padded_keys_are_refused() {
        assert!(key_problem("short").is_some());
        assert!(key_problem(" padded-key-0123456789 ").is_some());
        assert!(key_problem("0123456789abcdef").is_none());
    }

    #[test]
    fn keys_are_found_by_digest_and_duplicates_refused() {
        let tenant = Arc::new(Tenant {
            name: "acme".into(),
            caller: Arc::new(agent_tools::Caller::new("acme")),
            rate: crate::limits::RateLimiter::new(1),
            gate: crate::limits::Gate::new(1),
            quotas: crate::config::Quotas::default(),
            require_approval: Arc::default(),
            guardrails: agent_loop::Guardrails::new(),
        });
        let mut keys = Keys::default();
        assert!(keys.insert("0123456789abcdef", Arc::clone(&tenant)));
        assert!(!keys.insert("0123456789abcdef", tenant));
        assert_eq!(keys.find("0123456789abcdef").unwrap().name, "acme");
        assert!(keys.find("0123456789abcdeF").is_none());
        assert!(keys.find("").is_none());
    }

    #[test]
    fn an_address_is_blocked_after_its_failures_until_its_window_ends() {
        let limiter = failures(3, 100);
        let address: IpAddr = [10, 0, 0, 1].into();
        let other: IpAddr = [10, 0, 0, 2].into();
        let now = Instant::now();
        assert!(!limiter.fail_at(address, now).blocked);
        assert!(!limiter.fail_at(address, now).blocked);
        assert_eq!(limiter.blocked_at(address, now), None);
        assert!(limiter.fail_at(address, now).blocked);
        assert_eq!(limiter.blocked_at(address, now), Some(60));
        assert_eq!(limiter.blocked_at(other, now), None);
        let later = now + Duration::from_secs(61);
        assert_eq!(limiter.blocked_at(address, later), None);
        assert_eq!(limiter.fail_at(address, later).count, 1);
    }

    #[test]
    fn memory_stays_bounded_under_address_churn() {
        let limiter = failures(3, 64);
        let now = Instant::now();
        for n in 0..10_000u32 {
            limiter.fail_at(IpAddr::from(n.to_be_bytes()), now);
        }
        assert_eq!(limiter.tracked(), 64);
    }

    #[test]
    fn logging_is_limited_and_counts_what_it_skipped() {
        let limiter = failures(1000, 100);
        let address: IpAddr = [10, 0, 0, 1].into();
        let now = Instant::now();
        let logged = (0..100)
            .filter(|_| limiter.fail_at(address, now).log)
            .count();
        assert_eq!(logged, 5);
        let next = limiter.fail_at(address, now + Duration::from_secs(1));
        assert!(next.log);
        assert_eq!(next.unlogged, 95);
    }
}
