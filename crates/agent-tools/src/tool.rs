//! [`Tool`]: a spec plus an optional handler, and the constructors that build one.

use std::any::Any;
use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use agent_types::ToolSpec;
use futures_core::Stream;
use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::content::ToolContent;
use crate::context::{ContentSlot, ToolContext};
use crate::error::ToolError;
use crate::handler::{Handler, ToolEvent, ToolStream, done, guarded};
use crate::schema::schema_for;

/// A tool: the [`ToolSpec`] the model sees, plus the handler that runs it.
///
/// A tool without a handler is *remote*: the caller of the loop runs it, and the loop
/// suspends until the result comes back. Building a tool checks nothing; registering it in a
/// [`Registry`](crate::Registry) checks the name and compiles the schema.
#[derive(Clone)]
pub struct Tool {
    spec: ToolSpec,
    handler: Option<Arc<dyn Handler>>,
    required_permissions: BTreeSet<String>,
    output_schema: Option<Arc<Value>>,
    requires_approval: bool,
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("spec", &self.spec)
            .field("remote", &self.is_remote())
            .field("required_permissions", &self.required_permissions)
            .field("output_schema", &self.output_schema)
            .field("requires_approval", &self.requires_approval)
            .finish()
    }
}

fn to_json<T: Serialize + 'static>(
    result: Result<T, ToolError>,
    content_slot: &ContentSlot,
) -> Result<Value, ToolError> {
    result.and_then(|value| {
        // A result that already is JSON is handed over as it is: `to_value` would serialize it
        // again, copying every string in it (a file's content, a page of text).
        let mut slot = Some(value);
        if let Some(json) = (&mut slot as &mut dyn Any).downcast_mut::<Option<Value>>() {
            return Ok(json.take().unwrap_or_default());
        }
        // Content blocks go to the caller through the context; the JSON value still shows
        // them, for callers that only look at the stream.
        if let Some(content) = (&mut slot as &mut dyn Any).downcast_mut::<Option<ToolContent>>()
            && let Some(content) = content.take()
        {
            let json = serde_json::to_value(&content).unwrap_or_default();
            content_slot.set(content);
            return Ok(json);
        }
        serde_json::to_value(slot.take()).map_err(|e| {
            ToolError::respond_to_model(format!("the tool's result could not be serialized: {e}"))
        })
    })
}

fn parse_args<A: DeserializeOwned>(arguments: Value) -> Result<A, ToolError> {
    serde_json::from_value(arguments)
        .map_err(|e| ToolError::respond_to_model(format!("the arguments could not be read: {e}")))
}

/// Wraps an async function of raw JSON.
struct JsonFnHandler<F>(F);

impl<F, Fut> Handler for JsonFnHandler<F>
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    fn call(&self, arguments: Value, context: ToolContext) -> ToolStream {
        let future = (self.0)(arguments, context);
        Box::pin(futures_util::stream::once(async move {
            ToolEvent::Done(future.await)
        }))
    }
}

/// Wraps a function returning a stream of typed events.
struct StreamHandler<A, F> {
    f: F,
    args: PhantomData<fn() -> A>,
}

impl<A, T, F, S> Handler for StreamHandler<A, F>
where
    A: DeserializeOwned + 'static,
    T: Serialize + 'static,
    F: Fn(A, ToolContext) -> S + Send + Sync + 'static,
    S: Stream<Item = ToolEvent<T>> + Send + 'static,
{
    fn call(&self, arguments: Value, context: ToolContext) -> ToolStream {
        let args = match parse_args::<A>(arguments) {
            Ok(args) => args,
            Err(error) => return done(error),
        };
        let slot = context.content_slot();
        Box::pin((self.f)(args, context).map(move |event| match event {
            ToolEvent::Delta(text) => ToolEvent::Delta(text),
            ToolEvent::Done(result) => ToolEvent::Done(to_json(result, &slot)),
        }))
    }
}

impl Tool {
    /// A tool from a spec and an optional handler; `None` makes it remote.
    pub fn new(spec: ToolSpec, handler: Option<Arc<dyn Handler>>) -> Self {
        Self {
            spec,
            handler,
            required_permissions: BTreeSet::new(),
            output_schema: None,
            requires_approval: false,
        }
    }

    /// A tool from an async function of typed arguments.
    ///
    /// The parameters schema is derived from `A` with [`schema_for`](crate::schema_for); the
    /// arguments are deserialized into `A` (a failure goes back to the model) and the result
    /// `T` is serialized to JSON.
    pub fn from_fn<A, T, F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        handler: F,
    ) -> Self
    where
        A: DeserializeOwned + JsonSchema + 'static,
        T: Serialize + 'static,
        F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, ToolError>> + Send + 'static,
    {
        // An async fn is a stream of exactly one final result: one adapter serves both.
        Self::streaming(name, description, move |args: A, context| {
            futures_util::stream::once(handler(args, context)).map(ToolEvent::Done)
        })
    }

    /// A tool from a raw JSON Schema and an async function of raw JSON arguments.
    pub fn from_json_fn<F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
        handler: F,
    ) -> Self
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        Self::new(
            ToolSpec::new(name, description, parameters),
            Some(Arc::new(JsonFnHandler(handler))),
        )
    }

    /// A tool whose handler streams progress before its result: it returns a stream of
    /// [`ToolEvent<T>`], deltas first and one `Done` last.
    ///
    /// `async_stream::stream!` makes such a handler read like straight-line code:
    ///
    /// ```
    /// use agent_tools::{Tool, ToolEvent};
    /// # #[derive(serde::Deserialize, schemars::JsonSchema)] struct Args { n: u32 }
    /// let count = Tool::streaming("count", "Counts to n.", |args: Args, _ctx| {
    ///     async_stream::stream! {
    ///         for i in 1..=args.n {
    ///             yield ToolEvent::delta(format!("{i}…"));
    ///         }
    ///         yield ToolEvent::ok(args.n);
    ///     }
    /// });
    /// assert!(!count.is_remote());
    /// ```
    pub fn streaming<A, T, F, S>(
        name: impl Into<String>,
        description: impl Into<String>,
        handler: F,
    ) -> Self
    where
        A: DeserializeOwned + JsonSchema + 'static,
        T: Serialize + 'static,
        F: Fn(A, ToolContext) -> S + Send + Sync + 'static,
        S: Stream<Item = ToolEvent<T>> + Send + 'static,
    {
        let handler = StreamHandler {
            f: handler,
            args: PhantomData,
        };
        Self::new(
            ToolSpec::new(name, description, schema_for::<A>()),
            Some(Arc::new(handler)),
        )
    }

    /// A remote tool: only a spec, run by the loop's caller.
    pub fn remote(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> Self {
        Self::new(ToolSpec::new(name, description, parameters), None)
    }

    /// Declares the tool strict: OpenAI Chat and Responses then constrain the model's
    /// arguments to the schema (strict function calling, sent with the schema in strict form,
    /// see [`agent_types::strict_schema`]); other providers ignore it. Strict mode makes the
    /// model send an absent optional property as `null`; the registry drops those nulls before
    /// validating, so the handler sees the arguments the schema describes.
    #[must_use]
    pub fn strict(mut self) -> Self {
        self.spec.strict = true;
        self
    }

    /// Requires `permission` of the caller: [`Registry::permitted_for`](crate::Registry::permitted_for)
    /// hides the tool from callers without it.
    #[must_use]
    pub fn requires_permission(mut self, permission: impl Into<String>) -> Self {
        self.required_permissions.insert(permission.into());
        self
    }

    /// Makes every call of the tool wait for a person's approval: the loop suspends with
    /// status `awaiting_approval` before running it (see `docs/approval.md`). An approval
    /// policy in the loop's options can still decide otherwise per call.
    #[must_use]
    pub fn with_approval(mut self) -> Self {
        self.requires_approval = true;
        self
    }

    /// `true` when calls of the tool wait for approval by default ([`with_approval`](Self::with_approval),
    /// [`Registry::require_approval`](crate::Registry::require_approval)).
    pub fn requires_approval(&self) -> bool {
        self.requires_approval
    }

    /// Declares the JSON Schema of the tool's result (MCP's `outputSchema`): an MCP server
    /// lists it, and sends a result that is a JSON object as `structuredContent`. Not checked
    /// here; providers never see it.
    #[must_use]
    pub fn with_output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(Arc::new(schema));
        self
    }

    /// The declared schema of the tool's result, if any.
    pub fn output_schema(&self) -> Option<&Arc<Value>> {
        self.output_schema.as_ref()
    }

    /// The spec the model sees.
    pub fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The handler, unless the tool is remote.
    pub fn handler(&self) -> Option<&Arc<dyn Handler>> {
        self.handler.as_ref()
    }

    /// `true` when the tool has no handler.
    pub fn is_remote(&self) -> bool {
        self.handler.is_none()
    }

    /// The permissions a caller needs to see the tool.
    pub fn required_permissions(&self) -> &BTreeSet<String> {
        &self.required_permissions
    }

    /// Runs the handler with `arguments` (validate them first).
    ///
    /// The stream yields the handler's deltas and then exactly one [`ToolEvent::Done`]. It
    /// never panics into the caller: a panicking handler ends with a
    /// [`Panicked`](crate::ToolErrorKind::Panicked) error. Cancelling the context's token drops
    /// the handler and ends with [`ToolError::cancelled`]. A remote tool ends at once with a
    /// fatal error, since there is nothing to run here.
    pub fn invoke(&self, arguments: Value, context: ToolContext) -> ToolStream {
        match &self.handler {
            Some(handler) => guarded(handler.as_ref(), arguments, context),
            None => done(ToolError::fatal(format!(
                "`{}` is a remote tool: its caller runs it, it has no local handler",
                self.spec.name
            ))),
        }
    }
}
