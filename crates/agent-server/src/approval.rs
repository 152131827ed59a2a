//! Human approval on the server (docs/approval.md, docs/server.md): a tenant's
//! `require_approval` tools wait for a decision in the next execute's `approvals`.

use std::collections::BTreeSet;
use std::sync::Arc;

use agent_loop::{Approval, Options};
use agent_tools::Registry;

use crate::config::TenantConfig;
use crate::error::Error;

/// Whether the run can stop for a person: a session execute can (the next execute brings the
/// decisions), a chat completion cannot (its session is thrown away).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resumable {
    /// `POST /v1/sessions/{id}/execute`.
    Yes,
    /// `/v1/chat/completions`: a call that needs approval is denied, never run unasked.
    No,
}

/// The tenant's `require_approval`, checked against the server's tools.
///
/// # Errors
///
/// A configuration error naming the tools the server does not offer.
pub(crate) fn tenant_tools(
    tenant: &TenantConfig,
    tools: &Registry,
) -> Result<Arc<BTreeSet<String>>, Error> {
    let unknown: Vec<&str> = tenant
        .require_approval
        .iter()
        .map(String::as_str)
        .filter(|name| !tools.contains(name))
        .collect();
    if !unknown.is_empty() {
        return Err(Error::Config(format!(
            "tenant `{}`: require_approval names tools the server does not offer: {}",
            tenant.name,
            unknown.join(", ")
        )));
    }
    Ok(Arc::new(tenant.require_approval.iter().cloned().collect()))
}

/// Puts the tenant's approval rule into a run's options: its named tools, and tools marked
/// for approval, wait for a person; where the run cannot wait, they are denied.
pub(crate) fn install(options: &mut Options, names: &Arc<BTreeSet<String>>, resumable: Resumable) {
    if names.is_empty() && resumable == Resumable::Yes {
        // Only tools marked for approval ask: the loop's default.
        return;
    }
    let names = Arc::clone(names);
    let policy = move |request: &agent_loop::ApprovalRequest<'_>| {
        let decision = if names.contains(request.tool.name()) {
            Approval::Require
        } else {
            request.default_decision()
        };
        match (decision, resumable) {
            (Approval::Require, Resumable::No) => Approval::Deny(
                "this tool needs a person's approval, which a chat completion cannot ask for; \
                 use the sessions API (POST /v1/sessions/{id}/execute)"
                    .to_owned(),
            ),
            (decision, _) => decision,
        }
    };
    *options = std::mem::take(options).with_approval_policy(policy);
}
