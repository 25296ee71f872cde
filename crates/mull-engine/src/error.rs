//! What can go wrong: engine misuse and storage failures ([`EngineError`]), a failed turn as
//! callers see it ([`ChatError`]), and what a hook may return when it fails ([`HookError`]).

use mull_core::{ChatErrorClassification, ErrorInput, ErrorStage, ModelError};

/// The error a hook returns when it fails. Any error type converts into it with `?` or `.into()`.
pub type HookError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The result of a hook.
pub type HookResult<T> = Result<T, HookError>;

/// A failure of the engine itself, as opposed to a failed turn (which is a [`ChatError`] in the
/// turn's outcome).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The log refused an append or a flush.
    #[error("event log of session {session_id}: {source}")]
    Store {
        session_id: String,
        #[source]
        source: mull_store::StoreError,
    },
    /// A blocking turn was started from inside a running turn's hook of the same session; it
    /// would wait on the turn that is waiting for it.
    #[error(
        "session {session_id}: {entry} was called from inside a hook of running turn {request_id}; \
         a blocking turn cannot start until that turn ends (use submit_messages to queue one)"
    )]
    TurnLockHeld {
        session_id: String,
        request_id: String,
        entry: &'static str,
    },
    /// A submission id that this session never accepted.
    #[error("session {session_id}: no submission {submission_id}")]
    UnknownSubmission {
        session_id: String,
        submission_id: String,
    },
    /// A regeneration named a message the conversation does not hold.
    #[error("session {session_id}: no message {message_id} in the conversation to regenerate")]
    UnknownMessage {
        session_id: String,
        message_id: String,
    },
    /// A fork could not be made: its point does not exist, or its session does.
    #[error("fork into session {session_id}: {source}")]
    Fork {
        session_id: String,
        #[source]
        source: mull_store::ForkError,
    },
    /// An approval answer named a request this session never made.
    #[error("session {session_id}: no approval request {approval_id}")]
    UnknownApproval {
        session_id: String,
        approval_id: String,
    },
    /// An approval answer came for a request that already has one (an expired request is
    /// answered by its expiry); nothing was written.
    #[error(
        "session {session_id}: approval request {approval_id} was already answered ({answer})"
    )]
    ApprovalAlreadyAnswered {
        session_id: String,
        approval_id: String,
        /// `approved`, `denied` or `expired`.
        answer: &'static str,
    },
    /// An input that cannot be acted on (see `mull_core::input`); nothing was recorded.
    #[error("session {session_id}: invalid input: {reason}")]
    InvalidInput { session_id: String, reason: String },
    /// The task running a turn ended without reporting (it was cancelled by the runtime).
    #[error(
        "session {session_id}: the task running request {request_id} ended without an outcome"
    )]
    TurnTaskLost {
        session_id: String,
        request_id: String,
    },
}

/// A failed turn as the caller sees it: what went wrong, at which stage, and for which request.
/// `on_chat_error` receives one and returns the one callers get.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ChatError {
    pub message: String,
    pub stage: ErrorStage,
    pub request_id: Option<String>,
    /// `context_overflow` when overflow recovery could not save the turn.
    pub classification: Option<ChatErrorClassification>,
    /// The model's error, when the failure came from a model call.
    pub model_error: Option<ModelError>,
}

impl ChatError {
    /// An error at `stage` with a message.
    pub fn new(stage: ErrorStage, message: impl Into<String>) -> ChatError {
        ChatError {
            message: message.into(),
            stage,
            request_id: None,
            classification: None,
            model_error: None,
        }
    }

    /// The error in the form classifiers take: the model's error when there is one, else the
    /// message (in-band provider errors arrive as text).
    pub fn as_error_input(&self) -> ErrorInput<'_> {
        match &self.model_error {
            Some(e) => ErrorInput::Model(e),
            None => ErrorInput::Text(&self.message),
        }
    }
}
