//! The SQLite products catalog as tools, driven through the loop by a scripted model: what
//! the model did is read back from the SQLite file and the trace.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{Input, Options, generate};
use agent_tools::{
    ArgumentValidator, Caller, Registry, ToolContext, ValidationMode, collect_output,
};
use agent_types::{ErrorKind, Message, ModelRequest, ToolCall, ToolResult};
use agentry_cli::products::{self, Product};
use rusqlite::Connection;
use serde_json::{Value, json};

/// A catalog file with two products: a red mug (id 1) and a small T-shirt out of stock (id 2).
fn seeded(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("catalog.db");
    products::Products::open(&path).unwrap();
    let connection = Connection::open(&path).unwrap();
    connection
        .execute_batch(
            "INSERT INTO products (sku, name, price_cents, stock) VALUES
                ('MUG-RED', 'Red mug', 900, 3),
                ('TEE-S', 'T-shirt S', 1500, 0);",
        )
        .unwrap();
    path
}

/// Every row of the file, by id.
fn rows(path: &Path) -> Vec<Product> {
    let connection = Connection::open(path).unwrap();
    let mut statement = connection
        .prepare("SELECT id, sku, name, price_cents, stock FROM products ORDER BY id")
        .unwrap();
    statement
        .query_map([], |row| {
            Ok(Product {
                id: row.get(0)?,
                sku: row.get(1)?,
                name: row.get(2)?,
                price_cents: row.get(3)?,
                stock: row.get(4)?,
            })
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn product(id: i64, sku: &str, name: &str, price_cents: i64, stock: i64) -> Product {
    Product {
        id,
        sku: sku.into(),
        name: name.into(),
        price_cents,
        stock,
    }
}

fn registry(path: &Path) -> Registry {
    let mut registry = Registry::new();
    let names = products::register(&mut registry, path).unwrap();
    assert_eq!(
        names,
        [
            "create_product",
            "delete_product",
            "get_product",
            "search_product",
            "update_product"
        ]
    );
    registry
}

fn tool_result(message: &Message) -> &ToolResult {
    match message {
        Message::Tool(result) => result,
        other => panic!("expected a tool result, got {other:?}"),
    }
}

fn offered(request: &ModelRequest) -> Vec<&str> {
    request
        .tools
        .iter()
        .map(|spec| spec.name.as_str())
        .collect()
}

fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall::new(id, name, arguments)
}

fn editor() -> Caller {
    Caller::new("ed").with_permissions(["product:read", "product:write"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_model_searches_creates_and_updates_products_through_the_loop() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path());
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("c1", "search_product", json!({"text": "mug"})),
        // One round, three calls run in parallel: each commits on its own, so the taken SKU
        // fails alone and the other two land.
        ScriptedTurn::tool_calls([
            call(
                "c2",
                "create_product",
                json!({"sku": "MUG-BLUE", "name": "Blue mug", "price_cents": 1200, "stock": 5}),
            ),
            call(
                "c3",
                "create_product",
                json!({"sku": "MUG-RED", "name": "Another red mug", "price_cents": 100}),
            ),
            call(
                "c4",
                "update_product",
                json!({"id": 1, "price_cents": 850, "stock": 10}),
            ),
        ]),
        ScriptedTurn::tool_call(
            "c5",
            "search_product",
            json!({"text": "MUG", "in_stock": true, "limit": 1}),
        ),
        ScriptedTurn::text("The blue mug is in; the red one is now 8.50."),
    ])
    .recording();
    let options = Options::auto()
        .with_tools(registry(&path))
        .with_caller(editor())
        .with_tool_trace(true);
    let result = generate(&backend, Input::new("m").user("Add a blue mug."), &options)
        .await
        .unwrap();

    // The file holds what the model did.
    assert_eq!(
        rows(&path),
        [
            product(1, "MUG-RED", "Red mug", 850, 10),
            product(2, "TEE-S", "T-shirt S", 1500, 0),
            product(3, "MUG-BLUE", "Blue mug", 1200, 5),
        ]
    );

    // The model was offered all five tools and saw each result.
    let requests = backend.requests();
    assert_eq!(
        offered(&requests[0]),
        [
            "create_product",
            "delete_product",
            "get_product",
            "search_product",
            "update_product"
        ]
    );
    let found: Value = serde_json::from_str(&tool_result(&result.messages[1]).content).unwrap();
    assert_eq!(
        found,
        json!({"records": [{"id": 1, "sku": "MUG-RED", "name": "Red mug", "price_cents": 900, "stock": 3}], "more": false})
    );
    let created: Value = serde_json::from_str(&tool_result(&result.messages[3]).content).unwrap();
    assert_eq!(created["id"], 3);
    let conflict = tool_result(&result.messages[4]);
    assert!(conflict.is_error);
    assert_eq!(
        conflict.content,
        "conflict: a product with SKU `MUG-RED` already exists; pick another SKU or update that \
         product"
    );
    let page: Value = serde_json::from_str(&tool_result(&result.messages[7]).content).unwrap();
    assert_eq!(page["records"][0]["sku"], "MUG-RED");
    assert_eq!(page["more"], true);

    // The trace records every call, with the conflict as the one error.
    let trace: Vec<(&str, &str, Option<&str>)> = result
        .trace
        .iter()
        .map(|entry| {
            (
                entry.call_id.as_str(),
                entry.tool_name.as_str(),
                entry.error.as_deref(),
            )
        })
        .collect();
    assert_eq!(trace.len(), 5);
    assert_eq!(trace[0], ("c1", "search_product", None));
    assert_eq!(trace[1], ("c2", "create_product", None));
    assert_eq!(trace[2].1, "create_product");
    assert!(trace[2].2.unwrap().contains("already exists"));
    assert_eq!(trace[3], ("c4", "update_product", None));
    assert_eq!(trace[4], ("c5", "search_product", None));
    assert!(result.message.text_content().contains("blue mug"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_without_write_permission_is_not_offered_create_update_or_delete() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path());
    let script = || {
        ScriptedBackend::new([
            ScriptedTurn::tool_calls([
                call("c1", "delete_product", json!({"id": 1})),
                call("c2", "get_product", json!({"id": 1})),
            ]),
            ScriptedTurn::text("Done."),
        ])
        .recording()
    };
    let tools = registry(&path);

    // A reader, and an editor whose run is scoped to reading: the same tools, the same refusal.
    let reader = Options::auto()
        .with_tools(tools.clone())
        .with_caller(Caller::new("ann").with_permission("product:read"));
    let scoped = Options::auto()
        .with_tools(tools)
        .with_caller(editor())
        .with_permission_scope(["product:read"]);
    for options in [reader, scoped] {
        let backend = script();
        let result = generate(&backend, Input::new("m").user("Delete the mug."), &options)
            .await
            .unwrap();
        assert_eq!(
            offered(&backend.requests()[0]),
            ["get_product", "search_product"]
        );
        let refused = tool_result(&result.messages[1]);
        assert!(refused.is_error);
        assert!(
            refused
                .content
                .contains("There is no tool named `delete_product`")
        );
        assert!(!tool_result(&result.messages[2]).is_error);
        assert_eq!(rows(&path).len(), 2, "nothing was deleted");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_writes_each_commit_on_their_own_connection() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path());
    let calls: Vec<ToolCall> = (0..16)
        .map(|i| {
            call(
                &format!("c{i}"),
                "create_product",
                json!({"sku": format!("BULK-{i}"), "name": format!("Bulk {i}"), "price_cents": i}),
            )
        })
        .collect();
    let backend = ScriptedBackend::new([ScriptedTurn::tool_calls(calls), ScriptedTurn::text("ok")]);
    let options = Options::auto()
        .with_tools(registry(&path))
        .with_caller(editor())
        .with_tool_trace(true);
    let result = generate(&backend, Input::new("m").user("Add 16."), &options)
        .await
        .unwrap();
    assert!(result.trace.iter().all(|entry| entry.error.is_none()));
    assert_eq!(rows(&path).len(), 18);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catalog_refuses_what_breaks_its_rules_and_a_broken_store_stops_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path());
    let tools = registry(&path);
    let run = |name: &'static str, arguments: Value| {
        let tool = tools.get(name).unwrap().clone();
        async move {
            collect_output(tool.invoke(arguments, ToolContext::new("c", name)))
                .await
                .result
        }
    };
    let bad_sku = run(
        "create_product",
        json!({"sku": "mug blue", "name": "x", "price_cents": 1}),
    )
    .await
    .unwrap_err();
    assert!(!bad_sku.is_fatal());
    assert_eq!(
        bad_sku.message(),
        "invalid: SKU `mug blue` is not 1 to 32 characters of A-Z, 0-9 and `-`"
    );
    let negative = run("update_product", json!({"id": 1, "stock": -1}))
        .await
        .unwrap_err();
    assert_eq!(
        negative.message(),
        "invalid: `stock` is from 0 to 1000000000, got -1"
    );
    let zero_id = run("get_product", json!({"id": 0})).await.unwrap_err();
    assert!(!zero_id.is_fatal());
    assert!(
        zero_id
            .message()
            .contains("a product id is an integer from 1, got 0")
    );
    let missing = run("delete_product", json!({"id": 99})).await.unwrap_err();
    assert_eq!(missing.message(), "not found: no product has id 99");
    let unknown_field = run("update_product", json!({"id": 1, "colour": "red"}))
        .await
        .unwrap_err();
    assert!(unknown_field.message().contains("unknown field `colour`"));
    // The schema says the same, for strict validation before the handler.
    let create = tools.get("create_product").unwrap();
    assert_eq!(
        create.spec().parameters["properties"]["sku"]["pattern"],
        "^[A-Z0-9-]{1,32}$"
    );
    assert_eq!(
        tools.get("get_product").unwrap().spec().parameters["properties"]["id"]["minimum"],
        1
    );
    assert_eq!(rows(&path).len(), 2);

    // Every result matches its declared schema, as an MCP client checks `structuredContent`.
    for (name, arguments) in [
        ("get_product", json!({"id": 1})),
        (
            "search_product",
            json!({"text": "mug", "max_price_cents": 1000}),
        ),
        (
            "create_product",
            json!({"sku": "CAP-1", "name": "Cap", "price_cents": 500}),
        ),
        ("update_product", json!({"id": 2, "name": "T-shirt small"})),
        ("delete_product", json!({"id": 3})),
    ] {
        let schema = tools.get(name).unwrap().tool().output_schema().unwrap();
        let result = run(name, arguments).await.unwrap();
        ArgumentValidator::new(schema)
            .unwrap()
            .validate(result.clone(), ValidationMode::Strict)
            .unwrap_or_else(|error| panic!("{name}: {result} breaks its schema: {error:?}"));
    }

    // The table is gone: the store failed, not the model, so the run stops.
    Connection::open(&path)
        .unwrap()
        .execute_batch("DROP TABLE products;")
        .unwrap();
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("c1", "get_product", json!({"id": 1})),
        ScriptedTurn::text("unreachable"),
    ]);
    let options = Options::auto()
        .with_tools(tools.clone())
        .with_caller(editor());
    let error = generate(&backend, Input::new("m").user("?"), &options)
        .await
        .unwrap_err();
    assert!(
        matches!(&error.kind, ErrorKind::Tool { tool } if tool == "get_product"),
        "{error:?}"
    );
    assert!(
        error.message.contains("no such table: products"),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_write_finishes_its_transaction_or_never_starts() {
    let dir = tempfile::tempdir().unwrap();
    let path = seeded(dir.path());
    let tools = registry(&path);
    let create = tools.get("create_product").unwrap().clone();
    let new = |sku: &str| json!({"sku": sku, "name": "Cap", "price_cents": 500});

    // Cancelled before it runs: nothing starts.
    let token = tokio_util::sync::CancellationToken::new();
    token.cancel();
    let context = ToolContext::new("c1", "create_product").with_cancellation(token);
    let output = collect_output(create.invoke(new("CAP-1"), context)).await;
    assert!(output.result.unwrap_err().is_cancelled());

    // Cancelled while its transaction waits for another writer: the call ends as cancelled at
    // once, and its transaction still runs to its end on the blocking pool, whole.
    let blocker = Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE;").unwrap();
    let token = tokio_util::sync::CancellationToken::new();
    let context = ToolContext::new("c2", "create_product").with_cancellation(token.clone());
    let call = tokio::spawn(collect_output(create.invoke(new("CAP-2"), context)));
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    token.cancel();
    let output = tokio::time::timeout(std::time::Duration::from_secs(2), call)
        .await
        .expect("a cancelled call ends at once")
        .unwrap();
    assert!(output.result.unwrap_err().is_cancelled());
    assert_eq!(
        rows(&path).len(),
        2,
        "not committed while the writer holds the lock"
    );
    blocker.execute_batch("COMMIT;").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while rows(&path).len() == 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let skus: Vec<String> = rows(&path).into_iter().map(|row| row.sku).collect();
    assert_eq!(skus, ["MUG-RED", "TEE-S", "CAP-2"]);
}
