//! `cargo xtask bench`: every benchmark in one cargo invocation, its output passed through as
//! it comes, then the issue-16 targets gathered from it in one table (ratio, target, MET or
//! NOT MET). Each bench prints its targets as lines
//! `TARGET <name> | <ratio> | <op> <target> | MET|NOT MET` beside its own report.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Instant;

use crate::step;

/// The prefix of a target line.
const MARK: &str = "TARGET ";

/// The targets the issue names, in its order, and the bench that reports each: a target
/// no line was seen for is listed as not reported.
const EXPECTED: &[(&str, &str)] = &[
    (
        "sequential CPU/run vs floor (events read)",
        "agentry loopback",
    ),
    (
        "256 concurrent CPU/run vs floor (events read)",
        "agentry loopback",
    ),
    (
        "parse + normalize speed-up vs eventsource+Value",
        "agent-backends parse",
    ),
    ("peak RSS 256 concurrent vs floor", "agentry loopback"),
    (
        "server RSS per open stream (KiB, tool specs shared)",
        "agent-server load",
    ),
    (
        "server burst p99 first event / steady p99",
        "agent-server load",
    ),
];

/// One parsed target line.
#[derive(Debug, PartialEq)]
pub(crate) struct Target {
    pub(crate) name: String,
    pub(crate) ratio: String,
    pub(crate) target: String,
    pub(crate) met: bool,
}

/// Reads `TARGET name | ratio | target | MET` (or `NOT MET`).
pub(crate) fn parse(line: &str) -> Option<Target> {
    let rest = line.trim().strip_prefix(MARK)?;
    let mut fields = rest.split('|').map(str::trim);
    let name = fields.next()?.to_owned();
    let ratio = fields.next()?.to_owned();
    let target = fields.next()?.to_owned();
    let met = match fields.next()? {
        "MET" => true,
        "NOT MET" => false,
        _ => return None,
    };
    Some(Target {
        name,
        ratio,
        target,
        met,
    })
}

/// Runs the benches (`args` after `cargo`), then prints the targets table.
pub(crate) fn run(args: &[&str]) -> Result<(), String> {
    println!("\n==> benchmarks");
    let started = Instant::now();
    let mut child = step::cargo_command(args)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|error| format!("benchmarks: could not start cargo: {error}"))?;
    let mut seen = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        let mut out = std::io::stdout();
        for line in BufReader::new(stdout).lines() {
            let line =
                line.map_err(|error| format!("benchmarks: reading cargo's output: {error}"))?;
            // Passed through as it comes: the benches take minutes.
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
            if let Some(target) = parse(&line) {
                seen.push(target);
            }
        }
    }
    let status = child
        .wait()
        .map_err(|error| format!("benchmarks: waiting for cargo: {error}"))?;
    let seconds = started.elapsed().as_secs_f64();
    print!("{}", table(&seen));
    if status.success() {
        println!("==> benchmarks: ok ({seconds:.1}s)");
        Ok(())
    } else {
        Err(format!("benchmarks failed ({status}) after {seconds:.1}s"))
    }
}

/// The summary: every expected target (seen or not) and any other target line, in order.
pub(crate) fn table(seen: &[Target]) -> String {
    let mut text = String::from("\nissue 16 targets (docs/performance.md)\n");
    let mut line = |name: &str, ratio: &str, target: &str, verdict: &str| {
        text.push_str(&format!(
            "  {name:<54} {ratio:>12}  {target:<10} {verdict}\n"
        ));
    };
    for (name, bench) in EXPECTED {
        match seen.iter().find(|target| target.name == *name) {
            Some(target) => line(
                name,
                &target.ratio,
                &target.target,
                if target.met { "MET" } else { "NOT MET" },
            ),
            None => line(name, "-", "", &format!("not reported (did `{bench}` run?)")),
        }
    }
    for target in seen
        .iter()
        .filter(|target| !EXPECTED.iter().any(|(name, _)| *name == target.name))
    {
        line(
            &target.name,
            &target.ratio,
            &target.target,
            if target.met { "MET" } else { "NOT MET" },
        );
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn target_lines_parse_and_every_expected_target_is_listed() {
        let met =
            parse("TARGET 256 concurrent CPU/run vs floor (events read) | 1.25x | <= 1.30 | MET")
                .unwrap();
        assert_eq!(met.ratio, "1.25x");
        assert!(met.met);
        let missed =
            parse("  TARGET server burst p99 first event / steady p99 | 3.10x | <= 2.00 | NOT MET")
                .unwrap();
        assert!(!missed.met);
        assert_eq!(parse("TARGET broken | 1x | <= 2"), None);
        assert_eq!(parse("sequential 1.2x"), None);

        let text = table(&[met, missed]);
        assert!(text.contains("256 concurrent CPU/run vs floor (events read)"));
        assert!(text.contains("1.25x"));
        assert!(text.contains("NOT MET"));
        assert_eq!(text.matches("not reported").count(), EXPECTED.len() - 2);
    }
}
