//! Approvals: tool calls that wait for a person, in three parts.
//!
//! - Asking: a call parks when `before_tool_call` returns
//!   [`ToolCallDecision::RequireApproval`](crate::context::ToolCallDecision) or its tool's
//!   [`needs_approval`](crate::Tool::needs_approval) rule says so (the AI SDK's `needsApproval`).
//!   The request is a `tool_approval_requested` event; its turn finishes parked, and nothing
//!   waits in memory (the turn's `parked.rs`).
//! - Answering (`record.rs`): an answer arrives through one entry,
//!   [`Session::answer_approval`](crate::Session::answer_approval) (the server's AI SDK
//!   protocol, the CLI and embedders all use it), is checked and appended as one
//!   `tool_approval_answered` event. Expiry
//!   ([`SessionOptions::approval_expiry`](crate::SessionOptions)) is read with the session's
//!   clock whenever the session is next touched — an answer, any turn's start — or when
//!   [`Session::expire_approvals`](crate::Session::expire_approvals) sweeps; an expired request
//!   is answered as a denial by an event like any other answer.
//! - Acting (`decision.rs`): when an answer completes its step, a continuation turn decides each
//!   answered call from its answer and runs it through the same path as a live call — the
//!   approved ones once, the denials shown to the model as the call's output.

pub(crate) mod decision;
pub(crate) mod record;

pub(crate) use record::{expire_due, record_answer};

/// A person's answer to an approval request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    pub approved: bool,
    /// For a denial, what the model sees in place of the tool's output (a default sentence
    /// when `None`); for an approval, kept in the log.
    pub reason: Option<String>,
}

impl Approval {
    /// Run the call.
    pub fn approve() -> Approval {
        Approval {
            approved: true,
            reason: None,
        }
    }

    /// Do not run the call; the model sees `reason` (or a default sentence) as its output.
    pub fn deny(reason: Option<String>) -> Approval {
        Approval {
            approved: false,
            reason,
        }
    }
}
