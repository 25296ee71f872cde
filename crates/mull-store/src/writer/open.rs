//! Opening a log for writing: the single-writer lock, the schema, the writer thread, and the
//! turns a writer that is gone left open, resolved before anything else is appended (see
//! [`crate::recovery`]).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use mull_core::{Event, TurnStatus};

use super::batcher::run_writer;
use super::{Failure, Inner, Log, LogOptions, Queue, Shared, Store, WriterWait};
use crate::error::StoreError;
use crate::gate::lock::{lock_path, take_lock};
use crate::gate::{self, Held, Records};
use crate::open_turns::OpenTurns;
use crate::recovery::{interrupted_failure, resolve_turn, RecoveredTurn};
use crate::schema;

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
        // Before SQLite reads the WAL: damage beside the log is refused, and kept.
        let damage = gate::inspect(&path, Held::Lock)?;
        if !damage.is_empty() {
            return Err(gate::refuse(&path, &damage));
        }
        let mut conn = schema::open_writer_with(&path, options.durability)?;
        let committed: i64 = conn
            .query_row("SELECT coalesce(max(seq), 0) FROM events", [], |r| r.get(0))
            .map_err(StoreError::sqlite(format!(
                "{}: reading the last seq",
                path.display()
            )))?;
        // Rows a gate let out that the last writer did not commit come first.
        let last = gate::replay(&mut conn, &path, committed.max(0) as u64)?;
        gate::keep_torn_tail(&path)?;
        let records = Records::open(&path, last, options.durability)?;
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
            store: Mutex::new(Store {
                conn,
                open: None,
                spare: Vec::new(),
                inserted: Vec::new(),
            }),
            wal_pages,
            queue: Mutex::new(Queue {
                next_seq: last + 1,
                rows: Vec::new(),
                first_at: None,
                in_batch: 0,
                closed: false,
                writer: WriterWait::Busy,
                session: None,
                turn: None,
                open_turns: OpenTurns::default(),
                spent: Vec::new(),
            }),
            wake: Condvar::new(),
            committed: AtomicU64::new(last),
            records: Mutex::new(records),
            gated: AtomicU64::new(last),
            taken_sessions: Mutex::new(Vec::new()),
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
        let live: Arc<dyn gate::live::CommitsForReaders> = log.inner.shared.clone();
        gate::live::register(&log.inner.path, &live);
        // Turns left open by a writer that is gone are resolved before anything else is
        // appended, whichever session this process goes on to use.
        let recovered = resolve_open_turns(&log)?;
        let _ = log.inner.recovered.set(recovered);
        Ok(log)
    }

    /// The turns that opening this log found left open by a writer that is gone, and
    /// resolved (see [`crate::recovery`]).
    pub fn recovered_at_open(&self) -> &[crate::recovery::RecoveredTurn] {
        self.inner.recovered.get().map_or(&[], Vec::as_slice)
    }
}

/// Resolves every turn of the log left open by a writer that is gone (any open turn, since
/// `log` was just opened as the only writer): appends each one's events, stamped with the time
/// of its session's last event (when the turn was last heard of), and waits until they are
/// committed.
pub(crate) fn resolve_open_turns(log: &Log) -> Result<Vec<RecoveredTurn>, StoreError> {
    let reader = log.reader()?;
    let open = reader.unfinished_turns()?;
    let mut recovered = Vec::with_capacity(open.len());
    for (session_id, turn_id) in open {
        let state = reader.load_session(&session_id)?;
        let Some(turn) = state
            .turns
            .iter()
            .find(|t| t.turn_id.as_deref() == Some(turn_id.as_str()))
            .filter(|t| t.status == TurnStatus::Running)
        else {
            // Its session's fold already ended it (a fork cut it, or it was superseded).
            continue;
        };
        let at = state.last_at.unwrap_or(turn.started_at);
        let mut events = resolve_turn(&state, turn);
        let kept_partial = matches!(events.first(), Some(Event::AssistantMessageSaved { .. }));
        let repaired_calls = events
            .iter()
            .filter(|e| matches!(e, Event::ToolCallRepaired { .. }))
            .count();
        events.push(interrupted_failure(turn));
        for event in events {
            log.append(&session_id, Some(&turn_id), at, event)?;
        }
        recovered.push(RecoveredTurn {
            request_id: turn.request_id.clone(),
            session_id,
            turn_id,
            kept_partial,
            repaired_calls,
        });
    }
    if !recovered.is_empty() {
        log.flush_blocking()?;
    }
    Ok(recovered)
}
