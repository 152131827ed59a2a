//! [`RecordedConversation`]: a multi-round recorded exchange as a backend that many sessions
//! can use at once, and [`demo`], the recorded demo conversation.

use std::time::Duration;

use agent_types::{
    Backend, BackendError, BackendStream, Capabilities, Message, ModelRequest, StreamEvent,
};
use bytes::Bytes;
use futures_util::StreamExt;

use crate::Provider;
use crate::http::HttpOptions;

/// A recorded conversation of several model turns, answered by position.
///
/// Each request is answered with the recorded turn whose index is the number of assistant
/// messages after the request's last user message: the first call of a user turn gets round
/// 1, the call after the first tool round gets round 2, and so on (the last round repeats if
/// the loop goes further). So any number of sessions can run the same script concurrently,
/// each at its own point, with no shared cursor.
///
/// The recorded bytes go through the real adapter's framing and decoder on every call (see
/// [`decode`](super::decode)); only the HTTP transport is left out, which is what a load test
/// of the layers above wants. A per-event delay can hold streams open for as long as a real
/// provider would.
#[derive(Debug, Clone)]
pub struct RecordedConversation {
    provider: Provider,
    rounds: Vec<Bytes>,
    capabilities: Capabilities,
    event_delay: Option<Duration>,
}

impl RecordedConversation {
    /// The rounds, in order, each a complete recorded response body of `provider`.
    ///
    /// # Errors
    ///
    /// [`Error::NotCompiled`](crate::Error::NotCompiled) when the provider's adapter is not in
    /// this build; [`Error::Replay`](crate::Error::Replay) when there are no rounds.
    pub fn new(
        provider: Provider,
        rounds: impl IntoIterator<Item = impl Into<Bytes>>,
    ) -> Result<Self, crate::Error> {
        let rounds: Vec<Bytes> = rounds.into_iter().map(Into::into).collect();
        if rounds.is_empty() {
            return Err(crate::Error::Replay(
                "a recorded conversation needs at least one round".into(),
            ));
        }
        // The adapter is built once, only to learn what it supports.
        let capabilities = provider
            .backend("http://127.0.0.1:9", None, HttpOptions::default())?
            .capabilities();
        Ok(Self {
            provider,
            rounds,
            capabilities,
            event_delay: None,
        })
    }

    /// Waits this long before each event after the first.
    #[must_use]
    pub fn with_event_delay(mut self, delay: Duration) -> Self {
        self.event_delay = Some(delay);
        self
    }

    /// The provider whose wire format the rounds are in.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// Which round answers `request`.
    fn round(&self, request: &ModelRequest) -> usize {
        let since_user = request
            .messages
            .iter()
            .rev()
            .take_while(|message| !matches!(message, Message::User(_)))
            .filter(|message| matches!(message, Message::Assistant(_)))
            .count();
        since_user.min(self.rounds.len() - 1)
    }
}

impl Backend for RecordedConversation {
    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn stream<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        let body = &self.rounds[self.round(request)];
        // Binary framing cannot be told from the first bytes the way text framings are.
        let sniffed = super::Cassette::sniff(body);
        let content_type = (sniffed == "application/vnd.amazon.eventstream").then_some(sniffed);
        let events: Vec<Result<StreamEvent, BackendError>> =
            match self.provider.decode(request, content_type, body, 0) {
                Ok(events) => events.into_iter().map(Ok).collect(),
                Err(error) => vec![Err(error)],
            };
        let stream = futures_util::stream::iter(events);
        match self.event_delay {
            None => stream.boxed(),
            Some(delay) => stream
                .enumerate()
                .then(move |(index, event)| async move {
                    if index > 0 {
                        tokio::time::sleep(delay).await;
                    }
                    event
                })
                .boxed(),
        }
    }
}

/// The recorded demo conversation (`fixtures/demo/`) for `provider`: the model it was
/// recorded for and its three rounds. Round 1 asks for `get_weather` in Lisbon and Oslo and
/// `clock` at once, round 2 for `calculator` with `19 - 4`, round 3 answers.
pub fn demo(provider: Provider) -> (&'static str, [&'static [u8]; 3]) {
    macro_rules! rounds {
        ($dir:literal, $ext:literal) => {
            [
                include_bytes!(concat!(
                    "../../../../fixtures/demo/",
                    $dir,
                    "/round-1.",
                    $ext
                )),
                include_bytes!(concat!(
                    "../../../../fixtures/demo/",
                    $dir,
                    "/round-2.",
                    $ext
                )),
                include_bytes!(concat!(
                    "../../../../fixtures/demo/",
                    $dir,
                    "/round-3.",
                    $ext
                )),
            ]
        };
    }
    match provider {
        Provider::OpenAiChat => ("gpt-4.1-mini", rounds!("openai-chat", "sse")),
        Provider::OpenAiResponses => ("gpt-4.1-mini", rounds!("openai-responses", "sse")),
        Provider::Anthropic => ("claude-sonnet-4-5", rounds!("anthropic", "sse")),
        Provider::Gemini => ("gemini-2.5-flash", rounds!("gemini", "sse")),
        Provider::Ollama => ("qwen3:8b", rounds!("ollama", "ndjson")),
        Provider::Bedrock => (
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            rounds!("bedrock", "eventstream"),
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use agent_types::{AssistantMessage, ToolResult};

    fn text_of(events: &[StreamEvent]) -> String {
        events
            .iter()
            .filter_map(|event| match event {
                StreamEvent::TextDelta { delta, .. } => Some(delta.as_str()),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn each_request_gets_the_round_its_history_has_reached() {
        for provider in Provider::ALL {
            let (model, rounds) = demo(provider);
            let backend = RecordedConversation::new(provider, rounds).unwrap();
            let mut request = ModelRequest::new(model, vec![Message::user("weather?")]);
            let first: Vec<StreamEvent> =
                backend.stream(&request).map(Result::unwrap).collect().await;
            let calls = first
                .iter()
                .filter(|event| matches!(event, StreamEvent::ToolCallStart { .. }))
                .count();
            assert_eq!(calls, 3, "{provider}");

            request
                .messages
                .push(AssistantMessage::text("calling").into());
            request
                .messages
                .push(ToolResult::ok("c", "get_weather", "{}").into());
            request
                .messages
                .push(AssistantMessage::text("again").into());
            let third: Vec<StreamEvent> =
                backend.stream(&request).map(Result::unwrap).collect().await;
            assert!(text_of(&third).starts_with("Lisbon is sunny"), "{provider}");

            // A new user turn starts the script again.
            request.messages.push(Message::user("and now?"));
            let again: Vec<StreamEvent> =
                backend.stream(&request).map(Result::unwrap).collect().await;
            assert_eq!(again, first, "{provider}");
        }
    }

    #[test]
    fn an_empty_script_is_refused() {
        let rounds: Vec<Bytes> = Vec::new();
        assert!(RecordedConversation::new(Provider::Anthropic, rounds).is_err());
    }
}
