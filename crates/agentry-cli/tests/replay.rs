//! `agentry replay` run as a real process over every recording in `fixtures/providers`.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn agentry(args: &[&str]) -> (i32, Value, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    let message = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    (output.status.code().unwrap_or(-1), message, stderr)
}

#[test]
fn every_recording_replays_to_one_json_message() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/providers");
    let mut files = 0;
    for provider in [
        "openai-chat",
        "openai-responses",
        "anthropic",
        "gemini",
        "ollama",
        "bedrock",
    ] {
        for entry in std::fs::read_dir(root.join(provider)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_owned();
            if name.ends_with(".request.json") {
                continue;
            }
            files += 1;
            let (code, message, stderr) =
                agentry(&["replay", "--provider", provider, path.to_str().unwrap()]);
            assert_eq!(message["role"], "assistant", "{provider}/{name}: {stderr}");
            assert!(message["content"].is_array(), "{provider}/{name}");
            let failed = name.starts_with("error-")
                || name.contains("midstream-error")
                || name.contains("failed")
                || name.contains("exception");
            if failed {
                assert_eq!(code, 1, "{provider}/{name}");
                assert_eq!(message["stop_reason"], "error", "{provider}/{name}");
                let error: Value = serde_json::from_str(stderr.trim()).unwrap();
                assert!(error["error"]["message"].is_string(), "{stderr}");
                assert!(error["error"]["kind"].is_string(), "{stderr}");
            } else {
                assert_eq!(code, 0, "{provider}/{name}: {stderr}");
                assert!(stderr.is_empty(), "{provider}/{name}: {stderr}");
                assert!(message["stop_reason"].is_string(), "{provider}/{name}");
            }
        }
    }
    assert!(files >= 67, "{files} recordings");
}

#[test]
fn a_tool_call_cut_off_mid_arguments_keeps_its_raw_text_and_is_flagged() {
    let recording = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/providers/anthropic/stream-tool-use-args.sse");
    let body = std::fs::read_to_string(recording).unwrap();
    // Keep everything up to the middle of the argument JSON (the event carrying
    // `{"location": "San Francisco`), as a dropped connection would.
    let at = body.find("San Francisco").unwrap();
    let cut = at + body[at..].find("\n\n").unwrap() + 2;
    let dir = std::env::temp_dir().join(format!("agentry-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cut.sse");
    std::fs::write(&file, &body[..cut]).unwrap();
    let (code, message, stderr) =
        agentry(&["replay", "--provider", "anthropic", file.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(code, 1, "{stderr}");
    let call = message["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|block| block["type"] == "tool_call")
        .unwrap_or_else(|| panic!("no tool call in {message}"));
    assert_eq!(call["name"], "weather");
    assert!(call["arguments"].is_string(), "{call}");
    assert_eq!(call["invalid_arguments"], true, "{call}");
    assert!(stderr.contains("\"kind\""), "{stderr}");
}

#[test]
fn bad_arguments_exit_2_and_a_missing_file_exits_1() {
    let (code, _, stderr) = agentry(&["replay", "--provider", "openai", "x.sse"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("unknown provider"), "{stderr}");
    let (code, _, stderr) = agentry(&["replay", "--provider", "ollama", "/nonexistent.ndjson"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("cannot read"), "{stderr}");
}

#[test]
fn a_structured_answer_and_a_refusal_replay_in_the_documented_block_form() {
    let dir = std::env::temp_dir().join(format!("agentry-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A Chat Completions answer to `response_format: json_schema`: the JSON is the text.
    let answer = dir.join("structured.json");
    std::fs::write(
        &answer,
        r#"{"id":"chatcmpl-x","object":"chat.completion","created":1,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"{\"city\":\"Lisbon\",\"celsius\":19}","refusal":null},"finish_reason":"stop"}],"usage":{"prompt_tokens":60,"completion_tokens":9,"total_tokens":69}}"#,
    )
    .unwrap();
    let (code, message, stderr) = agentry(&[
        "replay",
        "--provider",
        "openai-chat",
        answer.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        message["content"],
        serde_json::json!([{"type": "text", "text": "{\"city\":\"Lisbon\",\"celsius\":19}"}])
    );
    let refusal = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/providers/openai-chat/refusal.json");
    let (code, message, stderr) = agentry(&[
        "replay",
        "--provider",
        "openai-chat",
        refusal.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        message["content"],
        serde_json::json!([{"type": "refusal", "text": "I'm sorry, but I can't assist with that request."}])
    );
    let _ = std::fs::remove_dir_all(&dir);
}
