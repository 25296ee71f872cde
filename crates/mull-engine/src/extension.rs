//! Extensions: code that is not the agent but subscribes to five of its hooks (`before_turn`,
//! `before_tool_call`, `after_tool_call`, `on_step_finish`, `on_chunk`), as Think's extension
//! hooks do. `before_step` is never offered: its context holds a live model, which is not data.
//!
//! An extension sees JSON-safe snapshots, never the engine's live contexts, so the same
//! contract serves an in-process Rust extension and one running in another process (the
//! `mull-extensions` crate implements [`Extension`] over a child process).
//!
//! Snapshots and replies have the seed's shapes and field names (camelCase, as Think's
//! documentation writes them), so an extension written from the seed works unchanged.
//!
//! The dispatcher runs subscribed extensions in load order, right after the agent's own hook
//! at the same point. Only `before_turn`'s reply is used: a [`TurnConfigPatch`] whose scalar
//! fields replace the turn's (headers and provider options merge key by key); `model`,
//! `tools`, `stopWhen`, `experimental_transform` and `output` are ignored. A reply field that
//! is unknown or of the wrong type fails the reply, naming the field. Every field an extension sets
//! is listed in `turn_configured.overrides` as `ext:<name>:<field>`. An extension hook that
//! fails, panics or outlives its timeout is a `hook_failed` event with `source` = the
//! extension's name; the turn goes on.
//!
//! mull does better than Think in one place: each `before_turn` snapshot shows the turn as
//! configured so far (the agent's `before_turn` and earlier extensions applied), including the
//! current `active_tools`, so a policy extension narrows what the agent allowed instead of
//! widening it by accident.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mull_core::{HookName, ModelMessage, StreamPart, ToolChoice, UIMessage, Usage};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::config::ResolvedTurn;
use crate::error::{EngineError, HookResult};
use crate::hooks::context::{
    ChunkContext, StepContext, ToolCallContext, ToolCallResultContext, TurnContext,
};
use crate::session::Inner;
use crate::stop::step_count_is;

/// How long an extension hook may take before it counts as failed (Think's 5 s).
pub const DEFAULT_EXTENSION_TIMEOUT: Duration = Duration::from_secs(5);

/// The hooks an extension may subscribe to.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ExtensionHook {
    BeforeTurn,
    BeforeToolCall,
    AfterToolCall,
    OnStepFinish,
    OnChunk,
}

impl ExtensionHook {
    /// Every subscribable hook, in the order a turn reaches them.
    pub const ALL: [ExtensionHook; 5] = [
        ExtensionHook::BeforeTurn,
        ExtensionHook::BeforeToolCall,
        ExtensionHook::AfterToolCall,
        ExtensionHook::OnStepFinish,
        ExtensionHook::OnChunk,
    ];

    /// The snake_case name, as in manifests and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ExtensionHook::BeforeTurn => "before_turn",
            ExtensionHook::BeforeToolCall => "before_tool_call",
            ExtensionHook::AfterToolCall => "after_tool_call",
            ExtensionHook::OnStepFinish => "on_step_finish",
            ExtensionHook::OnChunk => "on_chunk",
        }
    }

    /// The hook's name in `hook_failed` events.
    pub fn hook_name(self) -> HookName {
        match self {
            ExtensionHook::BeforeTurn => HookName::BeforeTurn,
            ExtensionHook::BeforeToolCall => HookName::BeforeToolCall,
            ExtensionHook::AfterToolCall => HookName::AfterToolCall,
            ExtensionHook::OnStepFinish => HookName::OnStepFinish,
            ExtensionHook::OnChunk => HookName::OnChunk,
        }
    }
}

/// What an extension's `before_turn` sees: the seed's `TurnContextSnapshot`
/// (`{ system, toolNames, messageCount, continuation, body?, modelId }`) plus `activeTools`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnSnapshot {
    /// The system prompt in effect so far.
    pub system: String,
    /// Every tool of the turn, merged.
    pub tool_names: Vec<String>,
    /// The tools the model may call so far; `null` means all of `tool_names`.
    pub active_tools: Option<Vec<String>>,
    /// How many model messages the first step would send.
    pub message_count: u32,
    /// Whether this turn continues the previous one.
    pub continuation: bool,
    /// Custom fields of the caller's request (absent when the request had none).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub body: Value,
    /// The model the turn uses.
    pub model_id: String,
}

/// What an extension's `before_tool_call` sees (the seed's
/// `{ toolName, toolCallId, input, stepNumber, dynamic? }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallSnapshot {
    pub tool_name: String,
    pub tool_call_id: String,
    /// The input the model provided.
    pub input: Value,
    /// The step the call occurs in.
    pub step_number: u32,
    /// Whether the tool was registered at runtime.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dynamic: bool,
}

/// What an extension's `after_tool_call` sees: the outcome as the model sees it (the seed's
/// `{ toolName, toolCallId, input, stepNumber, durationMs, success, output? | error?, dynamic? }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultSnapshot {
    pub tool_name: String,
    pub tool_call_id: String,
    /// The input the model emitted.
    pub input: Value,
    pub step_number: u32,
    /// Wall time of execute; 0 when it did not run.
    pub duration_ms: u64,
    /// False when execute (or the agent's `before_tool_call`) failed.
    pub success: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dynamic: bool,
}

/// Token counts of a step; absent counts mean the provider did not say.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageSnapshot {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub total_tokens: Option<u64>,
    pub reasoning_tokens: Option<u64>,
    pub cached_input_tokens: Option<u64>,
}

impl From<&Usage> for UsageSnapshot {
    fn from(u: &Usage) -> UsageSnapshot {
        UsageSnapshot {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            total_tokens: u.total_tokens,
            reasoning_tokens: u.reasoning_tokens,
            cached_input_tokens: u.cached_input_tokens,
        }
    }
}

/// What an extension's `on_step_finish` sees (the seed's `{ stepNumber, finishReason, text,
/// reasoningText, toolCallCount, toolResultCount, usage, providerMetadata }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepSnapshot {
    pub step_number: u32,
    /// The unified finish reason (`stop`, `length`, `tool-calls`, …).
    pub finish_reason: String,
    pub text: String,
    pub reasoning_text: Option<String>,
    pub tool_call_count: u32,
    pub tool_result_count: u32,
    pub usage: UsageSnapshot,
    pub provider_metadata: Option<Value>,
}

/// What an extension's `on_chunk` sees: minimal, because it fires per token (the seed's
/// `{ type, text?, toolName?, toolCallId? }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChunkSnapshot {
    /// The stream part's type (`text-delta`, `tool-call`, …).
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl From<&StreamPart> for ChunkSnapshot {
    fn from(part: &StreamPart) -> ChunkSnapshot {
        let (text, tool_name, tool_call_id) = match part {
            StreamPart::TextDelta { text, .. } | StreamPart::ReasoningDelta { text, .. } => {
                (Some(text.clone()), None, None)
            }
            StreamPart::ToolInputStart { call_id, tool_name }
            | StreamPart::ToolCall {
                call_id, tool_name, ..
            }
            | StreamPart::ToolResult {
                call_id, tool_name, ..
            }
            | StreamPart::ToolError {
                call_id, tool_name, ..
            } => (None, Some(tool_name.clone()), Some(call_id.clone())),
            StreamPart::ToolInputDelta { call_id, delta } => {
                (Some(delta.clone()), None, Some(call_id.clone()))
            }
            StreamPart::ToolInputEnd { call_id } => (None, None, Some(call_id.clone())),
            _ => (None, None, None),
        };
        ChunkSnapshot {
            kind: part.kind().to_owned(),
            text,
            tool_name,
            tool_call_id,
        }
    }
}

/// A tool choice as the AI SDK writes it: `"auto"`, `"none"`, `"required"`, or
/// `{ "type": "tool", "toolName": "search" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ToolChoicePatch {
    /// `"auto"`, `"none"` or `"required"`.
    Mode(ToolChoiceMode),
    /// One tool, forced.
    Tool(ForcedTool),
}

/// The tool choices that name no tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ToolChoiceMode {
    Auto,
    None,
    Required,
}

/// `{ "type": "tool", "toolName": … }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForcedTool {
    #[serde(rename = "type")]
    pub kind: ForcedToolKind,
    pub tool_name: String,
}

/// The only `type` a forced tool choice has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ForcedToolKind {
    Tool,
}

impl From<ToolChoicePatch> for ToolChoice {
    fn from(c: ToolChoicePatch) -> ToolChoice {
        match c {
            ToolChoicePatch::Mode(ToolChoiceMode::Auto) => ToolChoice::Auto,
            ToolChoicePatch::Mode(ToolChoiceMode::None) => ToolChoice::None,
            ToolChoicePatch::Mode(ToolChoiceMode::Required) => ToolChoice::Required,
            ToolChoicePatch::Tool(ForcedTool { tool_name, .. }) => ToolChoice::Tool { tool_name },
        }
    }
}

/// Time limits an extension may set for the turn (the seed's `TimeoutConfiguration`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TimeoutPatch {
    /// The whole turn must end within this many ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_ms: Option<u64>,
    /// No gap between two stream parts may be longer (the stall watchdog; 0 turns it off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_ms: Option<u64>,
}

/// What an extension's `before_turn` may return: the scalar part of the seed's TurnConfig, with
/// its field names (`activeTools`, `maxSteps`, `toolChoice` …).
///
/// `model`, `tools`, `stopWhen`, `experimental_transform` and `output` are accepted so a
/// Think-shaped reply decodes, and ignored: they are code or live objects, which an extension
/// cannot own. Any other field, or a value of the wrong type, makes the reply fail as a whole
/// ([`TurnConfigPatch::from_json`] names the field), so a misspelt field is never silently
/// dropped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct TurnConfigPatch {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Model messages in mull's `ModelMessage` shape (`{role, content: [...]}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<Map<String, Value>>>")]
    pub messages: Option<Vec<ModelMessage>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_tools: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoicePatch>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_reasoning: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_sequences: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<TimeoutPatch>,
    /// The stall watchdog for this turn, in ms (0 turns it off); wins over `timeout.chunkMs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat_stream_stall_timeout_ms: Option<u64>,
    /// Merged into the turn's headers key by key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
    /// Merged into the turn's provider options key by key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_options: Option<Map<String, Value>>,
    /// Ignored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<Value>,
    /// Ignored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Value>,
    /// Ignored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_when: Option<Value>,
    /// Ignored (the seed's `experimental_transform`).
    #[serde(
        rename = "experimental_transform",
        skip_serializing_if = "Option::is_none"
    )]
    pub transforms: Option<Value>,
    /// Ignored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
}

/// A `before_turn` reply that is not a [`TurnConfigPatch`], naming the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PatchError {
    /// The reply is not a JSON object (nor `null`).
    #[error("the reply is {0}, not an object or null")]
    NotAnObject(&'static str),
    /// The seed's TurnConfig has no field of that name.
    #[error(
        "field {field:?} is not a TurnConfig field (they are camelCase, e.g. \"activeTools\")"
    )]
    UnknownField { field: String },
    /// The field's value has the wrong type or shape.
    #[error("field {field:?}: {problem}")]
    BadValue { field: String, problem: String },
}

impl TurnConfigPatch {
    /// Every field name a reply may use.
    pub const FIELDS: [&'static str; 24] = [
        "system",
        "messages",
        "activeTools",
        "toolChoice",
        "maxSteps",
        "sendReasoning",
        "maxOutputTokens",
        "temperature",
        "topP",
        "topK",
        "presencePenalty",
        "frequencyPenalty",
        "stopSequences",
        "seed",
        "maxRetries",
        "timeout",
        "chatStreamStallTimeoutMs",
        "headers",
        "providerOptions",
        "model",
        "tools",
        "stopWhen",
        "experimental_transform",
        "output",
    ];

    /// Decodes a `before_turn` reply (`null`: change nothing), field by field, so an error
    /// names the field that is unknown or of the wrong type.
    pub fn from_json(reply: &Value) -> Result<Option<TurnConfigPatch>, PatchError> {
        let fields = match reply {
            Value::Null => return Ok(None),
            Value::Object(fields) => fields,
            Value::Bool(_) => return Err(PatchError::NotAnObject("a boolean")),
            Value::Number(_) => return Err(PatchError::NotAnObject("a number")),
            Value::String(_) => return Err(PatchError::NotAnObject("a string")),
            Value::Array(_) => return Err(PatchError::NotAnObject("an array")),
        };
        for (field, value) in fields {
            if !Self::FIELDS.contains(&field.as_str()) {
                return Err(PatchError::UnknownField {
                    field: field.clone(),
                });
            }
            let mut one = Map::new();
            one.insert(field.clone(), value.clone());
            serde_json::from_value::<TurnConfigPatch>(Value::Object(one)).map_err(|e| {
                PatchError::BadValue {
                    field: field.clone(),
                    problem: e.to_string(),
                }
            })?;
        }
        serde_json::from_value(reply.clone())
            .map(Some)
            .map_err(|e| PatchError::BadValue {
                field: String::new(),
                problem: e.to_string(),
            })
    }
}

/// Why a host call an extension made was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostCallError {
    /// The extension was not granted the permission the call needs.
    #[error("permission denied: extension {extension:?} was not granted {permission}")]
    PermissionDenied {
        extension: String,
        permission: String,
    },
    /// The session offers no such facility.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The call was understood but refused (an unknown block, a write over budget …).
    #[error("refused: {0}")]
    Rejected(String),
}

/// What the session lets an extension read and write back during a hook (Think's host
/// bridge). Permission checks belong to whoever loaded the extension; this is the session's
/// side of the call.
pub trait ExtensionHost: Send + Sync {
    /// The session's id.
    fn session_id(&self) -> &str;
    /// The conversation as it stands.
    fn messages(&self) -> Vec<UIMessage>;
    /// A named context block's text (`None` when the block is empty).
    fn read_context_block(&self, name: &str) -> Result<Option<String>, HostCallError>;
    /// Replaces a named context block's text.
    fn write_context_block(&self, name: &str, text: &str) -> Result<(), HostCallError>;
}

/// The session's side of host calls: the conversation from the projection, and the session's
/// declared context blocks. A write is held to the block's budget and recorded as a
/// `context_block_updated` event (source `application`); it becomes durable at the turn's next
/// flush barrier and shows in the prompt from the next turn, like any application write.
struct SessionHost<'a> {
    inner: &'a Inner,
}

impl ExtensionHost for SessionHost<'_> {
    fn session_id(&self) -> &str {
        &self.inner.session_id
    }
    fn messages(&self) -> Vec<UIMessage> {
        self.inner.recorder.read(|s| s.messages.clone())
    }
    fn read_context_block(&self, name: &str) -> Result<Option<String>, HostCallError> {
        if self.inner.config.block(name).is_none() {
            return Err(HostCallError::Rejected(format!(
                "session {} has no context block {name:?}",
                self.inner.session_id
            )));
        }
        Ok(self
            .inner
            .recorder
            .read(|s| s.context_blocks.get(name).cloned()))
    }
    fn write_context_block(&self, name: &str, text: &str) -> Result<(), HostCallError> {
        crate::memory::context_blocks::check_write(&self.inner.config, name, text, false)
            .map_err(|e| HostCallError::Rejected(e.to_string()))?;
        crate::memory::context_blocks::append_write(
            self.inner,
            name,
            text,
            mull_core::ContextBlockSource::Application,
            None,
        )
        .map_err(|e| HostCallError::Rejected(format!("the log refused the write: {e}")))
    }
}

/// An extension: observes five hooks through snapshots and may patch a turn's scalar
/// settings in `before_turn`. Every method has a default that does nothing.
#[async_trait]
pub trait Extension: Send + Sync + 'static {
    /// The name `hook_failed.source` and `turn_configured.overrides` record.
    fn name(&self) -> &str;

    /// Whether the dispatcher calls this extension for `hook` (all hooks by default).
    fn subscribes(&self, _hook: ExtensionHook) -> bool {
        true
    }

    /// How long one call of `hook` may take before it counts as failed.
    fn timeout(&self, _hook: ExtensionHook) -> Duration {
        DEFAULT_EXTENSION_TIMEOUT
    }

    /// Before the model is called, after the agent's `before_turn`.
    async fn before_turn(
        &self,
        _snapshot: &TurnSnapshot,
        _host: &dyn ExtensionHost,
    ) -> HookResult<Option<TurnConfigPatch>> {
        Ok(None)
    }

    /// A tool call was decided by the agent (observation only).
    async fn before_tool_call(
        &self,
        _snapshot: &ToolCallSnapshot,
        _host: &dyn ExtensionHost,
    ) -> HookResult<()> {
        Ok(())
    }

    /// A tool call's outcome is known (observation only).
    async fn after_tool_call(
        &self,
        _snapshot: &ToolResultSnapshot,
        _host: &dyn ExtensionHost,
    ) -> HookResult<()> {
        Ok(())
    }

    /// A step ended (observation only).
    async fn on_step_finish(
        &self,
        _snapshot: &StepSnapshot,
        _host: &dyn ExtensionHost,
    ) -> HookResult<()> {
        Ok(())
    }

    /// A stream part was logged (observation only).
    async fn on_chunk(
        &self,
        _snapshot: &ChunkSnapshot,
        _host: &dyn ExtensionHost,
    ) -> HookResult<()> {
        Ok(())
    }

    /// A step ended: an extension that batches chunks delivers what it holds. Called on every
    /// `on_chunk` subscriber before its `on_step_finish`.
    async fn flush_chunks(&self, _host: &dyn ExtensionHost) -> HookResult<()> {
        Ok(())
    }
}

/// The extensions of a session, in load order.
#[derive(Clone, Default)]
pub struct Extensions {
    list: Vec<Arc<dyn Extension>>,
}

impl Extensions {
    /// No extensions.
    pub fn new() -> Extensions {
        Extensions::default()
    }

    /// Appends `extension` (it runs after those already loaded).
    pub fn push(&mut self, extension: Arc<dyn Extension>) {
        self.list.push(extension);
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The extensions' names, in load order.
    pub fn names(&self) -> Vec<String> {
        self.list.iter().map(|e| e.name().to_owned()).collect()
    }

    fn subscribed(&self, hook: ExtensionHook) -> impl Iterator<Item = &Arc<dyn Extension>> {
        self.list.iter().filter(move |e| e.subscribes(hook))
    }
}

impl FromIterator<Arc<dyn Extension>> for Extensions {
    fn from_iter<I: IntoIterator<Item = Arc<dyn Extension>>>(iter: I) -> Extensions {
        Extensions {
            list: iter.into_iter().collect(),
        }
    }
}

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

/// Runs one extension hook through the engine's one failure guard, under the extension's
/// timeout: a failure is a `hook_failed` event naming the extension, and `None`.
async fn guarded<T>(
    inner: &Inner,
    turn_id: Option<&str>,
    extension: &dyn Extension,
    hook: ExtensionHook,
    fut: impl std::future::Future<Output = HookResult<T>>,
) -> Result<Option<T>, EngineError> {
    let caller = crate::hooks::Caller {
        hook: hook.hook_name(),
        source: extension.name(),
    };
    let limit = Some(extension.timeout(hook));
    Ok(crate::hooks::guarded(inner, turn_id, caller, limit, fut)
        .await?
        .ok())
}

/// Runs every `before_turn` subscriber on the turn as configured so far and merges each
/// reply's scalar fields into it, in load order.
pub(crate) async fn before_turn(
    inner: &Inner,
    turn_id: Option<&str>,
    ctx: &TurnContext,
    mut resolved: ResolvedTurn,
) -> Result<ResolvedTurn, EngineError> {
    let host = SessionHost { inner };
    for extension in inner
        .options
        .extensions
        .subscribed(ExtensionHook::BeforeTurn)
    {
        let snapshot = TurnSnapshot {
            system: resolved.system.clone(),
            tool_names: resolved.tools.names(),
            active_tools: resolved.active_tools.clone(),
            message_count: u32::try_from(resolved.messages.len()).unwrap_or(u32::MAX),
            continuation: ctx.continuation,
            body: ctx.body.clone(),
            model_id: resolved.model.model_id().to_owned(),
        };
        let reply = guarded(
            inner,
            turn_id,
            &**extension,
            ExtensionHook::BeforeTurn,
            extension.before_turn(&snapshot, &host),
        )
        .await?;
        if let Some(Some(patch)) = reply {
            apply_patch(&mut resolved, extension.name(), patch);
        }
    }
    Ok(resolved)
}

/// Merges an extension's scalar fields into the turn and records them as overrides.
fn apply_patch(resolved: &mut ResolvedTurn, extension: &str, patch: TurnConfigPatch) {
    let mut set: Vec<&str> = Vec::new();
    let settings = &mut resolved.settings;
    macro_rules! replace {
        ($field:ident => $target:expr) => {
            if let Some(value) = patch.$field {
                $target = value.into();
                set.push(stringify!($field));
            }
        };
    }
    replace!(system => resolved.system);
    replace!(messages => resolved.messages);
    if let Some(active) = patch.active_tools {
        resolved.active_tools = Some(active);
        set.push("active_tools");
    }
    replace!(tool_choice => resolved.tool_choice);
    if let Some(max_steps) = patch.max_steps {
        resolved.max_steps = max_steps;
        // The merge puts `step_count_is(max_steps)` first; the limit moves with max_steps.
        match resolved.stop_when.first_mut() {
            Some(first) => *first = step_count_is(max_steps),
            None => resolved.stop_when.push(step_count_is(max_steps)),
        }
        set.push("max_steps");
    }
    replace!(send_reasoning => resolved.send_reasoning);
    if let Some(v) = patch.max_output_tokens {
        settings.max_output_tokens = Some(v);
        set.push("max_output_tokens");
    }
    if let Some(v) = patch.temperature {
        settings.temperature = Some(v);
        set.push("temperature");
    }
    if let Some(v) = patch.top_p {
        settings.top_p = Some(v);
        set.push("top_p");
    }
    if let Some(v) = patch.top_k {
        settings.top_k = Some(v);
        set.push("top_k");
    }
    if let Some(v) = patch.presence_penalty {
        settings.presence_penalty = Some(v);
        set.push("presence_penalty");
    }
    if let Some(v) = patch.frequency_penalty {
        settings.frequency_penalty = Some(v);
        set.push("frequency_penalty");
    }
    replace!(stop_sequences => settings.stop_sequences);
    if let Some(v) = patch.seed {
        settings.seed = Some(v);
        set.push("seed");
    }
    replace!(max_retries => resolved.max_retries);
    if let Some(timeout) = patch.timeout {
        if let Some(total) = timeout.total_ms {
            resolved.total_timeout = Some(Duration::from_millis(total));
        }
        if let Some(chunk) = timeout.chunk_ms {
            resolved.stall_timeout_ms = chunk;
        }
        set.push("timeout");
    }
    if let Some(ms) = patch.chat_stream_stall_timeout_ms {
        resolved.stall_timeout_ms = ms;
        set.push("chat_stream_stall_timeout_ms");
    }
    if let Some(headers) = patch.headers {
        settings.headers.extend(headers);
        set.push("headers");
    }
    if let Some(options) = patch.provider_options {
        let mut merged = match settings.provider_options.take() {
            Some(Value::Object(existing)) => existing,
            _ => Map::new(),
        };
        merged.extend(options);
        settings.provider_options = Some(Value::Object(merged));
        set.push("provider_options");
    }
    let ignored: Vec<&str> = [
        ("model", patch.model.is_some()),
        ("tools", patch.tools.is_some()),
        ("stop_when", patch.stop_when.is_some()),
        ("transforms", patch.transforms.is_some()),
        ("output", patch.output.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, present)| present.then_some(name))
    .collect();
    if !ignored.is_empty() {
        tracing::debug!(extension, ?ignored, "extension before_turn fields ignored");
    }
    resolved.overrides.extend(
        set.into_iter()
            .map(|field| format!("ext:{extension}:{field}")),
    );
}

/// Offers a decided tool call to every `before_tool_call` subscriber.
pub(crate) async fn before_tool_call(
    inner: &Inner,
    turn_id: Option<&str>,
    ctx: &ToolCallContext,
) -> Result<(), EngineError> {
    let mut subscribers = inner
        .options
        .extensions
        .subscribed(ExtensionHook::BeforeToolCall)
        .peekable();
    if subscribers.peek().is_none() {
        return Ok(());
    }
    let host = SessionHost { inner };
    let snapshot = ToolCallSnapshot {
        tool_name: ctx.tool_name.clone(),
        tool_call_id: ctx.tool_call_id.clone(),
        input: ctx.input.clone(),
        step_number: ctx.step_number,
        dynamic: ctx.dynamic,
    };
    for extension in subscribers {
        let fut = extension.before_tool_call(&snapshot, &host);
        guarded(
            inner,
            turn_id,
            &**extension,
            ExtensionHook::BeforeToolCall,
            fut,
        )
        .await?;
    }
    Ok(())
}

/// Offers a tool call's outcome to every `after_tool_call` subscriber.
pub(crate) async fn after_tool_call(
    inner: &Inner,
    turn_id: Option<&str>,
    ctx: &ToolCallResultContext,
) -> Result<(), EngineError> {
    let mut subscribers = inner
        .options
        .extensions
        .subscribed(ExtensionHook::AfterToolCall)
        .peekable();
    if subscribers.peek().is_none() {
        return Ok(());
    }
    let host = SessionHost { inner };
    let snapshot = ToolResultSnapshot {
        tool_name: ctx.tool_name.clone(),
        tool_call_id: ctx.tool_call_id.clone(),
        input: ctx.input.clone(),
        step_number: ctx.step_number,
        duration_ms: ctx.duration_ms,
        success: ctx.success,
        output: ctx.output.clone(),
        error: ctx.error.clone(),
        dynamic: ctx.dynamic,
    };
    for extension in subscribers {
        let fut = extension.after_tool_call(&snapshot, &host);
        guarded(
            inner,
            turn_id,
            &**extension,
            ExtensionHook::AfterToolCall,
            fut,
        )
        .await?;
    }
    Ok(())
}

/// At a step's end: each extension delivers the chunks it batched, then sees the step.
pub(crate) async fn on_step_finish(
    inner: &Inner,
    turn_id: Option<&str>,
    ctx: &StepContext,
) -> Result<(), EngineError> {
    let extensions = &inner.options.extensions;
    if extensions.is_empty() {
        return Ok(());
    }
    let host = SessionHost { inner };
    let record = &ctx.record;
    let snapshot = StepSnapshot {
        step_number: ctx.step_number,
        finish_reason: record.finish_reason.as_str().to_owned(),
        text: record.text.clone(),
        reasoning_text: record.reasoning_text.clone(),
        tool_call_count: u32::try_from(record.tool_calls.len()).unwrap_or(u32::MAX),
        tool_result_count: u32::try_from(record.tool_results.len()).unwrap_or(u32::MAX),
        usage: UsageSnapshot::from(&record.usage),
        provider_metadata: record.provider_metadata.clone(),
    };
    for extension in &extensions.list {
        if extension.subscribes(ExtensionHook::OnChunk) {
            let fut = extension.flush_chunks(&host);
            guarded(inner, turn_id, &**extension, ExtensionHook::OnChunk, fut).await?;
        }
        if extension.subscribes(ExtensionHook::OnStepFinish) {
            let fut = extension.on_step_finish(&snapshot, &host);
            guarded(
                inner,
                turn_id,
                &**extension,
                ExtensionHook::OnStepFinish,
                fut,
            )
            .await?;
        }
    }
    Ok(())
}

/// Offers a logged stream part to every `on_chunk` subscriber.
pub(crate) async fn on_chunk(
    inner: &Inner,
    turn_id: Option<&str>,
    ctx: &ChunkContext,
) -> Result<(), EngineError> {
    let mut subscribers = inner
        .options
        .extensions
        .subscribed(ExtensionHook::OnChunk)
        .peekable();
    if subscribers.peek().is_none() {
        return Ok(());
    }
    let host = SessionHost { inner };
    let snapshot = ChunkSnapshot::from(&ctx.chunk);
    for extension in subscribers {
        let fut = extension.on_chunk(&snapshot, &host);
        guarded(inner, turn_id, &**extension, ExtensionHook::OnChunk, fut).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_snapshots_carry_text_and_tool_identity() {
        let text = ChunkSnapshot::from(&StreamPart::TextDelta {
            id: "t".into(),
            text: "hi".into(),
        });
        assert_eq!(
            serde_json::to_value(&text).unwrap(),
            serde_json::json!({"type": "text-delta", "text": "hi"})
        );
        let call = ChunkSnapshot::from(&StreamPart::ToolCall {
            call_id: "c1".into(),
            tool_name: "search".into(),
            input: "{}".into(),
        });
        assert_eq!(call.tool_name.as_deref(), Some("search"));
        assert_eq!(call.tool_call_id.as_deref(), Some("c1"));
        assert_eq!(call.text, None);
    }

    #[test]
    fn a_seed_shaped_patch_decodes_with_ignored_fields() {
        let patch = TurnConfigPatch::from_json(&serde_json::json!({
            "system": "s",
            "model": "other-model",
            "tools": {"x": {}},
            "activeTools": ["search"],
            "toolChoice": {"type": "tool", "toolName": "search"},
            "timeout": {"totalMs": 1000},
            "chatStreamStallTimeoutMs": 0
        }))
        .unwrap()
        .unwrap();
        assert_eq!(patch.system.as_deref(), Some("s"));
        assert_eq!(patch.active_tools, Some(vec!["search".to_owned()]));
        assert!(patch.model.is_some());
        assert_eq!(patch.timeout.unwrap().total_ms, Some(1000));
        assert_eq!(patch.chat_stream_stall_timeout_ms, Some(0));
        assert_eq!(
            ToolChoice::from(patch.tool_choice.unwrap()),
            ToolChoice::Tool {
                tool_name: "search".into()
            }
        );
        let required = TurnConfigPatch::from_json(&serde_json::json!({"toolChoice": "required"}))
            .unwrap()
            .unwrap();
        assert_eq!(
            ToolChoice::from(required.tool_choice.unwrap()),
            ToolChoice::Required
        );
        assert_eq!(TurnConfigPatch::from_json(&Value::Null), Ok(None));
    }

    #[test]
    fn a_reply_field_that_is_unknown_or_mistyped_is_named() {
        let unknown = TurnConfigPatch::from_json(&serde_json::json!({"active_tools": ["a"]}));
        assert_eq!(
            unknown,
            Err(PatchError::UnknownField {
                field: "active_tools".into()
            })
        );
        let mistyped = TurnConfigPatch::from_json(&serde_json::json!({
            "system": "fine",
            "maxSteps": "three"
        }))
        .unwrap_err();
        assert!(
            matches!(&mistyped, PatchError::BadValue { field, .. } if field == "maxSteps"),
            "{mistyped}"
        );
        let nested =
            TurnConfigPatch::from_json(&serde_json::json!({"timeout": {"total": 5}})).unwrap_err();
        assert!(
            matches!(&nested, PatchError::BadValue { field, .. } if field == "timeout"),
            "{nested}"
        );
        assert_eq!(
            TurnConfigPatch::from_json(&serde_json::json!([1])),
            Err(PatchError::NotAnObject("an array"))
        );
    }
}
