//! The inputs a recording received, read from its input events (checked first: a turn no
//! input requested is refused, naming its seq), and where its processes stopped.

use std::collections::{HashMap, VecDeque};

use mull_core::{EntryPath, Event, Input, TurnStatus};
use mull_store::{SessionState, SubmissionPhase};

use super::recording::Recording;
use super::{PendingCancel, ReplayError};

/// What the driver does at one place of the recording.
#[derive(Debug, Clone)]
pub(super) enum Step {
    /// The process that ran the session stopped, and the next writer to open the log resolved
    /// the turn it left running (`mull_store::recovery`), before any session opened.
    Recover,
    /// The session was opened again (after the first time); its recovery re-ran the
    /// submissions `reruns` (accepted, never applied) in the background.
    Reopen { reruns: Vec<String> },
    /// A recorded input, re-issued through `Session::command`.
    Issue(Input),
    /// A submission the recorded process accepted and stopped before applying: only its
    /// acceptance is recorded again (a reopen's recovery runs it).
    AcceptOnly(Input),
    /// A sub-agent's session was linked to its parent's tool call (`subagent_linked`, written
    /// by the parent's call before the child's turn was requested): written again.
    Linked(Box<Event>),
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
            Event::TurnRequested { request_id: id, .. }
            | Event::UserMessagesSaved {
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

/// Whether a turn of this entry is started by a `turn_requested` input (the others follow a
/// submission or a client tool result).
fn requested_entry(entry: EntryPath) -> bool {
    matches!(
        entry,
        EntryPath::Chat
            | EntryPath::Http
            | EntryPath::SaveMessages
            | EntryPath::SubAgent
            | EntryPath::ContinueLastTurn
            | EntryPath::Regenerate
    )
}

/// Checks that every turn the recording shows was requested by an input event before it,
/// and that every input event can be acted on. A log written before inputs were recorded as
/// events (it holds turns but no `turn_requested`) is refused naming its format, as is a
/// malformed or out-of-order input, naming its seq.
pub(super) fn check(recording: &Recording) -> Result<(), ReplayError> {
    let envelopes = &recording.envelopes;
    let has_requests = envelopes
        .iter()
        .any(|e| matches!(e.event, Event::TurnRequested { .. }));
    let mut requested: HashMap<String, EntryPath> = HashMap::new();
    for envelope in envelopes {
        let seq = envelope.seq;
        let cause = match &envelope.event {
            Event::TurnRequested { .. } => {
                let Some(Input::Turn(request)) = Input::from_event(&envelope.event) else {
                    continue;
                };
                request
                    .check()
                    .map_err(|what| ReplayError::BadInput { seq, what })?;
                if requested
                    .insert(request.request_id.clone(), request.entry)
                    .is_some()
                {
                    return Err(ReplayError::BadInput {
                        seq,
                        what: format!("request {:?} was requested twice", request.request_id),
                    });
                }
                continue;
            }
            Event::TurnStarted {
                request_id,
                entry,
                attempt: 0,
                ..
            } if requested_entry(*entry) => Some((request_id.as_str(), Some(*entry))),
            Event::MessagesRetracted {
                request_id: Some(id),
                ..
            } => Some((id.as_str(), Some(EntryPath::Regenerate))),
            _ => None,
        };
        let Some((request_id, entry)) = cause else {
            continue;
        };
        if !has_requests {
            return Err(ReplayError::NoInputEvents {
                session_id: recording.session_id.clone(),
                seq,
                kind: envelope.kind().to_owned(),
                v: envelope.v,
            });
        }
        match requested.get(request_id) {
            None => {
                return Err(ReplayError::BadInput {
                    seq,
                    what: format!(
                        "{} of request {request_id:?} comes before any turn_requested of it",
                        envelope.kind()
                    ),
                })
            }
            Some(asked) if entry.is_some_and(|e| e != *asked) => {
                return Err(ReplayError::BadInput {
                    seq,
                    what: format!(
                        "{} of request {request_id:?} has entry {:?}, but it was requested as {asked:?}",
                        envelope.kind(),
                        entry.unwrap_or(*asked)
                    ),
                })
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// What the driver does, each with the number of events that preceded it: the recording's
/// input events (cancellations apart: see [`cancellations`]) and its processes' stops.
pub(super) fn steps(recording: &Recording) -> Result<Vec<(usize, Step)>, ReplayError> {
    check(recording)?;
    let envelopes = &recording.envelopes;
    let stops = stops(recording);
    let applied_at = |submission: &str| {
        envelopes.iter().position(|e| {
            matches!(&e.event, Event::SubmissionApplied { submission_id, .. } if submission_id == submission)
        })
    };
    let recovered = recoveries(recording);
    let requested: std::collections::HashSet<&str> = envelopes
        .iter()
        .filter_map(|e| match &e.event {
            Event::TurnRequested { request_id, .. } => Some(request_id.as_str()),
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    for (i, envelope) in envelopes.iter().enumerate() {
        let step = match &envelope.event {
            _ if recovered.contains(&i) => Step::Recover,
            Event::SessionOpened { .. } if i > 0 => Step::Reopen {
                reruns: if stops.contains(&i) {
                    accepted_at(recording, i)
                } else {
                    Vec::new()
                },
            },
            Event::CancellationRequested { .. } => continue,
            Event::SubagentLinked { .. } => Step::Linked(Box::new(envelope.event.clone())),
            Event::SubmissionAccepted { submission_id, .. } => {
                let Some(input) = Input::from_event(&envelope.event) else {
                    continue;
                };
                // The recorded process stopped before this submission's run wrote anything: its
                // run's first event (`user_messages_saved` under a request no input names,
                // then `submission_applied`) is not before the stop.
                let stopped_first = stops.iter().find(|at| **at > i).is_some_and(|stop| {
                    applied_at(submission_id).is_none_or(|applied| applied > *stop)
                        && !envelopes[i..*stop].iter().any(|e| {
                            matches!(&e.event, Event::UserMessagesSaved { request_id: Some(r), .. }
                                if !requested.contains(r.as_str()))
                        })
                });
                if stopped_first {
                    Step::AcceptOnly(input)
                } else {
                    Step::Issue(input)
                }
            }
            event => match Input::from_event(event) {
                Some(input) => Step::Issue(input),
                None => continue,
            },
        };
        out.push((i, step));
    }
    Ok(out)
}

/// The recording's cancellations, each re-issued once the replay has written every event that
/// preceded it (they land inside a running turn, so the replay's waiting points issue them).
pub(super) fn cancellations(recording: &Recording) -> VecDeque<PendingCancel> {
    recording
        .envelopes
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match Input::from_event(&e.event) {
            Some(input @ Input::Cancel { .. }) => Some(PendingCancel { before: i, input }),
            _ => None,
        })
        .collect()
}
