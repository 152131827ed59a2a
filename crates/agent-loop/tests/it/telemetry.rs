//! The loop's spans as a subscriber sees them: OpenTelemetry GenAI names and attributes,
//! nesting (a round's tool calls are siblings under the run), usage equal to the result's,
//! errors with `error.type` and status, and message content only on request.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{Input, Options, generate};
use agent_types::{BackendError, BackendErrorKind, StopReason, ToolCall, Usage};
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use crate::support::{registry, usage, weather_tool};

/// One span: its static name, its parent's index in the capture, every field recorded.
#[derive(Debug, Clone)]
pub(crate) struct Span {
    name: &'static str,
    parent: Option<usize>,
    fields: BTreeMap<String, String>,
}

impl Span {
    pub(crate) fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Span>>>);

/// The span's index in the capture, kept in its extensions (span ids are reused).
struct Index(usize);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let span = ctx.span(id).unwrap();
        let parent = span
            .parent()
            .and_then(|parent| parent.extensions().get::<Index>().map(|index| index.0));
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let mut spans = self.0.lock().unwrap();
        spans.push(Span {
            name: attrs.metadata().name(),
            parent,
            fields,
        });
        span.extensions_mut().insert(Index(spans.len() - 1));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).unwrap();
        let Some(index) = span.extensions().get::<Index>().map(|index| index.0) else {
            return;
        };
        values.record(&mut Fields(&mut self.0.lock().unwrap()[index].fields));
    }
}

/// Runs `f` under a subscriber capturing every span (thread-local: the test runtime runs
/// the whole loop on this thread).
pub(crate) async fn capture<F: Future>(f: F) -> (F::Output, Vec<Span>) {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let output = f.await;
    let spans = capture.0.lock().unwrap().clone();
    (output, spans)
}

pub(crate) fn named<'a>(spans: &'a [Span], name: &str) -> Vec<(usize, &'a Span)> {
    spans
        .iter()
        .enumerate()
        .filter(|(_, span)| span.name == name)
        .collect()
}

fn cached_usage() -> Usage {
    Usage {
        cache_read_tokens: Some(60),
        cache_write_5m_tokens: Some(10),
        cache_write_1h_tokens: Some(5),
        ..usage(150, 12)
    }
}

#[tokio::test]
async fn spans_carry_the_genai_names_and_nest_as_the_run_happens() {
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_agent_name("travel");
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_calls([
            ToolCall::new("call_1", "get_weather", json!({"city": "Denver"})),
            ToolCall::new("call_2", "get_weather", json!({"city": "Paris"})),
        ])
        .with_usage(usage(100, 20)),
        ScriptedTurn::text("Denver is warmer.").with_usage(cached_usage()),
    ]);

    let (result, spans) = capture(generate(
        &backend,
        Input::new("m").user("Denver or Paris?"),
        &options,
    ))
    .await;
    let result = result.unwrap();

    let runs = named(&spans, "invoke_agent");
    assert_eq!(runs.len(), 1);
    let (run_index, run) = runs[0];
    assert_eq!(run.parent, None);
    assert_eq!(run.field("otel.name"), Some("invoke_agent travel"));
    assert_eq!(run.field("otel.kind"), Some("internal"));
    assert_eq!(run.field("gen_ai.operation.name"), Some("invoke_agent"));
    assert_eq!(run.field("gen_ai.agent.name"), Some("travel"));
    assert_eq!(run.field("gen_ai.provider.name"), Some("scripted"));
    assert_eq!(run.field("gen_ai.request.model"), Some("m"));
    assert_eq!(
        run.field("gen_ai.conversation.id"),
        Some(result.session_id.to_string().as_str())
    );
    // The run's totals equal the result's.
    assert_eq!(result.usage.input_tokens, Some(250));
    assert_eq!(run.field("gen_ai.usage.input_tokens"), Some("250"));
    assert_eq!(run.field("gen_ai.usage.output_tokens"), Some("32"));
    assert_eq!(run.field("agentry.model_calls"), Some("2"));
    assert_eq!(run.field("agentry.iterations"), Some("1"));
    assert_eq!(run.field("agentry.finish_reason"), Some("stop"));
    assert_eq!(run.field("error.type"), None);

    let chats = named(&spans, "chat");
    assert_eq!(chats.len(), 2);
    for (_, chat) in &chats {
        assert_eq!(chat.parent, Some(run_index));
        assert_eq!(chat.field("otel.name"), Some("chat m"));
        assert_eq!(chat.field("otel.kind"), Some("client"));
        assert_eq!(chat.field("gen_ai.operation.name"), Some("chat"));
        assert_eq!(chat.field("gen_ai.provider.name"), Some("scripted"));
        assert_eq!(chat.field("gen_ai.response.model"), Some("m"));
        assert!(chat.field("agentry.time_to_first_chunk").is_some());
        // Content is opt-in.
        assert_eq!(chat.field("gen_ai.input.messages"), None);
        assert_eq!(chat.field("gen_ai.output.messages"), None);
    }
    let (first, second) = (chats[0].1, chats[1].1);
    assert_eq!(first.field("gen_ai.usage.input_tokens"), Some("100"));
    assert_eq!(first.field("gen_ai.usage.output_tokens"), Some("20"));
    assert_eq!(
        first.field("gen_ai.response.finish_reasons"),
        Some("tool_calls")
    );
    assert_eq!(first.field("agentry.tool_calls"), Some("2"));
    assert_eq!(first.field("gen_ai.usage.cache_read.input_tokens"), None);
    assert_eq!(second.field("gen_ai.response.finish_reasons"), Some("stop"));
    assert_eq!(
        second.field("gen_ai.usage.cache_read.input_tokens"),
        Some("60")
    );
    assert_eq!(
        second.field("gen_ai.usage.cache_creation.input_tokens"),
        Some("15")
    );
    assert_eq!(
        second.field("agentry.usage.cache_creation_1h.input_tokens"),
        Some("5")
    );
    assert_eq!(result.model_calls[1].usage, Some(cached_usage()));

    // The round's two calls are siblings under the run, between the two model calls.
    let tools = named(&spans, "execute_tool");
    assert_eq!(tools.len(), 2);
    for ((index, tool), id) in tools.iter().zip(["call_1", "call_2"]) {
        assert!(chats[0].0 < *index && *index < chats[1].0);
        assert_eq!(tool.parent, Some(run_index));
        assert_eq!(tool.field("otel.name"), Some("execute_tool get_weather"));
        assert_eq!(tool.field("gen_ai.operation.name"), Some("execute_tool"));
        assert_eq!(tool.field("gen_ai.tool.name"), Some("get_weather"));
        assert_eq!(tool.field("gen_ai.tool.call.id"), Some(id));
        assert_eq!(tool.field("agentry.tool.truncated"), Some("false"));
        assert_eq!(tool.field("error.type"), None);
    }
}

#[tokio::test]
async fn message_content_is_recorded_only_when_asked() {
    let options = Options::auto().with_trace_content(true);
    let backend = ScriptedBackend::new([ScriptedTurn::text("Bonjour.").with_usage(usage(5, 2))]);

    let (result, spans) = capture(generate(
        &backend,
        Input::new("m")
            .system("Be brief.")
            .user("Say hello in French"),
        &options,
    ))
    .await;
    result.unwrap();

    let chat = named(&spans, "chat")[0].1;
    assert!(
        chat.field("gen_ai.input.messages")
            .unwrap()
            .contains("Say hello in French")
    );
    assert!(
        chat.field("gen_ai.output.messages")
            .unwrap()
            .contains("Bonjour.")
    );
    assert_eq!(chat.field("gen_ai.system_instructions"), Some("Be brief."));
}

#[tokio::test]
async fn failures_carry_error_type_and_error_status() {
    // A tool the model made up: the call's span fails, the run goes on.
    let options = Options::auto().with_tools(registry([weather_tool()]));
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_wether", json!({"city": "Denver"})),
        ScriptedTurn::text("Sorry.").finish(StopReason::Stop),
    ]);
    let (result, spans) = capture(generate(&backend, Input::new("m").user("?"), &options)).await;
    result.unwrap();
    let tool = named(&spans, "execute_tool")[0].1;
    assert_eq!(tool.field("error.type"), Some("unknown_tool"));
    assert_eq!(tool.field("otel.status_code"), Some("ERROR"));
    assert_eq!(named(&spans, "invoke_agent")[0].1.field("error.type"), None);

    // A provider failure: the model call's span and the run's both fail.
    let backend = ScriptedBackend::new([ScriptedTurn::new().fail_with(BackendError::new(
        BackendErrorKind::RateLimited,
        "slow down",
    ))]);
    let (result, spans) = capture(generate(&backend, Input::new("m").user("?"), &options)).await;
    assert!(result.is_err());
    let chat = named(&spans, "chat")[0].1;
    assert_eq!(chat.field("error.type"), Some("rate_limited"));
    assert_eq!(chat.field("otel.status_code"), Some("ERROR"));
    let run = named(&spans, "invoke_agent")[0].1;
    assert_eq!(run.field("error.type"), Some("rate_limited"));
    assert_eq!(run.field("otel.status_code"), Some("ERROR"));
    assert_eq!(run.field("agentry.finish_reason"), Some("error"));

    // A budget trip is named.
    let options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_max_tool_iterations(1);
    let backend = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Denver"})),
        ScriptedTurn::tool_call("call_2", "get_weather", json!({"city": "Paris"})),
    ]);
    let (result, spans) = capture(generate(&backend, Input::new("m").user("?"), &options)).await;
    assert!(result.is_err());
    let run = named(&spans, "invoke_agent")[0].1;
    assert_eq!(run.field("error.type"), Some("budget_exceeded"));
    assert_eq!(run.field("agentry.budget"), Some("iterations"));
}

#[tokio::test]
async fn a_native_structured_answer_is_marked_json_and_the_settings_sent_are_recorded() {
    let backend = ScriptedBackend::new([ScriptedTurn::text(r#"{"city": "Oslo"}"#)])
        .with_capabilities(agent_types::Capabilities {
            tools: true,
            streaming: true,
            structured_output: true,
            usage_reporting: true,
            ..agent_types::Capabilities::default()
        });
    let options = Options::default().with_output_schema(json!({
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"]
    }));
    let mut input = Input::new("m").user("Which city?");
    input.settings.temperature = Some(0.5);
    input.settings.max_output_tokens = Some(300);
    let (result, spans) = capture(generate(&backend, input, &options)).await;
    result.unwrap();
    let chat = named(&spans, "chat")[0].1;
    assert_eq!(chat.field("gen_ai.output.type"), Some("json"));
    assert_eq!(chat.field("gen_ai.request.temperature"), Some("0.5"));
    assert_eq!(chat.field("gen_ai.request.max_tokens"), Some("300"));
    assert_eq!(
        chat.field("gen_ai.request.top_p"),
        None,
        "not set, not recorded"
    );

    // A free-text run says nothing about the output type.
    let backend = ScriptedBackend::new([ScriptedTurn::text("Oslo.")]);
    let (result, spans) = capture(generate(
        &backend,
        Input::new("m").user("?"),
        &Options::default(),
    ))
    .await;
    result.unwrap();
    assert_eq!(named(&spans, "chat")[0].1.field("gen_ai.output.type"), None);
}
