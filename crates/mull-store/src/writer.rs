//! The write side of the log: [`Log`], its writer thread and group commit.
//!
//! `append` assigns the seq and queues the row under one short lock. The writer thread inserts
//! queued rows into an open transaction and commits it when it holds
//! [`LogOptions::batch_max_events`] rows or when [`LogOptions::batch_max_delay`] has passed
//! since its first row. Producers wake the thread only when that changes something (a batch
//! begins, or a few rows wait), not once per row: a streamed chunk costs an encode and a push.
//! A flush barrier commits on its caller's thread, with no hand-off to wait for. So does a
//! JSONL import, in one transaction of its own that it fills a batch at a time.

use std::borrow::Cow;
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use mull_core::{Envelope, Event, EVENT_VERSION};
use rusqlite::{Connection, Transaction, TransactionBehavior};

use crate::error::StoreError;
use crate::open_turns::OpenTurns;
use crate::reader::LogReader;
use crate::schema;
use crate::timestamp;

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
struct Shared {
    queue: Mutex<Queue>,
    /// The write connection. Lock order: `store` before `queue`.
    store: Mutex<Store>,
    /// Pages in the WAL after the last commit (SQLite's WAL hook), for checkpointing.
    wal_pages: Arc<AtomicU32>,
    /// Wakes the writer thread.
    wake: Condvar,
    /// The highest seq known committed: a barrier with nothing newer queued is already met.
    committed: AtomicU64,
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
    /// Every handle is gone: commit what is queued and stop.
    closed: bool,
    /// What the writer thread is doing, so producers wake it only when it needs to know.
    writer: WriterWait,
    /// The last session and turn ids, shared by consecutive rows instead of copied.
    session: Option<Arc<str>>,
    turn: Option<Arc<str>>,
    /// Which sessions run a turn: where their chunks are stored.
    open_turns: OpenTurns,
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

/// Queued rows at which a sleeping writer thread is woken to insert them (into the transaction
/// the next barrier or deadline commits), so that a long stream is inserted as it goes. Fewer
/// rows than this are inserted by whoever commits: waking the thread for a handful costs more
/// CPU than inserting them (measured on the turn bench).
const EAGER_ROWS: usize = 64;

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

/// The first failed commit, after which the writer refuses everything.
#[derive(Default)]
struct Failure {
    failed: AtomicBool,
    message: Mutex<Option<String>>,
}

impl Failure {
    fn set(&self, message: String) {
        tracing::error!(error = %message, "event log commit failed");
        *lock(&self.message) = Some(message);
        self.failed.store(true, Ordering::Release);
    }

    fn check(&self) -> Result<(), StoreError> {
        if !self.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        Err(StoreError::WriterFailed {
            message: lock(&self.message)
                .clone()
                .unwrap_or_else(|| "a commit failed".to_owned()),
        })
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

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

/// How many times opening retries a lock held by someone else (5 ms apart): a reader's
/// probe holds it for microseconds; a writer holds it for as long as it lives.
const LOCK_TRIES: u32 = 20;

fn shared_id(cache: &mut Option<Arc<str>>, id: &str) -> Arc<str> {
    match cache {
        Some(cached) if &**cached == id => Arc::clone(cached),
        _ => {
            let fresh: Arc<str> = Arc::from(id);
            *cache = Some(Arc::clone(&fresh));
            fresh
        }
    }
}

impl Log {
    /// Creates or opens a log with default batching; see [`Log::open_with`].
    pub fn open(path: impl AsRef<Path>) -> Result<Log, StoreError> {
        Self::open_with(path, LogOptions::default())
    }

    /// Creates or opens the log at `path` for writing: takes the single-writer lock (a sidecar
    /// `<path>.lock`; a second writer gets [`StoreError::Locked`]), checks and migrates the
    /// schema, and starts the writer thread.
    pub fn open_with(path: impl AsRef<Path>, options: LogOptions) -> Result<Log, StoreError> {
        let path = path.as_ref().to_owned();
        if path.is_dir() {
            return Err(StoreError::IsADirectory { path });
        }
        let lock_path = lock_path(&path);
        let lock_file = take_lock(&lock_path)?;
        match Self::start(path, options, lock_file) {
            Ok(log) => Ok(log),
            Err(err) => {
                // Held by this open, so no other writer relies on it: a refused open leaves no
                // sidecar behind.
                let _ = std::fs::remove_file(&lock_path);
                Err(err)
            }
        }
    }

    /// The rest of [`Log::open_with`], with the single-writer lock held.
    fn start(path: PathBuf, options: LogOptions, lock_file: File) -> Result<Log, StoreError> {
        let mut conn = schema::open_writer(&path)?;
        let last: i64 = conn
            .query_row("SELECT coalesce(max(seq), 0) FROM events", [], |r| r.get(0))
            .map_err(StoreError::sqlite(format!(
                "{}: reading the last seq",
                path.display()
            )))?;
        // Where this writer's rows begin: the turns it finds open are not its own, and their
        // chunks are all before this seq (see `open_turns`).
        conn.execute(
            "INSERT OR IGNORE INTO writer_starts (seq) VALUES (?1)",
            [last],
        )
        .map_err(StoreError::sqlite(format!(
            "{}: recording the writer's start",
            path.display()
        )))?;
        let last = last.max(0) as u64;
        // The WAL hook replaces SQLite's auto-checkpoint: a commit made by a barrier's caller
        // must not also copy the WAL back and fsync; the writer thread does that.
        let wal_pages = Arc::new(AtomicU32::new(0));
        let pages = Arc::clone(&wal_pages);
        conn.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, frames: i32| {
            pages.store(u32::try_from(frames).unwrap_or(0), Ordering::Release);
            Ok(())
        }))
        .map_err(StoreError::sqlite(format!(
            "{}: installing the WAL hook",
            path.display()
        )))?;
        let shared = Arc::new(Shared {
            store: Mutex::new(Store { conn, open: None }),
            wal_pages,
            queue: Mutex::new(Queue {
                next_seq: last + 1,
                rows: Vec::new(),
                first_at: None,
                closed: false,
                writer: WriterWait::Busy,
                session: None,
                turn: None,
                open_turns: OpenTurns::default(),
            }),
            wake: Condvar::new(),
            committed: AtomicU64::new(last),
            failure: Failure::default(),
            options: LogOptions {
                batch_max_events: options.batch_max_events.max(1),
                ..options
            },
        });
        let checkpointer = schema::open_checkpointer(&path)?;
        let writer = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("mull-log-writer".to_owned())
            .spawn(move || run_writer(writer, checkpointer))
            .map_err(|source| StoreError::Io {
                path: path.clone(),
                source,
            })?;
        let log = Log {
            inner: Arc::new(Inner {
                path,
                shared,
                thread: Mutex::new(Some(thread)),
                reader: Mutex::new(None),
                recovered: OnceLock::new(),
                _lock: lock_file,
            }),
        };
        // Turns left open by a writer that is gone are resolved before anything else is
        // appended, whichever session this process goes on to use.
        let recovered = crate::recovery::resolve_open_turns(&log)?;
        let _ = log.inner.recovered.set(recovered);
        Ok(log)
    }

    /// The turns that opening this log found left open by a writer that is gone, and
    /// resolved (see [`crate::recovery`]).
    pub fn recovered_at_open(&self) -> &[crate::recovery::RecoveredTurn] {
        self.inner.recovered.get().map_or(&[], Vec::as_slice)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The seq the last `append` got (0 for an empty log): committed or about to be.
    pub fn last_seq(&self) -> u64 {
        lock(&self.inner.shared.queue).next_seq - 1
    }

    /// Appends an event: assigns its seq at once, queues it for the writer thread and returns
    /// the full envelope. Does not wait for the commit; await [`Log::flush`] for durability.
    /// Fails once a commit has failed (the log's seqs would no longer be contiguous).
    pub fn append(
        &self,
        session_id: &str,
        turn_id: Option<&str>,
        at: DateTime<Utc>,
        event: Event,
    ) -> Result<Envelope, StoreError> {
        let appended = self.append_event(session_id, turn_id, at, event)?;
        Ok(appended.into_envelope(session_id, turn_id))
    }

    /// [`Log::append`] without the envelope: hands back the seq, the stored time and the event,
    /// for a caller that knows the ids already and need not copy them per event.
    pub fn append_event(
        &self,
        session_id: &str,
        turn_id: Option<&str>,
        at: DateTime<Utc>,
        event: Event,
    ) -> Result<Appended, StoreError> {
        let shared = &self.inner.shared;
        shared.failure.check()?;
        let at = timestamp::truncate(at);
        let payload = event.encode();
        let kind = kind_of(&event);
        let seq = {
            let mut queue = lock(&shared.queue);
            if queue.closed {
                return Err(StoreError::WriterGone);
            }
            let seq = queue.next_seq;
            let session = shared_id(&mut queue.session, session_id);
            let kind = queue.open_turns.column_kind(&session, kind);
            let row = Row {
                seq,
                session_id: session,
                turn_id: turn_id.map(|t| shared_id(&mut queue.turn, t)),
                at,
                v: EVENT_VERSION,
                kind,
                payload,
            };
            queue.rows.push(row);
            queue.next_seq += 1;
            if queue.first_at.is_none() {
                queue.first_at = Some(Instant::now());
            }
            // An idle writer must start the batch's clock; a sleeping one inserts once a few
            // rows are waiting.
            let wake = match queue.writer {
                WriterWait::Busy => false,
                WriterWait::Idle => true,
                WriterWait::Timed => queue.rows.len() >= shared.eager_rows(),
            };
            if wake {
                queue.wake_writer(&shared.wake);
            }
            seq
        };
        Ok(Appended { seq, at, event })
    }

    /// A barrier: resolves once everything appended before it is committed, or with the error
    /// of a failed commit. Needs no runtime of its own; await it from any executor.
    ///
    /// Costs nothing when everything appended is already committed. Otherwise the caller
    /// commits the queue itself — one short transaction without fsync (the WAL runs with
    /// `synchronous=NORMAL`), cheaper than handing it to the writer thread and waiting to be
    /// woken — after the writer thread's current batch, if it is inserting one. Barriers that
    /// arrive together share a commit: the first commits what the others queued.
    pub async fn flush(&self) -> Result<(), StoreError> {
        let shared = &self.inner.shared;
        if shared.committed.load(Ordering::Acquire) >= self.last_seq() {
            return shared.failure.check();
        }
        let mut store = lock(&shared.store);
        let rows = shared.take();
        store.insert_rows(shared, rows);
        store.commit(shared);
        store.settle(shared);
        drop(store);
        if shared.wants_checkpoint() {
            shared.nudge_writer();
        }
        shared.failure.check()
    }

    /// Whether the event appended at `seq` is durable (committed, so a killed process keeps
    /// it). Commits are in seq order: then so is every event before it.
    pub fn is_durable(&self, seq: u64) -> bool {
        self.inner.shared.committed.load(Ordering::Acquire) >= seq
    }

    /// The output gate: resolves once the event appended at `seq` — the seq
    /// [`Log::append_event`] handed back, a durability ticket — and every event before it are
    /// durable, or with the error of a failed commit.
    ///
    /// Await it only where something is about to leave the process that depends on that event
    /// (a tool run, a reply to a caller); work that leaves nothing goes on while the batch
    /// commits on its own (within [`LogOptions::batch_max_delay`]) or with the next gate.
    /// Costs nothing when the seq is committed already; otherwise it commits like
    /// [`Log::flush`], on the caller's thread.
    pub async fn durable(&self, seq: u64) -> Result<(), StoreError> {
        if self.is_durable(seq) {
            return self.inner.shared.failure.check();
        }
        self.flush().await
    }

    /// [`Log::flush`] for synchronous code: blocks the calling thread. Do not call it on an
    /// async runtime's worker thread.
    pub fn flush_blocking(&self) -> Result<(), StoreError> {
        futures_executor::block_on(self.flush())
    }

    /// Flushes and, if this is the last handle, stops the writer thread and releases the lock.
    /// Dropping the last handle does the same but can only log a failure.
    pub fn close(self) -> Result<(), StoreError> {
        self.flush_blocking()
    }

    /// A new read-only connection to this log, for a caller that keeps it.
    pub fn reader(&self) -> Result<LogReader, StoreError> {
        LogReader::open(&self.inner.path)
    }

    /// Whether the log holds an event of `session_id` (committed, or inserted into the
    /// transaction being filled). Asked on the write connection: its page cache survives the
    /// commits, where a read connection starts cold after each one and reads the lookup's pages
    /// again — what opening a new session costs most.
    pub fn has_session(&self, session_id: &str) -> Result<bool, StoreError> {
        let shared = &self.inner.shared;
        let mut store = lock(&shared.store);
        let found = store.look_up_session(shared, session_id);
        // A transaction the lookup opened commits with the rows that follow it, or on the
        // writer thread's batch clock if none do.
        store.settle(shared);
        drop(store);
        found.map_err(StoreError::sqlite(format!(
            "{}: looking up a session",
            self.inner.path.display()
        )))
    }

    /// Runs `f` on the log's own read connection (opened once, on first use), so short reads
    /// don't pay for opening a connection each time. Reads through it are serialized: keep
    /// them short, and take [`Log::reader`] for long ones.
    pub fn with_reader<R>(
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
    batch: Vec<Row>,
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
    fn insert(&mut self) -> Result<(), StoreError> {
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

/// Creates and locks the sidecar lock file. A writer removes it when it closes (while still
/// holding it), so a lock taken on a file that was removed meanwhile is taken again on the
/// file now at the path.
fn take_lock(lock_path: &Path) -> Result<File, StoreError> {
    let io = |source| StoreError::Io {
        path: lock_path.to_owned(),
        source,
    };
    loop {
        let lock_file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(lock_path)
            .map_err(io)?;
        // A reader probes the lock with a shared lock it lets go at once (to tell whether a
        // writer is alive), so a refusal is retried for a moment before it counts.
        let mut tries = 0;
        loop {
            match lock_file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if tries < LOCK_TRIES => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(StoreError::Locked {
                        path: lock_path.to_owned(),
                    })
                }
                Err(TryLockError::Error(source)) => return Err(io(source)),
            }
        }
        if still_at_path(&lock_file, lock_path) {
            return Ok(lock_file);
        }
    }
}

/// Whether `file` is the file at `path` now (not one removed since it was opened).
#[cfg(unix)]
fn still_at_path(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(open), Ok(now)) => open.dev() == now.dev() && open.ino() == now.ino(),
        _ => false,
    }
}

/// Elsewhere a file that is open cannot be removed, so it is still at its path.
#[cfg(not(unix))]
fn still_at_path(_file: &File, _path: &Path) -> bool {
    true
}

/// The sidecar file whose lock marks the one writer of `db`.
pub fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
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
        if let Err(err) = self.shared.failure.check() {
            tracing::error!(path = %self.path.display(), error = %err, "event log closed after a failed commit");
        }
        // The write connection closes last, so SQLite copies the WAL back and removes it (a
        // read-only connection closing last cannot), and the lock file goes while still held.
        drop(lock(&self.reader).take());
        let _ = std::fs::remove_file(lock_path(&self.path));
    }
}

/// The write connection, held by whoever writes: the writer thread or a barrier's caller. A
/// transaction stays open across holders until it is committed.
struct Store {
    conn: Connection,
    open: Option<OpenBatch>,
}

/// The rows of the transaction in progress.
struct OpenBatch {
    first: u64,
    last: u64,
    count: usize,
}

impl Shared {
    /// Whether the WAL has grown to the checkpoint size.
    fn wants_checkpoint(&self) -> bool {
        self.wal_pages.load(Ordering::Acquire) >= self.options.checkpoint_pages
    }

    /// Queued rows at which a sleeping writer thread is woken to insert them.
    fn eager_rows(&self) -> usize {
        EAGER_ROWS.min(self.options.batch_max_events)
    }

    /// Takes everything queued. Called with the store locked, so what is taken is inserted in
    /// the order it was taken.
    fn take(&self) -> Vec<Row> {
        std::mem::take(&mut lock(&self.queue).rows)
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
            if queue.rows.len() >= self.eager_rows() {
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
    fn nudge_writer(&self) {
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
fn run_writer(shared: Arc<Shared>, checkpointer: Connection) {
    loop {
        let work = shared.wait_for_work();
        if matches!(work, Work::Checkpoint) {
            checkpoint(&checkpointer, "copying the WAL back while commits go on");
        }
        let mut store = lock(&shared.store);
        if !matches!(work, Work::Checkpoint) {
            let rows = shared.take();
            store.insert_rows(&shared, rows);
        }
        if !matches!(work, Work::Insert) {
            store.commit(&shared);
        }
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
    /// Inserts rows in order into the open transaction (opening one when none is), committing
    /// each time it holds `batch_max_events` rows. The insert statement is looked up once.
    fn insert_rows(&mut self, shared: &Shared, rows: Vec<Row>) {
        if rows.is_empty() || shared.failure.check().is_err() {
            return;
        }
        let Store { conn, open } = self;
        let result = (|| -> rusqlite::Result<()> {
            let mut rest = &rows[..];
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

    /// Brings the queue's batch clock in line with what is still uncommitted: none left stops
    /// it; rows left with no clock running start it.
    fn settle(&self, shared: &Shared) {
        let mut queue = lock(&shared.queue);
        if self.open.is_none() && queue.rows.is_empty() {
            queue.first_at = None;
        } else if queue.first_at.is_none() {
            queue.first_at = Some(Instant::now());
        }
    }

    /// Whether `session_id` has a row, asked inside the write transaction — opening it when
    /// none is open, for the rows that follow (a session is looked up right before its first
    /// rows are appended). A read transaction of its own would take and release SQLite's WAL
    /// read lock once more: two file-lock calls per new session.
    fn look_up_session(&mut self, shared: &Shared, session_id: &str) -> rusqlite::Result<bool> {
        if self.open.is_none() && shared.failure.check().is_ok() {
            self.run_cached("BEGIN")?;
            let committed = shared.committed.load(Ordering::Acquire);
            self.open = Some(OpenBatch {
                first: committed + 1,
                last: committed,
                count: 0,
            });
        }
        self.conn
            .prepare_cached(&crate::reader::has_session_sql())?
            .query_row([session_id], |r| r.get(0))
    }

    /// Runs a parameterless statement kept prepared (BEGIN and COMMIT run once per batch).
    fn run_cached(&self, sql: &str) -> rusqlite::Result<()> {
        self.conn.prepare_cached(sql)?.execute([]).map(drop)
    }

    /// Commits the open transaction, if any, and publishes its last seq as committed.
    fn commit(&mut self, shared: &Shared) {
        let Some(batch) = &self.open else { return };
        let last = batch.last;
        match self.run_cached("COMMIT") {
            Ok(()) => {
                self.open = None;
                shared.committed.store(last, Ordering::Release);
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
        self.insert_rows(shared, std::mem::take(&mut queue.rows));
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

/// Most rows one INSERT statement carries: a statement's fixed cost (running it, resetting
/// it) is shared by its rows.
const ROWS_PER_INSERT: usize = 16;

/// Where an inserted row's seq comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seqs {
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
fn insert_many(conn: &Connection, rows: &[Row], seqs: Seqs) -> rusqlite::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use mull_core::StreamPart;

    fn at(micros: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_micros(1_735_689_600_000_000 + micros).expect("valid time")
    }

    fn delta(text: &str) -> Event {
        Event::Chunk {
            step: 0,
            part: StreamPart::TextDelta {
                id: "t0".into(),
                text: text.into(),
            },
            original: None,
        }
    }

    #[test]
    fn append_assigns_contiguous_seqs_and_flush_makes_them_readable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log.db")).expect("opens");
        let mut appended = Vec::new();
        for i in 0..1000 {
            let env = log
                .append("sess_1", Some("turn_1"), at(i), delta(&format!("d{i}")))
                .expect("appends");
            assert_eq!(env.seq, i as u64 + 1);
            appended.push(env);
        }
        assert_eq!(log.last_seq(), 1000);
        log.flush_blocking().expect("flushes");
        let reader = log.reader().expect("reader");
        assert_eq!(reader.max_seq().expect("max"), 1000);
        assert_eq!(reader.range(1, 1000).expect("range"), appended);
    }

    #[test]
    fn rows_of_one_turn_and_rows_of_many_sessions_read_back_with_their_own_ids() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log.db")).expect("opens");
        let mut appended = Vec::new();
        let mut append = |session: &str, turn: Option<&str>, i: i64| {
            let env = log
                .append(session, turn, at(i), delta(&format!("d{i}")))
                .expect("appends");
            appended.push(env);
        };
        // A batch that one turn writes alone (its ids bound once per statement)...
        for i in 0..40 {
            append("sess_a", Some("turn_a"), i);
        }
        log.flush_blocking().expect("flushes");
        // ...then batches where sessions, turns and turnless rows take turns.
        for i in 40..80 {
            match i % 3 {
                0 => append("sess_a", Some("turn_a"), i),
                1 => append("sess_b", Some("turn_b"), i),
                _ => append("sess_b", None, i),
            }
        }
        // A run of turnless rows of one session, then one of another session.
        for i in 80..100 {
            append("sess_c", None, i);
        }
        append("sess_a", Some("turn_a"), 100);
        log.flush_blocking().expect("flushes");
        let reader = log.reader().expect("reader");
        assert_eq!(reader.range(1, 101).expect("range"), appended);
    }

    #[test]
    fn timestamps_are_kept_to_the_microsecond_on_both_sides() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log.db")).expect("opens");
        let precise = DateTime::from_timestamp(1_735_689_600, 123_456_789).expect("valid");
        let env = log.append("s", None, precise, delta("x")).expect("appends");
        assert_eq!(env.at.timestamp_subsec_nanos(), 123_456_000);
        log.flush_blocking().expect("flushes");
        assert_eq!(
            log.reader().expect("reader").range(1, 1).expect("range"),
            vec![env]
        );
    }

    #[test]
    fn a_second_writer_is_refused_naming_the_lock_and_the_first_keeps_working() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.db");
        let log = Log::open(&path).expect("opens");
        let err = Log::open(&path).expect_err("second writer");
        assert!(matches!(err, StoreError::Locked { .. }), "{err}");
        assert!(err.to_string().contains("log.db.lock"), "{err}");
        log.append("s", None, at(0), delta("a")).expect("appends");
        drop(log);
        let again = Log::open(&path).expect("lock released on drop");
        assert_eq!(again.last_seq(), 1, "dropping committed the queued event");
        let env = again.append("s", None, at(1), delta("b")).expect("appends");
        assert_eq!(env.seq, 2, "seqs continue after reopening");
    }

    #[test]
    fn small_batches_and_long_delays_still_commit_everything_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = LogOptions {
            batch_max_events: 3,
            batch_max_delay: Duration::from_secs(60),
            ..LogOptions::default()
        };
        let log = Log::open_with(dir.path().join("log.db"), options).expect("opens");
        for i in 0..10 {
            log.append("s", None, at(i), delta("x")).expect("appends");
        }
        // Nine events fill three batches; the tenth waits for its delay or a barrier.
        let reader = log.reader().expect("reader");
        let deadline = Instant::now() + Duration::from_secs(10);
        while reader.max_seq().expect("max") < 9 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(reader.max_seq().expect("max"), 9);
        log.flush_blocking().expect("flushes");
        assert_eq!(reader.max_seq().expect("max"), 10);
    }

    #[test]
    fn appends_from_many_threads_get_unique_seqs_in_commit_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log.db")).expect("opens");
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    (0..500)
                        .map(|i| {
                            log.append(&format!("s{t}"), None, at(i), delta(&i.to_string()))
                                .expect("appends")
                                .seq
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all = Vec::new();
        for thread in threads {
            let seqs = thread.join().expect("thread");
            assert!(seqs.windows(2).all(|w| w[0] < w[1]));
            all.extend(seqs);
        }
        all.sort_unstable();
        assert_eq!(all, (1..=2000).collect::<Vec<u64>>());
        log.flush_blocking().expect("flushes");
        let reader = log.reader().expect("reader");
        for t in 0..4 {
            let events = reader
                .session_page(&format!("s{t}"), 0, 10_000)
                .expect("page");
            let texts: Vec<String> = events
                .iter()
                .map(|e| match &e.event {
                    Event::Chunk {
                        part: StreamPart::TextDelta { text, .. },
                        ..
                    } => text.clone(),
                    other => panic!("unexpected {other:?}"),
                })
                .collect();
            assert_eq!(texts, (0..500).map(|i| i.to_string()).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_failed_commit_is_reported_and_earlier_commits_stay() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.db");
        let log = Log::open(&path).expect("opens");
        for i in 0..4 {
            log.append("s", None, at(i), delta("ok")).expect("appends");
        }
        log.flush_blocking().expect("flushes");
        // Another connection makes the fifth insert fail, as a full disk would.
        let raw = Connection::open(&path).expect("raw");
        raw.busy_timeout(Duration::from_secs(5)).expect("timeout");
        raw.execute_batch(
            "CREATE TRIGGER refuse_lost BEFORE INSERT ON events WHEN NEW.payload LIKE '%lost%' \
             BEGIN SELECT RAISE(ABORT, 'disk is full'); END;",
        )
        .expect("trigger");
        drop(raw);
        log.append("s", None, at(4), delta("lost")).expect("queued");
        let err = log.flush_blocking().expect_err("commit fails");
        let text = err.to_string();
        assert!(matches!(err, StoreError::WriterFailed { .. }), "{text}");
        assert!(
            text.contains("disk is full") && text.contains("5..="),
            "{text}"
        );
        let err = log
            .append("s", None, at(6), delta("refused"))
            .expect_err("writer stopped");
        assert!(matches!(err, StoreError::WriterFailed { .. }), "{err}");
        drop(log);
        let reader = LogReader::open(&path).expect("reader");
        assert_eq!(reader.max_seq().expect("max"), 4);
    }

    #[test]
    fn a_row_another_program_added_stops_the_writer_before_seqs_go_astray() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.db");
        let log = Log::open(&path).expect("opens");
        for i in 0..3 {
            log.append("s", None, at(i), delta("ok")).expect("appends");
        }
        log.flush_blocking().expect("flushes");
        // Behind the writer's back (past its lock), a row lands far beyond the log's last seq.
        let raw = Connection::open(&path).expect("raw");
        raw.busy_timeout(Duration::from_secs(5)).expect("timeout");
        raw.execute(
            "INSERT INTO events (seq, session_id, at, v, kind, payload) \
             VALUES (10, 's', 1735689600000000, 1, 'chunk', '{}')",
            [],
        )
        .expect("foreign row");
        drop(raw);
        let envelope = log
            .append("s", None, at(3), delta("astray"))
            .expect("queued");
        assert_eq!(envelope.seq, 4);
        let err = log.flush_blocking().expect_err("the mismatch is refused");
        let text = err.to_string();
        assert!(
            text.contains("seq 4 was stored as 11") && text.contains("4..=4"),
            "{text}"
        );
        drop(log);
        let reader = LogReader::open(&path).expect("reader");
        assert_eq!(
            reader.max_seq().expect("max"),
            10,
            "the refused row was rolled back"
        );
    }

    #[test]
    fn flush_works_under_an_async_runtime_without_one_of_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log.db")).expect("opens");
        log.append("s", None, at(0), delta("a")).expect("appends");
        futures_executor::block_on(async {
            log.flush().await.expect("flushes");
        });
        assert_eq!(log.reader().expect("reader").max_seq().expect("max"), 1);
    }

    #[test]
    fn barriers_commit_in_order_whoever_commits_and_the_wal_is_checkpointed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.db");
        let options = LogOptions {
            checkpoint_pages: 500,
            ..LogOptions::default()
        };
        let log = Log::open_with(&path, options).expect("opens");
        // Many small barriers, from two threads at once: some commit inline, some wait for
        // the writer thread; every seq lands once and in order.
        let threads: Vec<_> = (0..2)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for i in 0..1500 {
                        log.append(&format!("s{t}"), None, at(i), delta("x"))
                            .expect("appends");
                        log.flush_blocking().expect("flushes");
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("thread");
        }
        let reader = log.reader().expect("reader");
        assert_eq!(reader.max_seq().expect("max"), 3000);
        assert_eq!(reader.range(1, 3000).expect("range").len(), 3000);
        // 3,000 commits of two or three pages each would leave a WAL of ~30 MB without
        // checkpoints; the writer thread keeps it near the 500-page mark (2 MiB), a few times
        // that when other tests starve its checkpoints of CPU.
        let wal = std::fs::metadata(dir.path().join("log.db-wal"))
            .expect("wal")
            .len();
        assert!(wal < 12 * 1024 * 1024, "WAL grew to {wal} bytes");
    }

    #[test]
    fn every_writer_records_where_it_started_and_knows_no_earlier_turn() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.db");
        let started = Event::TurnStarted {
            request_id: "req_1".into(),
            message_id: "msg_1".into(),
            entry: mull_core::EntryPath::Chat,
            continuation: false,
            attempt: 0,
            body: serde_json::json!({}),
        };
        let log = Log::open(&path).expect("opens");
        log.append("s", Some("t"), at(0), started).expect("appends");
        log.append("s", Some("t"), at(1), delta("a"))
            .expect("appends");
        log.close().expect("closes");
        // The process stopped mid-turn; the next writer did not start that turn.
        let log = Log::open(&path).expect("reopens");
        log.append("s", Some("t"), at(2), delta("b"))
            .expect("appends");
        log.close().expect("closes");
        let conn = Connection::open(&path).expect("raw");
        let starts: Vec<i64> = conn
            .prepare("SELECT seq FROM writer_starts ORDER BY seq")
            .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
            .expect("reads");
        assert_eq!(starts, [0, 2]);
        let kinds: Vec<String> = conn
            .prepare("SELECT kind FROM events ORDER BY seq")
            .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
            .expect("reads");
        // The new writer resolved the turn at open (see `recovery`); a chunk written after
        // that is outside any turn it started.
        assert_eq!(
            kinds,
            [
                "turn_started",
                "chunk",
                "turn_finished",
                "turn_failed",
                crate::schema::LOOSE_CHUNK
            ]
        );
        let reader = LogReader::open(&path).expect("reader");
        let seqs: Vec<u64> = reader
            .session_page("s", 0, 10)
            .expect("reads")
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, [1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_session_is_found_on_the_write_connection_once_it_has_a_row() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log.db")).expect("opens");
        assert!(!log.has_session("s").expect("looks up"));
        log.append("s", None, at(0), Event::StepStarted { step: 0 })
            .expect("appends");
        log.flush_blocking().expect("flushes");
        assert!(log.has_session("s").expect("looks up"));
        assert!(!log.has_session("t").expect("looks up"));
    }

    #[test]
    fn a_lookup_shares_the_transaction_of_the_rows_after_it_or_ends_on_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.db");
        let log = Log::open(&path).expect("opens");
        assert!(!log.has_session("s").expect("looks up"));
        log.append("s", None, at(0), Event::StepStarted { step: 0 })
            .expect("appends");
        log.flush_blocking().expect("flushes");
        assert!(log.with_reader(|r| r.has_session("s")).expect("reads"));
        // A lookup no row follows: its transaction ends with the writer's batch.
        assert!(!log.has_session("t").expect("looks up"));
        let ended = || lock(&log.inner.shared.store).conn.is_autocommit();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ended() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(ended(), "the lookup's transaction is still open");
        // And one the log closes on: closed cleanly, the WAL copied back and removed.
        assert!(!log.has_session("u").expect("looks up"));
        log.close().expect("closes");
        assert!(!dir.path().join("log.db-wal").exists());
        assert_eq!(
            LogReader::open(&path)
                .expect("reads")
                .max_seq()
                .expect("max"),
            1
        );
    }

    #[test]
    fn the_shared_reader_sees_later_commits() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log.db")).expect("opens");
        assert_eq!(log.with_reader(|r| r.max_seq()).expect("reads"), 0);
        log.append("s", None, at(0), delta("a")).expect("appends");
        log.flush_blocking().expect("flushes");
        assert_eq!(log.with_reader(|r| r.max_seq()).expect("reads"), 1);
    }

    #[test]
    fn an_import_holds_at_most_a_batch_of_rows_and_commits_them_all() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log.db")).expect("opens");
        let total = 2 * IMPORT_BATCH as u64 + 1;
        let n = log
            .import("rows", |import| {
                for seq in 1..=total {
                    let event = delta(&seq.to_string());
                    import.push(Row {
                        seq,
                        session_id: Arc::from("s"),
                        turn_id: None,
                        at: at(seq as i64),
                        v: EVENT_VERSION,
                        kind: kind_of(&event),
                        payload: event.encode(),
                    })?;
                    assert!(import.batch.len() < IMPORT_BATCH, "seq {seq}");
                }
                Ok(())
            })
            .expect("imports");
        assert_eq!(n, total);
        assert_eq!(log.last_seq(), total);
        let reader = log.reader().expect("reader");
        assert_eq!(reader.max_seq().expect("max"), total);
        assert_eq!(reader.range(1, total).expect("range").len() as u64, total);
    }

    #[test]
    fn an_import_that_panics_leaves_the_log_working() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log.db")).expect("opens");
        log.append("s", None, at(0), delta("before"))
            .expect("appends");
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            log.import("rows", |import| {
                let event = delta("imported");
                import.push(Row {
                    seq: 2,
                    session_id: Arc::from("s"),
                    turn_id: None,
                    at: at(1),
                    v: EVENT_VERSION,
                    kind: kind_of(&event),
                    payload: event.encode(),
                })?;
                import.insert()?;
                panic!("the input broke");
            })
        }));
        assert!(panicked.is_err());
        let env = log
            .append("s", None, at(2), delta("after"))
            .expect("appends");
        assert_eq!(env.seq, 2, "the import's seq was never published");
        log.flush_blocking().expect("the writer goes on");
        let events = log.reader().expect("reader").range(1, 10).expect("range");
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].event, delta("after"));
    }

    #[test]
    fn unknown_kinds_are_stored_under_their_own_kind() {
        assert_eq!(kind_of(&delta("x")), "chunk");
        assert_eq!(kind_of(&Event::StepStarted { step: 1 }), "step_started");
        let unknown = Event::decode(1, r#"{"type":"from_the_future","x":1}"#).expect("decodes");
        assert_eq!(kind_of(&unknown), "from_the_future");
    }
}
