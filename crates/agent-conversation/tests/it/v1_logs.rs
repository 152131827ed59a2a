//! Conversation logs written by agentry before content blocks (session format 1) still load.
//! The files under `fixtures/sessions/v1/` were written by that release and are never
//! rewritten; each test copies them to a temp dir first, as opening a store may touch the file.

use std::path::{Path, PathBuf};

use agent_conversation::{ConversationId, SqliteStore, StoredTurn, load_jsonl};
use agent_types::{Message, ToolResult};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/sessions/v1")
        .join(name)
}

/// What both logs hold: the turns the loop appended, the tool result as plain text.
fn check(turns: &[StoredTurn]) {
    assert_eq!(turns.len(), 3, "{turns:?}");
    let seqs: Vec<u64> = turns.iter().map(|turn| turn.seq).collect();
    assert_eq!(seqs, [0, 1, 2]);
    let Message::Tool(result) = &turns[1].message else {
        panic!("turn 1 is not a tool result: {:?}", turns[1].message);
    };
    assert_eq!(
        *result,
        ToolResult::ok(
            "call_w",
            "get_weather",
            r#"{"city":"Denver","sky":"sunny","temp_c":21}"#
        )
    );
    let Message::Assistant(last) = &turns[2].message else {
        panic!("turn 2 is not an assistant message: {:?}", turns[2].message);
    };
    assert_eq!(last.tool_calls().next().unwrap().name, "approve_payment");
}

#[cfg(feature = "jsonl")]
#[tokio::test]
async fn version_1_logs_jsonl_written_by_the_previous_release_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("conversation.jsonl");
    std::fs::copy(fixture("conversation.jsonl"), &path).unwrap();
    let loaded = load_jsonl(&path).await.unwrap();
    assert!(loaded.torn_tail.is_none());
    check(&loaded.turns);
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn version_1_logs_sqlite_written_by_the_previous_release_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("conversation.sqlite");
    std::fs::copy(fixture("conversation.sqlite"), &path).unwrap();
    let store = SqliteStore::open(&path).await.unwrap();
    let turns = store.load(&ConversationId::from("sess-v1")).await.unwrap();
    check(&turns);
}

/// A tool result with content blocks (format 2) is stored in its block-list form and loads
/// back unchanged, next to a text-only one, in both stores.
#[cfg(all(feature = "jsonl", feature = "sqlite"))]
#[tokio::test]
async fn content_blocks_round_trip_through_both_stores() {
    use agent_conversation::{ConversationAppender, JsonlAppender, Turn};
    use agent_types::{FileBlock, ImageSource, ToolResultBlock};

    let rich = ToolResult::with_blocks(
        "call_c",
        "chart",
        vec![
            ToolResultBlock::Text {
                text: "The chart:".into(),
            },
            ToolResultBlock::Image {
                source: ImageSource::Base64 {
                    media_type: "image/png".into(),
                    data: "iVBORw0KGgo=".into(),
                },
            },
            ToolResultBlock::File(FileBlock::base64("application/pdf", "JVBERi0x")),
            ToolResultBlock::Json {
                value: serde_json::json!({"rows": 3}),
            },
        ],
    );
    let turns = [
        Turn::at(rich, 1),
        Turn::at(ToolResult::ok("call_t", "t", "plain"), 2),
    ];
    let dir = tempfile::tempdir().unwrap();

    let path = dir.path().join("log.jsonl");
    let appender = JsonlAppender::open(&path).await.unwrap();
    for turn in &turns {
        appender.append(turn).await.unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains(r#""content":[{"type":"text","text":"The chart:"}"#),
        "{text}"
    );
    assert!(text.contains(r#""content":"plain""#), "{text}");
    let loaded = load_jsonl(&path).await.unwrap();
    let messages: Vec<&Message> = loaded.turns.iter().map(|turn| &turn.message).collect();
    assert_eq!(messages, [&turns[0].message, &turns[1].message]);

    let store = SqliteStore::open(dir.path().join("store.db"))
        .await
        .unwrap();
    let appender = store.appender("c");
    for turn in &turns {
        appender.append(turn).await.unwrap();
    }
    let loaded = store.load(&ConversationId::from("c")).await.unwrap();
    let messages: Vec<&Message> = loaded.iter().map(|turn| &turn.message).collect();
    assert_eq!(messages, [&turns[0].message, &turns[1].message]);
}
