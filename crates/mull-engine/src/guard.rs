//! The one failure guard around code the engine does not own — the agent's hooks, each
//! extension's, the compaction callback, a context block's provider: an error, a panic or
//! outliving its time limit becomes a `hook_failed` event naming the hook and whose code it was,
//! and the caller applies that hook's failure rule. It needs only the log: the hooks
//! dispatcher (`hooks/`) puts each hook's time limit and source on top.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use mull_core::{Event, HookName};

use tokio_util::sync::CancellationToken;

use crate::error::{EngineError, HookResult};
use crate::recorder::Recorder;

tokio::task_local! {
    /// The turn the current task is inside of, if any.
    pub(crate) static TURN_SCOPE: TurnScope;
}

/// Where the current task stands with respect to a session's turn lock.
#[derive(Debug, Clone)]
pub(crate) struct TurnScope {
    pub session_id: String,
    pub request_id: String,
    /// The turn's cancellation: every guarded hook of the turn ends when it fires.
    pub signal: CancellationToken,
}

/// Whose code a guarded call runs, as its `hook_failed` event names it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caller<'a> {
    pub hook: HookName,
    /// `agent`, an extension's name, or `context_block:<name>`.
    pub source: &'a str,
}

impl Caller<'static> {
    /// One of the agent's own hooks.
    pub(crate) fn agent(hook: HookName) -> Caller<'static> {
        Caller {
            hook,
            source: "agent",
        }
    }
}

/// What a panic carried, as text.
pub(crate) fn panic_text(panic: &Box<dyn Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-text payload".to_owned()
    }
}

/// Appends the `hook_failed` event of a guarded call.
pub(crate) fn record_failure(
    recorder: &Recorder,
    turn_id: Option<&str>,
    caller: Caller<'_>,
    error: String,
    panicked: bool,
    timed_out: bool,
) -> Result<(), EngineError> {
    recorder.append(
        turn_id,
        Event::HookFailed {
            hook: caller.hook,
            source: caller.source.to_owned(),
            error,
            panicked,
            timed_out,
        },
    )?;
    Ok(())
}

/// What a hook cut off by its turn's abort reports (its `hook_failed` error).
pub(crate) const CUT_OFF_BY_ABORT: &str = "cut off: the turn was aborted while this hook ran";

/// A hook that was not done at its first poll, bounded by `limit` and by the abort of the turn
/// the task runs.
async fn bounded<F: Future>(
    caught: std::pin::Pin<&mut F>,
    limit: Option<Duration>,
) -> Result<F::Output, Unfinished> {
    let bounded = async {
        match limit {
            None => Ok(caught.await),
            Some(limit) => tokio::time::timeout(limit, caught)
                .await
                .map_err(|_| Unfinished::TimedOut),
        }
    };
    // Outside a turn (`on_chat_response`, a session's setup) nothing aborts the hook.
    let signal = TURN_SCOPE
        .try_with(|scope| scope.signal.clone())
        .unwrap_or_default();
    // The hook first: one that is ready when the abort arrives still finishes. The abort can
    // land between the hook's poll and the signal's (another thread cancels), so when the
    // signal wins the hook gets one more poll: a hook that watches the abort and returns
    // promptly finishes whichever order the two polls saw.
    let mut bounded = std::pin::pin!(bounded);
    tokio::select! {
        biased;
        outcome = &mut bounded => outcome,
        _ = signal.cancelled() => bounded.now_or_never().unwrap_or(Err(Unfinished::Aborted)),
    }
}

/// How a guarded call ended when it did not return.
enum Unfinished {
    TimedOut,
    Aborted,
}

/// Runs `fut` for `caller`, bounded by `limit` and by the abort of the turn the task runs
/// (with no hook timeout, as Think's default, a hung hook would otherwise hold the turn lock
/// for good), catching panics. `Ok(Err(text))` means it failed (recorded as `hook_failed`)
/// and the caller applies that hook's failure rule — after an abort, the turn then ends as
/// aborted at its next check of the signal.
pub(crate) async fn guarded<T>(
    recorder: &Recorder,
    turn_id: Option<&str>,
    caller: Caller<'_>,
    limit: Option<Duration>,
    fut: impl Future<Output = HookResult<T>>,
) -> Result<Result<T, String>, EngineError> {
    let mut caught = std::pin::pin!(AssertUnwindSafe(fut).catch_unwind());
    // Most hooks are done at their first poll (a counter, a log line): those need no timer and
    // no wait on the abort, which would cost a timer entry and a registration on the turn's
    // signal for every streamed part. The rest wait in a future of their own, so that the
    // guard of a quick hook stays small to build and move.
    let outcome = match (&mut caught).now_or_never() {
        Some(done) => Ok(done),
        None => Box::pin(bounded(caught, limit)).await,
    };
    let (error, panicked, timed_out) = match outcome {
        Ok(Ok(Ok(value))) => return Ok(Ok(value)),
        Ok(Ok(Err(error))) => (error.to_string(), false, false),
        Ok(Err(panic)) => (format!("panicked: {}", panic_text(&panic)), true, false),
        Err(Unfinished::TimedOut) => (
            format!(
                "timed out after {} ms",
                limit.unwrap_or_default().as_millis()
            ),
            false,
            true,
        ),
        Err(Unfinished::Aborted) => (CUT_OFF_BY_ABORT.to_owned(), false, false),
    };
    record_failure(
        recorder,
        turn_id,
        caller,
        error.clone(),
        panicked,
        timed_out,
    )?;
    Ok(Err(error))
}
