//! What one pushed envelope changed: the answer of [`Facts::push`](super::Facts::push), so a
//! view kept current live reads the fact that moved instead of matching the event itself.

use serde::Serialize;

/// The fact one envelope changed, by index into [`Facts::turns`](super::Facts::turns), a
/// turn's [`steps`](super::TurnFact::steps) or [`Facts::calls`](super::Facts::calls).
/// An event that changes no fact (a submission, a context block, an answer to an unknown
/// approval) gives none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
#[non_exhaustive]
pub enum FactChange {
    /// A turn attempt began, was configured, failed, ended, or had a counter move.
    Turn { turn: usize, stage: TurnStage },
    /// A step of a turn began, was configured, had its model call retried, or finished.
    Step {
        turn: usize,
        step: usize,
        stage: StepStage,
    },
    /// A stream part of a step was shown; `preliminary` names the call when the part was a
    /// streaming tool's preliminary output (recorded on the call too).
    Chunk {
        turn: usize,
        step: usize,
        preliminary: Option<usize>,
    },
    /// A tool call reached a stage of its life.
    Call { call: usize, stage: CallStage },
}

/// The stages of a turn attempt a [`FactChange::Turn`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TurnStage {
    Started,
    Configured,
    /// A `turn_failed` (the turn's end follows).
    Failed,
    /// A hook failed inside the turn.
    HookFailed,
    /// A sub-agent one of its calls ran ended, with its usage.
    SubagentFinished,
    Finished,
}

/// The stages of a step a [`FactChange::Step`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StepStage {
    Started,
    Configured,
    /// Its model call failed in a retryable way and is sent again.
    Retried,
    Finished,
}

/// The stages of a tool call's life, in the order they usually come: started → (approval
/// asked → answered →) decided → preliminary outputs → finished, or answered by the client,
/// or repaired. A new call state is a new variant here and one arm in the call fold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CallStage {
    Started,
    Decided,
    ApprovalRequested,
    ApprovalAnswered,
    Preliminary,
    Finished,
    ClientAnswered,
    Repaired,
}
