//! The log as its readers see it, whatever stores it: [`ReadLog`], the read contract beside
//! the write contract [`EventLog`](crate::EventLog).
//!
//! Every reader — the dashboard, replay and its check, diff, fork, backtest, stats, export, the
//! OpenTelemetry re-export — takes a `&dyn ReadLog`, so each has one implementation for every
//! backend. Three implement it natively: the SQLite log's [`LogReader`](crate::LogReader), the
//! PostgreSQL log of `mull-store-pg`, and [`MemoryLog`](crate::MemoryLog) (which shows the
//! contract is complete, and serves tests).
//!
//! # What names an event
//! An event is named by its session and its seq (its position), in every backend: the SQLite
//! log numbers events across the file, PostgreSQL per session, and both keep a session's seqs
//! increasing. A fork's origin, a diff's location and a replay's divergence are such a pair, so
//! no reader ever renumbers an event.
//!
//! # Seven reads
//! A backend implements the required methods; everything else (a session's whole history, its
//! state, its turns, every session at a glance) is derived from them here, and a backend
//! overrides a derived read only to do it faster with an index of its own. The reads are
//! synchronous: readers are command-line tools and the dashboard's threads; a backend whose
//! driver is asynchronous runs its connection on a runtime of its own.
//!
//! # Damage
//! A log may read without rows that files beside it hold (a SQLite log's damaged record file or
//! WAL, set aside by [`crate::gate`]). The backend finds that once, as it opens, and every
//! reader asks [`ReadLog::side_damage`] (or [`ReadLog::ensure_whole`]) rather than looking
//! itself: `stats`, `export` and `check` exit non-zero naming it, the dashboard shows a banner.
//!
//! # Following
//! A reader that follows the log (a tail, a dashboard) takes a [`ChangeCursor`] with
//! [`ReadLog::cursor`], reads what it shows, then asks [`ReadLog::changes`] from time to time:
//! it gets the sessions that changed since, each with its last seq, and reads each one's new
//! events with [`ReadLog::session_page`] from where it was. A refresh with nothing new reads
//! nothing but the change index. A change may be reported more than once; reading from a
//! session's own position makes that harmless.

use chrono::{DateTime, Utc};
use mull_core::{Envelope, Event, TurnStatus};

use crate::error::StoreError;
use crate::gate::{self, SideDamage};
use crate::overview::{SessionOverviews, OVERVIEW_KINDS};
use crate::projection::{SessionState, SessionToolCalls, TurnSummary};
use crate::reader::SessionSummary;

/// How many events a derived read takes per page.
pub const READ_PAGE: usize = 4096;

/// The longest chain of forks a log may hold.
pub const MAX_FORK_DEPTH: usize = 256;

/// Where a listing of sessions by time goes on from: the session last shown (sessions are
/// ordered by their last event's time, then id).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SessionKey {
    pub last_at: DateTime<Utc>,
    pub session_id: String,
}

impl SessionKey {
    /// The key of a listed session.
    pub fn of(summary: &SessionSummary) -> SessionKey {
        SessionKey {
            last_at: summary.last_at,
            session_id: summary.session_id.clone(),
        }
    }

    /// A page of [`ReadLog::newest_sessions`] cut from every session of a log that keeps no
    /// ordered listing: newest first, those before `before`, at most `limit`.
    pub(crate) fn newest_page(
        mut all: Vec<SessionSummary>,
        before: Option<&SessionKey>,
        limit: usize,
    ) -> Vec<SessionSummary> {
        all.sort_by(|a, b| SessionKey::of(b).cmp(&SessionKey::of(a)));
        all.into_iter()
            .filter(|s| before.is_none_or(|b| SessionKey::of(s) < *b))
            .take(limit)
            .collect()
    }
}

/// A point in the log's history of changes, as [`ReadLog::cursor`] and [`ReadLog::changes`]
/// hand it out. Only meaningful to the log that gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ChangeCursor(pub u64);

impl ChangeCursor {
    /// Before anything: the changes since it are every session.
    pub const START: ChangeCursor = ChangeCursor(0);
}

/// A session that changed: its last event now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionChange {
    pub session_id: String,
    pub last_seq: u64,
    pub last_at: DateTime<Utc>,
}

/// What [`ReadLog::changes`] found: the sessions that changed, and where to ask next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes {
    pub sessions: Vec<SessionChange>,
    pub cursor: ChangeCursor,
}

/// The read contract: what every reader of the log may ask, in every backend.
pub trait ReadLog: Send + std::fmt::Debug {
    /// What messages call this log: a file's path, or a database without its password.
    fn name(&self) -> String;

    /// Up to `limit` sessions, newest first by their last event's time (then id, descending),
    /// after `before` when given: the way a session list pages back in time.
    fn newest_sessions(
        &self,
        before: Option<&SessionKey>,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, StoreError>;

    /// Up to `limit` events of a session after `after_seq`, in seq order.
    fn session_page(
        &self,
        session_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<Envelope>, StoreError>;

    /// Every event of one turn of a session, in seq order.
    fn turn_events(&self, session_id: &str, turn_id: &str) -> Result<Vec<Envelope>, StoreError>;

    /// The session a fork was made from and the seq (of that session) its history ends at
    /// there; `None` for a session that is no fork.
    fn fork_origin(&self, session_id: &str) -> Result<Option<(String, u64)>, StoreError>;

    /// Where the log's changes stand now: [`ReadLog::changes`] from it reports what changes
    /// after this call.
    fn cursor(&self) -> Result<ChangeCursor, StoreError>;

    /// The sessions that changed since `since` (at least those; a session may be reported
    /// again), and the cursor to ask from next.
    fn changes(&self, since: ChangeCursor) -> Result<Changes, StoreError>;

    /// How many events the log holds (a session list's title shows it).
    fn event_count(&self) -> Result<u64, StoreError>;

    /// Files beside the log that hold rows it reads without (see [`crate::gate`]), as found
    /// when it opened; empty when the log is whole, and always for a backend with no such
    /// files.
    fn side_damage(&self) -> &[SideDamage] {
        &[]
    }

    /// An error naming [`ReadLog::side_damage`], if there is any: for readers that must not
    /// present a partial log as the whole of it.
    fn ensure_whole(&self) -> Result<(), StoreError> {
        let found = self.side_damage();
        match found.is_empty() {
            true => Ok(()),
            false => Err(gate::reported(std::path::Path::new(&self.name()), found)),
        }
    }

    /// Every session, oldest first (by its first event).
    fn sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let mut out: Vec<SessionSummary> = Vec::new();
        loop {
            let before = out.last().map(SessionKey::of);
            let page = self.newest_sessions(before.as_ref(), READ_PAGE)?;
            let done = page.len() < READ_PAGE;
            out.extend(page);
            if done {
                break;
            }
        }
        out.sort_by(|a, b| (a.first_at, &a.session_id).cmp(&(b.first_at, &b.session_id)));
        Ok(out)
    }

    /// Whether the log holds any event of `session_id`.
    fn has_session(&self, session_id: &str) -> Result<bool, StoreError> {
        Ok(!self.session_page(session_id, 0, 1)?.is_empty())
    }

    /// The event named by `session_id` and `seq`, if the session has it.
    fn event_at(&self, session_id: &str, seq: u64) -> Result<Option<Envelope>, StoreError> {
        let Some(after) = seq.checked_sub(1) else {
            return Ok(None);
        };
        Ok(self
            .session_page(session_id, after, 1)?
            .into_iter()
            .find(|e| e.seq == seq))
    }

    /// Calls `f` with every event of a session after `after_seq`, in order, a page at a time.
    fn for_each_session_event(
        &self,
        session_id: &str,
        after_seq: u64,
        f: &mut dyn FnMut(Envelope),
    ) -> Result<(), StoreError> {
        let mut after = after_seq;
        loop {
            let page = self.session_page(session_id, after, READ_PAGE)?;
            let done = page.len() < READ_PAGE;
            for env in page {
                after = env.seq;
                f(env);
            }
            if done {
                return Ok(());
            }
        }
    }

    /// Every event of a session after `after_seq`, in order.
    fn session_events(
        &self,
        session_id: &str,
        after_seq: u64,
    ) -> Result<Vec<Envelope>, StoreError> {
        let mut out = Vec::new();
        self.for_each_session_event(session_id, after_seq, &mut |env| out.push(env))?;
        Ok(out)
    }

    /// (session, last seq of its part of the history), from the root origin to `session_id`.
    fn fork_chain(&self, session_id: &str) -> Result<Vec<(String, u64)>, StoreError> {
        let mut chain = vec![(session_id.to_owned(), u64::MAX)];
        let mut upto = u64::MAX;
        let mut current = session_id.to_owned();
        while let Some((origin, seq)) = self.fork_origin(&current)? {
            let broken = |why: String| StoreError::ForkChain {
                session_id: session_id.to_owned(),
                why,
            };
            if chain.iter().any(|(s, _)| *s == origin) {
                return Err(broken(format!("loops back to {origin}")));
            }
            if chain.len() > MAX_FORK_DEPTH {
                return Err(broken(format!("is deeper than {MAX_FORK_DEPTH}")));
            }
            // Seqs of different sessions compare only in a log that numbers across sessions;
            // each part of the chain ends at its own fork point.
            upto = if self.numbers_across_sessions() {
                upto.min(seq)
            } else {
                seq
            };
            chain.push((origin.clone(), upto));
            current = origin;
        }
        chain.reverse();
        Ok(chain)
    }

    /// Whether one seq order runs across all sessions (SQLite), rather than one per session
    /// (PostgreSQL).
    fn numbers_across_sessions(&self) -> bool {
        false
    }

    /// The sessions `session_id` was forked from, nearest first (empty for no fork).
    fn lineage(&self, session_id: &str) -> Result<Vec<String>, StoreError> {
        Ok(self
            .fork_chain(session_id)?
            .into_iter()
            .rev()
            .skip(1)
            .map(|(session, _)| session)
            .collect())
    }

    /// A session's history: for a fork, its origin's events up to the fork point (each with its
    /// own session id), then the fork's own.
    fn session_history(&self, session_id: &str) -> Result<Vec<Envelope>, StoreError> {
        let mut out = Vec::new();
        for (session, upto) in self.fork_chain(session_id)? {
            let mut after = 0;
            'pages: loop {
                let page = self.session_page(&session, after, READ_PAGE)?;
                let done = page.len() < READ_PAGE;
                for env in page {
                    if env.seq > upto {
                        break 'pages;
                    }
                    after = env.seq;
                    out.push(env);
                }
                if done {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// A session's state, folded from its history (a new session's is empty).
    fn load_session(&self, session_id: &str) -> Result<SessionState, StoreError> {
        let mut state = SessionState::new(session_id);
        // A fork's inherited events carry their own session's id: folded as the fork's.
        for env in self.session_history(session_id)? {
            state.apply_own(mull_core::EventRef::of(&env));
        }
        show_interrupted(self, &mut state);
        Ok(state)
    }

    /// A session's turns (its own, not a fork's inherited ones).
    fn turns(&self, session_id: &str) -> Result<Vec<TurnSummary>, StoreError> {
        let mut state = SessionState::new(session_id);
        self.for_each_session_event(session_id, 0, &mut |env| {
            if !matches!(env.event, Event::Chunk { .. }) {
                state.apply(&env);
            }
        })?;
        Ok(state.turns)
    }

    /// A session's tool calls and turn count.
    fn session_tool_calls(&self, session_id: &str) -> Result<SessionToolCalls, StoreError> {
        let mut calls = SessionToolCalls::new(session_id);
        self.for_each_session_event(session_id, 0, &mut |env| calls.apply(&env))?;
        Ok(calls)
    }

    /// The overviews of the given sessions (agent, first prompt, status mix, tokens).
    fn overviews_of(&self, sessions: &[String]) -> Result<SessionOverviews, StoreError> {
        let mut all = SessionOverviews::default();
        for session in sessions {
            self.for_each_session_event(session, 0, &mut |env| {
                if OVERVIEW_KINDS.contains(&env.event.kind()) {
                    all.apply(&env);
                }
            })?;
        }
        Ok(all)
    }

    /// Every session at a glance.
    fn session_overviews(&self) -> Result<SessionOverviews, StoreError> {
        let ids: Vec<String> = self.sessions()?.into_iter().map(|s| s.session_id).collect();
        self.overviews_of(&ids)
    }

    /// Whether a writer may still be running the log's open turns; when none can, readers show
    /// them as interrupted. A backend that cannot tell says yes.
    fn writer_active(&self) -> bool {
        true
    }
}

/// Turns still running when no writer runs them are shown as interrupted.
pub(crate) fn show_interrupted(log: &(impl ReadLog + ?Sized), state: &mut SessionState) {
    if state.turns.iter().any(|t| t.status == TurnStatus::Running) && !log.writer_active() {
        state.mark_interrupted();
    }
}

impl<T: ReadLog + ?Sized> ReadLog for Box<T> {
    fn name(&self) -> String {
        (**self).name()
    }
    fn newest_sessions(
        &self,
        before: Option<&SessionKey>,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, StoreError> {
        (**self).newest_sessions(before, limit)
    }
    fn session_page(
        &self,
        session_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<Envelope>, StoreError> {
        (**self).session_page(session_id, after_seq, limit)
    }
    fn turn_events(&self, session_id: &str, turn_id: &str) -> Result<Vec<Envelope>, StoreError> {
        (**self).turn_events(session_id, turn_id)
    }
    fn fork_origin(&self, session_id: &str) -> Result<Option<(String, u64)>, StoreError> {
        (**self).fork_origin(session_id)
    }
    fn cursor(&self) -> Result<ChangeCursor, StoreError> {
        (**self).cursor()
    }
    fn changes(&self, since: ChangeCursor) -> Result<Changes, StoreError> {
        (**self).changes(since)
    }
    fn event_count(&self) -> Result<u64, StoreError> {
        (**self).event_count()
    }
    fn side_damage(&self) -> &[SideDamage] {
        (**self).side_damage()
    }
    fn ensure_whole(&self) -> Result<(), StoreError> {
        (**self).ensure_whole()
    }
    fn sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        (**self).sessions()
    }
    fn has_session(&self, session_id: &str) -> Result<bool, StoreError> {
        (**self).has_session(session_id)
    }
    fn event_at(&self, session_id: &str, seq: u64) -> Result<Option<Envelope>, StoreError> {
        (**self).event_at(session_id, seq)
    }
    fn for_each_session_event(
        &self,
        session_id: &str,
        after_seq: u64,
        f: &mut dyn FnMut(Envelope),
    ) -> Result<(), StoreError> {
        (**self).for_each_session_event(session_id, after_seq, f)
    }
    fn fork_chain(&self, session_id: &str) -> Result<Vec<(String, u64)>, StoreError> {
        (**self).fork_chain(session_id)
    }
    fn numbers_across_sessions(&self) -> bool {
        (**self).numbers_across_sessions()
    }
    fn session_history(&self, session_id: &str) -> Result<Vec<Envelope>, StoreError> {
        (**self).session_history(session_id)
    }
    fn load_session(&self, session_id: &str) -> Result<SessionState, StoreError> {
        (**self).load_session(session_id)
    }
    fn turns(&self, session_id: &str) -> Result<Vec<TurnSummary>, StoreError> {
        (**self).turns(session_id)
    }
    fn session_tool_calls(&self, session_id: &str) -> Result<SessionToolCalls, StoreError> {
        (**self).session_tool_calls(session_id)
    }
    fn overviews_of(&self, sessions: &[String]) -> Result<SessionOverviews, StoreError> {
        (**self).overviews_of(sessions)
    }
    fn session_overviews(&self) -> Result<SessionOverviews, StoreError> {
        (**self).session_overviews()
    }
    fn writer_active(&self) -> bool {
        (**self).writer_active()
    }
}
