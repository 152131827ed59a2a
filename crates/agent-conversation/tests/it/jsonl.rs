//! The JSONL appender and loader against real files.

use std::fs;
use std::path::Path;

use agent_conversation::{
    ConversationAppender, Error, JsonlAppender, StoredTurn, TornTail, Turn, load_jsonl,
};
use agent_types::AssistantMessage;

use crate::fixtures::tool_round;

async fn append_all(appender: &JsonlAppender, turns: &[Turn]) {
    for turn in turns {
        appender.append(turn).await.unwrap();
    }
}

fn stored(turns: &[Turn], first_seq: u64) -> Vec<StoredTurn> {
    turns
        .iter()
        .zip(first_seq..)
        .map(|(turn, seq)| StoredTurn::new(seq, turn.clone()))
        .collect()
}

/// Byte lengths of each line of the file, newline included.
fn line_lengths(path: &Path) -> Vec<u64> {
    fs::read(path)
        .unwrap()
        .split_inclusive(|&byte| byte == b'\n')
        .map(|line| line.len() as u64)
        .collect()
}

#[tokio::test]
async fn appended_turns_load_back_in_order_one_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.jsonl");
    let appender = JsonlAppender::open(&path).await.unwrap();
    assert_eq!(appender.repaired_tail(), None);
    append_all(&appender, &tool_round()).await;

    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 3);
    assert!(text.ends_with('\n'));

    let loaded = load_jsonl(&path).await.unwrap();
    assert_eq!(loaded.turns, stored(&tool_round(), 0));
    assert_eq!(loaded.torn_tail, None);
}

#[tokio::test]
async fn the_stored_line_format_is_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.jsonl");
    let appender = JsonlAppender::open(&path).await.unwrap();
    append_all(&appender, &tool_round()).await;
    insta::assert_snapshot!("jsonl_tool_round", fs::read_to_string(&path).unwrap());
}

#[tokio::test]
async fn a_file_truncated_mid_line_loads_its_complete_turns_and_reports_the_tear() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.jsonl");
    let appender = JsonlAppender::open(&path).await.unwrap();
    append_all(&appender, &tool_round()).await;
    drop(appender);

    let lengths = line_lengths(&path);
    let complete = lengths[0] + lengths[1];
    // Cut the third line in the middle, as a crash during its write would.
    let torn_len = lengths[2] / 2;
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(complete + torn_len)
        .unwrap();

    let loaded = load_jsonl(&path).await.unwrap();
    assert_eq!(loaded.turns, stored(&tool_round()[..2], 0));
    assert_eq!(
        loaded.torn_tail,
        Some(TornTail {
            offset: complete,
            len: torn_len,
        })
    );
    // Loading does not modify the file.
    assert_eq!(fs::metadata(&path).unwrap().len(), complete + torn_len);
}

#[tokio::test]
async fn reopening_cuts_a_torn_tail_reports_it_and_continues_the_numbering() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.jsonl");
    let turns = tool_round();
    let appender = JsonlAppender::open(&path).await.unwrap();
    append_all(&appender, &turns).await;
    drop(appender);

    let lengths = line_lengths(&path);
    let complete = lengths[0] + lengths[1];
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(complete + 5)
        .unwrap();

    let reopened = JsonlAppender::open(&path).await.unwrap();
    assert_eq!(
        reopened.repaired_tail(),
        Some(TornTail {
            offset: complete,
            len: 5,
        })
    );
    assert_eq!(fs::metadata(&path).unwrap().len(), complete);

    // The lost third turn is appended again and gets the sequence number the tear freed.
    reopened.append(&turns[2]).await.unwrap();
    let loaded = load_jsonl(&path).await.unwrap();
    assert_eq!(loaded.turns, stored(&turns, 0));
    assert_eq!(loaded.torn_tail, None);
}

#[tokio::test]
async fn reopening_a_clean_file_appends_after_its_turns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.jsonl");
    let turns = tool_round();
    append_all(&JsonlAppender::open(&path).await.unwrap(), &turns[..2]).await;

    let reopened = JsonlAppender::open(&path).await.unwrap();
    assert_eq!(reopened.repaired_tail(), None);
    reopened.append(&turns[2]).await.unwrap();

    let loaded = load_jsonl(&path).await.unwrap();
    assert_eq!(loaded.turns, stored(&turns, 0));
}

#[tokio::test]
async fn a_corrupt_line_before_the_last_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.jsonl");
    append_all(&JsonlAppender::open(&path).await.unwrap(), &tool_round()).await;

    // Damage the second of three lines.
    let text = fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[1] = "{\"seq\": 1, \"at_unix";
    let damaged = format!("{}\n", lines.join("\n"));
    fs::write(&path, &damaged).unwrap();

    let error = load_jsonl(&path).await.unwrap_err();
    assert!(
        matches!(&error, Error::CorruptLine { line: 2, path: named, .. } if named == &path),
        "{error:?}"
    );
    assert!(error.to_string().contains("line 2 is corrupt"), "{error}");

    // Opening for append refuses too, and leaves the file as it was.
    let error = JsonlAppender::open(&path).await.unwrap_err();
    assert!(
        matches!(error, Error::CorruptLine { line: 2, .. }),
        "{error:?}"
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), damaged);
}

#[tokio::test]
async fn loading_a_missing_file_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let error = load_jsonl(dir.path().join("nope.jsonl")).await.unwrap_err();
    assert!(
        matches!(&error, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{error:?}"
    );
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn appending_to_a_full_device_is_a_storage_full_error() {
    let appender = JsonlAppender::open("/dev/full").await.unwrap();
    let turn = Turn::at(AssistantMessage::text("hello"), 1);

    let error = appender.append(&turn).await.unwrap_err();
    assert!(error.is_storage_full(), "{error:?}");
    assert!(matches!(error, Error::StorageFull { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("storage is full"), "{message}");
    assert!(message.contains("/dev/full"), "{message}");

    // Still full: the next append fails the same way rather than pretending to succeed.
    let error = appender.append(&turn).await.unwrap_err();
    assert!(error.is_storage_full(), "{error:?}");
}

#[tokio::test]
async fn concurrent_appends_through_clones_never_interleave_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.jsonl");
    let appender = JsonlAppender::open(&path).await.unwrap();
    let tasks: Vec<_> = (0..4)
        .map(|task| {
            let appender = appender.clone();
            tokio::spawn(async move {
                for i in 0..10 {
                    let turn = Turn::at(AssistantMessage::text(format!("{task}-{i}")), i);
                    appender.append(&turn).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let loaded = load_jsonl(&path).await.unwrap();
    assert_eq!(loaded.turns.len(), 40);
    assert_eq!(loaded.torn_tail, None);
}
