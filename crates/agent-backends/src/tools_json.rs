//! A backend's tools array, serialized once per tool set: the loop sends the registry's
//! specs with every request (the same names, descriptions and shared schemas round after
//! round), so the adapter keeps the JSON of the last set and splices it into the body as raw
//! bytes while the set is the same, instead of walking every schema again.

use std::sync::{Arc, Mutex};

use agent_types::{BackendError, BackendErrorKind, ToolSpec};
use serde_json::value::RawValue;

/// The serialized tools array of the last tool set, with the set.
#[derive(Default)]
pub(crate) struct ToolsJson(Mutex<Option<Cached>>);

struct Cached {
    tools: Vec<ToolSpec>,
    json: Arc<RawValue>,
}

impl ToolsJson {
    /// The JSON of `tools` as `wire` maps them: cached when `tools` is the set of the last
    /// call (same names, descriptions, strictness, deferral, and the very same schemas: shared `Arc`s,
    /// compared by address, so a schema is never compared or walked), serialized otherwise.
    pub(crate) fn get<'t, W: serde::Serialize>(
        &self,
        tools: &'t [ToolSpec],
        wire: impl FnOnce(&'t [ToolSpec]) -> W,
    ) -> Result<Arc<RawValue>, BackendError> {
        let mut slot = match self.0.lock() {
            Ok(slot) => slot,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(cached) = slot.as_ref()
            && same_set(&cached.tools, tools)
        {
            return Ok(Arc::clone(&cached.json));
        }
        let json = serialize(&wire(tools))?;
        *slot = Some(Cached {
            tools: tools.to_vec(),
            json: Arc::clone(&json),
        });
        Ok(json)
    }
}

/// `wire` as raw JSON, with no cache (a request built without a backend, in tests).
pub(crate) fn serialize<W: serde::Serialize>(wire: &W) -> Result<Arc<RawValue>, BackendError> {
    serde_json::value::to_raw_value(wire)
        .map(Arc::from)
        .map_err(|error| {
            BackendError::new(
                BackendErrorKind::InvalidRequest,
                format!("the tools could not be serialized: {error}"),
            )
        })
}

fn same_set(cached: &[ToolSpec], tools: &[ToolSpec]) -> bool {
    cached.len() == tools.len()
        && cached.iter().zip(tools).all(|(a, b)| {
            Arc::ptr_eq(&a.parameters, &b.parameters)
                && a.strict == b.strict
                && a.defer_loading == b.defer_loading
                && a.name == b.name
                && a.description == b.description
        })
}

impl Clone for ToolsJson {
    /// A clone starts empty (it fills on its first request).
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl std::fmt::Debug for ToolsJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ToolsJson")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::cell::Cell;

    use serde_json::json;

    use super::*;

    #[test]
    fn a_tool_set_is_serialized_once_and_again_only_when_it_changes() {
        let cache = ToolsJson::default();
        let walks = Cell::new(0);
        let get = |tools: &[ToolSpec]| {
            cache
                .get(tools, |tools| {
                    walks.set(walks.get() + 1);
                    tools.iter().map(|tool| &tool.name).collect::<Vec<_>>()
                })
                .unwrap()
                .get()
                .to_owned()
        };
        let registry = vec![
            ToolSpec::new("a", "first", json!({"type": "object"})),
            ToolSpec::new("b", "second", json!({"type": "object"})),
        ];
        // Each request carries a clone of the registry's specs: the schemas are shared.
        assert_eq!(get(&registry.clone()), r#"["a","b"]"#);
        assert_eq!(get(&registry.clone()), r#"["a","b"]"#);
        assert_eq!(walks.get(), 1);

        // An equal schema in a new allocation is another tool set as far as the cache knows.
        let mut rebuilt = registry.clone();
        rebuilt[1] = ToolSpec::new("b", "second", json!({"type": "object"}));
        get(&rebuilt);
        assert_eq!(walks.get(), 2);

        let mut renamed = rebuilt.clone();
        renamed[0].description = "changed".into();
        get(&renamed);
        assert_eq!(walks.get(), 3);
        let mut strict = renamed.clone();
        strict[0].strict = true;
        get(&strict);
        assert_eq!(walks.get(), 4);
        assert_eq!(get(&strict[..1]), r#"["a"]"#);
        assert_eq!(walks.get(), 5);
        get(&strict[..1]);
        assert_eq!(walks.get(), 5);
    }
}
