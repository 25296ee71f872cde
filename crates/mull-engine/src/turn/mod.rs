//! One turn, in the seed's order, for every entry path:
//!
//! ```text
//! (queue) → user_messages_saved → transcript repair → turn_started (flushed) → assemble context
//!   → before_turn → turn_configured
//!   → per step: step_started → before_step → step_configured → model call (retries)
//!       → each part: transforms → [part_transformed] → chunk event → client → on_chunk (the
//!         seed's chunk kinds only; a tool-call's on_chunk waits until its hooks ran)
//!       → each tool call: validate → before_tool_call → tool_decided (flushed) → execute /
//!         block / substitute → tool_call_finished → after_tool_call → tool-result chunk
//!         (or, when approval is asked: tool_approval_requested (flushed), the turn parks —
//!         the next turn acts on the answer before it assembles its context: approval.rs)
//!     → step_finished → on_step_finish → stop conditions → (barrier before the next step)
//!   → assistant_message_saved → turn_finished (flushed) → [turn_failed → on_chat_error]
//! (lock released) → on_chat_response, while the next queued turn may already run
//! ```
//!
//! Every fact is appended through the session's recorder, which keeps the projection current;
//! the turn reads the draft message and the conversation from that projection.

mod approval;
mod assemble;
mod attempt;
mod failure;
mod recovery;
mod step;
mod tool_call;

use std::sync::Arc;

use mull_core::{
    CallWarning, DecisionAction, EntryPath, ErrorStage, Event, FinishReason, ModelError,
    ModelMessage, Source, StepRecord, StreamPart, ToolCallRecord, ToolResultRecord, ToolSpec,
    UIMessage, Usage,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::error::{ChatError, EngineError};
use crate::hooks::{dispatch, Observed};
use crate::runtime::{OutcomeStatus, Runtime, TurnOutcome, TurnScope, TURN_SCOPE};
use crate::tool::{ToolExecution, ToolSet};

use attempt::{persist_messages, run_attempt};
pub(crate) use failure::fail;
pub(crate) use recovery::finish_interrupted;

/// What a tool call cut off by an abort shows the model and `after_tool_call`.
pub const ABORTED_TOOL_CALL: &str = "The tool call was aborted.";

/// The text a repaired tool call shows.
pub use mull_store::recovery::INTERRUPTED_TOOL_CALL;

pub use crate::memory::compaction::{CONTEXT_KEEP_LAST, CONTEXT_TRUNCATE_CHARS};

/// Everything an entry path hands to the loop.
pub(crate) struct TurnSpec {
    pub entry: EntryPath,
    pub request_id: String,
    pub continuation: bool,
    pub body: Value,
    /// Messages to persist before the turn (none for continuations).
    pub messages: Vec<UIMessage>,
    pub signal: CancellationToken,
    /// Where a `chat` call reads its parts.
    pub client: Option<mpsc::UnboundedSender<StreamPart>>,
    pub submission_id: Option<String>,
    pub client_tools: Vec<ToolSpec>,
    pub caller_tools: ToolSet,
}

/// Runs an entry path's turn under the turn lock, then `on_chat_response` after the lock is
/// released (the seed's rule): whatever the hook starts — awaited or spawned — queues behind
/// the lock like any other caller, so it can neither wait for itself nor run beside another
/// turn. `held` is the lock when the caller already took it (a regeneration retracts messages
/// under the same lock as its turn).
pub(crate) async fn run_entry(
    inner: &Arc<Runtime>,
    spec: TurnSpec,
    held: Option<tokio::sync::MutexGuard<'_, ()>>,
) -> Result<TurnOutcome, EngineError> {
    let guard = match held {
        Some(guard) => guard,
        None => inner.queue.lock().await,
    };
    let scope = TurnScope {
        session_id: inner.session_id.clone(),
        request_id: spec.request_id.clone(),
    };
    let ended = TURN_SCOPE.scope(scope, run_attempts(inner, &spec)).await;
    inner.forget_request(&spec.request_id);
    drop(guard);
    let ended = ended?;
    if let Some(response) = ended.response {
        dispatch(inner, None, &response).await?;
    }
    Ok(ended.outcome)
}

/// How a turn ended, and what `on_chat_response` gets (None when it is not called).
struct Ended {
    outcome: TurnOutcome,
    response: Option<Observed>,
}

async fn run_attempts(inner: &Arc<Runtime>, spec: &TurnSpec) -> Result<Ended, EngineError> {
    if let Some(ended) = persist_messages(inner, spec).await? {
        return Ok(ended);
    }
    let mut attempt = 0;
    loop {
        let span = tracing::info_span!(
            "invoke_agent",
            otel.name = %format!("invoke_agent {}", inner.agent.name()),
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = %inner.agent.name(),
            gen_ai.conversation.id = %inner.session_id,
            gen_ai.provider.name = tracing::field::Empty,
            gen_ai.request.model = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
            mull.request_id = %spec.request_id,
            mull.attempt = i64::from(attempt),
        );
        match run_attempt(inner, spec, attempt).instrument(span).await? {
            Attempt::Retry => attempt += 1,
            Attempt::Done(ended) => return Ok(*ended),
        }
    }
}

fn outcome(
    spec: &TurnSpec,
    status: OutcomeStatus,
    error: Option<ChatError>,
    message: Option<UIMessage>,
) -> TurnOutcome {
    TurnOutcome {
        request_id: spec.request_id.clone(),
        status,
        error,
        message,
    }
}

enum Attempt {
    /// Overflow recovery compacted the history: run the turn again.
    Retry,
    Done(Box<Ended>),
}

enum StepsEnd {
    Completed,
    Aborted,
    Failed(ChatError),
}

enum StepEnd {
    Continue,
    Stop,
    Aborted,
    Failed(ChatError),
}

/// What a step accumulates from the parts it shows, for its record.
#[derive(Default)]
struct StepParts {
    text: String,
    reasoning: Vec<(String, String)>,
    sources: Vec<Source>,
    files: Vec<(String, String)>,
    tool_calls: Vec<ToolCallRecord>,
    tool_results: Vec<ToolResultRecord>,
    finish_reason: Option<FinishReason>,
    raw_finish_reason: Option<String>,
    usage: Usage,
    provider_metadata: Option<Value>,
    waits_for_client: bool,
    /// What the provider warned about the call (`stream-start`).
    warnings: Vec<CallWarning>,
    /// The provider's response metadata, folded from its `response-metadata` parts.
    response: ResponseMeta,
    /// The model's tool call whose `on_chunk` waits until the call's hooks ran (Think's order).
    deferred_call: Option<crate::hooks::Observed>,
}

/// What the provider told about its response, each field as first known.
#[derive(Default)]
struct ResponseMeta {
    id: Option<String>,
    model_id: Option<String>,
    timestamp: Option<chrono::DateTime<chrono::Utc>>,
    headers: Option<std::collections::BTreeMap<String, String>>,
}

impl StepParts {
    fn observe(&mut self, part: &StreamPart) {
        match part {
            StreamPart::TextDelta { text, .. } => self.text.push_str(text),
            StreamPart::ReasoningStart { id } => self.reasoning.push((id.clone(), String::new())),
            StreamPart::ReasoningDelta { id, text } => {
                match self.reasoning.iter_mut().rev().find(|(b, _)| b == id) {
                    Some((_, t)) => t.push_str(text),
                    None => self.reasoning.push((id.clone(), text.clone())),
                }
            }
            StreamPart::Source { source } => self.sources.push(source.clone()),
            StreamPart::File { media_type, data } => {
                self.files.push((media_type.clone(), data.clone()))
            }
            StreamPart::Finish {
                finish_reason,
                raw_finish_reason,
                usage,
                provider_metadata,
            } => {
                self.finish_reason = Some(*finish_reason);
                self.raw_finish_reason = raw_finish_reason.clone();
                self.usage = usage.clone();
                self.provider_metadata = provider_metadata.clone();
            }
            StreamPart::StreamStart { warnings } => self.warnings.extend(warnings.iter().cloned()),
            StreamPart::ResponseMetadata {
                id,
                model_id,
                timestamp,
                headers,
            } => {
                let r = &mut self.response;
                r.id = r.id.take().or_else(|| id.clone());
                r.model_id = r.model_id.take().or_else(|| model_id.clone());
                r.timestamp = r.timestamp.or(*timestamp);
                r.headers = r.headers.take().or_else(|| headers.clone());
            }
            _ => {}
        }
    }
}

/// What a tool call did to the step.
enum ToolEnd {
    Done,
    Aborted,
    /// The tool was silent past the stall timeout: the turn fails at stage `stream`.
    Stalled(ChatError),
}

/// The state of one turn attempt.
struct TurnRun<'a> {
    inner: &'a Arc<Runtime>,
    spec: &'a TurnSpec,
    turn_id: String,
    message_id: String,
    steps: Vec<StepRecord>,
    usage: Usage,
    tool_context: Value,
}

impl TurnRun<'_> {
    fn tid(&self) -> Option<&str> {
        Some(&self.turn_id)
    }

    /// Appends an event of this turn; hands back its seq, the ticket the output gate waits on
    /// ([`Recorder::durable`](crate::recorder::Recorder::durable)).
    fn append(&self, event: Event) -> Result<u64, EngineError> {
        self.inner.recorder.append(self.tid(), event).map(|a| a.seq)
    }

    fn error(&self, stage: ErrorStage, message: impl Into<String>) -> ChatError {
        ChatError {
            request_id: Some(self.spec.request_id.clone()),
            ..ChatError::new(stage, message)
        }
    }
}

type ExecutionRef = ToolExecution;

enum Executed {
    Done(Result<Value, String>),
    Aborted,
    /// No result (or, from a streaming tool, no next value) within the stall timeout.
    Stalled(u64),
}

/// A tool call as the step hands it over.
struct PendingCall<'a> {
    step: u32,
    call_id: String,
    tool_name: String,
    input_text: String,
    active: Option<&'a [String]>,
    messages: &'a [ModelMessage],
}

/// A tool call's outcome, ready to record.
struct Outcome<'a> {
    step: u32,
    call_id: &'a str,
    tool_name: &'a str,
    model_input: &'a Value,
    effective_input: &'a Value,
    decision: DecisionAction,
    messages: &'a [ModelMessage],
    result: Result<Value, String>,
    duration_ms: u64,
    run_hook: bool,
}

enum Next {
    Part(StreamPart),
    End,
    Stalled,
    Failed(ModelError),
}
