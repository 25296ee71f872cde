//! The server's side of the log's inbox (see [`mull_store::inbox`]): answers a dashboard (or
//! any other process) posted for chats of this server's log. Each [`INBOX_SWEEP_PERIOD`] it
//! opens the session of each chat messages wait for (an existing chat only) and lets the
//! session take its messages. On SQLite the server is the one writer and so takes them all; on
//! PostgreSQL it takes those of the chats it holds and of the chats no node holds (opening one
//! takes its lease), and leaves those of a chat another live node holds to that node. The claim
//! keeps any message from being acted on twice. The session takes its messages
//! ([`mull_engine::Session::take_inbox`]); a continuation an answer starts runs in the
//! background, as one a client's answer starts, for clients to follow with a resume.

use std::collections::BTreeSet;

use mull_engine::CommandOptions;
use mull_store::{InboxStore, INBOX_SWEEP_PERIOD};

use crate::error::ApiError;
use crate::state::{Local, ServerState};

/// Takes every waiting message once; returns how many inputs the sessions acted on.
pub async fn take_inbox(state: &ServerState, inbox: &dyn InboxStore) -> Result<usize, ApiError> {
    let waiting = inbox
        .waiting(None)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let chats: BTreeSet<String> = waiting.iter().map(|e| e.session_id.clone()).collect();
    let mut acted = 0;
    for chat_id in chats {
        let chat = match state.existing_or_holder(&chat_id).await {
            Ok(Local::Here(chat)) => chat,
            // Another live node holds the chat: it takes the message at its own sweep.
            Ok(Local::Elsewhere(_)) => continue,
            Err(ApiError::UnknownChat(_)) => {
                // A message for a chat the log does not hold: refused, so it is not looked at
                // again; stamped by the clock that chat's session would run on.
                let clock = (state.inner.options)(&chat_id).clock;
                for entry in waiting.iter().filter(|e| e.session_id == chat_id) {
                    let now = clock.now();
                    if inbox.claim(entry.id, now).await.unwrap_or(false) {
                        let refused = format!("refused: no chat {chat_id:?}");
                        let _ = inbox.finish(entry.id, &refused).await;
                    }
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        let opts = CommandOptions {
            stream: true,
            ..CommandOptions::default()
        };
        let replies = chat
            .take_inbox(inbox, opts)
            .await
            .map_err(|e| ApiError::Internal(format!("chat {chat_id:?}: {e}")))?;
        acted += replies.len();
    }
    Ok(acted)
}

/// Takes the inbox every [`INBOX_SWEEP_PERIOD`] until the task is aborted.
pub fn spawn_inbox_sweep(
    state: ServerState,
    inbox: Box<dyn InboxStore>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(INBOX_SWEEP_PERIOD);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match take_inbox(&state, inbox.as_ref()).await {
                Ok(0) => {}
                Ok(acted) => tracing::info!(acted, "inbox answers taken"),
                Err(e) => tracing::warn!("taking the inbox: {e}"),
            }
        }
    })
}
