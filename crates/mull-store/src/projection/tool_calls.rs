//! The tool-call fold: a session's tool calls and turn count from its lifecycle events alone,
//! for tool tables that must not read the session's chunks.

use mull_core::{DecisionAction, Envelope, Event, EventRef};
use serde::Serialize;

use crate::approvals::{
    answer_request, mark_decided, push_request, take_closed, ApprovalAnswer, PendingApproval,
};

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
    /// Call id → index of its newest call: a model may reuse ids across turns.
    #[serde(skip)]
    by_call_id: std::collections::HashMap<String, usize>,
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
            by_call_id: std::collections::HashMap::new(),
        }
    }

    /// Folds one event in. Events of other sessions, chunks and events at or before
    /// [`SessionToolCalls::last_seq`] are ignored, so overlapping reads are harmless.
    pub fn apply(&mut self, env: &Envelope) {
        if env.session_id != self.session_id || env.seq <= self.last_seq {
            return;
        }
        self.last_seq = env.seq;
        match &env.event {
            Event::TurnStarted { .. } => self.turns += 1,
            Event::ToolCallStarted { call_id, tool, .. } => {
                self.start(env, call_id, tool);
            }
            Event::ToolDecided {
                call_id,
                tool,
                action,
                ..
            } => {
                self.call(env, call_id, tool).decision = Some(*action);
                mark_decided(&mut self.approvals, call_id);
            }
            Event::ToolCallFinished {
                call_id,
                tool,
                success,
                duration_ms,
                ..
            } => {
                let call = self.call(env, call_id, tool);
                call.success = Some(*success);
                call.duration_ms = Some(*duration_ms);
                take_closed(&mut self.approvals, call_id, true);
            }
            Event::ClientToolResult {
                call_id,
                tool,
                error,
                ..
            } => {
                self.call(env, call_id, tool).success = Some(error.is_none());
            }
            Event::ToolCallRepaired { call_id, tool, .. } => {
                self.call(env, call_id, tool).success = Some(false);
                take_closed(&mut self.approvals, call_id, false);
            }
            Event::ToolApprovalRequested { .. } => {
                push_request(&mut self.approvals, &EventRef::of(env), None);
            }
            Event::ToolApprovalAnswered {
                approval_id,
                approved,
                reason,
                expired,
                ..
            } => {
                let answer = ApprovalAnswer {
                    approved: *approved,
                    reason: reason.clone(),
                    expired: *expired,
                    at: env.at,
                };
                answer_request(&mut self.approvals, approval_id, answer);
            }
            _ => {}
        }
    }

    fn start(&mut self, env: &Envelope, call_id: &str, tool: &str) -> usize {
        self.calls.push(ToolCallRecord {
            turn_id: env.turn_id.clone(),
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            decision: None,
            success: None,
            duration_ms: None,
        });
        let index = self.calls.len() - 1;
        self.by_call_id.insert(call_id.to_owned(), index);
        index
    }

    /// The newest call with this id, begun here if its start was never seen.
    fn call(&mut self, env: &Envelope, call_id: &str, tool: &str) -> &mut ToolCallRecord {
        let index = match self.by_call_id.get(call_id) {
            Some(&index) => index,
            None => self.start(env, call_id, tool),
        };
        &mut self.calls[index]
    }
}
