//! `agentry run` and `agentry resume`: the loop against a real provider, optionally keeping
//! the session in a file between commands.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use agent_loop::{OutputSpec, OutputStrategy, Session, SessionInput, SessionStatus};
use agent_tools::{Registry, builtin};
use agent_types::{
    ModelPrice, ToolCall, ToolResult, ToolResultBlock, ToolSpec, UserBlock, UserMessage,
};
use serde_json::{Value, json};

use crate::agent;
use agent_backends::Api;

use crate::args::{BuiltinTool, LoopArgs, ModelArgs, PromptArgs, SchemaArgs};
use crate::config::{Config, FileConfig, LoopSettings, rate_card};
use crate::endpoint;
use crate::error::Error;
use crate::exit::Exit;
use crate::mcp::McpArgs;
use crate::render::Renderer;
use crate::session_file::{SessionFile, SessionState};
use crate::trust::Verdict;

/// What `agentry run` was asked.
pub(crate) struct RunRequest<'a> {
    pub(crate) prompt: Vec<String>,
    pub(crate) model: &'a ModelArgs,
    pub(crate) remote_tools: &'a [String],
    pub(crate) session: Option<&'a Path>,
    pub(crate) attach: &'a PromptArgs,
    pub(crate) mcp: &'a McpArgs,
    pub(crate) loop_args: &'a LoopArgs,
}

/// `agentry run`.
pub(crate) async fn run<O: Write, E: Write>(
    request: RunRequest<'_>,
    renderer: &mut Renderer<O, E>,
) -> Result<Exit, Error> {
    let config = Config::load(request.model.config.as_deref())?;
    let mcp = crate::mcp::servers(request.mcp, &config)?;
    let file = request.session.map(SessionFile::new);
    let stored = match &file {
        Some(file) => file.load().await?,
        None => None,
    };
    if let Some(state) = &stored
        && state.session.status == SessionStatus::AwaitingToolExecution
    {
        return Err(Error::Usage(format!(
            "session {} is waiting for the results of {} tool call(s); continue it with \
             `agentry resume --session {} --results RESULTS.json`",
            state.session.id,
            state.session.pending_tool_calls.len(),
            request
                .session
                .map_or_else(String::new, |path| path.display().to_string())
        )));
    }
    if let Some(state) = &stored
        && state.session.status == SessionStatus::AwaitingApproval
    {
        return Err(crate::approval::still_waiting(
            &state.session,
            request.session,
        ));
    }
    let mut state = settle(stored, request.model, &config, file.as_ref())?;
    for name in request.remote_tools {
        add_remote_tool(&mut state.session, name)?;
    }
    // The schema and the files are read before the prompt, so a bad one is refused without
    // waiting on stdin.
    let output = structured(&request.attach.schema)?;
    let attached = request
        .attach
        .files
        .iter()
        .map(|path| crate::attach::block(path))
        .collect::<Result<Vec<_>, _>>()?;
    let mut content = vec![UserBlock::Text {
        text: prompt(request.prompt)?,
    }];
    content.extend(attached);
    if output.is_some() {
        renderer.structured();
    }
    go(
        state,
        file,
        SessionInput::User(UserMessage { content }),
        &config.merged,
        Run {
            loop_args: request.loop_args,
            output,
            mcp,
            report: request.attach.report.as_deref(),
        },
        renderer,
    )
    .await
}

/// `agentry resume`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn resume<O: Write, E: Write>(
    session: &Path,
    results: Option<&Path>,
    approvals: &crate::approval::ApprovalArgs,
    model: &ModelArgs,
    schema: &SchemaArgs,
    mcp: &McpArgs,
    loop_args: &LoopArgs,
    renderer: &mut Renderer<O, E>,
) -> Result<Exit, Error> {
    let config = Config::load(model.config.as_deref())?;
    let mcp = crate::mcp::servers(mcp, &config)?;
    let output = structured(schema)?;
    let file = SessionFile::new(session);
    let Some(stored) = file.load().await? else {
        return Err(Error::session(
            session,
            "no such session; start one with `agentry run --session FILE`",
        ));
    };
    if stored.session.status == SessionStatus::AwaitingApproval {
        let input = crate::approval::resume_input(&stored.session, results, approvals, session)?;
        let state = settle(Some(stored), model, &config, Some(&file))?;
        if output.is_some() {
            renderer.structured();
        }
        let run = Run {
            report: None,
            loop_args,
            output,
            mcp,
        };
        return go(state, Some(file), input, &config.merged, run, renderer).await;
    }
    let Some(results) = results.filter(|_| !approvals.any()) else {
        return Err(Error::Usage(format!(
            "session {} is not waiting for approval (status: {}); --approve and --deny \
             continue a session that is",
            stored.session.id,
            status_name(stored.session.status),
        )));
    };
    if stored.session.status != SessionStatus::AwaitingToolExecution {
        return Err(Error::Usage(format!(
            "session {} is not waiting for tool results (status: {}); continue it with \
             `agentry run --session {} PROMPT`",
            stored.session.id,
            status_name(stored.session.status),
            session.display()
        )));
    }
    let text = read_results(results)?;
    let results = parse_results(&text, &stored.session.pending_tool_calls)
        .map_err(|message| Error::Usage(format!("{}: {message}", results.display())))?;
    let state = settle(Some(stored), model, &config, Some(&file))?;
    if output.is_some() {
        renderer.structured();
    }
    go(
        state,
        Some(file),
        SessionInput::ToolResults(results),
        &config.merged,
        Run {
            report: None,
            loop_args,
            output,
            mcp,
        },
        renderer,
    )
    .await
}

/// The session to run: the stored one (flags may change its model and tools) or a new one
/// from flags, the files and the defaults; refused when a file the user has not trusted would
/// route the key or widen tool access (see [`vet`]).
fn settle(
    stored: Option<SessionState>,
    flags: &ModelArgs,
    config: &Config,
    file: Option<&SessionFile>,
) -> Result<SessionState, Error> {
    if let Some(url) = &flags.base_url {
        endpoint::check_base_url(url)
            .map_err(|message| Error::Usage(format!("--base-url: {message}")))?;
    }
    let merged = &config.merged;
    // Whose settings the routing and access settings of the state come from, when that is a
    // file the user has not vouched for.
    let mut doubted = None;
    let mut state = match stored {
        Some(mut state) => {
            if state.verdict != Verdict::Trusted {
                doubted = file.map(|file| Doubted::State(file.state_path(), state.verdict));
            }
            if let Some(provider) = flags.provider {
                state.provider = provider;
            }
            if let Some(model) = &flags.model {
                state.session.model.clone_from(model);
            }
            if let Some(system) = &flags.system {
                state.session.system = Some(system.clone());
            }
            state
        }
        None => {
            if let Some((path, verdict)) = &config.untrusted {
                doubted = Some(Doubted::Project(path.clone(), *verdict));
            }
            let provider = flags.provider.or(merged.provider).unwrap_or(Api::Openai);
            let model = flags
                .model
                .clone()
                .or_else(|| merged.model.clone())
                .or_else(|| provider.default_model().map(str::to_owned))
                .ok_or_else(|| {
                    Error::Usage(format!(
                        "--provider {} has no default model; name one with --model",
                        provider.name()
                    ))
                })?;
            let mut session = Session::new(model);
            session.system = flags.system.clone().or_else(|| merged.system.clone());
            let mut state = SessionState::new(provider, session);
            state.base_url.clone_from(&merged.base_url);
            state.tools = merged.tools.clone().unwrap_or_default();
            state.root.clone_from(&merged.root);
            state
        }
    };
    if flags.base_url.is_some() {
        state.base_url.clone_from(&flags.base_url);
    }
    if !flags.tools.is_empty() {
        state.tools.clone_from(&flags.tools);
    }
    state.tools.sort();
    state.tools.dedup();
    if let Some(root) = &flags.root {
        state.root = Some(root.clone());
    }
    if let Some(max) = flags.max_output_tokens.or(merged.max_output_tokens) {
        state.session.settings.max_output_tokens = Some(max);
    }
    if let Some(doubted) = doubted {
        let mut refused = vet(&mut state, &Say::of(flags, &config.trusted));
        if matches!(doubted, Doubted::Project(..)) {
            refused.extend(cheaper_price(&state.session.model, config));
        }
        if !refused.is_empty() {
            return Err(Error::Untrusted(refusal(&doubted, &refused)));
        }
    }
    if let Some((path, verdict)) = &config.untrusted
        && let Some(price) = cheaper_price(&state.session.model, config)
    {
        let doubted = Doubted::Project(path.clone(), *verdict);
        return Err(Error::Untrusted(refusal(&doubted, &[price])));
    }
    // Out of the provider's range is a usage error, before anything is sent.
    state
        .provider
        .settings_limits(&state.session.model)
        .check(&state.session.settings)
        .map_err(|error| Error::Usage(format!("{error} (--max-output-tokens)")))?;
    Ok(state)
}

/// A file whose routing and access settings the user has not vouched for.
enum Doubted {
    /// `./agentry.toml`, not trusted or changed since.
    Project(PathBuf, Verdict),
    /// A state file agentry did not write here, or one changed since.
    State(PathBuf, Verdict),
}

/// What the user says about the settings that route a key or widen tool access: the flags
/// over the files the user vouches for, with the defaults beneath.
struct Say {
    provider: Api,
    base_url: Option<String>,
    tools: Vec<BuiltinTool>,
    root: Option<PathBuf>,
}

impl Say {
    fn of(flags: &ModelArgs, trusted: &FileConfig) -> Self {
        Self {
            provider: flags.provider.or(trusted.provider).unwrap_or(Api::Openai),
            base_url: flags.base_url.clone().or_else(|| trusted.base_url.clone()),
            tools: if flags.tools.is_empty() {
                trusted.tools.clone().unwrap_or_default()
            } else {
                flags.tools.clone()
            },
            root: flags.root.clone().or_else(|| trusted.root.clone()),
        }
    }
}

/// The settings of `state` that came from a doubted file and would send the key (or the
/// conversation) somewhere the user did not say, or let a tool read what the user did not
/// open; each with why. A root that is not in effect (no `read_file`) is replaced by the
/// user's, so it is not carried into the session's state file either.
fn vet(state: &mut SessionState, say: &Say) -> Vec<String> {
    let mut refused = Vec::new();
    let key = match state.provider.key_variables().first() {
        Some(variable) => format!("your prompts and {variable}"),
        None => "your prompts".to_owned(),
    };
    if let Some(url) = &state.base_url {
        if say.base_url.as_ref() != Some(url) {
            refused.push(format!(
                "base_url = \"{}\" ({key} would be sent there)",
                endpoint::display(url)
            ));
        } else if state.provider != say.provider {
            refused.push(format!(
                "provider = \"{}\" ({key} would be sent to {}, which you set for {})",
                state.provider.name(),
                endpoint::display(url),
                say.provider.name()
            ));
        }
    }
    let reads = state.tools.contains(&BuiltinTool::ReadFile);
    if reads && !say.tools.contains(&BuiltinTool::ReadFile) {
        refused.push("tools = [\"read_file\"] (the model could read files on this machine)".into());
    }
    if !same_dir(state.root.as_deref(), say.root.as_deref()) {
        if reads && let Some(root) = &state.root {
            refused.push(format!(
                "root = \"{}\" (read_file could read everything under it)",
                root.display()
            ));
        } else if !reads {
            state.root.clone_from(&say.root);
        }
    }
    refused
}

/// Whether two roots name the same directory.
fn same_dir(a: Option<&Path>, b: Option<&Path>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a == b
                || matches!(
                    (std::fs::canonicalize(a), std::fs::canonicalize(b)),
                    (Ok(a), Ok(b)) if a == b
                )
        }
        _ => false,
    }
}

/// A price an untrusted project sets for `model` below what the user's own files (or the
/// built-in card) say: it would let a run spend past `--max-cost-usd`.
fn cheaper_price(model: &str, config: &Config) -> Option<String> {
    let theirs = rate_card(&config.merged).price(model).copied()?;
    let ours = rate_card(&config.trusted).price(model).copied()?;
    let fields = |price: agent_types::ModelPrice| {
        let input = price.input_per_mtok;
        [
            input,
            price.output_per_mtok,
            price.cache_read_per_mtok.unwrap_or(input),
            price.cache_write_5m_per_mtok.unwrap_or(input),
            price.cache_write_1h_per_mtok.unwrap_or(input),
        ]
    };
    let lower = fields(theirs)
        .iter()
        .zip(fields(ours))
        .any(|(theirs, ours)| *theirs < ours);
    lower.then(|| format!("prices.\"{model}\" (below the price your cost budget counts with)"))
}

/// The message for refused settings: what, why, and how to trust the file.
fn refusal(doubted: &Doubted, refused: &[String]) -> String {
    let (path, what, verdict) = match doubted {
        Doubted::Project(path, verdict) => (path, "the project configuration", verdict),
        Doubted::State(path, verdict) => (path, "the session state file", verdict),
    };
    let why = match (doubted, verdict) {
        (_, Verdict::Changed) => "has changed since it was trusted",
        (Doubted::Project(..), _) => {
            "is not trusted (a file in the directory you run in is not yours until you say so)"
        }
        (Doubted::State(..), _) => "was not written by agentry for this user",
    };
    let mut message = format!(
        "refused: {what} {} {why}, and it sets what only you may set:\n",
        path.display()
    );
    for line in refused {
        message.push_str(&format!("  - {line}\n"));
    }
    message.push_str("Nothing was sent. ");
    let user_file = crate::trust::config_dir()
        .map(|dir| {
            dir.join(crate::trust::USER_CONFIG_FILE)
                .display()
                .to_string()
        })
        .unwrap_or_else(|| "your configuration directory".to_owned());
    match doubted {
        Doubted::Project(..) => message.push_str(&format!(
            "If you wrote this file or have read it, trust it with `agentry trust {}`; or give \
             these settings as flags (--base-url, --provider, --tool, --root) or in {user_file}.",
            path.display()
        )),
        Doubted::State(..) => message.push_str(&format!(
            "To continue the session, give these settings again as flags (--base-url, \
             --provider, --tool, --root); or, if you have read the file and trust it, run \
             `agentry trust {}`.",
            path.display()
        )),
    }
    message
}

/// Runs the prepared session and keeps the state file in step.
async fn go<O: Write, E: Write>(
    mut state: SessionState,
    file: Option<SessionFile>,
    input: SessionInput,
    config: &FileConfig,
    run: Run<'_>,
    renderer: &mut Renderer<O, E>,
) -> Result<Exit, Error> {
    let settings = LoopSettings::resolve(run.loop_args, config)?;
    let mut tools = registry(&state.tools, state.root.as_deref())?;
    let model = connect(state.provider, state.base_url.as_deref())?;
    // MCP servers start after everything else is checked; their tools join the registry.
    let clients = crate::mcp::connect_into(run.mcp, &mut tools).await?;
    let mut prices = rate_card(config);
    if state.provider == Api::Ollama && prices.price(&state.session.model).is_none() {
        // A model on the user's own machine costs nothing per token.
        prices.insert(state.session.model.clone(), ModelPrice::default());
    }
    state
        .require_approval
        .extend(settings.require_approval.iter().cloned());
    state.require_approval.sort();
    state.require_approval.dedup();
    let card = prices.clone();
    let mut options = settings
        .options(prices)
        .with_tools(tools)
        .require_approval_for(state.require_approval.iter().cloned());
    if let Some(threshold) = (run.loop_args.tool_search_threshold).or(config.tool_search_threshold)
    {
        options = options
            .with_tool_search(agent_loop::ToolSearch::new().with_threshold(threshold))
            .map_err(|error| Error::Tools(error.message))?;
    }
    // --guardrail and --policy (crate::guardrails).
    options.guardrails = crate::guardrails::from_flags(run.loop_args)?;
    if let Some((spec, strategy, retries)) = run.output {
        options = options
            .with_output_spec(spec)
            .with_output_strategy(strategy)
            .with_max_output_retries(retries);
    }
    if let Some(file) = &file {
        let log = file.appender(&state.session).await?;
        // A round a killed run left unanswered is closed in the log before anything else.
        crate::session_checkpoint::recover(&*log, &mut state.session).await?;
        // The input goes to the log too, so the log alone is the whole history; the state
        // file follows each turn (`session_checkpoint`).
        let log =
            crate::session_checkpoint::CheckpointAppender::new(log, file.clone(), &mut state, card);
        options = options
            .with_conversation(std::sync::Arc::new(log))
            .with_echo_input(true);
        // Written first so that even a run killed mid-way leaves a loadable session.
        file.save(&mut state).await?;
    }
    // Where the prompts (and the key) go and what read_file may read, before anything goes.
    let mut header = format!(
        "agentry run · {} · {} · {}",
        state.provider.name(),
        state.session.model,
        endpoint::endpoint(state.provider, state.base_url.as_deref())
    );
    if !state.tools.is_empty() {
        let names: Vec<&str> = state.tools.iter().map(|tool| tool.name()).collect();
        header.push_str(&format!(" · tools: {}", names.join(", ")));
    }
    if state.tools.contains(&BuiltinTool::ReadFile)
        && let Some(root) = &state.root
    {
        let shown = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
        header.push_str(&format!(" · read_file root {}", shown.display()));
    }
    for client in &clients {
        header.push_str(&format!(
            " · mcp {} ({} tools)",
            client.name(),
            client.tools().len()
        ));
    }
    if let Some(file) = &file {
        header.push_str(&format!(" · session {}", file.path().display()));
    }
    renderer
        .faint(&header)
        .map_err(|error| Error::Other(format!("cannot write the output: {error}")))?;
    let (options, recorder) = crate::accounting::attach(
        options,
        run.loop_args.accounting.as_deref(),
        state.provider.name(),
    )
    .await?;
    let (options, report) = crate::report::attach(options, run.report, state.provider.name());
    let agent = agent_loop::Agent::builder_shared(model.into(), state.session.model.clone())
        .with_options(options)
        .build();
    let mut exit = agent::drive(&agent, &mut state.session, input, renderer).await;
    // On a terminal, a person decides each waiting call and the run goes on.
    while exit == Exit::Awaiting
        && state.session.status == SessionStatus::AwaitingApproval
        && crate::approval::interactive()
    {
        if let Some(file) = &file {
            file.save(&mut state).await?;
        }
        let Some(decisions) = crate::approval::ask_terminal(&state.session.pending_approvals).await
        else {
            break;
        };
        let input = SessionInput::Approvals(decisions);
        exit = agent::drive(&agent, &mut state.session, input, renderer).await;
    }
    if let Some(recorder) = recorder {
        recorder.finish().await;
    }
    if let Some(report) = report {
        report.write(&state.session, state.provider.name()).await?;
    }
    for client in clients {
        client.close().await;
    }
    if let Some(file) = &file {
        file.save(&mut state).await?;
        if exit == Exit::Awaiting && state.session.status == SessionStatus::AwaitingApproval {
            let _ = renderer.faint(&format!(
                "continue with: agentry resume --session {} --approve ID|all --deny ID[:REASON]",
                file.path().display()
            ));
        } else if exit == Exit::Awaiting {
            let _ = renderer.faint(&format!(
                "continue with: agentry resume --session {} --results RESULTS.json",
                file.path().display()
            ));
        }
    }
    Ok(exit)
}

/// The loop flags and the structured answer asked for, if any.
struct Run<'a> {
    loop_args: &'a LoopArgs,
    output: Option<(OutputSpec, OutputStrategy, u32)>,
    /// MCP servers whose tools the run gets.
    mcp: Vec<agent_mcp::client::ServerConfig>,
    /// `--report FILE`: the run's HTML page (`report.rs`).
    report: Option<&'a Path>,
}

/// `--output-schema` and its companions: the compiled schema, the strategy, the retries.
fn structured(args: &SchemaArgs) -> Result<Option<(OutputSpec, OutputStrategy, u32)>, Error> {
    let Some(path) = &args.output_schema else {
        return Ok(None);
    };
    let refuse =
        |message: String| Error::Usage(format!("--output-schema {}: {message}", path.display()));
    let text = std::fs::read_to_string(path)
        .map_err(|error| refuse(format!("cannot read it: {error}")))?;
    let schema: Value =
        serde_json::from_str(&text).map_err(|error| refuse(format!("not JSON: {error}")))?;
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        // Every provider's structured output (and the final-answer tool) takes an object.
        return Err(refuse(
            "the schema must describe an object (\"type\": \"object\")".to_owned(),
        ));
    }
    let spec = OutputSpec::from_schema(schema);
    let strategy = args.output_strategy.unwrap_or_default().into();
    Ok(Some((spec, strategy, args.max_output_retries.unwrap_or(1))))
}

/// The provider's backend, its key from the environment.
fn connect(api: Api, base_url: Option<&str>) -> Result<Box<dyn agent_types::Backend>, Error> {
    api.connect(base_url, None).map_err(|error| match error {
        agent_backends::Error::MissingKey { api, variable } => Error::MissingKey {
            provider: api,
            variable,
        },
        // A cloud's credentials, project or endpoint: the message names what to set.
        error @ agent_backends::Error::MissingCredentials { .. } => Error::Usage(error.to_string()),
        agent_backends::Error::MissingBaseUrl { api } => Error::Usage(format!(
            "--provider {api} needs --base-url (e.g. http://localhost:8000/v1); to see agentry \
             work without a server, run `agentry demo`"
        )),
        other => Error::Other(other.to_string()),
    })
}

/// The built-in tools by name; `read_file` needs a root.
pub(crate) fn registry(tools: &[BuiltinTool], root: Option<&Path>) -> Result<Registry, Error> {
    let mut registry = Registry::new();
    for tool in tools {
        let tool = match tool {
            BuiltinTool::Calculator => builtin::calculator(),
            BuiltinTool::Clock => builtin::clock(),
            BuiltinTool::ReadFile => {
                let Some(root) = root else {
                    return Err(Error::Usage(
                        "--tool read_file needs --root DIR: the one directory it may read".into(),
                    ));
                };
                builtin::read_file(root).map_err(|error| Error::Tools(error.to_string()))?
            }
        };
        registry
            .register(tool)
            .map_err(|error| Error::Tools(error.to_string()))?;
    }
    Ok(registry)
}

/// Declares a tool the caller runs: any arguments, results supplied with `agentry resume`.
fn add_remote_tool(session: &mut Session, name: &str) -> Result<(), Error> {
    agent_tools::validate_name(name)
        .map_err(|error| Error::Usage(format!("--remote-tool {name}: {error}")))?;
    if session.remote_tools.iter().any(|spec| spec.name == name) {
        return Ok(());
    }
    session.remote_tools.push(ToolSpec::new(
        name,
        format!("`{name}`: run by the user outside this conversation; its result arrives later."),
        json!({"type": "object", "additionalProperties": true}),
    ));
    Ok(())
}

/// The prompt from the arguments, or from stdin when there are none.
pub(crate) fn prompt(words: Vec<String>) -> Result<String, Error> {
    let prompt = if words.is_empty() {
        let mut stdin = std::io::stdin();
        if stdin.is_terminal() {
            return Err(Error::Usage(
                "no prompt: give it as an argument (`agentry run \"…\"`) or on stdin".into(),
            ));
        }
        let mut text = String::new();
        stdin
            .read_to_string(&mut text)
            .map_err(|error| Error::Usage(format!("cannot read the prompt from stdin: {error}")))?;
        // The newline that ends piped input is not part of the question.
        text.truncate(text.trim_end().len());
        text
    } else {
        words.join(" ")
    };
    if prompt.trim().is_empty() {
        return Err(Error::Usage("the prompt is empty".into()));
    }
    Ok(prompt)
}

pub(crate) fn read_results(path: &Path) -> Result<String, Error> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|error| Error::Usage(format!("cannot read results from stdin: {error}")))?;
        return Ok(text);
    }
    std::fs::read_to_string(path).map_err(|error| {
        Error::Usage(format!(
            "cannot read {}: {error}",
            PathBuf::from(path).display()
        ))
    })
}

/// The results file: an object mapping call ids to outputs, or an array of results
/// (`{"tool_call_id", "content", "is_error"?}`; `id` and `output` are accepted too). An output
/// that is not a string is sent as its JSON text, except, in the array form, a list of
/// content blocks (`docs/wire-format.md`), which is sent as those blocks. Names come from the
/// pending calls.
pub(crate) fn parse_results(text: &str, pending: &[ToolCall]) -> Result<Vec<ToolResult>, String> {
    let value: Value = serde_json::from_str(text).map_err(|error| format!("not JSON: {error}"))?;
    let name_of = |id: &str| {
        pending
            .iter()
            .find(|call| call.id.as_str() == id)
            .map_or_else(String::new, |call| call.name.clone())
    };
    let as_content = |value: &Value| match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    match value {
        Value::Object(map) => Ok(map
            .iter()
            .map(|(id, output)| ToolResult::ok(id.as_str(), name_of(id), as_content(output)))
            .collect()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(index, item)| {
                let id = item
                    .get("tool_call_id")
                    .or_else(|| item.get("id"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("result {index} has no `tool_call_id`"))?;
                let content = item
                    .get("content")
                    .or_else(|| item.get("output"))
                    .ok_or_else(|| format!("result {index} ({id}) has no `content`"))?;
                let is_error = item
                    .get("is_error")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                // A list of content blocks in the documented form (`docs/wire-format.md`)
                // is a rich result (an image, a file); any other value is its JSON text.
                let blocks = match content {
                    Value::Array(items) if !items.is_empty() => {
                        serde_json::from_value::<Vec<ToolResultBlock>>(content.clone()).ok()
                    }
                    _ => None,
                };
                let mut result = match blocks {
                    Some(blocks) => ToolResult::with_blocks(id, name_of(id), blocks),
                    None => ToolResult::ok(id, name_of(id), as_content(content)),
                };
                result.is_error = is_error;
                Ok(result)
            })
            .collect(),
        _ => Err("expected an object of call id → output, or an array of results".into()),
    }
}

fn status_name(status: SessionStatus) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|value| value.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{status:?}"))
}

#[cfg(feature = "temporal")]
/// What a durable run needs from the flags and agentry.toml, resolved as `agentry run`
/// resolves them: the backend, the loop's options with the tools, and a new session
/// (`agentry worker` and `agentry run --temporal`, crate::temporal).
pub(crate) fn durable_parts(
    flags: &ModelArgs,
    loop_args: &LoopArgs,
) -> Result<(Box<dyn agent_types::Backend>, agent_loop::Options, Session), Error> {
    let config = Config::load(flags.config.as_deref())?;
    let mut state = settle(None, flags, &config, None)?;
    let settings = LoopSettings::resolve(loop_args, &config.merged)?;
    let tools = registry(&state.tools, state.root.as_deref())?;
    let model = connect(state.provider, state.base_url.as_deref())?;
    let mut prices = rate_card(&config.merged);
    if state.provider == Api::Ollama && prices.price(&state.session.model).is_none() {
        prices.insert(state.session.model.clone(), ModelPrice::default());
    }
    state
        .require_approval
        .extend(settings.require_approval.iter().cloned());
    let mut options = settings
        .options(prices)
        .with_tools(tools)
        .require_approval_for(state.require_approval.iter().cloned());
    // A worker's --guardrail and --policy: its activities screen, run and check with them.
    options.guardrails = crate::guardrails::from_flags(loop_args)?;
    Ok((model, options, state.session))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn state(provider: Api, base_url: Option<&str>, tools: &[BuiltinTool]) -> SessionState {
        let mut state = SessionState::new(provider, Session::new("m"));
        state.base_url = base_url.map(str::to_owned);
        state.tools = tools.to_vec();
        state
    }

    fn say(provider: Api, base_url: Option<&str>, tools: &[BuiltinTool]) -> Say {
        Say {
            provider,
            base_url: base_url.map(str::to_owned),
            tools: tools.to_vec(),
            root: None,
        }
    }

    #[test]
    fn a_doubted_base_url_or_read_file_is_refused_unless_the_user_says_the_same() {
        let mut planted = state(Api::Openai, Some("http://evil.example/v1?k=1"), &[]);
        let refused = vet(&mut planted, &say(Api::Openai, None, &[]));
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(refused[0].contains("OPENAI_API_KEY"), "{refused:?}");
        assert!(
            !refused[0].contains("k=1"),
            "the query is never shown: {refused:?}"
        );

        let mut confirmed = state(Api::Openai, Some("http://proxy:8000/v1"), &[]);
        let user = say(Api::Openai, Some("http://proxy:8000/v1"), &[]);
        assert!(vet(&mut confirmed, &user).is_empty());

        // The user's proxy with another provider's key: refused.
        let mut switched = state(Api::Anthropic, Some("http://proxy:8000/v1"), &[]);
        let refused = vet(&mut switched, &user);
        assert!(refused[0].contains("ANTHROPIC_API_KEY"), "{refused:?}");
        // Without a base URL a provider's key goes to that provider: not refused.
        let mut official = state(Api::Anthropic, None, &[]);
        assert!(vet(&mut official, &say(Api::Openai, None, &[])).is_empty());

        let mut reads = state(Api::Openai, None, &[BuiltinTool::ReadFile]);
        reads.root = Some(PathBuf::from("/"));
        let refused = vet(&mut reads, &say(Api::Openai, None, &[]));
        assert_eq!(refused.len(), 2, "{refused:?}");
        let mut harmless = state(Api::Openai, None, &[BuiltinTool::Calculator]);
        assert!(vet(&mut harmless, &say(Api::Openai, None, &[])).is_empty());
    }

    #[test]
    fn a_doubted_root_without_read_file_is_dropped_not_kept() {
        let mut planted = state(Api::Openai, None, &[]);
        planted.root = Some(PathBuf::from("/"));
        assert!(vet(&mut planted, &say(Api::Openai, None, &[])).is_empty());
        assert_eq!(planted.root, None);
    }

    fn pending() -> Vec<ToolCall> {
        vec![
            ToolCall::new("call_1", "lookup", json!({"q": "a"})),
            ToolCall::new("call_2", "lookup", json!({"q": "b"})),
        ]
    }

    #[test]
    fn results_as_a_map_or_an_array() {
        let map = parse_results(r#"{"call_1": "found", "call_2": {"n": 2}}"#, &pending()).unwrap();
        assert_eq!(map[0].content, "found");
        assert_eq!(map[0].name, "lookup");
        assert_eq!(map[1].content, r#"{"n":2}"#);

        let array = parse_results(
            r#"[{"tool_call_id": "call_2", "content": "no", "is_error": true}, {"id": "call_1", "output": 7}]"#,
            &pending(),
        )
        .unwrap();
        assert!(array[0].is_error);
        assert_eq!(array[1].content, "7");
    }

    #[test]
    fn a_list_of_content_blocks_is_a_rich_result_and_any_other_list_its_json_text() {
        let text = r#"[{"tool_call_id": "call_1", "content": [
            {"type": "text", "text": "the chart:"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]},
          {"tool_call_id": "call_2", "content": [1, {"type": "nope"}]}]"#;
        let results = parse_results(text, &pending()).unwrap();
        assert_eq!(results[0].content, "the chart:");
        assert_eq!(results[0].blocks.len(), 1, "{results:?}");
        assert!(matches!(
            results[0].blocks[0],
            ToolResultBlock::Image { .. }
        ));
        assert_eq!(results[1].content, r#"[1,{"type":"nope"}]"#);
        assert!(results[1].blocks.is_empty());
        // The map form keeps every value as JSON text.
        let map =
            parse_results(r#"{"call_1": [{"type": "text", "text": "x"}]}"#, &pending()).unwrap();
        assert_eq!(map[0].content, r#"[{"text":"x","type":"text"}]"#);
    }

    #[test]
    fn malformed_results_say_what_is_missing() {
        assert!(
            parse_results("[{\"content\": 1}]", &pending())
                .unwrap_err()
                .contains("tool_call_id")
        );
        assert!(
            parse_results("[{\"id\": \"call_1\"}]", &pending())
                .unwrap_err()
                .contains("content")
        );
        assert!(
            parse_results("3", &pending())
                .unwrap_err()
                .contains("expected")
        );
        assert!(
            parse_results("{", &pending())
                .unwrap_err()
                .contains("not JSON")
        );
    }

    #[test]
    fn remote_tools_need_valid_names_and_are_declared_once() {
        let mut session = Session::new("m");
        add_remote_tool(&mut session, "approve").unwrap();
        add_remote_tool(&mut session, "approve").unwrap();
        assert_eq!(session.remote_tools.len(), 1);
        assert!(add_remote_tool(&mut session, "no spaces").is_err());
    }
}
