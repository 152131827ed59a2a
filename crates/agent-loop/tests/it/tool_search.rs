//! Tool search over a 500-tool catalog with the scripted backend: the first request carries
//! the always-loaded set and `search_tools` only, the second the tool the search found; a call
//! to a tool no search loaded is refused as unknown; a provider with its own search gets every
//! tool deferred instead; a hook set before keeps working; a resumed session offers what its
//! history searched.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{Input, Options, RoundPlan, Session, ToolSearch, generate};
use agent_tools::{Registry, Tool};
use agent_types::{Capabilities, Message, ModelRequest, ToolChoice};
use serde_json::json;

const OBJECTS: [&str; 10] = [
    "invoice",
    "customer",
    "ticket",
    "calendar",
    "repository",
    "payment",
    "email",
    "document",
    "shipment",
    "contract",
];
const VERBS: [&str; 5] = ["create", "get", "list", "update", "delete"];

/// 500 tools: 10 objects × 5 verbs × 10 systems, each with a description and a parameter,
/// each counting its calls into `calls`.
fn catalog(calls: &Arc<AtomicUsize>) -> Registry {
    let mut tools = Registry::new();
    for system in 0..10 {
        for object in OBJECTS {
            for verb in VERBS {
                let calls = Arc::clone(calls);
                tools
                    .register(Tool::from_json_fn(
                        format!("s{system}_{verb}_{object}"),
                        format!("{verb} a {object} in system {system}."),
                        json!({"type": "object", "properties": {format!("{object}_id"): {"type": "string"}}}),
                        move |_, _| {
                            let calls = Arc::clone(&calls);
                            async move {
                                calls.fetch_add(1, Ordering::SeqCst);
                                Ok(json!("done"))
                            }
                        },
                    ))
                    .unwrap();
            }
        }
    }
    assert_eq!(tools.len(), 500);
    tools
}

fn names(request: &ModelRequest) -> Vec<&str> {
    request.tools.iter().map(|s| s.name.as_str()).collect()
}

fn search_options(calls: &Arc<AtomicUsize>) -> Options {
    Options::auto()
        .with_tools(catalog(calls))
        .with_tool_search(ToolSearch::new().with_always_loaded(["s0_get_customer"]))
        .unwrap()
}

#[tokio::test]
async fn round_two_offers_the_found_tool_and_not_the_other_499() {
    let calls = Arc::new(AtomicUsize::new(0));
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call(
            "c1",
            "search_tools",
            json!({"query": "create invoice system 7", "limit": 1}),
        ),
        ScriptedTurn::tool_call("c2", "s7_create_invoice", json!({"invoice_id": "A-1"})),
        ScriptedTurn::text("Created."),
    ])
    .recording();
    let result = generate(
        &backend,
        Input::new("m").user("Bill them"),
        &search_options(&calls),
    )
    .await
    .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the found tool ran");
    let requests = backend.requests();
    assert_eq!(names(&requests[0]), ["s0_get_customer", "search_tools"]);
    assert_eq!(
        names(&requests[1]),
        ["s0_get_customer", "s7_create_invoice", "search_tools"]
    );
    let Message::Tool(found) = &result.messages[1] else {
        panic!("{:?}", result.messages[1]);
    };
    assert!(
        found.content.contains("s7_create_invoice"),
        "{}",
        found.content
    );
    // The round-2 request is a fraction of the full catalog's.
    let full = serde_json::to_vec(&catalog(&calls).specs()).unwrap().len();
    let round_two = serde_json::to_vec(&requests[1].tools).unwrap().len();
    assert!(round_two * 50 < full, "{round_two} vs {full}");
}

#[tokio::test]
async fn a_tool_no_search_loaded_is_refused_as_unknown() {
    let calls = Arc::new(AtomicUsize::new(0));
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("c1", "s3_delete_contract", json!({})),
        ScriptedTurn::text("gave up"),
    ])
    .recording();
    let result = generate(
        &backend,
        Input::new("m").user("Delete"),
        &search_options(&calls),
    )
    .await
    .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let Message::Tool(refused) = &result.messages[1] else {
        panic!("{:?}", result.messages[1]);
    };
    assert!(refused.is_error, "{refused:?}");
    assert!(
        refused.content.contains("s3_delete_contract"),
        "{}",
        refused.content
    );
}

#[tokio::test]
async fn a_provider_with_its_own_search_gets_every_tool_deferred() {
    let calls = Arc::new(AtomicUsize::new(0));
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("c1", "s7_create_invoice", json!({})),
        ScriptedTurn::text("Created."),
    ])
    .with_capabilities(Capabilities {
        tools: true,
        streaming: true,
        tool_search: true,
        ..Capabilities::default()
    })
    .recording();
    generate(
        &backend,
        Input::new("m").user("Bill"),
        &search_options(&calls),
    )
    .await
    .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    for request in backend.requests() {
        assert_eq!(request.tools.len(), 500, "no search_tools");
        let loaded: Vec<&str> = request
            .tools
            .iter()
            .filter(|t| !t.defer_loading)
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(loaded, ["s0_get_customer"]);
    }

    // Native off: the loop's own search even so.
    let backend = ScriptedBackend::new([ScriptedTurn::text("ok")])
        .with_capabilities(Capabilities {
            tools: true,
            streaming: true,
            tool_search: true,
            ..Capabilities::default()
        })
        .recording();
    let options = Options::auto()
        .with_tools(catalog(&calls))
        .with_tool_search(ToolSearch::new().with_native(false))
        .unwrap();
    generate(&backend, Input::new("m").user("Hi"), &options)
        .await
        .unwrap();
    assert_eq!(names(&backend.requests()[0]), ["search_tools"]);
}

#[tokio::test]
async fn a_hook_set_before_keeps_its_choice_and_its_own_tool_list_wins() {
    let calls = Arc::new(AtomicUsize::new(0));
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("c1", "search_tools", json!({"query": "list shipments"})),
        ScriptedTurn::tool_call("c2", "s1_list_shipment", json!({})),
        ScriptedTurn::text("done"),
    ])
    .recording();
    let options = Options::auto()
        .with_tools(catalog(&calls))
        .with_prepare_round(|round| match round.round {
            1 => RoundPlan::new().with_tool_choice(ToolChoice::Tool {
                name: "search_tools".into(),
            }),
            3 => RoundPlan::new().with_tools(["s2_get_email"]),
            _ => RoundPlan::new(),
        })
        .with_tool_search(ToolSearch::new())
        .unwrap();
    generate(&backend, Input::new("m").user("Shipments?"), &options)
        .await
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let requests = backend.requests();
    assert_eq!(names(&requests[0]), ["search_tools"]);
    assert_eq!(
        requests[0].tool_choice,
        ToolChoice::Tool {
            name: "search_tools".into()
        }
    );
    assert!(names(&requests[1]).contains(&"s1_list_shipment"));
    assert_eq!(names(&requests[1]).len(), 6, "five found plus search_tools");
    assert_eq!(names(&requests[2]), ["s2_get_email"]);
}

#[tokio::test]
async fn a_resumed_session_offers_what_its_history_searched() {
    let calls = Arc::new(AtomicUsize::new(0));
    let options = search_options(&calls);
    let first = ScriptedBackend::new([
        ScriptedTurn::tool_call(
            "c1",
            "search_tools",
            json!({"query": "update payment", "limit": 2}),
        ),
        ScriptedTurn::text("Found them."),
    ]);
    let mut session = Session::new("m");
    agent_loop::execute(&mut session, "Find", &first, &options)
        .await
        .unwrap();
    let second = ScriptedBackend::new([ScriptedTurn::text("ok")]).recording();
    agent_loop::execute(&mut session, "Go on", &second, &options)
        .await
        .unwrap();
    let offered = names(&second.requests()[0]).len();
    assert_eq!(offered, 4, "{:?}", names(&second.requests()[0]));
    assert!(
        names(&second.requests()[0])
            .iter()
            .filter(|n| n.contains("update_payment"))
            .count()
            == 2
    );
}
