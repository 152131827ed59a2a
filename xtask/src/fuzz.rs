//! `cargo xtask fuzz [--cases N] [--target NAME]`: a long fuzzing campaign.
//!
//! Every target is a set of proptest properties (`tests/fuzz.rs` of a crate; the CLI's
//! `config_fuzz` module and `agentry replay` run as a process) whose case count comes from `AGENTRY_FUZZ_CASES`. A plain test run
//! (and `cargo xtask ci`) runs a few hundred cases per property; this runs as many as asked,
//! outside CI. A failure is shrunk and saved by proptest in the crate's
//! `*.proptest-regressions` file, which is replayed first on every later run: commit it with
//! the fix and a named unit test (docs/reliability.md, "Fuzzing").

use crate::step::{self, cargo_command};

/// The cases per property `cargo xtask ci` runs: a few seconds per target.
pub(crate) const CI_CASES: &str = "128";

/// The cases per property of a campaign unless `--cases` says otherwise (about 20 properties:
/// two million cases in all).
const DEFAULT_CASES: u64 = 100_000;

/// Each target: its name and the `cargo test` arguments that select its properties.
const TARGETS: [(&str, &[&str]); 5] = [
    (
        "backends",
        &["-p", "agent-backends", "--all-features", "--test", "fuzz"],
    ),
    (
        "conversation",
        &[
            "-p",
            "agent-conversation",
            "--all-features",
            "--test",
            "fuzz",
        ],
    ),
    (
        "loop",
        &["-p", "agent-loop", "--all-features", "--test", "fuzz"],
    ),
    (
        "server",
        &["-p", "agent-server", "--all-features", "--test", "fuzz"],
    ),
    (
        "cli",
        &[
            "-p",
            "agentry-cli",
            "--all-features",
            "--bin",
            "agentry",
            "--test",
            "fuzz",
            // Selects `config_fuzz::*` in the binary and every test of `tests/fuzz.rs`.
            "fuzz",
        ],
    ),
];

pub(crate) const USAGE: &str = "\
usage: cargo xtask fuzz [--cases N] [--target NAME]

  --cases N      cases per property (default 100000)
  --target NAME  one of: backends, conversation, loop, server, cli (default: all)
";

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut cases = DEFAULT_CASES;
    let mut only: Option<String> = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--cases" => {
                cases = args
                    .next()
                    .and_then(|value| value.replace('_', "").parse().ok())
                    .filter(|&n: &u64| n > 0)
                    .ok_or_else(|| format!("--cases needs a positive number\n{USAGE}"))?;
            }
            "--target" => {
                let name = args
                    .next()
                    .ok_or_else(|| format!("--target needs a name\n{USAGE}"))?;
                if !TARGETS.iter().any(|(target, _)| target == name) {
                    return Err(format!("unknown target `{name}`\n{USAGE}"));
                }
                only = Some(name.clone());
            }
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    for (name, selection) in TARGETS {
        if only.as_deref().is_some_and(|only| only != name) {
            continue;
        }
        let mut args = vec!["test", "--locked"];
        args.extend_from_slice(selection);
        let mut command = cargo_command(&args);
        command.env("AGENTRY_FUZZ_CASES", cases.to_string());
        step::run(
            &format!("fuzz {name} ({cases} cases per property)"),
            &mut command,
        )?;
    }
    Ok(())
}
