//! The read side of the log: [`LogReader`], an independent read-only connection.
//!
//! Every query is its own short read transaction (a session page is one, over the few queries
//! of its walk), and long reads ([`LogReader::load_session`]) go page by page, so a reader
//! never holds back the writer's WAL checkpoints for long.

use std::path::{Path, PathBuf};

use mull_core::Envelope;
use rusqlite::{Connection, Params};

use crate::damage;
use crate::error::damaged;
use crate::error::StoreError;
use crate::gate::{self, SideDamage};
use crate::schema;

mod folds;
mod history;
mod queries;
mod rows;
mod walk;

#[cfg(test)]
pub(crate) use queries::has_session_sql;
pub use queries::SessionSummary;
pub(crate) use rows::{decode_row, RawRow, RowError};

/// How many rows one page of a long read holds (one read transaction each).
const PAGE_ROWS: usize = 4096;

pub(crate) const COLUMNS: &str = "seq, session_id, turn_id, at, v, payload";

/// A read-only view of a log, usable from any process while a writer runs.
pub struct LogReader {
    conn: Connection,
    path: PathBuf,
    /// Damage found beside the database as it opened (see [`LogReader::side_damage`]).
    side_damage: Vec<SideDamage>,
}

impl std::fmt::Debug for LogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogReader")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl LogReader {
    /// Opens an existing log read-only; refuses files that are not mull logs of this schema.
    ///
    /// First readies the files beside it (see [`crate::gate`]): a writer in this process
    /// commits what its gates let out; a dead writer's record file is inserted. Damage found
    /// there does not stop the reader, which reads what the database holds, but is kept in
    /// [`LogReader::side_damage`] for the caller to report.
    pub fn open(path: impl AsRef<Path>) -> Result<LogReader, StoreError> {
        let path = path.as_ref().to_owned();
        gate::live::commit_for_reader(&path);
        let side_damage = gate::ready_for_reader(&path).unwrap_or_else(|err| {
            vec![SideDamage {
                file: path.clone(),
                what: format!("the files beside it could not be inspected: {err}"),
            }]
        });
        let conn = schema::open_reader(&path)?;
        Ok(LogReader {
            conn,
            path,
            side_damage,
        })
    }

    /// Files beside the log that hold rows the database lacks (a damaged record file or WAL,
    /// set aside): the log reads without those rows. Empty when the log is whole. Readers ask
    /// it through [`crate::ReadLog::side_damage`] and [`crate::ReadLog::ensure_whole`].
    pub fn side_damage(&self) -> &[SideDamage] {
        &self.side_damage
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn connection(&self) -> &Connection {
        &self.conn
    }

    fn ctx(&self, what: &str) -> String {
        format!("{}: {what}", self.path.display())
    }

    /// The highest committed seq (0 for an empty log).
    pub fn max_seq(&self) -> Result<u64, StoreError> {
        let max: i64 = self
            .conn
            .prepare_cached("SELECT coalesce(max(seq), 0) FROM events")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .map_err(StoreError::sqlite(self.ctx("reading max(seq)")))?;
        Ok(max.max(0) as u64)
    }

    /// SQLite's `data_version`: changes whenever another connection commits.
    pub(crate) fn data_version(&self) -> Result<i64, StoreError> {
        self.conn
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .map_err(StoreError::sqlite(self.ctx("reading data_version")))
    }

    /// Like `collect` for reads in seq order from `after`: damage met is named by the stretch
    /// of seqs that cannot be read.
    fn collect_after<P: Params>(
        &self,
        sql: &str,
        params: P,
        what: &str,
        after: u64,
    ) -> Result<Vec<Envelope>, StoreError> {
        let mut out = Vec::new();
        match self.scan(sql, params, what, |env| out.push(env)) {
            Ok(()) => Ok(out),
            Err(err) => Err(self.name_damage(err, out.last().map_or(after, |e| e.seq))),
        }
    }

    /// A failed SQLite call of `what`: [`StoreError::Damaged`] when the file is damaged.
    fn sqlite_error(&self, what: &str, source: rusqlite::Error) -> StoreError {
        if damage::is_damage(&source) {
            damaged(&self.path, format!("{what}: {source}"))
        } else {
            StoreError::Sqlite {
                context: self.ctx(what),
                source,
            }
        }
    }

    /// A read that broke on a damaged page after `last_read`: the error names the seqs it
    /// cannot get past, found by seeking beyond them.
    pub(crate) fn name_damage(&self, err: StoreError, last_read: u64) -> StoreError {
        match err {
            StoreError::Damaged { path, what } => {
                // The cause without the advice the first error carried: it is added once.
                let cause = what
                    .split(". `mull check")
                    .next()
                    .unwrap_or(&what)
                    .to_owned();
                let range = damage::damage_after(&self.conn, last_read, cause);
                damaged(&path, format!("{range} (read up to seq {last_read})"))
            }
            other => other,
        }
    }

    fn collect<P: Params>(
        &self,
        sql: &str,
        params: P,
        what: &str,
    ) -> Result<Vec<Envelope>, StoreError> {
        let mut out = Vec::new();
        self.scan(sql, params, what, |env| out.push(env))?;
        Ok(out)
    }

    /// Runs `sql` and hands each decoded envelope to `f`.
    fn scan<P: Params>(
        &self,
        sql: &str,
        params: P,
        what: &str,
        mut f: impl FnMut(Envelope),
    ) -> Result<(), StoreError> {
        self.visit(sql, params, what, |row| {
            f(decode_row(row)?);
            Ok(())
        })
        .map(|_| ())
    }

    /// Runs `sql` and hands each row to `f`; returns how many rows there were.
    fn visit<P: Params>(
        &self,
        sql: &str,
        params: P,
        what: &str,
        mut f: impl FnMut(&rusqlite::Row<'_>) -> Result<(), RowError>,
    ) -> Result<usize, StoreError> {
        // The error context is only formatted when a row fails: this loop runs once per event.
        let fail = |err: RowError| match err {
            RowError::Sqlite(source) => self.sqlite_error(what, source),
            RowError::Store(err) => err,
        };
        let mut stmt = self
            .conn
            .prepare_cached(sql)
            .map_err(|e| fail(RowError::Sqlite(e)))?;
        let mut rows = stmt.query(params).map_err(|e| fail(RowError::Sqlite(e)))?;
        let mut count = 0;
        while let Some(row) = rows.next().map_err(|e| fail(RowError::Sqlite(e)))? {
            f(row).map_err(fail)?;
            count += 1;
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests;
