//! The PostgreSQL log of one node: sessions taken by lease, appends fenced by the lease's epoch,
//! group commit on one connection.
//!
//! # One writer per session
//! [`PgLog::open_session`] takes the session's lease row (free, expired, or this node's own):
//! the epoch goes up by one, and every event this node appends for the session is stamped
//! with that epoch. A batch's statement first locks the lease rows of its sessions
//! (`FOR SHARE`, so no take-over can commit until it does) and inserts only the rows whose
//! epoch is still the lease's: a node that was paused or cut off while another took the
//! session over has its late writes refused in the very transaction that tried them, and the
//! session is fenced here ([`StoreError::Fenced`] from then on). While held, a lease is renewed
//! every third of its time to live; a node that stops renewing loses it after the time to live.
//!
//! # Group commit
//! Appends assign the session's next seq at once and queue the row; a writer task commits the
//! queue in batches (up to `batch_max_events` rows, or `batch_max_delay` after the first, or at
//! once for a barrier): one statement per batch locks the lease rows and inserts every row with a
//! multi-row `INSERT … SELECT FROM unnest(…)` — one round trip, one implicit transaction, which
//! a node paused halfway through sending can never leave open. No `NOTIFY` is sent: a transaction
//! that notifies takes a database-wide lock at commit, which would serialize every commit of
//! every node; readers on other nodes poll `seq > N` instead.
//!
//! # A database that goes away
//! A restart or failover closes the writer's connection. The writer then connects again with
//! capped, jittered exponential backoff ([`backon`]) for as long as it takes, and the log
//! reports itself unavailable meanwhile ([`EventLog::unavailable`]); appends keep queueing. The
//! batch whose commit the loss interrupted is in doubt: once connected, the writer looks which
//! of its rows the database holds (a batch is one statement, so all or none of a session's rows)
//! and commits the rest under the same epoch check, so nothing is lost or written twice. A lease
//! that expired meanwhile is taken back by the next renewal if no other node took it (its epoch
//! is still this node's); one another node took over fences the session here, at the first
//! commit or renewal that finds it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};

use chrono::{DateTime, Utc};
use mull_core::{Envelope, Event, EVENT_VERSION};
use mull_store::timestamp;
use mull_store::{Appended, EventLog, LogFuture, SessionState, StoreError};
use tokio::sync::{watch, Notify};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, Statement};

use crate::error::{
    conflict_key, connect, connect_driver, describe, is_conflict, is_connection_loss, parse,
    server_error, Target,
};
use crate::read::Reads;
use crate::schema;

/// How a node writes: its name in lease rows, how long a lease lasts, how batches are cut.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// This node's name in the lease rows (unique per running node).
    pub node: String,
    /// How long a lease lasts without renewal: the longest a session of a dead node waits
    /// before another node may take it.
    pub lease_ttl: Duration,
    /// Commit once a batch holds this many events.
    pub batch_max_events: usize,
    /// Commit once the batch's first event has waited this long.
    pub batch_max_delay: Duration,
}

impl PgOptions {
    /// Defaults for a node called `node`: 10 s leases, batches of 512 events or 5 ms.
    pub fn new(node: impl Into<String>) -> PgOptions {
        PgOptions {
            node: node.into(),
            lease_ttl: Duration::from_secs(10),
            batch_max_events: 512,
            batch_max_delay: Duration::from_millis(5),
        }
    }
}

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

struct Inner {
    target: Target,
    /// How the writer connects again after a loss.
    config: Config,
    options: PgOptions,
    state: Mutex<State>,
    /// Wakes the writer task.
    wake: Notify,
    /// What the writer task has committed (or that it stopped).
    progress: watch::Sender<Progress>,
    /// Reads, on a connection of their own.
    reads: Reads,
    /// Leases taken and given back, on another.
    leases: Reads,
    /// Renewals, on a third: a renewal must never wait behind a node's reads or behind the
    /// leases of many chats opening at once, or a busy node would lose the leases it holds
    /// while working (and other nodes would take over chats that are running fine).
    renewals: Reads,
}

#[derive(Debug, Clone, Copy, Default)]
struct Progress {
    /// Every row with a ticket up to this one is committed (or refused by its epoch).
    committed: u64,
    stopped: bool,
}

#[derive(Default)]
struct State {
    /// The ticket of the last row appended.
    appended: u64,
    rows: Vec<Row>,
    first_at: Option<Instant>,
    /// A barrier waits: commit without waiting for the batch to fill.
    urgent: bool,
    sessions: HashMap<String, Held>,
    failure: Option<Failure>,
    /// Why the writer cannot commit now (its connection was lost and is being made again).
    down: Option<String>,
}

/// A session this node writes.
struct Held {
    epoch: i64,
    next_seq: u64,
    /// The ticket of the session's last appended row.
    last_ticket: u64,
    /// The session's last seq in the database (committed by this handle or read at its open).
    committed_seq: u64,
    fenced: Option<Fence>,
}

impl Held {
    /// Whether the session is still this node's (not fenced).
    fn is_live(&self) -> bool {
        self.fenced.is_none()
    }

    fn fence_error(&self, session_id: &str) -> Option<StoreError> {
        self.fenced.as_ref().map(|f| f.error(session_id))
    }
}

/// Why a session is no longer written here.
#[derive(Clone)]
enum Fence {
    /// Another node took it over (a newer epoch).
    TakenOver {
        epoch: i64,
        current: i64,
        owner: String,
    },
}

impl Fence {
    fn error(&self, session_id: &str) -> StoreError {
        match self {
            Fence::TakenOver {
                epoch,
                current,
                owner,
            } => StoreError::Fenced {
                session_id: session_id.to_owned(),
                epoch: *epoch,
                current: *current,
                owner: owner.clone(),
            },
        }
    }
}

#[derive(Clone)]
enum Failure {
    Conflict { session_id: String, seq: u64 },
    Other(String),
}

impl Failure {
    fn error(&self) -> StoreError {
        match self {
            Failure::Conflict { session_id, seq } => StoreError::Conflict {
                session_id: session_id.clone(),
                seq: *seq,
            },
            Failure::Other(message) => StoreError::WriterFailed {
                message: message.clone(),
            },
        }
    }
}

#[derive(Clone)]
struct Row {
    ticket: u64,
    session_id: Arc<str>,
    seq: i64,
    turn_id: Option<String>,
    at: i64,
    kind: String,
    payload: String,
    epoch: i64,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The longest a lease statement waits for a row lock (see `Reads::limit_lock_waits`).
const LEASE_LOCK_WAIT: Duration = Duration::from_secs(1);

/// How often a wait for a commit looks whether its session's lease ran out meanwhile.
const FENCE_CHECK: Duration = Duration::from_millis(100);

/// The first and the longest pause between attempts to connect again after a loss.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// Commits one batch in one statement (so in one implicit transaction): locks the batch's
/// lease rows in `session_id` order — the order lease renewal takes them in too, so a batch and
/// a renewal of the same node never wait for each other in a circle — inserts the rows whose
/// epoch is still their session's lease epoch, brings their sessions' rows of `mull_sessions`
/// up to date (the same statement: the session list never lags the events), and returns the
/// leases as locked.
///
/// One statement, not `BEGIN` … `COMMIT`: the server runs it only once the whole request has
/// arrived and commits before answering, so a node paused or cut off halfway through sending
/// never leaves a transaction open holding lease rows that another node must take over.
fn commit_batch_sql() -> String {
    format!(
        "WITH locked AS (
             SELECT session_id, epoch, owner FROM mull_leases
             WHERE session_id = ANY($9) ORDER BY session_id FOR SHARE
         ), inserted AS (
             INSERT INTO mull_events (session_id, seq, turn_id, at, v, kind, payload, epoch)
             SELECT u.session_id, u.seq, u.turn_id, u.at, $5, u.kind, u.payload, u.epoch
             FROM unnest($1::text[], $2::int8[], $3::text[], $4::int8[], $6::text[], $7::text[],
                         $8::int8[])
                  AS u(session_id, seq, turn_id, at, kind, payload, epoch)
             JOIN locked l ON l.session_id = u.session_id AND l.epoch = u.epoch
             RETURNING session_id, seq, at
         ), touched AS ({touch})
         SELECT session_id, epoch, owner FROM locked",
        touch = schema::touch_sessions("inserted")
    )
}

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
        let commit_batch = client
            .prepare(&commit_batch_sql())
            .await
            .map_err(server_error(format!(
                "{target}: preparing the writer's statement"
            )))?;
        config.application_name(format!("mull reads {}", options.node));
        let reads = Reads::connect(&config, &target).await?;
        config.application_name(format!("mull leases {}", options.node));
        let leases = Reads::connect(&config, &target).await?;
        config.application_name(format!("mull renewals {}", options.node));
        let renewals = Reads::connect(&config, &target).await?;
        // Never longer than a renewal period: a renewal that gives up is retried at the next.
        for conn in [&leases, &renewals] {
            conn.limit_lock_waits((options.lease_ttl / 3).min(LEASE_LOCK_WAIT))
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
            reads,
            leases,
            renewals,
        });
        tokio::spawn(run_writer(Arc::downgrade(&inner), client, commit_batch));
        tokio::spawn(run_renewal(Arc::downgrade(&inner)));
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

    /// Takes the session's lease (see the module docs): `Ok(epoch)`, or who holds it.
    async fn take_lease(&self, session_id: &str) -> Result<i64, StoreError> {
        let inner = &self.inner;
        inner
            .leases
            .take_lease(session_id, &inner.options.node, inner.options.lease_ttl)
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
            let epoch = self.take_lease(session_id).await?;
            let (state, last_seq) = self.inner.reads.load_session(session_id).await?;
            let ttl = self.inner.options.lease_ttl;
            if sent.elapsed() > ttl / 3 {
                // A slow load (a busy database) ate into the lease before renewal knew of it:
                // renew it now, so it does not expire before its first append.
                let held = [(session_id.to_owned(), epoch)];
                let node = &self.inner.options.node;
                let lost = self.inner.renewals.renew_leases(&held, node, ttl).await?;
                if let Some((_, (epoch, current, owner))) = lost.into_iter().next() {
                    return Err(StoreError::Fenced {
                        session_id: session_id.to_owned(),
                        epoch,
                        current,
                        owner,
                    });
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
        drop(guard);
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
                this.inner.leases.release_lease(session_id, epoch).await
            } else {
                Ok(())
            }
        })
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn holds(&self, session_id: &str) -> bool {
        self.epoch(session_id).is_some()
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

/// The writer task: takes batches off the queue and commits them until every handle is gone or
/// a commit is refused. A lost connection is made again (see the module docs).
async fn run_writer(weak: Weak<Inner>, client: Client, st: Statement) {
    let mut conn = Some((client, st));
    // A batch whose commit was cut off by a lost connection: it may or may not be in.
    let mut in_doubt: Option<Vec<Row>> = None;
    loop {
        let (client, st) = match conn.take() {
            Some(c) if !c.0.is_closed() => c,
            lost => {
                if let (Some(inner), Some(_)) = (weak.upgrade(), &lost) {
                    // Found closed while idle (a commit that fails says so itself).
                    tracing::warn!(
                        "{}: the writer's connection was lost; connecting again",
                        inner.target
                    );
                    mark_down(&inner, Some("the connection to the server was lost".into()));
                }
                match reconnect(&weak).await {
                    Some(c) => c,
                    None => return,
                }
            }
        };
        let Some(strong) = weak.upgrade() else {
            return;
        };
        let doubtful = in_doubt.is_some();
        let batch = match in_doubt.take() {
            Some(batch) => batch,
            None => match next_batch(&strong).await {
                Some(batch) => batch,
                None => {
                    // Only this task's reference is left: every handle is gone and nothing is
                    // queued.
                    drop(strong);
                    if weak.strong_count() == 0 {
                        return;
                    }
                    conn = Some((client, st));
                    continue;
                }
            },
        };
        let committed = if doubtful {
            resolve(&client, &st, &batch).await
        } else {
            commit(&client, &st, &batch).await
        };
        match committed {
            Ok(fences) => {
                lock(&strong.state).down = None;
                settle(&strong, &batch, fences);
                conn = Some((client, st));
            }
            Err(e) if is_connection_loss(&e) => {
                tracing::warn!(
                    "{}: committing {} event(s): {}; connecting again",
                    strong.target,
                    batch.len(),
                    describe(&e)
                );
                mark_down(&strong, Some(describe(&e)));
                in_doubt = Some(batch);
            }
            Err(e) => {
                let failure = if is_conflict(&e) {
                    match conflict_key(&e) {
                        Some((session_id, seq)) => Failure::Conflict { session_id, seq },
                        None => Failure::Other(describe(&e)),
                    }
                } else {
                    Failure::Other(format!(
                        "{}: committing {} event(s): {}",
                        strong.target,
                        batch.len(),
                        describe(&e)
                    ))
                };
                tracing::error!("the PostgreSQL log writer stopped");
                lock(&strong.state).failure = Some(failure);
                strong.progress.send_modify(|p| p.stopped = true);
                return;
            }
        }
    }
}

/// Records why the writer cannot commit (keeping the first reason given).
fn mark_down(inner: &Inner, why: Option<String>) {
    let mut state = lock(&inner.state);
    if state.down.is_none() {
        state.down = Some(why.unwrap_or_else(|| "connecting".to_owned()));
    }
}

/// Why connecting again stopped.
enum Gone {
    /// Every handle of the log is gone: nobody needs the writer any more.
    Unused,
    /// The attempt failed; it is tried again after the backoff.
    Failed(String),
}

/// Connects the writer again, with capped, jittered exponential backoff, for as long as it
/// takes; `None` once the log itself is gone.
async fn reconnect(weak: &Weak<Inner>) -> Option<(Client, Statement)> {
    let attempt = || async {
        let (config, target) = match weak.upgrade() {
            Some(inner) => (inner.config.clone(), inner.target.clone()),
            None => return Err(Gone::Unused),
        };
        let client = connect_driver(&config)
            .await
            .map_err(|e| Gone::Failed(format!("{target}: cannot connect: {}", describe(&e))))?;
        let st = client.prepare(&commit_batch_sql()).await.map_err(|e| {
            Gone::Failed(format!(
                "{target}: preparing the writer's statement: {}",
                describe(&e)
            ))
        })?;
        Ok((client, st))
    };
    let backoff = ExponentialBuilder::default()
        .with_min_delay(RECONNECT_MIN)
        .with_max_delay(RECONNECT_MAX)
        .with_jitter()
        .without_max_times();
    let connected = attempt
        .retry(backoff)
        .sleep(tokio::time::sleep)
        .when(|e| matches!(e, Gone::Failed(_)))
        .notify(|e, after| {
            if let Gone::Failed(why) = e {
                tracing::warn!("{why}; trying again in {after:?}");
                if let Some(inner) = weak.upgrade() {
                    lock(&inner.state).down = Some(why.clone());
                }
            }
        })
        .await;
    match connected {
        Ok(c) => {
            if let Some(inner) = weak.upgrade() {
                tracing::info!("{}: the log's writer is connected again", inner.target);
                lock(&inner.state).down = None;
            }
            Some(c)
        }
        Err(_) => None,
    }
}

/// Takes a committed batch's outcome into the state: the fenced sessions, each live session's
/// committed seq, the committed ticket.
fn settle(inner: &Inner, batch: &[Row], fences: Vec<(Arc<str>, Fence)>) {
    let mut state = lock(&inner.state);
    let refused: HashSet<&str> = fences.iter().map(|(s, _)| &**s).collect();
    for row in batch {
        if refused.contains(&*row.session_id) {
            continue;
        }
        if let Some(held) = state.sessions.get_mut(&*row.session_id) {
            if held.epoch == row.epoch {
                held.committed_seq = held.committed_seq.max(row.seq as u64);
            }
        }
    }
    for (session, fence) in fences {
        if let Some(held) = state.sessions.get_mut(&*session) {
            let Fence::TakenOver {
                epoch,
                current,
                owner,
            } = &fence;
            tracing::warn!(
                "session {session}: fenced (epoch {epoch} taken over by {owner} at epoch \
                 {current})"
            );
            held.fenced = Some(fence);
        }
    }
    drop(state);
    let last = batch.last().map_or(0, |r| r.ticket);
    inner
        .progress
        .send_modify(|p| p.committed = p.committed.max(last));
}

/// Commits a batch whose first commit was cut off: the rows the database holds (under their
/// epoch) were committed then; the others are committed now, fenced as any batch is.
async fn resolve(
    client: &Client,
    st: &Statement,
    batch: &[Row],
) -> Result<Vec<(Arc<str>, Fence)>, tokio_postgres::Error> {
    let session_ids: Vec<&str> = batch.iter().map(|r| &*r.session_id).collect();
    let seqs: Vec<i64> = batch.iter().map(|r| r.seq).collect();
    let epochs: Vec<i64> = batch.iter().map(|r| r.epoch).collect();
    let found = client
        .query(
            "SELECT u.session_id, u.seq
             FROM unnest($1::text[], $2::int8[], $3::int8[]) AS u(session_id, seq, epoch)
             JOIN mull_events e
               ON e.session_id = u.session_id AND e.seq = u.seq AND e.epoch = u.epoch",
            &[&session_ids, &seqs, &epochs],
        )
        .await?;
    let found: HashSet<(String, i64)> = found.iter().map(|r| (r.get(0), r.get(1))).collect();
    let rest: Vec<Row> = batch
        .iter()
        .filter(|r| !found.contains(&(r.session_id.to_string(), r.seq)))
        .map(Row::clone)
        .collect();
    tracing::info!(
        "a batch cut off by the lost connection: {} of {} event(s) were committed, the rest \
         are committed now",
        batch.len() - rest.len(),
        batch.len()
    );
    if rest.is_empty() {
        return Ok(Vec::new());
    }
    commit(client, st, &rest).await
}

/// Waits until a batch is due and takes it; `None` when woken with nothing to do (so the task
/// can see whether the log is gone).
async fn next_batch(inner: &Inner) -> Option<Vec<Row>> {
    loop {
        let deadline = {
            let mut state = lock(&inner.state);
            let due = state.first_at.map(|t| t + inner.options.batch_max_delay);
            let now = Instant::now();
            if !state.rows.is_empty()
                && (state.urgent
                    || state.rows.len() >= inner.options.batch_max_events
                    || due.is_some_and(|d| d <= now))
            {
                let take = state.rows.len().min(inner.options.batch_max_events);
                let rest = state.rows.split_off(take);
                let batch = std::mem::replace(&mut state.rows, rest);
                state.first_at = (!state.rows.is_empty()).then_some(now);
                state.urgent = !state.rows.is_empty() && state.urgent;
                return Some(batch);
            }
            state.urgent = false;
            due
        };
        match deadline {
            Some(d) => {
                tokio::select! {
                    () = inner.wake.notified() => {}
                    () = tokio::time::sleep_until(d.into()) => {}
                }
            }
            None => {
                // Woken by an append, a barrier, or a periodic look at whether the log is gone.
                let woke =
                    tokio::time::timeout(Duration::from_millis(200), inner.wake.notified()).await;
                if woke.is_err() {
                    return None;
                }
            }
        }
    }
}

/// Commits one batch ([`commit_batch_sql`]). Returns the sessions whose rows were refused.
async fn commit(
    client: &Client,
    st: &Statement,
    batch: &[Row],
) -> Result<Vec<(Arc<str>, Fence)>, tokio_postgres::Error> {
    let mut sessions: Vec<&str> = batch.iter().map(|r| &*r.session_id).collect();
    sessions.sort_unstable();
    sessions.dedup();
    let session_ids: Vec<&str> = batch.iter().map(|r| &*r.session_id).collect();
    let seqs: Vec<i64> = batch.iter().map(|r| r.seq).collect();
    let turns: Vec<Option<&str>> = batch.iter().map(|r| r.turn_id.as_deref()).collect();
    let ats: Vec<i64> = batch.iter().map(|r| r.at).collect();
    let kinds: Vec<&str> = batch.iter().map(|r| r.kind.as_str()).collect();
    let payloads: Vec<&str> = batch.iter().map(|r| r.payload.as_str()).collect();
    let epochs: Vec<i64> = batch.iter().map(|r| r.epoch).collect();
    let v = EVENT_VERSION as i16;
    let params: [&(dyn ToSql + Sync); 9] = [
        &session_ids,
        &seqs,
        &turns,
        &ats,
        &v,
        &kinds,
        &payloads,
        &epochs,
        &sessions,
    ];
    let leases = client.query(st, &params).await?;
    let current: HashMap<&str, (i64, &str)> = leases
        .iter()
        .map(|r| {
            (
                r.get::<_, &str>(0),
                (r.get::<_, i64>(1), r.get::<_, &str>(2)),
            )
        })
        .collect();
    let mut fences = Vec::new();
    for row in batch {
        if fences
            .iter()
            .any(|(s, _): &(Arc<str>, Fence)| *s == row.session_id)
        {
            continue;
        }
        let (epoch, owner) = current
            .get(&*row.session_id)
            .copied()
            .unwrap_or((-1, "nobody"));
        if epoch != row.epoch {
            fences.push((
                Arc::clone(&row.session_id),
                Fence::TakenOver {
                    epoch: row.epoch,
                    current: epoch,
                    owner: owner.to_owned(),
                },
            ));
        }
    }
    Ok(fences)
}

/// Renews this node's leases every third of their time to live; a lease found taken over
/// fences its session.
async fn run_renewal(inner: Weak<Inner>) {
    let period = match inner.upgrade() {
        Some(i) => i.options.lease_ttl / 3,
        None => return,
    };
    loop {
        tokio::time::sleep(period).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if inner.progress.borrow().stopped {
            // Nothing more can be written here: let the leases lapse, so other nodes take the
            // sessions over after their time to live.
            return;
        }
        let held: Vec<(String, i64)> = lock(&inner.state)
            .sessions
            .iter()
            .filter(|(_, h)| h.is_live())
            .map(|(s, h)| (s.clone(), h.epoch))
            .collect();
        if held.is_empty() {
            continue;
        }
        match inner
            .renewals
            .renew_leases(&held, &inner.options.node, inner.options.lease_ttl)
            .await
        {
            Ok(lost) => {
                let mut state = lock(&inner.state);
                let lost: HashMap<String, (i64, i64, String)> = lost.into_iter().collect();
                for (session, epoch) in &held {
                    let Some(h) = state.sessions.get_mut(session) else {
                        continue;
                    };
                    if h.epoch != *epoch || h.fenced.is_some() {
                        continue;
                    }
                    match lost.get(session) {
                        None => {}
                        Some((held_at, current, owner)) => {
                            tracing::warn!(
                                "session {session}: fenced (its lease at epoch {held_at} was \
                                 taken over by {owner} at epoch {current})"
                            );
                            h.fenced = Some(Fence::TakenOver {
                                epoch: *held_at,
                                current: *current,
                                owner: owner.clone(),
                            });
                        }
                    }
                }
            }
            Err(e) => tracing::warn!("renewing leases: {e}"),
        }
    }
}
