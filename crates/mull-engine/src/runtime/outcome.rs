//! What entry paths hand back: outcomes, receipts, failures, and the stream of a chat.

use futures::Stream;
use mull_core::{Envelope, StreamPart, SubmissionStatus, TurnStatus, UIMessage};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::error::{ChatError, EngineError};

/// How an entry path ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeStatus {
    Completed,
    Error,
    Aborted,
    /// Nothing ran (`continue_last_turn` with no assistant message to continue).
    Skipped,
}

impl From<TurnStatus> for OutcomeStatus {
    fn from(s: TurnStatus) -> OutcomeStatus {
        match s {
            TurnStatus::Completed | TurnStatus::Running => OutcomeStatus::Completed,
            TurnStatus::Error | TurnStatus::Interrupted => OutcomeStatus::Error,
            TurnStatus::Aborted => OutcomeStatus::Aborted,
        }
    }
}

/// The result of an entry path: `{request_id, status}` plus the error callers see and the
/// persisted message.
#[derive(Debug, Clone)]
pub struct TurnOutcome {
    /// Empty when the call was skipped.
    pub request_id: String,
    pub status: OutcomeStatus,
    /// The error `on_chat_error` returned, when the turn failed.
    pub error: Option<ChatError>,
    /// The persisted assistant message, when one was.
    pub message: Option<UIMessage>,
}

/// What a client answers for a client tool call.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientToolOutcome {
    /// The tool's output.
    Output(Value),
    /// The call failed or was denied; `None` means "Tool execution denied by user".
    Error(Option<String>),
}

/// A submission's receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitReceipt {
    pub submission_id: String,
    /// True when an earlier submission had this id or key; nothing new was accepted.
    pub duplicate: bool,
}

/// How a submission ended.
#[derive(Debug, Clone, PartialEq)]
pub struct SubmissionResult {
    pub submission_id: String,
    pub request_id: Option<String>,
    pub status: SubmissionStatus,
    pub error: Option<String>,
}

/// A failed turn, as published on [`Session::failures`](crate::Session::failures).
#[derive(Debug, Clone)]
pub struct TurnFailure {
    /// The `turn_failed` envelope.
    pub envelope: Envelope,
}

/// The parts a `chat` call streams back, then its outcome.
pub struct ChatStream {
    /// The request the turn serves.
    pub request_id: String,
    pub(crate) parts: mpsc::UnboundedReceiver<StreamPart>,
    pub(crate) done: tokio::task::JoinHandle<Result<TurnOutcome, EngineError>>,
    pub(crate) session_id: String,
}

impl ChatStream {
    /// Waits for the turn to end (dropping parts not read yet).
    pub async fn finish(self) -> Result<TurnOutcome, EngineError> {
        let request_id = self.request_id.clone();
        let session_id = self.session_id.clone();
        self.done.await.map_err(|_| EngineError::TurnTaskLost {
            session_id,
            request_id,
        })?
    }
}

impl Stream for ChatStream {
    type Item = StreamPart;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<StreamPart>> {
        self.parts.poll_recv(cx)
    }
}
