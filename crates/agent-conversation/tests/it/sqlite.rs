//! The SQLite store against a real database file.

use std::sync::Arc;

use agent_conversation::{ConversationAppender, ConversationId, SqliteStore, StoredTurn, Turn};

use crate::fixtures::{numbered, tool_round};

fn stored(turns: &[Turn]) -> Vec<StoredTurn> {
    turns
        .iter()
        .zip(0..)
        .map(|(turn, seq)| StoredTurn::new(seq, turn.clone()))
        .collect()
}

#[tokio::test]
async fn interleaved_conversations_stay_separate_and_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let alpha = store.appender("alpha");
    let beta = store.appender("beta");
    let alpha_turns = tool_round();
    let beta_turns = numbered("beta", 4);

    // alpha, beta, alpha, beta, ...
    for (i, beta_turn) in beta_turns.iter().enumerate() {
        if let Some(alpha_turn) = alpha_turns.get(i) {
            alpha.append(alpha_turn).await.unwrap();
        }
        beta.append(beta_turn).await.unwrap();
    }

    let alpha_id = ConversationId::from("alpha");
    let beta_id = ConversationId::from("beta");
    assert_eq!(store.load(&alpha_id).await.unwrap(), stored(&alpha_turns));
    assert_eq!(store.load(&beta_id).await.unwrap(), stored(&beta_turns));
    assert_eq!(
        store.conversations().await.unwrap(),
        vec![alpha_id.clone(), beta_id.clone()]
    );
    drop((alpha, beta, store));

    let reopened = SqliteStore::open(&path).await.unwrap();
    assert_eq!(
        reopened.load(&alpha_id).await.unwrap(),
        stored(&alpha_turns)
    );
    assert_eq!(reopened.load(&beta_id).await.unwrap(), stored(&beta_turns));
}

#[tokio::test]
async fn an_unknown_conversation_loads_empty_and_is_not_listed() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("store.db"))
        .await
        .unwrap();
    let nobody = store.appender("nobody");
    assert_eq!(nobody.conversation_id().as_str(), "nobody");
    assert!(store.load(&"nobody".into()).await.unwrap().is_empty());
    assert!(store.conversations().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_new_appender_for_an_existing_conversation_continues_its_numbering() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let turns = tool_round();
    let store = SqliteStore::open(&path).await.unwrap();
    store.appender("c").append(&turns[0]).await.unwrap();
    drop(store);

    let store = SqliteStore::open(&path).await.unwrap();
    let appender = store.appender("c");
    appender.append(&turns[1]).await.unwrap();
    appender.append(&turns[2]).await.unwrap();
    assert_eq!(store.load(&"c".into()).await.unwrap(), stored(&turns));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_tasks_appending_to_two_conversations_stay_separate_and_ordered() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("store.db"))
        .await
        .unwrap();
    let tasks: Vec<_> = ["left", "right"]
        .into_iter()
        .map(|label| {
            // The loop holds its appender as a trait object.
            let appender: Arc<dyn ConversationAppender> = Arc::new(store.appender(label));
            tokio::spawn(async move {
                for turn in numbered(label, 50) {
                    appender.append(&turn).await.unwrap();
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }

    for label in ["left", "right"] {
        let loaded = store.load(&label.into()).await.unwrap();
        assert_eq!(loaded, stored(&numbered(label, 50)), "{label}");
    }
}
