//! `cargo xtask chaos [--runs N] [--seed S]`: the fault suite
//! (`crates/agentry-cli/tests/chaos.rs`) as a campaign of `N` seeded runs; and the seed the
//! bounded form inside `cargo xtask ci` uses.

use std::process::Command;

use crate::step::{self, cargo_command};

const USAGE: &str = "usage: cargo xtask chaos [--runs N] [--seed S]";

/// Runs the suite with the parameters in `args`.
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut runs = None;
    let mut seed = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => runs = Some(number(args.next(), "--runs")?),
            "--seed" => seed = Some(number(args.next(), "--seed")?),
            _ => return Err(format!("unknown argument `{arg}`\n{USAGE}")),
        }
    }
    let mut command = cargo_command(&[
        "test",
        "-p",
        "agentry-cli",
        "--all-features",
        "--locked",
        "--test",
        "chaos",
        "--",
        "--nocapture",
        "--test-threads",
        "1",
    ]);
    if let Some(runs) = runs {
        command.env("AGENTRY_CHAOS_RUNS", runs.to_string());
    }
    configure(&mut command, seed.unwrap_or_else(fresh_seed));
    step::run("chaos", &mut command)
}

/// Sets the seed of the bounded run inside `cargo xtask ci`: a new one each time (printed, so
/// a failure can be replayed with `cargo xtask chaos --seed S`), or `AGENTRY_CHAOS_SEED`.
pub(crate) fn configure_ci(command: &mut Command) {
    let seed = std::env::var("AGENTRY_CHAOS_SEED")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or_else(fresh_seed);
    configure(command, seed);
}

fn configure(command: &mut Command, seed: u64) {
    println!("chaos: seed {seed} (replay with `cargo xtask chaos --seed {seed}`)");
    command.env("AGENTRY_CHAOS_SEED", seed.to_string());
}

/// A seed from the clock: each campaign explores new runs.
fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |elapsed| elapsed.as_secs() % 1_000_000)
}

fn number(value: Option<&String>, flag: &str) -> Result<u64, String> {
    value
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| format!("{flag} takes a number\n{USAGE}"))
}
