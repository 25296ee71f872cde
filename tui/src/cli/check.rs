//! `mull replay --check FILE`: re-executes every session of a recorded JSONL log (or of a
//! PostgreSQL log given by its `postgres://` URL) with the
//! built-in agent that recorded it (named in its `session_opened`), with model output, tool
//! results, time and ids served from the log, and says whether today's code writes the same
//! events. A session recorded by an agent this binary does not have is refused before anything
//! runs, naming that agent.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use mull::engine::replay::{reexecute, Recording, ReplayOptions};
use mull::providers::replay::ReplayModel;
use mull_store::{import_jsonl, Log, LogReader, ReadLog};

/// Replays every file; returns whether every one was identical.
pub fn run_all(files: &[PathBuf]) -> Result<bool> {
    for file in files {
        crate::cli::import::refuse_database(file)?;
    }
    let mut identical = true;
    for file in files {
        identical &= run(file)?;
    }
    Ok(identical)
}

/// Replays every session of `file`; prints the verdict and returns whether all were identical.
pub fn run(file: &Path) -> Result<bool> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the replay's runtime")?;
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let reader = recorded(file, dir.path())?;
    runtime.block_on(check(file, &*reader, dir.path()))
}

/// The recorded log: a JSONL file imported into `dir`, or a PostgreSQL log read where it is.
fn recorded(file: &Path, dir: &Path) -> Result<Box<dyn ReadLog>> {
    if super::pg::url(file).is_some() {
        return super::pg::open_log(file);
    }
    let recorded_db = dir.join("recorded.db");
    let recorded =
        Log::open(&recorded_db).with_context(|| format!("opening {}", recorded_db.display()))?;
    let input =
        BufReader::new(File::open(file).with_context(|| format!("opening {}", file.display()))?);
    import_jsonl(input, &file.display().to_string(), &recorded)?;
    recorded
        .close()
        .with_context(|| format!("committing {}", recorded_db.display()))?;
    Ok(Box::new(LogReader::open(&recorded_db)?))
}

async fn check(file: &Path, reader: &dyn ReadLog, dir: &Path) -> Result<bool> {
    let sessions = reader.sessions()?;
    if sessions.is_empty() {
        anyhow::bail!("{}: the log holds no session to replay", file.display());
    }
    let replayed_db = dir.join("replayed.db");
    let replayed =
        Log::open(&replayed_db).with_context(|| format!("opening {}", replayed_db.display()))?;
    let mut recordings = Vec::new();
    for session in sessions {
        let recording = Recording::read(reader, &session.session_id)
            .with_context(|| format!("{}: session {}", file.display(), session.session_id))?;
        let Some(agent) = mull::agents::built_in(recording.agent()) else {
            anyhow::bail!(
                "{}: session {} was recorded by agent {:?}, which this binary does not have \
                 (it has {}); re-execute it from the code that defines that agent, with \
                 mull::engine::replay::reexecute",
                file.display(),
                session.session_id,
                recording.agent(),
                mull::agents::BUILT_IN.join(", ")
            );
        };
        recordings.push((recording, agent));
    }
    let mut identical = true;
    let mut events = 0;
    for (recording, agent) in recordings {
        let session = recording.session_id().to_owned();
        let model = ReplayModel::from_envelopes(recording.envelopes().to_vec())
            .with_context(|| format!("{}: session {session}", file.display()))?;
        let report = reexecute(
            &replayed,
            agent,
            Arc::new(model),
            &recording,
            ReplayOptions::default(),
        )
        .await
        .with_context(|| format!("{}: session {session}", file.display()))?;
        events += report.expected_events;
        if let Some(divergence) = report.divergence {
            identical = false;
            println!(
                "diverged: session {} of {}\n{divergence}",
                report.session_id,
                file.display()
            );
        }
    }
    replayed
        .close()
        .with_context(|| format!("committing {}", replayed_db.display()))?;
    if identical {
        println!("identical: {events} events");
    }
    Ok(identical)
}
