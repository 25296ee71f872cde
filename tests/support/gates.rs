//! A log that notes each gate a session waits at (`durable(seq)`, `flush`) in a journal it
//! shares with the test, so a test can see which gate came before something it noted there
//! itself (a tool's run, say).

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use mull::core::{Envelope, Event};
use mull::store::{Appended, EventLog, Log, LogFuture, ReadLog, SessionState, StoreError};

/// A journal of lines, shared between a [`GateLog`] and whatever else a test lets write to it.
#[derive(Debug, Clone, Default)]
pub struct Journal(Arc<Mutex<Vec<String>>>);

impl Journal {
    pub fn note(&self, line: impl Into<String>) {
        self.0.lock().unwrap().push(line.into());
    }

    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// The line noted just before the first `line`.
    pub fn before(&self, line: &str) -> Option<String> {
        let lines = self.lines();
        let at = lines.iter().position(|l| l == line)?;
        at.checked_sub(1).map(|i| lines[i].clone())
    }
}

/// [`Log`] with every `durable(seq)` noted as `durable <seq>` and every `flush` as `flush`.
#[derive(Debug)]
pub struct GateLog {
    log: Log,
    pub journal: Journal,
}

impl GateLog {
    pub fn new(log: &Log, journal: &Journal) -> Arc<GateLog> {
        Arc::new(GateLog {
            log: log.clone(),
            journal: journal.clone(),
        })
    }
}

impl EventLog for GateLog {
    fn open_session<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, SessionState> {
        EventLog::open_session(&self.log, session_id)
    }

    fn append_event(
        &self,
        session_id: &str,
        turn_id: Option<&str>,
        at: DateTime<Utc>,
        event: Event,
    ) -> Result<Appended, StoreError> {
        EventLog::append_event(&self.log, session_id, turn_id, at, event)
    }

    fn flush<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, ()> {
        self.journal.note("flush");
        EventLog::flush(&self.log, session_id)
    }

    fn durable<'a>(&'a self, session_id: &'a str, seq: u64) -> LogFuture<'a, ()> {
        self.journal.note(format!("durable {seq}"));
        EventLog::durable(&self.log, session_id, seq)
    }

    fn committed<'a>(&'a self, session_id: &'a str, seq: u64) -> LogFuture<'a, ()> {
        EventLog::committed(&self.log, session_id, seq)
    }

    fn turn_events<'a>(
        &'a self,
        session_id: &'a str,
        turn_id: &'a str,
    ) -> LogFuture<'a, Vec<Envelope>> {
        EventLog::turn_events(&self.log, session_id, turn_id)
    }

    fn session_page<'a>(
        &'a self,
        session_id: &'a str,
        after_seq: u64,
        limit: usize,
    ) -> LogFuture<'a, Vec<Envelope>> {
        EventLog::session_page(&self.log, session_id, after_seq, limit)
    }

    fn read_log(&self) -> Result<Arc<dyn ReadLog + Send + Sync>, StoreError> {
        EventLog::read_log(&self.log)
    }

    fn release_session(&self, session_id: &str) -> LogFuture<'static, ()> {
        EventLog::release_session(&self.log, session_id)
    }

    fn is_shared(&self) -> bool {
        EventLog::is_shared(&self.log)
    }

    fn holds(&self, session_id: &str) -> bool {
        EventLog::holds(&self.log, session_id)
    }

    fn unavailable(&self) -> Option<String> {
        EventLog::unavailable(&self.log)
    }

    fn holder<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, Option<String>> {
        EventLog::holder(&self.log, session_id)
    }

    fn abandoned(&self, limit: usize) -> LogFuture<'_, Vec<String>> {
        EventLog::abandoned(&self.log, limit)
    }

    fn request_cancel<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, bool> {
        EventLog::request_cancel(&self.log, session_id)
    }

    fn take_cancel_requests(&self) -> LogFuture<'_, Vec<String>> {
        EventLog::take_cancel_requests(&self.log)
    }

    fn health(&self) -> Result<(), StoreError> {
        EventLog::health(&self.log)
    }
}
