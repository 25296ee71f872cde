//! A turn's running state and what its parts report to each other: the spec an entry path
//! hands over, the turn in progress ([`TurnRun`]), how an attempt, its steps and its tool
//! calls end.

use mull_core::{
    CallWarning, DecisionAction, EntryPath, ErrorStage, Event, FinishReason, ModelError,
    ModelMessage, StepRecord, StreamPart, ToolSpec, UIMessage, Usage,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::parts::TurnParts;
use crate::error::{ChatError, EngineError};
use crate::hooks::Observed;
use crate::runtime::{OutcomeStatus, TurnOutcome};
use crate::tool::ToolSet;

/// What a tool call cut off by an abort shows the model and `after_tool_call`.
pub const ABORTED_TOOL_CALL: &str = "The tool call was aborted.";

/// Everything an entry path hands to the loop.
pub(crate) struct TurnSpec {
    pub(crate) entry: EntryPath,
    pub(crate) request_id: String,
    pub(crate) continuation: bool,
    pub(crate) body: Value,
    /// Messages to persist before the turn (none for continuations).
    pub(crate) messages: Vec<UIMessage>,
    /// The request's own cancellation (what `cancel_chat`, `abort_all` and a caller's signal
    /// cancel, each recorded first).
    pub(crate) signal: CancellationToken,
    /// Watches the caller's signal while the turn lives (see `Runtime::register_request`).
    pub(crate) _watch: Option<crate::runtime::SignalWatch>,
    /// Where a `chat` call reads its parts.
    pub(crate) client: Option<mpsc::UnboundedSender<StreamPart>>,
    pub(crate) submission_id: Option<String>,
    pub(crate) client_tools: Vec<ToolSpec>,
    pub(crate) caller_tools: ToolSet,
}

/// How a turn ended, and what `on_chat_response` gets (None when it is not called).
pub(super) struct Ended {
    pub(super) outcome: TurnOutcome,
    pub(super) response: Option<Observed>,
}

pub(super) fn outcome(
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

pub(super) enum Attempt {
    /// Overflow recovery compacted the history: run the turn again.
    Retry,
    /// Recovery from a transient or rate-limit error waited its backoff: run the turn again.
    Recovered,
    Done(Box<Ended>),
}

pub(super) enum StepsEnd {
    Completed,
    Aborted,
    Failed(ChatError),
}

pub(super) enum StepEnd {
    Continue,
    Stop,
    Aborted,
    Failed(ChatError),
}

/// What a step accumulates from the parts it shows for its report: how the call ended, not
/// what it said (the draft and the facts hold that, read when the step finishes).
#[derive(Default)]
pub(super) struct StepParts {
    pub(super) finish_reason: Option<FinishReason>,
    pub(super) raw_finish_reason: Option<String>,
    pub(super) usage: Usage,
    pub(super) provider_metadata: Option<Value>,
    pub(super) waits_for_client: bool,
    /// What the provider warned about the call (`stream-start`).
    pub(super) warnings: Vec<CallWarning>,
    /// The provider's response metadata, folded from its `response-metadata` parts.
    pub(super) response: ResponseMeta,
    /// The model's tool call whose `on_chunk` waits until the call's hooks ran (Think's order).
    pub(super) deferred_call: Option<crate::hooks::Observed>,
}

/// What the provider told about its response, each field as first known.
#[derive(Default)]
pub(super) struct ResponseMeta {
    pub(super) id: Option<String>,
    pub(super) model_id: Option<String>,
    pub(super) timestamp: Option<chrono::DateTime<chrono::Utc>>,
    pub(super) headers: Option<std::collections::BTreeMap<String, String>>,
    /// `Some(false)` when the provider served the answer without streaming.
    pub(super) streamed: Option<bool>,
}

impl StepParts {
    pub(super) fn observe(&mut self, part: &StreamPart) {
        match part {
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
                streamed,
            } => {
                let r = &mut self.response;
                r.streamed = r.streamed.or(*streamed);
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
pub(super) enum ToolEnd {
    Done,
    Aborted,
    /// The tool was silent past the stall timeout: the turn fails at stage `stream`.
    Stalled(ChatError),
}

/// The state of one turn attempt.
pub(super) struct TurnRun<'a> {
    pub(super) parts: &'a TurnParts<'a>,
    pub(super) spec: &'a TurnSpec,
    pub(super) turn_id: String,
    pub(super) message_id: String,
    pub(super) steps: Vec<StepRecord>,
    pub(super) usage: Usage,
    pub(super) tool_context: Value,
    /// What the step requests so far hashed: a step's fingerprint hashes only its new messages.
    pub(super) summaries: mull_core::SummaryCache,
}

impl TurnRun<'_> {
    pub(super) fn tid(&self) -> Option<&str> {
        Some(&self.turn_id)
    }

    /// Appends an event of this turn; hands back its seq, the ticket the output gate waits on
    /// ([`Recorder::durable`](crate::recorder::Recorder::durable)).
    pub(super) fn append(&self, event: Event) -> Result<u64, EngineError> {
        self.parts.recorder.append(self.tid(), event).map(|a| a.seq)
    }

    pub(super) fn error(&self, stage: ErrorStage, message: impl Into<String>) -> ChatError {
        ChatError {
            request_id: Some(self.spec.request_id.clone()),
            ..ChatError::new(stage, message)
        }
    }
}

pub(super) enum Executed {
    Done(Result<Value, String>),
    Aborted,
    /// No result (or, from a streaming tool, no next value) within the stall timeout.
    Stalled(u64),
}

/// A tool call as the step hands it over.
pub(super) struct PendingCall<'a> {
    pub(super) step: u32,
    pub(super) call_id: String,
    pub(super) tool_name: String,
    pub(super) input_text: String,
    pub(super) active: Option<&'a [String]>,
    pub(super) messages: &'a [ModelMessage],
}

/// A tool call's outcome, ready to record.
pub(super) struct Outcome<'a> {
    pub(super) step: u32,
    pub(super) call_id: &'a str,
    pub(super) tool_name: &'a str,
    pub(super) model_input: &'a Value,
    pub(super) effective_input: &'a Value,
    pub(super) decision: DecisionAction,
    pub(super) dynamic: bool,
    pub(super) messages: &'a [ModelMessage],
    pub(super) result: Result<Value, String>,
    pub(super) duration_ms: u64,
    pub(super) run_hook: bool,
}

pub(super) enum Next {
    Part(StreamPart),
    End,
    Stalled,
    Failed(ModelError),
}
