//! Where a damaged page leaves a hole: the stretch of seqs a read cannot get past, found by
//! seeking beyond it, and the sessions it costs. Readers name it in their errors; a full
//! check and a recovery walk around it (see [`crate::integrity`]).

use std::collections::BTreeSet;
use std::fmt;

use rusqlite::{params, Connection, OptionalExtension};

use crate::schema::LIFECYCLE_PREDICATE;

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
pub(crate) fn name_sessions(
    conn: &Connection,
    before: u64,
    resume: Option<u64>,
    range: &mut DamagedRange,
) {
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
