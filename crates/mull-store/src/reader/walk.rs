//! Walking one session's rows without an index over them: its lifecycle events through the
//! partial index, and its chunks along the stretches of the table its turns span, from turn
//! boundary to turn boundary.

use rusqlite::types::Value;
use rusqlite::{params, OptionalExtension};

use super::rows::RowError;
use super::{LogReader, COLUMNS, PAGE_ROWS};
use crate::error::StoreError;
use crate::schema::LIFECYCLE_PREDICATE;

/// The lifecycle events between which a session's chunks are written: a turn opens and closes.
const TURN_BOUNDARY: &str = "kind IN ('turn_started', 'turn_finished')";

/// A seq past every seq: the end of a turn that has not finished.
pub(super) const OPEN_END: i64 = i64::MAX;

/// Which chunks a walk over a session hands over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Chunks {
    /// Every one: the session's rows as stored.
    All,
    /// Only those a fold of the session's rows up to this seq can see (the rest are never
    /// read): the chunks of the turn still running there. A chunk changes nothing but the
    /// running turn's draft (and the last seq, which any later event sets again), and the next
    /// turn boundary — that turn's `turn_finished`, or the next `turn_started` after a writer
    /// stopped — clears the draft; so a turn closed by a boundary at or before this seq folds
    /// to the same state from its other events alone. A chunk outside any turn is in the
    /// index and always handed over.
    ForFoldUpTo(u64),
}

impl Chunks {
    /// Whether the chunks before the boundary at `boundary` (none: the turn runs on) are
    /// left out.
    fn skips_before(self, boundary: Option<i64>) -> bool {
        match (self, boundary) {
            (Chunks::ForFoldUpTo(upto), Some(seq)) => u64::try_from(seq).is_ok_and(|s| s <= upto),
            _ => false,
        }
    }
}

impl LogReader {
    /// Hands `f` every row of one session after `after_seq`, in order, one page per read
    /// transaction; `f` returns the row's seq, where the next page starts.
    pub(crate) fn each_session_row(
        &self,
        session_id: &str,
        after_seq: u64,
        mut f: impl FnMut(&rusqlite::Row<'_>) -> Result<u64, RowError>,
    ) -> Result<(), StoreError> {
        let mut after = after_seq;
        loop {
            let rows =
                self.visit_session(session_id, after, PAGE_ROWS, "reading a session", |row| {
                    after = f(row)?;
                    Ok(())
                })?;
            if rows < PAGE_ROWS {
                return Ok(());
            }
        }
    }

    /// Hands `f` at most `limit` rows of one session after `after_seq`, in order, from one
    /// read transaction; returns how many it handed over.
    ///
    /// No index covers every row of a session: that would cost each streamed chunk a second
    /// B-tree insert. A session's lifecycle events are in the partial index, and its chunks
    /// are written only by its turns, between a `turn_started` and that turn's
    /// `turn_finished`, by the writer that started the turn (a turn whose process stopped gets
    /// no chunk after the next writer's start). So the walk goes from turn boundary to turn
    /// boundary: outside a turn through the index, inside one along the table's stretch of
    /// seqs, which holds every session's rows of that time and is read in seq order.
    pub(crate) fn visit_session(
        &self,
        session_id: &str,
        after_seq: u64,
        limit: usize,
        what: &str,
        f: impl FnMut(&rusqlite::Row<'_>) -> Result<(), RowError>,
    ) -> Result<usize, StoreError> {
        self.walk_session(session_id, after_seq, limit, Chunks::All, what, f)
    }

    /// [`LogReader::visit_session`], handing over only the chunks `chunks` asks for.
    pub(crate) fn walk_session(
        &self,
        session_id: &str,
        after_seq: u64,
        limit: usize,
        chunks: Chunks,
        what: &str,
        mut f: impl FnMut(&rusqlite::Row<'_>) -> Result<(), RowError>,
    ) -> Result<usize, StoreError> {
        let sqlite = |source| self.sqlite_error(what, source);
        // One snapshot for the boundaries and the rows between them: a commit landing between
        // two of the queries could otherwise add rows on one side of a boundary only.
        let snapshot = self.conn.unchecked_transaction().map_err(sqlite)?;
        // SQLite's integers are i64: a seq past them is past every row.
        let after = i64::try_from(after_seq).unwrap_or(OPEN_END);
        // The turn running at `after`, by the seq of its `turn_started`.
        let mut running = self.open_turn_at(session_id, after).map_err(sqlite)?;
        let mut boundaries = self
            .conn
            .prepare_cached(&format!(
                "SELECT seq, kind = 'turn_started' FROM events
                 WHERE session_id = ?1 AND {LIFECYCLE_PREDICATE} AND {TURN_BOUNDARY} AND seq > ?2
                 ORDER BY seq"
            ))
            .map_err(sqlite)?;
        let mut boundaries = boundaries
            .query(params![session_id, after])
            .map_err(sqlite)?;
        let (outside_sql, inside_sql) = (between_turns_sql(), within_a_turn_sql());
        let mut from = after;
        let mut count = 0;
        while count < limit {
            let boundary: Option<(i64, bool)> = boundaries
                .next()
                .and_then(|row| row.map(|r| Ok((r.get(0)?, r.get(1)?))).transpose())
                .map_err(sqlite)?;
            // The stretch up to and including the next boundary (itself a lifecycle event):
            // walked along the table while the running turn may still be writing chunks,
            // through the index from where its writer stopped.
            let to = boundary.map_or(OPEN_END, |(seq, _)| seq);
            let chunks_end = match running {
                Some(_) if chunks.skips_before(boundary.map(|(seq, _)| seq)) => from,
                Some(started) => self.chunks_end(started).map_err(sqlite)?.clamp(from, to),
                None => from,
            };
            for (sql, low, high) in [
                (&inside_sql, from, chunks_end),
                (&outside_sql, chunks_end, to),
            ] {
                if high > low && count < limit {
                    count += self.visit(
                        sql,
                        params![session_id, low, high, (limit - count) as i64],
                        what,
                        &mut f,
                    )?;
                }
            }
            let Some((seq, started)) = boundary else {
                break;
            };
            from = seq;
            running = started.then_some(seq);
        }
        drop(boundaries);
        snapshot.commit().map_err(sqlite)?;
        Ok(count)
    }

    /// The seq and time of a session's last event: its last lifecycle event, unless its last
    /// turn is still open, when a chunk may have come since.
    pub(super) fn last_event(&self, session_id: &str) -> rusqlite::Result<Option<(u64, Value)>> {
        let last_lifecycle: Option<(i64, Value)> = self
            .conn
            .prepare_cached(&format!(
                "SELECT seq, at FROM events WHERE session_id = ?1 AND {LIFECYCLE_PREDICATE}
                 ORDER BY seq DESC LIMIT 1"
            ))?
            .query_row([session_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let Some((seq, at)) = last_lifecycle else {
            return Ok(None);
        };
        let later: Option<(i64, Value)> = match self.open_turn_at(session_id, OPEN_END)? {
            Some(started) => self
                .conn
                .prepare_cached(
                    "SELECT seq, at FROM events WHERE seq > ?2 AND seq <= ?3 AND session_id = ?1
                     ORDER BY seq DESC LIMIT 1",
                )?
                .query_row(params![session_id, seq, self.chunks_end(started)?], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()?,
            None => None,
        };
        let (seq, at) = later.unwrap_or((seq, at));
        Ok(Some((seq.max(0) as u64, at)))
    }

    /// The `turn_started` seq of the turn `session_id` was running at `seq`, if one was.
    fn open_turn_at(&self, session_id: &str, seq: i64) -> rusqlite::Result<Option<i64>> {
        let last_boundary: Option<(i64, bool)> = self
            .conn
            .prepare_cached(&format!(
                "SELECT seq, kind = 'turn_started' FROM events
                 WHERE session_id = ?1 AND {LIFECYCLE_PREDICATE} AND {TURN_BOUNDARY} AND seq <= ?2
                 ORDER BY seq DESC LIMIT 1"
            ))?
            .query_row(params![session_id, seq], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        Ok(last_boundary.and_then(|(seq, started)| started.then_some(seq)))
    }

    /// The last seq that can hold a chunk of the turn started at `started`: where the next
    /// writer began, if one has since (see `writer_starts`), else the end of the log.
    pub(super) fn chunks_end(&self, started: i64) -> rusqlite::Result<i64> {
        self.conn
            .prepare_cached(&format!(
                "SELECT coalesce(min(seq), {OPEN_END}) FROM writer_starts WHERE seq >= ?1"
            ))?
            .query_row([started], |r| r.get(0))
    }
}

/// A session's rows in `(?2, ?3]` (at most `?4`) while it runs no turn: only lifecycle events,
/// from the partial index.
pub(super) fn between_turns_sql() -> String {
    format!(
        "SELECT {COLUMNS} FROM events
         WHERE session_id = ?1 AND {LIFECYCLE_PREDICATE} AND seq > ?2 AND seq <= ?3
         ORDER BY seq LIMIT ?4"
    )
}

/// A session's rows in `(?2, ?3]` (at most `?4`) while one of its turns runs: that stretch of
/// the table, by seq, keeping the session's rows.
pub(super) fn within_a_turn_sql() -> String {
    format!(
        "SELECT {COLUMNS} FROM events
         WHERE seq > ?2 AND seq <= ?3 AND session_id = ?1 ORDER BY seq LIMIT ?4"
    )
}
