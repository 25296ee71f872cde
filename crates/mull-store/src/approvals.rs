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

use crate::facts::{AnswerFact, AnsweredBy, CallStage, ToolCallFact};
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
    /// Who answered, when the log says (see `tool_approval_answered`'s `by`).
    pub by: Option<String>,
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

impl From<&AnswerFact> for ApprovalAnswer {
    fn from(answer: &AnswerFact) -> ApprovalAnswer {
        ApprovalAnswer {
            approved: answer.approved,
            reason: answer.reason.clone(),
            expired: answer.by == AnsweredBy::Expiry,
            at: answer.at.at,
            by: answer.through.clone(),
        }
    }
}

/// What a call's change did to a list of pending approvals.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Followed {
    /// The call asked: its request is pending (the last in the list).
    Requested,
    /// The first answer to a pending request: the request at this index.
    Answered(usize),
    /// The call's outcome closed its request: it is no longer pending.
    Closed(Box<PendingApproval>),
}

/// Keeps a list of pending approvals in step with a call's facts after the call reached
/// `stage` (one rule for the session's projection and the session-wide tool table): a request
/// is added when asked (in `message_id`), follows its call's answer and decision while it is
/// in the list, and leaves the list once the call's outcome closes it. A request a view took
/// out of its list itself (a retracted message, a fork's cut) is not added back.
pub(crate) fn follow_call(
    pending: &mut Vec<PendingApproval>,
    call: &ToolCallFact,
    stage: CallStage,
    message_id: Option<String>,
) -> Option<Followed> {
    let approval = call.approval.as_ref()?;
    if let (CallStage::ApprovalRequested, Some(request)) = (stage, &approval.request) {
        pending.push(PendingApproval {
            approval_id: approval.approval_id.clone(),
            call_id: call.call_id.clone(),
            tool: call.tool.clone(),
            input: request.input.clone(),
            reason: request.reason.clone(),
            step: request.step,
            turn_id: request.turn_id.clone(),
            message_id,
            requested_at: request.at.at,
            expires_at: request.expires_at,
            answer: None,
            decided: false,
        });
        return Some(Followed::Requested);
    }
    let index = pending
        .iter()
        .position(|p| p.approval_id == approval.approval_id)?;
    if approval.closed {
        return Some(Followed::Closed(Box::new(pending.remove(index))));
    }
    let request = &mut pending[index];
    request.answer = approval.answer.as_ref().map(ApprovalAnswer::from);
    request.decided = approval.decided;
    (stage == CallStage::ApprovalAnswered).then_some(Followed::Answered(index))
}
