//! The Rego policy in a real loop run: the example policy of docs/guardrails.md denies with
//! a reason the model reads, and asks for approval through the approval flow.

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_guardrails::PolicyGuardrail;
use agent_loop::{Guardrails, Options, Session, SessionStatus, execute};
use agent_tools::{Caller, Registry, Tool, ToolError};
use agent_types::Message;
use serde_json::json;

fn file_tool(name: &str) -> Tool {
    Tool::from_json_fn(
        name,
        "A file operation.",
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        |args: serde_json::Value, _ctx| async move { Ok::<_, ToolError>(json!({"done": args["path"]})) },
    )
}

fn example_policy() -> PolicyGuardrail {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/examples/guardrails.rego"
    );
    PolicyGuardrail::from_file(path).unwrap()
}

#[tokio::test]
async fn the_example_policy_denies_with_a_reason_and_asks_for_approval() {
    let mut tools = Registry::new();
    tools.register(file_tool("read_file")).unwrap();
    tools.register(file_tool("delete_file")).unwrap();
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "read_file", json!({"path": "/etc/shadow"})),
        ScriptedTurn::tool_call("call_2", "delete_file", json!({"path": "notes.txt"})),
        ScriptedTurn::text("done"),
    ])
    .recording();
    let options = Options::auto()
        .with_tools(tools)
        .with_caller(Caller::new("ann").with_tenant("acme"))
        .with_guardrails(Guardrails::new().tool(example_policy()));
    let mut session = Session::new("m");

    let result = execute(&mut session, "go", &backend, &options)
        .await
        .unwrap();
    // The denial reached the model as the call's error result.
    let Message::Tool(denied) = &backend.requests()[1].messages[2] else {
        panic!()
    };
    assert!(denied.is_error);
    assert!(
        denied
            .content
            .contains("guardrail `policy` denied it: reading outside the workspace is not allowed"),
        "{}",
        denied.content
    );
    // The delete waits for a person.
    assert_eq!(result.status, SessionStatus::AwaitingApproval);
    assert_eq!(result.pending_approvals[0].name, "delete_file");
}
