//! What a turn's facts change in a session's state, stage by stage: the turn's summary (its
//! start, model, failure, hook failures, steps and usage, its end), the draft its start opens
//! and its steps mark, and the session's usage. A sub-agent's end (which also moves the
//! session's sub-agent runs) stays with the session fold.

use mull_core::{Role, TurnStatus, UIMessage, UIPart, Usage};

use crate::facts::{StepStage, TurnStage, TurnStart};

use super::state::{SessionState, ToolStats, TurnSummary};

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
        if matches!(stage, TurnStage::Started) {
            if let Some(start) = fact.start.clone() {
                self.turn_started(turn_id, start);
            }
            return true;
        }
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
                    summary.response_owed = end.response_owed;
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
        if matches!(stage, StepStage::Started) {
            if let Some(draft) = &mut self.draft {
                draft.parts.push(UIPart::StepStart);
            }
            return true;
        }
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

    /// A turn started: its summary, running, and the draft of the message it writes.
    fn turn_started(&mut self, turn_id: Option<&str>, start: TurnStart) {
        self.draft = Some(UIMessage {
            id: start.message_id.clone(),
            role: Role::Assistant,
            metadata: None,
            parts: Vec::new(),
        });
        self.open_blocks.clear();
        self.turns.push(TurnSummary {
            turn_id: turn_id.map(str::to_owned),
            request_id: start.request_id,
            message_id: start.message_id,
            entry: start.entry,
            continuation: start.continuation,
            attempt: start.attempt,
            status: TurnStatus::Running,
            model_id: None,
            error: None,
            error_stage: None,
            steps: 0,
            usage: Usage::default(),
            subagent_usage: Usage::default(),
            tools: ToolStats::default(),
            hook_failures: 0,
            started_at: start.at.at,
            finished_at: None,
            duration_ms: None,
            first_seq: start.at.seq,
            response_owed: false,
        });
    }
}
