//! Recording answers: a person's answer checked and appended as one `tool_approval_answered`
//! event, and expired requests answered as denials, each reporting the step it completed.

use mull_core::Event;
use mull_store::PendingApproval;

use crate::error::EngineError;
use crate::recorder::Recorder;

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
    recorder: &Recorder,
    expiry: Option<std::time::Duration>,
    approval_id: &str,
    approval: Approval,
) -> Result<Option<CompletedStep>, EngineError> {
    expire_due(recorder, expiry).await?;
    let pending = recorder.read(|s| s.approval(approval_id).cloned());
    let Some(pending) = pending else {
        return Err(EngineError::UnknownApproval {
            session_id: recorder.session_id().to_owned(),
            approval_id: approval_id.to_owned(),
        });
    };
    if let Some(answer) = &pending.answer {
        return Err(EngineError::ApprovalAlreadyAnswered {
            session_id: recorder.session_id().to_owned(),
            approval_id: approval_id.to_owned(),
            answer: match (answer.expired, answer.approved) {
                (true, _) => "expired",
                (false, true) => "approved",
                (false, false) => "denied",
            },
        });
    }
    append_answer(recorder, &pending, approval, false)?;
    recorder.flush().await?;
    Ok(completed(recorder, &pending))
}

/// Answers every unanswered request whose expiry has passed (by the session's clock) with a
/// denial, when requests expire (`expiry`). Returns the steps those answers completed.
pub(crate) async fn expire_due(
    recorder: &Recorder,
    expiry: Option<std::time::Duration>,
) -> Result<Vec<CompletedStep>, EngineError> {
    if expiry.is_none() {
        return Ok(Vec::new());
    }
    let now = recorder.clock().now();
    let due: Vec<PendingApproval> = recorder.read(|s| {
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
        append_answer(recorder, pending, Approval::deny(None), true)?;
    }
    recorder.flush().await?;
    let mut steps: Vec<CompletedStep> = Vec::new();
    for pending in &due {
        if let Some(step) = completed(recorder, pending) {
            if !steps.contains(&step) {
                steps.push(step);
            }
        }
    }
    Ok(steps)
}

/// The one event an answer is. Filed under the turn that asked, as a client tool's result is.
fn append_answer(
    recorder: &Recorder,
    pending: &PendingApproval,
    answer: Approval,
    expired: bool,
) -> Result<(), EngineError> {
    recorder.append(
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
fn completed(recorder: &Recorder, pending: &PendingApproval) -> Option<CompletedStep> {
    let turn_id = pending.turn_id.as_deref();
    let done = recorder.read(|s| {
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
