//! The registry: registration rules, lookup, narrowing and stable listings.

use agent_tools::{Caller, Error, Registry, Tool, ToolError, sanitize_name, tool_name};
use serde_json::json;

fn raw(name: &str) -> Tool {
    Tool::from_json_fn(
        name,
        format!("The {name} tool."),
        json!({"type": "object"}),
        |_, _| async { Ok::<_, ToolError>(json!(null)) },
    )
}

fn registry(names: &[&str]) -> Registry {
    let mut registry = Registry::new();
    for name in names {
        registry.register(raw(name)).unwrap();
    }
    registry
}

#[test]
fn duplicate_names_are_rejected() {
    let mut registry = registry(&["get_weather"]);
    let err = registry.register(raw("get_weather")).unwrap_err();
    assert_eq!(
        err,
        Error::DuplicateTool {
            name: "get_weather".into()
        }
    );
    assert_eq!(
        err.to_string(),
        "a tool named `get_weather` is already registered; tool names must be unique"
    );
    assert_eq!(registry.len(), 1);
}

#[test]
fn invalid_names_are_rejected_not_renamed() {
    let mut registry = Registry::new();
    for name in ["get weather", "", "fs/read", &"x".repeat(65)] {
        let err = registry.register(raw(name)).unwrap_err();
        assert!(matches!(err, Error::InvalidName { .. }), "{name:?}: {err}");
    }
    assert!(registry.is_empty());
    // The fix is explicit: sanitize first.
    registry
        .register(raw(&sanitize_name("fs/read").unwrap()))
        .unwrap();
    assert!(registry.contains("fs_read"));
    registry
        .register(raw(&tool_name("get", "orders/items").unwrap()))
        .unwrap();
    assert!(registry.contains("get_orders_items"));
}

#[test]
fn invalid_schemas_are_rejected_at_registration() {
    let mut registry = Registry::new();
    let bad = Tool::remote(
        "bad",
        "",
        json!({"type": "object", "properties": {"a": {"type": 7}}}),
    );
    let err = registry.register(bad).unwrap_err();
    let Error::InvalidSchema { tool, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(tool, "bad");
    let not_object = Tool::remote("scalar", "", json!({"type": "string"}));
    assert!(matches!(
        registry.register(not_object),
        Err(Error::InvalidSchema { .. })
    ));
    assert!(registry.is_empty());
}

#[test]
fn lookup_finds_registered_tools_only() {
    let registry = registry(&["a", "b"]);
    assert_eq!(registry.get("a").unwrap().name(), "a");
    assert!(registry.get("c").is_none());
    let remote = {
        let mut r = Registry::new();
        r.register(Tool::remote("ask", "", json!({"type": "object"})))
            .unwrap();
        r
    };
    assert!(remote.get("ask").unwrap().is_remote());
}

#[test]
fn listings_are_sorted_by_name_whatever_the_registration_order() {
    let one = registry(&["zeta", "alpha", "Mid", "beta_2", "beta-1"]);
    let two = registry(&["beta-1", "Mid", "zeta", "beta_2", "alpha"]);
    let names: Vec<&str> = one.names().collect();
    assert_eq!(names, ["Mid", "alpha", "beta-1", "beta_2", "zeta"]);
    let specs_one = serde_json::to_string(&one.specs()).unwrap();
    let specs_two = serde_json::to_string(&two.specs()).unwrap();
    assert_eq!(specs_one, specs_two, "tool lists must be byte-stable");
    let iter_names: Vec<&str> = one.iter().map(|t| t.name()).collect();
    assert_eq!(iter_names, names);
}

#[test]
fn narrowing_by_allow_list() {
    let registry = registry(&["a", "b", "c"]);
    let narrowed = registry.narrow(["c", "a"]).unwrap();
    assert_eq!(narrowed.names().collect::<Vec<_>>(), ["a", "c"]);
    assert_eq!(registry.len(), 3, "narrowing leaves the original alone");
    let err = registry.narrow(["a", "nope", "also_nope"]).unwrap_err();
    assert_eq!(
        err,
        Error::UnknownTools {
            names: vec!["nope".into(), "also_nope".into()]
        }
    );
    assert!(registry.narrow(Vec::<String>::new()).unwrap().is_empty());
}

#[test]
fn filtering_by_caller_permissions() {
    let mut registry = Registry::new();
    registry
        .register(raw("read_orders").requires_permission("orders:read"))
        .unwrap();
    registry
        .register(
            raw("refund_order")
                .requires_permission("orders:read")
                .requires_permission("orders:refund"),
        )
        .unwrap();
    registry.register(raw("ping")).unwrap();

    let nobody = Caller::new("anon");
    let reader = Caller::new("r").with_permission("orders:read");
    let admin = Caller::new("a").with_permissions(["orders:read", "orders:refund"]);
    let visible = |caller: &Caller| {
        registry
            .permitted_for(caller)
            .names()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(visible(&nobody), ["ping"]);
    assert_eq!(visible(&reader), ["ping", "read_orders"]);
    assert_eq!(visible(&admin), ["ping", "read_orders", "refund_order"]);

    let tenant_only = registry.filter(|tool| tool.name().starts_with("read"));
    assert_eq!(tenant_only.names().collect::<Vec<_>>(), ["read_orders"]);
}

#[test]
fn registered_tools_validate_with_their_compiled_schema() {
    let mut registry = Registry::new();
    registry
        .register(Tool::remote(
            "t",
            "",
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        ))
        .unwrap();
    let tool = registry.get("t").unwrap();
    assert!(tool.validator().is_valid(&json!({"n": 1})));
    assert!(
        tool.validate(json!({"n": "x"}), agent_tools::ValidationMode::Strict)
            .is_err()
    );
}

#[test]
fn a_strict_tool_declares_strict_and_its_optional_nulls_are_dropped_before_validation() {
    let schema = json!({"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}
    }, "required": ["city"]});
    let mut registry = Registry::new();
    registry
        .register(Tool::remote("loose", "", schema.clone()))
        .unwrap();
    registry
        .register(Tool::remote("strict", "", schema).strict())
        .unwrap();
    let strict = registry.get("strict").unwrap();
    assert!(strict.spec().strict);
    assert!(!registry.get("loose").unwrap().spec().strict);
    // What strict mode makes the model send for an absent `unit`.
    let sent = json!({"city": "Oslo", "unit": null});
    let validated = strict
        .validate(sent.clone(), agent_tools::ValidationMode::Strict)
        .unwrap();
    assert_eq!(validated.arguments, json!({"city": "Oslo"}));
    // A tool that is not strict keeps the null, which its schema refuses.
    assert!(
        registry
            .get("loose")
            .unwrap()
            .validate(sent, agent_tools::ValidationMode::Strict)
            .is_err()
    );
    // A required member's null stays, and fails.
    assert!(
        strict
            .validate(json!({"city": null}), agent_tools::ValidationMode::Strict)
            .is_err()
    );
}

#[test]
fn merge_shares_compiled_tools_and_refuses_a_duplicate_whole() {
    let mut run = registry(&["a"]);
    let imported = registry(&["b", "c"]);
    run.merge(&imported).unwrap();
    assert_eq!(run.names().collect::<Vec<_>>(), ["a", "b", "c"]);
    // The same registered tool (schema compiled once), not a recompiled copy.
    assert!(std::sync::Arc::ptr_eq(
        run.get("b").unwrap(),
        imported.get("b").unwrap()
    ));
    let clash = registry(&["d", "c"]);
    assert_eq!(
        run.merge(&clash).unwrap_err(),
        Error::DuplicateTool { name: "c".into() }
    );
    assert!(!run.contains("d"), "nothing is added when one name clashes");
}

#[test]
fn approval_is_marked_by_builder_or_by_name_and_unknown_names_change_nothing() {
    assert!(raw("a").with_approval().requires_approval());
    assert!(!raw("a").requires_approval());

    let mut registry = registry(&["a", "b"]);
    let before = registry.clone();
    match registry.require_approval(["a", "zz"]) {
        Err(Error::UnknownTools { names }) => assert_eq!(names, ["zz"]),
        other => panic!("{other:?}"),
    }
    assert!(!registry.get("a").unwrap().tool().requires_approval());

    registry.require_approval(["a"]).unwrap();
    assert!(registry.get("a").unwrap().tool().requires_approval());
    assert!(!registry.get("b").unwrap().tool().requires_approval());
    // The compiled schema is shared, and a clone made before keeps the tool as it was.
    assert!(
        registry
            .get("a")
            .unwrap()
            .validate(json!({}), agent_tools::ValidationMode::Strict)
            .is_ok()
    );
    assert!(!before.get("a").unwrap().tool().requires_approval());
}

// Every model call takes the registry's specs; the schemas must be shared, not deep-copied
// into each request (issue 16: memory per open stream on the server).
#[test]
fn specs_share_the_registered_schemas() {
    let registry = registry(&["alpha", "beta"]);
    let first = registry.specs();
    let second = registry.specs();
    for (index, name) in ["alpha", "beta"].into_iter().enumerate() {
        let registered = &registry.get(name).unwrap().spec().parameters;
        assert!(
            std::sync::Arc::ptr_eq(registered, &first[index].parameters),
            "{name}"
        );
        assert!(
            std::sync::Arc::ptr_eq(registered, &second[index].parameters),
            "{name}"
        );
    }
}
