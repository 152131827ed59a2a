//! `--require-approval` with the real binary: without a terminal a run stops with exit 4 and
//! the waiting calls as one JSON line, `agentry resume --approve/--deny` continues it, and
//! decisions that do not fit exit 2 and leave the session files as they were.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

#[path = "support/replay_run.rs"]
mod replay_run;

use replay_run::{Setup, text, tool_calls};
use serde_json::{Value, json};

#[test]
fn a_run_waits_with_exit_4_and_resume_approve_runs_the_call() {
    let setup = Setup::new(vec![
        tool_calls(&[("call_1", "calculator", json!({"expression": "6*7"}))]),
        text("It is 42."),
    ]);
    let (code, stdout, stderr) = setup.run(&["--require-approval", "calculator", "What is 6*7?"]);
    assert_eq!(code, 4, "{stderr}");
    // Exactly one JSON line on stdout, naming the call.
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let waiting: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        waiting["pending_approvals"],
        json!([{"id": "call_1", "name": "calculator", "arguments": {"expression": "6*7"}}])
    );
    assert!(stderr.contains("awaiting approval"), "{stderr}");
    assert!(
        stderr.contains("agentry resume --session") && stderr.contains("--approve"),
        "{stderr}"
    );
    let state: Value = serde_json::from_slice(&setup.files().1).unwrap();
    assert_eq!(state["session"]["status"], "awaiting_approval");
    assert_eq!(state["require_approval"], json!(["calculator"]));

    // A new prompt is refused while the call waits.
    let (code, _, stderr) = setup.run(&["another question"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--approve"), "{stderr}");

    // Wrong, duplicate or missing decisions: exit 2, nothing sent, files unchanged.
    let before = setup.files();
    for bad in [
        vec!["--approve", "call_9"],
        vec!["--approve", "call_1", "--deny", "call_1"],
        vec!["--results", "results.json"],
    ] {
        let (code, _, stderr) = setup.resume(&bad);
        assert_eq!(code, 2, "{bad:?}: {stderr}");
        assert_eq!(setup.files(), before, "{bad:?} changed the session");
    }
    let (_, _, stderr) = setup.resume(&["--approve", "call_9"]);
    assert!(
        stderr.contains("no decision for call_1") && stderr.contains("call_9"),
        "{stderr}"
    );
    assert_eq!(setup.server.requests().len(), 1, "nothing was sent");

    let (code, stdout, stderr) = setup.resume(&["--approve", "all"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("It is 42."), "{stdout}");
    let results = setup.tool_messages(1);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["tool_call_id"], "call_1");
    assert_eq!(results[0]["content"], r#"{"expression":"6*7","result":42}"#);
    let state: Value = serde_json::from_slice(&setup.files().1).unwrap();
    assert_eq!(state["session"]["status"], "completed");
}

#[test]
fn resume_deny_sends_the_reason_and_runs_nothing() {
    let setup = Setup::new(vec![
        tool_calls(&[
            ("call_1", "calculator", json!({"expression": "1+1"})),
            ("call_2", "calculator", json!({"expression": "2+2"})),
        ]),
        text("Fine."),
    ]);
    let (code, stdout, stderr) = setup.run(&["--require-approval", "calculator", "Add"]);
    assert_eq!(code, 4, "{stderr}");
    let waiting: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(waiting["pending_approvals"].as_array().unwrap().len(), 2);

    let (code, _, stderr) = setup.resume(&["--deny", "call_2:too much math", "--approve", "all"]);
    assert_eq!(code, 0, "{stderr}");
    let results = setup.tool_messages(1);
    assert_eq!(results[0]["content"], r#"{"expression":"1+1","result":2}"#);
    assert_eq!(results[1]["tool_call_id"], "call_2");
    assert_eq!(
        results[1]["content"],
        "This call was not run: the user denied it: too much math"
    );
}

#[test]
fn agentry_toml_require_approval_applies_and_unknown_tools_are_refused() {
    let setup = Setup::new(vec![tool_calls(&[(
        "call_1",
        "calculator",
        json!({"expression": "1+1"}),
    )])]);
    std::fs::write(
        setup.dir.path().join("agentry.toml"),
        "require_approval = [\"calculator\"]\n",
    )
    .unwrap();
    let (code, stdout, stderr) = setup.run(&["Add"]);
    assert_eq!(code, 4, "{stderr}");
    assert!(stdout.contains("pending_approvals"), "{stdout}");

    std::fs::remove_file(setup.session()).unwrap();
    std::fs::remove_file(format!("{}.state.json", setup.session().display())).unwrap();
    let (code, _, stderr) = setup.run(&["--require-approval", "calculater", "Add"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("calculater"), "{stderr}");
}

/// `script` (util-linux) runs the binary on a pseudo-terminal; `None` when it is missing
/// (a failure under `CI`).
fn script() -> Option<PathBuf> {
    let found = ["/usr/bin/script", "/bin/script"]
        .into_iter()
        .map(PathBuf::from)
        .find(|path| path.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "`script` (util-linux) is needed for the terminal test"
        );
    }
    found
}

#[test]
fn on_a_terminal_agentry_asks_and_a_denial_reaches_the_model() {
    let Some(script) = script() else {
        return;
    };
    let setup = Setup::new(vec![
        tool_calls(&[("call_1", "calculator", json!({"expression": "6*7"}))]),
        text("Fine, no math."),
    ]);
    let url = setup.server.url();
    let command = format!(
        "{} run --provider openai --base-url {url} --model gpt-4.1-mini --tool calculator \
         --require-approval calculator 'What is 6*7?'",
        env!("CARGO_BIN_EXE_agentry")
    );
    let mut terminal = Command::new(script);
    terminal
        .args(["-qec", &command, "/dev/null"])
        .env("HOME", setup.dir.path().join("home"))
        .env("XDG_CONFIG_HOME", setup.dir.path().join("home/.config"))
        .env("NO_COLOR", "1")
        .env("OPENAI_API_KEY", "test-key")
        .env_remove("AGENTRY_CONFIG")
        .current_dir(setup.dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut process = terminal.spawn().unwrap();
    {
        use std::io::Write;
        let mut stdin = process.stdin.take().unwrap();
        stdin.write_all(b"n\nno math today\n").unwrap();
    }
    let output = process.wait_with_output().unwrap();
    let shown = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("The model wants to call `calculator`"),
        "{shown}"
    );
    assert!(shown.contains("\"expression\": \"6*7\""), "{shown}");
    assert!(shown.contains("Run it? [y/n]"), "{shown}");
    assert!(shown.contains("Fine, no math."), "{shown}");
    let results = setup.tool_messages(1);
    assert_eq!(
        results[0]["content"],
        "This call was not run: the user denied it: no math today"
    );
}

#[test]
fn ctrl_c_at_the_prompt_exits_130_and_the_calls_keep_waiting() {
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};

    let Some(script) = script() else {
        return;
    };
    let setup = Setup::new(vec![tool_calls(&[(
        "call_1",
        "calculator",
        json!({"expression": "6*7"}),
    )])]);
    let url = setup.server.url();
    let session = setup.session();
    let command = format!(
        "{} run --provider openai --base-url {url} --model gpt-4.1-mini --tool calculator \
         --require-approval calculator --session {} 'What is 6*7?'",
        env!("CARGO_BIN_EXE_agentry"),
        session.display()
    );
    let mut process = Command::new(script)
        .args(["-qec", &command, "/dev/null"])
        .env("HOME", setup.dir.path().join("home"))
        .env("XDG_CONFIG_HOME", setup.dir.path().join("home/.config"))
        .env("NO_COLOR", "1")
        .env("OPENAI_API_KEY", "test-key")
        .env_remove("AGENTRY_CONFIG")
        .current_dir(setup.dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let shown = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let shown = Arc::clone(&shown);
        let mut stdout = process.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                shown.lock().unwrap().extend_from_slice(&buffer[..n]);
            }
        })
    };
    // Ctrl-C once the prompt is up (a Ctrl-C during the model call is the run's own case).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !String::from_utf8_lossy(&shown.lock().unwrap()).contains("Run it? [y/n]") {
        assert!(std::time::Instant::now() < deadline, "no prompt");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut stdin = process.stdin.take().unwrap();
    stdin.write_all(b"\x03").unwrap();
    stdin.flush().unwrap();
    // Without the fix the signal was swallowed and the prompt waited forever.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = process.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            process.kill().unwrap();
            panic!("Ctrl-C at the prompt did not end the process");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    drop(stdin);
    reader.join().unwrap();
    let shown = String::from_utf8_lossy(&shown.lock().unwrap()).into_owned();
    assert_eq!(status.code(), Some(130), "{shown}");
    let state: Value = serde_json::from_slice(&setup.files().1).unwrap();
    assert_eq!(state["session"]["status"], "awaiting_approval", "{shown}");
    assert_eq!(setup.server.requests().len(), 1);
}
