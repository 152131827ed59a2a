//! OpenAI Responses' hosted tool search: tools whose spec has
//! [`defer_loading`](agent_types::ToolSpec::defer_loading) are sent with
//! `"defer_loading": true` and `{"type": "tool_search"}` joins the tools (`request.rs`); the
//! model sees a deferred tool's name and description, and its schema loads when it searches.
//! The `tool_search_call` and `tool_search_output` items of the response are skipped by the
//! decoder. For the models that have it (gpt-5.4 and later).

use super::OpenAiResponses;

impl OpenAiResponses {
    /// With the hosted tool search: declares the
    /// [`tool_search`](agent_types::Capabilities::tool_search) capability, so a loop with tool
    /// search on defers its catalog instead of offering `search_tools`.
    #[must_use]
    pub fn with_tool_search(mut self) -> Self {
        self.capabilities.tool_search = true;
        self
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use agent_types::{Message, ModelRequest, ToolSpec};
    use serde_json::{Value, json};

    use super::*;
    use crate::http::driver::Protocol;

    #[test]
    fn request_tool_search_defers_and_adds_the_hosted_tool() {
        let backend = OpenAiResponses::new("sk-test").with_tool_search();
        assert!(backend.capabilities().tool_search);
        let mut forecast = ToolSpec::new(
            "get_forecast",
            "Daily forecast for a city.",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        );
        forecast.defer_loading = true;
        let clock = ToolSpec::new("clock", "The current time.", json!({"type": "object"}));
        let request = ModelRequest {
            tools: vec![forecast, clock.clone()],
            ..ModelRequest::new("gpt-5.4", vec![Message::user("Forecast for Lyon?")])
        };
        let sent: Value = serde_json::from_slice(&backend.prepare(&request).unwrap().body).unwrap();
        let tools = sent["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 3);
        assert_eq!(tools[0]["defer_loading"], true);
        assert!(tools[1].get("defer_loading").is_none());
        assert_eq!(tools[2], json!({"type": "tool_search"}));
        insta::with_settings!({snapshot_path => "../snapshots"}, {
            insta::assert_json_snapshot!("request_tool_search", sent);
        });

        // Nothing deferred: no hosted search, the tools as before.
        let plain = ModelRequest {
            tools: vec![clock],
            ..ModelRequest::new("gpt-5.4", vec![Message::user("Time?")])
        };
        let sent: Value = serde_json::from_slice(&backend.prepare(&plain).unwrap().body).unwrap();
        assert_eq!(sent["tools"].as_array().unwrap().len(), 1);
    }
}
