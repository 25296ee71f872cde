//! Re-execution the replay tests share: a recorded session read back, and an agent run again
//! over it into a fresh log with the model served from the recording.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mull::engine::replay::{reexecute, Recording, ReplayError, ReplayOptions, ReplayReport};
use mull::engine::Agent;
use mull::providers::replay::ReplayModel;
use mull::store::{Log, LogReader};

/// Session `session` of the log at `path`, as a recording.
pub fn recording_of(path: &Path, session: &str) -> Recording {
    Recording::read(&LogReader::open(path).expect("opens the log"), session)
        .expect("reads the recording")
}

/// Re-executes `recording` with `agent` into a fresh log, the model served from the recording;
/// a replay that hangs for 30 s fails the test.
pub async fn try_reexecute(
    recording: &Recording,
    agent: Arc<dyn Agent>,
) -> Result<ReplayReport, ReplayError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = ReplayModel::from_envelopes(recording.envelopes().to_vec())
        .expect("the recording serves a replay model");
    let log = Log::open(dir.path().join("replayed.db")).expect("opens the replay log");
    tokio::time::timeout(
        Duration::from_secs(30),
        reexecute(
            &log,
            agent,
            Arc::new(model),
            recording,
            ReplayOptions::default(),
        ),
    )
    .await
    .expect("the replay finishes")
}

/// [`try_reexecute`] for a replay that must run to its end (a divergence is still a report).
pub async fn reexecute_ok(recording: &Recording, agent: Arc<dyn Agent>) -> ReplayReport {
    try_reexecute(recording, agent)
        .await
        .expect("the replay runs")
}
