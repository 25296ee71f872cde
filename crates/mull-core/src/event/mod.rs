//! The event log's vocabulary: one closed [`Event`] enum and the [`Envelope`] that places an
//! event in the log.
//!
//! The rule: if a hook or a user could observe it, it is an event. Hook decisions are events
//! too, which is what lets a recorded session be re-executed against new hook code.
//!
//! Events are stored as JSON with a `type` tag. A payload whose `type` this build does not know
//! (written by a newer mull) decodes to [`Event::Unknown`] holding the raw JSON, so it is shown
//! and exported, never dropped. A payload whose `type` is known but whose fields do not fit is an
//! error, not an unknown event.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::budget::{BudgetLimits, BudgetMeasure, BudgetScope, BudgetSpend, ModelCallKind};
use crate::classify::ChatErrorClassification;
use crate::message::{ToolPartState, UIMessage};
use crate::model::{ModelErrorRecord, ToolChoice};
use crate::stream::{StreamPart, Usage};

mod records;
pub use records::{StepRecord, StepReport, ToolCallRecord, ToolResultRecord, TurnConfigRecord};

/// The payload version this build writes. Readers upcast older versions on decode.
pub const EVENT_VERSION: u16 = 1;

/// An event in its place in the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Position in the database, assigned at append; strictly increasing.
    pub seq: u64,
    pub session_id: String,
    /// The turn this event belongs to, if any.
    pub turn_id: Option<String>,
    /// When it happened, from the injected clock.
    pub at: DateTime<Utc>,
    /// Version of the payload's shape.
    pub v: u16,
    pub event: Event,
}

/// An [`Envelope`] borrowed in parts and without its session id: what a fold that already
/// knows its session reads, so the engine can fold the event it has just appended without
/// copying its ids into an envelope first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EventRef<'a> {
    pub seq: u64,
    pub at: DateTime<Utc>,
    pub turn_id: Option<&'a str>,
    pub event: &'a Event,
}

impl<'a> EventRef<'a> {
    /// The parts of `env`.
    pub fn of(env: &'a Envelope) -> EventRef<'a> {
        EventRef {
            seq: env.seq,
            at: env.at,
            turn_id: env.turn_id.as_deref(),
            event: &env.event,
        }
    }
}

/// How a turn was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EntryPath {
    /// A library call that streams parts back.
    Chat,
    /// `save_messages`: append messages and run a turn.
    SaveMessages,
    /// A durable submission.
    SubmitMessages,
    /// `continue_last_turn`.
    ContinueLastTurn,
    /// The automatic turn after client tool results arrived.
    AutoContinue,
    /// A network chat request.
    Http,
    /// A regeneration: the answer being regenerated was retracted and a new one runs.
    Regenerate,
    /// A sub-agent's turn: another session's tool call runs it (see [`Event::SubagentLinked`]).
    SubAgent,
}

/// How a turn ended (or that it has not yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    Running,
    Completed,
    Error,
    Aborted,
    /// Left running by a writer that is gone: what readers show until the next writer to open
    /// the log resolves it (as an error at stage `recovery`). Never written in an event.
    Interrupted,
}

impl TurnStatus {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnStatus::Running => "running",
            TurnStatus::Completed => "completed",
            TurnStatus::Error => "error",
            TurnStatus::Aborted => "aborted",
            TurnStatus::Interrupted => "interrupted",
        }
    }
}

/// Where in a turn a failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorStage {
    /// A request body could not be decoded; nothing was persisted.
    Parse,
    /// Saving the user's messages failed.
    Persist,
    /// Turn setup: model resolution, `before_turn`, authorization, empty context.
    Turn,
    /// The model stream.
    Stream,
    /// Resuming an interrupted turn after a restart.
    Recovery,
    /// Repairing the history.
    Transcript,
    /// A budget check before a model call: a limit was used up (see
    /// [`Event::BudgetExceeded`]).
    Budget,
}

/// The hooks of an agent, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookName {
    ConfigureSession,
    BeforeTurn,
    BeforeStep,
    BeforeToolCall,
    AfterToolCall,
    OnStepFinish,
    OnChunk,
    OnChatResponse,
    OnChatError,
    ClassifyChatError,
    OnCompaction,
    /// A context block's provider (`configure_session` or `configure_context` set it up; it
    /// is asked for the block's content before a turn).
    ContextBlockProvider,
    /// `on_recovery_exhausted`, when a turn's bounded recovery from transient or rate-limit
    /// errors gave up.
    OnRecoveryExhausted,
}

/// What was decided about a tool call before it could run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionAction {
    /// Run execute with the model's input.
    Allow,
    /// Run execute with an input the hook supplied.
    Rewrite,
    /// Do not run; the model sees the reason.
    Block,
    /// Do not run; the model sees the supplied output.
    Substitute,
    /// The model's input failed the tool's schema (or was not JSON); no hook ran.
    Invalid,
    /// `before_tool_call` itself failed; the call counts as a failed execution.
    HookFailed,
    /// A person denied the approval the call waited for (or the request expired): the
    /// block semantics of Think, the model sees the reason as the tool's output.
    Denied,
}

impl DecisionAction {
    /// Whether execute runs under this decision.
    pub fn executes(self) -> bool {
        matches!(self, DecisionAction::Allow | DecisionAction::Rewrite)
    }

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionAction::Allow => "allow",
            DecisionAction::Rewrite => "rewrite",
            DecisionAction::Block => "block",
            DecisionAction::Substitute => "substitute",
            DecisionAction::Invalid => "invalid",
            DecisionAction::HookFailed => "hook_failed",
            DecisionAction::Denied => "denied",
        }
    }
}

/// Why a compaction ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactionReason {
    /// After the model reported a context overflow.
    Reactive,
    /// Before a step whose input would near the context limit.
    Proactive,
    /// Because the session grew past `compact_after`.
    Threshold,
    /// Asked for by the application.
    Manual,
}

/// Who gave a context block its new value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextBlockSource {
    /// The block's provider computed it for a turn.
    Provider,
    /// The model wrote it through the session's `update_context` tool.
    Model,
    /// The application set it.
    Application,
}

/// How a durable submission ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubmissionStatus {
    Completed,
    Error,
    Aborted,
    /// A duplicate of an earlier submission; nothing ran.
    Duplicate,
}

/// The name a unit variant (an entry path, a stage, a reason…) is written with in the log, for
/// readers that show or export it; empty for a value that is not written as a plain string.
pub fn wire_name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(name)) => name,
        _ => String::new(),
    }
}

/// Everything that can happen in a mull session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// A session was created or reopened by an agent.
    SessionOpened {
        agent: String,
        #[serde(default)]
        metadata: Value,
    },
    /// A caller asked for a turn (an input: see [`Input`](crate::input::Input)). Appended
    /// before the session acts on it, with everything needed to act on it again; the turn's
    /// own events follow once it takes the turn lock.
    TurnRequested {
        request_id: String,
        entry: EntryPath,
        /// The messages to add (`chat`, `http`, `save_messages`); they enter the conversation
        /// with the turn's `user_messages_saved`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        messages: Vec<UIMessage>,
        #[serde(default)]
        body: Value,
        /// A regeneration's named message (`None`: the last one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
        /// Tools the client answers itself.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        client_tools: Vec<crate::model::ToolSpec>,
    },
    /// User (or application) messages were appended to the conversation.
    UserMessagesSaved {
        request_id: Option<String>,
        messages: Vec<UIMessage>,
    },
    /// A turn attempt began.
    TurnStarted {
        request_id: String,
        /// Id of the assistant message this turn writes.
        message_id: String,
        entry: EntryPath,
        continuation: bool,
        /// 0 for the first attempt; overflow recovery re-runs with the same request id.
        attempt: u32,
        /// Free-form fields from the caller, as hooks see them.
        body: Value,
    },
    /// `before_turn` (and extensions) decided; this is what the turn runs with.
    TurnConfigured { config: Box<TurnConfigRecord> },
    /// A step is about to be prepared.
    StepStarted { step: u32 },
    /// `before_step` decided; this is what the step's model call uses.
    StepConfigured {
        step: u32,
        model_id: String,
        active_tools: Option<Vec<String>>,
        tool_choice: ToolChoice,
        system: Option<String>,
        message_count: u32,
        /// Which fields `before_step` changed.
        overrides: Vec<String>,
        /// The [`ModelRequest::canonical_hash`](crate::ModelRequest::canonical_hash) of the
        /// request this step sends, recorded before the call starts so that a step cut short
        /// (cancelled, failed) can still be served again by a replay. Absent in older logs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_hash: Option<String>,
    },
    /// A turn failed with an error `classify_chat_error` called transient or a rate limit, and
    /// bounded recovery runs it again (same request id, a new attempt) after `delay_ms`: one
    /// event per recovery attempt, written (and flushed) before the wait. When the attempts are
    /// used up the turn ends with a `turn_failed` carrying the classification instead.
    RecoveryScheduled {
        request_id: String,
        /// 1 for the first recovery of this request.
        attempt: u32,
        /// The configured bound on recovery attempts.
        max_attempts: u32,
        classification: ChatErrorClassification,
        error: String,
        delay_ms: u64,
    },
    /// A model call failed in a retryable way and will be tried again.
    ModelRetried {
        step: u32,
        attempt: u32,
        error: String,
        delay_ms: u64,
    },
    /// `TurnConfig::message_metadata` answered a stream part of step `step` with metadata for
    /// the assistant message: shallow-merged into the message's metadata (a later key wins),
    /// persisted with it, and sent to clients as the AI SDK's message metadata. Written right
    /// after the part's `chunk`.
    MessageMetadataUpdated {
        step: u32,
        metadata: serde_json::Map<String, Value>,
    },
    /// One stream part, as the user saw it (after transforms).
    Chunk {
        step: u32,
        part: StreamPart,
        /// The part before a stream transform changed it one for one. Written by older builds;
        /// this one records every change as a `part_transformed` event before the chunks.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        original: Option<Box<StreamPart>>,
    },
    /// Stream transforms changed a part: `original` is what the model (or a tool) produced, and
    /// the next `shown` chunk events of the step are what the transforms made of it (none when
    /// they dropped it). Readers of what the user saw read the chunks; readers of what the model
    /// sent (replay) read `original` and skip those chunks.
    PartTransformed {
        step: u32,
        original: StreamPart,
        shown: u32,
    },
    /// The model called a tool.
    ToolCallStarted {
        step: u32,
        call_id: String,
        tool: String,
        /// The parsed input, or the raw text when it was not JSON.
        input: Value,
        /// A tool with no execute: the client must answer.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        client: bool,
        /// A tool its source may change at run time (an MCP server's): the AI SDK's dynamic
        /// tool call.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        dynamic: bool,
    },
    /// What happens to the call; written and flushed before execute starts.
    ToolDecided {
        step: u32,
        call_id: String,
        tool: String,
        action: DecisionAction,
        model_input: Value,
        effective_input: Value,
        reason: Option<String>,
        /// The output the model sees for block / substitute.
        output: Option<Value>,
    },
    /// The call's outcome, as the model sees it.
    ToolCallFinished {
        step: u32,
        call_id: String,
        tool: String,
        success: bool,
        output: Option<Value>,
        error: Option<String>,
        duration_ms: u64,
    },
    /// A client answered a client-side tool call.
    ClientToolResult {
        call_id: String,
        tool: String,
        state: ToolPartState,
        output: Option<Value>,
        error: Option<String>,
    },
    /// A tool call waits for a person's approval: `before_tool_call` or the tool's
    /// `needs_approval` rule asked for it. Written (and flushed) instead of a `tool_decided`;
    /// the step ends and the turn finishes parked. Nothing waits in memory: the answer is a
    /// [`Event::ToolApprovalAnswered`] input, and the turn that follows it runs or denies the
    /// call.
    ToolApprovalRequested {
        step: u32,
        call_id: String,
        tool: String,
        /// The id the answer names (from the injected id source).
        approval_id: String,
        /// The input the call runs with once approved (a hook's rewrite applied).
        input: Value,
        /// Why approval was asked, when the hook said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// When an unanswered request turns into a denial (none: it waits forever).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expires_at: Option<DateTime<Utc>>,
    },
    /// The answer to a [`Event::ToolApprovalRequested`]: an input event, appended (and
    /// flushed) before anything acts on it. An expired request is answered by the session
    /// itself, as a denial with `expired` set.
    ToolApprovalAnswered {
        approval_id: String,
        call_id: String,
        tool: String,
        approved: bool,
        /// The person's reason (for a denial, what the model sees).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        expired: bool,
        /// Who answered: the surface the answer came through (`mull dash`, `mull approve`, a
        /// chat client, the demo approving by itself), so a reader can tell a person's answer
        /// from an unattended one. Absent in logs written before it was recorded, and on an
        /// expiry (the session's own doing).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// A tool call left without a result by an interrupted turn was closed with an error.
    ToolCallRepaired {
        message_id: String,
        call_id: String,
        tool: String,
        error_text: String,
    },
    /// A step's model call ended: how (its content is in its chunks and tool call events).
    StepFinished { record: Box<StepReport> },
    /// The assistant message of a turn was persisted.
    AssistantMessageSaved {
        request_id: String,
        message: UIMessage,
    },
    /// A turn ended.
    TurnFinished {
        request_id: String,
        status: TurnStatus,
        error: Option<String>,
        steps: u32,
        usage: Usage,
        /// This is the request's last end, and its `on_chat_response` is owed until a
        /// `chat_response_delivered` of the request follows: a process that dies before then
        /// leaves it owed, and the next open calls the hook again, `recovered` (Think's
        /// redelivery). Set on a turn's final end unless the session opted out
        /// (`SessionConfig::redeliver_chat_response(false)`), and always on a recovery's
        /// interrupted end (the log's recovery cannot know the session's choice; an opted-out
        /// session never redelivers it); false on an attempt a retry replaced, and absent from
        /// logs written before deliveries were recorded, so reopening such a log redelivers
        /// nothing from before.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        response_owed: bool,
    },
    /// A failure, with its stage. `error` is the message callers were given; `model_error`,
    /// when the failure came from a model call, is that call's error as the model gave it
    /// (before `on_chat_error`).
    TurnFailed {
        request_id: Option<String>,
        stage: ErrorStage,
        messages_persisted: bool,
        classification: Option<ChatErrorClassification>,
        error: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model_error: Option<ModelErrorRecord>,
    },
    /// A model call the compaction callback made to write its summary (one per call, written
    /// right before the compaction's `compaction_applied`), so summaries are priced like steps.
    /// `finished` is false when the call failed or was cut off before the provider reported
    /// usage: its cost is unknown, never zero.
    CompactionCall {
        provider: String,
        model_id: String,
        finished: bool,
        #[serde(default)]
        usage: Usage,
    },
    /// History was compacted: the messages in `replaced_ids` are shown as `summary`.
    CompactionApplied {
        reason: CompactionReason,
        attempt: u32,
        shortened: bool,
        replaced_ids: Vec<String>,
        summary: Option<UIMessage>,
        tokens_before: u64,
        tokens_after: u64,
    },
    /// A context block got a new value. Block values live in the log: the system prompt built
    /// from the blocks changes only after one of these.
    ContextBlockUpdated {
        block: String,
        content: String,
        source: ContextBlockSource,
        /// The tool call that wrote it, when the model did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
    },
    /// Messages were taken out of the conversation (the answer being regenerated, and
    /// everything after it). The log keeps them; the projection no longer shows them.
    MessagesRetracted {
        /// The request that retracted them.
        request_id: Option<String>,
        /// The retracted messages, in conversation order.
        message_ids: Vec<String>,
    },
    /// A durable submission was accepted (before anything runs).
    SubmissionAccepted {
        submission_id: String,
        idempotency_key: Option<String>,
        messages: Vec<UIMessage>,
        body: Value,
    },
    /// A submission's messages were applied and its turn began.
    SubmissionApplied {
        submission_id: String,
        request_id: String,
    },
    /// A submission ended.
    SubmissionFinished {
        submission_id: String,
        request_id: Option<String>,
        status: SubmissionStatus,
        error: Option<String>,
    },
    /// A hook failed, panicked or timed out; the turn went on as the rules say.
    HookFailed {
        hook: HookName,
        /// `agent`, or the extension's name.
        source: String,
        error: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        panicked: bool,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        timed_out: bool,
    },
    /// Someone asked to cancel a turn (`None`: every turn of the session).
    CancellationRequested {
        request_id: Option<String>,
        reason: String,
    },
    /// This session is a fork: its history is `origin`'s events up to and including
    /// `origin_seq` (resolved by readers, not copied), then its own. Always a fork's first
    /// event. A turn the fork point cuts is shown as aborted, with what it streamed so far as
    /// the partial assistant message.
    SessionForked {
        origin: String,
        origin_seq: u64,
        /// The turn the fork point is in, when it is inside one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin_turn: Option<String>,
    },
    /// A sub-agent's turn, parent side: tool call `call_id` of this turn runs agent `agent`'s
    /// turn in the child session `child_session_id`, at nesting `depth` (1 under a session
    /// nobody started). The child's `subagent_linked` names this session, turn and call back.
    /// Written (and flushed) before the child session opens.
    SubagentStarted {
        step: u32,
        call_id: String,
        tool: String,
        agent: String,
        child_session_id: String,
        depth: u32,
    },
    /// A sub-agent's turn ended, parent side. `usage` is the child session's total (its own
    /// sub-agents included); the projection folds it into this session's and turn's totals
    /// once, here, so nobody sums child sessions a second time.
    SubagentFinished {
        call_id: String,
        child_session_id: String,
        status: TurnStatus,
        usage: Usage,
        /// The child session's spend (its own sub-agents' included), counted against the
        /// parent's budgets here, once. Absent when the child kept no budget.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spend: Option<BudgetSpend>,
    },
    /// A sub-agent's session, child side: its turns run for the tool call `parent_call_id` of
    /// turn `parent_turn_id` in session `parent_session_id`, at nesting `depth`. Written right
    /// after the child's `session_opened`, before its first turn.
    SubagentLinked {
        parent_session_id: String,
        parent_turn_id: String,
        parent_call_id: String,
        depth: u32,
        /// The parent's remainder when the sub-agent started: the limits every call of this
        /// session is held to (absent when the parent had no budget).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget: Option<BudgetLimits>,
    },
    /// A budget check before a model call found a limit of `scope` used up: the call was not
    /// made, and the turn ends at stage `budget` (its `turn_failed` follows). `limit` and
    /// `spent` are in the unit of `measure` (tokens, dollars, calls); `remaining` is what is
    /// left of every limit of the scope. A function of the log before it: a replay decides the
    /// same at the same place.
    BudgetExceeded {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
        scope: BudgetScope,
        measure: BudgetMeasure,
        limit: f64,
        spent: f64,
        remaining: BudgetLimits,
        /// The call that was not made.
        call: ModelCallKind,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<u32>,
    },
    /// `on_chat_response` of `request_id` returned (a failure recorded as `hook_failed` first):
    /// the delivery its `turn_finished` marked owed is made. `recovered`: it was the redelivery
    /// of a reopen, after a crash. One per turn, written after the turn lock is released.
    ChatResponseDelivered {
        request_id: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        recovered: bool,
    },
    /// An event of a kind this build does not know, kept verbatim (only [`Event::decode`]
    /// produces it; serde's derive stays strict so a known kind with a bad shape is an error).
    #[serde(untagged, skip_deserializing)]
    Unknown(Value),
}

/// An event payload that could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum EventDecodeError {
    #[error("event payload is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("event payload has no string \"type\" field")]
    NoType,
    #[error("event of kind {kind:?} does not fit its shape: {source}")]
    BadShape {
        kind: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("event payload version {0} is newer than this build understands for a known kind")]
    TooNew(u16),
}

macro_rules! kinds {
    ($($variant:ident => $name:literal),* $(,)?) => {
        /// Every kind this build knows, as written in the `type` field.
        pub const KNOWN_KINDS: &'static [&'static str] = &[$($name),*];

        /// The event's `type`, or the raw `type` of an unknown event.
        pub fn kind(&self) -> &str {
            match self {
                $(Event::$variant { .. } => $name,)*
                Event::Unknown(raw) => raw.get("type").and_then(Value::as_str).unwrap_or("unknown"),
            }
        }
    };
}

impl Event {
    kinds! {
        SessionOpened => "session_opened",
        TurnRequested => "turn_requested",
        UserMessagesSaved => "user_messages_saved",
        TurnStarted => "turn_started",
        TurnConfigured => "turn_configured",
        StepStarted => "step_started",
        StepConfigured => "step_configured",
        ModelRetried => "model_retried",
        RecoveryScheduled => "recovery_scheduled",
        Chunk => "chunk",
        MessageMetadataUpdated => "message_metadata_updated",
        PartTransformed => "part_transformed",
        ToolCallStarted => "tool_call_started",
        ToolDecided => "tool_decided",
        ToolCallFinished => "tool_call_finished",
        ClientToolResult => "client_tool_result",
        ToolApprovalRequested => "tool_approval_requested",
        ToolApprovalAnswered => "tool_approval_answered",
        ToolCallRepaired => "tool_call_repaired",
        StepFinished => "step_finished",
        AssistantMessageSaved => "assistant_message_saved",
        TurnFinished => "turn_finished",
        TurnFailed => "turn_failed",
        CompactionCall => "compaction_call",
        CompactionApplied => "compaction_applied",
        ContextBlockUpdated => "context_block_updated",
        MessagesRetracted => "messages_retracted",
        SubmissionAccepted => "submission_accepted",
        SubmissionApplied => "submission_applied",
        SubmissionFinished => "submission_finished",
        HookFailed => "hook_failed",
        CancellationRequested => "cancellation_requested",
        SessionForked => "session_forked",
        SubagentStarted => "subagent_started",
        SubagentFinished => "subagent_finished",
        SubagentLinked => "subagent_linked",
        BudgetExceeded => "budget_exceeded",
        ChatResponseDelivered => "chat_response_delivered",
    }

    /// Decodes a stored payload of version `v`. Unknown kinds come back as [`Event::Unknown`];
    /// a known kind that does not fit its shape is an error naming the kind.
    pub fn decode(v: u16, payload: &str) -> Result<Event, EventDecodeError> {
        match serde_json::from_str::<Event>(payload) {
            Ok(event) => Ok(event),
            Err(err) => {
                let raw: Value =
                    serde_json::from_str(payload).map_err(EventDecodeError::NotJson)?;
                let kind = raw
                    .get("type")
                    .and_then(Value::as_str)
                    .ok_or(EventDecodeError::NoType)?;
                if !Self::KNOWN_KINDS.contains(&kind) {
                    return Ok(Event::Unknown(raw));
                }
                if v > EVENT_VERSION {
                    return Err(EventDecodeError::TooNew(v));
                }
                Err(EventDecodeError::BadShape {
                    kind: kind.to_owned(),
                    source: err,
                })
            }
        }
    }

    /// Encodes the payload as stored: compact JSON with fields in declaration order.
    pub fn encode(&self) -> String {
        // Most rows are deltas: written directly, the same bytes.
        if let Event::Chunk {
            step,
            part,
            original: None,
        } = self
        {
            if let Some(payload) = crate::delta_payload::encode(*step, part) {
                return payload;
            }
        }
        // Serializing plain data cannot fail: no maps with non-string keys, no foreign types.
        serde_json::to_string(self).unwrap_or_else(|e| {
            format!(
                "{{\"type\":\"encode_error\",\"error\":{:?}}}",
                e.to_string()
            )
        })
    }

    /// Whether the event must be durable before the engine proceeds (a flush barrier).
    pub fn needs_flush(&self) -> bool {
        !matches!(self, Event::Chunk { .. })
    }
}

impl Envelope {
    /// The event's kind.
    pub fn kind(&self) -> &str {
        self.event.kind()
    }
}

#[cfg(test)]
mod tests;
