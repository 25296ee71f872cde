//! A row on its way to the `events` table: its columns, and the INSERT statements that store
//! rows a few at a time.

use std::borrow::Cow;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use mull_core::{Event, EVENT_VERSION};
use rusqlite::Connection;

use crate::timestamp;

/// One row on its way to the `events` table.
pub(crate) struct Row {
    pub seq: u64,
    pub session_id: Arc<str>,
    pub turn_id: Option<Arc<str>>,
    pub at: DateTime<Utc>,
    pub v: u16,
    pub kind: Cow<'static, str>,
    pub payload: String,
}

/// The `kind` column of an event, without allocating for known kinds.
pub(crate) fn kind_of(event: &Event) -> Cow<'static, str> {
    if let Event::Chunk { .. } = event {
        return Cow::Borrowed("chunk");
    }
    let kind = event.kind();
    match Event::KNOWN_KINDS.iter().find(|known| **known == kind) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(kind.to_owned()),
    }
}

/// Most rows one INSERT statement carries: a statement's fixed cost (running it, resetting
/// it) is shared by its rows.
pub(crate) const ROWS_PER_INSERT: usize = 16;

/// Where an inserted row's seq comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seqs {
    /// The rows continue the table without a gap, so SQLite's next rowid is each row's seq:
    /// the appended rows, whose seqs the queue hands out one after another from the log's last.
    /// The statement leaves `seq` out, which spares it what SQLite must prepare for a rowid
    /// given by value in a statement of several rows (a copy of every page it touches, in
    /// case a later row's rowid is refused); [`insert_many`] checks SQLite's rowids matched.
    Next,
    /// The rows carry seqs that may leave gaps (an import): bound like the other columns.
    Given,
}

/// How an INSERT statement takes its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// Every column of every row bound, `seq` included or not as [`Seqs`] says.
    Each(Seqs),
    /// [`Seqs::Next`] rows of one session and turn at this build's payload version: the ids
    /// are bound once for the whole statement and the version is written in it, leaving three
    /// values per row to bind. What a running turn writes.
    Shared,
}

impl Form {
    fn of(rows: &[Row], seqs: Seqs) -> Form {
        let Some(first) = rows.first() else {
            return Form::Each(seqs);
        };
        let shared = seqs == Seqs::Next
            && rows.iter().all(|row| {
                row.v == EVENT_VERSION
                    && row.session_id == first.session_id
                    && row.turn_id == first.turn_id
            });
        if shared {
            Form::Shared
        } else {
            Form::Each(seqs)
        }
    }
}

/// The INSERT statement of `n` rows of `form`.
///
/// `OR ROLLBACK`: a row the table refuses ends the whole transaction, which its writer abandons
/// anyway. Under SQLite's default (`ABORT`) a statement must be undoable on its own, which for
/// several rows means the page copies [`Seqs::Next`] avoids.
fn insert_sql(n: usize, form: Form) -> &'static str {
    static SQL: std::sync::OnceLock<[Vec<String>; 3]> = std::sync::OnceLock::new();
    let [next, given, shared] = SQL.get_or_init(|| {
        let statements = |columns: &str, row: &str| -> Vec<String> {
            (1..=ROWS_PER_INSERT)
                .map(|n| {
                    let values = vec![row; n].join(", ");
                    format!("INSERT OR ROLLBACK INTO events ({columns}) VALUES {values}")
                })
                .collect()
        };
        [
            statements(
                "session_id, turn_id, at, v, kind, payload",
                "(?, ?, ?, ?, ?, ?)",
            ),
            statements(
                "seq, session_id, turn_id, at, v, kind, payload",
                "(?, ?, ?, ?, ?, ?, ?)",
            ),
            // A bare `?` takes the number after the highest used so far: row 1's are ?3..?5,
            // row 2's ?6..?8, and so on.
            statements(
                "session_id, turn_id, at, v, kind, payload",
                &format!("(?1, ?2, ?, {EVENT_VERSION}, ?, ?)"),
            ),
        ]
    });
    let all = match form {
        Form::Each(Seqs::Next) => next,
        Form::Each(Seqs::Given) => given,
        Form::Shared => shared,
    };
    &all[n.clamp(1, ROWS_PER_INSERT) - 1]
}

/// Inserts `rows` (at most [`ROWS_PER_INSERT`]) with one statement.
pub(crate) fn insert_many(conn: &Connection, rows: &[Row], seqs: Seqs) -> rusqlite::Result<()> {
    let Some(last) = rows.last() else {
        return Ok(());
    };
    let form = Form::of(rows, seqs);
    let mut insert = conn.prepare_cached(insert_sql(rows.len(), form))?;
    let mut param = 0;
    let mut bind = |value: &dyn rusqlite::ToSql| {
        param += 1;
        insert.raw_bind_parameter(param, value)
    };
    if form == Form::Shared {
        bind(&&*last.session_id)?;
        bind(&last.turn_id.as_deref())?;
    }
    for row in rows {
        if form == Form::Each(Seqs::Given) {
            bind(&row.seq)?;
        }
        if form != Form::Shared {
            bind(&&*row.session_id)?;
            bind(&row.turn_id.as_deref())?;
        }
        bind(&timestamp::to_stored(row.at))?;
        if form != Form::Shared {
            bind(&row.v)?;
        }
        bind(&&*row.kind)?;
        bind(&row.payload)?;
    }
    insert.raw_execute()?;
    let stored = conn.last_insert_rowid();
    if seqs == Seqs::Next && u64::try_from(stored).ok() != Some(last.seq) {
        // The table does not end where the queue believes: the seqs already handed out would
        // not name these rows. Refusing is all that is left.
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_MISMATCH),
            Some(format!(
                "seq {} was stored as {stored}: the table does not end where the log's seqs do",
                last.seq
            )),
        ));
    }
    Ok(())
}
