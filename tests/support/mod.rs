//! What several root test files share: a log in a temporary folder and one deterministic
//! session (`s1`, fixed clock, counting ids) on it.

use std::path::PathBuf;
use std::sync::Arc;

use mull::core::{Envelope, FixedClock, SequentialIds};
use mull::engine::{Agent, Session, SessionOptions};
use mull::store::{Log, LogReader};

/// A log in a temporary folder, removed when dropped.
pub struct TestLog {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
    pub log: Log,
}

impl Default for TestLog {
    fn default() -> TestLog {
        TestLog::new()
    }
}

impl TestLog {
    /// A fresh, empty log.
    pub fn new() -> TestLog {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mull.db");
        let log = Log::open(&path).unwrap();
        TestLog {
            _dir: dir,
            path,
            log,
        }
    }

    /// Opens session `s1` for `agent`, with a fixed clock and counting ids.
    pub async fn open<A: Agent>(&self, agent: &Arc<A>) -> Session {
        let options = SessionOptions::deterministic("s1")
            .with_clock(Arc::new(FixedClock::at_fixture_epoch()))
            .with_ids(Arc::new(SequentialIds::new()));
        Session::open(&self.log, agent.clone(), options)
            .await
            .unwrap()
    }

    /// Every event of session `s1`, after a flush.
    pub async fn events(&self) -> Vec<Envelope> {
        self.log.flush().await.unwrap();
        LogReader::open(&self.path)
            .unwrap()
            .session_events("s1", 0)
            .unwrap()
    }
}
