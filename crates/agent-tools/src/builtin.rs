//! Ready-made tools: a [`calculator`], a [`clock`] and a [`read_file`] confined to one directory.
//!
//! They are what the `agentry` CLI offers with `--tool calculator --tool clock --tool read_file
//! --root DIR`, and each is an ordinary [`Tool`]: register it in a [`Registry`](crate::Registry)
//! next to your own. Every expected failure (a malformed expression, an unknown offset, a path
//! outside the directory) goes back to the model as a
//! [`respond_to_model`](ToolError::respond_to_model) error written for it to act on; none stops
//! the loop.
//!
//! | tool | arguments | result |
//! |---|---|---|
//! | `calculator` | `{"expression": string}` | `{"expression", "result"}` |
//! | `clock` | `{"utc_offset"?: string}` | `{"utc", "unix", "local"?, "weekday"}` |
//! | `read_file` | `{"path": string, "max_bytes"?: integer}` | `{"path", "bytes", "truncated", "content"}` |
//!
//! This module needs the `builtin` feature, which pulls Tokio (its blocking pool runs the file
//! reads). It is not a sandbox: `read_file` checks the paths a model asks for, it does not
//! defend against a local process racing it by swapping files for symlinks.
//!
//! # Example
//!
//! ```
//! use agent_tools::builtin::{calculator, clock};
//! use agent_tools::{Registry, ToolContext, collect_output};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut tools = Registry::new();
//! tools.register(calculator())?;
//! tools.register(clock())?;
//!
//! let calc = tools.get("calculator").ok_or("not registered")?;
//! let call = calc.invoke(json!({"expression": "19 - 4"}), ToolContext::new("call_1", "calculator"));
//! let output = collect_output(call).await;
//! assert_eq!(output.result?, json!({"expression": "19 - 4", "result": 15}));
//!
//! let call = calc.invoke(json!({"expression": "1 / 0"}), ToolContext::new("call_2", "calculator"));
//! let error = collect_output(call).await.result.unwrap_err();
//! assert!(!error.is_fatal());
//! assert!(error.message().contains("division by zero at byte 2"));
//! # Ok(())
//! # }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::Tool;

pub mod calc;
mod clock;
mod read_file;

/// How many bytes `read_file` returns when the call does not say.
pub const DEFAULT_READ_BYTES: u64 = 64 * 1024;

/// The most bytes `read_file` returns, whatever the call asks for.
pub const MAX_READ_BYTES: u64 = 1024 * 1024;

/// The arguments of [`calculator`].
#[derive(Deserialize, JsonSchema)]
struct CalculatorArgs {
    /// The arithmetic expression, e.g. "(19 - 4) * 1.8". Operators: + - * / % and ^ (power);
    /// parentheses; constants pi and e; functions sqrt abs ln log10 log2 exp sin cos tan asin
    /// acos atan (radians) floor ceil round min(a, b, ...) max(a, b, ...) pow(a, b).
    expression: String,
}

/// The calculator tool: evaluates an arithmetic expression with [`calc::evaluate`].
///
/// Arguments `{"expression": string}`; result `{"expression": <as given>, "result": <number>}`,
/// where an integral result smaller than 2^53 in magnitude is a JSON integer (`15`, not
/// `15.0`). A [`CalcError`](calc::CalcError) goes back to the model, naming the byte where the
/// expression went wrong.
pub fn calculator() -> Tool {
    Tool::from_fn(
        "calculator",
        "Evaluates an arithmetic expression and returns the number. Use it for any arithmetic \
         instead of computing in your head. Supports + - * / % ^, parentheses, pi, e and common \
         functions such as sqrt, ln, sin (radians), round, min, max and pow.",
        |args: CalculatorArgs, _ctx| async move {
            match calc::evaluate(&args.expression) {
                Ok(value) => Ok(json!({"expression": args.expression, "result": number(value)})),
                Err(error) => Err(ToolError::respond_to_model(format!(
                    "could not evaluate the expression: {error}"
                ))),
            }
        },
    )
}

/// A finite `value` as JSON: an integer when it is one and fits exactly, a float otherwise.
fn number(value: f64) -> Value {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if value.fract() == 0.0 && value.abs() < EXACT {
        // Exact: an integral value below 2^53 converts to i64 without loss.
        Value::from(value as i64)
    } else {
        Value::from(value)
    }
}

/// The arguments of [`clock`].
#[derive(Deserialize, JsonSchema)]
struct ClockArgs {
    /// A UTC offset such as "+02:00", "-05:30" or "Z" (between -12:00 and +14:00). When given,
    /// the result also has the local time at that offset.
    utc_offset: Option<String>,
}

/// The clock tool: the current date and time.
///
/// Arguments `{"utc_offset"?: string}` (`"+02:00"`, `"-05:30"`, `"Z"`; also `"+0200"` and
/// `"+02"`). Result `{"utc": "2026-11-22T10:15:03Z", "unix": 1795342503, "local":
/// "2026-11-22T12:15:03+02:00", "weekday": "Sunday"}`, to the second; `local` only when an
/// offset was given, and `weekday` is the local one then, the UTC one otherwise. An offset
/// that does not parse goes back to the model. Time zone names are not understood: the
/// model must know the offset.
pub fn clock() -> Tool {
    Tool::from_fn(
        "clock",
        "The current date and time in UTC (RFC 3339), as Unix seconds, and the weekday. Pass \
         utc_offset (e.g. \"+02:00\") to also get the local time at that offset.",
        |args: ClockArgs, _ctx| async move {
            clock::clock_at(SystemTime::now(), args.utc_offset.as_deref())
        },
    )
}

/// Why [`read_file`] could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadFileError {
    /// The root does not exist or cannot be resolved.
    #[error("the read_file root `{}` cannot be opened: {source}", root.display())]
    RootUnavailable {
        /// The root as given.
        root: PathBuf,
        /// Why it cannot be resolved.
        source: std::io::Error,
    },
    /// The root exists but is not a directory.
    #[error("the read_file root `{}` is not a directory", root.display())]
    RootNotADirectory {
        /// The root as given.
        root: PathBuf,
    },
}

/// The arguments of [`read_file`].
#[derive(Deserialize, JsonSchema)]
struct ReadFileArgs {
    /// The file's path relative to the allowed directory, e.g. "notes/todo.md".
    path: String,
    /// The most bytes to return (default 65536, at most 1048576). A longer file is cut at a
    /// character boundary and marked truncated.
    max_bytes: Option<u64>,
}

/// The read_file tool: reads a UTF-8 text file inside `root`.
///
/// `root` is resolved once, here (canonicalized: symlinks and `..` resolved); it must exist
/// and be a directory. This call touches the file system synchronously; the tool's calls do
/// not, they run on Tokio's blocking pool (or inline when invoked outside a Tokio runtime).
///
/// Arguments `{"path": string, "max_bytes"?: integer}`. The path is relative to `root`; an
/// absolute path is accepted only when it resolves inside `root`. Each call resolves the path
/// (`..` and symlinks included) and refuses anything that lands outside `root`, directories,
/// special files and files that are not UTF-8. It reads at most `max_bytes` bytes
/// ([`DEFAULT_READ_BYTES`] unless given, never more than [`MAX_READ_BYTES`]) and returns
/// `{"path": <relative to root>, "bytes": <file size>, "truncated": bool, "content": string}`,
/// cutting at a character boundary. Messages to the model show paths relative to `root`, never
/// the root's own location.
///
/// When the call's context carries a result cap ([`ToolContext::max_result_bytes`], which the
/// loop sets), it reads no more than the cap (and one byte to tell whether there is more),
/// whatever `max_bytes` says, and cuts `content` so that the whole result fits the cap once
/// escaped for the request: the model gets a well-formed result marked `"truncated": true`
/// rather than one cut mid-JSON, and 300 concurrent calls on a 1 MiB file hold 300 times the
/// cap, not 300 MiB.
pub fn read_file(root: impl AsRef<Path>) -> Result<Tool, ReadFileError> {
    let given = root.as_ref();
    let canonical =
        std::fs::canonicalize(given).map_err(|source| ReadFileError::RootUnavailable {
            root: given.to_path_buf(),
            source,
        })?;
    if !canonical.is_dir() {
        return Err(ReadFileError::RootNotADirectory {
            root: given.to_path_buf(),
        });
    }
    let root: Arc<Path> = Arc::from(canonical);
    Ok(Tool::from_fn(
        "read_file",
        "Reads a UTF-8 text file from the allowed directory and returns its content. The path \
         is relative to that directory. Long files are cut to max_bytes and marked truncated.",
        move |args: ReadFileArgs, ctx: ToolContext| {
            let root = Arc::clone(&root);
            let result_cap = ctx.max_result_bytes();
            async move {
                let limit = args
                    .max_bytes
                    .unwrap_or(DEFAULT_READ_BYTES)
                    .min(MAX_READ_BYTES);
                // At most MAX_READ_BYTES, which fits any usize.
                let limit = usize::try_from(limit).unwrap_or(usize::MAX);
                let contents = read_file::read(root, args.path, limit, result_cap).await?;
                Ok(contents.into_json())
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integral_results_are_integers() {
        assert_eq!(number(15.0), json!(15));
        assert_eq!(number(-0.0), json!(0));
        assert_eq!(number(-3.0), json!(-3));
        assert_eq!(
            number(9_007_199_254_740_991.0),
            json!(9_007_199_254_740_991_i64)
        );
        assert_eq!(
            number(9_007_199_254_740_992.0),
            json!(9_007_199_254_740_992.0)
        );
        assert_eq!(number(1e300), json!(1e300));
        assert_eq!(number(2.5), json!(2.5));
        assert_eq!(number(-0.125), json!(-0.125));
    }
}
