//! The single-writer lock: a sidecar file `<db>.lock` that the one writer of a log holds
//! locked for as long as it lives, and that readers probe to tell whether a writer is alive.

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::StoreError;

/// How many times opening retries a lock held by someone else (5 ms apart): a reader's
/// probe holds it for microseconds; a writer holds it for as long as it lives.
const LOCK_TRIES: u32 = 20;

/// Creates and locks the sidecar lock file. A writer removes it when it closes (while still
/// holding it), so a lock taken on a file that was removed meanwhile is taken again on the
/// file now at the path.
pub(crate) fn take_lock(lock_path: &Path) -> Result<File, StoreError> {
    let io = io_error(lock_path);
    loop {
        let lock_file = open_lock_file(lock_path)?;
        // A reader probes the lock with a shared lock it lets go at once (to tell whether a
        // writer is alive), so a refusal is retried for a moment before it counts.
        let mut tries = 0;
        loop {
            match lock_file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if tries < LOCK_TRIES => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(StoreError::Locked {
                        path: lock_path.to_owned(),
                    })
                }
                Err(TryLockError::Error(source)) => return Err(io(source)),
            }
        }
        if still_at_path(&lock_file, lock_path) {
            return Ok(lock_file);
        }
    }
}

/// The single-writer lock if no writer holds it now (no waiting): `None` while one lives.
pub(crate) fn try_take_lock(lock_path: &Path) -> Result<Option<File>, StoreError> {
    let io = io_error(lock_path);
    let lock_file = open_lock_file(lock_path)?;
    match lock_file.try_lock() {
        Ok(()) if still_at_path(&lock_file, lock_path) => Ok(Some(lock_file)),
        Ok(()) | Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(source)) => Err(io(source)),
    }
}

/// Opens (creating) the lock file, unlocked.
fn open_lock_file(lock_path: &Path) -> Result<File, StoreError> {
    File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path)
        .map_err(io_error(lock_path))
}

/// An I/O error naming the lock file.
fn io_error(lock_path: &Path) -> impl Fn(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: lock_path.to_owned(),
        source,
    }
}

/// Whether `file` is the file at `path` now (not one removed since it was opened).
#[cfg(unix)]
fn still_at_path(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(open), Ok(now)) => open.dev() == now.dev() && open.ino() == now.ino(),
        _ => false,
    }
}

/// Elsewhere a file that is open cannot be removed, so it is still at its path.
#[cfg(not(unix))]
fn still_at_path(_file: &File, _path: &Path) -> bool {
    true
}

/// The sidecar file whose lock marks the one writer of `db`.
pub fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}
