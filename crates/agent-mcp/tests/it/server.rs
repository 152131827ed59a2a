//! The MCP server's handler, driven by rmcp's own client over an in-memory duplex.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_mcp::server::{ServerOptions, serve_io};
use agent_tools::{Caller, Registry, Tool, ToolContent, ToolError, ToolEvent};
use rmcp::model::{
    CallToolRequestParams, CancelledNotificationParam, ClientRequest, ProgressNotificationParam,
    Request,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RoleClient, RunningService};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::Notify;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Echo {
    /// What to say back.
    text: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Empty {}

/// What the test tools report back to the test.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) started: Notify,
    pub(crate) cancelled: Notify,
    pub(crate) cancellations: AtomicUsize,
}

/// echo (JSON object, with an output schema), shout (a string), chart (content blocks),
/// count (progress deltas), slow (waits for cancellation and reports it), secret (needs the
/// `admin` permission), fail (a tool error), remote (no handler).
pub(crate) fn registry(seen: &Arc<Seen>) -> Registry {
    let mut tools = Registry::new();
    tools
        .register(
            Tool::from_fn("echo", "Says it back.", |args: Echo, _ctx| async move {
                Ok::<_, ToolError>(json!({"echo": args.text}))
            })
            .with_output_schema(json!({
                "type": "object",
                "properties": {"echo": {"type": "string"}},
                "required": ["echo"]
            })),
        )
        .unwrap();
    tools
        .register(Tool::from_fn(
            "shout",
            "Says it loudly.",
            |args: Echo, _ctx| async move { Ok::<_, ToolError>(args.text.to_uppercase()) },
        ))
        .unwrap();
    tools
        .register(Tool::from_fn(
            "chart",
            "A chart.",
            |_args: Empty, _ctx| async move {
                Ok::<_, ToolError>(
                    ToolContent::text("sales:")
                        .and(ToolContent::image([1u8, 2, 3], "image/png"))
                        .and(ToolContent::json(json!({"total": 3}))),
                )
            },
        ))
        .unwrap();
    tools
        .register(Tool::streaming(
            "count",
            "Counts to 3.",
            |_args: Empty, _ctx| {
                async_stream::stream! {
                    for i in 1..=3 {
                        yield ToolEvent::delta(format!("step {i}"));
                    }
                    yield ToolEvent::ok(3);
                }
            },
        ))
        .unwrap();
    let slow_seen = Arc::clone(seen);
    tools
        .register(Tool::from_fn(
            "slow",
            "Waits until cancelled.",
            move |_args: Empty, ctx| {
                let seen = Arc::clone(&slow_seen);
                async move {
                    seen.started.notify_one();
                    // The guard drops this future when the token fires; a drop guard sees it.
                    struct Observe(Arc<Seen>, tokio_util::sync::CancellationToken);
                    impl Drop for Observe {
                        fn drop(&mut self) {
                            if self.1.is_cancelled() {
                                self.0.cancellations.fetch_add(1, Ordering::SeqCst);
                                self.0.cancelled.notify_one();
                            }
                        }
                    }
                    let _observe = Observe(Arc::clone(&seen), ctx.cancellation().clone());
                    ctx.cancellation().cancelled().await;
                    Ok::<_, ToolError>("cancelled")
                }
            },
        ))
        .unwrap();
    tools
        .register(
            Tool::from_fn("secret", "Admins only.", |_args: Empty, _ctx| async move {
                Ok::<_, ToolError>("the secret")
            })
            .requires_permission("admin"),
        )
        .unwrap();
    tools
        .register(Tool::from_fn(
            "fail",
            "Always fails.",
            |_args: Empty, _ctx| async move {
                Err::<Value, _>(ToolError::respond_to_model("no such city"))
            },
        ))
        .unwrap();
    let counted = Arc::clone(seen);
    tools
        .register(Tool::from_fn(
            "cancellations",
            "How many calls of `slow` saw their cancellation.",
            move |_args: Empty, _ctx| {
                let seen = Arc::clone(&counted);
                async move { Ok::<_, ToolError>(seen.cancellations.load(Ordering::SeqCst).to_string()) }
            },
        ))
        .unwrap();
    tools
        .register(Tool::remote(
            "remote",
            "Run by someone else.",
            json!({"type": "object"}),
        ))
        .unwrap();
    tools
}

#[derive(Clone, Default)]
struct Client {
    progress: Arc<std::sync::Mutex<Vec<ProgressNotificationParam>>>,
}

impl ClientHandler for Client {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }
}

async fn connect(
    registry: Registry,
    caller: Caller,
    options: ServerOptions,
) -> (RunningService<RoleClient, Client>, Client) {
    let (client_side, server_side) = tokio::io::duplex(64 * 1024);
    let (read, write) = tokio::io::split(server_side);
    tokio::spawn(async move {
        let _ = serve_io(&registry, caller, options, read, write).await;
    });
    let client = Client::default();
    let running = client.clone().serve(client_side).await.unwrap();
    (running, client)
}

fn call(name: &str, arguments: Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = arguments.as_object().cloned();
    params
}

fn text(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.clone()))
        .collect::<Vec<_>>()
        .join("|")
}

#[tokio::test]
async fn tools_list_shows_schemas_and_only_what_the_caller_may_use() {
    let seen = Arc::new(Seen::default());
    let (client, _) = connect(
        registry(&seen),
        Caller::new("user"),
        ServerOptions::default(),
    )
    .await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    // No `secret` (needs admin), no `remote` (nothing to run here); sorted by name.
    assert_eq!(
        names,
        [
            "cancellations",
            "chart",
            "count",
            "echo",
            "fail",
            "shout",
            "slow"
        ]
    );
    let echo = &tools[3];
    assert_eq!(echo.input_schema["properties"]["text"]["type"], "string");
    assert_eq!(
        echo.output_schema.as_ref().unwrap()["required"],
        json!(["echo"])
    );
    assert!(tools[5].output_schema.is_none());

    let (admin, _) = connect(
        registry(&seen),
        Caller::new("root").with_permission("admin"),
        ServerOptions::default(),
    )
    .await;
    let names: Vec<String> = admin
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|tool| tool.name.into_owned())
        .collect();
    assert!(names.contains(&"secret".to_owned()), "{names:?}");
}

#[tokio::test]
async fn calls_return_structured_text_content_and_errors() {
    let seen = Arc::new(Seen::default());
    let (client, _) = connect(
        registry(&seen),
        Caller::new("user"),
        ServerOptions::default(),
    )
    .await;

    let echo = client
        .call_tool(call("echo", json!({"text": "hi"})))
        .await
        .unwrap();
    assert_eq!(echo.is_error, Some(false));
    assert_eq!(echo.structured_content, Some(json!({"echo": "hi"})));
    assert_eq!(text(&echo), r#"{"echo":"hi"}"#);

    let shout = client
        .call_tool(call("shout", json!({"text": "hi"})))
        .await
        .unwrap();
    assert_eq!(text(&shout), "HI");
    assert_eq!(shout.structured_content, None);

    let chart = client.call_tool(call("chart", json!({}))).await.unwrap();
    assert_eq!(chart.structured_content, Some(json!({"total": 3})));
    assert_eq!(chart.content[1].as_image().unwrap().data, "AQID");

    // Arguments are checked against the compiled schema: a tool error the model can act on.
    let invalid = client
        .call_tool(call("echo", json!({"text": 5})))
        .await
        .unwrap();
    assert_eq!(invalid.is_error, Some(true));
    assert!(text(&invalid).contains("`/text`"), "{}", text(&invalid));

    let failed = client.call_tool(call("fail", json!({}))).await.unwrap();
    assert_eq!(failed.is_error, Some(true));
    assert_eq!(text(&failed), "no such city");

    // A tool the caller may not see is the same error as one that does not exist.
    let hidden = client
        .call_tool(call("secret", json!({})))
        .await
        .unwrap_err();
    let missing = client.call_tool(call("nope", json!({}))).await.unwrap_err();
    let strip =
        |error: rmcp::service::ServiceError, name: &str| error.to_string().replace(name, "NAME");
    assert_eq!(strip(hidden, "secret"), strip(missing, "nope"));
    let remote = client
        .call_tool(call("remote", json!({})))
        .await
        .unwrap_err();
    assert!(remote.to_string().contains("unknown tool"), "{remote}");
}

#[tokio::test]
async fn results_are_capped_like_the_loops() {
    let seen = Arc::new(Seen::default());
    let options =
        ServerOptions::default().with_truncation(agent_tools::TruncationPolicy::new(100).unwrap());
    let (client, _) = connect(registry(&seen), Caller::new("user"), options).await;
    let long = "a".repeat(1000);
    let shout = client
        .call_tool(call("shout", json!({"text": long})))
        .await
        .unwrap();
    let cut = text(&shout);
    assert!(cut.len() <= 100, "{}", cut.len());
    assert!(
        cut.ends_with("[…truncated; full result 1000 bytes]"),
        "{cut}"
    );
    // echo declares an output schema: its oversized result is an error, not a silent cut.
    let echo = client
        .call_tool(call("echo", json!({"text": long})))
        .await
        .unwrap();
    assert_eq!(echo.is_error, Some(true));
}

#[tokio::test]
async fn deltas_become_progress_notifications() {
    let seen = Arc::new(Seen::default());
    let (client, handler) = connect(
        registry(&seen),
        Caller::new("user"),
        ServerOptions::default(),
    )
    .await;
    // rmcp's client puts a progress token on every request.
    let result = client.call_tool(call("count", json!({}))).await.unwrap();
    assert_eq!(text(&result), "3");
    let progress = handler.progress.lock().unwrap().clone();
    let messages: Vec<_> = progress
        .iter()
        .map(|p| p.message.clone().unwrap())
        .collect();
    assert_eq!(messages, ["step 1", "step 2", "step 3"]);
    let steps: Vec<f64> = progress.iter().map(|p| p.progress).collect();
    assert_eq!(steps, [1.0, 2.0, 3.0]);
}

#[tokio::test]
async fn a_cancelled_notification_cancels_the_handler() {
    let seen = Arc::new(Seen::default());
    let (client, _) = connect(
        registry(&seen),
        Caller::new("user"),
        ServerOptions::default(),
    )
    .await;
    let handle = client
        .send_request_with_option(
            ClientRequest::CallToolRequest(Request::new(call("slow", json!({})))),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), seen.started.notified())
        .await
        .expect("the tool started");
    client
        .notify_cancelled(CancelledNotificationParam::new(
            Some(handle.id.clone()),
            Some("the user gave up".to_owned()),
        ))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), seen.cancelled.notified())
        .await
        .expect("the handler saw the cancellation");
    assert_eq!(seen.cancellations.load(Ordering::SeqCst), 1);
    drop(handle);
}

#[tokio::test]
async fn calls_past_the_connection_cap_are_refused_not_queued() {
    let seen = Arc::new(Seen::default());
    let options = ServerOptions::default().with_max_concurrent_calls(1);
    let (client, _) = connect(registry(&seen), Caller::new("user"), options).await;
    let first = client
        .send_request_with_option(
            ClientRequest::CallToolRequest(Request::new(call("slow", json!({})))),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), seen.started.notified())
        .await
        .unwrap();
    let second = client
        .call_tool(call("echo", json!({"text": "x"})))
        .await
        .unwrap();
    assert_eq!(second.is_error, Some(true));
    assert!(
        text(&second).contains("1 calls running"),
        "{}",
        text(&second)
    );
    // Once the first call ends, the place is free again.
    client
        .notify_cancelled(CancelledNotificationParam::new(
            Some(first.id.clone()),
            None,
        ))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), seen.cancelled.notified())
        .await
        .unwrap();
    let mut freed = false;
    for _ in 0..100 {
        let third = client
            .call_tool(call("echo", json!({"text": "x"})))
            .await
            .unwrap();
        if third.is_error == Some(false) {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(freed);
}

#[tokio::test]
async fn a_call_past_its_time_limit_is_stopped() {
    let seen = Arc::new(Seen::default());
    let options = ServerOptions::default().with_call_timeout(Some(Duration::from_millis(50)));
    let (client, _) = connect(registry(&seen), Caller::new("user"), options).await;
    let result = client.call_tool(call("slow", json!({}))).await.unwrap();
    assert_eq!(result.is_error, Some(true));
    assert!(
        text(&result).contains("did not finish within"),
        "{}",
        text(&result)
    );
    // The handler's token fired before it was dropped: it could tell why.
    tokio::time::timeout(Duration::from_secs(10), seen.cancelled.notified())
        .await
        .expect("the handler saw its cancellation");
}

#[tokio::test]
async fn a_stdio_message_over_the_cap_is_dropped_and_the_connection_goes_on() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let seen = Arc::new(Seen::default());
    let mut options = ServerOptions::default();
    options.max_message_bytes = 1024;
    let (client_side, server_side) = tokio::io::duplex(64 * 1024);
    let (read, write) = tokio::io::split(server_side);
    let tools = registry(&seen);
    tokio::spawn(async move {
        let _ = serve_io(&tools, Caller::new("user"), options, read, write).await;
    });
    let (client_read, mut client_write) = tokio::io::split(client_side);
    let mut lines = BufReader::new(client_read).lines();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    client_write
        .write_all(format!("{initialize}\n").as_bytes())
        .await
        .unwrap();
    let answer: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(answer["id"], 1);
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    client_write
        .write_all(format!("{initialized}\n").as_bytes())
        .await
        .unwrap();
    // 4 KiB of arguments: past the 1 KiB cap, so the line is dropped unread.
    let big = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x".repeat(4096)}}});
    client_write
        .write_all(format!("{big}\n").as_bytes())
        .await
        .unwrap();
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
    client_write
        .write_all(format!("{list}\n").as_bytes())
        .await
        .unwrap();
    // The next answer is the list's: the oversized call was never run.
    let next = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let line = lines.next_line().await.unwrap().unwrap();
            let message: Value = serde_json::from_str(&line).unwrap();
            if message.get("id").is_some() {
                return message;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(next["id"], 3, "{next}");
    assert!(next["result"]["tools"].is_array(), "{next}");
}
