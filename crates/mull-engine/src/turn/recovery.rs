//! Repairs of what an interrupted turn left behind: tool calls without a result, and a turn an
//! earlier process left running.

use mull_core::{ErrorStage, Event, Role, UIPart};
use mull_store::{recovery, TurnSummary};

use super::failure::fail;
use super::parts::TurnParts;
use super::run::TurnSpec;
use crate::error::{ChatError, EngineError};
use mull_store::recovery::INTERRUPTED_TOOL_CALL;

/// Closes tool calls an interrupted turn left without a result, as `tool_call_repaired`
/// events. A history that cannot be repaired (a call id used twice) fails at stage
/// `transcript`.
pub(super) async fn repair_transcript(
    parts: &TurnParts<'_>,
    spec: &TurnSpec,
) -> Result<Result<(), ChatError>, EngineError> {
    let (repairs, duplicate) = parts.recorder.read(|s| {
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
                let open = recovery::without_result(tool);
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
        parts.recorder.append(
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

/// Finishes a turn an earlier process left running, with the store's recovery
/// ([`mull_store::recovery::resolve_turn`]: the partial message kept, each call without a final
/// result repaired as interrupted, the turn ended as an error at stage `recovery`), then
/// reports it: `turn_failed`, and `on_chat_error` when `report` is on (a session reopened by a
/// live process; a replay re-enacting the log's own recovery writes the same events and calls
/// no hook, as the log's recovery at open does).
pub(crate) async fn finish_interrupted(
    parts: &TurnParts<'_>,
    turn: &TurnSummary,
    report: bool,
) -> Result<(), EngineError> {
    let turn_id = turn.turn_id.as_deref();
    let events = parts.recorder.read(|s| recovery::resolve_turn(s, turn));
    for event in events {
        parts.recorder.append(turn_id, event)?;
    }
    if report {
        let error = ChatError {
            request_id: Some(turn.request_id.clone()),
            ..ChatError::new(ErrorStage::Recovery, recovery::INTERRUPTED_TURN)
        };
        fail(parts, turn_id, error, true).await;
    } else {
        parts
            .recorder
            .append(turn_id, recovery::interrupted_failure(turn))?;
        parts.recorder.flush().await?;
    }
    Ok(())
}

pub(super) use mull_store::recovery::closed;
