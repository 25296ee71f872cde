//! Facts: what a session's events say happened, folded once for every view.
//!
//! A **fact** is one thing the log tells about a session, with the seq and time of each event
//! that told it: a turn attempt ([`TurnFact`]: started, configured, failed, finished, its usage
//! and hook failures), each of its steps ([`StepFact`]: started, configured, retried, the
//! stream parts it showed with their text, finished with the provider's usage), and each tool
//! call ([`ToolCallFact`]: started, decided, approval asked and answered and by whom,
//! preliminary outputs, then finished, answered by the client, or repaired).
//!
//! [`Facts::push`] takes one envelope at a time and answers with the fact it changed
//! ([`FactChange`]), so the same fold serves a live session (the engine pushes what it has just
//! appended), a tail, and a whole log read back. Views — the projection, the tool tables,
//! pacing, the cost ledger, the UI stream, traces, the dashboard, the diff — read facts and
//! changes instead of matching events; a new event kind or call state is one edit here.
//!
//! **Invariant:** facts are a pure function of the envelopes pushed so far, in the order they
//! were pushed: no clock, no id source, nothing from outside. Two folds fed the same envelopes
//! are equal, whether fed live or from the log. Push one session's events (a fork's history is
//! its origin's prefix, then its own); the fold does not skip repeated seqs — a view reading
//! overlapping pages guards that itself.

mod call;
mod change;
mod turn;

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use mull_core::{Envelope, EventRef};
use serde::Serialize;

pub use call::{
    AnswerFact, AnsweredBy, ApprovalFact, ApprovalRequestFact, CallOutcome, DecisionFact,
    PreliminaryFact, ToolCallFact,
};
pub use change::{CallStage, FactChange, StepStage, TurnStage};
pub use turn::{FailureFact, StepEnd, StepFact, TurnEnd, TurnFact, TurnStart};

/// Where an event stands in the log: its seq and when it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Stamp {
    pub seq: u64,
    pub at: DateTime<Utc>,
}

impl Stamp {
    /// The stamp of `e`.
    pub fn of(e: &EventRef<'_>) -> Stamp {
        Stamp {
            seq: e.seq,
            at: e.at,
        }
    }
}

/// The fold: a session's turns and tool calls as far as its envelopes have been pushed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Facts {
    turns: Vec<TurnFact>,
    calls: Vec<ToolCallFact>,
    /// Call id → index of its newest call: a model may reuse ids across turns.
    #[serde(skip)]
    by_call_id: HashMap<String, usize>,
    /// Approval id → index of the call it belongs to.
    #[serde(skip)]
    by_approval_id: HashMap<String, usize>,
}

impl Facts {
    /// No facts yet.
    pub fn new() -> Facts {
        Facts::default()
    }

    /// Folds in one envelope; see [`Facts::push_ref`].
    pub fn push(&mut self, env: &Envelope) -> Option<FactChange> {
        self.push_ref(EventRef::of(env))
    }

    /// Folds in one event, borrowed in parts (how the engine folds what it has just appended),
    /// and answers with the fact it changed, if any.
    pub fn push_ref(&mut self, e: EventRef<'_>) -> Option<FactChange> {
        if let Some((call, stage)) = self.push_call(&e) {
            return Some(FactChange::Call { call, stage });
        }
        self.push_turn(&e)
    }

    /// Every turn attempt, in the order they began.
    pub fn turns(&self) -> &[TurnFact] {
        &self.turns
    }

    /// Every tool call, in the order they began.
    pub fn calls(&self) -> &[ToolCallFact] {
        &self.calls
    }

    /// The newest turn attempt with this id.
    pub fn turn(&self, turn_id: &str) -> Option<&TurnFact> {
        self.turns
            .iter()
            .rev()
            .find(|t| t.turn_id.as_deref() == Some(turn_id))
    }

    /// The newest call with this id.
    pub fn call(&self, call_id: &str) -> Option<&ToolCallFact> {
        self.by_call_id.get(call_id).map(|&i| &self.calls[i])
    }

    /// The calls whose first event was filed under `turn_id`, in the order they began.
    pub fn calls_of_turn<'a>(
        &'a self,
        turn_id: &'a str,
    ) -> impl Iterator<Item = &'a ToolCallFact> + 'a {
        self.calls
            .iter()
            .filter(move |c| c.turn_id.as_deref() == Some(turn_id))
    }

    /// The calls step `step` of turn `turn_id` started, in the order it started them.
    pub fn calls_of_step<'a>(
        &'a self,
        turn_id: &'a str,
        step: u32,
    ) -> impl Iterator<Item = &'a ToolCallFact> + 'a {
        self.calls_of_turn(turn_id)
            .filter(move |c| c.step == Some(step) && c.started.is_some())
    }

    /// The call whose approval `approval_id` asked.
    pub fn approval(&self, approval_id: &str) -> Option<&ToolCallFact> {
        self.by_approval_id
            .get(approval_id)
            .map(|&i| &self.calls[i])
    }
}

#[cfg(test)]
mod tests;
