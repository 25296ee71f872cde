//! The PostgreSQL log of one node: sessions taken by lease (`lease`), appends fenced by the
//! lease's epoch, group commit on one connection made again when the database goes away
//! (`writer`); what they share is in `state`.
//!
//! A handle ([`PgLog`]) appends to the queue and waits for commits; it never talks to the
//! database on a turn's path but to take a session (its lease and its history) and give it
//! back. Each part runs on connections of its own: the writer's, the reads', the leases' (a few,
//! each session always on the same one), the renewals'.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use mull_core::{Envelope, Event};
use mull_store::timestamp;
use mull_store::{Appended, EventLog, LogFuture, ReadLog, SessionState, StoreError};
use tokio::sync::{watch, Notify};

use crate::error::{connect, parse, server_error};
use crate::read::{Lock, OpenedLease, Reads};
use crate::reader::PgReader;
use crate::schema;

mod lease;
mod state;
mod writer;

#[cfg(test)]
mod tests;

use state::{lock, Failure, Held, Inner, Progress, Row, State, LEASE_CONNECTIONS};
pub use state::{PgOptions, PgTraffic};

/// The log on a PostgreSQL database, as one node writes it. A cheap handle: clones share one
/// writer task and its connection.
#[derive(Clone)]
pub struct PgLog {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PgLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLog")
            .field("database", &self.inner.target.to_string())
            .field("node", &self.inner.options.node)
            .finish_non_exhaustive()
    }
}

/// How often a wait for a commit looks whether its session's lease ran out meanwhile.
const FENCE_CHECK: Duration = Duration::from_millis(100);

impl PgLog {
    /// Connects to the database at `url`, checks it is a mull database (or empty) and migrates
    /// it, and starts the writer task and lease renewal on the current runtime.
    pub async fn connect(url: &str, options: PgOptions) -> Result<PgLog, StoreError> {
        let (mut config, target) = parse(url)?;
        // Named, so an operator sees which node's writer a connection is.
        config.application_name(format!("mull writer {}", options.node));
        let writer_config = config.clone();
        let mut client = connect(&config, &target).await?;
        schema::migrate(&mut client, &target).await?;
        let commit_batch =
            client
                .prepare(&writer::commit_batch_sql())
                .await
                .map_err(server_error(format!(
                    "{target}: preparing the writer's statement"
                )))?;
        config.application_name(format!("mull reads {}", options.node));
        let reads = Reads::connect(&config, &target).await?;
        let mut leases = Vec::with_capacity(LEASE_CONNECTIONS);
        for i in 0..LEASE_CONNECTIONS {
            config.application_name(format!("mull leases {} {i}", options.node));
            leases.push(Reads::connect(&config, &target).await?);
        }
        config.application_name(format!("mull renewals {}", options.node));
        let renewals = Reads::connect(&config, &target).await?;
        // Never longer than a renewal period: a renewal that gives up is retried at the next.
        for conn in leases.iter().chain([&renewals]) {
            conn.limit_lock_waits((options.lease_ttl / 3).min(lease::LEASE_LOCK_WAIT))
                .await?;
        }
        let (progress, _) = watch::channel(Progress::default());
        let inner = Arc::new(Inner {
            target,
            config: writer_config,
            options: PgOptions {
                batch_max_events: options.batch_max_events.max(1),
                ..options
            },
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            progress,
            commits: AtomicU64::new(0),
            reads,
            leases,
            renewals,
            read_log: Mutex::new(None),
        });
        tokio::spawn(writer::run_writer(
            Arc::downgrade(&inner),
            client,
            commit_batch,
        ));
        tokio::spawn(lease::run_renewal(Arc::downgrade(&inner)));
        Ok(PgLog { inner })
    }

    /// The database, as errors name it.
    pub fn database(&self) -> String {
        self.inner.target.to_string()
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.inner.options.node
    }

    /// The lease epoch this node writes `session_id` under, if it holds it (and can still write).
    pub fn epoch(&self, session_id: &str) -> Option<i64> {
        let mut state = lock(&self.inner.state);
        if state.failure.is_some() {
            return None;
        }
        let held = state.sessions.get_mut(session_id)?;
        held.is_live().then_some(held.epoch)
    }

    /// What this node has asked of its database so far (see [`PgTraffic`]).
    pub fn traffic(&self) -> PgTraffic {
        let (opening, opening_prepared) = self
            .inner
            .leases
            .iter()
            .map(Reads::round_trips)
            .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
        PgTraffic {
            commits: self.inner.commits.load(Ordering::Relaxed),
            opening,
            opening_prepared,
        }
    }

    /// The reads of this log (the whole log, any session), on its read connection.
    pub fn reads(&self) -> &Reads {
        &self.inner.reads
    }

    /// Commits everything appended so far, of every session.
    pub async fn flush_all(&self) -> Result<(), StoreError> {
        let target = lock(&self.inner.state).appended;
        self.wait_committed(target, None).await
    }

    /// Resolves once the writer has stopped for good (its connection lost, a commit refused),
    /// with the error every later append gets: a server stops serving then, since nothing it
    /// would answer could be written.
    pub async fn stopped(&self) -> StoreError {
        let mut rx = self.inner.progress.subscribe();
        let _ = rx.wait_for(|p| p.stopped).await;
        let state = lock(&self.inner.state);
        state
            .failure
            .as_ref()
            .map_or(StoreError::WriterGone, Failure::error)
    }

    /// Waits until every row up to `ticket` is committed. Waiting for a session's rows, it
    /// gives up as soon as the session is no longer this node's (its lease may run out while
    /// the database is unreachable and nothing is committed).
    async fn wait_committed(
        &self,
        ticket: u64,
        session_id: Option<&str>,
    ) -> Result<(), StoreError> {
        self.wait_until(session_id, true, |state, progress| {
            let _ = state;
            progress.committed >= ticket
        })
        .await
    }

    /// Waits until `done` holds (asked after each commit, and every [`FENCE_CHECK`]), urging
    /// the writer to commit meanwhile when `urge`; fails with the writer's failure, or — for
    /// `session_id` — the session's fence.
    async fn wait_until(
        &self,
        session_id: Option<&str>,
        urge: bool,
        done: impl Fn(&State, &Progress) -> bool,
    ) -> Result<(), StoreError> {
        let mut rx = self.inner.progress.subscribe();
        loop {
            let progress = *rx.borrow_and_update();
            {
                let mut state = lock(&self.inner.state);
                if let Some(failure) = &state.failure {
                    return Err(failure.error());
                }
                if let Some(session_id) = session_id {
                    if let Some(held) = state.sessions.get_mut(session_id) {
                        if !held.is_live() {
                            return Err(held
                                .fence_error(session_id)
                                .unwrap_or(StoreError::WriterGone));
                        }
                    }
                }
                if done(&state, &progress) {
                    return Ok(());
                }
                if progress.stopped {
                    return Err(StoreError::WriterGone);
                }
                if urge {
                    state.urgent = true;
                }
            }
            if urge {
                self.inner.wake.notify_one();
            }
            if let Ok(Err(_)) = tokio::time::timeout(FENCE_CHECK, rx.changed()).await {
                return Err(StoreError::WriterGone);
            }
        }
    }

    /// Takes the session's lease and reads its first page of events, in one round trip (see
    /// `Reads::open_lease`); or says who holds the lease.
    async fn take_lease(&self, session_id: &str) -> Result<OpenedLease, StoreError> {
        let inner = &self.inner;
        inner
            .leases_of(session_id)
            .open_lease(session_id, &inner.options.node, inner.options.lease_ttl)
            .await
    }

    /// Waits until the session's events up to `seq` are in the database (see
    /// [`EventLog::durable`] and [`EventLog::committed`]).
    async fn wait_for_seq(&self, session_id: &str, seq: u64, urge: bool) -> Result<(), StoreError> {
        self.wait_until(Some(session_id), urge, |state, _| {
            state
                .sessions
                .get(session_id)
                .is_none_or(|h| h.committed_seq >= seq)
        })
        .await?;
        match self.fence(session_id) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn fence(&self, session_id: &str) -> Option<StoreError> {
        let state = lock(&self.inner.state);
        state.sessions.get(session_id)?.fence_error(session_id)
    }
}

impl EventLog for PgLog {
    fn read_log(&self) -> Result<Arc<dyn ReadLog + Send + Sync>, StoreError> {
        // Held while a first reader connects: the followers waiting meanwhile want that one.
        let mut cached = self
            .inner
            .read_log
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(reader) = cached.as_ref() {
            return Ok(Arc::clone(reader) as Arc<dyn ReadLog + Send + Sync>);
        }
        let mut config = self.inner.config.clone();
        config.application_name(format!("mull follows {}", self.inner.options.node));
        let reader = Arc::new(PgReader::open_with(config, self.inner.target.clone())?);
        *cached = Some(Arc::clone(&reader));
        Ok(reader)
    }

    fn open_session<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, SessionState> {
        Box::pin(async move {
            // Rows still queued under an earlier lease of this session go first. Only its
            // own: waiting for every session's queue would force a commit per open and undo
            // group commit across sessions.
            let queued = lock(&self.inner.state)
                .sessions
                .get(session_id)
                .map_or(0, |h| h.last_ticket);
            self.wait_committed(queued, None).await?;
            let sent = Instant::now();
            let OpenedLease { epoch, first_page } = self.take_lease(session_id).await?;
            // Further pages (a long history, a fork's origins) on the same connection.
            let (state, last_seq) = self
                .inner
                .leases_of(session_id)
                .fold_session(session_id, first_page)
                .await?;
            let ttl = self.inner.options.lease_ttl;
            let mut valid_until = lease::valid_until(sent, ttl);
            if sent.elapsed() > ttl / 3 {
                // A slow load (a busy database) ate into the lease before renewal knew of it:
                // renew it now, so it does not expire before its first append. On the lease
                // connection, as it was taken: the renewal task's connection stays its own, so
                // the renewal of every held lease never queues behind many chats opening.
                let held = [(session_id.to_owned(), epoch)];
                let node = &self.inner.options.node;
                let renewed = Instant::now();
                let renewal = self
                    .inner
                    .leases_of(session_id)
                    .renew_leases(&held, node, ttl, Lock::Wait)
                    .await?;
                if let Some((_, (epoch, current, owner))) = renewal.lost.into_iter().next() {
                    return Err(StoreError::Fenced {
                        session_id: session_id.to_owned(),
                        epoch,
                        current,
                        owner,
                    });
                }
                if renewal.busy.is_empty() {
                    valid_until = lease::valid_until(renewed, ttl);
                }
            }
            lock(&self.inner.state).sessions.insert(
                session_id.to_owned(),
                Held {
                    epoch,
                    next_seq: last_seq + 1,
                    last_ticket: 0,
                    committed_seq: last_seq,
                    fenced: None,
                    valid_until,
                },
            );
            Ok(state)
        })
    }

    fn append_event(
        &self,
        session_id: &str,
        turn_id: Option<&str>,
        at: DateTime<Utc>,
        event: Event,
    ) -> Result<Appended, StoreError> {
        let at = timestamp::truncate(at);
        let payload = event.encode();
        let mut guard = lock(&self.inner.state);
        let state = &mut *guard;
        if let Some(failure) = &state.failure {
            return Err(failure.error());
        }
        let Some(held) = state.sessions.get_mut(session_id) else {
            return Err(StoreError::NotOpen {
                session_id: session_id.to_owned(),
            });
        };
        if !held.is_live() {
            return Err(held
                .fence_error(session_id)
                .unwrap_or(StoreError::WriterGone));
        }
        let seq = held.next_seq;
        held.next_seq += 1;
        state.appended += 1;
        held.last_ticket = state.appended;
        let first = state.rows.is_empty();
        state.rows.push(Row {
            ticket: state.appended,
            session_id: Arc::from(session_id),
            seq: seq as i64,
            turn_id: turn_id.map(str::to_owned),
            at: timestamp::to_stored(at),
            kind: event.kind().to_owned(),
            payload,
            epoch: held.epoch,
        });
        let full = state.rows.len() >= self.inner.options.batch_max_events;
        if first {
            state.first_at = Some(Instant::now());
        }
        let spent = state.spent.pop();
        drop(guard);
        // Freed here, on this thread, after the lock is let go (see `State::spent`).
        drop(spent);
        if first || full {
            self.inner.wake.notify_one();
        }
        Ok(Appended { seq, at, event })
    }

    fn flush<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, ()> {
        Box::pin(async move {
            let ticket = {
                let state = lock(&self.inner.state);
                state.sessions.get(session_id).map_or(0, |h| h.last_ticket)
            };
            self.wait_committed(ticket, Some(session_id)).await?;
            match self.fence(session_id) {
                Some(e) => Err(e),
                None => Ok(()),
            }
        })
    }

    /// Resolves once the session's events up to `seq` are in the database, or with the fence
    /// that keeps them out. Commits at once rather than when the batch is due.
    fn durable<'a>(&'a self, session_id: &'a str, seq: u64) -> LogFuture<'a, ()> {
        Box::pin(self.wait_for_seq(session_id, seq, true))
    }

    /// As [`EventLog::durable`], leaving the commit to the batch's own schedule.
    fn committed<'a>(&'a self, session_id: &'a str, seq: u64) -> LogFuture<'a, ()> {
        Box::pin(self.wait_for_seq(session_id, seq, false))
    }

    fn turn_events<'a>(
        &'a self,
        session_id: &'a str,
        turn_id: &'a str,
    ) -> LogFuture<'a, Vec<Envelope>> {
        Box::pin(self.inner.reads.turn_events(session_id, turn_id))
    }

    fn session_page<'a>(
        &'a self,
        session_id: &'a str,
        after_seq: u64,
        limit: usize,
    ) -> LogFuture<'a, Vec<Envelope>> {
        Box::pin(self.inner.reads.session_page(session_id, after_seq, limit))
    }

    /// Gives back the lease this handle holds *now*: the epoch is taken when this is called,
    /// so a release still under way never touches a lease the node took again meanwhile.
    fn release_session(&self, session_id: &str) -> LogFuture<'static, ()> {
        let held = lock(&self.inner.state)
            .sessions
            .get(session_id)
            .map(|h| (h.epoch, h.last_ticket));
        let this = self.clone();
        let session_id = session_id.to_owned();
        Box::pin(async move {
            let (this, session_id) = (&this, session_id.as_str());
            let Some((epoch, ticket)) = held else {
                return Ok(());
            };
            this.wait_committed(ticket, None).await?;
            let live = {
                let mut state = lock(&this.inner.state);
                match state.sessions.get(session_id) {
                    // A fenced session stays known as fenced (a turn still running there gets
                    // the fence, not "not open"), until the session is opened again.
                    Some(h) if h.epoch == epoch && h.fenced.is_some() => false,
                    Some(h) if h.epoch == epoch => {
                        state.sessions.remove(session_id);
                        true
                    }
                    // Taken again under a new epoch (or released already): not ours to give.
                    _ => return Ok(()),
                }
            };
            if live {
                this.inner
                    .leases_of(session_id)
                    .release_lease(session_id, epoch)
                    .await
            } else {
                Ok(())
            }
        })
    }

    fn is_shared(&self) -> bool {
        true
    }

    /// False once the session was found taken over, and while its lease is past its expiry by
    /// this node's own clock (see `lease`, invariant 5): a follower then stops passing on this
    /// node's output and follows the log.
    fn holds(&self, session_id: &str) -> bool {
        let state = lock(&self.inner.state);
        state.failure.is_none()
            && state
                .sessions
                .get(session_id)
                .is_some_and(|h| h.is_valid(Instant::now()))
    }

    fn unavailable(&self) -> Option<String> {
        let state = lock(&self.inner.state);
        if let Some(failure) = &state.failure {
            return Some(failure.error().to_string());
        }
        state.down.as_ref().map(|why| {
            format!(
                "{}: the database cannot be reached ({why}); connecting again",
                self.inner.target
            )
        })
    }

    fn holder<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, Option<String>> {
        Box::pin(
            self.inner
                .reads
                .holder(session_id, &self.inner.options.node),
        )
    }

    fn abandoned(&self, limit: usize) -> LogFuture<'_, Vec<String>> {
        Box::pin(self.inner.reads.abandoned(limit))
    }

    fn request_cancel<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, bool> {
        Box::pin(
            self.inner
                .reads
                .request_cancel(session_id, &self.inner.options.node),
        )
    }

    /// Not ready while the writer's connection is down and being made again, nor once the
    /// writer stopped (a commit refused).
    fn health(&self) -> Result<(), StoreError> {
        let state = lock(&self.inner.state);
        if let Some(failure) = &state.failure {
            return Err(failure.error());
        }
        if let Some(why) = &state.down {
            return Err(StoreError::Server {
                context: format!(
                    "{}: the database cannot be reached; connecting again",
                    self.inner.target
                ),
                message: why.clone(),
            });
        }
        drop(state);
        if self.inner.progress.borrow().stopped {
            return Err(StoreError::WriterGone);
        }
        Ok(())
    }

    /// One statement, and none at all while this node holds no session.
    fn take_cancel_requests(&self) -> LogFuture<'_, Vec<String>> {
        let held: Vec<String> = lock(&self.inner.state)
            .sessions
            .iter()
            .filter(|(_, h)| h.is_live())
            .map(|(s, _)| s.clone())
            .collect();
        Box::pin(async move {
            if held.is_empty() {
                return Ok(Vec::new());
            }
            let held: Vec<&str> = held.iter().map(String::as_str).collect();
            self.inner.reads.take_cancels(&held).await
        })
    }
}
