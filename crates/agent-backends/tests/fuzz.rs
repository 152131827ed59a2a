//! Fuzzing: the framing parsers, every provider's decoder (streamed and whole bodies), the
//! error-body decoding of every adapter over loopback HTTP, and cassette loading, fed
//! arbitrary bytes and structure-aware mutations of the recorded fixtures.
//!
//! The property everywhere: no panic, and malformed input is a typed error. The number of
//! cases per property comes from `AGENTRY_FUZZ_CASES` (set by `cargo xtask fuzz` for a long
//! campaign and by `cargo xtask ci` for a short one); docs/reliability.md has the figures.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use agent_backends::Provider;
use agent_backends::framing::{
    EventStreamParser, JsonArrayParser, NdjsonParser, SseParser, decode_message, encode_message,
};
use agent_backends::http::{HttpOptions, RetryPolicy};
use agent_backends::replay::{self, Cassette, RecordedConversation, ReplayServer};
use agent_types::{Backend, Message, ModelRequest};
use agentry_fuzz_support::{JsonEdit, apply, config, edge_numbers};
use futures_util::StreamExt;
use proptest::prelude::*;
use serde_json::Value;

const PROVIDERS: [(Provider, &str); 6] = [
    (Provider::OpenAiChat, "openai-chat"),
    (Provider::OpenAiResponses, "openai-responses"),
    (Provider::Anthropic, "anthropic"),
    (Provider::Gemini, "gemini"),
    (Provider::Ollama, "ollama"),
    (Provider::Bedrock, "bedrock"),
];

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/providers")
}

/// Every recorded response body per provider (the seeds of the mutations), read once.
fn seeds() -> &'static Vec<(Provider, String, Vec<u8>)> {
    static SEEDS: OnceLock<Vec<(Provider, String, Vec<u8>)>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let mut seeds = Vec::new();
        for (provider, dir) in PROVIDERS {
            let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures_dir().join(dir))
                .unwrap()
                .map(|entry| entry.unwrap().path())
                .filter(|path| !path.to_string_lossy().ends_with(".request.json"))
                .collect();
            files.sort();
            for file in files {
                let name = file.file_name().unwrap().to_string_lossy().into_owned();
                seeds.push((provider, name, std::fs::read(&file).unwrap()));
            }
        }
        assert!(seeds.len() > 50, "fixtures missing: {}", seeds.len());
        seeds
    })
}

fn request() -> ModelRequest {
    ModelRequest::new("fuzz-model", vec![Message::user("Hi")])
}

/// Bytes biased towards what matters to the framings and to JSON.
fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    let interesting = prop::sample::select(vec![
        b'\n', b'\r', b':', b' ', b'd', b'a', b't', b'e', b'{', b'}', b'[', b']', b',', b'"',
        b'\\', b'0', b'-', b'e', 0xC3, 0xA9, 0xFF, 0xF0, 0x80, 0,
    ]);
    prop::collection::vec(prop_oneof![interesting, any::<u8>()], 0..max)
}

/// A random JSON value, small, with the edge cases decoders trip on.
fn json_value() -> BoxedStrategy<Value> {
    agentry_fuzz_support::json_value(
        edge_numbers(),
        vec![
            "",
            "text",
            "tool_use",
            "function",
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
            "error",
            "response.completed",
            "response.output_item.added",
            "STOP",
            "MAX_TOKENS",
            "1e30s",
            "18446744073709551616s",
            "-1s",
            "0.5s",
            "type.googleapis.com/google.rpc.RetryInfo",
            "tool_calls",
            "stop",
            "length",
            "end_turn",
            "messageStop",
            "throttlingException",
            "{",
            "{\"a\":",
            "é",
            "\u{0}",
        ],
        ".{0,12}",
        "[a-z_]{1,8}",
    )
}

fn json_edit() -> BoxedStrategy<JsonEdit> {
    agentry_fuzz_support::json_edit(
        vec![
            "index",
            "type",
            "delta",
            "id",
            "name",
            "arguments",
            "input",
            "text",
            "usage",
            "content",
            "choices",
            "candidates",
            "parts",
            "tool_calls",
            "output",
            "item",
            "output_index",
            "content_index",
            "finish_reason",
            "stop_reason",
            "error",
            "message",
            "partial_json",
            "thinking",
            "signature",
            "functionCall",
            "done",
            "done_reason",
            "details",
            "@type",
            "retryDelay",
            "seconds",
            "nanos",
            "code",
            "status",
            "contentBlockIndex",
            "toolUse",
            "toolUseId",
            "reasoningContent",
            "stopReason",
            "inputTokens",
            "cacheReadInputTokens",
        ],
        "[a-z_]{1,8}",
        json_value(),
    )
}

/// One mutation of a recorded body: structure-aware edits of its JSON frames, reordering of
/// its frames, or raw byte damage.
#[derive(Debug, Clone)]
enum Mutation {
    /// Edit the JSON of the n-th frame (an SSE `data:` line, an NDJSON line, or the document).
    Json(prop::sample::Index, Vec<JsonEdit>),
    /// Duplicate the n-th line at the m-th position.
    DuplicateLine(prop::sample::Index, prop::sample::Index),
    /// Remove the n-th line.
    DropLine(prop::sample::Index),
    /// Swap two lines.
    SwapLines(prop::sample::Index, prop::sample::Index),
    /// Cut the body at a point.
    Truncate(prop::sample::Index),
    /// Overwrite a byte.
    Byte(prop::sample::Index, u8),
    /// Insert bytes at a point.
    Splice(prop::sample::Index, Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let index = any::<prop::sample::Index>;
    prop_oneof![
        6 => (index(), prop::collection::vec(json_edit(), 1..4))
            .prop_map(|(at, edits)| Mutation::Json(at, edits)),
        1 => (index(), index()).prop_map(|(a, b)| Mutation::DuplicateLine(a, b)),
        1 => index().prop_map(Mutation::DropLine),
        1 => (index(), index()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        1 => index().prop_map(Mutation::Truncate),
        1 => (index(), any::<u8>()).prop_map(|(at, b)| Mutation::Byte(at, b)),
        1 => (index(), bytes(16)).prop_map(|(at, b)| Mutation::Splice(at, b)),
    ]
}

/// One event-stream message: its string headers and its payload.
type EventMessage = (Vec<(String, String)>, Vec<u8>);

/// The messages of a valid event stream.
fn event_messages(mut body: &[u8]) -> Vec<EventMessage> {
    let mut messages = Vec::new();
    while let Ok(Some((message, used))) = decode_message(body) {
        let headers = message
            .headers()
            .filter_map(|(name, value)| match value {
                agent_backends::framing::HeaderValue::String(text) => {
                    Some((name.to_owned(), text.to_owned()))
                }
                _ => None,
            })
            .collect();
        messages.push((headers, message.payload.to_vec()));
        body = &body[used..];
    }
    messages
}

/// An event stream mutated with valid CRCs, so the decoder (not the CRC check) meets the
/// damage: a message's JSON edited, its event type changed, messages dropped or repeated.
fn mutate_event_stream(
    body: &[u8],
    at: prop::sample::Index,
    edits: &[JsonEdit],
    event_type: Option<&str>,
    drop: Option<prop::sample::Index>,
    repeat: Option<prop::sample::Index>,
) -> Vec<u8> {
    let mut messages = event_messages(body);
    if messages.is_empty() {
        return body.to_vec();
    }
    let target = at.index(messages.len());
    let (headers, payload) = &mut messages[target];
    if let Ok(mut value) = serde_json::from_slice::<Value>(payload) {
        for edit in edits {
            apply(&mut value, edit);
        }
        *payload = serde_json::to_vec(&value).unwrap();
    }
    if let Some(kind) = event_type {
        for (name, value) in headers.iter_mut() {
            if name == ":event-type" || name == ":exception-type" {
                *value = kind.to_owned();
            }
        }
    }
    if let Some(repeat) = repeat {
        let copy = repeat.get(&messages).clone();
        messages.push(copy);
    }
    if let Some(drop) = drop {
        messages.remove(drop.index(messages.len()));
    }
    messages
        .iter()
        .flat_map(|(headers, payload)| {
            let headers: Vec<(&str, &str)> = headers
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str()))
                .collect();
            encode_message(&headers, payload)
        })
        .collect()
}

/// Splits into lines keeping each terminator.
fn lines(body: &[u8]) -> Vec<Vec<u8>> {
    body.split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

fn mutate(body: &[u8], mutation: &Mutation) -> Vec<u8> {
    match mutation {
        Mutation::Json(at, edits) => {
            // A whole-body document, or one line's JSON (after an SSE `data:` prefix).
            if let Ok(mut value) = serde_json::from_slice::<Value>(body) {
                for edit in edits {
                    apply(&mut value, edit);
                }
                return serde_json::to_vec(&value).unwrap();
            }
            let mut lines = lines(body);
            let json_lines: Vec<usize> = lines
                .iter()
                .enumerate()
                .filter(|(_, line)| {
                    let text = String::from_utf8_lossy(line);
                    let text = text.strip_prefix("data:").unwrap_or(&text).trim();
                    text.starts_with('{') || text.starts_with('[')
                })
                .map(|(i, _)| i)
                .collect();
            if json_lines.is_empty() {
                return body.to_vec();
            }
            let line = &mut lines[*at.get(&json_lines)];
            let text = String::from_utf8_lossy(line).into_owned();
            let (prefix, json) = match text.strip_prefix("data:") {
                Some(rest) => ("data: ", rest.trim()),
                None => ("", text.trim()),
            };
            // Gemini's streamed array puts `,` or `[` around the elements: keep them.
            let (lead, json, tail) = split_array_punctuation(json);
            if let Ok(mut value) = serde_json::from_str::<Value>(json) {
                for edit in edits {
                    apply(&mut value, edit);
                }
                *line = format!("{prefix}{lead}{value}{tail}\n").into_bytes();
            }
            lines.concat()
        }
        Mutation::DuplicateLine(from, to) => {
            let mut lines = lines(body);
            if lines.is_empty() {
                return body.to_vec();
            }
            let line = from.get(&lines).clone();
            let to = to.index(lines.len() + 1);
            lines.insert(to, line);
            lines.concat()
        }
        Mutation::DropLine(at) => {
            let mut lines = lines(body);
            if !lines.is_empty() {
                lines.remove(at.index(lines.len()));
            }
            lines.concat()
        }
        Mutation::SwapLines(a, b) => {
            let mut lines = lines(body);
            if !lines.is_empty() {
                let (a, b) = (a.index(lines.len()), b.index(lines.len()));
                lines.swap(a, b);
            }
            lines.concat()
        }
        Mutation::Truncate(at) => body[..at.index(body.len() + 1)].to_vec(),
        Mutation::Byte(at, byte) => {
            let mut body = body.to_vec();
            if !body.is_empty() {
                let at = at.index(body.len());
                body[at] = *byte;
            }
            body
        }
        Mutation::Splice(at, bytes) => {
            let mut body = body.to_vec();
            let at = at.index(body.len() + 1);
            body.splice(at..at, bytes.iter().copied());
            body
        }
    }
}

fn split_array_punctuation(json: &str) -> (&str, &str, &str) {
    let lead_len = json.len() - json.trim_start_matches(['[', ',']).len();
    let (lead, rest) = json.split_at(lead_len);
    let rest_trimmed = rest.trim_end_matches([']', ',']);
    let tail = &rest[rest_trimmed.len()..];
    // Only strip the tail when what remains is a document.
    if serde_json::from_str::<Value>(rest_trimmed).is_ok() {
        (lead, rest_trimmed, tail)
    } else {
        (lead, rest, "")
    }
}

fn content_type() -> impl Strategy<Value = Option<&'static str>> {
    prop::option::of(prop::sample::select(vec![
        "text/event-stream",
        "application/x-ndjson",
        "application/json",
        "application/octet-stream",
        "TEXT/EVENT-STREAM; charset=utf-8",
        "application/vnd.amazon.eventstream",
        "",
    ]))
}

/// Decodes whole and in `chunk`-byte pieces: never a panic, and the outcome does not depend
/// on how the body was split.
fn check_decode(
    provider: Provider,
    content_type: Option<&str>,
    body: &[u8],
    chunk: usize,
) -> Result<(), TestCaseError> {
    let request = request();
    let whole = replay::decode(provider, &request, content_type, body, 0);
    let split = replay::decode(provider, &request, content_type, body, chunk);
    match (&whole, &split) {
        (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
        (Err(a), Err(b)) => prop_assert_eq!(a.kind, b.kind),
        _ => prop_assert!(
            false,
            "{provider:?}: whole {whole:?} but split at {chunk}: {split:?}"
        ),
    }
    if let Err(error) = &whole {
        prop_assert!(!error.message.is_empty());
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    /// Arbitrary bytes through each framing, in arbitrary pieces: frames or a typed error.
    #[test]
    fn fuzz_framing_arbitrary_bytes(body in bytes(512), chunk in 1usize..64) {
        let mut sse = SseParser::new();
        let mut ndjson = NdjsonParser::new();
        let mut array = JsonArrayParser::new();
        let mut events = EventStreamParser::new();
        let (mut sse_ok, mut ndjson_ok, mut array_ok, mut events_ok) = (true, true, true, true);
        for piece in body.chunks(chunk) {
            events_ok = events_ok && events.feed(piece, &mut |message| message.text_frame().map(|_| ())).is_ok();
            sse_ok = sse_ok && sse.feed(piece, &mut |_| Ok(())).is_ok();
            ndjson_ok = ndjson_ok && ndjson.feed(piece, &mut |_| Ok(())).is_ok();
            array_ok = array_ok && array.feed(piece, &mut |_| Ok(())).is_ok();
        }
        if sse_ok {
            let _ = sse.finish(&mut |_| Ok(()));
        }
        if ndjson_ok {
            let _ = ndjson.finish(&mut |_| Ok(()));
        }
        if array_ok {
            let _ = array.finish();
        }
        if events_ok {
            let _ = events.finish();
        }
    }

    /// Arbitrary bytes through every provider's decoder under every framing.
    #[test]
    fn fuzz_decode_arbitrary_bytes(
        provider in prop::sample::select(PROVIDERS.map(|(p, _)| p).to_vec()),
        content_type in content_type(),
        body in bytes(512),
        chunk in 1usize..64,
    ) {
        check_decode(provider, content_type, &body, chunk)?;
    }

    /// Recorded bodies (streams, whole responses and errors of every provider), mutated with
    /// structure: JSON frames edited at any node, frames duplicated, dropped, reordered, and
    /// bytes damaged.
    #[test]
    fn fuzz_decode_mutated_recordings(
        seed in any::<prop::sample::Index>(),
        mutations in prop::collection::vec(mutation(), 1..6),
        sniff in any::<bool>(),
        chunk in 1usize..97,
    ) {
        let (provider, name, body) = seed.get(seeds());
        let mut body = body.clone();
        for mutation in &mutations {
            body = mutate(&body, mutation);
        }
        let content_type = if sniff { Some(Cassette::sniff(&body)) } else { Some(Cassette::sniff(&seed.get(seeds()).2)) };
        check_decode(*provider, content_type, &body, chunk)
            .map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
    }

    /// Bedrock's recorded event streams with their JSON payloads edited, event types swapped
    /// and messages dropped or repeated, re-encoded with valid CRCs.
    #[test]
    fn fuzz_decode_mutated_event_streams(
        seed in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        edits in prop::collection::vec(json_edit(), 0..4),
        event_type in prop::option::of(prop::sample::select(vec![
            "messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop",
            "messageStop", "metadata", "throttlingException", "validationException", "other",
        ])),
        drop in prop::option::of(any::<prop::sample::Index>()),
        repeat in prop::option::of(any::<prop::sample::Index>()),
        chunk in 1usize..97,
    ) {
        let streams: Vec<_> = seeds()
            .iter()
            .filter(|(provider, name, _)| *provider == Provider::Bedrock && name.ends_with(".eventstream"))
            .collect();
        prop_assert!(streams.len() >= 4);
        let (_, name, body) = seed.get(&streams);
        let body = mutate_event_stream(body, at, &edits, event_type, drop, repeat);
        check_decode(Provider::Bedrock, Some("application/vnd.amazon.eventstream"), &body, chunk)
            .map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
    }

    /// A cassette file of arbitrary bytes, with an arbitrary sibling request file, loads (or
    /// fails with a typed error) and its body decodes or fails cleanly.
    #[test]
    fn fuzz_cassette_files(
        body in bytes(256),
        request in prop::option::of(bytes(128)),
        status in prop::sample::select(vec!["stream-x", "error-500-x", "error-999999-x", "error--x", "error-0-x", "error-"]),
        provider in prop::sample::select(PROVIDERS.map(|(p, _)| p).to_vec()),
    ) {
        let dir = scratch_dir();
        let path = dir.join(format!("{status}.sse"));
        let sibling = dir.join(format!("{status}.request.json"));
        std::fs::write(&path, &body).unwrap();
        match &request {
            Some(request) => std::fs::write(&sibling, request).unwrap(),
            None => {
                let _ = std::fs::remove_file(&sibling);
            }
        }
        let cassette = Cassette::from_file(&path).unwrap();
        prop_assert_eq!(&cassette.body[..], &body[..]);
        let _ = cassette.is_stream();
        let _ = replay::decode(provider, &request_value(), Some(&cassette.content_type), &cassette.body, 7);
        let _ = RecordedConversation::new(provider, [cassette.body.clone()]);
    }
}

/// A directory of this process's own for the cassette files.
fn scratch_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("agentry-fuzz-cassettes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

fn request_value() -> ModelRequest {
    request()
}

proptest! {
    // Each case is one HTTP exchange on loopback: fewer of them.
    #![proptest_config(config(64))]

    /// Error responses (any status, any body, mutated recorded error bodies) through the real
    /// adapters over HTTP: a typed error carrying the status, never a panic.
    #[test]
    fn fuzz_error_bodies_over_http(
        provider in prop::sample::select(PROVIDERS.map(|(p, _)| p).to_vec()),
        status in prop::sample::select(vec![400u16, 401, 404, 408, 413, 422, 429, 500, 502, 503, 529, 599]),
        body in prop_oneof![
            bytes(256),
            (any::<prop::sample::Index>(), prop::collection::vec(json_edit(), 0..4)).prop_map(|(seed, edits)| {
                let errors: Vec<&Vec<u8>> = seeds().iter().filter(|(_, name, _)| name.starts_with("error-")).map(|(_, _, body)| body).collect();
                let mut value: Value = serde_json::from_slice(seed.get(&errors).as_slice()).unwrap_or(Value::Null);
                for edit in &edits {
                    apply(&mut value, edit);
                }
                serde_json::to_vec(&value).unwrap()
            }),
        ],
        retry_after in prop::option::of((
            prop::sample::select(vec!["retry-after", "retry-after-ms"]),
            prop::sample::select(vec!["0", "1", "0.5", "-1", "1e30", "1e400", "NaN", "inf", "18446744073709551616", "x", ""]),
        )),
    ) {
        let replay = replay_fixture();
        let mut cassette = Cassette::new(status, "application/json", body.clone());
        if let Some((name, value)) = retry_after {
            cassette = cassette.with_header(name, value);
        }
        let outcome = replay.runtime.block_on(async {
            replay.server.push(cassette);
            let backend = &replay.backends[PROVIDERS.iter().position(|(p, _)| *p == provider).unwrap()];
            let request = request();
            let events: Vec<_> = backend.stream(&request).collect().await;
            events
        });
        prop_assert_eq!(replay.server.remaining(), 0);
        let error = outcome.into_iter().find_map(Result::err);
        prop_assert!(error.is_some(), "{provider:?} {status}: no error");
        let error = error.unwrap();
        prop_assert_eq!(error.status, Some(status));
    }
}

/// One loopback replay server and one adapter per provider for the whole process (a server
/// per case would pile up sockets faster than they close).
struct ReplayFixture {
    runtime: tokio::runtime::Runtime,
    server: ReplayServer,
    backends: Vec<Box<dyn Backend>>,
}

fn replay_fixture() -> &'static ReplayFixture {
    static FIXTURE: OnceLock<ReplayFixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let server = runtime.block_on(ReplayServer::start([])).unwrap();
        let backends = PROVIDERS
            .iter()
            .map(|(provider, _)| {
                server
                    .backend(
                        *provider,
                        HttpOptions::default().with_retry(RetryPolicy::none()),
                    )
                    .unwrap()
            })
            .collect();
        ReplayFixture {
            runtime,
            server,
            backends,
        }
    })
}

/// Found by `fuzz_decode_arbitrary_bytes`: under `application/json`, a body whose first
/// chunk was only whitespace was framed as one JSON document while the same body in one
/// piece was framed as SSE (its first byte after the newline is `:`), so the outcome depended
/// on where the network split it.
#[test]
fn regression_leading_whitespace_chunk_does_not_decide_the_framing() {
    let request = request();
    for provider in PROVIDERS.map(|(p, _)| p) {
        for body in [&b"\n:"[..], b"\r\n data: {}\n\n", b"  [", b"\n\n{\"x\":1}"] {
            let whole = replay::decode(provider, &request, Some("application/json"), body, 0);
            let split = replay::decode(provider, &request, Some("application/json"), body, 1);
            match (&whole, &split) {
                (Ok(a), Ok(b)) => assert_eq!(a, b),
                (Err(a), Err(b)) => assert_eq!(a.kind, b.kind, "{provider:?} {body:?}: {a} / {b}"),
                _ => panic!("{provider:?} {body:?}: {whole:?} / {split:?}"),
            }
        }
    }
}
