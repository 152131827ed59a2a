//! Every recording in `fixtures/providers/`, replayed through the real adapter and the real
//! HTTP client from a loopback server, checked against the expectations written in
//! `fixtures/providers/SOURCES.md` (parsed from its table, so a recording cannot be added
//! without its expectations being checked) and pinned as an insta snapshot.

use std::path::{Path, PathBuf};

use agent_backends::Provider;
use agent_backends::replay::{Cassette, Chunking, ReplayBackend, decode};
use agent_types::{
    AssistantBlock, AssistantMessage, Backend, BackendError, Message, MessageAssembler,
    ModelRequest, StopReason, StreamEvent, Usage,
};
use futures_util::StreamExt;
use proptest::prelude::*;
use serde_json::{Value, json};

/// One row of the SOURCES.md table.
#[derive(Debug, Clone)]
pub(crate) struct Expected {
    pub(crate) file: String,
    pub(crate) provider: Provider,
    status: u16,
    error: Option<String>,
    text_prefix: String,
    text_chars: usize,
    thinking: Thinking,
    tool_calls: Vec<(String, String)>,
    finish: String,
    usage: [Option<u64>; 5],
    refusal: bool,
    /// The structured answer (`OUTPUT → `…``), for structured-output recordings.
    pub(crate) output: Option<Value>,
}

#[derive(Debug, Clone, PartialEq)]
enum Thinking {
    None,
    Redacted,
    Chars(usize),
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/providers")
}

fn between<'t>(text: &'t str, open: &str, close: &str) -> Option<&'t str> {
    let start = text.find(open)? + open.len();
    let end = start + text[start..].find(close)?;
    Some(&text[start..end])
}

/// The table of SOURCES.md, one entry per response file.
pub(crate) fn table() -> Vec<Expected> {
    let sources = std::fs::read_to_string(fixtures().join("SOURCES.md")).unwrap();
    let mut rows = Vec::new();
    for line in sources.lines().filter(|line| line.starts_with("| `")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        assert_eq!(cells.len(), 13, "unexpected row shape: {line}");
        let file = between(cells[0], "`", "`").unwrap().to_owned();
        let provider: Provider = file.split('/').next().unwrap().parse().unwrap();
        let status = cells[4].parse().unwrap_or(429); // "n/a": OpenAI sends quota errors as 429
        // `ERROR → `<message>`.` – the message may itself hold backticks (`gpt-5.2-proo`), so
        // it ends at the first backtick followed by a full stop or the end of the cell.
        // Markdown writes a message holding backticks as `` message ``.
        let error = cells[5].split_once("ERROR → `").map(|(_, rest)| {
            if let Some(inner) = rest.strip_prefix("` ") {
                return inner[..inner.find(" ``").unwrap_or(inner.len())].to_owned();
            }
            let end = rest
                .find("`.")
                .or_else(|| rest.strip_suffix('`').map(str::len))
                .unwrap_or(rest.len());
            rest[..end].to_owned()
        });
        // `"<first 60 chars, JSON-escaped>"` (N chars); the text itself may hold `(` or a backtick.
        let cell = cells[8].trim();
        let close = cell.rfind("` (").unwrap();
        let text_prefix: String = serde_json::from_str(&cell[1..close]).unwrap();
        let count = &cell[close + 3..];
        let text_chars = count.trim_end_matches(" chars)").parse().unwrap();
        let thinking = match cells[9].trim() {
            "—" => Thinking::None,
            "redacted" => Thinking::Redacted,
            n => Thinking::Chars(n.parse().unwrap()),
        };
        let tool_calls = match cells[10].split_once(": ") {
            None => Vec::new(),
            Some((_, calls)) => calls
                .split("; ")
                .map(|call| {
                    let ticks: Vec<&str> = call.split('`').collect();
                    (ticks[1].to_owned(), ticks[3].to_owned())
                })
                .collect(),
        };
        let finish = cells[11].rsplit("→ ").next().unwrap().trim().to_owned();
        let usage: Vec<Option<u64>> = cells[12]
            .trim_end_matches(" |")
            .split(" / ")
            .map(|n| n.trim().parse().ok())
            .collect();
        rows.push(Expected {
            file,
            provider,
            status,
            error,
            text_prefix,
            text_chars,
            thinking,
            tool_calls,
            finish,
            usage: [usage[0], usage[1], usage[2], usage[3], usage[4]],
            refusal: cells[5].contains("refusal"),
            // `OUTPUT → `<canonical JSON>`.`: the JSON holds no backtick.
            output: cells[5].split_once("OUTPUT → `").map(|(_, rest)| {
                let end = rest.find('`').unwrap();
                serde_json::from_str(&rest[..end]).unwrap()
            }),
        });
    }
    rows
}

pub(crate) fn cassette(expected: &Expected) -> Cassette {
    Cassette::from_file(fixtures().join(&expected.file))
        .unwrap()
        .with_status(expected.status)
}

pub(crate) fn request(cassette: &Cassette) -> ModelRequest {
    let mut request = ModelRequest::new("replay-model", vec![Message::user("hi")]);
    request.stream = cassette.is_stream();
    request
}

/// What one call produced.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Replayed {
    pub(crate) events: Vec<StreamEvent>,
    pub(crate) error: Option<BackendError>,
}

impl Replayed {
    /// The final message, or the partial one an error carried.
    pub(crate) fn message(&self) -> Option<AssistantMessage> {
        match &self.error {
            Some(error) => error.partial.as_deref().cloned(),
            None => {
                let mut assembler = MessageAssembler::new(false);
                for event in &self.events {
                    assembler.observe(event).unwrap();
                }
                Some(assembler.finish())
            }
        }
    }
}

pub(crate) async fn replay(provider: Provider, cassette: Cassette) -> Replayed {
    let request = request(&cassette);
    let backend = ReplayBackend::start(provider, [cassette]).await.unwrap();
    let mut stream = backend.stream(&request);
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(error) => {
                return Replayed {
                    events,
                    error: Some(error),
                };
            }
        }
    }
    Replayed {
        events,
        error: None,
    }
}

fn check(expected: &Expected, replayed: &Replayed) {
    let file = &expected.file;
    // Errors: the exact message SOURCES.md gives, or a successful finish.
    match (&expected.error, &replayed.error) {
        (Some(message), Some(error)) => assert_eq!(&error.message, message, "{file}"),
        (None, Some(error)) => panic!("{file}: unexpected error {error:?}"),
        (Some(message), None) => panic!("{file}: expected the error `{message}`"),
        (None, None) => {}
    }
    let message = replayed.message().unwrap_or_default();

    let text = message.text_content();
    assert_eq!(
        text.chars().count(),
        expected.text_chars,
        "{file}: text length"
    );
    assert!(
        text.starts_with(&expected.text_prefix),
        "{file}: text starts {:?}",
        text.chars().take(60).collect::<String>()
    );

    let thinking: Vec<_> = message
        .content
        .iter()
        .filter_map(|block| match block {
            AssistantBlock::Thinking(thinking) => Some(thinking),
            _ => None,
        })
        .collect();
    let chars: usize = thinking.iter().map(|t| t.thinking.chars().count()).sum();
    match expected.thinking {
        Thinking::None => assert_eq!(chars, 0, "{file}: thinking"),
        Thinking::Chars(n) => assert_eq!(chars, n, "{file}: thinking chars"),
        Thinking::Redacted => {
            assert!(!thinking.is_empty(), "{file}: redacted thinking kept");
            assert!(
                thinking.iter().all(|t| t.redacted && t.signature.is_some()),
                "{file}"
            );
        }
    }

    let calls: Vec<_> = message.tool_calls().collect();
    assert_eq!(calls.len(), expected.tool_calls.len(), "{file}: tool calls");
    for (call, (name, arguments)) in calls.iter().zip(&expected.tool_calls) {
        assert_eq!(&call.name, name, "{file}");
        match serde_json::from_str::<Value>(arguments) {
            Ok(value) => assert_eq!(call.arguments, value, "{file}: {name} arguments"),
            Err(_) => {
                assert_eq!(call.arguments, Value::String(arguments.clone()), "{file}");
                assert!(call.invalid_arguments, "{file}: raw arguments flagged");
            }
        }
        assert!(!call.id.as_str().is_empty(), "{file}: every call has an id");
    }

    let stop = match expected.finish.as_str() {
        "stop" => StopReason::Stop,
        "tool_calls" => StopReason::ToolCalls,
        "length" => StopReason::Length,
        "content_filter" => StopReason::ContentFilter,
        "error" => StopReason::Error,
        other => panic!("{file}: unknown finish {other}"),
    };
    if expected.refusal {
        // A refusal is normalized to content_filter; SOURCES.md tolerates `stop` where the
        // provider said stop. Either way its text is kept, in its own block.
        assert_eq!(
            message.stop_reason,
            Some(StopReason::ContentFilter),
            "{file}"
        );
        assert!(
            message
                .content
                .iter()
                .any(|block| matches!(block, AssistantBlock::Refusal { text } if !text.is_empty())),
            "{file}: the refusal text is kept"
        );
    } else if stop == StopReason::Error {
        assert!(replayed.error.is_some(), "{file}");
    } else {
        assert_eq!(message.stop_reason, Some(stop), "{file}: stop reason");
    }

    check_usage(expected, message.usage.unwrap_or_default());

    // A structured answer: the final-answer tool's arguments (tool strategy), else the text
    // parsed as JSON (native strategy).
    if let Some(output) = &expected.output {
        let answer = match calls.last() {
            Some(call) => call.arguments.clone(),
            None => serde_json::from_str(&text).unwrap_or_else(|error| {
                panic!("{file}: the structured answer is not JSON: {error}")
            }),
        };
        assert_eq!(&answer, output, "{file}: structured output");
    }
}

/// The recorded (raw) numbers, normalized the way `Usage` documents: input includes cache
/// reads and writes, output includes reasoning.
fn check_usage(expected: &Expected, usage: Usage) {
    let file = &expected.file;
    let [input, output, cache_read, cache_write, reasoning] = expected.usage;
    if expected.usage.iter().all(Option::is_none) {
        return;
    }
    let sum = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    let (input, output) = match expected.provider {
        // Both report input without the cache.
        Provider::Anthropic | Provider::Bedrock => (
            input.map(|n| n + cache_read.unwrap_or(0) + cache_write.unwrap_or(0)),
            output,
        ),
        Provider::Gemini => (input, sum(output, reasoning)),
        _ => (input, output),
    };
    assert_eq!(usage.input_tokens, input, "{file}: input tokens");
    assert_eq!(usage.output_tokens, output, "{file}: output tokens");
    assert_eq!(
        usage.cache_read_tokens.filter(|&n| n > 0),
        cache_read.filter(|&n| n > 0),
        "{file}: cache reads"
    );
    let written =
        usage.cache_write_5m_tokens.unwrap_or(0) + usage.cache_write_1h_tokens.unwrap_or(0);
    assert_eq!(written, cache_write.unwrap_or(0), "{file}: cache writes");
    assert_eq!(
        usage.reasoning_tokens.filter(|&n| n > 0),
        reasoning.filter(|&n| n > 0),
        "{file}: reasoning tokens"
    );
}

/// Consecutive deltas merged, so a snapshot of a 400-delta stream stays reviewable.
fn coalesced(events: &[StreamEvent]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for event in events {
        let value = serde_json::to_value(event).unwrap();
        let kind = value["type"].as_str().unwrap_or_default().to_owned();
        let mergeable = kind.ends_with("_delta");
        if mergeable
            && let Some(last) = out.last_mut()
            && last["type"] == kind
            && last.get("index") == value.get("index")
        {
            let joined = format!(
                "{}{}",
                last["delta"].as_str().unwrap_or_default(),
                value["delta"].as_str().unwrap_or_default()
            );
            last["delta"] = json!(joined);
            last["deltas"] = json!(last["deltas"].as_u64().unwrap_or(1) + 1);
            continue;
        }
        out.push(value);
    }
    out
}

fn snapshot_name(file: &str) -> String {
    file.replace('/', "__")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_recording_meets_its_written_expectations() {
    let table = table();
    assert!(
        table.len() >= 60,
        "SOURCES.md lists {} recordings",
        table.len()
    );
    for expected in &table {
        let cassette = cassette(expected);
        let replayed = replay(expected.provider, cassette.clone()).await;
        check(expected, &replayed);

        // The same bytes split into 5-byte HTTP chunks, and decoded without HTTP one byte at a
        // time, give the same events (errors compared by message: the partial is the same).
        let split = replay(
            expected.provider,
            cassette.clone().with_chunking(Chunking::Every(5)),
        )
        .await;
        assert_eq!(split.events, replayed.events, "{}", expected.file);
        if expected.status == 200 {
            let decoded = decode(
                expected.provider,
                &request(&cassette),
                Some(&cassette.content_type),
                &cassette.body,
                1,
            );
            match (decoded, &replayed.error) {
                (Ok(events), None) => assert_eq!(events, replayed.events, "{}", expected.file),
                (Err(error), Some(expected_error)) => {
                    assert_eq!(error.message, expected_error.message, "{}", expected.file);
                    assert_eq!(error.partial, expected_error.partial, "{}", expected.file);
                }
                (decoded, _) => panic!("{}: decode gave {decoded:?}", expected.file),
            }
        }

        let snapshot = json!({
            "events": coalesced(&replayed.events),
            "message": replayed.error.is_none().then(|| replayed.message()),
            "error": replayed.error,
        });
        insta::with_settings!({
            snapshot_path => "snapshots/recordings",
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_json_snapshot!(snapshot_name(&expected.file), snapshot);
        });
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any split of any recording into HTTP chunks gives the same normalized events.
    #[test]
    fn any_wire_split_gives_the_same_events(
        pick in any::<prop::sample::Index>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 1..24),
    ) {
        let table = table();
        let expected = pick.get(&table);
        let cassette = cassette(expected);
        let len = cassette.body.len();
        let mut offsets: Vec<usize> = cuts.iter().map(|cut| cut.index(len.max(1))).collect();
        offsets.sort_unstable();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (whole, split) = runtime.block_on(async {
            let whole = replay(expected.provider, cassette.clone()).await;
            let split = replay(
                expected.provider,
                cassette.with_chunking(Chunking::At(offsets)),
            )
            .await;
            (whole, split)
        });
        prop_assert_eq!(whole, split, "{}", expected.file);
    }
}

/// Every provider has a recorded structured-output response with its expected answer.
#[test]
fn every_provider_has_a_structured_output_recording() {
    let mut providers: Vec<String> = table()
        .iter()
        .filter(|expected| expected.output.is_some())
        .map(|expected| format!("{:?}", expected.provider))
        .collect();
    providers.sort();
    providers.dedup();
    assert_eq!(
        providers,
        [
            "Anthropic",
            "Gemini",
            "Ollama",
            "OpenAiChat",
            "OpenAiResponses"
        ]
    );
}
