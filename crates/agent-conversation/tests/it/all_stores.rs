//! The three appenders, driven through the trait object the loop uses, store the same thing.

use std::sync::Arc;

use agent_conversation::{
    ConversationAppender, JsonlAppender, MemoryAppender, SqliteStore, load_jsonl,
};

use crate::fixtures::tool_round;

#[tokio::test]
async fn memory_jsonl_and_sqlite_read_back_the_same_turns() {
    let dir = tempfile::tempdir().unwrap();
    let memory = MemoryAppender::new();
    let jsonl_path = dir.path().join("c.jsonl");
    let store = SqliteStore::open(dir.path().join("c.db")).await.unwrap();

    let appenders: Vec<Arc<dyn ConversationAppender>> = vec![
        Arc::new(memory.clone()),
        Arc::new(JsonlAppender::open(&jsonl_path).await.unwrap()),
        Arc::new(store.appender("c")),
    ];
    for turn in tool_round() {
        for appender in &appenders {
            appender.append(&turn).await.unwrap();
        }
    }

    let from_memory = memory.turns();
    assert_eq!(from_memory.len(), 3);
    assert_eq!(load_jsonl(&jsonl_path).await.unwrap().turns, from_memory);
    assert_eq!(store.load(&"c".into()).await.unwrap(), from_memory);
}
