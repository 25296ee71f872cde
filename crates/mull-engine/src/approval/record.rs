//! Recording answers: a person's answer checked and appended as one `tool_approval_answered`
//! event, and expired requests answered as denials, each reporting the step it completed.

use std::sync::Arc;

use mull_core::Event;
use mull_store::PendingApproval;

use crate::error::EngineError;
use crate::runtime::Runtime;

use super::answer::Approval;

/// The step an answer (or an expiry) completed: every approval asked in it is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CompletedStep {
    pub turn_id: Option<String>,
    pub step: u32,
}

/// Checks and records `approval` for `approval_id` (after expiring what is due): one
/// `tool_approval_answered` event, flushed. A request this session never made, or one already
/// answered (or expired), is refused and nothing is written for it. Returns the step the answer
/// completed, if it did (no approval nor client call of that step still waits).
pub(crate) async fn record_answer(
    inner: &Arc<Runtime>,
    approval_id: &str,
    approval: Approval,
) -> Result<Option<CompletedStep>, EngineError> {
    expire_due(inner).await?;
    let pending = inner.recorder.read(|s| s.approval(approval_id).cloned());
    let Some(pending) = pending else {
        return Err(EngineError::UnknownApproval {
            session_id: inner.session_id.clone(),
            approval_id: approval_id.to_owned(),
        });
    };
    if let Some(answer) = &pending.answer {
        return Err(EngineError::ApprovalAlreadyAnswered {
            session_id: inner.session_id.clone(),
            approval_id: approval_id.to_owned(),
            answer: match (answer.expired, answer.approved) {
                (true, _) => "expired",
                (false, true) => "approved",
                (false, false) => "denied",
            },
        });
    }
    append_answer(inner, &pending, approval, false)?;
    inner.recorder.flush().await?;
    Ok(completed(inner, &pending))
}

/// Answers every unanswered request whose expiry has passed (by the session's clock) with a
/// denial. Returns the steps those answers completed.
pub(crate) async fn expire_due(inner: &Arc<Runtime>) -> Result<Vec<CompletedStep>, EngineError> {
    if inner.options.approval_expiry.is_none() {
        return Ok(Vec::new());
    }
    let now = inner.recorder.clock().now();
    let due: Vec<PendingApproval> = inner.recorder.read(|s| {
        s.pending_approvals
            .iter()
            .filter(|p| p.expired_at(now))
            .cloned()
            .collect()
    });
    if due.is_empty() {
        return Ok(Vec::new());
    }
    for pending in &due {
        append_answer(inner, pending, Approval::deny(None), true)?;
    }
    inner.recorder.flush().await?;
    let mut steps: Vec<CompletedStep> = Vec::new();
    for pending in &due {
        if let Some(step) = completed(inner, pending) {
            if !steps.contains(&step) {
                steps.push(step);
            }
        }
    }
    Ok(steps)
}

/// The one event an answer is. Filed under the turn that asked, as a client tool's result is.
fn append_answer(
    inner: &Runtime,
    pending: &PendingApproval,
    answer: Approval,
    expired: bool,
) -> Result<(), EngineError> {
    inner.recorder.append(
        pending.turn_id.as_deref(),
        Event::ToolApprovalAnswered {
            approval_id: pending.approval_id.clone(),
            call_id: pending.call_id.clone(),
            tool: pending.tool.clone(),
            approved: answer.approved,
            reason: answer.reason,
            expired,
            by: answer.by,
        },
    )?;
    Ok(())
}

/// Whether nothing of `pending`'s step still waits (no approval, no client tool call).
fn completed(inner: &Runtime, pending: &PendingApproval) -> Option<CompletedStep> {
    let turn_id = pending.turn_id.as_deref();
    let done = inner.recorder.read(|s| {
        s.approvals_answered_in_step(turn_id, pending.step)
            && !s
                .pending_client_calls
                .iter()
                .any(|c| c.turn_id.as_deref() == turn_id && c.step == pending.step)
    });
    done.then(|| CompletedStep {
        turn_id: pending.turn_id.clone(),
        step: pending.step,
    })
}
