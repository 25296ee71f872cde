//! A log held in memory: [`MemoryLog`] implements both contracts — [`EventLog`] (what a session
//! writes) and [`ReadLog`] (what readers read) — over one vector of envelopes.
//!
//! It is what the contracts promise and nothing more, so an engine or reader test runs on it
//! without a file, and a read that only works against one backend's tables shows up as a
//! failing test here. Every append is durable at once (nothing outlives the process anyway);
//! seqs number the whole log from 1, as in the SQLite log.

use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use mull_core::{Envelope, Event};

use crate::backend::{EventLog, LogFuture};
use crate::error::StoreError;
use crate::projection::SessionState;
use crate::read::{ChangeCursor, Changes, ReadLog, SessionChange, SessionKey};
use crate::reader::SessionSummary;
use crate::timestamp;
use crate::writer::Appended;

/// An event log in memory; clones share it.
#[derive(Debug, Clone, Default)]
pub struct MemoryLog {
    events: Arc<Mutex<Vec<Envelope>>>,
}

impl MemoryLog {
    /// An empty log.
    pub fn new() -> MemoryLog {
        MemoryLog::default()
    }

    /// A log holding `events` as they are (their seqs must increase).
    pub fn from_events(events: Vec<Envelope>) -> MemoryLog {
        MemoryLog {
            events: Arc::new(Mutex::new(events)),
        }
    }

    fn events(&self) -> MutexGuard<'_, Vec<Envelope>> {
        // A panic elsewhere while holding the lock leaves a vector that is still whole.
        self.events.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every event, in order.
    pub fn all(&self) -> Vec<Envelope> {
        self.events().clone()
    }

    fn summaries(&self) -> Vec<SessionSummary> {
        let mut out: Vec<SessionSummary> = Vec::new();
        for env in self.events().iter() {
            match out.iter_mut().find(|s| s.session_id == env.session_id) {
                Some(s) => {
                    s.last_seq = env.seq;
                    s.last_at = env.at;
                }
                None => out.push(SessionSummary {
                    session_id: env.session_id.clone(),
                    first_seq: env.seq,
                    last_seq: env.seq,
                    first_at: env.at,
                    last_at: env.at,
                }),
            }
        }
        out
    }
}

impl ReadLog for MemoryLog {
    fn name(&self) -> String {
        "a log in memory".to_owned()
    }

    fn newest_sessions(
        &self,
        before: Option<&SessionKey>,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, StoreError> {
        Ok(SessionKey::newest_page(self.summaries(), before, limit))
    }

    fn session_page(
        &self,
        session_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<Envelope>, StoreError> {
        Ok(self
            .events()
            .iter()
            .filter(|e| e.session_id == session_id && e.seq > after_seq)
            .take(limit)
            .cloned()
            .collect())
    }

    fn turn_events(&self, session_id: &str, turn_id: &str) -> Result<Vec<Envelope>, StoreError> {
        Ok(self
            .events()
            .iter()
            .filter(|e| e.session_id == session_id && e.turn_id.as_deref() == Some(turn_id))
            .cloned()
            .collect())
    }

    fn fork_origin(&self, session_id: &str) -> Result<Option<(String, u64)>, StoreError> {
        Ok(self.events().iter().find_map(|e| match &e.event {
            Event::SessionForked {
                origin, origin_seq, ..
            } if e.session_id == session_id => Some((origin.clone(), *origin_seq)),
            _ => None,
        }))
    }

    fn cursor(&self) -> Result<ChangeCursor, StoreError> {
        Ok(ChangeCursor(self.events().last().map_or(0, |e| e.seq)))
    }

    fn changes(&self, since: ChangeCursor) -> Result<Changes, StoreError> {
        let mut sessions: Vec<SessionChange> = Vec::new();
        let mut cursor = since;
        for env in self.events().iter().filter(|e| e.seq > since.0) {
            cursor = ChangeCursor(env.seq);
            sessions.retain(|s| s.session_id != env.session_id);
            sessions.push(SessionChange {
                session_id: env.session_id.clone(),
                last_seq: env.seq,
                last_at: env.at,
            });
        }
        Ok(Changes { sessions, cursor })
    }

    fn event_count(&self) -> Result<u64, StoreError> {
        Ok(self.events().len() as u64)
    }

    fn numbers_across_sessions(&self) -> bool {
        true
    }
}

impl EventLog for MemoryLog {
    fn read_log(&self) -> Result<Arc<dyn ReadLog + Send + Sync>, StoreError> {
        Ok(Arc::new(self.clone()))
    }

    fn open_session<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, SessionState> {
        Box::pin(async move { ReadLog::load_session(self, session_id) })
    }

    fn append_event(
        &self,
        session_id: &str,
        turn_id: Option<&str>,
        at: DateTime<Utc>,
        event: Event,
    ) -> Result<Appended, StoreError> {
        let at = timestamp::truncate(at);
        let mut events = self.events();
        let seq = events.last().map_or(0, |e| e.seq) + 1;
        events.push(Envelope {
            seq,
            session_id: session_id.to_owned(),
            turn_id: turn_id.map(str::to_owned),
            at,
            v: mull_core::EVENT_VERSION,
            event: event.clone(),
        });
        Ok(Appended { seq, at, event })
    }

    fn flush<'a>(&'a self, _session_id: &'a str) -> LogFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    fn turn_events<'a>(
        &'a self,
        session_id: &'a str,
        turn_id: &'a str,
    ) -> LogFuture<'a, Vec<Envelope>> {
        Box::pin(async move { ReadLog::turn_events(self, session_id, turn_id) })
    }

    fn session_page<'a>(
        &'a self,
        session_id: &'a str,
        after_seq: u64,
        limit: usize,
    ) -> LogFuture<'a, Vec<Envelope>> {
        Box::pin(async move { ReadLog::session_page(self, session_id, after_seq, limit) })
    }
}
