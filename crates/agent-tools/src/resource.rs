//! Resources as tools: an application's collection of records becomes the tools
//! `get_<resource>`, `search_<resource>`, `create_<resource>`, `update_<resource>` and
//! `delete_<resource>`, for exactly the verbs it implements.
//!
//! A collection implements [`Resource`] (its name, its record and id types) and then one
//! capability trait per verb it supports: [`Get`], [`Search`], [`Create`], [`Update`],
//! [`Delete`]. [`ResourceTools`] turns it into tools: each verb is added with a method that
//! only compiles when the verb's trait is implemented ([`get`](ResourceTools::get),
//! [`search`](ResourceTools::search)…, or [`crud`](ResourceTools::crud) for all five), custom
//! methods opt in with [`method`](ResourceTools::method), and
//! [`register`](ResourceTools::register) adds them all to a [`Registry`] in one call (all or
//! none).
//!
//! # What each tool takes and returns
//!
//! | tool | arguments | result |
//! |---|---|---|
//! | `get_<r>` | `{"id"}` | the record |
//! | `search_<r>` | the [`Search::Query`] fields and `"limit"` (1 to the maximum) | `{"records": [...], "more": bool}` |
//! | `create_<r>` | the [`Create::New`] fields (the record without its id) | the created record |
//! | `update_<r>` | `{"id"}` and the [`Update::Patch`] fields (those to change) | the updated record |
//! | `delete_<r>` | `{"id"}` | `{"deleted": id}` |
//!
//! Argument schemas come from the types with [`schema_for`]; result schemas
//! (serialized form) are declared with [`Tool::with_output_schema`], for an MCP server's
//! `outputSchema`. A query or patch type must be a struct (an object schema) and may not have a
//! field named `limit` (search) or `id` (update): registering says so.
//!
//! # Permissions
//!
//! By default `get` and `search` require `<resource>:read` and `create`, `update` and `delete`
//! require `<resource>:write` ([`Registry::permitted_for`] hides the tools a caller may not
//! use); [`read_permission`](ResourceTools::read_permission),
//! [`write_permission`](ResourceTools::write_permission),
//! [`verb_permission`](ResourceTools::verb_permission) and
//! [`without_permissions`](ResourceTools::without_permissions) change that. Handlers also see
//! the [`Caller`](crate::Caller) in the context, for per-record rules.
//!
//! # Each call is its own unit of work
//!
//! Every tool call is one call of one trait method, and an implementation commits (or rolls
//! back) its own work before returning. **Calls never share a transaction**: when a model asks
//! for `create_order` and `update_inventory` in one round, the loop may run them in parallel
//! and each commits on its own, so if the second fails the first stays committed. This is what
//! makes a resource behave the same whether an agent or any other caller uses it. An
//! application that needs several steps to be atomic exposes them as one
//! [custom method](ResourceTools::method), which runs them in one transaction.
//!
//! A cancelled call is dropped at its next await point; an implementation that does its work
//! in one blocking step (one SQLite transaction on the blocking pool, say) either finishes it or
//! never starts it.
//!
//! # Errors
//!
//! A method fails with a [`ResourceError`]: [`not_found`](ResourceError::not_found),
//! [`invalid`](ResourceError::invalid) and [`conflict`](ResourceError::conflict) go back to the
//! model as error results it can act on ([`ToolError::respond_to_model`]);
//! [`internal`](ResourceError::internal) (the store is gone, a broken invariant) is
//! [fatal](ToolError::fatal): the loop stops, whatever its error mode, and the caller sees
//! the message, the model never does.
//!
//! # Bounds
//!
//! What a model can make a resource do is bounded before the method runs: `limit` is at most
//! [`max_search_limit`](ResourceTools::search_limits) (default 100; the default limit is 20),
//! and a call's arguments, as compact JSON, are at most
//! [`max_argument_bytes`](ResourceTools::max_argument_bytes) (default 16 KiB), which bounds
//! records, patches, queries and ids alike. Both are checked in the handler too, so they hold
//! under every validation mode. An id's format is its type's: a type that deserializes only
//! valid ids (`i64`, a newtype with a checked `TryFrom<String>`) refuses the rest.
//!
//! # Example
//!
//! ```
//! use std::collections::BTreeMap;
//! use std::sync::Mutex;
//!
//! use agent_tools::resource::{Create, Get, Resource, ResourceError, ResourceTools};
//! use agent_tools::{Caller, Registry, ToolContext, collect_output};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use serde_json::json;
//!
//! #[derive(Clone, Serialize, JsonSchema)]
//! struct Note { id: u64, text: String }
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct NewNote {
//!     /// What the note says.
//!     text: String,
//! }
//!
//! #[derive(Default)]
//! struct Notes(Mutex<BTreeMap<u64, Note>>);
//!
//! impl Resource for Notes {
//!     type Record = Note;
//!     type Id = u64;
//!     fn name(&self) -> &str { "note" }
//! }
//!
//! impl Get for Notes {
//!     async fn get(&self, id: u64, _: &ToolContext) -> Result<Note, ResourceError> {
//!         let notes = self.0.lock().map_err(|_| ResourceError::internal("poisoned"))?;
//!         notes.get(&id).cloned().ok_or_else(|| ResourceError::not_found(format!("no note {id}")))
//!     }
//! }
//!
//! impl Create for Notes {
//!     type New = NewNote;
//!     async fn create(&self, new: NewNote, _: &ToolContext) -> Result<Note, ResourceError> {
//!         let mut notes = self.0.lock().map_err(|_| ResourceError::internal("poisoned"))?;
//!         let id = notes.len() as u64 + 1;
//!         let note = Note { id, text: new.text };
//!         notes.insert(id, note.clone());
//!         Ok(note)
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut tools = Registry::new();
//! let names = ResourceTools::new(Notes::default()).get().create().register(&mut tools)?;
//! assert_eq!(names, ["create_note", "get_note"]);
//!
//! // A caller with only `note:read` is not offered `create_note`.
//! let reader = Caller::new("ann").with_permission("note:read");
//! assert_eq!(tools.permitted_for(&reader).names().collect::<Vec<_>>(), ["get_note"]);
//!
//! let create = tools.get("create_note").ok_or("missing")?;
//! let made = collect_output(create.invoke(json!({"text": "hi"}), ToolContext::new("c1", "create_note"))).await;
//! assert_eq!(made.result?, json!({"id": 1, "text": "hi"}));
//!
//! let get = tools.get("get_note").ok_or("missing")?;
//! let missing = collect_output(get.invoke(json!({"id": 9}), ToolContext::new("c2", "get_note"))).await;
//! assert_eq!(missing.result.unwrap_err().message(), "not found: no note 9");
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::io;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::context::ToolContext;
use crate::error::{Error, ToolError};
use crate::name::tool_name;
use crate::registry::Registry;
use crate::schema::{output_schema_for, schema_for};
use crate::tool::Tool;

/// The default `limit` of a search when the model gives none.
pub const DEFAULT_SEARCH_LIMIT: u32 = 20;

/// The default most records one search returns.
pub const DEFAULT_MAX_SEARCH_LIMIT: u32 = 100;

/// The default most bytes of one call's arguments (compact JSON): 16 KiB.
pub const DEFAULT_MAX_ARGUMENT_BYTES: usize = 16 * 1024;

/// A collection of records an application exposes as tools.
///
/// This trait names the collection and its types; what can be done with it is one capability
/// trait per verb ([`Get`], [`Search`], [`Create`], [`Update`], [`Delete`]), so which tools
/// exist is known when the program compiles. Every method is one unit of work (see the
/// [module docs](self#each-call-is-its-own-unit-of-work)).
pub trait Resource: Send + Sync + 'static {
    /// A record as the model reads it, with its id.
    type Record: Serialize + JsonSchema + Send + 'static;
    /// A record's id. Its deserialization is the id format: a value that does not
    /// deserialize is refused before any method runs.
    type Id: Serialize + DeserializeOwned + JsonSchema + Send + 'static;

    /// The resource's name, as it appears in tool names (`get_<name>`) and default
    /// permissions (`<name>:read`): usually singular and lowercase, like `product`.
    fn name(&self) -> &str;

    /// One sentence on what a record is, added to every generated tool's description
    /// (empty by default).
    fn description(&self) -> &str {
        ""
    }
}

/// Reads one record by id: the `get_<resource>` tool.
pub trait Get: Resource {
    /// The record with `id`, or [`ResourceError::not_found`].
    fn get(
        &self,
        id: Self::Id,
        context: &ToolContext,
    ) -> impl Future<Output = Result<Self::Record, ResourceError>> + Send;
}

/// Finds records: the `search_<resource>` tool.
pub trait Search: Resource {
    /// The filter the model fills in (a struct; typically every field optional). It may not
    /// have a field named `limit`.
    type Query: DeserializeOwned + JsonSchema + Send + 'static;

    /// At most `limit` records matching `query`, in a stable order. The tool asks for one
    /// more than the model's limit, to tell the model whether more matched.
    fn search(
        &self,
        query: Self::Query,
        limit: usize,
        context: &ToolContext,
    ) -> impl Future<Output = Result<Vec<Self::Record>, ResourceError>> + Send;
}

/// Adds a record: the `create_<resource>` tool.
pub trait Create: Resource {
    /// A new record: the record without its id (the resource assigns it).
    type New: DeserializeOwned + JsonSchema + Send + 'static;

    /// Stores `record` and returns it as stored, with its id. A duplicate of a unique key is
    /// [`ResourceError::conflict`].
    fn create(
        &self,
        record: Self::New,
        context: &ToolContext,
    ) -> impl Future<Output = Result<Self::Record, ResourceError>> + Send;
}

/// Changes some fields of a record: the `update_<resource>` tool.
pub trait Update: Resource {
    /// The fields to change (a struct of optional fields: absent means unchanged). It may not
    /// have a field named `id`.
    type Patch: DeserializeOwned + JsonSchema + Send + 'static;

    /// Applies `patch` to the record with `id` and returns it as stored.
    fn update(
        &self,
        id: Self::Id,
        patch: Self::Patch,
        context: &ToolContext,
    ) -> impl Future<Output = Result<Self::Record, ResourceError>> + Send;
}

/// Removes a record: the `delete_<resource>` tool.
pub trait Delete: Resource {
    /// Deletes the record with `id`, or [`ResourceError::not_found`].
    fn delete(
        &self,
        id: Self::Id,
        context: &ToolContext,
    ) -> impl Future<Output = Result<(), ResourceError>> + Send;
}

/// How one resource call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResourceError {
    /// No record has the id (or matches what was asked): the model sees it.
    #[error("not found: {0}")]
    NotFound(String),
    /// The request breaks a rule of the resource (a negative price, an empty name): the model
    /// sees it.
    #[error("invalid: {0}")]
    Invalid(String),
    /// The request collides with the stored state (a taken unique key, a busy store): the
    /// model sees it.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The resource itself failed (the store is unreachable, a broken invariant): the loop
    /// stops.
    #[error("{0}")]
    Internal(String),
}

impl ResourceError {
    /// No such record; `message` is for the model ("no product 42").
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::NotFound(message.into())
    }

    /// The request breaks a rule; `message` says which, for the model.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid(message.into())
    }

    /// The request collides with stored state; `message` says with what, for the model.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::Conflict(message.into())
    }

    /// The resource failed; `message` is for the operator, never the model.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::Internal(message.into())
    }
}

impl From<ResourceError> for ToolError {
    fn from(error: ResourceError) -> Self {
        match error {
            ResourceError::Internal(message) => ToolError::fatal(message),
            other => ToolError::respond_to_model(other.to_string()),
        }
    }
}

/// The five generated verbs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// `get_<resource>`.
    Get,
    /// `search_<resource>`.
    Search,
    /// `create_<resource>`.
    Create,
    /// `update_<resource>`.
    Update,
    /// `delete_<resource>`.
    Delete,
}

impl Verb {
    /// Every verb.
    pub const ALL: [Verb; 5] = [
        Verb::Get,
        Verb::Search,
        Verb::Create,
        Verb::Update,
        Verb::Delete,
    ];

    /// The verb as it starts a tool name.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Search => "search",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Delete => "delete",
        }
    }

    /// Whether the verb changes records (and so needs the write permission by default).
    pub fn writes(self) -> bool {
        matches!(self, Verb::Create | Verb::Update | Verb::Delete)
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which default permission a [custom method](ResourceTools::method) requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The read permission (`<resource>:read` by default).
    Read,
    /// The write permission (`<resource>:write` by default).
    Write,
}

/// The bounds and permissions every generated tool is built with.
#[derive(Debug, Clone)]
struct Settings {
    resource: String,
    about: String,
    read: Option<String>,
    write: Option<String>,
    /// Per-verb overrides: `Some(None)` means no permission for that verb.
    verbs: [Option<Option<String>>; 5],
    default_limit: u32,
    max_limit: u32,
    max_argument_bytes: usize,
}

impl Settings {
    fn permission(&self, verb: Verb) -> Option<&str> {
        match &self.verbs[verb.index()] {
            Some(chosen) => chosen.as_deref(),
            None if verb.writes() => self.write.as_deref(),
            None => self.read.as_deref(),
        }
    }

    fn describe(&self, text: String) -> String {
        if self.about.is_empty() {
            text
        } else {
            format!("{text} {}", self.about)
        }
    }

    /// Refuses arguments past the byte bound, counting compact JSON and stopping early.
    fn check_size(&self, arguments: &Value) -> Result<(), ToolError> {
        let mut counter = Counter {
            bytes: 0,
            limit: self.max_argument_bytes,
        };
        if serde_json::to_writer(&mut counter, arguments).is_err() {
            return Err(ToolError::respond_to_model(format!(
                "invalid: the arguments are larger than {} bytes; send less (a shorter record, \
                 query or id)",
                self.max_argument_bytes
            )));
        }
        Ok(())
    }
}

/// Counts bytes written and fails once past `limit`, so an oversized value is not walked to
/// its end.
struct Counter {
    bytes: usize,
    limit: usize,
}

impl io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.bytes = self.bytes.saturating_add(buf.len());
        if self.bytes > self.limit {
            return Err(io::Error::other("too large"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

type Build<R> = Box<dyn FnOnce(&Arc<R>, &Settings) -> Result<Tool, Error> + Send>;

/// Builds the tools of one [`Resource`]: pick the verbs, adjust permissions and bounds, then
/// [`register`](Self::register). See the [module docs](self).
pub struct ResourceTools<R: Resource> {
    resource: Arc<R>,
    settings: Settings,
    builds: Vec<Build<R>>,
    added: [bool; 5],
}

impl<R: Resource> fmt::Debug for ResourceTools<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceTools")
            .field("settings", &self.settings)
            .field("tools", &self.builds.len())
            .finish()
    }
}

/// The arguments of `get` and `delete`.
#[derive(Deserialize, JsonSchema)]
struct IdArgs<I> {
    /// The record's id.
    id: I,
}

/// What `search` returns.
#[derive(Serialize, JsonSchema)]
struct SearchPage<T> {
    /// The matching records, at most `limit`.
    records: Vec<T>,
    /// Whether more records matched than were returned (ask again with a narrower query).
    more: bool,
}

/// What `delete` returns.
#[derive(Serialize, JsonSchema)]
struct Deleted<I> {
    /// The id of the deleted record.
    deleted: I,
}

fn read_args<A: DeserializeOwned>(arguments: Value) -> Result<A, ToolError> {
    serde_json::from_value(arguments).map_err(|error| {
        ToolError::respond_to_model(format!("invalid: the arguments could not be read: {error}"))
    })
}

fn to_json<T: Serialize>(value: &T) -> Result<Value, ToolError> {
    // Our own record type failing to serialize is a bug, not something the model can fix.
    serde_json::to_value(value)
        .map_err(|error| ToolError::fatal(format!("a record could not be serialized: {error}")))
}

/// Takes `key` out of an argument object (the rest is the query or the patch).
fn split_off(arguments: Value, key: &str) -> Result<(Option<Value>, Value), ToolError> {
    match arguments {
        Value::Object(mut map) => {
            let taken = map.remove(key);
            Ok((taken, Value::Object(map)))
        }
        other => Err(ToolError::respond_to_model(format!(
            "invalid: the arguments must be an object, got {other}"
        ))),
    }
}

/// `schema` (an object schema) with `property` added: the shape of search and update
/// arguments. Refuses a schema that is not an object or already has the property.
fn with_property(
    tool: &str,
    schema: Value,
    property: &str,
    property_schema: Value,
    required: bool,
) -> Result<Value, Error> {
    let invalid = |reason: String| Error::InvalidSchema {
        tool: tool.to_owned(),
        reason,
    };
    let Value::Object(mut root) = schema else {
        return Err(invalid("the type's schema is not an object".to_owned()));
    };
    if root.get("type").and_then(Value::as_str) != Some("object") {
        return Err(invalid(
            "the type must be a struct (its schema must be `\"type\": \"object\"`)".to_owned(),
        ));
    }
    let properties = root
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(properties) = properties else {
        return Err(invalid("`properties` is not an object".to_owned()));
    };
    if properties.contains_key(property) {
        return Err(invalid(format!(
            "the type has a field named `{property}`, which the tool adds itself; rename it"
        )));
    }
    properties.insert(property.to_owned(), property_schema);
    if required {
        let list = root
            .entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = list {
            list.insert(0, Value::String(property.to_owned()));
        }
    }
    Ok(Value::Object(root))
}

/// The schema of `I` as a property (the `id` of update), from `IdArgs<I>`.
fn id_property<I: JsonSchema>() -> Value {
    let mut schema = schema_for::<IdArgs<I>>();
    schema
        .get_mut("properties")
        .and_then(|properties| properties.get_mut("id"))
        .map(Value::take)
        .unwrap_or_else(|| json!({}))
}

impl<R: Resource> ResourceTools<R> {
    /// Starts the tools of `resource`, with no verb yet, the default permissions
    /// (`<name>:read`, `<name>:write`) and the default bounds.
    pub fn new(resource: R) -> Self {
        Self::shared(Arc::new(resource))
    }

    /// [`new`](Self::new) with a resource the application keeps a handle to.
    pub fn shared(resource: Arc<R>) -> Self {
        let name = resource.name().to_owned();
        let settings = Settings {
            read: Some(format!("{name}:read")),
            write: Some(format!("{name}:write")),
            about: resource.description().to_owned(),
            resource: name,
            verbs: [None, None, None, None, None],
            default_limit: DEFAULT_SEARCH_LIMIT,
            max_limit: DEFAULT_MAX_SEARCH_LIMIT,
            max_argument_bytes: DEFAULT_MAX_ARGUMENT_BYTES,
        };
        Self {
            resource,
            settings,
            builds: Vec::new(),
            added: [false; 5],
        }
    }

    /// The permission `get`, `search` and read [methods](Self::method) require.
    #[must_use]
    pub fn read_permission(mut self, permission: impl Into<String>) -> Self {
        self.settings.read = Some(permission.into());
        self
    }

    /// The permission `create`, `update`, `delete` and write [methods](Self::method) require.
    #[must_use]
    pub fn write_permission(mut self, permission: impl Into<String>) -> Self {
        self.settings.write = Some(permission.into());
        self
    }

    /// The permission one verb requires (`None`: none), in place of the read or write one.
    #[must_use]
    pub fn verb_permission(mut self, verb: Verb, permission: Option<&str>) -> Self {
        self.settings.verbs[verb.index()] = Some(permission.map(str::to_owned));
        self
    }

    /// No tool requires a permission: every caller sees them all. For single-user programs;
    /// a server with several callers should keep the permissions.
    #[must_use]
    pub fn without_permissions(mut self) -> Self {
        self.settings.read = None;
        self.settings.write = None;
        self.settings.verbs = [None, None, None, None, None];
        self
    }

    /// The `limit` a search uses when the model gives none, and the most it may ask for
    /// (both at least 1; the default is at most the maximum).
    #[must_use]
    pub fn search_limits(mut self, default_limit: u32, max_limit: u32) -> Self {
        self.settings.max_limit = max_limit.max(1);
        self.settings.default_limit = default_limit.clamp(1, self.settings.max_limit);
        self
    }

    /// The most bytes one call's arguments may have as compact JSON (at least 64).
    #[must_use]
    pub fn max_argument_bytes(mut self, max_bytes: usize) -> Self {
        self.settings.max_argument_bytes = max_bytes.max(64);
        self
    }

    /// Adds every verb: `get`, `search`, `create`, `update` and `delete`.
    #[must_use]
    pub fn crud(self) -> Self
    where
        R: Get + Search + Create + Update + Delete,
    {
        self.get().search().create().update().delete()
    }

    /// Adds a custom method as the tool `<verb>_<resource>` (say `restock_product`), requiring
    /// the read or write permission. `handler` gets the resource, the typed arguments and the
    /// context; its result is serialized as the tool's result, its [`ResourceError`]s are
    /// treated as the verbs' are, and the arguments are bounded like theirs. A method is one
    /// unit of work: the way to make several steps atomic.
    #[must_use]
    pub fn method<A, T, F, Fut>(
        mut self,
        verb: &str,
        description: impl Into<String>,
        access: Access,
        handler: F,
    ) -> Self
    where
        A: DeserializeOwned + JsonSchema + 'static,
        T: Serialize + JsonSchema + 'static,
        F: Fn(Arc<R>, A, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, ResourceError>> + Send + 'static,
    {
        let verb = verb.to_owned();
        let description = description.into();
        self.builds.push(Box::new(move |resource, settings| {
            let name = tool_name(&verb, &settings.resource)?;
            let handler = Arc::new(handler);
            let resource = Arc::clone(resource);
            let bounds = settings.clone();
            let tool = Tool::from_json_fn(
                name,
                settings.describe(description),
                schema_for::<A>(),
                move |arguments, context| {
                    let handler = Arc::clone(&handler);
                    let resource = Arc::clone(&resource);
                    let checked = bounds.check_size(&arguments);
                    async move {
                        checked?;
                        let args: A = read_args(arguments)?;
                        let value = handler(resource, args, context).await?;
                        to_json(&value)
                    }
                },
            );
            let tool = with_output(tool, output_schema_for::<T>());
            let permission = match access {
                Access::Read => settings.read.as_deref(),
                Access::Write => settings.write.as_deref(),
            };
            Ok(require(tool, permission))
        }));
        self
    }

    /// Builds the tools without registering them, in the order they were added.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] when the resource's name gives no valid tool name, and
    /// [`Error::InvalidSchema`] when a query or patch type is not a struct or has a field the
    /// tool adds itself (`limit`, `id`).
    pub fn into_tools(self) -> Result<Vec<Tool>, Error> {
        let Self {
            resource,
            settings,
            builds,
            ..
        } = self;
        builds
            .into_iter()
            .map(|build| build(&resource, &settings))
            .collect()
    }

    /// Registers every tool in `registry`, all or none, and returns their names in name order.
    ///
    /// # Errors
    ///
    /// As [`into_tools`](Self::into_tools), and as [`Registry::register`] (a name already
    /// taken); on error `registry` is unchanged.
    pub fn register(self, registry: &mut Registry) -> Result<Vec<String>, Error> {
        let tools = self.into_tools()?;
        let mut staged = registry.clone();
        let mut names = Vec::with_capacity(tools.len());
        for tool in tools {
            names.push(tool.name().to_owned());
            staged.register(tool)?;
        }
        *registry = staged;
        names.sort();
        Ok(names)
    }

    fn push(mut self, verb: Verb, build: Build<R>) -> Self {
        // Adding a verb twice keeps one tool (the registry would refuse the duplicate).
        if !self.added[verb.index()] {
            self.added[verb.index()] = true;
            self.builds.push(build);
        }
        self
    }
}

/// Declares `schema` as the tool's result schema when it describes an object: MCP's
/// `outputSchema` must, and a result of any other shape (a custom method returning a bare
/// value) is better left undeclared than declared as something clients reject.
fn with_output(tool: Tool, schema: Value) -> Tool {
    if schema.get("type").and_then(Value::as_str) == Some("object") {
        tool.with_output_schema(schema)
    } else {
        tool
    }
}

fn require(tool: Tool, permission: Option<&str>) -> Tool {
    match permission {
        Some(permission) => tool.requires_permission(permission),
        None => tool,
    }
}

/// The common shape of a generated tool: name, description, permission, output schema, and a
/// handler that bounds the arguments before running `call`.
fn verb_tool<R, F, Fut>(
    verb: Verb,
    resource: &Arc<R>,
    settings: &Settings,
    description: String,
    parameters: Value,
    output: Value,
    call: F,
) -> Result<Tool, Error>
where
    R: Resource,
    F: Fn(Arc<R>, Arc<Settings>, Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    let name = tool_name(verb.as_str(), &settings.resource)?;
    let resource = Arc::clone(resource);
    let bounds = Arc::new(settings.clone());
    let call = Arc::new(call);
    let tool = Tool::from_json_fn(
        name,
        settings.describe(description),
        parameters,
        move |arguments, context| {
            let checked = bounds.check_size(&arguments);
            let run = checked.map(|()| {
                call(
                    Arc::clone(&resource),
                    Arc::clone(&bounds),
                    arguments,
                    context,
                )
            });
            async move { run?.await }
        },
    );
    Ok(require(
        with_output(tool, output),
        settings.permission(verb),
    ))
}

impl<R: Get> ResourceTools<R> {
    /// Adds `get_<resource>`: `{"id"}` → the record.
    #[must_use]
    pub fn get(self) -> Self {
        self.push(
            Verb::Get,
            Box::new(|resource, settings| {
                verb_tool(
                    Verb::Get,
                    resource,
                    settings,
                    format!("Get one {} by its id.", settings.resource),
                    schema_for::<IdArgs<R::Id>>(),
                    output_schema_for::<R::Record>(),
                    |resource: Arc<R>, _, arguments, context| async move {
                        let args: IdArgs<R::Id> = read_args(arguments)?;
                        let record = resource.get(args.id, &context).await?;
                        to_json(&record)
                    },
                )
            }),
        )
    }
}

impl<R: Search> ResourceTools<R> {
    /// Adds `search_<resource>`: the query's fields and `limit` → `{"records", "more"}`.
    #[must_use]
    pub fn search(self) -> Self {
        self.push(
            Verb::Search,
            Box::new(|resource, settings| {
                let name = tool_name(Verb::Search.as_str(), &settings.resource)?;
                let limit = json!({
                    "type": "integer",
                    "minimum": 1,
                    "maximum": settings.max_limit,
                    "description": format!(
                        "The most records to return (default {}, at most {}).",
                        settings.default_limit, settings.max_limit
                    ),
                });
                let parameters =
                    with_property(&name, schema_for::<R::Query>(), "limit", limit, false)?;
                verb_tool(
                    Verb::Search,
                    resource,
                    settings,
                    format!(
                        "Search {} records: every field given must match. Returns at most \
                         `limit` records and whether more matched.",
                        settings.resource
                    ),
                    parameters,
                    output_schema_for::<SearchPage<R::Record>>(),
                    |resource: Arc<R>, settings, arguments, context| async move {
                        let (limit, query) = split_off(arguments, "limit")?;
                        let limit = match limit {
                            None | Some(Value::Null) => settings.default_limit,
                            // `5.0` is an integer to JSON Schema, so it is one here too.
                            Some(value) => match value.as_u64().or_else(|| {
                                value
                                    .as_f64()
                                    .filter(|f| f.fract() == 0.0 && *f >= 1.0 && *f <= 1e9)
                                    .map(|f| f as u64)
                            }) {
                                Some(n) if n >= 1 && n <= u64::from(settings.max_limit) => {
                                    u32::try_from(n).unwrap_or(settings.max_limit)
                                }
                                _ => {
                                    return Err(ToolError::respond_to_model(format!(
                                        "invalid: `limit` must be an integer from 1 to {}, got \
                                         {value}",
                                        settings.max_limit
                                    )));
                                }
                            },
                        } as usize;
                        let query: R::Query = read_args(query)?;
                        let mut records = resource.search(query, limit + 1, &context).await?;
                        let more = records.len() > limit;
                        records.truncate(limit);
                        to_json(&SearchPage { records, more })
                    },
                )
            }),
        )
    }
}

impl<R: Create> ResourceTools<R> {
    /// Adds `create_<resource>`: the new record's fields → the stored record.
    #[must_use]
    pub fn create(self) -> Self {
        self.push(
            Verb::Create,
            Box::new(|resource, settings| {
                verb_tool(
                    Verb::Create,
                    resource,
                    settings,
                    format!(
                        "Create a {}; returns it with its new id. Each call commits on its own.",
                        settings.resource
                    ),
                    schema_for::<R::New>(),
                    output_schema_for::<R::Record>(),
                    |resource: Arc<R>, _, arguments, context| async move {
                        let new: R::New = read_args(arguments)?;
                        let record = resource.create(new, &context).await?;
                        to_json(&record)
                    },
                )
            }),
        )
    }
}

impl<R: Update> ResourceTools<R> {
    /// Adds `update_<resource>`: `{"id"}` and the fields to change → the stored record.
    #[must_use]
    pub fn update(self) -> Self {
        self.push(
            Verb::Update,
            Box::new(|resource, settings| {
                let name = tool_name(Verb::Update.as_str(), &settings.resource)?;
                let parameters = with_property(
                    &name,
                    schema_for::<R::Patch>(),
                    "id",
                    id_property::<R::Id>(),
                    true,
                )?;
                verb_tool(
                    Verb::Update,
                    resource,
                    settings,
                    format!(
                        "Change fields of one {} by its id; fields left out keep their values. \
                         Returns the updated record.",
                        settings.resource
                    ),
                    parameters,
                    output_schema_for::<R::Record>(),
                    |resource: Arc<R>, _, arguments, context| async move {
                        let (id, patch) = split_off(arguments, "id")?;
                        let Some(id) = id else {
                            return Err(ToolError::respond_to_model(
                                "invalid: `id` is required: the id of the record to change",
                            ));
                        };
                        let id: R::Id = read_args(id)?;
                        let patch: R::Patch = read_args(patch)?;
                        let record = resource.update(id, patch, &context).await?;
                        to_json(&record)
                    },
                )
            }),
        )
    }
}

impl<R: Delete> ResourceTools<R> {
    /// Adds `delete_<resource>`: `{"id"}` → `{"deleted": id}`.
    #[must_use]
    pub fn delete(self) -> Self {
        self.push(
            Verb::Delete,
            Box::new(|resource, settings| {
                verb_tool(
                    Verb::Delete,
                    resource,
                    settings,
                    format!("Delete one {} by its id.", settings.resource),
                    schema_for::<IdArgs<R::Id>>(),
                    output_schema_for::<Deleted<R::Id>>(),
                    |resource: Arc<R>, _, arguments, context| async move {
                        let args: IdArgs<R::Id> = read_args(arguments)?;
                        let id_json = to_json(&args.id)?;
                        resource.delete(args.id, &context).await?;
                        Ok(json!({ "deleted": id_json }))
                    },
                )
            }),
        )
    }
}

#[cfg(test)]
mod tests;
