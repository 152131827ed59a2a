//! The adapter for OpenAI Chat Completions (and OpenAI-compatible servers). (Stub: the wire format lands with the adapter work.)

use agent_types::{
    Backend, BackendError, BackendErrorKind, BackendStream, Capabilities, ModelRequest,
    StreamEvent,
};

use crate::http::driver::{self, Decoder, Frame, Prepared, Protocol};
use crate::http::status::{ProviderError, response_error};
use crate::http::{Connection, HttpOptions, http_builders};

/// The default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// A backend for OpenAI Chat Completions (and OpenAI-compatible servers).
#[derive(Debug, Clone)]
pub struct OpenAiChat {
    connection: Connection,
    capabilities: Capabilities,
}

impl OpenAiChat {
    /// A backend at [`DEFAULT_BASE_URL`].
    pub fn new(api_key: impl Into<String>) -> Self {
        Self {
            connection: Connection::new(DEFAULT_BASE_URL, Some(api_key.into())),
            capabilities: Capabilities {
                tools: true,
                streaming: true,
                parallel_tool_calls: true,
                thinking: true,
                prompt_caching: false,
                usage_reporting: true,
            },
        }
    }
}

http_builders!(OpenAiChat);

impl Backend for OpenAiChat {
    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn stream<'a>(&'a self, request: &'a ModelRequest) -> BackendStream<'a> {
        driver::stream(self, request)
    }
}

impl Protocol for OpenAiChat {
    type Decoder = WireDecoder;

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn http(&self) -> &HttpOptions {
        &self.connection.http
    }

    fn prepare(&self, _request: &ModelRequest) -> Result<Prepared, BackendError> {
        Err(BackendError::new(
            BackendErrorKind::Unsupported,
            "not implemented yet",
        ))
    }

    fn decoder(&self, _request: &ModelRequest) -> WireDecoder {
        WireDecoder
    }

    fn error(&self, status: u16, body: &[u8]) -> BackendError {
        response_error(status, body, |_| None::<ProviderError>)
    }
}

/// Decodes one response.
#[derive(Debug)]
pub(crate) struct WireDecoder;

impl Decoder for WireDecoder {
    fn frame(&mut self, _frame: Frame<'_>, _out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        Ok(())
    }

    fn body(&mut self, _body: &str, _out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        Ok(())
    }

    fn end(&mut self, _out: &mut Vec<StreamEvent>) -> Result<(), BackendError> {
        Ok(())
    }
}
