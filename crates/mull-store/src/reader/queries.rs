//! The reader's queries: ranges and pages of the log, a session's or a turn's events, the
//! session list, the turns left unfinished, and raw rows for an export.

use chrono::{DateTime, Utc};
use mull_core::Envelope;
use rusqlite::params;
use rusqlite::types::Value;
use serde::Serialize;

use super::rows::{decode_row, stored_at, text, text_or_null, RawRow, RowError};
use super::walk::OPEN_END;
use super::{LogReader, COLUMNS};
use crate::error::StoreError;
use crate::schema::LIFECYCLE_PREDICATE;

/// A session as the session list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionSummary {
    pub session_id: String,
    /// The session's first and last event.
    pub first_seq: u64,
    pub last_seq: u64,
    pub first_at: DateTime<Utc>,
    pub last_at: DateTime<Utc>,
}

impl LogReader {
    /// Events with `from_seq <= seq <= to_seq`, in order.
    pub fn range(&self, from_seq: u64, to_seq: u64) -> Result<Vec<Envelope>, StoreError> {
        self.collect_after(
            &format!("SELECT {COLUMNS} FROM events WHERE seq >= ?1 AND seq <= ?2 ORDER BY seq"),
            params![from_seq, to_seq],
            "reading a range",
            from_seq.saturating_sub(1),
        )
    }

    /// At most `limit` events after `after_seq`, in order: the way to walk the whole log.
    pub fn page(&self, after_seq: u64, limit: usize) -> Result<Vec<Envelope>, StoreError> {
        self.collect_after(
            &format!("SELECT {COLUMNS} FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2"),
            params![after_seq, limit as i64],
            "reading a page",
            after_seq,
        )
    }

    /// At most `limit` events of one session after `after_seq`, in order.
    pub fn session_page(
        &self,
        session_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<Envelope>, StoreError> {
        let mut out = Vec::new();
        self.visit_session(
            session_id,
            after_seq,
            limit,
            "reading a session page",
            |row| {
                out.push(decode_row(row)?);
                Ok(())
            },
        )?;
        Ok(out)
    }

    /// Every event of one turn of a session, in order: its lifecycle events from the index,
    /// and its chunks from the turn's stretch of the table — from its `turn_started` to its
    /// `turn_finished`, or, for a turn that never finished, to the session's next turn or the
    /// next writer's start, whichever comes first.
    pub fn turn_events(
        &self,
        session_id: &str,
        turn_id: &str,
    ) -> Result<Vec<Envelope>, StoreError> {
        self.collect(
            &format!(
                "WITH span AS (
                     SELECT min(seq) AS first,
                            max(CASE WHEN kind = 'turn_finished' THEN seq END) AS finished
                     FROM events
                     WHERE session_id = ?1 AND {LIFECYCLE_PREDICATE} AND turn_id = ?2
                 ), bound AS (
                     SELECT coalesce(span.finished, min(
                         coalesce((
                             SELECT min(seq) FROM events
                             WHERE session_id = ?1 AND {LIFECYCLE_PREDICATE}
                               AND kind = 'turn_started' AND seq > span.first AND turn_id <> ?2
                         ), {OPEN_END}),
                         coalesce((
                             SELECT min(seq) + 1 FROM writer_starts WHERE seq >= span.first
                         ), {OPEN_END})
                     )) AS past FROM span
                 )
                 SELECT {COLUMNS} FROM events
                 WHERE session_id = ?1 AND {LIFECYCLE_PREDICATE} AND turn_id = ?2
                 UNION ALL
                 SELECT {COLUMNS} FROM events, span, bound
                 WHERE seq > span.first AND seq < bound.past
                   AND session_id = ?1 AND kind = 'chunk' AND turn_id = ?2
                 ORDER BY seq"
            ),
            params![session_id, turn_id],
            "reading a turn",
        )
    }

    /// Every turn that started and has not finished, as `(session_id, turn_id)` in the order
    /// they started: what a writer opening the log resolves when it finds them left by one
    /// that is gone (see [`crate::recovery`]).
    pub fn unfinished_turns(&self) -> Result<Vec<(String, String)>, StoreError> {
        let ctx = self.ctx("finding unfinished turns");
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT session_id, turn_id FROM events \
                 WHERE {LIFECYCLE_PREDICATE} AND turn_id IS NOT NULL \
                   AND kind IN ('turn_started', 'turn_finished') \
                 GROUP BY session_id, turn_id \
                 HAVING sum(kind = 'turn_finished') = 0 ORDER BY min(seq)"
            ))
            .map_err(StoreError::sqlite(ctx.clone()))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(|rows| rows.collect())
            .map_err(StoreError::sqlite(ctx))?;
        Ok(rows)
    }

    /// Every session that has a lifecycle event (every session the engine writes starts with
    /// one), oldest first. The sessions and their first seqs come from the lifecycle index
    /// alone; each session then costs two row lookups (its first and its last event), so the
    /// listing never reads a session's rows one by one. (How a session's turns ended is an
    /// overview's: [`LogReader::session_overviews`].)
    pub fn sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let ctx = self.ctx("listing sessions");
        let mut groups = self
            .conn
            .prepare_cached(&format!(
                "SELECT session_id, min(seq) FROM events INDEXED BY events_lifecycle \
                 WHERE {LIFECYCLE_PREDICATE} GROUP BY session_id ORDER BY min(seq)"
            ))
            .map_err(StoreError::sqlite(ctx.clone()))?;
        let firsts: Vec<(String, u64)> = groups
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(|rows| rows.collect())
            .map_err(StoreError::sqlite(ctx.clone()))?;
        let mut first_at = self
            .conn
            .prepare_cached("SELECT at FROM events WHERE seq = ?1")
            .map_err(StoreError::sqlite(ctx.clone()))?;
        let mut out = Vec::with_capacity(firsts.len());
        for (session_id, first_seq) in firsts {
            let first: Value = first_at
                .query_row([first_seq], |r| r.get(0))
                .map_err(StoreError::sqlite(ctx.clone()))?;
            let (last_seq, last_at) = self
                .last_event(&session_id)
                .map_err(StoreError::sqlite(ctx.clone()))?
                .unwrap_or_else(|| (first_seq, first.clone()));
            out.push(SessionSummary {
                first_at: stored_at(first_seq, (&first).into())?,
                last_at: stored_at(last_seq, (&last_at).into())?,
                session_id,
                first_seq,
                last_seq,
            });
        }
        Ok(out)
    }

    /// Whether the log holds any event of `session_id`: one probe of the lifecycle index (a
    /// session's first event is a lifecycle event; chunks only come inside its turns). Cheaper
    /// than a session page when the session is new.
    pub fn has_session(&self, session_id: &str) -> Result<bool, StoreError> {
        self.conn
            .prepare_cached(&has_session_sql())
            .and_then(|mut s| s.query_row([session_id], |r| r.get(0)))
            .map_err(StoreError::sqlite(self.ctx("looking up a session")))
    }

    /// Every event of one session after `after_seq`, in order (read page by page, so each read
    /// transaction stays short). For a session too big to hold, use
    /// [`LogReader::for_each_session_event`].
    pub fn session_events(
        &self,
        session_id: &str,
        after_seq: u64,
    ) -> Result<Vec<Envelope>, StoreError> {
        let mut out = Vec::new();
        self.for_each_session_event(session_id, after_seq, |env| out.push(env))?;
        Ok(out)
    }

    /// Calls `f` with every event of one session after `after_seq`, in order, one page per read
    /// transaction.
    pub fn for_each_session_event(
        &self,
        session_id: &str,
        after_seq: u64,
        mut f: impl FnMut(Envelope),
    ) -> Result<(), StoreError> {
        self.each_session_row(session_id, after_seq, |row| {
            let env = decode_row(row)?;
            let seq = env.seq;
            f(env);
            Ok(seq)
        })
    }
}

impl LogReader {
    /// Raw rows for export: (seq, session_id, turn_id, at, v, payload) as stored, the time
    /// decoded.
    pub(crate) fn scan_raw(
        &self,
        session_id: Option<&str>,
        after_seq: u64,
        limit: usize,
        mut f: impl FnMut(RawRow<'_>) -> Result<(), StoreError>,
    ) -> Result<usize, StoreError> {
        let what = "exporting";
        let mut last = after_seq;
        let mut raw = |row: &rusqlite::Row<'_>| -> Result<(), RowError> {
            let seq = row.get(0)?;
            last = seq;
            let raw = RawRow {
                seq,
                session_id: text(row, 1)?,
                turn_id: text_or_null(row, 2)?,
                at: stored_at(seq, row.get_ref(3)?).map_err(RowError::Store)?,
                v: row.get(4)?,
                payload: text(row, 5)?,
            };
            f(raw).map_err(RowError::Store)
        };
        let result = match session_id {
            Some(session_id) => self.visit_session(session_id, after_seq, limit, what, &mut raw),
            None => self.visit(
                &format!("SELECT {COLUMNS} FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2"),
                params![after_seq, limit as i64],
                what,
                &mut raw,
            ),
        };
        result.map_err(|err| self.name_damage(err, last))
    }
}

/// Whether session `?1` has any event: its first is always a lifecycle event.
pub(crate) fn has_session_sql() -> String {
    format!("SELECT EXISTS (SELECT 1 FROM events WHERE session_id = ?1 AND {LIFECYCLE_PREDICATE})")
}
