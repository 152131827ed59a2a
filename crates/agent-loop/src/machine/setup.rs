//! A run's setup for a driver outside the process (a Temporal workflow): the machine's
//! [`Config`] and the request every model call starts from, checked as the in-process driver
//! checks them when a run starts, as plain serde data.

use agent_types::{AgentError, Capabilities, ModelRequest};
use serde::{Deserialize, Serialize};

use super::Config;
use crate::options::{Options, ToolParallelism};
use crate::session::Session;

/// What a durable driver needs to drive the machine for a session without the worker's
/// [`Options`]: the decisions' config, the request template and the few numbers the driver
/// itself applies (the estimate, the results' caps, the round's parallelism).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Setup {
    /// The machine's config.
    pub config: Config,
    /// The request every model call starts from: model, system prompt (with a prompted
    /// output schema), tool specs (with a final-answer tool), tool choice, settings, extras and
    /// response format; no messages (the driver puts the history in).
    pub request: ModelRequest,
    /// Whether the machine reads the estimated input of a call (a token or dollar budget, a
    /// gate): without it the driver answers `prepared` with 0.
    pub estimate: bool,
    /// The cap on a tool result's text ([`Options::tool_result_max_bytes`]), for remote
    /// results the driver orders into the history ([`super::order_results`]).
    pub tool_result_max_bytes: usize,
    /// The cap on a tool result's binary content.
    pub tool_result_max_binary_bytes: usize,
    /// The most calls of a round running at once (1: one after another).
    pub max_concurrent: usize,
}

/// The setup of a run of `session` under `options` on a backend with `capabilities`: the
/// in-process driver's checks at the start of a run (options, tools against the backend,
/// output strategy, the cost budget's price, approval tools), then the config and the request.
///
/// # Errors
///
/// A configuration error for what the in-process driver refuses, and for what a durable
/// driver cannot run because it is code on the worker that shapes each call inside the run:
/// a per-round preparation (`prepare_round`), a history policy and output guardrails.
pub fn setup(
    options: &Options,
    session: &Session,
    capabilities: Capabilities,
) -> Result<Setup, AgentError> {
    options.validate()?;
    for (set, what) in [
        (options.prepare_round.is_some(), "a per-round preparation"),
        (options.history.is_some(), "a history policy"),
        (
            options.guardrails.has_output_guardrails(),
            "output guardrails",
        ),
    ] {
        if set {
            return Err(AgentError::config(format!(
                "{what} is not supported by the durable (Temporal) driver: it is code run \
                 inside each round; drop it from the worker's options"
            )));
        }
    }
    let crate::run::Checked {
        tools,
        strategy,
        screen_calls,
        ..
    } = crate::run::check_start(options, session, capabilities)?;
    let config = Config::new(options, &session.model, strategy, screen_calls);
    let mut request = ModelRequest {
        model: session.model.clone(),
        system: session.system.clone(),
        messages: Vec::new(),
        tools: tools.specs(),
        tool_choice: session.tool_choice.clone(),
        settings: session.settings.clone(),
        extras: session.extras.clone(),
        response_format: None,
        stream: true,
    };
    if let Some(search) = &options.tool_search {
        search.resolve(capabilities, &mut request);
    }
    if let (Some(spec), Some(strategy)) = (&options.output, strategy) {
        crate::run::apply_output(spec, strategy, &mut request);
    }
    Ok(Setup {
        config,
        request,
        estimate: options.token_budget.is_some()
            || options.max_cost_usd.is_some()
            || options.hooks.has_gate(),
        tool_result_max_bytes: options.tool_result_max_bytes,
        tool_result_max_binary_bytes: options.tool_result_max_binary_bytes,
        max_concurrent: match options.tool_parallelism {
            ToolParallelism::Parallel { max_concurrent } => max_concurrent.max(1),
            ToolParallelism::Serial => 1,
        },
    })
}

/// The options' model-call gate (`Hooks::gate`, a server's spend cap) for a call a durable
/// driver makes: asked with the call's request, round and estimated input, as the in-process
/// driver asks it before each call. Passes when there is no gate.
///
/// # Errors
///
/// A `refused` error with the gate's reason.
pub async fn gate(
    options: &Options,
    request: &ModelRequest,
    iteration: u32,
    estimated_input_tokens: u64,
) -> Result<(), AgentError> {
    if !options.hooks.has_gate() {
        return Ok(());
    }
    let gate = crate::hooks::ModelCallGate {
        model: request.model.clone(),
        iteration,
        messages: request.messages.len(),
        tools: request.tools.iter().map(|spec| spec.name.clone()).collect(),
        caller: options.caller.clone(),
        estimated_input_tokens,
        max_output_tokens: request.settings.max_output_tokens,
    };
    options
        .hooks
        .gate(gate)
        .await
        .map_err(|reason| AgentError::new(agent_types::ErrorKind::Refused, reason))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use agent_types::ToolChoice;

    use super::*;
    use crate::history::HistoryPolicy;

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Answer {
        #[allow(dead_code)]
        value: i64,
    }

    fn tools() -> Capabilities {
        Capabilities {
            tools: true,
            ..Capabilities::default()
        }
    }

    /// The request template carries what the in-process driver puts into its request: the
    /// final-answer tool and the forced choice of the `tool` strategy, no history.
    #[test]
    fn the_setup_carries_the_output_strategy_into_the_request() {
        let options = Options::auto()
            .with_output::<Answer>()
            .with_tool_parallelism(ToolParallelism::Serial);
        let session = Session::new("m").with_system("Be brief.");
        let setup = setup(&options, &session, tools()).unwrap();
        let output = setup.config.output.as_ref().unwrap();
        assert_eq!(output.strategy, crate::output::OutputStrategy::Tool);
        assert_eq!(setup.request.tools.len(), 1);
        assert!(matches!(setup.request.tool_choice, ToolChoice::Tool { .. }));
        assert_eq!(setup.request.system.as_deref(), Some("Be brief."));
        assert!(setup.request.messages.is_empty());
        assert!(!setup.estimate);
        assert_eq!(setup.max_concurrent, 1);
        // Plain data: it crosses a workflow's history as JSON.
        let json = serde_json::to_string(&setup).unwrap();
        let back: Setup = serde_json::from_str(&json).unwrap();
        assert_eq!(back.request, setup.request);
    }

    /// Code that shapes each round on the worker cannot run in a durable driver: a clear
    /// configuration error instead of a run that ignores it.
    #[test]
    fn the_setup_refuses_a_history_policy() {
        let mut options = Options::auto();
        options.history = Some(HistoryPolicy::last_turns(2));
        let error = setup(&options, &Session::new("m"), tools()).unwrap_err();
        assert!(matches!(error.kind, agent_types::ErrorKind::Config));
        assert!(
            error
                .message
                .starts_with("a history policy is not supported")
        );
    }

    /// A budget makes the machine read the estimate; a backend without tools refuses tools.
    #[test]
    fn the_setup_checks_as_a_run_starts() {
        let options = Options::auto().with_token_budget(1_000);
        assert!(
            setup(&options, &Session::new("m"), tools())
                .unwrap()
                .estimate
        );
        let session = Session::new("m").with_remote_tool(agent_types::ToolSpec::new(
            "lookup",
            "Looks up.",
            serde_json::json!({"type": "object"}),
        ));
        let error = setup(&Options::auto(), &session, Capabilities::default()).unwrap_err();
        assert!(error.message.contains("does not support tools"), "{error}");
        let setup = setup(&Options::auto(), &session, tools()).unwrap();
        assert!(setup.config.screen_calls);
    }
}
