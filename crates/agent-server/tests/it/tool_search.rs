//! `tool_search_threshold` in `[server]`: a server with more tools than the threshold offers a
//! run `search_tools` (plus nothing else), then the tool its search found, over real HTTP.

use std::sync::Arc;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_server::{ServerBuilder, ServerConfig, serve};
use agent_tools::Tool;
use serde_json::json;

use crate::support::{CONFIG, parse_sse};

const ACME: &str = "key-acme-test-0001";

#[tokio::test]
async fn a_server_over_its_threshold_offers_search_tools_then_the_found_tool() {
    let backend = Arc::new(
        ScriptedBackend::new([
            ScriptedTurn::tool_call("c1", "search_tools", json!({"query": "ship parcel 17"})),
            ScriptedTurn::tool_call("c2", "ship_parcel_17", json!({})),
            ScriptedTurn::text("Shipped."),
        ])
        .recording(),
    );
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::from_toml(
        &CONFIG.replace("[server]\n", "[server]\ntool_search_threshold = 40\n"),
    )
    .unwrap();
    config.store = agent_server::StoreConfig::Sqlite {
        path: dir.path().join("sessions.db"),
    };
    let mut builder = ServerBuilder::new(config).with_model(
        "scripted",
        "scripted",
        Arc::clone(&backend) as Arc<dyn agent_types::Backend>,
    );
    let mut names = Vec::new();
    for i in 0..60 {
        let name = format!("ship_parcel_{i}");
        names.push(name.clone());
        builder = builder.with_tool(Tool::from_json_fn(
            name,
            format!("Ships parcel number {i}."),
            json!({"type": "object"}),
            move |_, _| async move { Ok(json!(format!("parcel {i} shipped"))) },
        ));
    }
    let state = builder.build().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _dir = dir;
        serve(listener, state, std::future::pending())
            .await
            .unwrap();
    });

    let response = reqwest::Client::new()
        .post(format!("{url}/v1/sessions/parcels/execute"))
        .bearer_auth(ACME)
        .json(&json!({"message": "Ship 17", "context": {"model": "scripted", "tools": names}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    assert!(body.contains("parcel 17 shipped"), "{body}");
    let events = parse_sse(&body);
    assert!(
        events.iter().any(|e| e["type"] == "execute_complete"),
        "{body}"
    );

    let requests = backend.requests();
    let offered =
        |at: usize| -> Vec<String> { requests[at].tools.iter().map(|t| t.name.clone()).collect() };
    assert_eq!(offered(0), ["search_tools"]);
    let second = offered(1);
    assert!(second.contains(&"ship_parcel_17".to_owned()), "{second:?}");
    assert!(second.len() <= 6, "{second:?}");
}
