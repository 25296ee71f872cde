//! A session's history through its forks: the chain of origins a fork resolves to, and a walk
//! over the rows of that history — each origin's up to the fork point below it, then the
//! session's own (see [`crate::fork`]).

use std::collections::HashSet;

use mull_core::{Envelope, Event};
use rusqlite::OptionalExtension;

use super::rows::{decode_row, RowError};
use super::walk::Chunks;
use super::{LogReader, PAGE_ROWS};
use crate::error::StoreError;
use crate::schema::LIFECYCLE_PREDICATE;

/// What a walk over a session's history is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fold {
    /// Every event, as stored.
    Everything,
    /// A fold into the session's projection: only what it can see.
    Projection,
}

/// The longest chain of forks a log may hold.
const MAX_FORK_DEPTH: usize = 256;

impl LogReader {
    /// The session a fork was made from and the seq its history ends at there, or `None` for
    /// a session that is no fork.
    pub fn fork_origin(&self, session_id: &str) -> Result<Option<(String, u64)>, StoreError> {
        let payload: Option<(i64, String)> = self
            .connection()
            .prepare_cached(&format!(
                "SELECT seq, payload FROM events WHERE session_id = ?1 AND {LIFECYCLE_PREDICATE}
                 AND kind = 'session_forked' ORDER BY seq LIMIT 1"
            ))
            .and_then(|mut s| {
                s.query_row([session_id], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .map_err(StoreError::sqlite(format!(
                "{}: reading the fork origin of {session_id}",
                self.path().display()
            )))?;
        let Some((seq, payload)) = payload else {
            return Ok(None);
        };
        let seq = seq.max(0) as u64;
        match Event::decode(mull_core::EVENT_VERSION, &payload)
            .map_err(|source| StoreError::Decode { seq, source })?
        {
            Event::SessionForked {
                origin, origin_seq, ..
            } => Ok(Some((origin, origin_seq))),
            _ => Ok(None),
        }
    }

    /// The sessions `session_id` was forked from, nearest first (empty for no fork).
    pub fn lineage(&self, session_id: &str) -> Result<Vec<String>, StoreError> {
        Ok(self
            .fork_chain(session_id)?
            .into_iter()
            .rev()
            .skip(1)
            .map(|(session, _)| session)
            .collect())
    }

    /// (session, last seq of its part of the history), from the root origin to `session_id`.
    pub(crate) fn fork_chain(&self, session_id: &str) -> Result<Vec<(String, u64)>, StoreError> {
        let mut chain = vec![(session_id.to_owned(), u64::MAX)];
        let mut seen = HashSet::from([session_id.to_owned()]);
        let mut upto = u64::MAX;
        let mut current = session_id.to_owned();
        while let Some((origin, seq)) = self.fork_origin(&current)? {
            let broken = |why: String| StoreError::ForkChain {
                session_id: session_id.to_owned(),
                why,
            };
            if !seen.insert(origin.clone()) {
                return Err(broken(format!("loops back to {origin}")));
            }
            if chain.len() > MAX_FORK_DEPTH {
                return Err(broken(format!("is deeper than {MAX_FORK_DEPTH}")));
            }
            upto = upto.min(seq);
            chain.push((origin.clone(), upto));
            current = origin;
        }
        chain.reverse();
        Ok(chain)
    }

    /// Hands `f` every row of a session's history in order: for a fork, its origin's rows up
    /// to the fork point (recursively), then its own. With [`Fold::Projection`], only the rows
    /// a fold into a [`SessionState`](crate::SessionState) can see: the chunks of turns closed
    /// before the end of a part of the history are never read (see [`Chunks::ForFoldUpTo`]),
    /// which is what makes opening a fork of a long session cheap.
    pub(crate) fn each_history_row(
        &self,
        session_id: &str,
        fold: Fold,
        mut f: impl FnMut(&rusqlite::Row<'_>) -> Result<(), RowError>,
    ) -> Result<(), StoreError> {
        for (session, upto) in self.fork_chain(session_id)? {
            let chunks = match fold {
                Fold::Everything => Chunks::All,
                Fold::Projection => Chunks::ForFoldUpTo(upto),
            };
            let mut after = 0;
            loop {
                let mut past = false;
                let rows = self.walk_session(
                    &session,
                    after,
                    PAGE_ROWS,
                    chunks,
                    "reading a history",
                    |row| {
                        let seq: u64 = row.get(0)?;
                        if seq > upto {
                            past = true;
                        } else if !past {
                            f(row)?;
                        }
                        after = seq;
                        Ok(())
                    },
                )?;
                if past || rows < PAGE_ROWS {
                    break;
                }
            }
        }
        Ok(())
    }

    /// A session's history as envelopes: for a fork, its origin's events up to the fork point
    /// (each with its own session id), then the fork's own.
    pub fn session_history(&self, session_id: &str) -> Result<Vec<Envelope>, StoreError> {
        let mut out = Vec::new();
        self.each_history_row(session_id, Fold::Everything, |row| {
            out.push(decode_row(row)?);
            Ok(())
        })?;
        Ok(out)
    }
}
