//! `/console` and `GET /v1/sessions/{id}/timeline`: the assets' security headers and caching,
//! and the timeline's rounds, tenancy and 404s.

use serde_json::{Value, json};

use crate::support::TestServer;

const ACME: &str = "key-acme-test-0001";
const GLOBEX: &str = "key-globex-test-01";

/// The body of a public console asset.
async fn asset(server: &TestServer, path: &str) -> String {
    server
        .get_anonymous(path)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_console_is_served_embedded_with_a_strict_policy_and_an_etag() {
    let server = TestServer::start().await;
    for (path, kind) in [
        ("/console/", "text/html"),
        ("/console/console.js", "text/javascript"),
        ("/console/console.css", "text/css"),
    ] {
        // No key: the assets are public (the page asks for the key itself).
        let response = server.get_anonymous(path).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers().clone();
        assert!(headers["content-type"].to_str().unwrap().starts_with(kind));
        let policy = headers["content-security-policy"].to_str().unwrap();
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "connect-src 'self'",
            "frame-ancestors 'none'",
        ] {
            assert!(policy.contains(directive), "{path}: {policy}");
        }
        assert!(!policy.contains("unsafe-inline") && !policy.contains("unsafe-eval"));
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert_eq!(headers["cache-control"], "no-cache");
        let etag = headers["etag"].to_str().unwrap().to_owned();
        let body = response.text().await.unwrap();
        assert!(!body.is_empty());
        // The client's copy is current: 304 without a body, same headers.
        let again = server
            .get_anonymous(path)
            .header("if-none-match", &etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 304, "{path}");
        assert_eq!(again.headers()["etag"].to_str().unwrap(), etag);
        assert!(again.headers().contains_key("content-security-policy"));
        assert!(again.text().await.unwrap().is_empty());
    }
    // The page loads nothing from elsewhere and runs no inline script.
    let page = asset(&server, "/console/").await;
    assert!(!page.contains("http://") && !page.contains("https://"));
    assert!(page.contains("<script src=\"console.js\"></script>"));
    assert_eq!(page.matches("<script").count(), 1);
    // The script never parses server data as markup.
    let script = asset(&server, "/console/console.js").await;
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
    ] {
        assert!(!script.contains(sink), "console.js uses {sink}");
    }
    server.shutdown().await;
}

/// Behind a reverse proxy under a path prefix (`/agentry/console` → this server's
/// `/console`) every URL the console uses must stay under the prefix: `/console` redirects to
/// the relative `console/`, the page names its assets relative to itself, and the script
/// names the API relative to its own directory, never from the host's root (the browser run
/// through such a proxy is in agentry-cli's `tests/console.rs`).
#[tokio::test]
async fn every_url_the_console_uses_is_relative_so_a_path_prefix_works() {
    let server = TestServer::start().await;
    let response = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{}/console", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 307);
    assert_eq!(response.headers()["location"], "console/");
    let page = asset(&server, "/console/").await;
    for attribute in ["href=\"/", "src=\"/"] {
        assert!(!page.contains(attribute), "{attribute} in {page}");
    }
    // Resolved against the page as a browser does, under a prefix: both assets exist.
    let base = "http://proxy.example/agentry/console/";
    for name in ["console.css", "console.js"] {
        assert!(page.contains(&format!("\"{name}\"")), "{page}");
        let resolved = reqwest::Url::parse(base).unwrap().join(name).unwrap();
        let path = resolved.path().strip_prefix("/agentry").unwrap();
        let response = server.get_anonymous(path).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
    }
    let script = asset(&server, "/console/console.js").await;
    for absolute in ["'/v1", "\"/v1", "`/v1", "'/console", "\"/console"] {
        assert!(!script.contains(absolute), "console.js names {absolute}…");
    }
    assert!(
        script.contains("new URL('../'"),
        "the API root is the script's parent"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn the_timeline_has_each_rounds_model_and_tool_calls_with_timings_tokens_and_cost() {
    let server = TestServer::start().await;
    let id = server
        .create(
            json!({"model": "demo", "tools": ["calculator", "clock"], "remote_tools": [
            {"name": "get_weather", "description": "Weather.", "parameters": {"type": "object"}}]}),
        )
        .await;
    server
        .execute(&id, json!({"message": "Weather in Lisbon and Oslo?"}))
        .await;
    let response = server
        .get(&format!("/v1/sessions/{id}/timeline"), ACME)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let timeline: Value = response.json().await.unwrap();
    assert_eq!(timeline["object"], "timeline");
    let models = timeline["model_calls"].as_array().unwrap();
    assert_eq!(models.len(), 1, "{timeline}");
    let model = &models[0];
    assert_eq!(model["round"], 1);
    assert_eq!(model["input_tokens"], 386);
    assert_eq!(model["output_tokens"], 74);
    assert!(model["cost_usd"].as_f64().unwrap() > 0.0);
    assert!(model["latency_ms"].as_f64().unwrap() >= model["first_event_ms"].as_f64().unwrap());
    assert!(model["started_us"].as_i64().unwrap() > 0);
    // Round 1's local call (the clock; the weather calls are the client's, not run here).
    let tools = timeline["tool_calls"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{timeline}");
    assert_eq!(tools[0]["tool"], "clock");
    assert_eq!(tools[0]["round"], 1);
    assert_eq!(tools[0]["truncated"], false);
    // No guardrail decided about the call: the column is there, null.
    assert_eq!(tools[0].get("guardrails"), Some(&Value::Null), "{timeline}");
    assert!(tools[0]["started_us"].as_i64().unwrap() >= model["started_us"].as_i64().unwrap());
    server.shutdown().await;
}

#[tokio::test]
async fn another_tenants_timeline_is_the_same_404_as_no_session() {
    let server = TestServer::start().await;
    let id = server
        .create(json!({"model": "demo", "tools": ["calculator", "clock"]}))
        .await;
    server.execute(&id, json!({"message": "Hi"})).await;
    let theirs = server
        .get(&format!("/v1/sessions/{id}/timeline"), GLOBEX)
        .send()
        .await
        .unwrap();
    assert_eq!(theirs.status(), 404);
    let theirs = theirs.text().await.unwrap();
    let nobody = server
        .get("/v1/sessions/sess_nobody/timeline", GLOBEX)
        .send()
        .await
        .unwrap();
    assert_eq!(nobody.status(), 404);
    assert_eq!(
        theirs.replace(&id, "ID"),
        nobody.text().await.unwrap().replace("sess_nobody", "ID")
    );
    // The same id in globex's own namespace has none of acme's rows.
    let response = server
        .post(&format!("/v1/sessions/{id}/execute"), GLOBEX)
        .json(&json!({"context": {"model": "demo"}, "message": "Hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap();
    let own: Value = server
        .get(&format!("/v1/sessions/{id}/timeline"), GLOBEX)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let acme: Value = server
        .get(&format!("/v1/sessions/{id}/timeline"), ACME)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let runs = |timeline: &Value| -> Vec<String> {
        timeline["model_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|call| call["run_id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(!runs(&own).is_empty() && !runs(&acme).is_empty());
    assert!(runs(&own).iter().all(|run| !runs(&acme).contains(run)));
    // Without a key: 401, like every API route.
    let anonymous = server
        .get_anonymous(&format!("/v1/sessions/{id}/timeline"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    server.shutdown().await;
}

/// The timeline on PostgreSQL reads the session's rows only (the query filters by session):
/// two sessions of one tenant, each its own calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_timeline_has_only_its_sessions_calls() {
    let url = match std::env::var("AGENTRY_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "AGENTRY_TEST_POSTGRES_URL is not set under CI"
            );
            return;
        }
    };
    // Tenants of their own: the database is shared with other tests' rows.
    let unique = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let config = format!(
        r#"
[server]
tools = ["calculator", "clock"]

[server.store]
kind = "postgres"
url = "{url}"

[[server.models]]
name = "demo"
provider = "replay"
recording = "anthropic"

[[server.tenants]]
name = "acme-console-{unique}"
api_keys = ["{ACME}"]

[[server.tenants]]
name = "globex-console-{unique}"
api_keys = ["{GLOBEX}"]
"#
    );
    let server = TestServer::with(&config, Vec::new()).await;
    let first = server
        .create(json!({"model": "demo", "tools": ["calculator", "clock"]}))
        .await;
    let second = server
        .create(json!({"model": "demo", "tools": ["calculator", "clock"]}))
        .await;
    server.execute(&first, json!({"message": "Hi"})).await;
    server.execute(&second, json!({"message": "Hi"})).await;
    let mut runs = Vec::new();
    for id in [&first, &second] {
        let timeline: Value = server
            .get(&format!("/v1/sessions/{id}/timeline"), ACME)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let models = timeline["model_calls"].as_array().unwrap();
        assert_eq!(models.len(), 3, "{timeline}");
        let run = models[0]["run_id"].as_str().unwrap().to_owned();
        assert!(models.iter().all(|call| call["run_id"] == run.as_str()));
        assert!(!timeline["tool_calls"].as_array().unwrap().is_empty());
        runs.push(run);
    }
    assert_ne!(runs[0], runs[1]);
    let theirs = server
        .get(&format!("/v1/sessions/{first}/timeline"), GLOBEX)
        .send()
        .await
        .unwrap();
    assert_eq!(theirs.status(), 404);
    server.shutdown().await;
}
