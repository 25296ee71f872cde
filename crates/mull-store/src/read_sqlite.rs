//! The read contract on the SQLite log: [`LogReader`] implements [`ReadLog`] over its own
//! queries (the lifecycle index, the walk over a session's turns).
//!
//! Seqs number the whole file, so a change cursor is a seq: the sessions changed since it are
//! those with rows after it, found by reading only those rows' session ids (the table is keyed
//! by seq). The SQLite log keeps no table of sessions: a listing by time orders the sessions
//! [`LogReader::sessions`] finds through the lifecycle index (two row lookups per session).

use mull_core::Envelope;
use rusqlite::{params, OptionalExtension};

use crate::error::StoreError;
use crate::gate::SideDamage;
use crate::overview::{SessionOverviews, OVERVIEW_KINDS};
use crate::projection::{SessionState, SessionToolCalls, TurnSummary};
use crate::read::{ChangeCursor, Changes, ReadLog, SessionChange, SessionKey};
use crate::reader::{decode_row, LogReader, RowError, SessionSummary, COLUMNS};
use crate::schema::LIFECYCLE_PREDICATE;
use crate::writer::Log;

impl ReadLog for LogReader {
    fn name(&self) -> String {
        self.path().display().to_string()
    }

    fn newest_sessions(
        &self,
        before: Option<&SessionKey>,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, StoreError> {
        Ok(SessionKey::newest_page(
            LogReader::sessions(self)?,
            before,
            limit,
        ))
    }

    fn session_page(
        &self,
        session_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<Envelope>, StoreError> {
        LogReader::session_page(self, session_id, after_seq, limit)
    }

    fn turn_events(&self, session_id: &str, turn_id: &str) -> Result<Vec<Envelope>, StoreError> {
        LogReader::turn_events(self, session_id, turn_id)
    }

    fn fork_origin(&self, session_id: &str) -> Result<Option<(String, u64)>, StoreError> {
        LogReader::fork_origin(self, session_id)
    }

    fn cursor(&self) -> Result<ChangeCursor, StoreError> {
        Ok(ChangeCursor(self.max_seq()?))
    }

    fn changes(&self, since: ChangeCursor) -> Result<Changes, StoreError> {
        let ctx = || format!("{}: reading what changed", self.path().display());
        let after = i64::try_from(since.0).unwrap_or(i64::MAX);
        let lasts: Vec<(String, u64)> = self
            .connection()
            .prepare_cached(
                "SELECT session_id, max(seq) FROM events WHERE seq > ?1 GROUP BY session_id \
                 ORDER BY max(seq)",
            )
            .and_then(|mut s| {
                s.query_map([after], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect()
            })
            .map_err(StoreError::sqlite(ctx()))?;
        let mut cursor = since;
        let mut sessions = Vec::with_capacity(lasts.len());
        for (session_id, last_seq) in lasts {
            let Some(last) = ReadLog::event_at(self, &session_id, last_seq)? else {
                continue;
            };
            cursor = cursor.max(ChangeCursor(last_seq));
            sessions.push(SessionChange {
                session_id,
                last_seq,
                last_at: last.at,
            });
        }
        Ok(Changes { sessions, cursor })
    }

    fn side_damage(&self) -> &[SideDamage] {
        LogReader::side_damage(self)
    }

    fn event_count(&self) -> Result<u64, StoreError> {
        // Seqs are contiguous from 1 across the file.
        self.max_seq()
    }

    fn sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        LogReader::sessions(self)
    }

    fn has_session(&self, session_id: &str) -> Result<bool, StoreError> {
        LogReader::has_session(self, session_id)
    }

    fn event_at(&self, session_id: &str, seq: u64) -> Result<Option<Envelope>, StoreError> {
        let Ok(seq) = i64::try_from(seq) else {
            return Ok(None);
        };
        self.connection()
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM events WHERE seq = ?1 AND session_id = ?2"
            ))
            .and_then(|mut s| {
                s.query_row(params![seq, session_id], |row| {
                    Ok(decode_row(row).map_err(RowError::into_store))
                })
                .optional()
            })
            .map_err(StoreError::sqlite(format!(
                "{}: reading seq {seq} of {session_id}",
                self.path().display()
            )))?
            .transpose()
    }

    fn for_each_session_event(
        &self,
        session_id: &str,
        after_seq: u64,
        f: &mut dyn FnMut(Envelope),
    ) -> Result<(), StoreError> {
        LogReader::for_each_session_event(self, session_id, after_seq, f)
    }

    fn fork_chain(&self, session_id: &str) -> Result<Vec<(String, u64)>, StoreError> {
        LogReader::fork_chain(self, session_id)
    }

    fn numbers_across_sessions(&self) -> bool {
        true
    }

    fn session_history(&self, session_id: &str) -> Result<Vec<Envelope>, StoreError> {
        LogReader::session_history(self, session_id)
    }

    fn load_session(&self, session_id: &str) -> Result<SessionState, StoreError> {
        LogReader::load_session(self, session_id)
    }

    fn turns(&self, session_id: &str) -> Result<Vec<TurnSummary>, StoreError> {
        LogReader::turns(self, session_id)
    }

    fn session_tool_calls(&self, session_id: &str) -> Result<SessionToolCalls, StoreError> {
        LogReader::session_tool_calls(self, session_id)
    }

    fn overviews_of(&self, sessions: &[String]) -> Result<SessionOverviews, StoreError> {
        let kinds = OVERVIEW_KINDS
            .iter()
            .map(|k| format!("'{k}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT {COLUMNS} FROM events \
             WHERE session_id = ?1 AND {LIFECYCLE_PREDICATE} AND kind IN ({kinds}) ORDER BY seq"
        );
        let ctx = || format!("{}: reading session overviews", self.path().display());
        let mut all = SessionOverviews::default();
        let mut stmt = self
            .connection()
            .prepare_cached(&sql)
            .map_err(StoreError::sqlite(ctx()))?;
        for session in sessions {
            let mut rows = stmt.query([session]).map_err(StoreError::sqlite(ctx()))?;
            while let Some(row) = rows.next().map_err(StoreError::sqlite(ctx()))? {
                all.apply(&decode_row(row).map_err(RowError::into_store)?);
            }
        }
        if all.running() > 0 && !self.writer_active() {
            all.mark_interrupted();
        }
        Ok(all)
    }

    fn session_overviews(&self) -> Result<SessionOverviews, StoreError> {
        LogReader::session_overviews(self)
    }

    fn writer_active(&self) -> bool {
        LogReader::writer_active(self)
    }
}

/// The read contract on a log this process writes (a server's followers read it): each read
/// runs on the log's own read connection, after committing what it needs of the rows not
/// committed yet — a session's own, for a read of that session; any a gate let out, for the
/// rest. Blocks while it commits: call it from a blocking thread.
impl ReadLog for Log {
    fn name(&self) -> String {
        self.path().display().to_string()
    }

    fn newest_sessions(
        &self,
        before: Option<&SessionKey>,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, StoreError> {
        self.with_reader(|r| ReadLog::newest_sessions(r, before, limit))
    }

    fn session_page(
        &self,
        session_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<Envelope>, StoreError> {
        self.read_session_blocking(session_id, |r| r.session_page(session_id, after_seq, limit))
    }

    fn turn_events(&self, session_id: &str, turn_id: &str) -> Result<Vec<Envelope>, StoreError> {
        self.read_session_blocking(session_id, |r| r.turn_events(session_id, turn_id))
    }

    fn fork_origin(&self, session_id: &str) -> Result<Option<(String, u64)>, StoreError> {
        self.read_session_blocking(session_id, |r| r.fork_origin(session_id))
    }

    fn cursor(&self) -> Result<ChangeCursor, StoreError> {
        self.with_reader(ReadLog::cursor)
    }

    fn changes(&self, since: ChangeCursor) -> Result<Changes, StoreError> {
        self.with_reader(|r| ReadLog::changes(r, since))
    }

    fn event_count(&self) -> Result<u64, StoreError> {
        self.with_reader(ReadLog::event_count)
    }

    fn numbers_across_sessions(&self) -> bool {
        true
    }
}

impl Log {
    /// Runs `f` on the read connection once every row of `session_id` appended so far is
    /// committed.
    fn read_session_blocking<R>(
        &self,
        session_id: &str,
        f: impl FnOnce(&LogReader) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        if self.has_uncommitted_rows(session_id) {
            self.flush_blocking()?;
        }
        self.with_reader(f)
    }
}
