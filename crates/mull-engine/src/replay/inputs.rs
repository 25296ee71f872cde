//! The inputs a recording received from outside the engine, found in its events, and where its
//! processes stopped.

use std::collections::VecDeque;

use mull_core::{EntryPath, Event, Role, ToolPartState, TurnStatus, UIMessage};
use mull_store::{SessionState, SubmissionPhase};
use serde_json::Value;

use crate::session::{ClientToolOutcome, Session};

use super::recording::Recording;
use super::{PendingCancel, ReplayError};

/// An input the recording received from outside the engine, to re-issue at its place.
#[derive(Debug, Clone)]
pub(super) enum Input {
    /// The process that ran the session stopped, and the next writer to open the log resolved
    /// the turn it left running (`mull_store::recovery`), before any session opened.
    Recover,
    /// The session was opened again (after the first time); its recovery re-ran the
    /// submissions `reruns` (accepted, never applied) in the background.
    Reopen {
        reruns: Vec<String>,
    },
    /// Messages through an entry path that saves them and runs a turn.
    Messages {
        entry: EntryPath,
        messages: Vec<UIMessage>,
        body: Value,
    },
    Submission {
        submission_id: String,
        idempotency_key: Option<String>,
        messages: Vec<UIMessage>,
        body: Value,
        /// The recorded process stopped before the submission was applied: only its
        /// acceptance is recorded again (a reopen's recovery runs it).
        accept_only: bool,
    },
    ContinueLastTurn {
        body: Value,
    },
    /// A regeneration that retracted `retracted` (in conversation order; empty when it
    /// retracted nothing) before its turn ran.
    Regenerate {
        retracted: Vec<String>,
        body: Value,
    },
    ClientToolResult {
        call_id: String,
        outcome: ClientToolOutcome,
    },
    /// A sub-agent's session was linked to its parent's tool call (`subagent_linked`).
    Linked(Event),
    /// A person's answer to an approval request (an expiry is the session's own doing, not
    /// an input).
    ApprovalAnswer {
        approval_id: String,
        approval: crate::Approval,
    },
}

/// Where the recorded process stopped with work in flight — a request whose messages were in
/// but whose turn had not started, a turn still running, a submission not finished, which the
/// next reopen's recovery resolves — as the number of events before that reopen (or before the
/// recording's end, when it was never reopened). Recovery's own reading of the session (the
/// projection) decides what was running.
pub(super) fn stops(recording: &Recording) -> Vec<usize> {
    let recoveries = recoveries(recording);
    let unfinished = |s: &SessionState| {
        s.turns.iter().any(|t| t.status == TurnStatus::Running)
            || s.submissions
                .iter()
                .any(|sub| sub.phase != SubmissionPhase::Finished)
    };
    let mut state = SessionState::new(recording.session_id.clone());
    // A request whose messages were saved (or, for a regeneration, retracted) before its turn.
    let mut awaiting_turn: Option<&str> = None;
    let mut out = Vec::new();
    for (i, envelope) in recording.envelopes.iter().enumerate() {
        if (i > 0
            && matches!(envelope.event, Event::SessionOpened { .. })
            && (awaiting_turn.is_some() || unfinished(&state)))
            || recoveries.contains(&i)
        {
            out.push(i);
            awaiting_turn = None;
        }
        match &envelope.event {
            Event::UserMessagesSaved {
                request_id: Some(id),
                ..
            }
            | Event::MessagesRetracted {
                request_id: Some(id),
                ..
            } => awaiting_turn = Some(id),
            Event::TurnStarted { request_id, .. } if awaiting_turn == Some(request_id) => {
                awaiting_turn = None
            }
            Event::TurnFailed {
                request_id: Some(id),
                ..
            } if awaiting_turn == Some(id) => awaiting_turn = None,
            _ => {}
        }
        state.apply(envelope);
    }
    if awaiting_turn.is_some() || unfinished(&state) {
        out.push(recording.envelopes.len());
    }
    out
}

/// Where the log's own recovery resolved a turn the recorded process left running (see
/// `mull_store::recovery`): the first event of each such block — the partial message, the
/// repaired calls, `turn_finished` — which ends with `turn_failed` at stage `recovery`, written
/// while the turn was still running in the session's fold (a reopen that found it running and
/// resolved it itself is the `session_opened` stop instead).
pub(super) fn recoveries(recording: &Recording) -> Vec<usize> {
    let envelopes = &recording.envelopes;
    let mut state = SessionState::new(recording.session_id.clone());
    let mut out = Vec::new();
    let mut reopened_while_running = false;
    for (i, envelope) in envelopes.iter().enumerate() {
        let running = state.turns.iter().find(|t| t.status == TurnStatus::Running);
        match running {
            None => reopened_while_running = false,
            Some(_) if matches!(envelope.event, Event::SessionOpened { .. }) => {
                reopened_while_running = true
            }
            Some(turn) if !reopened_while_running => {
                if recovery_block_at(envelopes, i, &turn.request_id) {
                    out.push(i);
                }
            }
            Some(_) => {}
        }
        state.apply(envelope);
    }
    out
}

/// Whether the events from `i` on are the log's recovery of request `request`: the partial
/// message, repaired calls and `turn_finished`, then `turn_failed` at stage `recovery`.
fn recovery_block_at(envelopes: &[mull_core::Envelope], i: usize, request: &str) -> bool {
    if !matches!(
        &envelopes[i].event,
        Event::AssistantMessageSaved { request_id, .. } | Event::TurnFinished { request_id, .. }
            if request_id == request
    ) {
        return false;
    }
    for envelope in &envelopes[i..] {
        match &envelope.event {
            Event::AssistantMessageSaved { request_id, .. }
            | Event::TurnFinished { request_id, .. }
                if request_id == request => {}
            Event::ToolCallRepaired { .. } => {}
            Event::TurnFailed {
                request_id: Some(id),
                stage: mull_core::ErrorStage::Recovery,
                ..
            } => return id == request,
            _ => return false,
        }
    }
    false
}

/// The submissions a reopen at `at` finds accepted but never applied (which its recovery
/// runs), in the order recovery takes them.
pub(super) fn accepted_at(recording: &Recording, at: usize) -> Vec<String> {
    let mut state = SessionState::new(recording.session_id.clone());
    for envelope in &recording.envelopes[..at] {
        state.apply(envelope);
    }
    state
        .submissions
        .iter()
        .filter(|sub| sub.phase == SubmissionPhase::Accepted)
        .map(|sub| sub.submission_id.clone())
        .collect()
}

/// The recording's inputs, each with the number of events that preceded it.
pub(super) fn inputs(recording: &Recording) -> Result<Vec<(usize, Input)>, ReplayError> {
    let envelopes = &recording.envelopes;
    let stops = stops(recording);
    let applied_at = |submission: &str| {
        envelopes.iter().position(|e| {
            matches!(&e.event, Event::SubmissionApplied { submission_id, .. } if submission_id == submission)
        })
    };
    let started = |request: &str| {
        envelopes.iter().find_map(|e| match &e.event {
            Event::TurnStarted {
                request_id,
                entry,
                body,
                ..
            } if request_id == request => Some((*entry, body.clone())),
            _ => None,
        })
    };
    let submitted: std::collections::HashSet<&str> = envelopes
        .iter()
        .filter_map(|e| match &e.event {
            Event::SubmissionApplied { request_id, .. } => Some(request_id.as_str()),
            _ => None,
        })
        .collect();
    let recovered = recoveries(recording);
    let mut out = Vec::new();
    let mut saved: std::collections::HashSet<&str> = Default::default();
    let mut retracted_by: std::collections::HashSet<&str> = Default::default();
    for (i, envelope) in envelopes.iter().enumerate() {
        let input = match &envelope.event {
            _ if recovered.contains(&i) => Input::Recover,
            Event::MessagesRetracted {
                request_id,
                message_ids,
            } => {
                let request = request_id.as_deref().unwrap_or_default();
                let Some((EntryPath::Regenerate, body)) = started(request) else {
                    return Err(ReplayError::Unsupported {
                        seq: envelope.seq,
                        what: "a retraction no regeneration's turn followed".to_owned(),
                    });
                };
                retracted_by.insert(request);
                Input::Regenerate {
                    retracted: message_ids.clone(),
                    body,
                }
            }
            Event::TurnStarted {
                request_id,
                entry: EntryPath::Regenerate,
                attempt: 0,
                body,
                ..
            } if !retracted_by.contains(request_id.as_str()) => Input::Regenerate {
                retracted: Vec::new(),
                body: body.clone(),
            },
            Event::SessionOpened { .. } if i > 0 => Input::Reopen {
                reruns: if stops.contains(&i) {
                    accepted_at(recording, i)
                } else {
                    Vec::new()
                },
            },
            Event::UserMessagesSaved {
                request_id,
                messages,
            } => {
                let request = request_id.as_deref().unwrap_or_default();
                if submitted.contains(request) {
                    continue;
                }
                saved.insert(request);
                let (entry, body) =
                    started(request).unwrap_or((EntryPath::SaveMessages, Value::Null));
                if !matches!(
                    entry,
                    EntryPath::SaveMessages
                        | EntryPath::Chat
                        | EntryPath::Http
                        | EntryPath::SubAgent
                ) {
                    return Err(ReplayError::Unsupported {
                        seq: envelope.seq,
                        what: format!("a turn entered through {entry:?}"),
                    });
                }
                Input::Messages {
                    entry,
                    messages: messages.clone(),
                    body,
                }
            }
            Event::SubmissionAccepted {
                submission_id,
                idempotency_key,
                messages,
                body,
            } => Input::Submission {
                submission_id: submission_id.clone(),
                idempotency_key: idempotency_key.clone(),
                messages: messages.clone(),
                body: body.clone(),
                accept_only: stops.iter().find(|at| **at > i).is_some_and(|stop| {
                    applied_at(submission_id).is_none_or(|applied| applied > *stop)
                }),
            },
            Event::TurnStarted {
                request_id,
                entry: EntryPath::ContinueLastTurn,
                attempt: 0,
                body,
                ..
            } if !saved.contains(request_id.as_str()) => {
                Input::ContinueLastTurn { body: body.clone() }
            }
            Event::ClientToolResult {
                call_id,
                state,
                output,
                error,
                ..
            } => Input::ClientToolResult {
                call_id: call_id.clone(),
                outcome: match state {
                    ToolPartState::OutputAvailable => {
                        ClientToolOutcome::Output(output.clone().unwrap_or(Value::Null))
                    }
                    _ => ClientToolOutcome::Error(error.clone()),
                },
            },
            Event::SubagentLinked { .. } => Input::Linked(envelope.event.clone()),
            Event::ToolApprovalAnswered {
                approval_id,
                approved,
                reason,
                expired: false,
                ..
            } => Input::ApprovalAnswer {
                approval_id: approval_id.clone(),
                approval: crate::Approval {
                    approved: *approved,
                    reason: reason.clone(),
                },
            },
            _ => continue,
        };
        out.push((i, input));
    }
    Ok(out)
}

/// The message to name in `Session::regenerate` so that it retracts `retracted` from the
/// session's conversation as it stands: the first retracted message when it is an answer (it
/// and what follows go), else the user message right before it (what follows that goes).
/// `Some(None)` when nothing was retracted (the last message was a question); `None` when the
/// conversation does not hold the first retracted message.
pub(super) fn regeneration_target(
    session: &Session,
    retracted: &[String],
) -> Option<Option<String>> {
    let Some(first) = retracted.first() else {
        return Some(None);
    };
    session.read_state(|s| {
        let at = s.messages.iter().position(|m| &m.id == first)?;
        if s.messages[at].role == Role::Assistant {
            return Some(Some(first.clone()));
        }
        let before = at.checked_sub(1)?;
        Some(Some(s.messages[before].id.clone()))
    })
}

pub(super) fn cancellations(recording: &Recording) -> VecDeque<PendingCancel> {
    recording
        .envelopes
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match &e.event {
            Event::CancellationRequested { request_id, reason } => Some(PendingCancel {
                before: i,
                request_id: request_id.clone(),
                reason: reason.clone(),
            }),
            _ => None,
        })
        .collect()
}
