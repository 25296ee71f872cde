//! `Session::fork`: a new session whose history is a prefix of another's, going on live with
//! the agent given here.
//!
//! The fork writes one event, `session_forked {origin, origin_seq}`, and opens the new session
//! on it; readers resolve the prefix (see `mull_store::fork`). The origin is never written to,
//! and nothing is shared with it: the fork's state is rebuilt from the log like any session's.

use std::sync::Arc;

use mull_store::{ForkError, ForkPoint, Log, ResolvedFork};

use crate::agent::Agent;
use crate::error::EngineError;
use crate::session::{Session, SessionOptions};

impl Session {
    /// Forks `origin` at `point` into the session `options.session_id` (which must not exist)
    /// and opens it with `agent`. Returns the session and the exact fork point (for a fork
    /// before a turn, with the user messages that started that turn, to send again or not).
    ///
    /// A fork point that does not exist is an error naming it, and nothing is written.
    pub async fn fork(
        log: &Log,
        agent: Arc<dyn Agent>,
        origin: &str,
        point: &ForkPoint,
        options: SessionOptions,
    ) -> Result<(Session, ResolvedFork), EngineError> {
        let target = options.session_id.clone();
        let fork_err = |source: ForkError| EngineError::Fork {
            session_id: target.clone(),
            source,
        };
        log.flush().await.map_err(|e| fork_err(e.into()))?;
        let resolved = log
            .with_reader(|r| Ok(r.fork_point(origin, point)))
            .map_err(|e| fork_err(e.into()))?
            .map_err(fork_err)?;
        if log.has_session(&target).map_err(|e| fork_err(e.into()))? {
            return Err(fork_err(ForkError::Exists(target.clone())));
        }
        log.append(&target, None, options.clock.now(), resolved.event())
            .map_err(|e| fork_err(e.into()))?;
        log.flush().await.map_err(|e| fork_err(e.into()))?;
        let session = Session::open(log, agent, options).await?;
        Ok((session, resolved))
    }
}
