//! What a turn's facts change in a session's state, stage by stage: the turn's summary (its
//! model, its failure, its hook failures, its steps and usage, its end) and the session's
//! usage. A turn's start (which opens the draft) and a sub-agent's end (which also moves the
//! session's sub-agent runs) stay with the session fold.

use crate::facts::{StepStage, TurnStage};

use super::state::SessionState;

impl SessionState {
    /// The turn at `turn` in the session's facts reached `stage`, in an event filed under
    /// `turn_id`; false for the stages the session fold takes from the event itself.
    pub(super) fn turn_changed(
        &mut self,
        turn: usize,
        stage: TurnStage,
        turn_id: Option<&str>,
    ) -> bool {
        let fact = &self.facts.turns()[turn];
        let (model_id, failure, end) = (
            fact.model_id.clone(),
            fact.failure.clone(),
            fact.end.clone(),
        );
        let usage = fact.usage.clone();
        if matches!(stage, TurnStage::Finished) {
            // The turn's message is saved by now (or never will be): no stream is open.
            self.draft = None;
            self.open_blocks.clear();
        }
        let Some(summary) = self.turn_mut(turn_id) else {
            return !matches!(stage, TurnStage::Started | TurnStage::SubagentFinished);
        };
        match stage {
            TurnStage::Configured => summary.model_id = model_id,
            TurnStage::Failed => {
                if let Some(failure) = failure {
                    summary.error = Some(failure.error);
                    summary.error_stage = Some(failure.stage);
                }
            }
            TurnStage::HookFailed => summary.hook_failures += 1,
            TurnStage::Finished => {
                if let Some(end) = end {
                    summary.status = end.status;
                    if end.error.is_some() {
                        summary.error = end.error;
                    }
                    summary.steps = end.steps;
                    summary.usage = usage;
                    summary.finished_at = Some(end.at.at);
                    summary.duration_ms =
                        Some((end.at.at - summary.started_at).num_milliseconds().max(0) as u64);
                }
            }
            _ => return false,
        }
        true
    }

    /// Step `step` of the turn at `turn` in the session's facts reached `stage`, in an event
    /// filed under `turn_id`; false for the stages the session fold takes from the event.
    pub(super) fn step_changed(
        &mut self,
        turn: usize,
        step: usize,
        stage: StepStage,
        turn_id: Option<&str>,
    ) -> bool {
        if !matches!(stage, StepStage::Finished) {
            return false;
        }
        let Some(end) = &self.facts.turns()[turn].steps[step].end else {
            return true;
        };
        let usage = end.usage.clone();
        self.usage.add(&usage);
        if let Some(summary) = self.turn_mut(turn_id) {
            summary.steps += 1;
            summary.usage.add(&usage);
        }
        true
    }
}
