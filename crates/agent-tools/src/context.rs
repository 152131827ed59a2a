//! What a handler learns about the call it serves: [`ToolContext`], the [`Caller`] and the
//! [`Accounting`] it reports spend into.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use agent_types::{ToolCallId, TraceEntry, Usage};

use crate::nesting::{BudgetLeft, EventSink};
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

    /// The same caller holding only those of its permissions that are also in `scope`: a
    /// tighter set for one run (reference 000's per-call scoping). A scope never grants a
    /// permission the caller lacks.
    #[must_use]
    pub fn scoped_to(&self, scope: &BTreeSet<String>) -> Self {
        Self {
            principal: self.principal.clone(),
            tenant: self.tenant.clone(),
            permissions: self.permissions.intersection(scope).cloned().collect(),
        }
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
    hard_stop: Option<CancellationToken>,
    accounting: Accounting,
    max_result_bytes: Option<usize>,
    max_binary_bytes: Option<usize>,
    /// Where a sub-agent's events go, when the caller streams.
    events: Option<EventSink>,
    /// What was left of the caller's budgets when the call's round began.
    budget: BudgetLeft,
    /// Which of the accounting's waiting contents is this call's; shared by the clones.
    content_key: u64,
}

/// Where a handler's [`ToolContent`](crate::ToolContent) result waits for the caller that
/// made the context (the loop reads it when the call is done). Shared by the context's
/// clones.
///
/// It lives beside the totals of the context's [`Accounting`] (contexts sharing one share
/// where content waits, each under its own key), so a call costs no allocation of its own:
/// the table grows only when a handler sets content. A slot taken with
/// [`ToolContext::content_slot`] follows the accounting the context had then.
#[derive(Clone)]
pub struct ContentSlot {
    reports: Arc<Reports>,
    key: u64,
}

impl Default for ContentSlot {
    /// A slot of its own, shared with nothing.
    fn default() -> Self {
        Self {
            reports: Arc::default(),
            key: next_content_key(),
        }
    }
}

impl std::fmt::Debug for ContentSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContentSlot")
            .field("key", &self.key)
            .field("set", &self.is_set())
            .finish()
    }
}

impl ContentSlot {
    /// Puts `content` in the slot, replacing what was there.
    pub fn set(&self, content: crate::ToolContent) {
        let mut waiting = self.reports.content();
        match waiting.iter_mut().find(|(key, _)| *key == self.key) {
            Some((_, slot)) => *slot = content,
            None => waiting.push((self.key, content)),
        }
    }

    /// Takes what the slot holds, if anything.
    pub fn take(&self) -> Option<crate::ToolContent> {
        let mut waiting = self.reports.content();
        let at = waiting.iter().position(|(key, _)| *key == self.key)?;
        Some(waiting.swap_remove(at).1)
    }

    /// Takes the trace a handler attached with [`ToolContext::attach_trace`], if any.
    pub fn take_trace(&self) -> Vec<TraceEntry> {
        let mut waiting = lock(&self.reports.traces);
        match waiting.iter().position(|(key, _)| *key == self.key) {
            Some(at) => waiting.swap_remove(at).1,
            None => Vec::new(),
        }
    }

    fn is_set(&self) -> bool {
        self.reports
            .content()
            .iter()
            .any(|(key, _)| *key == self.key)
    }
}

/// The anonymous caller a new context starts with, shared: the loop replaces it with its own
/// at once, so making one per call would be an allocation (and a free) per call for nothing.
fn anonymous() -> Arc<Caller> {
    static ANONYMOUS: std::sync::LazyLock<Arc<Caller>> =
        std::sync::LazyLock::new(|| Arc::new(Caller::default()));
    Arc::clone(&ANONYMOUS)
}

/// A fresh key for a context's content: unique in the process, so contexts sharing an
/// [`Accounting`] never read each other's content (even under the same call id).
fn next_content_key() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl ToolContext {
    /// A context for call `call_id` of tool `tool_name`, with an anonymous caller (no
    /// permissions) and a fresh cancellation token.
    pub fn new(call_id: impl Into<ToolCallId>, tool_name: impl Into<Arc<str>>) -> Self {
        Self::for_call(
            call_id,
            tool_name,
            anonymous(),
            CancellationToken::new(),
            Accounting::default(),
        )
    }

    /// A context for call `call_id` of tool `tool_name` made of what its caller shares: who
    /// is calling, the call's cancellation token and the accounting it reports into. The same
    /// as [`new`](Self::new) then [`with_caller`](Self::with_caller),
    /// [`with_cancellation`](Self::with_cancellation) and
    /// [`with_accounting`](Self::with_accounting), without making (and freeing) the token and
    /// accounting they replace: the loop builds one context per call.
    pub fn for_call(
        call_id: impl Into<ToolCallId>,
        tool_name: impl Into<Arc<str>>,
        caller: Arc<Caller>,
        cancellation: CancellationToken,
        accounting: Accounting,
    ) -> Self {
        Self {
            call_id: call_id.into(),
            tool_name: tool_name.into(),
            caller,
            cancellation,
            hard_stop: None,
            accounting,
            max_result_bytes: None,
            max_binary_bytes: None,
            events: None,
            budget: BudgetLeft::default(),
            content_key: next_content_key(),
        }
    }

    /// Tells the handler how many bytes of images and files (decoded) its result may carry;
    /// blocks past it are replaced by a note. The loop sets it from
    /// `tool_result_max_binary_bytes`.
    #[must_use]
    pub fn with_max_binary_bytes(mut self, max_bytes: usize) -> Self {
        self.max_binary_bytes = Some(max_bytes);
        self
    }

    /// The most inline image and file bytes this call's result may carry, when the caller
    /// said.
    pub fn max_binary_bytes(&self) -> Option<usize> {
        self.max_binary_bytes
    }

    /// Makes `content` this call's result, in place of the JSON value the handler returns.
    /// A handler returning [`ToolContent`](crate::ToolContent) through
    /// [`Tool::from_fn`](crate::Tool::from_fn) or [`Tool::streaming`](crate::Tool::streaming)
    /// gets this done for it; a raw [`Handler`](crate::Handler) calls it before its final
    /// event.
    pub fn set_content(&self, content: crate::ToolContent) {
        self.content_slot().set(content);
    }

    /// Takes the content a handler set with [`set_content`](Self::set_content) (on this
    /// context or any clone of it), if any.
    pub fn take_content(&self) -> Option<crate::ToolContent> {
        self.content_slot().take()
    }

    /// The slot [`set_content`](Self::set_content) fills, to read after the context has been
    /// handed to the handler. Take it after [`with_accounting`](Self::with_accounting): the
    /// content waits beside the accounting's totals.
    pub fn content_slot(&self) -> ContentSlot {
        ContentSlot {
            reports: Arc::clone(&self.accounting.reports),
            key: self.content_key,
        }
    }

    /// Nests the events of a sub-agent the handler runs in the caller's stream (the loop
    /// sets it when its caller streams).
    #[must_use]
    pub fn with_events(mut self, sink: EventSink) -> Self {
        self.events = Some(sink);
        self
    }

    /// Where to send a sub-agent's events; `None` when nobody streams them (then build none).
    pub fn events(&self) -> Option<&EventSink> {
        self.events.as_ref()
    }

    /// Tells the handler what was left of the caller's budgets when its round began (the loop
    /// sets it from its token and cost budgets).
    #[must_use]
    pub fn with_budget_left(mut self, budget: BudgetLeft) -> Self {
        self.budget = budget;
        self
    }

    /// What is left of the caller's budgets now: what was left when the round began, less
    /// what the calls of the round have reported into the [`accounting`](Self::accounting)
    /// so far. A handler that spends (a sub-agent) must stay within it.
    pub fn budget_left(&self) -> BudgetLeft {
        self.budget.after(self.accounting.totals())
    }

    /// Attaches the trace of a run the handler made (a sub-agent's) to this call's trace
    /// entry ([`TraceEntry::sub_trace`]).
    pub fn attach_trace(&self, trace: Vec<TraceEntry>) {
        if trace.is_empty() {
            return;
        }
        let mut waiting = lock(&self.accounting.reports.traces);
        match waiting.iter_mut().find(|(key, _)| *key == self.content_key) {
            Some((_, slot)) => *slot = trace,
            None => waiting.push((self.content_key, trace)),
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

    /// Separates "please stop" from "stop now". By default the guard around a handler drops
    /// it as soon as [`cancellation`](Self::cancellation) fires. With a hard-stop token the
    /// handler sees the cancellation first and may wind down on its own (finish a write, return
    /// early); the guard drops it only when `token` fires. The loop fires it after a short grace
    /// period.
    #[must_use]
    pub fn with_hard_stop(mut self, token: CancellationToken) -> Self {
        self.hard_stop = Some(token);
        self
    }

    /// Reports usage into `accounting` (the loop passes its own, to count it against budgets).
    #[must_use]
    pub fn with_accounting(mut self, accounting: Accounting) -> Self {
        self.accounting = accounting;
        self
    }

    /// Tells the handler how much of its result will be kept: the loop cuts every result to
    /// `max_bytes` (see [`max_result_bytes`](Self::max_result_bytes)). The loop sets it from
    /// its truncation cap.
    #[must_use]
    pub fn with_max_result_bytes(mut self, max_bytes: usize) -> Self {
        self.max_result_bytes = Some(max_bytes);
        self
    }

    /// The most of this call's result that will be kept, when the caller said (`None`: no
    /// cap is known).
    ///
    /// The cap counts the result as it travels to the model: rendered as text
    /// ([`render_result`](crate::render_result): a string as is, anything else as compact
    /// JSON), then escaped as a JSON string ([`escaped_len`](crate::escaped_len): a quote
    /// counts 2 bytes, a NUL 6). Whatever lies beyond it is cut and freed by
    /// [`truncate`](crate::truncate), so a handler should **read, fetch or build at most this
    /// much** (plus a byte or so to know there was more): a file reader that reads 1 MiB when
    /// 64 KiB will be kept spends 16 times the memory for nothing, once per concurrent call.
    pub fn max_result_bytes(&self) -> Option<usize> {
        self.max_result_bytes
    }

    /// The token whose firing makes the guard drop the handler: the hard-stop token when one
    /// is set, otherwise the cancellation token.
    pub fn hard_stop(&self) -> &CancellationToken {
        self.hard_stop.as_ref().unwrap_or(&self.cancellation)
    }

    /// Where the handler reports tokens and money it spent itself (a tool that calls a model,
    /// a paid API). The loop adds them to its token and cost budgets after the tool round.
    pub fn accounting(&self) -> &Accounting {
        &self.accounting
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
    /// its next await point anyway (at once, or after the grace period when a
    /// [hard stop](Self::with_hard_stop) is set).
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancellation
    }

    /// Whether the call has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancellation.is_cancelled()
    }
}

/// Usage a handler reports while it runs: tokens and US dollars it spent itself.
///
/// Cheap to clone; clones share the same totals, so a handler's reports reach whoever built
/// the context. Reports only add up.
#[derive(Debug, Clone, Default)]
pub struct Accounting {
    reports: Arc<Reports>,
}

/// What handlers report back to whoever built their contexts: the spend totals, and the
/// content results waiting to be taken (keyed by context; empty, and unallocated, until a
/// handler returns content).
#[derive(Default)]
struct Reports {
    totals: Mutex<AccountingTotals>,
    content: Mutex<Vec<(u64, crate::ToolContent)>>,
    /// Sub-agents' traces waiting for the caller, keyed like `content`.
    traces: Mutex<Vec<(u64, Vec<TraceEntry>)>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Entries are pushed or removed in one step: a poisoned lock still holds whole ones.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Reports {
    fn content(&self) -> std::sync::MutexGuard<'_, Vec<(u64, crate::ToolContent)>> {
        // A poisoned lock still holds whole entries: each is pushed or removed in one step.
        self.content
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl std::fmt::Debug for Reports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let totals = *self
            .totals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f.debug_struct("Reports")
            .field("totals", &totals)
            .field("waiting_content", &self.content().len())
            .finish()
    }
}

/// The totals an [`Accounting`] has received.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AccountingTotals {
    /// Tokens reported.
    pub tokens: u64,
    /// Dollars reported.
    pub cost_usd: f64,
    /// Model tokens reported with [`Accounting::add_usage`] (a sub-agent's model calls), by
    /// kind; their total is also in `tokens`.
    pub usage: Usage,
}

impl Accounting {
    /// Adds `tokens` to the total.
    pub fn add_tokens(&self, tokens: u64) {
        let mut totals = self.lock();
        totals.tokens = totals.tokens.saturating_add(tokens);
    }

    /// Adds `cost_usd` (ignored unless finite and positive) to the total.
    pub fn add_cost_usd(&self, cost_usd: f64) {
        if cost_usd.is_finite() && cost_usd > 0.0 {
            self.lock().cost_usd += cost_usd;
        }
    }

    /// Adds the usage of model calls the handler made (a sub-agent's run): its total tokens
    /// count like [`add_tokens`](Self::add_tokens), and the loop adds `usage` to its own, so
    /// the caller's usage includes the sub-agent's.
    pub fn add_usage(&self, usage: &Usage) {
        let mut totals = self.lock();
        totals.tokens = totals
            .tokens
            .saturating_add(usage.total_tokens().unwrap_or(0));
        totals.usage += *usage;
    }

    /// What has been reported so far.
    pub fn totals(&self) -> AccountingTotals {
        *self.lock()
    }

    /// Returns the totals and resets them to zero.
    pub fn take(&self) -> AccountingTotals {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AccountingTotals> {
        // The totals are plain numbers: a panic elsewhere cannot leave them inconsistent.
        self.reports
            .totals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
    fn a_scope_only_narrows() {
        let caller = Caller::new("u")
            .with_tenant("t")
            .with_permissions(["orders:read", "orders:write"]);
        let scope: BTreeSet<String> = ["orders:read", "admin"].map(String::from).into();
        let scoped = caller.scoped_to(&scope);
        assert_eq!(scoped.principal(), "u");
        assert_eq!(scoped.tenant(), Some("t"));
        // `admin` is in the scope but the caller never had it.
        assert_eq!(
            scoped.permissions().iter().collect::<Vec<_>>(),
            ["orders:read"]
        );
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
        // Without a hard-stop token, cancellation is the hard stop.
        assert!(ctx.hard_stop().is_cancelled());
        assert_eq!(ctx.max_result_bytes(), None);
        assert_eq!(
            ctx.with_max_result_bytes(4096).clone().max_result_bytes(),
            Some(4096)
        );
    }

    #[test]
    fn hard_stop_is_separate_when_set() {
        let soft = CancellationToken::new();
        let hard = CancellationToken::new();
        let ctx = ToolContext::new("c", "t")
            .with_cancellation(soft.clone())
            .with_hard_stop(hard.clone());
        soft.cancel();
        assert!(ctx.is_cancelled());
        assert!(!ctx.hard_stop().is_cancelled());
        hard.cancel();
        assert!(ctx.hard_stop().is_cancelled());
    }

    #[test]
    fn accounting_is_shared_and_additive() {
        let accounting = Accounting::default();
        let ctx = ToolContext::new("c", "t").with_accounting(accounting.clone());
        ctx.accounting().add_tokens(10);
        ctx.clone().accounting().add_tokens(5);
        ctx.accounting().add_cost_usd(0.25);
        ctx.accounting().add_cost_usd(f64::NAN);
        ctx.accounting().add_cost_usd(-1.0);
        assert_eq!(
            accounting.take(),
            AccountingTotals {
                tokens: 15,
                cost_usd: 0.25,
                ..AccountingTotals::default()
            }
        );
        assert_eq!(accounting.totals(), AccountingTotals::default());
    }

    #[test]
    fn contexts_sharing_an_accounting_keep_their_content_apart() {
        // The loop gives every call of a run the run's accounting; content waits beside its
        // totals, one entry per context, even when two calls carry the same id.
        let accounting = Accounting::default();
        let first = ToolContext::new("c1", "t").with_accounting(accounting.clone());
        let second = ToolContext::new("c1", "t").with_accounting(accounting.clone());
        let (first_slot, second_slot) = (first.content_slot(), second.content_slot());
        assert!(
            first_slot.take().is_none(),
            "nothing waits before a handler sets content"
        );
        first.clone().set_content(crate::ToolContent::text("one"));
        second.set_content(crate::ToolContent::text("two"));
        second.set_content(crate::ToolContent::text("two, again"));
        assert_eq!(
            second_slot.take(),
            Some(crate::ToolContent::text("two, again"))
        );
        assert!(second.take_content().is_none(), "taken once");
        assert_eq!(first_slot.take(), Some(crate::ToolContent::text("one")));
        assert_eq!(
            accounting.reports.content().len(),
            0,
            "nothing left waiting"
        );
        // A slot of its own (`Default`) shares nothing.
        let alone = ContentSlot::default();
        alone.set(crate::ToolContent::text("x"));
        assert!(first_slot.take().is_none());
        assert!(format!("{alone:?}").contains("set: true"));
        assert_eq!(alone.take(), Some(crate::ToolContent::text("x")));
    }

    #[test]
    fn budget_left_shrinks_with_the_rounds_reports_and_traces_wait_per_call() {
        let accounting = Accounting::default();
        let ctx = ToolContext::new("c1", "t")
            .with_accounting(accounting.clone())
            .with_budget_left(crate::BudgetLeft {
                tokens: Some(100),
                cost_usd: Some(1.0),
            });
        assert_eq!(ctx.budget_left().tokens, Some(100));
        // A sibling call of the same round reports what it spent.
        accounting.add_usage(&agent_types::Usage {
            input_tokens: Some(30),
            output_tokens: Some(10),
            ..agent_types::Usage::default()
        });
        accounting.add_cost_usd(0.25);
        assert_eq!(ctx.budget_left().tokens, Some(60));
        assert_eq!(ctx.budget_left().cost_usd, Some(0.75));
        assert_eq!(accounting.totals().usage.input_tokens, Some(30));
        assert!(ctx.events().is_none());

        let other = ToolContext::new("c1", "t").with_accounting(accounting.clone());
        let (slot, other_slot) = (ctx.content_slot(), other.content_slot());
        assert!(slot.take_trace().is_empty());
        ctx.attach_trace(vec![agent_types::TraceEntry {
            iteration: 1,
            call_id: "inner".into(),
            tool_name: "x".into(),
            arguments: serde_json::Value::Null,
            result_bytes: 0,
            sent_bytes: 0,
            truncated: false,
            duration: std::time::Duration::ZERO,
            error: None,
            repairs: Vec::new(),
            sub_trace: Vec::new(),
            guardrail_decisions: None,
        }]);
        assert!(other_slot.take_trace().is_empty(), "another call's trace");
        assert_eq!(slot.take_trace()[0].call_id.as_str(), "inner");
        assert!(slot.take_trace().is_empty(), "taken once");
    }

    #[test]
    fn for_call_uses_the_parts_it_is_given() {
        let accounting = Accounting::default();
        let token = CancellationToken::new();
        let ctx = ToolContext::for_call(
            "c1",
            "t",
            Arc::new(Caller::new("user-1").with_permission("orders:read")),
            token.clone(),
            accounting.clone(),
        );
        assert_eq!(ctx.caller().principal(), "user-1");
        assert!(ctx.caller().has_permission("orders:read"));
        ctx.accounting().add_tokens(3);
        assert_eq!(accounting.totals().tokens, 3);
        token.cancel();
        assert!(ctx.is_cancelled());
        // `new`'s anonymous caller is shared, and holds nothing.
        let anonymous = ToolContext::new("c2", "t");
        assert_eq!(anonymous.caller(), &Caller::default());
    }
}
