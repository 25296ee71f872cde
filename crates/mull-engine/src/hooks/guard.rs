//! The failure guard around the agent's hooks: an error, a panic or outliving the hook
//! timeout becomes a `hook_failed` event, and the caller applies that hook's failure rule.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use mull_core::{Event, HookName};

use crate::error::{EngineError, HookResult};
use crate::session::Inner;

pub(crate) fn panic_text(panic: &Box<dyn Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a hook panicked with a non-text payload".to_owned()
    }
}

pub(crate) fn record_hook_failure(
    inner: &Arc<Inner>,
    turn_id: Option<&str>,
    hook: HookName,
    error: String,
    panicked: bool,
    timed_out: bool,
) {
    if let Err(e) = inner.recorder.append(
        turn_id,
        Event::HookFailed {
            hook,
            source: "agent".to_owned(),
            error,
            panicked,
            timed_out,
        },
    ) {
        tracing::warn!(error = %e, "hook_failed could not be recorded");
    }
}

/// Runs a hook future, turning an error, a panic or outliving [`Agent::hook_timeout`] into a
/// `hook_failed` event. `Ok(Err(text))` means the hook failed and the caller applies that hook's
/// failure rule.
///
/// [`Agent::hook_timeout`]: crate::Agent::hook_timeout
pub(crate) async fn guard_hook<T>(
    inner: &Arc<Inner>,
    turn_id: Option<&str>,
    hook: HookName,
    fut: impl Future<Output = HookResult<T>>,
) -> Result<Result<T, String>, EngineError> {
    let guarded = AssertUnwindSafe(fut).catch_unwind();
    let outcome = match inner.agent.hook_timeout() {
        None => guarded.await,
        Some(limit) => match tokio::time::timeout(limit, guarded).await {
            Ok(outcome) => outcome,
            Err(_) => {
                let text = format!("timed out after {} ms", limit.as_millis());
                record_hook_failure(inner, turn_id, hook, text.clone(), false, true);
                return Ok(Err(text));
            }
        },
    };
    match outcome {
        Ok(Ok(value)) => Ok(Ok(value)),
        Ok(Err(error)) => {
            let text = error.to_string();
            record_hook_failure(inner, turn_id, hook, text.clone(), false, false);
            Ok(Err(text))
        }
        Err(panic) => {
            let text = format!("panicked: {}", panic_text(&panic));
            record_hook_failure(inner, turn_id, hook, text.clone(), true, false);
            Ok(Err(text))
        }
    }
}

/// Runs an observer hook: a failure is logged as `hook_failed` and the turn goes on.
pub(crate) async fn observe(
    inner: &Arc<Inner>,
    turn_id: Option<&str>,
    hook: HookName,
    fut: impl Future<Output = HookResult<()>>,
) -> Result<(), EngineError> {
    guard_hook(inner, turn_id, hook, fut).await.map(|_| ())
}
