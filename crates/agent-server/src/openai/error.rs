//! Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`, plus the
//! `status` every agentry error body carries.
//!
//! OpenAI's clients pick the exception class from the HTTP status alone (404 is
//! `NotFoundError`, 429 `RateLimitError`…) and read `message`, `type`, `param` and `code`
//! from the body, so the body is the server's usual error with two more fields. Failures a
//! retry cannot fix carry `x-should-retry: false`, which the official clients obey instead of
//! retrying every 429 and 5xx.
//!
//! A run budget that ran out is **402** `budget_exceeded` here, not the 429 of the native
//! session API (reference 001): the Vercel AI SDK retries every 408, 409, 429 and 5xx
//! whatever the headers say (its `APICallError.isRetryable`), as do litellm's and most
//! hand-written retry loops, and a retried request runs the whole agent loop, and spends,
//! again. No mainstream client retries a 402, and "payment required" says what happened: the
//! money this request may spend is gone.

use agent_types::{AgentError, ErrorKind, Usage};

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::error::ApiError;

/// An error response of the chat completions endpoint.
#[derive(Debug, Clone)]
pub(crate) struct OpenAiError {
    status: StatusCode,
    kind: &'static str,
    code: Option<&'static str>,
    param: Option<String>,
    message: String,
    retry_after: Option<u64>,
    retry: Option<bool>,
    /// For an error that ended a run: what the request spent (tokens, and dollars when
    /// priced), shown inside `error` as `usage` and `cost_usd`. Boxed: it is rare, and the
    /// error rides in every `Result` of the request's checks.
    spent: Option<Box<(Usage, Option<f64>)>>,
    /// For an answer that failed its output schema: the last answer as the model gave it and
    /// what is wrong with it, shown inside `error` as `raw` and `errors`.
    output: Option<Box<agent_types::InvalidOutput>>,
}

impl OpenAiError {
    /// 400 `invalid_request_error`, naming the request field at fault (`messages[2].content`).
    pub(crate) fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            param: Some(param.into()),
            ..Self::from(ApiError::bad_request(message))
        }
    }

    /// 404 `model_not_found`, as OpenAI answers for a model the key cannot use.
    pub(crate) fn model_not_found(model: &str, offered: &[&str]) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            kind: "invalid_request_error",
            code: Some("model_not_found"),
            param: Some("model".into()),
            message: format!(
                "The model `{model}` does not exist or you do not have access to it. \
                 This server offers: {}.",
                offered.join(", ")
            ),
            retry_after: None,
            retry: None,
            spent: None,
            output: None,
        }
    }

    /// 404 for a path no route serves, in OpenAI's words.
    pub(crate) fn unknown_route(method: &str, path: &str) -> Self {
        Self {
            code: Some("unknown_url"),
            ..Self::from(ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("Invalid URL ({method} {path}): no such endpoint on this server"),
            ))
        }
    }

    /// 405 for a path served under other methods.
    pub(crate) fn wrong_method(method: &str, path: &str) -> Self {
        Self {
            code: Some("method_not_allowed"),
            ..Self::from(ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "invalid_request_error",
                format!("{method} is not allowed on {path}"),
            ))
        }
    }

    /// The error that ended a run, for a client that is still there.
    pub(crate) fn from_run(error: &AgentError) -> Self {
        let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::BAD_GATEWAY);
        let (status, kind, code, retry) = match &error.kind {
            ErrorKind::Config | ErrorKind::Validation => {
                (status, "invalid_request_error", None, Some(false))
            }
            ErrorKind::BudgetExceeded { .. } => (
                StatusCode::PAYMENT_REQUIRED,
                "budget_exceeded_error",
                Some("budget_exceeded"),
                Some(false),
            ),
            // The client is still connected, so the server cancelled the run: it is draining.
            ErrorKind::Aborted => (
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable_error",
                None,
                None,
            ),
            ErrorKind::Refused => (status, "permission_error", None, Some(false)),
            // A structured answer that failed its schema, or a refusal: the same request would
            // fail again, so no retry.
            ErrorKind::InvalidOutput { .. } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request_error",
                Some("invalid_output"),
                Some(false),
            ),
            ErrorKind::OutputRefused { .. } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request_error",
                Some("output_refused"),
                Some(false),
            ),
            ErrorKind::Backend { .. } if status == StatusCode::TOO_MANY_REQUESTS => (
                status,
                "rate_limit_error",
                Some("upstream_rate_limited"),
                None,
            ),
            ErrorKind::Backend { .. } if status.is_client_error() => (
                status,
                "invalid_request_error",
                Some("upstream_error"),
                None,
            ),
            ErrorKind::Backend { .. } => (status, "server_error", Some("upstream_error"), None),
            _ => (status, "server_error", None, None),
        };
        Self {
            status,
            kind,
            code,
            param: None,
            message: crate::error::redact_logged(&error.message),
            retry_after: None,
            retry,
            spent: None,
            output: match &error.kind {
                ErrorKind::InvalidOutput { output } => Some(output.clone()),
                _ => None,
            },
        }
    }

    /// Names the request field at fault (`previous_response_id`) on an error made elsewhere.
    pub(crate) fn set_param(&mut self, param: &str) {
        self.param = Some(param.to_owned());
    }

    /// Adds what the request spent before this error ended its run. OpenAI's clients read
    /// only the fields they know from `error`, so the extra two reach those who look.
    #[must_use]
    pub(crate) fn with_spent(mut self, usage: Usage, cost_usd: Option<f64>) -> Self {
        self.spent = Some(Box::new((usage, cost_usd)));
        self
    }

    /// The body: `{"error": {...}}`.
    pub(crate) fn body(&self) -> Value {
        let mut body = json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
            "status": self.status.as_u16(),
        }});
        if let Some(output) = self.output.as_deref() {
            body["error"]["raw"] = json!(output.raw);
            body["error"]["errors"] = json!(output.errors);
        }
        if let Some((usage, cost_usd)) = self.spent.as_deref() {
            body["error"]["usage"] = super::response::usage_json(usage);
            // Left out when nothing could be priced, as in the session API's events.
            if let Some(cost) = cost_usd {
                body["error"]["cost_usd"] = json!(cost);
            }
        }
        body
    }
}

impl From<ApiError> for OpenAiError {
    fn from(error: ApiError) -> Self {
        let code = match error.status {
            StatusCode::UNAUTHORIZED => Some("invalid_api_key"),
            StatusCode::TOO_MANY_REQUESTS => Some("rate_limit_exceeded"),
            StatusCode::PAYLOAD_TOO_LARGE => Some("request_too_large"),
            _ => None,
        };
        Self {
            status: error.status,
            kind: error.kind,
            code,
            param: None,
            message: error.message,
            retry_after: error.retry_after,
            retry: None,
            spent: None,
            output: None,
        }
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let mut response = crate::error::json_error(self.status, &self.body(), self.retry_after);
        if let Some(retry) = self.retry {
            response.headers_mut().insert(
                "x-should-retry",
                HeaderValue::from_static(if retry { "true" } else { "false" }),
            );
        }
        response
    }
}
