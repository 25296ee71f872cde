//! The output gate's files: everything beside a log's database that decides what a crash
//! keeps, in one place that the writer and the readers both use.
//!
//! The files beside `<db>`: the single-writer lock `<db>.lock` ([`lock`]), SQLite's WAL
//! `<db>-wal` (`wal`), and the record file `<db>-records` (`records`, format in
//! `frames`), where an output gate writes rows before SQLite commits them.
//!
//! # Invariants
//! 1. **Durable** means committed to the WAL or written to the record file; both are written in
//!    seq order, so an event is durable once any later one is. With [`Durability::Process`] a
//!    `write` that returned (no fsync) is durable against a killed process; with
//!    [`Durability::Power`] commits run with `synchronous=FULL` and each record write is
//!    followed by `fdatasync`, so it is durable against a power cut too.
//! 2. The record file's rows continue the database: in seq order, without a gap, starting at
//!    or before the database's last seq + 1. Only its **last** frame may be torn (a `write` cut
//!    by a kill, which never returned, so nothing depended on it). A frame that does not verify
//!    with frames that verify after it is **damage**: bytes changed after they were written.
//! 3. A WAL frame whose checksum fails, followed by a commit frame that verifies, is damage:
//!    SQLite would silently stop at the bad frame and drop every later commit, and a writer
//!    would then hand their seqs out again.
//! 4. The files are inspected (`inspect`) with the single-writer lock held, before SQLite
//!    opens the database (SQLite's last connection to close folds the WAL back and deletes
//!    it): by a writer as it opens, and by a reader that finds no writer alive. While a writer
//!    lives, it alone changes them; a reader only reads the record file.
//! 5. **Damage is refused and kept, never deleted.** A damaged, gapped, unreadable or misplaced
//!    (a directory in its place…) record file is moved aside as `<db>-records.<why>-<time>`; a
//!    damaged WAL is copied to `<db>-wal.damaged-<time>` (moving it could tear a checkpoint
//!    in progress). While such a file exists, writers refuse the log, readers report it
//!    (`inspect`'s result, [`crate::LogReader::side_damage`]), `mull check` counts it, and
//!    [`crate::recover`] copies what still verifies in it into the new log. A file is removed
//!    only once the database holds every row of it.
//! 6. One writer per log: the lock is an OS file lock, so it dies with its process; a reader
//!    probes it without waiting.
//!
//! Inside a writer, the gate is one mutex (the open `Records`) and one atomic (the highest
//! seq written to it); their order with the writer's other locks is stated in `writer`.

use std::path::{Path, PathBuf};

use crate::error::StoreError;

mod frames;
pub(crate) mod live;
pub mod lock;
mod records;
pub(crate) mod wal;

pub use crate::durability::Durability;
pub(crate) use frames::salvage;
pub use records::records_path;
pub(crate) use records::{replay, Records};

/// A file beside a log that holds, or held, rows the database lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideDamage {
    /// Where the evidence is now (the file set aside, or the file found in place).
    pub file: PathBuf,
    /// What is wrong with it.
    pub what: String,
}

impl std::fmt::Display for SideDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.what)
    }
}

/// Whether the caller holds the single-writer lock while it inspects (see invariant 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    /// No writer lives: damage found is set aside, and the WAL is read too.
    Lock,
    /// The lock could not be taken (a read-only directory): only read what is safe to read.
    Nothing,
    /// A writer lives: it inspected the files as it opened, and alone changes them; only the
    /// evidence set aside earlier is listed.
    Writer,
}

/// Inspects the files beside `db`: evidence set aside before, the record file, and (with the
/// lock held) the WAL. Damage found now is set aside as invariant 5 says. Returns everything
/// that keeps the log from being whole; empty when it is.
pub(crate) fn inspect(db: &Path, held: Held) -> Result<Vec<SideDamage>, StoreError> {
    let mut found: Vec<SideDamage> = evidence(db)
        .into_iter()
        .filter(|file| !is_torn(file))
        .map(|file| SideDamage {
            what: "set aside earlier: it holds rows the log lacks".to_owned(),
            file,
        })
        .collect();
    if held == Held::Writer {
        return Ok(found);
    }
    let records = records_path(db);
    if let Some((why, what)) = records_damage(&records) {
        let file = match held {
            Held::Lock => set_aside(&records, why)?,
            Held::Nothing | Held::Writer => records,
        };
        found.push(SideDamage { file, what });
    }
    if held == Held::Lock {
        let wal = wal_path(db);
        let bytes = match std::fs::read(&wal) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => return Err(StoreError::Io { path: wal, source }),
        };
        if let wal::WalState::Damaged {
            frames,
            commits_after,
            why,
            ..
        } = wal::inspect(&bytes)
        {
            // Already kept if an earlier look copied it (the copy is listed above).
            if !found.iter().any(|d| is_wal_evidence(db, &d.file)) {
                let file = keep_copy(&wal, &bytes)?;
                found.push(SideDamage {
                    file,
                    what: format!(
                        "a copy of the WAL ({frames} frames): {why}, and {commits_after} \
                         commit(s) after it verify; SQLite stops at the bad frame, so the log \
                         reads without them"
                    ),
                });
            }
        }
    }
    Ok(found)
}

/// Why the record file at `path` is not whole, if it is not: (the word its set-aside name
/// carries, a description).
fn records_damage(path: &Path) -> Option<(&'static str, String)> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return None,
        Err(err) => return Some(("unreadable", format!("cannot be looked at: {err}"))),
    };
    // A link is followed: one to a file is that file; one to nothing cannot be read.
    let meta = match meta.is_symlink() {
        false => meta,
        true => match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(err) => return Some(("unreadable", format!("cannot be opened: {err}"))),
        },
    };
    if !meta.is_file() {
        return Some((
            "misplaced",
            "is not a file (a directory or something else stands where the record file goes)"
                .to_owned(),
        ));
    }
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) => return Some(("unreadable", format!("cannot be read: {err}"))),
    };
    let scan = frames::scan(&bytes);
    let stop = scan.stop.as_ref().filter(|_| scan.is_damaged())?;
    Some((
        "damaged",
        format!(
            "frame {} (at byte {}) fails its CRC and {} frame(s) after it verify: bytes \
             changed after they were written, not a write cut short",
            stop.index + 1,
            stop.offset,
            stop.frames_after
        ),
    ))
}

/// The error a writer (or a reader's settle) gives for damage: the file kept, what is wrong,
/// and the two ways on.
pub(crate) fn refusal(db: &Path, kept: &Path, what: &str) -> StoreError {
    StoreError::Damaged {
        path: db.to_owned(),
        what: format!(
            "{} (kept as {}); `mull recover {db} NEW.db` copies every readable event, this \
             file's included, into a new log; or remove {} to write this log without its rows \
             (their seqs would be handed out again)",
            what,
            kept.display(),
            kept.display(),
            db = db.display()
        ),
    }
}

/// The error for everything [`inspect`] found, naming the first file.
pub(crate) fn refuse(db: &Path, found: &[SideDamage]) -> StoreError {
    let what: Vec<String> = found.iter().map(ToString::to_string).collect();
    let first = &found[0].file;
    refusal(
        db,
        first,
        &format!("files beside the log are damaged: {}", what.join("; ")),
    )
}

/// The error a reader's caller gives for what [`inspect`] found: the log reads without the
/// rows these files hold.
pub(crate) fn reported(db: &Path, found: &[SideDamage]) -> StoreError {
    let what: Vec<String> = found.iter().map(ToString::to_string).collect();
    StoreError::Damaged {
        path: db.to_owned(),
        what: format!(
            "it reads without the rows of files beside it: {}. `mull check {db}` lists what \
             is lost; `mull recover {db} NEW.db` copies every readable event, theirs included, \
             into a new log",
            what.join("; "),
            db = db.display()
        ),
    }
}

/// Moves `path` aside as `<path>.<why>-<time>` (a free name) and returns the new name.
pub(crate) fn set_aside(path: &Path, why: &str) -> Result<PathBuf, StoreError> {
    let to = free_name(path, why);
    std::fs::rename(path, &to).map_err(|source| StoreError::Io {
        path: path.to_owned(),
        source,
    })?;
    tracing::error!(from = %path.display(), to = %to.display(), "damaged file set aside");
    Ok(to)
}

/// Writes a copy of `bytes` (the file at `path`) beside it as `<path>.damaged-<time>`.
fn keep_copy(path: &Path, bytes: &[u8]) -> Result<PathBuf, StoreError> {
    let to = free_name(path, "damaged");
    std::fs::write(&to, bytes).map_err(|source| StoreError::Io {
        path: to.clone(),
        source,
    })?;
    tracing::error!(from = %path.display(), to = %to.display(), "damaged WAL copied aside");
    Ok(to)
}

/// `<path>.<why>-<UTC time>`, with a counter if that is taken.
fn free_name(path: &Path, why: &str) -> PathBuf {
    let time = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    let mut n = 0;
    loop {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{why}-{time}"));
        if n > 0 {
            name.push(format!("-{n}"));
        }
        let candidate = PathBuf::from(name);
        if std::fs::symlink_metadata(&candidate).is_err() {
            return candidate;
        }
        n += 1;
    }
}

/// After [`replay`]: a record file whose last frame is torn is set aside as
/// `<db>-records.torn-<time>` rather than emptied, so the cut bytes are kept for whoever asks
/// what they were (a `write` a kill interrupted, which never returned and so let nothing out —
/// or a file cut short by someone). It is not damage: the log opens. Returns whether it was.
pub(crate) fn keep_torn_tail(db: &Path) -> Result<bool, StoreError> {
    let path = records_path(db);
    let Ok(bytes) = std::fs::read(&path) else {
        return Ok(false);
    };
    let scan = frames::scan(&bytes);
    match scan.stop {
        Some(stop) if !scan.is_damaged() => {
            let kept = set_aside(&path, "torn")?;
            tracing::warn!(
                file = %kept.display(),
                after_frames = stop.index,
                "the record file ends in a frame cut short; its whole frames are in the log"
            );
            Ok(true)
        }
        _ => Ok(false),
    }
}

fn is_torn(file: &Path) -> bool {
    file.file_name()
        .is_some_and(|n| n.to_string_lossy().contains(".torn-"))
}

/// SQLite's WAL of the log at `db`.
pub(crate) fn wal_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

fn is_wal_evidence(db: &Path, file: &Path) -> bool {
    let mut prefix = wal_path(db).into_os_string();
    prefix.push(".");
    file.as_os_str()
        .to_string_lossy()
        .starts_with(&*prefix.to_string_lossy())
}

/// The files set aside beside `db` (`<db>-records.<why>-<time>`, `<db>-wal.damaged-<time>`),
/// in name order.
pub fn evidence(db: &Path) -> Vec<PathBuf> {
    let Some(name) = db.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Vec::new();
    };
    let dir = match db.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    let prefixes = [format!("{name}-records."), format!("{name}-wal.")];
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            prefixes.iter().any(|p| n.starts_with(p))
        })
        .map(|e| db.with_file_name(e.file_name()))
        .collect();
    found.sort();
    found
}

/// Readies `db` for a reader: when no writer lives, inspects the files beside it with the lock
/// held and inserts a whole record file's rows (so no reader shows less than the last writer
/// let out), then lets the lock go; while one lives, only reads what is safe. Returns the
/// damage found, which the reader reports.
pub(crate) fn ready_for_reader(db: &Path) -> Result<Vec<SideDamage>, StoreError> {
    let records = records_path(db);
    let wal = wal_path(db);
    let worth_a_look =
        |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| !m.is_file() || m.len() > 0);
    if !db.is_file() || (!worth_a_look(&records) && !worth_a_look(&wal)) {
        return inspect(db, Held::Nothing);
    }
    let lock_path = lock::lock_path(db);
    let lock = match lock::try_take_lock(&lock_path) {
        Ok(Some(lock)) => lock,
        Ok(None) => return inspect(db, Held::Writer),
        Err(_) => return inspect(db, Held::Nothing),
    };
    let result = (|| {
        let found = inspect(db, Held::Lock)?;
        if !found.is_empty() || !worth_a_look(&records) {
            return Ok(found);
        }
        let mut conn = crate::schema::open_writer(db)?;
        let last: i64 = conn
            .query_row("SELECT coalesce(max(seq), 0) FROM events", [], |r| r.get(0))
            .map_err(StoreError::sqlite(format!(
                "{}: reading the last seq",
                db.display()
            )))?;
        match replay(&mut conn, db, last.max(0) as u64) {
            Ok(_) => {}
            Err(StoreError::Damaged { what, .. }) => {
                return Ok(vec![SideDamage {
                    file: evidence(db).pop().unwrap_or_else(|| records.clone()),
                    what,
                }])
            }
            Err(err) => return Err(err),
        }
        // Every row is in the database now: the file has nothing more to give but a torn
        // tail, which is kept.
        if !keep_torn_tail(db)? {
            std::fs::remove_file(&records).map_err(|source| StoreError::Io {
                path: records.clone(),
                source,
            })?;
        }
        Ok(Vec::new())
    })();
    // Removed while still held, as a writer does when it closes.
    let _ = std::fs::remove_file(&lock_path);
    drop(lock);
    result
}

#[cfg(test)]
mod tests;
