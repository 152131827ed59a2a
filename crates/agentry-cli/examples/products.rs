//! A product catalog in SQLite as tools, driven by a scripted model in `auto` mode.
//!
//! `cargo run -p agentry-cli --example products [CATALOG.db]` opens (or creates) the catalog,
//! registers `get_`/`search_`/`create_`/`update_`/`delete_product`, and lets a scripted model
//! search, add a product and change a price. Each tool call is its own transaction; the
//! catalog is printed afterwards. Swap the scripted backend for a real one to let a model run
//! the shop (see `agentry_cli::products` for the resource itself).

#![allow(clippy::print_stdout)]

use std::path::PathBuf;

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{Input, Options, generate};
use agent_tools::resource::Search;
use agent_tools::{Caller, Registry, ToolContext};
use agentry_cli::products::{ProductQuery, Products};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("agentry-products-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = std::env::args()
        .nth(1)
        .map_or_else(|| dir.join("catalog.db"), PathBuf::from);

    let catalog = Products::open(&path)?;
    let mut tools = Registry::new();
    let names = catalog.clone().tools().register(&mut tools)?;
    println!("catalog {}: tools {}", path.display(), names.join(", "));

    let sku = format!("MUG-{}", std::process::id());
    let model = ScriptedBackend::new([
        ScriptedTurn::tool_call("c1", "search_product", json!({"text": "mug"})),
        ScriptedTurn::tool_call(
            "c2",
            "create_product",
            json!({"sku": sku, "name": "Blue mug", "price_cents": 1200, "stock": 5}),
        ),
        ScriptedTurn::text("Added the blue mug."),
    ]);
    // The caller may read and write products; a read-only run would add
    // `.with_permission_scope(["product:read"])` and never be offered the writes.
    let options = Options::auto()
        .with_tools(tools)
        .with_caller(Caller::new("shopkeeper").with_permissions(["product:read", "product:write"]))
        .with_tool_trace(true);
    let result = generate(
        &model,
        Input::new("scripted").user("Add a blue mug."),
        &options,
    )
    .await?;
    for entry in &result.trace {
        println!(
            "{} {} -> {}",
            entry.tool_name,
            entry.arguments,
            entry.error.as_deref().unwrap_or("ok")
        );
    }
    println!("model: {}", result.message.text_content());

    let all = catalog
        .search(
            ProductQuery::default(),
            100,
            &ToolContext::new("list", "search_product"),
        )
        .await?;
    for product in all {
        println!("{}", serde_json::to_string(&product)?);
    }
    Ok(())
}
