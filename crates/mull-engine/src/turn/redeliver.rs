//! `on_chat_response` again after a crash (Think 0.24's `recovered: true`), for sessions that
//! turn it on (`SessionConfig::redeliver_chat_response`).
//!
//! The log says which deliveries are owed: `chat_response_due` is written right before a
//! request's `turn_finished`, `chat_response_delivered` once its hook returned. A due without a
//! delivery is a hook a dead process never finished; opening the session calls it again for
//! each such request, once, with the turn's end and message as the log holds them, and marks it
//! delivered. A process that dies during the redelivery leaves it owed for the next open.

use std::collections::HashSet;

use mull_core::{Event, Role, UIMessage};

use super::parts::TurnParts;
use crate::context::ChatResponseResult;
use crate::error::EngineError;
use crate::hooks::Observed;

/// Marks `response`'s request delivered, when the session redelivers (and `response` is an
/// `on_chat_response`).
pub(crate) async fn delivered(
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

/// What the log holds of one request whose delivery is owed.
struct Owed {
    request_id: String,
    message_id: String,
    continuation: bool,
    message: Option<UIMessage>,
    end: Option<(mull_core::TurnStatus, Option<String>)>,
}

/// Calls `on_chat_response` with `recovered: true` for every request the log says is owed, in
/// the order they ended. Called when the session opens, before any turn can run.
pub(crate) async fn redeliver_owed(parts: &TurnParts<'_>) -> Result<(), EngineError> {
    if !parts.config.redelivers_chat_response() {
        return Ok(());
    }
    let mut owed: Vec<Owed> = Vec::new();
    let mut done: HashSet<String> = HashSet::new();
    // The latest start of each request: its message id and whether it continued a turn.
    let mut starts: Vec<(String, String, bool)> = Vec::new();
    // The last message saved: a due follows its request's `assistant_message_saved`.
    let mut saved: Option<(String, UIMessage)> = None;
    let mut after = 0;
    loop {
        let page = parts.recorder.page(after, 1_000).await?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for env in page {
            match env.event {
                Event::TurnStarted {
                    request_id,
                    message_id,
                    continuation,
                    ..
                } => {
                    starts.retain(|(r, _, _)| *r != request_id);
                    starts.push((request_id, message_id, continuation));
                }
                Event::ChatResponseDue { request_id } => {
                    done.remove(&request_id);
                    let (message_id, continuation) = starts
                        .iter()
                        .find(|(r, _, _)| *r == request_id)
                        .map(|(_, m, c)| (m.clone(), *c))
                        .unwrap_or_default();
                    let message = saved
                        .take()
                        .filter(|(r, _)| *r == request_id)
                        .map(|(_, m)| m);
                    owed.retain(|o| o.request_id != request_id);
                    owed.push(Owed {
                        request_id,
                        message_id,
                        continuation,
                        message,
                        end: None,
                    });
                }
                Event::AssistantMessageSaved {
                    request_id,
                    message,
                } => saved = Some((request_id, message)),
                Event::TurnFinished {
                    request_id,
                    status,
                    error,
                    ..
                } => {
                    if let Some(o) = owed.iter_mut().find(|o| o.request_id == request_id) {
                        o.end = Some((status, error));
                    }
                }
                Event::ChatResponseDelivered { request_id, .. } => {
                    done.insert(request_id);
                }
                _ => {}
            }
        }
    }
    for o in owed {
        if done.contains(&o.request_id) {
            continue;
        }
        // A due whose `turn_finished` never reached the log: the turn did not end there, and
        // reopening recovers it as an interrupted turn instead.
        let Some((status, error)) = o.end else {
            continue;
        };
        let message = o.message.unwrap_or(UIMessage {
            id: o.message_id,
            role: Role::Assistant,
            metadata: None,
            parts: Vec::new(),
        });
        let response = Observed::ChatResponse(ChatResponseResult {
            message,
            request_id: o.request_id,
            continuation: o.continuation,
            status,
            error,
            recovered: true,
        });
        parts.hooks.dispatch(None, &response).await?;
        delivered(parts, &response, true).await?;
    }
    parts.recorder.flush().await
}
