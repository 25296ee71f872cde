//! Appending: an event gets its seq and joins the queue under one short lock, and returns at
//! once; the barriers ([`Log::flush`], [`Log::durable`]) wait for what was appended to be
//! committed, committing it on their caller's thread when it is not.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use mull_core::{Envelope, Event, EVENT_VERSION};

use super::{kind_of, lock, Appended, Log, Row, Shared, WriterWait};
use crate::error::StoreError;
use crate::timestamp;

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
        let (seq, spent) = {
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
            // rows are waiting, or once they fill the open batch.
            let wake = match queue.writer {
                WriterWait::Busy => false,
                WriterWait::Idle => true,
                WriterWait::Timed => shared.worth_inserting(&queue),
            };
            if wake {
                queue.wake_writer(&shared.wake);
            }
            (seq, queue.spent.pop())
        };
        // Freed here, on this thread, after the lock is let go (see `Queue::spent`).
        drop(spent);
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
        self.inner.shared.flush()
    }

    /// Whether the event appended at `seq` is durable — committed, or in the record file (see
    /// [`Log::durable`]) — so that a killed process keeps it. Both are written in seq order:
    /// then so is every event before it.
    pub fn is_durable(&self, seq: u64) -> bool {
        let shared = &self.inner.shared;
        shared.committed.load(Ordering::Acquire) >= seq || lock(&shared.records).written >= seq
    }

    /// The output gate: resolves once the event appended at `seq` — the seq
    /// [`Log::append_event`] handed back, a durability ticket — and every event before it are
    /// durable, or with the error of a failed commit.
    ///
    /// Await it only where something is about to leave the process that depends on that event
    /// (a tool run, a reply to a caller); work that leaves nothing goes on while the batch
    /// commits on its own (within [`LogOptions::batch_max_delay`](crate::LogOptions::batch_max_delay)).
    ///
    /// Costs nothing when the seq is durable already. Otherwise the queued rows are written to
    /// the log's record file in one `write` (see [`records_path`](crate::records_path)), which a
    /// killed process keeps and the next writer inserts; the writer thread commits them with
    /// its batch. Readers see them once committed. Only rows the writer thread has taken into
    /// its open transaction are committed instead, like [`Log::flush`], on the caller's thread.
    pub async fn durable(&self, seq: u64) -> Result<(), StoreError> {
        let shared = &self.inner.shared;
        shared.gated.fetch_max(seq, Ordering::AcqRel);
        if shared.committed.load(Ordering::Acquire) >= seq || shared.record_queued(seq)? {
            return shared.failure.check();
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
}

impl Shared {
    /// [`Log::flush`]'s work, on the caller's thread.
    pub(super) fn flush(&self) -> Result<(), StoreError> {
        if self.committed.load(Ordering::Acquire) >= lock(&self.queue).next_seq - 1 {
            return self.failure.check();
        }
        let mut store = lock(&self.store);
        store.insert_queued(self);
        store.commit(self);
        store.settle(self);
        self.settle_records();
        drop(store);
        if self.wants_checkpoint() {
            self.nudge_writer();
        }
        self.failure.check()
    }
}
