//! `ModelRequest::extras` for adapters that merge one nested extra object into their own
//! (Gemini's `generationConfig`, Ollama's `options`) and refuse extras that collide with a
//! field they send.

use agent_types::{BackendError, BackendErrorKind};
use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::{Map, Value};

/// The extras for the top level of the body: every key but `nested`, which the adapter merges
/// into its own object of that name.
#[derive(Debug)]
pub(crate) struct TopLevelExtras<'a> {
    pub(crate) extras: &'a Map<String, Value>,
    pub(crate) nested: &'static str,
}

impl Serialize for TopLevelExtras<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.extras {
            if key != self.nested {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

/// The extra object under `key`, if the caller set one.
pub(crate) fn nested<'a>(
    extras: &'a Map<String, Value>,
    key: &str,
) -> Result<Option<&'a Map<String, Value>>, BackendError> {
    match extras.get(key) {
        None => Ok(None),
        Some(Value::Object(extra)) => Ok(Some(extra)),
        Some(_) => Err(BackendError::new(
            BackendErrorKind::InvalidRequest,
            format!(
                "the extra `{key}` must be a JSON object (it is merged into the one the adapter builds)"
            ),
        )),
    }
}

/// Refuses an extra that names a field the adapter sends (`sent`), so no key appears twice;
/// `path` prefixes the key in the message (`generationConfig.` for a nested one).
pub(crate) fn refuse_collisions<'k>(
    extras: &Map<String, Value>,
    sent: impl IntoIterator<Item = &'k str>,
    provider: &str,
    path: &str,
) -> Result<(), BackendError> {
    match sent.into_iter().find(|key| extras.contains_key(*key)) {
        None => Ok(()),
        Some(key) => Err(BackendError::new(
            BackendErrorKind::InvalidRequest,
            format!(
                "the extra `{path}{key}` collides with a field the {provider} adapter sends; \
                 use the typed request field or setting instead"
            ),
        )),
    }
}
