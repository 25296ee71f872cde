//! The approval fold: what approval events do to a session's state — its pending and closed
//! approvals (kept by the steps in [`crate::approvals`]) and the state of each call's tool part.

use mull_core::{DecisionAction, EventRef, ToolPartState};
use serde_json::Value;

use super::draft::find_tool_part;
use super::state::SessionState;
use crate::approvals::{
    answer_request, mark_decided, push_request, take_closed, ApprovalAnswer, PendingApproval,
};

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

    pub(crate) fn approval_requested(&mut self, e: &EventRef<'_>) {
        let mull_core::Event::ToolApprovalRequested { call_id, .. } = e.event else {
            return;
        };
        let message_id = self.draft.as_ref().map(|d| d.id.clone());
        if let Some(part) = self.draft.as_mut().and_then(|d| d.tool_part_mut(call_id)) {
            part.state = ToolPartState::ApprovalRequested;
        }
        push_request(&mut self.pending_approvals, e, message_id);
    }

    pub(crate) fn approval_answered(&mut self, approval_id: &str, answer: ApprovalAnswer) {
        let Some(pending) = answer_request(&mut self.pending_approvals, approval_id, answer) else {
            return;
        };
        let (call_id, message_id) = (pending.call_id.clone(), pending.message_id.clone());
        self.set_part_state(
            &call_id,
            message_id.as_deref(),
            ToolPartState::ApprovalResponded,
        );
    }

    /// A `tool_decided` for a parked call: the turn acting on its answer decided it.
    pub(crate) fn approval_decided(&mut self, call_id: &str) {
        mark_decided(&mut self.pending_approvals, call_id);
    }

    /// A `tool_call_finished` for a parked call: its outcome goes onto the tool part of the
    /// message that asked (a continuation turn writes a message of its own), and the call is
    /// no longer pending.
    pub(crate) fn approval_finished(
        &mut self,
        call_id: &str,
        decision: Option<DecisionAction>,
        output: Option<&Value>,
        error: Option<&String>,
    ) {
        let Some(pending) = take_closed(&mut self.pending_approvals, call_id, true) else {
            return;
        };
        self.closed_approvals.push(pending.clone());
        let denied = decision == Some(DecisionAction::Denied)
            || pending.answer.as_ref().is_some_and(|a| !a.approved);
        if let Some(part) =
            find_tool_part(&mut self.messages, pending.message_id.as_deref(), call_id)
        {
            part.state = match (denied, error) {
                (true, _) => ToolPartState::OutputDenied,
                (false, None) => ToolPartState::OutputAvailable,
                (false, Some(_)) => ToolPartState::OutputError,
            };
            part.output = output.cloned();
            part.error_text = error.cloned();
            part.preliminary = false;
        }
    }

    /// A repaired call is no longer pending.
    pub(crate) fn approval_repaired(&mut self, call_id: &str) {
        if let Some(closed) = take_closed(&mut self.pending_approvals, call_id, false) {
            self.closed_approvals.push(closed);
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
