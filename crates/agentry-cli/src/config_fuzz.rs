//! Fuzzing `agentry.toml`: the documented file with its values replaced (wrong types, out of
//! range, hostile), lines dropped, duplicated or added, and arbitrary text, through the
//! parser, the settings resolution, the loop options and every `[[mcp]]` entry. The property:
//! a clear error or a configuration, never a panic. Cases: `AGENTRY_FUZZ_CASES`
//! (docs/reliability.md).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentry_fuzz_support::config;
use proptest::prelude::*;

use crate::args::LoopArgs;
use crate::config::{FileConfig, LoopSettings, rate_card};

/// Every key of the file (docs/cli.md), `[[mcp]]` entries of both kinds and a `[server]` table.
const SEED: &str = r#"provider = "anthropic"
model = "claude-sonnet-4-5"
base_url = "https://my-proxy.example/anthropic"
system = "Answer briefly."
max_output_tokens = 2048
tools = ["calculator", "clock", "read_file"]
root = "docs"
max_iterations = 8
token_budget = 200000
max_cost_usd = 0.50
parallel = true
tool_result_max_bytes = 65536
validation = "lenient"
on_tool_error = "recover"
max_repeated_calls = 3
tool_timeout_secs = 30
require_approval = ["read_file"]
[prices."claude-sonnet-4-5"]
input_per_mtok = 3.0
output_per_mtok = 15.0
cache_read_per_mtok = 0.30
cache_write_5m_per_mtok = 3.75
cache_write_1h_per_mtok = 6.0
[[mcp]]
name = "files"
command = "npx"
args = ["-y", "server-files"]
env = { TOKEN = "${HOME}" }
cwd = "."
timeout_secs = 20
allow = ["read"]
deny = ["write"]
[[mcp]]
url = "http://127.0.0.1:9/mcp"
headers = { X-Key = "${AGENTRY_FUZZ_UNSET}" }
bearer_env = "AGENTRY_FUZZ_UNSET"
timeout_secs = 1.5
[server]
listen = "127.0.0.1:0"
"#;

const VALUES: [&str; 34] = [
    "0",
    "-1",
    "18446744073709551615",
    "9223372036854775807",
    "4294967296",
    "1e30",
    "1e400",
    "nan",
    "inf",
    "-inf",
    "0.0",
    "-0.0",
    "5e-324",
    "true",
    "\"\"",
    "\" \"",
    "\"x\"",
    "[]",
    "{}",
    "[\"\"]",
    "[1, \"a\"]",
    "\"../../../../etc/passwd\"",
    "\"${HOME}\"",
    "\"${\"",
    "\"http://user:pass@h/?q#f\"",
    "\"none\"",
    "\"abort\"",
    "\"strict\"",
    "\"openai\"",
    "\"calculator\"",
    "1979-05-27T07:32:00Z",
    "'''a\nb'''",
    "\"\\u0000\"",
    "{ a = 1 }",
];

/// One change to the file's text.
#[derive(Debug, Clone)]
enum Edit {
    Value(prop::sample::Index, &'static str),
    Drop(prop::sample::Index),
    Duplicate(prop::sample::Index),
    Insert(prop::sample::Index, String),
}

fn edit() -> impl Strategy<Value = Edit> {
    let index = any::<prop::sample::Index>;
    prop_oneof![
        5 => (index(), prop::sample::select(VALUES.to_vec())).prop_map(|(at, v)| Edit::Value(at, v)),
        1 => index().prop_map(Edit::Drop),
        1 => index().prop_map(Edit::Duplicate),
        1 => (index(), prop_oneof![
            Just("[[mcp]]".to_owned()),
            Just("[prices.\"m\"]".to_owned()),
            Just("[server]".to_owned()),
            "[a-z_]{1,24} = [0-9.e-]{1,6}",
            ".{0,24}",
        ]).prop_map(|(at, line)| Edit::Insert(at, line)),
    ]
}

fn apply(text: &str, edit: &Edit) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    match edit {
        Edit::Value(at, value) => {
            let assignments: Vec<usize> = (0..lines.len())
                .filter(|&i| lines[i].contains(" = "))
                .collect();
            if !assignments.is_empty() {
                let line = &mut lines[*at.get(&assignments)];
                let key = line.split(" = ").next().unwrap_or("").to_owned();
                *line = format!("{key} = {value}");
            }
        }
        Edit::Drop(at) => {
            if !lines.is_empty() {
                lines.remove(at.index(lines.len()));
            }
        }
        Edit::Duplicate(at) => {
            if !lines.is_empty() {
                let i = at.index(lines.len());
                let line = lines[i].clone();
                lines.insert(i, line);
            }
        }
        Edit::Insert(at, line) => {
            let i = at.index(lines.len() + 1);
            lines.insert(i, line.clone());
        }
    }
    lines.join("\n")
}

/// Parses `text` and takes the result as far as a run would before starting anything.
fn check(text: &str) {
    let Ok(file) = FileConfig::parse(text) else {
        return;
    };
    if let Ok(settings) = LoopSettings::resolve(&LoopArgs::default(), &file) {
        let _ = settings.options(rate_card(&file));
    }
    for entry in file.mcp.iter().flatten() {
        let _ = crate::mcp::from_entry(entry);
    }
}

proptest! {
    #![proptest_config(config(512))]

    /// The documented file, edited.
    #[test]
    fn fuzz_agentry_toml_edited(edits in prop::collection::vec(edit(), 1..5)) {
        let mut text = SEED.to_owned();
        for edit in &edits {
            text = apply(&text, edit);
        }
        check(&text);
    }

    /// Arbitrary text as the file.
    #[test]
    fn fuzz_agentry_toml_arbitrary(text in "(\\PC|\n|\\[|\\]|=|\"){0,200}") {
        check(&text);
    }
}

/// Found by `fuzz_agentry_toml_edited`: a finite timeout too long for a `Duration` panicked in
/// `Duration::from_secs_f64` (the CLI exited 101 instead of 2 with a usage error).
#[test]
fn regression_timeouts_too_long_for_a_duration_are_usage_errors() {
    let file = FileConfig::parse("tool_timeout_secs = 1e30").unwrap();
    let error = LoopSettings::resolve(&LoopArgs::default(), &file).unwrap_err();
    assert!(error.to_string().contains("tool_timeout_secs"), "{error}");
    let file = FileConfig::parse("[[mcp]]\ncommand = \"x\"\ntimeout_secs = 1e30").unwrap();
    let error = crate::mcp::from_entry(&file.mcp.unwrap()[0]).unwrap_err();
    assert!(error.to_string().contains("timeout_secs"), "{error}");
}
