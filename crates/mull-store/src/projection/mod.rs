//! Projections: the state of a session as a fold over its events.
//!
//! [`SessionState::apply`] takes one envelope at a time, so the live engine keeps a state
//! current as it appends, and opening a session rebuilds the same state from the log.
//! Applying is cheap (no per-event allocation beyond what the state keeps). A tool call's
//! events, and a turn's and a step's, are read through the session's
//! [`Facts`](crate::facts::Facts) (lifecycle events only; the draft reads the stream parts),
//! so their life is interpreted in one place.

mod approval_fold;
mod call_fold;
mod draft;
mod fold;
mod state;
mod step_record;
mod tool_calls;
mod turn_fold;

pub use fold::FORKED_TOOL_CALL;
pub use state::{
    PendingClientCall, SessionState, SubagentParent, SubagentRun, Submission, SubmissionPhase,
    ToolStats, TurnSummary,
};
pub use tool_calls::{SessionToolCalls, ToolCallRecord};

#[cfg(test)]
mod tests;
