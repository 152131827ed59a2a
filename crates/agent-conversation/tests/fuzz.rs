//! Fuzzing the conversation logs: JSONL files of arbitrary bytes and of the stored v1 log
//! mutated line by line and node by node, and SQLite files with damaged pages or garbage
//! rows. The properties: loading gives the turns or a typed error, never a panic; a JSONL file
//! that loads can be reopened for appending (its torn tail cut) and still loads with the new
//! turn after its old ones. Cases per property: `AGENTRY_FUZZ_CASES` (docs/reliability.md).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use agent_conversation::{
    ConversationAppender, ConversationId, JsonlAppender, SqliteStore, Turn, load_jsonl,
};
use agent_types::AssistantMessage;
use agentry_fuzz_support::{JsonEdit, apply, config, edge_numbers};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Edits drawing keys from `keys` and strings from `strings`.
fn json_edit(
    keys: Vec<&'static str>,
    strings: Vec<&'static str>,
) -> impl Strategy<Value = JsonEdit> {
    let value =
        agentry_fuzz_support::json_value(edge_numbers(), strings, ".{0,12}", "[a-z_]{1,10}");
    agentry_fuzz_support::json_edit(keys, "[a-z_]{1,10}", value)
}

const KEYS: [&str; 12] = [
    "seq",
    "at_unix_ms",
    "message",
    "role",
    "content",
    "type",
    "text",
    "tool_call_id",
    "name",
    "arguments",
    "usage",
    "stop_reason",
];

const STRINGS: [&str; 10] = [
    "",
    "user",
    "assistant",
    "tool",
    "text",
    "tool_call",
    "call_w",
    "get_weather",
    "tool_calls",
    "\u{0}",
];

fn v1(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/sessions/v1")
        .join(name)
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    })
}

/// A fresh file path in a directory of this process's own, for this test thread.
fn scratch(name: &str) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap());
    // One file per test thread: `cargo test` runs the properties of this file in parallel.
    let thread = std::thread::current();
    let path = dir.path().join(format!(
        "{}-{name}",
        thread.name().unwrap_or("main").replace("::", "-")
    ));
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    path
}

/// Writes `bytes` as a JSONL log, loads it, and when it loads, reopens it for appending,
/// appends a turn and loads it again.
fn check_jsonl(bytes: &[u8]) -> Result<(), TestCaseError> {
    let path = scratch("conversation.jsonl");
    std::fs::write(&path, bytes).unwrap();
    runtime().block_on(async {
        let Ok(loaded) = load_jsonl(&path).await else {
            // Refused: reopening for appending must refuse too, not glue turns onto garbage.
            prop_assert!(
                JsonlAppender::open(&path).await.is_err(),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
            return Ok(());
        };
        let appender = JsonlAppender::open(&path)
            .await
            .map_err(|e| TestCaseError::fail(format!("loads but cannot be reopened: {e}")))?;
        prop_assert_eq!(appender.repaired_tail(), loaded.torn_tail);
        appender
            .append(&Turn::new(AssistantMessage::text("after")))
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let again = load_jsonl(&path)
            .await
            .map_err(|e| TestCaseError::fail(format!("appended file does not load: {e}")))?;
        prop_assert_eq!(again.torn_tail, None);
        prop_assert_eq!(again.turns.len(), loaded.turns.len() + 1);
        prop_assert_eq!(&again.turns[..loaded.turns.len()], &loaded.turns[..]);
        prop_assert_eq!(again.turns.last().unwrap().seq, loaded.turns.len() as u64);
        Ok(())
    })
}

/// One change to a JSONL log.
#[derive(Debug, Clone)]
enum LineEdit {
    Json(prop::sample::Index, Vec<JsonEdit>),
    Duplicate(prop::sample::Index),
    Drop(prop::sample::Index),
    Swap(prop::sample::Index, prop::sample::Index),
    Truncate(prop::sample::Index),
    Splice(prop::sample::Index, Vec<u8>),
}

fn line_edit() -> impl Strategy<Value = LineEdit> {
    let index = any::<prop::sample::Index>;
    prop_oneof![
        4 => (index(), prop::collection::vec(json_edit(KEYS.to_vec(), STRINGS.to_vec()), 1..4))
            .prop_map(|(at, edits)| LineEdit::Json(at, edits)),
        1 => index().prop_map(LineEdit::Duplicate),
        1 => index().prop_map(LineEdit::Drop),
        1 => (index(), index()).prop_map(|(a, b)| LineEdit::Swap(a, b)),
        2 => index().prop_map(LineEdit::Truncate),
        1 => (index(), prop::collection::vec(prop_oneof![Just(b'\n'), Just(b'\r'), Just(b'{'), Just(0xFF), any::<u8>()], 1..8))
            .prop_map(|(at, bytes)| LineEdit::Splice(at, bytes)),
    ]
}

fn edit_log(bytes: &[u8], edit: &LineEdit) -> Vec<u8> {
    let mut lines: Vec<Vec<u8>> = bytes
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    match edit {
        LineEdit::Json(at, edits) => {
            if lines.is_empty() {
                return bytes.to_vec();
            }
            let line = at.get_mut(&mut lines);
            if let Ok(mut value) = serde_json::from_slice::<Value>(line) {
                for edit in edits {
                    apply(&mut value, edit);
                }
                let newline = line.ends_with(b"\n");
                *line = serde_json::to_vec(&value).unwrap();
                if newline {
                    line.push(b'\n');
                }
            }
        }
        LineEdit::Duplicate(at) => {
            if !lines.is_empty() {
                let i = at.index(lines.len());
                let line = lines[i].clone();
                lines.insert(i, line);
            }
        }
        LineEdit::Drop(at) => {
            if !lines.is_empty() {
                lines.remove(at.index(lines.len()));
            }
        }
        LineEdit::Swap(a, b) => {
            if !lines.is_empty() {
                let (a, b) = (a.index(lines.len()), b.index(lines.len()));
                lines.swap(a, b);
            }
        }
        LineEdit::Truncate(at) => return bytes[..at.index(bytes.len() + 1)].to_vec(),
        LineEdit::Splice(at, extra) => {
            let mut bytes = bytes.to_vec();
            let at = at.index(bytes.len() + 1);
            bytes.splice(at..at, extra.iter().copied());
            return bytes;
        }
    }
    lines.concat()
}

/// One change to a SQLite file: bytes overwritten somewhere (in the header or a page), or
/// the file cut short.
#[derive(Debug, Clone)]
enum FileDamage {
    Bytes(prop::sample::Index, Vec<u8>),
    Header(usize, u8),
    Truncate(prop::sample::Index),
}

fn file_damage() -> impl Strategy<Value = FileDamage> {
    prop_oneof![
        3 => (any::<prop::sample::Index>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| FileDamage::Bytes(at, bytes)),
        2 => (0usize..100, any::<u8>()).prop_map(|(at, byte)| FileDamage::Header(at, byte)),
        1 => any::<prop::sample::Index>().prop_map(FileDamage::Truncate),
    ]
}

/// Opens the SQLite file at `path` and loads every conversation in it: any outcome but a panic.
fn load_sqlite(path: &Path) {
    runtime().block_on(async {
        let Ok(store) = SqliteStore::open(path).await else {
            return;
        };
        let ids = store.conversations().await.unwrap_or_default();
        for id in ids.iter().chain([&ConversationId::from("sess-v1")]) {
            let _ = store.load(id).await;
        }
        // A damaged store that opened may still refuse an append; it must not panic.
        let _ = store
            .appender("sess-v1")
            .append(&Turn::new(AssistantMessage::text("after")))
            .await;
    });
}

proptest! {
    #![proptest_config(config(256))]

    /// Arbitrary bytes as a JSONL log.
    #[test]
    fn fuzz_jsonl_arbitrary_bytes(bytes in prop::collection::vec(prop_oneof![
        prop::sample::select(b"\n\r{}[]\":,0123456789seqmagrolt \\".to_vec()), any::<u8>()
    ], 0..300)) {
        check_jsonl(&bytes)?;
    }

    /// The stored v1 log, edited: JSON nodes changed, lines duplicated, dropped, reordered,
    /// cut, bytes inserted.
    #[test]
    fn fuzz_jsonl_mutated(edits in prop::collection::vec(line_edit(), 1..5)) {
        let mut bytes = std::fs::read(v1("conversation.jsonl")).unwrap();
        for edit in &edits {
            bytes = edit_log(&bytes, edit);
        }
        check_jsonl(&bytes)?;
    }
}

proptest! {
    // Each case opens a database file: fewer of them.
    #![proptest_config(config(64))]

    /// The stored v1 SQLite file with damaged bytes: opens and loads, or a typed error.
    #[test]
    fn fuzz_sqlite_damaged_file(damage in prop::collection::vec(file_damage(), 1..4)) {
        let mut bytes = std::fs::read(v1("conversation.sqlite")).unwrap();
        for damage in &damage {
            match damage {
                FileDamage::Bytes(at, new) => {
                    let at = at.index(bytes.len());
                    let end = (at + new.len()).min(bytes.len());
                    bytes[at..end].copy_from_slice(&new[..end - at]);
                }
                FileDamage::Header(at, byte) => {
                    if *at < bytes.len() {
                        bytes[*at] = *byte;
                    }
                }
                FileDamage::Truncate(at) => bytes.truncate(at.index(bytes.len() + 1)),
            }
        }
        let path = scratch("damaged.sqlite");
        std::fs::write(&path, &bytes).unwrap();
        load_sqlite(&path);
    }

    /// Rows another writer put into the turns table (any text as a message, any sequence
    /// number and time): loading them is the turns or `CorruptRow`, never a panic.
    #[test]
    fn fuzz_sqlite_garbage_rows(
        rows in prop::collection::vec((
            prop::sample::select(vec!["sess-v1", "other", ""]),
            prop_oneof![0i64..8, any::<i64>()],
            any::<i64>(),
            prop_oneof![
                ".{0,40}",
                (prop::collection::vec(json_edit(KEYS.to_vec(), STRINGS.to_vec()), 0..4)).prop_map(|edits| {
                    let mut value = json!({"role": "assistant", "content": [{"type": "text", "text": "hi"}]});
                    for edit in &edits {
                        apply(&mut value, edit);
                    }
                    value.to_string()
                }),
            ],
        ), 1..6),
    ) {
        let path = scratch("rows.sqlite");
        std::fs::copy(v1("conversation.sqlite"), &path).unwrap();
        {
            let connection = rusqlite::Connection::open(&path).unwrap();
            for (id, seq, at, message) in &rows {
                let _ = connection.execute(
                    "INSERT OR REPLACE INTO turns VALUES (?1, ?2, ?3, ?4)",
                    rusqlite::params![id, seq, at, message],
                );
            }
        }
        load_sqlite(&path);
    }
}
