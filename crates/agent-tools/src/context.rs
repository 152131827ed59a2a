//! What a handler learns about the call it serves: [`ToolContext`] and the [`Caller`].

use std::collections::BTreeSet;
use std::sync::Arc;

use agent_types::ToolCallId;
use tokio_util::sync::CancellationToken;

/// Who is calling: a principal, the tenant it belongs to, and the permissions it holds.
///
/// A server maps its credentials (API keys) to a `Caller`; the registry uses the permissions
/// to decide which tools the caller may see ([`Registry::permitted_for`](crate::Registry::permitted_for)),
/// and handlers can check them again for per-record rules.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Caller {
    principal: String,
    tenant: Option<String>,
    permissions: BTreeSet<String>,
}

impl Caller {
    /// A caller identified by `principal`, with no tenant and no permissions.
    pub fn new(principal: impl Into<String>) -> Self {
        Self {
            principal: principal.into(),
            tenant: None,
            permissions: BTreeSet::new(),
        }
    }

    /// Sets the tenant.
    #[must_use]
    pub fn with_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Grants one permission.
    #[must_use]
    pub fn with_permission(mut self, permission: impl Into<String>) -> Self {
        self.permissions.insert(permission.into());
        self
    }

    /// Grants several permissions.
    #[must_use]
    pub fn with_permissions<I, S>(mut self, permissions: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.permissions
            .extend(permissions.into_iter().map(Into::into));
        self
    }

    /// The principal's id (a user, a service account, an API key's owner).
    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// The tenant, for multi-tenant servers.
    pub fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }

    /// Every permission held, sorted.
    pub fn permissions(&self) -> &BTreeSet<String> {
        &self.permissions
    }

    /// Whether the caller holds `permission`.
    pub fn has_permission(&self, permission: &str) -> bool {
        self.permissions.contains(permission)
    }
}

/// Everything a handler gets besides its arguments.
///
/// Cheap to clone: the ids are `Arc`s and the caller is shared.
#[derive(Debug, Clone)]
pub struct ToolContext {
    call_id: ToolCallId,
    tool_name: Arc<str>,
    caller: Arc<Caller>,
    cancellation: CancellationToken,
}

impl ToolContext {
    /// A context for call `call_id` of tool `tool_name`, with an anonymous caller (no
    /// permissions) and a fresh cancellation token.
    pub fn new(call_id: impl Into<ToolCallId>, tool_name: impl Into<Arc<str>>) -> Self {
        Self {
            call_id: call_id.into(),
            tool_name: tool_name.into(),
            caller: Arc::new(Caller::default()),
            cancellation: CancellationToken::new(),
        }
    }

    /// Sets who is calling.
    #[must_use]
    pub fn with_caller(mut self, caller: impl Into<Arc<Caller>>) -> Self {
        self.caller = caller.into();
        self
    }

    /// Uses `token` for cancellation (the loop passes a child of its own token).
    #[must_use]
    pub fn with_cancellation(mut self, token: CancellationToken) -> Self {
        self.cancellation = token;
        self
    }

    /// The provider's id for this call.
    pub fn call_id(&self) -> &ToolCallId {
        &self.call_id
    }

    /// The tool's name.
    pub fn tool_name(&self) -> &str {
        &self.tool_name
    }

    /// Who is calling.
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// The token that fires when the call is cancelled. Long-running handlers should watch
    /// it (`token.cancelled().await`) and stop early; a handler that ignores it is dropped at
    /// its next await point anyway.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancellation
    }

    /// Whether the call has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancellation.is_cancelled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_holds_identity_and_permissions() {
        let caller = Caller::new("user-1")
            .with_tenant("acme")
            .with_permission("orders:read")
            .with_permissions(["orders:write", "orders:read"]);
        assert_eq!(caller.principal(), "user-1");
        assert_eq!(caller.tenant(), Some("acme"));
        assert!(caller.has_permission("orders:write"));
        assert!(!caller.has_permission("admin"));
        assert_eq!(caller.permissions().len(), 2);
    }

    #[test]
    fn context_carries_call_and_cancellation() {
        let token = CancellationToken::new();
        let ctx = ToolContext::new("call_1", "get_weather")
            .with_caller(Caller::new("me"))
            .with_cancellation(token.child_token());
        assert_eq!(ctx.call_id().as_str(), "call_1");
        assert_eq!(ctx.tool_name(), "get_weather");
        assert_eq!(ctx.caller().principal(), "me");
        assert!(!ctx.is_cancelled());
        token.cancel();
        assert!(ctx.is_cancelled());
        assert!(ctx.clone().cancellation().is_cancelled());
    }
}
