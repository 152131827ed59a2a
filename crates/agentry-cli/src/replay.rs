//! `agentry replay`.

use std::path::Path;
use std::process::ExitCode;

use agent_backends::Provider;
use agent_backends::replay::{Cassette, ReplayBackend};
use agent_types::{
    AssistantMessage, Backend, BackendError, Message, MessageAssembler, ModelRequest, StopReason,
};
use futures_util::StreamExt;

pub(crate) fn parse_provider(name: &str) -> Result<Provider, String> {
    name.parse()
        .map_err(|error: agent_backends::Error| error.to_string())
}

/// Replays `file` and prints the message; the exit code says whether it decoded cleanly.
pub(crate) async fn run(provider: Provider, status: Option<u16>, file: &Path) -> ExitCode {
    let mut cassette = match Cassette::from_file(file) {
        Ok(cassette) => cassette,
        Err(error) => {
            eprintln!("agentry: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(status) = status {
        cassette.status = status;
    }
    let mut request = ModelRequest::new("replay", vec![Message::user("replay")]);
    request.stream = cassette.is_stream();
    let backend = match ReplayBackend::start(provider, [cassette]).await {
        Ok(backend) => backend,
        Err(error) => {
            eprintln!("agentry: {error}");
            return ExitCode::FAILURE;
        }
    };
    let (message, error) = decode(&backend, &request).await;
    match serde_json::to_string(&Message::Assistant(message)) {
        Ok(json) => println!("{json}"),
        Err(error) => {
            eprintln!("agentry: the message could not be written as JSON: {error}");
            return ExitCode::FAILURE;
        }
    }
    match error {
        None => ExitCode::SUCCESS,
        Some(error) => {
            let typed = serde_json::json!({
                "error": {
                    "kind": error.kind,
                    "message": error.message,
                    "status": error.status,
                    "retryable": error.is_retryable(),
                }
            });
            eprintln!("{typed}");
            ExitCode::FAILURE
        }
    }
}

/// The assembled message and, when the call failed, the error (its partial message becomes
/// the message, marked `stop_reason: error`).
async fn decode(
    backend: &ReplayBackend,
    request: &ModelRequest,
) -> (AssistantMessage, Option<BackendError>) {
    let mut assembler = MessageAssembler::new(false);
    let mut stream = backend.stream(request);
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => {
                if let Err(error) = assembler.push(event) {
                    return (assembler.finish_partial(StopReason::Error), Some(error));
                }
            }
            Err(mut error) => {
                let partial = error
                    .partial
                    .take()
                    .map(|partial| *partial)
                    .unwrap_or_else(|| assembler.finish_partial(StopReason::Error));
                return (partial, Some(error));
            }
        }
    }
    (assembler.finish(), None)
}
