//! The write side of the log: [`Log`], its single writer thread and group commit.
//!
//! `append` assigns the seq under a short lock and hands the row to the writer thread through a
//! channel; the thread inserts rows into an open transaction and commits when the batch holds
//! [`LogOptions::batch_max_events`] rows, when [`LogOptions::batch_max_delay`] has passed since
//! the batch's first row, or when a flush barrier arrives — whichever comes first.

use std::borrow::Cow;
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures_channel::oneshot;
use mull_core::{Envelope, Event, EVENT_VERSION};
use rusqlite::{params, Connection};

use crate::error::StoreError;
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
}

impl Default for LogOptions {
    /// 512 events or 5 ms: large enough batches for ~1M rows/s, small enough latency for a
    /// live tail.
    fn default() -> Self {
        Self {
            batch_max_events: 512,
            batch_max_delay: Duration::from_millis(5),
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
    state: Mutex<AppendState>,
    failure: Arc<Failure>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Held open for the lifetime of the log: the single-writer lock.
    _lock: File,
}

/// What `append` needs under its lock: assigning seqs and sending must happen together, so
/// the channel carries rows in seq order.
struct AppendState {
    next_seq: u64,
    sender: Option<Sender<Command>>,
    /// The last session and turn ids, shared by consecutive rows instead of copied.
    session: Option<Arc<str>>,
    turn: Option<Arc<str>>,
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

enum Command {
    Append(Row),
    Flush(oneshot::Sender<Result<(), StoreError>>),
    Import {
        rows: Vec<Row>,
        done: oneshot::Sender<Result<(), StoreError>>,
    },
}

const INSERT: &str =
    "INSERT INTO events (seq, session_id, turn_id, at, v, kind, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

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

fn shared(cache: &mut Option<Arc<str>>, id: &str) -> Arc<str> {
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
        let lock_path = lock_path(&path);
        let lock_file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|source| StoreError::Io {
                path: lock_path.clone(),
                source,
            })?;
        match lock_file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(StoreError::Locked { path: lock_path }),
            Err(TryLockError::Error(source)) => {
                return Err(StoreError::Io {
                    path: lock_path,
                    source,
                })
            }
        }
        let conn = schema::open_writer(&path)?;
        let last: i64 = conn
            .query_row("SELECT coalesce(max(seq), 0) FROM events", [], |r| r.get(0))
            .map_err(StoreError::sqlite(format!(
                "{}: reading the last seq",
                path.display()
            )))?;
        let (sender, receiver) = mpsc::channel();
        let failure = Arc::new(Failure::default());
        let writer = Writer {
            conn,
            receiver,
            options: LogOptions {
                batch_max_events: options.batch_max_events.max(1),
                ..options
            },
            failure: Arc::clone(&failure),
        };
        let thread = std::thread::Builder::new()
            .name("mull-log-writer".to_owned())
            .spawn(move || writer.run())
            .map_err(|source| StoreError::Io {
                path: path.clone(),
                source,
            })?;
        Ok(Log {
            inner: Arc::new(Inner {
                path,
                state: Mutex::new(AppendState {
                    next_seq: last.max(0) as u64 + 1,
                    sender: Some(sender),
                    session: None,
                    turn: None,
                }),
                failure,
                thread: Mutex::new(Some(thread)),
                _lock: lock_file,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The seq the last `append` got (0 for an empty log): committed or about to be.
    pub fn last_seq(&self) -> u64 {
        lock(&self.inner.state).next_seq - 1
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
        self.inner.failure.check()?;
        let at = timestamp::truncate(at);
        let payload = event.encode();
        let kind = kind_of(&event);
        let seq = {
            let mut state = lock(&self.inner.state);
            let seq = state.next_seq;
            let row = Row {
                seq,
                session_id: shared(&mut state.session, session_id),
                turn_id: turn_id.map(|t| shared(&mut state.turn, t)),
                at,
                v: EVENT_VERSION,
                kind,
                payload,
            };
            let sender = state.sender.as_ref().ok_or(StoreError::WriterGone)?;
            sender
                .send(Command::Append(row))
                .map_err(|_| StoreError::WriterGone)?;
            state.next_seq += 1;
            seq
        };
        Ok(Envelope {
            seq,
            session_id: session_id.to_owned(),
            turn_id: turn_id.map(str::to_owned),
            at,
            v: EVENT_VERSION,
            event,
        })
    }

    /// A barrier: resolves once everything appended before it is committed, or with the error
    /// of a failed commit. Needs no runtime of its own; await it from any executor.
    pub async fn flush(&self) -> Result<(), StoreError> {
        let (done, wait) = oneshot::channel();
        {
            let state = lock(&self.inner.state);
            let sender = state.sender.as_ref().ok_or(StoreError::WriterGone)?;
            sender
                .send(Command::Flush(done))
                .map_err(|_| StoreError::WriterGone)?;
        }
        match wait.await {
            Ok(result) => result,
            Err(_) => {
                self.inner.failure.check()?;
                Err(StoreError::WriterGone)
            }
        }
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

    /// A read-only connection to this log.
    pub fn reader(&self) -> Result<LogReader, StoreError> {
        LogReader::open(&self.inner.path)
    }

    /// Commits `rows` (seqs already checked strictly increasing) in one transaction after
    /// everything appended so far. Either all rows land or none.
    pub(crate) fn import_rows(&self, rows: Vec<Row>, source_name: &str) -> Result<(), StoreError> {
        let (Some(first), Some(last)) = (rows.first().map(|r| r.seq), rows.last().map(|r| r.seq))
        else {
            return Ok(());
        };
        self.inner.failure.check()?;
        let (done, wait) = oneshot::channel();
        {
            let mut state = lock(&self.inner.state);
            if first < state.next_seq {
                return Err(StoreError::Jsonl {
                    source_name: source_name.to_owned(),
                    line: 1,
                    message: format!(
                        "seq {first} is not after the log's last seq {}",
                        state.next_seq - 1
                    ),
                });
            }
            let sender = state.sender.as_ref().ok_or(StoreError::WriterGone)?;
            sender
                .send(Command::Import { rows, done })
                .map_err(|_| StoreError::WriterGone)?;
            state.next_seq = last + 1;
        }
        match futures_executor::block_on(wait) {
            Ok(result) => result,
            Err(_) => Err(StoreError::WriterGone),
        }
    }
}

/// The sidecar file whose lock marks the one writer of `db`.
pub fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the channel lets the writer commit what is queued and exit.
        lock(&self.state).sender = None;
        if let Some(thread) = lock(&self.thread).take() {
            if thread.join().is_err() {
                tracing::error!(path = %self.path.display(), "event log writer thread panicked");
            }
        }
        if let Err(err) = self.failure.check() {
            tracing::error!(path = %self.path.display(), error = %err, "event log closed after a failed commit");
        }
    }
}

/// The writer thread's state.
struct Writer {
    conn: Connection,
    receiver: Receiver<Command>,
    options: LogOptions,
    failure: Arc<Failure>,
}

/// How a batch ended.
struct BatchEnd {
    /// A command that closed the batch early, handled after the commit.
    carry: Option<Command>,
    /// Every handle is gone: commit and exit.
    disconnected: bool,
}

impl Writer {
    fn run(mut self) {
        let mut carry: Option<Command> = None;
        loop {
            let command = match carry.take() {
                Some(command) => command,
                None => match self.receiver.recv() {
                    Ok(command) => command,
                    Err(_) => return,
                },
            };
            match command {
                Command::Flush(done) => {
                    let _ = done.send(self.failure.check());
                }
                Command::Import { rows, done } => {
                    let result = self.failure.check().and_then(|()| self.commit_import(rows));
                    let _ = done.send(result);
                }
                Command::Append(row) => {
                    if self.failure.check().is_err() {
                        continue;
                    }
                    let (first, mut last) = (row.seq, row.seq);
                    match self.commit_batch(row, &mut last) {
                        Ok(end) => {
                            carry = end.carry;
                            if end.disconnected && carry.is_none() {
                                return;
                            }
                        }
                        Err(err) => {
                            self.failure
                                .set(format!("committing seqs {first}..={last}: {err}"));
                        }
                    }
                }
            }
        }
    }

    /// Inserts `first` and what follows it into one transaction and commits.
    fn commit_batch(&mut self, first: Row, last: &mut u64) -> Result<BatchEnd, rusqlite::Error> {
        let deadline = Instant::now() + self.options.batch_max_delay;
        let mut end = BatchEnd {
            carry: None,
            disconnected: false,
        };
        let tx = self.conn.transaction()?;
        {
            let mut insert = tx.prepare_cached(INSERT)?;
            insert_row(&mut insert, &first)?;
            let mut count = 1;
            while count < self.options.batch_max_events {
                let wait = deadline.saturating_duration_since(Instant::now());
                match self.receiver.recv_timeout(wait) {
                    Ok(Command::Append(row)) => {
                        *last = row.seq;
                        insert_row(&mut insert, &row)?;
                        count += 1;
                    }
                    Ok(other) => {
                        end.carry = Some(other);
                        break;
                    }
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => {
                        end.disconnected = true;
                        break;
                    }
                }
            }
        }
        tx.commit()?;
        Ok(end)
    }

    fn commit_import(&mut self, rows: Vec<Row>) -> Result<(), StoreError> {
        let (first, last) = (
            rows.first().map_or(0, |r| r.seq),
            rows.last().map_or(0, |r| r.seq),
        );
        let result = (|| -> Result<(), rusqlite::Error> {
            let tx = self.conn.transaction()?;
            {
                let mut insert = tx.prepare_cached(INSERT)?;
                for row in &rows {
                    insert_row(&mut insert, row)?;
                }
            }
            tx.commit()
        })();
        result.map_err(|err| {
            let message = format!("importing seqs {first}..={last}: {err}");
            self.failure.set(message.clone());
            StoreError::WriterFailed { message }
        })
    }
}

fn insert_row(insert: &mut rusqlite::CachedStatement<'_>, row: &Row) -> rusqlite::Result<()> {
    insert.execute(params![
        row.seq,
        &*row.session_id,
        row.turn_id.as_deref(),
        timestamp::format(row.at),
        row.v,
        &*row.kind,
        row.payload,
    ])?;
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
            "CREATE TRIGGER refuse_five BEFORE INSERT ON events WHEN NEW.seq = 5 \
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
    fn unknown_kinds_are_stored_under_their_own_kind() {
        assert_eq!(kind_of(&delta("x")), "chunk");
        assert_eq!(kind_of(&Event::StepStarted { step: 1 }), "step_started");
        let unknown = Event::decode(1, r#"{"type":"from_the_future","x":1}"#).expect("decodes");
        assert_eq!(kind_of(&unknown), "from_the_future");
    }
}
