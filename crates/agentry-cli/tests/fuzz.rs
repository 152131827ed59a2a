//! Fuzzing `agentry replay` as a real process: recorded bodies of every provider, mutated
//! (lines dropped, duplicated, swapped, cut, bytes spliced), and arbitrary bytes, served with
//! any status through the real adapter. The property: exit 0 with one JSON message on stdout,
//! or exit 1 or 2 with a message on stderr; never a panic (exit 101) or a signal. Cases:
//! `AGENTRY_FUZZ_CASES` (docs/reliability.md).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::test_runner::Config;

/// The cases per property: `AGENTRY_FUZZ_CASES`, or a short default for a plain `cargo test`.
fn config(default: u32) -> Config {
    let cases = std::env::var("AGENTRY_FUZZ_CASES")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default);
    Config {
        cases,
        max_shrink_iters: 256,
        ..Config::default()
    }
}

const PROVIDERS: [&str; 5] = [
    "openai-chat",
    "openai-responses",
    "anthropic",
    "gemini",
    "ollama",
];

/// Every recorded body: (provider, bytes).
fn seeds() -> &'static Vec<(&'static str, Vec<u8>)> {
    static SEEDS: OnceLock<Vec<(&'static str, Vec<u8>)>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/providers");
        let mut seeds = Vec::new();
        for provider in PROVIDERS {
            let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(provider))
                .unwrap()
                .map(|entry| entry.unwrap().path())
                .filter(|path| !path.to_string_lossy().ends_with(".request.json"))
                .collect();
            files.sort();
            for file in files {
                seeds.push((provider, std::fs::read(file).unwrap()));
            }
        }
        seeds
    })
}

fn scratch() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

#[derive(Debug, Clone)]
enum Mutation {
    Drop(prop::sample::Index),
    Duplicate(prop::sample::Index),
    Swap(prop::sample::Index, prop::sample::Index),
    Truncate(prop::sample::Index),
    Splice(prop::sample::Index, Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let index = any::<prop::sample::Index>;
    prop_oneof![
        index().prop_map(Mutation::Drop),
        index().prop_map(Mutation::Duplicate),
        (index(), index()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        index().prop_map(Mutation::Truncate),
        (
            index(),
            prop::collection::vec(
                prop_oneof![
                    prop::sample::select(b"\n\r{}[]\":,data: event0-e".to_vec()),
                    any::<u8>(),
                ],
                1..12
            )
        )
            .prop_map(|(at, bytes)| Mutation::Splice(at, bytes)),
    ]
}

fn mutate(body: &[u8], mutation: &Mutation) -> Vec<u8> {
    let mut lines: Vec<Vec<u8>> = body
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    match mutation {
        Mutation::Drop(at) if !lines.is_empty() => {
            lines.remove(at.index(lines.len()));
        }
        Mutation::Duplicate(at) if !lines.is_empty() => {
            let i = at.index(lines.len());
            let line = lines[i].clone();
            lines.insert(i, line);
        }
        Mutation::Swap(a, b) if !lines.is_empty() => {
            let (a, b) = (a.index(lines.len()), b.index(lines.len()));
            lines.swap(a, b);
        }
        Mutation::Truncate(at) => return body[..at.index(body.len() + 1)].to_vec(),
        Mutation::Splice(at, bytes) => {
            let mut body = body.to_vec();
            let at = at.index(body.len() + 1);
            body.splice(at..at, bytes.iter().copied());
            return body;
        }
        _ => {}
    }
    lines.concat()
}

/// Runs `agentry replay` on `body` and checks how it ends.
fn check(provider: &str, status: Option<u16>, body: &[u8]) -> Result<(), TestCaseError> {
    // One file per test thread: `cargo test` runs the properties of this file in parallel.
    let thread = std::thread::current();
    let file = scratch().join(thread.name().unwrap_or("main").replace("::", "-"));
    std::fs::write(&file, body).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentry"));
    command.args(["replay", "--provider", provider]);
    let status_text;
    if let Some(status) = status {
        status_text = status.to_string();
        command.args(["--status", &status_text]);
    }
    let output = command.arg(&file).env("NO_COLOR", "1").output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let code = output.status.code();
    prop_assert!(
        matches!(code, Some(0..=2)),
        "{provider} {status:?}: exit {code:?}\nstderr: {stderr}"
    );
    if code == Some(0) {
        prop_assert_eq!(stdout.lines().count(), 1, "{}", stdout);
    } else {
        prop_assert!(
            !stderr.trim().is_empty(),
            "exit {:?} without a message",
            code
        );
    }
    Ok(())
}

proptest! {
    // Each case starts a process: a smaller default.
    #![proptest_config(config(48))]

    /// Recorded bodies, mutated, served with their own status or another.
    #[test]
    fn fuzz_replay_mutated_recordings(
        seed in any::<prop::sample::Index>(),
        mutations in prop::collection::vec(mutation(), 0..4),
        status in prop::option::of(prop::sample::select(vec![200u16, 400, 429, 500, 529])),
    ) {
        let (provider, body) = seed.get(seeds());
        let mut body = body.clone();
        for mutation in &mutations {
            body = mutate(&body, mutation);
        }
        check(provider, status, &body)?;
    }

    /// Arbitrary bytes to every provider.
    #[test]
    fn fuzz_replay_arbitrary_bytes(
        provider in prop::sample::select(PROVIDERS.to_vec()),
        body in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        check(provider, None, &body)?;
    }
}
