//! Forks: a session whose history is a prefix of another's, resolved by readers.
//!
//! A fork is not a copy. Its first event, `session_forked {origin, origin_seq}`, says "my
//! history is `origin`'s events up to and including `origin_seq`"; readers that rebuild a
//! conversation ([`ReadLog::load_session`], [`ReadLog::session_history`]) fold the origin's
//! prefix first, then the fork's own events. So forking costs one event however long the
//! origin is, the origin is never touched, and a fork of a fork resolves the same way (the
//! chain is followed to its root; each ancestor is read up to the lowest fork point below it,
//! in a log whose seqs grow across the database).
//!
//! Other reads (pages, tails, a turn's events, export) see the rows as stored: a fork's own
//! events. The projection closes what a fork point cuts (see
//! [`SessionState`](crate::projection::SessionState)): a turn running at the fork point is
//! aborted, and the text it streamed so far is the partial assistant message.
//!
//! `<dyn ReadLog>::fork_point` turns what a user names — a seq, a turn, a chunk of a turn — into
//! the exact `(origin, seq)`, or a [`ForkError`] naming what does not exist.

use mull_core::{Envelope, Event, UIMessage};

use crate::error::StoreError;
use crate::projection::TurnSummary;
use crate::read::{ReadLog, READ_PAGE};

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

impl dyn ReadLog + '_ {
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

    /// The last `user_messages_saved` of `request_id` before `seq`.
    fn saved_before(
        &self,
        session: &str,
        seq: u64,
        request_id: &str,
    ) -> Result<Option<Envelope>, StoreError> {
        let mut found = None;
        let mut after = 0;
        'pages: loop {
            let page = self.session_page(session, after, READ_PAGE)?;
            let done = page.len() < READ_PAGE;
            for env in page {
                if env.seq >= seq {
                    break 'pages;
                }
                after = env.seq;
                if matches!(&env.event, Event::UserMessagesSaved { request_id: Some(r), .. } if r == request_id)
                {
                    found = Some(env);
                }
            }
            if done {
                break;
            }
        }
        Ok(found)
    }

    /// The session and turn of the event at `seq`, which must be an event of `session`'s
    /// history (the session's own first, then its origins', nearest first).
    fn event_of(&self, session: &str, seq: u64) -> Result<(String, Option<String>), ForkError> {
        for (of, upto) in self.fork_chain(session)?.into_iter().rev() {
            if seq > upto {
                continue;
            }
            if let Some(env) = self.event_at(&of, seq)? {
                return Ok((of, env.turn_id));
            }
        }
        Err(ForkError::NoEvent {
            session: session.to_owned(),
            seq,
        })
    }

    /// The turns of a session's history (a fork's inherited ones first), each with the
    /// session that wrote it: from the lifecycle index only.
    pub fn history_turns(
        &self,
        session_id: &str,
    ) -> Result<Vec<(String, TurnSummary)>, StoreError> {
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
    ) -> Result<(String, TurnSummary), ForkError> {
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

impl crate::reader::LogReader {
    /// [`fork_point`](#method.fork_point) of the read contract, on a SQLite reader.
    pub fn fork_point(&self, origin: &str, point: &ForkPoint) -> Result<ResolvedFork, ForkError> {
        <dyn ReadLog>::fork_point(self, origin, point)
    }

    /// The turns of a session's history, each with the session that wrote it.
    pub fn history_turns(
        &self,
        session_id: &str,
    ) -> Result<Vec<(String, TurnSummary)>, StoreError> {
        <dyn ReadLog>::history_turns(self, session_id)
    }
}
