//! The approval entry: a person's answer to a parked tool call enters the session through
//! [`Session::command`], as one input event, and may start the continuation that acts on it.
//! What checks, records and acts on the answer lives in [`crate::approval`] and the turn, apart
//! from this entry.

use mull_core::Input;
use mull_store::PendingApproval;

use crate::approval::{self, Approval};
use crate::error::EngineError;
use crate::turn;

use super::command::{CommandOptions, Reply};
use super::handle::Session;
use crate::runtime::{ChatStream, TurnOutcome};

impl Session {
    /// Answers approval request `approval_id` (approve, or deny with an optional reason): one
    /// `tool_approval_answered` event, durable before anything acts on it. When the answer
    /// completes its step (no approval or client call of that step still waits) and
    /// auto-continue is on, a continuation turn runs the approved calls once, shows the model
    /// the denials, and goes on; its outcome is returned. A request this session never made is
    /// refused with [`EngineError::UnknownApproval`], one already answered (or expired) with
    /// [`EngineError::ApprovalAlreadyAnswered`]; either way nothing is written for it.
    pub async fn answer_approval(
        &self,
        approval_id: &str,
        answer: Approval,
    ) -> Result<Option<TurnOutcome>, EngineError> {
        match self
            .command(answer_input(approval_id, answer), CommandOptions::default())
            .await?
        {
            Reply::Turn(outcome) => Ok(Some(*outcome)),
            Reply::Recorded => Ok(None),
            other => Err(super::entry::unexpected(other)),
        }
    }

    /// Like [`Session::answer_approval`], but the continuation it starts runs in a background
    /// task whose [`ChatStream`] (and request id) comes back at once, for a server to follow.
    pub async fn answer_approval_streaming(
        &self,
        approval_id: &str,
        answer: Approval,
    ) -> Result<Option<ChatStream>, EngineError> {
        let opts = CommandOptions {
            stream: true,
            ..CommandOptions::default()
        };
        match self
            .command(answer_input(approval_id, answer), opts)
            .await?
        {
            Reply::Stream(stream) => Ok(Some(stream)),
            Reply::Recorded => Ok(None),
            other => Err(super::entry::unexpected(other)),
        }
    }

    /// The sweep: answers every unanswered request past its expiry (by the session's clock)
    /// with a denial event. When that completes a step and auto-continue is on, the
    /// continuation runs and its outcome is returned. (Expiry is also checked whenever the
    /// session is next touched: an answer, a turn's start.)
    pub async fn expire_approvals(&self) -> Result<Option<TurnOutcome>, EngineError> {
        self.check_not_in_turn("expire_approvals")?;
        let completed = {
            let _turns = self.inner.turn_lock().lock().await;
            approval::expire_due(self.inner.recorder(), self.inner.options().approval_expiry)
                .await?
        };
        if completed.is_empty() || !self.inner.options().auto_continue {
            return Ok(None);
        }
        let spec = self.continuation_spec().await?;
        turn::run_entry(&self.inner, spec, None).await.map(Some)
    }

    /// The approval requests still waiting for a person.
    pub fn pending_approvals(&self) -> Vec<PendingApproval> {
        self.read_state(|s| s.unanswered_approvals().cloned().collect())
    }

    /// Checks and records the answer under the turn lock (so a turn still finishing the step
    /// that asked ends first, and two answers never both pass the check); returns whether a
    /// continuation should run now.
    pub(super) async fn record_approval(
        &self,
        approval_id: &str,
        answer: Approval,
    ) -> Result<bool, EngineError> {
        self.check_not_in_turn("answer_approval")?;
        let completed = {
            let _turns = self.inner.turn_lock().lock().await;
            approval::record_answer(
                self.inner.recorder(),
                self.inner.options().approval_expiry,
                approval_id,
                answer,
            )
            .await?
        };
        Ok(completed.is_some() && self.inner.options().auto_continue)
    }
}

/// The input an answer is recorded as.
fn answer_input(approval_id: &str, answer: Approval) -> Input {
    Input::ApprovalAnswer {
        approval_id: approval_id.to_owned(),
        approved: answer.approved,
        reason: answer.reason,
        by: answer.by,
    }
}
