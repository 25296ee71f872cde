//! Following a session: every event after a seq, first from the log, then live, each exactly
//! once and in `seq` order — the one implementation of "read the log after N, then live".
//!
//! A [`Follow`] gets events from two places:
//! 1. a live feed: the session's broadcast bus (the session is open in this process,
//!    [`Session::follow`](super::Session::follow)), subscribed *before* anything is read; or,
//!    for a session another node writes, the log read again every interval
//!    ([`Follow::polling`]);
//! 2. the log, read through its read contract ([`EventLog::read_log`]) after a flush
//!    barrier, so every event appended before the barrier is readable.
//!
//! An event appended before the subscription is in the log by the time it is read (the barrier
//! waited for it); an event appended after it is on the bus. Events at or below the last seq
//! yielded are dropped, so the overlap is seen once. The bus never waits for a slow reader:
//! when it overflows, the missed stretch is read back from the log. When the bus closes (the
//! session is gone), what the log holds is yielded and the stream ends.
//!
//! # A session taken over
//! On a log shared by several nodes, a node cut off or paused past its lease loses the session
//! to another node, which writes the rest. Events this node published on its bus may then never
//! be committed (the new writer writes other events at those seqs). So on a shared log a
//! follower on the bus passes an event on only once the log holds it
//! ([`EventLog::committed`]): a client is never told what the log does not hold. The moment the
//! session is no longer this node's — the wait for the commit fails (a fenced write), or
//! [`EventLog::holds`] turns false (a renewal found the lease taken, or the lease is past its
//! expiry by the node's own clock) — the follower goes on from the log alone and **starts
//! over from its first seq**: the log is the history, and from then on it holds what
//! the new owner writes, up to the turn's real end. A consumer sees this as a seq at or below
//! one it already had, and refolds from there. This is the only time a seq repeats.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_broadcast::{Receiver, RecvError};
use futures::future::BoxFuture;
use futures::{FutureExt, Stream};
use mull_core::Envelope;
use mull_store::{EventLog, StoreError};
use tokio::time::Sleep;

/// Events read from the log per query.
const PAGE: usize = 512;

/// How often a follower waiting on the bus of a shared log checks that this node still holds
/// the session.
const HOLD_CHECK: Duration = Duration::from_millis(500);

/// How often a follower of a session taken over by another node reads the log again.
const TAKEN_OVER_POLL: Duration = Duration::from_millis(50);

/// How long a follower whose read failed waits before it asks whether the log is only
/// unavailable (a database restart) and reads again.
const UNAVAILABLE_RETRY: Duration = Duration::from_millis(300);

/// How long a follower keeps reading again after a database server's error while its own
/// writer has not (yet) seen the connection break: long enough for a restart or a failover.
const SERVER_ERROR_PATIENCE: Duration = Duration::from_secs(30);

/// Why a follower could not go on (the stream ends after it).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FollowError {
    /// The log could not be flushed or read.
    #[error("reading session {session_id} from the log after seq {after_seq}: {source}")]
    Store {
        session_id: String,
        after_seq: u64,
        #[source]
        source: StoreError,
    },
}

/// Where the events written after the first read come from.
enum Live {
    /// The session's broadcast bus; on a shared log, a timer to check the session is held,
    /// and the events received but not yet known to be committed (see the module docs).
    Bus {
        bus: Receiver<Envelope>,
        hold_check: Option<Pin<Box<Sleep>>>,
        unconfirmed: Vec<Envelope>,
        /// A wait for the commit of the last of `unconfirmed` (by its seq).
        confirming: Option<(u64, BoxFuture<'static, Result<(), StoreError>>)>,
    },
    /// The log, read again every interval.
    Poll {
        every: Duration,
        timer: Option<Pin<Box<Sleep>>>,
    },
}

/// Whether the follower still waits for live events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// It does.
    No,
    /// It stopped waiting: one more read of the log, then what is left.
    ReadLast,
    /// The last read is done (or under way): it ends once the backlog is empty.
    Draining,
}

/// A stream of a session's events after a seq: gap-free, exactly once, in seq order (see the
/// module docs for the one exception). Items are `Err` only when the log cannot be read; the
/// stream ends after one.
pub struct Follow {
    log: Arc<dyn EventLog>,
    session_id: String,
    live: Live,
    /// Where the follower started.
    first_after: u64,
    /// The highest seq yielded (or the start).
    last_seq: u64,
    /// Events read or received, not yet yielded (seq order).
    backlog: VecDeque<Envelope>,
    /// A read of the log under way.
    reading: Option<BoxFuture<'static, Result<Vec<Envelope>, FollowError>>>,
    /// The first read of the log was started.
    started: bool,
    end: End,
    done: bool,
}

impl Follow {
    /// Follows `session_id` after `after_seq` with `bus` as the live feed: `bus` must receive
    /// every event of the session appended from before the caller's `after_seq` was read (it
    /// was subscribed first). [`Session::follow`](super::Session::follow) is this with the
    /// session's own bus.
    pub fn with_bus(
        log: Arc<dyn EventLog>,
        session_id: impl Into<String>,
        bus: Receiver<Envelope>,
        after_seq: u64,
    ) -> Follow {
        Follow::new(
            log,
            session_id.into(),
            Live::Bus {
                bus,
                hold_check: None,
                unconfirmed: Vec::new(),
                confirming: None,
            },
            after_seq,
        )
    }

    /// Follows `session_id` after `after_seq` from the log alone, read again every `every`: for
    /// a session that is not open in this process (another node writes it). The stream does
    /// not end by itself; [`Follow::close`] ends it after what the log then holds.
    pub fn polling(
        log: Arc<dyn EventLog>,
        session_id: impl Into<String>,
        every: Duration,
        after_seq: u64,
    ) -> Follow {
        Follow::new(
            log,
            session_id.into(),
            Live::Poll { every, timer: None },
            after_seq,
        )
    }

    fn new(log: Arc<dyn EventLog>, session_id: String, live: Live, after_seq: u64) -> Follow {
        Follow {
            log,
            session_id,
            live,
            first_after: after_seq,
            last_seq: after_seq,
            backlog: VecDeque::new(),
            reading: None,
            started: false,
            end: End::No,
            done: false,
        }
    }

    /// The session followed.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The highest seq yielded so far (the start before the first event).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Stops waiting for live events: the stream yields what the log holds now (after a
    /// flush) and what it had already received, then ends. For a caller that learned the
    /// session will write nothing more it cares about.
    pub fn close(&mut self) {
        if self.end == End::No {
            self.end = End::ReadLast;
        }
    }

    /// Starts reading the log after the last seq yielded.
    fn read(&mut self) {
        let log = Arc::clone(&self.log);
        let session_id = self.session_id.clone();
        let after_seq = self.last_seq;
        // Only this node's own appends need committing before the read; a session written
        // elsewhere (or taken over) has nothing of this node's to wait for.
        let own = matches!(self.live, Live::Bus { .. });
        self.reading = Some(Box::pin(async move {
            let store = |after_seq: u64| {
                let session_id = session_id.clone();
                move |source| FollowError::Store {
                    session_id,
                    after_seq,
                    source,
                }
            };
            if own {
                match log.flush(&session_id).await {
                    // No longer this node's to write: the log holds what there is.
                    Ok(()) | Err(StoreError::Fenced { .. }) => {}
                    Err(e) => return Err(store(after_seq)(e)),
                }
            }
            let mut after = after_seq;
            let mut events = Vec::new();
            let mut failing_since: Option<tokio::time::Instant> = None;
            loop {
                let page = match read_page(&log, &session_id, after).await {
                    Ok(page) => page,
                    Err(e) => {
                        // The database may be away for a restart: wait for it rather than end
                        // the stream, as long as the log says it is connecting again. A read
                        // can fail before the writer has noticed the loss, so a database
                        // server's error is also waited out, for a bounded time.
                        let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                        tokio::time::sleep(UNAVAILABLE_RETRY).await;
                        let server_error = matches!(e, StoreError::Server { .. });
                        if log.unavailable().is_some()
                            || (server_error && since.elapsed() < SERVER_ERROR_PATIENCE)
                        {
                            tracing::debug!(session = %session_id, "log unavailable: {e}");
                            continue;
                        }
                        return Err(store(after)(e));
                    }
                };
                failing_since = None;
                let full = page.len() == PAGE;
                if let Some(last) = page.last() {
                    after = last.seq;
                }
                events.extend(page);
                if !full {
                    return Ok(events);
                }
            }
        }));
    }

    /// Merges what a read returned with what was received, in seq order, once each.
    fn merge(&mut self, read: Vec<Envelope>) {
        let mut merged: Vec<Envelope> = self.backlog.drain(..).collect();
        merged.extend(read);
        merged.sort_by_key(|e| e.seq);
        merged.dedup_by_key(|e| e.seq);
        self.backlog = merged.into();
    }

    /// The session was taken over by another node: go on from the log alone, from the start.
    fn taken_over(&mut self) {
        tracing::debug!(session = %self.session_id, "taken over elsewhere: following the log");
        self.live = Live::Poll {
            every: TAKEN_OVER_POLL,
            timer: None,
        };
        self.last_seq = self.first_after;
        self.backlog.clear();
        self.started = false;
    }

    /// On a shared log, waits for the commit of the bus events received: those the log holds
    /// move to the backlog; a session no longer held here is followed from the log. `Ready`
    /// when something changed.
    fn poll_confirm(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Live::Bus {
            unconfirmed,
            confirming,
            ..
        } = &mut self.live
        else {
            return Poll::Pending;
        };
        if confirming.is_none() {
            let Some(last) = unconfirmed.last().map(|e| e.seq) else {
                return Poll::Pending;
            };
            let log = Arc::clone(&self.log);
            let session_id = self.session_id.clone();
            *confirming = Some((
                last,
                Box::pin(async move { log.committed(&session_id, last).await }),
            ));
        }
        let Some((upto, waiting)) = confirming.as_mut() else {
            return Poll::Pending;
        };
        let upto = *upto;
        let outcome = match waiting.poll_unpin(cx) {
            Poll::Ready(outcome) => outcome,
            Poll::Pending => return Poll::Pending,
        };
        *confirming = None;
        match outcome {
            Ok(()) => {
                let held = std::mem::take(unconfirmed);
                let (now, later): (Vec<Envelope>, Vec<Envelope>) =
                    held.into_iter().partition(|e| e.seq <= upto);
                *unconfirmed = later;
                let last_seq = self.last_seq;
                self.backlog
                    .extend(now.into_iter().filter(|e| e.seq > last_seq));
            }
            Err(error) => {
                tracing::debug!(session = %self.session_id, %error, "not committed here");
                self.taken_over();
            }
        }
        Poll::Ready(())
    }

    /// Waits on the live feed; `Ready` when there is something to look at again.
    fn poll_live(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let shared = self.log.is_shared();
        let woke = match &mut self.live {
            Live::Bus {
                bus, hold_check, ..
            } => {
                match Pin::new(&mut *bus).poll_recv(cx) {
                    Poll::Ready(Some(Ok(env))) => Woke::Event(Box::new(env)),
                    Poll::Ready(Some(Err(RecvError::Overflowed(_)))) => Woke::Overflowed,
                    Poll::Ready(None | Some(Err(RecvError::Closed))) => Woke::Closed,
                    // Only a shared log can take the session away from this node.
                    Poll::Pending if !self.log.is_shared() => return Poll::Pending,
                    Poll::Pending => {
                        let timer = hold_check
                            .get_or_insert_with(|| Box::pin(tokio::time::sleep(HOLD_CHECK)));
                        if timer.as_mut().poll(cx).is_pending() {
                            return Poll::Pending;
                        }
                        *hold_check = None;
                        Woke::HoldCheck
                    }
                }
            }
            Live::Poll { every, timer } => {
                let every = *every;
                let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(every)));
                if timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                timer.as_mut().reset(tokio::time::Instant::now() + every);
                Woke::PollDue
            }
        };
        match woke {
            Woke::Event(env) => {
                let ours = env.session_id == self.session_id && env.seq > self.last_seq;
                if ours && !shared {
                    self.backlog.push_back(*env);
                } else if ours && !self.log.holds(&self.session_id) {
                    self.taken_over();
                } else if let (true, Live::Bus { unconfirmed, .. }) = (ours, &mut self.live) {
                    unconfirmed.push(*env);
                }
            }
            // The oldest events were dropped for this reader: the log has them.
            Woke::Overflowed | Woke::PollDue => self.read(),
            Woke::Closed => self.close(),
            Woke::HoldCheck => {
                if !self.log.holds(&self.session_id) {
                    self.taken_over();
                }
            }
        }
        Poll::Ready(())
    }
}

/// A page of the session after `after_seq`, through the log's read contract
/// ([`EventLog::read_log`]), on a blocking thread (its reads are synchronous).
async fn read_page(
    log: &Arc<dyn EventLog>,
    session_id: &str,
    after_seq: u64,
) -> Result<Vec<Envelope>, StoreError> {
    let (log, session) = (Arc::clone(log), session_id.to_owned());
    let read = move || log.read_log()?.session_page(&session, after_seq, PAGE);
    match tokio::task::spawn_blocking(read).await {
        Ok(read) => read,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(StoreError::Server {
            context: format!("reading session {session_id} after seq {after_seq}"),
            message: format!("the read was cancelled: {e}"),
        }),
    }
}

/// What the live feed brought.
enum Woke {
    Event(Box<Envelope>),
    Overflowed,
    /// The bus is gone (the session closed): the log holds all there will be.
    Closed,
    /// Time to check the session is still held here.
    HoldCheck,
    /// Time to read the log again.
    PollDue,
}

impl Stream for Follow {
    type Item = Result<Envelope, FollowError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if let Some(reading) = this.reading.as_mut() {
                let read = match reading.poll_unpin(cx) {
                    Poll::Ready(read) => read,
                    Poll::Pending => return Poll::Pending,
                };
                this.reading = None;
                match read {
                    Ok(events) => this.merge(events),
                    Err(error) => {
                        this.done = true;
                        return Poll::Ready(Some(Err(error)));
                    }
                }
            }
            if this.end == End::ReadLast {
                this.end = End::Draining;
                this.read();
                continue;
            }
            while let Some(env) = this.backlog.pop_front() {
                if env.seq > this.last_seq {
                    this.last_seq = env.seq;
                    return Poll::Ready(Some(Ok(env)));
                }
            }
            if this.end == End::Draining {
                this.done = true;
                continue;
            }
            if !this.started {
                this.started = true;
                this.read();
                continue;
            }
            if this.poll_confirm(cx).is_ready() {
                continue;
            }
            if this.poll_live(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}
