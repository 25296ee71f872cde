//! The commit batcher: the writer thread that inserts queued rows as they come, commits a
//! batch when it is full or due, and checkpoints the WAL; and the write connection it shares
//! with barriers, which commit on their caller's thread.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use rusqlite::Connection;

use super::{lock, OpenBatch, Queue, Shared, Store, WriterWait};
use crate::gate::Records;
use crate::row::{insert_many, Row, Seqs, ROWS_PER_INSERT};

/// Past this size the writer thread empties the record file even if it must hold gates back
/// for one commit to catch up (see `run_writer`).
const RECORDS_RESET_BYTES: u64 = 4 << 20;

/// Queued rows at which a sleeping writer thread is woken to insert them (into the transaction
/// the next barrier or deadline commits), so that a long stream is inserted as it goes. Fewer
/// rows than this are inserted by whoever commits: waking the thread for a handful costs more
/// CPU than inserting them (measured on the turn bench).
const EAGER_ROWS: usize = 64;

/// The most inserted rows waiting in the queue for an appending thread to free them, and the
/// largest payload such a row may have: what the hand-back holds on to between appends stays
/// small (at most 4 MiB of payloads).
pub(super) const SPENT_ROWS: usize = 1024;
pub(super) const SPENT_ROW_BYTES: usize = 4096;

/// The most rows a spare queue buffer may hold room for and still be kept.
const SPARE_ROWS: usize = 4096;

/// What the writer thread was woken for.
enum Work {
    /// Insert what is queued; commit only full batches.
    Insert,
    /// The batch's delay has passed: insert and commit everything.
    Commit,
    /// The WAL has grown: commit what was inserted, then copy the WAL back into the database.
    Checkpoint,
    /// Every handle is gone: commit everything and stop.
    Close,
}

impl Shared {
    /// Whether the WAL has grown to the checkpoint size.
    pub(super) fn wants_checkpoint(&self) -> bool {
        self.wal_pages.load(Ordering::Acquire) >= self.options.checkpoint_pages
    }

    /// Whether the queued rows are worth waking a sleeping writer thread for: enough of them to
    /// insert eagerly, or enough to fill the batch the open transaction holds (a full batch
    /// commits at once rather than at its delay).
    pub(super) fn worth_inserting(&self, queue: &Queue) -> bool {
        let queued = queue.rows.len();
        queued >= EAGER_ROWS.min(self.options.batch_max_events)
            || queued + queue.in_batch >= self.options.batch_max_events
    }

    /// The writer thread's wait, until there is something to do.
    fn wait_for_work(&self) -> Work {
        let mut queue = lock(&self.queue);
        loop {
            queue.writer = WriterWait::Busy;
            if queue.closed {
                return Work::Close;
            }
            let expired = queue
                .first_at
                .is_some_and(|t| t.elapsed() >= self.options.batch_max_delay);
            if expired {
                return Work::Commit;
            }
            if self.worth_inserting(&queue) {
                return Work::Insert;
            }
            if self.wants_checkpoint() {
                return Work::Checkpoint;
            }
            match queue.first_at {
                None => {
                    queue.writer = WriterWait::Idle;
                    queue = self
                        .wake
                        .wait(queue)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                }
                Some(first) => {
                    let left = self.options.batch_max_delay.saturating_sub(first.elapsed());
                    queue.writer = WriterWait::Timed;
                    queue = self
                        .wake
                        .wait_timeout(queue, left)
                        .map(|(guard, _)| guard)
                        .unwrap_or_else(|poisoned| poisoned.into_inner().0);
                }
            }
        }
    }

    /// Asks the writer thread to checkpoint, if it sleeps.
    pub(super) fn nudge_writer(&self) {
        lock(&self.queue).wake_writer(&self.wake);
    }
}

/// The writer thread: inserts rows as they queue up, commits batches when they are due, and
/// checkpoints the WAL.
///
/// A checkpoint runs in two passes. The first, on a connection of its own, copies the WAL back
/// and fsyncs while commits go on — the bulk of the work, which no barrier waits for. The
/// second runs with the write connection held, so no commit lands while it copies the few
/// frames committed meanwhile; that is what lets the next commit start the WAL over (a
/// checkpoint racing new commits never catches up, and the WAL would grow for as long as
/// writes go on).
pub(super) fn run_writer(shared: Arc<Shared>, checkpointer: Connection) {
    loop {
        let work = shared.wait_for_work();
        if matches!(work, Work::Checkpoint) {
            checkpoint(&checkpointer, "copying the WAL back while commits go on");
        }
        let mut store = lock(&shared.store);
        let mut records = Some(lock(&shared.records));
        // A record file grown past its bound is emptied: gates wait on its lock while this
        // commit catches up with every row they wrote.
        let catch_up = records
            .as_ref()
            .is_some_and(|r| r.len > RECORDS_RESET_BYTES);
        if !matches!(work, Work::Checkpoint) || catch_up {
            // Recorded as they are taken, so that a gate finds every row it needs either
            // recorded or still queued, and never waits for this transaction's commit.
            let rows = store.take_queued(&shared, records.as_deref_mut());
            if !catch_up {
                records = None;
            }
            store.insert_taken(&shared, rows);
        } else {
            records = None;
        }
        if !matches!(work, Work::Insert) || catch_up {
            store.commit(&shared);
        }
        match records.as_mut() {
            Some(records) => records.reset_if_caught_up(shared.committed.load(Ordering::Acquire)),
            None => shared.settle_records(),
        }
        drop(records);
        if store.open.is_none() && shared.wants_checkpoint() {
            store.checkpoint(&shared);
        }
        store.settle(&shared);
        drop(store);
        if matches!(work, Work::Close) {
            return;
        }
    }
}

impl Store {
    /// Takes everything queued and inserts it (see [`Store::insert_rows`]). Called with the
    /// store locked, so what is taken is inserted in the order it was taken. The queue gets the
    /// store's spare buffer in exchange, and the drained one becomes the spare: appends reuse
    /// two buffers instead of growing a new one from empty after every take.
    pub(super) fn insert_queued(&mut self, shared: &Shared) {
        let rows = self.take_queued(shared, None);
        self.insert_taken(shared, rows);
    }

    /// Takes everything queued, giving the queue the spare buffer; with `records` (the record
    /// file, locked by the caller), writes the taken rows it lacks to it first.
    pub(super) fn take_queued(
        &mut self,
        shared: &Shared,
        records: Option<&mut Records>,
    ) -> Vec<Row> {
        let spare = std::mem::take(&mut self.spare);
        // The rows inserted since the last take go back to the appending threads to be freed
        // (see `Queue::spent`); large ones, and those past the bound, are freed here.
        self.inserted
            .retain(|row| row.payload.capacity() <= SPENT_ROW_BYTES);
        let rows = {
            let mut queue = lock(&shared.queue);
            let rows = std::mem::replace(&mut queue.rows, spare);
            let room = SPENT_ROWS.saturating_sub(queue.spent.len());
            let handed = self.inserted.len().min(room);
            queue.spent.extend(self.inserted.drain(..handed));
            // Named in the same hold of the queue's lock: a row is always in the queue or
            // named here until it is committed (see `Log::has_uncommitted_rows`).
            let mut taken = lock(&shared.taken_sessions);
            let mut last: Option<&Arc<str>> = None;
            for row in &rows {
                if last != Some(&row.session_id) {
                    last = Some(&row.session_id);
                    if !taken.contains(&row.session_id) {
                        taken.push(Arc::clone(&row.session_id));
                    }
                }
            }
            drop(taken);
            drop(queue);
            rows
        };
        self.inserted.clear();
        if let Some(records) = records {
            shared.record_rows(records, &rows);
        }
        rows
    }

    /// Inserts taken rows (see [`Store::insert_rows`]) and keeps their buffer as the spare.
    pub(super) fn insert_taken(&mut self, shared: &Shared, mut rows: Vec<Row>) {
        self.insert_rows(shared, &rows);
        // Kept for the next take to hand back (see `Queue::spent`).
        self.inserted.append(&mut rows);
        // A burst's large buffer is let go rather than held for the log's lifetime.
        if rows.capacity() <= SPARE_ROWS {
            self.spare = rows;
        }
    }

    /// Inserts rows in order into the open transaction (opening one when none is), committing
    /// each time it holds `batch_max_events` rows. The insert statement is looked up once.
    pub(super) fn insert_rows(&mut self, shared: &Shared, rows: &[Row]) {
        if rows.is_empty() || shared.failure.check().is_err() {
            return;
        }
        let Store { conn, open, .. } = self;
        let result = (|| -> rusqlite::Result<()> {
            let mut rest = rows;
            while let Some(first) = rest.first() {
                if open.is_none() {
                    conn.prepare_cached("BEGIN")?.execute([])?;
                }
                let batch = open.get_or_insert(OpenBatch {
                    first: first.seq,
                    last: first.seq,
                    count: 0,
                });
                let room = shared
                    .options
                    .batch_max_events
                    .saturating_sub(batch.count)
                    .max(1);
                let (now, later) = rest.split_at(rest.len().min(room).min(ROWS_PER_INSERT));
                insert_many(conn, now, Seqs::Next)?;
                rest = later;
                batch.count += now.len();
                if let Some(last) = now.last() {
                    batch.last = last.seq;
                }
                if batch.count >= shared.options.batch_max_events {
                    let last = batch.last;
                    conn.prepare_cached("COMMIT")?.execute([])?;
                    *open = None;
                    shared.committed.store(last, Ordering::Release);
                }
            }
            Ok(())
        })();
        if let Err(err) = result {
            self.abandon(shared, &err);
        }
    }

    /// Brings the queue's batch clock and its count of rows in the open transaction in line
    /// with what is still uncommitted: none left stops the clock; rows left with no clock
    /// running start it.
    pub(super) fn settle(&self, shared: &Shared) {
        let mut queue = lock(&shared.queue);
        queue.in_batch = self.open.as_ref().map_or(0, |batch| batch.count);
        if self.open.is_none() && queue.rows.is_empty() {
            queue.first_at = None;
        } else if queue.first_at.is_none() {
            queue.first_at = Some(Instant::now());
        }
    }

    /// Runs a parameterless statement kept prepared (BEGIN and COMMIT run once per batch).
    fn run_cached(&self, sql: &str) -> rusqlite::Result<()> {
        self.conn.prepare_cached(sql)?.execute([]).map(drop)
    }

    /// Commits the open transaction, if any, and publishes its last seq as committed.
    pub(super) fn commit(&mut self, shared: &Shared) {
        let Some(batch) = &self.open else { return };
        let last = batch.last;
        match self.run_cached("COMMIT") {
            Ok(()) => {
                self.open = None;
                shared.committed.store(last, Ordering::Release);
                // Every row taken is committed: inserting takes them all before a commit.
                lock(&shared.taken_sessions).clear();
            }
            Err(err) => self.abandon(shared, &err),
        }
    }

    /// Rolls back a failed transaction and stops the writer for good.
    fn abandon(&mut self, shared: &Shared, err: &rusqlite::Error) {
        let Some(batch) = self.open.take() else {
            return;
        };
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        shared.failure.set(format!(
            "committing seqs {}..={}: {err}",
            batch.first, batch.last
        ));
    }

    /// The second pass of a checkpoint, with the write connection held (see [`run_writer`]).
    fn checkpoint(&mut self, shared: &Shared) {
        checkpoint(&self.conn, "copying the rest of the WAL back");
        // The next commit reports the WAL's size again (and so asks again if it stayed big).
        shared.wal_pages.store(0, Ordering::Release);
    }
}

/// A passive checkpoint on `conn`: copies committed WAL frames into the database without
/// waiting for readers. A failure is only logged: the WAL keeps every commit, and the next
/// checkpoint tries again.
fn checkpoint(conn: &Connection, what: &str) {
    if let Err(err) = conn.wal_checkpoint_v2(None::<&str>, rusqlite::wal::CheckpointMode::PASSIVE) {
        tracing::warn!(error = %err, "event log checkpoint failed: {what}");
    }
}
