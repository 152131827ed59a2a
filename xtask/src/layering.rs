//! The layering check: which crates each layer may not reach, verified with `cargo tree`.
//!
//! The rules mirror docs/ARCHITECTURE.md's invariants. A rule names a package, the features it
//! is built with, and the crates that must not appear among its normal and build dependencies.

use crate::step::cargo_command;

/// Which feature set a rule checks.
#[derive(Clone, Copy)]
enum Features {
    All,
    NoDefault,
}

struct Rule {
    package: &'static str,
    features: Features,
    forbidden: &'static [&'static str],
    why: &'static str,
}

const RULES: &[Rule] = &[
    Rule {
        package: "agent-types",
        features: Features::All,
        forbidden: &["tokio", "reqwest", "hyper"],
        why: "the vocabulary crate stays runtime-free and HTTP-free",
    },
    Rule {
        package: "agent-tools",
        features: Features::All,
        forbidden: &["reqwest", "hyper"],
        why: "tools never need an HTTP client (jsonschema must keep default-features = false)",
    },
    Rule {
        package: "agent-conversation",
        features: Features::All,
        forbidden: &["reqwest", "hyper"],
        why: "appenders store turns; they do not talk to providers",
    },
    Rule {
        package: "agent-conversation",
        features: Features::NoDefault,
        forbidden: &["tokio", "rusqlite"],
        why: "the in-memory appender alone pulls no runtime and no SQLite",
    },
    Rule {
        package: "agent-backends",
        features: Features::NoDefault,
        forbidden: &["reqwest", "hyper", "tokio"],
        why: "without features the crate builds no HTTP client and no runtime",
    },
    Rule {
        package: "agent-backends",
        features: Features::All,
        forbidden: &["openssl-sys", "native-tls", "aws-lc-sys", "rusqlite"],
        why: "TLS is rustls with ring and bundled roots: no system OpenSSL, no cmake-built crypto",
    },
    Rule {
        package: "agent-loop",
        features: Features::All,
        forbidden: &[
            "reqwest",
            "hyper",
            "rusqlite",
            "opentelemetry",
            "tokio-postgres",
        ],
        why: "the loop talks to the backend trait, never to a provider or a store directly; \
              its spans are plain tracing (agent-otel exports them)",
    },
    Rule {
        package: "agent-otel",
        features: Features::All,
        forbidden: &["agent-backends", "openssl-sys", "native-tls", "aws-lc-sys"],
        why: "the exporter gets the loop's spans from its span sink (or tracing), never from a \
              provider, with one reqwest over rustls",
    },
    Rule {
        package: "agent-accounting",
        features: Features::All,
        forbidden: &[
            "reqwest",
            "hyper",
            "agent-backends",
            "openssl-sys",
            "native-tls",
            "aws-lc-sys",
        ],
        why: "accounting stores rows the loop hands it; it never talks to a provider",
    },
    Rule {
        package: "agent-guardrails",
        features: Features::All,
        forbidden: &[
            "reqwest",
            "hyper",
            "agent-backends",
            "rusqlite",
            "tokio-postgres",
        ],
        why: "guardrails judge what the loop hands them in process; regorus stays without \
              OPA's HTTP and the crate never talks to a provider or a store",
    },
    Rule {
        package: "agent-server",
        features: Features::All,
        forbidden: &["openssl-sys", "native-tls", "aws-lc-sys"],
        why: "PostgreSQL is reached without TLS and providers over rustls: no system OpenSSL",
    },
    Rule {
        package: "agent-mcp",
        features: Features::All,
        forbidden: &[
            "agent-backends",
            "agent-loop",
            "agent-conversation",
            "openssl-sys",
            "native-tls",
            "aws-lc-sys",
        ],
        why: "MCP sits on the tool layer only, with one reqwest over rustls",
    },
    Rule {
        package: "agent-temporal",
        features: Features::All,
        // tokio-postgres only behind `postgres`: the live event log (events::PgEventLog).
        forbidden: &[
            "agent-backends",
            "agent-server",
            "rusqlite",
            "openssl-sys",
            "native-tls",
            "aws-lc-sys",
        ],
        why: "the Temporal driver sits on the loop and the backend trait: the worker's caller \
              brings the backend; Temporal's client reaches the server over rustls with ring",
    },
    Rule {
        package: "agentry",
        features: Features::NoDefault,
        forbidden: &["tokio", "reqwest", "hyper", "rusqlite"],
        why: "the facade without features is just the vocabulary",
    },
];

/// Within a crate: modules that must not name another module (its path in code, doc comments
/// aside), so the crate keeps a direction: data at the bottom, orchestration on top.
struct ModuleRule {
    files: &'static [&'static str],
    forbidden: &'static [&'static str],
    why: &'static str,
}

const MODULE_RULES: &[ModuleRule] = &[
    ModuleRule {
        files: &[
            "crates/agent-loop/src/session.rs",
            "crates/agent-loop/src/options.rs",
            "crates/agent-loop/src/result.rs",
            "crates/agent-loop/src/events.rs",
            "crates/agent-loop/src/job.rs",
            "crates/agent-loop/src/approval.rs",
            "crates/agent-loop/src/audit.rs",
            "crates/agent-loop/src/history.rs",
            "crates/agent-loop/src/hooks.rs",
            "crates/agent-loop/src/estimate.rs",
            "crates/agent-loop/src/output.rs",
            "crates/agent-loop/src/prepare.rs",
            "crates/agent-loop/src/bounded.rs",
            "crates/agent-loop/src/pump.rs",
        ],
        forbidden: &["crate::run", "crate::dispatch"],
        why: "agent-loop's data modules and round helpers sit below dispatch and run",
    },
    ModuleRule {
        files: &[
            "crates/agent-loop/src/checkpoint.rs",
            "crates/agent-loop/src/dispatch.rs",
            "crates/agent-loop/src/span_sink.rs",
            "crates/agent-loop/src/telemetry.rs",
        ],
        forbidden: &["crate::run"],
        why: "only the crate root and `Agent` call into agent-loop's `run`",
    },
    ModuleRule {
        files: &[
            "crates/agent-loop/src/machine.rs",
            "crates/agent-loop/src/machine/answer.rs",
            "crates/agent-loop/src/machine/budget.rs",
            "crates/agent-loop/src/machine/resume.rs",
            "crates/agent-loop/src/machine/round.rs",
        ],
        forbidden: &[
            "crate::run",
            "crate::dispatch",
            "tokio",
            "Instant",
            "SystemTime",
            "std::env",
            "std::fs",
            "std::net",
        ],
        why: "the loop's state machine is deterministic: no driver, runtime, clock or I/O",
    },
    ModuleRule {
        files: &["crates/agent-backends/src/anthropic/request.rs"],
        forbidden: &["cache::", "super::cache"],
        why: "the Anthropic body is built by request.rs and marked by cache.rs, never back",
    },
];

/// Each rule's files, read from the workspace root, checked for the names they must not use.
fn module_violations() -> Result<Vec<String>, String> {
    let root = crate::step::workspace_root();
    let mut violations = Vec::new();
    for rule in MODULE_RULES {
        for file in rule.files {
            let text = std::fs::read_to_string(root.join(file))
                .map_err(|error| format!("reading {file}: {error}"))?;
            for (number, line) in text.lines().enumerate() {
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                if let Some(name) = rule.forbidden.iter().find(|name| code.contains(**name)) {
                    violations.push(format!(
                        "{file}:{} names `{name}`: {}",
                        number + 1,
                        rule.why
                    ));
                }
            }
        }
    }
    Ok(violations)
}

pub(crate) fn run() -> Result<(), String> {
    println!("\n==> layering");
    let mut violations = module_violations()?;
    for rule in RULES {
        let names = dependency_names(rule)?;
        for forbidden in rule.forbidden {
            if names.iter().any(|name| name == forbidden) {
                let features = match rule.features {
                    Features::All => "all features",
                    Features::NoDefault => "no default features",
                };
                violations.push(format!(
                    "{} ({features}) reaches `{forbidden}`: {}. Find the edge with \
                     `cargo tree -p {} -e normal,build -i {forbidden}`",
                    rule.package, rule.why, rule.package
                ));
            }
        }
    }
    if violations.is_empty() {
        println!(
            "==> layering: ok ({} crate rules, {} module rules)",
            RULES.len(),
            MODULE_RULES.len()
        );
        Ok(())
    } else {
        Err(format!(
            "layering check failed:\n  {}",
            violations.join("\n  ")
        ))
    }
}

fn dependency_names(rule: &Rule) -> Result<Vec<String>, String> {
    let features = match rule.features {
        Features::All => "--all-features",
        Features::NoDefault => "--no-default-features",
    };
    let output = cargo_command(&[
        "tree",
        "-p",
        rule.package,
        features,
        "-e",
        "normal,build",
        "--prefix",
        "none",
        "--format",
        "{p}",
    ])
    .output()
    .map_err(|e| format!("could not run cargo tree: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo tree -p {} failed: {}",
            rule.package,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(package_names(&String::from_utf8_lossy(&output.stdout)))
}

/// Package names from `cargo tree --prefix none --format {p}` output ("name vX.Y.Z (…)").
fn package_names(tree: &str) -> Vec<String> {
    tree.lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_package_names_from_cargo_tree_output() {
        let tree =
            "agent-types v0.1.0 (/w/crates/agent-types)\nserde v1.0.1\nreqwest v0.12.0 (*)\n\n";
        assert_eq!(package_names(tree), ["agent-types", "serde", "reqwest"]);
    }

    #[test]
    fn every_module_rule_names_files_that_exist_and_holds_today() {
        let root = crate::step::workspace_root();
        for rule in MODULE_RULES {
            assert!(!rule.forbidden.is_empty(), "{}", rule.why);
            for file in rule.files {
                assert!(root.join(file).is_file(), "{file} is gone: update the rule");
            }
        }
        assert_eq!(module_violations().unwrap(), Vec::<String>::new());
    }

    #[test]
    fn every_rule_forbids_something() {
        assert!(RULES.iter().all(|rule| !rule.forbidden.is_empty()));
    }
}
