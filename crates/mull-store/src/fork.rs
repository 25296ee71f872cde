//! Forks: a session whose history is a prefix of another's, resolved by readers.
//!
//! A fork is not a copy. Its first event, `session_forked {origin, origin_seq}`, says "my
//! history is `origin`'s events up to and including `origin_seq`"; readers that rebuild a
//! conversation ([`LogReader::load_session`], [`LogReader::session_history`]) fold the origin's
//! prefix first, then the fork's own events. So forking costs one event however long the
//! origin is, the origin is never touched, and a fork of a fork resolves the same way (the
//! chain is followed to its root; each ancestor is read up to the lowest fork point below it,
//! since seqs grow across a database).
//!
//! Other reads (pages, tails, a turn's events, export) see the rows as stored: a fork's own
//! events. The projection closes what a fork point cuts (see
//! [`SessionState`](crate::SessionState)): a turn running at the fork point is aborted, and the
//! text it streamed so far is the partial assistant message.
//!
//! [`LogReader::fork_point`] turns what a user names — a seq, a turn, a chunk of a turn — into
//! the exact `(origin, seq)`, or a [`ForkError`] naming what does not exist.

use std::collections::HashSet;

use mull_core::{Envelope, Event, UIMessage};
use rusqlite::{params, OptionalExtension};

use crate::error::StoreError;
use crate::reader::{decode_row, Chunks, LogReader, RowError};
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
/// Rows per read transaction while a history is walked.
const PAGE_ROWS: usize = 4096;

/// A turn of a session: its ordinal (from 1) or its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnRef {
    Ordinal(usize),
    Id(String),
}

impl TurnRef {
    /// A number is an ordinal, anything else a turn id.
    pub fn parse(text: &str) -> TurnRef {
        match text.parse() {
            Ok(n) => TurnRef::Ordinal(n),
            Err(_) => TurnRef::Id(text.to_owned()),
        }
    }
}

impl std::fmt::Display for TurnRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TurnRef::Ordinal(n) => write!(f, "{n}"),
            TurnRef::Id(id) => write!(f, "{id:?}"),
        }
    }
}

/// Where to fork a session.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForkPoint {
    /// After the event at this seq (an event of the session).
    AtSeq(u64),
    /// Before the turn began: its user messages are not part of the fork (they are handed
    /// back, so the turn can be run again with other code).
    BeforeTurn(TurnRef),
    /// After the event at this seq, which must be an event of the turn.
    InTurn { turn: TurnRef, seq: u64 },
    /// After the turn's `chunk`-th chunk (from 1).
    AtChunk { turn: TurnRef, chunk: usize },
}

/// A fork point made exact.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedFork {
    pub origin: String,
    /// The fork's history is the origin's events with seq ≤ this.
    pub origin_seq: u64,
    /// The turn the point is inside, if it is inside one.
    pub origin_turn: Option<String>,
    /// For [`ForkPoint::BeforeTurn`]: the user messages that started the turn.
    pub turn_messages: Vec<UIMessage>,
}

impl ResolvedFork {
    /// The fork's first event.
    pub fn event(&self) -> Event {
        Event::SessionForked {
            origin: self.origin.clone(),
            origin_seq: self.origin_seq,
            origin_turn: self.origin_turn.clone(),
        }
    }
}

/// Why a fork point does not exist.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ForkError {
    #[error("no session {0:?} in the log")]
    NoSession(String),
    #[error("session {session:?} has no turn {turn} (it has {turns} turns)")]
    NoTurn {
        session: String,
        turn: TurnRef,
        turns: usize,
    },
    #[error("session {session:?} has no event at seq {seq}")]
    NoEvent { session: String, seq: u64 },
    #[error("seq {seq} is not an event of turn {turn} of session {session:?}")]
    NotInTurn {
        session: String,
        turn: TurnRef,
        seq: u64,
    },
    #[error("turn {turn} of session {session:?} has {chunks} chunks; there is no chunk {chunk}")]
    NoChunk {
        session: String,
        turn: TurnRef,
        chunk: usize,
        chunks: usize,
    },
    #[error("session {0:?} already exists; a fork needs a new session id")]
    Exists(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

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
    fn fork_chain(&self, session_id: &str) -> Result<Vec<(String, u64)>, StoreError> {
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

    /// Makes a fork point exact, or says which part of it does not exist.
    pub fn fork_point(&self, origin: &str, point: &ForkPoint) -> Result<ResolvedFork, ForkError> {
        if !self.has_session(origin)? {
            return Err(ForkError::NoSession(origin.to_owned()));
        }
        let resolved = |origin_seq, origin_turn| ResolvedFork {
            origin: origin.to_owned(),
            origin_seq,
            origin_turn,
            turn_messages: Vec::new(),
        };
        match point {
            ForkPoint::AtSeq(seq) => {
                let (_, turn) = self.event_of(origin, *seq)?;
                Ok(resolved(*seq, turn))
            }
            ForkPoint::InTurn { turn, seq } => {
                let (_, turn_id) = self.turn_id(origin, turn)?;
                let (_, of_turn) = self.event_of(origin, *seq)?;
                if of_turn.as_deref() != Some(turn_id.as_str()) {
                    return Err(ForkError::NotInTurn {
                        session: origin.to_owned(),
                        turn: turn.clone(),
                        seq: *seq,
                    });
                }
                Ok(resolved(*seq, Some(turn_id)))
            }
            ForkPoint::AtChunk { turn, chunk } => {
                let (owner, turn_id) = self.turn_id(origin, turn)?;
                let chunks: Vec<u64> = self
                    .turn_events(&owner, &turn_id)?
                    .iter()
                    .filter(|e| matches!(e.event, Event::Chunk { .. }))
                    .map(|e| e.seq)
                    .collect();
                match chunk.checked_sub(1).and_then(|i| chunks.get(i)) {
                    Some(seq) => Ok(resolved(*seq, Some(turn_id))),
                    None => Err(ForkError::NoChunk {
                        session: origin.to_owned(),
                        turn: turn.clone(),
                        chunk: *chunk,
                        chunks: chunks.len(),
                    }),
                }
            }
            ForkPoint::BeforeTurn(turn) => {
                let (owner, summary) = self.turn_summary(origin, turn)?;
                // The user messages saved for the turn's request, just before it began.
                let saved = self.saved_before(&owner, summary.first_seq, &summary.request_id)?;
                let (bound, messages) = match saved {
                    Some(Envelope {
                        seq,
                        event: Event::UserMessagesSaved { messages, .. },
                        ..
                    }) => (seq - 1, messages),
                    _ => (summary.first_seq - 1, Vec::new()),
                };
                Ok(ResolvedFork {
                    turn_messages: messages,
                    ..resolved(bound, None)
                })
            }
        }
    }

    /// The last `user_messages_saved` of `request_id` before `seq`, from the lifecycle index.
    fn saved_before(
        &self,
        session: &str,
        seq: u64,
        request_id: &str,
    ) -> Result<Option<Envelope>, StoreError> {
        let mut stmt = self
            .connection()
            .prepare_cached(&format!(
                "SELECT seq, session_id, turn_id, at, v, payload FROM events
                 WHERE session_id = ?1 AND {LIFECYCLE_PREDICATE} AND kind = 'user_messages_saved'
                   AND seq < ?2 ORDER BY seq DESC"
            ))
            .map_err(StoreError::sqlite(format!(
                "{}: reading user messages",
                self.path().display()
            )))?;
        let mut rows = stmt
            .query(params![session, i64::try_from(seq).unwrap_or(i64::MAX)])
            .map_err(StoreError::sqlite("reading user messages"))?;
        while let Some(row) = rows
            .next()
            .map_err(StoreError::sqlite("reading user messages"))?
        {
            let env = decode_row(row).map_err(RowError::into_store)?;
            if matches!(&env.event, Event::UserMessagesSaved { request_id: Some(r), .. } if r == request_id)
            {
                return Ok(Some(env));
            }
        }
        Ok(None)
    }

    /// The session and turn of the event at `seq`, which must be an event of `session`'s
    /// history.
    fn event_of(&self, session: &str, seq: u64) -> Result<(String, Option<String>), ForkError> {
        let row: Option<(String, Option<String>)> = i64::try_from(seq)
            .ok()
            .map(|s| {
                self.connection()
                    .prepare_cached("SELECT session_id, turn_id FROM events WHERE seq = ?1")
                    .and_then(|mut st| {
                        st.query_row(params![s], |r| Ok((r.get(0)?, r.get(1)?)))
                            .optional()
                    })
            })
            .transpose()
            .map_err(StoreError::sqlite(format!(
                "{}: looking up seq {seq}",
                self.path().display()
            )))?
            .flatten();
        let chain = self.fork_chain(session)?;
        match row {
            Some((of, turn)) if chain.iter().any(|(s, upto)| *s == of && seq <= *upto) => {
                Ok((of, turn))
            }
            _ => Err(ForkError::NoEvent {
                session: session.to_owned(),
                seq,
            }),
        }
    }

    /// The turns of a session's history (a fork's inherited ones first), each with the
    /// session that wrote it: from the lifecycle index only.
    pub fn history_turns(
        &self,
        session_id: &str,
    ) -> Result<Vec<(String, crate::TurnSummary)>, StoreError> {
        let mut out = Vec::new();
        for (session, upto) in self.fork_chain(session_id)? {
            for turn in self.turns(&session)? {
                if turn.first_seq <= upto {
                    out.push((session.clone(), turn));
                }
            }
        }
        Ok(out)
    }

    fn turn_summary(
        &self,
        session: &str,
        turn: &TurnRef,
    ) -> Result<(String, crate::TurnSummary), ForkError> {
        let turns = self.history_turns(session)?;
        let found = match turn {
            TurnRef::Ordinal(n) => n.checked_sub(1).and_then(|i| turns.get(i)),
            TurnRef::Id(id) => turns.iter().find(|(_, t)| t.turn_id.as_deref() == Some(id)),
        };
        found.cloned().ok_or_else(|| ForkError::NoTurn {
            session: session.to_owned(),
            turn: turn.clone(),
            turns: turns.len(),
        })
    }

    /// The turn's id and the session that wrote it.
    fn turn_id(&self, session: &str, turn: &TurnRef) -> Result<(String, String), ForkError> {
        let (owner, summary) = self.turn_summary(session, turn)?;
        match summary.turn_id {
            Some(id) => Ok((owner, id)),
            None => Err(ForkError::NoTurn {
                session: session.to_owned(),
                turn: turn.clone(),
                turns: 0,
            }),
        }
    }
}
