//! A clean stop: once the server stops accepting, running turns get a grace period to finish;
//! what still runs after it is cancelled, so each ends `aborted` with a durable turn end, and
//! every stream following it gets that end and then `[DONE]` (or `end` on a WebSocket).

use std::time::Duration;

use tokio::time::Instant;

use crate::chat;
use crate::state::ServerState;

/// The default time running turns get to finish once a stop is asked for.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// How long cancelled turns get to record their end.
const ABORT_WAIT: Duration = Duration::from_secs(5);

/// How often the running turns are looked at while waiting.
const POLL: Duration = Duration::from_millis(20);

/// Waits up to `grace` for the running turns to end, then cancels the rest and waits (briefly)
/// for them to record their end. Returns the chats whose turns were cancelled.
pub(crate) async fn finish_turns(state: &ServerState, grace: Duration) -> Vec<String> {
    let running = state.busy_chats();
    if running.is_empty() {
        return Vec::new();
    }
    tracing::info!(
        chats = running.len(),
        grace_ms = grace.as_millis() as u64,
        "waiting for running turns to finish"
    );
    if wait_quiet(state, Instant::now() + grace).await {
        return Vec::new();
    }
    let left = state.busy_chats();
    let mut cancelled = Vec::new();
    for chat_id in left {
        match chat::cancel_here(state, &chat_id).await {
            Ok(ids) => {
                tracing::info!(chat = %chat_id, ?ids, "turn cancelled: the grace period ran out");
                cancelled.push(chat_id);
            }
            Err(e) => tracing::warn!(chat = %chat_id, "cancelling at shutdown: {e}"),
        }
    }
    if !wait_quiet(state, Instant::now() + ABORT_WAIT).await {
        tracing::warn!(
            chats = ?state.busy_chats(),
            "chats still busy after their turns were cancelled"
        );
    }
    cancelled
}

/// Whether every open session became quiet before `deadline`.
async fn wait_quiet(state: &ServerState, deadline: Instant) -> bool {
    loop {
        if state.busy_chats().is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}
