//! `on_chat_response` again after a crash (Think 0.24's `recovered: true`), unless the session
//! opts out (`SessionConfig::redeliver_chat_response(false)`).
//!
//! The log says which deliveries are owed, with one event per turn: a request's final
//! `turn_finished` carries `response_owed`, and `chat_response_delivered` follows once its
//! hook returned. The projection folds both (`TurnSummary::response_owed`), so opening the
//! session reads what is owed without scanning the log, calls the hook again for each such
//! turn, once, with its end and message as the log holds them, and marks it delivered. A
//! process that dies during the redelivery leaves it owed for the next open.
//!
//! A turn a crash cut short is ended by the reopen's recovery (the log's own at open, or the
//! session's), whose `turn_finished` is owed too: its hook, never called, runs once with the
//! partial message and the error status.
//!
//! A log written before deliveries were recorded has no `response_owed` on any end: read as
//! owing nothing, so reopening it redelivers no past turn.

use mull_core::{Event, Role, UIMessage};

use super::parts::TurnParts;
use crate::context::ChatResponseResult;
use crate::error::EngineError;
use crate::hooks::Observed;

/// Marks `response`'s request delivered, when the session redelivers (and `response` is an
/// `on_chat_response`). The mark is not an output gate — nothing leaves the process on it — so
/// it is committed with the session's next batch, not waited for: a process that dies before
/// then calls the hook once more on reopen, which at-least-once delivery allows (the hook is
/// idempotent by request id), and a turn costs the log one commit, not two.
pub(crate) fn delivered(
    parts: &TurnParts<'_>,
    response: &Observed,
    recovered: bool,
) -> Result<(), EngineError> {
    let Observed::ChatResponse(result) = response else {
        return Ok(());
    };
    if !parts.config.redelivers_chat_response() {
        return Ok(());
    }
    parts.recorder.append(
        None,
        Event::ChatResponseDelivered {
            request_id: result.request_id.clone(),
            recovered,
        },
    )?;
    Ok(())
}

/// Calls `on_chat_response` with `recovered: true` for every turn the projection says is
/// owed that started before `opened` (this open's `session_opened`), in the order they started.
/// Called when the session opens, after its recovery.
pub(crate) async fn redeliver_owed(parts: &TurnParts<'_>, opened: u64) -> Result<(), EngineError> {
    if !parts.config.redelivers_chat_response() {
        return Ok(());
    }
    let owed: Vec<ChatResponseResult> = parts.recorder.read(|s| {
        s.turns
            .iter()
            .filter(|t| t.response_owed && t.first_seq < opened)
            .map(|t| ChatResponseResult {
                // The message as saved, or none when the turn persisted no parts.
                message: s
                    .messages
                    .iter()
                    .find(|m| m.id == t.message_id)
                    .cloned()
                    .unwrap_or_else(|| UIMessage {
                        id: t.message_id.clone(),
                        role: Role::Assistant,
                        metadata: None,
                        parts: Vec::new(),
                    }),
                request_id: t.request_id.clone(),
                continuation: t.continuation,
                status: t.status,
                error: t.error.clone(),
                recovered: true,
            })
            .collect()
    });
    for result in owed {
        let response = Observed::ChatResponse(result);
        parts.hooks.dispatch(None, &response).await?;
        delivered(parts, &response, true)?;
    }
    Ok(())
}
