//! The [`Registry`]: the one place tools come from.

use std::collections::BTreeMap;
use std::sync::Arc;

use agent_types::ToolSpec;
use serde_json::Value;

use crate::context::{Caller, ToolContext};
use crate::error::Error;
use crate::handler::ToolStream;
use crate::name::validate_name;
use crate::tool::Tool;
use crate::validate::{ArgumentValidator, InvalidArguments, Validated, ValidationMode};

/// A registered tool: the [`Tool`] plus its schema, compiled once at registration.
#[derive(Debug)]
pub struct RegisteredTool {
    tool: Tool,
    /// Shared, so marking a registered tool for approval compiles nothing again.
    validator: Arc<ArgumentValidator>,
}

impl RegisteredTool {
    /// The tool as it was registered.
    pub fn tool(&self) -> &Tool {
        &self.tool
    }

    /// The spec the model sees.
    pub fn spec(&self) -> &ToolSpec {
        self.tool.spec()
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        self.tool.name()
    }

    /// `true` when the tool has no handler.
    pub fn is_remote(&self) -> bool {
        self.tool.is_remote()
    }

    /// The compiled parameters schema.
    pub fn validator(&self) -> &ArgumentValidator {
        &self.validator
    }

    /// Checks `arguments` under `mode` with the compiled schema. For a
    /// [strict](Tool::strict) tool, `null`s standing for absent optional properties (what
    /// strict mode makes the model send) are dropped first.
    ///
    /// # Errors
    ///
    /// [`InvalidArguments`] saying what is wrong, for the model.
    pub fn validate(
        &self,
        mut arguments: Value,
        mode: ValidationMode,
    ) -> Result<Validated, InvalidArguments> {
        if self.spec().strict {
            agent_types::drop_optional_nulls(&self.spec().parameters, &mut arguments);
        }
        self.validator.validate(arguments, mode)
    }

    /// Runs the handler; see [`Tool::invoke`].
    pub fn invoke(&self, arguments: Value, context: ToolContext) -> ToolStream {
        self.tool.invoke(arguments, context)
    }
}

/// Tools by name, listed in name order.
///
/// Registering checks the name (`^[a-zA-Z0-9_-]{1,64}$`, never silently renamed), rejects
/// duplicates, and compiles the schema once. Narrowing ([`narrow`](Self::narrow),
/// [`permitted_for`](Self::permitted_for), [`filter`](Self::filter)) returns a new registry
/// that shares the registered tools, so it is cheap to do per call. Listings are sorted by
/// name, so the tool list sent to a provider is byte-stable and prompt caches keep hitting.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    tools: BTreeMap<String, Arc<RegisteredTool>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `tool`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a name providers would reject (see
    /// [`sanitize_name`](crate::sanitize_name) to make one), [`Error::DuplicateTool`] when the
    /// name is taken, [`Error::InvalidSchema`] when the schema does not compile or does not
    /// describe an object.
    pub fn register(&mut self, tool: Tool) -> Result<&Arc<RegisteredTool>, Error> {
        validate_name(tool.name())?;
        if self.tools.contains_key(tool.name()) {
            return Err(Error::DuplicateTool {
                name: tool.name().to_owned(),
            });
        }
        let validator =
            ArgumentValidator::new(&tool.spec().parameters).map_err(|error| match error {
                Error::InvalidSchema { reason, .. } => Error::InvalidSchema {
                    tool: tool.name().to_owned(),
                    reason,
                },
                other => other,
            })?;
        let name = tool.name().to_owned();
        let entry = Arc::new(RegisteredTool {
            tool,
            validator: Arc::new(validator),
        });
        Ok(self.tools.entry(name).or_insert(entry))
    }

    /// Adds every tool of `other`, sharing them: their schemas were compiled when `other`
    /// registered them and are not compiled again (an imported MCP server's tools join a
    /// run's registry this way).
    ///
    /// # Errors
    ///
    /// [`Error::DuplicateTool`] for the first name both hold; nothing is added then.
    pub fn merge(&mut self, other: &Registry) -> Result<(), Error> {
        if let Some(name) = other
            .tools
            .keys()
            .find(|name| self.tools.contains_key(*name))
        {
            return Err(Error::DuplicateTool { name: name.clone() });
        }
        self.tools.extend(
            other
                .tools
                .iter()
                .map(|(name, tool)| (name.clone(), Arc::clone(tool))),
        );
        Ok(())
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<RegisteredTool>> {
        self.tools.get(name)
    }

    /// Whether a tool is called `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// `true` when no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Every tool, in name order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<RegisteredTool>> {
        self.tools.values()
    }

    /// Every name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// Every spec, sorted by name: the tool list to send to a provider. The schemas are shared
    /// with the registry ([`ToolSpec::parameters`] is an `Arc`), so a request per model call
    /// copies names and descriptions, not schemas.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .values()
            .map(|tool| tool.spec().clone())
            .collect()
    }

    /// Makes the named tools wait for approval ([`Tool::with_approval`]), for tools registered
    /// by someone else: MCP-imported tools, resource tools, built-ins. Registries that share
    /// the tools (clones, narrowed copies) made before this call keep the tools as they were.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTools`] listing every name that is not registered; nothing changes then.
    pub fn require_approval<I, S>(&mut self, names: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let names: Vec<S> = names.into_iter().collect();
        let unknown: Vec<String> = names
            .iter()
            .map(AsRef::as_ref)
            .filter(|name| !self.tools.contains_key(*name))
            .map(str::to_owned)
            .collect();
        if !unknown.is_empty() {
            return Err(Error::UnknownTools { names: unknown });
        }
        for name in &names {
            if let Some(entry) = self.tools.get_mut(name.as_ref())
                && !entry.tool.requires_approval()
            {
                *entry = Arc::new(RegisteredTool {
                    tool: entry.tool.clone().with_approval(),
                    validator: Arc::clone(&entry.validator),
                });
            }
        }
        Ok(())
    }

    /// Only the tools named in `allowed` (a per-call allow-list).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTools`] listing every allowed name that is not registered: a typo in an
    /// allow-list should fail loudly rather than quietly hide a tool.
    pub fn narrow<I, S>(&self, allowed: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut tools = BTreeMap::new();
        let mut unknown = Vec::new();
        for name in allowed {
            let name = name.as_ref();
            match self.tools.get_key_value(name) {
                Some((key, tool)) => {
                    tools.insert(key.clone(), Arc::clone(tool));
                }
                None => unknown.push(name.to_owned()),
            }
        }
        if unknown.is_empty() {
            Ok(Self { tools })
        } else {
            Err(Error::UnknownTools { names: unknown })
        }
    }

    /// Only the tools for which `keep` returns `true`.
    #[must_use]
    pub fn filter(&self, mut keep: impl FnMut(&RegisteredTool) -> bool) -> Self {
        let tools = self
            .tools
            .iter()
            .filter(|(_, tool)| keep(tool))
            .map(|(name, tool)| (name.clone(), Arc::clone(tool)))
            .collect();
        Self { tools }
    }

    /// Only the tools `caller` may use: those whose
    /// [required permissions](Tool::requires_permission) the caller holds.
    #[must_use]
    pub fn permitted_for(&self, caller: &Caller) -> Self {
        self.filter(|tool| {
            tool.tool()
                .required_permissions()
                .iter()
                .all(|permission| caller.has_permission(permission))
        })
    }
}
