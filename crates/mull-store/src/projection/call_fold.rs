//! What a tool call's facts change in a session's state, stage by stage: the calls a client
//! must answer, the turn's tool statistics, the call's tool part, and its approval (through
//! the approval fold).

use mull_core::{DecisionAction, ToolPartState};

use super::draft::find_tool_part;
use super::state::{PendingClientCall, SessionState};
use crate::facts::{CallOutcome, CallStage};

impl SessionState {
    /// The call at `call` in the session's facts reached `stage`, in an event filed under
    /// `turn_id`.
    pub(super) fn call_changed(&mut self, call: usize, stage: CallStage, turn_id: Option<&str>) {
        let fact = &self.facts.calls()[call];
        match stage {
            CallStage::Started if fact.client => {
                self.pending_client_calls.push(PendingClientCall {
                    call_id: fact.call_id.clone(),
                    tool: fact.tool.clone(),
                    input: fact.input.clone().unwrap_or_default(),
                    step: fact.step.unwrap_or_default(),
                    turn_id: turn_id.map(str::to_owned),
                });
            }
            CallStage::Decided => {
                let action = fact.action();
                self.approval_followed(call, stage);
                if let (Some(turn), Some(action)) = (self.turn_mut(turn_id), action) {
                    let stats = &mut turn.tools;
                    match action {
                        DecisionAction::Allow => stats.allowed += 1,
                        DecisionAction::Rewrite => stats.rewritten += 1,
                        DecisionAction::Block => stats.blocked += 1,
                        DecisionAction::Substitute => stats.substituted += 1,
                        DecisionAction::Invalid => stats.invalid += 1,
                        DecisionAction::HookFailed => stats.hook_failed += 1,
                        DecisionAction::Denied => stats.denied += 1,
                    }
                }
            }
            CallStage::Finished => {
                let Some(CallOutcome::Finished {
                    success,
                    duration_ms,
                    ..
                }) = fact.outcome
                else {
                    return;
                };
                self.approval_followed(call, stage);
                if let Some(turn) = self.turn_mut(turn_id) {
                    let stats = &mut turn.tools;
                    stats.calls += 1;
                    if !success {
                        stats.failures += 1;
                    }
                    stats.total_duration_ms += duration_ms;
                    stats.max_duration_ms = stats.max_duration_ms.max(duration_ms);
                }
            }
            CallStage::ClientAnswered => {
                let Some(CallOutcome::ClientAnswered {
                    state,
                    output,
                    error,
                    ..
                }) = &fact.outcome
                else {
                    return;
                };
                if let Some(part) = find_tool_part(&mut self.messages, None, &fact.call_id) {
                    part.state = *state;
                    if output.is_some() {
                        part.output = output.clone();
                    }
                    if error.is_some() {
                        part.error_text = error.clone();
                    }
                    part.preliminary = false;
                }
                let call_id = fact.call_id.clone();
                self.pending_client_calls.retain(|c| c.call_id != call_id);
            }
            CallStage::Repaired => {
                let Some(CallOutcome::Repaired {
                    message_id,
                    error_text,
                    ..
                }) = &fact.outcome
                else {
                    return;
                };
                if let Some(part) =
                    find_tool_part(&mut self.messages, Some(message_id), &fact.call_id)
                {
                    // A streaming tool's preliminary output was progress, not a result.
                    part.state = ToolPartState::OutputError;
                    part.error_text = Some(error_text.clone());
                    part.output = None;
                    part.preliminary = false;
                }
                let call_id = fact.call_id.clone();
                self.pending_client_calls.retain(|c| c.call_id != call_id);
                self.approval_followed(call, stage);
            }
            CallStage::ApprovalRequested | CallStage::ApprovalAnswered => {
                self.approval_followed(call, stage)
            }
            _ => {}
        }
    }
}
