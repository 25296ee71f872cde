//! Tool calls parked on a person's approval, as a fold.
//!
//! A call whose approval was asked (`tool_approval_requested`) is pending until its outcome is
//! recorded (`tool_call_finished`) or it is repaired (`tool_call_repaired`). In between it is
//! *unanswered* (its tool part is `approval-requested`), then *answered*
//! (`tool_approval_answered`; the part is `approval-responded`), then *decided* (the turn that
//! acts on the answer wrote its `tool_decided`). The engine, the server and the dashboard read
//! this list; nothing computes it twice.
//!
//! **Architecture invariant:** a tool runs only after its decision is durable, so an answered
//! call that is not yet decided never ran (the next turn may run it), and a decided call without
//! an outcome may have run (recovery repairs it as interrupted; it never runs again).

use chrono::{DateTime, Utc};
use mull_core::EventRef;
use serde::Serialize;
use serde_json::Value;

/// One tool call waiting on (or acting on) a person's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingApproval {
    pub approval_id: String,
    pub call_id: String,
    pub tool: String,
    /// The input the call runs with once approved.
    pub input: Value,
    /// Why approval was asked, when the hook said.
    pub reason: Option<String>,
    pub step: u32,
    /// The turn that asked.
    pub turn_id: Option<String>,
    /// The assistant message holding the call's tool part.
    pub message_id: Option<String>,
    pub requested_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    /// The answer, once given.
    pub answer: Option<ApprovalAnswer>,
    /// Whether the turn acting on the answer recorded its decision.
    pub decided: bool,
}

/// A person's answer (or an expiry) to an approval request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApprovalAnswer {
    pub approved: bool,
    pub reason: Option<String>,
    /// The request expired unanswered (a denial the session wrote itself).
    pub expired: bool,
    pub at: DateTime<Utc>,
}

impl PendingApproval {
    /// Whether the request still waits for an answer.
    pub fn is_unanswered(&self) -> bool {
        self.answer.is_none()
    }

    /// Whether an unanswered request has expired at `now`.
    pub fn expired_at(&self, now: DateTime<Utc>) -> bool {
        self.is_unanswered() && self.expires_at.is_some_and(|at| at <= now)
    }
}

// The fold's steps over a list of pending approvals, shared by the session's projection and
// the session-wide tool table a dashboard keeps (one rule for both).

/// A `tool_approval_requested`: the call is pending, asked in `message_id`.
pub(crate) fn push_request(
    pending: &mut Vec<PendingApproval>,
    e: &EventRef<'_>,
    message_id: Option<String>,
) {
    let mull_core::Event::ToolApprovalRequested {
        step,
        call_id,
        tool,
        approval_id,
        input,
        reason,
        expires_at,
    } = e.event
    else {
        return;
    };
    pending.push(PendingApproval {
        approval_id: approval_id.clone(),
        call_id: call_id.clone(),
        tool: tool.clone(),
        input: input.clone(),
        reason: reason.clone(),
        step: *step,
        turn_id: e.turn_id.map(str::to_owned),
        message_id,
        requested_at: e.at,
        expires_at: *expires_at,
        answer: None,
        decided: false,
    });
}

/// A `tool_approval_answered`: the first answer counts.
pub(crate) fn answer_request<'a>(
    pending: &'a mut [PendingApproval],
    approval_id: &str,
    answer: ApprovalAnswer,
) -> Option<&'a PendingApproval> {
    let request = pending
        .iter_mut()
        .find(|p| p.approval_id == approval_id && p.answer.is_none())?;
    request.answer = Some(answer);
    Some(request)
}

/// A `tool_decided` for an answered call.
pub(crate) fn mark_decided(pending: &mut [PendingApproval], call_id: &str) {
    if let Some(request) = pending
        .iter_mut()
        .find(|p| p.call_id == call_id && p.answer.is_some())
    {
        request.decided = true;
    }
}

/// The call's outcome (`decided_only`: a `tool_call_finished`, which closes only a decided
/// call) or repair: it is no longer pending.
pub(crate) fn take_closed(
    pending: &mut Vec<PendingApproval>,
    call_id: &str,
    decided_only: bool,
) -> Option<PendingApproval> {
    let index = pending
        .iter()
        .position(|p| p.call_id == call_id && (p.decided || !decided_only))?;
    Some(pending.remove(index))
}
