//! The query of `GET /v1/sessions`: page size, cursor and the server-side filters, checked
//! and bounded before anything reaches the store.

use agent_loop::SessionStatus;

use crate::error::ApiError;
use crate::sessions::percent_decode;
use crate::store::ListFilter;

/// Sessions per page unless `limit` says otherwise.
const LIST_DEFAULT: u32 = 50;
/// The most sessions one page holds.
const LIST_MAX: u32 = 200;
/// The longest `q` (bytes): a substring search on ids, which are short.
pub(crate) const Q_MAX: usize = 128;
/// The longest `model` (bytes).
const MODEL_MAX: usize = 256;

/// `limit` (1 to [`LIST_MAX`]), `after` and the filters (`status`, `model`, `q`) from a query
/// string; `now_ms` is the clock `status` is judged at. Each key at most once.
pub(crate) fn query(
    query: &str,
    now_ms: u64,
) -> Result<(u32, Option<String>, ListFilter), ApiError> {
    let mut limit = None;
    let mut after = None;
    let mut filter = ListFilter {
        now_ms,
        ..ListFilter::default()
    };
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(value).ok_or_else(|| {
            ApiError::bad_request(format!("`{key}` is not valid percent-encoding"))
        })?;
        let slot = match key {
            "limit" => {
                let parsed = value
                    .parse()
                    .ok()
                    .filter(|limit| (1..=LIST_MAX).contains(limit))
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "`limit` must be a number from 1 to {LIST_MAX}"
                        ))
                    })?;
                if limit.replace(parsed).is_some() {
                    return Err(twice(key));
                }
                continue;
            }
            "after" => &mut after,
            "status" => {
                known_status(&value)?;
                &mut filter.status
            }
            "model" => {
                bounded(key, &value, MODEL_MAX)?;
                &mut filter.model
            }
            "q" => {
                bounded(key, &value, Q_MAX)?;
                &mut filter.id_contains
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter `{other}`; use `limit`, `after`, `status`, \
                     `model` and `q`"
                )));
            }
        };
        if slot.replace(value).is_some() {
            return Err(twice(key));
        }
    }
    // An empty filter is no filter (a form's blank field).
    for slot in [
        &mut filter.status,
        &mut filter.model,
        &mut filter.id_contains,
    ] {
        if slot.as_deref() == Some("") {
            *slot = None;
        }
    }
    Ok((limit.unwrap_or(LIST_DEFAULT), after, filter))
}

fn twice(key: &str) -> ApiError {
    ApiError::bad_request(format!("`{key}` is given more than once"))
}

fn bounded(key: &str, value: &str, max: usize) -> Result<(), ApiError> {
    if value.len() > max {
        return Err(ApiError::bad_request(format!(
            "`{key}` is longer than {max} bytes"
        )));
    }
    Ok(())
}

/// A status the list can show: a session status, or empty (no filter).
fn known_status(value: &str) -> Result<(), ApiError> {
    if value.is_empty()
        || serde_json::from_value::<SessionStatus>(serde_json::Value::String(value.to_owned()))
            .is_ok()
    {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "`status` `{value}` is not a session status (idle, running, awaiting_tool_execution, \
         awaiting_approval, completed, aborted, error)"
    )))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn filters_are_decoded_bounded_and_checked() {
        let (limit, after, filter) =
            query("limit=5&after=a%20b&status=completed&model=m-1&q=ab", 7).unwrap();
        assert_eq!((limit, after.as_deref()), (5, Some("a b")));
        assert_eq!(filter.status.as_deref(), Some("completed"));
        assert_eq!(filter.model.as_deref(), Some("m-1"));
        assert_eq!(filter.id_contains.as_deref(), Some("ab"));
        assert_eq!(filter.now_ms, 7);
        let (limit, _, filter) = query("status=&q=", 0).unwrap();
        assert_eq!(limit, LIST_DEFAULT);
        assert_eq!(filter, ListFilter::default());
        for bad in [
            "status=done",
            "limit=0",
            "limit=201",
            "q=a&q=b",
            "limit=1&limit=2",
            "sort=id",
        ] {
            assert!(query(bad, 0).is_err(), "{bad}");
        }
        assert!(query(&format!("q={}", "x".repeat(Q_MAX)), 0).is_ok());
        assert!(query(&format!("q={}", "x".repeat(Q_MAX + 1)), 0).is_err());
    }
}
