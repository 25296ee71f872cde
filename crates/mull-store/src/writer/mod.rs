//! The write side of the log: [`Log`], its writer thread and group commit.
//!
//! `append` assigns the seq and queues the row under one short lock. The writer thread inserts
//! queued rows into an open transaction and commits it when it holds
//! [`LogOptions::batch_max_events`] rows or when [`LogOptions::batch_max_delay`] has passed
//! since its first row. Producers wake the thread only when that changes something (a batch
//! begins, or a few rows wait), not once per row: a streamed chunk costs an encode and a push.
//! A flush barrier commits on its caller's thread, with no hand-off to wait for. So does a
//! JSONL import, in one transaction of its own that it fills a batch at a time.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use chrono::{DateTime, Utc};
use mull_core::{Envelope, Event, EVENT_VERSION};

use crate::error::StoreError;
pub use crate::gate::lock::lock_path;
pub use crate::gate::{records_path, Durability};
use crate::open_turns::OpenTurns;
use crate::reader::LogReader;

mod append;
mod batcher;
mod gated;
mod import;
mod open;

pub(crate) use crate::row::{kind_of, Row};
#[cfg(test)]
pub(crate) use import::IMPORT_BATCH;

/// How the writer batches commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOptions {
    /// Commit once a batch holds this many events.
    pub batch_max_events: usize,
    /// Commit once the batch's first event has waited this long.
    pub batch_max_delay: Duration,
    /// Checkpoint once the WAL holds this many pages. Larger means fewer checkpoints (each
    /// ends with two fsyncs that commits wait behind) and a larger WAL file on disk.
    pub checkpoint_pages: u32,
    /// What a gate's event survives: a killed process (the default), or a power cut too, at
    /// the cost of an fsync per gate (see [`Durability`]).
    pub durability: Durability,
}

impl Default for LogOptions {
    /// 512 events or 5 ms: large enough batches for ~1M rows/s, small enough latency for a
    /// live tail. Checkpoints at 4,000 pages (16 MiB of WAL with 4 KiB pages): at SQLite's
    /// default of 1,000, a log taking a commit per short turn spent a sixth of its time
    /// waiting behind checkpoints (measured on the turn bench).
    fn default() -> Self {
        Self {
            batch_max_events: 512,
            batch_max_delay: Duration::from_millis(5),
            checkpoint_pages: 4000,
            durability: Durability::Process,
        }
    }
}

/// What [`Log::append_event`] hands back: the event with the seq it was given and the time
/// as stored (to the microsecond).
#[derive(Debug, Clone, PartialEq)]
pub struct Appended {
    pub seq: u64,
    pub at: DateTime<Utc>,
    pub event: Event,
}

impl Appended {
    /// The full envelope, for the session and turn the event was appended to.
    pub fn into_envelope(self, session_id: &str, turn_id: Option<&str>) -> Envelope {
        Envelope {
            seq: self.seq,
            session_id: session_id.to_owned(),
            turn_id: turn_id.map(str::to_owned),
            at: self.at,
            v: EVENT_VERSION,
            event: self.event,
        }
    }
}

/// The append-only event log of one database file, opened for writing.
///
/// A cheap handle: clones share one writer thread. The last handle to go flushes what is
/// queued, joins the thread and releases the single-writer lock.
#[derive(Clone)]
pub struct Log {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

struct Inner {
    path: PathBuf,
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// One read connection kept for [`Log::with_reader`], opened on first use.
    reader: Mutex<Option<LogReader>>,
    /// What opening the log recovered (set once, right after it opened).
    recovered: OnceLock<Vec<crate::recovery::RecoveredTurn>>,
    /// Held open for the lifetime of the log: the single-writer lock.
    _lock: File,
}

/// What producers, barriers and the writer thread share.
///
/// Three locks (and `taken_sessions`, a leaf taken after `queue`), always taken in this order (any of them may be skipped): `store` (the write
/// connection: whoever inserts or commits), `records` (the gate's record file), `queue` (what
/// `append` touches, held for a push). A gate takes `records` then `queue`; it never waits for
/// `store`, so a gate never waits for a commit unless the rows it needs were taken into one.
///
/// Three atomics, each written under a lock and read without one where a stale value is
/// harmless: `committed` (written after a COMMIT returned, under `store`; read with Acquire,
/// so a reader that sees seq N committed also sees the commit's effects), `gated` (a
/// `fetch_max`, read by readers in this process to decide whether to commit first), and
/// `wal_pages` (a hint for checkpointing). The first failure is a `OnceLock`: set once, read
/// without a lock.
struct Shared {
    queue: Mutex<Queue>,
    /// The write connection.
    store: Mutex<Store>,
    /// Pages in the WAL after the last commit (SQLite's WAL hook), for checkpointing.
    wal_pages: Arc<AtomicU32>,
    /// Wakes the writer thread.
    wake: Condvar,
    /// The highest seq known committed: a barrier with nothing newer queued is already met.
    committed: AtomicU64,
    /// The record file, where an output gate writes rows not committed yet; its `written` is
    /// the highest seq it holds, which with `committed` says what is durable.
    records: Mutex<crate::gate::Records>,
    /// The highest seq a gate let out: a read in this process commits first while it is not
    /// committed, so it sees what was reported.
    gated: AtomicU64,
    /// The sessions of the rows taken into the open transaction: added while the queue is
    /// locked for the take, cleared by the commit (which may run with the queue locked, by an
    /// import: so not a field of the queue). With the queue's rows, every session that has a
    /// row readers do not see yet. Lock order: `queue`, then this.
    taken_sessions: Mutex<Vec<Arc<str>>>,
    failure: Failure,
    options: LogOptions,
}

/// What `append` needs under its lock: assigning seqs and queueing must happen together, so
/// the queue holds rows in seq order.
struct Queue {
    next_seq: u64,
    /// Appended rows not yet inserted, in seq order.
    rows: Vec<Row>,
    /// When the oldest uncommitted row (queued, or inserted in the open transaction) arrived.
    first_at: Option<Instant>,
    /// Rows already inserted in the open transaction (as of the writer's last settle): with
    /// the queued ones they may fill a batch, which is then worth inserting at once.
    in_batch: usize,
    /// Every handle is gone: commit what is queued and stop.
    closed: bool,
    /// What the writer thread is doing, so producers wake it only when it needs to know.
    writer: WriterWait,
    /// The last session and turn ids, shared by consecutive rows instead of copied.
    session: Option<Arc<str>>,
    turn: Option<Arc<str>>,
    /// Which sessions run a turn: where their chunks are stored.
    open_turns: OpenTurns,
    /// Rows already inserted, handed back so that the threads that append free them, one per
    /// append: memory freed by the thread that allocated it goes back to that thread's cache,
    /// where memory freed by the writer thread would go back through the allocator's shared
    /// arena, whose lock both threads would then contend for on every batch (glibc's malloc).
    spent: Vec<Row>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriterWait {
    /// Working; it looks at the queue again before it sleeps.
    Busy,
    /// Asleep with an empty queue, until something arrives.
    Idle,
    /// Asleep until the queued batch's deadline.
    Timed,
}

impl Shared {
    /// Whether a gate let out an event that is not committed yet.
    fn gated_uncommitted(&self) -> bool {
        self.gated.load(Ordering::Acquire) > self.committed.load(Ordering::Acquire)
    }
}

impl Queue {
    /// Wakes the writer thread if it sleeps, and marks it busy so that producers arriving
    /// before it runs don't wake it again.
    fn wake_writer(&mut self, wake: &Condvar) {
        if self.writer != WriterWait::Busy {
            self.writer = WriterWait::Busy;
            wake.notify_one();
        }
    }
}

/// The first failed commit or record write, after which the writer refuses everything.
#[derive(Default)]
struct Failure(OnceLock<String>);

impl Failure {
    fn set(&self, message: String) {
        tracing::error!(error = %message, "event log commit failed");
        let _ = self.0.set(message);
    }

    fn check(&self) -> Result<(), StoreError> {
        match self.0.get() {
            None => Ok(()),
            Some(message) => Err(StoreError::WriterFailed {
                message: message.clone(),
            }),
        }
    }
}

impl crate::gate::live::CommitsForReaders for Shared {
    fn commit_gated(&self) {
        if self.gated_uncommitted() {
            // A failed commit is reported to the writer's own callers; the reader reads what
            // is there.
            let _ = self.flush();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Log {
    /// Whether the writer takes appends: its thread runs and no commit failed (after one it
    /// refuses everything, with that error).
    pub fn health(&self) -> Result<(), StoreError> {
        self.inner.shared.failure.check()?;
        match &*lock(&self.inner.thread) {
            Some(thread) if !thread.is_finished() => Ok(()),
            _ => Err(StoreError::WriterGone),
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// A new read-only connection to this log, for a caller that keeps it.
    pub fn reader(&self) -> Result<LogReader, StoreError> {
        LogReader::open(&self.inner.path)
    }

    /// Whether the log holds an event of `session_id`, committed or not yet. Rows not committed
    /// are looked for in memory; the rest on the log's read connection, not the write
    /// connection, which the writer thread may hold for a commit.
    pub fn has_session(&self, session_id: &str) -> Result<bool, StoreError> {
        if self.has_uncommitted_rows(session_id) {
            return Ok(true);
        }
        self.read_committed(|r| r.has_session(session_id))
    }

    /// Whether a row of `session_id` is appended but not committed (queued, or taken into the
    /// writer's open transaction): a read of the session must commit first to see it.
    pub(crate) fn has_uncommitted_rows(&self, session_id: &str) -> bool {
        let queue = lock(&self.inner.shared.queue);
        queue.rows.iter().any(|row| &*row.session_id == session_id)
            || lock(&self.inner.shared.taken_sessions)
                .iter()
                .any(|s| &**s == session_id)
    }

    /// Runs `f` on the log's own read connection (opened once, on first use), so short reads
    /// don't pay for opening a connection each time. Reads through it are serialized: keep
    /// them short, and take [`Log::reader`] for long ones. Rows a gate let out are committed
    /// first, so the read sees everything this process reported.
    pub fn with_reader<R>(
        &self,
        f: impl FnOnce(&LogReader) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        if self.inner.shared.gated_uncommitted() {
            self.flush_blocking()?;
        }
        self.read_committed(f)
    }

    /// [`Log::with_reader`] without committing first: for a read that needs none of the rows
    /// not committed yet (those of a session it knows has none).
    pub(crate) fn read_committed<R>(
        &self,
        f: impl FnOnce(&LogReader) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let mut cached = lock(&self.inner.reader);
        let reader = match cached.take() {
            Some(reader) => reader,
            None => LogReader::open(&self.inner.path)?,
        };
        let result = f(&reader);
        *cached = Some(reader);
        result
    }
}

/// The write connection, held by whoever writes: the writer thread or a barrier's caller. A
/// transaction stays open across holders until it is committed.
struct Store {
    conn: Connection,
    open: Option<OpenBatch>,
    /// The queue's other buffer, empty, kept for the next take.
    spare: Vec<Row>,
    /// Rows inserted since the last take, handed to the queue's `spent` at the next one.
    inserted: Vec<Row>,
}

/// The rows of the transaction in progress.
struct OpenBatch {
    first: u64,
    last: u64,
    count: usize,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the queue lets the writer commit what is queued and exit.
        let mut queue = lock(&self.shared.queue);
        queue.closed = true;
        queue.writer = WriterWait::Busy;
        self.shared.wake.notify_one();
        drop(queue);
        if let Some(thread) = lock(&self.thread).take() {
            if thread.join().is_err() {
                tracing::error!(path = %self.path.display(), "event log writer thread panicked");
            }
        }
        match self.shared.failure.check() {
            // Everything is committed: the record file has nothing the database lacks (the
            // one file the gate removes: invariant 5 of `crate::gate`).
            Ok(()) => lock(&self.shared.records).remove(),
            // Kept: it may hold rows the database lacks, for the next writer to insert.
            Err(err) => {
                tracing::error!(path = %self.path.display(), error = %err, "event log closed after a failed commit")
            }
        }
        // The write connection closes last, so SQLite copies the WAL back and removes it (a
        // read-only connection closing last cannot), and the lock file goes while still held.
        drop(lock(&self.reader).take());
        let _ = std::fs::remove_file(lock_path(&self.path));
    }
}

impl Log {
    /// A pragma's value on the write connection, for tests of how it was opened.
    #[cfg(test)]
    pub(crate) fn inner_connection_pragma(&self, name: &str) -> rusqlite::Result<String> {
        lock(&self.inner.shared.store)
            .conn
            .query_row(&format!("PRAGMA {name}"), [], |r| {
                r.get::<_, i64>(0).map(|v| v.to_string())
            })
    }
}

#[cfg(test)]
mod tests;
