//! What each hook receives, and what `before_tool_call` may decide. Field names follow the
//! seed (in snake_case); where mull tells more than Think (the step number of a tool call, the
//! effective input and the decision after a call) the docs say so.

use std::sync::Arc;

use mull_core::{
    ChatErrorClassification, DecisionAction, EntryPath, ErrorStage, LanguageModel, ModelMessage,
    StepRecord, StreamPart, TurnStatus, UIMessage,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::tool::ToolSet;

/// What `before_turn` sees: the fully assembled context of the turn.
#[derive(Clone)]
pub struct TurnContext {
    /// The assembled system prompt.
    pub system: String,
    /// The conversation as model messages (old oversized parts truncated).
    pub messages: Vec<ModelMessage>,
    /// Every tool of the turn, merged.
    pub tools: ToolSet,
    /// The model the turn will use unless overridden.
    pub model: Arc<dyn LanguageModel>,
    /// Whether this turn continues the previous one (after tool results, or `continue_last_turn`).
    pub continuation: bool,
    /// Custom fields from the caller's request.
    pub body: Value,
    /// The request this turn serves.
    pub request_id: String,
    /// How the turn was started.
    pub entry: EntryPath,
    /// Cancelled when the turn is aborted (`cancel_chat`, `abort_all`, the caller's signal):
    /// a hook doing slow work of its own can stop with it. The engine also stops waiting for a
    /// hook once it fires, so even a hook that ignores it cannot hold the turn.
    pub abort: CancellationToken,
}

impl TurnContext {
    /// Which entry path started the turn (Think's `trigger`; the same as [`TurnContext::entry`]).
    pub fn trigger(&self) -> EntryPath {
        self.entry
    }
}

/// What `before_step` sees (the AI SDK's prepare-step context).
#[derive(Clone)]
pub struct PrepareStepContext {
    /// Steps that already completed in this turn.
    pub steps: Vec<StepRecord>,
    /// Zero-based number of the step about to run.
    pub step_number: u32,
    /// The model selected for this step.
    pub model: Arc<dyn LanguageModel>,
    /// The messages that will be sent.
    pub messages: Vec<ModelMessage>,
    /// Context passed to tool execution (set by an earlier step's config).
    pub context: Value,
}

/// What `on_step_finish` sees: the full step record.
#[derive(Debug, Clone)]
pub struct StepContext {
    /// Zero-based index of the step.
    pub step_number: u32,
    /// Text, reasoning, sources, files, tool calls and results, finish reason (unified and
    /// raw), usage, warnings, request and response metadata, provider metadata.
    pub record: StepRecord,
    /// The reasoning blocks of the step, one string per block.
    pub reasoning: Vec<String>,
    /// The assistant and tool messages the step produced, as the next step's model sees them.
    pub response_messages: Vec<ModelMessage>,
}

/// What `on_chunk` sees: one stream part, as the user saw it.
#[derive(Debug, Clone)]
pub struct ChunkContext {
    pub chunk: StreamPart,
    pub step_number: u32,
    pub request_id: String,
}

/// What `before_tool_call` may decide.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolCallDecision {
    /// Run execute with the model's input (the same as deciding nothing).
    Allow,
    /// Run execute with this input instead (not re-validated).
    AllowWithInput(Value),
    /// Do not run; the model sees the reason, or `Tool "<name>" was blocked by beforeToolCall.`
    Block { reason: Option<String> },
    /// Do not run; the model sees `output`. `input` records what the call is taken to have been.
    Substitute { output: Value, input: Option<Value> },
    /// Ask a person first: the call parks (a `tool_approval_requested` event) and the turn
    /// ends; an approval runs it with the model's input in the turn that follows, a denial
    /// answers it like a block. `reason` tells the person why.
    RequireApproval { reason: Option<String> },
}

/// What `before_tool_call` sees.
#[derive(Debug, Clone)]
pub struct ToolCallContext {
    pub tool_call_id: String,
    pub tool_name: String,
    /// The input the model provided (validated against the tool's schema).
    pub input: Value,
    /// Whether the tool was registered at runtime.
    pub dynamic: bool,
    pub provider_metadata: Option<Value>,
    /// The step in which the call occurs. Think leaves this undefined; mull fills it.
    pub step_number: u32,
    /// The conversation visible at tool execution time.
    pub messages: Vec<ModelMessage>,
    /// Cancelled when the turn is aborted.
    pub abort: CancellationToken,
}

/// What `after_tool_call` sees: the outcome as the model sees it.
#[derive(Debug, Clone)]
pub struct ToolCallResultContext {
    pub tool_call_id: String,
    pub tool_name: String,
    /// The input the model emitted (as Think reports it).
    pub input: Value,
    /// The input execute actually ran with (mull adds this; differs after allow-with-input).
    pub effective_input: Value,
    /// What `before_tool_call` decided (mull adds this so a block is told from a real success).
    pub decision: DecisionAction,
    pub dynamic: bool,
    pub step_number: u32,
    pub messages: Vec<ModelMessage>,
    /// Wall time of execute from the injected clock; 0 when execute did not run.
    pub duration_ms: u64,
    /// True for real successes and for block / substitute; false when execute (or the hook) failed.
    pub success: bool,
    pub output: Option<Value>,
    pub error: Option<String>,
}

/// What `on_chat_response` sees once a turn ended and its message was persisted.
#[derive(Debug, Clone)]
pub struct ChatResponseResult {
    /// The persisted assistant message (no parts when the turn produced none).
    pub message: UIMessage,
    pub request_id: String,
    pub continuation: bool,
    pub status: TurnStatus,
    /// The error message, when status is `error`.
    pub error: Option<String>,
    /// This call is a redelivery after a crash: the turn ended in an earlier process, whose
    /// `on_chat_response` never finished (see `SessionConfig::redeliver_chat_response`). Effects
    /// keyed by `request_id` stay idempotent.
    pub recovered: bool,
}

/// Where a turn failed, for `on_chat_error` and `classify_chat_error`.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatErrorContext {
    pub request_id: Option<String>,
    pub stage: ErrorStage,
    /// Whether the incoming user messages were stored.
    pub messages_persisted: bool,
    /// `context_overflow` on the terminal call when overflow recovery could not save the turn.
    pub classification: Option<ChatErrorClassification>,
}

/// What `on_recovery_exhausted` sees: a turn whose bounded recovery from transient or
/// rate-limit errors gave up. The turn then ends with a terminal error (`on_chat_error` and
/// `on_chat_response` follow as for any failed turn).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RecoveryExhausted {
    pub request_id: String,
    /// How many recovery attempts ran before giving up.
    pub attempts: u32,
    /// What `classify_chat_error` called the last error.
    pub classification: ChatErrorClassification,
    /// The last error's message.
    pub error: String,
}
