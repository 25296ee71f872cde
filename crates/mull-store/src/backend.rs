//! The log as the engine sees it, whatever stores it: [`EventLog`].
//!
//! Two implementations: [`Log`] (a SQLite file, one writer per file, the default) and the
//! PostgreSQL log of `mull-store-pg` (several nodes, one writer per session by lease). The
//! interface is what a session needs — take the session and read its state, append, wait for
//! durability, read back a turn or a page of the session — and nothing a reader of the whole
//! log needs: those take the read contract, [`ReadLog`], which [`EventLog::read_log`] hands out
//! for readers in the writer's own process (a server's followers).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use mull_core::{Envelope, Event};

use crate::error::StoreError;
use crate::projection::SessionState;
use crate::read::ReadLog;
use crate::writer::{Appended, Log};

/// A boxed future borrowing the log: what the interface's waiting operations return.
pub type LogFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// What a session does with its log.
///
/// One writer per session is the backend's job: SQLite has one writer per file; PostgreSQL takes
/// a lease per session in [`EventLog::open_session`] and refuses appends once another node took
/// it over ([`StoreError::Fenced`]).
pub trait EventLog: Send + Sync + std::fmt::Debug {
    /// Takes `session_id` for writing and rebuilds its state from the log (a new session's state
    /// is empty). Everything this handle appended before is committed first.
    fn open_session<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, SessionState>;

    /// Appends an event of an open session: assigns its seq at once and queues it; does not wait
    /// for the commit ([`EventLog::flush`] does).
    fn append_event(
        &self,
        session_id: &str,
        turn_id: Option<&str>,
        at: DateTime<Utc>,
        event: Event,
    ) -> Result<Appended, StoreError>;

    /// A barrier: resolves once every event this handle appended for `session_id` before it is
    /// committed, or with the error that kept them out of the log.
    fn flush<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, ()>;

    /// The output gate: resolves once the event `seq` of `session_id` that this handle
    /// appended (the seq [`EventLog::append_event`] handed back: a durability ticket) is
    /// durable, with every event of the session appended before it. Await it only before
    /// something that depends on the event leaves the process; see the crate docs, "The output
    /// gate". A backend without tickets waits for everything appended ([`EventLog::flush`]),
    /// which is never less.
    fn durable<'a>(&'a self, session_id: &'a str, seq: u64) -> LogFuture<'a, ()> {
        let _ = seq;
        self.flush(session_id)
    }

    /// Resolves once the event `seq` of `session_id` that this handle appended is in the log,
    /// with every event of the session before it, without hurrying the commit (it comes with
    /// the writer's next batch): what a stream waits for before it passes an event on, so a
    /// client is never told what the log does not hold. Fails with what kept the event out
    /// (PostgreSQL: the session was fenced, or its lease ran out). A backend without such a
    /// wait waits as [`EventLog::durable`] does.
    fn committed<'a>(&'a self, session_id: &'a str, seq: u64) -> LogFuture<'a, ()> {
        self.durable(session_id, seq)
    }

    /// The events of one turn of a session, in seq order.
    fn turn_events<'a>(
        &'a self,
        session_id: &'a str,
        turn_id: &'a str,
    ) -> LogFuture<'a, Vec<Envelope>>;

    /// Up to `limit` events of a session after `after_seq`, in seq order.
    fn session_page<'a>(
        &'a self,
        session_id: &'a str,
        after_seq: u64,
        limit: usize,
    ) -> LogFuture<'a, Vec<Envelope>>;

    /// The read contract on this log, for readers in this process (a server following a
    /// session after a seq): what it reads of a session includes every event this handle
    /// appended to it before the read. Its reads are synchronous: call them from a blocking
    /// thread (`tokio::task::spawn_blocking`), never on a runtime's worker. SQLite: the log's
    /// own read connection; PostgreSQL: a connection of its own, opened on first use.
    fn read_log(&self) -> Result<Arc<dyn ReadLog + Send + Sync>, StoreError>;

    /// The session is no longer worked on here (closed or evicted): another writer may take it
    /// at once. What is given back is decided when this is called (so the future may be
    /// spawned and finish later without touching a later take of the same session). SQLite has
    /// nothing to give back.
    fn release_session(&self, session_id: &str) -> LogFuture<'static, ()> {
        let _ = session_id;
        Box::pin(async { Ok(()) })
    }

    /// Whether other writers share this log, each session written by one of them at a time
    /// (PostgreSQL): a server then gives a session back as soon as nothing runs in it, so any
    /// node can take the chat's next request. SQLite: one writer, no.
    fn is_shared(&self) -> bool {
        false
    }

    /// Whether this handle still writes `session_id`: false once another writer took it over
    /// (its later appends are refused), and while it cannot be sure it still holds it
    /// (PostgreSQL: its lease past its expiry by this node's own clock); a follower then
    /// follows the log instead of this handle's own output. SQLite: always.
    fn holds(&self, session_id: &str) -> bool {
        let _ = session_id;
        true
    }

    /// Why this handle can take no new work now, or `None` when it can. PostgreSQL: its
    /// connection to the database broke and is being made again (a restart, a failover); a
    /// server reports itself not ready meanwhile and refuses new turns, and serves again once
    /// the database is back. SQLite: never (a writer that failed fails its appends instead).
    fn unavailable(&self) -> Option<String> {
        None
    }

    /// Another writer that holds `session_id` now (a live lease of another node): the session
    /// can be followed from the log here but not written. SQLite: never.
    fn holder<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, Option<String>> {
        let _ = session_id;
        Box::pin(async { Ok(None) })
    }

    /// Up to `limit` sessions whose writer stopped without giving them back (PostgreSQL: a
    /// lease that expired unreleased, its node dead or cut off): a turn of theirs may wait to
    /// be recovered by opening them. SQLite recovers a session when its one writer opens it:
    /// none.
    fn abandoned(&self, limit: usize) -> LogFuture<'_, Vec<String>> {
        let _ = limit;
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Asks the writer that holds `session_id` (another node) to cancel its running turn: the
    /// request is recorded in the log, and that writer acts on it when it next looks
    /// ([`EventLog::take_cancel_requests`]). Returns whether it was recorded. SQLite: one
    /// writer, nothing to ask (false).
    fn request_cancel<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, bool> {
        let _ = session_id;
        Box::pin(async { Ok(false) })
    }

    /// The sessions this handle holds whose cancellation another writer requested since it
    /// last looked; each request is handed out once. SQLite: none.
    fn take_cancel_requests(&self) -> LogFuture<'_, Vec<String>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Whether the log takes writes now, or the error an append would get: what a server's
    /// readiness probe reports. Answers from what the handle already knows, without a round
    /// trip (a probe must stay cheap).
    fn health(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

impl Log {
    /// Readies a read of one session: a session with rows not committed yet is committed first,
    /// so the read sees them all; any other is read as the log holds it, with no commit to wait
    /// for.
    async fn read_session(&self, session_id: &str) -> Result<(), StoreError> {
        if self.has_uncommitted_rows(session_id) {
            Log::flush(self).await?;
        }
        Ok(())
    }
}

impl EventLog for Log {
    fn open_session<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, SessionState> {
        Box::pin(async move {
            self.read_session(session_id).await?;
            self.read_committed(|r| {
                if r.has_session(session_id)? {
                    r.load_session(session_id)
                } else {
                    Ok(SessionState::new(session_id))
                }
            })
        })
    }

    fn append_event(
        &self,
        session_id: &str,
        turn_id: Option<&str>,
        at: DateTime<Utc>,
        event: Event,
    ) -> Result<Appended, StoreError> {
        Log::append_event(self, session_id, turn_id, at, event)
    }

    fn flush<'a>(&'a self, _session_id: &'a str) -> LogFuture<'a, ()> {
        Box::pin(Log::flush(self))
    }

    fn durable<'a>(&'a self, _session_id: &'a str, seq: u64) -> LogFuture<'a, ()> {
        Box::pin(Log::durable(self, seq))
    }

    fn turn_events<'a>(
        &'a self,
        session_id: &'a str,
        turn_id: &'a str,
    ) -> LogFuture<'a, Vec<Envelope>> {
        Box::pin(async move {
            self.read_session(session_id).await?;
            self.read_committed(|r| r.turn_events(session_id, turn_id))
        })
    }

    fn health(&self) -> Result<(), StoreError> {
        Log::health(self)
    }

    fn read_log(&self) -> Result<Arc<dyn ReadLog + Send + Sync>, StoreError> {
        Ok(Arc::new(self.clone()))
    }

    fn session_page<'a>(
        &'a self,
        session_id: &'a str,
        after_seq: u64,
        limit: usize,
    ) -> LogFuture<'a, Vec<Envelope>> {
        Box::pin(async move {
            self.read_session(session_id).await?;
            self.read_committed(|r| r.session_page(session_id, after_seq, limit))
        })
    }
}

impl<T: EventLog + ?Sized> EventLog for Arc<T> {
    fn open_session<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, SessionState> {
        (**self).open_session(session_id)
    }

    fn append_event(
        &self,
        session_id: &str,
        turn_id: Option<&str>,
        at: DateTime<Utc>,
        event: Event,
    ) -> Result<Appended, StoreError> {
        (**self).append_event(session_id, turn_id, at, event)
    }

    fn flush<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, ()> {
        (**self).flush(session_id)
    }

    fn durable<'a>(&'a self, session_id: &'a str, seq: u64) -> LogFuture<'a, ()> {
        (**self).durable(session_id, seq)
    }

    fn committed<'a>(&'a self, session_id: &'a str, seq: u64) -> LogFuture<'a, ()> {
        (**self).committed(session_id, seq)
    }

    fn turn_events<'a>(
        &'a self,
        session_id: &'a str,
        turn_id: &'a str,
    ) -> LogFuture<'a, Vec<Envelope>> {
        (**self).turn_events(session_id, turn_id)
    }

    fn session_page<'a>(
        &'a self,
        session_id: &'a str,
        after_seq: u64,
        limit: usize,
    ) -> LogFuture<'a, Vec<Envelope>> {
        (**self).session_page(session_id, after_seq, limit)
    }

    fn read_log(&self) -> Result<Arc<dyn ReadLog + Send + Sync>, StoreError> {
        (**self).read_log()
    }

    fn release_session(&self, session_id: &str) -> LogFuture<'static, ()> {
        (**self).release_session(session_id)
    }

    fn is_shared(&self) -> bool {
        (**self).is_shared()
    }

    fn holds(&self, session_id: &str) -> bool {
        (**self).holds(session_id)
    }

    fn unavailable(&self) -> Option<String> {
        (**self).unavailable()
    }

    fn holder<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, Option<String>> {
        (**self).holder(session_id)
    }

    fn abandoned(&self, limit: usize) -> LogFuture<'_, Vec<String>> {
        (**self).abandoned(limit)
    }

    fn request_cancel<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, bool> {
        (**self).request_cancel(session_id)
    }

    fn take_cancel_requests(&self) -> LogFuture<'_, Vec<String>> {
        (**self).take_cancel_requests()
    }

    fn health(&self) -> Result<(), StoreError> {
        (**self).health()
    }
}
