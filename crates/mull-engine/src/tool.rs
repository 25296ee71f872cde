//! Tools: what the model may call. A server tool has an `execute` (scalar or streaming); a
//! client tool has only a schema and is answered by the client. A [`ToolSet`] merges tools by
//! name, later entries replacing earlier ones, in a stable order.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use mull_core::{ModelMessage, ToolSpec};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::recorder::Recorder;
pub use crate::tool_input::validate_input;

/// The error a tool's execute returns; the model sees its text as the tool's error.
pub type ToolError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What `execute` produces: one value, or a stream of values of which every one is a
/// preliminary result and the last is also the final output.
pub enum ToolOutput {
    /// The final output.
    Value(Value),
    /// Preliminary outputs; the last item is the final output. An error item ends the call.
    Stream(BoxStream<'static, Result<Value, ToolError>>),
}

impl std::fmt::Debug for ToolOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolOutput::Value(v) => f.debug_tuple("Value").field(v).finish(),
            ToolOutput::Stream(_) => f.write_str("Stream(..)"),
        }
    }
}

/// What a tool's execute knows about the call it serves.
#[derive(Debug, Clone)]
pub struct ToolExecution {
    pub call_id: String,
    pub tool_name: String,
    /// The step in which the model called the tool (zero-based).
    pub step_number: u32,
    /// The conversation as the model saw it for this step.
    pub messages: Vec<ModelMessage>,
    /// Context set by `StepConfig::context` (Null when none).
    pub context: Value,
    /// Cancelled when the turn is aborted.
    pub cancel: CancellationToken,
    /// The session and turn the call runs in (what a sub-agent's session is linked to).
    pub(crate) site: CallSite,
    /// How long the call took, when it is served from a recording rather than timed (a
    /// replayed call answers with the recorded outcome, its duration included).
    pub(crate) served_duration_ms: std::sync::OnceLock<u64>,
}

/// The session and turn a tool call runs in: what a tool that starts work of its own in the
/// log (a sub-agent) links that work to.
#[derive(Clone)]
pub(crate) struct CallSite {
    pub session: CallingSession,
    pub turn_id: String,
}

impl CallSite {
    /// The site of a call in turn `turn_id` of the session whose recorder and parts these are.
    pub(crate) fn new(
        recorder: Arc<Recorder>,
        parent: Arc<dyn Any + Send + Sync>,
        turn_id: String,
    ) -> CallSite {
        CallSite {
            session: CallingSession {
                inner: SessionParts { recorder, parent },
            },
            turn_id,
        }
    }
}

impl std::fmt::Debug for CallSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallSite")
            .field("session", &self.session.inner.recorder.session_id())
            .field("turn_id", &self.turn_id)
            .finish()
    }
}

/// The session a tool call runs in, as tools carry it. Tools sit below sessions (a session's
/// agent hands them out), so what a sub-agent needs of the session rides here without its
/// type; the sub-agent tool, which sits above sessions, takes it back.
#[derive(Clone)]
pub(crate) struct CallingSession {
    pub inner: SessionParts,
}

/// What [`CallingSession`] holds.
#[derive(Clone)]
pub(crate) struct SessionParts {
    /// The session's recorder: what a call writes events of its own with.
    pub recorder: Arc<Recorder>,
    /// What the sub-agent tool takes back of the session, opaque at this layer.
    pub parent: Arc<dyn Any + Send + Sync>,
}

/// A tool with an `execute`, run by the engine.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The name the model calls it by.
    fn name(&self) -> &str;
    /// What the tool does, for the model.
    fn description(&self) -> &str;
    /// JSON Schema of the input; the model's input is validated against it before any hook.
    /// Shared, because every step's request carries it.
    fn input_schema(&self) -> Arc<Value>;
    /// Whether execute streams preliminary outputs. The engine must know before a decision is
    /// made: a blocked or substituted streaming tool still yields one preliminary result.
    fn is_streaming(&self) -> bool {
        false
    }
    /// Whether the tool was registered at run time rather than declared in code (an MCP
    /// server's tool): hooks see it as `dynamic`, as Think's `ToolCallContext` says.
    fn is_dynamic(&self) -> bool {
        false
    }
    /// Whether a call with this (validated, possibly rewritten) input must wait for a person's
    /// approval before it runs: the AI SDK's `needsApproval`, a bool or a function of the
    /// input. Asked only for a call `before_tool_call` lets run; the hook can ask for approval
    /// itself with [`ToolCallDecision::RequireApproval`](crate::ToolCallDecision).
    fn needs_approval(&self, input: &Value) -> bool {
        let _ = input;
        false
    }
    /// Runs the tool.
    async fn execute(&self, input: Value, call: &ToolExecution) -> Result<ToolOutput, ToolError>;
}

/// A tool of a turn: run by the engine, or answered by the client.
#[derive(Clone)]
pub enum ToolEntry {
    /// A tool with an execute.
    Server(Arc<dyn Tool>),
    /// A tool without execute: the turn ends waiting for the client's result.
    Client(ToolSpec),
}

impl ToolEntry {
    /// The tool's name.
    pub fn name(&self) -> &str {
        match self {
            ToolEntry::Server(t) => t.name(),
            ToolEntry::Client(spec) => &spec.name,
        }
    }

    /// The tool as the model sees it.
    pub fn spec(&self) -> ToolSpec {
        match self {
            ToolEntry::Server(t) => ToolSpec {
                name: t.name().to_owned(),
                description: t.description().to_owned(),
                input_schema: t.input_schema(),
            },
            ToolEntry::Client(spec) => spec.clone(),
        }
    }

    /// JSON Schema of the input.
    pub fn input_schema(&self) -> Arc<Value> {
        match self {
            ToolEntry::Server(t) => t.input_schema(),
            ToolEntry::Client(spec) => Arc::clone(&spec.input_schema),
        }
    }
}

impl std::fmt::Debug for ToolEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolEntry::Server(t) => write!(f, "Server({})", t.name()),
            ToolEntry::Client(spec) => write!(f, "Client({})", spec.name),
        }
    }
}

/// Tools by name, in insertion order; inserting a name that exists replaces it in place.
#[derive(Clone, Default, Debug)]
pub struct ToolSet {
    entries: Vec<ToolEntry>,
}

impl ToolSet {
    /// An empty set.
    pub fn new() -> ToolSet {
        ToolSet::default()
    }

    /// Adds (or replaces) a server tool.
    pub fn with(mut self, tool: Arc<dyn Tool>) -> ToolSet {
        self.insert(ToolEntry::Server(tool));
        self
    }

    /// Adds (or replaces) a client tool.
    pub fn with_client(mut self, spec: ToolSpec) -> ToolSet {
        self.insert(ToolEntry::Client(spec));
        self
    }

    /// Adds an entry; an entry of the same name is replaced where it stood.
    pub fn insert(&mut self, entry: ToolEntry) {
        match self.entries.iter_mut().find(|e| e.name() == entry.name()) {
            Some(slot) => *slot = entry,
            None => self.entries.push(entry),
        }
    }

    /// Merges `other` in; its tools win on a name clash.
    pub fn merge(&mut self, other: &ToolSet) {
        for entry in &other.entries {
            self.insert(entry.clone());
        }
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&ToolEntry> {
        self.entries.iter().find(|e| e.name() == name)
    }

    /// Every name, in order.
    pub fn names(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.name().to_owned()).collect()
    }

    /// The entries, in order.
    pub fn entries(&self) -> &[ToolEntry] {
        &self.entries
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The specs the model is offered: all tools, or only `active` ones when limited.
    pub fn specs(&self, active: Option<&[String]>) -> Vec<ToolSpec> {
        self.entries
            .iter()
            .filter(|e| active.is_none_or(|a| a.iter().any(|n| n == e.name())))
            .map(ToolEntry::spec)
            .collect()
    }
}

/// The JSON Schema of a Rust input type, as tools declare it.
///
/// Derived once per type and kept: agents commonly build their tools afresh for every turn,
/// and deriving and serializing a schema costs far more than sharing it.
pub fn schema_of<I: JsonSchema + 'static>() -> Arc<Value> {
    static SCHEMAS: OnceLock<Mutex<HashMap<TypeId, Arc<Value>>>> = OnceLock::new();
    let schemas = SCHEMAS.get_or_init(Default::default);
    let known = schemas
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get(&TypeId::of::<I>())
        .cloned();
    known.unwrap_or_else(|| {
        let schema =
            Arc::new(serde_json::to_value(schemars::schema_for!(I)).unwrap_or(Value::Null));
        crate::tool_input::compile_ahead(Arc::clone(&schema));
        schemas
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(TypeId::of::<I>(), Arc::clone(&schema));
        schema
    })
}

/// A tool's approval rule: does a call with this input need a person's approval?
type ApprovalRule = dyn Fn(&Value) -> bool + Send + Sync;

type ScalarFn = dyn Fn(Value, ToolExecution) -> futures::future::BoxFuture<'static, Result<ToolOutput, ToolError>>
    + Send
    + Sync;

/// A tool made from a closure over a typed input (its schema derived with `schemars`).
pub struct FnTool {
    name: String,
    description: String,
    schema: Arc<Value>,
    streaming: bool,
    approval: Option<Box<ApprovalRule>>,
    run: Box<ScalarFn>,
}

impl FnTool {
    /// A scalar tool: `f` gets the decoded input and returns the output.
    pub fn new<I, F, Fut>(name: &str, description: &str, f: F) -> FnTool
    where
        I: JsonSchema + DeserializeOwned + Send + 'static,
        F: Fn(I, ToolExecution) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        let f = Arc::new(f);
        FnTool {
            name: name.to_owned(),
            description: description.to_owned(),
            schema: schema_of::<I>(),
            streaming: false,
            approval: None,
            run: Box::new(move |input, call| {
                let f = Arc::clone(&f);
                Box::pin(async move {
                    let input: I = serde_json::from_value(input)?;
                    Ok(ToolOutput::Value(f(input, call).await?))
                })
            }),
        }
    }

    /// A streaming tool: `f` returns a stream of outputs; each is preliminary, the last final.
    pub fn streaming<I, F>(name: &str, description: &str, f: F) -> FnTool
    where
        I: JsonSchema + DeserializeOwned + Send + 'static,
        F: Fn(I, ToolExecution) -> BoxStream<'static, Result<Value, ToolError>>
            + Send
            + Sync
            + 'static,
    {
        let f = Arc::new(f);
        FnTool {
            name: name.to_owned(),
            description: description.to_owned(),
            schema: schema_of::<I>(),
            streaming: true,
            approval: None,
            run: Box::new(move |input, call| {
                let f = Arc::clone(&f);
                Box::pin(async move {
                    let input: I = serde_json::from_value(input)?;
                    Ok(ToolOutput::Stream(f(input, call).boxed()))
                })
            }),
        }
    }

    /// Replaces the derived schema (for inputs described by hand).
    pub fn with_schema(mut self, schema: Value) -> FnTool {
        self.schema = Arc::new(schema);
        self
    }

    /// Every call waits for a person's approval (`true`), or none does (`false`).
    pub fn needs_approval(self, always: bool) -> FnTool {
        self.needs_approval_when(move |_| always)
    }

    /// A call waits for a person's approval when `rule` says so of its input.
    pub fn needs_approval_when(
        mut self,
        rule: impl Fn(&Value) -> bool + Send + Sync + 'static,
    ) -> FnTool {
        self.approval = Some(Box::new(rule));
        self
    }

    /// The tool behind an `Arc`, ready for a [`ToolSet`].
    pub fn shared(self) -> Arc<dyn Tool> {
        Arc::new(self)
    }
}

#[async_trait]
impl Tool for FnTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn input_schema(&self) -> Arc<Value> {
        Arc::clone(&self.schema)
    }
    fn is_streaming(&self) -> bool {
        self.streaming
    }
    fn needs_approval(&self, input: &Value) -> bool {
        self.approval.as_ref().is_some_and(|rule| rule(input))
    }
    async fn execute(&self, input: Value, call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        (self.run)(input, call.clone()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn later_tools_replace_earlier_ones_in_place() {
        let spec = |name: &str, d: &str| ToolSpec {
            name: name.into(),
            description: d.into(),
            input_schema: json!({"type": "object"}).into(),
        };
        let mut set = ToolSet::new()
            .with_client(spec("a", "1"))
            .with_client(spec("b", "1"));
        set.merge(&ToolSet::new().with_client(spec("a", "2")));
        assert_eq!(set.names(), ["a", "b"]);
        assert_eq!(set.specs(None)[0].description, "2");
        assert_eq!(set.specs(Some(&["b".to_owned()])).len(), 1);
    }
}
