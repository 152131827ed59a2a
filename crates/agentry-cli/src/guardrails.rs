//! `--guardrail NAME` and `--policy FILE.rego`: the run's guardrails (docs/guardrails.md).

use agent_loop::Guardrails;

use crate::args::LoopArgs;
use crate::error::Error;

/// The guardrails the flags name; a name that is not a ready-made guardrail, or a policy that
/// cannot be read or parsed, is a usage error (exit 2) before anything runs.
pub(crate) fn from_flags(flags: &LoopArgs) -> Result<Guardrails, Error> {
    let mut guardrails = Guardrails::new();
    for name in &flags.guardrails {
        let named = agent_guardrails::by_name(name)
            .map_err(|error| Error::Usage(format!("--guardrail: {error}")))?;
        guardrails = guardrails.merged(&named);
    }
    if let Some(path) = &flags.policy {
        let policy = agent_guardrails::policy_file(path)
            .map_err(|error| Error::Usage(format!("--policy: {error}")))?;
        guardrails = guardrails.merged(&policy);
    }
    Ok(guardrails)
}
