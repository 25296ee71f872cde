//! The writers open in this process, so that a reader opened here sees every event this
//! process reported.
//!
//! A gate lets an event out once it is in the record file, before SQLite commits it; a reader
//! reads the database. A reader in another process sees such an event within the writer's
//! batch delay, like any commit. A reader opened in the writer's own process must not lag
//! behind what that process already told someone (a test, a dashboard beside a server), so it
//! asks the writer to commit first. The engine hands readers around by path, not by `Log`
//! handle, which is why this is a registry rather than a method of the writer; it holds only
//! weak references, so it never keeps a writer alive.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// A writer that can commit what its gates let out, for a reader.
pub(crate) trait CommitsForReaders: Send + Sync {
    /// Commits every event a gate let out that is not committed yet (nothing if none is).
    fn commit_gated(&self);
}

type Entry = (PathBuf, Weak<dyn CommitsForReaders>);

static OPEN: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

fn open() -> MutexGuard<'static, Vec<Entry>> {
    OPEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Records that `writer` writes the log at `db`.
pub(crate) fn register(db: &Path, writer: &Arc<dyn CommitsForReaders>) {
    if let Ok(canonical) = std::fs::canonicalize(db) {
        let mut open = open();
        open.retain(|(_, weak)| weak.strong_count() > 0);
        open.push((canonical, Arc::downgrade(writer)));
    }
}

/// Has the writer of `db` in this process (if one is open) commit what its gates let out.
pub(crate) fn commit_for_reader(db: &Path) {
    let Ok(canonical) = std::fs::canonicalize(db) else {
        return;
    };
    let writer = open()
        .iter()
        .find(|(path, _)| *path == canonical)
        .and_then(|(_, weak)| weak.upgrade());
    if let Some(writer) = writer {
        writer.commit_gated();
    }
}
