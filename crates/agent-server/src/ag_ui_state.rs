//! AG-UI's shared state (`RunAgentInput.state`) on `/v1/ag-ui`.
//!
//! The frontend's state is given to the model with the user turn, after the `context`
//! entries, as compact JSON under a heading, so it is in the session's history (stored with
//! the session, like every turn) and the model reads it as the frontend saw it when the turn
//! was sent. The run's stream echoes it as `STATE_SNAPSHOT` right after `RUN_STARTED`, so a
//! client's `agent.state` is what the run was given. An empty state (`null`, `{}`) is neither
//! sent to the model nor echoed. The agent does not change the state: no `STATE_DELTA`.

use serde_json::Value;

use crate::error::ApiError;

/// The largest state a run takes, as compact JSON: 64 KiB (it rides in every user turn).
pub(crate) const MAX_STATE_BYTES: usize = 64 << 10;

/// The heading the state is given to the model under.
const HEADING: &str = "\n\nThe frontend's shared state (JSON):\n";

/// The request's state as compact JSON text, `None` when there is none (absent, `null`,
/// `{}`).
///
/// # Errors
///
/// 400 `state_too_large` past [`MAX_STATE_BYTES`].
pub(crate) fn shared(state: Option<&Value>) -> Result<Option<String>, ApiError> {
    let state = match state {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(map)) if map.is_empty() => return Ok(None),
        Some(state) => state,
    };
    let text = state.to_string();
    if text.len() > MAX_STATE_BYTES {
        return Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "state_too_large",
            format!(
                "`state` is {} bytes as JSON; at most {MAX_STATE_BYTES}",
                text.len()
            ),
        ));
    }
    Ok(Some(text))
}

/// Appends the state (compact JSON text) to the user turn's `text`.
pub(crate) fn describe(shared: &str, text: &mut String) {
    text.push_str(HEADING);
    text.push_str(shared);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn empty_state_is_none_and_large_state_is_refused() {
        assert_eq!(shared(None).unwrap(), None);
        assert_eq!(shared(Some(&json!(null))).unwrap(), None);
        assert_eq!(shared(Some(&json!({}))).unwrap(), None);
        assert_eq!(
            shared(Some(&json!({"cart": [1, 2]}))).unwrap().as_deref(),
            Some(r#"{"cart":[1,2]}"#)
        );
        let big = json!({"blob": "x".repeat(MAX_STATE_BYTES)});
        assert_eq!(shared(Some(&big)).unwrap_err().kind, "state_too_large");
    }
}
