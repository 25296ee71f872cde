//! A tool call's facts: each stage of its life with the seq and time it was recorded, folded
//! from the call's lifecycle events (and the preliminary outputs its stream parts carried).

use chrono::{DateTime, Utc};
use mull_core::{DecisionAction, Event, EventRef, ToolPartState};
use serde::Serialize;
use serde_json::Value;

use super::change::CallStage;
use super::{Facts, Stamp};

/// One tool call, as its events tell it. A call begins with its `tool_call_started` (or with
/// the first later event naming a call id never started, as in a log cut short).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolCallFact {
    pub call_id: String,
    pub tool: String,
    /// The turn the call's first event was filed under.
    pub turn_id: Option<String>,
    /// The step that called it (from `tool_call_started`).
    pub step: Option<u32>,
    /// The input the model gave (from `tool_call_started`).
    pub input: Option<Value>,
    /// A tool with no execute: the client answers it.
    pub client: bool,
    /// A tool its source may change at run time (an MCP server's).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dynamic: bool,
    /// Its `tool_call_started`.
    pub started: Option<Stamp>,
    /// What happens to it (`tool_decided`); an approved call is decided by a later turn.
    pub decision: Option<DecisionFact>,
    /// A person's approval, when it was asked.
    pub approval: Option<ApprovalFact>,
    /// A streaming tool's progress, in order; never its answer.
    pub preliminary: Vec<PreliminaryFact>,
    /// How it ended, once it did.
    pub outcome: Option<CallOutcome>,
}

/// A call's `tool_decided`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DecisionFact {
    pub at: Stamp,
    /// The step it was decided in (the call's own, for a call a later turn acts on).
    pub step: u32,
    pub action: DecisionAction,
    pub effective_input: Value,
    pub reason: Option<String>,
    /// The output the model sees for a block or a substitution.
    pub output: Option<Value>,
}

/// A call's approval: asked, then answered, then acted on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApprovalFact {
    pub approval_id: String,
    /// The request, when its event was pushed: a fold of one turn's events (the turn acting on
    /// an answer) sees the answer to a request an earlier turn made, and not the request.
    pub request: Option<ApprovalRequestFact>,
    /// The first answer; later answers to the same request do not count.
    pub answer: Option<AnswerFact>,
    /// The turn acting on the answer recorded its decision.
    pub decided: bool,
    /// The call has an outcome (a decided call finished, or any call repaired): nothing waits.
    pub closed: bool,
}

/// A call's `tool_approval_requested`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApprovalRequestFact {
    pub at: Stamp,
    /// The step that asked, and the turn (the call's turn may differ after a reused id).
    pub step: u32,
    pub turn_id: Option<String>,
    /// The input the call runs with once approved.
    pub input: Value,
    pub reason: Option<String>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// An answer to an approval request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AnswerFact {
    pub at: Stamp,
    pub approved: bool,
    pub reason: Option<String>,
    pub by: AnsweredBy,
    /// The surface a person answered through, when the log names it (`tool_approval_answered`'s
    /// `by`: `mull dash`, `mull approve`, a chat client, the demo approving by itself).
    pub through: Option<String>,
}

/// Who answered an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AnsweredBy {
    /// A person (through any client).
    Person,
    /// The session itself, denying a request that expired unanswered.
    Expiry,
}

/// A streaming tool's preliminary output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PreliminaryFact {
    pub at: Stamp,
    pub output: Value,
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum CallOutcome {
    /// Its `tool_call_finished`: the outcome as the model sees it.
    Finished {
        at: Stamp,
        success: bool,
        output: Option<Value>,
        error: Option<String>,
        duration_ms: u64,
    },
    /// A client answered a client-side call.
    ClientAnswered {
        at: Stamp,
        state: ToolPartState,
        output: Option<Value>,
        error: Option<String>,
    },
    /// An interrupted turn left it without a result; it was closed with an error.
    Repaired {
        at: Stamp,
        message_id: String,
        error_text: String,
    },
}

impl CallOutcome {
    /// When the outcome was recorded.
    pub fn at(&self) -> Stamp {
        match self {
            CallOutcome::Finished { at, .. }
            | CallOutcome::ClientAnswered { at, .. }
            | CallOutcome::Repaired { at, .. } => *at,
        }
    }

    /// `true` for a success, `false` for a failure, a client's error or a repair.
    pub fn success(&self) -> bool {
        match self {
            CallOutcome::Finished { success, .. } => *success,
            CallOutcome::ClientAnswered { error, .. } => error.is_none(),
            CallOutcome::Repaired { .. } => false,
        }
    }

    /// The duration `tool_call_finished` recorded (none for other outcomes).
    pub fn duration_ms(&self) -> Option<u64> {
        match self {
            CallOutcome::Finished { duration_ms, .. } => Some(*duration_ms),
            _ => None,
        }
    }

    /// The output the outcome carries.
    pub fn output(&self) -> Option<&Value> {
        match self {
            CallOutcome::Finished { output, .. } | CallOutcome::ClientAnswered { output, .. } => {
                output.as_ref()
            }
            CallOutcome::Repaired { .. } => None,
        }
    }

    /// The error text the outcome carries.
    pub fn error(&self) -> Option<&String> {
        match self {
            CallOutcome::Finished { error, .. } | CallOutcome::ClientAnswered { error, .. } => {
                error.as_ref()
            }
            CallOutcome::Repaired { error_text, .. } => Some(error_text),
        }
    }
}

impl ToolCallFact {
    fn new(call_id: &str, tool: &str, turn_id: Option<&str>) -> ToolCallFact {
        ToolCallFact {
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            turn_id: turn_id.map(str::to_owned),
            step: None,
            input: None,
            client: false,
            dynamic: false,
            started: None,
            decision: None,
            approval: None,
            preliminary: Vec::new(),
            outcome: None,
        }
    }

    /// The decision's action, once decided.
    pub fn action(&self) -> Option<DecisionAction> {
        self.decision.as_ref().map(|d| d.action)
    }

    /// `Some(true)` once it succeeded, `Some(false)` once it failed, `None` while open.
    pub fn success(&self) -> Option<bool> {
        self.outcome.as_ref().map(CallOutcome::success)
    }

    /// The approval, while it waits for an answer or for the call to act on it.
    pub fn open_approval(&self) -> Option<&ApprovalFact> {
        self.approval.as_ref().filter(|a| !a.closed)
    }
}

impl Facts {
    /// Folds a tool-call event in; `None` for any other event, or one that changes nothing.
    /// One arm per event of a call's life: this match is the one place they are read, so it is
    /// kept whole.
    pub(super) fn push_call(&mut self, e: &EventRef<'_>) -> Option<(usize, CallStage)> {
        let at = Stamp::of(e);
        match e.event {
            Event::ToolCallStarted {
                step,
                call_id,
                tool,
                input,
                client,
                dynamic,
            } => {
                let index = self.start_call(call_id, tool, e.turn_id);
                let call = &mut self.calls[index];
                call.step = Some(*step);
                call.input = Some(input.clone());
                call.client = *client;
                call.dynamic = *dynamic;
                call.started = Some(at);
                Some((index, CallStage::Started))
            }
            Event::ToolDecided {
                step,
                call_id,
                tool,
                action,
                effective_input,
                reason,
                output,
                ..
            } => {
                let index = self.call_index(call_id, tool, e.turn_id);
                let call = &mut self.calls[index];
                call.decision = Some(DecisionFact {
                    at,
                    step: *step,
                    action: *action,
                    effective_input: effective_input.clone(),
                    reason: reason.clone(),
                    output: output.clone(),
                });
                if let Some(approval) = call
                    .approval
                    .as_mut()
                    .filter(|a| a.answer.is_some() && !a.closed)
                {
                    approval.decided = true;
                }
                Some((index, CallStage::Decided))
            }
            Event::ToolCallFinished {
                call_id,
                tool,
                success,
                output,
                error,
                duration_ms,
                ..
            } => {
                let index = self.call_index(call_id, tool, e.turn_id);
                let call = &mut self.calls[index];
                call.outcome = Some(CallOutcome::Finished {
                    at,
                    success: *success,
                    output: output.clone(),
                    error: error.clone(),
                    duration_ms: *duration_ms,
                });
                // Only a decided approval closes here: an undecided one still waits.
                if let Some(approval) = call.approval.as_mut().filter(|a| a.decided) {
                    approval.closed = true;
                }
                Some((index, CallStage::Finished))
            }
            Event::ClientToolResult {
                call_id,
                tool,
                state,
                output,
                error,
            } => {
                let index = self.call_index(call_id, tool, e.turn_id);
                self.calls[index].outcome = Some(CallOutcome::ClientAnswered {
                    at,
                    state: *state,
                    output: output.clone(),
                    error: error.clone(),
                });
                Some((index, CallStage::ClientAnswered))
            }
            Event::ToolCallRepaired {
                message_id,
                call_id,
                tool,
                error_text,
            } => {
                let index = self.call_index(call_id, tool, e.turn_id);
                let call = &mut self.calls[index];
                call.outcome = Some(CallOutcome::Repaired {
                    at,
                    message_id: message_id.clone(),
                    error_text: error_text.clone(),
                });
                if let Some(approval) = call.approval.as_mut() {
                    approval.closed = true;
                }
                Some((index, CallStage::Repaired))
            }
            Event::ToolApprovalRequested {
                step,
                call_id,
                tool,
                approval_id,
                input,
                reason,
                expires_at,
            } => {
                let index = self.call_index(call_id, tool, e.turn_id);
                self.calls[index].approval = Some(ApprovalFact {
                    approval_id: approval_id.clone(),
                    request: Some(ApprovalRequestFact {
                        at,
                        step: *step,
                        turn_id: e.turn_id.map(str::to_owned),
                        input: input.clone(),
                        reason: reason.clone(),
                        expires_at: *expires_at,
                    }),
                    answer: None,
                    decided: false,
                    closed: false,
                });
                self.by_approval_id.insert(approval_id.clone(), index);
                Some((index, CallStage::ApprovalRequested))
            }
            Event::ToolApprovalAnswered {
                approval_id,
                call_id,
                tool,
                approved,
                reason,
                expired,
                by,
            } => {
                let index = match self.by_approval_id.get(approval_id) {
                    Some(&index) => index,
                    None => self.answer_unseen_request(approval_id, call_id, tool, e.turn_id)?,
                };
                let approval = self.calls[index]
                    .approval
                    .as_mut()
                    .filter(|a| a.approval_id == *approval_id && a.answer.is_none() && !a.closed)?;
                approval.answer = Some(AnswerFact {
                    at,
                    approved: *approved,
                    reason: reason.clone(),
                    by: if *expired {
                        AnsweredBy::Expiry
                    } else {
                        AnsweredBy::Person
                    },
                    through: by.clone(),
                });
                Some((index, CallStage::ApprovalAnswered))
            }
            _ => None,
        }
    }

    /// A streaming tool's preliminary output for a known call.
    pub(super) fn push_preliminary(
        &mut self,
        at: Stamp,
        call_id: &str,
        output: &Value,
    ) -> Option<usize> {
        let index = *self.by_call_id.get(call_id)?;
        self.calls[index].preliminary.push(PreliminaryFact {
            at,
            output: output.clone(),
        });
        Some(index)
    }

    /// The call an answer to a request the fold never saw belongs to, its approval begun
    /// with no request. `None` when the call already holds another approval.
    fn answer_unseen_request(
        &mut self,
        approval_id: &str,
        call_id: &str,
        tool: &str,
        turn_id: Option<&str>,
    ) -> Option<usize> {
        let index = self.call_index(call_id, tool, turn_id);
        let call = &mut self.calls[index];
        if call.approval.is_some() {
            return None;
        }
        call.approval = Some(ApprovalFact {
            approval_id: approval_id.to_owned(),
            request: None,
            answer: None,
            decided: false,
            closed: false,
        });
        self.by_approval_id.insert(approval_id.to_owned(), index);
        Some(index)
    }

    fn start_call(&mut self, call_id: &str, tool: &str, turn_id: Option<&str>) -> usize {
        self.calls.push(ToolCallFact::new(call_id, tool, turn_id));
        let index = self.calls.len() - 1;
        self.by_call_id.insert(call_id.to_owned(), index);
        index
    }

    /// The newest call with this id (a model may reuse ids across turns), begun here if its
    /// start was never seen.
    fn call_index(&mut self, call_id: &str, tool: &str, turn_id: Option<&str>) -> usize {
        match self.by_call_id.get(call_id) {
            Some(&index) => index,
            None => self.start_call(call_id, tool, turn_id),
        }
    }
}
