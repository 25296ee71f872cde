//! Reporting a failed turn: `turn_failed` (flushed and published), then `on_chat_error`.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use mull_core::{Event, HookName, ModelErrorRecord};

use crate::error::ChatError;
use crate::hooks::context::ChatErrorContext;
use crate::hooks::{panic_text, record_hook_failure};
use crate::session::{Inner, Session};

/// Records a failure: `turn_failed` (flushed, and published on the failures channel), then
/// `on_chat_error`, whose answer is returned. Storage errors here are logged, not raised: the
/// caller is already reporting a failure.
pub(crate) async fn fail(
    inner: &Arc<Inner>,
    turn_id: Option<&str>,
    error: ChatError,
    messages_persisted: bool,
) -> ChatError {
    // The failure on the current `invoke_agent` span: an error status, and its classification
    // (or stage) as `error.type`.
    let kind = match error.classification {
        Some(c) => serde_json::to_value(c),
        None => serde_json::to_value(error.stage),
    };
    let span = tracing::Span::current();
    span.record("otel.status_description", error.message.as_str());
    if let Ok(serde_json::Value::String(kind)) = kind {
        span.record("error.type", kind.as_str());
    }
    let appended = inner.recorder.append(
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
            if let Err(e) = inner.recorder.flush().await {
                tracing::warn!(error = %e, "turn_failed could not be flushed");
            }
            Session::publish_failure(inner, inner.recorder.envelope(turn_id, appended));
        }
        Err(e) => tracing::warn!(error = %e, "turn_failed could not be recorded"),
    }
    let ctx = ChatErrorContext {
        request_id: error.request_id.clone(),
        stage: error.stage,
        messages_persisted,
        classification: error.classification,
    };
    let agent = Arc::clone(&inner.agent);
    let original = error.clone();
    match std::panic::catch_unwind(AssertUnwindSafe(|| agent.on_chat_error(error, &ctx))) {
        Ok(shown) => shown,
        Err(panic) => {
            record_hook_failure(
                inner,
                turn_id,
                HookName::OnChatError,
                panic_text(&panic),
                true,
                false,
            );
            original
        }
    }
}
