//! Tool-call policy as code: a Rego policy (evaluated by `regorus`, no OPA server) decides,
//! for each tool call, from the caller, the tool and the arguments, whether it runs, is
//! denied with a reason the model reads, or waits for a person's approval.
//!
//! The policy's package is `agentry`; it may define two sets of strings:
//!
//! - `deny`: reasons to refuse the call (any reason denies; the model sees them joined);
//! - `require_approval`: reasons to ask a person first (docs/approval.md).
//!
//! A call that neither denies nor asks runs. The input document is
//! `{"caller": {"principal", "tenant", "permissions"}, "tool": {"name", "description"},
//! "call_id", "arguments"}` (arguments validated). docs/guardrails.md has an example.

use std::path::Path;
use std::sync::Mutex;

use agent_loop::{CallCheck, CallVerdict, ToolGuardrail};
use regorus::{Engine, Value};
use serde_json::json;

use crate::Error;

/// A Rego policy as a tool guardrail.
#[derive(Debug)]
pub struct PolicyGuardrail {
    name: String,
    /// Loaded once; evaluation needs `&mut`, and a round's calls are checked one by one.
    engine: Mutex<Engine>,
}

impl PolicyGuardrail {
    /// The policy in `source`, named `path` in errors.
    pub fn from_source(path: &str, source: &str) -> Result<Self, Error> {
        let mut engine = Engine::new();
        engine
            .add_policy(path.to_owned(), source.to_owned())
            .map_err(|error| Error::Policy(format!("{path}: {error}")))?;
        let packages = engine
            .get_packages()
            .map_err(|error| Error::Policy(format!("{path}: {error}")))?;
        if !packages.iter().any(|package| package == "data.agentry") {
            return Err(Error::Policy(format!(
                "{path}: the policy's package must be `agentry` (found {})",
                packages.join(", ")
            )));
        }
        let guardrail = Self {
            name: "policy".to_owned(),
            engine: Mutex::new(engine),
        };
        // Evaluated once now, so a policy that cannot evaluate fails here, not per call.
        guardrail.evaluate(&json!({
            "caller": {"principal": "", "tenant": null, "permissions": []},
            "tool": {"name": "", "description": ""},
            "call_id": "",
            "arguments": {},
        }))?;
        Ok(guardrail)
    }

    /// The policy in the file at `path`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let source = std::fs::read_to_string(path).map_err(|error| {
            Error::Policy(format!("reading the policy {}: {error}", path.display()))
        })?;
        Self::from_source(&path.display().to_string(), &source)
    }

    /// Names the guardrail in decisions (default `policy`).
    #[must_use]
    pub fn named(mut self, name: &str) -> Self {
        name.clone_into(&mut self.name);
        self
    }

    /// What the policy decides for `input` (the input document described above).
    pub fn evaluate(&self, input: &serde_json::Value) -> Result<CallVerdict, Error> {
        let mut engine = self
            .engine
            .lock()
            .map_err(|_| Error::Policy("the policy engine was poisoned by a panic".into()))?;
        engine.set_input(Value::from(input.clone()));
        let deny = reasons(&mut engine, "data.agentry.deny")?;
        if !deny.is_empty() {
            return Ok(CallVerdict::Deny(deny.join("; ")));
        }
        let ask = reasons(&mut engine, "data.agentry.require_approval")?;
        if !ask.is_empty() {
            return Ok(CallVerdict::RequireApproval(ask.join("; ")));
        }
        Ok(CallVerdict::Allow)
    }
}

/// The strings of the set rule `rule` (empty when the policy does not define it).
fn reasons(engine: &mut Engine, rule: &str) -> Result<Vec<String>, Error> {
    let value = match engine.eval_rule(rule.to_owned()) {
        Ok(value) => value,
        // A rule the policy does not define is no reason.
        Err(error) if error.to_string().contains("not a valid rule path") => {
            return Ok(Vec::new());
        }
        Err(error) => return Err(Error::Policy(format!("evaluating {rule}: {error}"))),
    };
    if value == Value::Undefined {
        return Ok(Vec::new());
    }
    let json = value
        .to_json_str()
        .map_err(|error| Error::Policy(format!("{rule}: {error}")))?;
    let parsed: serde_json::Value =
        serde_json::from_str(&json).map_err(|error| Error::Policy(format!("{rule}: {error}")))?;
    let items = match parsed {
        serde_json::Value::Array(items) => items,
        serde_json::Value::Bool(false) | serde_json::Value::Null => Vec::new(),
        other => vec![other],
    };
    Ok(items
        .into_iter()
        .map(|item| match item {
            serde_json::Value::String(text) => text,
            other => other.to_string(),
        })
        .collect())
}

impl ToolGuardrail for PolicyGuardrail {
    fn name(&self) -> &str {
        &self.name
    }

    fn before_call(&self, call: &CallCheck<'_>) -> CallVerdict {
        let input = json!({
            "caller": {
                "principal": call.caller.principal(),
                "tenant": call.caller.tenant(),
                "permissions": call.caller.permissions(),
            },
            "tool": {"name": call.tool.name(), "description": call.tool.spec().description},
            "call_id": call.call_id,
            "arguments": call.arguments,
        });
        match self.evaluate(&input) {
            Ok(verdict) => verdict,
            // Fail closed: a policy that cannot decide does not let the call run.
            Err(error) => CallVerdict::Deny(format!("the policy could not decide: {error}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
package agentry

deny contains "reading outside the workspace is not allowed" if {
    input.tool.name == "read_file"
    not startswith(input.arguments.path, "workspace/")
}

require_approval contains "writes need a person" if {
    input.tool.name == "write_file"
    not "files:write" in input.caller.permissions
}
"#;

    fn input(tool: &str, path: &str, permissions: &[&str]) -> serde_json::Value {
        json!({
            "caller": {"principal": "ann", "tenant": "acme", "permissions": permissions},
            "tool": {"name": tool, "description": ""},
            "call_id": "call_1",
            "arguments": {"path": path},
        })
    }

    #[test]
    fn allow_deny_and_require_approval() {
        let policy = PolicyGuardrail::from_source("test.rego", POLICY).unwrap();
        assert_eq!(
            policy
                .evaluate(&input("read_file", "workspace/a.txt", &[]))
                .unwrap(),
            CallVerdict::Allow
        );
        assert_eq!(
            policy
                .evaluate(&input("read_file", "/etc/passwd", &[]))
                .unwrap(),
            CallVerdict::Deny("reading outside the workspace is not allowed".into())
        );
        assert_eq!(
            policy.evaluate(&input("write_file", "x", &[])).unwrap(),
            CallVerdict::RequireApproval("writes need a person".into())
        );
        assert_eq!(
            policy
                .evaluate(&input("write_file", "x", &["files:write"]))
                .unwrap(),
            CallVerdict::Allow
        );
    }

    #[test]
    fn a_policy_of_another_package_or_with_errors_is_refused() {
        let error =
            PolicyGuardrail::from_source("x.rego", "package other\nallow := true\n").unwrap_err();
        assert!(error.to_string().contains("must be `agentry`"), "{error}");
        let error = PolicyGuardrail::from_source("x.rego", "package agentry\ndeny contains if {")
            .unwrap_err();
        assert!(error.to_string().contains("x.rego"), "{error}");
    }

    #[test]
    fn a_policy_with_only_deny_allows_the_rest() {
        let policy = PolicyGuardrail::from_source(
            "deny.rego",
            "package agentry\ndeny contains \"no\" if input.tool.name == \"rm\"\n",
        )
        .unwrap();
        assert_eq!(
            policy.evaluate(&input("ls", "", &[])).unwrap(),
            CallVerdict::Allow
        );
        assert_eq!(
            policy.evaluate(&input("rm", "", &[])).unwrap(),
            CallVerdict::Deny("no".into())
        );
    }
}
