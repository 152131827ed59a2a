//! Running one named step: a cargo subprocess whose failure stops the run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The workspace root (xtask lives one level below it). `cargo xtask` sets the manifest
/// directory when it runs us; the one compiled in is only the fallback, because a target
/// directory shared between checkouts (CI's clones) keeps a binary built in another one.
pub(crate) fn workspace_root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    manifest_dir
        .parent()
        .map_or_else(|| manifest_dir.clone(), Path::to_path_buf)
}

/// A `cargo` command run from the workspace root, using the same cargo that runs xtask.
pub(crate) fn cargo_command(args: &[&str]) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.args(args).current_dir(workspace_root());
    command
}

/// Runs `cargo <args>` as the step `name`.
pub(crate) fn cargo(name: &str, args: &[&str]) -> Result<(), String> {
    run(name, &mut cargo_command(args))
}

/// Runs `command` as the step `name`, printing a header and how long it took.
pub(crate) fn run(name: &str, command: &mut Command) -> Result<(), String> {
    println!("\n==> {name}");
    let started = Instant::now();
    let status = command
        .status()
        .map_err(|error| format!("{name}: could not start {command:?}: {error}"))?;
    let seconds = started.elapsed().as_secs_f64();
    if status.success() {
        println!("==> {name}: ok ({seconds:.1}s)");
        Ok(())
    } else {
        Err(format!("{name} failed ({status}) after {seconds:.1}s"))
    }
}

/// Whether a cargo subcommand such as `nextest` is installed.
pub(crate) fn has_cargo_subcommand(name: &str) -> bool {
    cargo_command(&[name, "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
