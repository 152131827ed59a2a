//! [`Fallback`]: a backend over an ordered list of backends, each with its model, that tries
//! the next one when a call fails before any output reached the caller.
//!
//! A call goes to the first backend. When it fails with an error worth another model
//! (overloaded, rate limited, quota used up, a timeout, a broken connection, a 5xx; see
//! [`Fallback::switches_on`]) before the stream yielded anything, the same request goes to the
//! next backend under that backend's model id, and so on. `message_start` and `usage` are held
//! back until the first output (as the HTTP driver holds them for its retries), so "nothing
//! yielded" really means the caller saw nothing; once an event went out, an error ends the
//! call as it is: a switch then would duplicate output.
//!
//! The answering model is named in the call's `message_start` (the provider's own name when it
//! gives one, else the entry's model id), so the loop's `ModelCallRecord::model`, its `chat`
//! span's `gen_ai.response.model` and the rate card's price are the answering model's; when a
//! later backend answers, its `provider_name` is recorded as `gen_ai.provider.name` on the span
//! the stream is polled in (the loop's `chat` span). When every backend fails, the last error
//! comes back with the list of what each model answered in its message.

use std::fmt;

use agent_types::{
    Backend, BackendError, BackendErrorKind, BackendStream, Capabilities, ModelRequest, StreamEvent,
};
use futures_util::StreamExt;

/// One backend of a [`Fallback`] and the model id it is called with.
struct Entry {
    backend: Box<dyn Backend>,
    model: String,
}

/// A [`Backend`] trying an ordered list of backends, switching only before any output
/// reached the caller (module docs).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use agent_backends::{Fallback, ScriptedBackend, ScriptedTurn};
/// use agent_types::{Backend, BackendError, BackendErrorKind, Message, ModelRequest, StreamEvent};
/// use futures_util::StreamExt;
///
/// let overloaded = BackendError::new(BackendErrorKind::Overloaded, "Overloaded");
/// let backend = Fallback::new(ScriptedBackend::new([ScriptedTurn::new().fail_with(overloaded)]), "primary")
///     .or(ScriptedBackend::new([ScriptedTurn::text("hello")]), "secondary");
/// let request = ModelRequest::new("primary", vec![Message::user("Hi")]);
/// let events: Vec<StreamEvent> = backend.stream(&request).map(Result::unwrap).collect().await;
/// assert!(matches!(&events[0], StreamEvent::MessageStart { model: Some(m), .. } if m == "secondary"));
/// # }
/// ```
pub struct Fallback {
    entries: Vec<Entry>,
    client_errors: bool,
}

impl Fallback {
    /// A fallback list starting with `backend`, called with `model`.
    pub fn new(backend: impl Backend + 'static, model: impl Into<String>) -> Self {
        Self {
            entries: vec![Entry {
                backend: Box::new(backend),
                model: model.into(),
            }],
            client_errors: false,
        }
    }

    /// Adds `backend`, called with `model`, after the others.
    #[must_use]
    pub fn or(mut self, backend: impl Backend + 'static, model: impl Into<String>) -> Self {
        self.entries.push(Entry {
            backend: Box::new(backend),
            model: model.into(),
        });
        self
    }

    /// Also switch on request and authentication errors (400-class: `invalid_request`,
    /// `authentication`), e.g. when the backends are different providers and one may reject
    /// what another accepts. Off by default: a request one model rejects is usually wrong for
    /// every model, and trying them all only multiplies the failure.
    #[must_use]
    pub fn switch_on_client_errors(mut self, on: bool) -> Self {
        self.client_errors = on;
        self
    }

    /// The models in the order they are tried.
    pub fn models(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|entry| entry.model.as_str())
    }

    /// Whether `error`, before any output, sends the call to the next backend: retryable
    /// errors (connection, timeout, rate limit, overload, 5xx) and a used-up quota; request
    /// and authentication errors only with
    /// [`switch_on_client_errors`](Self::switch_on_client_errors). A protocol error or a
    /// missing capability never switches.
    pub fn switches_on(&self, error: &BackendError) -> bool {
        match error.kind {
            BackendErrorKind::QuotaExceeded => true,
            BackendErrorKind::InvalidRequest | BackendErrorKind::Authentication => {
                self.client_errors
            }
            _ => error.is_retryable(),
        }
    }
}

impl fmt::Debug for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fallback")
            .field("models", &self.models().collect::<Vec<_>>())
            .field("client_errors", &self.client_errors)
            .finish_non_exhaustive()
    }
}

/// The last error, its message extended with what every model answered.
fn exhausted(
    mut last: BackendError,
    failures: &[(String, String)],
    model: &str,
    models: usize,
) -> BackendError {
    use fmt::Write;
    let failed = failures.len() + 1;
    let mut message = if failed == models {
        format!("all {models} fallback models failed:")
    } else {
        format!("{failed} of {models} fallback models failed:")
    };
    for (model, error) in failures {
        let _ = write!(message, " {model}: {error};");
    }
    let _ = write!(message, " {model}: {}", last.message);
    last.message = message;
    last
}

impl Backend for Fallback {
    /// What every backend of the list supports, so the loop never asks for something a
    /// fallback cannot do.
    fn capabilities(&self) -> Capabilities {
        let mut all = self.entries[0].backend.capabilities();
        for entry in &self.entries[1..] {
            let next = entry.backend.capabilities();
            all.tools &= next.tools;
            all.streaming &= next.streaming;
            all.parallel_tool_calls &= next.parallel_tool_calls;
            all.thinking &= next.thinking;
            all.prompt_caching &= next.prompt_caching;
            all.usage_reporting &= next.usage_reporting;
            all.structured_output &= next.structured_output;
        }
        all
    }

    fn stream<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        Box::pin(async_stream::stream! {
            // (model, error message) of each backend that failed before any output.
            let mut failures: Vec<(String, String)> = Vec::new();
            let last = self.entries.len() - 1;
            for (at, entry) in self.entries.iter().enumerate() {
                // The request goes as it is to a backend of its model; another model gets a
                // copy naming it (only when switching, so the usual call copies nothing).
                let renamed;
                let sent = if entry.model == request.model {
                    request
                } else {
                    renamed = ModelRequest {
                        model: entry.model.clone(),
                        ..request.clone()
                    };
                    &renamed
                };
                let mut stream = entry.backend.stream(sent);
                // `message_start` and `usage` wait for the first output, so a failure before
                // it leaves the caller with nothing to take back.
                let mut held: Vec<StreamEvent> = Vec::new();
                let mut started = false;
                loop {
                    match stream.next().await {
                        Some(Ok(event)) if started => yield Ok(event),
                        Some(Ok(event @ (StreamEvent::MessageStart { .. } | StreamEvent::Usage(_)))) => {
                            held.push(event);
                        }
                        Some(Ok(event)) => {
                            started = true;
                            if at > 0 {
                                tracing::Span::current()
                                    .record("gen_ai.provider.name", entry.backend.provider_name());
                            }
                            let mut named = false;
                            for mut early in held.drain(..) {
                                if let StreamEvent::MessageStart { model, .. } = &mut early {
                                    model.get_or_insert_with(|| entry.model.clone());
                                    named = true;
                                }
                                yield Ok(early);
                            }
                            if !named {
                                // No start from the backend: name the answering model anyway,
                                // or the loop would take the request's model for it.
                                yield Ok(StreamEvent::MessageStart {
                                    id: None,
                                    model: Some(entry.model.clone()),
                                });
                            }
                            yield Ok(event);
                        }
                        Some(Err(error)) if !started && at < last && self.switches_on(&error) => {
                            tracing::warn!(
                                model = %entry.model,
                                next = %self.entries[at + 1].model,
                                error = %error,
                                "model call failed before any output; trying the next model"
                            );
                            failures.push((entry.model.clone(), error.message));
                            break;
                        }
                        Some(Err(error)) if !started && !failures.is_empty() => {
                            yield Err(exhausted(error, &failures, &entry.model, self.entries.len()));
                            return;
                        }
                        Some(Err(error)) => {
                            yield Err(error);
                            return;
                        }
                        None => {
                            // A stream that ends without output: whatever was held goes out
                            // (the loop reports the missing finish).
                            for early in held.drain(..) {
                                yield Ok(early);
                            }
                            return;
                        }
                    }
                }
            }
        })
    }

    fn count_input_tokens(&self, request: &ModelRequest) -> Option<u64> {
        self.entries[0].backend.count_input_tokens(request)
    }

    /// The first backend's provider: the one a call goes to first.
    fn provider_name(&self) -> &str {
        self.entries[0].backend.provider_name()
    }
}

#[cfg(all(test, feature = "scripted"))]
mod tests {
    use super::*;
    use crate::ScriptedBackend;

    #[test]
    fn capabilities_are_what_every_backend_supports() {
        let full = ScriptedBackend::new([]);
        let no_tools = ScriptedBackend::new([]).with_capabilities(Capabilities {
            tools: false,
            ..full.capabilities()
        });
        let both = Fallback::new(ScriptedBackend::new([]), "a").or(no_tools, "b");
        assert!(!both.capabilities().tools);
        assert!(both.capabilities().streaming);
        assert_eq!(both.models().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(both.provider_name(), "scripted");
    }

    #[test]
    fn only_errors_another_model_may_not_have_switch() {
        let fallback = Fallback::new(ScriptedBackend::new([]), "a");
        let switches = |kind| fallback.switches_on(&BackendError::new(kind, "x"));
        assert!(switches(BackendErrorKind::Overloaded));
        assert!(switches(BackendErrorKind::QuotaExceeded));
        assert!(switches(BackendErrorKind::Timeout));
        assert!(!switches(BackendErrorKind::InvalidRequest));
        assert!(!switches(BackendErrorKind::Authentication));
        assert!(!switches(BackendErrorKind::Protocol));
        assert!(!switches(BackendErrorKind::Unsupported));
        let fallback = fallback.switch_on_client_errors(true);
        assert!(fallback.switches_on(&BackendError::new(BackendErrorKind::Authentication, "x")));
        assert!(!fallback.switches_on(&BackendError::new(BackendErrorKind::Protocol, "x")));
    }
}
