#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::json;

use super::*;
use crate::{Caller, ValidationMode, collect_output};

#[derive(Clone, Serialize, JsonSchema)]
struct Item {
    id: u32,
    name: String,
    qty: u32,
}

#[derive(Deserialize, JsonSchema)]
struct NewItem {
    /// The item's unique name.
    name: String,
    qty: u32,
}

#[derive(Deserialize, JsonSchema)]
struct ItemPatch {
    name: Option<String>,
    qty: Option<u32>,
}

#[derive(Deserialize, JsonSchema)]
struct ItemQuery {
    /// Only items whose name contains this.
    name_contains: Option<String>,
}

#[derive(Default)]
struct Items {
    rows: Mutex<BTreeMap<u32, Item>>,
    /// Makes every call fail as the store would when it is gone.
    broken: bool,
}

impl Items {
    fn with(items: &[(&str, u32)]) -> Self {
        let this = Self::default();
        {
            let mut rows = this.rows.lock().unwrap();
            for (i, (name, qty)) in items.iter().enumerate() {
                let id = u32::try_from(i).unwrap() + 1;
                rows.insert(
                    id,
                    Item {
                        id,
                        name: (*name).to_owned(),
                        qty: *qty,
                    },
                );
            }
        }
        this
    }

    fn check(&self) -> Result<(), ResourceError> {
        if self.broken {
            Err(ResourceError::internal("the store is gone"))
        } else {
            Ok(())
        }
    }
}

impl Resource for Items {
    type Record = Item;
    type Id = u32;
    fn name(&self) -> &str {
        "item"
    }
    fn description(&self) -> &str {
        "An item is a named stock line."
    }
}

impl Get for Items {
    async fn get(&self, id: u32, _: &ToolContext) -> Result<Item, ResourceError> {
        self.check()?;
        let rows = self.rows.lock().unwrap();
        rows.get(&id)
            .cloned()
            .ok_or_else(|| ResourceError::not_found(format!("no item {id}")))
    }
}

impl Search for Items {
    type Query = ItemQuery;
    async fn search(
        &self,
        query: ItemQuery,
        limit: usize,
        _: &ToolContext,
    ) -> Result<Vec<Item>, ResourceError> {
        let rows = self.rows.lock().unwrap();
        Ok(rows
            .values()
            .filter(|item| {
                query
                    .name_contains
                    .as_deref()
                    .is_none_or(|part| item.name.contains(part))
            })
            .take(limit)
            .cloned()
            .collect())
    }
}

impl Create for Items {
    type New = NewItem;
    async fn create(&self, new: NewItem, _: &ToolContext) -> Result<Item, ResourceError> {
        let mut rows = self.rows.lock().unwrap();
        if rows.values().any(|item| item.name == new.name) {
            return Err(ResourceError::conflict(format!(
                "an item named `{}` exists",
                new.name
            )));
        }
        if new.name.is_empty() {
            return Err(ResourceError::invalid("the name is empty"));
        }
        let id = rows.keys().next_back().copied().unwrap_or(0) + 1;
        let item = Item {
            id,
            name: new.name,
            qty: new.qty,
        };
        rows.insert(id, item.clone());
        Ok(item)
    }
}

impl Update for Items {
    type Patch = ItemPatch;
    async fn update(
        &self,
        id: u32,
        patch: ItemPatch,
        _: &ToolContext,
    ) -> Result<Item, ResourceError> {
        let mut rows = self.rows.lock().unwrap();
        let item = rows
            .get_mut(&id)
            .ok_or_else(|| ResourceError::not_found(format!("no item {id}")))?;
        if let Some(name) = patch.name {
            item.name = name;
        }
        if let Some(qty) = patch.qty {
            item.qty = qty;
        }
        Ok(item.clone())
    }
}

impl Delete for Items {
    async fn delete(&self, id: u32, _: &ToolContext) -> Result<(), ResourceError> {
        let mut rows = self.rows.lock().unwrap();
        rows.remove(&id)
            .map(drop)
            .ok_or_else(|| ResourceError::not_found(format!("no item {id}")))
    }
}

/// Implements only reading.
struct ReadOnly;

impl Resource for ReadOnly {
    type Record = Item;
    type Id = u32;
    fn name(&self) -> &str {
        "catalog/items"
    }
}

impl Get for ReadOnly {
    async fn get(&self, id: u32, _: &ToolContext) -> Result<Item, ResourceError> {
        Err(ResourceError::not_found(format!("no item {id}")))
    }
}

async fn call(registry: &Registry, name: &str, arguments: Value) -> Result<Value, ToolError> {
    let tool = registry.get(name).expect(name);
    collect_output(tool.invoke(arguments, ToolContext::new("call_1", name)))
        .await
        .result
}

fn crud(items: Items) -> Registry {
    let mut registry = Registry::new();
    ResourceTools::new(items)
        .crud()
        .register(&mut registry)
        .unwrap();
    registry
}

#[test]
fn only_the_implemented_verbs_become_tools() {
    let mut registry = Registry::new();
    let names = ResourceTools::new(ReadOnly)
        .get()
        .register(&mut registry)
        .unwrap();
    // The name is sanitized with `tool_name`: separators become `_`.
    assert_eq!(names, ["get_catalog_items"]);
    assert_eq!(registry.names().collect::<Vec<_>>(), ["get_catalog_items"]);

    let registry = crud(Items::default());
    assert_eq!(
        registry.names().collect::<Vec<_>>(),
        [
            "create_item",
            "delete_item",
            "get_item",
            "search_item",
            "update_item"
        ]
    );
}

#[test]
fn adding_a_verb_twice_makes_one_tool() {
    let mut registry = Registry::new();
    let names = ResourceTools::new(Items::default())
        .get()
        .get()
        .register(&mut registry)
        .unwrap();
    assert_eq!(names, ["get_item"]);
}

#[test]
fn schemas_come_from_the_types() {
    let registry = crud(Items::default());
    let params = |name: &str| registry.get(name).unwrap().spec().parameters.clone();

    let get = params("get_item");
    assert_eq!(get["properties"]["id"]["type"], "integer");
    assert_eq!(get["required"], json!(["id"]));

    // Create takes the record without its id.
    let create = params("create_item");
    assert!(create["properties"].get("id").is_none());
    assert_eq!(create["properties"]["name"]["type"], "string");
    assert_eq!(
        create["properties"]["name"]["description"],
        "The item's unique name."
    );

    // Update takes the id (required) and the optional patch fields.
    let update = params("update_item");
    assert_eq!(update["properties"]["id"]["type"], "integer");
    assert_eq!(update["required"], json!(["id"]));
    assert!(update["properties"].get("qty").is_some());

    // Search takes the query fields and a bounded limit.
    let search = params("search_item");
    assert!(search["properties"].get("name_contains").is_some());
    assert_eq!(search["properties"]["limit"]["maximum"], 100);
    assert_eq!(search["properties"]["limit"]["minimum"], 1);

    // Results have schemas too, from the record type.
    let output = |name: &str| {
        registry
            .get(name)
            .unwrap()
            .tool()
            .output_schema()
            .unwrap()
            .clone()
    };
    assert_eq!(output("get_item")["properties"]["id"]["type"], "integer");
    assert_eq!(
        output("search_item")["properties"]["records"]["items"]["properties"]["name"]["type"],
        "string"
    );
    assert_eq!(
        output("search_item")["properties"]["more"]["type"],
        "boolean"
    );
    assert_eq!(output("delete_item")["required"], json!(["deleted"]));

    // The resource's description follows each tool's own.
    let description = &registry.get("get_item").unwrap().spec().description;
    assert_eq!(
        description,
        "Get one item by its id. An item is a named stock line."
    );
}

#[test]
fn verbs_require_read_or_write_permission() {
    let registry = crud(Items::default());
    let reader = Caller::new("r").with_permission("item:read");
    assert_eq!(
        registry.permitted_for(&reader).names().collect::<Vec<_>>(),
        ["get_item", "search_item"]
    );
    let writer = Caller::new("w").with_permissions(["item:read", "item:write"]);
    assert_eq!(registry.permitted_for(&writer).len(), 5);
    assert!(registry.permitted_for(&Caller::new("nobody")).is_empty());

    let mut custom = Registry::new();
    ResourceTools::new(Items::default())
        .crud()
        .read_permission("stock.view")
        .write_permission("stock.edit")
        .verb_permission(Verb::Delete, Some("stock.admin"))
        .verb_permission(Verb::Get, None)
        .register(&mut custom)
        .unwrap();
    let editor = Caller::new("e").with_permissions(["stock.view", "stock.edit"]);
    assert_eq!(
        custom.permitted_for(&editor).names().collect::<Vec<_>>(),
        ["create_item", "get_item", "search_item", "update_item"]
    );
    assert_eq!(
        custom
            .permitted_for(&Caller::new("anyone"))
            .names()
            .collect::<Vec<_>>(),
        ["get_item"]
    );

    let mut open = Registry::new();
    ResourceTools::new(Items::default())
        .crud()
        .without_permissions()
        .register(&mut open)
        .unwrap();
    assert_eq!(open.permitted_for(&Caller::new("anyone")).len(), 5);
}

#[tokio::test]
async fn verbs_run_the_resource() {
    let registry = crud(Items::with(&[("bolt", 10), ("nut", 5)]));
    assert_eq!(
        call(&registry, "get_item", json!({"id": 2})).await.unwrap(),
        json!({"id": 2, "name": "nut", "qty": 5})
    );
    assert_eq!(
        call(
            &registry,
            "create_item",
            json!({"name": "washer", "qty": 7})
        )
        .await
        .unwrap(),
        json!({"id": 3, "name": "washer", "qty": 7})
    );
    assert_eq!(
        call(&registry, "update_item", json!({"id": 1, "qty": 12}))
            .await
            .unwrap(),
        json!({"id": 1, "name": "bolt", "qty": 12})
    );
    assert_eq!(
        call(&registry, "search_item", json!({"name_contains": "t"}))
            .await
            .unwrap(),
        json!({"records": [
            {"id": 1, "name": "bolt", "qty": 12},
            {"id": 2, "name": "nut", "qty": 5}
        ], "more": false})
    );
    assert_eq!(
        call(&registry, "delete_item", json!({"id": 2}))
            .await
            .unwrap(),
        json!({"deleted": 2})
    );
    let gone = call(&registry, "get_item", json!({"id": 2}))
        .await
        .unwrap_err();
    assert_eq!(gone.message(), "not found: no item 2");
}

#[tokio::test]
async fn search_says_when_more_matched() {
    let registry = crud(Items::with(&[("a1", 1), ("a2", 2), ("a3", 3)]));
    let page = call(&registry, "search_item", json!({"limit": 2}))
        .await
        .unwrap();
    assert_eq!(page["records"].as_array().unwrap().len(), 2);
    assert_eq!(page["more"], true);
    let all = call(&registry, "search_item", json!({"limit": 3}))
        .await
        .unwrap();
    assert_eq!(all["more"], false);
}

#[tokio::test]
async fn expected_failures_reach_the_model_and_internal_ones_are_fatal() {
    let registry = crud(Items::with(&[("bolt", 1)]));
    let conflict = call(&registry, "create_item", json!({"name": "bolt", "qty": 1}))
        .await
        .unwrap_err();
    assert!(!conflict.is_fatal());
    assert_eq!(conflict.message(), "conflict: an item named `bolt` exists");

    let invalid = call(&registry, "create_item", json!({"name": "", "qty": 1}))
        .await
        .unwrap_err();
    assert!(!invalid.is_fatal());
    assert_eq!(invalid.message(), "invalid: the name is empty");

    let missing = call(&registry, "update_item", json!({"id": 9, "qty": 1}))
        .await
        .unwrap_err();
    assert!(!missing.is_fatal());
    assert_eq!(missing.message(), "not found: no item 9");

    // Arguments that do not read as the types go back to the model, never a panic.
    let unreadable = call(&registry, "update_item", json!({"qty": 1}))
        .await
        .unwrap_err();
    assert!(!unreadable.is_fatal());
    assert!(unreadable.message().contains("`id` is required"));
    let bad_id = call(&registry, "get_item", json!({"id": "seven"}))
        .await
        .unwrap_err();
    assert!(!bad_id.is_fatal());
    assert!(
        bad_id
            .message()
            .starts_with("invalid: the arguments could not be read")
    );

    let broken = crud(Items {
        broken: true,
        ..Items::default()
    });
    let fatal = call(&broken, "get_item", json!({"id": 1}))
        .await
        .unwrap_err();
    assert!(fatal.is_fatal());
    assert_eq!(fatal.message(), "the store is gone");
}

#[tokio::test]
async fn limit_and_size_are_bounded_under_every_validation_mode() {
    let mut registry = Registry::new();
    ResourceTools::new(Items::with(&[("a", 1)]))
        .crud()
        .search_limits(5, 10)
        .max_argument_bytes(100)
        .register(&mut registry)
        .unwrap();
    let search = registry.get("search_item").unwrap();
    // Strict validation refuses the limit from the schema…
    assert!(
        search
            .validate(json!({"limit": 11}), ValidationMode::Strict)
            .is_err()
    );
    // …and the handler refuses it when validation is off.
    let over = call(&registry, "search_item", json!({"limit": 11}))
        .await
        .unwrap_err();
    assert_eq!(
        over.message(),
        "invalid: `limit` must be an integer from 1 to 10, got 11"
    );
    assert!(
        call(&registry, "search_item", json!({"limit": 0}))
            .await
            .is_err()
    );
    assert!(
        call(&registry, "search_item", json!({"limit": 10}))
            .await
            .is_ok()
    );
    // An integral float is an integer to the schema, so the handler takes it too.
    assert!(
        call(&registry, "search_item", json!({"limit": 2.0}))
            .await
            .is_ok()
    );
    assert!(
        call(&registry, "search_item", json!({"limit": 2.5}))
            .await
            .is_err()
    );

    let big = call(
        &registry,
        "create_item",
        json!({"name": "x".repeat(200), "qty": 1}),
    )
    .await
    .unwrap_err();
    assert!(!big.is_fatal());
    assert_eq!(
        big.message(),
        "invalid: the arguments are larger than 100 bytes; send less (a shorter record, query \
         or id)"
    );
    assert!(
        call(
            &registry,
            "get_item",
            json!({"id": 1, "pad": "y".repeat(200)})
        )
        .await
        .is_err()
    );
    // Nothing was created.
    let all = call(&registry, "search_item", json!({})).await.unwrap();
    assert_eq!(all["records"].as_array().unwrap().len(), 1);
}

#[derive(Deserialize, JsonSchema)]
struct BadQuery {
    #[allow(dead_code)]
    limit: u32,
}

struct BadSearch;

impl Resource for BadSearch {
    type Record = Item;
    type Id = u32;
    fn name(&self) -> &str {
        "item"
    }
}

impl Search for BadSearch {
    type Query = BadQuery;
    async fn search(
        &self,
        _: BadQuery,
        _: usize,
        _: &ToolContext,
    ) -> Result<Vec<Item>, ResourceError> {
        Ok(Vec::new())
    }
}

#[test]
fn registering_is_all_or_nothing_and_names_what_is_wrong() {
    let mut registry = Registry::new();
    registry
        .register(Tool::from_json_fn(
            "update_item",
            "taken",
            json!({"type": "object"}),
            |_, _| async { Ok(Value::Null) },
        ))
        .unwrap();
    let err = ResourceTools::new(Items::default())
        .crud()
        .register(&mut registry)
        .unwrap_err();
    assert_eq!(
        err,
        Error::DuplicateTool {
            name: "update_item".into()
        }
    );
    // None of the other four went in.
    assert_eq!(registry.names().collect::<Vec<_>>(), ["update_item"]);

    let err = ResourceTools::new(BadSearch)
        .search()
        .register(&mut Registry::new())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the parameters schema of tool `search_item` is invalid: the type has a field named \
         `limit`, which the tool adds itself; rename it"
    );
}

#[derive(Deserialize, JsonSchema)]
struct Transfer {
    /// Take from this item.
    from: u32,
    /// Give to this item.
    to: u32,
    qty: u32,
}

#[tokio::test]
async fn custom_methods_opt_in_as_one_unit_of_work() {
    let mut registry = Registry::new();
    let names = ResourceTools::new(Items::with(&[("a", 5), ("b", 0)]))
        .get()
        .method(
            "transfer",
            "Moves stock between two items, both or neither.",
            Access::Write,
            |items: Arc<Items>, args: Transfer, _ctx| async move {
                let mut rows = items.rows.lock().unwrap();
                let have = rows
                    .get(&args.from)
                    .ok_or_else(|| ResourceError::not_found(format!("no item {}", args.from)))?
                    .qty;
                if have < args.qty {
                    return Err(ResourceError::invalid(format!(
                        "item {} has {have}",
                        args.from
                    )));
                }
                if !rows.contains_key(&args.to) {
                    return Err(ResourceError::not_found(format!("no item {}", args.to)));
                }
                rows.entry(args.from)
                    .and_modify(|item| item.qty -= args.qty);
                rows.entry(args.to).and_modify(|item| item.qty += args.qty);
                Ok(json!({"moved": args.qty}))
            },
        )
        .register(&mut registry)
        .unwrap();
    assert_eq!(names, ["get_item", "transfer_item"]);
    let transfer = registry.get("transfer_item").unwrap();
    // A bare JSON value has no object schema to declare (MCP's `outputSchema` must be one).
    assert!(transfer.tool().output_schema().is_none());
    assert!(
        transfer
            .tool()
            .required_permissions()
            .contains("item:write")
    );
    assert_eq!(
        transfer.spec().parameters["properties"]["from"]["description"],
        "Take from this item."
    );
    assert_eq!(
        call(
            &registry,
            "transfer_item",
            json!({"from": 1, "to": 2, "qty": 3})
        )
        .await
        .unwrap(),
        json!({"moved": 3})
    );
    // A failing step changes nothing: the method is one unit.
    let err = call(
        &registry,
        "transfer_item",
        json!({"from": 1, "to": 9, "qty": 1}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.message(), "not found: no item 9");
    assert_eq!(
        call(&registry, "get_item", json!({"id": 1})).await.unwrap()["qty"],
        2
    );
}

#[tokio::test]
async fn results_match_their_declared_schemas() {
    // An MCP client checks `structuredContent` against `outputSchema`: the two must agree.
    let registry = crud(Items::with(&[("bolt", 1), ("nut", 2)]));
    let calls = [
        ("get_item", json!({"id": 1})),
        ("search_item", json!({"limit": 1})),
        ("create_item", json!({"name": "washer", "qty": 3})),
        ("update_item", json!({"id": 2, "qty": 9})),
        ("delete_item", json!({"id": 1})),
    ];
    for (name, arguments) in calls {
        let schema = registry.get(name).unwrap().tool().output_schema().unwrap();
        let validator = crate::ArgumentValidator::new(schema).unwrap();
        let result = call(&registry, name, arguments).await.unwrap();
        validator
            .validate(result.clone(), ValidationMode::Strict)
            .unwrap_or_else(|error| panic!("{name}: {result} breaks its schema: {error:?}"));
    }
}
