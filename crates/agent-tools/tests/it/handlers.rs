//! Running handlers: typed, raw, streaming, remote; panics, cancellation and context.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_tools::{
    Caller, Handler, Tool, ToolContext, ToolError, ToolErrorKind, ToolEvent, ToolStream,
    collect_output,
};
use agent_types::ToolSpec;
use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[derive(Deserialize, JsonSchema)]
struct Lookup {
    city: String,
}

#[derive(Serialize)]
struct Forecast {
    city: String,
    high_c: i32,
}

fn ctx() -> ToolContext {
    ToolContext::new("call_1", "tool")
}

/// A typed handler that already returns JSON hands it over without a copy: serializing a
/// `Value` again would duplicate every string in it (a 1 MiB file's content, per call).
#[tokio::test]
async fn a_json_result_is_moved_not_copied() {
    let made_at = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&made_at);
    let tool = Tool::from_fn("page", "A page.", move |_: Lookup, _ctx| {
        let seen = Arc::clone(&seen);
        async move {
            let text = "x".repeat(100_000);
            seen.store(text.as_ptr() as usize, Ordering::SeqCst);
            // Built by hand: `json!` would copy the string itself.
            let mut page = serde_json::Map::new();
            page.insert("page".into(), Value::String(text));
            Ok::<_, ToolError>(Value::Object(page))
        }
    });
    let out = collect_output(tool.invoke(json!({"city": "Oslo"}), ctx())).await;
    let value = out.result.unwrap();
    let page = value["page"].as_str().unwrap();
    assert_eq!(page.len(), 100_000);
    assert_eq!(page.as_ptr() as usize, made_at.load(Ordering::SeqCst));
}

#[tokio::test]
async fn typed_handler_gets_parsed_args_and_returns_json() {
    let tool = Tool::from_fn("forecast", "Forecast.", |args: Lookup, _ctx| async move {
        Ok::<_, ToolError>(Forecast {
            city: args.city,
            high_c: 21,
        })
    });
    let out = collect_output(tool.invoke(json!({"city": "Oslo"}), ctx())).await;
    assert!(out.deltas.is_empty());
    assert_eq!(out.result.unwrap(), json!({"city": "Oslo", "high_c": 21}));
    assert_eq!(tool.spec().parameters["required"], json!(["city"]));
}

#[tokio::test]
async fn typed_handler_reports_unreadable_args_to_the_model() {
    let tool = Tool::from_fn("forecast", "Forecast.", |args: Lookup, _ctx| async move {
        Ok::<_, ToolError>(args.city)
    });
    let err = collect_output(tool.invoke(json!({"town": "Oslo"}), ctx()))
        .await
        .result
        .unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::RespondToModel);
    assert!(err.message().contains("missing field `city`"), "{err}");
}

#[tokio::test]
async fn handler_errors_keep_their_kind() {
    let tool = Tool::from_json_fn(
        "fail",
        "Fails.",
        json!({"type": "object"}),
        |args, _ctx| async move {
            if args["fatal"] == true {
                Err(ToolError::fatal("credentials revoked"))
            } else {
                Err(ToolError::respond_to_model("no such city"))
            }
        },
    );
    let soft = collect_output(tool.invoke(json!({}), ctx()))
        .await
        .result
        .unwrap_err();
    assert!(!soft.is_fatal());
    assert_eq!(soft.message(), "no such city");
    let hard = collect_output(tool.invoke(json!({"fatal": true}), ctx()))
        .await
        .result
        .unwrap_err();
    assert!(hard.is_fatal());
}

#[tokio::test]
async fn raw_handler_sees_raw_json_and_the_context() {
    let tool = Tool::from_json_fn(
        "echo",
        "Echoes.",
        json!({"type": "object"}),
        |args, ctx: ToolContext| async move {
            Ok(json!({
                "args": args,
                "call": ctx.call_id().as_str(),
                "tool": ctx.tool_name(),
                "who": ctx.caller().principal(),
                "tenant": ctx.caller().tenant(),
                "admin": ctx.caller().has_permission("admin"),
            }))
        },
    );
    let context = ToolContext::new("call_9", "echo").with_caller(
        Caller::new("alice")
            .with_tenant("acme")
            .with_permission("admin"),
    );
    let out = collect_output(tool.invoke(json!({"x": 1}), context)).await;
    assert_eq!(
        out.result.unwrap(),
        json!({"args": {"x": 1}, "call": "call_9", "tool": "echo", "who": "alice", "tenant": "acme", "admin": true})
    );
}

#[derive(Deserialize, JsonSchema)]
struct Count {
    n: u32,
}

fn counter() -> Tool {
    Tool::streaming("count", "Counts.", |args: Count, _ctx| {
        async_stream::stream! {
            for i in 1..=args.n {
                yield ToolEvent::delta(format!("{i}/{}", args.n));
            }
            yield ToolEvent::ok(json!({"counted": args.n}));
        }
    })
}

#[tokio::test]
async fn streaming_handler_yields_deltas_then_one_result() {
    let events: Vec<ToolEvent> = counter().invoke(json!({"n": 3}), ctx()).collect().await;
    assert_eq!(
        events,
        [
            ToolEvent::delta("1/3"),
            ToolEvent::delta("2/3"),
            ToolEvent::delta("3/3"),
            ToolEvent::ok(json!({"counted": 3})),
        ]
    );
}

#[tokio::test]
async fn nothing_follows_the_first_result_and_a_missing_result_is_fatal() {
    let chatty = Tool::streaming("chatty", "Talks too much.", |_: Count, _ctx| {
        async_stream::stream! {
            yield ToolEvent::ok(1);
            yield ToolEvent::delta("after the end");
            yield ToolEvent::ok(2);
        }
    });
    let events: Vec<ToolEvent> = chatty.invoke(json!({"n": 0}), ctx()).collect().await;
    assert_eq!(events, [ToolEvent::ok(json!(1))]);

    let silent = Tool::streaming("silent", "Says nothing.", |_: Count, _ctx| {
        async_stream::stream! {
            yield ToolEvent::<Value>::delta("working");
        }
    });
    let out = collect_output(silent.invoke(json!({"n": 0}), ctx())).await;
    assert_eq!(out.deltas, ["working"]);
    assert!(out.result.unwrap_err().is_fatal());
}

#[tokio::test]
async fn remote_tools_have_no_handler() {
    let tool = Tool::remote("approve", "Asks a human.", json!({"type": "object"}));
    assert!(tool.is_remote());
    assert!(tool.handler().is_none());
    let err = collect_output(tool.invoke(json!({}), ctx()))
        .await
        .result
        .unwrap_err();
    assert!(err.is_fatal());
    assert!(err.message().contains("remote tool"));
}

/// A handler that panics before returning its stream.
struct PanicsWhenCalled;

impl Handler for PanicsWhenCalled {
    fn call(&self, _arguments: Value, _context: ToolContext) -> ToolStream {
        panic!("sync boom")
    }
}

fn spec(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: String::new(),
        parameters: json!({"type": "object"}).into(),
        strict: false,
        defer_loading: false,
    }
}

#[tokio::test]
async fn panics_become_tool_errors_wherever_they_happen() {
    let in_sync_part = Tool::new(spec("sync"), Some(Arc::new(PanicsWhenCalled)));
    let in_future = Tool::from_json_fn("fut", "", json!({"type": "object"}), |_, _| async {
        if true {
            panic!("async boom");
        }
        Ok(Value::Null)
    });
    let in_stream = Tool::streaming("stream", "", |_: Count, _ctx| {
        async_stream::stream! {
            yield ToolEvent::<Value>::delta("before");
            panic!("stream boom");
        }
    });
    let in_typed_closure = Tool::from_fn("closure", "", |_: Count, _ctx| {
        // Panics before any future exists.
        let boom: Result<u32, ToolError> = Err(ToolError::fatal("x"));
        if boom.is_err() {
            panic!("{}", String::from("closure boom"));
        }
        async { boom }
    });
    for (tool, message) in [
        (in_sync_part, "sync boom"),
        (in_future, "async boom"),
        (in_stream, "stream boom"),
        (in_typed_closure, "closure boom"),
    ] {
        let out = collect_output(tool.invoke(json!({"n": 1}), ctx())).await;
        let err = out.result.unwrap_err();
        assert_eq!(err.kind(), ToolErrorKind::Panicked, "{}", tool.name());
        assert!(err.message().contains(message), "{err}");
        assert!(!err.is_fatal());
    }
}

#[tokio::test]
async fn cancellation_drops_a_handler_that_ignores_the_token() {
    let dropped = Arc::new(AtomicUsize::new(0));
    struct CountDrop(Arc<AtomicUsize>);
    impl Drop for CountDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let seen = Arc::clone(&dropped);
    let tool = Tool::from_json_fn("stuck", "", json!({"type": "object"}), move |_, _| {
        let guard = CountDrop(Arc::clone(&seen));
        async move {
            let _guard = guard;
            std::future::pending::<Result<Value, ToolError>>().await
        }
    });
    let token = CancellationToken::new();
    let mut stream = tool.invoke(json!({}), ctx().with_cancellation(token.clone()));
    let cancel = async {
        tokio::task::yield_now().await;
        token.cancel();
    };
    let (event, ()) = tokio::join!(stream.next(), cancel);
    assert_eq!(event, Some(ToolEvent::err(ToolError::cancelled())));
    assert!(stream.next().await.is_none());
    drop(stream);
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_cancelled_context_never_starts_the_handler() {
    let started = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&started);
    let tool = Tool::from_json_fn("t", "", json!({"type": "object"}), move |_, _| {
        seen.fetch_add(1, Ordering::SeqCst);
        async { Ok(Value::Null) }
    });
    let token = CancellationToken::new();
    token.cancel();
    let out = collect_output(tool.invoke(json!({}), ctx().with_cancellation(token))).await;
    assert!(out.result.unwrap_err().is_cancelled());
    assert_eq!(started.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn cooperative_handlers_can_watch_the_token() {
    let tool = Tool::from_json_fn(
        "watch",
        "",
        json!({"type": "object"}),
        |_, ctx: ToolContext| async move {
            ctx.cancellation().cancelled().await;
            Err(ToolError::cancelled())
        },
    );
    let token = CancellationToken::new();
    let stream = tool.invoke(json!({}), ctx().with_cancellation(token.child_token()));
    token.cancel();
    let out = collect_output(stream).await;
    assert!(out.result.unwrap_err().is_cancelled());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_handler_serves_many_concurrent_calls() {
    let tool = Arc::new(counter());
    let mut tasks = Vec::new();
    for n in 0..32_u32 {
        let tool = Arc::clone(&tool);
        tasks.push(tokio::spawn(async move {
            collect_output(tool.invoke(
                json!({"n": n % 4}),
                ToolContext::new(format!("c{n}"), "count"),
            ))
            .await
        }));
    }
    for (n, task) in tasks.into_iter().enumerate() {
        let out = task.await.unwrap();
        assert_eq!(out.deltas.len(), n % 4);
        assert_eq!(out.result.unwrap(), json!({"counted": n % 4}));
    }
}
