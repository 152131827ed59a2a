//! Ready-made guardrails for the agentry loop (docs/guardrails.md).
//!
//! - [`PiiGuardrail`] (feature `pii`): redacts emails, phone numbers, payment card numbers
//!   (Luhn-checked), IBANs (mod-97-checked) and common API-key shapes from tool results
//!   before the model sees them, and trips on input carrying a secret or a card number.
//! - [`PolicyGuardrail`] (feature `policy`): tool-call policy as code in Rego, evaluated in
//!   process by `regorus`: allow, deny with a reason the model reads, or require approval.
//!
//! Both plug into [`agent_loop::Guardrails`]; the loop's own guardrail API (input, output,
//! tool) is in [`agent_loop::guardrail`].

#[cfg(feature = "pii")]
pub mod pii;
#[cfg(feature = "policy")]
pub mod policy;

#[cfg(feature = "pii")]
pub use pii::{PiiGuardrail, PiiKind, PiiMatch, Redactor};
#[cfg(feature = "policy")]
pub use policy::PolicyGuardrail;

/// What can go wrong setting a guardrail up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The policy could not be read, parsed or evaluated.
    #[error("policy: {0}")]
    Policy(String),
    /// A guardrail name that is not a ready-made one.
    #[error("unknown guardrail `{0}`; the ready-made ones are: pii")]
    Unknown(String),
}

/// The ready-made guardrail named `name` (`pii`), as the CLI's `--guardrail` and a tenant's
/// configuration name them.
pub fn by_name(name: &str) -> Result<agent_loop::Guardrails, Error> {
    match name {
        #[cfg(feature = "pii")]
        "pii" => Ok(PiiGuardrail::new().into_guardrails()),
        other => Err(Error::Unknown(other.to_owned())),
    }
}

/// The policy in the Rego file at `path`, as guardrails of a run.
#[cfg(feature = "policy")]
pub fn policy_file(path: impl AsRef<std::path::Path>) -> Result<agent_loop::Guardrails, Error> {
    Ok(agent_loop::Guardrails::new().tool(PolicyGuardrail::from_file(path)?))
}
