//! Repairs of what an interrupted turn left behind: tool calls without a result, and a turn an
//! earlier process left running.

use std::sync::Arc;

use mull_core::{ErrorStage, Event, Role, ToolPart, ToolPartState, TurnStatus, UIMessage, UIPart};
use mull_store::TurnSummary;

use super::failure::fail;
use super::{TurnSpec, INTERRUPTED_TOOL_CALL};
use crate::error::{ChatError, EngineError};
use crate::session::Inner;

/// Closes tool calls an interrupted turn left without a result, as `tool_call_repaired`
/// events. A history that cannot be repaired (a call id used twice) fails at stage
/// `transcript`.
pub(super) async fn repair_transcript(
    inner: &Arc<Inner>,
    spec: &TurnSpec,
) -> Result<Result<(), ChatError>, EngineError> {
    let (repairs, duplicate) = inner.recorder.read(|s| {
        let mut seen: Vec<(&str, &str)> = Vec::new();
        let mut duplicate = None;
        let mut repairs = Vec::new();
        for message in &s.messages {
            for part in &message.parts {
                let UIPart::Tool(tool) = part else { continue };
                if let Some((_, first)) = seen.iter().find(|(id, _)| *id == tool.call_id) {
                    duplicate.get_or_insert((
                        tool.call_id.clone(),
                        first.to_string(),
                        message.id.clone(),
                    ));
                }
                seen.push((&tool.call_id, &message.id));
                let open = without_result(tool);
                let awaited = s
                    .pending_client_calls
                    .iter()
                    .any(|p| p.call_id == tool.call_id);
                if message.role == Role::Assistant && open && !awaited {
                    repairs.push((
                        message.id.clone(),
                        tool.call_id.clone(),
                        tool.tool_name.clone(),
                    ));
                }
            }
        }
        (repairs, duplicate)
    });
    if let Some((call_id, first, second)) = duplicate {
        return Ok(Err(ChatError {
            request_id: Some(spec.request_id.clone()),
            ..ChatError::new(
                ErrorStage::Transcript,
                format!(
                    "the history cannot be repaired: tool call id {call_id:?} appears in message \
                     {first:?} and again in message {second:?}"
                ),
            )
        }));
    }
    for (message_id, call_id, tool) in repairs {
        inner.recorder.append(
            None,
            Event::ToolCallRepaired {
                message_id,
                call_id,
                tool,
                error_text: INTERRUPTED_TOOL_CALL.to_owned(),
            },
        )?;
    }
    Ok(Ok(()))
}

/// Whether a tool part has no final result: its input is still open, or all it has is a
/// streaming tool's preliminary output (progress, never the answer).
fn without_result(tool: &ToolPart) -> bool {
    matches!(
        tool.state,
        ToolPartState::InputStreaming | ToolPartState::InputAvailable
    ) || tool.preliminary
}

/// Finishes a turn an earlier process left running: its partial message is kept, each tool
/// call in it that has no final result is repaired as interrupted (a streaming tool's last
/// preliminary output is progress, never its answer, and a call whose decision was recorded
/// is never run again), and the turn ends as an error at stage `recovery`.
pub(crate) async fn finish_interrupted(
    inner: &Arc<Inner>,
    turn: &TurnSummary,
) -> Result<(), EngineError> {
    let turn_id = turn.turn_id.as_deref();
    let (draft, awaited) = inner.recorder.read(|s| {
        let draft = s
            .draft
            .clone()
            .filter(|d| d.id == turn.message_id)
            .map(closed);
        let awaited: Vec<String> = s
            .pending_client_calls
            .iter()
            .map(|p| p.call_id.clone())
            .collect();
        (draft, awaited)
    });
    let has_content = |m: &UIMessage| m.parts.iter().any(|p| !matches!(p, UIPart::StepStart));
    if let Some(message) = draft.filter(has_content) {
        let repairs: Vec<Event> = message
            .parts
            .iter()
            .filter_map(|part| match part {
                UIPart::Tool(tool) if without_result(tool) && !awaited.contains(&tool.call_id) => {
                    Some(Event::ToolCallRepaired {
                        message_id: message.id.clone(),
                        call_id: tool.call_id.clone(),
                        tool: tool.tool_name.clone(),
                        error_text: INTERRUPTED_TOOL_CALL.to_owned(),
                    })
                }
                _ => None,
            })
            .collect();
        inner.recorder.append(
            turn_id,
            Event::AssistantMessageSaved {
                request_id: turn.request_id.clone(),
                message,
            },
        )?;
        for repair in repairs {
            inner.recorder.append(turn_id, repair)?;
        }
    }
    let message = "the turn was interrupted (the process stopped) before it finished";
    inner.recorder.append(
        turn_id,
        Event::TurnFinished {
            request_id: turn.request_id.clone(),
            status: TurnStatus::Error,
            error: Some(message.to_owned()),
            steps: turn.steps,
            usage: turn.usage.clone(),
        },
    )?;
    let error = ChatError {
        request_id: Some(turn.request_id.clone()),
        ..ChatError::new(ErrorStage::Recovery, message)
    };
    fail(inner, turn_id, error, true).await;
    Ok(())
}

/// The draft with every text and reasoning block closed, as it is persisted.
pub(super) fn closed(mut message: UIMessage) -> UIMessage {
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
