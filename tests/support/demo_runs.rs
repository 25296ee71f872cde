//! Deterministic demo sessions side by side in one log, each with its own tool policy: what
//! the diff, fork and backtest tests compare.

use std::path::PathBuf;

use mull::demo::{self, DemoOptions};
use mull::policy::ToolPolicy;
use mull::store::Log;

/// A log in a temporary folder holding the demo sessions asked for.
pub struct DemoRuns {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl DemoRuns {
    /// Runs the deterministic demo once per `(session, built-in policy)` into one log.
    pub async fn new(sessions: &[(&str, Option<&str>)]) -> DemoRuns {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("demo.db");
        let log = Log::open(&path).unwrap();
        for (session, policy) in sessions {
            let options = DemoOptions {
                deterministic: true,
                session_id: (*session).to_owned(),
                policy: policy.map(|p| ToolPolicy::builtin(p).unwrap()),
                ..DemoOptions::default()
            };
            demo::run(&log, options).await.unwrap();
        }
        log.close().unwrap();
        DemoRuns { _dir: dir, path }
    }

    /// A generated log: `count` demo sessions recorded under the policies of
    /// [`demo::RECORDED_MIX`], in turn (see [`demo::record_sessions`]).
    pub async fn generated(count: usize) -> DemoRuns {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("demo.db");
        let log = Log::open(&path).unwrap();
        demo::record_sessions(&log, count).await.unwrap();
        log.close().unwrap();
        DemoRuns { _dir: dir, path }
    }

    /// A reader on the log.
    pub fn reader(&self) -> mull::store::LogReader {
        mull::store::LogReader::open(&self.path).unwrap()
    }
}
