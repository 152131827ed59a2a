//! The ready-made tools, driven through `Tool::invoke` as the loop drives them.

use std::fs;
use std::path::Path;

use agent_tools::builtin::{
    DEFAULT_READ_BYTES, MAX_READ_BYTES, ReadFileError, calculator, clock, read_file,
};
use agent_tools::{Registry, Tool, ToolContext, ToolError, TruncationPolicy, collect_output};
use serde_json::{Value, json};
use tempfile::TempDir;

async fn call(tool: &Tool, arguments: Value) -> Result<Value, ToolError> {
    let context = ToolContext::new("call_1", tool.name().to_owned());
    collect_output(tool.invoke(arguments, context)).await.result
}

/// A model-facing error's message (and checks that it is model-facing).
async fn refusal(tool: &Tool, arguments: Value) -> String {
    match call(tool, arguments.clone()).await {
        Ok(value) => panic!("{arguments} succeeded with {value}"),
        Err(error) => {
            assert_eq!(
                error.kind(),
                agent_tools::ToolErrorKind::RespondToModel,
                "{error}"
            );
            error.message().to_owned()
        }
    }
}

#[test]
fn every_tool_registers_with_its_schema() {
    let root = TempDir::new().unwrap();
    let mut tools = Registry::new();
    tools.register(calculator()).unwrap();
    tools.register(clock()).unwrap();
    tools.register(read_file(root.path()).unwrap()).unwrap();

    let params = |name: &str| tools.get(name).unwrap().spec().parameters.clone();
    let calc = params("calculator");
    assert_eq!(calc["required"], json!(["expression"]));
    assert_eq!(calc["properties"]["expression"]["type"], "string");
    let clock = params("clock");
    assert!(clock.get("required").is_none_or(|r| r == &json!([])));
    assert!(clock["properties"]["utc_offset"].is_object());
    let read = params("read_file");
    assert_eq!(read["required"], json!(["path"]));
    assert!(read["properties"]["max_bytes"].is_object());
}

#[tokio::test]
async fn calculator_answers_the_demo() {
    let calc = calculator();
    assert_eq!(
        call(&calc, json!({"expression": "19 - 4"})).await.unwrap(),
        json!({"expression": "19 - 4", "result": 15})
    );
    assert_eq!(
        call(&calc, json!({"expression": "(19 - 4) * 1.8 + 0.5"}))
            .await
            .unwrap(),
        json!({"expression": "(19 - 4) * 1.8 + 0.5", "result": 27.5})
    );
    assert_eq!(
        call(&calc, json!({"expression": "1 / 3"})).await.unwrap()["result"],
        json!(1.0 / 3.0)
    );
}

#[tokio::test]
async fn calculator_errors_go_back_to_the_model_with_a_position() {
    let calc = calculator();
    assert_eq!(
        refusal(&calc, json!({"expression": "19 - "})).await,
        "could not evaluate the expression: the expression ends too early at byte 5: expected a number, a name or `(`"
    );
    assert_eq!(
        refusal(&calc, json!({"expression": "2 * (3 + 4"})).await,
        "could not evaluate the expression: unbalanced parenthesis: the `(` at byte 4 is never closed"
    );
    assert!(
        refusal(&calc, json!({"expression": "foo(2)"}))
            .await
            .contains("unknown name `foo` at byte 0")
    );
    // Arguments of the wrong shape are the model's to fix too.
    refusal(&calc, json!({"expression": 42})).await;
}

#[tokio::test]
async fn clock_reads_the_time() {
    let clock = clock();
    let reading = call(&clock, json!({})).await.unwrap();
    let utc = reading["utc"].as_str().unwrap();
    assert_eq!(utc.len(), "2026-11-22T10:15:03Z".len());
    assert!(utc.ends_with('Z'));
    assert!(reading["unix"].as_i64().unwrap() > 1_700_000_000);
    assert!(reading.get("local").is_none());
    let weekdays = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    assert!(weekdays.contains(&reading["weekday"].as_str().unwrap()));

    let reading = call(&clock, json!({"utc_offset": "+02:00"})).await.unwrap();
    assert!(reading["local"].as_str().unwrap().ends_with("+02:00"));
    let reading = call(&clock, json!({"utc_offset": null})).await.unwrap();
    assert!(reading.get("local").is_none());

    let message = refusal(&clock, json!({"utc_offset": "+25:00"})).await;
    assert!(
        message.contains("`+25:00` is not a UTC offset"),
        "{message}"
    );
}

/// A root directory with a few files, inside a scratch directory that also holds files
/// outside the root.
struct Fixture {
    scratch: TempDir,
    tool: Tool,
}

impl Fixture {
    fn new() -> Self {
        let scratch = TempDir::new().unwrap();
        let root = scratch.path().join("root");
        fs::create_dir_all(root.join("notes/deep")).unwrap();
        fs::write(root.join("hello.txt"), "hello, world\n").unwrap();
        fs::write(root.join("notes/deep/todo.md"), "- pack for Oslo\n").unwrap();
        fs::write(
            root.join("blob.bin"),
            [0x89, b'P', b'N', b'G', 0xff, 0xfe, 0],
        )
        .unwrap();
        fs::write(scratch.path().join("secret.txt"), "top secret").unwrap();
        let tool = read_file(&root).unwrap();
        Self { scratch, tool }
    }

    fn root(&self) -> std::path::PathBuf {
        self.scratch.path().join("root")
    }

    async fn read(&self, arguments: Value) -> Result<Value, ToolError> {
        call(&self.tool, arguments).await
    }

    /// A refusal's message, checked not to reveal where the root is.
    async fn refusal(&self, arguments: Value) -> String {
        let message = refusal(&self.tool, arguments).await;
        let root = fs::canonicalize(self.root()).unwrap();
        assert!(
            !message.contains(root.to_str().unwrap()),
            "the message reveals the root: {message}"
        );
        let scratch = fs::canonicalize(self.scratch.path()).unwrap();
        assert!(
            !message.contains(scratch.to_str().unwrap()),
            "the message reveals the scratch directory: {message}"
        );
        message
    }
}

#[tokio::test]
async fn reads_a_file() {
    let fx = Fixture::new();
    assert_eq!(
        fx.read(json!({"path": "hello.txt"})).await.unwrap(),
        json!({"path": "hello.txt", "bytes": 13, "truncated": false, "content": "hello, world\n"})
    );
}

#[tokio::test]
async fn reads_a_nested_file_and_normalizes_its_path() {
    let fx = Fixture::new();
    let file = fx
        .read(json!({"path": "notes/deep/todo.md"}))
        .await
        .unwrap();
    assert_eq!(file["content"], "- pack for Oslo\n");
    assert_eq!(file["path"], "notes/deep/todo.md");
    let file = fx
        .read(json!({"path": "./notes/../notes/deep/./todo.md"}))
        .await
        .unwrap();
    assert_eq!(file["path"], "notes/deep/todo.md");
}

#[tokio::test]
async fn refuses_dot_dot_escapes() {
    let fx = Fixture::new();
    for path in [
        "../secret.txt",
        "notes/../../secret.txt",
        "../missing.txt",
        "..",
    ] {
        let message = fx.refusal(json!({"path": path})).await;
        assert_eq!(
            message,
            format!(
                "`{path}` is outside the allowed directory; only files inside it can be read (give a path relative to it, such as `notes.txt`)"
            )
        );
    }
}

#[tokio::test]
async fn refuses_absolute_paths_outside_the_root() {
    let fx = Fixture::new();
    let secret = fx.scratch.path().join("secret.txt");
    let message = refusal(&fx.tool, json!({"path": secret.to_str().unwrap()})).await;
    assert!(
        message.contains("is outside the allowed directory"),
        "{message}"
    );
    let missing = fx.scratch.path().join("missing.txt");
    let message = refusal(&fx.tool, json!({"path": missing.to_str().unwrap()})).await;
    assert!(
        message.contains("is outside the allowed directory"),
        "{message}"
    );
}

#[tokio::test]
async fn accepts_absolute_paths_inside_the_root() {
    let fx = Fixture::new();
    let inside = fs::canonicalize(fx.root())
        .unwrap()
        .join("notes/deep/todo.md");
    let file = fx
        .read(json!({"path": inside.to_str().unwrap()}))
        .await
        .unwrap();
    assert_eq!(file["path"], "notes/deep/todo.md");
    assert_eq!(file["content"], "- pack for Oslo\n");
    // A missing file there is "not found", shown relative to the root.
    let missing = fs::canonicalize(fx.root()).unwrap().join("notes/nope.md");
    assert_eq!(
        fx.refusal(json!({"path": missing.to_str().unwrap()})).await,
        "there is no file `notes/nope.md` in the allowed directory"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn refuses_symlinks_that_lead_outside() {
    let fx = Fixture::new();
    let secret = fx.scratch.path().join("secret.txt");
    std::os::unix::fs::symlink(&secret, fx.root().join("link.txt")).unwrap();
    std::os::unix::fs::symlink(fx.scratch.path(), fx.root().join("up")).unwrap();
    assert_eq!(
        fx.refusal(json!({"path": "link.txt"})).await,
        "`link.txt` is outside the allowed directory; only files inside it can be read (give a path relative to it, such as `notes.txt`)"
    );
    let message = fx.refusal(json!({"path": "up/secret.txt"})).await;
    assert!(
        message.starts_with("`up/secret.txt` is outside"),
        "{message}"
    );
    // Going through a link and back up with `..` lands outside as well.
    let message = fx.refusal(json!({"path": "up/root/../secret.txt"})).await;
    assert!(message.contains("is outside"), "{message}");
}

#[cfg(unix)]
#[tokio::test]
async fn follows_symlinks_that_stay_inside() {
    let fx = Fixture::new();
    std::os::unix::fs::symlink(
        fx.root().join("notes/deep/todo.md"),
        fx.root().join("todo-link.md"),
    )
    .unwrap();
    std::os::unix::fs::symlink("notes/deep", fx.root().join("shortcut")).unwrap();
    let file = fx.read(json!({"path": "todo-link.md"})).await.unwrap();
    assert_eq!(file["content"], "- pack for Oslo\n");
    assert_eq!(file["path"], "notes/deep/todo.md");
    let file = fx.read(json!({"path": "shortcut/todo.md"})).await.unwrap();
    assert_eq!(file["content"], "- pack for Oslo\n");
}

#[tokio::test]
async fn refuses_directories() {
    let fx = Fixture::new();
    assert_eq!(
        fx.refusal(json!({"path": "notes"})).await,
        "`notes` is a directory, not a file; this tool reads files and cannot list directories"
    );
    assert!(
        fx.refusal(json!({"path": "."}))
            .await
            .starts_with("`.` is a directory")
    );
    assert!(
        fx.refusal(json!({"path": ""}))
            .await
            .starts_with("the path is empty")
    );
}

#[tokio::test]
async fn refuses_binary_files() {
    let fx = Fixture::new();
    assert_eq!(
        fx.refusal(json!({"path": "blob.bin"})).await,
        "`blob.bin` is not UTF-8 text (it looks like a binary file), so it cannot be shown"
    );
}

#[tokio::test]
async fn truncates_on_a_character_boundary() {
    let fx = Fixture::new();
    // "é" is 2 bytes and "€" 3: a cap of 4 bytes falls inside the "€" after "aé".
    fs::write(fx.root().join("accents.txt"), "aé€z").unwrap();
    let file = fx
        .read(json!({"path": "accents.txt", "max_bytes": 4}))
        .await
        .unwrap();
    assert_eq!(
        file,
        json!({"path": "accents.txt", "bytes": 7, "truncated": true, "content": "aé"})
    );
    let file = fx
        .read(json!({"path": "accents.txt", "max_bytes": 6}))
        .await
        .unwrap();
    assert_eq!(file["content"], "aé€");
    assert_eq!(file["truncated"], true);
    let file = fx
        .read(json!({"path": "accents.txt", "max_bytes": 7}))
        .await
        .unwrap();
    assert_eq!(file["content"], "aé€z");
    assert_eq!(file["truncated"], false);
    let file = fx
        .read(json!({"path": "accents.txt", "max_bytes": 0}))
        .await
        .unwrap();
    assert_eq!(file["content"], "");
    assert_eq!(file["truncated"], true);
}

#[tokio::test]
async fn caps_reads_by_default_and_at_most() {
    let fx = Fixture::new();
    let big = "x".repeat(usize::try_from(MAX_READ_BYTES).unwrap() + 10);
    fs::write(fx.root().join("big.txt"), &big).unwrap();
    let file = fx.read(json!({"path": "big.txt"})).await.unwrap();
    assert_eq!(
        file["content"].as_str().unwrap().len() as u64,
        DEFAULT_READ_BYTES
    );
    assert_eq!(file["bytes"], MAX_READ_BYTES + 10);
    assert_eq!(file["truncated"], true);
    let file = fx
        .read(json!({"path": "big.txt", "max_bytes": u64::MAX}))
        .await
        .unwrap();
    assert_eq!(
        file["content"].as_str().unwrap().len() as u64,
        MAX_READ_BYTES
    );
}

/// Bytes this process has read through `read(2)` and friends so far (`rchar`, all threads).
#[cfg(target_os = "linux")]
fn bytes_read_so_far() -> u64 {
    let io = fs::read_to_string("/proc/self/io").unwrap();
    io.lines()
        .find_map(|line| line.strip_prefix("rchar: "))
        .unwrap()
        .parse()
        .unwrap()
}

/// The "seen": `read_file` read up to 1 MiB although the loop kept 64 KiB. With the
/// cap in the context it reads at most the cap (plus a byte), and what it returns fits the cap
/// once escaped for the request, for text and for NUL bytes (6 bytes each once escaped).
#[cfg(target_os = "linux")]
#[tokio::test]
async fn reads_no_more_than_the_result_cap() {
    const CAP: usize = 65_536;
    let fx = Fixture::new();
    let text = "All work and no play makes Jack a dull boy.\n".repeat(25_000);
    fs::write(fx.root().join("text.txt"), &text).unwrap();
    fs::write(fx.root().join("nul.txt"), vec![0u8; 1 << 20]).unwrap();
    for (path, size) in [("text.txt", text.len()), ("nul.txt", 1 << 20)] {
        let context = ToolContext::new("call_1", "read_file").with_max_result_bytes(CAP);
        let before = bytes_read_so_far();
        let output = collect_output(
            fx.tool
                .invoke(json!({"path": path, "max_bytes": MAX_READ_BYTES}), context),
        )
        .await;
        let read = bytes_read_so_far() - before;
        let file = output.result.unwrap();
        assert!(read <= CAP as u64 + 4096, "{path}: read {read} bytes");
        assert_eq!(file["bytes"], size);
        assert_eq!(file["truncated"], true);
        let content = file["content"].as_str().unwrap();
        assert!(!content.is_empty());
        // Well-formed and within the cap: the loop's truncation has nothing left to cut.
        let sent = agent_tools::truncate_result(file.clone(), &TruncationPolicy::new(CAP).unwrap());
        assert!(!sent.truncated, "{path}");
        assert!(
            sent.escaped_bytes <= CAP && CAP - sent.escaped_bytes < 8,
            "{path}: {}",
            sent.escaped_bytes
        );
    }

    // Without a cap in the context, `max_bytes` alone decides, as before.
    let before = bytes_read_so_far();
    let file = fx
        .read(json!({"path": "text.txt", "max_bytes": MAX_READ_BYTES}))
        .await
        .unwrap();
    assert!(bytes_read_so_far() - before > MAX_READ_BYTES / 2);
    assert_eq!(
        file["content"].as_str().unwrap().len(),
        text.len().min(1 << 20)
    );
}

#[tokio::test]
async fn a_missing_file_is_not_found() {
    let fx = Fixture::new();
    assert_eq!(
        fx.refusal(json!({"path": "notes/missing.md"})).await,
        "there is no file `notes/missing.md` in the allowed directory"
    );
    assert_eq!(
        fx.refusal(json!({"path": "hello.txt/inner"})).await,
        "there is no file `hello.txt/inner` in the allowed directory"
    );
}

#[test]
fn the_root_must_be_an_existing_directory() {
    let scratch = TempDir::new().unwrap();
    let missing = scratch.path().join("nope");
    let error = read_file(&missing).unwrap_err();
    assert!(
        matches!(&error, ReadFileError::RootUnavailable { root, .. } if root == &missing),
        "{error:?}"
    );
    assert!(error.to_string().contains("cannot be opened"), "{error}");

    let file = scratch.path().join("file.txt");
    fs::write(&file, "x").unwrap();
    let error = read_file(&file).unwrap_err();
    assert!(
        matches!(&error, ReadFileError::RootNotADirectory { root } if root == &file),
        "{error:?}"
    );
}

#[test]
fn reads_outside_a_tokio_runtime() {
    let fx = Fixture::new();
    let file = futures_util::FutureExt::now_or_never(fx.read(json!({"path": "hello.txt"})))
        .expect("the read completes without a runtime")
        .unwrap();
    assert_eq!(file["content"], "hello, world\n");
}

#[test]
fn paths_are_shown_relative_to_the_root() {
    // The root may be given in any form; the tool resolves it once.
    let fx = Fixture::new();
    let roundabout = fx.root().join("notes/..");
    let tool = read_file(Path::new(&roundabout)).unwrap();
    let file = futures_util::FutureExt::now_or_never(call(&tool, json!({"path": "hello.txt"})))
        .unwrap()
        .unwrap();
    assert_eq!(file["path"], "hello.txt");
}
