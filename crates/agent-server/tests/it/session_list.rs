//! `GET /v1/sessions` with each session's model, tokens and cost and the server-side filters
//! (`status`, `model`, `q`), over real HTTP: what the console's sessions view reads in one
//! request per page.

use serde_json::{Value, json};

use crate::support::TestServer;

const ACME: &str = "key-acme-test-0001";
const GLOBEX: &str = "key-globex-test-01";

/// Every id `key` lists for `query`, walked a page at a time by `next_after`.
async fn ids(server: &TestServer, key: &str, query: &str) -> Vec<String> {
    let mut listed = Vec::new();
    let mut path = format!("/v1/sessions?{query}");
    loop {
        let response = server.get(&path, key).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let page: Value = response.json().await.unwrap();
        for row in page["data"].as_array().unwrap() {
            listed.push(row["id"].as_str().unwrap().to_owned());
        }
        match page["next_after"].as_str() {
            Some(next) => path = format!("/v1/sessions?{query}&after={next}"),
            None => return listed,
        }
    }
}

#[tokio::test]
async fn the_list_carries_spend_and_filters_in_the_store_across_pages() {
    let server = TestServer::start().await;
    let ran = server
        .create(
            json!({"model": "demo", "tools": ["calculator", "clock"], "remote_tools": [
            {"name": "get_weather", "description": "Weather.", "parameters": {"type": "object"}}]}),
        )
        .await;
    server
        .execute(&ran, json!({"message": "Weather in Lisbon and Oslo?"}))
        .await;
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(server.create(json!({"model": "demo"})).await);
    }
    idle.sort();
    let mut theirs = Vec::new();
    for _ in 0..2 {
        let response = server
            .post("/v1/sessions", GLOBEX)
            .json(&json!({"model": "demo"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
        let created: Value = response.json().await.unwrap();
        theirs.push(created["id"].as_str().unwrap().to_owned());
    }

    // The run's model, tokens and cost are on its line; no per-session read needed.
    let page: Value = server
        .get("/v1/sessions", ACME)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rows = page["data"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    let line = rows.iter().find(|row| row["id"] == ran.as_str()).unwrap();
    assert_eq!(line["model"], "demo");
    assert_eq!(line["status"], "awaiting_tool_execution");
    assert_eq!(line["input_tokens"], 386);
    assert_eq!(line["output_tokens"], 74);
    assert!(line["cost_usd"].as_f64().unwrap() > 0.0, "{line}");
    let fresh = rows
        .iter()
        .find(|row| row["id"] == idle[0].as_str())
        .unwrap();
    assert_eq!(fresh["model"], "demo");
    assert!(
        fresh["input_tokens"].is_null() && fresh["cost_usd"].is_null(),
        "{fresh}"
    );

    // Filters apply before the page is cut: a page of one walks exactly the matches.
    assert_eq!(ids(&server, ACME, "status=idle&limit=1").await, idle);
    assert_eq!(
        ids(
            &server,
            ACME,
            "status=awaiting_tool_execution&model=demo&limit=1"
        )
        .await,
        [ran.as_str()]
    );
    assert!(ids(&server, ACME, "model=other&limit=1").await.is_empty());
    let part = &idle[1][idle[1].len() - 8..];
    assert_eq!(
        ids(&server, ACME, &format!("q={part}&status=idle&limit=1")).await,
        [idle[1].as_str()]
    );
    // Another tenant's ids are as absent under a filter as without one.
    for id in &theirs {
        assert!(ids(&server, ACME, &format!("q={id}")).await.is_empty());
        assert_eq!(
            ids(&server, GLOBEX, &format!("q={id}")).await,
            [id.as_str()]
        );
    }
    assert_eq!(ids(&server, GLOBEX, "status=idle").await.len(), 2);

    for bad in [
        "status=done".to_owned(),
        format!("q={}", "x".repeat(129)),
        "q=a&q=b".to_owned(),
        "sort=id".to_owned(),
    ] {
        let response = server
            .get(&format!("/v1/sessions?{bad}"), ACME)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{bad}");
    }
    server.shutdown().await;
}
