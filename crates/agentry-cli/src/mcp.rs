//! MCP servers for a run: `--mcp` flags and `[[mcp]]` entries of `agentry.toml`, connected
//! and imported with `agent_mcp`; and `agentry mcp tools`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_mcp::client::{McpClient, ServerConfig};
use agent_tools::Registry;
use clap::Args;
use serde::Deserialize;
use serde_json::json;

use crate::config::Config;
use crate::error::Error;

/// `--mcp` and `--mcp-name` (`agentry run`, `agentry resume`, `agentry mcp tools`).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct McpArgs {
    /// Add an MCP server's tools (repeatable): a command run with its arguments (split like a
    /// shell would, without a shell: 'npx -y @modelcontextprotocol/server-everything') or a
    /// streamable HTTP URL (https://host/mcp). Its tools are named SERVER_TOOL
    #[arg(long = "mcp", value_name = "COMMAND|URL")]
    pub(crate) servers: Vec<String>,
    /// The name (tool prefix) of the --mcp at the same position [default: from the command's
    /// package or program, or the URL's host]
    #[arg(long = "mcp-name", value_name = "NAME")]
    pub(crate) names: Vec<String>,
}

/// One `[[mcp]]` entry of `agentry.toml`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct McpEntry {
    /// The tool prefix [default: derived like `--mcp`'s].
    pub(crate) name: Option<String>,
    /// A stdio server's program.
    pub(crate) command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub(crate) args: Vec<String>,
    /// Variables added to its environment; `${VAR}` in a value is taken from agentry's.
    #[serde(default)]
    pub(crate) env: BTreeMap<String, String>,
    /// Its working directory, relative to the file's directory.
    pub(crate) cwd: Option<PathBuf>,
    /// A streamable HTTP server's URL.
    pub(crate) url: Option<String>,
    /// Headers sent to it; `${VAR}` in a value is taken from the environment (and never
    /// printed).
    #[serde(default)]
    pub(crate) headers: BTreeMap<String, String>,
    /// The environment variable holding a bearer token for it.
    pub(crate) bearer_env: Option<String>,
    /// Import only these tools (the server's names).
    pub(crate) allow: Option<Vec<String>>,
    /// Never import these tools.
    #[serde(default)]
    pub(crate) deny: Vec<String>,
    /// Seconds one call may take [default: 300].
    pub(crate) timeout_secs: Option<f64>,
}

impl McpEntry {
    /// A relative `cwd` means "next to the config file".
    pub(crate) fn anchor(&mut self, file: &Path) {
        if let Some(cwd) = self.cwd.take() {
            let base = file.parent().unwrap_or(Path::new("."));
            self.cwd = Some(if cwd.is_relative() {
                base.join(cwd)
            } else {
                cwd
            });
        }
    }

    /// What the entry reaches, for messages (never a header or env value).
    pub(crate) fn describe(&self) -> String {
        match (&self.command, &self.url) {
            (Some(command), _) => {
                let mut line = command.clone();
                for arg in &self.args {
                    line.push(' ');
                    line.push_str(arg);
                }
                format!("command = \"{line}\"")
            }
            (None, Some(url)) => format!("url = \"{url}\""),
            (None, None) => "an entry without command or url".to_owned(),
        }
    }
}

/// `${VAR}` in `value` replaced by the environment's; a variable that is not set is an error
/// naming it (`what` says where), never showing the value.
fn expand(value: &str, what: &str) -> Result<String, Error> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(Error::Usage(format!(
                "{what}: an unclosed `${{` in its value"
            )));
        };
        let name = &after[..end];
        let value = std::env::var(name).map_err(|_| {
            Error::Usage(format!(
                "{what}: the environment variable {name} is not set"
            ))
        })?;
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The file-name stems that say nothing about a server; the directory above them does.
const GENERIC: &[&str] = &[
    "index", "main", "server", "cli", "dist", "build", "lib", "src", "bin",
];
/// Programs that run a package or script named in their arguments.
const LAUNCHERS: &[&str] = &[
    "npx", "node", "bunx", "bun", "deno", "uvx", "uv", "python", "python3", "pipx", "sh", "bash",
];

/// A server's default name: the package or script a launcher runs (`@scope/name` gives
/// `name`, `.../server-everything/dist/index.js` gives `server-everything`), else the
/// program; for a URL, its host with dots as `_`.
pub(crate) fn default_name(command: &str, args: &[String]) -> String {
    let stem = |path: &str| -> Option<String> {
        let parts: Vec<&str> = path.split(['/', '\\']).filter(|p| !p.is_empty()).collect();
        parts
            .iter()
            .rev()
            .map(|part| part.split('@').next().unwrap_or(part))
            .map(|part| part.rsplit_once('.').map_or(part, |(stem, _)| stem))
            .find(|stem| !stem.is_empty() && !GENERIC.contains(stem))
            .map(str::to_owned)
    };
    let program = stem(command).unwrap_or_else(|| command.to_owned());
    if LAUNCHERS.contains(&program.as_str())
        && let Some(target) = args
            .iter()
            .find(|arg| !arg.starts_with('-') && !matches!(arg.as_str(), "run" | "x" | "exec"))
        && let Some(name) = stem(target.trim_start_matches('@'))
    {
        return name;
    }
    program
}

fn url_name(url: &str) -> String {
    let host = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .split(['/', ':', '?'])
        .next()
        .unwrap_or_default();
    host.replace('.', "_")
}

/// One `--mcp` value as a server.
pub(crate) fn from_flag(spec: &str, name: Option<&str>) -> Result<ServerConfig, Error> {
    if spec.starts_with("http://") || spec.starts_with("https://") {
        let name = name.map_or_else(|| url_name(spec), str::to_owned);
        return Ok(ServerConfig::http(name, spec));
    }
    let words = shlex::split(spec)
        .filter(|words| !words.is_empty())
        .ok_or_else(|| {
            Error::Usage(format!(
                "--mcp {spec:?}: not a command (unbalanced quotes?) or an http(s) URL"
            ))
        })?;
    let (command, args) = words
        .split_first()
        .ok_or_else(|| Error::Usage("--mcp: empty".into()))?;
    let name = name.map_or_else(|| default_name(command, args), str::to_owned);
    Ok(ServerConfig::stdio(name, command.clone(), args.to_vec()))
}

/// One `[[mcp]]` entry as a server, `${VAR}`s resolved.
pub(crate) fn from_entry(entry: &McpEntry) -> Result<ServerConfig, Error> {
    let mut config = match (&entry.command, &entry.url) {
        (Some(command), None) => {
            let name = entry
                .name
                .clone()
                .unwrap_or_else(|| default_name(command, &entry.args));
            let mut config = ServerConfig::stdio(name.clone(), command.clone(), entry.args.clone());
            for (key, value) in &entry.env {
                config = config.env(key, expand(value, &format!("[[mcp]] {name}: env.{key}"))?);
            }
            if let Some(cwd) = &entry.cwd {
                config = config.cwd(cwd);
            }
            config
        }
        (None, Some(url)) => {
            let name = entry.name.clone().unwrap_or_else(|| url_name(url));
            let mut config = ServerConfig::http(name.clone(), url.clone());
            for (key, value) in &entry.headers {
                config = config.header(
                    key,
                    expand(value, &format!("[[mcp]] {name}: headers.{key}"))?,
                );
            }
            if let Some(variable) = &entry.bearer_env {
                let token = std::env::var(variable).map_err(|_| {
                    Error::Usage(format!(
                        "[[mcp]] {name}: bearer_env names {variable}, which is not set"
                    ))
                })?;
                config = config.bearer(token);
            }
            config
        }
        _ => {
            return Err(Error::Usage(format!(
                "[[mcp]] {}: give exactly one of `command` (a stdio server) or `url` (streamable HTTP)",
                entry.name.as_deref().unwrap_or("(unnamed)")
            )));
        }
    };
    if let Some(allow) = &entry.allow {
        config = config.allow(allow.iter().cloned());
    }
    config = config.deny(entry.deny.iter().cloned());
    if let Some(secs) = entry.timeout_secs {
        // `try_`: `from_secs_f64` panics on a finite value too large for a `Duration`.
        let timeout = Duration::try_from_secs_f64(secs)
            .ok()
            .filter(|_| secs > 0.0);
        let Some(timeout) = timeout else {
            return Err(Error::Usage(format!(
                "[[mcp]] {}: timeout_secs must be a positive number of seconds",
                config.name()
            )));
        };
        config = config.call_timeout(timeout);
    }
    Ok(config)
}

/// The servers of a command: `[[mcp]]` entries from the files the user vouches for, then the
/// `--mcp` flags. Entries from a project file the user has not trusted are refused: they
/// would start programs (or send headers built from the environment) on the file's say.
pub(crate) fn servers(flags: &McpArgs, config: &Config) -> Result<Vec<ServerConfig>, Error> {
    if flags.names.len() > flags.servers.len() {
        return Err(Error::Usage(format!(
            "{} --mcp-name for {} --mcp: each name goes with the --mcp at its position",
            flags.names.len(),
            flags.servers.len()
        )));
    }
    if let Some((path, verdict)) = &config.untrusted
        && config.merged.mcp != config.trusted.mcp
    {
        let entries = config.merged.mcp.as_deref().unwrap_or_default();
        let mut message = format!(
            "refused: the project configuration {} {}, and it sets what only you may set:\n",
            path.display(),
            if *verdict == crate::trust::Verdict::Changed {
                "has changed since it was trusted"
            } else {
                "is not trusted (a file in the directory you run in is not yours until you say so)"
            }
        );
        for entry in entries {
            message.push_str(&format!(
                "  - [[mcp]] {} (it would start a program or connect with your environment's secrets)\n",
                entry.describe()
            ));
        }
        message.push_str(&format!(
            "Nothing was started. If you wrote this file or have read it, trust it with `agentry trust {}`; \
             or give the servers as --mcp flags.",
            path.display()
        ));
        return Err(Error::Untrusted(message));
    }
    let mut servers = Vec::new();
    for entry in config.trusted.mcp.as_deref().unwrap_or_default() {
        servers.push(from_entry(entry)?);
    }
    for (i, spec) in flags.servers.iter().enumerate() {
        servers.push(from_flag(spec, flags.names.get(i).map(String::as_str))?);
    }
    Ok(servers)
}

fn mcp_error(error: agent_mcp::Error) -> Error {
    match error {
        agent_mcp::Error::Connect { .. } | agent_mcp::Error::Request { .. } => {
            Error::Other(error.to_string())
        }
        other => Error::Tools(other.to_string()),
    }
}

/// Connects to every server and adds its tools to `registry`; the clients must outlive the
/// run (their tools call through them).
pub(crate) async fn connect_into(
    servers: Vec<ServerConfig>,
    registry: &mut Registry,
) -> Result<Vec<McpClient>, Error> {
    let mut clients = Vec::with_capacity(servers.len());
    for server in servers {
        let client = McpClient::connect(server).await.map_err(mcp_error)?;
        client.register_into(registry).map_err(mcp_error)?;
        clients.push(client);
    }
    Ok(clients)
}

/// `agentry mcp tools`: each imported tool as one JSON line.
pub(crate) async fn tools(flags: &McpArgs, config_path: Option<&Path>) -> Result<(), Error> {
    // Warnings (tools skipped, connections lost) on stderr; `RUST_LOG=info` adds each stdio
    // server's own stderr lines, for debugging a server.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let config = Config::load(config_path)?;
    let servers = servers(flags, &config)?;
    if servers.is_empty() {
        return Err(Error::Usage(
            "no MCP server: give one with --mcp 'COMMAND ARGS…' or --mcp URL, or in [[mcp]] of agentry.toml"
                .into(),
        ));
    }
    let mut registry = Registry::new();
    let clients = connect_into(servers, &mut registry).await?;
    let mut stdout = std::io::stdout().lock();
    let write = |error: std::io::Error| Error::Other(format!("cannot write the output: {error}"));
    for client in &clients {
        for tool in client.tools().iter() {
            let line = json!({
                "name": tool.name,
                "description": tool.description,
                "input_schema": tool.input_schema,
            });
            writeln!(stdout, "{line}").map_err(write)?;
        }
    }
    stdout.flush().map_err(write)?;
    for client in clients {
        client.close().await;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_package_the_program_or_the_host() {
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            default_name(
                "npx",
                &args(&["-y", "@modelcontextprotocol/server-everything"])
            ),
            "server-everything"
        );
        assert_eq!(
            default_name(
                "/usr/bin/node",
                &args(&["/x/server-everything/dist/index.js", "stdio"])
            ),
            "server-everything"
        );
        assert_eq!(
            default_name("uvx", &args(&["mcp-server-git@1.2"])),
            "mcp-server-git"
        );
        assert_eq!(default_name("/opt/bin/my-server", &[]), "my-server");
        assert_eq!(
            url_name("https://api.example.com:8443/mcp"),
            "api_example_com"
        );
    }

    #[test]
    fn flags_split_like_a_shell_without_one() {
        let config = from_flag("node '/a b/index.js' stdio", Some("ev")).unwrap();
        assert_eq!(config.name(), "ev");
        let agent_mcp::client::Transport::Stdio { command, args, .. } = config.transport() else {
            panic!("{config:?}")
        };
        assert_eq!(command, "node");
        assert_eq!(args, &["/a b/index.js", "stdio"]);
        // `;` is an argument, not a command separator: no shell runs.
        let config = from_flag("echo hi; rm -rf /", None).unwrap();
        let agent_mcp::client::Transport::Stdio { args, .. } = config.transport() else {
            panic!()
        };
        assert_eq!(args, &["hi;", "rm", "-rf", "/"]);
        assert!(from_flag("node 'unclosed", None).is_err());
        let http = from_flag("https://example.com/mcp", None).unwrap();
        assert_eq!(http.name(), "example_com");
    }

    #[test]
    fn header_values_take_variables_from_the_environment_and_never_show_them() {
        let error = expand(
            "Bearer ${AGENTRY_TEST_SURELY_UNSET_VAR}",
            "[[mcp]] x: headers.A",
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "[[mcp]] x: headers.A: the environment variable AGENTRY_TEST_SURELY_UNSET_VAR is not set"
        );
        let path = std::env::var("PATH").unwrap();
        assert_eq!(expand("p=${PATH}!", "x").unwrap(), format!("p={path}!"));
        let entry = McpEntry {
            url: Some("https://h/mcp".into()),
            headers: BTreeMap::from([("X-Key".to_owned(), "${PATH}".to_owned())]),
            ..McpEntry::default()
        };
        let config = from_entry(&entry).unwrap();
        assert!(
            !format!("{config:?}").contains(&path),
            "Debug shows header names only"
        );
    }

    #[test]
    fn an_entry_needs_exactly_one_of_command_and_url() {
        let both = McpEntry {
            command: Some("x".into()),
            url: Some("https://h/mcp".into()),
            ..McpEntry::default()
        };
        assert!(
            from_entry(&both)
                .unwrap_err()
                .to_string()
                .contains("exactly one")
        );
        assert!(from_entry(&McpEntry::default()).is_err());
    }
}
