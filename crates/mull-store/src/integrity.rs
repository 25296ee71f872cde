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
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mull_core::Event;
use rusqlite::{params, Connection, OptionalExtension};

use crate::error::StoreError;
use crate::reader::LogReader;
use crate::schema::LIFECYCLE_PREDICATE;
use crate::timestamp;
use crate::writer::{kind_of, Log, Row};

/// How much of `quick_check` a writer's open may run: progress-handler calls of
/// 1,000 SQLite steps each. Measured: a log of 300,000 events (43 MB) takes 4,200 calls and
/// 0.14 s to check whole, so the budget covers about 1.4 million events (200 MB) whole; a larger
/// log is checked as far as the budget goes, and its right edge always.
pub const OPEN_CHECK_BUDGET: u32 = 20_000;

/// SQLite steps between two calls of the progress handler during the open check.
const BUDGET_STEP: i32 = 1_000;

/// How many of SQLite's complaints an error quotes: the first few say where the damage is.
const QUOTED_PROBLEMS: usize = 3;

/// Rows a check or recovery reads per query.
const WALK_PAGE: i64 = 4096;

/// Runs the open check on a writer's connection: `quick_check` within the budget, then the
/// last rows of the event table. A problem is [`StoreError::Damaged`].
pub(crate) fn check_at_open(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let handler = |what: &str| StoreError::sqlite(format!("{}: {what}", path.display()));
    let mut calls = 0u32;
    conn.progress_handler(
        BUDGET_STEP,
        Some(move || {
            calls += 1;
            calls > OPEN_CHECK_BUDGET
        }),
    )
    .map_err(handler("bounding the open check"))?;
    let result = quick_check(conn);
    conn.progress_handler(BUDGET_STEP, None::<fn() -> bool>)
        .map_err(handler("ending the open check"))?;
    let problems = match result {
        Ok(problems) => problems,
        // The budget ran out before the check did: what it saw was sound.
        Err(err) if err.sqlite_error_code() == Some(rusqlite::ErrorCode::OperationInterrupted) => {
            Vec::new()
        }
        Err(err) => vec![err.to_string()],
    };
    if !problems.is_empty() {
        return Err(damaged(path, describe_problems(&problems)));
    }
    // The right edge, which every append extends: the last rows must read.
    conn.query_row(
        "SELECT count(*) FROM (SELECT payload FROM events ORDER BY seq DESC LIMIT 64)",
        [],
        |r| r.get::<_, i64>(0),
    )
    .map_err(|err| damaged(path, format!("the newest events cannot be read ({err})")))?;
    Ok(())
}

/// `PRAGMA quick_check`'s complaints (none when it answers `ok`).
fn quick_check(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare("PRAGMA quick_check")?;
    let lines = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(lines.into_iter().filter(|l| l != "ok").collect())
}

fn describe_problems(problems: &[String]) -> String {
    let quoted = problems[..problems.len().min(QUOTED_PROBLEMS)].join("; ");
    match problems.len() {
        n if n > QUOTED_PROBLEMS => format!("{quoted}; and {} more problems", n - QUOTED_PROBLEMS),
        _ => quoted,
    }
}

/// Damage that [`check`] and [`recover`] can measure and get around: the error says so.
pub(crate) fn damaged(path: &Path, what: String) -> StoreError {
    StoreError::Damaged {
        path: path.to_owned(),
        what: format!(
            "{what}. `mull check {0}` lists what it costs; `mull recover {0} NEW.db` copies \
             every readable event into a new log",
            path.display()
        ),
    }
}

/// A stretch of seqs that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedRange {
    /// The first unreadable seq.
    pub first: u64,
    /// The last unreadable seq, or `None` when nothing after `first` can be read.
    pub last: Option<u64>,
    /// The sessions the stretch costs events of: its readable neighbours' sessions and those
    /// the lifecycle index names inside it.
    pub sessions: BTreeSet<String>,
    /// Lifecycle events (not chunks) the index says were in the stretch: (seq, session).
    pub lifecycle: Vec<(u64, String)>,
    /// Why it cannot be read (SQLite's error, or why a row does not decode).
    pub cause: String,
}

impl DamagedRange {
    /// How many seqs the stretch costs, when its end is known.
    pub fn lost(&self) -> Option<u64> {
        self.last.map(|last| (last + 1).saturating_sub(self.first))
    }
}

impl fmt::Display for DamagedRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.last {
            Some(last) if last < self.first => write!(
                f,
                "the pages after seq {last} (a scan cannot step past them; a seek still reads on)"
            )?,
            Some(last) if last == self.first => write!(f, "seq {last}")?,
            Some(last) => write!(
                f,
                "seqs {}..={last} ({} events)",
                self.first,
                last - self.first + 1
            )?,
            None => write!(f, "seqs {}.. (everything from there on)", self.first)?,
        }
        if !self.sessions.is_empty() {
            let names: Vec<&str> = self.sessions.iter().map(String::as_str).collect();
            write!(f, ", of session(s) {}", names.join(", "))?;
        }
        if !self.lifecycle.is_empty() {
            write!(f, ", {} of them lifecycle events", self.lifecycle.len())?;
        }
        write!(f, ": {}", self.cause)
    }
}

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
}

impl IntegrityReport {
    /// Whether the file is sound and every event reads.
    pub fn is_sound(&self) -> bool {
        self.problems.is_empty() && self.damaged.is_empty()
    }
}

/// What [`recover`] copied and what it had to leave behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoverReport {
    /// Events copied into the new log, seqs kept.
    pub copied: u64,
    /// The stretches that could not be read, as [`check`] reports them.
    pub lost: Vec<DamagedRange>,
}

/// Checks a log fully, read-only: SQLite's `integrity_check`, then every event by seq.
pub fn check(path: impl AsRef<Path>) -> Result<IntegrityReport, StoreError> {
    let reader = LogReader::open(path.as_ref())?;
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
    let result = Log::open(out).and_then(|log| {
        let mut lost = Vec::new();
        let source_name = from.display().to_string();
        let copied = log.import(&source_name, |import| {
            lost = walk(reader.connection(), |row| import.push(row))?;
            Ok(())
        })?;
        log.close()?;
        Ok(RecoverReport { copied, lost })
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

/// Where a read that broke after `after_seq` can go on: the damaged stretch, found by seeking.
pub(crate) fn damage_after(conn: &Connection, after_seq: u64, cause: String) -> DamagedRange {
    let first = after_seq + 1;
    let highest = highest_named_seq(conn);
    let resume = highest.and_then(|highest| next_readable(conn, after_seq, highest));
    let last = match (resume, highest) {
        (Some(next), _) => Some(next - 1),
        // Nothing after it reads: the stretch runs to the highest seq the file still names.
        (None, Some(highest)) if highest >= first => Some(highest),
        (None, _) => None,
    };
    let mut range = DamagedRange {
        first,
        last,
        sessions: BTreeSet::new(),
        lifecycle: Vec::new(),
        cause,
    };
    name_sessions(conn, after_seq, resume, &mut range);
    range
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

/// The first seq after `after` (and at most `highest`) that a seek can read, if any: seeks one
/// seq further each time, so a stretch costs a seek per lost seq.
fn next_readable(conn: &Connection, after: u64, highest: u64) -> Option<u64> {
    let mut stmt = conn
        .prepare("SELECT seq, payload FROM events WHERE seq >= ?1 ORDER BY seq LIMIT 1")
        .ok()?;
    let mut probe = after + 1;
    while probe <= highest {
        let found = stmt
            .query_row([probe as i64], |r| {
                let _: String = r.get(1)?;
                r.get::<_, i64>(0)
            })
            .optional();
        match found {
            Ok(Some(seq)) if seq > after as i64 => return Some(seq as u64),
            Ok(_) => return None,
            Err(_) => probe += 1,
        }
    }
    None
}

/// The highest seq the table, the lifecycle index or the writers' starts still name.
fn highest_named_seq(conn: &Connection) -> Option<u64> {
    [
        "SELECT max(seq) FROM events",
        &format!(
            "SELECT max(seq) FROM events INDEXED BY events_lifecycle WHERE {LIFECYCLE_PREDICATE}"
        ),
        "SELECT max(seq) FROM writer_starts",
    ]
    .iter()
    .filter_map(|sql| {
        conn.query_row(sql, [], |r| r.get::<_, Option<i64>>(0))
            .ok()
            .flatten()
    })
    .max()
    .map(|seq| seq.max(0) as u64)
}

/// Fills in the sessions a stretch costs: its readable neighbours' (`before` and `resume`) and
/// the lifecycle events the index lists inside it.
fn name_sessions(conn: &Connection, before: u64, resume: Option<u64>, range: &mut DamagedRange) {
    let session_at = |seq: u64| -> Option<String> {
        conn.query_row(
            "SELECT session_id FROM events WHERE seq = ?1",
            [seq as i64],
            |r| r.get(0),
        )
        .ok()
    };
    range.sessions.extend(session_at(before));
    range.sessions.extend(resume.and_then(session_at));
    let to = range.last.map_or(i64::MAX, |last| last as i64);
    let sql = format!(
        "SELECT seq, session_id FROM events INDEXED BY events_lifecycle
         WHERE {LIFECYCLE_PREDICATE} AND seq >= ?1 AND seq <= ?2 ORDER BY seq"
    );
    let listed = conn.prepare(&sql).and_then(|mut stmt| {
        stmt.query_map(params![range.first as i64, to], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get::<_, String>(1)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()
    });
    if let Ok(listed) = listed {
        range.sessions.extend(listed.iter().map(|(_, s)| s.clone()));
        range.lifecycle = listed;
    }
}

/// Whether a SQLite error says the file itself is damaged.
pub(crate) fn is_damage(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}
