//! Per-tenant limits: a token bucket for request rate and a gate for executes running at once.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// Requests per minute, with bursts up to the same number.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    per_minute: f64,
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    refilled: Instant,
}

impl RateLimiter {
    pub(crate) fn new(per_minute: u32) -> Self {
        let per_minute = f64::from(per_minute.max(1));
        Self {
            per_minute,
            bucket: Mutex::new(Bucket {
                tokens: per_minute,
                refilled: Instant::now(),
            }),
        }
    }

    /// Takes one request's token; `Err(seconds)` to wait when the bucket is empty.
    pub(crate) fn take(&self) -> Result<(), u64> {
        self.take_at(Instant::now())
    }

    fn take_at(&self, now: Instant) -> Result<(), u64> {
        let mut bucket = self.bucket.lock().unwrap_or_else(PoisonError::into_inner);
        let elapsed = now.saturating_duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.per_minute / 60.0).min(self.per_minute);
        bucket.refilled = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - bucket.tokens) * 60.0 / self.per_minute;
            // Whole seconds, rounded up, as Retry-After wants.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            Err(wait.ceil().max(1.0) as u64)
        }
    }
}

/// At most `limit` executes at once; a [`Permit`] is one of them.
#[derive(Debug)]
pub(crate) struct Gate {
    limit: u32,
    running: Arc<AtomicU32>,
}

/// One running execute; dropping it frees the place.
#[derive(Debug)]
pub(crate) struct Permit(Arc<AtomicU32>);

impl Gate {
    pub(crate) fn new(limit: u32) -> Self {
        Self {
            limit: limit.max(1),
            running: Arc::new(AtomicU32::new(0)),
        }
    }

    /// A place, or `None` when `limit` executes are running.
    pub(crate) fn enter(&self) -> Option<Permit> {
        self.running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |running| {
                (running < self.limit).then_some(running + 1)
            })
            .ok()
            .map(|_| Permit(Arc::clone(&self.running)))
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The largest caller-supplied output schema, in bytes of its JSON text.
pub(crate) const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// The deepest nesting of arrays and objects in a caller-supplied output schema.
pub(crate) const MAX_SCHEMA_DEPTH: usize = 32;

/// What is wrong with a caller's output schema before it is compiled, if anything: a tenant
/// must not make the server compile something huge or recurse deeply into it. The text
/// follows the field's name ("… is 70000 bytes; the limit is 65536 bytes").
pub(crate) fn schema_problem(schema: &serde_json::Value) -> Option<String> {
    if !schema.is_object() {
        return Some("must be a JSON Schema object".to_owned());
    }
    let size = schema.to_string().len();
    if size > MAX_SCHEMA_BYTES {
        return Some(format!(
            "is {size} bytes; the limit is {MAX_SCHEMA_BYTES} bytes"
        ));
    }
    if agent_tools::json_depth(schema) > MAX_SCHEMA_DEPTH {
        return Some(format!(
            "nests deeper than the limit of {MAX_SCHEMA_DEPTH} levels"
        ));
    }
    let compiled = agent_tools::ArgumentValidator::new(schema);
    compiled
        .err()
        .map(|error| format!("is not a usable JSON Schema: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn schemas_are_bounded_in_size_depth_and_must_compile() {
        let mut deep = serde_json::json!({"type": "string"});
        for _ in 0..MAX_SCHEMA_DEPTH {
            deep = serde_json::json!({"type": "array", "items": deep});
        }
        assert!(
            schema_problem(&deep)
                .unwrap()
                .contains("nests deeper than the limit of 32 levels")
        );
        let fine = serde_json::json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(schema_problem(&fine), None);
        let big =
            serde_json::json!({"type": "object", "description": "x".repeat(MAX_SCHEMA_BYTES)});
        assert!(
            schema_problem(&big)
                .unwrap()
                .contains("the limit is 65536 bytes")
        );
        assert!(schema_problem(&serde_json::json!(true)).is_some());
        assert!(
            schema_problem(&serde_json::json!({"type": "nope"}))
                .unwrap()
                .contains("not a usable JSON Schema")
        );
    }

    #[test]
    fn the_bucket_allows_a_burst_then_says_how_long_to_wait() {
        let limiter = RateLimiter::new(2);
        let start = Instant::now();
        assert_eq!(limiter.take_at(start), Ok(()));
        assert_eq!(limiter.take_at(start), Ok(()));
        assert_eq!(limiter.take_at(start), Err(30));
        // Half a minute later one token is back.
        assert_eq!(limiter.take_at(start + Duration::from_secs(30)), Ok(()));
    }

    #[test]
    fn the_gate_counts_permits_and_frees_them_on_drop() {
        let gate = Gate::new(2);
        let first = gate.enter();
        let second = gate.enter();
        assert!(first.is_some() && second.is_some());
        assert!(gate.enter().is_none());
        drop(first);
        assert!(gate.enter().is_some());
    }
}
