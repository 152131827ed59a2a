//! `cargo xtask ci`: every check CI runs.

use crate::step::{self, cargo, cargo_command};
use crate::{chaos, layering, snapshots};

pub(crate) fn run() -> Result<(), String> {
    cargo("format", &["fmt", "--all", "--", "--check"])?;
    layering::run()?;
    cargo(
        "clippy",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--locked",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    // Each layer must build on its own with its lightest feature set: downstream users pick
    // single layers.
    cargo(
        "single layers (no default features)",
        &[
            "check",
            "--locked",
            "-p",
            "agent-types",
            "-p",
            "agent-conversation",
            "-p",
            "agent-backends",
            "-p",
            "agent-accounting",
            "-p",
            "agentry",
            "-p",
            "agent-server",
            "--no-default-features",
        ],
    )?;

    let references = snapshots::ReferenceLog::new()?;
    let mut tests = if step::has_cargo_subcommand("nextest") {
        cargo_command(&[
            "nextest",
            "run",
            "--workspace",
            "--all-features",
            "--locked",
            "--no-fail-fast",
        ])
    } else {
        println!("cargo-nextest not found; running the tests with cargo test");
        cargo_command(&[
            "test",
            "--workspace",
            "--all-features",
            "--locked",
            "--no-fail-fast",
        ])
    };
    references.configure(&mut tests);
    // The tests include the fault suite's bounded form (agentry-cli's tests/chaos.rs).
    chaos::configure_ci(&mut tests);
    // The fuzz properties run a short campaign here; `cargo xtask fuzz` runs the long one.
    tests.env("AGENTRY_FUZZ_CASES", crate::fuzz::CI_CASES);
    step::run("tests", &mut tests)?;

    let mut doc_tests =
        cargo_command(&["test", "--workspace", "--all-features", "--locked", "--doc"]);
    references.configure(&mut doc_tests);
    step::run("doc tests", &mut doc_tests)?;

    references.check()?;

    let mut docs = cargo_command(&[
        "doc",
        "--workspace",
        "--all-features",
        "--no-deps",
        "--locked",
    ]);
    docs.env("RUSTDOCFLAGS", "-D warnings");
    step::run("docs", &mut docs)?;

    println!("\nall CI checks passed");
    Ok(())
}
