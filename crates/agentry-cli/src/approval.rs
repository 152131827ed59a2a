//! Approving tool calls from the command line (docs/approval.md): `--require-approval TOOL`
//! makes a run stop before calling the tool; on a terminal agentry asks y/n per call, showing
//! the arguments, and continues; otherwise it exits 4 and `agentry resume --approve/--deny`
//! continues.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use agent_loop::{ApprovalDecision, Session, SessionInput};
use agent_types::ToolCall;
use serde_json::Value;

use crate::error::Error;

/// The refusal of a new prompt while calls wait for approval.
pub(crate) fn still_waiting(session: &Session, path: Option<&Path>) -> Error {
    Error::Usage(format!(
        "session {} is waiting for approval of {} tool call(s); continue it with \
         `agentry resume --session {} --approve ID|all --deny ID[:REASON]`",
        session.id,
        session.pending_approvals.len(),
        path.map_or_else(String::new, |path| path.display().to_string())
    ))
}

/// The input resuming `session` (waiting for approval) from `agentry resume`'s flags,
/// checked by the loop's own rule before anything runs: one decision per waiting call.
pub(crate) fn resume_input(
    session: &Session,
    results: Option<&Path>,
    args: &ApprovalArgs,
    path: &Path,
) -> Result<SessionInput, Error> {
    if results.is_some() || !args.any() {
        return Err(still_waiting(session, Some(path)));
    }
    let input = SessionInput::Approvals(decisions(
        &args.approve,
        &args.deny,
        &session.pending_approvals,
    ));
    session
        .check_input(&input)
        .map_err(|error| Error::Usage(error.message))?;
    Ok(input)
}

/// `agentry resume`'s decisions for a session waiting for approval.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ApprovalArgs {
    /// Approve the waiting call ID (or `all` of them); repeatable
    #[arg(long, value_name = "ID|all", conflicts_with = "results")]
    pub(crate) approve: Vec<String>,
    /// Deny the waiting call ID (or `all`), with a reason the model sees after a colon;
    /// repeatable
    #[arg(long, value_name = "ID[:REASON]", conflicts_with = "results")]
    pub(crate) deny: Vec<String>,
}

impl ApprovalArgs {
    /// Whether any decision was given.
    pub(crate) fn any(&self) -> bool {
        !self.approve.is_empty() || !self.deny.is_empty()
    }
}

/// `--approve ID|all` and `--deny ID[:REASON]|all[:REASON]` as decisions for `pending`.
/// Denials are read first, so `--approve all --deny ID` approves every other call. Whether
/// the decisions cover exactly the pending calls is the loop's check, as for the server.
pub(crate) fn decisions(
    approve: &[String],
    deny: &[String],
    pending: &[ToolCall],
) -> Vec<ApprovalDecision> {
    let mut decisions = Vec::new();
    for entry in deny {
        // An id that is pending as written is taken whole, even with a colon in it.
        let (id, reason) = if pending.iter().any(|call| call.id.as_str() == entry) {
            (entry.as_str(), None)
        } else {
            match entry.split_once(':') {
                Some((id, reason)) => (id, Some(reason.to_owned())),
                None => (entry.as_str(), None),
            }
        };
        let deny = |id: &str| ApprovalDecision::deny(id, reason.clone().unwrap_or_default());
        if id == "all" {
            decisions.extend(pending.iter().map(|call| deny(call.id.as_str())));
        } else {
            decisions.push(deny(id));
        }
    }
    for id in approve {
        if id == "all" {
            let undecided: Vec<ApprovalDecision> = pending
                .iter()
                .filter(|call| !decisions.iter().any(|d| d.call_id == call.id.as_str()))
                .map(|call| ApprovalDecision::approve(call.id.as_str()))
                .collect();
            decisions.extend(undecided);
        } else {
            decisions.push(ApprovalDecision::approve(id.as_str()));
        }
    }
    decisions
}

/// Whether agentry can ask a person: stdin and stderr are both terminals.
pub(crate) fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Asks on the terminal, one call at a time; `None` when stdin ends before every call has
/// an answer (the session then keeps waiting). Ctrl-C at the prompt exits at once with 130
/// (the caller saved the session first, so it keeps waiting): the read blocks a thread no
/// cancellation reaches, and the run's Ctrl-C handler would otherwise swallow the signal.
pub(crate) async fn ask_terminal(calls: &[ToolCall]) -> Option<Vec<ApprovalDecision>> {
    let calls = calls.to_vec();
    let asking = tokio::task::spawn_blocking(move || {
        let stdin = std::io::stdin();
        let mut stderr = std::io::stderr();
        ask(&calls, &mut stdin.lock(), &mut stderr).ok().flatten()
    });
    tokio::select! {
        answered = asking => answered.ok().flatten(),
        _ = tokio::signal::ctrl_c() => {
            let _ = writeln!(std::io::stderr(), "\nagentry: aborted; the calls still wait for approval");
            std::process::exit(i32::from(crate::exit::Exit::Aborted.code()));
        }
    }
}

/// Asks `y/n` for each call on `output`, reading answers from `input`: `y`/`yes` approves,
/// `n`/`no` denies and asks for an optional reason the model will see; anything else asks
/// again. `Ok(None)` when the input ends first.
pub(crate) fn ask<R: BufRead, W: Write>(
    calls: &[ToolCall],
    input: &mut R,
    output: &mut W,
) -> std::io::Result<Option<Vec<ApprovalDecision>>> {
    let mut decisions = Vec::with_capacity(calls.len());
    for call in calls {
        writeln!(
            output,
            "The model wants to call `{}` (call {}) with:\n{}",
            printable(&call.name),
            printable(call.id.as_str()),
            arguments(&call.arguments)
        )?;
        let approved = loop {
            write!(output, "Run it? [y/n] ")?;
            output.flush()?;
            let Some(answer) = line(input)? else {
                return Ok(None);
            };
            match answer.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => break true,
                "n" | "no" => break false,
                _ => writeln!(output, "Please answer y or n.")?,
            }
        };
        // Bound to the call as shown: the decision is refused if what runs would differ.
        if approved {
            decisions.push(ApprovalDecision::approve(call.id.as_str()).bound_to(call));
            continue;
        }
        write!(output, "Why not? (the model sees this; Enter to skip) ")?;
        output.flush()?;
        let Some(reason) = line(input)? else {
            return Ok(None);
        };
        let reason = reason.trim();
        decisions.push(ApprovalDecision::deny(call.id.as_str(), reason).bound_to(call));
    }
    Ok(Some(decisions))
}

/// One line of input, `None` at its end.
fn line<R: BufRead>(input: &mut R) -> std::io::Result<Option<String>> {
    let mut text = String::new();
    match input.read_line(&mut text)? {
        0 => Ok(None),
        _ => Ok(Some(text)),
    }
}

/// The arguments as indented JSON, every control character escaped: the model writes them,
/// and a terminal escape sequence in them could otherwise redraw what the person reads.
fn arguments(value: &Value) -> String {
    let json = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    printable(&json)
}

/// `text` with control characters (C0, DEL, C1, and the bidirectional overrides) written as
/// `\u{…}`, newlines kept.
fn printable(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if (c.is_control() && c != '\n') || bidi {
            shown.push_str(&format!("\\u{{{:04x}}}", u32::from(c)));
        } else {
            shown.push(c);
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn calls() -> Vec<ToolCall> {
        vec![
            ToolCall::new("c1", "calculator", json!({"expression": "2+2"})),
            ToolCall::new("c2", "read_file", json!({"path": "notes\u{1b}[2J.txt"})),
        ]
    }

    #[test]
    fn the_prompt_shows_the_arguments_and_takes_y_and_n_with_a_reason() {
        let mut input = "maybe\ny\nno\nnot that file\n".as_bytes();
        let mut output = Vec::new();
        let decisions = ask(&calls(), &mut input, &mut output).unwrap().unwrap();
        let calls = calls();
        assert_eq!(
            decisions,
            [
                ApprovalDecision::approve("c1").bound_to(&calls[0]),
                ApprovalDecision::deny("c2", "not that file").bound_to(&calls[1])
            ]
        );
        let shown = String::from_utf8(output).unwrap();
        assert!(shown.contains("`calculator` (call c1)"), "{shown}");
        assert!(shown.contains("\"expression\": \"2+2\""), "{shown}");
        assert!(shown.contains("Please answer y or n."), "{shown}");
        // The escape the model put in the arguments is shown, not sent to the terminal.
        assert!(!shown.contains('\u{1b}'), "{shown:?}");
        assert!(shown.contains("\\u001b[2J"), "{shown}");
    }

    #[test]
    fn an_empty_reason_is_no_reason_and_the_end_of_input_decides_nothing() {
        let mut input = "n\n\ny\n".as_bytes();
        let decisions = ask(&calls(), &mut input, &mut Vec::new()).unwrap().unwrap();
        assert_eq!(decisions[0].reason.as_deref(), Some(""));
        assert!(!decisions[0].approved);
        let mut short = "y\n".as_bytes();
        assert_eq!(ask(&calls(), &mut short, &mut Vec::new()).unwrap(), None);
    }

    #[test]
    fn flags_become_decisions_with_all_and_reasons() {
        let pending = calls();
        let all = decisions(&["all".into()], &["c2:too risky".into()], &pending);
        assert_eq!(
            all,
            [
                ApprovalDecision::deny("c2", "too risky"),
                ApprovalDecision::approve("c1")
            ]
        );
        let denied = decisions(&[], &["all".into()], &pending);
        assert!(
            denied
                .iter()
                .all(|d| !d.approved && d.reason.as_deref() == Some(""))
        );
        assert_eq!(denied.len(), 2);
        // Unknown ids pass through; the loop's check refuses them.
        assert_eq!(
            decisions(&["c9".into()], &[], &pending),
            [ApprovalDecision::approve("c9")]
        );
    }
}
