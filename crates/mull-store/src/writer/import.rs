//! A JSONL import (or a recovery) written into the log: one transaction of its own on the
//! write connection, filled a batch of rows at a time, whose seqs are published only once it
//! commits.

use std::sync::atomic::Ordering;

use rusqlite::{Connection, Transaction, TransactionBehavior};

use super::{lock, Log, Queue, Shared, Store};
use crate::error::StoreError;
use crate::open_turns::OpenTurns;
use crate::row::{insert_many, Row, Seqs, ROWS_PER_INSERT};

impl Log {
    /// Runs `fill` inside one write transaction on the log's connection, after committing
    /// everything appended so far, and commits what it pushed if it returns `Ok`; on any error
    /// (its own, or SQLite's) rolls back, so the log is left as it was. Returns the number of
    /// rows imported.
    ///
    /// Imported rows keep their seqs, which are known only as `fill` reads them: appends (and
    /// [`Log::last_seq`]) wait until the import is done, then continue after its last seq.
    /// `fill` must not use this log.
    pub(crate) fn import(
        &self,
        source_name: &str,
        fill: impl FnOnce(&mut Import<'_>) -> Result<(), StoreError>,
    ) -> Result<u64, StoreError> {
        let shared = &self.inner.shared;
        shared.failure.check()?;
        let mut store = lock(&shared.store);
        let mut queue = lock(&shared.queue);
        let result = store.import(shared, &mut queue, source_name, fill);
        drop(queue);
        store.settle(shared);
        drop(store);
        if shared.wants_checkpoint() {
            shared.nudge_writer();
        }
        result
    }
}

/// Rows an import inserts at a time: all it holds in memory, however long its input.
pub(crate) const IMPORT_BATCH: usize = 4096;

/// An import in progress: rows pushed are inserted a batch at a time into its transaction.
pub(crate) struct Import<'a> {
    conn: &'a Connection,
    source_name: &'a str,
    /// The log's open turns as the imported rows leave them; kept only if the import commits.
    open_turns: OpenTurns,
    after: u64,
    pub(super) batch: Vec<Row>,
    /// The last seq inserted (`after` until the first batch).
    last: u64,
    count: u64,
}

impl Import<'_> {
    /// The log's last seq when the import began: imported seqs must come after it.
    pub(crate) fn after(&self) -> u64 {
        self.after
    }

    /// Adds a row (its seq already checked to follow the previous one); inserts the batch once
    /// it holds [`IMPORT_BATCH`] rows.
    pub(crate) fn push(&mut self, row: Row) -> Result<(), StoreError> {
        let kind = self.open_turns.column_kind(&row.session_id, row.kind);
        self.batch.push(Row { kind, ..row });
        if self.batch.len() >= IMPORT_BATCH {
            self.insert()?;
        }
        Ok(())
    }

    /// Inserts the rows held into the import's transaction.
    pub(super) fn insert(&mut self) -> Result<(), StoreError> {
        let (Some(first), Some(last)) = (self.batch.first(), self.batch.last()) else {
            return Ok(());
        };
        let (first, last) = (first.seq, last.seq);
        let conn = self.conn;
        let batch = &self.batch;
        batch
            .chunks(ROWS_PER_INSERT)
            .try_for_each(|rows| insert_many(conn, rows, Seqs::Given))
            .map_err(StoreError::sqlite(format!(
                "{}: importing seqs {first}..={last}",
                self.source_name
            )))?;
        self.count += self.batch.len() as u64;
        self.last = last;
        self.batch.clear();
        Ok(())
    }
}

impl Store {
    /// The body of [`Log::import`], with the store and the queue locked: commits what is
    /// queued, then runs the import in a transaction of its own and publishes its seqs only
    /// once it is committed.
    fn import(
        &mut self,
        shared: &Shared,
        queue: &mut Queue,
        source_name: &str,
        fill: impl FnOnce(&mut Import<'_>) -> Result<(), StoreError>,
    ) -> Result<u64, StoreError> {
        if queue.closed {
            return Err(StoreError::WriterGone);
        }
        self.insert_rows(shared, &std::mem::take(&mut queue.rows));
        self.commit(shared);
        shared.failure.check()?;
        let context = |what: &str| StoreError::sqlite(format!("{source_name}: {what}"));
        // Rolls back when dropped, also if `fill` panics: the writer must not inherit it.
        let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Deferred)
            .map_err(context("beginning the import"))?;
        let after = queue.next_seq - 1;
        let mut import = Import {
            conn: &tx,
            source_name,
            open_turns: queue.open_turns.clone(),
            after,
            batch: Vec::with_capacity(IMPORT_BATCH),
            last: after,
            count: 0,
        };
        let result = fill(&mut import).and_then(|()| import.insert());
        let (count, last, open_turns) = (import.count, import.last, import.open_turns);
        if let Err(err) = result {
            // A failed statement may have ended the transaction already; `finish` knows.
            if let Err(rollback) = tx.finish() {
                shared.failure.set(format!(
                    "rolling back the import of {source_name}: {rollback}"
                ));
            }
            return Err(err);
        }
        if let Err(err) = tx.commit() {
            // Dropping the transaction tried to roll it back; if it is still open, the
            // connection can't be trusted with another.
            if !self.conn.is_autocommit() {
                shared.failure.set(format!(
                    "the import of {source_name} could not be committed or rolled back: {err}"
                ));
            }
            return Err(context("committing the import")(err));
        }
        queue.next_seq = last + 1;
        queue.open_turns = open_turns;
        shared.committed.store(last, Ordering::Release);
        Ok(count)
    }
}
