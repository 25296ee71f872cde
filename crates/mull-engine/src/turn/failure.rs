//! Reporting a failed turn: `turn_failed` (flushed and published), then `on_chat_error`.

use mull_core::{wire_name, Event, HookName, ModelErrorRecord};

use super::parts::TurnParts;
use crate::context::ChatErrorContext;
use crate::error::ChatError;

/// Marks `span` (a turn's `invoke_agent` or a step's `chat`) as failed: an error status with
/// the message, and the failure's classification (or stage) as `error.type`.
pub(crate) fn mark_span(span: &tracing::Span, error: &ChatError) {
    span.record("otel.status_description", error.message.as_str());
    let kind = match error.classification {
        Some(c) => wire_name(&c),
        None => wire_name(&error.stage),
    };
    if !kind.is_empty() {
        span.record("error.type", kind.as_str());
    }
}

/// Records a failure: `turn_failed` (flushed, and published on the failures channel), then
/// `on_chat_error`, whose answer is returned. Storage errors here are logged, not raised: the
/// caller is already reporting a failure.
pub(crate) async fn fail(
    parts: &TurnParts<'_>,
    turn_id: Option<&str>,
    error: ChatError,
    messages_persisted: bool,
) -> ChatError {
    // The failure on the current `invoke_agent` span.
    mark_span(&tracing::Span::current(), &error);
    let appended = parts.recorder.append(
        turn_id,
        Event::TurnFailed {
            request_id: error.request_id.clone(),
            stage: error.stage,
            messages_persisted,
            classification: error.classification,
            error: error.message.clone(),
            model_error: error.model_error.as_ref().map(ModelErrorRecord::from),
        },
    );
    match appended {
        Ok(appended) => {
            if let Err(e) = parts.recorder.flush().await {
                tracing::warn!(error = %e, "turn_failed could not be flushed");
            }
            parts.publish_failure(parts.recorder.envelope(turn_id, appended));
        }
        Err(e) => tracing::warn!(error = %e, "turn_failed could not be recorded"),
    }
    let ctx = ChatErrorContext {
        request_id: error.request_id.clone(),
        stage: error.stage,
        messages_persisted,
        classification: error.classification,
    };
    let original = error.clone();
    parts
        .hooks
        .catching(turn_id, HookName::OnChatError, |agent| {
            agent.on_chat_error(error, &ctx)
        })
        .unwrap_or(original)
}
