//! A log in a temporary folder and one deterministic session (fixed clock, counting ids) on it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mull::core::{Envelope, Event, FixedClock, SequentialIds, StepRecord};
use mull::engine::{Agent, Session, SessionOptions};
use mull::store::{Log, LogReader, SessionState};

use super::trace;

/// A log in a temporary folder, removed when dropped, and the id of the session the tests
/// open on it.
pub struct TestLog {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
    pub log: Log,
    /// The session [`TestLog::open`] opens and [`TestLog::events`] reads.
    pub session_id: String,
    /// The clock every session opened here shares, so a test can move time on.
    pub clock: Arc<FixedClock>,
    retry_base_delay: Option<Duration>,
}

impl Default for TestLog {
    fn default() -> TestLog {
        TestLog::new()
    }
}

impl TestLog {
    /// A fresh, empty log for session `s1`.
    pub fn new() -> TestLog {
        TestLog::for_session("s1")
    }

    /// A fresh, empty log for the session `session_id`.
    pub fn for_session(session_id: &str) -> TestLog {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mull.db");
        let log = Log::open(&path).unwrap();
        TestLog {
            _dir: dir,
            path,
            log,
            session_id: session_id.to_owned(),
            clock: Arc::new(FixedClock::at_fixture_epoch()),
            retry_base_delay: None,
        }
    }

    /// The same file opened by a new writer, as a process started after this one stopped
    /// would: the log's recovery resolves the turns this writer left open.
    pub fn reopened(self) -> TestLog {
        let TestLog {
            _dir,
            path,
            log,
            session_id,
            clock,
            retry_base_delay,
        } = self;
        log.close().unwrap();
        let log = Log::open(&path).unwrap();
        TestLog {
            _dir,
            path,
            log,
            session_id,
            clock,
            retry_base_delay,
        }
    }

    /// A new log holding exactly `events` (a prefix of another log, say), committed, its
    /// writer still open.
    pub async fn holding(events: &[Envelope]) -> TestLog {
        let log = TestLog::new();
        for e in events {
            log.log
                .append(&e.session_id, e.turn_id.as_deref(), e.at, e.event.clone())
                .unwrap();
        }
        log.log.flush().await.unwrap();
        log
    }

    /// [`TestLog::holding`] `events`, as a process killed right after writing them leaves it,
    /// opened by the next process: the log's recovery resolves what they left open.
    pub async fn crashed_after(events: &[Envelope]) -> TestLog {
        TestLog::holding(events).await.reopened()
    }

    /// Model retries wait 1 ms instead of the default, so retrying tests stay fast.
    pub fn with_fast_retries(mut self) -> TestLog {
        self.retry_base_delay = Some(Duration::from_millis(1));
        self
    }

    /// Deterministic options for the session: the shared fixed clock and counting ids.
    pub fn options(&self) -> SessionOptions {
        let options = SessionOptions::deterministic(self.session_id.as_str())
            .with_clock(self.clock.clone())
            .with_ids(Arc::new(SequentialIds::new()));
        match self.retry_base_delay {
            Some(delay) => options.with_retry_base_delay(delay),
            None => options,
        }
    }

    /// [`TestLog::options`] for a second process on the same log: its counting ids carry a
    /// `_p2` mark, so they never repeat the first process's ids.
    pub fn second_process_options(&self) -> SessionOptions {
        self.options()
            .with_ids(Arc::new(SecondProcessIds(SequentialIds::new())))
    }

    /// Opens the session for `agent` with [`TestLog::options`].
    pub async fn open<A: Agent>(&self, agent: &Arc<A>) -> Session {
        self.open_with(agent, self.options()).await
    }

    /// Opens a session for `agent` with `options` (start from [`TestLog::options`]).
    pub async fn open_with<A: Agent>(&self, agent: &Arc<A>, options: SessionOptions) -> Session {
        Session::open(&self.log, agent.clone(), options)
            .await
            .unwrap()
    }

    /// Every event of the session, after a flush.
    pub async fn events(&self) -> Vec<Envelope> {
        self.log.flush().await.unwrap();
        LogReader::open(&self.path)
            .unwrap()
            .session_events(&self.session_id, 0)
            .unwrap()
    }

    /// Every event of the session without its envelope, after a flush.
    pub async fn bare_events(&self) -> Vec<Event> {
        self.events().await.into_iter().map(|e| e.event).collect()
    }

    /// The kind of every event of the session, in order.
    pub async fn kinds(&self) -> Vec<String> {
        self.events()
            .await
            .iter()
            .map(|e| e.kind().to_owned())
            .collect()
    }

    /// The trace of every event of the session, each line rendered by `render`.
    pub async fn trace(&self, render: impl Fn(&Envelope) -> String) -> String {
        trace::render(&self.events().await, render)
    }

    /// The trace of every event after `seq`.
    pub async fn trace_after(&self, seq: u64, render: impl Fn(&Envelope) -> String) -> String {
        let events = self.events().await;
        trace::render(events.iter().filter(|e| e.seq > seq), render)
    }

    /// The trace of every event, a `step_finished` shown with the step's whole record (see
    /// [`trace::render_steps`]).
    pub async fn step_trace(
        &self,
        render: impl Fn(&Envelope, Option<&StepRecord>) -> String,
    ) -> String {
        trace::render_steps(&self.events().await, 0, render)
    }

    /// The same for every event after `seq`.
    pub async fn step_trace_after(
        &self,
        seq: u64,
        render: impl Fn(&Envelope, Option<&StepRecord>) -> String,
    ) -> String {
        trace::render_steps(&self.events().await, seq, render)
    }

    /// The session's state folded from the log alone, after a flush.
    pub async fn replayed(&self) -> SessionState {
        self.log.flush().await.unwrap();
        LogReader::open(&self.path)
            .unwrap()
            .load_session(&self.session_id)
            .unwrap()
    }
}

/// Counting ids of a second process (`msg_p2_1`, …).
struct SecondProcessIds(SequentialIds);

impl mull::core::IdSource for SecondProcessIds {
    fn next_id(&self, prefix: &str) -> String {
        self.0.next_id(&format!("{prefix}_p2"))
    }
}
