//! The inbox entry: messages another process posted for this session (see
//! [`mull_store::inbox`]) enter through [`Session::command`] as the inputs they stand for, so
//! an answer from the dashboard is an input event like any other.

use mull_store::{InboxStore, StoreError};

use crate::error::EngineError;

use super::{CommandOptions, Reply, Session};

impl Session {
    /// Takes the messages waiting in `inbox` for this session, oldest first: claims each (so
    /// no other taker acts on it), issues its input through [`Session::command`] with `opts`,
    /// and records what came of it on the row. An input the session refuses (an approval it
    /// never asked, or one already answered) is recorded as refused and writes nothing to the
    /// log; a row that does not decode likewise. Returns the replies of the inputs acted on.
    ///
    /// A storage failure gives the message being acted on back (the next sweep retries) and
    /// ends the sweep with the error.
    pub async fn take_inbox(
        &self,
        inbox: &dyn InboxStore,
        opts: CommandOptions,
    ) -> Result<Vec<Reply>, EngineError> {
        let store_err = |source: StoreError| EngineError::Store {
            session_id: self.inner.session_id().to_owned(),
            source,
        };
        let mut replies = Vec::new();
        for entry in inbox.waiting(Some(self.id())).await.map_err(store_err)? {
            let now = self.inner.options().clock.now();
            if !inbox.claim(entry.id, now).await.map_err(store_err)? {
                continue;
            }
            let message = match entry.message {
                Ok(message) => message,
                Err(why) => {
                    tracing::warn!(session = %self.id(), id = entry.id, "inbox message refused: {why}");
                    inbox
                        .finish(entry.id, &format!("refused: {why}"))
                        .await
                        .map_err(store_err)?;
                    continue;
                }
            };
            match self.command(message.to_input(), opts.clone()).await {
                Ok(reply) => {
                    inbox
                        .finish(entry.id, "answered")
                        .await
                        .map_err(store_err)?;
                    replies.push(reply);
                }
                Err(
                    e @ (EngineError::UnknownApproval { .. }
                    | EngineError::ApprovalAlreadyAnswered { .. }
                    | EngineError::InvalidInput { .. }),
                ) => {
                    tracing::warn!(session = %self.id(), id = entry.id, "inbox message refused: {e}");
                    inbox
                        .finish(entry.id, &format!("refused: {e}"))
                        .await
                        .map_err(store_err)?;
                }
                Err(e) => {
                    // Nothing may have been recorded: let the next sweep try again.
                    inbox.release(entry.id).await.map_err(store_err)?;
                    return Err(e);
                }
            }
        }
        Ok(replies)
    }
}
