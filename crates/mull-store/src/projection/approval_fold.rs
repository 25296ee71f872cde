//! The approval fold: what approval events do to a session's state — its pending and closed
//! approvals (kept by the steps in [`crate::approvals`]) and the state of each call's tool part.

use mull_core::ToolPartState;
use serde_json::Value;

use super::draft::find_tool_part;
use super::state::SessionState;
use crate::approvals::{follow_call, Followed, PendingApproval};
use crate::facts::{CallOutcome, CallStage};

impl SessionState {
    /// The approval request `approval_id`, pending or closed, if the session made it.
    pub fn approval(&self, approval_id: &str) -> Option<&PendingApproval> {
        self.pending_approvals
            .iter()
            .chain(self.closed_approvals.iter())
            .find(|p| p.approval_id == approval_id)
    }

    /// Approvals still waiting for a person.
    pub fn unanswered_approvals(&self) -> impl Iterator<Item = &PendingApproval> {
        self.pending_approvals.iter().filter(|p| p.is_unanswered())
    }

    /// Answered approvals whose calls the next turn runs or denies (no decision yet).
    pub fn approvals_to_act_on(&self) -> impl Iterator<Item = &PendingApproval> {
        self.pending_approvals
            .iter()
            .filter(|p| p.answer.is_some() && !p.decided)
    }

    /// Whether every approval asked in `turn_id`'s `step` has an answer.
    pub fn approvals_answered_in_step(&self, turn_id: Option<&str>, step: u32) -> bool {
        !self
            .pending_approvals
            .iter()
            .any(|p| p.turn_id.as_deref() == turn_id && p.step == step && p.is_unanswered())
    }

    /// Follows the approval of the call at `call` in the session's facts after the call
    /// reached `stage`: the request is pending (its tool part `approval-requested`, in the
    /// draft), answered (`approval-responded`), decided, then closed by the call's outcome —
    /// which goes onto the tool part of the message that asked (a continuation turn writes a
    /// message of its own).
    pub(super) fn approval_followed(&mut self, call: usize, stage: CallStage) {
        let fact = &self.facts.calls()[call];
        let mut message_id = None;
        if stage == CallStage::ApprovalRequested {
            message_id = self.draft.as_ref().map(|d| d.id.clone());
            if let Some(part) = self
                .draft
                .as_mut()
                .and_then(|d| d.tool_part_mut(&fact.call_id))
            {
                part.state = ToolPartState::ApprovalRequested;
            }
        }
        let call_id = fact.call_id.clone();
        let outcome = fact.outcome.clone();
        match follow_call(&mut self.pending_approvals, fact, stage, message_id) {
            Some(Followed::Answered(index)) => {
                let message_id = self.pending_approvals[index].message_id.clone();
                self.set_part_state(
                    &call_id,
                    message_id.as_deref(),
                    ToolPartState::ApprovalResponded,
                );
            }
            Some(Followed::Closed(pending)) => {
                self.closed_approvals.push((*pending).clone());
                if let Some(CallOutcome::Finished { output, error, .. }) = outcome {
                    self.approval_finished(&pending, output, error);
                }
            }
            Some(Followed::Requested) | None => {}
        }
    }

    /// A parked call's outcome goes onto its tool part.
    fn approval_finished(
        &mut self,
        pending: &PendingApproval,
        output: Option<Value>,
        error: Option<String>,
    ) {
        let denied = pending.answer.as_ref().is_some_and(|a| !a.approved);
        if let Some(part) = find_tool_part(
            &mut self.messages,
            pending.message_id.as_deref(),
            &pending.call_id,
        ) {
            part.state = match (denied, &error) {
                (true, _) => ToolPartState::OutputDenied,
                (false, None) => ToolPartState::OutputAvailable,
                (false, Some(_)) => ToolPartState::OutputError,
            };
            part.output = output;
            part.error_text = error;
            part.preliminary = false;
        }
    }

    /// A saved assistant message shows the answers given while its turn was still running.
    pub(crate) fn approval_parts_after_save(&mut self, message_id: &str) {
        let answered: Vec<String> = self
            .pending_approvals
            .iter()
            .filter(|p| p.answer.is_some() && p.message_id.as_deref() == Some(message_id))
            .map(|p| p.call_id.clone())
            .collect();
        for call_id in answered {
            self.set_part_state(&call_id, Some(message_id), ToolPartState::ApprovalResponded);
        }
    }

    fn set_part_state(&mut self, call_id: &str, message_id: Option<&str>, state: ToolPartState) {
        let in_draft = self
            .draft
            .as_mut()
            .filter(|d| message_id.is_none_or(|id| d.id == id))
            .and_then(|d| d.tool_part_mut(call_id));
        if let Some(part) = in_draft {
            part.state = state;
            return;
        }
        if let Some(part) = find_tool_part(&mut self.messages, message_id, call_id) {
            part.state = state;
        }
    }
}
