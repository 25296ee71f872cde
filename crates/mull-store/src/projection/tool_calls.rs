//! The tool-call fold: a session's tool calls and turn count from its lifecycle events alone,
//! for tool tables that must not read the session's chunks.

use mull_core::{DecisionAction, Envelope, Event};
use serde::Serialize;

use crate::approvals::{follow_call, ApprovalAnswer, PendingApproval};
use crate::facts::{FactChange, Facts, ToolCallFact, TurnStage};

/// One tool call as its lifecycle events tell it (stream chunks add nothing to these facts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolCallRecord {
    /// The turn the call's first event was filed under.
    pub turn_id: Option<String>,
    pub call_id: String,
    pub tool: String,
    /// From `tool_decided`; `None` before the decision (or for a client tool).
    pub decision: Option<DecisionAction>,
    /// `Some(true)` once it succeeded, `Some(false)` once it failed, `None` while open.
    pub success: Option<bool>,
    /// As `tool_call_finished` recorded it.
    pub duration_ms: Option<u64>,
    /// The answer to the call's approval request, when it asked for one: who answered, and
    /// when. Kept after the call ran, which the turn that ran it does not record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalAnswer>,
}

impl From<&ToolCallFact> for ToolCallRecord {
    fn from(call: &ToolCallFact) -> ToolCallRecord {
        ToolCallRecord {
            turn_id: call.turn_id.clone(),
            call_id: call.call_id.clone(),
            tool: call.tool.clone(),
            decision: call.action(),
            success: call.success(),
            duration_ms: call.outcome.as_ref().and_then(|o| o.duration_ms()),
            approval: call
                .approval
                .as_ref()
                .and_then(|a| a.answer.as_ref())
                .map(ApprovalAnswer::from),
        }
    }
}

/// A session's tool calls and turn count, folded from its lifecycle events so that a
/// session-wide tool table never needs the session's chunks. [`SessionToolCalls::apply`]
/// takes events one at a time, so a reader's snapshot can be kept current from a tail.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionToolCalls {
    pub session_id: String,
    /// Turn attempts started (`turn_started` events).
    pub turns: u64,
    /// Every call, in the order it began.
    pub calls: Vec<ToolCallRecord>,
    /// Calls waiting on a person's approval, or answered and not yet run or denied.
    pub approvals: Vec<PendingApproval>,
    /// The last event applied (0 before any); older or repeated events are ignored.
    pub last_seq: u64,
    /// The facts the calls are read from (a call's index is its fact's).
    #[serde(skip)]
    facts: Facts,
}

impl SessionToolCalls {
    /// No calls yet.
    pub fn new(session_id: impl Into<String>) -> SessionToolCalls {
        SessionToolCalls {
            session_id: session_id.into(),
            turns: 0,
            calls: Vec::new(),
            approvals: Vec::new(),
            last_seq: 0,
            facts: Facts::new(),
        }
    }

    /// Folds one event in. Events of other sessions, chunks and events at or before
    /// [`SessionToolCalls::last_seq`] are ignored, so overlapping reads are harmless.
    pub fn apply(&mut self, env: &Envelope) {
        if env.session_id != self.session_id || env.seq <= self.last_seq {
            return;
        }
        self.last_seq = env.seq;
        if matches!(env.event, Event::Chunk { .. }) {
            return;
        }
        match self.facts.push(env) {
            Some(FactChange::Turn {
                stage: TurnStage::Started,
                ..
            }) => self.turns += 1,
            Some(FactChange::Call { call, stage }) => {
                let fact = &self.facts.calls()[call];
                let record = ToolCallRecord::from(fact);
                match self.calls.get_mut(call) {
                    Some(existing) => *existing = record,
                    None => self.calls.push(record),
                }
                follow_call(&mut self.approvals, fact, stage, None);
            }
            _ => {}
        }
    }
}
