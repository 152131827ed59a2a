//! The recorded structured-output responses of `fixtures/providers/` (the rows of SOURCES.md
//! whose notes carry `OUTPUT → `…``), replayed through the real adapter over loopback HTTP and
//! through the loop with the answer's schema: `Native` where the adapter has the capability,
//! `Tool` for Anthropic. The validated `output` must be the recorded answer, and the request
//! must have asked the provider for it in its own form, and the model-call record must carry the
//! provider's response id.

use std::path::{Path, PathBuf};

use agent_backends::Provider;
use agent_backends::replay::{Cassette, ReplayBackend};
use agent_loop::{Input, Options, OutputSpec, OutputStrategy, generate};
use agent_types::Backend;
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/providers")
}

/// `(file, answer)` for every structured-output row of SOURCES.md.
fn recorded_outputs() -> Vec<(String, Value)> {
    let sources = std::fs::read_to_string(fixtures().join("SOURCES.md")).unwrap();
    sources
        .lines()
        .filter(|line| line.starts_with("| `"))
        .filter_map(|line| {
            let (_, rest) = line.split_once("OUTPUT → `")?;
            let answer = serde_json::from_str(&rest[..rest.find('`')?]).unwrap();
            let file = line.split('`').nth(1)?.to_owned();
            Some((file, answer))
        })
        .collect()
}

/// The schema the recordings answer (all five carry the same answer).
fn event_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "category": {"type": "string"},
            "summary": {"type": "string"}
        },
        "required": ["title", "category", "summary"],
        "additionalProperties": false
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_recorded_structured_answer_comes_out_of_the_loop_validated() {
    let recorded = recorded_outputs();
    let mut providers: Vec<Provider> = Vec::new();
    for (file, answer) in recorded {
        let provider: Provider = file.split('/').next().unwrap().parse().unwrap();
        providers.push(provider);
        let cassette = Cassette::from_file(fixtures().join(&file)).unwrap();
        let backend = ReplayBackend::start(provider, [cassette]).await.unwrap();
        let native = backend.capabilities().structured_output;
        // The recorded final-answer tool of the Anthropic recording is `final_result`.
        let (strategy, spec) = if provider == Provider::Anthropic {
            assert!(!native, "{file}: Anthropic is Tool by default");
            let spec = OutputSpec::from_schema(event_schema()).with_name("final_result");
            (OutputStrategy::Tool, spec)
        } else {
            assert!(
                native,
                "{file}: the adapter supports native structured output"
            );
            (
                OutputStrategy::Native,
                OutputSpec::from_schema(event_schema()),
            )
        };
        let options = Options::default()
            .with_output_spec(spec)
            .with_output_strategy(strategy);
        let result = generate(
            &backend,
            Input::new("replay-model").user("Return a concise event object."),
            &options,
        )
        .await
        .unwrap_or_else(|error| panic!("{file}: {error:?}"));
        assert_eq!(result.output.as_ref(), Some(&answer), "{file}");

        // What the adapter sent: the provider's own way of asking for the schema.
        let requests = backend.server().requests();
        assert_eq!(requests.len(), 1, "{file}: one model call, no retry");
        let body: Value = serde_json::from_slice(&requests[0].body).unwrap();
        let asked = match provider {
            Provider::OpenAiChat => body["response_format"]["type"] == "json_schema",
            Provider::OpenAiResponses => body["text"]["format"]["type"] == "json_schema",
            Provider::Gemini => body["generationConfig"]["responseMimeType"] == "application/json",
            Provider::Ollama => body["format"].is_object(),
            Provider::Anthropic => body["tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|tool| tool["name"] == "final_result"),
            // Bedrock has no structured-output recording (Converse has no JSON-schema output).
            Provider::Bedrock => body["toolConfig"]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|tool| tool["toolSpec"]["name"] == "final_result"),
        };
        assert!(asked, "{file}: request {body}");

        // The provider's response id reaches the model-call record (`gen_ai.response.id`):
        // every provider but Ollama names its responses.
        let id = result.model_calls[0].response_id.as_deref();
        if provider == Provider::Ollama {
            assert_eq!(id, None, "{file}");
        } else {
            let id = id.unwrap_or_else(|| panic!("{file}: no response id recorded"));
            let recorded = std::fs::read_to_string(fixtures().join(&file)).unwrap();
            assert!(id.len() > 4 && recorded.contains(id), "{file}: {id}");
        }

        insta::assert_json_snapshot!(
            file.replace('/', "__"),
            json!({ "output": result.output, "usage": result.usage })
        );
    }
    providers.sort_by_key(|provider| format!("{provider:?}"));
    providers.dedup();
    assert_eq!(
        providers.len(),
        5,
        "one structured-output recording per provider"
    );
}
