//! What the web-frontend endpoints share (`POST /v1/ui/chat`, the AI SDK's UI message
//! stream, and `POST /v1/ag-ui`, AG-UI): a session named by the client in the tenant's
//! namespace, created on first use and leased like an execute, run on its own task, its
//! events turned into the protocol's frames by an [`Encoder`](crate::encode::Encoder).
//!
//! Everything after the input mapping is the session execute's pipeline (execute.rs): the
//! same admission, lease, checks, options, approvals, spend meter, checkpoints, result gate
//! (no event shows a tool's result before the store holds it), lease heartbeat and save
//! before the last frame; a frontend supplies only its input mapping and its [`Encoder`](crate::encode::Encoder)
//! (through [`execute::Encoded`]), which writes each event into one reused buffer whose
//! filled part goes out without a copy.

use std::sync::Arc;

use agent_loop::SessionInput;
use axum::http::StatusCode;

use crate::error::ApiError;
use crate::execute::{self, Execute, Leased};
use crate::quota;
use crate::sessions::NewSession;
use crate::state::{AppState, Tenant};
use crate::store::{SessionRecord, StoreError};

/// The longest session id a frontend may name.
pub(crate) const MAX_ID_CHARS: usize = 128;

/// Checks a client-chosen session id: 1 to [`MAX_ID_CHARS`] of `A-Z a-z 0-9 _ - . :`.
///
/// # Errors
///
/// 400 naming `field` otherwise.
pub(crate) fn check_id(field: &str, id: &str) -> Result<(), ApiError> {
    let fits = !id.is_empty()
        && id.len() <= MAX_ID_CHARS
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'.' | b':'));
    if fits {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "`{field}` must be 1 to {MAX_ID_CHARS} characters of A-Z, a-z, 0-9, `_`, `-`, `.` \
             and `:`"
        )))
    }
}

/// The session a frontend names when it does not exist yet: `context` when the client sent
/// one, else the server's first model with every server tool the tenant may use.
fn new_session(state: &AppState, tenant: &Tenant, context: Option<NewSession>) -> NewSession {
    context.unwrap_or_else(|| NewSession {
        model: state
            .inner
            .config
            .models
            .first()
            .map(|model| model.name.clone())
            .unwrap_or_default(),
        system: None,
        tools: state
            .inner
            .tools
            .iter()
            .filter(|tool| {
                tool.tool()
                    .required_permissions()
                    .iter()
                    .all(|permission| tenant.caller.has_permission(permission))
            })
            .map(|tool| tool.name().to_owned())
            .collect(),
        remote_tools: Vec::new(),
        options: crate::store::SessionOptions::default(),
        messages: Vec::new(),
        settings: None,
        output_schema: None,
    })
}

/// Leases session `id` of `tenant` for one run (creating it from `context` on first use)
/// and prepares it through the execute pipeline ([`execute::prepare`]: crash recovery,
/// `input` asked for the run's input given the session as it is, expiry and every check).
///
/// # Errors
///
/// The execute's: 429 at the tenant's run limit, 409 while another run holds the session,
/// 400 for an input that does not fit the session, 402 over a spend cap, and `input`'s own.
pub(crate) async fn prepare<F>(
    state: &AppState,
    tenant: &Arc<Tenant>,
    id: &str,
    context: Option<NewSession>,
    input: F,
) -> Result<Execute, ApiError>
where
    F: FnOnce(&mut SessionRecord) -> Result<SessionInput, ApiError>,
{
    state.inner.spend.admit(&tenant.name).await?;
    let permit = execute::permit(tenant)?;
    let holder = execute::holder(state);
    let leased = Leased {
        state,
        tenant,
        id,
        holder: &holder,
    };
    let (mut record, stored) = match execute::lease(state, tenant, id, &holder).await {
        Ok(()) => match state.inner.store.get(&tenant.name, id).await? {
            Some(record) => (record, true),
            None => {
                return Err(leased
                    .give_back(ApiError::not_found(format!("no session {id}")))
                    .await);
            }
        },
        // Created on first use, once its input is known to be good: a refused request
        // leaves nothing behind.
        Err(error) if error.status == StatusCode::NOT_FOUND => {
            let new = new_session(state, tenant, context);
            (
                crate::sessions::record(state, tenant, new, Some(id))?,
                false,
            )
        }
        Err(error) => return Err(error),
    };
    let (input, model) = execute::prepare(&leased, &mut record, stored, input).await?;
    if !stored {
        match state
            .inner
            .store
            .insert(
                &record,
                Some((&holder, execute::lease_until(state))),
                quota::store_quota(&tenant.quotas),
            )
            .await
        {
            Ok(()) => {}
            // Created by a concurrent first request, which holds it.
            Err(StoreError::Exists(_)) => {
                return Err(ApiError::conflict(format!(
                    "session {id} is already executing"
                )));
            }
            Err(error) => return Err(quota::refused(state, error)),
        }
    }
    Ok(Execute {
        tenant: Arc::clone(tenant),
        record,
        input,
        model,
        holder,
        permit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_checked() {
        assert!(check_id("id", "chat_01-a.b:c").is_ok());
        for bad in ["", "a/b", "a b", "é", &"x".repeat(MAX_ID_CHARS + 1)] {
            assert!(check_id("id", bad).is_err(), "{bad:?}");
        }
    }
}
