//! The redactor under generated input: every generated card, IBAN, email and key is
//! redacted wherever it sits; text without any is left alone; redaction is idempotent.

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_guardrails::pii::{iban_valid, luhn};
use agent_guardrails::{PiiGuardrail, Redactor};
use agent_loop::{Input, Options, generate};
use agent_tools::{Registry, Tool, ToolError};
use agent_types::{ErrorKind, GuardrailAction, GuardrailStage, Message};
use proptest::prelude::*;
use serde_json::json;

/// A card number of `len` digits with a valid Luhn check digit.
fn card(prefix: &[u8]) -> String {
    let mut digits: Vec<u8> = prefix.iter().map(|d| b'0' + d % 10).collect();
    for check in b'0'..=b'9' {
        digits.push(check);
        if luhn(&digits) {
            return String::from_utf8(digits).unwrap();
        }
        digits.pop();
    }
    unreachable!("one check digit always fits")
}

/// A valid IBAN for country `cc` and a numeric account `bban`.
fn iban(cc: &str, bban: &str) -> String {
    for check in 2..=98 {
        let candidate = format!("{cc}{check:02}{bban}");
        if iban_valid(candidate.as_bytes()) {
            return candidate;
        }
    }
    unreachable!("one check pair always fits")
}

/// Text that holds no PII: lowercase words.
fn filler() -> impl Strategy<Value = String> {
    "[a-z]{1,8}( [a-z]{1,8}){0,6}"
}

proptest! {
    #[test]
    fn a_luhn_valid_card_is_always_redacted(
        prefix in proptest::collection::vec(0u8..10, 12..=18),
        before in filler(),
        after in filler(),
        dashed in any::<bool>(),
    ) {
        let number = card(&prefix);
        let shown = if dashed {
            number.as_bytes().chunks(4).map(|c| std::str::from_utf8(c).unwrap()).collect::<Vec<_>>().join("-")
        } else {
            number.clone()
        };
        let text = format!("{before} {shown} {after}");
        let (out, counts) = Redactor::new().redact(&text).unwrap();
        prop_assert!(!out.contains(&shown), "{out}");
        prop_assert!(out.contains("[REDACTED:card]"), "{out}");
        prop_assert_eq!(counts.total(), 1);
    }

    #[test]
    fn a_card_failing_luhn_is_not_a_card(prefix in proptest::collection::vec(0u8..10, 12..=18)) {
        let number = card(&prefix);
        let last = number.as_bytes()[number.len() - 1];
        let wrong = format!("{}{}", &number[..number.len() - 1], (last - b'0' + 1) % 10);
        let found = Redactor::new().find(&format!("order {wrong} shipped"));
        prop_assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_valid_iban_is_always_redacted(
        cc in "(DE|FR|GB|NL|ES)",
        bban in "[0-9]{14,22}",
        before in filler(),
    ) {
        let iban = iban(&cc, &bban);
        let text = format!("{before} {iban}. thanks");
        let (out, _) = Redactor::new().redact(&text).unwrap();
        prop_assert!(!out.contains(&iban), "{out}");
        prop_assert!(out.contains("[REDACTED:iban]"), "{out}");
    }

    #[test]
    fn an_email_is_always_redacted(
        user in "[a-z][a-z0-9._+-]{0,15}",
        host in "[a-z][a-z0-9-]{0,10}",
        tld in r"(com|org|io|de|co\.uk)",
        before in filler(),
    ) {
        let email = format!("{user}@{host}.{tld}");
        let text = format!("{before} <{email}> {before}");
        let (out, _) = Redactor::new().redact(&text).unwrap();
        prop_assert!(!out.contains(&email), "{out}");
    }

    #[test]
    fn a_key_is_always_redacted(
        shape in 0usize..6,
        body in "[A-Za-z0-9]{40}",
        upper in "[A-Z0-9]{16}",
    ) {
        let key = match shape {
            0 => format!("sk-proj-{body}"),
            1 => format!("sk-ant-api03-{body}"),
            2 => format!("AKIA{upper}"),
            3 => format!("ghp_{}", &body[..36]),
            4 => format!("AIza{}", &body[..35]),
            _ => format!("xoxb-{body}"),
        };
        let text = format!("token={key} end");
        let (out, _) = Redactor::new().redact(&text).unwrap();
        prop_assert_eq!(out, "token=[REDACTED:api_key] end");
    }

    #[test]
    fn text_without_pii_is_left_alone(text in filler()) {
        prop_assert_eq!(Redactor::new().redact(&text), None);
    }

    #[test]
    fn redaction_is_idempotent(text in "[a-zA-Z0-9 @.+()-]{0,80}") {
        if let Some((once, _)) = Redactor::new().redact(&text) {
            prop_assert_eq!(Redactor::new().redact(&once), None, "{}", once);
        }
    }
}

fn lookup_tool() -> Tool {
    Tool::from_json_fn(
        "lookup_customer",
        "Looks a customer up.",
        json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}),
        |_args: serde_json::Value, _ctx| async move {
            Ok::<_, ToolError>(json!({
                "name": "Ann",
                "email": "ann@example.com",
                "card": "4111 1111 1111 1111",
                "note": "key sk-proj-abcdefghijklmnopqrstuvwxyz0123",
            }))
        },
    )
}

#[tokio::test]
async fn a_pii_bearing_tool_result_is_redacted_before_the_model_sees_it() {
    let mut tools = Registry::new();
    tools.register(lookup_tool()).unwrap();
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "lookup_customer", json!({"id": "c1"})),
        ScriptedTurn::text("Found Ann."),
    ])
    .recording();
    let options = Options::auto()
        .with_tools(tools)
        .with_tool_trace(true)
        .with_guardrails(PiiGuardrail::new().into_guardrails());

    let result = generate(&backend, Input::new("m").user("who is c1?"), &options)
        .await
        .unwrap();

    let sent = &backend.requests()[1].messages[2];
    let Message::Tool(sent) = sent else {
        panic!("{sent:?}")
    };
    for secret in ["ann@example.com", "4111 1111 1111 1111", "sk-proj-"] {
        assert!(!sent.content.contains(secret), "{}", sent.content);
    }
    assert!(sent.content.contains("Ann"));
    let decision = &result.trace[0].guardrails()[0];
    assert_eq!(decision.guardrail, "pii");
    assert_eq!(decision.stage, GuardrailStage::ToolResult);
    assert_eq!(decision.action, GuardrailAction::Redact);
    assert_eq!(decision.reason, "1 email, 1 card, 1 api_key");
}

#[tokio::test]
async fn input_with_a_key_trips_before_any_model_call() {
    let backend = ScriptedBackend::new([ScriptedTurn::text("ok")]).recording();
    let options = Options::auto().with_guardrails(PiiGuardrail::new().into_guardrails());
    let error = generate(
        &backend,
        Input::new("m").user("my key is AKIAIOSFODNN7EXAMPLE, use it"),
        &options,
    )
    .await
    .unwrap_err();
    assert_eq!(
        error.kind,
        ErrorKind::GuardrailTripped {
            guardrail: "pii".into(),
            stage: GuardrailStage::Input,
        }
    );
    assert!(error.message.contains("1 api_key"), "{}", error.message);
    assert!(
        !error.message.contains("AKIA"),
        "the error never repeats the secret"
    );
    assert_eq!(backend.calls(), 0);
    // An email in the input is the user's own business: it passes.
    generate(
        &backend,
        Input::new("m").user("mail ann@example.com"),
        &options,
    )
    .await
    .unwrap();
}
