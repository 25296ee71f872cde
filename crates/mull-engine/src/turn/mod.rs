//! One turn, in the seed's order, for every entry path:
//!
//! ```text
//! (queue) → user_messages_saved → transcript repair → turn_started (flushed) → answered approvals
//!   → assemble context
//!   → before_turn → turn_configured
//!   → per step: step_started → before_step → step_configured → model call (retries)
//!       → each part: transforms → [part_transformed] → chunk event → client → on_chunk (the
//!         seed's chunk kinds only; a tool-call's on_chunk waits until its hooks ran)
//!       → each tool call: validate → before_tool_call → tool_decided (durable before it runs)
//!         → execute / block / substitute → tool_call_finished → after_tool_call → tool-result
//!         chunk (decided.rs; or, when approval is asked: tool_approval_requested (flushed), the
//!         turn parks — the next turn acts on the answer before it assembles its context, through
//!         the same decided.rs: parked.rs)
//!     → step_finished → on_step_finish → stop conditions → (barrier before the next step)
//!   → assistant_message_saved → turn_finished (flushed) → [turn_failed → on_chat_error]
//! (lock released) → on_chat_response, while the next queued turn may already run
//! ```
//!
//! Every fact is appended through the session's recorder, which keeps the projection current;
//! the turn reads the draft message and the conversation from that projection.

mod assemble;
mod attempt;
mod backoff;
mod decided;
mod failure;
mod parked;
pub(crate) mod parts;
mod recovery;
pub(crate) mod redeliver;
mod run;
mod step;
mod tool_call;

use std::sync::Arc;

use tracing::Instrument;

use crate::error::EngineError;
use crate::guard::{TurnScope, TURN_SCOPE};
use crate::runtime::{Runtime, TurnOutcome};

use attempt::{persist_messages, run_attempt};
pub(crate) use failure::fail;
use parts::TurnParts;
pub(crate) use recovery::finish_interrupted;
pub(crate) use run::TurnSpec;
use run::{Attempt, Ended};

pub use run::ABORTED_TOOL_CALL;

/// The text a repaired tool call shows.
pub use mull_store::recovery::INTERRUPTED_TOOL_CALL;

pub use crate::memory::compaction::{CONTEXT_KEEP_LAST, CONTEXT_TRUNCATE_CHARS};

/// Runs an entry path's turn under the turn lock, then `on_chat_response` after the lock is
/// released (the seed's rule): whatever the hook starts — awaited or spawned — queues behind
/// the lock like any other caller, so it can neither wait for itself nor run beside another
/// turn. `held` is the lock when the caller already took it (a regeneration retracts messages
/// under the same lock as its turn).
pub(crate) async fn run_entry(
    inner: &Arc<Runtime>,
    spec: TurnSpec,
    held: Option<tokio::sync::MutexGuard<'_, ()>>,
) -> Result<TurnOutcome, EngineError> {
    let guard = match held {
        Some(guard) => guard,
        None => inner.turn_lock().lock().await,
    };
    let scope = TurnScope {
        session_id: inner.session_id().to_owned(),
        request_id: spec.request_id.clone(),
        signal: spec.signal.clone(),
    };
    let parts = TurnParts::of(inner);
    let ended = TURN_SCOPE.scope(scope, run_attempts(&parts, &spec)).await;
    inner.forget_request(&spec.request_id);
    drop(guard);
    let ended = ended?;
    if let Some(response) = ended.response {
        parts.hooks.dispatch(None, &response).await?;
        redeliver::delivered(&parts, &response, false)?;
    }
    Ok(ended.outcome)
}

async fn run_attempts(parts: &TurnParts<'_>, spec: &TurnSpec) -> Result<Ended, EngineError> {
    if let Some(ended) = persist_messages(parts, spec).await? {
        return Ok(ended);
    }
    let mut attempt = 0;
    let mut recoveries = 0;
    loop {
        let make_span = || {
            tracing::info_span!(
                "invoke_agent",
                otel.name = %format!("invoke_agent {}", parts.hooks.agent().name()),
                gen_ai.operation.name = "invoke_agent",
                gen_ai.agent.name = %parts.hooks.agent().name(),
                gen_ai.conversation.id = %parts.session_id(),
                gen_ai.provider.name = tracing::field::Empty,
                gen_ai.request.model = tracing::field::Empty,
                gen_ai.usage.input_tokens = tracing::field::Empty,
                gen_ai.usage.output_tokens = tracing::field::Empty,
                gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
                gen_ai.usage.cache_write.input_tokens = tracing::field::Empty,
                gen_ai.usage.reasoning.output_tokens = tracing::field::Empty,
                error.type = tracing::field::Empty,
                otel.status_description = tracing::field::Empty,
                mull.request_id = %spec.request_id,
                mull.attempt = i64::from(attempt),
            )
        };
        // Under the session's trace parent when it has one (a sub-agent's: the parent's call).
        let span = match &parts.options.trace_parent {
            Some(parent) => parent.in_scope(make_span),
            None => make_span(),
        };
        match run_attempt(parts, spec, attempt, recoveries)
            .instrument(span)
            .await?
        {
            Attempt::Retry => attempt += 1,
            Attempt::Recovered => {
                attempt += 1;
                recoveries += 1;
            }
            Attempt::Done(ended) => return Ok(*ended),
        }
    }
}
