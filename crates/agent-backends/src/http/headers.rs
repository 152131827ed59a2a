//! The request headers of a backend, built once: the adapter's own (content type, the key's
//! `Authorization`) merged with the configured extra headers, kept for as long as the key and
//! the extra headers stay what they were. Each request clones the map (reference-counted
//! values) instead of formatting the `Bearer` value and inserting every header again.

use std::sync::Mutex;

use agent_types::BackendError;
use reqwest::header::HeaderMap;

/// The merged headers of the last request, with what they were built from.
#[derive(Default)]
pub(crate) struct HeaderCache(Mutex<Option<Cached>>);

struct Cached {
    api_key: Option<String>,
    extra: HeaderMap,
    merged: HeaderMap,
}

impl HeaderCache {
    /// The adapter's headers (`build`) with `extra` merged over them the way the driver
    /// applies them (a name in `extra` replaces the adapter's values), built on the first call
    /// and whenever `api_key` or `extra` changed since.
    pub(crate) fn get(
        &self,
        api_key: Option<&str>,
        extra: &HeaderMap,
        build: impl FnOnce() -> Result<HeaderMap, BackendError>,
    ) -> Result<HeaderMap, BackendError> {
        // A poisoned lock only means a panic elsewhere mid-build; the entry is rebuilt.
        let mut slot = match self.0.lock() {
            Ok(slot) => slot,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(cached) = slot.as_ref()
            && cached.api_key.as_deref() == api_key
            && cached.extra == *extra
        {
            return Ok(cached.merged.clone());
        }
        let mut merged = build()?;
        merge(&mut merged, extra);
        *slot = Some(Cached {
            api_key: api_key.map(str::to_owned),
            extra: extra.clone(),
            merged: merged.clone(),
        });
        Ok(merged)
    }
}

/// `extra` over `into`: each name in `extra` replaces all of that name's values (what
/// reqwest's `RequestBuilder::headers` does).
pub(crate) fn merge(into: &mut HeaderMap, extra: &HeaderMap) {
    for name in extra.keys() {
        into.remove(name);
        for value in extra.get_all(name) {
            into.append(name.clone(), value.clone());
        }
    }
}

impl Clone for HeaderCache {
    /// A clone starts empty: its builder methods may change the key or the headers.
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl std::fmt::Debug for HeaderCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The cached map holds the key; it never reaches a log.
        f.write_str("HeaderCache")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::cell::Cell;

    use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};

    use super::*;

    fn adapter(key: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(AUTHORIZATION, HeaderValue::from_str(key).unwrap());
        headers
    }

    #[test]
    fn the_headers_are_built_once_until_the_key_or_the_extra_headers_change() {
        let cache = HeaderCache::default();
        let builds = Cell::new(0);
        let get = |key: &str, extra: &HeaderMap| {
            cache
                .get(Some(key), extra, || {
                    builds.set(builds.get() + 1);
                    Ok(adapter(key))
                })
                .unwrap()
        };
        let none = HeaderMap::new();
        let first = get("a", &none);
        assert_eq!(get("a", &none), first);
        assert_eq!(get("a", &none), first);
        assert_eq!(builds.get(), 1, "built once for three requests");

        let other = get("b", &none);
        assert_eq!(builds.get(), 2, "a new key builds again");
        assert_eq!(other[AUTHORIZATION], "b");

        let mut extra = HeaderMap::new();
        extra.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        extra.append("x-two", HeaderValue::from_static("1"));
        extra.append("x-two", HeaderValue::from_static("2"));
        let merged = get("b", &extra);
        assert_eq!(builds.get(), 3, "new extra headers build again");
        assert_eq!(
            merged[CONTENT_TYPE], "text/plain",
            "an extra header replaces the adapter's"
        );
        assert_eq!(merged.get_all("x-two").iter().count(), 2);
        assert_eq!(merged[AUTHORIZATION], "b");
        assert_eq!(get("b", &extra), merged);
        assert_eq!(builds.get(), 3);
        // The cached map holds the key: it never reaches a log.
        assert_eq!(format!("{cache:?}"), "HeaderCache");
    }

    #[test]
    fn merging_matches_reqwest_applying_both_maps_in_turn() {
        let mut extra = HeaderMap::new();
        extra.insert(AUTHORIZATION, HeaderValue::from_static("override"));
        extra.append("x-a", HeaderValue::from_static("1"));
        extra.append("x-a", HeaderValue::from_static("2"));
        let mut merged = adapter("key");
        merge(&mut merged, &extra);
        let request = reqwest::Client::new()
            .post("http://127.0.0.1/")
            .headers(adapter("key"))
            .headers(extra.clone())
            .build()
            .unwrap();
        assert_eq!(*request.headers(), merged);
    }
}
