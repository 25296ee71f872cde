//! Recovery as a function of the log: what resolves a turn that a writer left open when it
//! stopped (a crash, a kill, a full disk).
//!
//! A turn is open from its `turn_started` to its `turn_finished`. When the process writing it
//! dies in between, nothing will ever finish it, so the next writer does, from what the log
//! holds: the partial assistant message is kept (its text and reasoning closed), a tool call in
//! it whose outcome the log recorded shows that outcome, every other call in it without a
//! final result is repaired as interrupted — a call whose decision was
//! recorded is never run again, and a streaming tool's last preliminary output is progress,
//! never its answer — and the turn ends as an error at stage `recovery`.
//!
//! **Architecture invariant:** one writer per file means that a turn the opening writer finds
//! open was left by a writer that is gone. [`Log::open`](crate::Log::open) therefore resolves
//! every such turn, of every session, before it takes any other append — whichever session the
//! new process goes on to use, or none. The engine uses [`resolve_turn`] too, for a session it
//! opens with a turn still running (on a backend with one writer per session, or in a replay
//! re-enacting a crash), so both write the same events.

use mull_core::{ErrorStage, Event, ToolPart, ToolPartState, TurnStatus, UIMessage, UIPart};

use crate::facts::CallOutcome;
use crate::projection::{SessionState, TurnSummary};

/// The error an interrupted turn ends with.
pub const INTERRUPTED_TURN: &str =
    "the turn was interrupted (the process stopped) before it finished";

/// The text a repaired tool call shows (to the model and the user) in place of a result.
pub const INTERRUPTED_TOOL_CALL: &str =
    "The tool call was interrupted before a result was recorded.";

/// A turn the opening writer found left open by one that is gone, and resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredTurn {
    pub session_id: String,
    pub turn_id: String,
    pub request_id: String,
    /// Whether a partial assistant message was kept.
    pub kept_partial: bool,
    /// Tool calls repaired as interrupted.
    pub repaired_calls: usize,
}

/// Whether a tool part has no final result: its input is still open, or all it has is a
/// streaming tool's preliminary output.
pub fn without_result(tool: &ToolPart) -> bool {
    matches!(
        tool.state,
        ToolPartState::InputStreaming | ToolPartState::InputAvailable
    ) || tool.preliminary
}

/// The draft with every text and reasoning block closed, as it is persisted.
pub fn closed(mut message: UIMessage) -> UIMessage {
    for part in &mut message.parts {
        match part {
            UIPart::Text { streaming, .. } | UIPart::Reasoning { streaming, .. } => {
                *streaming = false
            }
            _ => {}
        }
    }
    message
}

/// The events that resolve `turn`, a running turn of `state` whose writer is gone, up to its
/// `turn_finished`: the partial message (when it has content), then a `tool_call_repaired` for
/// each call in it without a final result that no client is asked for. The `turn_failed` that
/// reports it is [`interrupted_failure`], written by whoever reports the failure.
pub fn resolve_turn(state: &SessionState, turn: &TurnSummary) -> Vec<Event> {
    let mut events = Vec::new();
    let draft = state
        .draft
        .clone()
        .filter(|d| d.id == turn.message_id)
        .map(closed)
        .filter(|m| m.parts.iter().any(|p| !matches!(p, UIPart::StepStart)));
    if let Some(mut message) = draft {
        let mut repairs = Vec::new();
        for part in &mut message.parts {
            let UIPart::Tool(tool) = part else { continue };
            if !without_result(tool)
                || state
                    .pending_client_calls
                    .iter()
                    .any(|p| p.call_id == tool.call_id)
            {
                continue;
            }
            // The log holds the call's outcome (the process stopped before showing it): the
            // message shows it, as its result part would have.
            if show_recorded_outcome(state, turn, tool) {
                continue;
            }
            repairs.push(Event::ToolCallRepaired {
                message_id: message.id.clone(),
                call_id: tool.call_id.clone(),
                tool: tool.tool_name.clone(),
                error_text: INTERRUPTED_TOOL_CALL.to_owned(),
            });
        }
        events.push(Event::AssistantMessageSaved {
            request_id: turn.request_id.clone(),
            message,
        });
        events.extend(repairs);
    }
    // A parked call whose answer the turn had decided may have run: interrupted, never run
    // again (one without a decision never ran, and the next turn acts on its answer).
    for pending in state.pending_approvals.iter().filter(|p| p.decided) {
        events.push(Event::ToolCallRepaired {
            message_id: pending.message_id.clone().unwrap_or_default(),
            call_id: pending.call_id.clone(),
            tool: pending.tool.clone(),
            error_text: INTERRUPTED_TOOL_CALL.to_owned(),
        });
    }
    events.push(Event::TurnFinished {
        request_id: turn.request_id.clone(),
        status: TurnStatus::Error,
        error: Some(INTERRUPTED_TURN.to_owned()),
        steps: turn.steps,
        usage: turn.usage.clone(),
        // The turn's hook never ran: owed, whoever's session opens next decides whether
        // to deliver it.
        response_owed: true,
    });
    events
}

/// Sets `tool`'s result to the outcome the facts hold for its call in `turn` (its
/// `tool_call_finished`), if they hold one; says whether they did.
fn show_recorded_outcome(state: &SessionState, turn: &TurnSummary, tool: &mut ToolPart) -> bool {
    let Some(call) = state
        .facts()
        .call(&tool.call_id)
        .filter(|c| c.turn_id.is_some() && c.turn_id == turn.turn_id)
    else {
        return false;
    };
    let Some(CallOutcome::Finished {
        success,
        output,
        error,
        ..
    }) = &call.outcome
    else {
        return false;
    };
    tool.preliminary = false;
    if *success {
        tool.state = ToolPartState::OutputAvailable;
        tool.output = output.clone();
    } else {
        tool.state = ToolPartState::OutputError;
        tool.error_text = error.clone();
    }
    true
}

/// The `turn_failed` event that reports an interrupted turn (stage `recovery`; the user's
/// messages were persisted before the turn started).
pub fn interrupted_failure(turn: &TurnSummary) -> Event {
    Event::TurnFailed {
        request_id: Some(turn.request_id.clone()),
        stage: ErrorStage::Recovery,
        messages_persisted: true,
        classification: None,
        error: INTERRUPTED_TURN.to_owned(),
        model_error: None,
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};
    use mull_core::{Clock, EntryPath, ErrorStage, FixedClock, StreamPart, UIMessage};
    use serde_json::{json, Value};

    use super::*;
    use crate::writer::Log;

    /// Appends a session whose turn was left running: a partial answer, and (with `tool`) a
    /// streaming tool that had sent progress.
    fn crashed_session(log: &Log, session: &str, at: DateTime<Utc>, tool: bool) {
        let append = |turn: Option<&str>, event: Event| {
            log.append(session, turn, at, event).expect("appends");
        };
        let chunk = |part| Event::Chunk {
            step: 0,
            part,
            original: None,
        };
        let turn = Some("turn_1");
        append(
            None,
            Event::UserMessagesSaved {
                request_id: Some("req_1".into()),
                messages: vec![UIMessage::user("u1", "count")],
            },
        );
        append(
            turn,
            Event::TurnStarted {
                request_id: "req_1".into(),
                message_id: "msg_1".into(),
                entry: EntryPath::SaveMessages,
                continuation: false,
                attempt: 0,
                body: Value::Null,
            },
        );
        append(turn, chunk(StreamPart::TextStart { id: "t".into() }));
        append(
            turn,
            chunk(StreamPart::TextDelta {
                id: "t".into(),
                text: "Counting".into(),
            }),
        );
        if tool {
            append(
                turn,
                chunk(StreamPart::ToolCall {
                    call_id: "c1".into(),
                    tool_name: "count".into(),
                    input: "{}".into(),
                }),
            );
            append(
                turn,
                chunk(StreamPart::ToolResult {
                    call_id: "c1".into(),
                    tool_name: "count".into(),
                    output: json!({"progress": 3}),
                    preliminary: true,
                }),
            );
        }
    }

    #[test]
    fn a_new_writer_resolves_every_session_s_open_turn_before_any_session_opens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.db");
        let clock = FixedClock::at_fixture_epoch();
        {
            let log = Log::open(&path).expect("opens");
            crashed_session(&log, "a", clock.now(), true);
            clock.advance(std::time::Duration::from_secs(1));
            crashed_session(&log, "b", clock.now(), false);
            log.close().expect("closes");
        }
        let log = Log::open(&path).expect("reopens");
        let recovered = log.recovered_at_open();
        assert_eq!(
            recovered
                .iter()
                .map(|r| (r.session_id.as_str(), r.kept_partial, r.repaired_calls))
                .collect::<Vec<_>>(),
            [("a", true, 1), ("b", true, 0)]
        );
        let reader = log.reader().expect("reader");
        assert!(reader.unfinished_turns().expect("reads").is_empty());
        let a = reader.load_session("a").expect("folds");
        let turn = &a.turns[0];
        assert_eq!(turn.status, TurnStatus::Error);
        assert_eq!(turn.error_stage, Some(ErrorStage::Recovery));
        // The partial answer is kept; the tool's progress is not taken for its result.
        let answer = a.messages.last().expect("the partial answer");
        assert_eq!(answer.plain_text(), "Counting");
        let tool = answer
            .parts
            .iter()
            .find_map(|p| match p {
                UIPart::Tool(t) => Some(t),
                _ => None,
            })
            .expect("the call");
        assert_eq!(tool.state, ToolPartState::OutputError);
        assert_eq!(tool.output, None);
        assert_eq!(tool.error_text.as_deref(), Some(INTERRUPTED_TOOL_CALL));
        // Stamped when the session was last heard of, not when the log reopened.
        let b = reader.session_events("b", 0).expect("reads");
        let last = b.last().expect("events");
        assert_eq!(last.kind(), "turn_failed");
        assert_eq!(last.at, b[b.len() - 4].at);
        // A log with nothing left open recovers nothing, and writes nothing, at open.
        let before = log.last_seq();
        drop(reader);
        log.close().expect("closes");
        let again = Log::open(&path).expect("reopens");
        assert!(again.recovered_at_open().is_empty());
        assert_eq!(again.last_seq(), before);
    }

    #[test]
    fn a_call_whose_outcome_was_logged_shows_it_instead_of_being_repaired() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.db");
        let clock = FixedClock::at_fixture_epoch();
        {
            let log = Log::open(&path).expect("opens");
            crashed_session(&log, "a", clock.now(), false);
            let append = |event: Event| {
                log.append("a", Some("turn_1"), clock.now(), event)
                    .expect("appends");
            };
            for call_id in ["c1", "c2"] {
                append(Event::Chunk {
                    step: 0,
                    part: StreamPart::ToolCall {
                        call_id: call_id.into(),
                        tool_name: "count".into(),
                        input: "{}".into(),
                    },
                    original: None,
                });
                append(Event::ToolCallStarted {
                    step: 0,
                    call_id: call_id.into(),
                    tool: "count".into(),
                    input: json!({}),
                    client: false,
                    dynamic: false,
                });
            }
            // c1 ran and its outcome was logged; the process stopped before the result part
            // was shown. c2 never finished.
            append(Event::ToolCallFinished {
                step: 0,
                call_id: "c1".into(),
                tool: "count".into(),
                success: true,
                output: Some(json!({"count": 7})),
                error: None,
                duration_ms: 2,
            });
            log.close().expect("closes");
        }
        let log = Log::open(&path).expect("reopens");
        let recovered = log.recovered_at_open();
        assert_eq!(recovered.len(), 1);
        assert_eq!(
            recovered[0].repaired_calls, 1,
            "only the call that never finished"
        );
        let a = log
            .reader()
            .expect("reader")
            .load_session("a")
            .expect("folds");
        let answer = a.messages.last().expect("the partial answer");
        let tools: Vec<_> = answer
            .parts
            .iter()
            .filter_map(|p| match p {
                UIPart::Tool(t) => Some((t.call_id.as_str(), t.state, t.output.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            tools,
            [
                (
                    "c1",
                    ToolPartState::OutputAvailable,
                    Some(json!({"count": 7}))
                ),
                ("c2", ToolPartState::OutputError, None),
            ]
        );
    }
}
