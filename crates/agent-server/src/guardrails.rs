//! A tenant's guardrails (docs/guardrails.md): `[server.tenants.guardrails]` names the
//! ready-made ones, built once when the server starts and put into each of the tenant's runs.

use std::path::PathBuf;

use agent_loop::{CallCheck, CallVerdict, Guardrails, ToolGuardrail};
use serde::Deserialize;

use crate::config::TenantConfig;
use crate::error::Error;

/// `[server.tenants.guardrails]`: which guardrails guard the tenant's runs.
///
/// ```toml
/// [[server.tenants]]
/// name = "acme"
/// api_key_env = "ACME_KEY"
///
/// [server.tenants.guardrails]
/// pii = true
/// policy = "policies/acme.rego"
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantGuardrails {
    /// Redact PII and secrets from tool results; refuse input holding a key or card number.
    #[serde(default)]
    pub pii: bool,
    /// A Rego tool-call policy (package `agentry`: `deny` and `require_approval` sets); a
    /// relative path is relative to the configuration file.
    #[serde(default)]
    pub policy: Option<PathBuf>,
}

/// The tenant's guardrails, built once; a policy that cannot be read or parsed stops the
/// server from starting.
pub(crate) fn build(tenant: &TenantConfig) -> Result<Guardrails, Error> {
    let config = &tenant.guardrails;
    let mut guardrails = Guardrails::new();
    if config.pii {
        guardrails = guardrails.merged(&agent_guardrails::PiiGuardrail::new().into_guardrails());
    }
    if let Some(path) = &config.policy {
        let policy = agent_guardrails::policy_file(path)
            .map_err(|error| Error::Config(format!("tenant `{}`: {error}", tenant.name)))?;
        guardrails = guardrails.merged(&policy);
    }
    Ok(guardrails)
}

/// For a run that cannot wait for a person (a chat completion): a guardrail's
/// `require_approval` becomes a denial, as the tenant's `require_approval` does there.
pub(crate) fn without_approval(guardrails: &Guardrails) -> Guardrails {
    if !guardrails.has_tool_guardrails() {
        return guardrails.clone();
    }
    guardrails.clone().map_tools(|inner| {
        std::sync::Arc::new(NoApproval(inner)) as std::sync::Arc<dyn ToolGuardrail>
    })
}

struct NoApproval(std::sync::Arc<dyn ToolGuardrail>);

impl ToolGuardrail for NoApproval {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn before_call(&self, call: &CallCheck<'_>) -> CallVerdict {
        match self.0.before_call(call) {
            CallVerdict::RequireApproval(reason) => CallVerdict::Deny(format!(
                "{reason}; this call needs a person's approval, which a chat completion cannot \
                 ask for: use the sessions API (POST /v1/sessions/{{id}}/execute)"
            )),
            verdict => verdict,
        }
    }

    fn after_call(
        &self,
        call: &agent_loop::ResultCheck<'_>,
        result: &mut agent_types::ToolResult,
    ) -> agent_loop::ResultVerdict {
        self.0.after_call(call, result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_backends::{ScriptedBackend, ScriptedTurn};
    use agent_loop::{Input, Options, generate};
    use agent_tools::{Registry, builtin};
    use agent_types::Message;
    use serde_json::json;

    #[tokio::test]
    async fn where_a_run_cannot_wait_a_policys_require_approval_is_a_denial() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ask.rego");
        std::fs::write(
            &path,
            "package agentry\nrequire_approval contains \"ask first\" if input.tool.name == \"calculator\"\n",
        )
        .unwrap();
        let tenant: TenantConfig = toml::from_str(&format!(
            "name = \"acme\"\n[guardrails]\npolicy = \"{}\"\n",
            path.display()
        ))
        .unwrap();
        let guardrails = build(&tenant).unwrap();
        let mut tools = Registry::new();
        tools.register(builtin::calculator()).unwrap();
        let backend = ScriptedBackend::new([
            ScriptedTurn::tool_call("call_1", "calculator", json!({"expression": "1+1"})),
            ScriptedTurn::text("no"),
        ]);
        let options = Options::auto()
            .with_tools(tools)
            .with_guardrails(without_approval(&guardrails));
        let result = generate(&backend, Input::new("m").user("1+1?"), &options)
            .await
            .unwrap();
        let Message::Tool(denied) = &result.messages[1] else {
            panic!("{:?}", result.messages[1]);
        };
        assert!(denied.is_error);
        assert!(
            denied
                .content
                .contains("ask first; this call needs a person's approval"),
            "{}",
            denied.content
        );
    }
}
