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

mod answer;
pub(crate) mod decision;
pub(crate) mod record;

pub(crate) use record::{expire_due, record_answer};

pub use answer::Approval;
