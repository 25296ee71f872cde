//! Damaged logs: found at open, measured by [`check`], and never a dead end thanks to
//! [`recover`].
//!
//! A disk, a careless copy or a crash in a file system can overwrite pages in the middle of a
//! log. SQLite notices only when a query walks into such a page, so without a check a writer
//! would happily append to a file whose middle no reader can get past. Three defences:
//! - **At open** a writer runs SQLite's `quick_check` (every page's structure, no index
//!   contents) within a work budget ([`OPEN_CHECK_BUDGET`]): a log of tens of megabytes is
//!   checked whole in a moment, a huge log as far as the budget goes, and its right edge — the
//!   pages appends rely on — is always read. Damage found refuses the open with
//!   [`StoreError::Damaged`] naming the file and what is wrong.
//! - **[`check`]** walks every event by seq and reports each stretch of seqs that cannot be
//!   read, with the sessions it costs (from its readable neighbours and the lifecycle index,
//!   which lives on pages of its own).
//! - **[`recover`]** copies every readable event, seqs kept, into a new log and reports what was
//!   left behind.
//!
//! A stretch of unreadable seqs is found by seeking: a B-tree seek for a seq past a damaged
//! page lands on intact pages, so after a scan breaks at seq N the walk seeks N+1, N+2, …
//! until one lands, and scans on from there.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mull_core::Event;
use rusqlite::{params, Connection};

pub use crate::damage::DamagedRange;
use crate::damage::{damage_after, name_sessions};
use crate::error::StoreError;
use crate::gate::SideDamage;
pub use crate::open_check::OPEN_CHECK_BUDGET;
use crate::reader::LogReader;
use crate::timestamp;
use crate::writer::{kind_of, Log, Row};

/// Rows a check or recovery reads per query.
const WALK_PAGE: i64 = 4096;

/// What [`check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntegrityReport {
    pub path: PathBuf,
    /// SQLite's `integrity_check` complaints (empty when the file is sound).
    pub problems: Vec<String>,
    /// Events that read and decode.
    pub readable: u64,
    /// The highest seq read.
    pub last_readable: u64,
    /// Every stretch of seqs that cannot be read, in seq order.
    pub damaged: Vec<DamagedRange>,
    /// Files beside the database (record file, WAL) that hold rows it lacks: damaged, or set
    /// aside after damage (see [`crate::gate`]).
    pub side: Vec<SideDamage>,
}

impl IntegrityReport {
    /// Whether the file is sound, every event reads, and nothing beside it holds rows it lacks.
    pub fn is_sound(&self) -> bool {
        self.problems.is_empty() && self.damaged.is_empty() && self.side.is_empty()
    }
}

/// What [`recover`] copied and what it had to leave behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoverReport {
    /// Events copied into the new log, seqs kept.
    pub copied: u64,
    /// The stretches that could not be read, as [`check`] reports them.
    pub lost: Vec<DamagedRange>,
    /// Of `copied`, the events taken from files beside the database: a damaged WAL's later
    /// commits, and record-file rows.
    pub from_side_files: u64,
}

/// Checks a log fully: the files beside it (record file, WAL; damage there is set aside,
/// never changed), SQLite's `integrity_check`, then every event by seq.
pub fn check(path: impl AsRef<Path>) -> Result<IntegrityReport, StoreError> {
    let reader = LogReader::open(path.as_ref())?;
    let side = reader.side_damage().to_vec();
    let conn = reader.connection();
    let problems = match conn.prepare("PRAGMA integrity_check").and_then(|mut s| {
        s.query_map([], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()
    }) {
        Ok(lines) => lines.into_iter().filter(|l| l != "ok").collect(),
        Err(err) => vec![err.to_string()],
    };
    let mut readable = 0;
    let mut last_readable = 0;
    let damaged = walk(conn, |row| {
        readable += 1;
        last_readable = row.seq;
        Ok(())
    })?;
    Ok(IntegrityReport {
        path: path.as_ref().to_owned(),
        problems,
        readable,
        last_readable,
        damaged,
        side,
    })
}

/// Copies every readable event of `damaged_log` into a new log at `out` (which must not exist),
/// keeping seqs; returns what was copied and what was lost. Nothing is written to the damaged
/// file. A failure removes `out` again.
pub fn recover(
    damaged_log: impl AsRef<Path>,
    out: impl AsRef<Path>,
) -> Result<RecoverReport, StoreError> {
    let (from, out) = (damaged_log.as_ref(), out.as_ref());
    if out.exists() {
        return Err(StoreError::Io {
            path: out.to_owned(),
            source: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "already exists; recovery writes a new log",
            ),
        });
    }
    let reader = LogReader::open(from)?;
    let plain = reader.max_seq().unwrap_or(0);
    let result = crate::salvage::source(from, reader, out).and_then(|source| {
        let log = Log::open(out)?;
        let mut lost = Vec::new();
        let mut last = 0;
        let mut from_side_files = 0;
        let source_name = from.display().to_string();
        let copied = log.import(&source_name, |import| {
            lost = walk(source.reader.connection(), |row| {
                last = row.seq;
                from_side_files += u64::from(row.seq > plain);
                import.push(row)
            })?;
            let (rows, gaps) = crate::salvage::record_rows(from, last);
            from_side_files += rows.len() as u64;
            lost.extend(gaps);
            rows.into_iter().try_for_each(|row| import.push(row))
        })?;
        log.close()?;
        Ok(RecoverReport {
            copied,
            lost,
            from_side_files,
        })
    });
    if result.is_err() {
        remove_log_files(out);
    }
    result
}

/// Removes a log file and the sidecars a writer leaves (WAL, shared memory, lock).
pub fn remove_log_files(db: &Path) {
    for suffix in ["", "-wal", "-shm", ".lock"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(name));
    }
}

/// Why a scan of the walk stopped early.
enum Stop {
    /// The file: a page that does not read, or rows out of order.
    Damage(String),
    /// The visitor (a recovery's import) failed: not the damaged file's fault.
    Visitor(StoreError),
}

/// Hands every readable event, in seq order, to `visit` as a row ready to import; returns the
/// stretches that could not be read.
fn walk(
    conn: &Connection,
    mut visit: impl FnMut(Row) -> Result<(), StoreError>,
) -> Result<Vec<DamagedRange>, StoreError> {
    let mut damaged = Vec::new();
    let mut after = 0u64;
    let mut stmt = conn
        .prepare(
            "SELECT seq, session_id, turn_id, at, v, payload FROM events
             WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        )
        .map_err(|source| StoreError::Sqlite {
            context: "preparing the walk over the events".to_owned(),
            source,
        })?;
    loop {
        let mut count = 0i64;
        let mut bad_rows = Vec::new();
        let mut scan = || -> Result<(), Stop> {
            let damage = |e: rusqlite::Error| Stop::Damage(e.to_string());
            let mut rows = stmt
                .query(params![after as i64, WALK_PAGE])
                .map_err(damage)?;
            while let Some(row) = rows.next().map_err(damage)? {
                count += 1;
                let seq = u64::try_from(row.get::<_, i64>(0).map_err(damage)?).unwrap_or(0);
                if seq <= after {
                    // A damaged page that still parses can hand back seqs out of order.
                    return Err(Stop::Damage(format!(
                        "seq {seq} comes after seq {after}: rows out of order"
                    )));
                }
                match read_row(row, seq) {
                    Ok(parsed) => visit(parsed).map_err(Stop::Visitor)?,
                    Err(cause) => bad_rows.push((seq, cause)),
                }
                after = seq;
            }
            Ok(())
        };
        let scanned = scan();
        for (seq, cause) in bad_rows {
            let mut range = DamagedRange {
                first: seq,
                last: Some(seq),
                sessions: BTreeSet::new(),
                lifecycle: Vec::new(),
                cause,
            };
            name_sessions(conn, seq - 1, Some(seq + 1), &mut range);
            damaged.push(range);
        }
        match scanned {
            Ok(()) if count < WALK_PAGE => return Ok(damaged),
            Ok(()) => {}
            Err(Stop::Visitor(err)) => return Err(err),
            Err(Stop::Damage(cause)) => {
                let range = damage_after(conn, after, cause);
                match range.last {
                    Some(last) if last >= range.first => {
                        after = last;
                        damaged.push(range);
                    }
                    // The next seq reads by a seek although the scan could not step to it
                    // (the damage is on the scan's way, not on the row's page): take it alone.
                    Some(_) => {
                        let seq = after + 1;
                        match read_one(conn, seq) {
                            Ok(row) => visit(row)?,
                            Err(cause) => {
                                let mut range = DamagedRange {
                                    first: seq,
                                    last: Some(seq),
                                    sessions: BTreeSet::new(),
                                    lifecycle: Vec::new(),
                                    cause,
                                };
                                name_sessions(conn, after, Some(seq + 1), &mut range);
                                damaged.push(range);
                            }
                        }
                        after = seq;
                    }
                    None => {
                        damaged.push(range);
                        return Ok(damaged);
                    }
                }
            }
        }
    }
}

/// The row of `seq`, read by a seek.
fn read_one(conn: &Connection, seq: u64) -> Result<Row, String> {
    conn.query_row(
        "SELECT seq, session_id, turn_id, at, v, payload FROM events WHERE seq = ?1",
        [seq as i64],
        |row| Ok(read_row(row, seq)),
    )
    .map_err(|e| format!("seq {seq}: {e}"))?
}

/// One stored row as an import row, or why it cannot be read.
fn read_row(row: &rusqlite::Row<'_>, seq: u64) -> Result<Row, String> {
    let text = |i: usize| -> Result<String, String> {
        row.get::<_, String>(i)
            .map_err(|e| format!("seq {seq}: {e}"))
    };
    let session_id = text(1)?;
    let turn_id: Option<String> = row.get(2).map_err(|e| format!("seq {seq}: {e}"))?;
    let at = match row.get_ref(3).map_err(|e| format!("seq {seq}: {e}"))? {
        rusqlite::types::ValueRef::Integer(micros) => {
            chrono::DateTime::from_timestamp_micros(micros)
        }
        rusqlite::types::ValueRef::Text(t) => {
            std::str::from_utf8(t).ok().and_then(timestamp::parse)
        }
        _ => None,
    }
    .ok_or_else(|| format!("seq {seq}: its time is not a timestamp"))?;
    let v: u16 = row.get(4).map_err(|e| format!("seq {seq}: {e}"))?;
    let payload = text(5)?;
    let event = Event::decode(v, &payload).map_err(|e| format!("seq {seq}: {e}"))?;
    Ok(Row {
        seq,
        session_id: Arc::from(session_id),
        turn_id: turn_id.map(Arc::from),
        at,
        v,
        kind: kind_of(&event),
        payload,
    })
}
